//! Five-field cron expressions (`minute hour day-of-month month day-of-week`), in UTC.
//!
//! Each field takes `*`, a number, a range `a-b`, a step `*/n`, `a-b/n` or `a/n` (from `a` to
//! the field's end), and comma lists of these. Months and weekdays also take three-letter
//! English names (`JAN`, `MON`); weekday 0 and 7 are both Sunday. As in the classic cron,
//! when both day-of-month and day-of-week are restricted (neither is `*`), a day matches when
//! **either** does.

use crate::time::{civil_from_days, days_from_civil, days_in_month, weekday, DAY_MS};

/// A parsed cron expression.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cron {
    minutes: u64,
    hours: u64,
    days: u64,
    months: u64,
    weekdays: u64,
    days_any: bool,
    weekdays_any: bool,
}

/// The fields in order: name, lowest, highest, names.
const FIELDS: [(&str, u32, u32, &[&str]); 5] = [
    ("minute", 0, 59, &[]),
    ("hour", 0, 23, &[]),
    ("day-of-month", 1, 31, &[]),
    (
        "month",
        1,
        12,
        &[
            "JAN", "FEB", "MAR", "APR", "MAY", "JUN", "JUL", "AUG", "SEP", "OCT", "NOV", "DEC",
        ],
    ),
    (
        "day-of-week",
        0,
        7,
        &["SUN", "MON", "TUE", "WED", "THU", "FRI", "SAT"],
    ),
];

/// How far ahead [`Cron::next_after`] looks: long enough for any date that exists at all
/// (29 February on a given weekday comes back within 28 years).
const HORIZON_DAYS: i64 = 366 * 29;

impl Cron {
    /// Parses an expression; the error names the field at fault, e.g.
    /// `field 2 (hour): 25 is outside 0..=23`.
    pub fn parse(text: &str) -> Result<Self, String> {
        let parts: Vec<&str> = text.split_whitespace().collect();
        if parts.len() != 5 {
            return Err(format!(
                "{text:?}: expected 5 fields (minute hour day-of-month month day-of-week), got {}",
                parts.len()
            ));
        }
        let mut sets = [0u64; 5];
        for (i, (part, (name, lo, hi, names))) in parts.iter().zip(FIELDS).enumerate() {
            sets[i] = parse_field(part, lo, hi, names)
                .map_err(|e| format!("field {} ({name}): {e}", i + 1))?;
        }
        // Sunday is 0 and 7.
        let mut weekdays = sets[4];
        if weekdays & (1 << 7) != 0 {
            weekdays = (weekdays | 1) & !(1 << 7);
        }
        let cron = Self {
            minutes: sets[0],
            hours: sets[1],
            days: sets[2],
            months: sets[3],
            weekdays,
            days_any: parts[2] == "*",
            weekdays_any: parts[4] == "*",
        };
        if cron.next_after(0).is_none() {
            return Err(format!("{text:?} never matches a date"));
        }
        Ok(cron)
    }

    fn day_matches(&self, days: i64) -> bool {
        let (_, _, dom) = civil_from_days(days);
        let by_dom = self.days & (1 << dom) != 0;
        let by_dow = self.weekdays & (1 << weekday(days)) != 0;
        match (self.days_any, self.weekdays_any) {
            (true, true) => true,
            (false, true) => by_dom,
            (true, false) => by_dow,
            (false, false) => by_dom || by_dow,
        }
    }

    /// The first minute strictly after `after_ms` (Unix milliseconds) that matches, in Unix
    /// milliseconds; `None` when none does within the horizon.
    pub fn next_after(&self, after_ms: u64) -> Option<u64> {
        // Start at the next whole minute.
        let start = (after_ms / 60_000 + 1) * 60_000;
        let mut days = (start / DAY_MS) as i64;
        let end = days + HORIZON_DAYS;
        let mut minute_of_day = ((start % DAY_MS) / 60_000) as u32;
        while days <= end {
            let (year, month, day) = civil_from_days(days);
            if self.months & (1 << month) == 0 {
                // Skip to the first day of the next month.
                days += i64::from(days_in_month(year, month) - day + 1);
                minute_of_day = 0;
                continue;
            }
            if !self.day_matches(days) {
                days += 1;
                minute_of_day = 0;
                continue;
            }
            let mut m = minute_of_day;
            while m < 24 * 60 {
                let (h, min) = (m / 60, m % 60);
                if self.hours & (1 << h) == 0 {
                    m = (h + 1) * 60;
                    continue;
                }
                if self.minutes & (1 << min) != 0 {
                    let ms =
                        days_from_civil(year, month, day) * DAY_MS as i64 + i64::from(m) * 60_000;
                    return u64::try_from(ms).ok();
                }
                m += 1;
            }
            days += 1;
            minute_of_day = 0;
        }
        None
    }
}

fn parse_value(s: &str, lo: u32, hi: u32, names: &[&str]) -> Result<u32, String> {
    if let Some(i) = names.iter().position(|n| n.eq_ignore_ascii_case(s)) {
        return Ok(i as u32 + lo);
    }
    let v: u32 = s
        .parse()
        .map_err(|_| format!("{s:?} is not a number{}", name_hint(names)))?;
    if v < lo || v > hi {
        return Err(format!("{v} is outside {lo}..={hi}"));
    }
    Ok(v)
}

fn name_hint(names: &[&str]) -> String {
    match names {
        [] => String::new(),
        [first, .., last] => format!(" or a name {first}..{last}"),
        [one] => format!(" or {one}"),
    }
}

/// One field: a bit set of the values it allows.
fn parse_field(field: &str, lo: u32, hi: u32, names: &[&str]) -> Result<u64, String> {
    let mut set = 0u64;
    for item in field.split(',') {
        if item.is_empty() {
            return Err(format!("{field:?} has an empty list item"));
        }
        let (range, step) = match item.split_once('/') {
            Some((r, s)) => {
                let step: u32 = s
                    .parse()
                    .map_err(|_| format!("step {s:?} is not a number"))?;
                if step == 0 {
                    return Err(format!("{item:?}: a step must be at least 1"));
                }
                (r, step)
            }
            None => (item, 1),
        };
        let (from, to) = if range == "*" {
            (lo, hi)
        } else if let Some((a, b)) = range.split_once('-') {
            let (a, b) = (
                parse_value(a, lo, hi, names)?,
                parse_value(b, lo, hi, names)?,
            );
            if a > b {
                return Err(format!("range {range:?} runs backwards"));
            }
            (a, b)
        } else {
            let a = parse_value(range, lo, hi, names)?;
            // `a/n` runs from a to the field's end; a lone `a` is just a.
            (a, if item.contains('/') { hi } else { a })
        };
        let mut v = from;
        while v <= to {
            set |= 1 << v;
            // A step beyond the field's end just stops (no overflow on a huge step).
            match v.checked_add(step) {
                Some(next) => v = next,
                None => break,
            }
        }
    }
    Ok(set)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::time::{parse_rfc3339, rfc3339};

    fn next(expr: &str, after: &str) -> String {
        let cron = Cron::parse(expr).unwrap();
        rfc3339(cron.next_after(parse_rfc3339(after).unwrap()).unwrap())
    }

    #[test]
    fn steps_ranges_lists_and_names_pick_the_next_minute() {
        assert_eq!(
            next("*/15 * * * *", "2024-05-01T12:07:30Z"),
            "2024-05-01T12:15:00Z"
        );
        assert_eq!(
            next("*/15 * * * *", "2024-05-01T12:15:00Z"),
            "2024-05-01T12:30:00Z"
        );
        assert_eq!(
            next("0 8-17/3 * * MON-FRI", "2024-05-03T18:00:00Z"),
            "2024-05-06T08:00:00Z"
        );
        assert_eq!(
            next("30 2 1,15 * *", "2024-05-01T02:30:00Z"),
            "2024-05-15T02:30:00Z"
        );
        assert_eq!(
            next("0 0 1 JAN *", "2024-05-01T00:00:00Z"),
            "2025-01-01T00:00:00Z"
        );
        assert_eq!(
            next("5/20 * * * *", "2024-05-01T00:46:00Z"),
            "2024-05-01T01:05:00Z"
        );
        // Sunday as 7; 2024-05-05 is a Sunday.
        assert_eq!(
            next("0 12 * * 7", "2024-05-01T00:00:00Z"),
            "2024-05-05T12:00:00Z"
        );
    }

    #[test]
    fn day_of_month_or_day_of_week_when_both_are_restricted() {
        // The 13th, or any Friday: 2024-05-03 is a Friday, before the 13th.
        assert_eq!(
            next("0 0 13 * FRI", "2024-05-01T00:00:00Z"),
            "2024-05-03T00:00:00Z"
        );
        assert_eq!(
            next("0 0 29 2 *", "2024-03-01T00:00:00Z"),
            "2028-02-29T00:00:00Z"
        );
    }

    #[test]
    fn bad_fields_are_named_with_their_position() {
        let err = |e: &str| Cron::parse(e).unwrap_err();
        assert_eq!(err("0 25 * * *"), "field 2 (hour): 25 is outside 0..=23");
        assert_eq!(
            err("*/0 * * * *"),
            "field 1 (minute): \"*/0\": a step must be at least 1"
        );
        assert_eq!(
            err("0 0 * FOO *"),
            "field 4 (month): \"FOO\" is not a number or a name JAN..DEC"
        );
        assert_eq!(
            err("0 0 5-1 * *"),
            "field 3 (day-of-month): range \"5-1\" runs backwards"
        );
        assert!(err("* * * *").contains("expected 5 fields"));
        assert_eq!(err("0 0 30 2 *"), "\"0 0 30 2 *\" never matches a date");
        assert_eq!(
            err("0 0 1,,2 * *"),
            "field 3 (day-of-month): \"1,,2\" has an empty list item"
        );
        // A huge step is one value, not an overflow.
        assert_eq!(
            Cron::parse("5/4294967295 * * * *").unwrap(),
            Cron::parse("5 * * * *").unwrap()
        );
        assert!(err("*/99999999999 * * * *").contains("is not a number"));
    }
}
