//! In-flight work and its bounded drain: the one tracker the assembly, the
//! local store and the Python extension share (tokio's sync and time
//! primitives only; no runtime is started here).
//!
//! Every operation through the assembly holds a [`Ticket`] while it runs
//! (background captures take theirs before they are spawned, so a shutdown
//! that starts right after the spawn still waits for them). [`WorkTracker::drain`]
//! closes the door to new work, waits for the running tickets up to a budget
//! and reports exactly how many were still running when the budget ran out,
//! so nobody logs "all work drained" when it was not. [`WorkTracker::wait_quiet`]
//! lets background work (distillation) wait for a pause in the requests.

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::Notify;

/// Counts running operations and refuses new ones once draining starts.
#[derive(Debug)]
pub struct WorkTracker {
    closed: AtomicBool,
    running: AtomicUsize,
    idle: Notify,
    /// What `last_end` counts from.
    born: Instant,
    /// When the last operation ended, in microseconds since `born`.
    last_end: AtomicU64,
}

impl Default for WorkTracker {
    fn default() -> Self {
        Self {
            closed: AtomicBool::new(false),
            running: AtomicUsize::new(0),
            idle: Notify::new(),
            born: Instant::now(),
            last_end: AtomicU64::new(0),
        }
    }
}

/// A running operation; dropping it (also by cancellation) ends it.
#[derive(Debug)]
pub struct Ticket {
    tracker: Arc<WorkTracker>,
}

impl Drop for Ticket {
    fn drop(&mut self) {
        let now = self.tracker.born.elapsed().as_micros() as u64;
        self.tracker.last_end.fetch_max(now, Ordering::AcqRel);
        if self.tracker.running.fetch_sub(1, Ordering::AcqRel) == 1 {
            self.tracker.idle.notify_waiters();
        }
    }
}

/// What a drain achieved within its budget.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DrainReport {
    /// Operations still running when the budget ran out (0: all drained).
    pub abandoned: usize,
    /// True when the backend released its resources within the budget too.
    pub backend_drained: bool,
}

impl DrainReport {
    pub fn drained(&self) -> bool {
        self.abandoned == 0 && self.backend_drained
    }

    /// One line for logs and the service's last words.
    pub fn describe(&self) -> String {
        match (self.abandoned, self.backend_drained) {
            (0, true) => "all work drained".to_owned(),
            (0, false) => "the backend did not finish its own work within the budget".to_owned(),
            (n, _) => format!(
                "shutdown budget ran out with {n} operation{} still running (not drained)",
                if n == 1 { "" } else { "s" }
            ),
        }
    }
}

impl WorkTracker {
    pub fn new() -> Arc<Self> {
        Arc::new(Self::default())
    }

    /// A ticket for one operation, or `None` once draining has started.
    pub fn admit(self: &Arc<Self>) -> Option<Ticket> {
        // Count first, then check: a drain that closes in between sees this
        // ticket and waits for it, or this call sees the door closed.
        self.running.fetch_add(1, Ordering::AcqRel);
        let ticket = Ticket {
            tracker: Arc::clone(self),
        };
        if self.closed.load(Ordering::Acquire) {
            drop(ticket);
            return None;
        }
        Some(ticket)
    }

    pub fn running(&self) -> usize {
        self.running.load(Ordering::Acquire)
    }

    pub fn is_closed(&self) -> bool {
        self.closed.load(Ordering::Acquire)
    }

    /// Waits until nothing runs or `deadline` passes; the number still running.
    pub async fn wait_idle(&self, deadline: Instant) -> usize {
        loop {
            let idle = self.idle.notified();
            let running = self.running();
            if running == 0 {
                return 0;
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() || tokio::time::timeout(left, idle).await.is_err() {
                return self.running();
            }
        }
    }

    /// How long nothing has run (since the last operation ended, or since
    /// the tracker was made); `None` while an operation runs.
    fn quiet_since(&self) -> Option<Duration> {
        if self.running() > 0 {
            return None;
        }
        let last_end = Duration::from_micros(self.last_end.load(Ordering::Acquire));
        Some(self.born.elapsed().saturating_sub(last_end))
    }

    /// Waits until no operation has run for `quiet`, or until `at_most` has
    /// passed: background work yields to the operations being served, and
    /// under steady load still goes on, one step per `at_most`. True when
    /// the quiet was found. It looks again every `quiet` rather than being
    /// woken as each operation ends, so the operations' own path never
    /// wakes the waiting thread.
    pub async fn wait_quiet(&self, quiet: Duration, at_most: Duration) -> bool {
        let deadline = Instant::now() + at_most;
        loop {
            let quiet_since = self.quiet_since();
            if quiet_since.is_some_and(|since| since >= quiet) {
                return true;
            }
            let now = Instant::now();
            if now >= deadline {
                return false;
            }
            let nap = quiet - quiet_since.unwrap_or_default();
            tokio::time::sleep_until((now + nap).min(deadline).into()).await;
        }
    }

    /// Closes the door to new work and waits up to `budget` for running work.
    /// Returns the number of operations still running at the deadline.
    pub async fn close_and_wait(&self, budget: Duration) -> usize {
        self.closed.store(true, Ordering::Release);
        self.wait_idle(Instant::now() + budget).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn drain_waits_for_running_work_and_refuses_new_work() {
        let tracker = WorkTracker::new();
        let ticket = tracker.admit().unwrap();
        let t2 = Arc::clone(&tracker);
        let release = tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(50)).await;
            drop(ticket);
            t2.running()
        });
        assert_eq!(tracker.close_and_wait(Duration::from_secs(5)).await, 0);
        assert_eq!(release.await.unwrap(), 0);
        assert!(tracker.admit().is_none(), "closed trackers admit nothing");
        assert_eq!(tracker.running(), 0);
    }

    #[tokio::test]
    async fn quiet_is_found_a_pause_after_the_last_operation_ends() {
        let quiet = Duration::from_millis(40);
        let tracker = WorkTracker::new();
        // Nothing has run for `quiet` since the tracker was made: found
        // without waiting at all.
        tokio::time::sleep(quiet).await;
        assert!(tracker.wait_quiet(quiet, Duration::ZERO).await);

        let ticket = tracker.admit().unwrap();
        let release = tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(60)).await;
            drop(ticket);
            Instant::now()
        });
        assert!(tracker.wait_quiet(quiet, Duration::from_secs(5)).await);
        let ended = release.await.unwrap();
        assert!(
            ended.elapsed() >= quiet,
            "found quiet {:?} after the operation ended",
            ended.elapsed()
        );
    }

    #[tokio::test]
    async fn waiting_for_quiet_gives_up_after_at_most_under_steady_work() {
        let tracker = WorkTracker::new();
        let _running = tracker.admit().unwrap();
        let started = Instant::now();
        let at_most = Duration::from_millis(80);
        assert!(!tracker.wait_quiet(Duration::from_millis(10), at_most).await);
        assert!(started.elapsed() >= at_most);
        assert!(started.elapsed() < Duration::from_secs(5));
    }

    #[tokio::test]
    async fn drain_reports_what_is_still_running_at_the_deadline() {
        let tracker = WorkTracker::new();
        let _stuck = tracker.admit().unwrap();
        let _stuck2 = tracker.admit().unwrap();
        let started = Instant::now();
        let left = tracker.close_and_wait(Duration::from_millis(100)).await;
        assert_eq!(left, 2);
        assert!(started.elapsed() < Duration::from_secs(5));
        let report = DrainReport {
            abandoned: left,
            backend_drained: true,
        };
        assert!(!report.drained());
        assert!(report.describe().contains("2 operations still running"));
    }
}
