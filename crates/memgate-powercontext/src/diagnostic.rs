//! Content-free failure categories.
//!
//! Every failed exchange with PowerContext is reduced to a [`Problem`]: a
//! category and, for HTTP errors, the status and the server's error code.
//! Nothing else from the exchange is kept — no memory text, no query, no
//! response body, no header — so a diagnostic can be logged, shown to the
//! model or counted without leaking content or the token.

use std::fmt;

/// Why an exchange with PowerContext failed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Problem {
    /// No connection could be made: the request was never sent.
    Connect,
    /// The total deadline passed.
    Timeout,
    /// The connection failed after the request may have been sent, or the
    /// response body was cut off.
    Transport,
    /// The response was larger than this operation accepts.
    Oversized,
    /// The backend is shut down; nothing was sent.
    Closed,
    /// HTTP 401: the token was refused.
    Unauthorized,
    /// HTTP 403: the credential may not use this Scope.
    Forbidden,
    /// HTTP 404 `scope_not_found` (1.4.x): the configured Scope does not exist.
    ScopeNotFound,
    /// Any other HTTP status, with the server's error code when it sent a
    /// well-formed one.
    Status { status: u16, code: Option<String> },
    /// A 2xx response that broke the documented contract.
    Malformed(&'static str),
    /// The server is neither PowerContext 0.0.2 nor a 1.x server with the 1.4 contract.
    UnsupportedServer(&'static str),
}

impl Problem {
    /// A stable category for logs and metrics.
    pub fn category(&self) -> &'static str {
        match self {
            Self::Connect => "connect",
            Self::Timeout => "timeout",
            Self::Transport => "transport",
            Self::Oversized => "oversized_response",
            Self::Closed => "closed",
            Self::Unauthorized => "unauthorized",
            Self::Forbidden => "forbidden",
            Self::ScopeNotFound => "scope_not_found",
            Self::Status { .. } => "http_status",
            Self::Malformed(_) => "malformed_response",
            Self::UnsupportedServer(_) => "unsupported_server",
        }
    }

    /// The problem for a non-success HTTP status and its error body.
    pub(crate) fn from_status(status: u16, body: &[u8]) -> Self {
        let code = error_code(body);
        match (status, code.as_deref()) {
            (401, _) => Self::Unauthorized,
            (403, _) => Self::Forbidden,
            (404, Some("scope_not_found")) => Self::ScopeNotFound,
            _ => Self::Status { status, code },
        }
    }
}

impl fmt::Display for Problem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Connect => f.write_str("PowerContext could not be reached"),
            Self::Timeout => f.write_str("PowerContext did not answer within the deadline"),
            Self::Transport => f.write_str("the connection to PowerContext failed mid-exchange"),
            Self::Oversized => f.write_str("PowerContext's response exceeded the size limit"),
            Self::Closed => f.write_str("the PowerContext backend is shut down"),
            Self::Unauthorized => {
                f.write_str("PowerContext refused the bearer token (HTTP 401 unauthorized)")
            }
            Self::Forbidden => f.write_str(
                "PowerContext refused access to the configured Scope (HTTP 403 forbidden)",
            ),
            Self::ScopeNotFound => f.write_str(
                "the configured Scope does not exist on this PowerContext server \
                 (HTTP 404 scope_not_found); create it first",
            ),
            Self::Status {
                status,
                code: Some(code),
            } => write!(f, "PowerContext answered HTTP {status} {code}"),
            Self::Status { status, code: None } => write!(f, "PowerContext answered HTTP {status}"),
            Self::Malformed(what) => write!(f, "PowerContext's response was malformed: {what}"),
            Self::UnsupportedServer(what) => {
                write!(f, "unsupported PowerContext server: {what}")
            }
        }
    }
}

/// The server's `error.code`, kept only when it looks like an identifier
/// (lower-case letters, digits, `_`, at most 64 characters): a code is safe to
/// log, a free-form message might not be.
fn error_code(body: &[u8]) -> Option<String> {
    let value: serde_json::Value = serde_json::from_slice(body).ok()?;
    let code = value.get("error")?.get("code")?.as_str()?;
    let plain = !code.is_empty()
        && code.len() <= 64
        && code
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_');
    plain.then(|| code.to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn statuses_map_to_categories() {
        assert_eq!(Problem::from_status(401, b"{}"), Problem::Unauthorized);
        assert_eq!(Problem::from_status(403, b""), Problem::Forbidden);
        assert_eq!(
            Problem::from_status(
                404,
                br#"{"error":{"code":"scope_not_found","message":"x"}}"#
            ),
            Problem::ScopeNotFound
        );
        assert_eq!(
            Problem::from_status(
                422,
                br#"{"error":{"code":"invalid_request","message":"m"}}"#
            ),
            Problem::Status {
                status: 422,
                code: Some("invalid_request".into())
            }
        );
    }

    #[test]
    fn free_form_codes_are_dropped() {
        let p = Problem::from_status(500, br#"{"error":{"code":"Bearer abc def"}}"#);
        assert_eq!(
            p,
            Problem::Status {
                status: 500,
                code: None
            }
        );
        assert_eq!(p.to_string(), "PowerContext answered HTTP 500");
        assert_eq!(p.category(), "http_status");
    }
}
