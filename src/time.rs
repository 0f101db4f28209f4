//! Calendar arithmetic in UTC without a date crate: durations as written in the config
//! (`30s`, `5m`), RFC 3339 text for the API, and civil dates for the cron schedules.
//!
//! The civil-date conversions are Howard Hinnant's `days_from_civil` / `civil_from_days`
//! (proleptic Gregorian calendar), exact for every date this program can meet.

use std::time::Duration;

/// Milliseconds in one day.
pub const DAY_MS: u64 = 86_400_000;

/// A date and time of day in UTC.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Civil {
    /// Year, e.g. 2024.
    pub year: i64,
    /// 1..=12.
    pub month: u32,
    /// 1..=31.
    pub day: u32,
    /// 0..=23.
    pub hour: u32,
    /// 0..=59.
    pub minute: u32,
    /// 0..=59.
    pub second: u32,
    /// 0..=999.
    pub millis: u32,
}

/// Days since 1970-01-01 of a date.
pub fn days_from_civil(year: i64, month: u32, day: u32) -> i64 {
    let y = if month <= 2 { year - 1 } else { year };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let m = i64::from(month);
    let mp = if m > 2 { m - 3 } else { m + 9 };
    let doy = (153 * mp + 2) / 5 + i64::from(day) - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// The date of a day number (days since 1970-01-01).
pub fn civil_from_days(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let month = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let year = yoe + era * 400 + i64::from(month <= 2);
    (year, month, day)
}

/// Day of the week of a day number: 0 = Sunday .. 6 = Saturday (1970-01-01 was a Thursday).
pub fn weekday(days: i64) -> u32 {
    (days + 4).rem_euclid(7) as u32
}

/// Days in a month of a year.
pub fn days_in_month(year: i64, month: u32) -> u32 {
    match month {
        4 | 6 | 9 | 11 => 30,
        2 if (year % 4 == 0 && year % 100 != 0) || year % 400 == 0 => 29,
        2 => 28,
        _ => 31,
    }
}

impl Civil {
    /// The UTC date and time of Unix milliseconds.
    pub fn from_ms(ms: u64) -> Self {
        let days = (ms / DAY_MS) as i64;
        let rest = ms % DAY_MS;
        let (year, month, day) = civil_from_days(days);
        Self {
            year,
            month,
            day,
            hour: (rest / 3_600_000) as u32,
            minute: (rest / 60_000 % 60) as u32,
            second: (rest / 1000 % 60) as u32,
            millis: (rest % 1000) as u32,
        }
    }

    /// Unix milliseconds; `None` before 1970.
    pub fn to_ms(&self) -> Option<u64> {
        let days = days_from_civil(self.year, self.month, self.day);
        let ms = days * DAY_MS as i64
            + i64::from(self.hour) * 3_600_000
            + i64::from(self.minute) * 60_000
            + i64::from(self.second) * 1000
            + i64::from(self.millis);
        u64::try_from(ms).ok()
    }
}

/// Unix milliseconds as RFC 3339 UTC text, e.g. `2024-05-01T12:00:00.250Z` (milliseconds only
/// when not zero).
pub fn rfc3339(ms: u64) -> String {
    let c = Civil::from_ms(ms);
    let base = format!(
        "{:04}-{:02}-{:02}T{:02}:{:02}:{:02}",
        c.year, c.month, c.day, c.hour, c.minute, c.second
    );
    if c.millis == 0 {
        format!("{base}Z")
    } else {
        format!("{base}.{:03}Z", c.millis)
    }
}

/// Parses RFC 3339 text (`2024-05-01T12:00:00Z`, `2024-05-01 12:00:00.5+02:00`) to Unix
/// milliseconds. Fractions beyond milliseconds are cut. `None` for anything else, or a time
/// before 1970.
pub fn parse_rfc3339(s: &str) -> Option<u64> {
    let b = s.as_bytes();
    let num = |from: usize, len: usize| -> Option<u32> {
        let part = s.get(from..from + len)?;
        if !part.bytes().all(|c| c.is_ascii_digit()) {
            return None;
        }
        part.parse().ok()
    };
    if b.len() < 20 || b[4] != b'-' || b[7] != b'-' || b[13] != b':' || b[16] != b':' {
        return None;
    }
    if !matches!(b[10], b'T' | b't' | b' ') {
        return None;
    }
    let (year, month, day) = (num(0, 4)?, num(5, 2)?, num(8, 2)?);
    let (hour, minute, second) = (num(11, 2)?, num(14, 2)?, num(17, 2)?);
    if !(1..=12).contains(&month)
        || day == 0
        || day > days_in_month(i64::from(year), month)
        || hour > 23
        || minute > 59
        || second > 60
    {
        return None;
    }
    let mut i = 19;
    let mut millis = 0u32;
    if b.get(i) == Some(&b'.') {
        i += 1;
        let start = i;
        while i < b.len() && b[i].is_ascii_digit() {
            if i - start < 3 {
                millis = millis * 10 + u32::from(b[i] - b'0');
            }
            i += 1;
        }
        if i == start {
            return None;
        }
        for _ in (i - start)..3 {
            millis *= 10;
        }
    }
    let offset_secs: i64 = match &s[i..] {
        "Z" | "z" => 0,
        tz if tz.len() == 6 && (tz.starts_with('+') || tz.starts_with('-')) => {
            if tz.as_bytes()[3] != b':' {
                return None;
            }
            let h = i64::from(num(i + 1, 2)?);
            let m = i64::from(num(i + 4, 2)?);
            if h > 23 || m > 59 {
                return None;
            }
            let sign = if tz.starts_with('-') { -1 } else { 1 };
            sign * (h * 3600 + m * 60)
        }
        _ => return None,
    };
    let local = Civil {
        year: i64::from(year),
        month,
        day,
        hour,
        minute,
        second: second.min(59),
        millis,
    };
    let days = days_from_civil(local.year, month, day);
    let ms = days * DAY_MS as i64
        + i64::from(hour) * 3_600_000
        + i64::from(local.minute) * 60_000
        + i64::from(local.second) * 1000
        + i64::from(millis)
        - offset_secs * 1000;
    u64::try_from(ms).ok()
}

/// Parses a duration as written in the config: a whole number and a unit, `ms`, `s`, `m`,
/// `h` or `d` (`500ms`, `30s`, `5m`, `1h`, `7d`).
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    let t = s.trim();
    let split = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
    let (digits, unit) = t.split_at(split);
    let bad = || format!("{s:?}: expected a whole number and a unit (ms, s, m, h, d), e.g. 30s");
    if digits.is_empty() {
        return Err(bad());
    }
    let n: u64 = digits.parse().map_err(|_| bad())?;
    let unit_ms: u64 = match unit.trim() {
        "ms" => 1,
        "s" => 1000,
        "m" => 60_000,
        "h" => 3_600_000,
        "d" => DAY_MS,
        _ => return Err(bad()),
    };
    n.checked_mul(unit_ms)
        .filter(|ms| *ms <= 366 * DAY_MS)
        .map(Duration::from_millis)
        .ok_or_else(|| format!("{s:?} is longer than 366 days"))
}

/// A duration written back the way the config would say it (`30s`, `5m`, `1500ms`).
pub fn format_duration(d: Duration) -> String {
    let ms = d.as_millis() as u64;
    for (unit, size) in [("d", DAY_MS), ("h", 3_600_000), ("m", 60_000), ("s", 1000)] {
        if ms >= size && ms % size == 0 {
            return format!("{}{unit}", ms / size);
        }
    }
    format!("{ms}ms")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn civil_dates_round_trip_across_leap_years_and_centuries() {
        for days in [-1, 0, 59, 365, 10_957, 11_016, 19_782, 47_541] {
            let (y, m, d) = civil_from_days(days);
            assert_eq!(days_from_civil(y, m, d), days, "{y}-{m}-{d}");
        }
        assert_eq!(civil_from_days(0), (1970, 1, 1));
        assert_eq!(civil_from_days(11_016), (2000, 2, 29));
        assert_eq!(weekday(0), 4);
        assert_eq!(weekday(days_from_civil(2024, 5, 1)), 3);
    }

    #[test]
    fn rfc3339_formats_and_parses_utc_and_offsets() {
        assert_eq!(rfc3339(0), "1970-01-01T00:00:00Z");
        assert_eq!(rfc3339(1_714_564_800_250), "2024-05-01T12:00:00.250Z");
        assert_eq!(
            parse_rfc3339("2024-05-01T12:00:00Z"),
            Some(1_714_564_800_000)
        );
        assert_eq!(
            parse_rfc3339("2024-05-01T14:00:00.25+02:00"),
            Some(1_714_564_800_250)
        );
        assert_eq!(
            parse_rfc3339("2024-05-01 11:30:00-00:30"),
            Some(1_714_564_800_000)
        );
        for bad in [
            "2024-05-01",
            "2024-02-30T00:00:00Z",
            "2024-05-01T12:00:00",
            "x",
        ] {
            assert_eq!(parse_rfc3339(bad), None, "{bad}");
        }
    }

    #[test]
    fn durations_take_a_unit_and_say_what_is_wrong() {
        assert_eq!(parse_duration("30s"), Ok(Duration::from_secs(30)));
        assert_eq!(parse_duration("5m"), Ok(Duration::from_secs(300)));
        assert_eq!(parse_duration("250ms"), Ok(Duration::from_millis(250)));
        assert_eq!(parse_duration("0s"), Ok(Duration::ZERO));
        assert!(parse_duration("5").unwrap_err().contains("a unit"));
        assert!(parse_duration("1.5s").is_err());
        assert!(parse_duration("400d").unwrap_err().contains("366 days"));
        assert_eq!(format_duration(Duration::from_secs(300)), "5m");
        assert_eq!(format_duration(Duration::from_millis(1500)), "1500ms");
    }

    proptest::proptest! {
        #[test]
        fn config_and_file_text_never_panics_the_parsers(
            text in "[0-9 ,*/a-zA-Z:.+TZ-]{0,32}",
            line in "[0-9a-z\",\n ]{0,24}",
        ) {
            let _ = parse_rfc3339(&text);
            let _ = parse_duration(&text);
            let _ = crate::sources::schedule::cron::Cron::parse(&text);
            let _ = crate::sources::backfill::parse::split_csv(&line);
        }
    }
}
