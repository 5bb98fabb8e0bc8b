//! First-turn recall injection with a frozen snapshot (spec §2.2–2.4).
//!
//! Before each model call the host asks [`RecallInjector::prepare_turn`]:
//!
//! - **no dated reminder in the thread yet** (a first turn, or every earlier
//!   attempt was skipped): recall once for the caller, with the latest real
//!   user input as the query, under the host's deadline, and put a date
//!   reminder plus (when memory is non-empty) a hidden user-role
//!   `<memory>` message in front of the user's message ([`IdSwap`]);
//! - **same date as the last reminder**: nothing. Memory is frozen for the
//!   rest of the thread, never fetched again;
//! - **the date changed**: a date-only reminder, no recall.
//!
//! A recall that misses the deadline, or fails in a way the backend's read
//! policy did not soften, injects nothing that turn (date included), so the
//! next turn retries. The host contract does the same after a timeout; on a
//! raised error it injects the date and freezes an empty memory instead,
//! which would leave a `raise` read policy without effect — memgate retries.
//!
//! Recall runs as its own task: the deadline holds even when a backend's
//! future is slow to yield, and a missed deadline aborts the task.

use crate::clock::{Clock, SystemClock};
use crate::reminder::{injection_target, last_reminder_date, IdSwap};
use crate::settings::HostSettings;
use memgate_core::budget::prefix_chars;
use memgate_core::{Caller, MemoryBackend, MemoryError, Message, Recall, RecallRequest};
use std::sync::Arc;
use std::time::Duration;

/// Most characters of the user's input sent as the recall query (the
/// host's cap on the query it derives from the latest user input).
pub const MAX_QUERY_CHARS: usize = 1000;

/// What a turn's preparation did.
#[derive(Debug)]
pub enum InjectionOutcome {
    /// First injection of the thread: a date reminder, with or without memory.
    Injected {
        /// The `reminder_date` injected.
        date: String,
        memory: MemoryStatus,
    },
    /// The date changed since the last reminder: a date-only reminder.
    DateUpdated { date: String },
    /// Memory is frozen for this thread and the date is current: nothing done.
    Frozen,
    /// No human message to attach to: nothing done.
    NoTarget,
    /// Recall missed its deadline or failed: nothing injected, not even the
    /// date, so the next turn tries again.
    Skipped(SkipReason),
}

/// The memory part of a first injection.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MemoryStatus {
    /// A `<memory>` message was injected; `chars` counts the recalled text
    /// (without the `<memory>` framing), `items` what the backend listed.
    Recalled { chars: usize, items: usize },
    /// The backend had nothing for this caller.
    Nothing,
    /// `enabled` or `injection_enabled` is off: recall was not called.
    Disabled,
}

/// Why a first injection was skipped.
#[derive(Debug)]
pub enum SkipReason {
    /// Recall took longer than the host's deadline.
    Timeout(Duration),
    /// Recall failed and the backend's read policy let the error through.
    Failed(MemoryError),
}

impl InjectionOutcome {
    /// The recall result of this turn, when the turn asked for one.
    pub fn memory(&self) -> Option<MemoryStatus> {
        match self {
            Self::Injected { memory, .. } => Some(*memory),
            _ => None,
        }
    }
}

/// Injects first-turn memory and date reminders into a host transcript.
#[derive(Clone)]
pub struct RecallInjector {
    backend: Arc<dyn MemoryBackend>,
    settings: HostSettings,
    clock: Arc<dyn Clock>,
}

impl RecallInjector {
    pub fn new(backend: Arc<dyn MemoryBackend>, settings: HostSettings) -> Self {
        Self {
            backend,
            settings,
            clock: Arc::new(SystemClock),
        }
    }

    /// Uses `clock` for the reminder date (tests, hosts with their own date).
    pub fn with_clock(mut self, clock: Arc<dyn Clock>) -> Self {
        self.clock = clock;
        self
    }

    pub fn settings(&self) -> &HostSettings {
        &self.settings
    }

    /// Prepares the transcript for this turn's model call, in place, and
    /// reports what it did. `caller` is the identity the host resolved.
    pub async fn prepare_turn(
        &self,
        caller: &Caller,
        transcript: &mut Vec<Message>,
    ) -> InjectionOutcome {
        let (outcome, swap) = self.plan_turn(caller, transcript).await;
        if let Some(swap) = swap {
            swap.apply(transcript);
        }
        outcome
    }

    /// Like [`Self::prepare_turn`], but leaves the transcript alone and
    /// returns the swap, for hosts that upsert messages by id.
    pub async fn plan_turn(
        &self,
        caller: &Caller,
        transcript: &[Message],
    ) -> (InjectionOutcome, Option<IdSwap>) {
        let today = self.clock.today().reminder_date();
        let last = last_reminder_date(transcript);
        if last.as_deref() == Some(today.as_str()) {
            return (InjectionOutcome::Frozen, None);
        }
        let Some(index) = injection_target(transcript) else {
            return (InjectionOutcome::NoTarget, None);
        };
        if last.is_some() {
            let swap = IdSwap::build(transcript, index, &today, None);
            return (InjectionOutcome::DateUpdated { date: today }, Some(swap));
        }
        let (memory, text) = if self.settings.recalls() {
            let query = recall_query(&transcript[index]);
            match self.recall(caller, query).await {
                Ok(recall) if recall.is_empty() => (MemoryStatus::Nothing, None),
                Ok(recall) => (
                    MemoryStatus::Recalled {
                        chars: recall.text.chars().count(),
                        items: recall.items.len(),
                    },
                    Some(recall.text),
                ),
                Err(reason) => return (InjectionOutcome::Skipped(reason), None),
            }
        } else {
            (MemoryStatus::Disabled, None)
        };
        let swap = IdSwap::build(transcript, index, &today, text.as_deref());
        (
            InjectionOutcome::Injected {
                date: today,
                memory,
            },
            Some(swap),
        )
    }

    /// One recall under the deadline. The host recalls with the user and
    /// agent only: it does not pass the thread (spec §2.1).
    async fn recall(&self, caller: &Caller, query: Option<String>) -> Result<Recall, SkipReason> {
        let request = RecallRequest {
            caller: Caller {
                thread: None,
                ..caller.clone()
            },
            query,
        };
        let backend = Arc::clone(&self.backend);
        let deadline = self.settings.recall_deadline;
        let task = tokio::spawn(async move { backend.recall(&request).await });
        let abort = task.abort_handle();
        match tokio::time::timeout(deadline, task).await {
            Ok(Ok(Ok(recall))) => Ok(recall),
            Ok(Ok(Err(err))) => {
                tracing::warn!(error = %err, code = err.code(), "first-turn recall failed; no memory this turn, retrying next turn");
                Err(SkipReason::Failed(err))
            }
            Ok(Err(join)) => {
                tracing::warn!(error = %join, "first-turn recall task ended abnormally; retrying next turn");
                Err(SkipReason::Failed(MemoryError::backend(
                    "recall task ended abnormally",
                )))
            }
            Err(_) => {
                abort.abort();
                tracing::warn!(
                    deadline_ms = deadline.as_millis() as u64,
                    "first-turn recall missed the host deadline; no memory this turn, retrying next turn"
                );
                Err(SkipReason::Timeout(deadline))
            }
        }
    }
}

/// The latest real user input as a recall query, at most
/// [`MAX_QUERY_CHARS`] characters; blank input gives no query.
fn recall_query(target: &Message) -> Option<String> {
    let text = target.text();
    let trimmed = text.trim();
    (!trimmed.is_empty()).then(|| prefix_chars(trimmed, MAX_QUERY_CHARS).to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn query_is_the_trimmed_user_text_capped_in_characters() {
        assert_eq!(
            recall_query(&Message::human("  hi  ")).as_deref(),
            Some("hi")
        );
        assert_eq!(recall_query(&Message::human(" \n ")), None);
        let long = "é".repeat(1500);
        let q = recall_query(&Message::human(long)).unwrap();
        assert_eq!(q.chars().count(), MAX_QUERY_CHARS);
    }
}
