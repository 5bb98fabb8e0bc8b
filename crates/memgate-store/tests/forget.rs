//! Erasure: forgetting a memory (with its history), a thread or a whole
//! scope leaves no copy in the database files (a byte scan of the main
//! file, the WAL and the shared-memory file after the call), keeps every
//! other scope's identical text, and does not disturb concurrent captures.
//! The retention sweep erases captured turns past the maximum age.

mod common;

use common::{alice, capture, files_containing, recall_of, TestStore};
use memgate_core::facts::{ExportedTurn, EXPORT_FORMAT};
use memgate_core::{
    BackendContext, Caller, FactPatch, ForgetReport, ForgetTarget, MemoryBackend, MemoryError,
    MemoryExport, Message, RememberOutcome, RememberRequest,
};
use memgate_store::{LocalBackend, LocalConfig, MemoryStore};
use serde_json::json;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

fn bob() -> Caller {
    Caller::new("bob")
}

fn remember(store: &MemoryStore, caller: &Caller, text: &str) -> String {
    match store
        .remember(caller, &RememberRequest::new("fact", text).unwrap())
        .unwrap()
    {
        RememberOutcome::Stored { citation } => citation.0,
        other => panic!("{other:?}"),
    }
}

fn none() -> Vec<String> {
    Vec::new()
}

/// Enough ordinary turns that the index has several segments and pages.
fn filler(store: &MemoryStore, caller: &Caller, thread: &str, n: usize) {
    let messages = (0..n)
        .map(|i| Message::human(format!("filler turn {i} about gardening and tomatoes")))
        .collect();
    store.capture(&capture(caller, thread, messages)).unwrap();
}

#[test]
fn forgetting_a_fact_erases_every_version_from_every_file() {
    let t = TestStore::new();
    filler(&t.store, &alice(), "t0", 200);
    let id = remember(
        &t.store,
        &alice(),
        "my locker code is quokka7731 at the gym",
    );
    t.store
        .revise_fact(
            &alice(),
            &id,
            &FactPatch {
                kind: None,
                text: Some("my locker code is wombat8842 at the gym".to_owned()),
                confidence: None,
            },
        )
        .unwrap();
    let kept = remember(&t.store, &alice(), "I prefer green tea");
    // The scan finds what is stored (so an empty scan later means erased).
    assert!(!files_containing(&t.path(), "quokka7731").is_empty());
    assert!(!files_containing(&t.path(), "wombat8842").is_empty());

    let report = t
        .store
        .forget(&alice(), &ForgetTarget::Fact { id: id.clone() })
        .unwrap();
    assert_eq!(
        report,
        ForgetReport {
            facts: 1,
            versions: 2,
            turns: 0
        }
    );
    assert_eq!(files_containing(&t.path(), "quokka7731"), none());
    assert_eq!(files_containing(&t.path(), "wombat8842"), none());
    assert!(matches!(
        t.store.get_fact(&alice(), &id),
        Err(MemoryError::NotFound(_))
    ));
    assert!(t.store.fact_history(&alice(), &id).is_err());
    let left: Vec<String> = t
        .store
        .list_facts(&alice(), true)
        .unwrap()
        .into_iter()
        .map(|f| f.id)
        .collect();
    assert_eq!(left, vec![kept]);
    let recall = t
        .store
        .recall(&recall_of(&alice(), Some("locker code gym tea")))
        .unwrap();
    assert!(!recall.text.contains("locker"), "{}", recall.text);
    assert!(recall.text.contains("green tea"));
    t.store.check_integrity().unwrap();
}

#[test]
fn forgetting_alices_thread_leaves_bob_and_her_other_threads_intact() {
    let t = TestStore::new();
    let shared = "we planned the trip to Lisbon in May";
    let alice_thread = vec![
        Message::human(shared).with_id("s1"),
        Message::human("only alice said platypus5519 here").with_id("s2"),
    ];
    t.store
        .capture(&capture(&alice(), "t1", alice_thread.clone()))
        .unwrap();
    t.store
        .capture(&capture(
            &alice(),
            "t2",
            vec![Message::human("second thread koala3307")],
        ))
        .unwrap();
    t.store
        .capture(&capture(&bob(), "t1", alice_thread[..1].to_vec()))
        .unwrap();
    filler(&t.store, &bob(), "t9", 100);

    let report = t
        .store
        .forget(&alice().with_thread("t1"), &ForgetTarget::Thread)
        .unwrap();
    assert_eq!(report.turns, 2);
    assert_eq!(files_containing(&t.path(), "platypus5519"), none());

    let alice_turns = t.store.export(&alice()).unwrap().turns;
    assert_eq!(alice_turns.len(), 1);
    assert_eq!(alice_turns[0].thread, "t2");
    let bob_turns = t.store.export(&bob()).unwrap().turns;
    assert!(bob_turns.iter().any(|turn| turn.text == shared));
    let recall = t
        .store
        .recall(&recall_of(&bob(), Some("trip Lisbon")))
        .unwrap();
    assert!(recall.text.contains("Lisbon"), "{}", recall.text);
    let recall = t
        .store
        .recall(&recall_of(&alice(), Some("trip Lisbon platypus5519")))
        .unwrap();
    assert!(!recall.text.contains("Lisbon"), "{}", recall.text);

    // Capturing the forgotten thread again stores it again (signatures are gone too).
    let again = t
        .store
        .capture(&capture(&alice(), "t1", alice_thread))
        .unwrap();
    assert_eq!(again.stored, 2);
    assert!(matches!(
        t.store.forget(&alice(), &ForgetTarget::Thread),
        Err(MemoryError::InvalidInput { .. })
    ));
}

#[test]
fn forgetting_a_scope_erases_its_memories_turns_and_the_user_id() {
    let t = TestStore::new();
    let erin = Caller::new("erin4471user");
    let erin_research = erin.clone().with_agent("research");
    remember(&t.store, &erin, "erin likes echidna6620 documentaries");
    t.store
        .capture(&capture(
            &erin,
            "t1",
            vec![Message::human("erin said numbat2290 twice")],
        ))
        .unwrap();
    remember(&t.store, &erin_research, "research notes mention dingo1180");
    remember(&t.store, &alice(), "alice likes echidna documentaries too");
    filler(&t.store, &alice(), "t1", 100);

    let report = t.store.forget(&erin, &ForgetTarget::Scope).unwrap();
    assert_eq!((report.facts, report.versions, report.turns), (1, 1, 1));
    for gone in ["echidna6620", "numbat2290"] {
        assert_eq!(files_containing(&t.path(), gone), none(), "{gone}");
    }
    // The same user's other agent is another scope, and stays.
    assert_eq!(t.store.list_facts(&erin_research, false).unwrap().len(), 1);
    assert!(!files_containing(&t.path(), "dingo1180").is_empty());
    t.store
        .forget(&erin_research, &ForgetTarget::Scope)
        .unwrap();
    assert_eq!(files_containing(&t.path(), "erin4471user"), none());
    assert_eq!(files_containing(&t.path(), "dingo1180"), none());
    assert_eq!(t.store.list_facts(&alice(), false).unwrap().len(), 1);
    t.store.check_integrity().unwrap();
}

#[test]
fn forgetting_nothing_erases_nothing_and_another_scopes_fact_is_not_found() {
    let t = TestStore::new();
    assert_eq!(
        t.store.forget(&alice(), &ForgetTarget::Scope).unwrap(),
        ForgetReport::default()
    );
    assert_eq!(
        t.store
            .forget(&alice().with_thread("nope"), &ForgetTarget::Thread)
            .unwrap(),
        ForgetReport::default()
    );
    let bobs = remember(&t.store, &bob(), "bob's fact");
    remember(&t.store, &alice(), "alice's fact");
    assert!(matches!(
        t.store
            .forget(&alice(), &ForgetTarget::Fact { id: bobs.clone() }),
        Err(MemoryError::NotFound(_))
    ));
    assert_eq!(t.store.list_facts(&bob(), false).unwrap().len(), 1);
    let e = t
        .store
        .forget(&alice(), &ForgetTarget::Fact { id: "42".into() })
        .unwrap_err();
    assert!(
        matches!(&e, MemoryError::InvalidInput { field, .. } if field == "id"),
        "{e}"
    );
}

#[test]
fn captures_running_during_forgets_are_kept_whole() {
    const WRITERS: usize = 3;
    const ROUNDS: usize = 25;
    let t = TestStore::new();
    let store = Arc::new(MemoryStore::open(t.path(), LocalConfig::default()).unwrap());
    let started = Instant::now();
    let writers: Vec<_> = (0..WRITERS)
        .map(|w| {
            let store = Arc::clone(&store);
            std::thread::spawn(move || {
                for r in 0..ROUNDS {
                    let messages = vec![
                        Message::human(format!("writer {w} round {r} asks about herbs")),
                        Message::ai(format!("writer {w} round {r} answer about basil")),
                    ];
                    let report = store
                        .capture(&capture(&alice(), &format!("w{w}"), messages))
                        .unwrap();
                    assert_eq!(report.stored, 2);
                }
            })
        })
        .collect();
    let mut forgets = 0;
    while writers.iter().any(|w| !w.is_finished()) && forgets < 50 {
        store
            .capture(&capture(
                &alice(),
                "doomed",
                vec![Message::human(format!("doomed wallaby{forgets}x"))],
            ))
            .unwrap();
        let report = store
            .forget(&alice().with_thread("doomed"), &ForgetTarget::Thread)
            .unwrap();
        assert_eq!(report.turns, 1);
        forgets += 1;
    }
    for w in writers {
        w.join().unwrap();
    }
    store
        .forget(&alice().with_thread("doomed"), &ForgetTarget::Thread)
        .unwrap();
    let turns = store.export(&alice()).unwrap().turns;
    assert_eq!(turns.len(), WRITERS * ROUNDS * 2);
    assert!(turns.iter().all(|t| t.thread != "doomed"));
    store.check_integrity().unwrap();
    assert_eq!(files_containing(&t.path(), "wallaby0x"), none());
    println!(
        "{forgets} forgets ran during {} captures in {:?}",
        WRITERS * ROUNDS,
        started.elapsed()
    );
}

fn old_turn(i: usize, captured_at: &str) -> ExportedTurn {
    ExportedTurn {
        thread: "old".into(),
        role: "human".into(),
        text: format!("an old turn {i} about bilby9904"),
        signature: format!("{:064x}", i + 1),
        captured_at: Some(captured_at.into()),
    }
}

fn old_export(n: usize) -> MemoryExport {
    MemoryExport {
        format: EXPORT_FORMAT.to_owned(),
        facts: Vec::new(),
        turns: (0..n)
            .map(|i| old_turn(i, "2020-01-01T00:00:00.000Z"))
            .collect(),
    }
}

#[test]
fn the_retention_sweep_erases_turns_past_the_maximum_age_in_bounded_batches() {
    let config = LocalConfig {
        max_turn_age: Some(Duration::from_secs(86_400 * 30)),
        ..LocalConfig::default()
    };
    let t = TestStore::with_config(config);
    let n = memgate_store::forget::SWEEP_BATCH + 7;
    t.store.import(&alice(), &old_export(n)).unwrap();
    t.store
        .capture(&capture(
            &alice(),
            "fresh",
            vec![Message::human("a fresh turn about bandicoots")],
        ))
        .unwrap();
    let erased = t.store.sweep_expired_turns(SystemTime::now()).unwrap();
    assert_eq!(erased, n);
    let turns = t.store.export(&alice()).unwrap().turns;
    assert_eq!(turns.len(), 1);
    assert_eq!(turns[0].thread, "fresh");
    assert_eq!(files_containing(&t.path(), "bilby9904"), none());
    assert_eq!(t.store.sweep_expired_turns(SystemTime::now()).unwrap(), 0);
    // Without a maximum age nothing is swept.
    let keep = TestStore::new();
    keep.store.import(&alice(), &old_export(3)).unwrap();
    assert_eq!(
        keep.store.sweep_expired_turns(SystemTime::now()).unwrap(),
        0
    );
}

#[tokio::test]
async fn the_backend_sweeps_in_the_background_and_forget_runs_through_it() {
    let dir = tempfile::tempdir().unwrap();
    let ctx = BackendContext::new(dir.path());
    let plain = LocalBackend::from_backend_config(&serde_json::Map::new(), &ctx).unwrap();
    plain.import(&alice(), &old_export(5)).await.unwrap();
    assert!(plain.shutdown(Duration::from_secs(5)).await);
    drop(plain);

    let config = json!({"max_turn_age_days": 30});
    let backend = LocalBackend::from_backend_config(config.as_object().unwrap(), &ctx).unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        if backend.export(&alice()).await.unwrap().turns.is_empty() {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the background sweep did not run"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let id = match backend
        .remember(
            &alice(),
            &RememberRequest::new("fact", "forget me via the trait").unwrap(),
        )
        .await
        .unwrap()
    {
        RememberOutcome::Stored { citation } => citation.0,
        other => panic!("{other:?}"),
    };
    let report = backend
        .forget(&alice(), &ForgetTarget::Fact { id })
        .await
        .unwrap();
    assert_eq!(report.facts, 1);
    assert!(backend.shutdown(Duration::from_secs(5)).await);
}

#[test]
fn forgetting_a_user_erases_every_agent_of_that_user_only() {
    let t = TestStore::new();
    let frank = Caller::new("frank5523user");
    remember(&t.store, &frank, "frank's default peer likes kiwi3321");
    remember(
        &t.store,
        &frank.clone().with_agent("coder"),
        "coder peer notes takahe8876",
    );
    t.store
        .capture(&capture(
            &frank.clone().with_agent("coder"),
            "t1",
            vec![Message::human("coder turn kakapo4410")],
        ))
        .unwrap();
    remember(&t.store, &alice(), "alice keeps kiwi notes");
    let report = t.store.forget(&frank, &ForgetTarget::User).unwrap();
    assert_eq!((report.facts, report.turns), (2, 1));
    for gone in ["kiwi3321", "takahe8876", "kakapo4410", "frank5523user"] {
        assert_eq!(files_containing(&t.path(), gone), none(), "{gone}");
    }
    assert_eq!(t.store.list_facts(&alice(), false).unwrap().len(), 1);
}

/// The levels a forget of carol's can take, each with what to plant first.
#[derive(Clone, Copy, Debug)]
enum Level {
    Fact,
    Thread,
    Scope,
    User,
}

const LEVELS: [Level; 4] = [Level::Fact, Level::Thread, Level::Scope, Level::User];

fn carol() -> Caller {
    Caller::new("carol")
}

/// Plants `text` where a forget at `level` of carol's erases it, and
/// forgets it; returns what the forget reported.
fn plant_and_forget(store: &MemoryStore, level: Level, text: &str) -> ForgetReport {
    let doomed = vec![Message::human(text)];
    let (caller, target) = match level {
        Level::Fact => {
            let id = remember(store, &carol(), text);
            (carol(), ForgetTarget::Fact { id })
        }
        Level::Thread => {
            store.capture(&capture(&carol(), "doomed", doomed)).unwrap();
            (carol().with_thread("doomed"), ForgetTarget::Thread)
        }
        Level::Scope => {
            remember(store, &carol(), text);
            store.capture(&capture(&carol(), "doomed", doomed)).unwrap();
            (carol(), ForgetTarget::Scope)
        }
        Level::User => {
            remember(store, &carol().with_agent("coder"), text);
            store.capture(&capture(&carol(), "doomed", doomed)).unwrap();
            (carol(), ForgetTarget::User)
        }
    };
    store.forget(&caller, &target).unwrap()
}

#[test]
fn every_level_leaves_another_users_identical_text_intact() {
    let shared = "the spare key is under the blue flowerpot";
    for level in LEVELS {
        let t = TestStore::new();
        // bob holds the very same text, as a memory and as a turn.
        remember(&t.store, &bob(), shared);
        t.store
            .capture(&capture(&bob(), "doomed", vec![Message::human(shared)]))
            .unwrap();
        filler(&t.store, &bob(), "t9", 50);
        let report = plant_and_forget(&t.store, level, shared);
        assert!(
            report.facts + report.turns >= 1,
            "{level:?} erased nothing: {report:?}"
        );
        for who in [carol(), carol().with_agent("coder")] {
            let left = t.store.export(&who).unwrap();
            assert!(
                left.facts.is_empty() && left.turns.is_empty(),
                "{level:?}: carol keeps {left:?}"
            );
        }
        let bobs = t.store.export(&bob()).unwrap();
        assert_eq!(bobs.facts.len(), 1, "{level:?}");
        assert!(
            bobs.turns.iter().any(|turn| turn.text == shared),
            "{level:?}"
        );
        let recall = t
            .store
            .recall(&recall_of(&bob(), Some("spare key blue flowerpot")))
            .unwrap();
        assert!(
            recall.text.contains("flowerpot"),
            "{level:?}: {}",
            recall.text
        );
        let recall = t
            .store
            .recall(&recall_of(&carol(), Some("spare key blue flowerpot")))
            .unwrap();
        assert!(
            !recall.text.contains("flowerpot"),
            "{level:?}: {}",
            recall.text
        );
        t.store.check_integrity().unwrap();
    }
}

#[test]
fn captures_running_during_a_forget_at_every_level_are_kept_whole() {
    const ROUNDS: usize = 15;
    for level in LEVELS {
        let t = TestStore::new();
        let store = Arc::new(MemoryStore::open(t.path(), LocalConfig::default()).unwrap());
        let started = Instant::now();
        // Writers into other users' scopes (and another agent of alice's).
        let writers: Vec<_> = [bob(), alice().with_agent("coder")]
            .into_iter()
            .enumerate()
            .map(|(w, who)| {
                let store = Arc::clone(&store);
                std::thread::spawn(move || {
                    for r in 0..ROUNDS {
                        let messages = vec![
                            Message::human(format!("writer {w} round {r} asks about herbs")),
                            Message::ai(format!("writer {w} round {r} answer about basil")),
                        ];
                        let report = store
                            .capture(&capture(&who, &format!("w{w}-{r}"), messages))
                            .unwrap();
                        assert_eq!(report.stored, 2);
                    }
                })
            })
            .collect();
        let mut forgets = 0;
        while writers.iter().any(|w| !w.is_finished()) && forgets < 40 {
            plant_and_forget(&store, level, &format!("doomed numbat{forgets}x"));
            forgets += 1;
        }
        for w in writers {
            w.join().unwrap();
        }
        for who in [bob(), alice().with_agent("coder")] {
            assert_eq!(
                store.export(&who).unwrap().turns.len(),
                ROUNDS * 2,
                "{level:?}: every concurrent capture is kept"
            );
        }
        let carols = store.export(&carol()).unwrap();
        assert!(
            carols.facts.is_empty() && carols.turns.is_empty(),
            "{level:?}"
        );
        store.check_integrity().unwrap();
        assert_eq!(files_containing(&t.path(), "numbat0x"), none(), "{level:?}");
        println!(
            "{level:?}: {forgets} forgets ran during {} captures in {:?}",
            2 * ROUNDS,
            started.elapsed()
        );
    }
}

/// The integrity check after a forget is not fooled by a pooled reader that
/// last read before the forget rewrote the recall index (seen to report
/// "fts5: corruption found" on a sound file): it runs on a connection of its
/// own.
#[test]
fn the_integrity_check_after_a_forget_reads_the_file_as_it_is() {
    let t = TestStore::new();
    let caller = alice().with_thread("t1");
    t.store
        .capture(&capture(
            &alice(),
            "t1",
            vec![Message::human("the quokka7731 likes the garden")],
        ))
        .unwrap();
    for _ in 0..4 {
        t.store
            .recall(&recall_of(&alice(), Some("quokka7731 garden")))
            .unwrap();
    }
    t.store.forget(&caller, &ForgetTarget::Thread).unwrap();
    t.store.check_integrity().unwrap();
    t.store
        .recall(&recall_of(&alice(), Some("quokka7731 garden")))
        .unwrap();
    t.store.check_integrity().unwrap();
}
