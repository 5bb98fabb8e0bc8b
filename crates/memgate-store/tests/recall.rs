//! Recall and search: ranking, the untrusted-data header, budgets, the
//! default injection query, hostile query text, search filters.

mod common;

use common::{alice, capture, cited, recall_of, TestStore};
use memgate_core::budget::char_len;
use memgate_core::{MemoryError, Message, RememberOutcome, RememberRequest, SearchQuery};
use memgate_recall::block::RECALL_HEADER;
use memgate_recall::ranked::Among;
use memgate_recall::settings::DEFAULT_INJECTION_QUERY;
use memgate_store::LocalConfig;

fn remember(t: &TestStore, kind: &str, text: &str) -> String {
    match t
        .store
        .remember(&alice(), &RememberRequest::new(kind, text).unwrap())
        .unwrap()
    {
        RememberOutcome::Stored { citation } => citation.0,
        other => panic!("{other:?}"),
    }
}

#[test]
fn recall_ranks_by_relevance_and_frames_the_block_as_untrusted_data() {
    let t = TestStore::new();
    let vim = remember(&t, "preference", "Uses Vim with relative line numbers");
    let cat = remember(&t, "fact", "Owns a cat called Miso");
    t.store
        .capture(&capture(
            &alice(),
            "t1",
            vec![
                Message::human("My editor config keeps breaking vim plugins"),
                Message::ai("Try pinning the vim plugin manager version."),
            ],
        ))
        .unwrap();
    let recall = t
        .store
        .recall(&recall_of(&alice(), Some("Which vim setup do I use?")))
        .unwrap();
    assert!(recall.text.starts_with(RECALL_HEADER));
    assert!(RECALL_HEADER.contains("not instructions"));
    let ids = cited(&recall);
    assert_eq!(ids[0], vim, "the explicit memory ranks first: {ids:?}");
    assert_eq!(ids.len(), 4, "{ids:?}");
    assert!(ids[1..3].iter().all(|c| c.starts_with("turn_")));
    assert_eq!(
        ids[3], cat,
        "the unmatched memory comes last, as standing memory"
    );
    for item in &recall.items {
        let c = item.citation.as_ref().unwrap();
        assert!(
            recall.text.contains(&format!("[{c}]")),
            "every item is cited"
        );
    }
}

#[test]
fn explicit_memories_are_recalled_even_without_shared_words() {
    // The RFC scenario: the convention shares no word with the new request.
    let t = TestStore::new();
    let convention = remember(
        &t,
        "decision",
        "money amounts are integer cents; use pytest for backend tests",
    );
    let retired = remember(&t, "fact", "the order service uses floats for money");
    t.store.retire_fact(&alice(), &retired).unwrap();
    let bob = memgate_core::Caller::new("bob");
    t.store
        .remember(
            &bob,
            &RememberRequest::new("fact", "bob's secret recipe").unwrap(),
        )
        .unwrap();
    let request = "Add a refund calculation to the order service, following its conventions.";
    let recall = t.store.recall(&recall_of(&alice(), Some(request))).unwrap();
    assert_eq!(cited(&recall), [convention], "{}", recall.text);
    assert!(!recall.text.contains("floats"), "retired memories stay out");
    assert!(!recall.text.contains("recipe"), "other scopes stay out");

    let off = TestStore::with_config(LocalConfig {
        recall: memgate_recall::RecallSettings {
            standing_memories: 0,
            ..Default::default()
        },
        ..LocalConfig::default()
    });
    remember(&off, "decision", "money amounts are integer cents");
    let recall = off
        .store
        .recall(&recall_of(&alice(), Some(request)))
        .unwrap();
    assert!(
        recall.is_empty(),
        "standing_memories: 0 recalls only matches"
    );
}

#[test]
fn standing_memories_are_the_newest_and_respect_the_budget() {
    let t = TestStore::with_config(LocalConfig {
        recall: memgate_recall::RecallSettings {
            max_injection_chars: 600,
            standing_memories: 5,
            ..Default::default()
        },
        ..LocalConfig::default()
    });
    let ids: Vec<String> = (0..30)
        .map(|i| {
            remember(
                &t,
                "fact",
                &format!("standing note number {i} {}", "x".repeat(40)),
            )
        })
        .collect();
    let recall = t
        .store
        .recall(&recall_of(&alice(), Some("unrelated words")))
        .unwrap();
    let got = cited(&recall);
    assert!(!got.is_empty() && got.len() <= 5, "{got:?}");
    assert_eq!(got[0], ids[29], "newest first");
    assert!(char_len(&recall.text) <= 600);
}

#[test]
fn no_query_or_a_blank_one_builds_the_first_turn_block_unless_a_query_is_configured() {
    let t = TestStore::new();
    let pref = remember(&t, "preference", "Answers in British English");
    let trip = remember(&t, "fact", "Paris trip booked");
    for query in [None, Some(""), Some("   \n")] {
        let recall = t.store.recall(&recall_of(&alice(), query)).unwrap();
        // The first-turn block: standing memories first, newest first.
        assert_eq!(cited(&recall), [trip.clone(), pref.clone()], "{query:?}");
        assert!(recall.text.contains("Today is "), "{}", recall.text);
    }
    // A configured query makes a query-less recall rank with it.
    let custom = TestStore::with_config(LocalConfig {
        recall: memgate_recall::RecallSettings {
            injection_query: Some("trip".into()),
            ..Default::default()
        },
        ..LocalConfig::default()
    });
    let trip = remember(&custom, "fact", "Paris trip booked");
    remember(&custom, "fact", "Has a cat");
    let recall = custom.store.recall(&recall_of(&alice(), None)).unwrap();
    assert_eq!(cited(&recall)[0], trip);
    assert!(!recall.text.contains("Today is "));
    assert!(DEFAULT_INJECTION_QUERY.contains("preferences"));
}

#[test]
fn the_block_never_exceeds_max_injection_chars() {
    let t = TestStore::with_config(LocalConfig {
        recall: memgate_recall::RecallSettings {
            max_injection_chars: 600,
            ..Default::default()
        },
        ..LocalConfig::default()
    });
    for i in 0..12 {
        remember(
            &t,
            "fact",
            &format!(
                "Project Atlas note {i}: {}",
                "détail ünïcode 日本 ".repeat(i + 1)
            ),
        );
    }
    let recall = t
        .store
        .recall(&recall_of(&alice(), Some("Atlas project")))
        .unwrap();
    assert!(char_len(&recall.text) <= 600, "{}", char_len(&recall.text));
    assert!(!recall.items.is_empty());
    // Whole items only here: each listed item's full text is in the block.
    for item in &recall.items {
        assert!(recall.text.contains(&item.text));
    }
    // An item larger than the whole budget is shortened, never split inside a
    // character, and the block still fits.
    let big = TestStore::with_config(LocalConfig {
        recall: memgate_recall::RecallSettings {
            max_injection_chars: 256,
            ..Default::default()
        },
        ..LocalConfig::default()
    });
    remember(&big, "fact", &format!("Atlas {}", "日本語".repeat(900)));
    let recall = big
        .store
        .recall(&recall_of(&alice(), Some("atlas")))
        .unwrap();
    assert!(char_len(&recall.text) <= 256);
    assert!(recall.text.ends_with('…'));
}

#[test]
fn hostile_query_text_never_breaks_the_match_expression() {
    let t = TestStore::new();
    remember(
        &t,
        "fact",
        "The NEAR term and OR gates, quoted \"stuff\" and col:value",
    );
    let nasty = [
        "\"",
        "\"\"\"",
        "unbalanced \" quote",
        "(((",
        ")",
        "NEAR(",
        "NEAR(a b, 3)",
        "a AND",
        "OR",
        "NOT x",
        "* ^ : - + { } [ ] ;",
        "col:value",
        "{body}: x",
        "body:NEAR",
        "'; DROP TABLE memories; --",
        "\u{0}\u{1}\u{7f}",
        "emoji 🙂🚀 and ZWJ 👩‍👩‍👧",
        "ＡＮＤ full-width",
        "\u{202e}rtl override",
        "stuff*",
        "^stuff",
        "-stuff",
        "x\"y\"z",
        &"word ".repeat(5000),
        &"\"".repeat(10_000),
    ];
    for q in nasty {
        let recall = t.store.recall(&recall_of(&alice(), Some(q)));
        assert!(recall.is_ok(), "{q:.40}: {recall:?}");
        let search = t.store.search(&alice(), &SearchQuery::new(q));
        assert!(search.is_ok(), "{q:.40}: {search:?}");
    }
    // Operators in user text are plain words, not syntax.
    let hits = t.store.search(&alice(), &SearchQuery::new("NEAR")).unwrap();
    assert_eq!(hits.len(), 1);
    let hits = t
        .store
        .search(&alice(), &SearchQuery::new("\"stuff\" OR"))
        .unwrap();
    assert_eq!(hits.len(), 1);
}

#[test]
fn search_filters_by_kind_before_the_top_k_cut() {
    let t = TestStore::new();
    // Five turns about kayaks rank above one kayak decision…
    let turns: Vec<Message> = (0..5)
        .map(|i| Message::human(format!("kayak kayak kayak trip {i}")))
        .collect();
    t.store.capture(&capture(&alice(), "t", turns)).unwrap();
    let decision = remember(&t, "decision", "Buy the cheaper kayak paddle");
    let top2 = t
        .store
        .search(
            &alice(),
            &SearchQuery {
                query: "kayak".into(),
                top_k: 2,
                kind: None,
            },
        )
        .unwrap();
    assert_eq!(top2.len(), 2);
    // …but filtering by kind happens first, so the decision is found.
    let filtered = t
        .store
        .search(
            &alice(),
            &SearchQuery {
                query: "kayak".into(),
                top_k: 2,
                kind: Some("decision".into()),
            },
        )
        .unwrap();
    assert_eq!(filtered.len(), 1);
    assert_eq!(filtered[0].id, decision);
    assert_eq!(filtered[0].category, "decision");
    assert_eq!(filtered[0].source.as_deref(), Some("memory"));
    let only_turns = t
        .store
        .search(
            &alice(),
            &SearchQuery {
                query: "kayak".into(),
                top_k: 10,
                kind: Some("turn".into()),
            },
        )
        .unwrap();
    assert_eq!(only_turns.len(), 5);
    assert!(only_turns
        .iter()
        .all(|h| h.category == "turn" && h.source.as_deref() == Some("thread:t")));
    assert!(only_turns.windows(2).all(|w| w[0].score >= w[1].score));
}

#[test]
fn search_input_is_validated() {
    let t = TestStore::new();
    let cases = [
        (
            SearchQuery {
                query: " ".into(),
                top_k: 5,
                kind: None,
            },
            "invalid query",
        ),
        (
            SearchQuery {
                query: "x".into(),
                top_k: 0,
                kind: None,
            },
            "invalid top_k",
        ),
        (
            SearchQuery {
                query: "x".into(),
                top_k: 101,
                kind: None,
            },
            "invalid top_k",
        ),
        (
            SearchQuery {
                query: "x".into(),
                top_k: 5,
                kind: Some(" ".into()),
            },
            "invalid kind",
        ),
    ];
    for (q, expect) in cases {
        let err = t.store.search(&alice(), &q).unwrap_err();
        assert!(matches!(err, MemoryError::InvalidInput { .. }));
        assert!(err.to_string().starts_with(expect), "{err}");
    }
}

#[test]
fn nothing_stored_or_nothing_matching_is_an_empty_recall() {
    // Without standing memories, recall carries only what matches.
    let t = TestStore::with_config(LocalConfig {
        recall: memgate_recall::RecallSettings {
            standing_memories: 0,
            ..Default::default()
        },
        ..LocalConfig::default()
    });
    let recall = t
        .store
        .recall(&recall_of(&alice(), Some("anything")))
        .unwrap();
    assert!(recall.is_empty() && recall.items.is_empty());
    remember(&t, "fact", "Likes tea");
    let recall = t
        .store
        .recall(&recall_of(&alice(), Some("quantum chromodynamics")))
        .unwrap();
    assert!(recall.is_empty());
    let recall = t
        .store
        .recall(&recall_of(&alice(), Some("what is the")))
        .unwrap();
    assert!(recall.is_empty(), "function words alone match nothing");
}

#[test]
fn a_neighbouring_question_lifts_its_short_answer() {
    let t = TestStore::new();
    t.store
        .capture(&capture(
            &alice(),
            "t",
            vec![
                Message::human("Which airline did you pick for the Lisbon conference flight?"),
                Message::ai("TAP, the morning one."),
                Message::human("Unrelated: the plumber comes Tuesday."),
            ],
        ))
        .unwrap();
    let ranked = t
        .store
        .ranked(&alice(), "Lisbon conference airline", 3, Among::All)
        .unwrap();
    let texts: Vec<_> = ranked.iter().map(|r| r.text.as_str()).collect();
    assert_eq!(
        texts[0],
        "Which airline did you pick for the Lisbon conference flight?"
    );
    // The answer shares no word with the query, so plain BM25 cannot find it;
    // it is found through its neighbour.
    assert!(texts.contains(&"TAP, the morning one."), "{texts:?}");
}

#[test]
fn large_scopes_prune_common_words_and_fall_back_to_the_newest_matches() {
    use memgate_recall::ranked::MAXSCORE_BUDGET;
    let t = TestStore::new();
    let n = MAXSCORE_BUDGET + 200;
    let turns: Vec<Message> = (0..n)
        .map(|i| {
            let extra = if i % 300 == 7 { " tornado warning" } else { "" };
            Message::human(format!("weather update number {i}{extra}"))
        })
        .collect();
    t.store.capture(&capture(&alice(), "t", turns)).unwrap();
    let memo = remember(&t, "fact", "Weather update notes go to the shared folder");

    // `weather` is in every turn (over budget); `tornado` is rare: it decides.
    let ranked = t
        .store
        .ranked(&alice(), "weather tornado", 10, Among::All)
        .unwrap();
    let with_tornado = (0..n).filter(|i| i % 300 == 7).count();
    assert!(ranked.len() >= with_tornado);
    for r in &ranked[..with_tornado] {
        assert!(r.text.contains("tornado"), "{}", r.text);
    }

    // Only common words: the newest matches, the memory first.
    let ranked = t
        .store
        .ranked(&alice(), "weather update", 5, Among::All)
        .unwrap();
    assert_eq!(ranked[0].citation, memo);
    let numbers: Vec<usize> = ranked[1..]
        .iter()
        .map(|r| r.text.split(' ').nth(3).unwrap().parse().unwrap())
        .collect();
    assert_eq!(numbers, [n - 1, n - 2, n - 3, n - 4], "newest first");
}
