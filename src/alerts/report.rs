//! The hub's state as `/api/status` (`queues`, `alerts`, `alert_channels`) and `/metrics`
//! (`opex_connector_queue_level`, the channels' counters) show it.

use std::sync::atomic::Ordering;

use serde_json::{json, Value};

use super::alert::Alert;
use super::hub::Hub;
use crate::admission::level::Level;
use crate::telemetry::prometheus::{Kind, Page};

impl Hub {
    /// The open (non-`ok`) alerts, by queue then component name.
    pub fn open_alerts(&self) -> Vec<Alert> {
        let open = self.open.lock().unwrap_or_else(|e| e.into_inner());
        open.values().cloned().collect()
    }

    /// `queues` of `/api/status`: one object per bounded queue.
    pub fn queues_json(&self) -> Vec<Value> {
        self.queue_reports()
            .iter()
            .map(|q| {
                let r = &q.reading;
                let fill = r.fill_pct();
                json!({
                    "name": q.name,
                    "kind": r.kind.as_str(),
                    "on_full": r.on_full,
                    "quota": r.quota,
                    "quota_unit": r.quota_unit,
                    "used": r.used,
                    "fill_pct": fill,
                    "level": q.tracker.peek(fill, r.losses_total()),
                    "blocked_total": r.blocked_total,
                    "evicted_total": r.evicted_total,
                    "dropped_total": r.dropped_total,
                })
            })
            .collect()
    }

    /// `alert_channels` of `/api/status`, the log first.
    pub fn channels_json(&self) -> Vec<Value> {
        let log = json!({
            "name": "log",
            "sent_total": self.log_total.load(Ordering::Relaxed),
            "failed_total": 0,
            "dropped_total": 0,
            "last_error": null,
            "failing": false,
        });
        std::iter::once(log)
            .chain(
                self.channels
                    .read()
                    .unwrap_or_else(|e| e.into_inner())
                    .iter()
                    .map(|c| c.stats.to_json(&c.name)),
            )
            .collect()
    }

    /// The queue levels and the channels' counters on `/metrics`.
    pub fn write_metrics(&self, p: &mut Page) {
        let levels: Vec<(String, f64)> = self
            .queue_reports()
            .iter()
            .map(|q| {
                let r = &q.reading;
                let level: Level = q.tracker.peek(r.fill_pct(), r.losses_total());
                (q.name.clone(), f64::from(level.as_number()))
            })
            .collect();
        let labels: Vec<[(&str, &str); 1]> = levels
            .iter()
            .map(|(n, _)| [("queue", n.as_str())])
            .collect();
        let samples: Vec<(&[(&str, &str)], f64)> = labels
            .iter()
            .zip(&levels)
            .map(|(l, (_, v))| (l.as_slice(), *v))
            .collect();
        p.family(
            "opex_connector_queue_level",
            Kind::Gauge,
            "Alert level of each bounded queue: 0 ok, 1 high (80 % or more), 2 full (at the quota, or refused or evicted since the last check).",
            &samples,
        );
        p.single(
            "opex_connector_alerts_open",
            Kind::Gauge,
            "Queues and components with an open (not ok) alert.",
            self.open.lock().unwrap_or_else(|e| e.into_inner()).len() as f64,
        );
        let channels: Vec<Value> = self.channels_json();
        let names: Vec<[(&str, &str); 1]> = channels
            .iter()
            .map(|c| [("channel", c["name"].as_str().unwrap_or(""))])
            .collect();
        for (metric, field, help) in [
            (
                "opex_connector_alert_channel_sent_total",
                "sent_total",
                "Alerts a channel delivered (the log: alerts written).",
            ),
            (
                "opex_connector_alert_channel_failed_total",
                "failed_total",
                "Alerts a channel gave up after its attempts.",
            ),
            (
                "opex_connector_alert_channel_dropped_total",
                "dropped_total",
                "Alerts dropped because a channel's queue was full.",
            ),
        ] {
            let samples: Vec<(&[(&str, &str)], f64)> = names
                .iter()
                .zip(&channels)
                .map(|(l, c)| (l.as_slice(), c[field].as_f64().unwrap_or(0.0)))
                .collect();
            p.family(metric, Kind::Counter, help, &samples);
        }
    }
}
