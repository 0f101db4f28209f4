//! `/api/status` and `/metrics`: two views of the same numbers (the status page draws the
//! first).

use std::sync::atomic::{AtomicU64, Ordering};

use serde_json::{json, Map, Value};

use super::AppState;
use crate::sinks::report::Sample;
use crate::sinks::TOP_LEVEL_DOCUMENTS;
use crate::sources::backfill::BackfillStats;
use crate::sources::ingest::IngestStats;
use crate::sources::mqtt::MqttSourceStats;
use crate::sources::nats::NatsSourceStats;
use crate::sources::schedule::ScheduleStats;
use crate::telemetry::prometheus::{Kind, Page};

/// True while the connector does its job: every sink takes records (their writers run).
/// Over-the-air updates wait for it before keeping a new version; the systemd watchdog is fed
/// only while it holds. A device or a destination being down does not make it false: that is
/// the `state` of [`crate::health`].
pub fn healthy(state: &AppState) -> bool {
    state.engine.sinks().iter().all(|s| s.report().accepting)
}

/// The schedules' entries: `schedules` of `/api/status` and of `GET /api/schedules`.
pub fn schedules(state: &AppState) -> Vec<Value> {
    state
        .sources
        .schedules
        .all()
        .iter()
        .map(|s| s.status())
        .collect()
}

/// The `/api/status` document.
pub fn status(state: &AppState) -> Value {
    let mut sources: Vec<Value> = state
        .sources
        .ingest
        .all()
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
    sources.extend(state.sources.nats.all().iter().map(|s| s.status()));
    sources.extend(state.sources.mqtt.all().iter().map(|s| s.status()));
    let webhooks: Vec<Value> = state
        .sources
        .webhooks
        .all()
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
                "kept_in_inbox": w.stats.kept_in_inbox.load(Ordering::Relaxed),
                "repeated": w.stats.repeated.load(Ordering::Relaxed),
                "in_progress": w.stats.in_progress.load(Ordering::Relaxed),
                "replay_window_forgotten": w.window_forgotten_total(),
            })
        })
        .collect();
    let mut sinks = Vec::new();
    let mut sink_status = Map::new();
    let mut documents: Map<String, Value> = TOP_LEVEL_DOCUMENTS
        .iter()
        .map(|d| ((*d).to_string(), Value::Null))
        .collect();
    for sink in state.engine.sinks().iter() {
        let r = sink.report();
        sinks.push(Value::Object(r.entry));
        sink_status.insert(sink.name().to_string(), r.status);
        for (key, doc) in r.documents {
            documents.insert(key.to_string(), doc);
        }
    }
    let health = super::problems::assess(state);
    for entry in &mut sinks {
        stamp(state, entry, "sink");
    }
    let mut channels = state.alerts.channels_json();
    for c in &mut channels {
        stamp(state, c, "alert channel");
    }
    let mut devices = devices(state);
    for d in &mut devices {
        stamp(state, d, "device");
    }
    let mut doc = json!({
        "state": health.state.as_str(),
        "problems": health.problems_json(),
        "connector": {
            "name": state.name,
            "version": crate::VERSION,
            "previous_version": state.previous_version,
            "healthy": healthy(state),
            "uptime_secs": state.started.elapsed().as_secs(),
            "disk_free_bytes": disk_free_bytes(&state.data_dir),
        },
        "live": live(state),
        "auth": state.auth.status(),
        "commands": state.command_paths.to_json(state.commands.config().token.is_some()),
        "sinks": sinks,
        "sink_status": sink_status,
        "dead_letters": state.engine.dead_letters().counts(),
        "sources": sources,
        "devices": devices,
        "opcua_server": state.opcua_server.as_ref().map(|s| s.to_json()),
        "config": config_status(state),
        "engine": {"stats": state.engine.stats.to_json(), "webhooks": webhooks},
        "queues": state.alerts.queues_json(),
        "alerts": state.alerts.open_alerts(),
        "alert_channels": channels,
        "schedules": schedules(state),
        "backfills": state.sources.backfills.all().iter().map(|b| b.status()).collect::<Vec<Value>>(),
        "trends": state.trends.status_json(),
    });
    if let Some(o) = doc.as_object_mut() {
        o.extend(documents);
    }
    doc
}

/// `last_error_at` and `recovered_at` of a device's, sink's or alert channel's entry: since
/// when its last trouble (a problem of `problems`) lasted, and when it cleared; null when it
/// had none.
fn stamp(state: &AppState, entry: &mut Value, part: &str) {
    let Some(name) = entry["name"].as_str() else {
        return;
    };
    let episode = state.health.episode(&format!("{part} {name}"));
    let (at, recovered) = crate::health::Episode::fields(episode);
    entry["last_error_at"] = at;
    entry["recovered_at"] = recovered;
}

/// `config`: the running revision, and the sinks draining after a reload removed them.
fn config_status(state: &AppState) -> Value {
    let mut config = state.config.status();
    config["draining"] = state
        .sinks
        .draining()
        .into_iter()
        .map(|(sink, rows)| json!({"sink": sink, "rows": rows}))
        .collect();
    config
}

/// `devices[]`: each device's figures, with its writable points and its commands' counters
/// when it takes commands.
pub(super) fn devices(state: &AppState) -> Vec<Value> {
    let mut out: Vec<Value> = state
        .devices
        .devices()
        .iter()
        .map(|d| d.to_json())
        .collect();
    for d in &mut out {
        let Some(name) = d["name"].as_str().map(str::to_string) else {
            continue;
        };
        if let Some(stats) = state.commands.stats_json(&name) {
            d["commands"] = stats;
            d["writable"] = state
                .commands
                .points(&name)
                .iter()
                .map(|p| {
                    json!({"name": p.name, "area": p.area, "type": p.data_type,
                           "min": p.min, "max": p.max})
                })
                .collect();
        }
    }
    out
}

/// Bytes an unprivileged writer may still use on the data dir's file system (`None` when
/// `statvfs` fails).
pub fn disk_free_bytes(dir: &std::path::Path) -> Option<u64> {
    let st = rustix::fs::statvfs(dir).ok()?;
    Some(st.f_bavail.saturating_mul(st.f_frsize))
}

/// Bytes free for an unprivileged writer and bytes in all on the data dir's file system
/// (`None` when `statvfs` fails).
pub fn disk_space(dir: &std::path::Path) -> Option<(u64, u64)> {
    let st = rustix::fs::statvfs(dir).ok()?;
    Some((
        st.f_bavail.saturating_mul(st.f_frsize),
        st.f_blocks.saturating_mul(st.f_frsize),
    ))
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
    let mut p = Page::default();
    sink_metrics(state, &mut p);
    source_metrics(state, &mut p);
    if let Some(server) = &state.opcua_server {
        server.write_metrics(&mut p);
    }
    p.single(
        "opex_connector_config_revision",
        Kind::Gauge,
        "The revision of the running config.",
        state.config.revision() as f64,
    );
    p.single(
        "opex_connector_config_reloads_total",
        Kind::Counter,
        "Configs applied while the connector ran, since its start.",
        state.config.reloads() as f64,
    );
    let e = &state.engine.stats;
    let dlq = state.engine.dead_letters().counts();
    p.single(
        "opex_connector_dead_letters_open",
        Kind::Gauge,
        "Open entries of the pipeline dead-letter queue.",
        dlq.open as f64,
    );
    p.single(
        "opex_connector_dead_letters_trimmed_open_total",
        Kind::Counter,
        "Open entries of the pipeline dead-letter queue deleted at its cap: records lost.",
        dlq.trimmed_open_total as f64,
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
    super::problems::write_metrics(state, &mut p);
    state.commands.write_metrics(&mut p);
    state.command_paths.write_metrics(&mut p);
    feed_metrics(state, &mut p);
    state.trends.write_metrics(&mut p);
    crate::sources::status::write_metrics(&state.devices.devices(), &mut p);
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
        "opex_connector_http_body_budget_refused_total",
        Kind::Counter,
        "Webhook bodies refused with 503 because the bytes of bodies read before their signature check were at the budget (32 MiB).",
        state.body_budget.refused_total.load(Ordering::Relaxed) as f64,
    );
    state.auth.write_metrics(&mut p);
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

/// Every sink's samples, one family at a time in the order the families first appear.
fn sink_metrics(state: &AppState, p: &mut Page) {
    let samples: Vec<Sample> = state
        .engine
        .sinks()
        .iter()
        .flat_map(|s| s.report().metrics)
        .collect();
    let mut order: Vec<&'static str> = Vec::new();
    for s in &samples {
        if !order.contains(&s.family) {
            order.push(s.family);
        }
    }
    for family in order {
        let of: Vec<&Sample> = samples.iter().filter(|s| s.family == family).collect();
        let Some(first) = of.first() else { continue };
        let labels: Vec<Vec<(&str, &str)>> = of
            .iter()
            .map(|s| s.labels.iter().map(|(k, v)| (*k, v.as_str())).collect())
            .collect();
        let refs: Vec<(&[(&str, &str)], f64)> = labels
            .iter()
            .zip(&of)
            .map(|(l, s)| (l.as_slice(), s.value))
            .collect();
        p.family(family, first.kind, first.help, &refs);
    }
}

fn l(c: &AtomicU64) -> u64 {
    c.load(Ordering::Relaxed)
}

/// The schedules and the backfills.
fn feed_metrics(state: &AppState, p: &mut Page) {
    let running_schedules = state.sources.schedules.all();
    let schedules: Vec<(&str, &ScheduleStats)> = running_schedules
        .iter()
        .map(|s| (s.source(), &s.stats))
        .collect();
    p.counters(
        "source",
        &schedules,
        &[
            (
                "opex_connector_schedule_ticks_total",
                "Schedule ticks offered.",
                |s| l(&s.ticks_total),
            ),
            (
                "opex_connector_schedule_backpressured_total",
                "Schedule ticks a full sink refused: lost, ticks are not replayed.",
                |s| l(&s.backpressured_total),
            ),
            (
                "opex_connector_schedule_missed_total",
                "Schedule ticks not fired because the schedule was late for them.",
                |s| l(&s.missed_total),
            ),
        ],
    );
    let running_backfills = state.sources.backfills.all();
    let backfills: Vec<(&str, &BackfillStats)> = running_backfills
        .iter()
        .map(|b| (b.source(), &b.stats))
        .collect();
    p.counters(
        "source",
        &backfills,
        &[
            (
                "opex_connector_backfill_acked_total",
                "Backfill records acknowledged since start.",
                |s| l(&s.acked_total),
            ),
            (
                "opex_connector_backfill_retries_total",
                "Backfill offers refused or failed, waited out and retried.",
                |s| l(&s.retries_total),
            ),
        ],
    );
}

/// Counters of the ingest, NATS and MQTT sources.
fn source_metrics(state: &AppState, p: &mut Page) {
    let running_ingest = state.sources.ingest.all();
    let ingest: Vec<(&str, &IngestStats)> = running_ingest
        .iter()
        .map(|s| (s.source(), &s.stats))
        .collect();
    p.counters(
        "source",
        &ingest,
        &[
            (
                "opex_connector_ingest_stored_total",
                "Ingest records stored (200).",
                |s| l(&s.stored),
            ),
            (
                "opex_connector_ingest_refused_total",
                "Ingest records refused and told to retry (503).",
                |s| l(&s.refused),
            ),
            (
                "opex_connector_ingest_rejected_total",
                "Ingest requests rejected as bad input.",
                |s| l(&s.rejected),
            ),
            (
                "opex_connector_ingest_unauthorized_total",
                "Ingest requests refused for a missing or wrong token (401).",
                |s| l(&s.unauthorized),
            ),
        ],
    );
    let running_nats = state.sources.nats.all();
    let nats: Vec<(&str, &NatsSourceStats)> = running_nats
        .iter()
        .map(|s| (s.source(), &s.stats))
        .collect();
    p.counters(
        "source",
        &nats,
        &[
            (
                "opex_connector_nats_acked_total",
                "JetStream messages acked after their record was stored.",
                |s| l(&s.acked),
            ),
            (
                "opex_connector_nats_refused_total",
                "JetStream messages nak'd with backoff because a sink refused before any node ran.",
                |s| l(&s.refused),
            ),
            (
                "opex_connector_nats_returned_total",
                "JetStream messages returned (nak) because their subject's buffer was full.",
                |s| l(&s.returned),
            ),
            (
                "opex_connector_nats_replaced_total",
                "JetStream messages replaced by a newer one in latest mode (acked by design).",
                |s| l(&s.replaced),
            ),
            (
                "opex_connector_nats_redelivered_total",
                "JetStream messages received again after an earlier delivery.",
                |s| l(&s.redelivered),
            ),
        ],
    );
    let running_mqtt = state.sources.mqtt.all();
    let mqtt: Vec<(&str, &MqttSourceStats)> = running_mqtt
        .iter()
        .map(|s| (s.source(), &s.stats))
        .collect();
    p.counters(
        "source",
        &mqtt,
        &[
            (
                "opex_connector_mqtt_received_total",
                "MQTT messages received (acked on receipt).",
                |s| l(&s.received),
            ),
            (
                "opex_connector_mqtt_dropped_total",
                "MQTT messages dropped because their subscription's buffer was full.",
                |s| l(&s.dropped),
            ),
            (
                "opex_connector_mqtt_refused_total",
                "MQTT records a full sink refused: lost, MQTT acks on receipt.",
                |s| l(&s.refused),
            ),
            (
                "opex_connector_mqtt_failed_total",
                "MQTT records a sink failed to store: lost.",
                |s| l(&s.failed),
            ),
        ],
    );
}
