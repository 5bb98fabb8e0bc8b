//! Retrieving memories: one find (or session-bound search) over the user's
//! and the peer's memory roots, then the text of each hit chosen by
//! `content_mode` (`openviking-api` §8.4).
//!
//! Unlike the official adapter (whose SDK silently drops it), memgate sends
//! the operator's `score_threshold` to the server. Only `memories` hits are
//! used, in the server's order.
//!
//! Categories: OpenViking 0.5 sends no `category` on hits and a
//! `{"field":"category"}` filter matches nothing; it labels memories with a
//! `memory_type=<type>` tag instead. So a hit's category is its `category`
//! when present, else its `memory_type` tag; and a search for one kind sends
//! `tags: ["memory_type=<kind>"]`, which the server applies before `limit`.

use crate::client::{OpenVikingClient, WireError};
use crate::config::ContentMode;
use serde_json::{json, Value};

/// The tag prefix OpenViking 0.5 labels memories with.
pub const MEMORY_TYPE_TAG: &str = "memory_type=";

/// What to look for and where.
#[derive(Clone, Debug)]
pub struct RetrievalRequest<'a> {
    pub query: &'a str,
    pub target_uris: &'a [String],
    /// `Some` binds the search to this session (`/search/search`).
    pub session_id: Option<&'a str>,
    pub limit: usize,
    pub score_threshold: Option<f64>,
    /// A memory type to filter on (`tags: ["memory_type=…"]`).
    pub memory_type: Option<&'a str>,
}

impl RetrievalRequest<'_> {
    /// The request body; absent values are omitted.
    pub fn body(&self) -> Value {
        let mut body = json!({
            "query": self.query,
            "target_uri": self.target_uris,
            "limit": self.limit,
        });
        if let Some(t) = self.score_threshold {
            body["score_threshold"] = json!(t);
        }
        if let Some(kind) = self.memory_type {
            body["tags"] = json!([format!("{MEMORY_TYPE_TAG}{kind}")]);
        }
        if let Some(sid) = self.session_id {
            body["session_id"] = json!(sid);
        }
        body
    }
}

/// One retrieved memory and the text chosen for it.
#[derive(Clone, Debug, PartialEq)]
pub struct RetrievedMemory {
    pub uri: Option<String>,
    pub level: Option<i64>,
    pub category: Option<String>,
    pub score: Option<f64>,
    /// Already cut to `max_content_chars` (with `"\n...[truncated]"`).
    pub text: String,
}

/// Runs the retrieval under the peer's view. Errors of the find/search call
/// propagate; errors of content reads fall back to the hit's summary.
pub async fn retrieve(
    client: &OpenVikingClient,
    peer: &str,
    request: &RetrievalRequest<'_>,
    content_mode: ContentMode,
    max_content_chars: usize,
) -> Result<Vec<RetrievedMemory>, WireError> {
    let result = client
        .retrieve(peer, request.session_id.is_some(), &request.body())
        .await?;
    let hits = match result.get("memories") {
        Some(Value::Array(hits)) => hits.as_slice(),
        _ => &[],
    };
    let mut memories = Vec::with_capacity(hits.len());
    for hit in hits.iter().filter(|h| h.is_object()) {
        let uri = hit
            .get("uri")
            .and_then(Value::as_str)
            .filter(|u| !u.is_empty())
            .map(str::to_owned);
        let level = hit.get("level").and_then(Value::as_i64);
        let wants_read = match content_mode {
            ContentMode::Read => true,
            ContentMode::Auto => level == Some(2),
            ContentMode::Abstract | ContentMode::Overview => false,
        };
        let read = match (&uri, wants_read) {
            (Some(uri), true) => match client.read_content(peer, uri).await {
                Ok(content) => Some(content),
                Err(e) => {
                    tracing::debug!(error = %e, "OpenViking content read failed; using the summary");
                    None
                }
            },
            _ => None,
        };
        let text = match read {
            Some(content) => stringify(&content),
            None => summary(hit, content_mode),
        };
        memories.push(RetrievedMemory {
            uri,
            level,
            category: category_of(hit),
            score: hit.get("score").and_then(Value::as_f64),
            text: truncate_content(text, max_content_chars),
        });
    }
    Ok(memories)
}

/// The hit's `category`, else its `memory_type=` tag.
fn category_of(hit: &Value) -> Option<String> {
    let explicit = hit.get("category").and_then(Value::as_str);
    let tagged = || {
        hit.get("tags")?
            .as_array()?
            .iter()
            .filter_map(Value::as_str)
            .find_map(|t| t.strip_prefix(MEMORY_TYPE_TAG))
    };
    explicit
        .filter(|c| !c.is_empty())
        .or_else(|| tagged().filter(|c| !c.is_empty()))
        .map(str::to_owned)
}

/// The hit's overview or abstract, in the order the mode prefers.
fn summary(hit: &Value, mode: ContentMode) -> String {
    let (first, second) = if mode == ContentMode::Abstract {
        ("abstract", "overview")
    } else {
        ("overview", "abstract")
    };
    let present = |key| hit.get(key).filter(|v| python_truthy(v));
    present(first)
        .or_else(|| present(second))
        .map(stringify)
        .unwrap_or_default()
}

fn python_truthy(v: &Value) -> bool {
    memgate_core::message::truthy(v)
}

/// A string as is; any other value as indented JSON; null as empty.
fn stringify(v: &Value) -> String {
    match v {
        Value::Null => String::new(),
        Value::String(s) => s.clone(),
        other => serde_json::to_string_pretty(other).unwrap_or_default(),
    }
}

/// Cuts `text` to `max_chars` characters and marks the cut.
pub fn truncate_content(mut text: String, max_chars: usize) -> String {
    if let Some((idx, _)) = text.char_indices().nth(max_chars) {
        text.truncate(idx);
        text.push_str("\n...[truncated]");
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn body_omits_what_is_absent() {
        let uris = [
            "viking://~/memories".to_owned(),
            "viking://~/peers/p/memories".to_owned(),
        ];
        let find = RetrievalRequest {
            query: "q",
            target_uris: &uris,
            session_id: None,
            limit: 8,
            score_threshold: None,
            memory_type: None,
        };
        assert_eq!(
            find.body(),
            json!({"query": "q", "target_uri": uris, "limit": 8})
        );
        let search = RetrievalRequest {
            session_id: Some("df_1"),
            score_threshold: Some(0.25),
            memory_type: Some("preferences"),
            ..find
        };
        assert_eq!(
            search.body(),
            json!({"query": "q", "target_uri": uris, "limit": 8, "score_threshold": 0.25,
                   "session_id": "df_1",
                   "tags": ["memory_type=preferences"]})
        );
    }

    #[test]
    fn summaries_follow_the_mode() {
        let both = json!({"abstract": "A", "overview": "O"});
        let only_abstract = json!({"abstract": "A", "overview": ""});
        assert_eq!(summary(&both, ContentMode::Overview), "O");
        assert_eq!(summary(&both, ContentMode::Abstract), "A");
        assert_eq!(summary(&only_abstract, ContentMode::Overview), "A");
        assert_eq!(summary(&json!({}), ContentMode::Auto), "");
        assert_eq!(
            summary(&json!({"abstract": {"k": 1}}), ContentMode::Overview),
            "{\n  \"k\": 1\n}"
        );
    }

    #[test]
    fn category_comes_from_the_hit_or_its_memory_type_tag() {
        assert_eq!(
            category_of(&json!({"category": "facts"})).as_deref(),
            Some("facts")
        );
        assert_eq!(
            category_of(&json!({"tags": ["a=b", "memory_type=preferences"]})).as_deref(),
            Some("preferences")
        );
        assert_eq!(
            category_of(&json!({"category": "", "tags": ["memory_type=events"]})).as_deref(),
            Some("events")
        );
        assert_eq!(category_of(&json!({"tags": []})), None);
        assert_eq!(category_of(&json!({"tags": ["memory_type="]})), None);
    }

    #[test]
    fn truncation_counts_characters() {
        assert_eq!(truncate_content("日本語".into(), 3), "日本語");
        assert_eq!(
            truncate_content("日本語x".into(), 3),
            "日本語\n...[truncated]"
        );
    }
}
