//! Citations: how both stores name what they hold (`mem_<n>` for an explicit
//! memory, `turn_<n>` for a captured turn), and what a forget names.

use memgate_core::{Caller, ForgetTarget, MemoryError, Result};

/// The citation of memory `id`.
pub fn memory_citation(id: i64) -> String {
    format!("mem_{id}")
}

/// The row id behind a `mem_<id>` citation; anything else names nothing.
pub fn parse_memory_citation(id: &str) -> Option<i64> {
    let digits = id.strip_prefix("mem_")?;
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    digits.parse().ok()
}

/// The citation of captured turn `id`.
pub fn turn_citation(id: i64) -> String {
    format!("turn_{id}")
}

/// A distilled fact's text naming the turns it rests on (`… (from turn_3,
/// turn_4)`), so a reader can check it against what was said; unchanged
/// without sources.
pub fn cited_from(text: &str, turns: &[i64]) -> String {
    if turns.is_empty() {
        return text.to_owned();
    }
    let cited: Vec<String> = turns.iter().copied().map(turn_citation).collect();
    format!("{text} (from {})", cited.join(", "))
}

/// The citation of recall-index row `item` (turn `n`, memory `-n`).
pub fn item_citation(item: i64) -> String {
    if item > 0 {
        turn_citation(item)
    } else {
        memory_citation(-item)
    }
}

/// What a forget names, checked before anything is erased: the fact's row
/// for `Fact`, the caller's thread for `Thread`. Shared with the postgres
/// backend, so both refuse the same input the same way.
pub fn named_by(caller: &Caller, target: &ForgetTarget) -> Result<(Option<i64>, Option<String>)> {
    Ok(match target {
        ForgetTarget::Fact { id } => (
            Some(
                parse_memory_citation(id)
                    .ok_or_else(|| MemoryError::invalid("id", "must be `mem_<number>`"))?,
            ),
            None,
        ),
        ForgetTarget::Thread => (None, Some(caller.require_thread()?.to_owned())),
        ForgetTarget::Scope | ForgetTarget::User => (None, None),
    })
}
