//! The model's answer, read strictly: one JSON object
//! `{"operations": [...]}` whose operations are `add`, `supersede` or
//! `none`, each citing the job's turns it rests on.
//!
//! Tolerant only of the wrapping local models put around JSON (code
//! fences, a sentence before or after): the first `{` to its matching `}`
//! is the answer. Everything inside is checked against the job: unknown
//! fields, an unknown `op`, a source that is not one of the job's turns, a
//! supersede of a fact the model was not shown, are errors naming
//! `operations[i].<field>`; the error text is what a repair round shows
//! the model and what a parked job keeps as its reason.

use memgate_core::distill::{DistillJob, Operation, ProposedFact};
use memgate_core::Fact;
use serde::Deserialize;
use serde_json::{json, Value};

/// The kind a proposal without one gets.
pub const DEFAULT_KIND: &str = "fact";
/// The confidence a proposal without one gets.
pub const DEFAULT_CONFIDENCE: f64 = 0.7;

/// The endpoint's structured-output request (`response_format`): the
/// answer's JSON schema, strict.
pub fn response_format() -> Value {
    json!({
        "type": "json_schema",
        "json_schema": {
            "name": "memgate_fact_operations",
            "strict": true,
            "schema": {
                "type": "object",
                "additionalProperties": false,
                "required": ["operations"],
                "properties": {
                    "operations": {
                        "type": "array",
                        "items": {
                            "type": "object",
                            "additionalProperties": false,
                            "required": ["op", "fact", "kind", "text", "confidence", "sources"],
                            "properties": {
                                "op": {"type": "string", "enum": ["add", "supersede", "none"]},
                                "fact": {"type": ["string", "null"]},
                                "kind": {"type": "string"},
                                "text": {"type": "string"},
                                "confidence": {"type": "number"},
                                "sources": {"type": "array", "items": {"type": "string"}}
                            }
                        }
                    }
                }
            }
        }
    })
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawAnswer {
    operations: Vec<Value>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawOperation {
    op: String,
    #[serde(default)]
    fact: Option<String>,
    #[serde(default)]
    kind: Option<String>,
    #[serde(default)]
    text: Option<String>,
    #[serde(default)]
    confidence: Option<f64>,
    #[serde(default)]
    sources: Vec<String>,
}

/// The JSON object inside `content`: from the first `{` to the `}` that
/// closes it (strings and escapes respected), or why there is none.
pub fn json_object(content: &str) -> Result<&str, String> {
    let start = content
        .find('{')
        .ok_or_else(|| "the answer holds no JSON object".to_owned())?;
    let (mut depth, mut in_string, mut escaped) = (0usize, false, false);
    for (i, c) in content[start..].char_indices() {
        if in_string {
            match c {
                _ if escaped => escaped = false,
                '\\' => escaped = true,
                '"' => in_string = false,
                _ => {}
            }
            continue;
        }
        match c {
            '"' => in_string = true,
            '{' => depth += 1,
            '}' => {
                depth -= 1;
                if depth == 0 {
                    return Ok(&content[start..start + i + 1]);
                }
            }
            _ => {}
        }
    }
    Err("the answer's JSON object is not closed (truncated?)".to_owned())
}

/// Reads `content` as the operations for `job`, whose prompt showed
/// `shown` facts. `none` operations are dropped.
pub fn read_answer(
    content: &str,
    job: &DistillJob,
    shown: &[Fact],
) -> Result<Vec<Operation>, String> {
    let object = json_object(content)?;
    let raw: RawAnswer = serde_json::from_str(object)
        .map_err(|e| format!("the answer is not the expected JSON: {e}"))?;
    let mut operations = Vec::new();
    for (i, value) in raw.operations.into_iter().enumerate() {
        let at = |field: &str| format!("operations[{i}].{field}");
        let op: RawOperation = serde_json::from_value(value)
            .map_err(|e| format!("operations[{i}] is not an operation: {e}"))?;
        let proposed = |op: &RawOperation| -> Result<ProposedFact, String> {
            let text = op.text.as_deref().map(str::trim).unwrap_or_default();
            if text.is_empty() {
                return Err(format!("{} must be a non-empty string", at("text")));
            }
            if op.sources.is_empty() {
                return Err(format!("{} must cite at least one turn", at("sources")));
            }
            if let Some(unknown) = op.sources.iter().find(|s| !job.cites(s)) {
                return Err(format!(
                    "{}: `{unknown}` is not one of the new turns",
                    at("sources")
                ));
            }
            let confidence = op.confidence.unwrap_or(DEFAULT_CONFIDENCE);
            if !(confidence.is_finite() && (0.0..=1.0).contains(&confidence)) {
                return Err(format!("{} must be between 0 and 1", at("confidence")));
            }
            let kind = op
                .kind
                .as_deref()
                .map(str::trim)
                .filter(|k| !k.is_empty())
                .unwrap_or(DEFAULT_KIND);
            Ok(ProposedFact {
                kind: kind.to_owned(),
                text: text.to_owned(),
                confidence,
                sources: op.sources.clone(),
            })
        };
        match op.op.as_str() {
            "none" => {}
            "add" => operations.push(Operation::Add(proposed(&op)?)),
            "supersede" => {
                let fact = op
                    .fact
                    .as_deref()
                    .filter(|f| !f.trim().is_empty())
                    .ok_or_else(|| format!("{} must name the fact it replaces", at("fact")))?;
                if !shown.iter().any(|f| f.id == fact) {
                    return Err(format!(
                        "{}: `{fact}` is not one of the current facts shown",
                        at("fact")
                    ));
                }
                operations.push(Operation::Supersede {
                    fact: fact.to_owned(),
                    by: proposed(&op)?,
                });
            }
            other => {
                return Err(format!(
                    "{} must be add, supersede or none (got `{other}`)",
                    at("op")
                ))
            }
        }
    }
    Ok(operations)
}

#[cfg(test)]
mod tests {
    use super::*;
    use memgate_core::distill::JobTurn;
    use memgate_core::Caller;

    fn job() -> DistillJob {
        DistillJob {
            id: 1,
            caller: Caller::new("u").with_thread("t"),
            turns: vec![JobTurn {
                id: "turn_7".into(),
                role: "human".into(),
                speaker: None,
                said_at: "2026-12-04T10:00:00.000Z".into(),
                text: "I moved to Porto".into(),
            }],
            attempts: 0,
            through: 7,
        }
    }

    fn shown() -> Vec<Fact> {
        let fact: Fact = serde_json::from_value(json!({
            "id": "mem_3", "kind": "fact", "text": "Lives in Lisbon", "state": "active",
            "version": 1, "created_at": "x", "updated_at": "x", "origin": "distilled"
        }))
        .unwrap();
        vec![fact]
    }

    #[test]
    fn fences_and_chatter_around_the_json_are_tolerated() {
        let content = "Sure! Here you go:\n```json\n{\"operations\": [{\"op\": \"supersede\", \
                       \"fact\": \"mem_3\", \"kind\": \"fact\", \"text\": \"Lives in Porto {new}\", \
                       \"confidence\": 0.9, \"sources\": [\"turn_7\"]}]}\n```\nHope this helps.";
        let ops = read_answer(content, &job(), &shown()).unwrap();
        assert_eq!(
            ops,
            vec![Operation::Supersede {
                fact: "mem_3".into(),
                by: ProposedFact {
                    kind: "fact".into(),
                    text: "Lives in Porto {new}".into(),
                    confidence: 0.9,
                    sources: vec!["turn_7".into()],
                }
            }]
        );
    }

    #[test]
    fn every_defect_is_named() {
        for (content, expect) in [
            ("I could not find any facts.", "holds no JSON object"),
            ("{\"operations\": [{\"op\": \"add\", \"text\": \"x\"", "not closed"),
            ("{\"ops\": []}", "not the expected JSON"),
            ("{\"operations\": [{\"op\": \"delete\", \"fact\": \"mem_3\"}]}", "operations[0].op"),
            ("{\"operations\": [{\"op\": \"add\", \"text\": \"x\", \"sources\": [\"turn_99\"]}]}",
             "operations[0].sources: `turn_99`"),
            ("{\"operations\": [{\"op\": \"add\", \"text\": \"x\", \"sources\": []}]}",
             "operations[0].sources must cite"),
            ("{\"operations\": [{\"op\": \"add\", \"text\": \"  \", \"sources\": [\"turn_7\"]}]}",
             "operations[0].text"),
            ("{\"operations\": [{\"op\": \"supersede\", \"fact\": \"mem_404\", \"text\": \"x\", \
              \"sources\": [\"turn_7\"]}]}", "operations[0].fact: `mem_404`"),
            ("{\"operations\": [{\"op\": \"add\", \"text\": \"x\", \"confidence\": 3, \
              \"sources\": [\"turn_7\"]}]}", "operations[0].confidence"),
            ("{\"operations\": [{\"op\": \"add\", \"text\": \"x\", \"why\": \"y\", \
              \"sources\": [\"turn_7\"]}]}", "operations[0] is not an operation"),
        ] {
            let err = read_answer(content, &job(), &shown()).unwrap_err();
            assert!(err.contains(expect), "{content}: {err}");
        }
    }

    #[test]
    fn none_operations_are_dropped() {
        let content = "{\"operations\": [{\"op\": \"none\", \"fact\": null, \"kind\": \"\", \
                       \"text\": \"\", \"confidence\": 0, \"sources\": []}]}";
        assert_eq!(read_answer(content, &job(), &shown()).unwrap(), vec![]);
    }
}
