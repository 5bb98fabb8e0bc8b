//! Handing a transcript to a capture while the surface is still reading it.
//!
//! A surface that holds a transcript in its own form (the Python extension:
//! LangChain objects, read under the GIL) pays for every message it
//! converts. A backend can often do with less, or start sooner: the local
//! store stores each batch while the next is read ([`Intake::Streamed`]);
//! OpenViking reads its cursor first, so the head the cursor already holds
//! is recognised or signed in place and only the rest converted
//! ([`Intake::AgainstCursor`]). [`MemoryBackend::begin_capture`] says which
//! way a capture wants its transcript; a backend without a fast path wants
//! it whole ([`Intake::Whole`], the default), which is a plain
//! [`MemoryBackend::capture`].
//!
//! Every way ends in a future the surface runs: wrapped by the assembly
//! like every other operation (gates, an admission ticket, the total
//! deadline, metrics, the drain), so a fast path is no side door.
//!
//! [`MemoryBackend::begin_capture`]: crate::MemoryBackend::begin_capture
//! [`MemoryBackend::capture`]: crate::MemoryBackend::capture

use crate::capture::{CaptureKind, CaptureReport, CaptureRequest, KnownHead};
use crate::identity::Caller;
use crate::message::Message;
use crate::signature::SequenceHasher;
use crate::{MemoryBackend, MemoryError, Result};
use std::cell::Cell;
use std::future::Future;
use std::pin::Pin;
use std::sync::mpsc::{Receiver, Sender};
use std::sync::Arc;

/// A capture under way, owned and ready to spawn or to block on.
pub type CaptureFuture = Pin<Box<dyn Future<Output = Result<CaptureReport>> + Send + 'static>>;

/// A capture read against a cursor, under way ([`CursorCapture::capture`]).
pub type CursorFuture = Pin<Box<dyn Future<Output = Result<CursorOutcome>> + Send + 'static>>;

/// Who captures and why, before a single message is read.
#[derive(Clone, Debug)]
pub struct CaptureStart {
    pub caller: Caller,
    pub kind: CaptureKind,
    /// The host's trace id, for logs only.
    pub trace_id: Option<String>,
}

impl CaptureStart {
    /// The whole capture request once the messages are read.
    pub fn with_messages(self, messages: Vec<Message>) -> CaptureRequest {
        CaptureRequest {
            caller: self.caller,
            messages,
            kind: self.kind,
            trace_id: self.trace_id,
        }
    }
}

/// How a begun capture wants its transcript
/// ([`MemoryBackend::begin_capture`]).
pub enum Intake {
    /// Read every message, then [`WholeCapture::capture`].
    Whole(WholeCapture),
    /// Hand the messages over as they are read ([`StreamedCapture`]): the
    /// capture runs meanwhile.
    Streamed(StreamedCapture),
    /// Read against what the backend's cursor already holds
    /// ([`CursorCapture`]): the head it holds as a [`KnownHead`], only the
    /// messages after it converted.
    AgainstCursor(Box<dyn CursorCapture>),
}

impl Intake {
    /// The whole capture of `backend`: read every message, then
    /// [`MemoryBackend::capture`] (what a backend without a fast path
    /// answers, and what one with a fast path falls back to).
    pub fn whole<B: MemoryBackend + ?Sized>(backend: Arc<B>, start: CaptureStart) -> Self {
        Self::Whole(WholeCapture::of(backend, start))
    }
}

/// A capture that takes its transcript read whole.
pub struct WholeCapture {
    run: Box<dyn FnOnce(Vec<Message>) -> CaptureFuture + Send>,
}

impl WholeCapture {
    /// `run` captures the messages read (the start they belong to is the
    /// closure's).
    pub fn new(run: impl FnOnce(Vec<Message>) -> CaptureFuture + Send + 'static) -> Self {
        Self { run: Box::new(run) }
    }

    /// [`MemoryBackend::capture`] of `backend`, once the messages are read.
    pub fn of<B: MemoryBackend + ?Sized>(backend: Arc<B>, start: CaptureStart) -> Self {
        Self::new(move |messages| {
            let request = start.with_messages(messages);
            Box::pin(async move { backend.capture(&request).await })
        })
    }

    /// Captures the transcript, read whole.
    pub fn capture(self, messages: Vec<Message>) -> CaptureFuture {
        (self.run)(messages)
    }
}

/// One item of a streamed transcript.
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

/// A capture that takes its transcript as it is read: spawn
/// [`capture`](Self::into_parts) first, then send the messages down the
/// [`TranscriptFeed`]. A transcript that is not ended ([`TranscriptFeed::end`])
/// stores nothing.
pub struct StreamedCapture {
    feed: TranscriptFeed,
    capture: CaptureFuture,
}

impl StreamedCapture {
    /// `run` captures what arrives on the receiver it is given.
    pub fn new(run: impl FnOnce(Receiver<Streamed>) -> CaptureFuture) -> Self {
        let (sender, items) = std::sync::mpsc::channel();
        Self {
            feed: TranscriptFeed { sender },
            capture: run(items),
        }
    }

    /// The same streamed capture with its future wrapped (the assembly's
    /// gate, ticket and deadline around the backend's).
    pub fn map(self, wrap: impl FnOnce(CaptureFuture) -> CaptureFuture) -> Self {
        Self {
            feed: self.feed,
            capture: wrap(self.capture),
        }
    }

    /// Where the messages go, and the capture to start before sending them.
    pub fn into_parts(self) -> (TranscriptFeed, CaptureFuture) {
        (self.feed, self.capture)
    }
}

/// The sending end of a streamed transcript. A capture that refused early
/// has hung up; what is sent after that is dropped, and the capture's own
/// answer is the outcome.
pub struct TranscriptFeed {
    sender: Sender<Streamed>,
}

impl TranscriptFeed {
    /// The next messages, in transcript order.
    pub fn send(&self, messages: Vec<Message>) {
        let _ = self.sender.send(Streamed::Messages(messages));
    }

    /// The end of the transcript: `Ok` commits what was sent, an error
    /// stores nothing.
    pub fn end(self, read: Result<()>) {
        let _ = self.sender.send(match read {
            Ok(()) => Streamed::End,
            Err(e) => Streamed::Failed(e),
        });
    }
}

/// A capture begun against a backend's cursor: the session it writes is
/// the caller's alone from the cursor's read to the capture's end, so the
/// head read against the cursor cannot go stale. A surface reads the
/// transcript's head against [`known_prefix`](Self::known_prefix) (or
/// recognises it by [`prefix_head`](Self::prefix_head)), then
/// [`capture`](Self::capture)s the head and the messages after it.
pub trait CursorCapture: Send {
    /// The prefix the cursor holds: how many captured messages, and their
    /// sequence digest.
    fn known_prefix(&self) -> Option<(usize, &str)>;

    /// The fingerprint the cursor recorded for its prefix and the prefix's
    /// running digest, when it recorded one: a head with the same
    /// fingerprint is handed over recognised ([`KnownHead::recognised`]),
    /// without signing it.
    fn prefix_head(&self) -> Option<(&str, SequenceHasher)>;

    /// The capture filter for one message (hidden messages go to the
    /// host's keep-hook), for a surface building the head.
    fn keeps(&self, message: &Message) -> bool;

    /// Captures `head` followed by `rest` (every message after the head,
    /// not yet filtered); the messages of `rest` are given up, so their
    /// strings can move into what is sent.
    fn capture(self: Box<Self>, head: KnownHead, rest: Vec<Message>) -> CursorFuture;
}

/// How a capture read against a cursor ended.
pub enum CursorOutcome {
    Captured(CaptureReport),
    /// Nothing was sent: a message of the head must be sent after all (the
    /// head did not match the cursor, or an interrupted capture moved it).
    /// Read the transcript whole and capture it with this.
    NeedsWhole(WholeCapture),
}

thread_local! {
    /// Set while a capture is polled by its caller's own thread
    /// ([`on_callers_thread`]).
    static POLLED_BY_CALLER: Cell<bool> = const { Cell::new(false) };
}

/// Runs `capture` as polled by its caller's own thread, which waits for it
/// anyway and may block (a synchronous host call: `block_on` on the calling
/// thread, outside the runtime's workers). A backend may then do blocking
/// work there (a cursor save with its fsyncs) instead of crossing to a
/// blocking pool and back ([`polled_by_its_caller`]). A task spawned from
/// the capture runs elsewhere and does not see it.
pub async fn on_callers_thread<F: Future>(capture: F) -> F::Output {
    let mut capture = std::pin::pin!(capture);
    std::future::poll_fn(|cx| {
        let _marked = Marked::on();
        capture.as_mut().poll(cx)
    })
    .await
}

/// Whether the code running now is part of a capture polled by its caller's
/// own thread ([`on_callers_thread`]).
pub fn polled_by_its_caller() -> bool {
    POLLED_BY_CALLER.get()
}

/// The mark for one poll, undone when the poll ends (or unwinds).
struct Marked(bool);

impl Marked {
    fn on() -> Self {
        Self(POLLED_BY_CALLER.replace(true))
    }
}

impl Drop for Marked {
    fn drop(&mut self) {
        POLLED_BY_CALLER.set(self.0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn only_the_callers_own_polls_are_marked() {
        assert!(!polled_by_its_caller());
        let inside = on_callers_thread(async {
            let before = polled_by_its_caller();
            tokio::task::yield_now().await;
            (before, polled_by_its_caller())
        })
        .await;
        assert_eq!(inside, (true, true));
        assert!(!polled_by_its_caller(), "the mark ends with the poll");
        let elsewhere =
            on_callers_thread(async { std::thread::spawn(polled_by_its_caller).join().unwrap() })
                .await;
        assert!(!elsewhere, "another thread is not the caller's");
    }

    /// A streamed capture that counts what it is sent, and fails when the
    /// transcript ended with an error or was never ended.
    fn counting() -> StreamedCapture {
        StreamedCapture::new(|items| {
            Box::pin(async move {
                let mut stored = 0;
                loop {
                    match items.recv() {
                        Ok(Streamed::Messages(batch)) => stored += batch.len(),
                        Ok(Streamed::End) => break,
                        Ok(Streamed::Failed(e)) => return Err(e),
                        Err(_) => return Err(MemoryError::backend("hung up")),
                    }
                }
                Ok(CaptureReport {
                    stored,
                    ..CaptureReport::default()
                })
            })
        })
    }

    #[tokio::test]
    async fn a_feed_ends_with_its_outcome_and_one_never_ended_stores_nothing() {
        let (feed, capture) = counting().into_parts();
        feed.send(vec![Message::human("a"), Message::human("b")]);
        feed.send(vec![Message::human("c")]);
        feed.end(Ok(()));
        assert_eq!(capture.await.unwrap().stored, 3);

        let (feed, capture) = counting().into_parts();
        feed.send(vec![Message::human("a")]);
        feed.end(Err(MemoryError::invalid("messages", "could not be read")));
        assert!(capture.await.is_err());

        let (feed, capture) = counting().into_parts();
        feed.send(vec![Message::human("a")]);
        drop(feed);
        assert!(capture.await.is_err());
    }
}
