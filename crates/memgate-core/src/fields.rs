//! The rules of the free-text fields every surface takes (HTTP, CLI, MCP,
//! the Python package), in one place so each surface refuses the same
//! input with the same words: a memory's `text`, a memory `kind` (also as
//! a search filter). Ids follow [`crate::identity::id_defect`].
//!
//! Text may hold tabs and line breaks, never NUL or another control
//! character: they are invisible where memory is shown and cut strings in
//! C-based tools. A kind is a short label, so it holds no control
//! character at all.

use crate::{MemoryError, Result};

/// Upper bound of a memory kind, in characters (remember and the search
/// filter alike).
pub const MAX_KIND_CHARS: usize = 128;

/// The rule a memory's text breaks, if it breaks one: a control character
/// other than tab, line feed and carriage return.
pub fn text_defect(text: &str) -> Option<String> {
    text.chars()
        .find(|c| c.is_control() && !matches!(c, '\t' | '\n' | '\r'))
        .map(|c| {
            format!(
                "must not contain control characters other than tab and line breaks (found U+{:04X})",
                u32::from(c)
            )
        })
}

/// Checks a kind (already normalized): 1 to [`MAX_KIND_CHARS`] characters,
/// no control character. The error names `field` and the rule.
pub fn check_kind(field: &str, kind: &str) -> Result<()> {
    let chars = kind.chars().count();
    if chars == 0 {
        return Err(MemoryError::invalid(field, "must not be blank"));
    }
    if chars > MAX_KIND_CHARS {
        return Err(MemoryError::invalid(
            field,
            format!("must be at most {MAX_KIND_CHARS} characters (got {chars})"),
        ));
    }
    if let Some(c) = kind.chars().find(|c| c.is_control()) {
        return Err(MemoryError::invalid(
            field,
            format!(
                "must not contain control characters (found U+{:04X})",
                u32::from(c)
            ),
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_keeps_tabs_and_line_breaks_and_refuses_other_control_characters() {
        assert_eq!(text_defect("a\tb\nc\r\nd"), None);
        let why = text_defect("fa\u{0}ct").unwrap();
        assert!(why.contains("U+0000"), "{why}");
        assert!(text_defect("bell\u{7}").unwrap().contains("U+0007"));
        assert!(text_defect("del\u{7f}").is_some());
    }

    #[test]
    fn a_kind_is_a_short_label_without_control_characters() {
        assert!(check_kind("kind", "preference").is_ok());
        assert!(check_kind("kind", &"k".repeat(MAX_KIND_CHARS)).is_ok());
        let long = check_kind("kind", &"k".repeat(MAX_KIND_CHARS + 1)).unwrap_err();
        assert_eq!(
            long.to_string(),
            "invalid kind: must be at most 128 characters (got 129)"
        );
        let nul = check_kind("kind", "fa\u{0}ct").unwrap_err();
        assert_eq!(
            nul.to_string(),
            "invalid kind: must not contain control characters (found U+0000)"
        );
        assert!(check_kind("kind", "a\tb").is_err());
        assert_eq!(
            check_kind("kind", "").unwrap_err().to_string(),
            "invalid kind: must not be blank"
        );
    }
}
