//! The cursor file's body: read exactly (anything that is not exactly a
//! cursor is refused) and written with DeerFlow's keys first, in schema
//! order, two-space indented.

use super::fields::{
    count, digest, digest_list, invalid, is_digest, push_count, push_digest, push_json_string,
};
use super::intent::{InFlight, PrefixHead, Rollback};
use super::{CursorError, TranscriptCursor, CURSOR_SCHEMA_VERSION};
use serde_json::value::RawValue;
use serde_json::{Map, Value};
use std::collections::BTreeMap;

pub(super) const KEYS: [&str; 9] = [
    "schema_version",
    "submitted_signatures",
    "commit_pending",
    "submitted_prefix_count",
    "submitted_prefix_digest",
    "memgate_server_total",
    "memgate_in_flight",
    "memgate_prefix_head",
    "memgate_confirmed",
];

/// The `memgate_confirmed` slot before its write is confirmed.
pub(super) const UNCONFIRMED: &str = "                                ";

impl TranscriptCursor {
    /// Parses a cursor file's bytes. Anything that is not exactly a cursor
    /// is refused: unknown keys, a wrong schema version, window entries that
    /// are not signatures, counts that are not non-negative integers, a
    /// digest without its count (or the reverse), `{}`.
    pub fn from_json(bytes: &[u8]) -> Result<Self, CursorError> {
        match Self::from_json_borrowing(bytes) {
            Some(cursor) => Ok(cursor),
            None => Self::from_json_value(bytes),
        }
    }

    /// The full reading, through one `Value`: the answer (and the error)
    /// for everything the borrowing reading passes on.
    fn from_json_value(bytes: &[u8]) -> Result<Self, CursorError> {
        let value: Value = serde_json::from_slice(bytes)
            .map_err(|e| CursorError::Unreadable(format!("not JSON ({e})")))?;
        let Value::Object(obj) = value else {
            return Err(CursorError::Invalid("not a JSON object".into()));
        };
        Self::from_object(&obj, None)
    }

    /// [`from_json`](Self::from_json) of a valid cursor without a `Value`
    /// per window signature (a capture reads its cursor every time, and the
    /// window's hundreds of strings were most of it): the top-level fields
    /// are taken as raw text, the window as borrowed strings, every other
    /// field checked by [`from_object`](Self::from_object) as always.
    /// `None` for anything that is not a valid cursor (or holds escapes),
    /// which the full reading then answers, with its error.
    fn from_json_borrowing(bytes: &[u8]) -> Option<Self> {
        let fields: BTreeMap<&str, &RawValue> = serde_json::from_slice(bytes).ok()?;
        let window: Vec<&str> =
            serde_json::from_str(fields.get("submitted_signatures")?.get()).ok()?;
        if !window.iter().all(|s| is_digest(s)) {
            return None;
        }
        let mut obj = Map::new();
        for (key, raw) in fields {
            let value = match key {
                // Checked above; `from_object` is given it.
                "submitted_signatures" => Value::Array(Vec::new()),
                _ => serde_json::from_str(raw.get()).ok()?,
            };
            obj.insert(key.to_owned(), value);
        }
        let window = window.into_iter().map(str::to_owned).collect();
        Self::from_object(&obj, Some(window)).ok()
    }

    /// The cursor `obj` describes; `window`: its `submitted_signatures`,
    /// already read and checked (else read from `obj`). An optimistic file
    /// reads as its outcome when confirmed, else as the state before its
    /// write, with the intent.
    fn from_object(
        obj: &Map<String, Value>,
        window: Option<Vec<String>>,
    ) -> Result<Self, CursorError> {
        if let Some(k) = obj.keys().find(|k| !KEYS.contains(&k.as_str())) {
            return Err(invalid(k, "is not a cursor field"));
        }
        match obj.get("schema_version") {
            Some(Value::Number(n)) if n.as_u64() == Some(CURSOR_SCHEMA_VERSION) => {}
            None => return Err(invalid("schema_version", "is required")),
            Some(other) => {
                return Err(CursorError::Invalid(format!(
                    "schema_version {other} is not {CURSOR_SCHEMA_VERSION}"
                )))
            }
        }
        let submitted_signatures = match (window, obj.get("submitted_signatures")) {
            (_, None) => return Err(invalid("submitted_signatures", "is required")),
            (Some(window), Some(_)) => window,
            (None, Some(v)) => digest_list(v, "submitted_signatures")?,
        };
        let commit_pending = match obj.get("commit_pending") {
            Some(Value::Bool(b)) => *b,
            _ => return Err(invalid("commit_pending", "must be true or false")),
        };
        for key in ["submitted_prefix_count", "submitted_prefix_digest"] {
            if !obj.contains_key(key) {
                return Err(invalid(key, "is required (null when unknown)"));
            }
        }
        let submitted_prefix_count =
            count(obj.get("submitted_prefix_count"), "submitted_prefix_count")?;
        let submitted_prefix_digest = digest(
            obj.get("submitted_prefix_digest"),
            "submitted_prefix_digest",
        )?;
        if submitted_prefix_count.is_some() != submitted_prefix_digest.is_some() {
            return Err(invalid(
                "submitted_prefix_count",
                "and submitted_prefix_digest must both be set or both be null",
            ));
        }
        let slot = match obj.get("memgate_confirmed") {
            None | Some(Value::Null) => None,
            Some(Value::String(s))
                if s.len() == UNCONFIRMED.len()
                    && s.bytes()
                        .all(|b| matches!(b, b' ' | b'0'..=b'9' | b'a'..=b'f')) =>
            {
                Some(s.as_str())
            }
            Some(_) => {
                return Err(invalid(
                    "memgate_confirmed",
                    "must be 32 characters, each a space or a lowercase hex digit",
                ))
            }
        };
        // A confirmed intent is only checked: the cursor is its outcome.
        let confirmed = slot.is_some_and(|slot| {
            obj.get("memgate_in_flight")
                .and_then(|i| i.get("rollback"))
                .and_then(|r| r.get("token"))
                .and_then(Value::as_str)
                == Some(slot)
        });
        let (in_flight, rollback) = match obj.get("memgate_in_flight") {
            None | Some(Value::Null) => (None, None),
            Some(v) => {
                let (intent, rollback) =
                    InFlight::from_value(v, !confirmed, &submitted_signatures)?;
                (Some(intent), rollback)
            }
        };
        if slot.is_some() != rollback.is_some() {
            return Err(invalid(
                "memgate_confirmed",
                "and memgate_in_flight.rollback must both be present or both be absent",
            ));
        }
        let prefix_head = match obj.get("memgate_prefix_head") {
            None | Some(Value::Null) => None,
            Some(v) => Some(PrefixHead::from_value(
                v,
                submitted_prefix_count,
                submitted_prefix_digest.as_deref(),
            )?),
        };
        let cursor = Self {
            recorded: true,
            submitted_signatures,
            commit_pending,
            submitted_prefix_count,
            submitted_prefix_digest,
            server_total: count(obj.get("memgate_server_total"), "memgate_server_total")?,
            in_flight,
            prefix_head,
        };
        match (rollback, slot) {
            (Some(rollback), Some(slot)) => cursor.settled(rollback, slot),
            _ => Ok(cursor),
        }
    }

    /// An optimistic file's cursor: the outcome it holds when `slot` is the
    /// rollback's token, else the state before the write, with its intent.
    fn settled(mut self, rollback: Rollback, slot: &str) -> Result<Self, CursorError> {
        let window_len = usize::try_from(rollback.window_len).unwrap_or(usize::MAX);
        let kept = window_len - rollback.evicted.len();
        if kept > self.submitted_signatures.len() {
            return Err(invalid(
                "memgate_in_flight.rollback.window_len",
                "must not exceed the evicted entries and the window",
            ));
        }
        if slot == rollback.token {
            self.in_flight = None;
            return Ok(self);
        }
        let mut window = rollback.evicted;
        window.extend(self.submitted_signatures.drain(..kept));
        let intent = self.in_flight.take();
        Ok(Self {
            recorded: true,
            submitted_signatures: window,
            commit_pending: rollback.commit_pending,
            submitted_prefix_count: rollback.prefix_count,
            submitted_prefix_digest: rollback.prefix_digest,
            server_total: intent.as_ref().map(|i| i.base_total),
            in_flight: intent,
            prefix_head: rollback.prefix_head,
        })
    }

    /// The file body: two-space indented JSON with the keys in schema order.
    pub fn to_json(&self) -> String {
        self.to_json_with(None).0
    }

    /// [`to_json`](Self::to_json) with the intent's `rollback` and the
    /// unconfirmed `memgate_confirmed` slot when given (an optimistic save),
    /// and the slot's byte offset in the body.
    pub(super) fn to_json_with(&self, rollback: Option<&Rollback>) -> (String, Option<usize>) {
        let in_flight = self.in_flight.as_ref().map_or(0, |i| {
            160 + i.signatures.len() * 68
                + i.batches.len() * 120
                + rollback.map_or(0, |r| 300 + r.evicted.len() * 68)
        });
        let mut out = String::with_capacity(260 + self.submitted_signatures.len() * 72 + in_flight);
        out.push_str("{\n  \"schema_version\": 1,\n  \"submitted_signatures\": ");
        if self.submitted_signatures.is_empty() {
            out.push_str("[]");
        } else {
            out.push('[');
            for (i, sig) in self.submitted_signatures.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                out.push_str("\n    ");
                push_json_string(&mut out, sig);
            }
            out.push_str("\n  ]");
        }
        out.push_str(",\n  \"commit_pending\": ");
        out.push_str(if self.commit_pending { "true" } else { "false" });
        out.push_str(",\n  \"submitted_prefix_count\": ");
        push_count(&mut out, self.submitted_prefix_count);
        out.push_str(",\n  \"submitted_prefix_digest\": ");
        push_digest(&mut out, self.submitted_prefix_digest.as_deref());
        out.push_str(",\n  \"memgate_server_total\": ");
        push_count(&mut out, self.server_total);
        out.push_str(",\n  \"memgate_in_flight\": ");
        match &self.in_flight {
            Some(intent) => intent.push_json(&mut out, rollback, &self.submitted_signatures),
            None => out.push_str("null"),
        }
        out.push_str(",\n  \"memgate_prefix_head\": ");
        match &self.prefix_head {
            Some(head) => head.push_json(&mut out),
            None => out.push_str("null"),
        }
        let slot = rollback.filter(|_| self.in_flight.is_some()).map(|_| {
            out.push_str(",\n  \"memgate_confirmed\": \"");
            let offset = out.len();
            out.push_str(UNCONFIRMED);
            out.push('"');
            offset
        });
        out.push_str("\n}");
        (out, slot)
    }
}

#[cfg(test)]
mod tests {
    use super::super::testing::{headed, sigs};
    use super::*;
    use crate::cursor::{BatchMark, InFlight};
    use memgate_core::signature::sequence_digest;

    #[test]
    fn file_body_has_schema_key_order() {
        let all = sigs("h", 2);
        let c = TranscriptCursor::default().advanced(Some(&all[..]), &all[..], 512, false);
        let body = c.to_json();
        let keys = [
            "schema_version",
            "submitted_signatures",
            "commit_pending",
            "submitted_prefix_count",
            "submitted_prefix_digest",
        ];
        let positions: Vec<usize> = keys.iter().map(|k| body.find(k).unwrap()).collect();
        assert!(positions.windows(2).all(|w| w[0] < w[1]), "{body}");
        assert!(
            body.starts_with("{\n  \"schema_version\": 1,\n  \"submitted_signatures\": [\n    \"")
        );
        let back = TranscriptCursor::from_json(body.as_bytes()).unwrap();
        assert_eq!(back, c);
        let empty = TranscriptCursor::default().to_json();
        assert!(empty.contains("\"submitted_signatures\": []"));
        assert!(empty.contains("\"submitted_prefix_count\": null"));
    }

    /// A valid file body with `key` replaced by `value` (or removed).
    fn body_with(key: &str, value: Option<Value>) -> Vec<u8> {
        let all = sigs("h", 3);
        let c = TranscriptCursor::default().advanced(Some(&all[..]), &all[..], 512, false);
        let mut obj: Map<String, Value> = serde_json::from_str(&c.to_json()).unwrap();
        match value {
            Some(v) => obj.insert(key.to_owned(), v),
            None => obj.remove(key),
        };
        serde_json::to_vec(&obj).unwrap()
    }

    #[test]
    fn unreadable_and_invalid_files_are_told_apart() {
        assert!(matches!(
            TranscriptCursor::from_json(b"not-json"),
            Err(CursorError::Unreadable(_))
        ));
        assert!(matches!(
            TranscriptCursor::from_json(b"[1,2]"),
            Err(CursorError::Invalid(_))
        ));
    }

    #[test]
    fn every_inexact_cursor_is_refused() {
        let h = sigs("x", 1).remove(0);
        let cases: Vec<(&str, Vec<u8>)> = vec![
            ("empty object", b"{}".to_vec()),
            ("schema 2", body_with("schema_version", Some(2.into()))),
            (
                "schema string",
                body_with("schema_version", Some("1".into())),
            ),
            ("no schema", body_with("schema_version", None)),
            ("no window", body_with("submitted_signatures", None)),
            (
                "window not a list",
                body_with("submitted_signatures", Some("a".into())),
            ),
            (
                "non-string signatures",
                body_with("submitted_signatures", Some(serde_json::json!([1, null]))),
            ),
            (
                "short signature",
                body_with("submitted_signatures", Some(serde_json::json!(["abc"]))),
            ),
            (
                "upper-case signature",
                body_with("submitted_signatures", Some(h.to_uppercase().into())),
            ),
            (
                "commit_pending 1",
                body_with("commit_pending", Some(1.into())),
            ),
            ("commit_pending missing", body_with("commit_pending", None)),
            (
                "negative count",
                body_with("submitted_prefix_count", Some((-1).into())),
            ),
            (
                "float count",
                body_with("submitted_prefix_count", Some(1.5.into())),
            ),
            ("count missing", body_with("submitted_prefix_count", None)),
            (
                "count without digest",
                body_with("submitted_prefix_digest", Some(Value::Null)),
            ),
            (
                "digest not hex",
                body_with("submitted_prefix_digest", Some("zz".into())),
            ),
            (
                "digest a number",
                body_with("submitted_prefix_digest", Some(7.into())),
            ),
            ("unknown key", body_with("extra", Some(true.into()))),
            (
                "server total text",
                body_with("memgate_server_total", Some("3".into())),
            ),
            (
                "intent not an object",
                body_with("memgate_in_flight", Some(3.into())),
            ),
            (
                "intent without batches",
                body_with(
                    "memgate_in_flight",
                    Some(
                        serde_json::json!({"base_total": 0, "written_ms": 1, "start": null, "signatures": [h], "batches": []}),
                    ),
                ),
            ),
            (
                "intent past its signatures",
                body_with(
                    "memgate_in_flight",
                    Some(
                        serde_json::json!({"base_total": 0, "written_ms": 1, "start": null, "signatures": [h],
                        "batches": [{"inputs": 2, "payloads": 2, "prefix_digest": null}]}),
                    ),
                ),
            ),
        ];
        for (name, body) in cases {
            let got = TranscriptCursor::from_json(&body);
            assert!(
                matches!(got, Err(CursorError::Invalid(_))),
                "{name}: {got:?}"
            );
        }
        // The valid body itself, and a DeerFlow body without memgate's keys.
        assert!(TranscriptCursor::from_json(&body_with("memgate_in_flight", None)).is_ok());
        let deerflow = body_with("memgate_server_total", None);
        let c = TranscriptCursor::from_json(&deerflow).unwrap();
        assert!(c.recorded && c.server_total.is_none() && c.in_flight.is_none());
    }

    #[test]
    fn the_borrowing_reading_agrees_with_the_full_one() {
        let all = sigs("b", 40);
        let plain = TranscriptCursor::default().advanced(Some(&all[..30]), &all[..30], 16, false);
        let mut intent = headed(&all[..30]);
        intent.server_total = Some(30);
        intent.in_flight = Some(InFlight {
            base_total: 30,
            written_ms: 1_700_000_000_000,
            start: Some(30),
            signatures: all[30..].to_vec(),
            batches: vec![BatchMark {
                inputs: 10,
                payloads: 10,
                prefix_digest: Some(sequence_digest(&all)),
            }],
        });
        let valid = [plain.to_json(), headed(&all).to_json(), intent.to_json()];
        for body in &valid {
            let read = TranscriptCursor::from_json_borrowing(body.as_bytes());
            assert!(read.is_some(), "a cursor memgate wrote is read borrowing");
            assert_eq!(
                read,
                TranscriptCursor::from_json_value(body.as_bytes()).ok()
            );
        }
        // Valid, but with an escape in a window signature: left to the full
        // reading, which accepts it.
        let first = &plain.submitted_signatures[0];
        let escaped = plain.to_json().replacen(
            first,
            &format!("\\u00{:x}{}", first.as_bytes()[0], &first[1..]),
            1,
        );
        assert!(TranscriptCursor::from_json_borrowing(escaped.as_bytes()).is_none());
        assert_eq!(
            TranscriptCursor::from_json(escaped.as_bytes()).unwrap(),
            plain_read(&plain)
        );
        // Whatever the full reading refuses, the borrowing one never accepts.
        let body: Map<String, Value> = serde_json::from_str(&plain.to_json()).unwrap();
        let mut refused: Vec<Vec<u8>> = vec![b"{}".to_vec(), b"[]".to_vec(), b"".to_vec()];
        for key in KEYS {
            for value in [
                Value::Null,
                1.into(),
                (-1).into(),
                "x".into(),
                Value::Bool(true),
                serde_json::json!([first]),
                serde_json::json!(["abc"]),
                serde_json::json!([first.to_uppercase()]),
                serde_json::json!({}),
            ] {
                let mut changed = body.clone();
                changed.insert(key.to_owned(), value);
                refused.push(serde_json::to_vec(&changed).unwrap());
            }
            let mut missing = body.clone();
            missing.remove(key);
            refused.push(serde_json::to_vec(&missing).unwrap());
        }
        let mut extra = body.clone();
        extra.insert("extra".into(), 1.into());
        refused.push(serde_json::to_vec(&extra).unwrap());
        let duplicated = plain.to_json().replacen(
            "\"commit_pending\": false",
            "\"commit_pending\": false, \"commit_pending\": 2",
            1,
        );
        refused.push(duplicated.into_bytes());
        let mut checked = 0;
        for bytes in &refused {
            if TranscriptCursor::from_json_value(bytes).is_err() {
                checked += 1;
                assert_eq!(
                    TranscriptCursor::from_json_borrowing(bytes),
                    None,
                    "{}",
                    String::from_utf8_lossy(bytes)
                );
            }
        }
        assert!(checked > 30, "only {checked} refused bodies");
    }

    fn plain_read(c: &TranscriptCursor) -> TranscriptCursor {
        TranscriptCursor::from_json_value(c.to_json().as_bytes()).unwrap()
    }
}
