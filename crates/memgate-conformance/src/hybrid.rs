//! Hybrid recall behaviours: dense retrieval fused with full text, scoped
//! like every row, following revise, retire and forget, with model changes
//! made explicit and embedder failures falling back to full text.
//!
//! [`ConceptEmbedder`] is a deterministic test embedder (named as one, not a
//! model): each text becomes a unit vector over a few fixed concepts, so
//! "kitten" and "cat" meet although they share no word.

use crate::behaviour::{alice, capture};
use crate::{HybridHandle, Subject};
use memgate_core::{Caller, FactPatch, ForgetTarget, Message, RememberOutcome, SearchQuery};
use memgate_embed::{EmbedError, Embedder};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

/// The test embedder (module doc); `failing` makes every call fail.
pub struct ConceptEmbedder {
    model: String,
    pub failing: AtomicBool,
}

const CONCEPTS: &[&[&str]] = &[
    &["cat", "kitten", "feline", "pet"],
    &["car", "vehicle", "drive", "garage"],
    &["porto", "portugal", "lisbon", "city"],
    &["piano", "music", "song"],
];

impl ConceptEmbedder {
    pub fn new(model: &str) -> Arc<Self> {
        Arc::new(Self {
            model: model.into(),
            failing: AtomicBool::new(false),
        })
    }
}

impl Embedder for ConceptEmbedder {
    fn model(&self) -> &str {
        &self.model
    }

    fn embed(&self, texts: &[&str]) -> Result<Vec<Vec<f32>>, EmbedError> {
        if self.failing.load(Ordering::Relaxed) {
            return Err(EmbedError::Failed("test embedder made to fail".into()));
        }
        Ok(texts
            .iter()
            .map(|t| {
                let lower = t.to_lowercase();
                let mut v: Vec<f32> = CONCEPTS
                    .iter()
                    .map(|c| c.iter().filter(|w| lower.contains(*w)).count() as f32)
                    .collect();
                v.push(0.1); // never the zero vector
                memgate_embed::normalize(&mut v);
                v
            })
            .collect())
    }
}

async fn searched(
    h: &HybridHandle,
    caller: &Caller,
    query: &str,
    kind: Option<&str>,
) -> Vec<String> {
    h.backend
        .search(
            caller,
            &SearchQuery {
                query: query.into(),
                top_k: 5,
                kind: kind.map(str::to_owned),
            },
        )
        .await
        .unwrap()
        .into_iter()
        .map(|hit| hit.content)
        .collect()
}

/// Three turns, one per [`ConceptEmbedder`] concept, none sharing a word
/// with the concepts' other names ("cat", "car", "music").
pub fn concept_turns() -> Vec<Message> {
    vec![
        Message::human("I adopted a kitten last spring"),
        Message::human("The garage fixed my vehicle"),
        Message::human("Practising piano every evening"),
    ]
}

async fn seed(h: &HybridHandle, caller: &Caller) {
    h.backend
        .capture(&capture(caller, "t1", concept_turns()))
        .await
        .unwrap();
}

/// (embedded, total) after the indexer caught up.
async fn indexed(h: &HybridHandle) -> (u64, u64) {
    h.vectors.index_all().await.unwrap();
    let p = h.vectors.progress().await.unwrap();
    assert!(!p.model_mismatch, "{p:?}");
    (p.embedded, p.total)
}

pub async fn hybrid_recall_finds_what_shares_no_word_and_stays_in_its_scope(s: &impl Subject) {
    let h = s.hybrid(ConceptEmbedder::new("concepts/5")).await;
    let bob = Caller::new("bob");
    seed(&h, &alice()).await;
    h.backend
        .capture(&capture(
            &bob,
            "b",
            vec![Message::human("Bob's feline is called Secret")],
        ))
        .await
        .unwrap();
    assert_eq!(indexed(&h).await, (4, 4));
    // No word in common with the turn: only its vector finds it.
    let got = searched(&h, &alice(), "Which cat do I own?", None).await;
    assert_eq!(
        got.first().map(String::as_str),
        Some("I adopted a kitten last spring"),
        "{got:?}"
    );
    assert!(got.iter().all(|t| !t.contains("Secret")), "{got:?}");
    let turns = searched(&h, &alice(), "cat", Some("turn")).await;
    assert_eq!(turns[0], "I adopted a kitten last spring");
    // A memory-kind filter keeps turns out of the dense hits too.
    assert!(searched(&h, &alice(), "cat", Some("fact")).await.is_empty());
    let recall = h
        .backend
        .recall(&crate::behaviour::recall_of(&alice(), Some("my pet")))
        .await
        .unwrap();
    assert!(recall.text.contains("kitten"), "{}", recall.text);
    assert!(!recall.text.contains("Secret"), "{}", recall.text);
    // Bob's results never carry Alice's rows.
    assert_eq!(
        searched(&h, &bob, "kitten", None).await,
        ["Bob's feline is called Secret"]
    );
}

/// A question that names one speaker ranks that speaker's turn above
/// another's that matches it as well or better: the default re-ordering
/// ([`memgate_recall::Rerank::DEFAULT`]) runs on every backend.
pub async fn hybrid_recall_prefers_the_speaker_a_question_names(s: &impl Subject) {
    let h = s.hybrid(ConceptEmbedder::new("concepts/5")).await;
    h.backend
        .capture(&capture(
            &alice(),
            "t1",
            vec![
                // Ben's turn holds every word of the question, "Ana" in
                // its text; Ana's holds her name only as its speaker.
                Message::human("Ana, do you keep a kitten? I keep a kitten.").with_name("Ben"),
                Message::ai("I keep a kitten at home").with_name("Ana"),
                Message::human("The garage fixed my vehicle").with_name("Ben"),
            ],
        ))
        .await
        .unwrap();
    assert_eq!(indexed(&h).await, (3, 3));
    let got = searched(&h, &alice(), "Does Ana keep a kitten?", None).await;
    assert_eq!(
        got.first().map(String::as_str),
        Some("I keep a kitten at home"),
        "{got:?}"
    );
    // Naming no speaker, the turn with more of the question leads.
    let got = searched(&h, &alice(), "who keeps a kitten?", None).await;
    assert_eq!(
        got.first().map(String::as_str),
        Some("Ana, do you keep a kitten? I keep a kitten."),
        "{got:?}"
    );
}

pub async fn hybrid_vectors_follow_revise_and_retire(s: &impl Subject) {
    let h = s.hybrid(ConceptEmbedder::new("concepts/5")).await;
    h.backend
        .capture(&capture(
            &alice(),
            "t",
            vec![Message::human("I adopted a kitten")],
        ))
        .await
        .unwrap();
    let id = match h
        .backend
        .remember(&alice(), &crate::behaviour::fact("Drives an old vehicle"))
        .await
        .unwrap()
    {
        RememberOutcome::Stored { citation } => citation.0,
        other => panic!("{other:?}"),
    };
    assert_eq!(indexed(&h).await, (2, 2));
    assert_eq!(
        searched(&h, &alice(), "my car", None).await[0],
        "Drives an old vehicle"
    );
    h.backend
        .revise_fact(
            &alice(),
            &id,
            &FactPatch {
                text: Some("Plays piano".into()),
                ..Default::default()
            },
        )
        .await
        .unwrap();
    // Embedded again from the new text.
    assert_eq!(indexed(&h).await, (2, 2));
    assert_eq!(
        searched(&h, &alice(), "some music", None).await[0],
        "Plays piano"
    );
    h.backend.retire_fact(&alice(), &id).await.unwrap();
    assert_eq!(indexed(&h).await, (1, 1));
    let got = searched(&h, &alice(), "some music", None).await;
    assert!(!got.iter().any(|t| t == "Plays piano"), "{got:?}");
}

pub async fn hybrid_forget_erases_the_vectors_of_what_is_forgotten(s: &impl Subject) {
    let h = s.hybrid(ConceptEmbedder::new("concepts/5")).await;
    seed(&h, &alice()).await;
    h.backend
        .capture(&capture(
            &alice(),
            "t2",
            vec![Message::human("Lisbon in May")],
        ))
        .await
        .unwrap();
    let id = match h
        .backend
        .remember(&alice(), &crate::behaviour::fact("Likes songs"))
        .await
        .unwrap()
    {
        RememberOutcome::Stored { citation } => citation.0,
        other => panic!("{other:?}"),
    };
    assert_eq!(indexed(&h).await, (5, 5));
    h.backend
        .forget(&alice().with_thread("t1"), &ForgetTarget::Thread)
        .await
        .unwrap();
    assert_eq!(indexed(&h).await, (2, 2));
    let got = searched(&h, &alice(), "cat", None).await;
    assert!(!got.iter().any(|t| t.contains("kitten")), "{got:?}");
    h.backend
        .forget(&alice(), &ForgetTarget::Fact { id })
        .await
        .unwrap();
    assert_eq!(indexed(&h).await, (1, 1));
    assert_eq!(
        searched(&h, &alice(), "portugal", None).await,
        ["Lisbon in May"]
    );
}

pub async fn hybrid_model_change_keeps_recall_lexical_until_reembed(s: &impl Subject) {
    let h = s.hybrid(ConceptEmbedder::new("concepts/5")).await;
    seed(&h, &alice()).await;
    assert_eq!(indexed(&h).await, (3, 3));
    let other = h.reopen(ConceptEmbedder::new("concepts-v2/5")).await;
    let p = other.vectors.progress().await.unwrap();
    assert!(p.model_mismatch, "{p:?}");
    assert_eq!(other.vectors.index_all().await.unwrap(), 0);
    // Full text only: "cat" shares no word with any turn.
    assert!(searched(&other, &alice(), "cat", None).await.is_empty());
    assert_eq!(
        searched(&other, &alice(), "kitten", None).await[0],
        "I adopted a kitten last spring"
    );
    // The first handle's indexer would embed with the old model again.
    drop(h);
    assert_eq!(other.vectors.reembed().await.unwrap(), 3);
    assert_eq!(indexed(&other).await, (3, 3));
    assert_eq!(
        searched(&other, &alice(), "cat", None).await[0],
        "I adopted a kitten last spring"
    );
    // Now the old model is the one that does not match.
    let old = other.reopen(ConceptEmbedder::new("concepts/5")).await;
    assert!(old.vectors.progress().await.unwrap().model_mismatch);
}

pub async fn hybrid_embedder_failure_falls_back_to_full_text(s: &impl Subject) {
    let embedder = ConceptEmbedder::new("concepts/5");
    let h = s.hybrid(embedder.clone()).await;
    seed(&h, &alice()).await;
    assert_eq!(indexed(&h).await, (3, 3));
    embedder.failing.store(true, Ordering::Relaxed);
    assert!(searched(&h, &alice(), "cat", None).await.is_empty());
    assert_eq!(
        searched(&h, &alice(), "kitten", None).await[0],
        "I adopted a kitten last spring"
    );
    h.backend
        .capture(&capture(&alice(), "t9", vec![Message::human("A new pet")]))
        .await
        .unwrap();
    assert!(h.vectors.index_all().await.is_err());
    embedder.failing.store(false, Ordering::Relaxed);
    assert_eq!(indexed(&h).await, (4, 4));
}
