//! Strict validation of a `powercontext.prepared-context.v1` response.
//!
//! The content is returned to the host unchanged or not at all: a response
//! that breaks any rule is discarded whole, never trimmed or re-rendered,
//! because cutting it could split a citation from the text it vouches for.
//!
//! Rules (as the reference host clients enforce them): exactly the keys
//! `schema`, `status`, `content`, `content_bytes`; the schema constant;
//! `empty` ⇔ `content: null` and `content_bytes: 0`; `ready` ⇒ non-blank
//! content whose real UTF-8 length equals `content_bytes` and is within the
//! requested `max_bytes`.

use crate::diagnostic::Problem;
use crate::generation::PREPARED_CONTEXT_SCHEMA;
use serde_json::Value;

const KEYS: [&str; 4] = ["schema", "status", "content", "content_bytes"];

/// The ready content (`Some`) or an empty result (`None`), or why the
/// response must be discarded.
pub(crate) fn validate(body: &[u8], max_bytes: u32) -> Result<Option<String>, Problem> {
    let value: Value =
        serde_json::from_slice(body).map_err(|_| Problem::Malformed("body is not JSON"))?;
    let Value::Object(mut fields) = value else {
        return Err(Problem::Malformed("body is not a JSON object"));
    };
    if fields.len() != KEYS.len() || !KEYS.iter().all(|k| fields.contains_key(*k)) {
        return Err(Problem::Malformed(
            "fields are not exactly schema, status, content, content_bytes",
        ));
    }
    if fields["schema"] != PREPARED_CONTEXT_SCHEMA {
        return Err(Problem::Malformed(
            "schema is not powercontext.prepared-context.v1",
        ));
    }
    let content_bytes = fields["content_bytes"].as_u64().ok_or(Problem::Malformed(
        "content_bytes is not a non-negative integer",
    ))?;
    match fields["status"].as_str() {
        Some("empty") => {
            if fields["content"].is_null() && content_bytes == 0 {
                Ok(None)
            } else {
                Err(Problem::Malformed("empty status with content"))
            }
        }
        Some("ready") => {
            let Some(Value::String(content)) = fields.remove("content") else {
                return Err(Problem::Malformed("ready status without string content"));
            };
            if content.trim().is_empty() {
                return Err(Problem::Malformed("ready status with blank content"));
            }
            if content.len() as u64 != content_bytes {
                return Err(Problem::Malformed(
                    "content_bytes differs from the content's UTF-8 length",
                ));
            }
            if content_bytes > u64::from(max_bytes) {
                return Err(Problem::Oversized);
            }
            Ok(Some(content))
        }
        _ => Err(Problem::Malformed("status is neither ready nor empty")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn check(v: Value, max: u32) -> Result<Option<String>, Problem> {
        validate(v.to_string().as_bytes(), max)
    }

    fn ready(content: &str) -> Value {
        json!({"schema": PREPARED_CONTEXT_SCHEMA, "status": "ready",
               "content": content, "content_bytes": content.len()})
    }

    #[test]
    fn ready_content_is_returned_unchanged() {
        let text =
            "PowerContext prepared untrusted historical context.\n日本語 — {\"citation\":1}\n";
        assert_eq!(check(ready(text), 8000).unwrap().as_deref(), Some(text));
    }

    #[test]
    fn empty_requires_null_content_and_zero_bytes() {
        let empty = json!({"schema": PREPARED_CONTEXT_SCHEMA, "status": "empty",
                           "content": null, "content_bytes": 0});
        assert_eq!(check(empty.clone(), 8000).unwrap(), None);
        let mut bad = empty.clone();
        bad["content"] = json!("x");
        assert!(check(bad, 8000).is_err());
        let mut bad = empty;
        bad["content_bytes"] = json!(3);
        assert!(check(bad, 8000).is_err());
    }

    #[test]
    fn byte_count_is_real_utf8_length() {
        let mut v = ready("日本");
        assert_eq!(v["content_bytes"], 6);
        v["content_bytes"] = json!(2); // characters, not bytes
        assert_eq!(
            check(v, 8000).unwrap_err(),
            Problem::Malformed("content_bytes differs from the content's UTF-8 length")
        );
    }

    #[test]
    fn over_budget_content_is_discarded_not_cut() {
        let text = "a".repeat(600);
        assert_eq!(check(ready(&text), 512).unwrap_err(), Problem::Oversized);
        assert!(check(ready(&text), 600).is_ok());
    }

    #[test]
    fn unknown_or_malformed_shapes_are_discarded() {
        let mut extra = ready("x");
        extra["reason"] = json!("inference_timeout");
        let mut schema = ready("x");
        schema["schema"] = json!("powercontext.prepared-context.v2");
        let mut status = ready("x");
        status["status"] = json!("partial");
        let mut negative = ready("x");
        negative["content_bytes"] = json!(-1);
        let blank = ready("  \n ");
        for v in [
            extra,
            schema,
            status,
            negative,
            blank,
            json!([1]),
            json!(null),
        ] {
            assert!(
                matches!(check(v.clone(), 8000), Err(Problem::Malformed(_))),
                "{v}"
            );
        }
        assert!(validate(b"not json", 8000).is_err());
        let mut missing = ready("x");
        missing.as_object_mut().unwrap().remove("content");
        assert!(check(missing, 8000).is_err());
    }
}
