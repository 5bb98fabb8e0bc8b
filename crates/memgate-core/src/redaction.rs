//! Redaction as every backend applies it: the host's configured
//! [`Redactor`] (carried in [`crate::BackendContext`], on by default) runs on
//! message text *after* signatures are computed, so cursors and idempotency
//! stay keyed on the host's original message while nothing stored, indexed
//! or sent holds the secret.
//!
//! The `redaction` settings object has the same shape wherever it appears
//! (`memory.redaction`, a backend's `backend_config.redaction`):
//!
//! | key | default | rule |
//! |---|---|---|
//! | `enabled` | `true` | boolean |
//! | `disable` | `[]` | list of built-in rule ids ([`memgate_redact::builtin_rule_ids`]) |
//! | `patterns` | `{}` | map of name (`a-z0-9_`) to a regular expression; a match (or its first group) becomes `[redacted:<name>]` |

pub use memgate_redact::{
    builtin_rule_ids, placeholder, CustomRule, Redaction, RedactionSettings, Redactor,
};

use crate::remember::{RememberOutcome, RememberRequest};
use crate::{MemoryError, Result};
use serde_json::Value;

/// Reads a `redaction` settings object; errors name `<field>.<key>` and the
/// rule, never a scanned text.
pub fn settings_from_config(value: &Value, field: &str) -> Result<RedactionSettings> {
    let Value::Object(map) = value else {
        return Err(MemoryError::Config(format!(
            "{field} must be a mapping with `enabled`, `disable` and `patterns`"
        )));
    };
    let mut settings = RedactionSettings::default();
    for (key, v) in map {
        match key.as_str() {
            "enabled" => {
                settings.enabled = v.as_bool().ok_or_else(|| {
                    MemoryError::Config(format!("{field}.enabled must be true or false"))
                })?;
            }
            "disable" => {
                let rule = || {
                    MemoryError::Config(format!(
                        "{field}.disable must be a list of built-in rule ids"
                    ))
                };
                for id in v.as_array().ok_or_else(rule)? {
                    settings
                        .disabled_rules
                        .push(id.as_str().ok_or_else(rule)?.to_owned());
                }
            }
            "patterns" => {
                let rule = || {
                    MemoryError::Config(format!(
                        "{field}.patterns must map rule names to regular expressions"
                    ))
                };
                for (name, pattern) in v.as_object().ok_or_else(rule)? {
                    settings.custom_rules.push(CustomRule {
                        name: name.clone(),
                        pattern: pattern.as_str().ok_or_else(rule)?.to_owned(),
                    });
                }
            }
            other => {
                return Err(MemoryError::Config(format!(
                    "{field}.{other} is not a redaction setting (known: enabled, disable, patterns)"
                )))
            }
        }
    }
    Ok(settings)
}

/// Builds the redactor a `redaction` settings object describes.
pub fn redactor_from_config(value: &Value, field: &str) -> Result<Redactor> {
    let settings = settings_from_config(value, field)?;
    Redactor::new(&settings).map_err(|e| MemoryError::Config(format!("{field}.{e}")))
}

/// The request an explicit save stores after redaction, or the `Failed`
/// outcome when the text *is* a secret (nothing worth keeping is left once
/// it is removed). The refusal names the kinds found, never the text.
pub fn redact_remember(
    redactor: &Redactor,
    request: &RememberRequest,
) -> std::result::Result<RememberRequest, RememberOutcome> {
    let redaction = redactor.redact(&request.text);
    if redaction.is_clean() {
        return Ok(request.clone());
    }
    if redaction.is_mostly_secret() {
        return Err(RememberOutcome::Failed {
            reason: format!(
                "the text is a secret ({}); memory does not keep secrets",
                redaction.kinds()
            ),
        });
    }
    RememberRequest::new(&request.kind, &redaction.text)
        .map(|r| RememberRequest {
            confidence: request.confidence,
            ..r
        })
        .map_err(|e| RememberOutcome::Failed {
            reason: e.to_string(),
        })
}

/// Redacts every string inside `value` in place (tool inputs and outputs a
/// backend sends on), leaving keys and structure alone.
pub fn redact_json_strings(redactor: &Redactor, value: &mut Value) {
    match value {
        Value::String(s) => {
            let redaction = redactor.redact(s);
            if !redaction.is_clean() {
                *s = redaction.text.into_owned();
            }
        }
        Value::Array(items) => items
            .iter_mut()
            .for_each(|v| redact_json_strings(redactor, v)),
        Value::Object(map) => map
            .values_mut()
            .for_each(|v| redact_json_strings(redactor, v)),
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const KEY: &str = "sk-proj-Zx9vQ2mN7pL4kR8sT1wY6uB3cF5hJ0aDgE";

    #[test]
    fn settings_are_read_and_checked_by_name() {
        let r = redactor_from_config(
            &json!({"enabled": true, "disable": ["jwt"], "patterns": {"ticket": "TCK-[0-9]{4}"}}),
            "memory.redaction",
        )
        .unwrap();
        assert!(!r.rule_ids().any(|id| id == "jwt"));
        assert_eq!(r.redact("see TCK-1234").text, "see [redacted:ticket]");
        for (bad, named) in [
            (json!({"enabled": "yes"}), "memory.redaction.enabled"),
            (json!({"disable": ["nope"]}), "memory.redaction.disable[0]"),
            (
                json!({"patterns": {"t": "("}}),
                "memory.redaction.patterns.t",
            ),
            (json!({"pattern": {}}), "memory.redaction.pattern "),
            (json!(true), "memory.redaction must"),
        ] {
            let e = redactor_from_config(&bad, "memory.redaction").unwrap_err();
            assert!(e.to_string().contains(named), "{bad}: {e}");
        }
    }

    #[test]
    fn a_secret_is_refused_and_a_mention_is_redacted() {
        let r = Redactor::default();
        let bare = RememberRequest::new("fact", KEY).unwrap();
        match redact_remember(&r, &bare) {
            Err(RememberOutcome::Failed { reason }) => {
                assert!(
                    reason.contains("api_key") && !reason.contains(KEY),
                    "{reason}"
                )
            }
            other => panic!("{other:?}"),
        }
        let mention = RememberRequest::new(
            "fact",
            &format!("the billing service uses {KEY} from the vault"),
        )
        .unwrap();
        let stored = redact_remember(&r, &mention).unwrap();
        assert_eq!(
            stored.text,
            "the billing service uses [redacted:api_key] from the vault"
        );
        let plain = RememberRequest::new("fact", "I prefer tea").unwrap();
        assert_eq!(redact_remember(&r, &plain).unwrap(), plain);
    }

    #[test]
    fn json_strings_are_redacted_in_place() {
        let mut v = json!({"cmd": format!("curl -H 'Authorization: Bearer {KEY}'"), "n": [1, KEY]});
        redact_json_strings(&Redactor::default(), &mut v);
        assert!(!v.to_string().contains(KEY), "{v}");
        assert_eq!(v["n"][0], 1);
    }
}
