//! The edge node's state, without I/O: its devices and their metrics (names, aliases,
//! datatypes, the values last known and last published), the sequence number, and the
//! messages each step makes. The session ([`super::session`]) feeds it what happens (a
//! session's births, a record, a poller's state, a command) and publishes what it returns.
//!
//! Rules it keeps:
//! - `seq` is 0 in NBIRTH and grows by one (wrapping at 256) with every DBIRTH, DDATA,
//!   DDEATH and NDATA; NDEATH has none.
//! - Aliases are given once per metric for the life of the process, unique across the node;
//!   `Node Control/Rebirth` and `bdSeq` have none (a host must find them by name).
//! - A device is *born* between its DBIRTH and its DDEATH; *known* once a DBIRTH of it went
//!   out in this session (the host then knows its aliases). A record of a device that is not
//!   known makes its DBIRTH first; so does a metric the device's last DBIRTH did not have
//!   (a rebirth), as a DBIRTH must hold every metric the device will publish.
//! - A record taken before the session's first NBIRTH is *historical*: it waited (the broker
//!   or the primary host was away). It goes out as one DDATA with every one of its values
//!   flagged `is_historical`, and changes nothing live. So does a record of a device that is
//!   known but not born (down now: its values are from the past). A live record of a born
//!   device publishes only the values that changed (report by exception, widened by the
//!   deadband rules), each with the poll's timestamp.
//! - A polled device's DBIRTH and DDEATH follow its poller's state ([`Plant`]); its DBIRTH
//!   carries the poller's current values.
//! - Once a DCMD to a point is answered, the next value of it read from then on goes out in a
//!   DDATA even when it did not change: the host sees the outcome (the written value, or the
//!   old one when the command was refused).

use std::collections::HashMap;

use rumqttc::QoS;
use serde_json::Value as Json;

use super::config::{DeadbandRule, PolledDevice};
use super::proto::{datatype as dt, quality, Metric, Payload, PropertySet, Value};
use super::values::{
    fit, learn, polled_samples, polled_samples_of, record_samples, to_json, PolledPayload, Sample,
    Val, MAX_NAME, MAX_SAMPLES,
};
use crate::brokers::mqtt::publish_size;
use crate::record::Record;
use crate::sinks::push::preprocess::Deadband;

/// Most devices made from records of other sources (each source is one device).
pub const MAX_DEVICES: usize = 1000;
/// Most metrics one device may have.
pub const MAX_METRICS: usize = 2000;
/// The namespace of every topic.
pub const NAMESPACE: &str = "spBv1.0";
/// The rebirth metric every NBIRTH carries.
pub const REBIRTH: &str = "Node Control/Rebirth";
/// Most bytes a metric of a birth takes besides its value and unit: a name of up to
/// [`MAX_NAME`] bytes, alias, timestamp, datatype, flags, the quality property and the
/// protobuf framing (about 80 bytes), with room to spare.
pub const METRIC_OVERHEAD: usize = MAX_NAME + 100;
/// Most times a value's room in a metric exceeds its room in the payload text: a string, a
/// bool, a number take no more than there (within the overhead), but an array (or an object
/// deeper than the names go) becomes its JSON as text, where a short number such as `1e15` is
/// written out in full (18 bytes).
pub const TEXT_GROWTH: usize = 5;

/// What the node reads of the pollers.
pub trait Plant {
    /// True while the poller of `source` has its device (the last request was answered).
    fn up(&self, source: &str) -> bool;
    /// When the poller last polled `source` (Unix ms) and its last values: poll group →
    /// point → `{"value", "quality", ...}`.
    fn current(&self, source: &str) -> Option<(u64, Json)>;
}

/// The node's own metrics (besides `bdSeq` and the rebirth control), as read now.
#[derive(Debug, Clone, PartialEq)]
pub struct NodeFigures {
    /// The connector's health model finds no problem (`state` `ok` in `/api/status`).
    pub healthy: bool,
    /// The sink's disk queue: percent of its quota.
    pub queue_fill_pct: f64,
    /// The sink's disk queue: rows.
    pub queue_rows: u64,
    /// Devices born now.
    pub devices_online: u64,
}

/// What a message is, for the counters.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// NBIRTH.
    NBirth,
    /// DBIRTH.
    DBirth,
    /// NDATA.
    NData,
    /// DDATA of live values.
    DData,
    /// DDATA of historical values.
    Historical,
    /// DDEATH.
    DDeath,
}

/// One message to publish.
#[derive(Debug, Clone, PartialEq)]
pub struct Msg {
    /// Its topic.
    pub topic: String,
    /// Its payload.
    pub payload: Payload,
    /// What it is.
    pub kind: Kind,
}

/// A command the node received, read.
#[derive(Debug, Clone, PartialEq)]
pub enum Inbound {
    /// `Node Control/Rebirth` = true: every birth again.
    Rebirth,
    /// A DCMD: points of a polled device to write, by point name, in the message's order.
    Write {
        /// The device's name.
        device: String,
        /// Point and value (null when the value is not one this node can write).
        points: Vec<(String, Json)>,
    },
    /// Anything else: the reason, for the log.
    Ignored(String),
}

/// A value as last known or published.
#[derive(Debug, Clone, PartialEq)]
struct Reading {
    val: Val,
    good: bool,
    ts: u64,
}

#[derive(Debug)]
struct MetricState {
    name: String,
    point: String,
    alias: u64,
    datatype: Option<u32>,
    /// The datatype comes from the config (a Modbus point's register type).
    declared: bool,
    unit: Option<String>,
    band: Option<Deadband>,
    last: Option<Reading>,
    live: Option<Reading>,
    /// A command to this point was answered at this time (Unix ms): the next value read
    /// from then on is published even when it did not change, so the host sees the outcome.
    report_from: Option<u64>,
}

#[derive(Debug)]
struct Device {
    id: String,
    source: String,
    polled: bool,
    metrics: Vec<MetricState>,
    index: HashMap<String, usize>,
    born: bool,
    known: bool,
}

/// Counts of one step, added to the sink's counters by the session.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Tally {
    /// Records that published nothing: every value was unchanged.
    pub unchanged: u64,
    /// Values skipped: a name too long, too many metrics, a payload of no use.
    pub skipped: u64,
    /// Records of a device that could not be made (over [`MAX_DEVICES`]).
    pub no_device: u64,
}

/// The edge node's state.
pub struct Node {
    group: String,
    node: String,
    devices: Vec<Device>,
    by_source: HashMap<String, usize>,
    deadbands: Vec<DeadbandRule>,
    next_alias: u64,
    seq: u8,
    bd_seq: u64,
    version: &'static str,
    /// Unix ms of this session's first NBIRTH; `None` before it.
    session_start: Option<u64>,
    last_figures: Option<NodeFigures>,
    /// Counts since the last [`Node::take_tally`].
    tally: Tally,
}

/// Aliases of the node metrics (1 to 4); devices' metrics start after them.
const ALIAS_HEALTHY: u64 = 1;
const ALIAS_FILL: u64 = 2;
const ALIAS_ROWS: u64 = 3;
const ALIAS_ONLINE: u64 = 4;
const ALIAS_VERSION: u64 = 5;

impl Node {
    /// The node `group`/`node` serving the polled devices `polled` (those whose records
    /// reach its sink), with deadband rules.
    pub fn new(
        group: &str,
        node: &str,
        polled: &[PolledDevice],
        deadbands: Vec<DeadbandRule>,
    ) -> Self {
        let mut n = Self {
            group: group.to_string(),
            node: node.to_string(),
            devices: Vec::new(),
            by_source: HashMap::new(),
            deadbands,
            next_alias: ALIAS_VERSION + 1,
            seq: 0,
            bd_seq: 0,
            version: crate::VERSION,
            session_start: None,
            last_figures: None,
            tally: Tally::default(),
        };
        for d in polled {
            let i = n.add_device(d.name.clone(), d.source.clone(), true);
            for m in &d.metrics {
                n.add_metric(i, &m.name, &m.point, m.datatype, m.unit.clone());
            }
        }
        n
    }

    /// The topic of message `verb` of the node (`device`: of one of its devices).
    pub fn topic(&self, verb: &str, device: Option<&str>) -> String {
        match device {
            Some(d) => format!("{NAMESPACE}/{}/{verb}/{}/{d}", self.group, self.node),
            None => format!("{NAMESPACE}/{}/{verb}/{}", self.group, self.node),
        }
    }

    /// The seq the next message will carry.
    pub fn seq(&self) -> u8 {
        self.seq
    }

    /// True between this session's first NBIRTH and its end.
    pub fn is_born(&self) -> bool {
        self.session_start.is_some()
    }

    /// Unix ms of this session's first NBIRTH.
    pub fn session_start(&self) -> Option<u64> {
        self.session_start
    }

    /// Devices born now.
    pub fn devices_online(&self) -> u64 {
        self.devices.iter().filter(|d| d.born).count() as u64
    }

    /// The counts since the last call.
    pub fn take_tally(&mut self) -> Tally {
        std::mem::take(&mut self.tally)
    }

    /// The NDEATH payload of session `bd_seq` (the Will, and what a clean stop publishes).
    pub fn ndeath(bd_seq: u64, now: u64) -> Payload {
        Payload {
            timestamp: Some(now),
            metrics: vec![Metric {
                name: Some("bdSeq".into()),
                timestamp: Some(now),
                datatype: Some(dt::INT64),
                value: Some(Value::LongValue(bd_seq)),
                ..Metric::default()
            }],
            ..Payload::default()
        }
    }

    /// The session ended (connection lost, closed, or the primary host went away): nothing
    /// is born any more, and the next NBIRTH starts a new session.
    pub fn end_session(&mut self) {
        self.session_start = None;
        for d in &mut self.devices {
            d.born = false;
            d.known = false;
        }
    }

    /// Every birth: the NBIRTH of session `bd_seq` (seq 0), then a DBIRTH of every polled
    /// device that is up and every other device seen so far. Also what a rebirth request
    /// gets (with the same `bd_seq`).
    pub fn births(
        &mut self,
        bd_seq: u64,
        now: u64,
        plant: &dyn Plant,
        figures: &NodeFigures,
    ) -> Vec<Msg> {
        self.bd_seq = bd_seq;
        self.seq = 0;
        self.session_start.get_or_insert(now);
        for d in &mut self.devices {
            d.born = false;
            d.known = false;
        }
        let mut out = vec![self.nbirth(now, figures)];
        for i in 0..self.devices.len() {
            let d = &self.devices[i];
            let birth = if d.polled {
                plant.up(&d.source)
            } else {
                !d.metrics.is_empty()
            };
            if birth {
                if self.devices[i].polled {
                    self.refresh(i, plant);
                }
                out.push(self.dbirth(i, now));
            }
        }
        out
    }

    fn nbirth(&mut self, now: u64, f: &NodeFigures) -> Msg {
        let metric = |name: &str, alias: Option<u64>, t: u32, v: Value| Metric {
            name: Some(name.to_string()),
            alias,
            timestamp: Some(now),
            datatype: Some(t),
            value: Some(v),
            ..Metric::default()
        };
        let metrics = vec![
            metric("bdSeq", None, dt::INT64, Value::LongValue(self.bd_seq)),
            metric(REBIRTH, None, dt::BOOLEAN, Value::BooleanValue(false)),
            metric(
                "Connector/Healthy",
                Some(ALIAS_HEALTHY),
                dt::BOOLEAN,
                Value::BooleanValue(f.healthy),
            ),
            metric(
                "Connector/Queue Fill",
                Some(ALIAS_FILL),
                dt::DOUBLE,
                Value::DoubleValue(f.queue_fill_pct),
            ),
            metric(
                "Connector/Queue Rows",
                Some(ALIAS_ROWS),
                dt::UINT64,
                Value::LongValue(f.queue_rows),
            ),
            metric(
                "Connector/Devices Online",
                Some(ALIAS_ONLINE),
                dt::UINT64,
                Value::LongValue(f.devices_online),
            ),
            metric(
                "Properties/Version",
                Some(ALIAS_VERSION),
                dt::STRING,
                Value::StringValue(self.version.to_string()),
            ),
        ];
        self.last_figures = Some(f.clone());
        let seq = self.next_seq();
        Msg {
            topic: self.topic("NBIRTH", None),
            payload: Payload {
                timestamp: Some(now),
                metrics,
                seq: Some(seq),
                ..Payload::default()
            },
            kind: Kind::NBirth,
        }
    }

    /// An NDATA of the node metrics that changed since they were last published.
    pub fn node_data(&mut self, now: u64, f: &NodeFigures) -> Option<Msg> {
        let last = self.last_figures.as_ref()?;
        let mut metrics = Vec::new();
        let mut put = |alias: u64, v: Value| {
            metrics.push(Metric {
                alias: Some(alias),
                timestamp: Some(now),
                value: Some(v),
                ..Metric::default()
            })
        };
        if f.healthy != last.healthy {
            put(ALIAS_HEALTHY, Value::BooleanValue(f.healthy));
        }
        if f.queue_fill_pct != last.queue_fill_pct {
            put(ALIAS_FILL, Value::DoubleValue(f.queue_fill_pct));
        }
        if f.queue_rows != last.queue_rows {
            put(ALIAS_ROWS, Value::LongValue(f.queue_rows));
        }
        if f.devices_online != last.devices_online {
            put(ALIAS_ONLINE, Value::LongValue(f.devices_online));
        }
        if metrics.is_empty() {
            return None;
        }
        self.last_figures = Some(f.clone());
        let seq = self.next_seq();
        Some(Msg {
            topic: self.topic("NDATA", None),
            payload: Payload {
                timestamp: Some(now),
                metrics,
                seq: Some(seq),
                ..Payload::default()
            },
            kind: Kind::NData,
        })
    }

    /// The polled devices whose poller's state changed: a DDEATH for a born device that is
    /// down, a DBIRTH for one that is up and not born.
    pub fn watch(&mut self, now: u64, plant: &dyn Plant) -> Vec<Msg> {
        let mut out = Vec::new();
        if !self.is_born() {
            return out;
        }
        for i in 0..self.devices.len() {
            let d = &self.devices[i];
            if !d.polled {
                continue;
            }
            let up = plant.up(&d.source);
            if up && !d.born {
                self.refresh(i, plant);
                out.push(self.dbirth(i, now));
            } else if !up && d.born {
                self.devices[i].born = false;
                let seq = self.next_seq();
                out.push(Msg {
                    topic: self.topic("DDEATH", Some(&self.devices[i].id)),
                    payload: Payload {
                        timestamp: Some(now),
                        seq: Some(seq),
                        ..Payload::default()
                    },
                    kind: Kind::DDeath,
                });
            }
        }
        out
    }

    /// The messages of one record, published in a born session.
    pub fn record(&mut self, r: &Record, now: u64, plant: &dyn Plant) -> Vec<Msg> {
        let Some(start) = self.session_start else {
            return Vec::new();
        };
        let historical = r.ts_ms < start;
        let Some(i) = self.device_for(&r.source) else {
            self.tally.no_device += 1;
            return Vec::new();
        };
        let polled = self.devices[i].polled;
        let parsed = Parsed::read(r, polled);
        let samples = parsed.samples(r, polled, &mut self.tally.skipped);
        let mut rebirth = !self.devices[i].known;
        if rebirth && self.devices[i].polled {
            self.refresh(i, plant);
        }
        let mut readings: Vec<(usize, Reading)> = Vec::with_capacity(samples.len());
        for s in &samples {
            let Some((m, reading, new_definition)) = self.take(i, s, r.ts_ms) else {
                continue;
            };
            rebirth |= new_definition;
            readings.push((m, reading));
        }
        let mut out = Vec::new();
        if rebirth {
            out.push(self.dbirth(i, now));
            if historical {
                out.extend(self.ddata(i, &readings, true, now));
            }
        } else if self.devices[i].born && !historical {
            let changed: Vec<(usize, Reading)> = readings
                .into_iter()
                .filter(|(m, reading)| {
                    let metric = &self.devices[i].metrics[*m];
                    changed(metric.live.as_ref(), reading, metric.band)
                        || metric.report_from.is_some_and(|t| reading.ts >= t)
                })
                .collect();
            // Made before `live` moves on: a quality that changed is said in the message.
            match self.ddata(i, &changed, false, now) {
                Some(msg) => out.push(msg),
                None => self.tally.unchanged += 1,
            }
            for (m, reading) in &changed {
                let metric = &mut self.devices[i].metrics[*m];
                metric.live = Some(reading.clone());
                metric.report_from = None;
            }
        } else {
            out.extend(self.ddata(i, &readings, true, now));
        }
        out
    }

    /// The bytes of the PUBLISH of the largest message record `r` can make, when that is over
    /// `cap`: its values as the metrics of one DBIRTH (name, alias, timestamp, datatype,
    /// quality, unit), which no DDATA of them outgrows. Changes nothing, so a record over the
    /// cap is refused before a birth carries its values (a birth carries every value last
    /// known). A record whose payload text is short enough is passed without reading it: it
    /// makes at most [`MAX_SAMPLES`] metrics of at most [`METRIC_OVERHEAD`] bytes besides their
    /// values and units, and these take at most [`TEXT_GROWTH`] times their room in the text.
    pub fn too_large(&self, r: &Record, cap: usize) -> Option<usize> {
        let device = self.by_source.get(&r.source).map(|&i| &self.devices[i]);
        let id = device.map_or_else(|| r.source.replace('/', ":"), |d| d.id.clone());
        let topic = self.topic("DBIRTH", Some(&id));
        let most = r.payload.get().len() * TEXT_GROWTH + MAX_SAMPLES * METRIC_OVERHEAD;
        if publish_size(&topic, QoS::AtMostOnce, most) <= cap {
            return None;
        }
        let polled = device.is_some_and(|d| d.polled);
        let parsed = Parsed::read(r, polled);
        let metrics = parsed
            .samples(r, polled, &mut 0)
            .iter()
            .map(|s| {
                let learned = learn(s.value);
                let mut props = PropertySet::default();
                if let Some(u) = s.unit {
                    props.string("engUnit", u);
                }
                props.quality(quality::GOOD);
                Metric {
                    name: Some(s.name.clone()),
                    alias: Some(u64::MAX),
                    timestamp: Some(u64::MAX),
                    datatype: Some(learned.as_ref().map_or(dt::STRING, |(t, _)| *t)),
                    is_historical: Some(true),
                    is_null: learned.is_none().then_some(true),
                    properties: Some(props),
                    value: learned.and_then(|(t, v)| v.encode(t)),
                    ..Metric::default()
                }
            })
            .collect();
        let payload = Payload {
            timestamp: Some(u64::MAX),
            metrics,
            seq: Some(255),
            ..Payload::default()
        };
        let size = publish_size(
            &topic,
            QoS::AtMostOnce,
            prost::Message::encoded_len(&payload),
        );
        (size > cap).then_some(size)
    }

    /// Reads a command published to the node or one of its devices.
    pub fn inbound(&self, topic: &str, payload: &[u8]) -> Inbound {
        let parts: Vec<&str> = topic.split('/').collect();
        let ours = parts.len() >= 4
            && parts[0] == NAMESPACE
            && parts[1] == self.group
            && parts[3] == self.node;
        if !ours {
            return Inbound::Ignored(format!("not a command topic of this node: {topic}"));
        }
        let p = match Payload::decode_bytes(payload) {
            Ok(p) => p,
            Err(e) => return Inbound::Ignored(format!("not a Sparkplug B payload: {e}")),
        };
        match (parts[2], parts.get(4), parts.len()) {
            ("NCMD", None, 4) => {
                let rebirth = p.metrics.iter().any(|m| {
                    m.name.as_deref() == Some(REBIRTH) && m.value == Some(Value::BooleanValue(true))
                });
                if rebirth {
                    Inbound::Rebirth
                } else {
                    Inbound::Ignored("an NCMD other than Node Control/Rebirth = true".into())
                }
            }
            ("DCMD", Some(device), 5) => self.write(device, &p),
            _ => Inbound::Ignored(format!("not a command topic of this node: {topic}")),
        }
    }

    /// A command to `points` of polled device `device` was answered at `at` (Unix ms): the
    /// next value of each read from then on goes out in a DDATA, changed or not, so the host
    /// sees what the command did (the new value, or the old one when it was refused).
    pub fn report_next(&mut self, device: &str, points: &[String], at: u64) {
        let Some(d) = self.devices.iter_mut().find(|d| d.polled && d.id == device) else {
            return;
        };
        for m in &mut d.metrics {
            if points.contains(&m.point) {
                m.report_from = Some(at);
            }
        }
    }

    fn write(&self, device: &str, p: &Payload) -> Inbound {
        let Some(d) = self.devices.iter().find(|d| d.id == device) else {
            return Inbound::Ignored(format!(
                "DCMD to {device:?}, which is not a device of this node"
            ));
        };
        if !d.polled {
            return Inbound::Ignored(format!("DCMD to {device:?}, which is not a polled device"));
        }
        let points = p
            .metrics
            .iter()
            .map(|m| {
                let known = match (&m.name, m.alias) {
                    (Some(name), _) => d.index.get(name).map(|&i| &d.metrics[i]),
                    (None, Some(alias)) => d.metrics.iter().find(|x| x.alias == alias),
                    (None, None) => None,
                };
                let point = match (known, &m.name, m.alias) {
                    (Some(k), _, _) => k.point.clone(),
                    // Unknown names and aliases go on as written: the commands service
                    // refuses them, on record.
                    (None, Some(name), _) => name.clone(),
                    (None, None, Some(alias)) => format!("alias {alias}"),
                    (None, None, None) => "(a metric without name or alias)".into(),
                };
                let t = m
                    .datatype
                    .or(known.and_then(|k| k.datatype))
                    .unwrap_or(dt::DOUBLE);
                (point, to_json(m.value.as_ref(), t).unwrap_or(Json::Null))
            })
            .collect();
        Inbound::Write {
            device: d.id.clone(),
            points,
        }
    }

    fn next_seq(&mut self) -> u64 {
        let s = self.seq;
        self.seq = self.seq.wrapping_add(1);
        u64::from(s)
    }

    fn add_device(&mut self, id: String, source: String, polled: bool) -> usize {
        let i = self.devices.len();
        self.by_source.insert(source.clone(), i);
        self.devices.push(Device {
            id,
            source,
            polled,
            metrics: Vec::new(),
            index: HashMap::new(),
            born: false,
            known: false,
        });
        i
    }

    fn device_for(&mut self, source: &str) -> Option<usize> {
        if let Some(&i) = self.by_source.get(source) {
            return Some(i);
        }
        let others = self.devices.iter().filter(|d| !d.polled).count();
        if others >= MAX_DEVICES {
            return None;
        }
        Some(self.add_device(source.replace('/', ":"), source.to_string(), false))
    }

    fn add_metric(
        &mut self,
        i: usize,
        name: &str,
        point: &str,
        datatype: Option<u32>,
        unit: Option<String>,
    ) -> Option<usize> {
        let d = &mut self.devices[i];
        if d.metrics.len() >= MAX_METRICS {
            return None;
        }
        let band = self
            .deadbands
            .iter()
            .filter(|r| r.source == d.source)
            .find(|r| r.point.as_deref() == Some(point))
            .or_else(|| {
                self.deadbands
                    .iter()
                    .find(|r| r.source == d.source && r.point.is_none())
            })
            .map(|r| r.band);
        let m = d.metrics.len();
        d.index.insert(name.to_string(), m);
        d.metrics.push(MetricState {
            name: name.to_string(),
            point: point.to_string(),
            alias: self.next_alias,
            datatype,
            declared: datatype.is_some(),
            unit,
            band,
            last: None,
            live: None,
            report_from: None,
        });
        self.next_alias += 1;
        Some(m)
    }

    /// Takes sample `s` of device `i` at `ts`: its metric (made when new), the reading, and
    /// whether the device's definition changed (a new metric, or one whose datatype is now
    /// known or different). Also makes it the last known value when it is the newest.
    fn take(&mut self, i: usize, s: &Sample, ts: u64) -> Option<(usize, Reading, bool)> {
        let (m, mut changed) = match self.devices[i].index.get(&s.name) {
            Some(&m) => (m, false),
            None => {
                // A metric is defined by its first value: a null says nothing of its type.
                learn(s.value)?;
                let m = self.add_metric(i, &s.name, &s.point, None, s.unit.map(str::to_string));
                let Some(m) = m else {
                    self.tally.skipped += 1;
                    return None;
                };
                (m, true)
            }
        };
        let metric = &mut self.devices[i].metrics[m];
        let val = match metric.datatype.map(|t| fit(s.value, t)) {
            Some(Some(v)) => v,
            // A configured type the value does not fit: no value (a device should never
            // send one); a learned type (or none yet): the metric takes the value's.
            Some(None) if metric.declared => Val::Null,
            _ => match learn(s.value) {
                Some((t, v)) => {
                    metric.datatype = Some(t);
                    changed = true;
                    v
                }
                None => Val::Null,
            },
        };
        let reading = Reading {
            good: s.good && (val != Val::Null || s.value.is_null()),
            val,
            ts,
        };
        let metric = &mut self.devices[i].metrics[m];
        if metric.last.as_ref().is_none_or(|l| l.ts <= ts) {
            metric.last = Some(reading.clone());
        }
        if metric.unit.is_none() && s.unit.is_some() {
            metric.unit = s.unit.map(str::to_string);
        }
        Some((m, reading, changed))
    }

    /// Merges the poller's current values of polled device `i` into what is last known.
    fn refresh(&mut self, i: usize, plant: &dyn Plant) {
        let Some((ts, groups)) = plant.current(&self.devices[i].source) else {
            return;
        };
        let Json::Object(groups) = groups else { return };
        let mut skipped = 0;
        for (group, points) in &groups {
            for s in polled_samples(group, points, &mut skipped) {
                let Some(&m) = self.devices[i].index.get(&s.name) else {
                    continue;
                };
                let metric = &self.devices[i].metrics[m];
                if metric.last.as_ref().is_some_and(|l| l.ts > ts) {
                    continue;
                }
                // Known types only here: a learned one waits for a record.
                if metric.datatype.is_none() {
                    if let Some((t, _)) = learn(s.value) {
                        self.devices[i].metrics[m].datatype = Some(t);
                    }
                }
                let metric = &mut self.devices[i].metrics[m];
                let Some(t) = metric.datatype else { continue };
                let val = fit(s.value, t).unwrap_or(Val::Null);
                metric.last = Some(Reading {
                    good: s.good,
                    val,
                    ts,
                });
            }
        }
    }

    fn dbirth(&mut self, i: usize, now: u64) -> Msg {
        let d = &mut self.devices[i];
        let mut metrics = Vec::with_capacity(d.metrics.len());
        for m in &mut d.metrics {
            let Some(t) = m.datatype else { continue };
            let reading = m.last.clone();
            let mut props = PropertySet::default();
            if let Some(u) = &m.unit {
                props.string("engUnit", u);
            }
            let good = reading.as_ref().is_some_and(|r| r.good);
            props.quality(if good { quality::GOOD } else { quality::BAD });
            let value = reading.as_ref().and_then(|r| r.val.encode(t));
            metrics.push(Metric {
                name: Some(m.name.clone()),
                alias: Some(m.alias),
                timestamp: Some(reading.as_ref().map_or(now, |r| r.ts)),
                datatype: Some(t),
                is_null: value.is_none().then_some(true),
                properties: Some(props),
                value,
                ..Metric::default()
            });
            if m.report_from
                .is_some_and(|t| reading.as_ref().is_some_and(|r| r.ts >= t))
            {
                m.report_from = None;
            }
            m.live = reading;
        }
        d.born = true;
        d.known = true;
        let topic = format!("{NAMESPACE}/{}/DBIRTH/{}/{}", self.group, self.node, d.id);
        let seq = self.next_seq();
        Msg {
            topic,
            payload: Payload {
                timestamp: Some(now),
                metrics,
                seq: Some(seq),
                ..Payload::default()
            },
            kind: Kind::DBirth,
        }
    }

    fn ddata(
        &mut self,
        i: usize,
        readings: &[(usize, Reading)],
        historical: bool,
        now: u64,
    ) -> Option<Msg> {
        if readings.is_empty() {
            return None;
        }
        let d = &self.devices[i];
        let metrics = readings
            .iter()
            .filter_map(|(m, r)| {
                let metric = &d.metrics[*m];
                let t = metric.datatype?;
                let value = r.val.encode(t);
                // Live: when the quality changed. Historical (which leaves the live state
                // alone): when it is bad; a value without the property is good.
                let say_quality = if historical {
                    !r.good
                } else {
                    metric.live.as_ref().is_none_or(|l| l.good != r.good)
                };
                let properties = say_quality.then(|| {
                    let mut p = PropertySet::default();
                    p.quality(if r.good { quality::GOOD } else { quality::BAD });
                    p
                });
                Some(Metric {
                    alias: Some(metric.alias),
                    timestamp: Some(r.ts),
                    is_historical: historical.then_some(true),
                    is_null: value.is_none().then_some(true),
                    properties,
                    value,
                    ..Metric::default()
                })
            })
            .collect::<Vec<_>>();
        if metrics.is_empty() {
            return None;
        }
        let topic = format!("{NAMESPACE}/{}/DDATA/{}/{}", self.group, self.node, d.id);
        let seq = self.next_seq();
        Some(Msg {
            topic,
            payload: Payload {
                timestamp: Some(now),
                metrics,
                seq: Some(seq),
                ..Payload::default()
            },
            kind: if historical {
                Kind::Historical
            } else {
                Kind::DData
            },
        })
    }
}

/// What a record's samples borrow from: its payload's JSON tree, or a poller's text read point
/// by point ([`PolledPayload`], no tree of the whole of it: a drain reads one per record).
enum Parsed<'a> {
    Json(Json),
    Polled(PolledPayload<'a>),
}

impl<'a> Parsed<'a> {
    /// Reads record `r` of a device (`polled`: a poller's, read from its text when it has the
    /// shape; any other record through its JSON tree).
    fn read(r: &'a Record, polled: bool) -> Self {
        if polled {
            if let Some(p) = PolledPayload::read(r.payload.get()) {
                return Self::Polled(p);
            }
        }
        Self::Json(r.payload_value())
    }

    /// The samples of record `r`, read as [`Parsed::read`] read it.
    fn samples<'s>(&'s self, r: &Record, polled: bool, skipped: &mut u64) -> Vec<Sample<'s>> {
        match self {
            Self::Polled(p) => polled_samples_of(&r.key, p, skipped),
            Self::Json(payload) if polled => polled_samples(&r.key, payload, skipped),
            Self::Json(payload) => record_samples(payload, skipped),
        }
    }
}

/// True when `new` is worth publishing after `live`, the value last published.
fn changed(live: Option<&Reading>, new: &Reading, band: Option<Deadband>) -> bool {
    let Some(live) = live else { return true };
    if live.good != new.good {
        return true;
    }
    match (band, live.val.number(), new.val.number()) {
        (Some(band), Some(last), Some(now)) => {
            let width = match band {
                Deadband::Absolute(a) => a,
                Deadband::Percent(p) => last.abs() * p / 100.0,
            };
            (now - last).abs() > width
        }
        _ => live.val != new.val,
    }
}

#[cfg(test)]
mod tests {
    use std::cell::RefCell;
    use std::collections::HashMap;

    use serde_json::json;

    use super::*;
    use crate::sinks::sparkplug::config::MetricDef;

    /// Pollers in memory: up or not, and their values.
    #[derive(Default)]
    struct Fake {
        up: RefCell<HashMap<String, bool>>,
        values: RefCell<HashMap<String, (u64, Json)>>,
    }

    impl Plant for Fake {
        fn up(&self, source: &str) -> bool {
            self.up.borrow().get(source).copied().unwrap_or(false)
        }
        fn current(&self, source: &str) -> Option<(u64, Json)> {
            self.values.borrow().get(source).cloned()
        }
    }

    fn press() -> PolledDevice {
        let def = |name: &str, point: &str, t: u32, unit: Option<&str>| MetricDef {
            name: name.into(),
            point: point.into(),
            datatype: Some(t),
            unit: unit.map(str::to_string),
        };
        PolledDevice {
            source: "modbus/press".into(),
            name: "press".into(),
            metrics: vec![
                def("fast/temp", "temp", dt::FLOAT, Some("°C")),
                def("fast/count", "count", dt::INT16, None),
                def("slow/on", "on", dt::BOOLEAN, None),
            ],
        }
    }

    fn figures() -> NodeFigures {
        NodeFigures {
            healthy: true,
            queue_fill_pct: 0.0,
            queue_rows: 0,
            devices_online: 0,
        }
    }

    fn record(source: &str, key: &str, ts: u64, payload: Json) -> Record {
        let mut r = Record::from_value(source, key, &payload);
        r.ts_ms = ts;
        r
    }

    fn point(v: Json) -> Json {
        json!({"value": v, "quality": "good"})
    }

    /// A node born at 1000 with `press` up, holding temp 20.5 and count -3.
    fn born(deadbands: Vec<DeadbandRule>) -> (Node, Fake, Vec<Msg>) {
        let mut node = Node::new("plant", "gw", &[press()], deadbands);
        let fake = Fake::default();
        fake.up.borrow_mut().insert("modbus/press".into(), true);
        fake.values.borrow_mut().insert(
            "modbus/press".into(),
            (900, json!({"fast": {"temp": point(json!(20.5)), "count": point(json!(-3))}, "slow": null})),
        );
        let births = node.births(7, 1000, &fake, &figures());
        (node, fake, births)
    }

    #[test]
    fn a_record_over_the_packet_cap_is_found_before_it_changes_the_node_and_measured_no_smaller_than_its_messages(
    ) {
        let (mut node, fake, _) = born(Vec::new());
        let cap = 4096;
        let small = record("ingest/orders", "o-1", 2000, json!({"qty": 1}));
        assert_eq!(node.too_large(&small, cap), None);
        let big = record(
            "ingest/orders",
            "o-2",
            2000,
            json!({"qty": 2, "note": "x".repeat(cap), "tags": [1e15, 2e15]}),
        );
        let seq = node.seq();
        let size = node.too_large(&big, cap).expect("over the cap");
        assert!(size > cap, "{size}");
        assert_eq!(node.seq(), seq);
        assert!(!node.by_source.contains_key("ingest/orders"));
        // Let through, its messages (its device's DBIRTH first) are no larger than measured.
        let msgs = node.record(&big, 2000, &fake);
        assert!(!msgs.is_empty());
        for m in &msgs {
            let wire = publish_size(&m.topic, QoS::AtMostOnce, m.payload.encode().len());
            assert!(wire <= size, "{wire} > {size}: {}", m.topic);
        }
    }

    fn metric<'a>(msg: &'a Msg, name: &str) -> &'a Metric {
        msg.payload
            .metrics
            .iter()
            .find(|m| m.name.as_deref() == Some(name))
            .unwrap_or_else(|| panic!("no metric {name} in {msg:?}"))
    }

    #[test]
    fn births_name_every_point_with_its_alias_datatype_and_current_value() {
        let (node, _, births) = born(Vec::new());
        assert_eq!(births.len(), 2);
        let nbirth = &births[0];
        assert_eq!(nbirth.topic, "spBv1.0/plant/NBIRTH/gw");
        assert_eq!(nbirth.payload.seq, Some(0));
        assert_eq!(metric(nbirth, "bdSeq").value, Some(Value::LongValue(7)));
        let rebirth = metric(nbirth, REBIRTH);
        assert_eq!(rebirth.alias, None);
        assert_eq!(rebirth.value, Some(Value::BooleanValue(false)));
        let dbirth = &births[1];
        assert_eq!(dbirth.topic, "spBv1.0/plant/DBIRTH/gw/press");
        assert_eq!(dbirth.payload.seq, Some(1));
        let temp = metric(dbirth, "fast/temp");
        assert_eq!(temp.datatype, Some(dt::FLOAT));
        assert_eq!(temp.value, Some(Value::FloatValue(20.5)));
        assert_eq!(temp.timestamp, Some(900));
        let props = temp.properties.as_ref().unwrap();
        assert_eq!(props.keys, ["engUnit", "Quality"]);
        assert_eq!(
            metric(dbirth, "fast/count").value,
            Some(Value::IntValue(65533))
        );
        // Not polled yet: null, bad quality.
        let on = metric(dbirth, "slow/on");
        assert_eq!((on.is_null, on.value.clone()), (Some(true), None));
        let aliases: Vec<u64> = dbirth
            .payload
            .metrics
            .iter()
            .filter_map(|m| m.alias)
            .collect();
        assert_eq!(aliases.len(), 3);
        let node_aliases: Vec<u64> = nbirth
            .payload
            .metrics
            .iter()
            .filter_map(|m| m.alias)
            .collect();
        assert!(
            aliases.iter().all(|a| !node_aliases.contains(a)),
            "{aliases:?} {node_aliases:?}"
        );
        assert_eq!(node.seq(), 2);
    }

    #[test]
    fn a_live_record_publishes_only_what_changed_by_alias_with_the_polls_timestamp() {
        let (mut node, fake, births) = born(Vec::new());
        let alias = |name: &str| metric(&births[1], name).alias;
        let msgs = node.record(
            &record(
                "modbus/press",
                "fast",
                2000,
                json!({"temp": point(json!(20.5)), "count": point(json!(4))}),
            ),
            2001,
            &fake,
        );
        assert_eq!(msgs.len(), 1);
        let d = &msgs[0];
        assert_eq!(d.topic, "spBv1.0/plant/DDATA/gw/press");
        assert_eq!(d.kind, Kind::DData);
        assert_eq!(d.payload.seq, Some(2));
        assert_eq!(d.payload.metrics.len(), 1);
        let m = &d.payload.metrics[0];
        assert_eq!(
            (m.alias, m.name.clone(), m.datatype),
            (alias("fast/count"), None, None)
        );
        assert_eq!(
            (m.timestamp, m.value.clone()),
            (Some(2000), Some(Value::IntValue(4)))
        );
        assert_eq!(m.is_historical, None);
        // The same values again: nothing.
        let again = record(
            "modbus/press",
            "fast",
            3000,
            json!({"temp": point(json!(20.5)), "count": point(json!(4))}),
        );
        assert!(node.record(&again, 3001, &fake).is_empty());
        assert_eq!(node.take_tally().unchanged, 1);
    }

    #[test]
    fn a_value_whose_quality_changes_says_so_in_its_ddata() {
        let (mut node, fake, _) = born(Vec::new());
        let bad = record(
            "modbus/press",
            "fast",
            2000,
            json!({"count": {"value": null, "quality": "bad"}}),
        );
        let msgs = node.record(&bad, 2001, &fake);
        let m = &msgs[0].payload.metrics[0];
        assert_eq!(m.is_null, Some(true));
        let props = m.properties.as_ref().expect("the quality is said");
        assert_eq!(props.keys, ["Quality"]);
        let good = record(
            "modbus/press",
            "fast",
            3000,
            json!({"count": point(json!(5))}),
        );
        let msgs = node.record(&good, 3001, &fake);
        assert!(msgs[0].payload.metrics[0].properties.is_some());
        // The same quality again: no property.
        let again = record(
            "modbus/press",
            "fast",
            4000,
            json!({"count": point(json!(6))}),
        );
        let msgs = node.record(&again, 4001, &fake);
        assert_eq!(msgs[0].payload.metrics[0].properties, None);
    }

    #[test]
    fn after_a_command_the_next_value_read_goes_out_even_when_it_did_not_change() {
        let (mut node, fake, _) = born(Vec::new());
        node.report_next("press", &["count".to_string()], 2000);
        let same = |ts: u64| {
            record(
                "modbus/press",
                "fast",
                ts,
                json!({"temp": point(json!(20.5)), "count": point(json!(-3))}),
            )
        };
        // Read before the answer: nothing changed, nothing goes out.
        assert!(node.record(&same(1900), 2001, &fake).is_empty());
        let msgs = node.record(&same(2000), 2001, &fake);
        assert_eq!(msgs.len(), 1);
        assert_eq!(msgs[0].payload.metrics.len(), 1, "only the commanded point");
        assert_eq!(
            msgs[0].payload.metrics[0].value,
            Some(Value::IntValue(65533))
        );
        // Once.
        assert!(node.record(&same(2100), 2101, &fake).is_empty());
        // Not a polled device, or no such point: nothing to do.
        node.report_next("ghost", &["count".to_string()], 1);
        node.report_next("press", &["nope".to_string()], 1);
        assert!(node.record(&same(2200), 2201, &fake).is_empty());
    }

    #[test]
    fn a_deadband_keeps_small_moves_back_and_compares_with_what_was_published() {
        let rule = DeadbandRule {
            source: "modbus/press".into(),
            point: Some("temp".into()),
            band: Deadband::Absolute(0.5),
        };
        let (mut node, fake, _) = born(vec![rule]);
        let mut sent = Vec::new();
        for (i, t) in [20.7, 20.9, 21.1, 20.8].into_iter().enumerate() {
            let r = record(
                "modbus/press",
                "fast",
                2000 + i as u64,
                json!({"temp": point(json!(t))}),
            );
            for m in node.record(&r, 5000, &fake) {
                sent.push(m.payload.metrics[0].value.clone());
            }
        }
        assert_eq!(sent, [Some(Value::FloatValue(21.1))]);
    }

    #[test]
    fn what_waited_from_before_the_births_goes_out_whole_and_flagged_historical() {
        let (mut node, fake, _) = born(Vec::new());
        let old = record(
            "modbus/press",
            "fast",
            500,
            json!({"temp": point(json!(20.5)), "count": point(json!(-3))}),
        );
        let msgs = node.record(&old, 1100, &fake);
        assert_eq!(msgs.len(), 1);
        assert_eq!(msgs[0].kind, Kind::Historical);
        let metrics = &msgs[0].payload.metrics;
        assert_eq!(metrics.len(), 2);
        assert!(metrics
            .iter()
            .all(|m| m.is_historical == Some(true) && m.timestamp == Some(500)));
        // Good values need no Quality property; a bad one says so.
        assert!(metrics.iter().all(|m| m.properties.is_none()));
        let bad = record(
            "modbus/press",
            "fast",
            600,
            json!({"count": {"value": null, "quality": "bad"}}),
        );
        let msgs = node.record(&bad, 1100, &fake);
        assert!(msgs[0].payload.metrics[0].properties.is_some());
        // The live values are untouched: a live record equal to the birth publishes nothing.
        let live = record(
            "modbus/press",
            "fast",
            1200,
            json!({"temp": point(json!(20.5)), "count": point(json!(-3))}),
        );
        assert!(node.record(&live, 1201, &fake).is_empty());
    }

    #[test]
    fn a_device_its_poller_loses_dies_and_is_born_again_when_it_is_back() {
        let (mut node, fake, _) = born(Vec::new());
        assert!(node.watch(1100, &fake).is_empty());
        fake.up.borrow_mut().insert("modbus/press".into(), false);
        let death = node.watch(1200, &fake);
        assert_eq!(death.len(), 1);
        assert_eq!(death[0].topic, "spBv1.0/plant/DDEATH/gw/press");
        assert_eq!(death[0].payload.seq, Some(2));
        assert!(node.watch(1300, &fake).is_empty());
        // A record polled before it died: known to the host, so historical.
        let late = record(
            "modbus/press",
            "fast",
            1150,
            json!({"temp": point(json!(22.0))}),
        );
        assert_eq!(node.record(&late, 1310, &fake)[0].kind, Kind::Historical);
        fake.up.borrow_mut().insert("modbus/press".into(), true);
        let birth = node.watch(1400, &fake);
        assert_eq!(birth.len(), 1);
        assert_eq!(birth[0].kind, Kind::DBirth);
        assert_eq!(birth[0].payload.seq, Some(4));
        assert_eq!(node.devices_online(), 1);
    }

    #[test]
    fn another_sources_records_make_a_device_that_is_reborn_for_each_new_metric() {
        let (mut node, fake, _) = born(Vec::new());
        let first = node.record(
            &record(
                "ingest/orders",
                "o-1",
                2000,
                json!({"qty": 2, "line": {"speed": 1.5}}),
            ),
            2001,
            &fake,
        );
        assert_eq!(first.len(), 1);
        assert_eq!(first[0].topic, "spBv1.0/plant/DBIRTH/gw/ingest:orders");
        assert_eq!(metric(&first[0], "qty").datatype, Some(dt::INT64));
        assert_eq!(metric(&first[0], "line/speed").datatype, Some(dt::DOUBLE));
        let qty_alias = metric(&first[0], "qty").alias;
        let same = node.record(
            &record("ingest/orders", "o-2", 2100, json!({"qty": 3})),
            2101,
            &fake,
        );
        assert_eq!(same[0].kind, Kind::DData);
        let more = node.record(
            &record(
                "ingest/orders",
                "o-3",
                2200,
                json!({"qty": 3, "note": "rush"}),
            ),
            2201,
            &fake,
        );
        assert_eq!(more.len(), 1);
        assert_eq!(more[0].kind, Kind::DBirth);
        assert_eq!(metric(&more[0], "qty").alias, qty_alias);
        assert_eq!(
            metric(&more[0], "note").value,
            Some(Value::StringValue("rush".into()))
        );
        // An integer metric that gets a fraction becomes a Double: a rebirth.
        let wider = node.record(
            &record("ingest/orders", "o-4", 2300, json!({"qty": 2.5})),
            2301,
            &fake,
        );
        assert_eq!(metric(&wider[0], "qty").datatype, Some(dt::DOUBLE));
        // A rebirth request births it again, by its name, with its aliases.
        let births = node.births(7, 3000, &fake, &figures());
        assert_eq!(births.len(), 3);
        assert_eq!(metric(&births[2], "qty").alias, qty_alias);
    }

    #[test]
    fn commands_are_read_by_alias_or_name_and_only_for_this_node() {
        let (node, _, births) = born(Vec::new());
        let count = metric(&births[1], "fast/count").alias;
        let dcmd = Payload {
            timestamp: Some(1),
            metrics: vec![
                Metric {
                    alias: count,
                    value: Some(Value::IntValue(u32::MAX)),
                    ..Metric::default()
                },
                Metric {
                    name: Some("fast/temp".into()),
                    datatype: Some(dt::FLOAT),
                    value: Some(Value::FloatValue(72.5)),
                    ..Metric::default()
                },
                Metric {
                    name: Some("nope".into()),
                    value: Some(Value::BooleanValue(true)),
                    ..Metric::default()
                },
            ],
            ..Payload::default()
        };
        assert_eq!(
            node.inbound("spBv1.0/plant/DCMD/gw/press", &dcmd.encode()),
            Inbound::Write {
                device: "press".into(),
                points: vec![
                    ("count".into(), json!(-1)),
                    ("temp".into(), json!(72.5)),
                    ("nope".into(), json!(true)),
                ],
            }
        );
        let rebirth = Payload {
            metrics: vec![Metric {
                name: Some(REBIRTH.into()),
                datatype: Some(dt::BOOLEAN),
                value: Some(Value::BooleanValue(true)),
                ..Metric::default()
            }],
            ..Payload::default()
        };
        assert_eq!(
            node.inbound("spBv1.0/plant/NCMD/gw", &rebirth.encode()),
            Inbound::Rebirth
        );
        assert!(matches!(
            node.inbound("spBv1.0/plant/NCMD/other", &rebirth.encode()),
            Inbound::Ignored(_)
        ));
        assert!(matches!(
            node.inbound("spBv1.0/plant/DCMD/gw/ghost", &dcmd.encode()),
            Inbound::Ignored(_)
        ));
        assert!(matches!(
            node.inbound("spBv1.0/plant/DCMD/gw/press", b"\xff\xff"),
            Inbound::Ignored(_)
        ));
    }

    #[test]
    fn seq_wraps_from_255_to_0_and_nbirth_starts_again_at_0() {
        let (mut node, fake, _) = born(Vec::new());
        let mut seqs = Vec::new();
        for i in 0..300u64 {
            let r = record(
                "modbus/press",
                "fast",
                2000 + i,
                json!({"count": point(json!(i as i64 % 100))}),
            );
            seqs.extend(
                node.record(&r, 5000, &fake)
                    .iter()
                    .map(|m| m.payload.seq.unwrap()),
            );
        }
        assert_eq!(seqs.len(), 300);
        for w in seqs.windows(2) {
            assert_eq!(w[1], (w[0] + 1) % 256, "{w:?}");
        }
        assert_eq!(
            node.births(7, 9000, &fake, &figures())[0].payload.seq,
            Some(0)
        );
    }
}
