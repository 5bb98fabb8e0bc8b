//! Canonical JSON, byte-compatible with Python's
//! `json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)`.
//!
//! Message signatures hash this encoding. It must stay stable forever:
//! changing it makes every message look unseen to an existing cursor. Keys
//! are sorted by code point (UTF-8 byte order is the same order), non-ASCII
//! is kept, control characters are escaped as Python does, and floats use
//! Python's `repr` (`1e+16`, `1e-05`, `0.1`, `100.0`).

use serde_json::Value;

/// Serializes `value` the way Python's `json.dumps` does with sorted keys,
/// compact separators and `ensure_ascii=False`.
pub fn to_python_json(value: &Value) -> String {
    let mut out = String::new();
    write_python_json(&mut out, value);
    out
}

/// Appends the encoding of a list of `items` to `out` (a borrowed list:
/// message content blocks are signed without building a `Value` for them).
pub fn write_python_json_array(out: &mut String, items: &[Value]) {
    out.push('[');
    for (i, item) in items.iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        write_python_json(out, item);
    }
    out.push(']');
}

/// Appends [`to_python_json`]'s encoding of `value` to `out`.
pub fn write_python_json(out: &mut String, value: &Value) {
    match value {
        Value::Null => out.push_str("null"),
        Value::Bool(true) => out.push_str("true"),
        Value::Bool(false) => out.push_str("false"),
        Value::Number(n) => {
            if n.is_i64() || n.is_u64() {
                out.push_str(&n.to_string());
            } else {
                out.push_str(&python_float_repr(n.as_f64().unwrap_or(f64::NAN)));
            }
        }
        Value::String(s) => write_json_string(out, s),
        Value::Array(items) => write_python_json_array(out, items),
        Value::Object(map) => {
            let mut entries: Vec<(&String, &Value)> = map.iter().collect();
            entries.sort_by(|a, b| a.0.cmp(b.0));
            out.push('{');
            for (i, (k, v)) in entries.into_iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_json_string(out, k);
                out.push(':');
                write_python_json(out, v);
            }
            out.push('}');
        }
    }
}

/// Appends `s` as a JSON string the way Python's
/// `json.dumps(ensure_ascii=False)` writes it: `"` and `\\` escaped,
/// `\n \r \t \b \f` by name, other control characters as `\u00XX`, everything
/// else verbatim. Runs of plain bytes are copied at once.
pub fn write_json_string(out: &mut String, s: &str) {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    out.reserve(s.len() + 2);
    out.push('"');
    let bytes = s.as_bytes();
    let mut run = 0;
    // Signing whole transcripts spends its time here: plain runs are found
    // eight bytes at a time ([`next_escape`]) and copied at once.
    while let Some(i) = next_escape(bytes, run) {
        let b = bytes[i];
        out.push_str(&s[run..i]);
        match b {
            b'"' => out.push_str("\\\""),
            b'\\' => out.push_str("\\\\"),
            b'\n' => out.push_str("\\n"),
            b'\r' => out.push_str("\\r"),
            b'\t' => out.push_str("\\t"),
            0x08 => out.push_str("\\b"),
            0x0c => out.push_str("\\f"),
            _ => {
                out.push_str("\\u00");
                out.push(char::from(HEX[usize::from(b >> 4)]));
                out.push(char::from(HEX[usize::from(b & 0xf)]));
            }
        }
        run = i + 1;
    }
    out.push_str(&s[run..]);
    out.push('"');
}

/// The first byte at or after `from` that [`write_json_string`] escapes.
/// Eight bytes are tested at once (a control byte: one below 0x20; a quote
/// or a backslash: one equal to it), with the exact tests of a word for a
/// byte below a bound (at most 0x80) and for a zero byte; the word that
/// holds one, and the tail, are then read byte by byte.
fn next_escape(bytes: &[u8], from: usize) -> Option<usize> {
    const ONES: u64 = u64::from_le_bytes([1; 8]);
    const HIGH: u64 = ONES << 7;
    let has_zero = |x: u64| x.wrapping_sub(ONES) & !x & HIGH != 0;
    let mut at = from;
    while let Some(word) = bytes.get(at..at + 8) {
        let w = u64::from_le_bytes(word.try_into().unwrap_or_default());
        let control = w.wrapping_sub(ONES * 0x20) & !w & HIGH != 0;
        if control
            || has_zero(w ^ (ONES * u64::from(b'"')))
            || has_zero(w ^ (ONES * u64::from(b'\\')))
        {
            break;
        }
        at += 8;
    }
    bytes[at..]
        .iter()
        .position(|&b| NEEDS_ESCAPE[usize::from(b)])
        .map(|offset| at + offset)
}

/// Bytes `write_json_string` escapes: `"`, `\\` and the control characters.
const NEEDS_ESCAPE: [bool; 256] = {
    let mut table = [false; 256];
    let mut b = 0;
    while b < 0x20 {
        table[b] = true;
        b += 1;
    }
    table[b'"' as usize] = true;
    table[b'\\' as usize] = true;
    table
};

/// Python's `repr(float)`: the shortest round-tripping digits, positional
/// when the decimal exponent is in [-4, 16), scientific otherwise.
pub fn python_float_repr(x: f64) -> String {
    if x.is_nan() {
        return "NaN".to_owned();
    }
    if x.is_infinite() {
        return if x > 0.0 { "Infinity" } else { "-Infinity" }.to_owned();
    }
    let sign = if x.is_sign_negative() { "-" } else { "" };
    // `{:e}` yields the shortest round-trip digits, e.g. "1.5e-5".
    let sci = format!("{:e}", x.abs());
    let (mantissa, exp) = sci.split_once('e').expect("{:e} always has an exponent");
    let exp: i32 = exp.parse().expect("integer exponent");
    let digits: String = mantissa.chars().filter(|c| *c != '.').collect();
    let decpt = exp + 1; // position of the decimal point relative to `digits`
    let body = if digits == "0" {
        "0.0".to_owned()
    } else if decpt <= -4 || decpt > 16 {
        let (first, rest) = digits.split_at(1);
        let frac = if rest.is_empty() {
            String::new()
        } else {
            format!(".{rest}")
        };
        let esign = if exp < 0 { '-' } else { '+' };
        format!("{first}{frac}e{esign}{:02}", exp.abs())
    } else if decpt <= 0 {
        format!("0.{}{digits}", "0".repeat((-decpt) as usize))
    } else if decpt as usize >= digits.len() {
        format!("{digits}{}.0", "0".repeat(decpt as usize - digits.len()))
    } else {
        let (int, frac) = digits.split_at(decpt as usize);
        format!("{int}.{frac}")
    };
    format!("{sign}{body}")
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn strings_are_escaped_as_python_json_dumps_escapes_them() {
        let escaped = |s: &str| {
            let mut out = String::new();
            write_json_string(&mut out, s);
            out
        };
        // json.dumps(s, ensure_ascii=False) for each input.
        assert_eq!(escaped(""), r#""""#);
        assert_eq!(escaped("plain text"), r#""plain text""#);
        assert_eq!(escaped("a\"b\\c"), r#""a\"b\\c""#);
        assert_eq!(escaped("\n\r\t\u{8}\u{c}"), r#""\n\r\t\b\f""#);
        assert_eq!(escaped("\u{0}x\u{1f}\u{7f}"), "\"\\u0000x\\u001f\u{7f}\"");
        assert_eq!(escaped("Ünïcödé ✓ 你好\n"), "\"Ünïcödé ✓ 你好\\n\"");
        assert_eq!(escaped("\"\""), r#""\"\"""#);
    }

    #[test]
    fn the_word_scan_finds_the_first_byte_to_escape_as_a_byte_scan_does() {
        // Every byte class near the tests' bounds, in every alignment.
        let alphabet: &[&str] = &[
            "a", "\"", "\\", "\n", "\u{1f}", "\u{20}", "!", "#", "[", "]", "\u{7f}", "é", "你",
            "\u{0}",
        ];
        let mut state = 0x9e37_79b9_7f4a_7c15_u64;
        for _ in 0..20_000 {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            let len = (state % 40) as usize;
            let text: String = (0..len)
                .map(|k| alphabet[((state >> (k % 58)) as usize ^ k) % alphabet.len()])
                .collect();
            let bytes = text.as_bytes();
            for from in 0..=bytes.len() {
                let expected = bytes[from..]
                    .iter()
                    .position(|&b| NEEDS_ESCAPE[usize::from(b)])
                    .map(|o| from + o);
                assert_eq!(next_escape(bytes, from), expected, "{text:?} from {from}");
            }
        }
    }

    #[test]
    fn floats_match_python_repr() {
        let cases = [
            (1e16, "1e+16"),
            (1e15, "1000000000000000.0"),
            (0.1, "0.1"),
            (100.0, "100.0"),
            (1e-5, "1e-05"),
            (0.0001, "0.0001"),
            (1.5e-5, "1.5e-05"),
            (123.456, "123.456"),
            (-2.5, "-2.5"),
            (0.0, "0.0"),
            (-0.0, "-0.0"),
            (1.7976931348623157e308, "1.7976931348623157e+308"),
            (5e-324, "5e-324"),
            (12345678901234567.0, "1.2345678901234568e+16"),
        ];
        for (x, want) in cases {
            assert_eq!(python_float_repr(x), want, "{x}");
        }
    }

    #[test]
    fn objects_are_sorted_and_compact() {
        let v = json!({"b": 1, "a": [true, null, "é\n\u{1}"], "ä": {"z": 0.5, "y": 2}});
        assert_eq!(
            to_python_json(&v),
            r#"{"a":[true,null,"é\n\u0001"],"b":1,"ä":{"y":2,"z":0.5}}"#
        );
    }
}
