//! The calendar date the date reminder carries, behind a [`Clock`] so tests
//! (and hosts with their own notion of "today") control it.
//!
//! The host formats the date as `YYYY-MM-DD, Weekday` in local time; a
//! change of that string between turns is what triggers a date-only
//! reminder.
//!
//! Dates and zones come from `jiff`, which reads the local zone (`TZ`,
//! `/etc/localtime`) itself. libc's `localtime_r` is not used: it reads
//! `TZ` with `getenv`, which races any `setenv` elsewhere in the host
//! process, and a library cannot promise its host never calls one.

use jiff::civil::Date;
use jiff::tz::TimeZone;
use jiff::{SignedDuration, Timestamp};
use std::fmt;
use std::sync::Mutex;

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

const EPOCH: Date = Date::constant(1970, 1, 1);

/// A proleptic Gregorian calendar date, in the years -9999 to 9999.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct CalendarDate(Date);

impl CalendarDate {
    /// A valid date, or `None` (year -9999–9999, month 1–12, day within the
    /// month).
    pub fn new(year: i32, month: u8, day: u8) -> Option<Self> {
        let date = Date::new(
            i16::try_from(year).ok()?,
            i8::try_from(month).ok()?,
            i8::try_from(day).ok()?,
        );
        date.ok().map(Self)
    }

    /// The date `days` days after 1970-01-01 (negative: before); beyond the
    /// calendar's range, its first or last day.
    pub fn from_days_since_epoch(days: i64) -> Self {
        let offset = SignedDuration::from_secs(days.saturating_mul(86_400));
        Self(EPOCH.saturating_add(offset))
    }

    /// Days since 1970-01-01 (the inverse of [`Self::from_days_since_epoch`]).
    pub fn days_since_epoch(self) -> i64 {
        self.0.duration_since(EPOCH).as_secs() / 86_400
    }

    /// The next calendar day (the last day of the range stays itself).
    pub fn succ(self) -> Self {
        self.0.tomorrow().map_or(self, Self)
    }

    /// The English day name (`Monday` … `Sunday`).
    pub fn weekday(self) -> &'static str {
        WEEKDAYS[self.0.weekday().to_monday_zero_offset() as usize]
    }

    /// The host's `reminder_date` spelling: `YYYY-MM-DD, Weekday`.
    pub fn reminder_date(self) -> String {
        format!("{self}, {}", self.weekday())
    }

    /// The date in `zone` at `instant`, with the zone's offset at that
    /// instant (daylight saving time included).
    fn in_zone(zone: &TimeZone, instant: Timestamp) -> Self {
        Self(zone.to_datetime(instant).date())
    }
}

impl fmt::Display for CalendarDate {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(&self.0, f)
    }
}

/// Where "today" comes from.
pub trait Clock: Send + Sync {
    fn today(&self) -> CalendarDate;
}

/// Today in the process's local time zone (as the host does), falling back
/// to UTC where the local zone cannot be determined.
#[derive(Clone, Copy, Debug, Default)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn today(&self) -> CalendarDate {
        // jiff caches the system zone and looks again every few minutes,
        // so a changed `/etc/localtime` is picked up without a restart.
        CalendarDate::in_zone(&TimeZone::system(), Timestamp::now())
    }
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
    use jiff::tz::Offset;
    use std::process::Command;
    use std::time::{SystemTime, UNIX_EPOCH};

    fn date(y: i32, m: u8, d: u8) -> CalendarDate {
        CalendarDate::new(y, m, d).unwrap()
    }

    fn at(rfc3339: &str) -> Timestamp {
        rfc3339.parse().unwrap()
    }

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
    fn the_calendars_ends_hold() {
        let last = date(9999, 12, 31);
        assert_eq!(last.succ(), last);
        assert_eq!(CalendarDate::from_days_since_epoch(i64::MAX), last);
        assert_eq!(
            CalendarDate::from_days_since_epoch(i64::MIN),
            date(-9999, 1, 1)
        );
        assert!(CalendarDate::new(10_000, 1, 1).is_none());
        assert!(CalendarDate::new(2024, 1, 200).is_none());
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

    #[test]
    fn the_local_date_changes_at_the_zones_midnight() {
        let tokyo = TimeZone::fixed(Offset::constant(9));
        let before = CalendarDate::in_zone(&tokyo, at("2026-10-09T14:59:59Z"));
        let after = CalendarDate::in_zone(&tokyo, at("2026-10-09T15:00:00Z"));
        assert_eq!(before.reminder_date(), "2026-10-09, Friday");
        assert_eq!(after.reminder_date(), "2026-10-10, Saturday");
        // West of UTC the same instant is still the day before.
        let lima = TimeZone::fixed(Offset::constant(-5));
        assert_eq!(
            CalendarDate::in_zone(&lima, at("2026-10-10T03:00:00Z")),
            date(2026, 10, 9)
        );
    }

    #[test]
    fn the_offset_follows_daylight_saving_time() {
        // POSIX rules as `TZ` may carry them: EST (UTC-5), EDT (UTC-4)
        // from the second Sunday in March to the first Sunday in November.
        let new_york = TimeZone::posix("EST5EDT,M3.2.0,M11.1.0").unwrap();
        // 04:30 UTC is 00:30 EDT, the next day, only in summer time.
        let summer = CalendarDate::in_zone(&new_york, at("2026-03-09T04:30:00Z"));
        assert_eq!(summer, date(2026, 3, 9));
        let winter = CalendarDate::in_zone(&new_york, at("2026-01-10T04:30:00Z"));
        assert_eq!(winter, date(2026, 1, 9));
    }

    /// Prints `SystemClock`'s today for [`system_clock_follows_tz`], which
    /// runs it in a child process with its own `TZ` (this process's
    /// environment is never changed).
    #[test]
    #[ignore = "run by system_clock_follows_tz in a child process"]
    fn print_system_today() {
        println!("system-today={}", SystemClock.today());
    }

    /// `SystemClock`'s today in a child process whose `TZ` is `tz`.
    fn system_today_with_tz(tz: &str) -> CalendarDate {
        let out = Command::new(std::env::current_exe().unwrap())
            .args(["clock::tests::print_system_today", "--exact"])
            .args(["--ignored", "--nocapture", "--test-threads=1"])
            .env("TZ", tz)
            .output()
            .unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout);
        // The harness prints the test's name on the same line.
        let today = stdout
            .split_once("system-today=")
            .and_then(|(_, rest)| rest.split_whitespace().next())
            .unwrap_or_else(|| panic!("no date from the child with TZ={tz}: {stdout}"));
        CalendarDate(today.parse().unwrap())
    }

    /// The date in `zone` now, as one of the two dates around `run`
    /// (which may cross midnight).
    fn assert_today_in(zone: &TimeZone, run: impl FnOnce() -> CalendarDate) -> CalendarDate {
        let before = CalendarDate::in_zone(zone, Timestamp::now());
        let seen = run();
        let after = CalendarDate::in_zone(zone, Timestamp::now());
        assert!(
            seen == before || seen == after,
            "{seen} is neither {before} nor {after}"
        );
        seen
    }

    #[test]
    fn system_clock_follows_tz() {
        // UTC+14 and UTC-12 are 26 hours apart: never on the same date.
        let east = assert_today_in(&TimeZone::fixed(Offset::constant(14)), || {
            system_today_with_tz("<+14>-14")
        });
        let west = assert_today_in(&TimeZone::fixed(Offset::constant(-12)), || {
            system_today_with_tz("<-12>12")
        });
        assert!(
            (1..=2).contains(&(east.days_since_epoch() - west.days_since_epoch())),
            "{east} vs {west}"
        );
        // A zone that does not exist falls back to UTC.
        assert_today_in(&TimeZone::UTC, || system_today_with_tz("Nowhere/Atlantis"));
    }
}
