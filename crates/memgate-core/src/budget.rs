//! Character and UTF-8 byte budgets that never cut through a character.
//!
//! Injection limits (`max_injection_chars`) count Unicode scalar values, as
//! the host contract does; wire limits (`max_bytes`, 8192-byte texts) count
//! UTF-8 bytes. Both cuts land on a character boundary.

/// Number of Unicode scalar values in `s` (what Python's `len` counts).
pub fn char_len(s: &str) -> usize {
    s.chars().count()
}

/// The longest prefix of `s` with at most `max_chars` characters.
pub fn prefix_chars(s: &str, max_chars: usize) -> &str {
    match s.char_indices().nth(max_chars) {
        Some((idx, _)) => &s[..idx],
        None => s,
    }
}

/// The longest prefix of `s` that fits in `max_bytes` UTF-8 bytes without
/// splitting a character.
pub fn prefix_bytes(s: &str, max_bytes: usize) -> &str {
    if s.len() <= max_bytes {
        return s;
    }
    let mut end = max_bytes;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    &s[..end]
}

/// A running character budget for assembling an injection block line by line.
#[derive(Clone, Debug)]
pub struct CharBudget {
    max_chars: usize,
    used: usize,
}

impl CharBudget {
    pub fn new(max_chars: usize) -> Self {
        Self { max_chars, used: 0 }
    }

    pub fn remaining(&self) -> usize {
        self.max_chars - self.used
    }

    pub fn used(&self) -> usize {
        self.used
    }

    /// Takes `chars` characters if they fit; returns false (taking nothing)
    /// otherwise.
    pub fn try_take(&mut self, chars: usize) -> bool {
        if chars <= self.remaining() {
            self.used += chars;
            true
        } else {
            false
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn char_prefix_counts_scalar_values() {
        assert_eq!(prefix_chars("héllo", 2), "hé");
        assert_eq!(prefix_chars("日本語", 5), "日本語");
        assert_eq!(prefix_chars("", 3), "");
        assert_eq!(char_len("日本語"), 3);
    }

    #[test]
    fn byte_prefix_never_splits_a_character() {
        // "日" is 3 bytes: a 4-byte budget keeps one character, not one and a third.
        assert_eq!(prefix_bytes("日本", 4), "日");
        assert_eq!(prefix_bytes("日本", 6), "日本");
        assert_eq!(prefix_bytes("a😀", 4), "a");
        for n in 0..12 {
            let cut = prefix_bytes("ab😀é日x", n);
            assert!(cut.len() <= n);
            assert!("ab😀é日x".starts_with(cut));
        }
    }

    #[test]
    fn char_budget_refuses_what_does_not_fit() {
        let mut b = CharBudget::new(10);
        assert!(b.try_take(6));
        assert!(!b.try_take(5));
        assert_eq!(b.remaining(), 4);
        assert!(b.try_take(4));
        assert_eq!(b.used(), 10);
    }
}
