//! Tool dispatch with the host's principal: identity never comes from the
//! model's arguments, the `default` fallback reaches the backend as-is, and
//! tools are offered only when the backend can serve them.

mod common;

use common::{local_backend, Spy};
use memgate_core::noop::NoopBackend;
use memgate_core::{BackendContext, Caller, MemoryBackend, UserId};
use memgate_host::{HostSettings, HostTools, MemoryHost, SaveReport, ToolContext};
use memgate_powercontext::settings::{ENV_BASE_URL, ENV_OWNER_USER_ID, ENV_SCOPE_ID, ENV_TOKEN};
use memgate_powercontext::PowerContextBackend;
use serde_json::json;
use std::collections::HashMap;
use std::sync::Arc;

fn alice_ctx() -> ToolContext {
    ToolContext::new(Caller::new("alice").with_thread("t1"))
}

#[tokio::test]
async fn identity_arguments_are_refused_and_the_backend_sees_no_call() {
    let (local, _dir) = local_backend();
    let backend = Arc::new(Spy::new(local));
    let tools = HostTools::new(backend.clone(), true);
    for args in [
        json!({"text": "money amounts are integer cents", "user_id": "mallory"}),
        json!({"text": "money amounts are integer cents", "scope_id": "scp_other"}),
        json!({"text": "money amounts are integer cents", "owner_user_id": "mallory"}),
        json!({"text": "money amounts are integer cents", "token": "t"}),
    ] {
        let result = tools
            .dispatch(&alice_ctx(), "memgate_remember", &args)
            .await
            .expect("remember is offered");
        assert!(result.is_error, "{args}");
        let report = SaveReport::from_result(&result).to_string();
        assert!(
            report.contains("identity and scope come from the host"),
            "{report}"
        );
    }
    assert!(
        backend.calls.all().is_empty(),
        "no call reached the backend"
    );
    let facts = backend
        .inner
        .list_facts(&Caller::new("mallory"), true)
        .await
        .unwrap();
    assert!(facts.is_empty());
}

#[tokio::test]
async fn the_principal_comes_from_the_host_context() {
    let (local, _dir) = local_backend();
    let backend = Arc::new(Spy::new(local));
    let tools = HostTools::new(backend.clone(), true);
    let ctx = ToolContext::new(Caller::new("alice").with_agent("coder").with_thread("t1"));
    let result = tools
        .dispatch_json(
            &ctx,
            "memgate.remember",
            r#"{"text": " money amounts are integer cents ", "kind": "preference"}"#,
        )
        .await
        .unwrap();
    assert!(!result.is_error, "{result:?}");
    assert!(matches!(
        SaveReport::from_result(&result),
        SaveReport::Stored(_)
    ));
    let remembers = backend.calls.remembers();
    assert_eq!(remembers.len(), 1);
    assert_eq!(remembers[0].0, *ctx.principal());
    assert_eq!(remembers[0].1.text, "money amounts are integer cents");
    assert_eq!(remembers[0].1.kind, "preference");

    // The same save again is reported as already present, from the store.
    let again = tools
        .dispatch(
            &ctx,
            "remember",
            &json!({"text": "money amounts are integer cents", "kind": "preference"}),
        )
        .await
        .unwrap();
    assert!(
        matches!(
            SaveReport::from_result(&again),
            SaveReport::AlreadyPresent(_)
        ),
        "{again:?}"
    );
}

#[tokio::test]
async fn the_default_fallback_is_passed_through_as_is() {
    let (local, _dir) = local_backend();
    let backend = Arc::new(Spy::new(local));
    let tools = HostTools::new(backend.clone(), true);
    let ctx = ToolContext::from_host(None, None, Some("t1"));
    tools
        .dispatch(&ctx, "remember", &json!({"text": "x"}))
        .await
        .unwrap();
    let remembers = backend.calls.remembers();
    assert!(remembers[0].0.user.is_default_fallback());
    assert_eq!(remembers[0].0.user, UserId::default_fallback());
}

/// An owner-bound backend pointed at a port nothing listens on: a refusal
/// must come before any request (a request would fail differently).
fn powercontext_bound_to(owner: &str) -> Arc<dyn MemoryBackend> {
    let vars: HashMap<&str, String> = [
        (ENV_BASE_URL, "http://127.0.0.1:9".to_owned()),
        (ENV_OWNER_USER_ID, owner.to_owned()),
        (ENV_SCOPE_ID, "scp_host_test".to_owned()),
        (ENV_TOKEN, "host-test-token-4f2a".to_owned()),
    ]
    .into_iter()
    .collect();
    let ctx = BackendContext::new("/tmp/memgate-host-tests")
        .with_env(Arc::new(move |name| vars.get(name).cloned()));
    Arc::new(PowerContextBackend::from_backend_config(&serde_json::Map::new(), &ctx).unwrap())
}

#[tokio::test]
async fn an_owner_bound_backend_refuses_the_default_fallback_without_a_request() {
    let tools = HostTools::new(powercontext_bound_to("user-7f3a"), true);
    assert_eq!(tools.specs().len(), 1, "PowerContext can remember");
    for ctx in [
        ToolContext::from_host(None, None, Some("t1")),
        ToolContext::from_host(Some(""), None, Some("t1")),
        ToolContext::from_host(Some("default"), None, Some("t1")),
        ToolContext::from_host(Some("mallory"), None, Some("t1")),
    ] {
        let result = tools
            .dispatch(
                &ctx,
                "remember",
                &json!({"text": "money amounts are integer cents"}),
            )
            .await
            .unwrap();
        assert!(result.is_error, "{ctx:?}");
        assert_eq!(
            result.content["error"]["code"], "rejected_identity",
            "{result:?}"
        );
        let text = result.content.to_string();
        assert!(!text.contains("host-test-token-4f2a"), "{text}");
    }
}

#[tokio::test]
async fn tools_are_offered_only_when_switched_on_and_the_backend_can_remember() {
    let (local, _dir) = local_backend();
    let local: Arc<dyn MemoryBackend> = Arc::new(local);
    let offered = HostTools::new(local.clone(), true).specs();
    assert_eq!(offered.len(), 1);
    assert_eq!(offered[0].qualified_name("_"), "memgate_remember");
    assert_eq!(offered[0].input_schema["additionalProperties"], false);
    assert!(offered[0].description.contains("local backend"));

    let off = HostTools::new(local.clone(), false);
    assert!(off.specs().is_empty());
    assert!(off
        .dispatch(&alice_ctx(), "remember", &json!({"text": "x"}))
        .await
        .is_none());

    let noop = HostTools::new(Arc::new(NoopBackend), true);
    assert!(noop.specs().is_empty(), "noop cannot remember");
    assert!(!noop.handles("remember"));

    // The host facade wires the tool switch from its settings.
    let host = MemoryHost::new(
        memgate_assembly::AssembledBackend::with_defaults(local),
        HostSettings {
            remember_tool: false,
            ..HostSettings::default()
        },
    );
    assert!(host.tools().specs().is_empty());
}

#[tokio::test]
async fn unknown_tools_and_bad_json_are_answered_without_a_backend_call() {
    let (local, _dir) = local_backend();
    let backend = Arc::new(Spy::new(local));
    let tools = HostTools::new(backend.clone(), true);
    assert!(tools
        .dispatch(&alice_ctx(), "search_web", &json!({}))
        .await
        .is_none());
    let bad = tools
        .dispatch_json(&alice_ctx(), "remember", "{not json")
        .await
        .unwrap();
    assert!(bad.is_error);
    assert_eq!(bad.content["error"]["code"], "invalid_input");
    assert!(bad.content["error"]["message"]
        .as_str()
        .unwrap()
        .starts_with("invalid arguments: must be a JSON object"));
    let missing = tools
        .dispatch_json(&alice_ctx(), "remember", "")
        .await
        .unwrap();
    assert_eq!(
        missing.content["error"]["message"],
        "invalid text: is required"
    );
    assert!(backend.calls.all().is_empty());
}
