//! Calendar arithmetic without a date-time dependency: RFC 3339 UTC
//! timestamps (the store's `created_at` / `updated_at` / `captured_at`) and
//! the proleptic Gregorian date of a day count (the host's date reminder).

use std::time::{SystemTime, UNIX_EPOCH};

/// The current time as `YYYY-MM-DDTHH:MM:SS.mmmZ`.
pub fn now_rfc3339() -> String {
    let since = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default();
    format_unix_millis(since.as_millis() as i64)
}

/// Formats milliseconds since the Unix epoch as an RFC 3339 UTC timestamp.
pub fn format_unix_millis(millis: i64) -> String {
    let secs = millis.div_euclid(1000);
    let ms = millis.rem_euclid(1000);
    let days = secs.div_euclid(86_400);
    let sod = secs.rem_euclid(86_400);
    let (y, m, d) = civil_from_days(days);
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}.{ms:03}Z",
        sod / 3600,
        (sod % 3600) / 60,
        sod % 60
    )
}

/// Proleptic Gregorian date of a day count since 1970-01-01 (the era-based
/// conversion: 400-year eras of 146097 days, years starting in March).
pub fn civil_from_days(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let y = yoe + era * 400 + i64::from(m <= 2);
    (y, m, d)
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
    fn now_is_rfc3339() {
        let now = now_rfc3339();
        assert!(looks_like_rfc3339(&now), "{now}");
        assert!(now.ends_with('Z'));
        assert!(!looks_like_rfc3339("yesterday"));
    }
}
