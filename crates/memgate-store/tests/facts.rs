//! Explicit memories: remember outcomes, validation, revise/retire with
//! history, scoping of ids.

mod common;

use common::{alice, cited, recall_of, TestStore};
use memgate_core::{
    Caller, Citation, FactPatch, FactState, MemoryError, RememberOutcome, RememberRequest,
    SearchQuery,
};

fn remember(t: &TestStore, caller: &Caller, kind: &str, text: &str) -> RememberOutcome {
    t.store
        .remember(caller, &RememberRequest::new(kind, text).unwrap())
        .unwrap()
}

fn stored_citation(outcome: RememberOutcome) -> String {
    match outcome {
        RememberOutcome::Stored { citation } => citation.0,
        other => panic!("expected Stored, got {other:?}"),
    }
}

#[test]
fn remember_stores_once_and_then_reports_the_existing_citation() {
    let t = TestStore::new();
    let id = stored_citation(remember(&t, &alice(), "preference", "Prefers dark mode"));
    assert!(id.starts_with("mem_"), "{id}");
    // NFC and trimming: a decomposed, padded copy is the same memory.
    let again = remember(&t, &alice(), " preference ", "  Prefers dark mode \n");
    assert_eq!(
        again,
        RememberOutcome::AlreadyPresent {
            citation: Some(Citation::new(id.clone())),
            revision: None
        }
    );
    let cafe = stored_citation(remember(&t, &alice(), "fact", "Likes caf\u{e9}"));
    assert!(matches!(
        remember(&t, &alice(), "fact", "Likes cafe\u{301}"),
        RememberOutcome::AlreadyPresent { citation: Some(c), .. } if c.0 == cafe
    ));
    // Same text, other kind: a different memory.
    assert!(matches!(
        remember(&t, &alice(), "fact", "Prefers dark mode"),
        RememberOutcome::Stored { .. }
    ));
    assert_eq!(t.store.list_facts(&alice(), false).unwrap().len(), 3);
    let fact = t.store.get_fact(&alice(), &id).unwrap();
    assert_eq!(
        (fact.kind.as_str(), fact.text.as_str()),
        ("preference", "Prefers dark mode")
    );
    assert_eq!((fact.version, fact.state), (1, FactState::Active));
}

#[test]
fn bad_memories_are_refused_with_field_and_rule_and_nothing_is_lost() {
    let t = TestStore::new();
    stored_citation(remember(&t, &alice(), "fact", "kept fact"));
    let cases = [
        ("fact", "   ", "invalid text"),
        ("fact", &"a".repeat(8193) as &str, "8192 UTF-8 bytes"),
        ("", "x", "invalid kind"),
        (&"k".repeat(129) as &str, "x", "invalid kind"),
    ];
    for (kind, text, expect) in cases {
        // Hand-built requests bypass the constructor; the store re-validates.
        let raw = RememberRequest {
            kind: kind.to_owned(),
            text: text.to_owned(),
            confidence: None,
        };
        let err = t.store.remember(&alice(), &raw).unwrap_err();
        assert!(matches!(err, MemoryError::InvalidInput { .. }), "{err:?}");
        assert!(err.to_string().contains(expect), "{err}");
    }
    // A non-NFC text at the byte limit is measured after normalisation.
    let decomposed = "e\u{301}".repeat(2731); // 8193 bytes raw, 5462 after NFC
    assert!(matches!(
        remember(&t, &alice(), "fact", &decomposed),
        RememberOutcome::Stored { .. }
    ));
    let facts = t.store.list_facts(&alice(), true).unwrap();
    assert_eq!(facts.len(), 2);
    assert_eq!(facts[0].text, "kept fact");
}

#[test]
fn revise_keeps_history_and_retire_hides_without_erasing() {
    let t = TestStore::new();
    let id = stored_citation(remember(&t, &alice(), "fact", "Lives in Lisbon"));
    let revised = t
        .store
        .revise_fact(
            &alice(),
            &id,
            &FactPatch {
                text: Some("Lives in Porto".into()),
                kind: None,
                confidence: None,
            },
        )
        .unwrap();
    assert_eq!((revised.id.as_str(), revised.version), (id.as_str(), 2));
    assert_eq!(revised.text, "Lives in Porto");
    // The recall index follows the revision.
    let hits = |q: &str| t.store.search(&alice(), &SearchQuery::new(q)).unwrap();
    assert!(hits("Lisbon").is_empty());
    assert_eq!(hits("Porto")[0].id, id);

    let retired = t.store.retire_fact(&alice(), &id).unwrap();
    assert_eq!((retired.state, retired.version), (FactState::Retired, 3));
    assert!(
        hits("Porto").is_empty(),
        "retired memories are not searched"
    );
    let recall = t.store.recall(&recall_of(&alice(), Some("Porto"))).unwrap();
    assert!(
        !cited(&recall).contains(&id),
        "retired memories are not recalled"
    );
    assert!(t.store.list_facts(&alice(), false).unwrap().is_empty());
    let all = t.store.list_facts(&alice(), true).unwrap();
    assert_eq!(all.len(), 1);
    assert_eq!(all[0].state, FactState::Retired);
    assert_eq!(
        t.store.get_fact(&alice(), &id).unwrap().text,
        "Lives in Porto"
    );

    let history = t.store.fact_history(&alice(), &id).unwrap();
    let texts: Vec<_> = history
        .iter()
        .map(|f| (f.version, f.text.as_str(), f.state))
        .collect();
    assert_eq!(
        texts,
        [
            (1, "Lives in Lisbon", FactState::Active),
            (2, "Lives in Porto", FactState::Active),
            (3, "Lives in Porto", FactState::Retired)
        ]
    );

    // Retiring again changes nothing; revising a retired memory is refused.
    assert_eq!(t.store.retire_fact(&alice(), &id).unwrap().version, 3);
    let err = t
        .store
        .revise_fact(
            &alice(),
            &id,
            &FactPatch {
                text: Some("x".into()),
                kind: None,
                confidence: None,
            },
        )
        .unwrap_err();
    assert!(matches!(err, MemoryError::Conflict(_)), "{err:?}");
    // Remembering the retired text again is a new memory.
    let fresh = stored_citation(remember(&t, &alice(), "fact", "Lives in Porto"));
    assert_ne!(fresh, id);
}

#[test]
fn revisions_are_validated_and_never_duplicate_an_active_memory() {
    let t = TestStore::new();
    let a = stored_citation(remember(&t, &alice(), "fact", "alpha"));
    let b = stored_citation(remember(&t, &alice(), "fact", "beta"));
    let err = t
        .store
        .revise_fact(&alice(), &a, &FactPatch::default())
        .unwrap_err();
    assert!(err.to_string().contains("patch"), "{err}");
    let err = t
        .store
        .revise_fact(
            &alice(),
            &a,
            &FactPatch {
                text: Some("  ".into()),
                kind: None,
                confidence: None,
            },
        )
        .unwrap_err();
    assert!(err.to_string().starts_with("invalid text"), "{err}");
    let err = t
        .store
        .revise_fact(
            &alice(),
            &a,
            &FactPatch {
                text: Some("beta".into()),
                kind: None,
                confidence: None,
            },
        )
        .unwrap_err();
    assert!(matches!(err, MemoryError::Conflict(_)), "{err:?}");
    assert!(err.to_string().contains(&b), "{err}");
    // An identical patch is a no-op, not a new version.
    let same = t
        .store
        .revise_fact(
            &alice(),
            &a,
            &FactPatch {
                text: Some(" alpha ".into()),
                kind: None,
                confidence: None,
            },
        )
        .unwrap();
    assert_eq!(same.version, 1);
    let kind_only = t
        .store
        .revise_fact(
            &alice(),
            &a,
            &FactPatch {
                kind: Some("decision".into()),
                text: None,
                confidence: None,
            },
        )
        .unwrap();
    assert_eq!(
        (kind_only.kind.as_str(), kind_only.text.as_str()),
        ("decision", "alpha")
    );
    assert_eq!(t.store.get_fact(&alice(), &b).unwrap().text, "beta");
}

#[test]
fn unknown_and_foreign_ids_are_not_found() {
    let t = TestStore::new();
    let mine = stored_citation(remember(&t, &alice(), "fact", "alice's secret"));
    let bob = Caller::new("bob");
    let alice_coder = alice().with_agent("coder");
    stored_citation(remember(&t, &bob, "fact", "bob's note"));
    for caller in [&bob, &alice_coder] {
        for result in [
            t.store.get_fact(caller, &mine).map(|_| ()),
            t.store.retire_fact(caller, &mine).map(|_| ()),
            t.store
                .revise_fact(
                    caller,
                    &mine,
                    &FactPatch {
                        text: Some("x".into()),
                        kind: None,
                        confidence: None,
                    },
                )
                .map(|_| ()),
        ] {
            let err = result.unwrap_err();
            assert!(matches!(err, MemoryError::NotFound(_)), "{err:?}");
        }
    }
    for id in [
        "mem_999999",
        "turn_1",
        "",
        "mem_1; DROP TABLE memories",
        "../etc",
    ] {
        let err = t.store.get_fact(&alice(), id).unwrap_err();
        assert!(matches!(err, MemoryError::NotFound(_)), "{id}: {err:?}");
    }
    // Nothing was touched by the refused calls.
    let fact = t.store.get_fact(&alice(), &mine).unwrap();
    assert_eq!((fact.version, fact.state), (1, FactState::Active));
}

#[test]
fn memories_survive_a_restart() {
    let t = TestStore::new();
    let id = stored_citation(remember(&t, &alice(), "fact", "durable"));
    let t = t.reopen();
    assert_eq!(t.store.get_fact(&alice(), &id).unwrap().text, "durable");
}
