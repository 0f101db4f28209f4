//! The poll tasks. One task per **line**: a Modbus TCP device is a line of its own (its TCP
//! connection); the RTU devices that share a serial port are one line, whose task owns the port
//! and polls its devices in turn, one request at a time.
//!
//! Invariants:
//! - Every request is wrapped in the device's timeout (tokio-modbus has none). After a timeout,
//!   a transport error or a framing error the connection or port is **dropped and reopened**:
//!   over RTU a late reply would otherwise be taken as the answer to the next request (upstream
//!   issues #113, #324); a reopened port also has its input buffer cleared.
//! - An exception response is data: the points of that request get quality `bad` with the
//!   exception code and the cycle goes on. A coalesced request that draws one is split into one
//!   request per point from then on, so one unreadable register does not blank its neighbours.
//! - A device that fails twice in a row is skipped by its circuit breaker for 1 s, doubling up
//!   to `backoff_max_secs`: the line keeps polling its healthy devices on time, and a dead
//!   unit costs the line at most one timeout per backoff step.
//! - Commands: every device of a line is registered with the commands service on the line's
//!   one inbox, and the line task runs them **between polls, ahead of the next one**: it
//!   waits for the next poll's time *or* a command, so a command waits at most for the poll
//!   in progress, and a write never interleaves with a poll's frames. A command for a device
//!   that is not connected, or whose breaker waits, is answered `unavailable` at once: no
//!   connect attempt is made for a command (over RTU the shared port may be reopened for a
//!   connected unit, after another unit's timeout closed it). See [`super::write`].
//! - A poll's samples are one record per group (key: the group name, timestamp: the poll's
//!   start), offered through hold-then-drop by the line's offer task: the next poll does not
//!   wait for the previous sample's commit, but while a sample is held (a sink refuses it, up
//!   to the device's hold) the line waits with its next one.

use std::collections::VecDeque;
use std::fmt;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use serde_json::{Map, Value};
use tokio::time::Instant;
use tokio_modbus::client::{Context, Reader};
use tokio_modbus::prelude::{ExceptionCode, Slave, SlaveContext};

use super::config::{LineConfig, ModbusDeviceConfig, Parity, RegisterKind, Transport};
use super::decode::{decode_answer, exception_point, Answer};
use super::plan::{coalesce, split, ReadRequest};
use super::write;
use crate::commands::{channel, CommandReceiver, Commands, Pending, PointResult};
use crate::engine::Engine;
use crate::record::{now_ms, Record};
use crate::shutdown::Shutdown;
use crate::sources::catalogue::Catalogue;
use crate::sources::hints;
use crate::sources::hold::{offer_with_hold, Held};
use crate::sources::pollers::PollerRuntime;
use crate::sources::status::{ConnState, DeviceStatus};

/// The circuit breaker's first wait.
pub const BACKOFF_START: Duration = Duration::from_secs(1);

/// Why a request (or opening the link) failed; every variant drops the connection.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LinkError {
    /// No answer within the device's timeout.
    Timeout,
    /// The connection or port could not be opened.
    Open(String),
    /// An I/O error on the connection.
    Transport(String),
    /// An answer that does not match the request (framing, header or function mismatch).
    Framing(String),
}

impl LinkError {
    /// Every link error is retried, after the breaker's wait: the device may come back.
    pub fn is_retriable(&self) -> bool {
        true
    }
}

impl fmt::Display for LinkError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Timeout => write!(f, "timeout"),
            Self::Open(e) => write!(f, "cannot connect: {e}"),
            Self::Transport(e) => write!(f, "transport: {e}"),
            Self::Framing(e) => write!(f, "framing: {e}"),
        }
    }
}

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

/// Consecutive failures → wait before the next try.
#[derive(Debug)]
pub struct Breaker {
    failures: u32,
    retry_at: Option<Instant>,
    max: Duration,
}

impl Breaker {
    /// A closed breaker whose longest wait is `max`.
    pub fn new(max: Duration) -> Self {
        Self {
            failures: 0,
            retry_at: None,
            max,
        }
    }

    /// Counts a failure; returns the wait it starts (none after the first failure in a row: a
    /// single glitch is retried at the next poll).
    pub fn fail(&mut self, now: Instant) -> Option<Duration> {
        self.failures = self.failures.saturating_add(1);
        if self.failures < 2 {
            return None;
        }
        let doublings = (self.failures - 2).min(20);
        let wait = BACKOFF_START
            .saturating_mul(1u32 << doublings)
            .min(self.max);
        self.retry_at = Some(now + wait);
        Some(wait)
    }

    /// A success closes the breaker.
    pub fn ok(&mut self) {
        self.failures = 0;
        self.retry_at = None;
    }

    /// When the device may be tried again; `None` when it may now.
    pub fn retry_at(&self) -> Option<Instant> {
        self.retry_at
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

/// One device on a line, with its plans and schedule.
struct Member {
    cfg: ModbusDeviceConfig,
    status: Arc<DeviceStatus>,
    /// Per group: its read requests.
    plans: Vec<Vec<ReadRequest>>,
    /// Per group: when it is due next.
    next_due: Vec<Instant>,
    breaker: Breaker,
}

/// A poll's record on its way to the engine.
struct Sample {
    record: Record,
    hold: Duration,
    status: Arc<DeviceStatus>,
}

/// A line to run: its devices share one link.
pub struct Line {
    opener: Opener,
    members: Vec<Member>,
    inter_frame_delay: Duration,
    /// The commands of every device of the line, when `commands:` is configured.
    inbox: Option<CommandReceiver>,
}

/// What the line task woke for.
enum Wake {
    Stop,
    Command(Option<Pending>),
    Poll,
}

/// The next command of `inbox`; never, without one.
async fn next_command(inbox: &mut Option<CommandReceiver>) -> Option<Pending> {
    match inbox {
        Some(rx) => rx.recv().await,
        None => std::future::pending().await,
    }
}

impl Line {
    /// The lines for `devices`: one per TCP device, one per serial port, each device with its
    /// status in `catalogue`. With `commands`, every device is registered there with its
    /// writable points, on its line's one inbox.
    pub fn build(
        devices: &[ModbusDeviceConfig],
        catalogue: &Catalogue,
        commands: Option<&mut Commands>,
    ) -> Vec<Line> {
        let mut lines: Vec<Line> = Vec::new();
        let now = Instant::now();
        for d in devices {
            let Some(status) = catalogue.by_name(&d.name).cloned() else {
                log::error!(
                    "modbus device missing from the catalogue: device={}",
                    d.name
                );
                continue;
            };
            let plans = (0..d.groups.len())
                .map(|g| {
                    let members: Vec<usize> = (0..d.points.len())
                        .filter(|&i| d.points[i].group == g)
                        .collect();
                    coalesce(&d.points, &members, d.max_gap)
                })
                .collect();
            let member = Member {
                cfg: d.clone(),
                status,
                plans,
                next_due: vec![now; d.groups.len()],
                breaker: Breaker::new(d.backoff_max),
            };
            match &d.transport {
                Transport::Tcp { .. } => lines.push(Line {
                    opener: Opener::of(&d.transport),
                    members: vec![member],
                    inter_frame_delay: Duration::ZERO,
                    inbox: None,
                }),
                Transport::Rtu(l) => {
                    let shared = lines
                        .iter_mut()
                        .find(|line| matches!(&line.opener, Opener::Rtu(o) if o.path == l.path));
                    match shared {
                        Some(line) => line.members.push(member),
                        None => lines.push(Line {
                            opener: Opener::Rtu(l.clone()),
                            members: vec![member],
                            inter_frame_delay: l.inter_frame_delay,
                            inbox: None,
                        }),
                    }
                }
            }
        }
        if let Some(commands) = commands {
            for line in &mut lines {
                let (tx, rx) = channel();
                for m in &line.members {
                    commands.register_with(&m.cfg.name, m.status.def.writable(), tx.clone());
                }
                line.inbox = Some(rx);
            }
        }
        lines
    }

    /// Polls until `shutdown`.
    pub async fn run(mut self, engine: Arc<Engine>, shutdown: Shutdown) {
        // The samples go to the engine from a task of their own, through a channel of one:
        // a slow commit does not delay the next poll's start, while a refused sample (held,
        // up to the device's hold) still holds the line once the next one is ready.
        let (samples, mut pending) = tokio::sync::mpsc::channel::<Sample>(1);
        let offerer = {
            let shutdown = shutdown.clone();
            tokio::spawn(async move {
                loop {
                    let sample = tokio::select! {
                        s = pending.recv() => match s {
                            Some(s) => s,
                            None => return,
                        },
                        _ = shutdown.wait() => return,
                    };
                    tokio::select! {
                        held = offer_with_hold(&engine, sample.record, sample.hold) => {
                            if let Held::Lost { .. } = held {
                                sample.status.lost_total.fetch_add(1, Ordering::Relaxed);
                            }
                        }
                        _ = shutdown.wait() => return,
                    }
                }
            })
        };
        let mut link: Option<Context> = None;
        loop {
            // The earliest due (device, group), the breaker's wait included.
            let Some((m, g, due)) = self.next() else {
                return;
            };
            // A command waiting goes before the poll that is due; one that comes while the
            // line sleeps is run at once.
            let wake = tokio::select! {
                biased;
                _ = shutdown.wait() => Wake::Stop,
                c = next_command(&mut self.inbox) => Wake::Command(c),
                _ = tokio::time::sleep_until(due) => Wake::Poll,
            };
            match wake {
                Wake::Stop => break,
                Wake::Command(None) => {
                    self.inbox = None;
                    continue;
                }
                Wake::Command(Some(pending)) => {
                    self.command(&mut link, pending).await;
                    continue;
                }
                Wake::Poll => {}
            }
            let started = Instant::now();
            let started_ms = now_ms();
            let member = &mut self.members[m];
            let scheduled = member.next_due[g];
            if member.breaker.retry_at().is_none() {
                member
                    .status
                    .record_jitter(started.saturating_duration_since(scheduled));
            }
            let interval = member.cfg.groups[g].interval;
            let mut next = scheduled + interval;
            while next <= started {
                next += interval;
                member.status.skipped_total.fetch_add(1, Ordering::Relaxed);
            }
            member.next_due[g] = next;
            member
                .status
                .last_poll_ms
                .store(started_ms, Ordering::Relaxed);

            let result = poll(&self.opener, &mut link, member, g, self.inter_frame_delay).await;
            member.status.last_duration_us.store(
                u64::try_from(started.elapsed().as_micros()).unwrap_or(u64::MAX),
                Ordering::Relaxed,
            );
            match result {
                Err(e) => {
                    link = None;
                    failed(member, &e);
                }
                Ok(payload) => {
                    member.breaker.ok();
                    member.status.set_state(ConnState::Connected);
                    // The values first: whoever sees the poll counted finds them.
                    member.status.values_in(g, &payload, started_ms);
                    let value = Value::Object(payload);
                    member.status.polls_total.fetch_add(1, Ordering::Relaxed);
                    let mut record =
                        Record::from_value(member.cfg.source(), &member.cfg.groups[g].name, &value);
                    record.ts_ms = started_ms;
                    let sample = Sample {
                        record,
                        hold: member.cfg.hold,
                        status: Arc::clone(&member.status),
                    };
                    tokio::select! {
                        sent = samples.send(sample) => if sent.is_err() { break },
                        _ = shutdown.wait() => break,
                    }
                }
            }
        }
        drop(samples);
        if let Err(e) = offerer.await {
            log::error!("modbus offer task ended abnormally: {e}");
        }
        for member in &self.members {
            member.status.set_state(ConnState::Stopped);
        }
    }

    /// Runs one command: expired, refused or unavailable without sending anything, else
    /// written on the line's link (see [`super::write`]). Answers every point once.
    async fn command(&mut self, link: &mut Option<Context>, pending: Pending) {
        let Some(pending) = pending.unless_expired(std::time::Instant::now()) else {
            return;
        };
        let Some(member) = self
            .members
            .iter_mut()
            .find(|m| m.cfg.name == pending.command.device)
        else {
            let why = format!("no device {:?} on this line", pending.command.device);
            pending.answer_all(PointResult::Refused(why));
            return;
        };
        let requests = match write::plan(&member.cfg, &pending.command) {
            Ok(requests) => requests,
            Err(results) => return pending.answer(results),
        };
        if let Some(why) = unavailable(member, Instant::now()) {
            return pending.answer_all(PointResult::Unavailable(why));
        }
        let ctx = match link {
            Some(ctx) => ctx,
            // Only over RTU: another unit's failure closed the shared port.
            None => match self.opener.open(member.cfg.timeout).await {
                Ok(ctx) => {
                    member.status.connects_total.fetch_add(1, Ordering::Relaxed);
                    link.insert(ctx)
                }
                Err(e) => {
                    let why = format!("the line could not be opened: {e}");
                    return pending.answer_all(PointResult::Unavailable(why));
                }
            },
        };
        ctx.set_slave(Slave(member.cfg.unit));
        let mut on = write::Link {
            ctx,
            timeout: member.cfg.timeout,
            inter_frame_delay: self.inter_frame_delay,
        };
        let (results, broken) = write::run(
            &mut on,
            &member.cfg,
            &pending.command,
            &requests,
            &member.status,
        )
        .await;
        pending.answer(results);
        if let Some(e) = broken {
            *link = None;
            failed(member, &e);
        }
    }

    fn next(&self) -> Option<(usize, usize, Instant)> {
        let mut best: Option<(usize, usize, Instant)> = None;
        for (m, member) in self.members.iter().enumerate() {
            for (g, &due) in member.next_due.iter().enumerate() {
                let due = member.breaker.retry_at().map_or(due, |r| r.max(due));
                if best.is_none_or(|(_, _, b)| due < b) {
                    best = Some((m, g, due));
                }
            }
        }
        best
    }
}

/// The Modbus pollers: the lines before they start, their tasks after.
pub struct ModbusPollers {
    lines: Vec<Line>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

impl ModbusPollers {
    /// The lines of `devices` (one per TCP endpoint or serial port), not yet polling; each
    /// device shows its figures and values in its status in `catalogue`. With `commands`
    /// (when `commands:` is configured), every device is registered there and its line runs
    /// its commands.
    pub fn new(
        devices: &[ModbusDeviceConfig],
        catalogue: &Catalogue,
        commands: Option<&mut Commands>,
    ) -> Self {
        Self {
            lines: Line::build(devices, catalogue, commands),
            tasks: Vec::new(),
        }
    }

    /// Starts one task per line on the pollers' runtime.
    pub fn start(&mut self, engine: &Arc<Engine>, runtime: &PollerRuntime, shutdown: &Shutdown) {
        self.tasks.extend(
            std::mem::take(&mut self.lines)
                .into_iter()
                .map(|line| runtime.spawn(line.run(Arc::clone(engine), shutdown.clone()))),
        );
    }

    /// Waits for every line task to end (after the shutdown signal).
    pub async fn join(self) {
        for t in self.tasks {
            if let Err(e) = t.await {
                log::error!("modbus line task ended abnormally: {e}");
            }
        }
    }
}

/// Why `member` cannot take a command now, if it cannot: not connected (its last request
/// failed, or it was never reached), or its breaker waits.
fn unavailable(member: &Member, now: Instant) -> Option<String> {
    if let Some(at) = member.breaker.retry_at().filter(|&at| at > now) {
        return Some(format!(
            "the device is in its breaker's backoff for {} ms more (last error: {})",
            (at - now).as_millis(),
            member.status.last_error().unwrap_or_default()
        ));
    }
    match member.status.state() {
        ConnState::Connected => None,
        state => Some(match member.status.last_error() {
            Some(e) => format!(
                "the device is not connected ({}; last error: {e})",
                state.as_str()
            ),
            None => format!("the device is not connected yet ({})", state.as_str()),
        }),
    }
}

fn failed(member: &mut Member, e: &LinkError) {
    let s = &member.status;
    match e {
        LinkError::Timeout => s.timeouts_total.fetch_add(1, Ordering::Relaxed),
        _ => s.errors_total.fetch_add(1, Ordering::Relaxed),
    };
    let c = &member.cfg;
    s.note_error(
        e.to_string(),
        Some(hints::link_hint(e, &c.transport, c.unit, c.timeout)),
    );
    match member.breaker.fail(Instant::now()) {
        Some(wait) => {
            s.set_state(ConnState::Backoff);
            log::warn!(
                "modbus device failed, backing off: device={} error=\"{e}\" retry_in_ms={}",
                member.cfg.name,
                wait.as_millis()
            );
        }
        None => {
            s.set_state(ConnState::Connecting);
            log::warn!(
                "modbus device failed, reconnecting: device={} error=\"{e}\"",
                member.cfg.name
            );
        }
    }
}

/// One poll of group `g` of `member`: opens the link when needed, runs the group's requests.
async fn poll(
    opener: &Opener,
    link: &mut Option<Context>,
    member: &mut Member,
    g: usize,
    inter_frame_delay: Duration,
) -> Result<Map<String, Value>, LinkError> {
    let timeout = member.cfg.timeout;
    let ctx = match link {
        Some(ctx) => ctx,
        None => {
            let ctx = opener.open(timeout).await?;
            member.status.connects_total.fetch_add(1, Ordering::Relaxed);
            link.insert(ctx)
        }
    };
    ctx.set_slave(Slave(member.cfg.unit));
    let mut queue: VecDeque<ReadRequest> = std::mem::take(&mut member.plans[g]).into();
    let mut done: Vec<ReadRequest> = Vec::with_capacity(queue.len());
    let mut payload = Map::new();
    let mut result = Ok(());
    while let Some(req) = queue.pop_front() {
        if !inter_frame_delay.is_zero() && !done.is_empty() {
            tokio::time::sleep(inter_frame_delay).await;
        }
        member.status.requests_total.fetch_add(1, Ordering::Relaxed);
        match request(ctx, &req, timeout).await {
            Err(e) => {
                done.push(req);
                result = Err(e);
                break;
            }
            Ok(Err(code)) if req.points.len() > 1 => {
                member
                    .status
                    .exceptions_total
                    .fetch_add(1, Ordering::Relaxed);
                log::info!(
                    "modbus exception on a coalesced read, reading its points one by one from now on: device={} start={} count={} exception={}",
                    member.cfg.name,
                    req.start,
                    req.count,
                    u8::from(code)
                );
                for r in split(&member.cfg.points, &req).into_iter().rev() {
                    queue.push_front(r);
                }
            }
            Ok(Err(code)) => {
                member
                    .status
                    .exceptions_total
                    .fetch_add(1, Ordering::Relaxed);
                let code = u8::from(code);
                let names: Vec<&str> = req
                    .points
                    .iter()
                    .filter_map(|&i| member.cfg.points.get(i))
                    .map(|pt| pt.name.as_str())
                    .collect();
                member.status.set_exception(
                    format!(
                        "{} (point {})",
                        hints::exception_text(code, req.kind, req.start, req.count),
                        names.join(", ")
                    ),
                    Some(hints::exception_hint(code, req.kind, req.start, req.count)),
                );
                for &i in &req.points {
                    let pt = &member.cfg.points[i];
                    payload.insert(pt.name.clone(), exception_point(code, &pt.unit));
                }
                done.push(req);
            }
            Ok(Ok(data)) => {
                decode_answer(&member.cfg.points, &req, &data, &mut payload);
                done.push(req);
            }
        }
    }
    let sent = done.len() as u64;
    done.extend(queue);
    member.plans[g] = done;
    result?;
    member.status.groups[g]
        .requests_per_cycle
        .store(sent, Ordering::Relaxed);
    Ok(payload)
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_breaker_retries_a_glitch_at_once_then_doubles_up_to_its_cap() {
        let now = Instant::now();
        let mut b = Breaker::new(Duration::from_secs(5));
        assert_eq!(b.fail(now), None);
        assert_eq!(b.fail(now), Some(Duration::from_secs(1)));
        assert_eq!(b.fail(now), Some(Duration::from_secs(2)));
        assert_eq!(b.fail(now), Some(Duration::from_secs(4)));
        assert_eq!(b.fail(now), Some(Duration::from_secs(5)));
        for _ in 0..100 {
            b.fail(now);
        }
        assert_eq!(b.retry_at(), Some(now + Duration::from_secs(5)));
        b.ok();
        assert_eq!(b.retry_at(), None);
        assert_eq!(b.fail(now), None);
    }
}
