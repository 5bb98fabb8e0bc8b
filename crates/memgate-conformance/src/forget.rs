//! Erasure behaviours: every `forget` level removes what it names and
//! nothing else, from every read path (recall, search, facts, export), and
//! the scope keeps working afterwards.

use crate::behaviour::{alice, capture, conversation, recall_of, stored};
use crate::Subject;
use memgate_core::{
    Caller, FactPatch, ForgetReport, ForgetTarget, MemoryBackend, MemoryError, Message, SearchQuery,
};

/// True when nothing of `caller`'s scope mentions `word` on any read path.
async fn gone(b: &dyn MemoryBackend, caller: &Caller, word: &str) -> bool {
    let recalled = b.recall(&recall_of(caller, Some(word))).await.unwrap();
    let standing = b.recall(&recall_of(caller, None)).await.unwrap();
    let hits = b.search(caller, &SearchQuery::new(word)).await.unwrap();
    let facts = b.list_facts(caller, true).await.unwrap();
    let export = b.export(caller).await.unwrap();
    !recalled.text.contains(word)
        && !standing.text.contains(word)
        && hits.iter().all(|h| !h.content.contains(word))
        && facts.iter().all(|f| !f.text.contains(word))
        && export.facts.iter().all(|f| !f.text.contains(word))
        && export.turns.iter().all(|t| !t.text.contains(word))
}

/// True when `caller`'s scope still finds `word` through search and export.
async fn kept(b: &dyn MemoryBackend, caller: &Caller, word: &str) -> bool {
    let hits = b.search(caller, &SearchQuery::new(word)).await.unwrap();
    let export = b.export(caller).await.unwrap();
    hits.iter().any(|h| h.content.contains(word))
        && (export.facts.iter().any(|f| f.text.contains(word))
            || export.turns.iter().any(|t| t.text.contains(word)))
}

fn fact_target(id: &str) -> ForgetTarget {
    ForgetTarget::Fact { id: id.to_owned() }
}

pub async fn forget_fact_erases_it_with_every_version(s: &impl Subject) {
    let b = s.fresh().await.backend;
    let id = stored(&*b, &alice(), "my editor is emacs").await;
    let other = stored(&*b, &alice(), "my shell is zsh").await;
    let patch = FactPatch {
        kind: None,
        text: Some("my editor is helix".into()),
        confidence: None,
    };
    b.revise_fact(&alice(), &id, &patch).await.unwrap();
    let report = b.forget(&alice(), &fact_target(&id)).await.unwrap();
    assert_eq!(
        report,
        ForgetReport {
            facts: 1,
            versions: 2,
            turns: 0
        }
    );
    assert!(matches!(
        b.get_fact(&alice(), &id).await.unwrap_err(),
        MemoryError::NotFound(_)
    ));
    // Neither the current text nor the earlier version is readable.
    assert!(gone(&*b, &alice(), "helix").await);
    assert!(gone(&*b, &alice(), "emacs").await);
    assert!(kept(&*b, &alice(), "zsh").await);
    assert_eq!(b.get_fact(&alice(), &other).await.unwrap().version, 1);
    // Twice: not found; a malformed id names the field.
    assert!(matches!(
        b.forget(&alice(), &fact_target(&id)).await.unwrap_err(),
        MemoryError::NotFound(_)
    ));
    match b.forget(&alice(), &fact_target("zsh")).await.unwrap_err() {
        MemoryError::InvalidInput { field, .. } => assert_eq!(field, "id"),
        e => panic!("{e}"),
    }
    // The same text can be remembered again, as a new memory.
    let again = stored(&*b, &alice(), "my editor is helix").await;
    assert_ne!(again, id);
}

pub async fn forget_thread_erases_that_thread_only(s: &impl Subject) {
    let b = s.fresh().await.backend;
    let gone_thread = vec![
        Message::human("my locker code is walrus").with_id("a-0"),
        Message::ai("noted, walrus").with_id("a-1"),
    ];
    b.capture(&capture(&alice(), "a", gone_thread.clone()))
        .await
        .unwrap();
    b.capture(&capture(&alice(), "b", conversation("penguin", 4)))
        .await
        .unwrap();
    let fact = stored(&*b, &alice(), "walrus is my favourite animal").await;
    let report = b
        .forget(&alice().with_thread("a"), &ForgetTarget::Thread)
        .await
        .unwrap();
    assert_eq!(
        report,
        ForgetReport {
            facts: 0,
            versions: 0,
            turns: 2
        }
    );
    let export = b.export(&alice()).await.unwrap();
    assert!(export.turns.iter().all(|t| t.thread == "b"));
    assert_eq!(export.turns.len(), 4);
    // Explicit memories are not the thread's: they stay.
    assert_eq!(b.get_fact(&alice(), &fact).await.unwrap().version, 1);
    assert!(kept(&*b, &alice(), "penguin").await);
    // A thread is needed to name one; forgetting it again erases nothing.
    match b.forget(&alice(), &ForgetTarget::Thread).await.unwrap_err() {
        MemoryError::InvalidInput { field, .. } => assert_eq!(field, "thread"),
        e => panic!("{e}"),
    }
    let again = b
        .forget(&alice().with_thread("a"), &ForgetTarget::Thread)
        .await
        .unwrap();
    assert_eq!(again, ForgetReport::default());
    // Captured again after the forget, the thread is stored anew.
    let report = b
        .capture(&capture(&alice(), "a", gone_thread))
        .await
        .unwrap();
    assert_eq!((report.stored, report.already_known), (2, 0));
}

pub async fn forget_scope_erases_one_agent_and_leaves_the_rest(s: &impl Subject) {
    let b = s.fresh().await.backend;
    let coder = Caller::new("alice").with_agent("coder");
    let writer = Caller::new("alice").with_agent("writer");
    let bob = Caller::new("bob").with_agent("coder");
    for who in [&coder, &writer, &bob] {
        stored(&*b, who, "the launch codename is heron").await;
        b.capture(&capture(who, "t", conversation("heron", 3)))
            .await
            .unwrap();
    }
    let report = b.forget(&coder, &ForgetTarget::Scope).await.unwrap();
    assert_eq!(
        report,
        ForgetReport {
            facts: 1,
            versions: 1,
            turns: 3
        }
    );
    assert!(gone(&*b, &coder, "heron").await);
    assert!(kept(&*b, &writer, "heron").await);
    assert!(kept(&*b, &bob, "heron").await);
    assert_eq!(
        b.forget(&coder, &ForgetTarget::Scope).await.unwrap(),
        ForgetReport::default()
    );
    // The erased scope works again from nothing.
    let id = stored(&*b, &coder, "the launch codename is heron").await;
    let captured = b
        .capture(&capture(&coder, "t", conversation("heron", 3)))
        .await
        .unwrap();
    assert_eq!(captured.stored, 3);
    assert_eq!(b.list_facts(&coder, true).await.unwrap().len(), 1);
    assert_eq!(b.get_fact(&coder, &id).await.unwrap().version, 1);
}

pub async fn forget_user_erases_every_agent_of_that_user_only(s: &impl Subject) {
    let b = s.fresh().await.backend;
    let alices = [
        Caller::new("alice"),
        Caller::new("alice").with_agent("coder"),
        Caller::new("alice").with_agent("writer"),
    ];
    let bob = Caller::new("bob").with_agent("coder");
    for who in alices.iter().chain([&bob]) {
        let id = stored(&*b, who, "my badge number is kestrel").await;
        let patch = FactPatch {
            kind: None,
            text: Some("my badge number is kestrel nine".into()),
            confidence: None,
        };
        b.revise_fact(who, &id, &patch).await.unwrap();
        b.capture(&capture(who, "t", conversation("kestrel", 2)))
            .await
            .unwrap();
    }
    let report = b
        .forget(
            &Caller::new("alice").with_agent("coder"),
            &ForgetTarget::User,
        )
        .await
        .unwrap();
    assert_eq!(
        report,
        ForgetReport {
            facts: 3,
            versions: 6,
            turns: 6
        }
    );
    for who in &alices {
        assert!(gone(&*b, who, "kestrel").await);
    }
    assert!(kept(&*b, &bob, "kestrel").await);
    assert_eq!(b.list_facts(&bob, true).await.unwrap()[0].version, 2);
    // Nothing left: zero counts, not an error; the user can start over.
    assert_eq!(
        b.forget(&alices[0], &ForgetTarget::User).await.unwrap(),
        ForgetReport::default()
    );
    stored(&*b, &alices[1], "my badge number is kestrel").await;
}

pub async fn forget_is_seen_by_another_handle(s: &impl Subject) {
    let storage = s.fresh().await;
    let b = &storage.backend;
    stored(&**b, &alice(), "the vault phrase is ocelot").await;
    b.capture(&capture(&alice(), "t", conversation("ocelot", 2)))
        .await
        .unwrap();
    let other = storage.another_handle().await;
    // The other handle has read the scope (and may remember what it saw).
    assert!(kept(&*other, &alice(), "ocelot").await);
    b.forget(&alice(), &ForgetTarget::Scope).await.unwrap();
    assert!(gone(&*other, &alice(), "ocelot").await);
}
