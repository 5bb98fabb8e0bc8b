//! Secrets in captured turns and explicit memories: replaced by typed
//! placeholders before anything is stored or indexed, proved by a byte scan
//! of the database files; signatures (and so idempotency) stay over the
//! host's original message.

mod common;

use common::{alice, capture, files_containing, recall_of, TestStore};
use memgate_core::signature::message_signature;
use memgate_core::{
    BackendContext, FactPatch, MemoryBackend, MemoryError, Message, RememberOutcome,
    RememberRequest,
};
use memgate_store::{LocalBackend, LocalConfig};
use serde_json::json;

const OPENAI_KEY: &str = "sk-proj-q8Zt3LmN0vXr5YpK2wHc9JbD4sFg7TaE1uQi6oWx-Rk_VnM3hPz8LcB2yAd5GfS0";
const DB_PASSWORD: &str = "Wq7!zP2xLm9#";

fn transcript() -> Vec<Message> {
    vec![
        Message::human(format!(
            "my OpenAI key is {OPENAI_KEY} and the database is \
             postgres://app:{DB_PASSWORD}@db.internal:5432/prod, please wire the billing job"
        ))
        .with_id("h1"),
        Message::ai("Done: the billing job reads both from the environment now.").with_id("a1"),
    ]
}

#[test]
fn a_captured_key_is_nowhere_in_the_files_and_recall_shows_the_placeholder() {
    let t = TestStore::new();
    let report = t
        .store
        .capture(&capture(&alice(), "t1", transcript()))
        .unwrap();
    assert_eq!(report.stored, 2);
    for secret in [
        OPENAI_KEY,
        DB_PASSWORD,
        "q8Zt3LmN0vXr5YpK2wHc9JbD4sFg7TaE1uQi6oWx",
    ] {
        assert_eq!(
            files_containing(&t.path(), secret),
            Vec::<String>::new(),
            "before checkpoint"
        );
    }
    let recall = t
        .store
        .recall(&recall_of(
            &alice(),
            Some("billing job OpenAI key database"),
        ))
        .unwrap();
    assert!(
        recall.text.contains("[redacted:api_key]"),
        "{}",
        recall.text
    );
    assert!(
        recall
            .text
            .contains("postgres://app:[redacted:password]@db.internal"),
        "{}",
        recall.text
    );
    assert!(!recall.text.contains(OPENAI_KEY));
    t.store.checkpoint().unwrap();
    for secret in [OPENAI_KEY, DB_PASSWORD] {
        assert_eq!(
            files_containing(&t.path(), secret),
            Vec::<String>::new(),
            "after checkpoint"
        );
    }
    // The scan itself finds text that is stored.
    assert!(!files_containing(&t.path(), "billing").is_empty());
}

#[test]
fn signatures_and_idempotency_are_those_of_the_original_message() {
    let t = TestStore::new();
    let messages = transcript();
    t.store
        .capture(&capture(&alice(), "t1", messages.clone()))
        .unwrap();
    let again = t
        .store
        .capture(&capture(&alice(), "t1", messages.clone()))
        .unwrap();
    assert_eq!((again.stored, again.already_known), (0, 2));
    let exported = t.store.export(&alice()).unwrap().turns;
    assert_eq!(exported[0].signature, message_signature(&messages[0]));
    assert!(exported[0].text.contains("[redacted:api_key]"));
    // The same message stored without redaction has the same signature.
    let dir = tempfile::tempdir().unwrap();
    let ctx = BackendContext::new(dir.path());
    let plain = LocalBackend::from_backend_config(
        json!({"redaction": {"enabled": false}})
            .as_object()
            .unwrap(),
        &ctx,
    )
    .unwrap();
    plain
        .store()
        .capture(&capture(&alice(), "t1", messages.clone()))
        .unwrap();
    let raw = plain.store().export(&alice()).unwrap().turns;
    assert_eq!(raw[0].signature, exported[0].signature);
    assert!(
        raw[0].text.contains(OPENAI_KEY),
        "redaction off stores the text as sent"
    );
}

#[test]
fn remember_refuses_a_secret_and_redacts_a_mention() {
    let t = TestStore::new();
    let bare = RememberRequest::new("fact", &format!("key: {OPENAI_KEY}")).unwrap();
    match t.store.remember(&alice(), &bare).unwrap() {
        RememberOutcome::Failed { reason } => {
            assert!(reason.contains("api_key"), "{reason}");
            assert!(!reason.contains(OPENAI_KEY));
        }
        other => panic!("a secret was not refused: {other:?}"),
    }
    assert!(t.store.list_facts(&alice(), true).unwrap().is_empty());
    let mention = RememberRequest::new(
        "fact",
        &format!("The billing job reads its key {OPENAI_KEY} from the vault"),
    )
    .unwrap();
    let RememberOutcome::Stored { citation } = t.store.remember(&alice(), &mention).unwrap() else {
        panic!("a mention was not stored");
    };
    let fact = t.store.get_fact(&alice(), citation.as_str()).unwrap();
    assert_eq!(
        fact.text,
        "The billing job reads its key [redacted:api_key] from the vault"
    );
    let err = t
        .store
        .revise_fact(
            &alice(),
            citation.as_str(),
            &FactPatch {
                kind: None,
                text: Some(OPENAI_KEY.to_owned()),
                confidence: None,
            },
        )
        .unwrap_err();
    assert!(
        matches!(&err, MemoryError::InvalidInput { field, .. } if field == "text"),
        "{err}"
    );
    t.store.checkpoint().unwrap();
    assert_eq!(
        files_containing(&t.path(), OPENAI_KEY),
        Vec::<String>::new()
    );
}

#[tokio::test]
async fn backend_config_redaction_adds_patterns_and_turns_rules_off() {
    let dir = tempfile::tempdir().unwrap();
    let ctx = BackendContext::new(dir.path());
    let backend = LocalBackend::from_backend_config(
        json!({"redaction": {"disable": ["url_password"], "patterns": {"employee_id": "EMP-[0-9]{6}"}}})
            .as_object()
            .unwrap(),
        &ctx,
    )
    .unwrap();
    backend
        .capture(&capture(
            &alice(),
            "t1",
            vec![Message::human(format!(
                "I am EMP-123456, key {OPENAI_KEY}, db postgres://app:{DB_PASSWORD}@db/prod"
            ))],
        ))
        .await
        .unwrap();
    let text = backend.export(&alice()).await.unwrap().turns[0]
        .text
        .clone();
    assert_eq!(
        text,
        format!("I am [redacted:employee_id], key [redacted:api_key], db postgres://app:{DB_PASSWORD}@db/prod")
    );
}

#[test]
fn imported_texts_are_redacted_too() {
    let source = TestStore::with_config(LocalConfig::default());
    let plain = {
        let dir = tempfile::tempdir().unwrap();
        let ctx = BackendContext::new(dir.path());
        let b = LocalBackend::from_backend_config(
            json!({"redaction": {"enabled": false}})
                .as_object()
                .unwrap(),
            &ctx,
        )
        .unwrap();
        b.store()
            .capture(&capture(&alice(), "t1", transcript()))
            .unwrap();
        let export = b.store().export(&alice()).unwrap();
        drop(b);
        drop(dir);
        export
    };
    assert!(plain.turns[0].text.contains(OPENAI_KEY));
    let report = source.store.import(&alice(), &plain).unwrap();
    assert_eq!(report.turns_imported, 2);
    source.store.checkpoint().unwrap();
    assert_eq!(
        files_containing(&source.path(), OPENAI_KEY),
        Vec::<String>::new()
    );
}
