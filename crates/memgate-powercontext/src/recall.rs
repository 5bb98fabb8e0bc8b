//! Recall through `POST /v1/context/prepare`.
//!
//! The query is the host's latest user input: missing or blank means no
//! recall and no request; longer than the API's 8192 characters, it is cut
//! at a character boundary. The budget is the snapshot's `max_bytes`. On a
//! 1.4.x server the request asks for a memory-only markdown assembly (six
//! memory entries); 0.0.2 has no `assembly` and gets the legacy envelope.
//!
//! One total deadline covers waiting for a slot, detection (first call
//! only), connect, headers and the whole body. No retry. Any failure is a
//! content-free warning and an empty recall (the conversation goes on
//! without new memory).

use crate::diagnostic::Problem;
use crate::generation::ServerGeneration;
use crate::prepared;
use crate::settings::Settings;
use crate::PowerContextBackend;
use memgate_core::budget::{prefix_bytes, prefix_chars};
use serde_json::{json, Value};
use tokio::time::Instant;

/// The API's query limit, in characters.
pub const MAX_QUERY_CHARS: usize = 8192;
/// 0.0.2's effective query limit, in UTF-8 bytes (see [`query_for`]).
pub const MAX_SNAPSHOT_QUERY_BYTES: usize = 8192;
/// Memory entries a 1.4.x assembly asks for.
pub const ASSEMBLY_MEMORY_LIMIT: u32 = 6;
/// Largest prepare response read: the 32 KiB content ceiling, JSON-escaped
/// at worst six times over, plus the envelope.
const PREPARE_CAP: usize = 256 * 1024;

/// The query to send, or `None` when there is nothing to recall for.
pub(crate) fn recall_query(raw: Option<&str>) -> Option<&str> {
    let query = prefix_chars(raw?, MAX_QUERY_CHARS);
    (!query.trim().is_empty()).then_some(query)
}

/// The query as this generation can take it. 0.0.2 accepts up to 8192
/// characters on the wire but answers 500 once the query exceeds 8192 UTF-8
/// bytes (its search normalizes the query with the memory-text rules;
/// observed on the real server), so there it is also cut to 8192 bytes at a
/// character boundary. `None` when the cut leaves only whitespace.
pub(crate) fn query_for(generation: ServerGeneration, query: &str) -> Option<&str> {
    let query = match generation {
        ServerGeneration::Snapshot => prefix_bytes(query, MAX_SNAPSHOT_QUERY_BYTES),
        ServerGeneration::Current => query,
    };
    (!query.trim().is_empty()).then_some(query)
}

/// The prepare request body for this server generation. Public so the
/// lab's recall benchmark (`memgate-lab`) times a bare round trip of the
/// very request a recall sends, against the same server.
pub fn prepare_body(settings: &Settings, generation: ServerGeneration, query: &str) -> Value {
    let mut body = json!({
        "scope_id": settings.scope_id(),
        "query": query,
        "max_bytes": settings.max_bytes(),
    });
    if generation == ServerGeneration::Current {
        body["assembly"] = json!({
            "format": "markdown",
            "sections": [{"family": "memory", "limit": ASSEMBLY_MEMORY_LIMIT}],
        });
    }
    body
}

impl PowerContextBackend {
    /// Prepared content for `query` (`None` when the server has nothing),
    /// within the recall deadline.
    pub(crate) async fn prepare(&self, query: &str) -> Result<Option<String>, Problem> {
        let deadline = Instant::now() + self.settings.recall_timeout();
        tokio::time::timeout_at(deadline, async {
            let generation = self.server().await?.generation;
            let Some(query) = query_for(generation, query) else {
                return Ok(None);
            };
            let body = prepare_body(&self.settings, generation, query);
            let reply = self
                .transport
                .post("/v1/context/prepare", &body, PREPARE_CAP)
                .await?;
            if reply.status != 200 {
                return Err(reply.problem());
            }
            prepared::validate(&reply.body, self.settings.max_bytes())
        })
        .await
        .unwrap_or(Err(Problem::Timeout))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn blank_or_missing_queries_send_nothing() {
        assert_eq!(recall_query(None), None);
        assert_eq!(recall_query(Some("")), None);
        assert_eq!(recall_query(Some(" \n\t")), None);
        assert_eq!(recall_query(Some(" hi ")), Some(" hi "));
    }

    #[test]
    fn long_queries_are_cut_at_a_character_boundary() {
        let long = "é".repeat(MAX_QUERY_CHARS + 10);
        let q = recall_query(Some(&long)).unwrap();
        assert_eq!(q.chars().count(), MAX_QUERY_CHARS);
        assert_eq!(q.len(), MAX_QUERY_CHARS * 2);
        // Whitespace-only within the limit is blank even if text follows later.
        let padded = format!("{}tail", " ".repeat(MAX_QUERY_CHARS));
        assert_eq!(recall_query(Some(&padded)), None);
    }

    #[test]
    fn snapshot_queries_are_also_cut_to_8192_bytes() {
        let q = "账".repeat(MAX_QUERY_CHARS);
        let cut = query_for(ServerGeneration::Snapshot, &q).unwrap();
        assert_eq!(cut.len(), 8190);
        assert_eq!(
            query_for(ServerGeneration::Current, &q).unwrap().len(),
            q.len()
        );
        // Ideographic spaces (3 bytes each) filling the first 8192 bytes leave a blank query.
        let spaced = format!("{}x", "\u{3000}".repeat(2731));
        assert_eq!(query_for(ServerGeneration::Snapshot, &spaced), None);
        assert!(query_for(ServerGeneration::Current, &spaced).is_some());
    }
}
