//! Turns' lengths in the recall index, remembered across queries.
//!
//! Scoring a row with BM25 needs its length, which FTS5 reads from
//! `recall_index_docsize`: a b-tree lookup per row, the largest part of a
//! large scope's candidate query (a recall at 100k items walks up to 2,000
//! rows).
//! A turn's row never changes while it is in the index: turns are never
//! edited, and a turn id comes back only after its turn was removed, and
//! only once no turn above it remains (SQLite gives a new turn the largest
//! id plus one). So a length read once holds until such a removal.
//!
//! Every transaction that removes a turn whose id may come back adds one to
//! `index_removals.n` ([`crate::index::IndexWrites::apply`]); a retention
//! sweep, which takes the oldest turns, does not. A query reads
//! that count in its own snapshot and uses only the lengths remembered
//! under the same count ([`DocLengths::at`]); any two snapshots with the
//! same count agree on the length of every turn both hold. A write
//! transaction applies its index writes and the count last, just before
//! it commits, so no ranking sees a count or a length that may be rolled
//! back. Memories are revised in place (same rowid, new text) and are
//! few, so they are not remembered.

use std::cmp::Ordering;
use std::sync::atomic::{AtomicU16, Ordering as Atomic};
use std::sync::{Arc, Mutex, OnceLock};

/// Turn ids per chunk: chunks are allocated when first written, so memory
/// follows the ids actually scored (2 bytes each), not the file's size.
const CHUNK_BITS: u32 = 16;
const CHUNK: usize = 1 << CHUNK_BITS;
/// Turn ids below `CHUNKS × CHUNK` (67M) are remembered; higher ones are
/// read every time.
const CHUNKS: usize = 1024;

/// The lengths of one database's turns, shared by its connections.
pub struct DocLengths {
    current: Mutex<Arc<Known>>,
}

/// Lengths known under one removal count.
pub struct Known {
    removals: i64,
    /// `length + 1` per turn id; 0 is not known.
    chunks: Box<[OnceLock<Box<[AtomicU16]>>]>,
}

impl Default for DocLengths {
    fn default() -> Self {
        Self {
            current: Mutex::new(Arc::new(Known::new(i64::MIN))),
        }
    }
}

impl DocLengths {
    /// The lengths a query whose snapshot counts `removals` may use and
    /// add to; `None` when its snapshot is older than what is remembered.
    /// A newer count forgets everything remembered before it.
    pub fn at(&self, removals: i64) -> Option<Arc<Known>> {
        let mut current = self.current.lock().unwrap_or_else(|p| p.into_inner());
        match current.removals.cmp(&removals) {
            Ordering::Equal => Some(Arc::clone(&current)),
            Ordering::Less => {
                *current = Arc::new(Known::new(removals));
                Some(Arc::clone(&current))
            }
            Ordering::Greater => None,
        }
    }
}

impl Known {
    fn new(removals: i64) -> Self {
        Self {
            removals,
            chunks: (0..CHUNKS).map(|_| OnceLock::new()).collect(),
        }
    }

    fn slot(id: i64) -> Option<(usize, usize)> {
        let id = usize::try_from(id).ok().filter(|&id| id > 0)?;
        let chunk = id >> CHUNK_BITS;
        (chunk < CHUNKS).then_some((chunk, id & (CHUNK - 1)))
    }

    /// The remembered length of turn `id` (its index rowid).
    pub fn get(&self, id: i64) -> Option<i32> {
        let (chunk, at) = Self::slot(id)?;
        let stored = self.chunks[chunk].get()?[at].load(Atomic::Relaxed);
        (stored > 0).then(|| i32::from(stored) - 1)
    }

    /// Remembers the length of turn `id`, read in a snapshot with this
    /// removal count. Lengths past `u16::MAX - 1` tokens are not kept.
    pub fn put(&self, id: i64, length: i32) {
        let (Some((chunk, at)), Ok(stored)) = (Self::slot(id), u16::try_from(length + 1)) else {
            return;
        };
        let lengths =
            self.chunks[chunk].get_or_init(|| (0..CHUNK).map(|_| AtomicU16::new(0)).collect());
        lengths[at].store(stored, Atomic::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_length_is_kept_under_its_count_and_forgotten_when_a_turn_leaves() {
        let lengths = DocLengths::default();
        let known = lengths.at(3).unwrap();
        assert_eq!(known.get(70_000), None);
        known.put(70_000, 12);
        known.put(5, 0);
        assert_eq!(lengths.at(3).unwrap().get(70_000), Some(12));
        assert_eq!(lengths.at(3).unwrap().get(5), Some(0));
        // A snapshot older than what is remembered neither reads nor adds.
        assert!(lengths.at(2).is_none());
        // A turn left the index: nothing from before is used.
        assert_eq!(lengths.at(4).unwrap().get(70_000), None);
        assert!(lengths.at(3).is_none());
    }

    #[test]
    fn memories_and_lengths_out_of_range_are_not_kept() {
        let known = DocLengths::default().at(0).unwrap();
        known.put(-7, 3);
        known.put(1, i32::from(u16::MAX));
        known.put((CHUNKS * CHUNK) as i64, 3);
        assert_eq!(known.get(-7), None);
        assert_eq!(known.get(1), None);
        assert_eq!(known.get((CHUNKS * CHUNK) as i64), None);
        assert!(known.chunks.iter().all(|c| c.get().is_none()));
    }
}
