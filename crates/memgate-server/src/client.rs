//! A [`MemoryBackend`] that talks to a running `memgate serve`, so the CLI
//! (and any Rust host) can use a shared service instead of opening the store
//! itself. Error answers map back to the same [`MemoryError`] variants.

use crate::api::*;
use async_trait::async_trait;
use memgate_core::{
    Acknowledgement, Caller, Capabilities, CaptureReport, CaptureRequest, CommitOutcome,
    Continuation, Fact, FactPatch, ForgetReport, ForgetTarget, Handoff, HandoffContent,
    ImportReport, MemoryBackend, MemoryError, MemoryExport, Recall, RecallRequest, RememberOutcome,
    RememberRequest, Result, SearchHit, SearchQuery, Secret, WarmStatus, WireError,
};
use serde::de::DeserializeOwned;
use serde::Serialize;
use std::fmt;
use std::time::Duration;

/// A remote memgate service.
pub struct HttpBackend {
    base: String,
    token: Option<Secret>,
    http: reqwest::Client,
    name: String,
    capabilities: Capabilities,
}

impl fmt::Debug for HttpBackend {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("HttpBackend")
            .field("base", &self.base)
            .field("backend", &self.name)
            .field("token", &self.token)
            .finish()
    }
}

impl HttpBackend {
    /// Connects to `base_url` (e.g. `http://127.0.0.1:8765`) and reads its
    /// `/health` to learn the backend's name and capabilities.
    pub async fn connect(base_url: &str, token: Option<Secret>, timeout: Duration) -> Result<Self> {
        let base = base_url.trim_end_matches('/').to_owned();
        if !(base.starts_with("http://") || base.starts_with("https://")) {
            return Err(MemoryError::invalid(
                "url",
                "must be an absolute http(s) URL such as http://127.0.0.1:8765",
            ));
        }
        let http = reqwest::Client::builder()
            .timeout(timeout)
            .build()
            .map_err(|e| MemoryError::backend(format!("cannot build HTTP client: {e}")))?;
        let health: Health = http
            .get(format!("{base}/health"))
            .send()
            .await
            .map_err(|e| unreachable(&base, &e))?
            .error_for_status()
            .map_err(|e| unreachable(&base, &e))?
            .json()
            .await
            .map_err(|e| {
                MemoryError::backend(format!("memgate at {base} sent a bad /health: {e}"))
            })?;
        Ok(Self {
            base,
            token,
            http,
            name: health.backend,
            capabilities: health.capabilities,
        })
    }

    async fn call<B: Serialize, T: DeserializeOwned>(&self, path: &str, body: &B) -> Result<T> {
        let mut request = self.http.post(format!("{}{path}", self.base)).json(body);
        if let Some(token) = &self.token {
            request = request.bearer_auth(token.expose());
        }
        let response = request.send().await.map_err(|e| {
            if e.is_timeout() {
                MemoryError::DeadlineExceeded(format!("memgate at {} did not answer", self.base))
            } else {
                unreachable(&self.base, &e)
            }
        })?;
        let status = response.status();
        let bytes = response
            .bytes()
            .await
            .map_err(|e| unreachable(&self.base, &e))?;
        if status.is_success() {
            return serde_json::from_slice(&bytes).map_err(|e| {
                MemoryError::backend(format!("memgate answered {path} with unexpected JSON: {e}"))
            });
        }
        Err(match serde_json::from_slice::<ErrorBody>(&bytes) {
            Ok(body) => error_from_wire(body.error),
            Err(_) => MemoryError::backend(format!("memgate answered {path} with HTTP {status}")),
        })
    }
}

fn unreachable(base: &str, e: &reqwest::Error) -> MemoryError {
    MemoryError::backend(format!("cannot reach memgate at {base}: {e}"))
}

/// Rebuilds the error a server reported: memory errors exactly, from their
/// wire fields; the HTTP layer's own refusals as the nearest memory error.
fn error_from_wire(wire: WireError) -> MemoryError {
    match wire.code.as_str() {
        "body_too_large" | "unsupported_media_type" => {
            MemoryError::invalid("request", wire.message)
        }
        "unauthorized" => MemoryError::RejectedIdentity(wire.message),
        _ => MemoryError::from_wire(wire),
    }
}

#[async_trait]
impl MemoryBackend for HttpBackend {
    fn name(&self) -> &str {
        &self.name
    }

    fn capabilities(&self) -> Capabilities {
        self.capabilities
    }

    async fn recall(&self, request: &RecallRequest) -> Result<Recall> {
        self.call("/v1/recall", request).await
    }

    async fn capture(&self, request: &CaptureRequest) -> Result<CaptureReport> {
        self.call("/v1/capture", request).await
    }

    async fn remember(
        &self,
        caller: &Caller,
        request: &RememberRequest,
    ) -> Result<RememberOutcome> {
        let body = RememberBody {
            caller: caller.clone(),
            kind: request.kind.clone(),
            text: request.text.clone(),
            confidence: request.confidence,
        };
        self.call("/v1/remember", &body).await
    }

    async fn search(&self, caller: &Caller, query: &SearchQuery) -> Result<Vec<SearchHit>> {
        let body = SearchBody {
            caller: caller.clone(),
            query: query.query.clone(),
            top_k: query.top_k,
            kind: query.kind.clone(),
        };
        let results: SearchResults = self.call("/v1/search", &body).await?;
        Ok(results.results)
    }

    async fn list_facts(&self, caller: &Caller, include_retired: bool) -> Result<Vec<Fact>> {
        let body = ListFactsBody {
            caller: caller.clone(),
            include_retired,
        };
        let list: FactList = self.call("/v1/facts/list", &body).await?;
        Ok(list.facts)
    }

    async fn get_fact(&self, caller: &Caller, id: &str) -> Result<Fact> {
        let body = FactIdBody {
            caller: caller.clone(),
            id: id.to_owned(),
        };
        self.call("/v1/facts/get", &body).await
    }

    async fn revise_fact(&self, caller: &Caller, id: &str, patch: &FactPatch) -> Result<Fact> {
        let body = ReviseBody {
            caller: caller.clone(),
            id: id.to_owned(),
            kind: patch.kind.clone(),
            text: patch.text.clone(),
            confidence: patch.confidence,
        };
        self.call("/v1/facts/revise", &body).await
    }

    async fn retire_fact(&self, caller: &Caller, id: &str) -> Result<Fact> {
        let body = FactIdBody {
            caller: caller.clone(),
            id: id.to_owned(),
        };
        self.call("/v1/facts/retire", &body).await
    }

    async fn export(&self, caller: &Caller) -> Result<MemoryExport> {
        self.call(
            "/v1/export",
            &ExportBody {
                caller: caller.clone(),
            },
        )
        .await
    }

    async fn import(&self, caller: &Caller, data: &MemoryExport) -> Result<ImportReport> {
        let body = ImportBody {
            caller: caller.clone(),
            data: data.clone(),
        };
        self.call("/v1/import", &body).await
    }

    /// Forwards to the server's erasure routes; a 501 there stays
    /// `Unsupported` here.
    async fn forget(&self, caller: &Caller, target: &ForgetTarget) -> Result<ForgetReport> {
        let caller = caller.clone();
        match target {
            ForgetTarget::Fact { id } => {
                let body = FactIdBody {
                    caller,
                    id: id.clone(),
                };
                self.call("/v1/forget/fact", &body).await
            }
            ForgetTarget::Thread => self.call("/v1/forget/thread", &ForgetBody { caller }).await,
            ForgetTarget::Scope => self.call("/v1/forget/scope", &ForgetBody { caller }).await,
            ForgetTarget::User => self.call("/v1/forget/user", &ForgetBody { caller }).await,
        }
    }

    async fn prepare_handoff(&self, caller: &Caller, content: &HandoffContent) -> Result<Handoff> {
        let body = HandoffPrepareBody {
            caller: caller.clone(),
            content: content.into(),
        };
        self.call("/v1/handoff/prepare", &body).await
    }

    async fn get_handoff(&self, caller: &Caller, id: &str) -> Result<Handoff> {
        self.call("/v1/handoff/get", &handoff_id(caller, id)).await
    }

    async fn correct_handoff(
        &self,
        caller: &Caller,
        id: &str,
        content: &HandoffContent,
    ) -> Result<Handoff> {
        let body = HandoffCorrectBody {
            caller: caller.clone(),
            id: id.to_owned(),
            content: content.into(),
        };
        self.call("/v1/handoff/correct", &body).await
    }

    async fn finalize_handoff(&self, caller: &Caller, id: &str) -> Result<Handoff> {
        self.call("/v1/handoff/finalize", &handoff_id(caller, id))
            .await
    }

    async fn continue_handoff(&self, caller: &Caller, id: &str) -> Result<Continuation> {
        self.call("/v1/handoff/continue", &handoff_id(caller, id))
            .await
    }

    async fn acknowledge_handoff(
        &self,
        caller: &Caller,
        id: &str,
        acknowledgement: &Acknowledgement,
    ) -> Result<Handoff> {
        let body = HandoffAcknowledgeBody {
            caller: caller.clone(),
            id: id.to_owned(),
            acknowledgement: acknowledgement.into(),
        };
        self.call("/v1/handoff/acknowledge", &body).await
    }

    async fn commit_handoff(&self, caller: &Caller, id: &str) -> Result<CommitOutcome> {
        self.call("/v1/handoff/commit", &handoff_id(caller, id))
            .await
    }

    async fn warm(&self) -> Result<WarmStatus> {
        Ok(WarmStatus::Ready)
    }
}

fn handoff_id(caller: &Caller, id: &str) -> HandoffIdBody {
    HandoffIdBody {
        caller: caller.clone(),
        id: id.to_owned(),
    }
}
