//! Every built-in rule catches its realistic secrets; the near-miss corpus
//! (commit hashes, UUIDs, digests, base64 image captions, long words,
//! ordinary sentences about passwords and tokens) survives.

mod corpus;

use corpus::{NEAR_MISSES, SECRETS};
use memgate_redact::{builtin_rule_ids, placeholder, CustomRule, RedactionSettings, Redactor};

fn only(rule: &str) -> Redactor {
    Redactor::new(&RedactionSettings {
        disabled_rules: builtin_rule_ids()
            .filter(|id| *id != rule)
            .map(str::to_owned)
            .collect(),
        ..Default::default()
    })
    .unwrap()
}

#[test]
fn the_corpus_covers_every_builtin_rule() {
    for id in builtin_rule_ids() {
        assert!(
            SECRETS.iter().any(|(rule, ..)| *rule == id),
            "no corpus case for rule {id}"
        );
    }
}

#[test]
fn every_secret_is_replaced_by_its_typed_placeholder() {
    let redactor = Redactor::default();
    for (rule, kind, secret, text) in SECRETS {
        let out = redactor.redact(text);
        assert!(
            !out.text.contains(secret),
            "rule {rule}: the secret survived in {:?}",
            out.text
        );
        assert!(
            out.text.contains(&placeholder(kind)),
            "rule {rule}: expected {} in {:?}",
            placeholder(kind),
            out.text
        );
        assert!(
            out.found.contains_key(*kind),
            "rule {rule}: {:?}",
            out.found
        );
    }
}

#[test]
fn each_rule_alone_catches_its_own_cases() {
    for (rule, kind, secret, text) in SECRETS {
        let out = only(rule).redact(text);
        assert!(
            !out.text.contains(secret) && out.found.contains_key(*kind),
            "rule {rule} alone missed its case: {:?}",
            out.text
        );
    }
}

#[test]
fn the_text_around_a_secret_is_kept() {
    let (_, _, secret, text) = SECRETS
        .iter()
        .find(|(rule, ..)| *rule == "url_password")
        .unwrap();
    let out = Redactor::default().redact(text);
    assert_eq!(
        out.text,
        text.replace(secret, "[redacted:password]"),
        "only the password of the URL is replaced"
    );
}

#[test]
fn at_most_one_percent_of_near_misses_are_altered() {
    let redactor = Redactor::default();
    let altered: Vec<(&str, String)> = NEAR_MISSES
        .iter()
        .filter_map(|t| {
            let out = redactor.redact(t);
            (!out.is_clean()).then(|| (*t, out.text.into_owned()))
        })
        .collect();
    println!(
        "near misses altered: {} of {}: {altered:#?}",
        altered.len(),
        NEAR_MISSES.len()
    );
    assert!(
        altered.len() * 100 <= NEAR_MISSES.len(),
        "{} of {} near misses altered: {altered:#?}",
        altered.len(),
        NEAR_MISSES.len()
    );
}

#[test]
fn a_rule_can_be_turned_off() {
    let (_, _, secret, text) = SECRETS.iter().find(|(rule, ..)| *rule == "jwt").unwrap();
    let without = Redactor::new(&RedactionSettings {
        disabled_rules: vec!["jwt".to_owned()],
        ..Default::default()
    })
    .unwrap();
    assert!(without.redact(text).text.contains(secret));
    assert!(!without.rule_ids().any(|id| id == "jwt"));
    assert!(!Redactor::default().redact(text).text.contains(secret));
}

#[test]
fn redaction_can_be_turned_off_entirely() {
    let off = Redactor::new(&RedactionSettings {
        enabled: false,
        ..Default::default()
    })
    .unwrap();
    for (_, _, _, text) in SECRETS {
        assert!(off.redact(text).is_clean());
    }
}

#[test]
fn custom_patterns_add_typed_placeholders() {
    let redactor = Redactor::new(&RedactionSettings {
        custom_rules: vec![
            CustomRule {
                name: "employee_id".to_owned(),
                pattern: r"\bEMP-[0-9]{6}\b".to_owned(),
            },
            CustomRule {
                name: "pin".to_owned(),
                pattern: r"(?i)\bpin\s*:\s*([0-9]{4})\b".to_owned(),
            },
        ],
        ..Default::default()
    })
    .unwrap();
    let out = redactor.redact("I am EMP-123456, card pin: 4821.");
    assert_eq!(
        out.text,
        "I am [redacted:employee_id], card pin: [redacted:pin]."
    );
    assert_eq!(out.count(), 2);
}

#[test]
fn a_text_that_is_a_secret_is_told_apart_from_one_that_mentions_one() {
    let redactor = Redactor::default();
    let (_, _, key, _) = SECRETS
        .iter()
        .find(|(rule, ..)| *rule == "openai_api_key")
        .unwrap();
    assert!(redactor.redact(key).is_mostly_secret());
    assert!(redactor.redact(&format!("key: {key}")).is_mostly_secret());
    let mention = format!(
        "The billing service reads its OpenAI key ({key}) from the vault on start-up, \
         and rotates it every ninety days according to the security policy of the team."
    );
    let out = redactor.redact(&mention);
    assert!(!out.is_clean() && !out.is_mostly_secret(), "{}", out.text);
}

#[test]
fn findings_never_carry_the_secret() {
    let redactor = Redactor::default();
    for (rule, _, secret, text) in SECRETS {
        let out = redactor.redact(text);
        let shown = format!("{out:?} {}", out.kinds());
        assert!(!shown.contains(secret), "rule {rule}");
    }
}
