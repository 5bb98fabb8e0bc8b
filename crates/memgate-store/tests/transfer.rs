//! Export and import: round trip, idempotent merge, atomic refusal of bad
//! data.

mod common;

use common::{alice, capture, TestStore};
use memgate_core::facts::{ExportedTurn, EXPORT_FORMAT};
use memgate_core::{
    Caller, Fact, FactState, ImportReport, MemoryError, MemoryExport, Message, RememberRequest,
};

fn seeded() -> TestStore {
    let t = TestStore::new();
    for text in ["Prefers tea", "Works at Acme", "Old address"] {
        t.store
            .remember(&alice(), &RememberRequest::new("fact", text).unwrap())
            .unwrap();
    }
    let old = t.store.list_facts(&alice(), false).unwrap()[2].id.clone();
    t.store.retire_fact(&alice(), &old).unwrap();
    t.store
        .capture(&capture(
            &alice(),
            "t1",
            vec![
                Message::human("Book the Lisbon flight"),
                Message::ai("Booked for Friday."),
            ],
        ))
        .unwrap();
    t
}

fn strip(facts: &[Fact]) -> Vec<(String, String, FactState)> {
    facts
        .iter()
        .map(|f| (f.kind.clone(), f.text.clone(), f.state))
        .collect()
}

#[test]
fn export_then_import_elsewhere_round_trips_and_a_second_import_adds_nothing() {
    let source = seeded();
    let export = source.store.export(&alice()).unwrap();
    assert_eq!(export.format, EXPORT_FORMAT);
    assert_eq!(export.facts.len(), 3, "retired memories are exported too");
    assert_eq!(export.turns.len(), 2);
    // Through JSON, as the CLI and HTTP surfaces carry it.
    let wire: MemoryExport =
        serde_json::from_str(&serde_json::to_string(&export).unwrap()).unwrap();

    let target = TestStore::new();
    let bob = Caller::new("bob").with_agent("coder");
    let first = target.store.import(&bob, &wire).unwrap();
    assert_eq!(
        first,
        ImportReport {
            facts_imported: 3,
            facts_already_present: 0,
            turns_imported: 2,
            turns_already_present: 0
        }
    );
    let second = target.store.import(&bob, &wire).unwrap();
    assert_eq!(
        second,
        ImportReport {
            facts_imported: 0,
            facts_already_present: 3,
            turns_imported: 0,
            turns_already_present: 2
        }
    );
    let back = target.store.export(&bob).unwrap();
    assert_eq!(strip(&back.facts), strip(&export.facts));
    let turns = |e: &MemoryExport| -> Vec<(String, String, String, String)> {
        e.turns
            .iter()
            .map(|t| {
                (
                    t.thread.clone(),
                    t.role.clone(),
                    t.text.clone(),
                    t.signature.clone(),
                )
            })
            .collect()
    };
    assert_eq!(turns(&back), turns(&export));
    // Imported turns keep their signatures: capturing the same messages again
    // in that scope adds nothing.
    let replay = target
        .store
        .capture(&capture(
            &bob,
            "t1",
            vec![
                Message::human("Book the Lisbon flight"),
                Message::ai("Booked for Friday."),
            ],
        ))
        .unwrap();
    assert_eq!((replay.stored, replay.already_known), (0, 2));
    // Importing into the scope it came from adds nothing either.
    let same = source.store.import(&alice(), &export).unwrap();
    assert_eq!((same.facts_imported, same.turns_imported), (0, 0));
}

#[test]
fn invalid_import_data_is_refused_whole_and_stored_memory_is_intact() {
    let t = seeded();
    let before = t.store.export(&alice()).unwrap();
    let good_fact = Fact {
        text: "A brand new fact".into(),
        ..before.facts[0].clone()
    };
    let good_turn = before.turns[0].clone();
    let bad_cases: Vec<(MemoryExport, &str)> = vec![
        (
            MemoryExport {
                format: "memgate.export.v0".into(),
                ..MemoryExport::new(vec![], vec![])
            },
            "invalid format",
        ),
        (
            MemoryExport::new(
                vec![
                    good_fact.clone(),
                    Fact {
                        text: "  ".into(),
                        ..good_fact.clone()
                    },
                ],
                vec![],
            ),
            "invalid facts[1].text",
        ),
        (
            MemoryExport::new(
                vec![
                    good_fact.clone(),
                    Fact {
                        kind: "k".repeat(200),
                        ..good_fact.clone()
                    },
                ],
                vec![],
            ),
            "invalid facts[1].kind",
        ),
        (
            MemoryExport::new(
                vec![good_fact.clone()],
                vec![ExportedTurn {
                    signature: "nothex".into(),
                    ..good_turn.clone()
                }],
            ),
            "invalid turns[0].signature",
        ),
        (
            MemoryExport::new(
                vec![good_fact.clone()],
                vec![
                    good_turn.clone(),
                    ExportedTurn {
                        role: "tool".into(),
                        ..good_turn.clone()
                    },
                ],
            ),
            "invalid turns[1].role",
        ),
        (
            MemoryExport::new(
                vec![],
                vec![ExportedTurn {
                    thread: String::new(),
                    ..good_turn.clone()
                }],
            ),
            "invalid turns[0].thread",
        ),
    ];
    for (data, expect) in bad_cases {
        let err = t.store.import(&alice(), &data).unwrap_err();
        assert!(matches!(err, MemoryError::InvalidInput { .. }), "{err:?}");
        assert!(err.to_string().starts_with(expect), "{err}");
        assert_eq!(
            t.store.export(&alice()).unwrap(),
            before,
            "nothing of a refused import is kept"
        );
    }
    // Malformed JSON never becomes an export at all.
    for raw in [
        r#"{"format":"memgate.export.v1","facts":"nope"}"#,
        r#"{"format":"memgate.export.v1","extra":1}"#,
        r#"[1,2,3]"#,
    ] {
        assert!(serde_json::from_str::<MemoryExport>(raw).is_err(), "{raw}");
    }
}
