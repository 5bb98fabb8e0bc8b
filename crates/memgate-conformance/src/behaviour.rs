//! The behaviours, one function each. Every function opens fresh storage, so
//! they run in any order and in parallel.

use crate::Subject;
use memgate_core::facts::ExportedTurn;
use memgate_core::{
    Caller, CaptureKind, CaptureRequest, FactPatch, FactState, MemoryBackend, MemoryError,
    MemoryExport, Message, RecallRequest, RememberOutcome, RememberRequest, SearchQuery, ToolCall,
};
use serde_json::json;
use std::collections::HashSet;
use std::sync::Arc;

pub(crate) fn alice() -> Caller {
    Caller::new("alice")
}

pub(crate) fn capture(caller: &Caller, thread: &str, messages: Vec<Message>) -> CaptureRequest {
    CaptureRequest {
        caller: caller.clone().with_thread(thread),
        messages,
        kind: CaptureKind::AfterTurn,
        trace_id: None,
    }
}

pub(crate) fn recall_of(caller: &Caller, query: Option<&str>) -> RecallRequest {
    RecallRequest {
        caller: caller.clone(),
        query: query.map(str::to_owned),
    }
}

pub(crate) fn fact(text: &str) -> RememberRequest {
    RememberRequest::new("fact", text).unwrap()
}

pub(crate) async fn stored(b: &dyn MemoryBackend, caller: &Caller, text: &str) -> String {
    match b.remember(caller, &fact(text)).await.unwrap() {
        RememberOutcome::Stored { citation } => citation.0,
        other => panic!("expected stored, got {other:?}"),
    }
}

pub(crate) fn cited(recall: &memgate_core::Recall) -> Vec<String> {
    recall
        .items
        .iter()
        .filter_map(|i| i.citation.as_ref().map(|c| c.0.clone()))
        .collect()
}

/// A numbered conversation: human and AI turns with stable ids.
pub(crate) fn conversation(prefix: &str, n: usize) -> Vec<Message> {
    (0..n)
        .map(|i| {
            let text = format!("{prefix} line {i} about topic{i}");
            if i % 2 == 0 {
                Message::human(text).with_id(format!("{prefix}-{i}"))
            } else {
                Message::ai(text).with_id(format!("{prefix}-{i}"))
            }
        })
        .collect()
}

/// The (user, agent) scopes a store holds, for the memory browser: every
/// user with each agent, the default agent as `None`, ordered, bounded.
pub async fn stored_scopes_list_users_and_agents_in_order(s: &impl Subject) {
    let b = s.fresh().await.backend;
    assert_eq!(b.stored_scopes(10).await.unwrap(), vec![]);
    stored(
        &*b,
        &Caller::new("bob").with_agent("coder"),
        "bob codes in rust",
    )
    .await;
    stored(&*b, &alice(), "alice likes tea").await;
    b.capture(&capture(
        &alice().with_agent("planner"),
        "t1",
        vec![Message::human("plan the week")],
    ))
    .await
    .unwrap();
    let scope = |user: &str, agent: Option<&str>| memgate_core::StoredScope {
        user: user.to_owned(),
        agent: agent.map(str::to_owned),
    };
    let all = vec![
        scope("alice", None),
        scope("alice", Some("planner")),
        scope("bob", Some("coder")),
    ];
    assert_eq!(b.stored_scopes(10).await.unwrap(), all);
    assert_eq!(b.stored_scopes(2).await.unwrap(), all[..2].to_vec());
}

/// Every version of a fact, oldest first, each with who changed it; the
/// history of another scope's fact is not found.
pub async fn fact_history_lists_every_version_with_who_changed_it(s: &impl Subject) {
    let b = s.fresh().await.backend;
    let id = stored(&*b, &alice(), "my editor is emacs").await;
    let patch = FactPatch {
        kind: None,
        text: Some("my editor is helix".into()),
        confidence: None,
    };
    b.revise_fact(&alice(), &id, &patch).await.unwrap();
    b.retire_fact(&alice(), &id).await.unwrap();
    let history = b.fact_history(&alice(), &id).await.unwrap();
    let seen: Vec<_> = history
        .iter()
        .map(|f| (f.version, f.text.as_str(), f.state))
        .collect();
    assert_eq!(
        seen,
        vec![
            (1, "my editor is emacs", FactState::Active),
            (2, "my editor is helix", FactState::Active),
            (3, "my editor is helix", FactState::Retired),
        ]
    );
    assert!(history
        .iter()
        .all(|f| f.id == id && !f.updated_at.is_empty()));
    assert!(matches!(
        b.fact_history(&Caller::new("bob"), &id).await.unwrap_err(),
        MemoryError::NotFound(_)
    ));
}

/// Threads by name a page at a time with counts and times, and one
/// thread's turns in order a page at a time, citable like a fact's sources.
pub async fn threads_list_and_read_a_page_at_a_time(s: &impl Subject) {
    use memgate_core::PageRequest;
    let b = s.fresh().await.backend;
    let empty = b
        .list_threads(&alice(), PageRequest::new(0, 10).unwrap())
        .await
        .unwrap();
    assert_eq!((empty.total, empty.threads.len()), (0, 0));
    for (thread, n) in [("t-b", 3), ("t-a", 5), ("t-c", 1)] {
        b.capture(&capture(&alice(), thread, conversation(thread, n)))
            .await
            .unwrap();
    }
    b.capture(&capture(&Caller::new("bob"), "t-z", conversation("bob", 2)))
        .await
        .unwrap();
    let first = b
        .list_threads(&alice(), PageRequest::new(0, 2).unwrap())
        .await
        .unwrap();
    assert_eq!(first.total, 3);
    let named: Vec<_> = first
        .threads
        .iter()
        .map(|t| (t.thread.as_str(), t.turns))
        .collect();
    assert_eq!(named, vec![("t-a", 5), ("t-b", 3)]);
    let a = &first.threads[0];
    assert!(!a.first_captured_at.is_empty() && a.first_captured_at <= a.last_captured_at);
    let rest = b
        .list_threads(&alice(), PageRequest::new(2, 2).unwrap())
        .await
        .unwrap();
    assert_eq!(rest.threads.len(), 1);
    assert_eq!(rest.threads[0].thread, "t-c");

    let page = b
        .read_thread(&alice(), "t-a", PageRequest::new(1, 3).unwrap())
        .await
        .unwrap();
    assert_eq!(page.total, 5);
    let texts: Vec<_> = page.turns.iter().map(|t| t.text.as_str()).collect();
    let all: Vec<String> = conversation("t-a", 5)
        .iter()
        .map(|m| m.text().to_owned())
        .collect();
    assert_eq!(
        texts,
        all[1..4].iter().map(String::as_str).collect::<Vec<_>>()
    );
    assert!(page.turns.iter().all(|t| t.citation.starts_with("turn_")));
    let other = b
        .read_thread(
            &Caller::new("carol"),
            "t-a",
            PageRequest::new(0, 10).unwrap(),
        )
        .await
        .unwrap();
    assert_eq!((other.total, other.turns.len()), (0, 0));
}

pub async fn remember_stores_once_and_cites(s: &impl Subject) {
    let b = s.fresh().await.backend;
    let id = stored(&*b, &alice(), "I prefer tabs over spaces").await;
    assert!(id.starts_with("mem_"), "{id}");
    // Normalised the same way (NFC, trimmed): the same memory.
    match b
        .remember(&alice(), &fact("  I prefer tabs over spaces\n"))
        .await
        .unwrap()
    {
        RememberOutcome::AlreadyPresent {
            citation: Some(c), ..
        } => assert_eq!(c.0, id),
        other => panic!("{other:?}"),
    }
    // Another kind with the same text is another memory.
    let pref = RememberRequest::new("preference", "I prefer tabs over spaces").unwrap();
    assert!(matches!(
        b.remember(&alice(), &pref).await.unwrap(),
        RememberOutcome::Stored { .. }
    ));
    let got = b.get_fact(&alice(), &id).await.unwrap();
    assert_eq!(
        (got.text.as_str(), got.kind.as_str(), got.version, got.state),
        ("I prefer tabs over spaces", "fact", 1, FactState::Active)
    );
    assert_eq!(b.list_facts(&alice(), false).await.unwrap().len(), 2);
}

pub async fn bad_remember_input_names_the_field_and_keeps_what_was_stored(s: &impl Subject) {
    let b = s.fresh().await.backend;
    let id = stored(&*b, &alice(), "kept").await;
    let blank = RememberRequest {
        kind: "fact".into(),
        text: "   ".into(),
        confidence: None,
    };
    match b.remember(&alice(), &blank).await.unwrap_err() {
        MemoryError::InvalidInput { field, .. } => assert_eq!(field, "text"),
        other => panic!("{other:?}"),
    }
    let long = RememberRequest {
        kind: "fact".into(),
        text: "x".repeat(9000),
        confidence: None,
    };
    assert!(matches!(
        b.remember(&alice(), &long).await.unwrap_err(),
        MemoryError::InvalidInput { .. }
    ));
    let e = b
        .revise_fact(&alice(), &id, &FactPatch::default())
        .await
        .unwrap_err();
    assert!(
        matches!(e, MemoryError::InvalidInput { ref field, .. } if field == "patch"),
        "{e}"
    );
    for bad in ["mem_", "turn_1", "mem_999999"] {
        assert!(matches!(
            b.get_fact(&alice(), bad).await.unwrap_err(),
            MemoryError::NotFound(_)
        ));
    }
    let facts = b.list_facts(&alice(), true).await.unwrap();
    assert_eq!(facts.len(), 1);
    assert_eq!(facts[0].text, "kept");
}

/// Issue 33: a fact saved with a confidence reads it back (not a fixed
/// 0.5), a revision of confidence alone is a new version with the new
/// value (not a silent no-op), and a confidence outside 0..1 is refused by
/// name with nothing changed. Facts saved without one are explicit, 1.0.
pub async fn confidence_is_stored_and_a_revision_of_confidence_alone_changes_it(s: &impl Subject) {
    let b = s.fresh().await.backend;
    let sure = RememberRequest::new("fact", "works on the billing team")
        .unwrap()
        .with_confidence(Some(0.9))
        .unwrap();
    let id = match b.remember(&alice(), &sure).await.unwrap() {
        RememberOutcome::Stored { citation } => citation.as_str().to_owned(),
        other => panic!("{other:?}"),
    };
    let fact = b.get_fact(&alice(), &id).await.unwrap();
    assert_eq!(fact.confidence, 0.9);
    assert_eq!(fact.origin, memgate_core::FactOrigin::Explicit);
    let plain = stored(&*b, &alice(), "prefers tea").await;
    assert_eq!(b.get_fact(&alice(), &plain).await.unwrap().confidence, 1.0);

    let patch = FactPatch {
        confidence: Some(0.4),
        ..FactPatch::default()
    };
    let revised = b.revise_fact(&alice(), &id, &patch).await.unwrap();
    assert_eq!((revised.version, revised.confidence), (2, 0.4));
    assert_eq!(revised.text, "works on the billing team");
    assert_eq!(b.get_fact(&alice(), &id).await.unwrap().confidence, 0.4);
    // The same confidence again is no new version.
    assert_eq!(
        b.revise_fact(&alice(), &id, &patch).await.unwrap().version,
        2
    );

    let bad = FactPatch {
        confidence: Some(1.5),
        ..FactPatch::default()
    };
    let err = b.revise_fact(&alice(), &id, &bad).await.unwrap_err();
    assert!(err.to_string().contains("confidence"), "{err}");
    assert_eq!(b.get_fact(&alice(), &id).await.unwrap().confidence, 0.4);
    assert!(RememberRequest::new("fact", "x")
        .unwrap()
        .with_confidence(Some(f64::NAN))
        .is_err());
}

pub async fn revise_keeps_history_and_refuses_duplicates_and_retired(s: &impl Subject) {
    let b = s.fresh().await.backend;
    let id = stored(&*b, &alice(), "my editor is emacs").await;
    let other = stored(&*b, &alice(), "my shell is zsh").await;
    let patch = FactPatch {
        kind: None,
        text: Some("my editor is helix".into()),
        confidence: None,
    };
    let revised = b.revise_fact(&alice(), &id, &patch).await.unwrap();
    assert_eq!((revised.id.as_str(), revised.version), (id.as_str(), 2));
    assert_eq!(revised.text, "my editor is helix");
    // The old text is no longer recalled; the new one is.
    let found = b
        .search(&alice(), &SearchQuery::new("helix"))
        .await
        .unwrap();
    assert_eq!(found.first().map(|h| h.id.as_str()), Some(id.as_str()));
    assert!(b
        .search(&alice(), &SearchQuery::new("emacs"))
        .await
        .unwrap()
        .is_empty());
    // A revision onto another active memory's text is a conflict.
    let dup = FactPatch {
        kind: None,
        text: Some("my shell is zsh".into()),
        confidence: None,
    };
    assert!(matches!(
        b.revise_fact(&alice(), &id, &dup).await.unwrap_err(),
        MemoryError::Conflict(_)
    ));
    let retired = b.retire_fact(&alice(), &other).await.unwrap();
    assert_eq!((retired.state, retired.version), (FactState::Retired, 2));
    assert!(matches!(
        b.revise_fact(&alice(), &other, &patch).await.unwrap_err(),
        MemoryError::Conflict(_)
    ));
    // Retiring twice changes nothing.
    assert_eq!(b.retire_fact(&alice(), &other).await.unwrap().version, 2);
}

pub async fn retired_memories_leave_recall_and_search_but_stay_listed(s: &impl Subject) {
    let b = s.fresh().await.backend;
    let id = stored(&*b, &alice(), "allergic to peanuts").await;
    b.retire_fact(&alice(), &id).await.unwrap();
    let recall = b
        .recall(&recall_of(&alice(), Some("peanuts")))
        .await
        .unwrap();
    assert!(recall.is_empty(), "{}", recall.text);
    assert!(b
        .search(&alice(), &SearchQuery::new("peanuts"))
        .await
        .unwrap()
        .is_empty());
    assert!(b.list_facts(&alice(), false).await.unwrap().is_empty());
    let all = b.list_facts(&alice(), true).await.unwrap();
    assert_eq!(all.len(), 1);
    assert_eq!(all[0].state, FactState::Retired);
    // Remembering it again stores a new active copy.
    let again = stored(&*b, &alice(), "allergic to peanuts").await;
    assert_ne!(again, id);
}

pub async fn capture_is_idempotent_per_thread_signature(s: &impl Subject) {
    let b = s.fresh().await.backend;
    let snapshot = conversation("c", 4);
    let first = b
        .capture(&capture(&alice(), "t1", snapshot.clone()))
        .await
        .unwrap();
    assert_eq!(
        (first.stored, first.already_known, first.filtered),
        (4, 0, 0)
    );
    let again = b
        .capture(&capture(&alice(), "t1", snapshot.clone()))
        .await
        .unwrap();
    assert_eq!((again.stored, again.already_known), (0, 4));
    let longer = conversation("c", 6);
    let more = b.capture(&capture(&alice(), "t1", longer)).await.unwrap();
    assert_eq!((more.stored, more.already_known), (2, 4));
    // The same messages in another thread are that thread's own turns.
    let other = b.capture(&capture(&alice(), "t2", snapshot)).await.unwrap();
    assert_eq!(other.stored, 4);
    let export = b.export(&alice()).await.unwrap();
    assert_eq!(export.turns.len(), 10);
    let t1: Vec<&str> = export
        .turns
        .iter()
        .filter(|t| t.thread == "t1")
        .map(|t| t.text.as_str())
        .collect();
    let expected: Vec<String> = (0..6)
        .map(|i| format!("c line {i} about topic{i}"))
        .collect();
    assert_eq!(t1, expected, "turns keep their order");
}

pub async fn capture_filters_plumbing_hidden_and_injected_messages(s: &impl Subject) {
    let b = s.fresh().await.backend;
    let call = Message::ai("Let me look.").with_tool_calls(vec![ToolCall::new(
        "search",
        json!({}),
        Some("c1".into()),
    )]);
    let messages = vec![
        Message::system("be nice"),
        Message::human("what is the weather in oslo"),
        call,
        Message::tool("rainy", "c1"),
        Message::ai("It is rainy in Oslo."),
        Message::human("<memory>old</memory>")
            .with_id("m__memory")
            .with_flag("dynamic_context_reminder", true)
            .with_flag("hide_from_ui", true),
        Message::human("a hidden reminder").with_flag("hide_from_ui", true),
        Message::human("   "),
    ];
    let r = b.capture(&capture(&alice(), "t", messages)).await.unwrap();
    assert_eq!((r.stored, r.already_known, r.filtered), (2, 0, 6));
    let texts: Vec<String> = b
        .export(&alice())
        .await
        .unwrap()
        .turns
        .into_iter()
        .map(|t| t.text)
        .collect();
    assert_eq!(
        texts,
        ["what is the weather in oslo", "It is rainy in Oslo."]
    );
}

pub async fn capture_requires_a_thread(s: &impl Subject) {
    let b = s.fresh().await.backend;
    let request = CaptureRequest {
        caller: alice(),
        messages: vec![Message::human("hello")],
        kind: CaptureKind::AfterTurn,
        trace_id: None,
    };
    match b.capture(&request).await.unwrap_err() {
        MemoryError::InvalidInput { field, .. } => assert_eq!(field, "thread"),
        other => panic!("{other:?}"),
    }
    assert!(b.export(&alice()).await.unwrap().turns.is_empty());
}

pub async fn recall_cites_relevant_memory_within_the_budget(s: &impl Subject) {
    let b = s.fresh().await.backend;
    assert!(b
        .recall(&recall_of(&alice(), Some("anything")))
        .await
        .unwrap()
        .is_empty());
    let id = stored(&*b, &alice(), "My daughter's birthday is on 12 March").await;
    for i in 0..40 {
        stored(
            &*b,
            &alice(),
            &format!("filler note {i}: {}", "lorem ipsum ".repeat(40)),
        )
        .await;
    }
    let recall = b
        .recall(&recall_of(
            &alice(),
            Some("When is my daughter's birthday?"),
        ))
        .await
        .unwrap();
    assert!(
        recall.text.starts_with("Recalled memory"),
        "{}",
        recall.text
    );
    assert_eq!(cited(&recall).first(), Some(&id), "{}", recall.text);
    assert!(recall.text.contains(&format!("[{id}]")));
    // The default budget (12000 characters) holds with far more than that stored.
    assert!(recall.text.chars().count() <= 12_000);
}

pub async fn recall_without_query_carries_standing_memories(s: &impl Subject) {
    let b = s.fresh().await.backend;
    let id = stored(&*b, &alice(), "money amounts are integer cents").await;
    let recall = b.recall(&recall_of(&alice(), None)).await.unwrap();
    assert_eq!(cited(&recall), std::slice::from_ref(&id));
    let unrelated = b
        .recall(&recall_of(&alice(), Some("add a refund calculation")))
        .await
        .unwrap();
    assert_eq!(cited(&unrelated), [id]);
}

pub async fn recall_finds_a_reply_through_its_question(s: &impl Subject) {
    let b = s.fresh().await.backend;
    let mut messages = vec![
        Message::human("Which text editor do you recommend?").with_id("q"),
        Message::ai("Helix, with its default keymap.").with_id("a"),
    ];
    messages.extend(conversation("noise", 10));
    b.capture(&capture(&alice(), "t", messages)).await.unwrap();
    let recall = b
        .recall(&recall_of(&alice(), Some("text editor recommendation")))
        .await
        .unwrap();
    let texts: Vec<&str> = recall.items.iter().map(|i| i.text.as_str()).collect();
    assert!(
        texts.contains(&"Helix, with its default keymap."),
        "{}",
        recall.text
    );
    assert_eq!(texts.first(), Some(&"Which text editor do you recommend?"));
}

/// Query planning (both backends): a term matching more documents than the
/// postings budget is left out when rarer terms are there, and a query of
/// common terms only returns the newest matches.
pub async fn common_query_terms_do_not_drown_a_rare_one(s: &impl Subject) {
    let b = s.fresh().await.backend;
    // More matches of the common terms than either store scores (local's
    // MaxScore walks 2,000 postings, postgres scores 600).
    let n = 2_100;
    let mut messages: Vec<Message> = (0..n)
        .map(|i| {
            Message::human(format!("project status update number {i}")).with_id(format!("c-{i}"))
        })
        .collect();
    messages.insert(
        350,
        Message::human("the zebra project is paused").with_id("z"),
    );
    // Would score best on both common terms, but is old: a plan of common
    // terms only ranks by recency, so it stays out of the newest five.
    messages.insert(
        10,
        Message::human("project project status status status").with_id("old"),
    );
    let report = b.capture(&capture(&alice(), "t", messages)).await.unwrap();
    assert_eq!(report.stored, n + 2);
    let search = |q: &str| SearchQuery {
        top_k: 5,
        ..SearchQuery::new(q)
    };
    let hits = b.search(&alice(), &search("project zebra")).await.unwrap();
    assert_eq!(hits[0].content, "the zebra project is paused", "{hits:?}");
    let recall = b
        .recall(&recall_of(&alice(), Some("zebra project?")))
        .await
        .unwrap();
    assert!(recall.text.contains("zebra"), "{}", recall.text);
    let hits = b.search(&alice(), &search("project status")).await.unwrap();
    let newest: Vec<&str> = hits.iter().map(|h| h.content.as_str()).collect();
    assert_eq!(
        newest,
        (n - 5..n)
            .rev()
            .map(|i| format!("project status update number {i}"))
            .collect::<Vec<_>>(),
    );
}

pub async fn search_filters_by_kind_before_the_cut_and_validates(s: &impl Subject) {
    let b = s.fresh().await.backend;
    let turns: Vec<Message> = (0..20)
        .map(|i| {
            Message::human(format!("coffee talk number {i} coffee coffee")).with_id(format!("m{i}"))
        })
        .collect();
    b.capture(&capture(&alice(), "t", turns)).await.unwrap();
    let pref = RememberRequest::new("preference", "coffee without sugar").unwrap();
    let RememberOutcome::Stored { citation } = b.remember(&alice(), &pref).await.unwrap() else {
        panic!()
    };
    let query = SearchQuery {
        query: "coffee".into(),
        top_k: 1,
        kind: Some("preference".into()),
    };
    let hits = b.search(&alice(), &query).await.unwrap();
    assert_eq!(hits.len(), 1);
    assert_eq!(
        (hits[0].id.as_str(), hits[0].category.as_str()),
        (citation.0.as_str(), "preference")
    );
    assert_eq!(hits[0].source.as_deref(), Some("memory"));
    let turns_only = SearchQuery {
        query: "coffee".into(),
        top_k: 5,
        kind: Some("turn".into()),
    };
    let hits = b.search(&alice(), &turns_only).await.unwrap();
    assert_eq!(hits.len(), 5);
    assert!(hits
        .iter()
        .all(|h| h.category == "turn" && h.id.starts_with("turn_")));
    assert_eq!(hits[0].source.as_deref(), Some("thread:t"));
    for (q, top_k, kind, field) in [
        ("  ", 5, None, "query"),
        ("coffee", 0, None, "top_k"),
        ("coffee", 101, None, "top_k"),
        ("coffee", 5, Some(" "), "kind"),
    ] {
        let query = SearchQuery {
            query: q.into(),
            top_k,
            kind: kind.map(str::to_owned),
        };
        match b.search(&alice(), &query).await.unwrap_err() {
            MemoryError::InvalidInput { field: f, .. } => assert_eq!(f, field),
            other => panic!("{other:?}"),
        }
    }
    // Query syntax in user text is just words.
    let odd = SearchQuery::new("coffee\" OR (*) & | ! <-> : NEAR");
    assert!(!b.search(&alice(), &odd).await.unwrap().is_empty());
}

pub async fn scopes_are_isolated_by_user_and_peer(s: &impl Subject) {
    let b = s.fresh().await.backend;
    let owner = Caller::new("alice").with_agent("coder");
    let id = stored(&*b, &owner, "secret project phoenix").await;
    b.capture(&capture(
        &owner,
        "t",
        vec![Message::human("phoenix launch date")],
    ))
    .await
    .unwrap();
    let others = [
        Caller::new("bob").with_agent("coder"),
        Caller::new("alice"),
        Caller::new("alice").with_agent("writer"),
        Caller::new("default"),
    ];
    for other in &others {
        assert!(b
            .recall(&recall_of(other, Some("phoenix")))
            .await
            .unwrap()
            .is_empty());
        assert!(b.recall(&recall_of(other, None)).await.unwrap().is_empty());
        assert!(b
            .search(other, &SearchQuery::new("phoenix"))
            .await
            .unwrap()
            .is_empty());
        assert!(b.list_facts(other, true).await.unwrap().is_empty());
        assert!(matches!(
            b.get_fact(other, &id).await.unwrap_err(),
            MemoryError::NotFound(_)
        ));
        assert!(matches!(
            b.retire_fact(other, &id).await.unwrap_err(),
            MemoryError::NotFound(_)
        ));
        let export = b.export(other).await.unwrap();
        assert!(export.facts.is_empty() && export.turns.is_empty());
        // The same text in another scope is that scope's own new memory.
        let theirs = stored(&*b, other, "secret project phoenix").await;
        assert_ne!(theirs, id);
    }
    // The owner still has exactly what it stored.
    assert_eq!(b.list_facts(&owner, true).await.unwrap().len(), 1);
    assert_eq!(
        b.get_fact(&owner, &id).await.unwrap().state,
        FactState::Active
    );
}

pub async fn export_import_merges_and_never_duplicates(s: &impl Subject) {
    let source = s.fresh().await.backend;
    let kept = stored(&*source, &alice(), "likes green tea").await;
    let gone = stored(&*source, &alice(), "lives in Lyon").await;
    source.retire_fact(&alice(), &gone).await.unwrap();
    let _ = kept;
    source
        .capture(&capture(&alice(), "t", conversation("x", 3)))
        .await
        .unwrap();
    let export = source.export(&alice()).await.unwrap();
    assert_eq!((export.facts.len(), export.turns.len()), (2, 3));
    let target = s.fresh().await.backend;
    // Something already there merges with what comes in.
    stored(&*target, &alice(), "likes green tea").await;
    let first = target.import(&alice(), &export).await.unwrap();
    assert_eq!((first.facts_imported, first.facts_already_present), (1, 1));
    assert_eq!((first.turns_imported, first.turns_already_present), (3, 0));
    let second = target.import(&alice(), &export).await.unwrap();
    assert_eq!((second.facts_imported, second.turns_imported), (0, 0));
    assert_eq!(
        (second.facts_already_present, second.turns_already_present),
        (2, 3)
    );
    let back = target.export(&alice()).await.unwrap();
    assert_eq!((back.facts.len(), back.turns.len()), (2, 3));
    let states: Vec<(&str, FactState)> = back
        .facts
        .iter()
        .map(|f| (f.text.as_str(), f.state))
        .collect();
    assert!(
        states.contains(&("lives in Lyon", FactState::Retired)),
        "{states:?}"
    );
    let recall = target
        .recall(&recall_of(&alice(), Some("green tea")))
        .await
        .unwrap();
    assert!(recall.text.contains("likes green tea"));
}

pub async fn bad_import_names_the_entry_and_stores_nothing(s: &impl Subject) {
    let b = s.fresh().await.backend;
    stored(&*b, &alice(), "before").await;
    let good = ExportedTurn {
        thread: "t".into(),
        role: "human".into(),
        text: "fine".into(),
        signature: "a".repeat(64),
        captured_at: None,
    };
    let bad = ExportedTurn {
        signature: "not-a-signature".into(),
        ..good.clone()
    };
    let data = MemoryExport::new(Vec::new(), vec![good, bad]);
    match b.import(&alice(), &data).await.unwrap_err() {
        MemoryError::InvalidInput { field, .. } => assert_eq!(field, "turns[1].signature"),
        other => panic!("{other:?}"),
    }
    let mut wrong = MemoryExport::new(Vec::new(), Vec::new());
    wrong.format = "other".into();
    assert!(matches!(
        b.import(&alice(), &wrong).await.unwrap_err(),
        MemoryError::InvalidInput { ref field, .. } if field == "format"
    ));
    let after = b.export(&alice()).await.unwrap();
    assert_eq!(after.facts.len(), 1);
    assert!(after.turns.is_empty());
}

pub async fn concurrent_captures_of_one_thread_store_each_turn_once(s: &impl Subject) {
    let storage = s.fresh().await;
    let handles: Vec<Arc<dyn MemoryBackend>> =
        vec![storage.backend.clone(), storage.another_handle().await];
    let full = conversation("race", 24);
    let mut tasks = Vec::new();
    for round in 0..8 {
        let b = handles[round % 2].clone();
        // Overlapping snapshots of different lengths, as replicas see them.
        let snapshot = full[..8 + (round * 2) % 17].to_vec();
        tasks.push(tokio::spawn(async move {
            b.capture(&capture(&alice(), "shared", snapshot))
                .await
                .unwrap()
        }));
        let b = handles[(round + 1) % 2].clone();
        let own = conversation(&format!("own{round}"), 4);
        tasks.push(tokio::spawn(async move {
            b.capture(&capture(&alice(), &format!("own{round}"), own))
                .await
                .unwrap()
        }));
    }
    let mut stored = 0;
    for t in tasks {
        stored += t.await.unwrap().stored;
    }
    let export = handles[1].export(&alice()).await.unwrap();
    let shared: Vec<&ExportedTurn> = export
        .turns
        .iter()
        .filter(|t| t.thread == "shared")
        .collect();
    let longest = (0..8).map(|r| 8 + (r * 2) % 17).max().unwrap();
    assert_eq!(shared.len(), longest, "no duplicate and no loss");
    let unique: HashSet<&str> = shared.iter().map(|t| t.signature.as_str()).collect();
    assert_eq!(unique.len(), shared.len());
    assert_eq!(export.turns.len(), longest + 8 * 4);
    assert_eq!(
        stored,
        export.turns.len(),
        "every stored turn was reported once"
    );
}

pub async fn concurrent_remember_of_one_text_stores_one_entry(s: &impl Subject) {
    let storage = s.fresh().await;
    let handles: Vec<Arc<dyn MemoryBackend>> =
        vec![storage.backend.clone(), storage.another_handle().await];
    let mut tasks = Vec::new();
    for i in 0..12 {
        let b = handles[i % 2].clone();
        tasks.push(tokio::spawn(async move {
            b.remember(&alice(), &fact("the deploy key lives in the vault"))
                .await
                .unwrap()
        }));
    }
    let mut stored = Vec::new();
    let mut present = Vec::new();
    for t in tasks {
        match t.await.unwrap() {
            RememberOutcome::Stored { citation } => stored.push(citation.0),
            RememberOutcome::AlreadyPresent {
                citation: Some(c), ..
            } => present.push(c.0),
            other => panic!("{other:?}"),
        }
    }
    assert_eq!(stored.len(), 1, "exactly one caller stores");
    assert!(present.iter().all(|c| *c == stored[0]), "{present:?}");
    assert_eq!(
        handles[0].list_facts(&alice(), true).await.unwrap().len(),
        1
    );
}

pub async fn shutdown_refuses_new_work(s: &impl Subject) {
    let b = s.fresh().await.backend;
    stored(&*b, &alice(), "before shutdown").await;
    assert!(b.shutdown(std::time::Duration::from_secs(5)).await);
    assert!(matches!(
        b.remember(&alice(), &fact("after")).await.unwrap_err(),
        MemoryError::Closed(_)
    ));
    assert!(matches!(
        b.capture(&capture(&alice(), "t", vec![Message::human("x")]))
            .await
            .unwrap_err(),
        MemoryError::Closed(_)
    ));
}

/// The holdings count what an export holds (turns, threads, the newest
/// capture and change), a retirement counts as a change, and another
/// user's scope is counted apart.
pub async fn holdings_count_what_the_export_holds(s: &impl Subject) {
    let b = s.fresh().await.backend;
    let caller = alice();
    assert_eq!(
        b.holdings(&caller).await.unwrap(),
        memgate_core::Holdings::default()
    );
    b.capture(&capture(&caller, "t-1", conversation("one", 4)))
        .await
        .unwrap();
    b.capture(&capture(&caller, "t-2", conversation("two", 2)))
        .await
        .unwrap();
    b.capture(&capture(&Caller::new("bob"), "t-9", conversation("bob", 3)))
        .await
        .unwrap();
    let id = stored(&*b, &caller, "the deploy window is friday").await;
    b.retire_fact(&caller, &id).await.unwrap();

    let export = b.export(&caller).await.unwrap();
    let threads: HashSet<&str> = export.turns.iter().map(|t| t.thread.as_str()).collect();
    let last_captured = export
        .turns
        .iter()
        .filter_map(|t| t.captured_at.clone())
        .max();
    let last_changed = export
        .facts
        .iter()
        .map(|f| f.updated_at.clone())
        .chain(last_captured.clone())
        .max();
    let held = b.holdings(&caller).await.unwrap();
    assert_eq!(
        held,
        memgate_core::Holdings {
            turns: export.turns.len() as u64,
            threads: threads.len() as u64,
            last_captured_at: last_captured,
            last_changed_at: last_changed,
        }
    );
    assert_eq!((held.turns, held.threads), (6, 2), "{held:?}");
    let retired = b.get_fact(&caller, &id).await.unwrap().updated_at;
    assert!(
        held.last_changed_at.as_deref() >= Some(retired.as_str()),
        "{held:?}"
    );
    assert_eq!(b.holdings(&Caller::new("bob")).await.unwrap().turns, 3);
}
