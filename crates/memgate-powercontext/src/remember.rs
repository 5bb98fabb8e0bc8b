//! Explicit save through `POST /v1/memory/remember`, reported exactly.
//!
//! The mutation is sent at most once, never retried. One total deadline
//! (the snapshot's remember timeout) covers three phases, and where it
//! strikes decides the outcome:
//!
//! 1. before sending (detection, the 1.4.x duplicate pre-check): nothing was
//!    sent, so a failure is `Failed` and a retry by the user is safe;
//! 2. the write: a 2xx is validated into `Stored` (the server's citation) or
//!    `AlreadyPresent`; a 4xx (or an unfollowed 3xx) is `Failed`; a refused connection is `Failed`
//!    (never sent); anything else after sending — timeout, a cut-off body, a
//!    5xx, a malformed success — is `Unknown`: it may have committed;
//! 3. on 0.0.2's `entry: null` no-op, a read-only lookup of the existing
//!    entry's citation. If it fails or runs out of time the outcome stays
//!    `AlreadyPresent`, without a citation (never an invented one).
//!
//! De-duplication per generation: 0.0.2 does it itself (`entry: null`, the
//! Memory revision unchanged, kept as `revision`). 1.4.x stores the same
//! text twice, so before writing, a read-only `POST /v1/atomic-memory/search`
//! (text mode, same kind) looks for an active record with exactly the same
//! normalized text and kind; a hit is `AlreadyPresent` with that record's
//! citation and nothing is written. The pre-check is a lexical search: a
//! text without searchable terms (only punctuation or symbols) may not be
//! found and is then stored again.

use crate::backend::warn_problem;
use crate::diagnostic::Problem;
use crate::generation::ServerGeneration;
use crate::PowerContextBackend;
use memgate_core::canonical_json::to_python_json;
use memgate_core::redaction::redact_remember;
use memgate_core::{Citation, RememberOutcome, RememberRequest};
use serde_json::{json, Value};
use tokio::time::{timeout_at, Instant};

/// Largest remember response read (a mutation answer is small).
const MUTATION_CAP: usize = 1024 * 1024;
/// Largest search or list response read for the duplicate look-ups.
const LOOKUP_CAP: usize = 4 * 1024 * 1024;
/// Records the 1.4.x pre-check examines (the API's maximum).
const PRECHECK_LIMIT: u32 = 100;

/// A validated successful mutation answer.
#[derive(Debug, PartialEq)]
enum Mutation {
    Stored(Citation),
    /// Nothing new was stored; the citation is present only when the server sent one.
    Unchanged {
        citation: Option<Citation>,
        revision: Option<u64>,
    },
}

impl PowerContextBackend {
    /// Sends one remember request and reports its exact outcome. Secrets
    /// are redacted before anything is sent; a text that is a secret is
    /// refused (`Failed`) without a request.
    pub(crate) async fn remember_once(&self, request: &RememberRequest) -> RememberOutcome {
        let request = match redact_remember(&self.redactor, request) {
            Ok(redacted) => redacted,
            Err(refused) => return refused,
        };
        let request = &request;
        let deadline = Instant::now() + self.settings.remember_timeout();

        // Phase 1: nothing has been sent yet.
        let before = timeout_at(deadline, async {
            let generation = self.server().await?.generation;
            match generation {
                ServerGeneration::Current => self.find_identical_record(request).await,
                ServerGeneration::Snapshot => Ok(None),
            }
        })
        .await
        .unwrap_or(Err(Problem::Timeout));
        match before {
            Ok(Some(existing)) => return existing,
            Ok(None) => {}
            Err(problem) => {
                warn_problem("remember", &problem);
                return RememberOutcome::Failed {
                    reason: format!("{problem}; nothing was sent and nothing was stored"),
                };
            }
        }

        // Phase 2: the write, sent once.
        let body = json!({
            "scope_id": self.settings.scope_id(),
            "kind": request.kind,
            "text": request.text,
        });
        let sent = timeout_at(
            deadline,
            self.transport
                .post("/v1/memory/remember", &body, MUTATION_CAP),
        )
        .await
        .unwrap_or(Err(Problem::Timeout));
        let reply = match sent {
            Ok(reply) => reply,
            Err(problem @ (Problem::Connect | Problem::Closed)) => {
                warn_problem("remember", &problem);
                return RememberOutcome::Failed {
                    reason: format!("{problem}; the save was not sent and nothing was stored"),
                };
            }
            Err(problem) => return unknown(problem),
        };
        if !reply.is_success() {
            let problem = reply.problem();
            // Below 500 (a 4xx, or a redirect, which is never followed) the
            // server did not apply the save.
            if reply.status < 500 {
                warn_problem("remember", &problem);
                return RememberOutcome::Failed {
                    reason: format!("{problem}; nothing was stored"),
                };
            }
            return unknown(problem);
        }
        match parse_mutation(&reply.body) {
            Ok(Mutation::Stored(citation)) => RememberOutcome::Stored { citation },
            Ok(Mutation::Unchanged {
                citation: Some(citation),
                revision,
            }) => RememberOutcome::AlreadyPresent {
                citation: Some(citation),
                revision,
            },
            // Phase 3: 0.0.2's no-op carries no citation; look it up, read-only.
            Ok(Mutation::Unchanged {
                citation: None,
                revision,
            }) => {
                let citation = timeout_at(deadline, self.find_identical_entry(request))
                    .await
                    .ok()
                    .flatten();
                RememberOutcome::AlreadyPresent { citation, revision }
            }
            Err(problem) => unknown(problem),
        }
    }

    /// 1.4.x pre-check: an active Atomic Memory with exactly this kind and text.
    async fn find_identical_record(
        &self,
        request: &RememberRequest,
    ) -> Result<Option<RememberOutcome>, Problem> {
        let body = json!({
            "scope_id": self.settings.scope_id(),
            "query": request.text,
            "mode": "text",
            "kind": request.kind,
            "limit": PRECHECK_LIMIT,
        });
        let reply = self
            .transport
            .post("/v1/atomic-memory/search", &body, LOOKUP_CAP)
            .await?;
        if !reply.is_success() {
            return Err(reply.problem());
        }
        let value: Value = serde_json::from_slice(&reply.body)
            .map_err(|_| Problem::Malformed("atomic-memory search is not JSON"))?;
        let hits = value
            .get("hits")
            .and_then(Value::as_array)
            .ok_or(Problem::Malformed("atomic-memory search lacks hits"))?;
        let identical = hits
            .iter()
            .filter_map(|hit| hit.get("memory"))
            .find(|record| is_identical_active(record, request));
        Ok(identical.and_then(|record| {
            let (citation, revision) = atomic_citation(record)?;
            Some(RememberOutcome::AlreadyPresent {
                citation: Some(citation),
                revision: Some(revision),
            })
        }))
    }

    /// 0.0.2 readback after `entry: null`: the citation of the identical
    /// active entry, if the list shows one. Any failure is just "no citation".
    async fn find_identical_entry(&self, request: &RememberRequest) -> Option<Citation> {
        let body = json!({"scope_id": self.settings.scope_id()});
        let reply = self
            .transport
            .post("/v1/memory/entries/list", &body, LOOKUP_CAP)
            .await
            .ok()
            .filter(|r| r.status == 200)?;
        let value: Value = serde_json::from_slice(&reply.body).ok()?;
        value
            .get("entries")?
            .as_array()?
            .iter()
            .find(|entry| is_identical_active(entry, request))
            .and_then(|entry| entry_citation(entry.get("citation")?))
    }
}

fn unknown(problem: Problem) -> RememberOutcome {
    warn_problem("remember", &problem);
    RememberOutcome::Unknown {
        reason: format!("{problem} after the save was sent"),
    }
}

/// Same kind, same normalized text, still active.
fn is_identical_active(record: &Value, request: &RememberRequest) -> bool {
    record.get("state").and_then(Value::as_str) == Some("active")
        && record.get("kind").and_then(Value::as_str) == Some(request.kind.as_str())
        && record.get("text").and_then(Value::as_str) == Some(request.text.as_str())
}

/// The 1.4.x citation of an Atomic Memory record, in the form prepare uses
/// (`{"artifact_ref": {family, artifact_id, revision}}`), and its revision.
fn atomic_citation(record: &Value) -> Option<(Citation, u64)> {
    let artifact = record.get("artifact")?;
    let family = artifact.get("family")?.as_str().filter(|s| !s.is_empty())?;
    let id = artifact
        .get("artifact_id")?
        .as_str()
        .filter(|s| !s.is_empty())?;
    let revision = artifact.get("revision")?.as_u64()?;
    let reference =
        json!({"artifact_ref": {"family": family, "artifact_id": id, "revision": revision}});
    Some((Citation::new(to_python_json(&reference)), revision))
}

/// The 0.0.2 citation object (`{memory_ref, entry_id, entry_version_id}`),
/// kept exactly as the server sent it.
fn entry_citation(citation: &Value) -> Option<Citation> {
    let ok = citation.get("memory_ref").is_some_and(Value::is_object)
        && citation
            .get("entry_id")
            .and_then(Value::as_str)
            .is_some_and(|s| !s.is_empty())
        && citation
            .get("entry_version_id")
            .and_then(Value::as_str)
            .is_some_and(|s| !s.is_empty());
    ok.then(|| Citation::new(to_python_json(citation)))
}

/// Validates a 200 answer of either generation.
fn parse_mutation(body: &[u8]) -> Result<Mutation, Problem> {
    let value: Value = serde_json::from_slice(body)
        .map_err(|_| Problem::Malformed("remember answer is not JSON"))?;
    if let Some(changed) = value.get("changed") {
        // 1.4.x: {changed, records}.
        let changed = changed
            .as_bool()
            .ok_or(Problem::Malformed("changed is not a boolean"))?;
        let record = value
            .get("records")
            .and_then(Value::as_array)
            .and_then(|r| r.first())
            .ok_or(Problem::Malformed("remember answer has no record"))?;
        let (citation, revision) =
            atomic_citation(record).ok_or(Problem::Malformed("record lacks its artifact"))?;
        return Ok(if changed {
            Mutation::Stored(citation)
        } else {
            Mutation::Unchanged {
                citation: Some(citation),
                revision: Some(revision),
            }
        });
    }
    // 0.0.2: {memory, entry | null}.
    let revision = value
        .get("memory")
        .and_then(|m| m.get("revision"))
        .and_then(Value::as_u64)
        .ok_or(Problem::Malformed(
            "remember answer lacks the memory revision",
        ))?;
    match value.get("entry") {
        Some(Value::Null) => Ok(Mutation::Unchanged {
            citation: None,
            revision: Some(revision),
        }),
        Some(entry) => entry
            .get("citation")
            .and_then(entry_citation)
            .map(Mutation::Stored)
            .ok_or(Problem::Malformed("entry lacks a valid citation")),
        None => Err(Problem::Malformed("remember answer lacks entry")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn snapshot_answers_map_to_stored_or_unchanged() {
        let stored = br#"{"memory":{"family":"memory","artifact_id":"memory","revision":1},"entry":{"citation":{"memory_ref":{"family":"memory","artifact_id":"memory","revision":1},"entry_id":"mem_ent_1","entry_version_id":"mem_ver_1"},"version":1,"kind":"fact","text":"x","state":"active","source_refs":[],"artifact_refs":[]}}"#;
        let Mutation::Stored(c) = parse_mutation(stored).unwrap() else {
            panic!("not stored")
        };
        assert_eq!(
            c.as_str(),
            r#"{"entry_id":"mem_ent_1","entry_version_id":"mem_ver_1","memory_ref":{"artifact_id":"memory","family":"memory","revision":1}}"#
        );
        let noop =
            br#"{"memory":{"family":"memory","artifact_id":"memory","revision":4},"entry":null}"#;
        assert_eq!(
            parse_mutation(noop).unwrap(),
            Mutation::Unchanged {
                citation: None,
                revision: Some(4)
            }
        );
    }

    #[test]
    fn current_answers_cite_the_atomic_artifact() {
        let stored = br#"{"changed":true,"records":[{"artifact":{"family":"atomic-memory","artifact_id":"art_2b56","revision":1},"kind":"fact","text":"x","state":"active","state_version":0,"merged_into_id":null}]}"#;
        assert_eq!(
            parse_mutation(stored).unwrap(),
            Mutation::Stored(Citation::new(
                r#"{"artifact_ref":{"artifact_id":"art_2b56","family":"atomic-memory","revision":1}}"#
            ))
        );
    }

    #[test]
    fn malformed_success_answers_are_refused() {
        for body in [
            &b"nope"[..],
            br#"{}"#,
            br#"{"memory":{"revision":1}}"#,
            br#"{"memory":{"revision":1},"entry":{"citation":{"entry_id":"e"}}}"#,
            br#"{"changed":true,"records":[]}"#,
            br#"{"changed":"yes","records":[{}]}"#,
            br#"{"changed":true,"records":[{"artifact":{"family":"atomic-memory","revision":1}}]}"#,
        ] {
            assert!(
                matches!(parse_mutation(body), Err(Problem::Malformed(_))),
                "{}",
                String::from_utf8_lossy(body)
            );
        }
    }

    #[test]
    fn identity_of_records_is_exact() {
        let req = RememberRequest::new("fact", "money is integer cents").unwrap();
        let rec = json!({"state":"active","kind":"fact","text":"money is integer cents"});
        assert!(is_identical_active(&rec, &req));
        for (k, v) in [
            ("state", "forgotten"),
            ("kind", "preference"),
            ("text", "money is integer cents!"),
        ] {
            let mut other = rec.clone();
            other[k] = json!(v);
            assert!(!is_identical_active(&other, &req), "{k}");
        }
    }
}
