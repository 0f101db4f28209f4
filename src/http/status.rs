//! `/api/status`, `/metrics` and the status page: three views of the same numbers.

use std::sync::atomic::Ordering;

use serde_json::{json, Value};

use super::AppState;
use crate::sources::opcua::status::State;
use crate::sources::opcua::DeviceStatus;
use crate::telemetry::prometheus::{Kind, Page};

/// The `/api/status` document.
pub fn status(state: &AppState) -> Value {
    let queue = serde_json::to_value(state.push.status()).unwrap_or_default();
    let counters = state.push.counters();
    let uplink = match &state.uplink {
        Some(u) => json!({
            "enabled": true,
            "healthy": u.healthy.load(Ordering::Relaxed),
            "sent_total": counters.sent_total.load(Ordering::Relaxed),
            "failures_total": u.failures_total.load(Ordering::Relaxed),
            "dead_lettered_total": counters.dead_lettered_total.load(Ordering::Relaxed),
            "dead_letter_rows": counters.dead_rows.load(Ordering::Relaxed),
            "dead_trimmed_total": counters.dead_trimmed_total.load(Ordering::Relaxed),
            "last_error": *u.last_error.lock().unwrap_or_else(|e| e.into_inner()),
        }),
        None => json!({
            "enabled": false,
            "sent_total": counters.sent_total.load(Ordering::Relaxed),
            "dead_lettered_total": counters.dead_lettered_total.load(Ordering::Relaxed),
            "dead_letter_rows": counters.dead_rows.load(Ordering::Relaxed),
            "last_error": null,
        }),
    };
    let q = state.push.status();
    let sources: Vec<Value> = state
        .ingest
        .iter()
        .map(|s| {
            json!({
                "name": s.source(),
                "received": s.stats.received.load(Ordering::Relaxed),
                "stored": s.stats.stored.load(Ordering::Relaxed),
                "refused": s.stats.refused.load(Ordering::Relaxed),
                "rejected": s.stats.rejected.load(Ordering::Relaxed),
                "unauthorized": s.stats.unauthorized.load(Ordering::Relaxed),
            })
        })
        .collect();
    let webhooks: Vec<Value> = state
        .webhooks
        .iter()
        .map(|w| {
            json!({
                "name": w.name(),
                "source": w.source(),
                "received": w.stats.received.load(Ordering::Relaxed),
                "accepted": w.stats.accepted.load(Ordering::Relaxed),
                "backpressured": w.stats.backpressured.load(Ordering::Relaxed),
                "rejected_signature": w.stats.rejected_signature.load(Ordering::Relaxed),
                "rejected_body": w.stats.rejected_body.load(Ordering::Relaxed),
                "failed": w.stats.failed.load(Ordering::Relaxed),
            })
        })
        .collect();
    let mut sinks = vec![json!({
        "name": "push",
        "dropped": q.evicted_total + q.dropped_total,
        "blocked": q.blocked_total,
        "queue_rows": q.rows,
        "durable": q.durable,
    })];
    let storage = state.storage.as_ref().map(|s| {
        let st = s.status();
        sinks.push(json!({
            "name": "storage",
            "dropped": st.evicted_total + st.dropped_total,
            "blocked": st.blocked_total,
            "queue_rows": st.rows,
            "durable": true,
        }));
        serde_json::to_value(st).unwrap_or_default()
    });
    json!({
        "connector": {
            "name": state.name,
            "version": crate::VERSION,
            "uptime_secs": state.started.elapsed().as_secs(),
        },
        "push_queue": queue,
        "push_status": queue,
        "uplink": uplink,
        "sinks": sinks,
        "storage": storage,
        "dead_letters": state.engine.dead_letters().counts(),
        "sources": sources,
        "devices": state.opcua.iter().map(|d| d.to_json()).collect::<Vec<Value>>(),
        "engine": {"stats": state.engine.stats.to_json(), "webhooks": webhooks},
    })
}

/// The `/metrics` page.
pub fn metrics(state: &AppState) -> String {
    let q = state.push.status();
    let c = state.push.counters();
    let mut p = Page::default();
    p.single(
        "opex_connector_push_queue_gaps_total",
        Kind::Counter,
        "Rows evicted from the push queue at its quota (evict_oldest): data gaps.",
        q.evicted_total as f64,
    );
    p.single(
        "opex_connector_push_queue_blocked_total",
        Kind::Counter,
        "Records refused at the push queue quota (block); their sources retry.",
        q.blocked_total as f64,
    );
    p.single(
        "opex_connector_push_queue_dropped_total",
        Kind::Counter,
        "Records refused because the push writer channel was full.",
        q.dropped_total as f64,
    );
    p.single(
        "opex_connector_push_queue_write_errors_total",
        Kind::Counter,
        "Failed push queue write transactions.",
        q.write_errors_total as f64,
    );
    p.single(
        "opex_connector_push_queue_rows",
        Kind::Gauge,
        "Rows in the push queue.",
        q.rows as f64,
    );
    p.single(
        "opex_connector_push_queue_used_bytes",
        Kind::Gauge,
        "Logical bytes in the push queue.",
        q.used_bytes as f64,
    );
    p.single(
        "opex_connector_push_queue_quota_bytes",
        Kind::Gauge,
        "Quota of the push queue in logical bytes.",
        q.quota_bytes as f64,
    );
    p.single(
        "opex_connector_push_queue_level",
        Kind::Gauge,
        "Alert level of the push queue: 0 ok, 1 high, 2 full.",
        f64::from(q.level.as_number()),
    );
    p.single(
        "opex_connector_uplink_sent_total",
        Kind::Counter,
        "Records the uplink delivered.",
        c.sent_total.load(Ordering::Relaxed) as f64,
    );
    p.single(
        "opex_connector_push_dead_letters_total",
        Kind::Counter,
        "Records the uplink receiver refused for good, moved to push dead letters.",
        c.dead_lettered_total.load(Ordering::Relaxed) as f64,
    );
    p.single(
        "opex_connector_push_queue_commits_total",
        Kind::Counter,
        "Push queue write transactions committed (each synced to disk).",
        c.commits_total.load(Ordering::Relaxed) as f64,
    );
    p.single(
        "opex_connector_push_queue_committed_commands_total",
        Kind::Counter,
        "Commands applied by those transactions (group commit: their ratio is the mean group).",
        c.committed_commands_total.load(Ordering::Relaxed) as f64,
    );
    if let Some(u) = &state.uplink {
        p.single(
            "opex_connector_uplink_failures_total",
            Kind::Counter,
            "Failed uplink attempts (each retried).",
            u.failures_total.load(Ordering::Relaxed) as f64,
        );
    }
    let names: Vec<String> = state
        .ingest
        .iter()
        .map(|s| s.source().to_string())
        .collect();
    for (metric, help, pick) in [
        (
            "opex_connector_ingest_stored_total",
            "Ingest records stored (200).",
            0,
        ),
        (
            "opex_connector_ingest_refused_total",
            "Ingest records refused and told to retry (503).",
            1,
        ),
        (
            "opex_connector_ingest_rejected_total",
            "Ingest requests rejected as bad input.",
            2,
        ),
    ] {
        let samples: Vec<(Vec<(&str, &str)>, f64)> = state
            .ingest
            .iter()
            .zip(&names)
            .map(|(s, name)| {
                let v = match pick {
                    0 => &s.stats.stored,
                    1 => &s.stats.refused,
                    _ => &s.stats.rejected,
                };
                (
                    vec![("source", name.as_str())],
                    v.load(Ordering::Relaxed) as f64,
                )
            })
            .collect();
        let refs: Vec<(&[(&str, &str)], f64)> =
            samples.iter().map(|(l, v)| (l.as_slice(), *v)).collect();
        p.family(metric, Kind::Counter, help, &refs);
    }
    let e = &state.engine.stats;
    let dlq = state.engine.dead_letters().counts();
    p.single(
        "opex_connector_dead_letters_open",
        Kind::Gauge,
        "Open entries of the pipeline dead-letter queue.",
        dlq.open as f64,
    );
    for (metric, help, v) in [
        (
            "opex_connector_engine_unrouted_total",
            "Records no flow takes (acknowledged by design).",
            &e.unrouted,
        ),
        (
            "opex_connector_engine_dead_lettered_total",
            "Records parked in the pipeline dead-letter queue.",
            &e.dead_lettered,
        ),
        (
            "opex_connector_engine_filtered_total",
            "Records a filter node stopped, by design.",
            &e.filtered,
        ),
        (
            "opex_connector_engine_backpressured_total",
            "Records refused by a full sink under block.",
            &e.backpressured,
        ),
        (
            "opex_connector_engine_failed_total",
            "Records a sink failed to store; their sources retry.",
            &e.failed,
        ),
    ] {
        p.single(
            metric,
            Kind::Counter,
            help,
            v.load(Ordering::Relaxed) as f64,
        );
    }
    devices(&mut p, state);
    p.single(
        "opex_connector_http_connections_total",
        Kind::Counter,
        "HTTP connections accepted.",
        state.stats.connections_total.load(Ordering::Relaxed) as f64,
    );
    p.single(
        "opex_connector_http_at_capacity_total",
        Kind::Counter,
        "Times the HTTP server had max_connections open and new ones waited.",
        state.stats.at_capacity_total.load(Ordering::Relaxed) as f64,
    );
    p.single(
        "opex_connector_uptime_seconds",
        Kind::Gauge,
        "Seconds since start.",
        state.started.elapsed().as_secs_f64(),
    );
    p.finish()
}

/// The per-device families: one sample per device, labelled `device` and `protocol`.
fn devices(p: &mut Page, state: &AppState) {
    type Pick = fn(&DeviceStatus) -> f64;
    let families: [(&str, Kind, &str, Pick); 9] = [
        (
            "opex_connector_device_connected",
            Kind::Gauge,
            "1 while the device's connection or session is up.",
            |d| f64::from(u8::from(d.state() == State::Connected)),
        ),
        (
            "opex_connector_device_polls_total",
            Kind::Counter,
            "Group polls and subscription notifications turned into records.",
            |d| d.polls_total.load(Ordering::Relaxed) as f64,
        ),
        (
            "opex_connector_device_errors_total",
            Kind::Counter,
            "Failed reads, connects and subscription calls.",
            |d| d.errors_total.load(Ordering::Relaxed) as f64,
        ),
        (
            "opex_connector_device_bad_points_total",
            Kind::Counter,
            "Points read with a bad quality (unknown node, bad status).",
            |d| d.bad_points_total.load(Ordering::Relaxed) as f64,
        ),
        (
            "opex_connector_device_reconnects_total",
            Kind::Counter,
            "Sessions re-established after a lost connection.",
            |d| d.reconnects_total.load(Ordering::Relaxed) as f64,
        ),
        (
            "opex_connector_device_watchdog_resets_total",
            Kind::Counter,
            "Sessions dropped by the no-data watchdog.",
            |d| d.watchdog_resets_total.load(Ordering::Relaxed) as f64,
        ),
        (
            "opex_connector_device_samples_lost_total",
            Kind::Counter,
            "Samples dropped after the poller's hold (also in backpressure_lost).",
            |d| {
                (d.samples_lost_total.load(Ordering::Relaxed)
                    + d.notifications_dropped_total.load(Ordering::Relaxed)) as f64
            },
        ),
        (
            "opex_connector_device_last_poll_timestamp_seconds",
            Kind::Gauge,
            "Unix time of the device's last poll.",
            |d| d.last_poll_ms() as f64 / 1000.0,
        ),
        (
            "opex_connector_device_poll_duration_seconds",
            Kind::Gauge,
            "Duration of the device's last poll.",
            |d| d.last_poll_duration().as_secs_f64(),
        ),
    ];
    for (name, kind, help, pick) in families {
        let samples: Vec<(Vec<(&str, &str)>, f64)> = state
            .opcua
            .iter()
            .map(|d| {
                (
                    vec![("device", d.name.as_str()), ("protocol", "opcua")],
                    pick(d),
                )
            })
            .collect();
        let refs: Vec<(&[(&str, &str)], f64)> =
            samples.iter().map(|(l, v)| (l.as_slice(), *v)).collect();
        p.family(name, kind, help, &refs);
    }
    let samples: Vec<(Vec<(&str, &str)>, f64)> = state
        .opcua
        .iter()
        .flat_map(|d| {
            let (p50, p99) = d.jitter_percentiles();
            [("0.5", p50), ("0.99", p99)].map(|(q, v)| {
                (
                    vec![
                        ("device", d.name.as_str()),
                        ("protocol", "opcua"),
                        ("quantile", q),
                    ],
                    v.as_secs_f64(),
                )
            })
        })
        .collect();
    let refs: Vec<(&[(&str, &str)], f64)> =
        samples.iter().map(|(l, v)| (l.as_slice(), *v)).collect();
    p.family(
        "opex_connector_device_poll_start_jitter_seconds",
        Kind::Gauge,
        "How late polls started against their schedule, over the last 1024 polls.",
        &refs,
    );
}

/// A small self-contained page for a technician's browser (no scripts, no external assets).
pub fn page(state: &AppState) -> String {
    let q = state.push.status();
    let esc = |s: &str| {
        s.replace('&', "&amp;")
            .replace('<', "&lt;")
            .replace('>', "&gt;")
            .replace('"', "&quot;")
    };
    let mut sources = String::new();
    for s in &state.ingest {
        sources.push_str(&format!(
            "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
            esc(s.source()),
            s.stats.stored.load(Ordering::Relaxed),
            s.stats.refused.load(Ordering::Relaxed),
            s.stats.rejected.load(Ordering::Relaxed),
        ));
    }
    let uplink = match &state.uplink {
        None => "not configured".to_string(),
        Some(u) => match &*u.last_error.lock().unwrap_or_else(|e| e.into_inner()) {
            Some(e) => format!("failing: {}", esc(e)),
            None => "ok".to_string(),
        },
    };
    format!(
        r#"<!doctype html><html><head><meta charset="utf-8"><meta name="viewport" content="width=device-width,initial-scale=1">
<meta http-equiv="refresh" content="5"><title>{name} · opex-connector</title>
<style>body{{font:15px system-ui,sans-serif;margin:1em;max-width:48em}}table{{border-collapse:collapse}}td,th{{padding:.2em .6em;border-bottom:1px solid #ccc;text-align:left}}
.bar{{background:#eee;height:1em;width:20em}}.fill{{height:1em;background:{color}}}</style></head><body>
<h1>{name}</h1><p>opex-connector {version} · up {uptime} s · <a href="/api/status">status JSON</a> · <a href="/metrics">metrics</a></p>
<h2>Push queue</h2><div class="bar"><div class="fill" style="width:{fill_w}%"></div></div>
<p>{fill:.1} % of {quota} bytes · level <b>{level}</b> · on_full {on_full} · {rows} rows<br>
blocked {blocked} · evicted {evicted} · dropped {dropped} · durable {durable}</p>
<h2>Uplink</h2><p>{uplink}</p>
<h2>Ingest sources</h2><table><tr><th>source</th><th>stored</th><th>refused</th><th>rejected</th></tr>{sources}</table>
</body></html>"#,
        name = esc(&state.name),
        version = crate::VERSION,
        uptime = state.started.elapsed().as_secs(),
        color = match q.level {
            crate::alerts::Level::Ok => "#3a3",
            crate::alerts::Level::High => "#e90",
            crate::alerts::Level::Full => "#c22",
        },
        fill_w = q.fill_pct.min(100.0),
        fill = q.fill_pct,
        quota = q.quota_bytes,
        level = q.level.as_str(),
        on_full = q.on_full,
        rows = q.rows,
        blocked = q.blocked_total,
        evicted = q.evicted_total,
        dropped = q.dropped_total,
        durable = q.durable,
    )
}
