//! The rules of the file's scalar fields, read and written alike by the
//! cursor's body ([`super::format`]) and its parts ([`super::intent`]):
//! signatures and digests (64 lowercase hex digits), counts (non-negative
//! integers or null), and the JSON strings written without a serializer.

use super::CursorError;
use serde_json::Value;

pub(super) fn invalid(field: &str, rule: &str) -> CursorError {
    CursorError::Invalid(format!("{field} {rule}"))
}

/// `digits` lowercase hex digits.
pub(super) fn is_lower_hex(s: &str, digits: usize) -> bool {
    s.len() == digits && s.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
}

/// A signature or digest: 64 lowercase hex digits.
pub(super) fn is_digest(s: &str) -> bool {
    is_lower_hex(s, 64)
}

pub(super) fn digest_list(value: &Value, field: &str) -> Result<Vec<String>, CursorError> {
    let Value::Array(items) = value else {
        return Err(invalid(field, "must be an array"));
    };
    items
        .iter()
        .map(|v| match v.as_str() {
            Some(s) if is_digest(s) => Ok(s.to_owned()),
            _ => Err(invalid(
                field,
                "must hold only 64-hex-digit signature strings",
            )),
        })
        .collect()
}

/// An intent's signatures: one string of 64 hex digits each (as written),
/// or an array of them (as written before); how many, and, when `keep`,
/// the signatures.
pub(super) fn signature_run(
    value: &Value,
    keep: bool,
) -> Result<(usize, Vec<String>), CursorError> {
    const F: &str = "memgate_in_flight.signatures";
    match value {
        Value::String(run) if run.len() % 64 == 0 && is_lower_hex(run, run.len()) => {
            let signatures = if keep {
                // ASCII, checked above: every 64-byte step is a char boundary.
                (0..run.len() / 64)
                    .map(|i| run[i * 64..(i + 1) * 64].to_owned())
                    .collect()
            } else {
                Vec::new()
            };
            Ok((run.len() / 64, signatures))
        }
        Value::String(_) => Err(invalid(F, "must be 64 lowercase hex digits per signature")),
        other => {
            let signatures = digest_list(other, F)?;
            Ok((signatures.len(), signatures))
        }
    }
}

pub(super) fn count(value: Option<&Value>, field: &str) -> Result<Option<u64>, CursorError> {
    match value {
        None | Some(Value::Null) => Ok(None),
        Some(v) => v
            .as_u64()
            .map(Some)
            .ok_or_else(|| invalid(field, "must be a non-negative integer or null")),
    }
}

pub(super) fn digest(value: Option<&Value>, field: &str) -> Result<Option<String>, CursorError> {
    match value {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) if is_digest(s) => Ok(Some(s.clone())),
        Some(_) => Err(invalid(field, "must be a 64-hex-digit digest or null")),
    }
}

pub(super) fn push_count(out: &mut String, n: Option<u64>) {
    match n {
        Some(n) => out.push_str(&n.to_string()),
        None => out.push_str("null"),
    }
}

pub(super) fn push_digest(out: &mut String, d: Option<&str>) {
    match d {
        Some(d) => push_json_string(out, d),
        None => out.push_str("null"),
    }
}

/// A JSON string; signatures (hex) are copied as they are. The check has
/// no early exit, so it runs vectorized (cursors hold thousands of them).
pub(super) fn push_json_string(out: &mut String, s: &str) {
    let plain = s.bytes().fold(true, |plain, b| {
        plain & (b >= 0x20) & (b != b'"') & (b != b'\\')
    });
    if plain {
        out.push('"');
        out.push_str(s);
        out.push('"');
    } else {
        out.push_str(&Value::String(s.to_owned()).to_string());
    }
}
