//! `GET /api/ledger`: the parts added up by source, the sinks' figures, and the check.

use std::collections::BTreeMap;
use std::sync::atomic::Ordering;

use serde_json::{json, Map, Value};

use super::book::Counts;
use crate::engine::{Engine, SinkHandle};
use crate::sinks::push::PushSink;

/// The result of the check: which sources do not balance, and by how much.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Check {
    /// `acked - (delivered + pending + dead_lettered + losses)` of every source where it is not 0.
    pub imbalances: BTreeMap<String, i64>,
}

impl Check {
    /// True when every source balances.
    pub fn balanced(&self) -> bool {
        self.imbalances.is_empty()
    }
}

/// Checks the identity `acked = delivered + pending + dead_lettered + losses` for every source.
pub fn check(sources: &BTreeMap<String, Counts>) -> Check {
    Check {
        imbalances: sources
            .iter()
            .filter(|(_, c)| c.imbalance() != 0)
            .map(|(s, c)| (s.clone(), c.imbalance()))
            .collect(),
    }
}

fn counts_json(c: &Counts) -> Value {
    json!({
        "received": c.received,
        "acked": c.acked,
        "refused": c.refused,
        "delivered": c.delivered,
        "pending": c.pending,
        "dead_lettered": c.dead_lettered,
        "losses": {
            "evicted": c.evicted,
            "backpressure_lost": c.backpressure_lost,
            "dropped": c.dropped,
            "suppressed": c.suppressed,
            "unrouted": c.unrouted,
            "failed": c.failed,
        },
        "lost": c.losses(),
        "imbalance": c.imbalance(),
    })
}

fn sink_json(
    accepted: u64,
    delivered: u64,
    pending: u64,
    dead: u64,
    lost: u64,
    note: &str,
) -> Value {
    json!({
        "accepted": accepted,
        "delivered": delivered,
        "pending": pending,
        "dead_lettered": dead,
        "lost": lost,
        "imbalance": accepted as i64 - (delivered + pending + dead + lost) as i64,
        "kept": note,
    })
}

/// The ledger: every part's per-source counts, their sum with the check, and each sink's
/// figures. With `verify`, the durable push queue's `pending` counts are also compared with
/// its rows, read one by one (cost: one pass over the queue).
pub fn report(engine: &Engine, push: &PushSink, verify: bool) -> Value {
    let mut parts: Vec<(&str, BTreeMap<String, Counts>)> = vec![
        ("engine", engine.ledger.snapshot()),
        (
            if push.is_durable() {
                "push_queue"
            } else {
                "push_volatile"
            },
            push.ledger(),
        ),
    ];
    let mut sinks = Map::new();
    let c = push.counters();
    let l = |a: &std::sync::atomic::AtomicU64| a.load(Ordering::Relaxed);
    let (_, rows, _) = push.gate().usage();
    sinks.insert(
        "push".into(),
        sink_json(
            push.appended_total(),
            l(&c.sent_total),
            rows,
            l(&c.dead_lettered_total),
            l(&c.evicted_total),
            if push.is_durable() { "disk" } else { "memory" },
        ),
    );
    for sink in engine.sinks().iter() {
        match sink {
            SinkHandle::Push(_) => {}
            SinkHandle::Storage(s) => {
                let stored = l(&s.counters().stored_total);
                sinks.insert("storage".into(), sink_json(stored, stored, 0, 0, 0, "disk"));
            }
            SinkHandle::ClickHouse(_) | SinkHandle::Postgres(_) => {
                let (status, book) = match sink {
                    SinkHandle::ClickHouse(s) => (s.status(), s.ledger().snapshot()),
                    SinkHandle::Postgres(s) => (s.status(), s.ledger().snapshot()),
                    _ => continue,
                };
                parts.push((sink.name(), book));
                sinks.insert(
                    sink.name().into(),
                    sink_json(
                        status.accepted_total,
                        status.inserted_total,
                        status.backlog_rows,
                        status.dead_lettered_total,
                        status.dropped_total + status.lost_at_stop_total,
                        "memory",
                    ),
                );
            }
            SinkHandle::Nats(n) => {
                // A publish that failed after its retries is handed back to the engine (the
                // source retries, or the record is parked): not accepted, not lost here.
                let published = l(&n.stats.published);
                let pending = n.queue_depth() as u64;
                sinks.insert(
                    "nats".into(),
                    sink_json(published + pending, published, pending, 0, 0, "memory"),
                );
            }
            SinkHandle::Mqtt(m) => {
                let queued = l(&m.stats.queued);
                let pending = m.queue_depth().min(queued);
                sinks.insert(
                    "mqtt".into(),
                    sink_json(queued, queued - pending, pending, 0, 0, "memory"),
                );
            }
        }
    }
    let mut total: BTreeMap<String, Counts> = BTreeMap::new();
    let mut parts_json = Map::new();
    for (name, part) in &parts {
        let mut m = Map::new();
        for (source, counts) in part {
            total.entry(source.clone()).or_default().add(counts);
            m.insert(source.clone(), counts_json(counts));
        }
        parts_json.insert((*name).to_string(), Value::Object(m));
    }
    let checked = check(&total);
    let mut out = json!({
        "balanced": checked.balanced(),
        "imbalances": checked.imbalances,
        "sources": total.iter().map(|(s, c)| (s.clone(), counts_json(c))).collect::<Map<_, _>>(),
        "sinks": sinks,
        "parts": parts_json,
    });
    if verify {
        out["push_queue_check"] = verify_push(push);
    }
    out
}

/// Compares the durable `pending` counts of the push queue with its rows.
fn verify_push(push: &PushSink) -> Value {
    let Some(counted) = push.count_pending() else {
        return json!({"checked": false, "reason": "the push buffer is volatile"});
    };
    let (kept, rows) = match counted {
        Ok(c) => (c.kept, c.rows),
        Err(e) => return json!({"checked": false, "reason": e.to_string()}),
    };
    let mut mismatches = Map::new();
    for source in kept.keys().chain(rows.keys()) {
        let found = rows.get(source).copied().unwrap_or(0);
        let kept = kept.get(source).copied().unwrap_or(0);
        if kept != found {
            mismatches.insert(source.clone(), json!({"pending": kept, "rows": found}));
        }
    }
    json!({
        "checked": true,
        "agrees": mismatches.is_empty(),
        "mismatches": mismatches,
        "rows": rows,
    })
}
