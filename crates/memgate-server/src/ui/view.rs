//! The memory browser's HTML, as maud templates: compiled into the binary,
//! and every interpolated value escaped (stored memory is untrusted text).
//! One partial per thing shown ([`fact`], [`problem`]), so each renders the
//! same way on every page.

use super::session::Principal;
use maud::{html, Markup, DOCTYPE};
use memgate_core::{Fact, FactState, MemoryError};

/// What every page's frame shows.
pub struct Frame<'a> {
    pub csrf: &'a str,
    pub principal: Option<&'a Principal>,
    pub backend: &'a str,
    /// A bearer token guards the UI, so there is a session to sign out of.
    pub can_sign_out: bool,
}

/// A whole page: header, navigation, the principal being browsed, `body`.
pub fn page(title: &str, frame: &Frame<'_>, body: Markup) -> Markup {
    html! {
        (DOCTYPE)
        html lang="en" {
            head {
                meta charset="utf-8";
                meta name="viewport" content="width=device-width, initial-scale=1";
                title { (title) " · memgate" }
                link rel="stylesheet" href="/ui/assets/ui.css";
                link rel="icon" href="/ui/assets/icon.svg";
            }
            body {
                header {
                    span.brand { "memgate" }
                    nav {
                        a href="/ui" { "Overview" }
                        a href="/ui/facts" { "Facts" }
                        a href="/ui/block" { "New conversation" }
                        a href="/ui/threads" { "Threads" }
                        a href="/ui/transfer" { "Export / import" }
                        a href="/ui/health" { "Health" }
                    }
                    span.who {
                        "backend " b { (frame.backend) }
                        @if let Some(p) = frame.principal {
                            " · user " b #principal-user { (p.user) }
                            @if let Some(agent) = &p.agent { " · agent " b #principal-agent { (agent) } }
                        }
                    }
                    @if frame.can_sign_out {
                        form.inline method="post" action="/ui/logout" {
                            (csrf_field(frame.csrf))
                            button type="submit" { "Sign out" }
                        }
                    }
                }
                main {
                    h1 { (title) }
                    (body)
                }
            }
        }
    }
}

/// The sign-in page (the bearer token, posted once; a session cookie after).
pub fn login(csrf: &str, refused: bool) -> Markup {
    let notice = refused
        .then(|| html! { p.problem #login-refused { "That is not the server's bearer token." } });
    login_page(csrf, notice)
}

/// The sign-in page while too many wrong tokens keep it closed.
pub fn login_closed(csrf: &str, wait_seconds: u64) -> Markup {
    let notice = html! {
        p.problem #login-closed {
            "Too many wrong tokens: sign-in is closed for " (wait_seconds) " s (at most "
            (super::throttle::MAX_FAILURES) " wrong tokens per " (super::throttle::WINDOW.as_secs()) " s)."
        }
    };
    login_page(csrf, Some(notice))
}

fn login_page(csrf: &str, notice: Option<Markup>) -> Markup {
    html! {
        (DOCTYPE)
        html lang="en" {
            head {
                meta charset="utf-8";
                title { "Sign in · memgate" }
                link rel="stylesheet" href="/ui/assets/ui.css";
                link rel="icon" href="/ui/assets/icon.svg";
            }
            body {
                main {
                    h1 { "Sign in" }
                    @if let Some(notice) = notice { (notice) }
                    p { "This memgate server is guarded by a bearer token. Enter it once; the browser keeps an HttpOnly session cookie." }
                    form method="post" action="/ui/login" {
                        (csrf_field(csrf))
                        label { "Bearer token " input type="password" name="token" autocomplete="off" required; }
                        button type="submit" { "Sign in" }
                    }
                }
            }
        }
    }
}

/// The hidden field every state-changing form carries.
pub fn csrf_field(csrf: &str) -> Markup {
    html! { input type="hidden" name="csrf" value=(csrf); }
}

/// One fact, the same on every page. Fields the fact model gains later
/// (origin, source turns, validity, confidence) belong here, once.
pub fn fact(fact: &Fact, link: bool) -> Markup {
    let state = match fact.state {
        FactState::Active => "active",
        FactState::Retired => "retired",
    };
    html! {
        article.fact data-state=(state) {
            p.text { (fact.text) }
            dl {
                dt { "kind" } dd.kind { (fact.kind) }
                dt { "state" } dd.state { (state) }
                dt { "version" } dd.version { (fact.version) }
                dt { "origin" } dd.origin { (fact.origin.as_str()) }
                dt { "confidence" } dd.confidence { (format!("{:.2}", fact.confidence)) }
                dt { "saved" } dd { (fact.created_at) }
                dt { "last changed" } dd.updated { (fact.updated_at) " by " (fact.changed_by.as_str()) }
                @if let Some(said) = &fact.said_at { dt { "said" } dd.said { (said) } }
                @if let Some(thread) = &fact.thread { dt { "thread" } dd.thread { (thread) } }
                @if !fact.sources.is_empty() {
                    dt { "rests on" } dd.sources { (fact.sources.join(", ")) }
                }
                @if let Some(until) = &fact.valid_to { dt { "true until" } dd.valid_to { (until) } }
                @if let Some(by) = &fact.superseded_by { dt { "superseded by" } dd.superseded_by { (by) } }
            }
            @if link {
                a.open href={ "/ui/facts/" (segment(&fact.id)) } { "Open" }
            }
        }
    }
}

/// A failed operation. A backend that cannot do something says so; it is
/// never shown as an empty list.
pub fn problem(backend: &str, what: &str, err: &MemoryError) -> Markup {
    html! {
        @if let MemoryError::Unsupported { .. } = err {
            section.unsupported {
                p { b { (what) } ": not supported by the " b { (backend) } " backend." }
            }
        } @else {
            section.problem {
                p { b { (what) } " failed: " (err.to_string()) }
            }
        }
    }
}

/// Asks for a principal before a page that needs one.
pub fn choose_principal_first() -> Markup {
    html! {
        p.problem { "Choose whose memory to browse first, on the " a href="/ui" { "overview" } "." }
    }
}

/// A URL path segment for an opaque id (fact ids are generated by the
/// store; percent-encoding keeps any byte from changing the path).
pub fn segment(id: &str) -> String {
    id.bytes()
        .map(|b| {
            if b.is_ascii_alphanumeric() || b == b'-' || b == b'_' {
                (b as char).to_string()
            } else {
                format!("%{b:02X}")
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn memory_text_is_escaped_in_text_and_attributes() {
        let hostile = Fact {
            id: "m\"><script>alert(1)</script>".into(),
            kind: "<b>kind</b>".into(),
            text: "<img src=x onerror=alert(1)>".into(),
            state: FactState::Active,
            version: 1,
            created_at: "2026-01-01T00:00:00Z".into(),
            updated_at: "2026-01-01T00:00:00Z".into(),
            origin: Default::default(),
            confidence: 1.0,
            sources: Vec::new(),
            thread: Some("<script>alert(2)</script>".into()),
            said_at: None,
            valid_to: None,
            superseded_by: None,
            changed_by: Default::default(),
        };
        let html = fact(&hostile, true).into_string();
        assert!(!html.contains("<img"), "{html}");
        assert!(!html.contains("<script"), "{html}");
        assert!(html.contains("&lt;script&gt;alert(2)"), "{html}");
        assert!(!html.contains("<b>kind"), "{html}");
        assert!(
            html.contains("&lt;img src=x onerror=alert(1)&gt;"),
            "{html}"
        );
        assert!(html.contains("/ui/facts/m%22%3E%3Cscript%3E"), "{html}");
    }
}
