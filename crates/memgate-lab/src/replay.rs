//! The replay extractor: LoCoMo's own facts (`observation`: per session and
//! speaker, each with the dialogue ids it rests on) served as the answers
//! of an OpenAI-compatible chat endpoint on loopback.
//!
//! The real distillation worker calls it like any endpoint, so the job
//! queue, the strict answer reader and the apply transaction all run, and
//! everything after the model (storage, recall, the block) is measured
//! without one. It is not a model: each prompt is answered with an `add`
//! for every observation whose first cited turn is among the prompt's
//! `new_turns`, citing those of its turns the job holds. Its figures are
//! the pipeline's ceiling with the dataset's own facts, never a model's
//! quality. The dataset has no "no longer true" facts, so it never
//! supersedes.

use crate::locomo::{parse_evidence, DiaId};
use axum::extract::State;
use axum::routing::post;
use axum::{Json, Router};
use memgate_core::{MemoryError, Result};
use serde_json::{json, Value};
use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};

/// One fact of the dataset and the dialogue turns it rests on.
#[derive(Clone, Debug, PartialEq)]
pub struct Observation {
    pub text: String,
    pub evidence: Vec<DiaId>,
}

/// The observations of one sample (`observation.session_N_observation.
/// <speaker>` = `[[text, dia_id or [dia_id...]], ...]`), in session order.
pub fn observations(sample: &Value, field: &str) -> Result<Vec<Observation>> {
    let Some(sessions) = sample.get("observation").and_then(Value::as_object) else {
        return Err(MemoryError::invalid(
            format!("{field}.observation"),
            "must be an object of sessions (--distill replay needs the dataset's observations)",
        ));
    };
    let mut numbered: Vec<(u32, &String, &Value)> = sessions
        .iter()
        .filter_map(|(k, v)| {
            let n = k
                .strip_prefix("session_")?
                .strip_suffix("_observation")?
                .parse()
                .ok()?;
            Some((n, k, v))
        })
        .collect();
    numbered.sort_by_key(|(n, _, _)| *n);
    let mut out = Vec::new();
    for (_, key, by_speaker) in numbered {
        let by_speaker = by_speaker.as_object().ok_or_else(|| {
            MemoryError::invalid(
                format!("{field}.observation.{key}"),
                "must be an object of speakers",
            )
        })?;
        for (speaker, list) in by_speaker {
            let at = format!("{field}.observation.{key}.{speaker}");
            let list = list
                .as_array()
                .ok_or_else(|| MemoryError::invalid(&at, "must be a list"))?;
            for (i, item) in list.iter().enumerate() {
                let pair = item.as_array().filter(|p| p.len() == 2);
                let (Some(text), Some(ids)) = (
                    pair.and_then(|p| p[0].as_str()),
                    pair.map(|p| match &p[1] {
                        Value::Array(ids) => ids.clone(),
                        one => vec![one.clone()],
                    }),
                ) else {
                    return Err(MemoryError::invalid(
                        format!("{at}[{i}]"),
                        "must be [text, dialogue id or list of ids]",
                    ));
                };
                out.push(Observation {
                    text: text.to_owned(),
                    evidence: parse_evidence(&ids).ids,
                });
            }
        }
    }
    Ok(out)
}

/// An add operation: the fact's text and the turn citations it rests on.
type Answer = (String, Vec<String>);

/// What the endpoint answers, by the turn citation (`turn_<n>`) that makes
/// an observation due: its first cited turn that was stored.
#[derive(Clone, Debug, Default)]
pub struct ReplayScript {
    due: Arc<Mutex<HashMap<String, Vec<Answer>>>>,
}

impl ReplayScript {
    /// Adds `observations`, `turns` mapping their dialogue ids to the
    /// stored turns' citations. Returns how many rest on no stored turn
    /// (left out).
    pub fn add(&self, observations: &[Observation], turns: &HashMap<DiaId, String>) -> usize {
        let mut due = self.due.lock().unwrap_or_else(|p| p.into_inner());
        let mut unplaced = 0;
        for o in observations {
            let cited: Vec<String> = o
                .evidence
                .iter()
                .filter_map(|d| turns.get(d).cloned())
                .collect();
            match cited.first() {
                Some(first) => due
                    .entry(first.clone())
                    .or_default()
                    .push((o.text.clone(), cited)),
                None => unplaced += 1,
            }
        }
        unplaced
    }

    /// The answer to one distillation prompt (its data message: a JSON
    /// document with `new_turns`): the operations due for those turns.
    pub fn answer(&self, data: &str) -> String {
        let turns: Vec<String> = serde_json::from_str::<Value>(data)
            .ok()
            .and_then(|v| {
                v.get("new_turns")?.as_array().map(|list| {
                    list.iter()
                        .filter_map(|t| t.get("id")?.as_str().map(str::to_owned))
                        .collect()
                })
            })
            .unwrap_or_default();
        let held: HashSet<&str> = turns.iter().map(String::as_str).collect();
        let due = self.due.lock().unwrap_or_else(|p| p.into_inner());
        let operations: Vec<Value> = turns
            .iter()
            .filter_map(|t| due.get(t))
            .flatten()
            .map(|(text, cited)| {
                let sources: Vec<&String> =
                    cited.iter().filter(|c| held.contains(c.as_str())).collect();
                json!({"op": "add", "fact": null, "kind": "fact", "text": text,
                       "confidence": 1.0, "sources": sources})
            })
            .collect();
        json!({ "operations": operations }).to_string()
    }
}

/// A chat completion request's data message: the first `user` message.
fn data_message(request: &Value) -> &str {
    request
        .get("messages")
        .and_then(Value::as_array)
        .and_then(|m| {
            m.iter()
                .find(|m| m.get("role").and_then(Value::as_str) == Some("user"))
        })
        .and_then(|m| m.get("content")?.as_str())
        .unwrap_or_default()
}

async fn complete(State(script): State<ReplayScript>, Json(request): Json<Value>) -> Json<Value> {
    let content = script.answer(data_message(&request));
    // No model ran: no tokens are reported.
    Json(json!({
        "object": "chat.completion",
        "model": "locomo-replay",
        "choices": [{"index": 0, "finish_reason": "stop",
                     "message": {"role": "assistant", "content": content}}],
        "usage": {"prompt_tokens": 0, "completion_tokens": 0, "total_tokens": 0},
    }))
}

/// The replay endpoint listening on loopback (stopped on drop).
#[derive(Debug)]
pub struct ReplayEndpoint {
    /// The `base_url` to configure (`http://127.0.0.1:<port>/v1`).
    pub base_url: String,
    task: tokio::task::JoinHandle<()>,
}

impl ReplayEndpoint {
    /// Serves `script` on a free loopback port, on the current runtime.
    pub async fn start(script: ReplayScript) -> Result<Self> {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .map_err(|e| MemoryError::backend(format!("replay endpoint: cannot listen: {e}")))?;
        let addr = listener
            .local_addr()
            .map_err(|e| MemoryError::backend(format!("replay endpoint: {e}")))?;
        let app = Router::new()
            .route("/v1/chat/completions", post(complete))
            .with_state(script);
        let task = tokio::spawn(async move {
            if let Err(e) = axum::serve(listener, app).await {
                tracing::warn!(error = %e, "replay endpoint stopped");
            }
        });
        Ok(Self {
            base_url: format!("http://{addr}/v1"),
            task,
        })
    }
}

impl Drop for ReplayEndpoint {
    fn drop(&mut self) {
        self.task.abort();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn d(session: u32, turn: u32) -> DiaId {
        DiaId { session, turn }
    }

    #[test]
    fn observations_are_read_with_one_id_or_several() {
        let sample = json!({"observation": {
            "session_2_observation": {"Jon": [["Jon opens a studio.", ["D2:3", "D2:5"]]]},
            "session_1_observation": {"Gina": [["Gina lost her job.", "D1:4"]]},
        }});
        let got = observations(&sample, "[0]").unwrap();
        assert_eq!(
            got,
            [
                Observation {
                    text: "Gina lost her job.".into(),
                    evidence: vec![d(1, 4)]
                },
                Observation {
                    text: "Jon opens a studio.".into(),
                    evidence: vec![d(2, 3), d(2, 5)]
                },
            ]
        );
        let err = observations(
            &json!({"observation": {"session_1_observation": {"Jon": [["x"]]}}}),
            "[3]",
        )
        .unwrap_err()
        .to_string();
        assert!(
            err.contains("[3].observation.session_1_observation.Jon[0]"),
            "{err}"
        );
        let err = observations(&json!({}), "[4]").unwrap_err().to_string();
        assert!(err.contains("[4].observation"), "{err}");
    }

    #[test]
    fn a_prompt_gets_the_observations_due_on_its_turns_citing_only_its_turns() {
        let script = ReplayScript::default();
        let turns: HashMap<DiaId, String> = [
            (d(1, 1), "turn_7"),
            (d(1, 2), "turn_8"),
            (d(2, 1), "turn_20"),
        ]
        .into_iter()
        .map(|(k, v)| (k, v.to_owned()))
        .collect();
        let unplaced = script.add(
            &[
                Observation {
                    text: "A".into(),
                    evidence: vec![d(1, 2), d(2, 1)],
                },
                Observation {
                    text: "B".into(),
                    evidence: vec![d(9, 9)],
                },
            ],
            &turns,
        );
        assert_eq!(unplaced, 1);
        let data = json!({"current_facts": [], "new_turns": [{"id": "turn_7"}, {"id": "turn_8"}]});
        let answer: Value = serde_json::from_str(&script.answer(&data.to_string())).unwrap();
        assert_eq!(
            answer,
            json!({"operations": [{"op": "add", "fact": null, "kind": "fact", "text": "A",
                                   "confidence": 1.0, "sources": ["turn_8"]}]})
        );
        // Other turns, or a prompt that is not the data document: nothing due.
        let none: Value =
            serde_json::from_str(&script.answer(r#"{"new_turns": [{"id": "turn_20"}]}"#)).unwrap();
        assert_eq!(none, json!({"operations": []}));
        assert_eq!(script.answer("hello"), r#"{"operations":[]}"#);
    }
}
