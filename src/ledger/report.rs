//! `GET /api/ledger`: the parts added up by source, the sinks' figures, and the check.

use std::collections::BTreeMap;

use serde_json::{json, Map, Value};

use super::book::Counts;
use crate::engine::Engine;

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
            "unconfirmed": c.unconfirmed,
            "trimmed": c.trimmed,
            "discarded": c.discarded,
        },
        "lost": c.losses(),
        "imbalance": c.imbalance(),
    })
}

/// The ledger: every part's per-source counts, their sum with the check, and each sink's
/// figures. With `verify`, the durable queues' `pending` counts are also compared with their
/// rows, read one by one (cost: one pass over each queue): `queue_checks.<sink>`, and
/// `push_queue_check` for the sink called `push`.
pub fn report(engine: &Engine, verify: bool) -> Value {
    let mut parts: Vec<(String, BTreeMap<String, Counts>)> =
        vec![("engine".to_string(), engine.ledger.snapshot())];
    let mut sinks = Map::new();
    for sink in engine.sinks().iter() {
        let r = sink.report();
        if let Some(part) = r.ledger_part {
            parts.push(part);
        }
        sinks.insert(sink.name().to_string(), r.ledger.to_json());
    }
    parts.extend(engine.retired_parts());
    let mut total: BTreeMap<String, Counts> = BTreeMap::new();
    let mut parts_json = Map::new();
    for (name, part) in &parts {
        let mut m = Map::new();
        for (source, counts) in part {
            total.entry(source.clone()).or_default().add(counts);
            m.insert(source.clone(), counts_json(counts));
        }
        parts_json.insert(name.clone(), Value::Object(m));
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
        let mut checks = Map::new();
        for sink in engine.sinks().iter() {
            if let Some(v) = sink.verify() {
                checks.insert(sink.name().to_string(), v);
            }
        }
        if let Some(push) = checks.get("push") {
            out["push_queue_check"] = push.clone();
        }
        out["queue_checks"] = Value::Object(checks);
    }
    out
}
