//! The recall block: one `- [category] text` line per memory, within
//! `max_injection_chars` characters (`deerflow-memory-contract` §5.13).
//!
//! - whitespace is collapsed with Python `str.split()` semantics;
//! - empty memories, and memories whose full Unicode case fold was already
//!   seen (`"ß"` and `"SS"` are the same), are skipped;
//! - a missing category reads `memory`;
//! - the first line that does not fit is cut with `…` when more than 16
//!   characters remain, and nothing after it is added.
//!
//! Lengths are Unicode scalar values (Python's `len`), never bytes. The block
//! has no header and no `<memory>` wrapper: the host adds the framing.

use crate::pystr::collapse_whitespace;
use crate::retrieval::RetrievedMemory;
use memgate_core::budget::prefix_chars;
use std::collections::HashSet;

/// Fewest characters worth a cut line.
const MIN_CUT_CHARS: usize = 16;

/// One line of the block and the memory it came from.
#[derive(Clone, Debug, PartialEq)]
pub struct InjectedLine {
    /// Index into the retrieved memories.
    pub source: usize,
    pub category: String,
    /// The (possibly cut) memory text, without the `- [category] ` prefix.
    pub text: String,
}

/// The formatted block and what it contains.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Injection {
    pub text: String,
    pub lines: Vec<InjectedLine>,
}

/// Formats `memories` within `max_chars` characters.
pub fn format_injection(memories: &[RetrievedMemory], max_chars: usize) -> Injection {
    let mut out = String::new();
    let mut out_chars = 0usize;
    let mut lines = Vec::new();
    let mut seen = HashSet::new();
    for (source, memory) in memories.iter().enumerate() {
        let content = collapse_whitespace(&memory.text);
        if content.is_empty() || !seen.insert(caseless::default_case_fold_str(&content)) {
            continue;
        }
        let category = memory
            .category
            .as_deref()
            .filter(|c| !c.is_empty())
            .unwrap_or("memory");
        let prefix = format!("- [{category}] ");
        let line_chars = prefix.chars().count() + content.chars().count();
        let separator = usize::from(!lines.is_empty());
        if out_chars + separator + line_chars > max_chars {
            let remaining = max_chars as i64 - out_chars as i64 - separator as i64;
            if remaining > MIN_CUT_CHARS as i64 {
                let line = format!("{prefix}{content}");
                let mut cut = prefix_chars(&line, remaining as usize - 1).to_owned();
                cut.push('…');
                let text = cut.get(prefix.len()..).unwrap_or("…").to_owned();
                if separator == 1 {
                    out.push('\n');
                }
                out.push_str(&cut);
                lines.push(InjectedLine {
                    source,
                    category: category.to_owned(),
                    text,
                });
            }
            break;
        }
        if separator == 1 {
            out.push('\n');
        }
        out.push_str(&prefix);
        out.push_str(&content);
        out_chars += separator + line_chars;
        lines.push(InjectedLine {
            source,
            category: category.to_owned(),
            text: content,
        });
    }
    Injection { text: out, lines }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn memory(text: &str, category: Option<&str>) -> RetrievedMemory {
        RetrievedMemory {
            uri: Some(format!("viking://user/u/memories/{}", text.len())),
            level: Some(2),
            category: category.map(str::to_owned),
            score: Some(0.9),
            text: text.to_owned(),
        }
    }

    #[test]
    fn the_reference_line() {
        let out = format_injection(
            &[memory("Prefers concise answers.", Some("preferences"))],
            1000,
        );
        assert_eq!(out.text, "- [preferences] Prefers concise answers.");
        assert_eq!(out.lines[0].text, "Prefers concise answers.");
    }

    #[test]
    fn whitespace_case_and_empty_duplicates_are_skipped() {
        let out = format_injection(
            &[
                memory("  Likes\u{1c}  STRASSE\n", None),
                memory("likes straße", Some("")),
                memory(" \t\u{1f} ", None),
                memory("Other", Some("events")),
            ],
            1000,
        );
        assert_eq!(out.text, "- [memory] Likes STRASSE\n- [events] Other");
        assert_eq!(
            out.lines.iter().map(|l| l.source).collect::<Vec<_>>(),
            [0, 3]
        );
    }

    #[test]
    fn cut_adds_an_ellipsis_only_above_sixteen_characters() {
        let first = "x".repeat(240); // "- [memory] " (11) + 240 = 251 characters
        let max = 300;
        // 300 - 251 - 1 = 48 characters remain: the second line is cut.
        let out = format_injection(&[memory(&first, None), memory(&"y".repeat(100), None)], max);
        assert_eq!(out.text.chars().count(), max);
        assert!(out.text.ends_with('…'));
        assert_eq!(out.lines.len(), 2);
        assert_eq!(out.lines[1].text, format!("{}…", "y".repeat(36)));
        // Exactly 16 remain: no cut line, and nothing after it.
        let first = "x".repeat(272); // 283 characters, 300 - 283 - 1 = 16
        let out = format_injection(
            &[
                memory(&first, None),
                memory(&"y".repeat(100), None),
                memory("z", None),
            ],
            max,
        );
        assert_eq!(out.lines.len(), 1);
        assert!(!out.text.contains('…'));
        assert!(!out.text.contains('z'));
        // 17 remain: a 16-character cut line.
        let first = "x".repeat(271);
        let out = format_injection(&[memory(&first, None), memory(&"y".repeat(100), None)], max);
        assert_eq!(out.text.chars().count(), max);
        assert_eq!(out.text.lines().nth(1).unwrap().chars().count(), 17);
    }

    #[test]
    fn a_first_line_too_long_is_cut_and_lengths_are_characters() {
        let out = format_injection(&[memory(&"日".repeat(1000), Some("事实"))], 256);
        assert_eq!(out.text.chars().count(), 256);
        assert!(out.text.starts_with("- [事实] 日日"));
        assert!(out.text.ends_with("日…"));
        assert!(out.text.len() > 256, "bytes exceed characters here");
    }

    #[test]
    fn output_never_exceeds_the_budget() {
        for max in [256usize, 257, 300, 1000] {
            let memories: Vec<_> = (0..50)
                .map(|i| memory(&format!("memory number {i} {}", "é".repeat(i * 7)), None))
                .collect();
            let out = format_injection(&memories, max);
            assert!(out.text.chars().count() <= max, "{max}");
        }
    }
}
