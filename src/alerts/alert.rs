//! One alert as every channel receives it, and its log line.
//!
//! JSON (`POST`ed by the webhook channel, published by the MQTT and NATS channels, listed in
//! `alerts` of `/api/status`):
//!
//! ```json
//! {"connector":"press-hall-2","queue":"push_queue","level":"full","severity":"critical",
//!  "message":"refusing new records","fill_pct":100.0,
//!  "counters":{"blocked_total":12,"evicted_total":0,"dropped_total":0},
//!  "time":"2026-11-29T14:05:00Z","repeat":false}
//! ```
//!
//! A queue alert names its `queue` and has `level` `ok`, `high` or `full`; a component alert
//! (a loss counter that grew) names its `component`, has `level` `critical` or `ok` and
//! `fill_pct` null. An outage alert (a problem of [`crate::health`] that lasted
//! `telemetry.alerts.after_secs`) names its `component` (`device press-1`, `sink uns`) and
//! its `kind` (`device_offline`, ...), carries the problem's `message` and `hint`, has
//! `level` `warning` (records kept), `critical` (records lost or refused) or `ok` (its
//! recovery notice) and `counters.for_secs`, how long it has lasted. `severity` is `info`
//! (recovery), `warning` (`high`, or an outage that keeps records) or `critical`.

use std::collections::BTreeMap;
use std::time::{SystemTime, UNIX_EPOCH};

use serde::Serialize;

use crate::admission::level::Level;

/// An alert.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Alert {
    /// `connector.name`.
    pub connector: String,
    /// The queue it is about (queue alerts).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub queue: Option<String>,
    /// The component it is about (component alerts).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub component: Option<String>,
    /// The kind of problem (outage alerts).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub kind: Option<&'static str>,
    /// `ok`, `high`, `full` (queues), `critical`, `ok` (components) or `warning`,
    /// `critical`, `ok` (outages).
    pub level: &'static str,
    /// `info`, `warning` or `critical`.
    pub severity: &'static str,
    /// What happens, in a few words.
    pub message: String,
    /// What to do about it (outage alerts, when the words cover it).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub hint: Option<String>,
    /// Fill of the queue in percent; null for a component.
    pub fill_pct: Option<f64>,
    /// The relevant running totals.
    pub counters: BTreeMap<&'static str, u64>,
    /// When it was raised, RFC 3339 UTC.
    pub time: String,
    /// True when it repeats a lasting `full` or `critical`.
    pub repeat: bool,
}

impl Alert {
    /// True for the recovery notice.
    pub fn is_ok(&self) -> bool {
        self.level == "ok"
    }

    /// The key of what it is about: `queue/<name>`, `component/<name>` or
    /// `problem/<component>/<kind>`.
    pub fn key(&self) -> String {
        if let (Some(c), Some(k)) = (&self.component, self.kind) {
            return format!("problem/{c}/{k}");
        }
        match (&self.queue, &self.component) {
            (Some(q), _) => format!("queue/{q}"),
            (None, Some(c)) => format!("component/{c}"),
            (None, None) => String::new(),
        }
    }

    /// The JSON text channels send.
    pub fn to_json(&self) -> Vec<u8> {
        // A struct of strings, numbers and a string-keyed map cannot fail to serialize.
        serde_json::to_vec(self).unwrap_or_default()
    }

    /// Logs it: `error` when critical, `warn` when high, `info` for a recovery.
    pub fn log(&self) {
        let counters: String = self
            .counters
            .iter()
            .map(|(k, v)| format!(" {k}={v}"))
            .collect();
        let line = match (&self.queue, &self.component) {
            (Some(queue), _) => format!(
                "alert: queue={queue} level={} message=\"{}\" fill_pct={} refused_or_evicted_total={} repeat={} connector={}",
                self.level,
                self.message,
                self.fill_pct.unwrap_or(0.0),
                self.counters.values().sum::<u64>(),
                self.repeat,
                self.connector
            ),
            (None, component) => format!(
                "alert: component={}{} level={} message=\"{}\"{}{counters} repeat={} connector={}",
                component.as_deref().unwrap_or(""),
                self.kind.map_or(String::new(), |k| format!(" kind={k}")),
                self.level,
                self.message,
                self.hint.as_ref().map_or(String::new(), |h| format!(" hint=\"{h}\"")),
                self.repeat,
                self.connector
            ),
        };
        match self.severity {
            "critical" => log::error!("{line}"),
            "warning" => log::warn!("{line}"),
            _ => log::info!("{line}"),
        }
    }
}

/// The message of a queue alert at `level` for a queue whose `on_full` is `on_full`.
pub fn queue_message(level: Level, on_full: &str) -> &'static str {
    match (level, on_full) {
        (Level::Full, "evict_oldest") => "evicting the oldest records, data gap",
        (Level::Full, _) => "refusing new records",
        (Level::High, _) => "the destination is slow or down",
        (Level::Ok, _) => "back below 80 %",
    }
}

/// The severity of a queue level.
pub fn severity(level: Level) -> &'static str {
    match level {
        Level::Ok => "info",
        Level::High => "warning",
        Level::Full => "critical",
    }
}

/// Now as RFC 3339 UTC with seconds, e.g. `2026-11-29T14:05:00Z`.
pub fn now_rfc3339() -> String {
    let secs = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    rfc3339(secs)
}

/// Unix seconds as RFC 3339 UTC (the civil-from-days algorithm of H. Hinnant).
pub fn rfc3339(unix_secs: u64) -> String {
    let days = (unix_secs / 86_400) as i64;
    let rem = unix_secs % 86_400;
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rfc3339_renders_known_instants() {
        assert_eq!(rfc3339(0), "1970-01-01T00:00:00Z");
        assert_eq!(rfc3339(951_782_400), "2000-02-29T00:00:00Z");
        assert_eq!(rfc3339(1_798_550_705), "2026-12-29T13:25:05Z");
    }

    #[test]
    fn full_messages_follow_on_full() {
        assert_eq!(queue_message(Level::Full, "block"), "refusing new records");
        assert_eq!(
            queue_message(Level::Full, "evict_oldest"),
            "evicting the oldest records, data gap"
        );
    }
}
