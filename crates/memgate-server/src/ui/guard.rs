//! What every memory-browser response carries and every request must pass:
//! a strict Content-Security-Policy (no script at all, no inline style, no
//! framing), no caching of memory text, and, for state-changing requests,
//! an Origin from this very server. Without a bearer token the server only
//! binds loopback; then the `Host` must be a loopback name too, so a page
//! on another site cannot reach the UI by pointing its own host name at
//! 127.0.0.1 (DNS rebinding).

use axum::extract::{Request, State};
use axum::http::{header, HeaderMap, HeaderValue, Method, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

/// The policy: only this server's own stylesheet; no script, plugin, frame
/// or form target elsewhere.
pub const CONTENT_SECURITY_POLICY: &str = "default-src 'self'; script-src 'none'; \
     object-src 'none'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'";

/// Middleware: refuses requests from elsewhere and sets the security headers.
pub async fn guard(State(token_set): State<bool>, request: Request, next: Next) -> Response {
    let headers = request.headers();
    let refusal = if !token_set && !loopback_host(headers) {
        Some("the memory browser without a bearer token answers only to a loopback host name")
    } else if !matches!(*request.method(), Method::GET | Method::HEAD) && !same_origin(headers) {
        Some("a state-changing request must come from this server's own pages")
    } else {
        None
    };
    let mut response = match refusal {
        Some(reason) => (StatusCode::FORBIDDEN, reason).into_response(),
        None => next.run(request).await,
    };
    let set = response.headers_mut();
    for (name, value) in [
        ("content-security-policy", CONTENT_SECURITY_POLICY),
        ("x-content-type-options", "nosniff"),
        ("x-frame-options", "DENY"),
        // `no-referrer` would make Chrome send `Origin: null` on our own forms.
        ("referrer-policy", "same-origin"),
        ("cache-control", "no-store"),
        ("cross-origin-opener-policy", "same-origin"),
        ("cross-origin-resource-policy", "same-origin"),
    ] {
        set.insert(name, HeaderValue::from_static(value));
    }
    response
}

/// The `Host` header names this machine's loopback interface.
fn loopback_host(headers: &HeaderMap) -> bool {
    let Some(host) = headers.get(header::HOST).and_then(|h| h.to_str().ok()) else {
        return false;
    };
    let name = match host.strip_prefix('[') {
        Some(v6) => v6.split(']').next().unwrap_or(""),
        None => host.rsplit_once(':').map_or(host, |(name, _)| name),
    };
    name.eq_ignore_ascii_case("localhost")
        || name
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback())
}

/// A browser's `Origin` (and `Sec-Fetch-Site`, where sent) say the request
/// came from this server's own page. Clients that send neither (curl, the
/// tests' HTTP client) still need the session's CSRF token.
fn same_origin(headers: &HeaderMap) -> bool {
    let text = |name: header::HeaderName| headers.get(name).and_then(|v| v.to_str().ok());
    if let Some(site) = text(header::HeaderName::from_static("sec-fetch-site")) {
        if site != "same-origin" && site != "none" {
            return false;
        }
    }
    match text(header::ORIGIN) {
        None => true,
        Some(origin) => text(header::HOST).is_some_and(|host| {
            origin
                .strip_prefix("http://")
                .or_else(|| origin.strip_prefix("https://"))
                == Some(host)
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(pairs: &[(&'static str, &'static str)]) -> HeaderMap {
        let mut map = HeaderMap::new();
        for (k, v) in pairs {
            map.insert(*k, HeaderValue::from_static(v));
        }
        map
    }

    #[test]
    fn only_loopback_host_names_pass_without_a_token() {
        for host in ["127.0.0.1:8765", "localhost:1", "[::1]:8765", "127.0.0.2"] {
            assert!(loopback_host(&headers(&[("host", host)])), "{host}");
        }
        for host in ["evil.example:8765", "10.0.0.1:80", "[2001:db8::1]:80"] {
            assert!(!loopback_host(&headers(&[("host", host)])), "{host}");
        }
        assert!(!loopback_host(&HeaderMap::new()));
    }

    #[test]
    fn another_sites_origin_is_refused() {
        let host = ("host", "127.0.0.1:8765");
        assert!(same_origin(&headers(&[host])));
        assert!(same_origin(&headers(&[
            host,
            ("origin", "http://127.0.0.1:8765")
        ])));
        assert!(!same_origin(&headers(&[
            host,
            ("origin", "http://evil.example")
        ])));
        assert!(!same_origin(&headers(&[host, ("origin", "null")])));
        assert!(!same_origin(&headers(&[
            host,
            ("sec-fetch-site", "cross-site")
        ])));
    }
}
