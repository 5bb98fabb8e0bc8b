//! One lock per session id, so captures of one conversation never overwrite
//! each other's cursor, while different conversations run in parallel.
//!
//! A lock exists only while someone holds or waits for it: the registry
//! keeps weak references and the last guard to go removes the entry, so a
//! long-running process does not accumulate one lock per thread it ever saw.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, Weak};
use tokio::sync::{Mutex as AsyncMutex, OwnedMutexGuard};

/// The session locks of one backend.
#[derive(Debug, Default)]
pub struct SessionLocks {
    locks: Mutex<HashMap<String, Weak<AsyncMutex<()>>>>,
}

/// Holds one session's lock; dropping it releases the lock and, if nobody
/// else wants it, forgets it.
pub struct SessionGuard {
    guard: Option<OwnedMutexGuard<()>>,
    lock: Option<Arc<AsyncMutex<()>>>,
    registry: Arc<SessionLocks>,
    session_id: String,
}

impl SessionLocks {
    /// Waits for the session's lock.
    pub async fn lock(self: &Arc<Self>, session_id: &str) -> SessionGuard {
        let (lock, mut guard) = self.entry(session_id);
        guard.guard = Some(lock.lock_owned().await);
        guard
    }

    /// The session's lock if nobody holds it now; `None` without waiting.
    pub fn try_lock(self: &Arc<Self>, session_id: &str) -> Option<SessionGuard> {
        let (lock, mut guard) = self.entry(session_id);
        guard.guard = Some(lock.try_lock_owned().ok()?);
        Some(guard)
    }

    /// The session's lock, registered, and a guard that does not hold it
    /// yet. The guard exists before the wait, so a caller that gives up
    /// while waiting (or finds the lock busy) still forgets the lock on the
    /// way out.
    fn entry(self: &Arc<Self>, session_id: &str) -> (Arc<AsyncMutex<()>>, SessionGuard) {
        let lock = {
            let mut map = self.locks.lock().unwrap_or_else(|p| p.into_inner());
            match map.get(session_id).and_then(Weak::upgrade) {
                Some(lock) => lock,
                None => {
                    let lock = Arc::new(AsyncMutex::new(()));
                    map.insert(session_id.to_owned(), Arc::downgrade(&lock));
                    lock
                }
            }
        };
        let guard = SessionGuard {
            guard: None,
            lock: Some(lock.clone()),
            registry: self.clone(),
            session_id: session_id.to_owned(),
        };
        (lock, guard)
    }

    /// Number of session ids with a live lock.
    pub fn len(&self) -> usize {
        self.locks
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .values()
            .filter(|w| w.strong_count() > 0)
            .count()
    }

    /// Number of registry entries, live or not (for tests).
    pub fn entries(&self) -> usize {
        self.locks.lock().unwrap_or_else(|p| p.into_inner()).len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl Drop for SessionGuard {
    fn drop(&mut self) {
        drop(self.guard.take());
        let Some(lock) = self.lock.take() else {
            return;
        };
        let mut map = self
            .registry
            .locks
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        // Others upgrade their weak reference only under this map lock, so a
        // count of one here means nobody else holds or awaits this lock.
        if Arc::strong_count(&lock) == 1 {
            if let Some(weak) = map.get(&self.session_id) {
                if weak.as_ptr() == Arc::as_ptr(&lock) {
                    map.remove(&self.session_id);
                }
            }
        }
        drop(lock);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[tokio::test]
    async fn locks_do_not_accumulate() {
        let locks = Arc::new(SessionLocks::default());
        {
            let _a = locks.lock("s1").await;
            let _b = locks.lock("s2").await;
            assert_eq!(locks.len(), 2);
        }
        assert_eq!(locks.entries(), 0);
        assert!(locks.is_empty());
    }

    #[tokio::test]
    async fn one_session_is_serialized_and_others_are_not() {
        let locks = Arc::new(SessionLocks::default());
        let held = locks.lock("s").await;
        let other = tokio::time::timeout(Duration::from_millis(200), locks.lock("t")).await;
        assert!(other.is_ok(), "another session does not wait");
        drop(other);
        let waiter = {
            let locks = locks.clone();
            tokio::spawn(async move {
                let _g = locks.lock("s").await;
            })
        };
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert!(!waiter.is_finished(), "same session waits");
        // The waiter keeps the entry alive after the holder goes.
        drop(held);
        waiter.await.unwrap();
        assert_eq!(locks.entries(), 0);
    }

    #[tokio::test]
    async fn try_lock_takes_only_a_free_session_and_forgets_a_busy_one() {
        let locks = Arc::new(SessionLocks::default());
        let held = locks.try_lock("s").expect("a free session is taken");
        assert!(locks.try_lock("s").is_none(), "a held session is busy");
        assert!(locks.try_lock("t").is_some(), "another session is free");
        drop(held);
        assert_eq!(locks.entries(), 0, "a busy attempt leaves no entry");
        let _again = locks.try_lock("s").expect("free again once released");
    }
}
