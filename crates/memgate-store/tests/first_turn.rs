//! The first-turn block (recall with no query): what it selects, in what
//! order, within which budget, and for whom.

mod common;

use common::{alice, capture, cited, recall_of, TestStore};
use memgate_core::budget::char_len;
use memgate_core::{Caller, Message, RememberOutcome, RememberRequest};
use memgate_recall::turns::TIMESTAMP_KEY;
use memgate_store::LocalConfig;

fn remember(t: &TestStore, caller: &Caller, kind: &str, text: &str) -> String {
    match t
        .store
        .remember(caller, &RememberRequest::new(kind, text).unwrap())
        .unwrap()
    {
        RememberOutcome::Stored { citation } => citation.0,
        other => panic!("{other:?}"),
    }
}

/// The citation of the turn whose text contains `needle`, if cited.
fn cites_text(recall: &memgate_core::Recall, needle: &str) -> bool {
    recall
        .items
        .iter()
        .any(|i| i.kind == "turn" && i.text.contains(needle))
}

#[test]
fn a_durable_statement_comes_back_and_chit_chat_does_not() {
    // The hand test: today only the unrelated preference came back.
    let t = TestStore::new();
    let pref = remember(&t, &alice(), "preference", "Prefers metric units");
    t.store
        .capture(&capture(
            &alice(),
            "t1",
            vec![
                Message::human("Hi!"),
                Message::ai("Hello! How can I help?"),
                Message::human("My sister Ana lives in Porto and I visit her every August"),
                Message::ai("Nice!"),
                Message::human("Thanks, that's great"),
            ],
        ))
        .unwrap();
    let recall = t.store.recall(&recall_of(&alice(), None)).unwrap();
    let ids = cited(&recall);
    assert_eq!(
        ids[0], pref,
        "explicit memories come first: {}",
        recall.text
    );
    assert!(cites_text(&recall, "sister Ana"), "{}", recall.text);
    for chatter in ["Hi!", "Nice!", "Thanks, that's great", "How can I help"] {
        assert!(!cites_text(&recall, chatter), "{chatter}: {}", recall.text);
    }
    assert_eq!(ids.len(), 2, "{}", recall.text);
    // Cited, and framed: today's date, then notes dated when they were said.
    assert!(recall.text.contains("[turn_"), "{}", recall.text);
    let today = &memgate_core::time::now_rfc3339()[..10];
    assert!(recall.text.contains(&format!("Today is {today}")));
    // What the user said of themselves leads the turns, dated.
    assert!(
        recall.text.contains(&format!(
            "What the user said about themselves:\nOn {today}:\n- [{}] user: My sister Ana",
            ids[1]
        )),
        "{}",
        recall.text
    );
}

#[test]
fn pleasantries_inside_a_turn_are_cut_from_its_excerpt() {
    let t = TestStore::new();
    t.store
        .capture(&capture(
            &alice(),
            "t1",
            vec![Message::human(
                "Wow, thanks so much! I started a new job at Siemens in Munich last week. Cool!",
            )],
        ))
        .unwrap();
    let recall = t.store.recall(&recall_of(&alice(), None)).unwrap();
    let item = &recall.items[0];
    assert_eq!(
        item.text,
        "… I started a new job at Siemens in Munich last week. …"
    );
    assert!(!recall.text.contains("Wow"), "{}", recall.text);
}

#[test]
fn the_block_spreads_over_conversations_and_puts_the_newest_first() {
    let t = TestStore::with_config(LocalConfig {
        recall: memgate_recall::RecallSettings {
            max_injection_chars: 2_000,
            ..Default::default()
        },
        ..LocalConfig::default()
    });
    for thread in 0..8 {
        let messages = (0..20)
            .map(|i| {
                Message::human(format!(
                    "In week {i} the team met Tom{thread}x{i} in Berlin to plan project \
                     Atlas{thread}y{i}."
                ))
                .with_id(format!("t{thread}m{i}"))
                .with_flag(TIMESTAMP_KEY, format!("2024-03-{:02}", thread + 1))
            })
            .collect();
        t.store
            .capture(&capture(&alice(), &format!("thread-{thread}"), messages))
            .unwrap();
    }
    let recall = t.store.recall(&recall_of(&alice(), None)).unwrap();
    assert!(char_len(&recall.text) <= 2_000);
    let threads: std::collections::BTreeSet<String> = recall
        .items
        .iter()
        .filter_map(|i| {
            let at = i.text.find("Tom")? + 3;
            Some(i.text[at..at + 1].to_owned())
        })
        .collect();
    assert_eq!(
        threads.len(),
        8,
        "every conversation is represented: {}",
        recall.text
    );
    // Newest conversation (captured last) first.
    let first = recall.text.find("Conversation of 2024-03-08").unwrap();
    let last = recall.text.find("Conversation of 2024-03-01").unwrap();
    assert!(first < last, "{}", recall.text);
    // The budget is used, not left mostly empty.
    assert!(char_len(&recall.text) > 1_700, "{}", char_len(&recall.text));
}

#[test]
fn the_budget_holds_and_is_filled_with_salient_turns_only() {
    for max in [256, 600, 3_000] {
        let t = TestStore::with_config(LocalConfig {
            recall: memgate_recall::RecallSettings {
                max_injection_chars: max,
                ..Default::default()
            },
            ..LocalConfig::default()
        });
        remember(&t, &alice(), "fact", "Allergic to peanuts");
        let mut messages = Vec::new();
        for i in 0..60 {
            messages.push(Message::human(format!(
                "My brother Luis{i} moved to Lisbon in {} and I plan to visit in June.",
                2000 + i
            )));
            messages.push(Message::ai("That sounds great!"));
        }
        t.store.capture(&capture(&alice(), "t", messages)).unwrap();
        let recall = t.store.recall(&recall_of(&alice(), None)).unwrap();
        assert!(
            char_len(&recall.text) <= max,
            "{max}: {}",
            char_len(&recall.text)
        );
        assert!(!recall.items.is_empty(), "{max}");
        assert!(!recall.text.contains("sounds great"), "{max}");
        for item in &recall.items {
            assert!(recall.text.contains(&item.text), "whole excerpts only");
        }
    }
}

#[test]
fn standing_memories_bounds_the_memories_of_the_block() {
    let t = TestStore::with_config(LocalConfig {
        recall: memgate_recall::RecallSettings {
            standing_memories: 2,
            ..Default::default()
        },
        ..LocalConfig::default()
    });
    let ids: Vec<String> = (0..5)
        .map(|i| remember(&t, &alice(), "fact", &format!("note {i}")))
        .collect();
    let recall = t.store.recall(&recall_of(&alice(), None)).unwrap();
    assert_eq!(cited(&recall), [ids[4].clone(), ids[3].clone()]);

    let none = TestStore::with_config(LocalConfig {
        recall: memgate_recall::RecallSettings {
            standing_memories: 0,
            ..Default::default()
        },
        ..LocalConfig::default()
    });
    remember(&none, &alice(), "fact", "note");
    assert!(none
        .store
        .recall(&recall_of(&alice(), None))
        .unwrap()
        .is_empty());
}

#[test]
fn another_scope_never_reaches_the_block_and_the_block_is_reproducible() {
    let t = TestStore::new();
    let bob = Caller::new("bob");
    let alice_agent = alice().with_agent("coder");
    t.store
        .capture(&capture(
            &bob,
            "b",
            vec![Message::human(
                "My secret plan is to move to Oslo next year.",
            )],
        ))
        .unwrap();
    t.store
        .capture(&capture(
            &alice_agent,
            "c",
            vec![Message::human(
                "My other agent knows I moved to Rome in 2020.",
            )],
        ))
        .unwrap();
    t.store
        .capture(&capture(
            &alice(),
            "a",
            vec![Message::human("I adopted a dog named Rex in March.")],
        ))
        .unwrap();
    let recall = t.store.recall(&recall_of(&alice(), None)).unwrap();
    assert!(cites_text(&recall, "Rex"));
    assert!(!recall.text.contains("Oslo") && !recall.text.contains("Rome"));
    assert_eq!(recall, t.store.recall(&recall_of(&alice(), None)).unwrap());
    // Nothing stored for a caller: nothing recalled.
    assert!(t
        .store
        .recall(&recall_of(&Caller::new("nobody"), None))
        .unwrap()
        .is_empty());
}

#[test]
fn turns_of_a_file_from_before_the_excerpt_cache_get_theirs_when_it_is_migrated() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("old.sqlite3");
    {
        // A file written by a memgate whose schema stopped at version 2.
        let mut conn = rusqlite::Connection::open(&path).unwrap();
        memgate_store::schema::migrate(&mut conn, 2).unwrap();
        conn.execute_batch(
            "INSERT INTO scopes (id, user_id, peer) VALUES (1, 'alice', '');
             INSERT INTO turns (scope_id, thread, seq, signature, role, speaker, text, captured_at)
             VALUES (1, 't1', 1, 'a', 'human', 'Ana', 'Thanks, Ana!', '2024-05-01T10:00:00Z'),
                    (1, 't1', 2, 'b', 'human', 'Rui',
                     'My brother Tiago moved to Lisbon in March for his new job', '2024-05-01T10:00:00Z');",
        )
        .unwrap();
    }
    let store = memgate_store::MemoryStore::open(&path, LocalConfig::default()).unwrap();
    let recall = store.recall(&recall_of(&alice(), None)).unwrap();
    assert!(cites_text(&recall, "brother Tiago"), "{}", recall.text);
    assert!(!cites_text(&recall, "Thanks, Ana"), "{}", recall.text);
    assert_eq!(cited(&recall), ["turn_2"]);
}

#[test]
fn a_file_from_before_introductions_counted_gets_its_excerpts_again() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("old.sqlite3");
    {
        // A file at version 5, its excerpts cached by the earlier rules
        // (an introduction had none).
        let mut conn = rusqlite::Connection::open(&path).unwrap();
        memgate_store::schema::migrate(&mut conn, 5).unwrap();
        conn.execute_batch(
            "INSERT INTO scopes (id, user_id, peer) VALUES (1, 'alice', '');
             INSERT INTO turns (scope_id, thread, seq, signature, role, text, captured_at)
             VALUES (1, 't1', 1, 'a', 'human', 'Hi, I''m Dana.', '2024-05-01T10:00:00Z');",
        )
        .unwrap();
    }
    let store = memgate_store::MemoryStore::open(&path, LocalConfig::default()).unwrap();
    let recall = store.recall(&recall_of(&alice(), None)).unwrap();
    assert!(
        recall.text.contains(
            "What the user said about themselves:\nOn 2024-05-01:\n- [turn_1] user: Hi, I'm Dana."
        ),
        "{}",
        recall.text
    );
}

/// The block a store that never built one for this file computes.
fn fresh_block(t: &TestStore, caller: &Caller) -> memgate_core::Recall {
    let other = memgate_store::MemoryStore::open(t.path(), t.store.config().clone()).unwrap();
    other.recall(&recall_of(caller, None)).unwrap()
}

#[test]
fn a_cached_block_is_served_until_its_scope_changes_and_never_stale() {
    let t = TestStore::with_config(LocalConfig {
        max_turn_age: Some(std::time::Duration::from_secs(86_400)),
        ..LocalConfig::default()
    });
    let me = alice();
    t.store
        .capture(&capture(
            &me,
            "a",
            vec![Message::human("My sister Ines moved to Porto in May.")],
        ))
        .unwrap();
    let first = t.store.recall(&recall_of(&me, None)).unwrap();
    assert!(cites_text(&first, "Porto"), "{}", first.text);
    assert_eq!(t.store.first_turn_cache_hits(), 0);
    assert_eq!(t.store.recall(&recall_of(&me, None)).unwrap(), first);
    assert_eq!(
        t.store.first_turn_cache_hits(),
        1,
        "unchanged: served again"
    );
    // Another scope's write leaves this scope's block valid.
    t.store
        .capture(&capture(
            &Caller::new("bob"),
            "b",
            vec![Message::human("I bought a boat in June.")],
        ))
        .unwrap();
    assert_eq!(t.store.recall(&recall_of(&me, None)).unwrap(), first);
    assert_eq!(t.store.first_turn_cache_hits(), 2);

    // Every kind of write to the scope: the next block is built again and
    // is exactly what a store without a cache builds.
    let rebuilt = |t: &TestStore, what: &str| {
        let hits = t.store.first_turn_cache_hits();
        let block = t.store.recall(&recall_of(&me, None)).unwrap();
        assert_eq!(t.store.first_turn_cache_hits(), hits, "{what}: not rebuilt");
        assert_eq!(block, fresh_block(t, &me), "{what}");
        block
    };
    t.store
        .capture(&capture(
            &me,
            "c",
            vec![Message::human("I started learning the cello in 2023.")],
        ))
        .unwrap();
    assert!(cites_text(&rebuilt(&t, "capture"), "cello"));
    let id = remember(&t, &me, "fact", "Allergic to peanuts");
    assert!(rebuilt(&t, "remember").text.contains("peanuts"));
    let patch = memgate_core::FactPatch {
        kind: None,
        text: Some("Allergic to cashews".into()),
        confidence: None,
    };
    t.store.revise_fact(&me, &id, &patch).unwrap();
    let block = rebuilt(&t, "revise");
    assert!(block.text.contains("cashews") && !block.text.contains("peanuts"));
    t.store.retire_fact(&me, &id).unwrap();
    assert!(!rebuilt(&t, "retire").text.contains("cashews"));
    let kept = remember(&t, &me, "fact", "Works night shifts");
    t.store
        .forget(&me, &memgate_core::ForgetTarget::Fact { id: kept })
        .unwrap();
    assert!(!rebuilt(&t, "forget a fact").text.contains("night shifts"));
    t.store
        .forget(
            &me.clone().with_thread("c"),
            &memgate_core::ForgetTarget::Thread,
        )
        .unwrap();
    assert!(!cites_text(&rebuilt(&t, "forget a thread"), "cello"));
    // A write by another store on the same file (another process).
    {
        let other = memgate_store::MemoryStore::open(t.path(), t.store.config().clone()).unwrap();
        other
            .capture(&capture(
                &me,
                "d",
                vec![Message::human("My daughter Rita was born in April 2021.")],
            ))
            .unwrap();
    }
    assert!(cites_text(&rebuilt(&t, "another process"), "Rita"));
    let erased = t
        .store
        .sweep_expired_turns(
            std::time::SystemTime::now() + std::time::Duration::from_secs(3 * 86_400),
        )
        .unwrap();
    assert!(erased >= 2);
    let swept = rebuilt(&t, "retention sweep");
    assert!(!cites_text(&swept, "Rita") && !cites_text(&swept, "Porto"));
    // Forgetting the whole scope, then starting it again.
    t.store
        .capture(&capture(&me, "e", vec![Message::human("I live in Braga.")]))
        .unwrap();
    rebuilt(&t, "capture after the sweep");
    t.store
        .forget(&me, &memgate_core::ForgetTarget::Scope)
        .unwrap();
    assert!(t.store.recall(&recall_of(&me, None)).unwrap().is_empty());
    t.store
        .capture(&capture(
            &me,
            "f",
            vec![Message::human("I moved to Faro in 2024.")],
        ))
        .unwrap();
    let again = rebuilt(&t, "a scope created again");
    assert!(cites_text(&again, "Faro") && !cites_text(&again, "Braga"));
}
