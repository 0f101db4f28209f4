//! The Modbus driver: one per **line**. A Modbus TCP device is a line of its own (its TCP
//! connection); the RTU devices that share a serial port are one line, whose driver owns the
//! port and talks to one unit at a time. The one poll loop ([`crate::sources::poll_loop`])
//! schedules its devices, runs their commands between polls and keeps their status.
//!
//! Invariants:
//! - Every request is wrapped in the device's timeout (tokio-modbus has none). After a timeout,
//!   a transport error or a framing error the connection or port is **dropped and reopened**:
//!   over RTU a late reply would otherwise be taken as the answer to the next request (upstream
//!   issues #113, #324); a reopened port also has its input buffer cleared.
//! - An exception response is data: the points of that request get quality `bad` with the
//!   exception code and the cycle goes on. A coalesced request that draws one is split into one
//!   request per point from then on, so one unreadable register does not blank its neighbours.
//! - Over RTU, the line's quiet time (`inter_frame_delay_ms`) goes before every frame of a poll
//!   but its first, and before every write frame (see [`super::write`]).

use std::collections::VecDeque;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use serde_json::Map;
use tokio_modbus::client::{Context, Reader};
use tokio_modbus::prelude::{ExceptionCode, Slave, SlaveContext};

use super::config::{LineConfig, ModbusDeviceConfig, Parity, RegisterKind, Transport};
use super::decode::{decode_answer, exception_point, Answer};
use super::plan::{coalesce, split, ReadRequest};
use super::write::{self, WriteRequest};
use crate::commands::command::all;
use crate::commands::{Command, Commands, PointResult};
use crate::sources::catalogue::Catalogue;
use crate::sources::driver::{Driver, GroupRead, LinkError, Results};
use crate::sources::hints;
use crate::sources::poll_loop::{PollLoop, Schedule, BACKOFF_START};
use crate::sources::status::DeviceStatus;

/// Runs one request (`call`) within `timeout`: the answer or the device's exception, or the
/// link error that drops the connection.
pub(super) async fn timed<T>(
    timeout: Duration,
    call: impl std::future::Future<Output = tokio_modbus::Result<T>>,
) -> Result<Result<T, ExceptionCode>, LinkError> {
    match tokio::time::timeout(timeout, call).await {
        Err(_) => Err(LinkError::Timeout),
        Ok(Err(tokio_modbus::Error::Transport(e))) => Err(LinkError::Transport(e.to_string())),
        Ok(Err(tokio_modbus::Error::Protocol(e))) => Err(LinkError::Framing(e.to_string())),
        Ok(Ok(a)) => Ok(a),
    }
}

/// How a line opens its link: a TCP connection or a serial port. The commissioning tools
/// open theirs the same way.
#[derive(Debug, Clone)]
pub enum Opener {
    /// Modbus TCP.
    Tcp {
        /// Host name or address.
        host: String,
        /// TCP port.
        port: u16,
    },
    /// Modbus RTU on this serial line.
    Rtu(LineConfig),
}

impl Opener {
    /// The opener of a device reached by `transport`.
    pub fn of(transport: &Transport) -> Self {
        match transport {
            Transport::Tcp { host, port } => Self::Tcp {
                host: host.clone(),
                port: *port,
            },
            Transport::Rtu(line) => Self::Rtu(line.clone()),
        }
    }

    /// Opens the link: a TCP connection within `timeout`, or the serial port with its input
    /// cleared. The context talks to unit 1 until told otherwise (`set_slave`).
    pub async fn open(&self, timeout: Duration) -> Result<Context, LinkError> {
        match self {
            Self::Tcp { host, port } => {
                let connect = async {
                    let stream = tokio::net::TcpStream::connect((host.as_str(), *port)).await?;
                    // One small request at a time: Nagle would hold each one back.
                    stream.set_nodelay(true)?;
                    Ok::<_, std::io::Error>(stream)
                };
                match tokio::time::timeout(timeout, connect).await {
                    Err(_) => Err(LinkError::Open("connect timed out".into())),
                    Ok(Err(e)) => Err(LinkError::Open(e.to_string())),
                    Ok(Ok(stream)) => Ok(tokio_modbus::client::tcp::attach_slave(
                        stream,
                        Slave::tcp_device(),
                    )),
                }
            }
            Self::Rtu(line) => {
                use tokio_serial::{SerialPort, SerialPortBuilderExt};
                let parity = match line.parity {
                    Parity::None => tokio_serial::Parity::None,
                    Parity::Even => tokio_serial::Parity::Even,
                    Parity::Odd => tokio_serial::Parity::Odd,
                };
                let data_bits = match line.data_bits {
                    5 => tokio_serial::DataBits::Five,
                    6 => tokio_serial::DataBits::Six,
                    7 => tokio_serial::DataBits::Seven,
                    _ => tokio_serial::DataBits::Eight,
                };
                let stop_bits = match line.stop_bits {
                    2 => tokio_serial::StopBits::Two,
                    _ => tokio_serial::StopBits::One,
                };
                let port = tokio_serial::new(&line.path, line.baud)
                    .parity(parity)
                    .data_bits(data_bits)
                    .stop_bits(stop_bits)
                    .open_native_async()
                    .map_err(|e| LinkError::Open(format!("{}: {e}", line.path)))?;
                // A late reply to the request that timed out must not answer the next one.
                let _ = port.clear(tokio_serial::ClearBuffer::All);
                Ok(tokio_modbus::client::rtu::attach_slave(port, Slave(1)))
            }
        }
    }
}

/// A line: its devices share one link, used for one request at a time.
pub struct ModbusLine {
    opener: Opener,
    devices: Vec<ModbusDeviceConfig>,
    inter_frame_delay: Duration,
    link: Option<Context>,
}

impl ModbusLine {
    fn new(opener: Opener, inter_frame_delay: Duration) -> Self {
        Self {
            opener,
            devices: Vec::new(),
            inter_frame_delay,
            link: None,
        }
    }
}

/// What a request for a device the line does not have is answered (the loop never asks).
fn no_device(m: usize) -> LinkError {
    LinkError::Open(format!("no device {m} on this line"))
}

impl Driver for ModbusLine {
    type Plan = Vec<ReadRequest>;
    type Writes = Vec<WriteRequest>;

    fn plan(&self, member: usize, group: usize) -> Vec<ReadRequest> {
        let Some(d) = self.devices.get(member) else {
            return Vec::new();
        };
        let members: Vec<usize> = (0..d.points.len())
            .filter(|&i| d.points[i].group == group)
            .collect();
        coalesce(&d.points, &members, d.max_gap)
    }

    fn is_open(&self) -> bool {
        self.link.is_some()
    }

    async fn open(&mut self, member: usize) -> Result<(), LinkError> {
        let d = self.devices.get(member).ok_or_else(|| no_device(member))?;
        self.link = Some(self.opener.open(d.timeout).await?);
        Ok(())
    }

    async fn read(
        &mut self,
        member: usize,
        plan: &mut Vec<ReadRequest>,
        status: &DeviceStatus,
    ) -> Result<GroupRead, LinkError> {
        let Self {
            devices,
            link,
            inter_frame_delay,
            ..
        } = self;
        let d = devices.get(member).ok_or_else(|| no_device(member))?;
        let ctx = link
            .as_mut()
            .ok_or_else(|| LinkError::Open("not open".into()))?;
        ctx.set_slave(Slave(d.unit));
        let mut queue: VecDeque<ReadRequest> = std::mem::take(plan).into();
        let mut done: Vec<ReadRequest> = Vec::with_capacity(queue.len());
        let mut payload = Map::new();
        let mut result = Ok(());
        while let Some(req) = queue.pop_front() {
            if !inter_frame_delay.is_zero() && !done.is_empty() {
                tokio::time::sleep(*inter_frame_delay).await;
            }
            status.requests_total.fetch_add(1, Ordering::Relaxed);
            match request(ctx, &req, d.timeout).await {
                Err(e) => {
                    done.push(req);
                    result = Err(e);
                    break;
                }
                Ok(Err(code)) if req.points.len() > 1 => {
                    status.exceptions_total.fetch_add(1, Ordering::Relaxed);
                    log::info!(
                        "modbus exception on a coalesced read, reading its points one by one from now on: device={} start={} count={} exception={}",
                        d.name,
                        req.start,
                        req.count,
                        u8::from(code)
                    );
                    for r in split(&d.points, &req).into_iter().rev() {
                        queue.push_front(r);
                    }
                }
                Ok(Err(code)) => {
                    status.exceptions_total.fetch_add(1, Ordering::Relaxed);
                    let code = u8::from(code);
                    let names: Vec<&str> = req
                        .points
                        .iter()
                        .filter_map(|&i| d.points.get(i))
                        .map(|pt| pt.name.as_str())
                        .collect();
                    status.set_exception(
                        format!(
                            "{} (point {})",
                            hints::exception_text(code, req.kind, req.start, req.count),
                            names.join(", ")
                        ),
                        Some(hints::exception_hint(code, req.kind, req.start, req.count)),
                    );
                    for &i in &req.points {
                        if let Some(pt) = d.points.get(i) {
                            payload.insert(pt.name.clone(), exception_point(code, &pt.unit));
                        }
                    }
                    done.push(req);
                }
                Ok(Ok(data)) => {
                    decode_answer(&d.points, &req, &data, &mut payload);
                    done.push(req);
                }
            }
        }
        let requests = done.len() as u64;
        done.extend(queue);
        *plan = done;
        result?;
        Ok(GroupRead {
            points: payload,
            requests,
            ts_ms: None,
        })
    }

    fn check(&self, member: usize, command: &Command) -> Result<Vec<WriteRequest>, Results> {
        match self.devices.get(member) {
            Some(d) => write::plan(d, command),
            None => Err(all(
                &command.points,
                &PointResult::Refused(format!("no device {:?} on this line", command.device)),
            )),
        }
    }

    async fn write(
        &mut self,
        member: usize,
        command: &Command,
        writes: Vec<WriteRequest>,
        status: &DeviceStatus,
    ) -> (Results, Option<LinkError>) {
        let Self {
            devices,
            link,
            inter_frame_delay,
            ..
        } = self;
        let (Some(d), Some(ctx)) = (devices.get(member), link.as_mut()) else {
            let why = PointResult::Unavailable("the line is not open".into());
            return (all(&command.points, &why), None);
        };
        ctx.set_slave(Slave(d.unit));
        let mut on = write::Link {
            ctx,
            timeout: d.timeout,
            inter_frame_delay: *inter_frame_delay,
        };
        write::run(&mut on, d, command, &writes, status).await
    }

    fn hint(&self, member: usize, e: &LinkError) -> Option<String> {
        let d = self.devices.get(member)?;
        Some(hints::link_hint(e, &d.transport, d.unit, d.timeout))
    }

    fn close(&mut self) {
        self.link = None;
    }
}

/// The devices of a line with their schedules, in the line's order.
type Members = Vec<(Arc<DeviceStatus>, Schedule)>;

/// The poll loops of `devices`: one per TCP device, one per serial port for the devices that
/// share it; each device shows its figures and values in its status in `catalogue`. With
/// `commands` (when `commands:` is configured), every device is registered there and its line
/// runs its commands.
pub fn lines(
    devices: &[&ModbusDeviceConfig],
    catalogue: &Catalogue,
    commands: Option<&Commands>,
) -> Vec<PollLoop<ModbusLine>> {
    let mut lines: Vec<(ModbusLine, Members)> = Vec::new();
    for d in devices {
        let Some(status) = catalogue.by_name(&d.name) else {
            log::error!(
                "modbus device missing from the catalogue: device={}",
                d.name
            );
            continue;
        };
        let schedule = Schedule {
            intervals: d.groups.iter().map(|g| g.interval).collect(),
            hold: d.hold,
            backoff_start: BACKOFF_START,
            backoff_max: d.backoff_max,
        };
        let at = match &d.transport {
            Transport::Tcp { .. } => None,
            Transport::Rtu(l) => lines
                .iter()
                .position(|(line, _)| matches!(&line.opener, Opener::Rtu(o) if o.path == l.path)),
        };
        let (line, members) = match at {
            Some(i) => &mut lines[i],
            None => {
                let delay = match &d.transport {
                    Transport::Tcp { .. } => Duration::ZERO,
                    Transport::Rtu(l) => l.inter_frame_delay,
                };
                lines.push((ModbusLine::new(Opener::of(&d.transport), delay), Vec::new()));
                let last = lines.len() - 1;
                &mut lines[last]
            }
        };
        line.devices.push((*d).clone());
        members.push((status, schedule));
    }
    let mut lines: Vec<PollLoop<ModbusLine>> = lines
        .into_iter()
        .map(|(line, members)| PollLoop::new(line, members))
        .collect();
    if let Some(commands) = commands {
        for line in &mut lines {
            line.register(commands);
        }
    }
    lines
}

/// Sends one read request within `timeout`: the answer, or the device's exception (data), or
/// the link error after which the link must be dropped.
pub async fn request(
    ctx: &mut Context,
    req: &ReadRequest,
    timeout: Duration,
) -> Result<Result<Answer, ExceptionCode>, LinkError> {
    timed(timeout, read(ctx, req)).await
}

/// Only the four read functions: nothing here writes to a device.
async fn read(ctx: &mut Context, r: &ReadRequest) -> tokio_modbus::Result<Answer> {
    Ok(match r.kind {
        RegisterKind::Holding => ctx
            .read_holding_registers(r.start, r.count)
            .await?
            .map(Answer::Words),
        RegisterKind::Input => ctx
            .read_input_registers(r.start, r.count)
            .await?
            .map(Answer::Words),
        RegisterKind::Coil => ctx.read_coils(r.start, r.count).await?.map(Answer::Bits),
        RegisterKind::Discrete => ctx
            .read_discrete_inputs(r.start, r.count)
            .await?
            .map(Answer::Bits),
    })
}
