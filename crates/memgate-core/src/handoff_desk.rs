//! A handoff desk: drafts and prepared handoffs held in memory for a
//! bounded lifetime, bound to the user who prepared them.
//!
//! Held, not stored: a handoff is temporary by definition and never memory
//! by itself, so it touches no store until its owner asks for a commit.
//! The local store keeps its handoffs here, and the PowerContext backend
//! keeps its client-side drafts here too, with the server's own prepared
//! handoff as the attachment (`A`). An expired handoff is gone; another
//! user's is not found, and both are decided here before any store or
//! server is asked. Another thread or agent of the same user may continue
//! it: that is what a handoff is for.

use crate::time::format_unix_millis;
use crate::{
    Acknowledgement, Caller, Citation, Continuation, Handoff, HandoffContent, HandoffStage,
    MemoryError, Result,
};
use std::collections::hash_map::RandomState;
use std::collections::HashMap;
use std::hash::BuildHasher;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

pub use crate::handoff::DEFAULT_HANDOFF_LIFETIME;
/// The most open handoffs one user may hold, so no caller can grow the
/// desk without bound.
pub const MAX_HANDOFFS_PER_USER: usize = 64;

struct Held<A> {
    owner: String,
    handoff: Handoff,
    expires: Instant,
    /// What the backend keeps beside the handoff (PowerContext: the
    /// server's prepared handoff, sent back verbatim on each later step).
    attached: Option<A>,
}

/// Handoffs in flight, by id, each with an optional attachment `A`.
pub struct HandoffDesk<A = ()> {
    lifetime: Duration,
    held: Mutex<HashMap<String, Held<A>>>,
    salt: u64,
    issued: AtomicU64,
}

impl<A> std::fmt::Debug for HandoffDesk<A> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HandoffDesk")
            .field("lifetime", &self.lifetime)
            .finish_non_exhaustive()
    }
}

impl<A: Clone> HandoffDesk<A> {
    pub fn new(lifetime: Duration) -> Self {
        Self {
            lifetime,
            held: Mutex::new(HashMap::new()),
            salt: RandomState::new().hash_one(SystemTime::now()),
            issued: AtomicU64::new(0),
        }
    }

    /// An id no caller can guess from another's.
    fn next_id(&self) -> String {
        let n = self.issued.fetch_add(1, Ordering::Relaxed);
        let mixed = RandomState::new().hash_one((self.salt, n));
        format!("hof_{mixed:016x}{n:x}")
    }

    fn expires_at(&self) -> (Instant, String) {
        let wall = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap_or_default()
            .saturating_add(self.lifetime);
        let millis = i64::try_from(wall.as_millis()).unwrap_or(i64::MAX);
        (Instant::now() + self.lifetime, format_unix_millis(millis))
    }

    /// Runs `f` on the caller's own live handoff `id`; expired ones are
    /// dropped first, and another user's is answered exactly like a
    /// missing one.
    fn with_own<T>(
        &self,
        caller: &Caller,
        id: &str,
        f: impl FnOnce(&mut Handoff) -> Result<T>,
    ) -> Result<T> {
        self.with_own_attached(caller, id, |h, _| f(h))
    }

    /// [`Self::with_own`], with the handoff's attachment too.
    fn with_own_attached<T>(
        &self,
        caller: &Caller,
        id: &str,
        f: impl FnOnce(&mut Handoff, &mut Option<A>) -> Result<T>,
    ) -> Result<T> {
        let mut held = self.held.lock().unwrap_or_else(|p| p.into_inner());
        let now = Instant::now();
        held.retain(|_, h| h.expires > now);
        match held.get_mut(id) {
            Some(h) if h.owner == caller.user.as_str() => f(&mut h.handoff, &mut h.attached),
            _ => Err(MemoryError::NotFound(format!("handoff {id}"))),
        }
    }

    /// The caller's live handoff `id` with its attachment.
    pub fn get_attached(&self, caller: &Caller, id: &str) -> Result<(Handoff, Option<A>)> {
        self.with_own_attached(caller, id, |h, a| Ok((h.clone(), a.clone())))
    }

    /// Finalizes the caller's draft `id` and attaches `attachment` (what
    /// the backend's own finalize answered).
    pub fn finalize_attached(&self, caller: &Caller, id: &str, attachment: A) -> Result<Handoff> {
        self.with_own_attached(caller, id, |h, a| {
            h.finalize()?;
            *a = Some(attachment);
            Ok(h.clone())
        })
    }

    /// Holds a new draft of `content` (already redacted) for the caller.
    pub fn prepare(&self, caller: &Caller, content: HandoffContent) -> Result<Handoff> {
        let mut held = self.held.lock().unwrap_or_else(|p| p.into_inner());
        let now = Instant::now();
        held.retain(|_, h| h.expires > now);
        let owner = caller.user.as_str();
        if held.values().filter(|h| h.owner == owner).count() >= MAX_HANDOFFS_PER_USER {
            return Err(MemoryError::Conflict(format!(
                "the caller already holds {MAX_HANDOFFS_PER_USER} open handoffs, the most kept; \
                 finalize, commit or let some expire first"
            )));
        }
        let (expires, expires_at) = self.expires_at();
        let handoff = Handoff {
            id: self.next_id(),
            stage: HandoffStage::Draft,
            revision: 1,
            content,
            from_thread: caller.thread.clone(),
            expires_at,
            acknowledgement: None,
            milestone: None,
        };
        held.insert(
            handoff.id.clone(),
            Held {
                owner: owner.to_owned(),
                handoff: handoff.clone(),
                expires,
                attached: None,
            },
        );
        Ok(handoff)
    }

    pub fn get(&self, caller: &Caller, id: &str) -> Result<Handoff> {
        self.with_own(caller, id, |h| Ok(h.clone()))
    }

    pub fn correct(&self, caller: &Caller, id: &str, content: HandoffContent) -> Result<Handoff> {
        self.with_own(caller, id, |h| {
            h.correct(content)?;
            Ok(h.clone())
        })
    }

    pub fn finalize(&self, caller: &Caller, id: &str) -> Result<Handoff> {
        self.with_own(caller, id, |h| {
            h.finalize()?;
            Ok(h.clone())
        })
    }

    pub fn continue_from(&self, caller: &Caller, id: &str) -> Result<Continuation> {
        self.with_own(caller, id, |h| h.continuation())
    }

    pub fn acknowledge(
        &self,
        caller: &Caller,
        id: &str,
        acknowledgement: &Acknowledgement,
    ) -> Result<Handoff> {
        self.with_own(caller, id, |h| {
            h.acknowledge(acknowledgement)?;
            Ok(h.clone())
        })
    }

    /// The content to commit, or the milestone already stored for it.
    pub fn to_commit(&self, caller: &Caller, id: &str) -> Result<Result<HandoffContent, Citation>> {
        self.with_own(caller, id, |h| h.to_commit())
    }

    /// Marks the handoff committed as `milestone` (if it is still held).
    pub fn committed(&self, caller: &Caller, id: &str, milestone: Citation) {
        let _ = self.with_own(caller, id, |h| {
            h.committed(milestone);
            Ok(())
        });
    }

    /// Drops every handoff `user` holds (the user's erasure).
    pub fn forget_user(&self, user: &str) {
        let mut held = self.held.lock().unwrap_or_else(|p| p.into_inner());
        held.retain(|_, h| h.owner != user);
    }
}
