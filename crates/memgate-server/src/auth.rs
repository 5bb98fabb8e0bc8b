//! Who may talk to the server: a bearer token when one is configured, and
//! no public bind without one.

use crate::error::ApiError;
use axum::extract::{Request, State};
use axum::http::{header, StatusCode};
use axum::middleware::Next;
use axum::response::Response;
use memgate_core::Secret;
use std::net::SocketAddr;

/// The server's bearer token (one [`Secret`]: its `Debug` never shows it).
pub type BearerToken = Secret;

/// Refuses to expose an unauthenticated memory service beyond loopback.
pub fn check_bind(addr: SocketAddr, token: Option<&BearerToken>) -> Result<(), String> {
    if addr.ip().is_loopback() || token.is_some() {
        Ok(())
    } else {
        Err(format!(
            "refusing to bind {addr}: a non-loopback address needs a bearer token \
             (set the variable named by server.bearer_token_env, MEMGATE_TOKEN by default)"
        ))
    }
}

/// How much of a refused request's body is read before answering 401.
const UNAUTHORIZED_BODY_DRAIN: usize = 64 * 1024;

/// Middleware: requires `Authorization: Bearer <token>` when a token is set.
pub async fn require_bearer(
    State(token): State<Option<BearerToken>>,
    request: Request,
    next: Next,
) -> Result<Response, ApiError> {
    if let Some(token) = &token {
        let presented = request
            .headers()
            .get(header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("Bearer "));
        if !presented.is_some_and(|p| token.matches(p)) {
            // Read what the client is sending before answering, so a
            // keep-alive client gets its 401 rather than a connection closed
            // under it mid-upload. Bounded: a larger body just closes.
            let _ = axum::body::to_bytes(request.into_body(), UNAUTHORIZED_BODY_DRAIN).await;
            return Err(ApiError::new(
                StatusCode::UNAUTHORIZED,
                "unauthorized",
                "missing or wrong bearer token",
            ));
        }
    }
    Ok(next.run(request).await)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn public_bind_needs_a_token() {
        let public: SocketAddr = "0.0.0.0:8765".parse().unwrap();
        let local: SocketAddr = "127.0.0.1:8765".parse().unwrap();
        let v6: SocketAddr = "[::1]:8765".parse().unwrap();
        assert!(check_bind(public, None)
            .unwrap_err()
            .contains("bearer token"));
        assert!(check_bind(local, None).is_ok());
        assert!(check_bind(v6, None).is_ok());
        let t = BearerToken::from_setting(Some("s3cret".into())).unwrap();
        assert!(check_bind(public, Some(&t)).is_ok());
    }

    #[test]
    fn token_comparison_and_redaction() {
        let t = BearerToken::from_setting(Some(" s3cret ".into())).unwrap();
        assert!(t.matches("s3cret"));
        assert!(!t.matches("s3cre"));
        assert!(!t.matches("s3cret!"));
        assert!(!format!("{t:?}").contains("s3cret"));
        assert!(BearerToken::from_setting(Some("  ".into())).is_none());
    }
}
