//! Capture: storing each new human and AI turn of a transcript exactly once.
//!
//! What is stored: the readable text of human messages and of AI answers.
//! What is left out (counted as `filtered`): hidden messages unless the
//! host's keep-hook keeps them, the injected memory message (always, even if
//! a hook would keep it), system messages, compaction summaries, tool
//! results, AI messages that carry tool calls (plumbing between steps, not an
//! answer), other roles, and messages with no text. Memory never feeds on
//! itself.
//!
//! Context for recall arrives on the message itself: `name` is the speaker
//! and `additional_kwargs.timestamp` (any string, e.g. an RFC 3339 date or
//! "1:56 pm on 8 May, 2023") is when it was said. Both are indexed as the
//! turn's context and shown in the recall block.
//!
//! De-duplication is by (scope, thread, message signature), so replaying a
//! snapshot, a longer snapshot or a compaction head stores only what is new.
//! A batch is one transaction, committed before the report is returned.

use crate::first_turn::cache_excerpt;
use crate::index::IndexWrites;
use crate::salience::SpeakerNames;
use crate::schema::db_error;
use crate::scope::ScopeKey;
use crate::store::MemoryStore;
use memgate_core::budget::prefix_bytes;
use memgate_core::capture::is_captureable;
use memgate_core::signature::message_signature;
use memgate_core::time::now_rfc3339;
use memgate_core::{Caller, CaptureReport, CaptureRequest, Message, Redactor, RoleKind};
use memgate_core::{MemoryError, Result};
use rusqlite::{params, Connection, OptionalExtension};
use serde_json::Value;
use std::borrow::Borrow;
use std::cell::Cell;
use std::sync::mpsc::{Receiver, RecvError};

/// Memory keeps the first 64 KiB of a message (the signature still covers
/// all of it); a pasted log does not need to be recalled in full.
pub const MAX_TURN_TEXT_BYTES: usize = 64 * 1024;
/// Longest speaker name and timestamp kept as context.
const MAX_CONTEXT_CHARS: usize = 128;
/// The message metadata key that carries when a turn was said.
pub const TIMESTAMP_KEY: &str = "timestamp";

/// A turn ready to insert.
#[derive(Clone, Debug, PartialEq)]
pub struct NewTurn {
    pub signature: String,
    pub message_id: Option<String>,
    pub role: &'static str,
    pub speaker: Option<String>,
    pub occurred_at: Option<String>,
    pub text: String,
    pub captured_at: String,
}

fn bounded_context(value: Option<&str>) -> Option<String> {
    let v = value?.trim();
    (!v.is_empty()).then(|| v.chars().take(MAX_CONTEXT_CHARS).collect())
}

/// The storable form of a message that survived the host's hidden filter,
/// or `None` when memory should not keep it. The signature covers the
/// original message; the stored text has its secrets replaced.
/// (Shared with the postgres backend: both stores keep the same turns.)
pub fn storable(message: &Message, captured_at: &str, redactor: &Redactor) -> Option<NewTurn> {
    let role = match message.role.kind() {
        RoleKind::Human => "human",
        RoleKind::Ai if message.tool_calls.is_empty() => "ai",
        _ => return None,
    };
    if message.is_injected_memory() || message.is_summary() {
        return None;
    }
    let text = message.text();
    // Redact before cutting, so a cut never leaves half a secret unmatched.
    let redacted = redactor.redact(text.trim());
    let text = prefix_bytes(&redacted.text, MAX_TURN_TEXT_BYTES);
    if text.is_empty() {
        return None;
    }
    Some(NewTurn {
        signature: message_signature(message),
        message_id: message.id.clone().filter(|id| !id.is_empty()),
        role,
        speaker: bounded_context(message.name.as_deref()),
        occurred_at: bounded_context(
            message
                .additional_kwargs
                .get(TIMESTAMP_KEY)
                .and_then(Value::as_str),
        ),
        text: text.to_owned(),
        captured_at: captured_at.to_owned(),
    })
}

/// The position the next new turn of `thread` takes.
pub(crate) fn next_seq(conn: &Connection, scope: i64, thread: &str) -> Result<i64> {
    conn.prepare_cached(
        "SELECT coalesce(max(seq), 0) + 1 FROM turns WHERE scope_id = ?1 AND thread = ?2",
    )
    .and_then(|mut s| s.query_row(params![scope, thread], |r| r.get(0)))
    .map_err(db_error)
}

/// Inserts `turn` at position `seq` of `thread` unless its signature is
/// already there, with its first-turn excerpt; true when it was new (the
/// caller then advances `seq`). `names` gathers the speakers met so far.
pub(crate) fn insert_turn(
    conn: &Connection,
    index: &mut IndexWrites,
    names: &mut SpeakerNames,
    scope: i64,
    thread: &str,
    seq: i64,
    turn: &NewTurn,
) -> Result<bool> {
    names.add(turn.speaker.as_deref());
    let inserted = conn
        .prepare_cached(
            "INSERT INTO turns (scope_id, thread, seq, signature, message_id, role, speaker,
                                occurred_at, text, captured_at)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10)
             ON CONFLICT (scope_id, thread, signature) DO NOTHING
             RETURNING id",
        )
        .and_then(|mut s| {
            s.query_row(
                params![
                    scope,
                    thread,
                    seq,
                    turn.signature,
                    turn.message_id,
                    turn.role,
                    turn.speaker,
                    turn.occurred_at,
                    turn.text,
                    turn.captured_at
                ],
                |r| r.get::<_, i64>(0),
            )
            .optional()
        })
        .map_err(db_error)?;
    match inserted {
        Some(id) => {
            index.add_turn(
                scope,
                id,
                &turn.text,
                turn.speaker.as_deref(),
                turn.occurred_at.as_deref(),
            );
            cache_excerpt(conn, id, &turn.text, names)?;
            Ok(true)
        }
        None => Ok(false),
    }
}

/// One item of a streamed capture ([`MemoryStore::capture_streamed`]): the
/// contract's, so a surface streams through `MemoryBackend::begin_capture`.
pub use memgate_core::handoff::Streamed;

/// A streamed transcript as messages; a sender that hangs up before
/// [`Streamed::End`] counts as a failure, so a half-read transcript is never
/// committed.
struct Feed {
    items: Receiver<Streamed>,
    batch: std::vec::IntoIter<Message>,
    done: bool,
}

impl Iterator for Feed {
    type Item = Result<Message>;

    fn next(&mut self) -> Option<Result<Message>> {
        loop {
            if let Some(m) = self.batch.next() {
                return Some(Ok(m));
            }
            if self.done {
                return None;
            }
            let last = match self.items.recv() {
                Ok(Streamed::Messages(batch)) => {
                    self.batch = batch.into_iter();
                    continue;
                }
                Ok(Streamed::End) => None,
                Ok(Streamed::Failed(e)) => Some(Err(e)),
                Err(RecvError) => Some(Err(MemoryError::backend(
                    "the transcript stream stopped before its end",
                ))),
            };
            self.done = true;
            return last;
        }
    }
}

impl MemoryStore {
    /// Stores the new turns of a snapshot (or compaction head) in one
    /// transaction. Requires a thread.
    pub fn capture(&self, request: &CaptureRequest) -> Result<CaptureReport> {
        request.caller.require_thread()?;
        let captured_at = now_rfc3339();
        let seen = Cell::new(0);
        // Signatures are computed before the write lock is taken.
        let turns: Vec<Result<NewTurn>> = self
            .turns_of(request.messages.iter().map(Ok), &captured_at, &seen)
            .collect();
        self.store_turns(
            &request.caller,
            request.trace_id.as_deref(),
            turns.into_iter(),
            &seen,
        )
    }

    /// [`Self::capture`] for a transcript that arrives one message at a time
    /// (a host still converting it): each new turn is written as it arrives,
    /// so the host's conversion and the store's work overlap. The write lock
    /// is held from the first storable turn to [`Streamed::End`]. A
    /// [`Streamed::Failed`] item, or a sender gone before the end, stores
    /// nothing.
    pub fn capture_streamed(
        &self,
        caller: &Caller,
        trace_id: Option<&str>,
        items: Receiver<Streamed>,
    ) -> Result<CaptureReport> {
        let captured_at = now_rfc3339();
        let seen = Cell::new(0);
        let feed = Feed {
            items,
            batch: Vec::new().into_iter(),
            done: false,
        };
        let turns = self.turns_of(feed, &captured_at, &seen);
        self.store_turns(caller, trace_id, turns, &seen)
    }

    /// The storable turns of `messages`, in order; `seen` counts messages.
    fn turns_of<'a, M: Borrow<Message>>(
        &'a self,
        messages: impl Iterator<Item = Result<M>> + 'a,
        captured_at: &'a str,
        seen: &'a Cell<usize>,
    ) -> impl Iterator<Item = Result<NewTurn>> + 'a {
        let keep = self.keep_hidden.as_ref();
        let redactor = &*self.redactor;
        messages.filter_map(move |message| {
            let message = match message {
                Ok(m) => m,
                Err(e) => return Some(Err(e)),
            };
            let message = message.borrow();
            seen.set(seen.get() + 1);
            is_captureable(message, keep)
                .then(|| storable(message, captured_at, redactor))
                .flatten()
                .map(Ok)
        })
    }

    /// Writes `turns` in one transaction, opened by the first of them (none:
    /// no transaction); an `Err` turn rolls it back.
    fn store_turns(
        &self,
        caller: &Caller,
        trace_id: Option<&str>,
        turns: impl Iterator<Item = Result<NewTurn>>,
        seen: &Cell<usize>,
    ) -> Result<CaptureReport> {
        let thread = caller.require_thread()?;
        let mut turns = turns.peekable();
        let mut report = CaptureReport::default();
        if turns.peek().is_none() {
            self.check_usable()?;
        } else {
            let key = ScopeKey::of(caller);
            self.write(|tx, index| {
                let scope = key.ensure(tx)?;
                let mut seq = next_seq(tx, scope, thread)?;
                let mut names = SpeakerNames::default();
                for turn in turns {
                    if insert_turn(tx, index, &mut names, scope, thread, seq, &turn?)? {
                        seq += 1;
                        report.stored += 1;
                    } else {
                        report.already_known += 1;
                    }
                }
                Ok(())
            })?;
        }
        report.filtered = seen.get() - report.stored - report.already_known;
        tracing::debug!(
            stored = report.stored,
            already_known = report.already_known,
            filtered = report.filtered,
            trace_id = trace_id.unwrap_or(""),
            "local store capture"
        );
        Ok(report)
    }

    /// A closed store refuses even a capture that would store nothing.
    fn check_usable(&self) -> Result<()> {
        if self.is_closed() {
            Err(MemoryError::Closed("local".to_owned()))
        } else {
            Ok(())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use memgate_core::ToolCall;
    use serde_json::json;

    fn keeps(m: &Message) -> bool {
        storable(m, "t", &Redactor::default()).is_some()
    }

    #[test]
    fn human_and_ai_answers_are_kept() {
        assert!(keeps(&Message::human("I use Vim")));
        assert!(keeps(&Message::ai("Noted.")));
        assert!(keeps(&Message::new(memgate_core::Role::new("user"), "hi")));
    }

    #[test]
    fn plumbing_system_summaries_and_injections_are_not() {
        let call = Message::ai("Let me look.").with_tool_calls(vec![ToolCall::new(
            "search",
            json!({}),
            Some("c1".into()),
        )]);
        assert!(!keeps(&call));
        assert!(!keeps(&Message::tool("result", "c1")));
        assert!(!keeps(&Message::system("be nice")));
        assert!(!keeps(&Message::ai("short story").with_name("summary")));
        assert!(!keeps(
            &Message::human("x").with_flag("lc_source", "summarization")
        ));
        let injected = Message::human("<memory>old</memory>")
            .with_id("m__memory")
            .with_flag("dynamic_context_reminder", true);
        assert!(!keeps(&injected));
        assert!(!keeps(&Message::human("   ")));
        assert!(!keeps(&Message::new(
            memgate_core::Role::new("critic"),
            "x"
        )));
    }

    #[test]
    fn speaker_and_timestamp_become_context() {
        let m = Message::human("I went hiking")
            .with_name("Caroline")
            .with_flag(TIMESTAMP_KEY, "1:56 pm on 8 May, 2023");
        let t = storable(&m, "now", &Redactor::default()).unwrap();
        assert_eq!(t.speaker.as_deref(), Some("Caroline"));
        assert_eq!(t.occurred_at.as_deref(), Some("1:56 pm on 8 May, 2023"));
        let odd = Message::human("x").with_flag(TIMESTAMP_KEY, 17);
        assert_eq!(
            storable(&odd, "now", &Redactor::default())
                .unwrap()
                .occurred_at,
            None
        );
    }

    #[test]
    fn secrets_are_redacted_but_the_signature_covers_the_original() {
        let key = "ghp_0123456789abcdefghijABCDEFGHIJ012345";
        let m = Message::human(format!("push with {key} please"));
        let t = storable(&m, "now", &Redactor::default()).unwrap();
        assert_eq!(t.text, "push with [redacted:token] please");
        assert_eq!(t.signature, message_signature(&m));
        let off = storable(&m, "now", &Redactor::disabled()).unwrap();
        assert!(off.text.contains(key));
    }

    #[test]
    fn huge_texts_are_cut_on_a_character_boundary() {
        let m = Message::human("日".repeat(MAX_TURN_TEXT_BYTES));
        let t = storable(&m, "now", &Redactor::default()).unwrap();
        assert!(t.text.len() <= MAX_TURN_TEXT_BYTES);
        assert!(t.text.chars().all(|c| c == '日'));
    }
}
