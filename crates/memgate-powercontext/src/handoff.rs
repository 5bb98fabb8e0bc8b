//! Handoff/Continue through PowerContext's own work/handoff routes.
//!
//! PowerContext's model-written draft (`/v1/handoff/prepare`) needs
//! inference the server usually lacks (503 `handoff_generation_unavailable`),
//! and the server keeps no draft anyway: its prepared handoff lives with the
//! client. So the draft (prepare, inspect, correct) is held here, on a
//! [`HandoffDesk`] bounded and expiring like the local store's, and each
//! later step is one call to the server:
//!
//! - finalize → `POST /v1/work/handoffs/prepare-current`: the caller-written
//!   handoff becomes a boundary Source (its id is the handoff's id) and the
//!   server's prepared handoff, kept on the desk and sent back verbatim;
//! - continue → `POST /v1/handoff/continue` (`selection: "prepared"`), which
//!   must resolve as `untrusted_history`;
//! - acknowledge → `POST /v1/work/handoffs/acknowledge`: a receipt Source
//!   (`<id>-receipt`) naming the token's principal as the receiver;
//! - commit, only on request → `POST /v1/handoff/commit`: the durable
//!   `handoff` artifact, cited by its reference.
//!
//! Owner binding, the deadline (the remember timeout) and secret redaction
//! are those of `remember`. Every call is sent at most once. Finalize and
//! acknowledge answers that are lost leave the desk unchanged and say the
//! outcome is unknown (the server treats the same Source id as the same
//! boundary or receipt, so asking again is safe); a lost commit is
//! [`CommitOutcome::Unknown`] and is never retried.
//!
//! Both generations serve these routes (0.0.2 too, observed); 0.0.2 has no
//! `/v1/access/me` and does not check the receiver, so it is sent
//! [`SNAPSHOT_RECEIVER`].

use crate::backend::{warn_problem, MANAGER_CLASS};
use crate::diagnostic::Problem;
use crate::generation::ServerGeneration;
use crate::owner;
use crate::PowerContextBackend;
use memgate_core::canonical_json::to_python_json;
use memgate_core::handoff_desk::HandoffDesk;
use memgate_core::{
    Acknowledgement, Caller, Citation, CommitOutcome, Continuation, Handoff, HandoffContent,
    MemoryError, Result,
};
use serde_json::{json, Value};
use tokio::time::{timeout_at, Instant};

/// The desk's attachment: the server's prepared handoff, once finalized.
pub(crate) type Desk = HandoffDesk<Value>;

/// Largest handoff answer read (a prepared handoff of 32-item lists of
/// 4 KiB fields, with citations, fits well within it).
const HANDOFF_CAP: usize = 4 * 1024 * 1024;
/// The schema of the caller-written handoff `prepare-current` takes.
const CURRENT_WORK_SCHEMA: &str = "powercontext.current-work-handoff.v1";
/// The schema of the server's prepared handoff.
const PREPARED_SCHEMA: &str = "powercontext.prepared-handoff.v1";
/// The receiver named to 0.0.2, which has no principal to ask for.
pub const SNAPSHOT_RECEIVER: &str = "memgate";

/// The caller-written handoff PowerContext prepares: memgate cannot verify
/// the caller's claims, so every item is `declared`; blockers make the
/// disposition `blocked` and are stated as such; evidence is stated, not a
/// citation (PowerContext cites the boundary Source it creates).
fn current_work(content: &HandoffContent) -> Value {
    let declared = |text: String| json!({"text": text, "basis": "declared", "evidence": []});
    let state: Vec<Value> = content
        .progress
        .iter()
        .map(|p| declared(p.clone()))
        .chain(
            content
                .blockers
                .iter()
                .map(|b| declared(format!("Blocker: {b}"))),
        )
        .chain(
            content
                .evidence
                .iter()
                .map(|e| declared(format!("Evidence: {e}"))),
        )
        .collect();
    let disposition = if content.blockers.is_empty() {
        "continuable"
    } else {
        "blocked"
    };
    json!({
        "schema": CURRENT_WORK_SCHEMA,
        "trust": "untrusted_input",
        "objective": content.objective,
        "state": state,
        "disposition": disposition,
        "next_action": declared(content.next_action.clone()),
        "omissions": [],
    })
}

/// The error of a finalize or acknowledge that did not go through: never
/// sent and refused leave nothing behind; anything else after sending may
/// have reached the server.
fn step_error(step: &'static str, problem: Problem) -> MemoryError {
    warn_problem(step, &problem);
    match problem {
        Problem::Connect | Problem::Closed => MemoryError::backend(format!(
            "handoff {step} failed: {problem}; nothing was sent and the handoff is unchanged"
        )),
        Problem::Status { status, .. } if status < 500 => MemoryError::backend(format!(
            "handoff {step} failed: {problem}; the server refused it and the handoff is unchanged"
        )),
        Problem::Unauthorized | Problem::Forbidden | Problem::ScopeNotFound => {
            MemoryError::backend(format!(
                "handoff {step} failed: {problem}; the handoff is unchanged"
            ))
        }
        _ => MemoryError::backend(format!(
            "handoff {step} outcome unknown: {problem} after it was sent; the handoff is \
             unchanged here and {step} was not retried (asking again is safe: the server \
             treats the same handoff id as the same request)"
        )),
    }
}

/// The server's prepared handoff in a `prepare-current` answer.
fn prepared_of(body: &[u8]) -> Result<Value, Problem> {
    let value: Value = serde_json::from_slice(body)
        .map_err(|_| Problem::Malformed("prepare-current answer is not JSON"))?;
    let handoff = value
        .get("handoff")
        .filter(|h| h.get("schema").and_then(Value::as_str) == Some(PREPARED_SCHEMA))
        .ok_or(Problem::Malformed(
            "prepare-current answer lacks a prepared handoff",
        ))?;
    Ok(handoff.clone())
}

/// The citation of a commit answer's `reference`, in the form remember uses.
fn commit_citation(body: &[u8]) -> Result<Citation, Problem> {
    let value: Value = serde_json::from_slice(body)
        .map_err(|_| Problem::Malformed("commit answer is not JSON"))?;
    let reference = value
        .get("reference")
        .ok_or(Problem::Malformed("commit answer lacks its reference"))?;
    let text = |key: &str| {
        reference
            .get(key)
            .and_then(Value::as_str)
            .filter(|s| !s.is_empty())
    };
    match (
        text("family"),
        text("artifact_id"),
        reference.get("revision").and_then(Value::as_u64),
    ) {
        (Some(family), Some(id), Some(revision)) => Ok(Citation::new(to_python_json(
            &json!({"artifact_ref": {"family": family, "artifact_id": id, "revision": revision}}),
        ))),
        _ => Err(Problem::Malformed("commit reference is incomplete")),
    }
}

impl PowerContextBackend {
    fn admit_handoff(&self, caller: &Caller) -> Result<()> {
        owner::admit(&self.settings, &caller.user)?;
        if self.transport.is_closed() {
            return Err(MemoryError::Closed(MANAGER_CLASS.into()));
        }
        Ok(())
    }

    /// One POST within the handoff deadline.
    async fn post_once(
        &self,
        path: &str,
        body: &Value,
        deadline: Instant,
    ) -> Result<Vec<u8>, Problem> {
        let reply = timeout_at(deadline, self.transport.post(path, body, HANDOFF_CAP))
            .await
            .unwrap_or(Err(Problem::Timeout))?;
        if reply.is_success() {
            Ok(reply.body)
        } else {
            Err(reply.problem())
        }
    }

    fn deadline(&self) -> Instant {
        Instant::now() + self.settings.remember_timeout()
    }

    pub(crate) fn handoff_prepare(
        &self,
        caller: &Caller,
        content: &HandoffContent,
    ) -> Result<Handoff> {
        self.admit_handoff(caller)?;
        self.handoffs
            .prepare(caller, content.redacted(&self.redactor)?)
    }

    pub(crate) fn handoff_get(&self, caller: &Caller, id: &str) -> Result<Handoff> {
        owner::admit(&self.settings, &caller.user)?;
        self.handoffs.get(caller, id)
    }

    pub(crate) fn handoff_correct(
        &self,
        caller: &Caller,
        id: &str,
        content: &HandoffContent,
    ) -> Result<Handoff> {
        self.admit_handoff(caller)?;
        let content = content.redacted(&self.redactor)?;
        self.handoffs.correct(caller, id, content)
    }

    /// Sends the draft to `prepare-current` and keeps the server's prepared
    /// handoff; only a draft is sent.
    pub(crate) async fn handoff_finalize(&self, caller: &Caller, id: &str) -> Result<Handoff> {
        self.admit_handoff(caller)?;
        let (mut draft, _) = self.handoffs.get_attached(caller, id)?;
        let content = draft.content.clone();
        draft.finalize()?;
        let body = json!({
            "scope_id": self.settings.scope_id(),
            "source_id": id,
            "handoff": current_work(&content),
        });
        let prepared = self
            .post_once("/v1/work/handoffs/prepare-current", &body, self.deadline())
            .await
            .and_then(|b| prepared_of(&b))
            .map_err(|p| step_error("finalize", p))?;
        self.handoffs.finalize_attached(caller, id, prepared)
    }

    /// The caller's prepared handoff as the server knows it, and the
    /// handoff itself (stage checked by `check`, before any request).
    fn prepared(
        &self,
        caller: &Caller,
        id: &str,
        check: impl FnOnce(&mut Handoff) -> Result<()>,
    ) -> Result<(Handoff, Value)> {
        let (mut handoff, attached) = self.handoffs.get_attached(caller, id)?;
        check(&mut handoff)?;
        let prepared = attached.ok_or_else(|| {
            MemoryError::Conflict(format!("handoff {id} has no prepared handoff yet"))
        })?;
        Ok((handoff, prepared))
    }

    /// Resolves the prepared handoff through the server (read-only); the
    /// receiver's block is built from the same content, as untrusted history.
    pub(crate) async fn handoff_continue(&self, caller: &Caller, id: &str) -> Result<Continuation> {
        self.admit_handoff(caller)?;
        let (handoff, prepared) = self.prepared(caller, id, |h| h.continuation().map(drop))?;
        let body = json!({
            "scope_id": self.settings.scope_id(),
            "selection": "prepared",
            "prepared": prepared,
        });
        let answer = self
            .post_once("/v1/handoff/continue", &body, self.deadline())
            .await
            .and_then(|b| {
                serde_json::from_slice::<Value>(&b)
                    .map_err(|_| Problem::Malformed("continue answer is not JSON"))
            });
        let answer = match answer {
            Ok(answer) => answer,
            Err(problem) => {
                warn_problem("handoff continue", &problem);
                return Err(MemoryError::backend(format!(
                    "handoff continue failed: {problem}; nothing changed"
                )));
            }
        };
        let resolved = answer.get("status").and_then(Value::as_str) == Some("resolved")
            && answer.get("trust").and_then(Value::as_str) == Some("untrusted_history")
            && answer.pointer("/content/objective").and_then(Value::as_str)
                == Some(handoff.content.objective.as_str());
        if !resolved {
            return Err(MemoryError::backend(
                "handoff continue failed: PowerContext did not resolve the prepared handoff \
                 as untrusted history; nothing changed",
            ));
        }
        handoff.continuation()
    }

    /// Who receives: the token's principal on 1.4.x (the server requires it
    /// for an acceptance), [`SNAPSHOT_RECEIVER`] on 0.0.2.
    async fn receiver(&self, deadline: Instant) -> Result<String, Problem> {
        timeout_at(deadline, async {
            if self.server().await?.generation == ServerGeneration::Snapshot {
                return Ok(SNAPSHOT_RECEIVER.to_owned());
            }
            let reply = self.transport.get("/v1/access/me", HANDOFF_CAP).await?;
            if !reply.is_success() {
                return Err(reply.problem());
            }
            let me: Value = serde_json::from_slice(&reply.body)
                .map_err(|_| Problem::Malformed("access/me is not JSON"))?;
            me.pointer("/principal/id")
                .and_then(Value::as_str)
                .filter(|s| !s.trim().is_empty() && s.len() <= 256)
                .map(str::to_owned)
                .ok_or(Problem::Malformed("access/me lacks the principal id"))
        })
        .await
        .unwrap_or(Err(Problem::Timeout))
    }

    /// Records the receiver's answer as PowerContext's receipt Source. An
    /// acceptance attests the three receiver checks PowerContext requires.
    pub(crate) async fn handoff_acknowledge(
        &self,
        caller: &Caller,
        id: &str,
        acknowledgement: &Acknowledgement,
    ) -> Result<Handoff> {
        self.admit_handoff(caller)?;
        let (_, prepared) = self.prepared(caller, id, |h| h.acknowledge(acknowledgement))?;
        let deadline = self.deadline();
        let receiver = self
            .receiver(deadline)
            .await
            .map_err(|p| step_error("acknowledge", p))?;
        let mut body = json!({
            "scope_id": self.settings.scope_id(),
            "source_id": format!("{id}-receipt"),
            "receiver": receiver,
            "selection": "prepared",
            "prepared": prepared,
        });
        match acknowledgement {
            Acknowledgement::Accepted => {
                body["status"] = json!("accepted");
                body["receiver_checks"] = json!({"live_state": "confirmed",
                    "capability": "confirmed", "authorization": "confirmed"});
            }
            Acknowledgement::NeedsClarification { message } => {
                body["status"] = json!("needs_clarification");
                body["message"] = json!(self.redactor.redact(message).text);
            }
            Acknowledgement::Declined { message } => {
                body["status"] = json!("declined");
                body["message"] = json!(self.redactor.redact(message).text);
            }
        }
        self.post_once("/v1/work/handoffs/acknowledge", &body, deadline)
            .await
            .map_err(|p| step_error("acknowledge", p))?;
        self.handoffs.acknowledge(caller, id, acknowledgement)
    }

    /// Commits the prepared handoff as PowerContext's durable `handoff`
    /// artifact, sent once; the outcome is reported exactly as `remember`'s.
    pub(crate) async fn handoff_commit(&self, caller: &Caller, id: &str) -> Result<CommitOutcome> {
        self.admit_handoff(caller)?;
        if let Err(citation) = self.handoffs.to_commit(caller, id)? {
            return Ok(CommitOutcome::Stored { citation });
        }
        let (_, prepared) = self.prepared(caller, id, |_| Ok(()))?;
        let body = json!({"scope_id": self.settings.scope_id(), "handoff": prepared});
        let sent = timeout_at(
            self.deadline(),
            self.transport
                .post("/v1/handoff/commit", &body, HANDOFF_CAP),
        )
        .await
        .unwrap_or(Err(Problem::Timeout));
        let outcome = match sent {
            Err(problem @ (Problem::Connect | Problem::Closed)) => {
                warn_problem("handoff commit", &problem);
                CommitOutcome::Failed {
                    reason: format!("{problem}; the commit was not sent and nothing was stored"),
                }
            }
            Err(problem) => commit_unknown(problem),
            Ok(reply) if reply.is_success() => match commit_citation(&reply.body) {
                Ok(citation) => CommitOutcome::Stored { citation },
                Err(problem) => commit_unknown(problem),
            },
            Ok(reply) if reply.status < 500 => {
                let problem = reply.problem();
                warn_problem("handoff commit", &problem);
                CommitOutcome::Failed {
                    reason: format!("{problem}; nothing was stored"),
                }
            }
            Ok(reply) => commit_unknown(reply.problem()),
        };
        if let CommitOutcome::Stored { citation } = &outcome {
            self.handoffs.committed(caller, id, citation.clone());
        }
        Ok(outcome)
    }
}

fn commit_unknown(problem: Problem) -> CommitOutcome {
    warn_problem("handoff commit", &problem);
    CommitOutcome::Unknown {
        reason: format!("{problem} after the commit was sent"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn blockers_make_the_handoff_blocked_and_every_claim_is_declared() {
        let c = HandoffContent::new(
            "ship",
            &["tests pass".into()],
            &["CI is red".into()],
            "fix CI",
            &["run 42".into()],
        )
        .unwrap();
        let w = current_work(&c);
        assert_eq!(w["disposition"], "blocked");
        let texts: Vec<&str> = w["state"]
            .as_array()
            .unwrap()
            .iter()
            .map(|s| s["text"].as_str().unwrap())
            .collect();
        assert_eq!(
            texts,
            ["tests pass", "Blocker: CI is red", "Evidence: run 42"]
        );
        assert!(w["state"]
            .as_array()
            .unwrap()
            .iter()
            .all(|s| s["basis"] == "declared"));
        assert_eq!(w["next_action"]["text"], "fix CI");
    }

    #[test]
    fn commit_answers_cite_the_handoff_artifact_or_are_malformed() {
        let ok = br#"{"reference":{"family":"handoff","artifact_id":"handoff","revision":1}}"#;
        assert_eq!(
            commit_citation(ok).unwrap().as_str(),
            r#"{"artifact_ref":{"artifact_id":"handoff","family":"handoff","revision":1}}"#
        );
        for bad in [&b"{}"[..], br#"{"reference":{"family":"handoff"}}"#, b"x"] {
            assert!(matches!(commit_citation(bad), Err(Problem::Malformed(_))));
        }
    }
}
