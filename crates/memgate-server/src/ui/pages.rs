//! The memory browser's handlers: each reads the session, calls the
//! assembled backend, and renders through [`super::view`]. Reads are `GET`s
//! of opaque paths; everything that changes state or carries identity or
//! memory text (a principal, a query, a revision) is a `POST` with the
//! session's CSRF token.

use super::session::{clear_cookie, same_token, set_cookie, Principal, Session};
use super::view::{self, Frame};
use super::Ui;
use crate::error::status_of;
use axum::extract::{Path, Query, State};
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{Html, IntoResponse, Redirect, Response};
use axum::Form;
use maud::{html, Markup};
use memgate_core::identity::id_defect;
use memgate_core::{
    Caller, Fact, FactPatch, FactState, ForgetReport, ForgetTarget, MemoryBackend, MemoryError,
    MemoryExport, PageRequest, RecallRequest, SearchQuery, StoredScope, ThreadTurn, WarmStatus,
};
use serde::Deserialize;
use std::collections::BTreeMap;

const STYLESHEET: &str = include_str!("assets/ui.css");
const ICON: &str = include_str!("assets/icon.svg");

/// How many (user, agent) scopes the overview lists.
const MAX_LISTED_SCOPES: usize = 1000;

/// Facts or threads per page.
const PAGE_SIZE: usize = 100;

/// How many search results a search page shows.
const SEARCH_RESULTS: usize = 20;

/// The page or answer that ends a request early (boxed: a response is large).
type Refusal = Box<Response>;

/// One request's session.
struct Visit {
    id: String,
    session: Session,
    /// The session was started by this request: hand out its cookie.
    new: bool,
}

impl Ui {
    /// The session of a page view; the sign-in page when one is needed.
    fn visit(&self, headers: &HeaderMap) -> Result<Visit, Refusal> {
        let (id, session, new) = match self.sessions.find(headers) {
            Some((id, session)) => (id, session, false),
            None => {
                let (id, session) = self.sessions.start(self.token.is_none());
                (id, session, true)
            }
        };
        if session.signed_in {
            return Ok(Visit { id, session, new });
        }
        let mut response = html_page(StatusCode::UNAUTHORIZED, view::login(&session.csrf, false));
        if new {
            with_cookie(&mut response, &set_cookie(&id, self.secure_cookie));
        }
        Err(Box::new(response))
    }

    /// The session of a form post: it must exist, carry this session's
    /// CSRF token, and be signed in. Refused requests change nothing.
    fn submit(&self, headers: &HeaderMap, csrf: &str) -> Result<Visit, Refusal> {
        let Some((id, session)) = self.sessions.find(headers) else {
            return Err(Box::new(refuse(
                StatusCode::FORBIDDEN,
                "no session: reload the page and try again",
            )));
        };
        if !same_token(&session.csrf, csrf) {
            return Err(Box::new(refuse(
                StatusCode::FORBIDDEN,
                "the form's CSRF token is missing or wrong: reload the page and try again",
            )));
        }
        if !session.signed_in {
            return Err(Box::new(refuse(StatusCode::UNAUTHORIZED, "sign in first")));
        }
        Ok(Visit {
            id,
            session,
            new: false,
        })
    }

    fn render(&self, visit: &Visit, status: StatusCode, title: &str, body: Markup) -> Response {
        let frame = Frame {
            csrf: &visit.session.csrf,
            principal: visit.session.principal.as_ref(),
            backend: self.backend.name(),
            can_sign_out: self.token.is_some(),
        };
        let mut response = html_page(status, view::page(title, &frame, body));
        if visit.new {
            with_cookie(&mut response, &set_cookie(&visit.id, self.secure_cookie));
        }
        response
    }

    /// A page about a failed operation, with the operation's HTTP status.
    fn failed(&self, visit: &Visit, title: &str, what: &str, err: &MemoryError) -> Response {
        self.render(
            visit,
            status_of(err),
            title,
            view::problem(self.backend.name(), what, err),
        )
    }

    /// A page of this session's, as asked: `200 OK`.
    fn show(&self, visit: &Visit, title: &str, body: Markup) -> Response {
        self.render(visit, StatusCode::OK, title, body)
    }

    /// What an operation returned, or the page saying what failed (with
    /// `try_page!`, a handler's every load ends early the same way).
    fn loaded<T>(
        &self,
        visit: &Visit,
        title: &str,
        what: &str,
        outcome: Result<T, MemoryError>,
    ) -> Result<T, Refusal> {
        outcome.map_err(|e| Box::new(self.failed(visit, title, what, &e)))
    }
}

fn html_page(status: StatusCode, markup: Markup) -> Response {
    (status, Html(markup.into_string())).into_response()
}

fn with_cookie(response: &mut Response, cookie: &str) {
    if let Ok(value) = cookie.parse() {
        response.headers_mut().append(header::SET_COOKIE, value);
    }
}

fn refuse(status: StatusCode, reason: &'static str) -> Response {
    (status, reason).into_response()
}

/// The caller of the session, or the page asking to choose one.
fn principal(ui: &Ui, visit: &Visit, title: &str) -> Result<Caller, Refusal> {
    match &visit.session.principal {
        Some(p) => Ok(p.caller()),
        None => Err(Box::new(ui.show(
            visit,
            title,
            view::choose_principal_first(),
        ))),
    }
}

/// Both the read and the checks: `let v = try_page!(ui.visit(&headers));`.
macro_rules! try_page {
    ($e:expr) => {
        match $e {
            Ok(v) => v,
            Err(response) => return *response,
        }
    };
}

pub(super) async fn stylesheet() -> Response {
    (
        [(header::CONTENT_TYPE, "text/css; charset=utf-8")],
        STYLESHEET,
    )
        .into_response()
}

pub(super) async fn icon() -> Response {
    ([(header::CONTENT_TYPE, "image/svg+xml")], ICON).into_response()
}

#[derive(Deserialize)]
pub(super) struct CsrfOnly {
    #[serde(default)]
    csrf: String,
}

#[derive(Deserialize)]
pub(super) struct LoginForm {
    #[serde(default)]
    csrf: String,
    #[serde(default)]
    token: String,
}

pub(super) async fn login(
    State(ui): State<Ui>,
    headers: HeaderMap,
    Form(form): Form<LoginForm>,
) -> Response {
    let Some((id, session)) = ui.sessions.find(&headers) else {
        return refuse(StatusCode::FORBIDDEN, "no session: reload the page");
    };
    if !same_token(&session.csrf, &form.csrf) {
        return refuse(StatusCode::FORBIDDEN, "the form's CSRF token is wrong");
    }
    let now = std::time::Instant::now();
    if let Err(wait) = ui.sign_in.check(now) {
        let mut response = html_page(
            StatusCode::TOO_MANY_REQUESTS,
            view::login_closed(&session.csrf, wait.as_secs().max(1)),
        );
        if let Ok(value) = wait.as_secs().max(1).to_string().parse() {
            response.headers_mut().insert(header::RETRY_AFTER, value);
        }
        return response;
    }
    let accepted = ui.token.as_ref().is_none_or(|t| t.matches(&form.token));
    if !accepted {
        ui.sign_in.failed(now);
        return html_page(StatusCode::UNAUTHORIZED, view::login(&session.csrf, true));
    }
    // A fresh id on sign-in: a session id seen before sign-in is worth nothing after.
    ui.sessions.end(&id);
    let (id, _) = ui.sessions.start(true);
    let mut response = Redirect::to("/ui").into_response();
    with_cookie(&mut response, &set_cookie(&id, ui.secure_cookie));
    response
}

pub(super) async fn logout(
    State(ui): State<Ui>,
    headers: HeaderMap,
    Form(form): Form<CsrfOnly>,
) -> Response {
    let visit = try_page!(ui.submit(&headers, &form.csrf));
    ui.sessions.end(&visit.id);
    let mut response = Redirect::to("/ui").into_response();
    with_cookie(&mut response, &clear_cookie(ui.secure_cookie));
    response
}

pub(super) async fn overview(State(ui): State<Ui>, headers: HeaderMap) -> Response {
    let visit = try_page!(ui.visit(&headers));
    let current = visit.session.principal.clone();
    let caps = ui.backend.capabilities();
    let stored = ui.backend.stored_scopes(MAX_LISTED_SCOPES).await;
    let csrf = &visit.session.csrf;
    let body = html! {
        section {
            h2 { "Whose memory" }
            @match &stored {
                Ok(scopes) => {
                    p { (scopes.len()) " (user, agent) scopes in this store"
                        @if scopes.len() == MAX_LISTED_SCOPES { " (the first " (MAX_LISTED_SCOPES) ")" } "." }
                    (scope_list(csrf, scopes))
                }
                Err(e) => { (view::problem(ui.backend.name(), "Listing who this store holds memory for", e)) }
            }
            p { "Or name the user (and agent) to browse. The choice stays in this session, never in a URL." }
            form #choose method="post" action="/ui/principal" {
                (view::csrf_field(csrf))
                label { "User " input type="text" name="user" required value=[current.as_ref().map(|p| p.user.as_str())]; }
                label { "Agent " input type="text" name="agent" placeholder="(default agent)" value=[current.as_ref().and_then(|p| p.agent.as_deref())]; }
                button type="submit" { "Browse" }
            }
        }
        @if let Some(p) = &current {
            section {
                h2 { "Erase" }
                ul {
                    li { a href="/ui/forget/agent" { "Forget everything of this user under " @if p.agent.is_some() { "this agent" } @else { "the default agent" } } }
                    li { a href="/ui/forget/user" { "Forget everything of this user, under every agent" } }
                }
            }
        }
        section {
            h2 { "This backend" }
            p { "backend " b { (ui.backend.name()) } }
            (capabilities(&caps))
        }
    };
    ui.show(&visit, "Overview", body)
}

/// Users, each with a button per agent that chooses it (a POST: the names
/// never go into a URL).
fn scope_list(csrf: &str, scopes: &[StoredScope]) -> Markup {
    let mut users: BTreeMap<&str, Vec<Option<&str>>> = BTreeMap::new();
    for scope in scopes {
        users
            .entry(scope.user.as_str())
            .or_default()
            .push(scope.agent.as_deref());
    }
    html! {
        ul.scopes {
            @for (user, agents) in &users {
                li.user {
                    b { (user) }
                    @for agent in agents {
                        form.inline method="post" action="/ui/principal" {
                            (view::csrf_field(csrf))
                            input type="hidden" name="user" value=(user);
                            input type="hidden" name="agent" value=(agent.unwrap_or(""));
                            button.agent type="submit" { (agent.unwrap_or("(default agent)")) }
                        }
                    }
                }
            }
        }
    }
}

fn capabilities(caps: &memgate_core::Capabilities) -> Markup {
    let rows = [
        ("recall", caps.recall),
        ("capture", caps.capture),
        ("remember", caps.remember),
        ("search", caps.search),
        ("facts", caps.facts),
        ("import / export", caps.import_export),
    ];
    html! {
        table.capabilities {
            @for (name, on) in rows {
                tr { th { (name) } td { @if on { "yes" } @else { "not supported by this backend" } } }
            }
        }
    }
}

#[derive(Deserialize)]
pub(super) struct PrincipalForm {
    #[serde(default)]
    csrf: String,
    #[serde(default)]
    user: String,
    #[serde(default)]
    agent: String,
}

pub(super) async fn choose_principal(
    State(ui): State<Ui>,
    headers: HeaderMap,
    Form(form): Form<PrincipalForm>,
) -> Response {
    let visit = try_page!(ui.submit(&headers, &form.csrf));
    let agent = (!form.agent.is_empty()).then_some(form.agent);
    for (field, value) in [("user", Some(&form.user)), ("agent", agent.as_ref())] {
        if let Some(rule) = value.and_then(|v| id_defect(v)) {
            let err = MemoryError::invalid(field, rule);
            return ui.failed(&visit, "Overview", "Choosing the principal", &err);
        }
    }
    let chosen = Principal {
        user: form.user,
        agent,
    };
    ui.sessions.update(&visit.id, |s| {
        s.principal = Some(chosen);
        s.threads.clear();
    });
    Redirect::to("/ui/facts").into_response()
}

/// `?page=N` of a long list (a number only: nothing identifying).
#[derive(Deserialize)]
pub(super) struct Paging {
    #[serde(default)]
    page: usize,
}

/// The links between pages of a list of `total` entries.
fn pager(path: &str, page: usize, total: usize) -> Markup {
    let pages = total.div_ceil(PAGE_SIZE).max(1);
    html! {
        @if pages > 1 {
            nav.pager {
                @if page > 0 { a rel="prev" href={ (path) "?page=" (page - 1) } { "Previous" } " " }
                "page " (page + 1) " of " (pages)
                @if page + 1 < pages { " " a rel="next" href={ (path) "?page=" (page + 1) } { "Next" } }
            }
        }
    }
}

pub(super) async fn facts(
    State(ui): State<Ui>,
    headers: HeaderMap,
    Query(paging): Query<Paging>,
) -> Response {
    let visit = try_page!(ui.visit(&headers));
    let caller = try_page!(principal(&ui, &visit, "Facts"));
    let facts = try_page!(ui.loaded(
        &visit,
        "Facts",
        "Listing facts",
        ui.backend.list_facts(&caller, true).await
    ));
    let shown = facts
        .iter()
        .rev()
        .skip(paging.page * PAGE_SIZE)
        .take(PAGE_SIZE);
    let body = html! {
        p { (facts.len()) " facts, newest first (retired ones included, marked)." }
        (pager("/ui/facts", paging.page, facts.len()))
        @for f in shown { (view::fact(f, true)) }
        (pager("/ui/facts", paging.page, facts.len()))
    };
    ui.show(&visit, "Facts", body)
}

pub(super) async fn fact(
    State(ui): State<Ui>,
    headers: HeaderMap,
    Path(id): Path<String>,
) -> Response {
    let visit = try_page!(ui.visit(&headers));
    let caller = try_page!(principal(&ui, &visit, "Fact"));
    let fact = try_page!(ui.loaded(
        &visit,
        "Fact",
        "Reading the fact",
        ui.backend.get_fact(&caller, &id).await
    ));
    let history = ui.backend.fact_history(&caller, &id).await;
    let csrf = &visit.session.csrf;
    let action = |verb: &str| format!("/ui/facts/{}/{verb}", view::segment(&fact.id));
    let body = html! {
        (view::fact(&fact, false))
        @if !fact.sources.is_empty() {
            p { a #sources href=(action("sources")) { "Open the " (fact.sources.len()) " turns it rests on" } }
        }
        (history_section(ui.backend.name(), &history))
        @if fact.state == FactState::Active {
            section {
                h2 { "Revise" }
                form method="post" action=(action("revise")) {
                    (view::csrf_field(csrf))
                    label { "Kind " input type="text" name="kind" value=(fact.kind); }
                    label { "Text " textarea name="text" rows="4" { (fact.text) } }
                    button type="submit" { "Save a new version" }
                }
                form method="post" action=(action("retire")) {
                    (view::csrf_field(csrf))
                    button type="submit" { "Retire (keep, but no longer recall)" }
                }
            }
        }
        section {
            h2 { "Erase" }
            a href=(action("forget")) { "Forget this fact and every version of it" }
        }
    };
    ui.show(&visit, "Fact", body)
}

/// Every version of a fact, newest first: when, by whom, what changed.
fn history_section(backend: &str, history: &Result<Vec<Fact>, MemoryError>) -> Markup {
    html! {
        section #history {
            h2 { "Every version" }
            @match history {
                Ok(versions) => {
                    ol.versions reversed {
                        @for (i, v) in versions.iter().enumerate().rev() {
                            li.version data-version=(v.version) {
                                "version " (v.version) ", " span.at { (v.updated_at) } " by " b.by { (v.changed_by.as_str()) } ": "
                                span.change { (change(i.checked_sub(1).and_then(|p| versions.get(p)), v)) }
                                p.text { (v.text) }
                            }
                        }
                    }
                }
                Err(e) => { (view::problem(backend, "Reading the fact's versions", e)) }
            }
        }
    }
}

/// What version `now` changed from `before`, in words.
fn change(before: Option<&Fact>, now: &Fact) -> String {
    let Some(before) = before else {
        return "saved".to_owned();
    };
    let mut changed = Vec::new();
    if before.text != now.text {
        changed.push("text");
    }
    if before.kind != now.kind {
        changed.push("kind");
    }
    if (before.confidence - now.confidence).abs() > f64::EPSILON {
        changed.push("confidence");
    }
    if before.state != now.state {
        changed.push(match now.state {
            FactState::Retired => "retired",
            FactState::Active => "reactivated",
        });
    }
    if changed.is_empty() {
        "no visible change".to_owned()
    } else {
        changed.join(", ")
    }
}

#[derive(Deserialize)]
pub(super) struct ReviseForm {
    #[serde(default)]
    csrf: String,
    #[serde(default)]
    kind: String,
    #[serde(default)]
    text: String,
}

pub(super) async fn revise_fact(
    State(ui): State<Ui>,
    headers: HeaderMap,
    Path(id): Path<String>,
    Form(form): Form<ReviseForm>,
) -> Response {
    let visit = try_page!(ui.submit(&headers, &form.csrf));
    let caller = try_page!(principal(&ui, &visit, "Fact"));
    let patch = FactPatch {
        kind: Some(form.kind),
        text: Some(form.text),
        confidence: None,
    };
    let fact = try_page!(ui.loaded(
        &visit,
        "Fact",
        "Revising the fact",
        ui.backend.revise_fact(&caller, &id, &patch).await
    ));
    Redirect::to(&format!("/ui/facts/{}", view::segment(&fact.id))).into_response()
}

pub(super) async fn retire_fact(
    State(ui): State<Ui>,
    headers: HeaderMap,
    Path(id): Path<String>,
    Form(form): Form<CsrfOnly>,
) -> Response {
    let visit = try_page!(ui.submit(&headers, &form.csrf));
    let caller = try_page!(principal(&ui, &visit, "Fact"));
    let fact = try_page!(ui.loaded(
        &visit,
        "Fact",
        "Retiring the fact",
        ui.backend.retire_fact(&caller, &id).await
    ));
    Redirect::to(&format!("/ui/facts/{}", view::segment(&fact.id))).into_response()
}

/// A confirmation page: says exactly what the button erases.
fn confirmation(csrf: &str, action: &str, erases: Markup) -> Markup {
    html! {
        section.confirm {
            p { "This erases, from every file the store keeps, and cannot be undone:" }
            (erases)
            form method="post" action=(action) {
                (view::csrf_field(csrf))
                button.danger type="submit" { "Erase" }
            }
            p { a href="/ui" { "Cancel" } }
        }
    }
}

fn erased(report: &ForgetReport) -> Markup {
    html! {
        p #erased { "Erased " (report.facts) " facts (" (report.versions) " versions) and " (report.turns) " captured turns." }
    }
}

pub(super) async fn confirm_forget_fact(
    State(ui): State<Ui>,
    headers: HeaderMap,
    Path(id): Path<String>,
) -> Response {
    let visit = try_page!(ui.visit(&headers));
    let caller = try_page!(principal(&ui, &visit, "Forget a fact"));
    let fact = try_page!(ui.loaded(
        &visit,
        "Forget a fact",
        "Reading the fact",
        ui.backend.get_fact(&caller, &id).await
    ));
    let action = format!("/ui/facts/{}/forget", view::segment(&fact.id));
    let body = confirmation(
        &visit.session.csrf,
        &action,
        html! { p { "this fact, with all " (fact.version) " of its versions:" } (view::fact(&fact, false)) },
    );
    ui.show(&visit, "Forget a fact", body)
}

pub(super) async fn forget_fact(
    State(ui): State<Ui>,
    headers: HeaderMap,
    Path(id): Path<String>,
    Form(form): Form<CsrfOnly>,
) -> Response {
    let visit = try_page!(ui.submit(&headers, &form.csrf));
    let caller = try_page!(principal(&ui, &visit, "Forget a fact"));
    let report = try_page!(ui.loaded(
        &visit,
        "Forget a fact",
        "Forgetting the fact",
        ui.backend.forget(&caller, &ForgetTarget::Fact { id }).await
    ));
    ui.show(&visit, "Forgotten", erased(&report))
}

/// The recall block and its items, as `/v1/recall` returns them.
async fn recall_page(ui: &Ui, visit: &Visit, query: Option<String>) -> Response {
    let title = "What a new conversation gets";
    let caller = try_page!(principal(ui, visit, title));
    let request = RecallRequest {
        caller,
        query: query.clone(),
    };
    let recall = ui.backend.recall(&request).await;
    let body = html! {
        form method="post" action="/ui/block" {
            (view::csrf_field(&visit.session.csrf))
            label { "Query " input type="text" name="query" value=[query.as_deref()] placeholder="(none: the block injected at the start)"; }
            button type="submit" { "Recall" }
        }
        @match &recall {
            Ok(recall) => {
                h2 { @if query.is_some() { "The block for this query" } @else { "The no-query block, injected now" } }
                @if recall.is_empty() {
                    p.empty { "Nothing would be injected." }
                } @else {
                    pre #block { (recall.text) }
                }
                table.items {
                    tr { th { "kind" } th { "text" } th { "score" } th { "citation" } }
                    @for item in &recall.items {
                        tr {
                            td { (item.kind) }
                            td.text { (item.text) }
                            td { @if let Some(s) = item.score { (format!("{s:.4}")) } }
                            td { @if let Some(c) = &item.citation { (c.as_str()) } }
                        }
                    }
                }
            }
            Err(e) => { (view::problem(ui.backend.name(), "Recall", e)) }
        }
    };
    let status = recall.as_ref().err().map_or(StatusCode::OK, status_of);
    ui.render(visit, status, title, body)
}

pub(super) async fn block(State(ui): State<Ui>, headers: HeaderMap) -> Response {
    let visit = try_page!(ui.visit(&headers));
    recall_page(&ui, &visit, None).await
}

#[derive(Deserialize)]
pub(super) struct QueryForm {
    #[serde(default)]
    csrf: String,
    #[serde(default)]
    query: String,
}

pub(super) async fn block_for_query(
    State(ui): State<Ui>,
    headers: HeaderMap,
    Form(form): Form<QueryForm>,
) -> Response {
    let visit = try_page!(ui.submit(&headers, &form.csrf));
    let query = (!form.query.trim().is_empty()).then_some(form.query);
    recall_page(&ui, &visit, query).await
}

fn search_form(csrf: &str) -> Markup {
    html! {
        form method="post" action="/ui/search" {
            (view::csrf_field(csrf))
            label { "Search " input type="text" name="query" required; }
            button type="submit" { "Search" }
        }
    }
}

/// The page `n` (0-based) of a list [`PAGE_SIZE`] long.
fn page_of(n: usize) -> PageRequest {
    PageRequest {
        offset: n.saturating_mul(PAGE_SIZE),
        limit: PAGE_SIZE,
    }
}

/// Links to `names`' threads: their handles in the session.
fn thread_handles(ui: &Ui, visit: &Visit, names: &[&str]) -> Vec<usize> {
    let mut handles = Vec::new();
    ui.sessions.update(&visit.id, |s| {
        handles = names.iter().map(|name| s.thread_handle(name)).collect();
    });
    handles
}

pub(super) async fn threads(
    State(ui): State<Ui>,
    headers: HeaderMap,
    Query(paging): Query<Paging>,
) -> Response {
    let visit = try_page!(ui.visit(&headers));
    let caller = try_page!(principal(&ui, &visit, "Threads"));
    let list = match ui.backend.list_threads(&caller, page_of(paging.page)).await {
        Ok(list) => list,
        Err(e) => {
            let body = html! { (search_form(&visit.session.csrf)) (view::problem(ui.backend.name(), "Listing captured threads", &e)) };
            return ui.render(&visit, status_of(&e), "Threads", body);
        }
    };
    let names: Vec<&str> = list.threads.iter().map(|t| t.thread.as_str()).collect();
    let handles = thread_handles(&ui, &visit, &names);
    let total = usize::try_from(list.total).unwrap_or(usize::MAX);
    let body = html! {
        (search_form(&visit.session.csrf))
        p { (list.total) " captured threads." }
        (pager("/ui/threads", paging.page, total))
        ul.threads {
            @for (t, n) in list.threads.iter().zip(&handles) {
                li { a href={ "/ui/threads/" (n) } { (t.thread) } " · " (t.turns) " turns · "
                     span.at { (t.first_captured_at) } " – " span.at { (t.last_captured_at) } }
            }
        }
    };
    ui.show(&visit, "Threads", body)
}

/// The thread a session's handle names.
fn thread_of(ui: &Ui, visit: &Visit, n: usize) -> Result<String, Refusal> {
    visit.session.threads.get(n).cloned().ok_or_else(|| {
        Box::new(ui.render(
            visit,
            StatusCode::NOT_FOUND,
            "Thread",
            html! { p.problem { "No such thread in this session: open it from the " a href="/ui/threads" { "threads page" } "." } },
        ))
    })
}

/// One captured turn; its element id is its citation, so a fact's source
/// link lands on it.
fn turn(turn: &ThreadTurn, cited: bool) -> Markup {
    html! {
        li.turn.cited[cited] id=(turn.citation) {
            span.role { (turn.role) } " " span.at { (turn.captured_at) } " " span.citation { (turn.citation) }
            p.text { (turn.text) }
        }
    }
}

pub(super) async fn thread(
    State(ui): State<Ui>,
    headers: HeaderMap,
    Path(n): Path<usize>,
    Query(paging): Query<Paging>,
) -> Response {
    let visit = try_page!(ui.visit(&headers));
    let caller = try_page!(principal(&ui, &visit, "Thread"));
    let name = try_page!(thread_of(&ui, &visit, n));
    let page = try_page!(ui.loaded(
        &visit,
        "Thread",
        "Reading the thread",
        ui.backend
            .read_thread(&caller, &name, page_of(paging.page))
            .await
    ));
    let path = format!("/ui/threads/{n}");
    let total = usize::try_from(page.total).unwrap_or(usize::MAX);
    let body = html! {
        p { "Thread " b #thread-name { (name) } ": " (page.total) " turns, redacted as stored." }
        (pager(&path, paging.page, total))
        ol.turns start=(paging.page.saturating_mul(PAGE_SIZE) + 1) {
            @for t in &page.turns { (turn(t, false)) }
        }
        (pager(&path, paging.page, total))
        p { a href={ (path) "/forget" } { "Forget this thread" } }
    };
    ui.show(&visit, "Thread", body)
}

/// How many pages of a thread the sources page reads looking for a fact's
/// cited turns, at most.
const MAX_SOURCE_PAGES: usize = 100;

/// The turns a fact cites, each linked to its place in its thread.
pub(super) async fn fact_sources(
    State(ui): State<Ui>,
    headers: HeaderMap,
    Path(id): Path<String>,
) -> Response {
    let visit = try_page!(ui.visit(&headers));
    let caller = try_page!(principal(&ui, &visit, "Sources"));
    let fact = try_page!(ui.loaded(
        &visit,
        "Sources",
        "Reading the fact",
        ui.backend.get_fact(&caller, &id).await
    ));
    let Some(thread) = fact.thread.clone().filter(|_| !fact.sources.is_empty()) else {
        let body = html! { (view::fact(&fact, true)) p #no-sources { "This fact cites no captured turns." } };
        return ui.show(&visit, "Sources", body);
    };
    // (turn, page of the thread it is on), in the fact's order.
    let mut found: Vec<(ThreadTurn, usize)> = Vec::new();
    // Whether the whole thread was read: only then is a missing turn known
    // to be forgotten rather than further along than the pages read.
    let mut read_whole = false;
    for n in 0..MAX_SOURCE_PAGES {
        let request = PageRequest {
            offset: n.saturating_mul(PAGE_SIZE),
            limit: PAGE_SIZE,
        };
        let page = try_page!(ui.loaded(
            &visit,
            "Sources",
            "Reading the cited thread",
            ui.backend.read_thread(&caller, &thread, request).await
        ));
        let last = page.turns.len() < PAGE_SIZE;
        found.extend(
            page.turns
                .into_iter()
                .filter(|t| fact.sources.contains(&t.citation))
                .map(|t| (t, n)),
        );
        if last || found.len() == fact.sources.len() {
            read_whole = last;
            break;
        }
    }
    let handle = thread_handles(&ui, &visit, &[thread.as_str()])[0];
    let missing: Vec<&String> = fact
        .sources
        .iter()
        .filter(|c| !found.iter().any(|(t, _)| &t.citation == *c))
        .collect();
    let body = html! {
        (view::fact(&fact, true))
        h2 { "The turns it rests on" }
        p { "From thread " a #source-thread href={ "/ui/threads/" (handle) } { (thread) } "." }
        ol.turns {
            @for (t, page) in &found {
                (turn(t, true))
                p { a.in-thread href={ "/ui/threads/" (handle) "?page=" (page) "#" (t.citation) } { "Open " (t.citation) " in its thread" } }
            }
        }
        @if !missing.is_empty() {
            @let missing = missing.iter().map(|c| c.as_str()).collect::<Vec<_>>().join(", ");
            @if read_whole {
                p.problem { "No longer stored (forgotten): " (missing) }
            } @else {
                p.problem { "Not among the first " (MAX_SOURCE_PAGES * PAGE_SIZE) " turns of the thread, which is all this page reads: " (missing) }
            }
        }
    };
    ui.show(&visit, "Sources", body)
}

pub(super) async fn confirm_forget_thread(
    State(ui): State<Ui>,
    headers: HeaderMap,
    Path(n): Path<usize>,
) -> Response {
    let visit = try_page!(ui.visit(&headers));
    try_page!(principal(&ui, &visit, "Forget a thread"));
    let name = try_page!(thread_of(&ui, &visit, n));
    let body = confirmation(
        &visit.session.csrf,
        &format!("/ui/threads/{n}/forget"),
        html! { p { "every captured turn of thread " b { (name) } "." } },
    );
    ui.show(&visit, "Forget a thread", body)
}

pub(super) async fn forget_thread(
    State(ui): State<Ui>,
    headers: HeaderMap,
    Path(n): Path<usize>,
    Form(form): Form<CsrfOnly>,
) -> Response {
    let visit = try_page!(ui.submit(&headers, &form.csrf));
    let caller = try_page!(principal(&ui, &visit, "Forget a thread"));
    let name = try_page!(thread_of(&ui, &visit, n));
    let report = try_page!(ui.loaded(
        &visit,
        "Forget a thread",
        "Forgetting the thread",
        ui.backend
            .forget(&caller.with_thread(name), &ForgetTarget::Thread)
            .await
    ));
    ui.sessions.update(&visit.id, |s| s.threads.clear());
    let body = html! { (erased(&report)) p { a href="/ui/threads" { "Back to the threads" } } };
    ui.show(&visit, "Forgotten", body)
}

pub(super) async fn search(
    State(ui): State<Ui>,
    headers: HeaderMap,
    Form(form): Form<QueryForm>,
) -> Response {
    let visit = try_page!(ui.submit(&headers, &form.csrf));
    let caller = try_page!(principal(&ui, &visit, "Search"));
    let query = SearchQuery {
        query: form.query.clone(),
        top_k: SEARCH_RESULTS,
        kind: None,
    };
    let hits = try_page!(ui.loaded(
        &visit,
        "Search",
        "Searching",
        ui.backend.search(&caller, &query).await
    ));
    let body = html! {
        (search_form(&visit.session.csrf))
        p { (hits.len()) " results for " q { (form.query) } "." }
        table.items {
            tr { th { "kind" } th { "text" } th { "score" } th { "source" } }
            @for hit in &hits {
                tr.hit {
                    td { (hit.category) }
                    td.text { (hit.content) }
                    td { @if let Some(s) = hit.score { (format!("{s:.4}")) } }
                    td { @if let Some(s) = &hit.source { (s) } }
                }
            }
        }
    };
    ui.show(&visit, "Search", body)
}

/// `agent` (the session's user under its agent) or `user` (every agent).
fn forget_level(level: &str) -> Option<ForgetTarget> {
    match level {
        "agent" => Some(ForgetTarget::Scope),
        "user" => Some(ForgetTarget::User),
        _ => None,
    }
}

pub(super) async fn confirm_forget_scope(
    State(ui): State<Ui>,
    headers: HeaderMap,
    Path(level): Path<String>,
) -> Response {
    let visit = try_page!(ui.visit(&headers));
    let title = "Forget";
    try_page!(principal(&ui, &visit, title));
    let Some(target) = forget_level(&level) else {
        return refuse(StatusCode::NOT_FOUND, "no such erasure");
    };
    let Some(p) = &visit.session.principal else {
        return refuse(StatusCode::NOT_FOUND, "no principal");
    };
    let erases = html! {
        @if target == ForgetTarget::User {
            p { "everything stored for user " b { (p.user) } ", under every agent: facts, their versions, captured turns." }
        } @else {
            p {
                "everything stored for user " b { (p.user) } " under "
                @if let Some(agent) = &p.agent { "agent " b { (agent) } } @else { "the default agent" }
                ": facts, their versions, captured turns."
            }
        }
    };
    let body = confirmation(&visit.session.csrf, &format!("/ui/forget/{level}"), erases);
    ui.show(&visit, title, body)
}

pub(super) async fn forget_scope(
    State(ui): State<Ui>,
    headers: HeaderMap,
    Path(level): Path<String>,
    Form(form): Form<CsrfOnly>,
) -> Response {
    let visit = try_page!(ui.submit(&headers, &form.csrf));
    let caller = try_page!(principal(&ui, &visit, "Forget"));
    let Some(target) = forget_level(&level) else {
        return refuse(StatusCode::NOT_FOUND, "no such erasure");
    };
    let report = try_page!(ui.loaded(
        &visit,
        "Forget",
        "Forgetting",
        ui.backend.forget(&caller, &target).await
    ));
    ui.show(&visit, "Forgotten", erased(&report))
}

pub(super) async fn transfer(State(ui): State<Ui>, headers: HeaderMap) -> Response {
    let visit = try_page!(ui.visit(&headers));
    try_page!(principal(&ui, &visit, "Export / import"));
    let csrf = &visit.session.csrf;
    let body = html! {
        @if !ui.backend.capabilities().import_export {
            section.unsupported { p { b { "Export and import" } ": not supported by the " b { (ui.backend.name()) } " backend." } }
        }
        section {
            h2 { "Export" }
            form method="post" action="/ui/export" {
                (view::csrf_field(csrf))
                button type="submit" { "Download this principal's memory (JSON)" }
            }
        }
        section {
            h2 { "Import" }
            form method="post" action="/ui/import" {
                (view::csrf_field(csrf))
                label { "Export JSON " textarea name="data" rows="8" required {} }
                button type="submit" { "Import (merges; never duplicates)" }
            }
        }
    };
    ui.show(&visit, "Export / import", body)
}

pub(super) async fn export(
    State(ui): State<Ui>,
    headers: HeaderMap,
    Form(form): Form<CsrfOnly>,
) -> Response {
    let visit = try_page!(ui.submit(&headers, &form.csrf));
    let caller = try_page!(principal(&ui, &visit, "Export"));
    let data = try_page!(ui.loaded(
        &visit,
        "Export",
        "Exporting",
        ui.backend.export(&caller).await
    ));
    match serde_json::to_vec_pretty(&data) {
        Ok(bytes) => (
            [
                (header::CONTENT_TYPE, "application/json"),
                (
                    header::CONTENT_DISPOSITION,
                    "attachment; filename=\"memgate-export.json\"",
                ),
            ],
            bytes,
        )
            .into_response(),
        Err(e) => {
            let err = MemoryError::Corruption(format!("the export did not serialize: {e}"));
            ui.failed(&visit, "Export", "Exporting", &err)
        }
    }
}

#[derive(Deserialize)]
pub(super) struct ImportForm {
    #[serde(default)]
    csrf: String,
    #[serde(default)]
    data: String,
}

pub(super) async fn import(
    State(ui): State<Ui>,
    headers: HeaderMap,
    Form(form): Form<ImportForm>,
) -> Response {
    let visit = try_page!(ui.submit(&headers, &form.csrf));
    let caller = try_page!(principal(&ui, &visit, "Import"));
    let data: MemoryExport = match serde_json::from_str(&form.data) {
        Ok(data) => data,
        Err(e) => {
            let err = MemoryError::invalid("data", format!("must be a memgate export: {e}"));
            return ui.failed(&visit, "Import", "Importing", &err);
        }
    };
    if data.format != memgate_core::facts::EXPORT_FORMAT {
        let err = MemoryError::invalid(
            "data.format",
            format!(
                "must be {:?} (got {:?})",
                memgate_core::facts::EXPORT_FORMAT,
                data.format
            ),
        );
        return ui.failed(&visit, "Import", "Importing", &err);
    }
    let r = try_page!(ui.loaded(
        &visit,
        "Import",
        "Importing",
        ui.backend.import(&caller, &data).await
    ));
    let body = html! {
        p #imported { "Imported " (r.facts_imported) " facts (" (r.facts_already_present) " already present) and "
          (r.turns_imported) " turns (" (r.turns_already_present) " already present)." }
    };
    ui.show(&visit, "Imported", body)
}

pub(super) async fn health(State(ui): State<Ui>, headers: HeaderMap) -> Response {
    let visit = try_page!(ui.visit(&headers));
    health_page(&ui, &visit, None).await
}

/// Runs the start-up check on request: on `local` it reads the whole file
/// (`PRAGMA quick_check`), so viewing the health page never does.
pub(super) async fn health_check(
    State(ui): State<Ui>,
    headers: HeaderMap,
    Form(form): Form<CsrfOnly>,
) -> Response {
    let visit = try_page!(ui.submit(&headers, &form.csrf));
    let warm = ui.backend.warm().await;
    health_page(&ui, &visit, Some(warm)).await
}

async fn health_page(
    ui: &Ui,
    visit: &Visit,
    warm: Option<Result<WarmStatus, MemoryError>>,
) -> Response {
    let gates = ui.backend.gates();
    let diagnostics = ui.backend.diagnose().await;
    let figures = ui.backend.figures();
    let body = html! {
        section {
            h2 { "Backend" }
            p { "backend " b #backend { (ui.backend.name()) } " · memory " (if gates.enabled { "on" } else { "off" })
                " · injection " (if gates.injection_enabled { "on" } else { "off" }) }
            @match &warm {
                None => {
                    form method="post" action="/ui/health" {
                        (view::csrf_field(&visit.session.csrf))
                        "start-up check (on local it reads the whole file): "
                        button type="submit" { "Run it now" }
                    }
                }
                Some(warm) => {
                    p #warm { "start-up check: " @match warm {
                        Ok(WarmStatus::Ready) => "ready",
                        Ok(WarmStatus::NothingToWarm) => "nothing to check (embedded)",
                        Ok(WarmStatus::Degraded { reason }) => { "degraded: " (reason) },
                        Err(e) => { "failed: " (e.to_string()) },
                    } }
                }
            }
            (capabilities(&ui.backend.capabilities()))
        }
        section {
            h2 { "What doctor checks" }
            @if diagnostics.is_empty() { p { "This backend reports nothing beyond its start-up check." } }
            table {
                @for d in &diagnostics {
                    tr { th { (d.check) } td { @if d.healthy { "ok" } @else { "ACT: " } (d.detail) } }
                }
            }
        }
        section {
            h2 { "Queue, outbox and vector figures" }
            @if figures.is_empty() { p { "This backend keeps no queue or outbox figures." } }
            table {
                @for f in &figures { tr { th { (f.name) } td { (f.value) } td { (f.help) } } }
            }
        }
    };
    ui.show(visit, "Health", body)
}
