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
//!
//! [`crate::MemoryStore::capture`] and `capture_streamed` take the write lock
//! and hand the transaction to `store_turns`.

use crate::error::db_error;
use crate::first_turn::cache_excerpt;
use crate::index::IndexWrites;
use crate::scope::ScopeRow;
use memgate_core::capture::is_captureable;
use memgate_core::{CaptureReport, KeepHiddenHook, MemoryError, Message, Redactor, Result};
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

/// One item of a streamed capture ([`crate::MemoryStore::capture_streamed`]): the
/// contract's, so a surface streams through `MemoryBackend::begin_capture`.
pub use memgate_core::intake::Streamed;

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

/// What a capture keeps of a transcript and how: hidden messages only when
/// the host's keep-hook says so, and every text redacted.
#[derive(Clone, Copy)]
pub(crate) struct Intake<'a> {
    pub keep: Option<&'a KeepHiddenHook>,
    pub redactor: &'a Redactor,
}

impl<'a> Intake<'a> {
    /// The storable turns of `messages`, in order; `seen` counts messages.
    pub fn turns<M: Borrow<Message>>(
        self,
        messages: impl Iterator<Item = Result<M>> + 'a,
        captured_at: &'a str,
        seen: &'a Cell<usize>,
    ) -> impl Iterator<Item = Result<NewTurn>> + 'a {
        let Intake { keep, redactor } = self;
        messages.filter_map(move |message| {
            let message = match message {
                Ok(m) => m,
                Err(e) => return Some(Err(e)),
            };
            let message = message.borrow();
            let index = seen.get();
            seen.set(index + 1);
            is_captureable(message, keep)
                .then(|| storable(message, index, captured_at, redactor))
                .flatten()
                .map(Ok)
        })
    }
}

/// A streamed transcript's messages, ending at [`Streamed::End`] (see
/// [`Feed`]).
pub(crate) fn feed(items: Receiver<Streamed>) -> impl Iterator<Item = Result<Message>> {
    Feed {
        items,
        batch: Vec::new().into_iter(),
        done: false,
    }
}

/// Stores `turns` as the next turns of `thread` in `key`'s scope (made on
/// first write), counting what was new and what was already known in
/// `report`, and listing the new turns that were cut; an `Err` turn is returned (and rolls the transaction back).
pub(crate) fn store_turns(
    tx: &Connection,
    index: &mut IndexWrites,
    key: &ScopeKey,
    thread: &str,
    turns: impl Iterator<Item = Result<NewTurn>>,
    report: &mut CaptureReport,
) -> Result<()> {
    let scope = key.ensure(tx)?;
    let mut seq = next_seq(tx, scope, thread)?;
    let mut names = SpeakerNames::default();
    for turn in turns {
        let turn = turn?;
        if insert_turn(tx, index, &mut names, scope, thread, seq, &turn)? {
            seq += 1;
            report.stored += 1;
            report.cut.extend(turn.cut);
        } else {
            report.already_known += 1;
        }
    }
    Ok(())
}
