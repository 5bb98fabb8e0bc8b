//! Redaction behaviours every store backend keeps (issue 13): a secret the
//! user typed is stored, recalled and exported only as its typed
//! placeholder; an explicit save that *is* a secret is refused with the
//! reason; and because signatures are computed over the host's original
//! message, redaction changes neither idempotency nor what counts as new.
//!
//! These run with the backend's default redactor (every built-in rule on),
//! which is what a fresh [`crate::Subject`] opens with.

use crate::Subject;
use memgate_core::{
    Caller, CaptureKind, CaptureRequest, FactPatch, Message, RecallRequest, RememberOutcome,
    RememberRequest, SearchQuery,
};

/// Shaped like an OpenAI project key (fake, never issued).
const API_KEY: &str = "sk-proj-q8Zt3LmN0vXr5YpK2wHc9JbD4sFg7TaE1uQi6oWx-Rk_VnM3hPz8LcB2yAd5GfS0";
/// The same shape, another value.
const OTHER_KEY: &str = "sk-proj-Hn4Vb7Kp1Qz9Wx3Lm6Rt8Yc2Df5Gj0Sa7Ue4Io1Pl-Mk_Nb3Vc6Xz9Lq2Wd5Ef8";
const DB_PASSWORD: &str = "Wq7!zP2xLm9#";
const API_KEY_PLACEHOLDER: &str = "[redacted:api_key]";

fn alice() -> Caller {
    Caller::new("alice")
}

/// A user turn holding a key and a password in a connection string, and
/// the assistant's answer.
fn transcript(key: &str) -> Vec<Message> {
    vec![
        Message::human(format!(
            "my OpenAI key is {key} and the database is \
             postgres://app:{DB_PASSWORD}@db.internal:5432/prod, please wire the billing job"
        ))
        .with_id("h1"),
        Message::ai("Done: the billing job reads both from the environment now.").with_id("a1"),
    ]
}

fn capture_of(thread: &str, messages: Vec<Message>) -> CaptureRequest {
    CaptureRequest {
        caller: alice().with_thread(thread),
        messages,
        kind: CaptureKind::AfterTurn,
        trace_id: None,
    }
}

fn assert_no_secret(what: &str, text: &str) {
    for secret in [API_KEY, OTHER_KEY, DB_PASSWORD] {
        assert!(!text.contains(secret), "{what} holds a secret: {text}");
    }
}

pub async fn captured_secrets_are_stored_and_recalled_as_placeholders(s: &impl Subject) {
    let b = s.fresh().await.backend;
    let report = b
        .capture(&capture_of("t1", transcript(API_KEY)))
        .await
        .unwrap();
    assert_eq!(report.stored, 2);

    let turns = b.export(&alice()).await.unwrap().turns;
    let human = &turns[0].text;
    assert!(human.contains(API_KEY_PLACEHOLDER), "{human}");
    assert!(
        human.contains("postgres://app:[redacted:password]@db.internal"),
        "{human}"
    );
    assert!(human.contains("please wire the billing job"), "{human}");
    for turn in &turns {
        assert_no_secret("an exported turn", &turn.text);
    }

    let recall = b
        .recall(&RecallRequest {
            caller: alice(),
            query: Some("billing job OpenAI key database".into()),
        })
        .await
        .unwrap();
    assert!(recall.text.contains(API_KEY_PLACEHOLDER), "{}", recall.text);
    assert_no_secret("recall", &recall.text);

    // Searching for the key itself finds nothing that holds it.
    for hit in b
        .search(&alice(), &SearchQuery::new("billing database"))
        .await
        .unwrap()
    {
        assert_no_secret("a search hit", &hit.content);
    }
}

pub async fn remembering_a_secret_is_refused_and_a_mention_is_redacted(s: &impl Subject) {
    let b = s.fresh().await.backend;
    let bare = RememberRequest::new("fact", API_KEY).unwrap();
    match b.remember(&alice(), &bare).await.unwrap() {
        RememberOutcome::Failed { reason } => {
            assert!(
                reason.contains("secret") && reason.contains("api_key"),
                "{reason}"
            );
            assert_no_secret("the refusal", &reason);
        }
        other => panic!("a bare key must be refused, got {other:?}"),
    }
    assert!(
        b.list_facts(&alice(), true).await.unwrap().is_empty(),
        "a refused secret stores nothing"
    );

    let mention = format!("the billing service reads {API_KEY} from the vault");
    let citation = match b
        .remember(&alice(), &RememberRequest::new("fact", &mention).unwrap())
        .await
        .unwrap()
    {
        RememberOutcome::Stored { citation } => citation.0,
        other => panic!("a mention is stored redacted, got {other:?}"),
    };
    let fact = b.get_fact(&alice(), &citation).await.unwrap();
    assert_eq!(
        fact.text,
        format!("the billing service reads {API_KEY_PLACEHOLDER} from the vault")
    );
    let hits = b
        .search(&alice(), &SearchQuery::new("billing vault"))
        .await
        .unwrap();
    assert!(hits.iter().any(|h| h.id == citation), "{hits:?}");
    for hit in &hits {
        assert_no_secret("a search hit", &hit.content);
    }
}

/// A revision is an explicit save too: its text is redacted the same way,
/// a revision that *is* a secret is refused, and the entry keeps its last
/// good version.
pub async fn revising_with_a_secret_is_refused_and_a_mention_is_redacted(s: &impl Subject) {
    let b = s.fresh().await.backend;
    let citation = match b
        .remember(
            &alice(),
            &RememberRequest::new("fact", "billing reads its key from the vault").unwrap(),
        )
        .await
        .unwrap()
    {
        RememberOutcome::Stored { citation } => citation.0,
        other => panic!("a plain save is stored, got {other:?}"),
    };
    let bare = FactPatch {
        text: Some(API_KEY.to_owned()),
        ..FactPatch::default()
    };
    let refusal = b.revise_fact(&alice(), &citation, &bare).await.unwrap_err();
    assert!(refusal.to_string().contains("secret"), "{refusal}");
    assert_no_secret("the refusal", &refusal.to_string());
    let kept = b.get_fact(&alice(), &citation).await.unwrap();
    assert_eq!(
        (kept.version, kept.text.as_str()),
        (1, "billing reads its key from the vault")
    );

    let mention = FactPatch {
        text: Some(format!("billing reads {API_KEY} from the vault")),
        ..FactPatch::default()
    };
    let revised = b.revise_fact(&alice(), &citation, &mention).await.unwrap();
    assert_eq!(
        (revised.version, revised.text),
        (
            2,
            format!("billing reads {API_KEY_PLACEHOLDER} from the vault")
        )
    );
    let stored = b.get_fact(&alice(), &citation).await.unwrap();
    assert_no_secret("the revised entry", &stored.text);
}

pub async fn redaction_keeps_signatures_over_the_original_message(s: &impl Subject) {
    let b = s.fresh().await.backend;
    let first = b
        .capture(&capture_of("t1", transcript(API_KEY)))
        .await
        .unwrap();
    assert_eq!((first.stored, first.already_known), (2, 0));
    // The same original transcript again: already known, stored once.
    let again = b
        .capture(&capture_of("t1", transcript(API_KEY)))
        .await
        .unwrap();
    assert_eq!((again.stored, again.already_known), (0, 2));
    // Another key redacts to the same text, but the host's message differs,
    // so the signature does: the changed turn is new, the unchanged one is
    // known. Signatures follow the original, never the redacted text.
    let rotated = b
        .capture(&capture_of("t1", transcript(OTHER_KEY)))
        .await
        .unwrap();
    assert_eq!(
        (rotated.stored, rotated.already_known),
        (1, 1),
        "{rotated:?}"
    );
    let turns = b.export(&alice()).await.unwrap().turns;
    assert_eq!(turns.len(), 3);
    assert_eq!(turns[0].text, turns[2].text, "both keys redact alike");
    for turn in &turns {
        assert_no_secret("an exported turn", &turn.text);
    }
}
