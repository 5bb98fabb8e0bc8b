//! The calendar date the date reminder carries, behind a [`Clock`] so tests
//! (and hosts with their own notion of "today") control it.
//!
//! The host formats the date as `YYYY-MM-DD, Weekday` in local time; a
//! change of that string between turns is what triggers a date-only
//! reminder.

use std::fmt;
use std::sync::Mutex;
use std::time::{SystemTime, UNIX_EPOCH};

/// Day names in the host's `%A` spelling, Monday first.
const WEEKDAYS: [&str; 7] = [
    "Monday",
    "Tuesday",
    "Wednesday",
    "Thursday",
    "Friday",
    "Saturday",
    "Sunday",
];

/// A proleptic Gregorian calendar date.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct CalendarDate {
    year: i32,
    month: u8,
    day: u8,
}

impl CalendarDate {
    /// A valid date, or `None` (month 1–12, day within the month).
    pub fn new(year: i32, month: u8, day: u8) -> Option<Self> {
        let valid = (1..=12).contains(&month) && day >= 1 && day <= days_in_month(year, month);
        valid.then_some(Self { year, month, day })
    }

    /// The date `days` days after 1970-01-01 (negative: before).
    pub fn from_days_since_epoch(days: i64) -> Self {
        let (year, month, day) = memgate_core::time::civil_from_days(days);
        let (year, month, day) = (year as i32, month as u8, day as u8);
        Self { year, month, day }
    }

    /// Days since 1970-01-01 (the inverse of [`Self::from_days_since_epoch`]).
    pub fn days_since_epoch(self) -> i64 {
        let y = i64::from(self.year) - i64::from(self.month <= 2);
        let era = y.div_euclid(400);
        let yoe = y.rem_euclid(400);
        let m = i64::from(self.month);
        let doy = (153 * (if m > 2 { m - 3 } else { m + 9 }) + 2) / 5 + i64::from(self.day) - 1;
        let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
        era * 146_097 + doe - 719_468
    }

    /// The next calendar day.
    pub fn succ(self) -> Self {
        Self::from_days_since_epoch(self.days_since_epoch() + 1)
    }

    /// The English day name (`Monday` … `Sunday`).
    pub fn weekday(self) -> &'static str {
        // 1970-01-01 was a Thursday (index 3).
        WEEKDAYS[(self.days_since_epoch() + 3).rem_euclid(7) as usize]
    }

    /// The host's `reminder_date` spelling: `YYYY-MM-DD, Weekday`.
    pub fn reminder_date(self) -> String {
        format!("{self}, {}", self.weekday())
    }
}

impl fmt::Display for CalendarDate {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:04}-{:02}-{:02}", self.year, self.month, self.day)
    }
}

fn days_in_month(year: i32, month: u8) -> u8 {
    match month {
        4 | 6 | 9 | 11 => 30,
        2 if year % 4 == 0 && (year % 100 != 0 || year % 400 == 0) => 29,
        2 => 28,
        _ => 31,
    }
}

/// Where "today" comes from.
pub trait Clock: Send + Sync {
    fn today(&self) -> CalendarDate;
}

/// Today in the process's local time zone (as the host does), falling back
/// to UTC where the local offset cannot be determined.
#[derive(Clone, Copy, Debug, Default)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn today(&self) -> CalendarDate {
        let secs = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_secs() as i64)
            .unwrap_or_default();
        let local = secs + local_utc_offset_seconds(secs).unwrap_or(0);
        CalendarDate::from_days_since_epoch(local.div_euclid(86_400))
    }
}

/// The local zone's offset from UTC at `unix_secs`, from the C library's
/// zone rules (`TZ`, `/etc/localtime`).
#[cfg(unix)]
fn local_utc_offset_seconds(unix_secs: i64) -> Option<i64> {
    let t = libc::time_t::try_from(unix_secs).ok()?;
    // SAFETY: `localtime_r` only writes into the `tm` we own and reads `t`;
    // a zeroed `tm` is a valid value of that plain C struct. memgate never
    // changes the environment, so the zone lookup does not race a setenv.
    let mut tm: libc::tm = unsafe { std::mem::zeroed() };
    let converted = unsafe { libc::localtime_r(&t, &mut tm) };
    // `c_long` is 32 bits on some targets.
    #[allow(clippy::useless_conversion)]
    let offset = i64::from(tm.tm_gmtoff);
    (!converted.is_null()).then_some(offset)
}

#[cfg(not(unix))]
fn local_utc_offset_seconds(_unix_secs: i64) -> Option<i64> {
    None
}

/// A clock that says what it is told: for tests, and for hosts that decide
/// the date themselves.
#[derive(Debug)]
pub struct ManualClock(Mutex<CalendarDate>);

impl ManualClock {
    pub fn new(today: CalendarDate) -> Self {
        Self(Mutex::new(today))
    }

    pub fn set(&self, today: CalendarDate) {
        *self.0.lock().unwrap_or_else(|p| p.into_inner()) = today;
    }

    /// Moves to the next day (a midnight crossing).
    pub fn advance_day(&self) {
        let mut today = self.0.lock().unwrap_or_else(|p| p.into_inner());
        *today = today.succ();
    }
}

impl Clock for ManualClock {
    fn today(&self) -> CalendarDate {
        *self.0.lock().unwrap_or_else(|p| p.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reminder_date_uses_the_hosts_spelling() {
        let d = CalendarDate::new(2026, 10, 9).unwrap();
        assert_eq!(d.reminder_date(), "2026-10-09, Friday");
        assert_eq!(
            CalendarDate::from_days_since_epoch(0).reminder_date(),
            "1970-01-01, Thursday"
        );
        assert_eq!(
            CalendarDate::new(2000, 2, 29).unwrap().reminder_date(),
            "2000-02-29, Tuesday"
        );
    }

    #[test]
    fn day_counts_round_trip_across_eras_and_leap_days() {
        for days in [-800_000, -1, 0, 59, 60, 11_016, 20_000, 2_932_896] {
            let d = CalendarDate::from_days_since_epoch(days);
            assert_eq!(d.days_since_epoch(), days, "{d}");
        }
        let eve = CalendarDate::new(2024, 12, 31).unwrap();
        assert_eq!(eve.succ(), CalendarDate::new(2025, 1, 1).unwrap());
        assert_eq!(
            CalendarDate::new(2024, 2, 28).unwrap().succ(),
            CalendarDate::new(2024, 2, 29).unwrap()
        );
    }

    #[test]
    fn invalid_dates_are_refused() {
        assert!(CalendarDate::new(2023, 2, 29).is_none());
        assert!(CalendarDate::new(2024, 13, 1).is_none());
        assert!(CalendarDate::new(2024, 4, 31).is_none());
        assert!(CalendarDate::new(2024, 4, 0).is_none());
    }

    #[test]
    fn manual_clock_crosses_midnight() {
        let clock = ManualClock::new(CalendarDate::new(2026, 10, 9).unwrap());
        clock.advance_day();
        assert_eq!(clock.today().reminder_date(), "2026-10-10, Saturday");
    }

    #[test]
    fn system_clock_is_within_a_day_of_utc() {
        let utc_days = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap()
            .as_secs() as i64
            / 86_400;
        let local = SystemClock.today().days_since_epoch();
        assert!((local - utc_days).abs() <= 1, "{local} vs {utc_days}");
    }
}
