//! The preprocess stage in front of the push queue: deadband, aggregation and heartbeat.
//!
//! It runs in the push sink only, when a record is delivered there: storage and the other
//! sinks get every record unchanged (the delivery promise: "suppressed values, push only").
//!
//! **Points.** A record's points are the top-level fields of its payload that hold a number
//! (`{"temp": 21.5}`) or an object with a `value` (the pollers' shape,
//! `{"temp": {"value": 21.5, "quality": "good", "unit": "°C"}}`). A rule applies to a point
//! whose `quality`, if any, is `good`: a number goes through the deadband or the aggregate;
//! a text or boolean `value` goes through the deadband as "unchanged is suppressed" (an
//! aggregate leaves it alone); a bad reading is always sent. Each point has its own state,
//! per source, record key and point name.
//!
//! **Records.** The stage filters the points inside a record: a suppressed point is removed,
//! an aggregated one is replaced by its window's result (with `"aggregate": {fn, window_start,
//! window_secs, count}` beside `value` in the pollers' shape). A record left with no point at
//! all (it had some, and every one was suppressed) is suppressed as a whole: not stored in
//! the push queue, acknowledged, counted. Fields that are not points travel with a record
//! that is sent, and do not keep it alive.
//!
//! **Deadband**: a value within the band of the last value *sent* (inclusive) is suppressed;
//! `percent` is of that last value. **Heartbeat**: a value coming more than `heartbeat` after
//! the last value sent is sent whatever the band. **Aggregate**: values fold into windows
//! aligned on multiples of `window` by the record's timestamp; a window is closed, and its
//! result sent in place of the value, by the first value of a later window (so the last
//! window waits for the next value; windows are memory only and a restart loses the open
//! ones). Every value folded into a window counts as suppressed; when a rule also has a
//! deadband, it applies to the window results.
//!
//! State changes are committed only after the push queue stored the record: a refused or
//! failed store leaves the state as it was, so the source's retry sees the same decision.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

use serde_json::{json, Map, Number, Value};

use super::config::{AggFn, Deadband, PreprocessRule};
use crate::record::Record;
use crate::time::rfc3339;

/// Most points tracked; a new point beyond it is sent unprocessed and counted
/// (`untracked_total`).
pub const MAX_POINTS: usize = 100_000;

/// An open aggregation window.
#[derive(Debug, Clone, PartialEq)]
struct Window {
    start: u64,
    n: u64,
    sum: f64,
    min: f64,
    max: f64,
    last: f64,
    /// The last value's object (pollers' shape), to keep its unit and quality.
    template: Option<Value>,
}

impl Window {
    fn first(start: u64, x: f64, original: &Value) -> Self {
        Self {
            start,
            n: 1,
            sum: x,
            min: x,
            max: x,
            last: x,
            template: original.is_object().then(|| original.clone()),
        }
    }

    fn add(&mut self, x: f64, original: &Value) {
        self.n += 1;
        self.sum += x;
        self.min = self.min.min(x);
        self.max = self.max.max(x);
        self.last = x;
        if original.is_object() {
            self.template = Some(original.clone());
        }
    }

    fn result(&self, f: AggFn) -> f64 {
        match f {
            AggFn::Avg => self.sum / self.n as f64,
            AggFn::Min => self.min,
            AggFn::Max => self.max,
            AggFn::Last => self.last,
            AggFn::Count => self.n as f64,
        }
    }

    fn render(&self, f: AggFn, v: f64, window_ms: u64) -> Value {
        let number = if f == AggFn::Count {
            json!(self.n)
        } else {
            Number::from_f64(v).map_or(Value::Null, Value::Number)
        };
        match &self.template {
            Some(Value::Object(t)) => {
                let mut o = t.clone();
                o.insert("value".into(), number);
                o.insert(
                    "aggregate".into(),
                    json!({
                        "fn": f.as_str(),
                        "window_start": rfc3339(self.start),
                        "window_secs": window_ms as f64 / 1000.0,
                        "count": self.n,
                    }),
                );
                Value::Object(o)
            }
            _ => number,
        }
    }
}

/// What the stage remembers of one point.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct PointState {
    /// The last value sent and its timestamp.
    last_sent: Option<(f64, u64)>,
    window: Option<Window>,
    /// The last text or boolean value sent and its timestamp (deadband: unchanged is
    /// suppressed).
    last_other: Option<(Value, u64)>,
}

/// One value through one rule.
#[derive(Debug)]
struct Step {
    state: PointState,
    /// What to send in its place; `None`: suppressed.
    value: Option<Value>,
    suppressed: u64,
    aggregated: bool,
}

fn step(rule: &PreprocessRule, mut st: PointState, x: f64, original: &Value, ts: u64) -> Step {
    let mut suppressed = 0;
    let candidate = match rule.aggregate {
        None => Some((x, original.clone())),
        Some((f, window)) => {
            let w = (window.as_millis() as u64).max(1);
            let start = ts - ts % w;
            suppressed += 1;
            match st.window.take() {
                Some(closed) if start > closed.start => {
                    st.window = Some(Window::first(start, x, original));
                    let v = closed.result(f);
                    Some((v, closed.render(f, v, w)))
                }
                Some(mut open) => {
                    open.add(x, original);
                    st.window = Some(open);
                    None
                }
                None => {
                    st.window = Some(Window::first(start, x, original));
                    None
                }
            }
        }
    };
    let Some((c, value)) = candidate else {
        return Step {
            state: st,
            value: None,
            suppressed,
            aggregated: false,
        };
    };
    if let (Some(db), Some((last, last_ts))) = (rule.deadband, st.last_sent) {
        let band = match db {
            Deadband::Absolute(a) => a,
            Deadband::Percent(p) => last.abs() * p / 100.0,
        };
        let beat = rule
            .heartbeat
            .is_some_and(|h| ts.saturating_sub(last_ts) > h.as_millis() as u64);
        if (c - last).abs() <= band && !beat {
            if rule.aggregate.is_none() {
                suppressed += 1;
            }
            return Step {
                state: st,
                value: None,
                suppressed,
                aggregated: false,
            };
        }
    }
    st.last_sent = Some((c, ts));
    Step {
        state: st,
        value: Some(value),
        suppressed,
        aggregated: rule.aggregate.is_some(),
    }
}

/// A text or boolean point under a deadband: suppressed while it equals the last value sent
/// (and the heartbeat has not run out).
fn step_other(
    rule: &PreprocessRule,
    mut st: PointState,
    v: Value,
    original: &Value,
    ts: u64,
) -> Step {
    if let Some((last, last_ts)) = &st.last_other {
        let beat = rule
            .heartbeat
            .is_some_and(|h| ts.saturating_sub(*last_ts) > h.as_millis() as u64);
        if *last == v && !beat {
            return Step {
                state: st,
                value: None,
                suppressed: 1,
                aggregated: false,
            };
        }
    }
    st.last_other = Some((v, ts));
    Step {
        state: st,
        value: Some(original.clone()),
        suppressed: 0,
        aggregated: false,
    }
}

/// The text or boolean `value` of a good (or unqualified) reading, for [`step_other`].
fn other(v: &Value) -> Option<Value> {
    // Bare text and booleans are not points: they travel with the record.
    let inner = match v {
        Value::Object(o) if o.get("quality").is_none_or(|q| q == "good") => o.get("value")?,
        _ => return None,
    };
    matches!(inner, Value::String(_) | Value::Bool(_)).then(|| inner.clone())
}

/// The number a rule works on: a number, or the `value` of a good (or unqualified) reading.
fn numeric(v: &Value) -> Option<f64> {
    match v {
        Value::Number(n) => n.as_f64(),
        Value::Object(o) => {
            let good = o.get("quality").is_none_or(|q| q == "good");
            if good {
                o.get("value").and_then(Value::as_f64)
            } else {
                None
            }
        }
        _ => None,
    }
}

/// What the stage made of a record.
#[derive(Debug, PartialEq)]
pub enum Output {
    /// Send it as it is.
    Unchanged,
    /// Send this instead (some points removed or aggregated).
    Changed(Record),
    /// Send nothing: every point was suppressed.
    Suppressed,
}

/// State changes to apply once the record is stored.
#[derive(Debug, Default)]
pub struct Commit {
    states: Vec<(String, PointState)>,
    suppressed: u64,
    aggregates: u64,
}

/// The stage, with its rules and per-point state.
#[derive(Debug)]
pub struct Preprocess {
    rules: Vec<PreprocessRule>,
    sources: HashSet<String>,
    state: Mutex<HashMap<String, PointState>>,
    /// Values not sent to the push queue: within a deadband, or folded into a window.
    pub suppressed_total: AtomicU64,
    /// Window results sent.
    pub aggregates_total: AtomicU64,
    /// Points sent unprocessed because [`MAX_POINTS`] points were tracked already.
    pub untracked_total: AtomicU64,
}

impl Preprocess {
    /// A stage with `rules`.
    pub fn new(rules: Vec<PreprocessRule>) -> Self {
        Self {
            sources: rules.iter().map(|r| r.source.clone()).collect(),
            rules,
            state: Mutex::new(HashMap::new()),
            suppressed_total: AtomicU64::new(0),
            aggregates_total: AtomicU64::new(0),
            untracked_total: AtomicU64::new(0),
        }
    }

    fn rule(&self, source: &str, point: &str) -> Option<&PreprocessRule> {
        self.rules
            .iter()
            .find(|r| r.source == source && r.point.as_deref() == Some(point))
            .or_else(|| {
                self.rules
                    .iter()
                    .find(|r| r.source == source && r.point.is_none())
            })
    }

    /// Runs the rules over `record`; nothing changes until [`Preprocess::commit`].
    pub fn apply(&self, record: &Record) -> (Output, Commit) {
        let mut commit = Commit::default();
        if !self.sources.contains(&record.source) {
            return (Output::Unchanged, commit);
        }
        let Value::Object(fields) = record.payload_value() else {
            return (Output::Unchanged, commit);
        };
        let state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        let mut out = Map::new();
        let (mut points, mut kept, mut changed) = (0u64, 0u64, false);
        for (name, value) in fields {
            let is_point = value.is_number() || value.get("value").is_some();
            points += u64::from(is_point);
            enum Kind {
                Number(f64),
                Other(Value),
            }
            let ruled = self.rule(&record.source, &name).and_then(|r| {
                match (numeric(&value), r.deadband.is_some()) {
                    (Some(x), _) => Some((r, Kind::Number(x))),
                    (None, true) => Some((r, Kind::Other(other(&value)?))),
                    (None, false) => None,
                }
            });
            let Some((rule, kind)) = ruled else {
                kept += u64::from(is_point);
                out.insert(name, value);
                continue;
            };
            let key = format!("{}\u{0}{}\u{0}{name}", record.source, record.key);
            let current = match state.get(&key) {
                Some(s) => s.clone(),
                None if state.len() + commit.states.len() >= MAX_POINTS => {
                    let n = self.untracked_total.fetch_add(1, Ordering::Relaxed) + 1;
                    if n.is_power_of_two() {
                        log::warn!(
                            "preprocess tracks {MAX_POINTS} points already, point sent unprocessed: source={} point={name} untracked_total={n}",
                            record.source
                        );
                    }
                    kept += 1;
                    out.insert(name, value);
                    continue;
                }
                None => PointState::default(),
            };
            let s = match kind {
                Kind::Number(x) => step(rule, current, x, &value, record.ts_ms),
                Kind::Other(v) => step_other(rule, current, v, &value, record.ts_ms),
            };
            commit.suppressed += s.suppressed;
            commit.aggregates += u64::from(s.aggregated);
            commit.states.push((key, s.state));
            match s.value {
                Some(v) => {
                    kept += 1;
                    changed |= v != value;
                    out.insert(name, v);
                }
                None => changed = true,
            }
        }
        let output = if points > 0 && kept == 0 {
            Output::Suppressed
        } else if changed {
            let mut r = Record::from_value(
                record.source.clone(),
                record.key.clone(),
                &Value::Object(out),
            );
            r.id = record.id.clone();
            r.ts_ms = record.ts_ms;
            Output::Changed(r)
        } else {
            Output::Unchanged
        };
        (output, commit)
    }

    /// Applies the state changes of a record that was stored (or suppressed as a whole).
    pub fn commit(&self, c: Commit) {
        if c.states.is_empty() {
            return;
        }
        {
            let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
            for (k, s) in c.states {
                state.insert(k, s);
            }
        }
        self.suppressed_total
            .fetch_add(c.suppressed, Ordering::Relaxed);
        self.aggregates_total
            .fetch_add(c.aggregates, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn rule(
        deadband: Option<Deadband>,
        aggregate: Option<(AggFn, u64)>,
        heartbeat: Option<u64>,
    ) -> PreprocessRule {
        PreprocessRule {
            source: "modbus/p1".into(),
            point: None,
            deadband,
            aggregate: aggregate.map(|(f, s)| (f, Duration::from_secs(s))),
            heartbeat: heartbeat.map(Duration::from_secs),
        }
    }

    /// Runs a series `(ts_ms, value)` through one rule: the values sent and the suppressed
    /// count.
    fn run(rule: &PreprocessRule, series: &[(u64, f64)]) -> (Vec<f64>, u64) {
        let mut st = PointState::default();
        let (mut sent, mut suppressed) = (Vec::new(), 0);
        for (ts, x) in series {
            let s = step(rule, st, *x, &json!(x), *ts);
            st = s.state;
            suppressed += s.suppressed;
            if let Some(v) = s.value {
                sent.push(v.as_f64().unwrap());
            }
        }
        (sent, suppressed)
    }

    #[test]
    fn absolute_deadband_compares_with_the_last_value_sent() {
        let r = rule(Some(Deadband::Absolute(0.5)), None, None);
        let series = [
            (0, 20.0),
            (1000, 20.3),
            (2000, 20.5),
            (3000, 20.6),
            (4000, 21.2),
            (5000, 21.0),
        ];
        assert_eq!(run(&r, &series), (vec![20.0, 20.6, 21.2], 3));
    }

    #[test]
    fn percent_deadband_with_a_heartbeat_sends_a_steady_value_after_the_gap() {
        let r = rule(Some(Deadband::Percent(10.0)), None, Some(3));
        let series = [
            (0, 100.0),
            (1000, 105.0),
            (2000, 109.0),
            (3000, 111.0),
            (4000, 111.0),
            (8000, 111.0),
        ];
        assert_eq!(run(&r, &series), (vec![100.0, 111.0, 111.0], 3));
    }

    #[test]
    fn aggregates_close_a_window_with_the_first_value_of_a_later_one() {
        let series = [
            (0, 1.0),
            (3000, 2.0),
            (6000, 6.0),
            (12_000, 10.0),
            (15_000, 20.0),
            (31_000, 5.0),
        ];
        for (f, expected) in [
            (AggFn::Avg, vec![3.0, 15.0]),
            (AggFn::Min, vec![1.0, 10.0]),
            (AggFn::Max, vec![6.0, 20.0]),
            (AggFn::Last, vec![6.0, 20.0]),
            (AggFn::Count, vec![3.0, 2.0]),
        ] {
            let r = rule(None, Some((f, 10)), None);
            assert_eq!(run(&r, &series), (expected, 6), "{f:?}");
        }
        // With a deadband too, it applies to the window results.
        let r = rule(Some(Deadband::Absolute(1.0)), Some((AggFn::Avg, 10)), None);
        let series = [(0, 1.0), (10_000, 1.5), (20_000, 9.0), (30_000, 0.0)];
        assert_eq!(run(&r, &series), (vec![1.0, 9.0], 4));
    }

    fn poll(ts: u64, temp: f64, speed: f64) -> Record {
        let mut r = Record::from_value(
            "modbus/p1",
            "fast",
            &json!({
                "temp": {"value": temp, "quality": "good", "unit": "°C"},
                "speed": {"value": speed, "quality": "good"},
            }),
        );
        r.ts_ms = ts;
        r
    }

    #[test]
    fn points_are_filtered_inside_a_record_and_an_empty_record_is_suppressed() {
        let mut temp_only = rule(Some(Deadband::Absolute(0.5)), None, None);
        temp_only.point = Some("temp".into());
        let stage = Preprocess::new(vec![temp_only]);
        let (out, c) = stage.apply(&poll(0, 20.0, 5.0));
        assert_eq!(out, Output::Unchanged);
        stage.commit(c);
        // Not committed: the same decision again.
        let second = poll(1000, 20.2, 5.0);
        let (out, _) = stage.apply(&second);
        let (out_again, c) = stage.apply(&second);
        assert_eq!(out, out_again);
        let Output::Changed(r) = out else {
            panic!("{out:?}")
        };
        assert_eq!(r.id, second.id);
        assert_eq!(
            r.payload_value(),
            json!({"speed": {"value": 5.0, "quality": "good"}})
        );
        stage.commit(c);
        assert_eq!(stage.suppressed_total.load(Ordering::Relaxed), 1);

        let stage = Preprocess::new(vec![rule(Some(Deadband::Absolute(0.5)), None, None)]);
        let (_, c) = stage.apply(&poll(0, 20.0, 5.0));
        stage.commit(c);
        let (out, c) = stage.apply(&poll(1000, 20.1, 5.1));
        assert_eq!(out, Output::Suppressed);
        stage.commit(c);
        assert_eq!(stage.suppressed_total.load(Ordering::Relaxed), 2);
        // A bad reading is a point no rule applies to: it keeps the record.
        let mut bad = Record::from_value(
            "modbus/p1",
            "fast",
            &json!({"temp": {"value": 20.1, "quality": "good"}, "speed": {"value": null, "quality": "bad"}}),
        );
        bad.ts_ms = 2000;
        let (out, _) = stage.apply(&bad);
        let Output::Changed(r) = out else {
            panic!("{out:?}")
        };
        assert_eq!(
            r.payload_value(),
            json!({"speed": {"value": null, "quality": "bad"}})
        );
    }

    #[test]
    fn text_and_boolean_points_under_a_deadband_are_sent_when_they_change() {
        let stage = Preprocess::new(vec![rule(Some(Deadband::Absolute(0.5)), None, Some(60))]);
        let rec = |ts: u64, t: f64, model: &str, on: bool| {
            let mut r = Record::from_value(
                "modbus/p1",
                "slow",
                &json!({
                    "temp": {"value": t, "quality": "good"},
                    "model": {"value": model, "quality": "good"},
                    "running": {"value": on},
                    "site": "hall-2",
                }),
            );
            r.ts_ms = ts;
            r
        };
        let mut sent = Vec::new();
        for r in [
            rec(0, 20.0, "PX-1", true),
            rec(1_000, 20.1, "PX-1", true),
            rec(2_000, 20.2, "PX-2", true),
            rec(3_000, 20.3, "PX-2", false),
            rec(4_000, 20.4, "PX-2", false),
            rec(65_000, 20.4, "PX-2", false),
        ] {
            let (out, c) = stage.apply(&r);
            stage.commit(c);
            sent.push(match out {
                Output::Suppressed => Value::Null,
                Output::Unchanged => r.payload_value(),
                Output::Changed(c) => c.payload_value(),
            });
        }
        let keys = |v: &Value| -> Vec<String> {
            v.as_object()
                .map_or(vec![], |o| o.keys().cloned().collect())
        };
        let got: Vec<Vec<String>> = sent.iter().map(keys).collect();
        assert_eq!(
            got,
            vec![
                vec!["temp", "model", "running", "site"],
                vec![],
                vec!["model", "site"],
                vec!["running", "site"],
                vec![],
                // The heartbeat (60 s) sends every point again.
                vec!["temp", "model", "running", "site"],
            ]
        );
        assert_eq!(
            stage.suppressed_total.load(Ordering::Relaxed),
            3 + 2 + 2 + 3
        );
    }

    #[test]
    fn an_aggregated_poll_point_keeps_its_unit_and_says_its_window() {
        let mut avg = rule(None, Some((AggFn::Avg, 60)), None);
        avg.point = Some("temp".into());
        let stage = Preprocess::new(vec![avg]);
        for (ts, t) in [(0, 20.0), (30_000, 21.0)] {
            let (out, c) = stage.apply(&poll(ts, t, 1.0));
            assert!(matches!(out, Output::Changed(_)), "{out:?}");
            stage.commit(c);
        }
        let (out, _) = stage.apply(&poll(60_000, 30.0, 1.0));
        let Output::Changed(r) = out else {
            panic!("{out:?}")
        };
        assert_eq!(
            r.payload_value()["temp"],
            json!({"value": 20.5, "quality": "good", "unit": "°C",
                   "aggregate": {"fn": "avg", "window_start": "1970-01-01T00:00:00Z", "window_secs": 60.0, "count": 2}})
        );
    }
}
