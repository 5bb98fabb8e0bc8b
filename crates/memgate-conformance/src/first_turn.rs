//! The first-turn block (recall with no query) as DeerFlow's users met it:
//! conversations captured as DeerFlow sends them (no speaker names, host
//! message ids, a timestamp on some messages only), then a new thread's
//! block.

use crate::behaviour::{alice, capture, recall_of, stored};
use crate::Subject;
use memgate_core::{FactPatch, Message};

/// The message metadata key a turn's time travels in (`memgate_recall::turns::TIMESTAMP_KEY`).
const TIMESTAMP_KEY: &str = "timestamp";

/// Nine conversations as DeerFlow captures them: no speaker names, message
/// ids, a host timestamp on some threads only (the user's seven facts: name,
/// answer style, job, city, daughter, allergy, trip).
fn deerflow_conversations() -> Vec<(String, Vec<Message>)> {
    let pairs: [(&str, &str); 9] = [
        ("Hi, I'm Dana.", "Hi Dana! How can I help you today?"),
        (
            "Keep answers short, bullet points preferred.",
            "Got it: short answers, in bullet points.",
        ),
        ("Suggest a name for a CLI tool.", "- forge\n- quill\n- tern"),
        ("What's the weather in Berlin?", "It is sunny (22C)."),
        ("What's the weather in Berlin?", "It is sunny (22C)."),
        (
            "I work as a data engineer at Siemens in Munich.",
            "Nice! What do you work on there?",
        ),
        (
            "My daughter Mia starts school in September.",
            "Exciting times for Mia!",
        ),
        (
            "I'm allergic to peanuts.",
            "Noted, I will leave peanuts out of recipes.",
        ),
        (
            "I'm planning a trip to Lisbon next month.",
            "Lisbon is lovely in spring.",
        ),
    ];
    pairs
        .iter()
        .enumerate()
        .map(|(i, (asked, answer))| {
            let stamp = |m: Message| {
                if i % 2 == 0 {
                    m.with_flag(TIMESTAMP_KEY, "2026-12-04T08:25:29.127040+00:00")
                } else {
                    m
                }
            };
            let mut messages = vec![
                stamp(Message::human(*asked).with_id(format!("h{i}"))),
                stamp(Message::ai(*answer).with_id(format!("a{i}"))),
            ];
            if i == 4 {
                // The same exchange twice in one thread (two identical turns).
                messages.push(stamp(Message::human(*asked).with_id("h4b")));
                messages.push(stamp(Message::ai(*answer).with_id("a4b")));
            }
            (format!("thread-{i}"), messages)
        })
        .collect()
}

/// The profile's heading (`memgate_recall::first_turn::PROFILE_HEADING`).
const PROFILE_HEADING: &str = "What is true about the user now:";

const DEERFLOW_FACTS: [&str; 6] = [
    "Hi, I'm Dana.",
    "Keep answers short, bullet points preferred.",
    "I work as a data engineer at Siemens in Munich.",
    "My daughter Mia starts school in September.",
    "I'm allergic to peanuts.",
    "I'm planning a trip to Lisbon next month.",
];

/// The block's item lines (`- [...] who: text`) as (who, text).
fn item_lines(recall: &memgate_core::Recall) -> Vec<(String, String)> {
    recall
        .text
        .lines()
        .filter(|l| l.starts_with("- [turn_"))
        .map(|l| {
            let rest = &l[l.find("] ").unwrap() + 2..];
            let (who, text) = rest.split_once(": ").unwrap();
            (who.to_owned(), text.to_owned())
        })
        .collect()
}

/// Every property the DeerFlow run found broken, on one block.
fn assert_deerflow_block(recall: &memgate_core::Recall) {
    let text = &recall.text;
    for fact in DEERFLOW_FACTS {
        assert!(text.contains(fact), "{fact} is kept: {text}");
    }
    // The user's own words lead the turns.
    let about = text
        .find("What the user said about themselves:")
        .expect(text);
    for fact in DEERFLOW_FACTS {
        assert!(text.find(fact).unwrap() > about, "{fact}: {text}");
    }
    if let Some(turns) = text.find("From earlier conversations:") {
        assert!(about < turns, "{text}");
    }
    let lines: Vec<&str> = text.lines().collect();
    for (i, line) in lines.iter().enumerate() {
        // An answer right below what it answers (a user line, or another
        // answer to the same user line).
        if line.contains("] assistant: ") {
            let above = lines[..i]
                .iter()
                .rev()
                .find(|l| !l.contains("] assistant: "))
                .unwrap();
            assert!(above.contains("] user: "), "{line}: {text}");
        }
        // One date format: calendar dates only.
        if let Some(date) = line
            .strip_prefix("Conversation of ")
            .or_else(|| line.strip_prefix("On "))
        {
            assert_eq!(date.len(), "2026-12-04:".len(), "{line}");
        }
        assert!(!line.contains("T08:25"), "{line}");
    }
    let shown = item_lines(recall);
    let texts: std::collections::HashSet<&str> = shown.iter().map(|(_, t)| t.as_str()).collect();
    assert_eq!(texts.len(), shown.len(), "no line twice: {text}");
}

/// Issue 31's DeerFlow run after nine conversations: the name and the
/// preference kept, answers with their questions, one date format, no line
/// twice (issue 33), the user's own words first.
pub async fn first_turn_block_after_nine_deerflow_conversations(s: &impl Subject) {
    let b = s.fresh().await.backend;
    for (thread, messages) in deerflow_conversations() {
        b.capture(&capture(&alice(), &thread, messages))
            .await
            .unwrap();
    }
    let recall = b.recall(&recall_of(&alice(), None)).await.unwrap();
    assert_deerflow_block(&recall);
    assert_eq!(
        recall.text.matches("It is sunny (22C).").count(),
        1,
        "{}",
        recall.text
    );
    assert!(
        recall.text.contains("What's the weather in Berlin?"),
        "{}",
        recall.text
    );
}

/// The same after 105 more conversations of tasks: what the user said
/// about themselves still leads the block (issue 31: it had sunk to the
/// bottom of a 219-line block).
pub async fn first_turn_block_after_114_conversations_still_leads_with_the_user(s: &impl Subject) {
    let b = s.fresh().await.backend;
    for (thread, messages) in deerflow_conversations() {
        b.capture(&capture(&alice(), &thread, messages))
            .await
            .unwrap();
    }
    let topics = [
        "solar panels",
        "rail freight",
        "coffee prices",
        "chip exports",
        "wind farms",
    ];
    for i in 0..105 {
        let topic = topics[i % topics.len()];
        b.capture(&capture(
            &alice(),
            &format!("task-{i}"),
            vec![
                Message::human(format!(
                    "Summarize the article about {topic} in Spain, part {i}."
                )),
                Message::ai(format!(
                    "- {topic} in Spain grew {}% in 2025\n- Madrid and Seville led the rise",
                    10 + i % 30
                )),
            ],
        ))
        .await
        .unwrap();
    }
    let recall = b.recall(&recall_of(&alice(), None)).await.unwrap();
    assert_deerflow_block(&recall);
    // Leading means before every conversation, however many there are.
    let first_conversation = recall.text.find("Conversation of ").expect(&recall.text);
    for fact in DEERFLOW_FACTS {
        assert!(
            recall.text.find(fact).unwrap() < first_conversation,
            "{fact}: {}",
            recall.text
        );
    }
    assert!(
        recall.text.matches("Conversation of ").count() > 20,
        "{}",
        recall.text
    );
}

/// The profile: with no query the block leads with the user's current
/// facts, each as it reads now; a revised fact's earlier text and a retired
/// fact never appear, and the excerpts still follow within the budget.
pub async fn first_turn_block_leads_with_current_facts_only(s: &impl Subject) {
    let b = s.fresh().await.backend;
    for (thread, messages) in deerflow_conversations() {
        b.capture(&capture(&alice(), &thread, messages))
            .await
            .unwrap();
    }
    let moved = stored(&*b, &alice(), "Dana lives in Valencia").await;
    stored(&*b, &alice(), "Dana prefers metric units").await;
    let left = stored(&*b, &alice(), "Dana works for Initech").await;
    b.revise_fact(
        &alice(),
        &moved,
        &FactPatch {
            text: Some("Dana lives in Porto".to_owned()),
            ..FactPatch::default()
        },
    )
    .await
    .unwrap();
    b.retire_fact(&alice(), &left).await.unwrap();

    let recall = b.recall(&recall_of(&alice(), None)).await.unwrap();
    let text = &recall.text;
    let profile = text.find(PROFILE_HEADING).expect(text);
    let first_excerpt = text
        .find("What the user said about themselves:")
        .expect(text);
    assert!(profile < first_excerpt, "the profile leads: {text}");
    let porto = text.find("Dana lives in Porto").expect(text);
    let metric = text.find("Dana prefers metric units").expect(text);
    assert!(porto < first_excerpt && metric < first_excerpt, "{text}");
    assert!(
        !text.contains("Valencia"),
        "an earlier version never: {text}"
    );
    assert!(!text.contains("Initech"), "a retired fact never: {text}");
    // The excerpts are still there, after the profile.
    assert!(text.contains("I'm allergic to peanuts."), "{text}");
}
