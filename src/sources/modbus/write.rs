//! Commands to a Modbus device: checked against its points, then written by the line task
//! that owns the device's connection, between two polls.
//!
//! - **All or nothing before sending.** Every point of a command is checked first (a point of
//!   the device, writable, its value fits: [`super::encode`]); when any is refused, nothing is
//!   sent and the others are answered `refused` ("another point of the command was refused").
//! - **In the command's order**, one request per point: FC 5 for a coil, FC 6 for a point of
//!   one register, FC 16 for every wider one. Coils next to each other in the command whose
//!   addresses follow one another go in one FC 15 request.
//! - **At most once.** A request whose outcome is unknown (no answer in the device's timeout,
//!   the connection lost after sending, an answer that does not match) is answered `unknown`
//!   and never retried; the connection is dropped as after a poll's timeout, and the points
//!   after it are not sent (`unknown`, "not sent after an unknown write"). An exception is
//!   that point's result (`exception` with its code) and the next points are still sent: the
//!   device answered, so the link is in a known state.
//! - **Never late.** The command's deadline is checked before every write request, after the
//!   line's quiet time: once it has passed, the points not yet sent are `expired` and nothing
//!   more is sent; the ones sent keep their results. (The line task checks it once before it
//!   takes the command; a command of many points on a slow line would otherwise write its
//!   last points seconds late.)
//! - **`verify`** reads each request's registers or coils back right after it was answered
//!   and reports `written` only when they are the ones written; a read back that differs (or
//!   fails) is `unknown`, with what was read. A read back goes out even past the deadline:
//!   it changes nothing, and it is what gives the write already sent its result.

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use tokio_modbus::client::{Client, Context};
use tokio_modbus::prelude::{Request, Response};

use super::config::{ModbusDeviceConfig, MAX_WRITE_BITS};
use super::decode::decode_registers;
use super::encode::{encode, Encoded};
use super::poller::timed;
use crate::commands::command::{NOT_SENT, OTHER_REFUSED};
use crate::commands::{Command, DeviceError, PointResult};
use crate::sources::driver::LinkError;
use crate::sources::status::DeviceStatus;

/// What one write request carries.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Data {
    /// Coils: FC 5 for one, FC 15 for more.
    Coils(Vec<bool>),
    /// Holding registers: FC 6 for one, FC 16 for more.
    Words(Vec<u16>),
}

/// One write request and the command's points it carries.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WriteRequest {
    /// Its first address.
    pub start: u16,
    /// What it writes.
    pub data: Data,
    /// Per point it carries: its index in the command and in the device's points.
    pub points: Vec<(usize, usize)>,
}

impl WriteRequest {
    /// The Modbus function code: 5, 15, 6 or 16.
    pub fn function(&self) -> u8 {
        match &self.data {
            Data::Coils(c) if c.len() == 1 => 5,
            Data::Coils(_) => 15,
            Data::Words(w) if w.len() == 1 => 6,
            Data::Words(_) => 16,
        }
    }

    fn request(&self) -> Request<'_> {
        match &self.data {
            Data::Coils(c) if c.len() == 1 => Request::WriteSingleCoil(self.start, c[0]),
            Data::Coils(c) => Request::WriteMultipleCoils(self.start, c.as_slice().into()),
            Data::Words(w) if w.len() == 1 => Request::WriteSingleRegister(self.start, w[0]),
            Data::Words(w) => Request::WriteMultipleRegisters(self.start, w.as_slice().into()),
        }
    }

    /// True when `answer` is the echo of this request (its address, and its value or count).
    fn echoed(&self, answer: &Response) -> bool {
        match (&self.data, answer) {
            (Data::Coils(c), Response::WriteSingleCoil(a, v)) => {
                c.len() == 1 && *a == self.start && *v == c[0]
            }
            (Data::Coils(c), Response::WriteMultipleCoils(a, n)) => {
                *a == self.start && usize::from(*n) == c.len()
            }
            (Data::Words(w), Response::WriteSingleRegister(a, v)) => {
                w.len() == 1 && *a == self.start && *v == w[0]
            }
            (Data::Words(w), Response::WriteMultipleRegisters(a, n)) => {
                *a == self.start && usize::from(*n) == w.len()
            }
            _ => false,
        }
    }

    /// The read of what this request wrote.
    fn read_back(&self) -> Request<'static> {
        match &self.data {
            Data::Coils(c) => Request::ReadCoils(self.start, c.len() as u16),
            Data::Words(w) => Request::ReadHoldingRegisters(self.start, w.len() as u16),
        }
    }
}

/// Checks every point of `command` against `dev`. `Ok`: the write requests, in the command's
/// order; `Err`: a result for every point (nothing may be sent).
pub fn plan(
    dev: &ModbusDeviceConfig,
    command: &Command,
) -> Result<Vec<WriteRequest>, Vec<(String, PointResult)>> {
    let mut checked: Vec<Result<(usize, Encoded), PointResult>> = Vec::new();
    for (name, value) in &command.points {
        let found = dev.points.iter().position(|p| p.name == *name);
        checked.push(match found {
            None => Err(PointResult::Refused(format!(
                "device {:?} has no point {name:?}",
                dev.name
            ))),
            Some(i) if !dev.points[i].writable => Err(PointResult::Refused(format!(
                "point {name:?} is not writable"
            ))),
            Some(i) => encode(&dev.points[i], value)
                .map(|e| (i, e))
                .map_err(PointResult::OutOfRange),
        });
    }
    if checked.iter().any(Result::is_err) {
        let other = PointResult::Refused(OTHER_REFUSED.into());
        return Err(command
            .points
            .iter()
            .zip(checked)
            .map(|((name, _), c)| (name.clone(), c.err().unwrap_or_else(|| other.clone())))
            .collect());
    }
    let mut requests: Vec<WriteRequest> = Vec::new();
    for (at, (i, encoded)) in checked.into_iter().flatten().enumerate() {
        let register = dev.points[i].register;
        match encoded {
            Encoded::Bit(b) => {
                if let Some(WriteRequest {
                    start,
                    data: Data::Coils(c),
                    points,
                }) = requests.last_mut()
                {
                    let next = u32::from(*start) + c.len() as u32;
                    if next == u32::from(register) && c.len() < usize::from(MAX_WRITE_BITS) {
                        c.push(b);
                        points.push((at, i));
                        continue;
                    }
                }
                requests.push(WriteRequest {
                    start: register,
                    data: Data::Coils(vec![b]),
                    points: vec![(at, i)],
                });
            }
            Encoded::Words(w) => requests.push(WriteRequest {
                start: register,
                data: Data::Words(w),
                points: vec![(at, i)],
            }),
        }
    }
    Ok(requests)
}

/// How the line runs a command's requests.
pub struct Link<'a> {
    /// The connection (its unit already set).
    pub ctx: &'a mut Context,
    /// The device's per-request timeout.
    pub timeout: Duration,
    /// The line's quiet time before each frame.
    pub inter_frame_delay: Duration,
}

impl Link<'_> {
    /// Waits the line's quiet time, then sends `request` and waits for its answer.
    async fn call(&mut self, request: Request<'_>) -> Result<Result<Response, u8>, LinkError> {
        quiet(self.inter_frame_delay).await;
        self.send(request).await
    }

    /// As [`Link::call`], but sends nothing (`None`) when `deadline` passed by the end of the
    /// quiet time: a write never leaves after its command's expiry.
    async fn call_by(
        &mut self,
        request: Request<'_>,
        deadline: Instant,
    ) -> Option<Result<Result<Response, u8>, LinkError>> {
        quiet(self.inter_frame_delay).await;
        if Instant::now() >= deadline {
            return None;
        }
        Some(self.send(request).await)
    }

    async fn send(&mut self, request: Request<'_>) -> Result<Result<Response, u8>, LinkError> {
        timed(self.timeout, self.ctx.call(request))
            .await
            .map(|r| r.map_err(u8::from))
    }
}

/// The line's quiet time before a frame. (A function of the delay, not a method: a future
/// that borrows the link would not be `Send`, its connection not being `Sync`.)
async fn quiet(delay: Duration) {
    if !delay.is_zero() {
        tokio::time::sleep(delay).await;
    }
}

/// Why a request's outcome is not known.
fn unknown(e: &LinkError, timeout: Duration) -> PointResult {
    PointResult::Unknown(match e {
        LinkError::Timeout => format!(
            "no answer within {} ms: the write may have taken effect",
            timeout.as_millis()
        ),
        LinkError::Framing(e) => format!("the answer did not match the request ({e})"),
        other => format!("{other} after sending: the write may have taken effect"),
    })
}

/// Sends `requests` (from [`plan`] for `command`) in order, none once the command's deadline
/// passed (their points are `expired`), and returns every point's result in the command's
/// order, with the link error that ended the run early, if one did (the
/// caller then drops the connection). Counts each write sent in `status.writes_total`, each
/// read back in `status.requests_total`.
pub async fn run(
    link: &mut Link<'_>,
    dev: &ModbusDeviceConfig,
    command: &Command,
    requests: &[WriteRequest],
    status: &DeviceStatus,
) -> (Vec<(String, PointResult)>, Option<LinkError>) {
    let mut results: Vec<Option<PointResult>> = vec![None; command.points.len()];
    let mut broken: Option<LinkError> = None;
    for req in requests {
        let set = |results: &mut Vec<Option<PointResult>>, r: &PointResult| {
            for &(at, _) in &req.points {
                results[at] = Some(r.clone());
            }
        };
        if broken.is_some() {
            set(&mut results, &PointResult::Unknown(NOT_SENT.into()));
            continue;
        }
        // Checked before every frame, the quiet time before it included.
        let answer = if command.expired(Instant::now()) {
            None
        } else {
            link.call_by(req.request(), command.deadline).await
        };
        let Some(answer) = answer else {
            set(&mut results, &PointResult::Expired);
            continue;
        };
        status.writes_total.fetch_add(1, Ordering::Relaxed);
        match answer {
            Err(e) => {
                set(&mut results, &unknown(&e, link.timeout));
                broken = Some(e);
            }
            Ok(Err(code)) => set(
                &mut results,
                &PointResult::Exception(DeviceError::Modbus(code)),
            ),
            Ok(Ok(answer)) if !req.echoed(&answer) => {
                let e = LinkError::Framing(format!(
                    "the device answered {answer:?} to FC {} at {}",
                    req.function(),
                    req.start
                ));
                set(&mut results, &unknown(&e, link.timeout));
                broken = Some(e);
            }
            Ok(Ok(_)) if !command.verify => set(&mut results, &PointResult::Written),
            Ok(Ok(_)) => {
                status.requests_total.fetch_add(1, Ordering::Relaxed);
                if let Err(e) = verify(link, dev, req, &mut results).await {
                    broken = Some(e);
                }
            }
        }
    }
    let results = command
        .points
        .iter()
        .zip(results)
        .map(|((name, _), r)| {
            // Every point is in one request of the plan; this only guards a plan mismatch.
            let r = r.unwrap_or_else(|| PointResult::Unknown(NOT_SENT.into()));
            (name.clone(), r)
        })
        .collect();
    (results, broken)
}

/// Reads back what `req` wrote and sets its points' results: `written` when they are equal.
async fn verify(
    link: &mut Link<'_>,
    dev: &ModbusDeviceConfig,
    req: &WriteRequest,
    results: &mut [Option<PointResult>],
) -> Result<(), LinkError> {
    let answer = link.call(req.read_back()).await;
    let timeout = link.timeout;
    let mut set_all = |r: PointResult| {
        for &(at, _) in &req.points {
            results[at] = Some(r.clone());
        }
    };
    match (answer, &req.data) {
        (Err(e), _) => {
            set_all(PointResult::Unknown(format!(
                "written, but the read back failed: {}",
                match unknown(&e, timeout) {
                    PointResult::Unknown(why) => why,
                    _ => e.to_string(),
                }
            )));
            return Err(e);
        }
        (Ok(Err(code)), _) => set_all(PointResult::Unknown(format!(
            "written, but reading it back drew exception {code}"
        ))),
        (Ok(Ok(Response::ReadCoils(bits))), Data::Coils(wrote)) => {
            for (k, &(at, _)) in req.points.iter().enumerate() {
                results[at] = Some(match bits.get(k) {
                    Some(b) if *b == wrote[k] => PointResult::Written,
                    Some(b) => PointResult::Unknown(format!("wrote {}, read back {b}", wrote[k])),
                    None => PointResult::Unknown("the read back was short".into()),
                });
            }
        }
        (Ok(Ok(Response::ReadHoldingRegisters(words))), Data::Words(wrote)) => {
            let r = if words.get(..wrote.len()) == Some(wrote.as_slice()) {
                PointResult::Written
            } else {
                let point = req.points.first().and_then(|&(_, i)| dev.points.get(i));
                let show = |w: &[u16]| {
                    point
                        .and_then(|p| decode_registers(p, w))
                        .map_or_else(|| format!("{w:?}"), |v| v.to_string())
                };
                PointResult::Unknown(format!("wrote {}, read back {}", show(wrote), show(&words)))
            };
            set_all(r);
        }
        (Ok(Ok(other)), _) => set_all(PointResult::Unknown(format!(
            "written, but the read back answered {other:?}"
        ))),
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::commands::{Origin, WritablePoint};
    use crate::config::from_yaml;
    use serde_json::{json, Value};

    fn device() -> ModbusDeviceConfig {
        let cfg = from_yaml(
            r#"connector:
  data_dir: /d
devices:
  - name: press-1
    protocol: modbus_tcp
    host: h
    points:
      - {name: setpoint, register: 0, type: f32, writable: true, min: 0, max: 250}
      - {name: speed, register: 2, writable: true}
      - {name: counter, register: 3, type: u64, writable: true}
      - {name: temp, register: 10, type: f32}
      - {name: pump, register: 0, kind: coil, writable: true}
      - {name: fan, register: 1, kind: coil, writable: true}
      - {name: lamp, register: 2, kind: coil, writable: true}
      - {name: horn, register: 9, kind: coil, writable: true}
"#,
        )
        .expect("valid");
        cfg.devices.modbus[0].clone()
    }

    fn command(points: Value) -> Command {
        let now = Instant::now();
        let Value::Object(m) = points else {
            panic!("an object")
        };
        Command {
            id: "c".into(),
            device: "press-1".into(),
            points: m.into_iter().collect(),
            verify: false,
            received: now,
            deadline: now + Duration::from_secs(1),
            origin: Origin::Http {
                token: "commands".into(),
            },
        }
    }

    #[test]
    fn each_point_gets_the_function_code_of_its_width_and_adjacent_coils_share_fc_15() {
        let reqs = plan(
            &device(),
            &command(
                json!({"setpoint": 72.5, "speed": 1500, "counter": 7, "pump": true,
                            "fan": false, "lamp": 1, "horn": true}),
            ),
        )
        .expect("all fit");
        let f: Vec<(u8, u16)> = reqs.iter().map(|r| (r.function(), r.start)).collect();
        assert_eq!(f, vec![(16, 0), (6, 2), (16, 3), (15, 0), (5, 9)]);
        assert_eq!(reqs[3].data, Data::Coils(vec![true, false, true]));
        assert_eq!(reqs[3].points, vec![(3, 4), (4, 5), (5, 6)]);
        assert_eq!(reqs[2].data, Data::Words(vec![0, 0, 0, 7]));
    }

    #[test]
    fn one_bad_point_refuses_the_whole_command_with_each_reason() {
        let results = plan(
            &device(),
            &command(json!({"setpoint": 300, "speed": 10, "temp": 1, "nope": 2})),
        )
        .unwrap_err();
        let r: Vec<(&str, &PointResult)> = results.iter().map(|(n, r)| (n.as_str(), r)).collect();
        assert_eq!(
            r,
            vec![
                (
                    "setpoint",
                    &PointResult::OutOfRange("300 is above max 250".into())
                ),
                ("speed", &PointResult::Refused(OTHER_REFUSED.into())),
                (
                    "temp",
                    &PointResult::Refused("point \"temp\" is not writable".into())
                ),
                (
                    "nope",
                    &PointResult::Refused("device \"press-1\" has no point \"nope\"".into())
                ),
            ]
        );
    }

    #[test]
    fn the_writable_points_are_listed_with_their_area_type_and_bounds() {
        let w = device().describe().writable();
        assert_eq!(w.len(), 7);
        assert_eq!(
            w[0],
            WritablePoint {
                name: "setpoint".into(),
                area: "holding_register",
                data_type: "f32".into(),
                min: Some(0.0),
                max: Some(250.0),
            }
        );
        assert_eq!((w[3].area, w[3].data_type.as_str()), ("coil", "bool"));
    }
}
