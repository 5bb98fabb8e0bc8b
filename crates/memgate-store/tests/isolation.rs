//! Randomized: many (user, peer) scopes share one file and one vocabulary,
//! and no read (recall, search, facts, export) ever shows another scope's
//! data. Seeded, so a failure reproduces.

mod common;

use common::{capture, pick, Rng, TestStore};
use memgate_core::{Caller, FactPatch, Message, RecallRequest, RememberRequest, SearchQuery};
use std::collections::{HashMap, HashSet};

const WORDS: &[&str] = &[
    "garden", "tomato", "invoice", "paris", "vim", "budget", "kayak", "piano", "server",
    "deadline", "coffee", "beagle", "flight", "recipe", "report",
];

/// Every stored text carries the scope it was written in: `owner<u><p>`.
fn marker(scope: usize) -> String {
    format!("owner{scope}x")
}

fn scope_of(text: &str) -> Option<usize> {
    let start = text.find("owner")? + 5;
    let rest = &text[start..];
    rest[..rest.find('x')?].parse().ok()
}

#[test]
fn no_read_ever_crosses_a_scope() {
    for seed in [1_u64, 7, 42] {
        run(seed);
    }
}

fn run(seed: u64) {
    let mut rng = Rng::new(seed);
    let t = TestStore::new();
    // Users include the host fallback `default`; peers include no agent,
    // an empty agent (the same default peer) and one literally named `default`.
    let users = ["alice", "bob", "default", "Alice"];
    let peers: [Option<&str>; 4] = [None, Some("coder"), Some("default"), Some("writer")];
    let scopes: Vec<Caller> = users
        .iter()
        .flat_map(|u| {
            peers.iter().map(move |p| {
                let c = Caller::new(*u);
                match p {
                    Some(p) => c.with_agent(*p),
                    None => c,
                }
            })
        })
        .collect();
    let index: HashMap<(String, String), usize> = scopes
        .iter()
        .enumerate()
        .map(|(i, c)| ((c.user.to_string(), c.agent.clone().unwrap_or_default()), i))
        .collect();
    let scope_index =
        |c: &Caller| index[&(c.user.to_string(), c.agent.clone().unwrap_or_default())];
    let mut citations: Vec<HashSet<String>> = vec![HashSet::new(); scopes.len()];

    for step in 0..400 {
        let who = pick(&mut rng, &scopes).clone();
        let s = scope_index(&who);
        let words: Vec<&str> = (0..3).map(|_| *pick(&mut rng, WORDS)).collect();
        let text = format!("{} {} {step}", words.join(" "), marker(s));
        match rng.below(4) {
            0 | 1 => {
                let outcome = t
                    .store
                    .remember(&who, &RememberRequest::new("fact", &text).unwrap())
                    .unwrap();
                if let memgate_core::RememberOutcome::Stored { citation } = outcome {
                    citations[s].insert(citation.0);
                }
            }
            2 => {
                let thread = format!("thread{}", rng.below(3));
                let msgs = vec![
                    Message::human(text.clone()),
                    Message::ai(format!("ok {text}")),
                ];
                t.store.capture(&capture(&who, &thread, msgs)).unwrap();
            }
            _ => {
                // Revise or retire one of this scope's own memories.
                let mine: Vec<String> = citations[s].iter().cloned().collect();
                if let Some(id) = mine.first() {
                    if rng.below(2) == 0 {
                        t.store.retire_fact(&who, id).unwrap();
                    } else {
                        let _ = t.store.revise_fact(
                            &who,
                            id,
                            &FactPatch {
                                text: Some(format!("{text} revised")),
                                kind: None,
                                confidence: None,
                            },
                        );
                    }
                }
            }
        }
    }

    // The empty agent is the default peer: same scope as no agent.
    let alias = Caller::new("alice").with_agent("");
    assert_eq!(scope_index(&alias), scope_index(&Caller::new("alice")));

    for who in &scopes {
        let s = scope_index(who);
        let check = |text: &str, what: &str| {
            assert_eq!(
                scope_of(text),
                Some(s),
                "seed {seed}: {what} leaked into scope {s}: {text}"
            );
        };
        for word in WORDS {
            let query = format!("{word} {}", WORDS[(s + 3) % WORDS.len()]);
            let recall = t
                .store
                .recall(&RecallRequest {
                    caller: who.clone(),
                    query: Some(query.clone()),
                })
                .unwrap();
            for item in &recall.items {
                check(&item.text, "recall");
            }
            for line in recall.text.lines().skip(1) {
                check(line, "recall block");
            }
            for hit in t
                .store
                .search(
                    who,
                    &SearchQuery {
                        query,
                        top_k: 100,
                        kind: None,
                    },
                )
                .unwrap()
            {
                check(&hit.content, "search");
            }
        }
        // Querying another scope's marker finds nothing.
        for other in 0..scopes.len() {
            if other == s {
                continue;
            }
            let hits = t
                .store
                .search(who, &SearchQuery::new(marker(other)))
                .unwrap();
            assert!(
                hits.is_empty(),
                "seed {seed}: scope {s} found scope {other}'s marker"
            );
        }
        let facts = t.store.list_facts(who, true).unwrap();
        for f in &facts {
            check(&f.text, "facts");
            assert!(
                citations[s].contains(&f.id),
                "seed {seed}: foreign citation {}",
                f.id
            );
        }
        assert_eq!(
            facts.len(),
            citations[s].len(),
            "seed {seed}: facts of scope {s}"
        );
        let export = t.store.export(who).unwrap();
        for f in &export.facts {
            check(&f.text, "export facts");
        }
        for turn in &export.turns {
            check(&turn.text, "export turns");
        }
        // Another scope's citations are NotFound here.
        for (other, ids) in citations.iter().enumerate() {
            if other == s {
                continue;
            }
            for id in ids {
                assert!(
                    t.store.get_fact(who, id).is_err(),
                    "seed {seed}: {id} visible to {s}"
                );
            }
        }
    }
}

#[test]
fn the_recall_index_itself_is_partitioned_by_scope() {
    let t = TestStore::new();
    let a = Caller::new("alice");
    let b = Caller::new("bob");
    for (who, n) in [(&a, 3), (&b, 5)] {
        for i in 0..n {
            t.store
                .remember(
                    who,
                    &RememberRequest::new("fact", &format!("kayak trip {i}")).unwrap(),
                )
                .unwrap();
        }
    }
    let conn = rusqlite::Connection::open(t.path()).unwrap();
    let scope_id = |user: &str| -> i64 {
        conn.query_row(
            "SELECT id FROM scopes WHERE user_id = ?1 AND peer = ''",
            [user],
            |r| r.get(0),
        )
        .unwrap()
    };
    for (user, expected) in [("alice", 3), ("bob", 5)] {
        let id = scope_id(user);
        let tag = memgate_recall::terms::scope_tag(id);
        let rows: Vec<i64> = conn
            .prepare("SELECT rowid FROM recall_index WHERE recall_index MATCH ?1")
            .unwrap()
            .query_map([format!("\"{tag}kayak\"")], |r| r.get(0))
            .unwrap()
            .collect::<Result<_, _>>()
            .unwrap();
        assert_eq!(rows.len(), expected, "{user}");
        for rowid in rows {
            let owner: i64 = conn
                .query_row(
                    "SELECT scope_id FROM memories WHERE id = ?1",
                    [-rowid],
                    |r| r.get(0),
                )
                .unwrap();
            assert_eq!(
                owner, id,
                "index row {rowid} of another scope under {user}'s tag"
            );
        }
    }
}
