//! The S7 driver: one per PLC, on the one poll loop ([`crate::sources::poll_loop`]), which
//! schedules its groups, runs its commands between polls and keeps its status.
//!
//! - **Reads.** A group's points are planned again whenever the PDU the CPU granted
//!   changes (at the first connection, and after a reconnect to a CPU that grants another):
//!   the fewest ReadVar requests that PDU allows ([`super::plan`]). The granted size is the
//!   device's `pdu_size` in its status. An item the PLC refuses is that point's bad quality
//!   with the reason in words, counted as a refusal; the others keep their values.
//! - **Scale and deadband.** A number with `scale` is the PLC's number times it (rounded to
//!   the scale's decimals when the PLC's number is whole). A number with a `deadband`
//!   keeps the value last reported until it moves by more than the deadband.
//! - **Writes** ([`Driver::check`], [`Driver::write`]): every point is checked first (a
//!   point of the device, writable, its value fits the type and, once rounded to the PLC's
//!   resolution, `min` and `max`); when one is refused nothing is sent. Then one WriteVar
//!   request per point, in the command's order, none after the command's deadline. A bit
//!   is written as a BIT item at its own address, never as a read-modify-write of its
//!   byte. A request without an answer is `unknown`, never sent again, and nothing after
//!   it is sent. With `verify`, each point is read back and compared.

use std::sync::atomic::Ordering;
use std::time::Instant;

use serde_json::{json, Map, Value};

use super::client::Connection;
use super::config::{S7DeviceConfig, S7PointConfig};
use super::error::{Error, ItemError, WriteError};
use super::plan::{Item, Plan};
use super::types::{self, DataType};
use crate::commands::command::{all, NOT_SENT, OTHER_REFUSED};
use crate::commands::{Command, Commands, DeviceError, PointResult};
use crate::sources::catalogue::{engineering, Catalogue};
use crate::sources::driver::{Driver, GroupRead, LinkError, Results};
use crate::sources::poll_loop::{PollLoop, Schedule, BACKOFF_START};
use crate::sources::status::DeviceStatus;

/// One group's points and, once connected, their plan for the granted PDU.
#[derive(Debug)]
pub struct GroupPlan {
    /// The indexes of the group's points in the device's points.
    points: Vec<usize>,
    /// Their items, in the same order.
    items: Vec<Item>,
    /// The requests for the PDU last granted.
    plan: Option<Plan>,
}

/// A command's point, checked: its index in the command, its item, and the value to write
/// as the PLC holds it (after the scale).
pub type Write = (usize, Item, Value);

/// One PLC and its connection.
pub struct S7Driver {
    device: S7DeviceConfig,
    conn: Option<Connection>,
    /// The last connection failure, for its hint.
    last_error: Option<Error>,
    /// Per point: the number last reported and its entry's value (for the deadband).
    reported: Vec<Option<(f64, Value)>>,
}

impl S7Driver {
    /// The driver of `device`, not connected.
    pub fn new(device: S7DeviceConfig) -> Self {
        let reported = vec![None; device.points.len()];
        Self {
            device,
            conn: None,
            last_error: None,
            reported,
        }
    }

    fn link_error(&mut self, e: Error, opening: bool) -> LinkError {
        let out = match &e {
            Error::Timeout { .. } => LinkError::Timeout,
            Error::Io(m) if opening => LinkError::Open(m.clone()),
            Error::Refused(m) => LinkError::Open(m.clone()),
            Error::Io(m) => LinkError::Transport(m.clone()),
            Error::Protocol(m) => LinkError::Framing(m.clone()),
        };
        self.last_error = Some(e);
        out
    }

    /// The point's entry from its value: scaled, held within its deadband, with its unit.
    fn entry(&mut self, i: usize, value: &types::Value) -> Value {
        let Some(point) = self.device.points.get(i) else {
            return Value::Null;
        };
        let mut shown = match (point.scale, value) {
            (Some(s), types::Value::Unsigned(n)) => {
                number(engineering(*n as f64, Some(s), None, true))
            }
            (Some(s), types::Value::Signed(n)) => {
                number(engineering(*n as f64, Some(s), None, true))
            }
            (Some(s), types::Value::Float(f)) => number(engineering(*f, Some(s), None, false)),
            _ => value.to_json(),
        };
        if let (Some(band), Some(x)) = (point.deadband, shown.as_f64()) {
            match &self.reported[i] {
                Some((last, kept)) if (x - last).abs() <= band => shown = kept.clone(),
                _ => self.reported[i] = Some((x, shown.clone())),
            }
        }
        let mut entry = json!({"value": shown, "quality": "good"});
        with_unit(&mut entry, point);
        entry
    }
}

fn number(x: f64) -> Value {
    serde_json::Number::from_f64(x).map_or(Value::Null, Value::Number)
}

fn with_unit(entry: &mut Value, point: &S7PointConfig) {
    if let (Some(u), Value::Object(m)) = (&point.unit, entry) {
        m.insert("unit".into(), Value::String(u.clone()));
    }
}

/// The value `value` (in engineering units) becomes in the PLC: checked against `min` and
/// `max` as the PLC will hold it once rounded to its resolution, and against the type.
fn to_plc(point: &S7PointConfig, value: &Value) -> Result<Value, String> {
    let t = point.item.data_type;
    let raw = if point.is_number() {
        let x = value
            .as_f64()
            .ok_or_else(|| format!("expected a number, got {value}"))?;
        let whole = !matches!(t, DataType::Real | DataType::LReal);
        let (raw, held) = match point.scale {
            Some(s) => {
                let raw = if whole { (x / s).round() } else { x / s };
                (raw, engineering(raw, Some(s), None, whole))
            }
            None => (x, x),
        };
        let bounds = (point.min, point.max);
        if bounds.0.is_some_and(|lo| held < lo) || bounds.1.is_some_and(|hi| held > hi) {
            let lo = bounds.0.map_or("-inf".into(), |v| v.to_string());
            let hi = bounds.1.map_or("inf".into(), |v| v.to_string());
            return Err(if held == x {
                format!("{x} is outside {lo}..={hi}")
            } else {
                format!("{x} is held as {held} by the PLC, outside {lo}..={hi}")
            });
        }
        if whole && point.scale.is_some() {
            json!(raw as i64)
        } else {
            number(raw)
        }
    } else {
        value.clone()
    };
    t.encode(&raw)?;
    Ok(raw)
}

/// A write's outcome when the PLC refused it.
fn refused(e: &ItemError) -> PointResult {
    match e {
        ItemError::Refused { code, .. } => PointResult::Exception(DeviceError::Coded {
            code: u16::from(*code),
            reason: e.to_string(),
        }),
        ItemError::Request { code } => PointResult::Exception(DeviceError::Coded {
            code: *code,
            reason: e.to_string(),
        }),
        other => PointResult::OutOfRange(other.to_string()),
    }
}

impl Driver for S7Driver {
    type Plan = GroupPlan;
    type Writes = Vec<Write>;

    fn plan(&self, _member: usize, group: usize) -> GroupPlan {
        let points: Vec<usize> = (0..self.device.points.len())
            .filter(|&i| self.device.points[i].group == group)
            .collect();
        let items = points.iter().map(|&i| self.device.points[i].item).collect();
        GroupPlan {
            points,
            items,
            plan: None,
        }
    }

    fn is_open(&self) -> bool {
        self.conn.is_some()
    }

    async fn open(&mut self, _member: usize) -> Result<(), LinkError> {
        match Connection::open(&self.device.endpoint).await {
            Ok(c) => {
                self.conn = Some(c);
                Ok(())
            }
            Err(e) => Err(self.link_error(e, true)),
        }
    }

    async fn read(
        &mut self,
        _member: usize,
        plan: &mut GroupPlan,
        status: &DeviceStatus,
    ) -> Result<GroupRead, LinkError> {
        let Some(conn) = self.conn.as_mut() else {
            return Err(LinkError::Open("not open".into()));
        };
        let pdu = conn.pdu_size();
        if plan.plan.as_ref().map(|p| p.pdu) != Some(pdu) {
            plan.plan = Some(conn.plan(&plan.items));
            status.set_detail("pdu_size", pdu.into());
        }
        let Some(planned) = plan.plan.as_ref() else {
            return Err(LinkError::Open("not planned".into()));
        };
        let before = conn.reads_sent();
        let values = conn.read(&plan.items, planned).await;
        let requests = conn.reads_sent() - before;
        status.requests_total.fetch_add(requests, Ordering::Relaxed);
        let values = match values {
            Ok(v) => v,
            Err(e) => return Err(self.link_error(e, false)),
        };
        let mut points = Map::new();
        for (&i, value) in plan.points.iter().zip(&values) {
            let entry = match value {
                Ok(v) => self.entry(i, v),
                Err(e) => {
                    status.exceptions_total.fetch_add(1, Ordering::Relaxed);
                    let Some(point) = self.device.points.get(i) else {
                        continue;
                    };
                    status.set_exception(
                        format!("{e} (point {})", point.name),
                        e.hint().map(String::from),
                    );
                    let mut entry =
                        json!({"value": null, "quality": "bad", "error": e.to_string()});
                    with_unit(&mut entry, point);
                    entry
                }
            };
            if let Some(point) = self.device.points.get(i) {
                points.insert(point.name.clone(), entry);
            }
        }
        Ok(GroupRead {
            points,
            requests,
            ts_ms: None,
        })
    }

    fn check(&self, _member: usize, command: &Command) -> Result<Vec<Write>, Results> {
        let d = &self.device;
        let checked: Vec<Result<Write, PointResult>> = command
            .points
            .iter()
            .enumerate()
            .map(
                |(at, (name, value))| match d.points.iter().find(|p| p.name == *name) {
                    None => Err(PointResult::Refused(format!(
                        "device {:?} has no point {name:?}",
                        d.name
                    ))),
                    Some(p) if !p.writable => Err(PointResult::Refused(format!(
                        "point {name:?} is not writable"
                    ))),
                    Some(p) => to_plc(p, value)
                        .map(|raw| (at, p.item, raw))
                        .map_err(PointResult::OutOfRange),
                },
            )
            .collect();
        if checked.iter().all(Result::is_ok) {
            return Ok(checked.into_iter().flatten().collect());
        }
        let other = PointResult::Refused(OTHER_REFUSED.into());
        Err(command
            .points
            .iter()
            .zip(checked)
            .map(|((name, _), c)| (name.clone(), c.err().unwrap_or_else(|| other.clone())))
            .collect())
    }

    async fn write(
        &mut self,
        _member: usize,
        command: &Command,
        writes: Vec<Write>,
        status: &DeviceStatus,
    ) -> (Results, Option<LinkError>) {
        let Some(conn) = self.conn.as_mut() else {
            let why = PointResult::Unavailable("the PLC is not connected".into());
            return (all(&command.points, &why), None);
        };
        let mut results: Vec<Option<PointResult>> = vec![None; command.points.len()];
        let mut broken: Option<Error> = None;
        for (at, item, raw) in writes {
            let result = if broken.is_some() {
                PointResult::Unknown(NOT_SENT.into())
            } else if command.expired(Instant::now()) {
                PointResult::Expired
            } else {
                status.writes_total.fetch_add(1, Ordering::Relaxed);
                let sent = conn.write(&[(item, raw.clone())]).await;
                match sent.into_iter().next() {
                    Some(Ok(())) if command.verify => {
                        let before = conn.reads_sent();
                        let back = read_back(conn, item, &raw).await;
                        let reads = conn.reads_sent() - before;
                        status.requests_total.fetch_add(reads, Ordering::Relaxed);
                        match back {
                            Ok(r) => r,
                            Err(e) => {
                                let r = PointResult::Unknown(format!(
                                    "written, but the read back failed: {e}"
                                ));
                                broken = Some(e);
                                r
                            }
                        }
                    }
                    Some(Ok(())) => PointResult::Written,
                    Some(Err(WriteError::Refused(e))) => refused(&e),
                    Some(Err(WriteError::Unanswered(e))) => {
                        let r = PointResult::Unknown(format!(
                            "sent, but no answer came ({e}): the write may have taken effect"
                        ));
                        broken = Some(e);
                        r
                    }
                    Some(Err(WriteError::NotSent(e))) => {
                        broken = Some(e);
                        PointResult::Unknown(NOT_SENT.into())
                    }
                    None => PointResult::Unknown(NOT_SENT.into()),
                }
            };
            if let Some(slot) = results.get_mut(at) {
                *slot = Some(result);
            }
        }
        let results = command
            .points
            .iter()
            .zip(results)
            .map(|((name, _), r)| {
                (
                    name.clone(),
                    r.unwrap_or(PointResult::Unknown(NOT_SENT.into())),
                )
            })
            .collect();
        let broken = broken.map(|e| self.link_error(e, false));
        (results, broken)
    }

    fn hint(&self, _member: usize, _e: &LinkError) -> Option<String> {
        self.last_error.as_ref().map(|e| e.hint().to_string())
    }

    fn close(&mut self) {
        // Dropping the stream closes the TCP connection; the PLC frees its resource.
        self.conn = None;
    }
}

/// Reads back what was written to `item` and compares it, as the PLC holds it, with `raw`.
async fn read_back(conn: &mut Connection, item: Item, raw: &Value) -> Result<PointResult, Error> {
    let items = [item];
    let plan = conn.plan(&items);
    let values = conn.read(&items, &plan).await?;
    let wrote = item.data_type.encode(raw).ok();
    Ok(match values.into_iter().next() {
        Some(Ok(v)) if item.data_type.encode(&v.to_json()).ok() == wrote => PointResult::Written,
        Some(Ok(v)) => PointResult::Unknown(format!("wrote {raw}, read back {}", v.to_json())),
        Some(Err(e)) => PointResult::Unknown(format!("written, but the read back failed: {e}")),
        None => PointResult::Unknown("the read back was empty".into()),
    })
}

/// The poll loop of every S7 device of `devices` (one per PLC), each showing its figures in
/// its status in `catalogue`; with `commands`, each registered there.
pub fn poll_loops(
    devices: &[&S7DeviceConfig],
    catalogue: &Catalogue,
    commands: Option<&Commands>,
) -> Vec<PollLoop<S7Driver>> {
    let mut out = Vec::new();
    for d in devices {
        let Some(status) = catalogue.by_name(&d.name) else {
            log::error!("s7 device missing from the catalogue: device={}", d.name);
            continue;
        };
        let schedule = Schedule {
            intervals: d.groups.iter().map(|g| g.interval).collect(),
            hold: d.hold,
            backoff_start: BACKOFF_START,
            backoff_max: d.backoff_max,
        };
        let mut poll_loop = PollLoop::new(S7Driver::new((*d).clone()), vec![(status, schedule)]);
        if let Some(c) = commands {
            poll_loop.register(c);
        }
        out.push(poll_loop);
    }
    out
}
