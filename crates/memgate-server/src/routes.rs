//! The router and its handlers. Each handler validates its body, calls the
//! backend once, and records the outcome in the metrics.

use crate::api::*;
use crate::auth::{require_bearer, BearerToken};
use crate::error::{ApiError, CaptureBody, JsonBody};
use crate::mcp::{self, McpEndpoint};
use crate::open_requests::OpenRequests;
use crate::openapi;
use crate::ui;
use axum::extract::{DefaultBodyLimit, MatchedPath, State};
use axum::http::{header, StatusCode};
use axum::middleware::from_fn_with_state;
use axum::response::IntoResponse;
use axum::routing::{get, post};
use axum::{Json, Router};
use memgate_assembly::{AssembledBackend, WorkTracker};
use memgate_core::{
    CaptureReport, CommitOutcome, Continuation, Fact, ForgetReport, ForgetTarget, Handoff,
    ImportReport, MemoryBackend, MemoryError, Recall, RecallRequest, RememberOutcome,
    RememberRequest, SearchQuery,
};
use serde::Serialize;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;
use tokio_util::sync::CancellationToken;
use tower_http::timeout::RequestBodyTimeoutLayer;

/// Everything the handlers share.
#[derive(Clone)]
pub struct ServerState {
    /// The assembled backend: gates, deadlines, drain and metrics included.
    pub backend: Arc<AssembledBackend>,
    pub token: Option<BearerToken>,
    pub max_body_bytes: usize,
    /// How long a client may take to send its request body.
    pub body_read_timeout: Duration,
    /// Requests being served (their handlers have started), for the drain.
    pub requests: Arc<WorkTracker>,
    /// The same requests by method and route, for the shutdown's last line.
    pub open: Arc<OpenRequests>,
    /// Cancelled when the shutdown budget runs out: every request still
    /// being served answers 503 instead of losing its connection.
    pub cut_off: CancellationToken,
    /// `/mcp` (streamable HTTP), when MCP is enabled.
    pub mcp: Option<McpEndpoint>,
    /// Serve the memory browser at `/ui` (`server.ui`).
    pub ui: bool,
    /// Users reach this server over TLS (`server.public_url` is `https://`,
    /// a proxy terminating it): the UI's session cookie gets `Secure`.
    pub public_https: bool,
}

/// Default time a client has to send its whole request body.
pub const DEFAULT_BODY_READ_TIMEOUT: Duration = Duration::from_secs(10);

impl ServerState {
    pub fn new(backend: Arc<AssembledBackend>) -> Self {
        Self {
            backend,
            token: None,
            max_body_bytes: 4 * 1024 * 1024,
            body_read_timeout: DEFAULT_BODY_READ_TIMEOUT,
            requests: WorkTracker::new(),
            open: OpenRequests::new(),
            cut_off: CancellationToken::new(),
            mcp: None,
            ui: true,
            public_https: false,
        }
    }
}

/// The HTTP API. `/health` and `/openapi.json` are open; everything else
/// (including `/mcp`) needs the bearer token when one is configured; the
/// memory browser at `/ui` (unless turned off) asks for it once, at sign-in.
pub fn router(state: ServerState) -> Router {
    let mut guarded = Router::new()
        .route("/v1/recall", post(recall))
        .route("/v1/capture", post(capture))
        .route("/v1/remember", post(remember))
        .route("/v1/search", post(search))
        .route("/v1/facts/list", post(list_facts))
        .route("/v1/facts/get", post(get_fact))
        .route("/v1/facts/revise", post(revise_fact))
        .route("/v1/facts/retire", post(retire_fact))
        .route("/v1/export", post(export))
        .route("/v1/import", post(import))
        .route("/v1/forget/fact", post(forget_fact))
        .route("/v1/forget/thread", post(forget_thread))
        .route("/v1/forget/scope", post(forget_scope))
        .route("/v1/forget/user", post(forget_user))
        .route("/v1/handoff/prepare", post(handoff_prepare))
        .route("/v1/handoff/get", post(handoff_get))
        .route("/v1/handoff/correct", post(handoff_correct))
        .route("/v1/handoff/finalize", post(handoff_finalize))
        .route("/v1/handoff/continue", post(handoff_continue))
        .route("/v1/handoff/acknowledge", post(handoff_acknowledge))
        .route("/v1/handoff/commit", post(handoff_commit))
        .route("/metrics", get(metrics));
    if let Some(endpoint) = state.mcp.clone() {
        guarded = guarded.nest_service("/mcp", mcp::http_service(endpoint));
    }
    let guarded = guarded.layer(from_fn_with_state(state.token.clone(), require_bearer));
    let mut open = Router::new()
        .route("/health", get(health))
        .route("/openapi.json", get(openapi_document))
        .merge(guarded);
    if state.ui {
        // The UI has its own guard: a signed-in session instead of a header.
        open = open.merge(ui::router(
            Arc::clone(&state.backend),
            state.token.clone(),
            state.public_https,
        ));
    }
    open.layer(DefaultBodyLimit::max(state.max_body_bytes))
        .layer(RequestBodyTimeoutLayer::new(state.body_read_timeout))
        .layer(from_fn_with_state(
            (
                Arc::clone(&state.requests),
                Arc::clone(&state.open),
                state.cut_off.clone(),
            ),
            track_request,
        ))
        .with_state(state)
}

/// Counts requests in flight, so a drain can say how many it cut off and
/// which routes they were for, and answers 503 for one still running when
/// the shutdown budget runs out.
async fn track_request(
    State((requests, open, cut_off)): State<(
        Arc<WorkTracker>,
        Arc<OpenRequests>,
        CancellationToken,
    )>,
    request: axum::extract::Request,
    next: axum::middleware::Next,
) -> axum::response::Response {
    let Some(_ticket) = requests.admit() else {
        return ApiError::from(MemoryError::Closed("memgate serve".to_owned())).into_response();
    };
    // The route's template, never the path itself (it may hold an id).
    let route = request
        .extensions()
        .get::<MatchedPath>()
        .map_or("(no route)", MatchedPath::as_str);
    let _open = open.enter(request.method().as_str(), route);
    tokio::select! {
        response = next.run(request) => response,
        () = cut_off.cancelled() => ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "closed",
            "memgate is shutting down and this request was still running at the end of \
             the shutdown budget: it was cut off, and a write may or may not have taken effect",
        )
        .into_response(),
    }
}

/// Answers with a backend call's result (the assembly has observed it).
async fn answer<T: Serialize>(
    call: impl Future<Output = Result<T, MemoryError>>,
) -> Result<Json<T>, ApiError> {
    call.await.map(Json).map_err(ApiError::from)
}

async fn recall(
    State(state): State<ServerState>,
    JsonBody(request): JsonBody<RecallRequest>,
) -> Result<Json<Recall>, ApiError> {
    answer(state.backend.recall(&request)).await
}

async fn capture(
    State(state): State<ServerState>,
    CaptureBody(request): CaptureBody,
) -> Result<Json<CaptureReport>, ApiError> {
    request.caller.require_thread().map_err(ApiError::from)?;
    answer(state.backend.capture(&request)).await
}

async fn remember(
    State(state): State<ServerState>,
    JsonBody(body): JsonBody<RememberBody>,
) -> Result<Json<RememberOutcome>, ApiError> {
    let request = RememberRequest::new(&body.kind, &body.text)?.with_confidence(body.confidence)?;
    answer(state.backend.remember(&body.caller, &request)).await
}

async fn search(
    State(state): State<ServerState>,
    JsonBody(body): JsonBody<SearchBody>,
) -> Result<Json<SearchResults>, ApiError> {
    if !(1..=MAX_TOP_K).contains(&body.top_k) {
        return Err(ApiError::invalid(
            "top_k",
            format!("must be between 1 and {MAX_TOP_K} (got {})", body.top_k),
        ));
    }
    let query = SearchQuery {
        query: body.query,
        top_k: body.top_k,
        kind: body.kind,
    };
    let hits = answer(state.backend.search(&body.caller, &query)).await?;
    let count = hits.0.len();
    Ok(Json(SearchResults {
        results: hits.0,
        count,
    }))
}

async fn list_facts(
    State(state): State<ServerState>,
    JsonBody(body): JsonBody<ListFactsBody>,
) -> Result<Json<FactList>, ApiError> {
    let facts = answer(state.backend.list_facts(&body.caller, body.include_retired)).await?;
    Ok(Json(FactList { facts: facts.0 }))
}

async fn get_fact(
    State(state): State<ServerState>,
    JsonBody(body): JsonBody<FactIdBody>,
) -> Result<Json<Fact>, ApiError> {
    answer(state.backend.get_fact(&body.caller, &body.id)).await
}

async fn revise_fact(
    State(state): State<ServerState>,
    JsonBody(body): JsonBody<ReviseBody>,
) -> Result<Json<Fact>, ApiError> {
    if body.kind.is_none() && body.text.is_none() && body.confidence.is_none() {
        return Err(ApiError::invalid(
            "revision",
            "give a new `kind`, `text` or `confidence`",
        ));
    }
    answer(
        state
            .backend
            .revise_fact(&body.caller, &body.id, &body.patch()),
    )
    .await
}

async fn retire_fact(
    State(state): State<ServerState>,
    JsonBody(body): JsonBody<FactIdBody>,
) -> Result<Json<Fact>, ApiError> {
    answer(state.backend.retire_fact(&body.caller, &body.id)).await
}

async fn export(
    State(state): State<ServerState>,
    JsonBody(body): JsonBody<ExportBody>,
) -> Result<Json<memgate_core::MemoryExport>, ApiError> {
    answer(state.backend.export(&body.caller)).await
}

async fn import(
    State(state): State<ServerState>,
    JsonBody(body): JsonBody<ImportBody>,
) -> Result<Json<ImportReport>, ApiError> {
    if body.data.format != memgate_core::facts::EXPORT_FORMAT {
        return Err(ApiError::invalid(
            "data.format",
            format!(
                "must be {:?} (got {:?})",
                memgate_core::facts::EXPORT_FORMAT,
                body.data.format
            ),
        ));
    }
    answer(state.backend.import(&body.caller, &body.data)).await
}

/// Erasure: 501 from backends whose memory lives on a server.
async fn handoff_prepare(
    State(state): State<ServerState>,
    JsonBody(body): JsonBody<HandoffPrepareBody>,
) -> Result<Json<Handoff>, ApiError> {
    let content = body.content.content()?;
    answer(state.backend.prepare_handoff(&body.caller, &content)).await
}

async fn handoff_get(
    State(state): State<ServerState>,
    JsonBody(body): JsonBody<HandoffIdBody>,
) -> Result<Json<Handoff>, ApiError> {
    answer(state.backend.get_handoff(&body.caller, &body.id)).await
}

async fn handoff_correct(
    State(state): State<ServerState>,
    JsonBody(body): JsonBody<HandoffCorrectBody>,
) -> Result<Json<Handoff>, ApiError> {
    let content = body.content.content()?;
    answer(
        state
            .backend
            .correct_handoff(&body.caller, &body.id, &content),
    )
    .await
}

async fn handoff_finalize(
    State(state): State<ServerState>,
    JsonBody(body): JsonBody<HandoffIdBody>,
) -> Result<Json<Handoff>, ApiError> {
    answer(state.backend.finalize_handoff(&body.caller, &body.id)).await
}

async fn handoff_continue(
    State(state): State<ServerState>,
    JsonBody(body): JsonBody<HandoffIdBody>,
) -> Result<Json<Continuation>, ApiError> {
    answer(state.backend.continue_handoff(&body.caller, &body.id)).await
}

async fn handoff_acknowledge(
    State(state): State<ServerState>,
    JsonBody(body): JsonBody<HandoffAcknowledgeBody>,
) -> Result<Json<Handoff>, ApiError> {
    let acknowledgement = body.acknowledgement.acknowledgement()?;
    answer(
        state
            .backend
            .acknowledge_handoff(&body.caller, &body.id, &acknowledgement),
    )
    .await
}

async fn handoff_commit(
    State(state): State<ServerState>,
    JsonBody(body): JsonBody<HandoffIdBody>,
) -> Result<Json<CommitOutcome>, ApiError> {
    answer(state.backend.commit_handoff(&body.caller, &body.id)).await
}

async fn forget_fact(
    State(state): State<ServerState>,
    JsonBody(body): JsonBody<FactIdBody>,
) -> Result<Json<ForgetReport>, ApiError> {
    let target = ForgetTarget::Fact { id: body.id };
    answer(state.backend.forget(&body.caller, &target)).await
}

async fn forget_thread(
    State(state): State<ServerState>,
    JsonBody(body): JsonBody<ForgetBody>,
) -> Result<Json<ForgetReport>, ApiError> {
    body.caller.require_thread().map_err(ApiError::from)?;
    answer(state.backend.forget(&body.caller, &ForgetTarget::Thread)).await
}

async fn forget_scope(
    State(state): State<ServerState>,
    JsonBody(body): JsonBody<ForgetBody>,
) -> Result<Json<ForgetReport>, ApiError> {
    answer(state.backend.forget(&body.caller, &ForgetTarget::Scope)).await
}

async fn forget_user(
    State(state): State<ServerState>,
    JsonBody(body): JsonBody<ForgetBody>,
) -> Result<Json<ForgetReport>, ApiError> {
    answer(state.backend.forget(&body.caller, &ForgetTarget::User)).await
}

async fn health(State(state): State<ServerState>) -> Json<Health> {
    Json(Health {
        status: "ok".to_owned(),
        version: env!("CARGO_PKG_VERSION").to_owned(),
        backend: state.backend.name().to_owned(),
        capabilities: state.backend.capabilities(),
        memory_enabled: state.backend.gates().enabled,
        injection_enabled: state.backend.gates().injection_enabled,
    })
}

/// The request metrics, then the backend's own figures (an outbox's depth
/// and deliveries), one exposition.
async fn metrics(State(state): State<ServerState>) -> impl IntoResponse {
    let mut text = state.backend.metrics().render();
    for figure in state.backend.figures() {
        text.push_str(&figure.prometheus());
    }
    ([(header::CONTENT_TYPE, "text/plain; version=0.0.4")], text)
}

async fn openapi_document() -> Json<serde_json::Value> {
    Json(openapi::document())
}
