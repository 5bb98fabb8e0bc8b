//! The router and its handlers. Each handler validates its body, calls the
//! backend once, and records the outcome in the metrics.

use crate::api::*;
use crate::auth::{require_bearer, BearerToken};
use crate::error::{ApiError, JsonBody};
use crate::mcp::{self, McpEndpoint};
use crate::metrics::Metrics;
use crate::openapi;
use axum::extract::{DefaultBodyLimit, State};
use axum::http::header;
use axum::middleware::from_fn_with_state;
use axum::response::IntoResponse;
use axum::routing::{get, post};
use axum::{Json, Router};
use memgate_core::{
    CaptureReport, CaptureRequest, Fact, ForgetReport, ForgetTarget, ImportReport, MemoryBackend,
    MemoryError, Recall, RecallRequest, RememberOutcome, RememberRequest, SearchQuery,
};
use serde::Serialize;
use std::future::Future;
use std::sync::Arc;
use std::time::Instant;

/// The host-level gates of the `memory:` section.
#[derive(Clone, Copy, Debug)]
pub struct Switches {
    /// `memory.enabled`: capture and recall injection happen at all.
    pub enabled: bool,
    /// `memory.injection_enabled`: recall happens.
    pub injection_enabled: bool,
}

impl Default for Switches {
    fn default() -> Self {
        Self {
            enabled: true,
            injection_enabled: true,
        }
    }
}

/// Everything the handlers share.
#[derive(Clone)]
pub struct ServerState {
    pub backend: Arc<dyn MemoryBackend>,
    pub switches: Switches,
    pub metrics: Arc<Metrics>,
    pub token: Option<BearerToken>,
    pub max_body_bytes: usize,
    /// `/mcp` (streamable HTTP), when MCP is enabled.
    pub mcp: Option<McpEndpoint>,
}

impl ServerState {
    pub fn new(backend: Arc<dyn MemoryBackend>) -> Self {
        Self {
            backend,
            switches: Switches::default(),
            metrics: Arc::new(Metrics::default()),
            token: None,
            max_body_bytes: 4 * 1024 * 1024,
            mcp: None,
        }
    }
}

/// The HTTP API. `/health` and `/openapi.json` are open; everything else
/// (including `/mcp`) needs the bearer token when one is configured.
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
        .route("/metrics", get(metrics));
    if let Some(endpoint) = state.mcp.clone() {
        guarded = guarded.nest_service("/mcp", mcp::http_service(endpoint));
    }
    let guarded = guarded.layer(from_fn_with_state(state.token.clone(), require_bearer));
    Router::new()
        .route("/health", get(health))
        .route("/openapi.json", get(openapi_document))
        .merge(guarded)
        .layer(DefaultBodyLimit::max(state.max_body_bytes))
        .with_state(state)
}

/// Runs one backend call, records its outcome and latency, and answers.
async fn observed<T: Serialize>(
    state: &ServerState,
    operation: &'static str,
    call: impl Future<Output = Result<T, MemoryError>>,
) -> Result<Json<T>, ApiError> {
    let started = Instant::now();
    let result = call.await;
    let outcome = match &result {
        Ok(_) => "ok",
        Err(err) => err.code(),
    };
    state.metrics.observe(operation, outcome, started.elapsed());
    if let Err(err) = &result {
        if !err.is_caller_error() {
            tracing::warn!(operation, code = err.code(), error = %err, "memory operation failed");
        }
    }
    result.map(Json).map_err(ApiError::from)
}

async fn recall(
    State(state): State<ServerState>,
    JsonBody(request): JsonBody<RecallRequest>,
) -> Result<Json<Recall>, ApiError> {
    if !(state.switches.enabled && state.switches.injection_enabled) {
        state
            .metrics
            .observe("recall", "disabled", std::time::Duration::ZERO);
        return Ok(Json(Recall::empty()));
    }
    observed(&state, "recall", state.backend.recall(&request)).await
}

async fn capture(
    State(state): State<ServerState>,
    JsonBody(request): JsonBody<CaptureRequest>,
) -> Result<Json<CaptureReport>, ApiError> {
    request.caller.require_thread().map_err(ApiError::from)?;
    if !state.switches.enabled {
        state
            .metrics
            .observe("capture", "disabled", std::time::Duration::ZERO);
        return Ok(Json(CaptureReport {
            filtered: request.messages.len(),
            ..CaptureReport::default()
        }));
    }
    observed(&state, "capture", state.backend.capture(&request)).await
}

async fn remember(
    State(state): State<ServerState>,
    JsonBody(body): JsonBody<RememberBody>,
) -> Result<Json<RememberOutcome>, ApiError> {
    let request = RememberRequest::new(&body.kind, &body.text)?;
    observed(
        &state,
        "remember",
        state.backend.remember(&body.caller, &request),
    )
    .await
}

async fn search(
    State(state): State<ServerState>,
    JsonBody(body): JsonBody<SearchBody>,
) -> Result<Json<SearchResults>, ApiError> {
    if !(1..=MAX_TOP_K).contains(&body.top_k) {
        return Err(ApiError::invalid(format!(
            "invalid top_k: must be between 1 and {MAX_TOP_K} (got {})",
            body.top_k
        )));
    }
    let query = SearchQuery {
        query: body.query,
        top_k: body.top_k,
        kind: body.kind,
    };
    let hits = observed(&state, "search", state.backend.search(&body.caller, &query)).await?;
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
    let facts = observed(
        &state,
        "facts_list",
        state.backend.list_facts(&body.caller, body.include_retired),
    )
    .await?;
    Ok(Json(FactList { facts: facts.0 }))
}

async fn get_fact(
    State(state): State<ServerState>,
    JsonBody(body): JsonBody<FactIdBody>,
) -> Result<Json<Fact>, ApiError> {
    observed(
        &state,
        "facts_get",
        state.backend.get_fact(&body.caller, &body.id),
    )
    .await
}

async fn revise_fact(
    State(state): State<ServerState>,
    JsonBody(body): JsonBody<ReviseBody>,
) -> Result<Json<Fact>, ApiError> {
    if body.kind.is_none() && body.text.is_none() {
        return Err(ApiError::invalid(
            "invalid revision: give a new `kind`, a new `text`, or both",
        ));
    }
    observed(
        &state,
        "facts_revise",
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
    observed(
        &state,
        "facts_retire",
        state.backend.retire_fact(&body.caller, &body.id),
    )
    .await
}

async fn export(
    State(state): State<ServerState>,
    JsonBody(body): JsonBody<ExportBody>,
) -> Result<Json<memgate_core::MemoryExport>, ApiError> {
    observed(&state, "export", state.backend.export(&body.caller)).await
}

async fn import(
    State(state): State<ServerState>,
    JsonBody(body): JsonBody<ImportBody>,
) -> Result<Json<ImportReport>, ApiError> {
    if body.data.format != memgate_core::facts::EXPORT_FORMAT {
        return Err(ApiError::invalid(format!(
            "invalid data.format: must be {:?} (got {:?})",
            memgate_core::facts::EXPORT_FORMAT,
            body.data.format
        )));
    }
    observed(
        &state,
        "import",
        state.backend.import(&body.caller, &body.data),
    )
    .await
}

/// Erasure: 501 from backends whose memory lives on a server.
async fn forget_fact(
    State(state): State<ServerState>,
    JsonBody(body): JsonBody<FactIdBody>,
) -> Result<Json<ForgetReport>, ApiError> {
    let target = ForgetTarget::Fact { id: body.id };
    observed(
        &state,
        "forget_fact",
        state.backend.forget(&body.caller, &target),
    )
    .await
}

async fn forget_thread(
    State(state): State<ServerState>,
    JsonBody(body): JsonBody<ForgetBody>,
) -> Result<Json<ForgetReport>, ApiError> {
    body.caller.require_thread().map_err(ApiError::from)?;
    observed(
        &state,
        "forget_thread",
        state.backend.forget(&body.caller, &ForgetTarget::Thread),
    )
    .await
}

async fn forget_scope(
    State(state): State<ServerState>,
    JsonBody(body): JsonBody<ForgetBody>,
) -> Result<Json<ForgetReport>, ApiError> {
    observed(
        &state,
        "forget_scope",
        state.backend.forget(&body.caller, &ForgetTarget::Scope),
    )
    .await
}

async fn forget_user(
    State(state): State<ServerState>,
    JsonBody(body): JsonBody<ForgetBody>,
) -> Result<Json<ForgetReport>, ApiError> {
    observed(
        &state,
        "forget_user",
        state.backend.forget(&body.caller, &ForgetTarget::User),
    )
    .await
}

async fn health(State(state): State<ServerState>) -> Json<Health> {
    Json(Health {
        status: "ok".to_owned(),
        version: env!("CARGO_PKG_VERSION").to_owned(),
        backend: state.backend.name().to_owned(),
        capabilities: state.backend.capabilities(),
        memory_enabled: state.switches.enabled,
        injection_enabled: state.switches.injection_enabled,
    })
}

async fn metrics(State(state): State<ServerState>) -> impl IntoResponse {
    (
        [(header::CONTENT_TYPE, "text/plain; version=0.0.4")],
        state.metrics.render(),
    )
}

async fn openapi_document() -> Json<serde_json::Value> {
    Json(openapi::document())
}
