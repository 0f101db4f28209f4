//! `/api/status` and `/metrics`: two views of the same numbers (the status page draws the
//! first).

use std::sync::atomic::Ordering;

use serde_json::{json, Value};

use super::AppState;
use crate::engine::SinkHandle;
use crate::sources::opcua::status::State;
use crate::sources::opcua::DeviceStatus;
use crate::telemetry::prometheus::{Kind, Page};

/// True while the connector does its job: the push queue's writer takes records. Over-the-air
/// updates wait for it before keeping a new version; the systemd watchdog is fed only while it
/// holds.
pub fn healthy(state: &AppState) -> bool {
    state.push.accepting()
}

/// The schedules' entries: `schedules` of `/api/status` and of `GET /api/schedules`.
pub fn schedules(state: &AppState) -> Vec<Value> {
    state.schedules.iter().map(|s| s.status()).collect()
}

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
    let mut sources: Vec<Value> = state
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
    sources.extend(state.nats_sources.iter().map(|s| s.status()));
    sources.extend(state.mqtt_sources.iter().map(|s| s.status()));
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
    // The database sinks: memory backlogs, said plainly.
    let mut databases = serde_json::Map::new();
    for sink in state.engine.sinks().iter() {
        let st = match sink {
            SinkHandle::ClickHouse(c) => c.status(),
            SinkHandle::Postgres(p) => p.status(),
            _ => continue,
        };
        sinks.push(json!({
            "name": sink.name(),
            "dropped": st.dropped_total + st.lost_at_stop_total,
            "blocked": st.blocked_total,
            "queue_rows": st.backlog_rows,
            "durable": false,
            "backlog": st.backlog,
            "note": st.note,
        }));
        databases.insert(
            sink.name().to_string(),
            serde_json::to_value(st).unwrap_or_default(),
        );
    }
    if let Some(n) = &state.nats_sink {
        sinks.push(n.status());
    }
    if let Some(m) = &state.mqtt_sink {
        sinks.push(m.status());
    }
    json!({
        "connector": {
            "name": state.name,
            "version": crate::VERSION,
            "previous_version": state.previous_version,
            "healthy": healthy(state),
            "uptime_secs": state.started.elapsed().as_secs(),
            "disk_free_bytes": disk_free_bytes(&state.data_dir),
        },
        "live": live(state),
        "push_queue": queue,
        "push_status": queue,
        "uplink": uplink,
        "sinks": sinks,
        "storage": storage,
        "clickhouse": databases.remove("clickhouse"),
        "postgres": databases.remove("postgres"),
        "dead_letters": state.engine.dead_letters().counts(),
        "sources": sources,
        "devices": state.devices.iter().map(|d| d.to_json()).chain(state.opcua.iter().map(|d| d.to_json())).collect::<Vec<Value>>(),
        "engine": {"stats": state.engine.stats.to_json(), "webhooks": webhooks},
        "queues": state.alerts.queues_json(),
        "alerts": state.alerts.open_alerts(),
        "alert_channels": state.alerts.channels_json(),
        "schedules": schedules(state),
        "backfills": state.backfills.iter().map(|b| b.status()).collect::<Vec<Value>>(),
    })
}

/// Bytes an unprivileged writer may still use on the data dir's file system (`None` when
/// `statvfs` fails).
pub fn disk_free_bytes(dir: &std::path::Path) -> Option<u64> {
    let st = rustix::fs::statvfs(dir).ok()?;
    Some(st.f_bavail.saturating_mul(st.f_frsize))
}

/// The live view's figures.
fn live(state: &AppState) -> Value {
    let hub = state.engine.hub();
    json!({
        "clients": hub.clients(),
        "max_clients": crate::hub::MAX_CLIENTS,
        "capacity": crate::hub::CAPACITY,
        "published_total": hub.stats.published_total.load(Ordering::Relaxed),
        "skipped_total": hub.stats.skipped_total.load(Ordering::Relaxed),
        "refused_clients_total": hub.stats.refused_clients_total.load(Ordering::Relaxed),
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
    state.alerts.write_metrics(&mut p);
    database_metrics(state, &mut p);
    feed_metrics(state, &mut p);
    crate::sources::modbus::status::write_metrics(&state.devices, &mut p);
    messaging_metrics(state, &mut p);
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
        "opex_connector_http_host_refused_total",
        Kind::Counter,
        "Requests refused for their Host: not one of the connector's (421), missing or malformed (400).",
        state.stats.host_refused_total.load(Ordering::Relaxed) as f64,
    );
    let hub = state.engine.hub();
    p.single(
        "opex_connector_live_skipped_total",
        Kind::Counter,
        "Live view messages that lagging WebSocket clients skipped (the view only, no data lost).",
        hub.stats.skipped_total.load(Ordering::Relaxed) as f64,
    );
    p.single(
        "opex_connector_live_clients",
        Kind::Gauge,
        "WebSocket clients of the live view.",
        hub.clients() as f64,
    );
    p.single(
        "opex_connector_live_refused_clients_total",
        Kind::Counter,
        "Live view clients refused because the most were connected.",
        hub.stats.refused_clients_total.load(Ordering::Relaxed) as f64,
    );
    if let Some(free) = disk_free_bytes(&state.data_dir) {
        p.single(
            "opex_connector_disk_free_bytes",
            Kind::Gauge,
            "Free bytes on the data dir's file system.",
            free as f64,
        );
    }
    p.single(
        "opex_connector_uptime_seconds",
        Kind::Gauge,
        "Seconds since start.",
        state.started.elapsed().as_secs_f64(),
    );
    p.finish()
}

/// The preprocess stage, the schedules and the backfills.
fn feed_metrics(state: &AppState, p: &mut Page) {
    let pre = state.push.preprocess();
    let load =
        |c: Option<&std::sync::atomic::AtomicU64>| c.map_or(0, |c| c.load(Ordering::Relaxed));
    p.single(
        "opex_connector_push_suppressed_total",
        Kind::Counter,
        "Values the preprocess stage kept out of the push queue (deadband, aggregation), by design.",
        load(pre.map(|x| &x.suppressed_total)) as f64,
    );
    p.single(
        "opex_connector_push_aggregates_total",
        Kind::Counter,
        "Window results the preprocess stage sent in place of values.",
        load(pre.map(|x| &x.aggregates_total)) as f64,
    );
    type PickS = fn(&crate::sources::schedule::ScheduleStats) -> &std::sync::atomic::AtomicU64;
    let families: [(&str, &str, PickS); 3] = [
        (
            "opex_connector_schedule_ticks_total",
            "Schedule ticks offered.",
            |s| &s.ticks_total,
        ),
        (
            "opex_connector_schedule_backpressured_total",
            "Schedule ticks a full sink refused: lost, ticks are not replayed.",
            |s| &s.backpressured_total,
        ),
        (
            "opex_connector_schedule_missed_total",
            "Schedule ticks not fired because the schedule was late for them.",
            |s| &s.missed_total,
        ),
    ];
    for (name, help, pick) in families {
        let samples: Vec<(Vec<(&str, &str)>, f64)> = state
            .schedules
            .iter()
            .map(|s| {
                (
                    vec![("source", s.source())],
                    pick(&s.stats).load(Ordering::Relaxed) as f64,
                )
            })
            .collect();
        let refs: Vec<(&[(&str, &str)], f64)> =
            samples.iter().map(|(l, v)| (l.as_slice(), *v)).collect();
        p.family(name, Kind::Counter, help, &refs);
    }
    type PickB = fn(&crate::sources::backfill::BackfillStats) -> &std::sync::atomic::AtomicU64;
    let families: [(&str, &str, PickB); 2] = [
        (
            "opex_connector_backfill_acked_total",
            "Backfill records acknowledged since start.",
            |s| &s.acked_total,
        ),
        (
            "opex_connector_backfill_retries_total",
            "Backfill offers refused or failed, waited out and retried.",
            |s| &s.retries_total,
        ),
    ];
    for (name, help, pick) in families {
        let samples: Vec<(Vec<(&str, &str)>, f64)> = state
            .backfills
            .iter()
            .map(|b| {
                (
                    vec![("source", b.source())],
                    pick(&b.stats).load(Ordering::Relaxed) as f64,
                )
            })
            .collect();
        let refs: Vec<(&[(&str, &str)], f64)> =
            samples.iter().map(|(l, v)| (l.as_slice(), *v)).collect();
        p.family(name, Kind::Counter, help, &refs);
    }
}

/// The database sinks' families, labelled `sink="clickhouse"` / `sink="postgres"`.
fn database_metrics(state: &AppState, p: &mut Page) {
    let list: Vec<(&'static str, crate::sinks::backlog::BacklogStatus)> = state
        .engine
        .sinks()
        .iter()
        .filter_map(|s| match s {
            SinkHandle::ClickHouse(c) => Some((s.name(), c.status())),
            SinkHandle::Postgres(pg) => Some((s.name(), pg.status())),
            _ => None,
        })
        .collect();
    if list.is_empty() {
        return;
    }
    type Pick = fn(&crate::sinks::backlog::BacklogStatus) -> u64;
    let families: [(&str, Kind, &str, Pick); 6] = [
        (
            "opex_connector_sink_backlog_rows",
            Kind::Gauge,
            "Rows in a database sink's memory backlog (lost if the process crashes).",
            |s| s.backlog_rows,
        ),
        (
            "opex_connector_sink_backlog_max_rows",
            Kind::Gauge,
            "Bound of a database sink's memory backlog in rows.",
            |s| s.max_backlog_rows,
        ),
        (
            "opex_connector_sink_inserted_rows_total",
            Kind::Counter,
            "Rows a database confirmed.",
            |s| s.inserted_total,
        ),
        (
            "opex_connector_sink_insert_failures_total",
            Kind::Counter,
            "Failed inserts of a database sink (each retried).",
            |s| s.insert_failures_total,
        ),
        (
            "opex_connector_sink_dead_lettered_rows_total",
            Kind::Counter,
            "Rows a database refused for good, parked in the dead-letter queue.",
            |s| s.dead_lettered_total,
        ),
        (
            "opex_connector_sink_lost_at_stop_total",
            Kind::Counter,
            "Rows a clean stop could not insert.",
            |s| s.lost_at_stop_total,
        ),
    ];
    for (name, kind, help, pick) in families {
        let labels: Vec<[(&str, &str); 1]> = list.iter().map(|(n, _)| [("sink", *n)]).collect();
        let samples: Vec<(&[(&str, &str)], f64)> = list
            .iter()
            .zip(&labels)
            .map(|((_, st), l)| (l.as_slice(), pick(st) as f64))
            .collect();
        p.family(name, kind, help, &samples);
    }
}

/// Counters of the NATS and MQTT sources and sinks.
fn messaging_metrics(state: &AppState, p: &mut Page) {
    let names: Vec<String> = state
        .nats_sources
        .iter()
        .map(|s| s.source().to_string())
        .collect();
    type Pick = fn(&crate::sources::nats::NatsSourceStats) -> &std::sync::atomic::AtomicU64;
    let nats: [(&str, &str, Pick); 5] = [
        (
            "opex_connector_nats_acked_total",
            "JetStream messages acked after their record was stored.",
            |s| &s.acked,
        ),
        (
            "opex_connector_nats_refused_total",
            "JetStream messages nak'd with backoff because a sink refused before any node ran.",
            |s| &s.refused,
        ),
        (
            "opex_connector_nats_returned_total",
            "JetStream messages returned (nak) because their subject's buffer was full.",
            |s| &s.returned,
        ),
        (
            "opex_connector_nats_replaced_total",
            "JetStream messages replaced by a newer one in latest mode (acked by design).",
            |s| &s.replaced,
        ),
        (
            "opex_connector_nats_redelivered_total",
            "JetStream messages received again after an earlier delivery.",
            |s| &s.redelivered,
        ),
    ];
    for (metric, help, pick) in nats {
        let samples: Vec<(Vec<(&str, &str)>, f64)> = state
            .nats_sources
            .iter()
            .zip(&names)
            .map(|(s, n)| {
                (
                    vec![("source", n.as_str())],
                    pick(&s.stats).load(Ordering::Relaxed) as f64,
                )
            })
            .collect();
        let refs: Vec<(&[(&str, &str)], f64)> =
            samples.iter().map(|(l, v)| (l.as_slice(), *v)).collect();
        p.family(metric, Kind::Counter, help, &refs);
    }
    let names: Vec<String> = state
        .mqtt_sources
        .iter()
        .map(|s| s.source().to_string())
        .collect();
    type PickM = fn(&crate::sources::mqtt::MqttSourceStats) -> &std::sync::atomic::AtomicU64;
    let mqtt: [(&str, &str, PickM); 4] = [
        (
            "opex_connector_mqtt_received_total",
            "MQTT messages received (acked on receipt).",
            |s| &s.received,
        ),
        (
            "opex_connector_mqtt_dropped_total",
            "MQTT messages dropped because their subscription's buffer was full.",
            |s| &s.dropped,
        ),
        (
            "opex_connector_mqtt_refused_total",
            "MQTT records a full sink refused: lost, MQTT acks on receipt.",
            |s| &s.refused,
        ),
        (
            "opex_connector_mqtt_failed_total",
            "MQTT records a sink failed to store: lost.",
            |s| &s.failed,
        ),
    ];
    for (metric, help, pick) in mqtt {
        let samples: Vec<(Vec<(&str, &str)>, f64)> = state
            .mqtt_sources
            .iter()
            .zip(&names)
            .map(|(s, n)| {
                (
                    vec![("source", n.as_str())],
                    pick(&s.stats).load(Ordering::Relaxed) as f64,
                )
            })
            .collect();
        let refs: Vec<(&[(&str, &str)], f64)> =
            samples.iter().map(|(l, v)| (l.as_slice(), *v)).collect();
        p.family(metric, Kind::Counter, help, &refs);
    }
    // Sinks with a queue in memory: (name, dropped, blocked, failed, queue depth); `failed`
    // only means something for the messaging sinks, whose publishes give up after retries.
    let mut sinks: Vec<(&str, u64, u64, Option<u64>, f64)> = Vec::new();
    for sink in state.engine.sinks().iter() {
        let st = match sink {
            SinkHandle::ClickHouse(c) => c.status(),
            SinkHandle::Postgres(p) => p.status(),
            _ => continue,
        };
        sinks.push((
            sink.name(),
            st.dropped_total,
            st.blocked_total,
            None,
            st.backlog_rows as f64,
        ));
    }
    if let Some(n) = &state.nats_sink {
        let s = &n.stats;
        sinks.push((
            "nats",
            s.dropped.load(Ordering::Relaxed),
            s.blocked.load(Ordering::Relaxed),
            Some(s.failed.load(Ordering::Relaxed)),
            n.queue_depth() as f64,
        ));
    }
    if let Some(m) = &state.mqtt_sink {
        let s = &m.stats;
        sinks.push((
            "mqtt",
            s.dropped.load(Ordering::Relaxed),
            s.blocked.load(Ordering::Relaxed),
            Some(s.failed.load(Ordering::Relaxed)),
            m.queue_depth() as f64,
        ));
    }
    if sinks.is_empty() {
        return;
    }
    for (metric, kind, help, pick) in [
        ("opex_connector_sink_dropped_total", Kind::Counter, "Records a sink with a memory queue lost (database backlog at its bound under evict_oldest) or refused at delivery (messaging queue full; the source retries).", 0),
        ("opex_connector_sink_blocked_total", Kind::Counter, "Records a sink refused at admission (full under block, or not connected); their sources retry.", 1),
        ("opex_connector_sink_failed_total", Kind::Counter, "Records a messaging sink failed to publish after its retries.", 2),
        ("opex_connector_sink_queue_depth", Kind::Gauge, "Records waiting in a sink's memory queue or backlog.", 3),
    ] {
        let samples: Vec<(Vec<(&str, &str)>, f64)> = sinks
            .iter()
            .filter_map(|(name, d, b, f, q)| {
                let v = match pick {
                    0 => *d as f64,
                    1 => *b as f64,
                    2 => (*f)? as f64,
                    _ => *q,
                };
                Some((vec![("sink", *name)], v))
            })
            .collect();
        if samples.is_empty() {
            continue;
        }
        let refs: Vec<(&[(&str, &str)], f64)> =
            samples.iter().map(|(l, v)| (l.as_slice(), *v)).collect();
        p.family(metric, kind, help, &refs);
    }
}

/// The per-device families: one sample per device, labelled `device` and `protocol`.
fn devices(p: &mut Page, state: &AppState) {
    type Pick = fn(&DeviceStatus) -> f64;
    let families: [(&str, Kind, &str, Pick); 9] = [
        (
            "opex_connector_opcua_device_connected",
            Kind::Gauge,
            "1 while the device's connection or session is up.",
            |d| f64::from(u8::from(d.state() == State::Connected)),
        ),
        (
            "opex_connector_opcua_device_polls_total",
            Kind::Counter,
            "Group polls and subscription notifications turned into records.",
            |d| d.polls_total.load(Ordering::Relaxed) as f64,
        ),
        (
            "opex_connector_opcua_device_errors_total",
            Kind::Counter,
            "Failed reads, connects and subscription calls.",
            |d| d.errors_total.load(Ordering::Relaxed) as f64,
        ),
        (
            "opex_connector_opcua_device_bad_points_total",
            Kind::Counter,
            "Points read with a bad quality (unknown node, bad status).",
            |d| d.bad_points_total.load(Ordering::Relaxed) as f64,
        ),
        (
            "opex_connector_opcua_device_reconnects_total",
            Kind::Counter,
            "Sessions re-established after a lost connection.",
            |d| d.reconnects_total.load(Ordering::Relaxed) as f64,
        ),
        (
            "opex_connector_opcua_device_watchdog_resets_total",
            Kind::Counter,
            "Sessions dropped by the no-data watchdog.",
            |d| d.watchdog_resets_total.load(Ordering::Relaxed) as f64,
        ),
        (
            "opex_connector_opcua_device_samples_lost_total",
            Kind::Counter,
            "Samples dropped after the poller's hold (also in backpressure_lost).",
            |d| {
                (d.samples_lost_total.load(Ordering::Relaxed)
                    + d.notifications_dropped_total.load(Ordering::Relaxed)) as f64
            },
        ),
        (
            "opex_connector_opcua_device_last_poll_timestamp_seconds",
            Kind::Gauge,
            "Unix time of the device's last poll.",
            |d| d.last_poll_ms() as f64 / 1000.0,
        ),
        (
            "opex_connector_opcua_device_poll_duration_seconds",
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
        "opex_connector_opcua_device_poll_start_jitter_seconds",
        Kind::Gauge,
        "How late polls started against their schedule, over the last 1024 polls.",
        &refs,
    );
}
