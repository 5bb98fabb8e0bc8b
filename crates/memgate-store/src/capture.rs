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

use crate::error::db_error;
use crate::first_turn::cache_excerpt;
use crate::index::IndexWrites;
use crate::scope::ScopeRow;
use crate::store::MemoryStore;
use memgate_core::capture::is_captureable;
use memgate_core::time::now_rfc3339;
use memgate_core::{Caller, CaptureReport, CaptureRequest, Message};
use memgate_core::{MemoryError, Result};
use memgate_recall::salience::SpeakerNames;
use memgate_recall::scope::ScopeKey;
use memgate_recall::turns::{storable, NewTurn};
use rusqlite::{params, Connection, OptionalExtension};
use std::borrow::Borrow;
use std::cell::Cell;
use std::sync::mpsc::{Receiver, RecvError};

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

/// One item of a streamed capture ([`MemoryStore::capture_streamed`]).
#[derive(Debug)]
pub enum Streamed {
    /// The next messages of the transcript (a few at a time: one hand-off
    /// per message would cost more than the message).
    Messages(Vec<Message>),
    /// The transcript is complete: commit.
    End,
    /// The sender could not produce the transcript: store nothing.
    Failed(MemoryError),
}

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
