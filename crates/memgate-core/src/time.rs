//! RFC 3339 UTC timestamps: the store's `created_at` / `updated_at` /
//! `captured_at`, formatted by `jiff` to the millisecond.

use jiff::Timestamp;

/// The current time as `YYYY-MM-DDTHH:MM:SS.mmmZ`.
pub fn now_rfc3339() -> String {
    rfc3339_millis(Timestamp::now())
}

/// Formats milliseconds since the Unix epoch as an RFC 3339 UTC timestamp.
/// Instants beyond the years -9999 to 9999 are shown as the nearest end of
/// that range.
pub fn format_unix_millis(millis: i64) -> String {
    let instant = Timestamp::from_millisecond(millis).unwrap_or(if millis < 0 {
        Timestamp::MIN
    } else {
        Timestamp::MAX
    });
    rfc3339_millis(instant)
}

/// Always three fractional digits, so stored timestamps sort as text.
fn rfc3339_millis(instant: Timestamp) -> String {
    format!("{instant:.3}")
}

/// A loose check that `s` looks like an RFC 3339 timestamp (imports keep
/// their timestamps only when they do).
pub fn looks_like_rfc3339(s: &str) -> bool {
    let b = s.as_bytes();
    b.len() >= 20
        && b.len() <= 40
        && b[..4].iter().all(u8::is_ascii_digit)
        && b[4] == b'-'
        && b[7] == b'-'
        && (b[10] == b'T' || b[10] == b't' || b[10] == b' ')
        && b[13] == b':'
        && s.is_ascii()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn known_instants() {
        assert_eq!(format_unix_millis(0), "1970-01-01T00:00:00.000Z");
        assert_eq!(
            format_unix_millis(951_782_400_000),
            "2000-02-29T00:00:00.000Z"
        );
        assert_eq!(
            format_unix_millis(1_700_000_000_123),
            "2023-11-14T22:13:20.123Z"
        );
        assert_eq!(format_unix_millis(-1), "1969-12-31T23:59:59.999Z");
    }

    #[test]
    fn instants_outside_the_calendar_show_its_ends() {
        let last = format_unix_millis(i64::MAX);
        assert!(last.starts_with("9999-12-"), "{last}");
        let first = format_unix_millis(i64::MIN);
        assert!(first.starts_with("-009999-01-"), "{first}");
        assert!(looks_like_rfc3339(&last));
    }

    #[test]
    fn now_is_rfc3339() {
        let now = now_rfc3339();
        assert!(looks_like_rfc3339(&now), "{now}");
        assert!(now.ends_with('Z'));
        assert_eq!(now.len(), "1970-01-01T00:00:00.000Z".len(), "{now}");
        assert!(!looks_like_rfc3339("yesterday"));
    }
}
