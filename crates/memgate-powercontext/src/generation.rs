//! Which PowerContext API generation the server speaks.
//!
//! Two incompatible generations exist:
//!
//! - **0.0.2** ([`ServerGeneration::Snapshot`]): implicit Scopes, one
//!   versioned Memory per Scope, remember answers `{memory, entry}` and
//!   de-duplicates identical active entries (`entry: null`); prepare takes
//!   no `assembly`.
//! - **1.4.x** ([`ServerGeneration::Current`]): Scopes are created beforehand
//!   (unknown ids are 404), every remember creates an Atomic Memory and
//!   answers `{changed, records}` without de-duplication; prepare accepts a
//!   markdown `assembly`.
//!
//! Detection: `GET /v1/server-info` exists only from 1.4 on and reports
//! `api_contract_version {major, minor}`; a 1.x contract with minor ≥ 4 is
//! `Current`. A 404 there, followed by `GET /v1/capabilities` listing the
//! `powercontext.prepared-context.v1` context version, is `Snapshot`.
//! Anything else is refused as unsupported. Both probes need the token, so
//! detection also proves the credential. It runs in `warm()` and, lazily,
//! before the first recall or remember (inside that call's deadline); a
//! success is kept for the life of the backend (a server upgrade, like a
//! token rotation, needs a restart), a failure is not kept.

use crate::diagnostic::Problem;
use crate::transport::Transport;
use serde::Serialize;
use serde_json::Value;

/// Largest probe response accepted.
const PROBE_CAP: usize = 256 * 1024;
/// The context version both generations produce.
pub const PREPARED_CONTEXT_SCHEMA: &str = "powercontext.prepared-context.v1";

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ServerGeneration {
    /// PowerContext 0.0.2 (the repository snapshot): implicit Scopes,
    /// citation-based Memory, de-duplication.
    Snapshot,
    /// PowerContext 1.4.x: created Scopes, Atomic Memory, assembly.
    Current,
}

impl ServerGeneration {
    pub fn label(self) -> &'static str {
        match self {
            Self::Snapshot => "0.0.2",
            Self::Current => "1.4.x",
        }
    }
}

/// What detection learned about the server.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct ServerInfo {
    pub generation: ServerGeneration,
    /// `package_version` from `/v1/server-info` (1.4.x); `None` on 0.0.2,
    /// which does not report it without the (large) OpenAPI document.
    pub package_version: Option<String>,
}

pub(crate) async fn detect(transport: &Transport) -> Result<ServerInfo, Problem> {
    let reply = transport.get("/v1/server-info", PROBE_CAP).await?;
    match reply.status {
        200 => {
            let info: Value = serde_json::from_slice(&reply.body)
                .map_err(|_| Problem::Malformed("server-info is not JSON"))?;
            let contract = info.get("api_contract_version");
            let major = contract
                .and_then(|c| c.get("major"))
                .and_then(Value::as_u64);
            let minor = contract
                .and_then(|c| c.get("minor"))
                .and_then(Value::as_u64);
            match (major, minor) {
                (Some(1), Some(m)) if m >= 4 => Ok(ServerInfo {
                    generation: ServerGeneration::Current,
                    package_version: info
                        .get("package_version")
                        .and_then(Value::as_str)
                        .filter(|v| v.len() <= 64)
                        .map(str::to_owned),
                }),
                (Some(_), Some(_)) => Err(Problem::UnsupportedServer(
                    "api_contract_version is not 1.4 or a later 1.x",
                )),
                _ => Err(Problem::Malformed("server-info lacks api_contract_version")),
            }
        }
        404 => {
            let reply = transport.get("/v1/capabilities", PROBE_CAP).await?;
            if !reply.is_success() {
                return Err(reply.problem());
            }
            let caps: Value = serde_json::from_slice(&reply.body)
                .map_err(|_| Problem::Malformed("capabilities is not JSON"))?;
            let speaks_v1 = caps
                .get("context_versions")
                .and_then(Value::as_array)
                .is_some_and(|v| v.iter().any(|s| s == PREPARED_CONTEXT_SCHEMA));
            if speaks_v1 {
                Ok(ServerInfo {
                    generation: ServerGeneration::Snapshot,
                    package_version: None,
                })
            } else {
                Err(Problem::UnsupportedServer(
                    "capabilities do not list powercontext.prepared-context.v1",
                ))
            }
        }
        _ => Err(reply.problem()),
    }
}
