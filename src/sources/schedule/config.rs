//! `schedules:`: raw, validated without I/O.

use std::time::Duration;

use serde::Deserialize;
use serde_json::Value;

use super::cron::Cron;
use crate::config::checks::checked_name;
use crate::config::Problems;
use crate::time::parse_duration;

/// `schedules[]`
#[derive(Debug, Default, Deserialize)]
pub struct RawSchedule {
    /// The schedule's name; its ticks are records `source: schedule/<name>` (letters,
    /// digits, `-`, `_`).
    pub name: Option<String>,
    /// Tick at a fixed interval from the start, e.g. `30s`, `5m`, `1h` (at least 1s).
    /// Give `every` or `cron`, not both.
    pub every: Option<String>,
    /// Tick on a five-field cron expression, `minute hour day-of-month month day-of-week`,
    /// evaluated in UTC, e.g. `*/5 * * * *` or `0 6 * * MON-FRI`.
    pub cron: Option<String>,
    /// The payload of every tick: a fixed JSON object. Default `{}`.
    pub payload: Option<Value>,
}

/// When a schedule ticks.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum When {
    /// Every interval, counted from the schedule's start.
    Every(Duration),
    /// On a cron expression (UTC); the text is kept for the API.
    Cron(String, Cron),
}

/// One schedule, validated.
#[derive(Debug, Clone, PartialEq)]
pub struct ScheduleConfig {
    /// Its name; records carry `schedule/<name>`.
    pub name: String,
    /// When it ticks.
    pub when: When,
    /// The payload of each tick.
    pub payload: Value,
}

/// Validates `schedules:`.
pub fn validate_schedules(
    raw: Option<&[RawSchedule]>,
    path: &str,
    p: &mut Problems,
) -> Vec<ScheduleConfig> {
    let mut out: Vec<ScheduleConfig> = Vec::new();
    for (i, s) in raw.unwrap_or_default().iter().enumerate() {
        let at = format!("{path}[{i}]");
        let name = checked_name(
            s.name.as_deref(),
            &at,
            |n| out.iter().any(|o| o.name == n),
            p,
        );
        let when = match (&s.every, &s.cron) {
            (Some(_), Some(_)) => {
                p.push(format!("{at}.every"), "give every or cron, not both");
                None
            }
            (None, None) => {
                p.push(format!("{at}.every"), "every or cron is required");
                None
            }
            (Some(every), None) => match parse_duration(every) {
                Ok(d) if d >= Duration::from_secs(1) => Some(When::Every(d)),
                Ok(_) => {
                    p.push(format!("{at}.every"), format!("{every:?} is under 1s"));
                    None
                }
                Err(e) => {
                    p.push(format!("{at}.every"), e);
                    None
                }
            },
            (None, Some(expr)) => match Cron::parse(expr) {
                Ok(c) => Some(When::Cron(expr.trim().to_string(), c)),
                Err(e) => {
                    p.push(format!("{at}.cron"), e);
                    None
                }
            },
        };
        let payload = match &s.payload {
            None => Value::Object(Default::default()),
            Some(v @ Value::Object(_)) => v.clone(),
            Some(_) => {
                p.push(format!("{at}.payload"), "must be an object");
                continue;
            }
        };
        if let (Some(name), Some(when)) = (name, when) {
            out.push(ScheduleConfig {
                name,
                when,
                payload,
            });
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_problem_of_every_schedule_is_reported() {
        let raw: Vec<RawSchedule> = serde_saphyr::from_str(
            "- { name: a, every: 30s, payload: { job: purge } }\n- { name: a, every: '10' }\n- { name: c, cron: '0 24 * * *' }\n- { name: d }\n- { name: e, every: 1m, cron: '* * * * *' }\n- { name: f, every: 100ms, payload: [1] }\n",
        )
        .unwrap();
        let mut p = Problems::default();
        let out = validate_schedules(Some(&raw), "schedules", &mut p);
        let got: Vec<String> = p.0.iter().map(|x| x.to_string()).collect();
        assert_eq!(
            got,
            vec![
                "schedules[1].name: \"a\" is used twice",
                "schedules[1].every: \"10\": expected a whole number and a unit (ms, s, m, h, d), e.g. 30s",
                "schedules[2].cron: field 2 (hour): 24 is outside 0..=23",
                "schedules[3].every: every or cron is required",
                "schedules[4].every: give every or cron, not both",
                "schedules[5].every: \"100ms\" is under 1s",
                "schedules[5].payload: must be an object",
            ]
        );
        assert_eq!(out.len(), 1);
        assert_eq!(out[0].when, When::Every(Duration::from_secs(30)));
        assert_eq!(out[0].payload["job"], "purge");
    }
}
