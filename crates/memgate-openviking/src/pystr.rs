//! Python string semantics the host contract depends on.
//!
//! The original backend is Python, and three of its visible behaviours come
//! straight from `str`: what `strip()` and `split()` treat as whitespace
//! (Unicode White_Space plus the ASCII separators `\x1c`–`\x1f`, which Rust's
//! `char::is_whitespace` leaves out), and how `repr()` quotes a string in an
//! error message.

/// Python's `str.isspace` for one character.
pub fn is_space(c: char) -> bool {
    c.is_whitespace() || ('\u{1c}'..='\u{1f}').contains(&c)
}

/// Python's `s.strip()`.
pub fn strip(s: &str) -> &str {
    s.trim_matches(is_space)
}

/// Python's `" ".join(s.split())`: runs of whitespace become one space and
/// the ends are trimmed.
pub fn collapse_whitespace(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for word in s.split(is_space).filter(|w| !w.is_empty()) {
        if !out.is_empty() {
            out.push(' ');
        }
        out.push_str(word);
    }
    out
}

/// Python's `repr(s)` for a string: single quotes unless the text holds a
/// single quote and no double quote; backslashes, the quote, and characters
/// Python does not print (controls, separators other than the space, format
/// characters, private use, noncharacters) escaped as `\n`, `\xNN`, `\uNNNN`
/// or `\UNNNNNNNN`. Unassigned code points are printed as they are (Python
/// would escape them; the table to know them is not worth carrying here).
pub fn repr(s: &str) -> String {
    let quote = if s.contains('\'') && !s.contains('"') {
        '"'
    } else {
        '\''
    };
    let mut out = String::with_capacity(s.len() + 2);
    out.push(quote);
    for c in s.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if c == quote => {
                out.push('\\');
                out.push(c);
            }
            c if !is_printable(c) => {
                let cp = c as u32;
                if cp < 0x100 {
                    out.push_str(&format!("\\x{cp:02x}"));
                } else if cp < 0x10000 {
                    out.push_str(&format!("\\u{cp:04x}"));
                } else {
                    out.push_str(&format!("\\U{cp:08x}"));
                }
            }
            c => out.push(c),
        }
    }
    out.push(quote);
    out
}

/// Python's `str.isprintable` for one character (see [`repr`] for the one
/// known gap: unassigned code points).
fn is_printable(c: char) -> bool {
    if c == ' ' {
        return true;
    }
    let cp = c as u32;
    let not_printable = c.is_control()
        || matches!(cp,
            // Zs other than the space, Zl, Zp
            0x00A0 | 0x1680 | 0x2000..=0x200A | 0x2028 | 0x2029 | 0x202F | 0x205F | 0x3000
            // Cf
            | 0x00AD | 0x0600..=0x0605 | 0x061C | 0x06DD | 0x070F | 0x0890..=0x0891 | 0x08E2
            | 0x180E | 0x200B..=0x200F | 0x202A..=0x202E | 0x2060..=0x2064 | 0x2066..=0x206F
            | 0xFEFF | 0xFFF9..=0xFFFB | 0x110BD | 0x110CD | 0x13430..=0x1343F
            | 0x1BCA0..=0x1BCA3 | 0x1D173..=0x1D17A | 0xE0001 | 0xE0020..=0xE007F
            // Cs cannot occur in a Rust char; Co (private use)
            | 0xE000..=0xF8FF | 0xF0000..=0xFFFFD | 0x100000..=0x10FFFD
            // noncharacters (Cn)
            | 0xFDD0..=0xFDEF)
        || (cp & 0xFFFE) == 0xFFFE;
    !not_printable
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn whitespace_includes_ascii_separators() {
        for c in [
            '\u{1c}', '\u{1d}', '\u{1e}', '\u{1f}', '\u{85}', '\u{a0}', '\u{3000}',
        ] {
            assert!(is_space(c), "{:?}", c);
        }
        assert!(!is_space('\u{200b}'), "zero width space is not whitespace");
        assert_eq!(collapse_whitespace("  a\u{1c}b \t\n c\u{3000} "), "a b c");
        assert_eq!(collapse_whitespace(" \u{1f} "), "");
        assert_eq!(strip("\u{1e} x \u{85}"), "x");
    }

    #[test]
    fn repr_matches_python() {
        assert_eq!(repr("alice"), "'alice'");
        assert_eq!(repr(""), "''");
        assert_eq!(repr("it's"), "\"it's\"");
        assert_eq!(repr("it's \"x\""), "'it\\'s \"x\"'");
        assert_eq!(repr("a\\b\n\t"), "'a\\\\b\\n\\t'");
        assert_eq!(repr("\u{1}\u{7f}\u{a0}"), "'\\x01\\x7f\\xa0'");
        assert_eq!(repr("\u{200b}é日😀"), "'\\u200bé日😀'");
        assert_eq!(repr("\u{10ffff}"), "'\\U0010ffff'");
    }
}
