//! # The memory browser at `/ui`
//!
//! Server-rendered pages over the same assembled backend the JSON API uses,
//! so it works on every backend and shows a 501 as "not supported by this
//! backend". No script; one stylesheet compiled into the binary.
//!
//! Access follows the API's rules. With a bearer token configured, a
//! sign-in form takes it once and sets an `HttpOnly`, `SameSite=Strict`
//! session cookie. Without one the server binds loopback only, where the
//! JSON API already lets any local process erase memory, so the pages that
//! erase ask for no token either; what protects them is what protects every
//! form here: a per-session CSRF token, an Origin check, a loopback `Host`
//! (no DNS rebinding), no CORS, and a confirmation naming what is erased.
//! Identity and memory text never appear in a URL: the principal is chosen
//! with a POST and kept in the server-side session; threads are linked by
//! their index in the session's list; fact ids are the store's opaque ids.

mod guard;
mod pages;
mod session;
mod throttle;
mod view;

pub use guard::CONTENT_SECURITY_POLICY;

use crate::auth::BearerToken;
use axum::middleware::from_fn_with_state;
use axum::routing::{get, post};
use axum::Router;
use memgate_assembly::AssembledBackend;
use session::Sessions;
use std::sync::Arc;

/// What the pages share.
#[derive(Clone)]
struct Ui {
    backend: Arc<AssembledBackend>,
    token: Option<BearerToken>,
    sessions: Arc<Sessions>,
    sign_in: Arc<throttle::SignInThrottle>,
    /// Mark the session cookie `Secure`: the public URL is `https://`.
    secure_cookie: bool,
}

/// The `/ui` routes, for merging into the server's router.
pub fn router<S: Clone + Send + Sync + 'static>(
    backend: Arc<AssembledBackend>,
    token: Option<BearerToken>,
    secure_cookie: bool,
) -> Router<S> {
    let token_set = token.is_some();
    let ui = Ui {
        backend,
        token,
        sessions: Arc::new(Sessions::default()),
        sign_in: Arc::default(),
        secure_cookie,
    };
    Router::new()
        .route("/ui", get(pages::overview))
        .route("/ui/", get(pages::overview))
        .route("/ui/assets/ui.css", get(pages::stylesheet))
        .route("/ui/assets/icon.svg", get(pages::icon))
        .route("/ui/login", post(pages::login))
        .route("/ui/logout", post(pages::logout))
        .route("/ui/principal", post(pages::choose_principal))
        .route("/ui/facts", get(pages::facts))
        .route("/ui/facts/{id}", get(pages::fact))
        .route("/ui/facts/{id}/sources", get(pages::fact_sources))
        .route("/ui/facts/{id}/revise", post(pages::revise_fact))
        .route("/ui/facts/{id}/retire", post(pages::retire_fact))
        .route(
            "/ui/facts/{id}/forget",
            get(pages::confirm_forget_fact).post(pages::forget_fact),
        )
        .route("/ui/block", get(pages::block).post(pages::block_for_query))
        .route("/ui/threads", get(pages::threads))
        .route("/ui/threads/{n}", get(pages::thread))
        .route(
            "/ui/threads/{n}/forget",
            get(pages::confirm_forget_thread).post(pages::forget_thread),
        )
        .route("/ui/search", post(pages::search))
        .route(
            "/ui/forget/{level}",
            get(pages::confirm_forget_scope).post(pages::forget_scope),
        )
        .route("/ui/transfer", get(pages::transfer))
        .route("/ui/export", post(pages::export))
        .route("/ui/import", post(pages::import))
        .route("/ui/health", get(pages::health).post(pages::health_check))
        .layer(from_fn_with_state(token_set, guard::guard))
        .with_state(ui)
}
