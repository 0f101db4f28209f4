//! Alerts on outages: each problem of the health model ([`crate::health`]) is alerted once it
//! has lasted `telemetry.alerts.after_secs`, repeated every 10 minutes while it lasts (as a
//! `full` queue is), and followed by a recovery notice when it clears. A problem that clears
//! before `after_secs` is never alerted, so a device that reconnects in a few seconds stays
//! quiet. A queue at `high` or `full` is not alerted here: its own state machine alerts it
//! (the delivery document's queue alerts), so it is never alerted twice.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::Duration;

use super::alert::{now_rfc3339, Alert};
use super::hub::Hub;
use crate::admission::level::REPEAT_FULL;
use crate::health::{Health, Problem};

/// Problem kinds the queue alerts already cover.
const QUEUE_KINDS: [&str; 2] = ["queue_high", "queue_full"];

/// The outages alerted and not yet recovered: by problem key, the problem and when it was
/// last sent (Unix seconds).
#[derive(Default)]
pub struct Outages {
    /// `after`, in seconds (a reload changes it).
    after_secs: AtomicU64,
    sent: Mutex<BTreeMap<String, (Problem, u64)>>,
}

impl Outages {
    /// Problems are alerted once they have lasted `after`.
    pub fn new(after: Duration) -> Self {
        Self {
            after_secs: AtomicU64::new(after.as_secs()),
            sent: Mutex::default(),
        }
    }

    /// From now on, problems are alerted once they have lasted `after`.
    pub fn set_after(&self, after: Duration) {
        self.after_secs.store(after.as_secs(), Ordering::Relaxed);
    }
}

impl Hub {
    /// Alerts the problems of `health` that lasted `after_secs` (again every 10 minutes), and
    /// the recovery of those alerted that are gone; returns the alerts raised (already sent).
    pub fn check_outages(&self, health: &Health) -> Vec<Alert> {
        let now = health.at;
        let mut raised = Vec::new();
        let mut sent = self.outages.sent.lock().unwrap_or_else(|e| e.into_inner());
        let open: BTreeMap<String, &Problem> = health
            .problems
            .iter()
            .filter(|p| !QUEUE_KINDS.contains(&p.finding.kind))
            .map(|p| (p.finding.key(), p))
            .collect();
        sent.retain(|key, (problem, _)| {
            if open.contains_key(key) {
                return true;
            }
            raised.push(self.outage_alert(problem, now, true, false));
            false
        });
        for (key, p) in open {
            if now.saturating_sub(p.since) < self.outages.after_secs.load(Ordering::Relaxed) {
                continue;
            }
            let repeat = match sent.get(&key) {
                None => false,
                Some((_, last)) if now.saturating_sub(*last) >= REPEAT_FULL.as_secs() => true,
                Some(_) => continue,
            };
            raised.push(self.outage_alert(p, now, false, repeat));
            sent.insert(key, (p.clone(), now));
        }
        drop(sent);
        for alert in &raised {
            self.raise(alert);
        }
        raised
    }

    fn outage_alert(&self, p: &Problem, now: u64, recovered: bool, repeat: bool) -> Alert {
        let f = &p.finding;
        let (level, severity, message) = match (recovered, f.losing) {
            (true, _) => ("ok", "info", format!("recovered: {}", f.message)),
            (false, true) => ("critical", "critical", f.message.clone()),
            (false, false) => ("warning", "warning", f.message.clone()),
        };
        Alert {
            connector: self.connector.clone(),
            queue: None,
            component: Some(f.component.clone()),
            kind: Some(f.kind),
            level,
            severity,
            message,
            hint: if recovered { None } else { f.hint.clone() },
            fill_pct: None,
            counters: BTreeMap::from([("for_secs", now.saturating_sub(p.since))]),
            time: now_rfc3339(),
            repeat,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::health::{Board, Finding};

    fn offline() -> Finding {
        Finding {
            component: "device press-1".into(),
            kind: "device_offline",
            message: "not connected (backoff): connection refused".into(),
            hint: Some("check the port".into()),
            losing: false,
        }
    }

    #[test]
    fn an_outage_is_alerted_after_after_secs_repeated_every_ten_minutes_and_recovered() {
        let hub = Hub::new("c", Duration::from_secs(5), Vec::new())
            .with_outages_after(Duration::from_secs(30));
        let board = Board::default();
        assert!(hub
            .check_outages(&board.assess(vec![offline()], 1000))
            .is_empty());
        assert!(hub
            .check_outages(&board.assess(vec![offline()], 1029))
            .is_empty());
        let first = hub.check_outages(&board.assess(vec![offline()], 1030));
        assert_eq!(first.len(), 1);
        assert_eq!(first[0].level, "warning");
        assert_eq!(first[0].kind, Some("device_offline"));
        assert_eq!(first[0].hint.as_deref(), Some("check the port"));
        assert!(!first[0].repeat);
        assert_eq!(hub.open_alerts().len(), 1);
        assert!(hub
            .check_outages(&board.assess(vec![offline()], 1100))
            .is_empty());
        let again = hub.check_outages(&board.assess(vec![offline()], 1630));
        assert!(again[0].repeat);
        let ok = hub.check_outages(&board.assess(Vec::new(), 1640));
        assert_eq!(ok[0].level, "ok");
        assert_eq!(
            ok[0].message,
            "recovered: not connected (backoff): connection refused"
        );
        assert!(hub.open_alerts().is_empty());
    }

    #[test]
    fn a_full_queue_is_left_to_the_queue_alerts() {
        let hub = Hub::new("c", Duration::from_secs(5), Vec::new())
            .with_outages_after(Duration::from_secs(1));
        let board = Board::default();
        let full = Finding {
            component: "queue push_queue".into(),
            kind: "queue_full",
            message: "100 % full".into(),
            hint: None,
            losing: true,
        };
        board.assess(vec![full.clone()], 1000);
        assert!(hub
            .check_outages(&board.assess(vec![full], 1100))
            .is_empty());
    }

    #[test]
    fn an_outage_shorter_than_after_secs_is_never_alerted() {
        let hub = Hub::new("c", Duration::from_secs(5), Vec::new())
            .with_outages_after(Duration::from_secs(30));
        let board = Board::default();
        assert!(hub
            .check_outages(&board.assess(vec![offline()], 1000))
            .is_empty());
        assert!(hub
            .check_outages(&board.assess(Vec::new(), 1010))
            .is_empty());
    }
}
