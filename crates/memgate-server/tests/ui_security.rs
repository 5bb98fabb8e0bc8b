//! The memory browser's access rules over a real listener and the real
//! local store: security headers, CSRF and Origin checks that refuse and
//! change nothing, sign-in with the bearer token, a loopback `Host` when
//! there is no token, 501 panels for a backend that cannot, and
//! `server.ui: false`.

use memgate_assembly::AssembledBackend;
use memgate_core::noop::NoopBackend;
use memgate_core::{
    Caller, CaptureKind, CaptureRequest, FactState, MemoryBackend, Message, RememberOutcome,
    RememberRequest,
};
use memgate_server::auth::BearerToken;
use memgate_server::ui::CONTENT_SECURITY_POLICY;
use memgate_server::ServerState;
use memgate_store::{LocalBackend, LocalConfig};
use std::sync::Arc;
use ui_common::{browse_alice, client, get, post, read, spawn};

mod ui_common;

fn alice() -> Caller {
    Caller::new("alice").with_agent("helper")
}

async fn local_with_a_fact_and_a_thread(dir: &std::path::Path) -> (Arc<LocalBackend>, String) {
    let local =
        Arc::new(LocalBackend::open(dir.join("memgate.sqlite3"), LocalConfig::default()).unwrap());
    let outcome = local
        .remember(
            &alice(),
            &RememberRequest::new("fact", "alice drinks green tea").unwrap(),
        )
        .await
        .unwrap();
    let RememberOutcome::Stored { citation } = outcome else {
        panic!("{outcome:?}")
    };
    local
        .capture(&CaptureRequest {
            caller: alice().with_thread("t-harbour"),
            messages: vec![Message::human("we walked along the harbour")],
            kind: CaptureKind::AfterTurn,
            trace_id: None,
        })
        .await
        .unwrap();
    (local, citation.as_str().to_owned())
}

#[tokio::test]
async fn every_ui_page_carries_the_strict_policy_and_a_safe_cookie() {
    let base = spawn(ServerState::new(AssembledBackend::with_defaults(Arc::new(
        NoopBackend,
    ))))
    .await;
    let page = get(&base, "/ui", None).await;
    assert_eq!(page.status, 200);
    let h = &page.headers;
    assert_eq!(h["content-security-policy"], CONTENT_SECURITY_POLICY);
    assert!(CONTENT_SECURITY_POLICY.contains("script-src 'none'"));
    assert!(CONTENT_SECURITY_POLICY.contains("frame-ancestors 'none'"));
    assert!(CONTENT_SECURITY_POLICY.contains("default-src 'self'"));
    assert!(!CONTENT_SECURITY_POLICY.contains("unsafe-inline"));
    assert_eq!(h["x-content-type-options"], "nosniff");
    assert_eq!(h["cache-control"], "no-store");
    assert!(h.get("access-control-allow-origin").is_none());
    let cookie = h["set-cookie"].to_str().unwrap();
    assert!(
        cookie.contains("HttpOnly") && cookie.contains("SameSite=Strict"),
        "{cookie}"
    );
    assert!(!cookie.contains("Secure"), "plain HTTP: {cookie}");
    assert!(!page.body.contains("<script"), "the pages carry no script");
    assert!(!page.body.contains("style="), "and no inline style");
    let css = get(&base, "/ui/assets/ui.css", None).await;
    assert_eq!(css.status, 200);
    assert!(css.headers["content-type"]
        .to_str()
        .unwrap()
        .starts_with("text/css"));
}

#[tokio::test]
async fn state_changing_requests_without_the_csrf_token_are_refused_and_change_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let (local, id) = local_with_a_fact_and_a_thread(dir.path()).await;
    let backend: Arc<dyn MemoryBackend> = local.clone();
    let base = spawn(ServerState::new(AssembledBackend::with_defaults(backend))).await;
    let (cookie, csrf) = browse_alice(&base).await;
    let threads = get(&base, "/ui/threads", Some(&cookie)).await;
    assert!(threads.body.contains("t-harbour"), "{}", threads.body);

    let retire = format!("/ui/facts/{id}/retire");
    let forget = format!("/ui/facts/{id}/forget");
    let revise = format!("/ui/facts/{id}/revise");
    let no_csrf: &[(&str, &str)] = &[];
    let wrong = [("csrf", "0".repeat(64))];
    let wrong: Vec<(&str, &str)> = wrong.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let right = [("csrf", csrf.as_str())];
    let evil = [("origin", "http://evil.example")];
    let cross = [("sec-fetch-site", "cross-site")];
    type Attempt<'a> = (
        &'a str,
        Option<&'a str>,
        &'a [(&'a str, &'a str)],
        &'a [(&'a str, &'a str)],
    );
    let attempts: Vec<Attempt> = vec![
        (&retire, Some(&cookie), no_csrf, &[]),
        (&retire, Some(&cookie), &wrong, &[]),
        (&retire, None, &right, &[]),
        (&retire, Some(&cookie), &right, &evil),
        (&retire, Some(&cookie), &right, &cross),
        (&forget, Some(&cookie), no_csrf, &[]),
        (&forget, Some(&cookie), &right, &evil),
        (&revise, Some(&cookie), &wrong, &[]),
        ("/ui/threads/0/forget", Some(&cookie), no_csrf, &[]),
        ("/ui/threads/0/forget", Some(&cookie), &right, &evil),
        ("/ui/forget/user", Some(&cookie), no_csrf, &[]),
        ("/ui/forget/agent", Some(&cookie), &wrong, &[]),
        ("/ui/import", Some(&cookie), no_csrf, &[]),
        ("/ui/principal", Some(&cookie), no_csrf, &[]),
    ];
    for (path, cookie, fields, headers) in attempts {
        let page = post(&base, path, cookie, fields, headers).await;
        assert_eq!(page.status, 403, "{path} {headers:?}: {}", page.body);
    }
    let fact = local.get_fact(&alice(), &id).await.unwrap();
    assert_eq!((fact.state, fact.version), (FactState::Active, 1));
    assert_eq!(local.export(&alice()).await.unwrap().turns.len(), 1);

    // The same request with the token and this server's Origin goes through.
    let origin = base.clone();
    let page = post(
        &base,
        &retire,
        Some(&cookie),
        &right,
        &[("origin", &origin)],
    )
    .await;
    assert_eq!(page.status, 303, "{}", page.body);
    let fact = local.get_fact(&alice(), &id).await.unwrap();
    assert_eq!(fact.state, FactState::Retired);
}

#[tokio::test]
async fn with_a_bearer_token_the_ui_needs_a_sign_in() {
    let mut state = ServerState::new(AssembledBackend::with_defaults(Arc::new(NoopBackend)));
    state.token = BearerToken::from_setting(Some("s3cret-token".into()));
    let base = spawn(state).await;

    let first = get(&base, "/ui/facts", None).await;
    assert_eq!(first.status, 401);
    assert!(first.body.contains("Bearer token"), "{}", first.body);
    let (cookie, csrf) = (first.cookie(), first.csrf());
    let refused = post(
        &base,
        "/ui/login",
        Some(&cookie),
        &[("csrf", &csrf), ("token", "guess")],
        &[],
    )
    .await;
    assert_eq!(refused.status, 401);
    assert!(!refused.body.contains("s3cret-token"));
    let still = get(&base, "/ui", Some(&cookie)).await;
    assert_eq!(still.status, 401, "a refused sign-in signs nothing in");

    let no_csrf = post(
        &base,
        "/ui/login",
        Some(&cookie),
        &[("token", "s3cret-token")],
        &[],
    )
    .await;
    assert_eq!(no_csrf.status, 403);

    let accepted = post(
        &base,
        "/ui/login",
        Some(&cookie),
        &[("csrf", &csrf), ("token", "s3cret-token")],
        &[],
    )
    .await;
    assert_eq!(accepted.status, 303);
    let signed_in = accepted.cookie();
    assert_ne!(signed_in, cookie, "sign-in starts a fresh session id");
    assert_eq!(get(&base, "/ui", Some(&signed_in)).await.status, 200);
    assert_eq!(get(&base, "/ui", Some(&cookie)).await.status, 401);
    // The JSON API still wants the header, whatever the UI session.
    let api = client()
        .post(format!("{base}/v1/recall"))
        .header("cookie", &signed_in)
        .json(&serde_json::json!({"caller": {"user": "alice"}}))
        .send()
        .await
        .unwrap();
    assert_eq!(api.status().as_u16(), 401);
}

/// `server.public_url: https://…` (a proxy terminating TLS): every session
/// cookie the UI hands out, and the one that ends a session, is `Secure`.
#[tokio::test]
async fn behind_tls_the_session_cookie_is_secure() {
    let mut state = ServerState::new(AssembledBackend::with_defaults(Arc::new(NoopBackend)));
    state.token = BearerToken::from_setting(Some("s3cret-token".into()));
    state.public_https = true;
    let base = spawn(state).await;
    let first = get(&base, "/ui", None).await;
    let cookie = first.headers["set-cookie"].to_str().unwrap().to_owned();
    assert!(
        cookie.ends_with("; Secure") && cookie.contains("HttpOnly"),
        "{cookie}"
    );
    let accepted = post(
        &base,
        "/ui/login",
        Some(&first.cookie()),
        &[("csrf", &first.csrf()), ("token", "s3cret-token")],
        &[],
    )
    .await;
    assert_eq!(accepted.status, 303);
    let signed_in = accepted.headers["set-cookie"].to_str().unwrap();
    assert!(signed_in.ends_with("; Secure"), "{signed_in}");
    let page = get(&base, "/ui", Some(&accepted.cookie())).await;
    let out = post(
        &base,
        "/ui/logout",
        Some(&accepted.cookie()),
        &[("csrf", &page.csrf())],
        &[],
    )
    .await;
    let cleared = out.headers["set-cookie"].to_str().unwrap();
    assert!(
        cleared.contains("Max-Age=0") && cleared.ends_with("; Secure"),
        "{cleared}"
    );
}

/// Ten wrong tokens close the sign-in form for the rest of the minute with
/// a 429 that says why and for how long; while closed, even the right token
/// signs nothing in, so guesses then tell nothing.
#[tokio::test]
async fn sign_in_closes_after_ten_wrong_tokens_with_a_clear_message() {
    let mut state = ServerState::new(AssembledBackend::with_defaults(Arc::new(NoopBackend)));
    state.token = BearerToken::from_setting(Some("s3cret-token".into()));
    let base = spawn(state).await;
    let first = get(&base, "/ui", None).await;
    let (cookie, csrf) = (first.cookie(), first.csrf());
    let sign_in = |token: &'static str| {
        let (base, cookie, csrf) = (base.clone(), cookie.clone(), csrf.clone());
        async move {
            post(
                &base,
                "/ui/login",
                Some(&cookie),
                &[("csrf", &csrf), ("token", token)],
                &[],
            )
            .await
        }
    };
    for attempt in 0..10 {
        assert_eq!(sign_in("guess").await.status, 401, "attempt {attempt}");
    }
    let closed = sign_in("s3cret-token").await;
    assert_eq!(closed.status, 429, "{}", closed.body);
    assert!(
        closed.body.contains("Too many wrong tokens")
            && closed.body.contains("at most 10 wrong tokens per 60 s"),
        "{}",
        closed.body
    );
    let wait: u64 = closed.headers["retry-after"]
        .to_str()
        .unwrap()
        .parse()
        .unwrap();
    assert!((1..=60).contains(&wait), "{wait}");
    assert!(
        closed.headers.get("set-cookie").is_none(),
        "no session handed out"
    );
    assert_eq!(get(&base, "/ui", Some(&cookie)).await.status, 401);
}

#[tokio::test]
async fn without_a_token_only_a_loopback_host_name_is_served() {
    let base = spawn(ServerState::new(AssembledBackend::with_defaults(Arc::new(
        NoopBackend,
    ))))
    .await;
    let page = read(
        client()
            .get(format!("{base}/ui"))
            .header("host", "rebound.evil.example")
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(page.status, 403);
    assert_eq!(get(&base, "/ui", None).await.status, 200);
}

/// Fake backend: only what the contract requires (recall and capture), so
/// every optional operation answers the trait's 501.
struct RecallOnlyFake;

#[async_trait::async_trait]
impl MemoryBackend for RecallOnlyFake {
    fn name(&self) -> &str {
        "recall-only-fake"
    }
    fn capabilities(&self) -> memgate_core::Capabilities {
        memgate_core::Capabilities {
            recall: true,
            ..Default::default()
        }
    }
    async fn recall(
        &self,
        _r: &memgate_core::RecallRequest,
    ) -> memgate_core::Result<memgate_core::Recall> {
        Ok(memgate_core::Recall::empty())
    }
    async fn capture(
        &self,
        _r: &CaptureRequest,
    ) -> memgate_core::Result<memgate_core::CaptureReport> {
        Ok(Default::default())
    }
}

#[tokio::test]
async fn a_backend_that_cannot_shows_not_supported_never_an_empty_list() {
    let base = spawn(ServerState::new(AssembledBackend::with_defaults(Arc::new(
        RecallOnlyFake,
    ))))
    .await;
    let (cookie, _) = browse_alice(&base).await;
    for path in ["/ui/facts", "/ui/threads"] {
        let page = get(&base, path, Some(&cookie)).await;
        assert_eq!(page.status, 501, "{path}");
        assert!(
            page.body.contains("not supported by the"),
            "{path}: {}",
            page.body
        );
        assert!(!page.body.contains(" 0 "), "{path}: {}", page.body);
    }
}

#[tokio::test]
async fn server_ui_false_answers_404_and_leaves_the_api() {
    let mut state = ServerState::new(AssembledBackend::with_defaults(Arc::new(NoopBackend)));
    state.ui = false;
    let base = spawn(state).await;
    for path in ["/ui", "/ui/facts", "/ui/assets/ui.css"] {
        assert_eq!(get(&base, path, None).await.status, 404, "{path}");
    }
    assert_eq!(get(&base, "/health", None).await.status, 200);
}
