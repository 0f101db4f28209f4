//! `read modbus` and `scan modbus`: one device, reached the way the pollers reach it
//! ([`Opener`]), read with the pollers' request ([`request`]: the device's timeout, link
//! errors apart from exceptions) and decoded by the pollers' decoder.

use std::io::{IsTerminal, Write};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::{json, Map, Value};
use tokio_modbus::client::Context;
use tokio_modbus::prelude::{Slave, SlaveContext};

use super::scan::{Found, Reply, Scan};
use super::target::{modbus_target, value_of};
use super::{emit, number, point_line, repeat, runtime, text, Error, Flags, Outcome};
use crate::record::now_ms;
use crate::sources::driver::LinkError;
use crate::sources::hints;
use crate::sources::modbus::config::{ModbusDeviceConfig, RegisterKind};
use crate::sources::modbus::decode::{decode_answer, exception_point};
use crate::sources::modbus::plan::ReadRequest;
use crate::sources::modbus::poller::{request, Opener};

/// Device keys the Modbus tools take from flags.
const DEVICE_KEYS: [(&str, &str); 2] = [("--unit", "unit"), ("--timeout-ms", "timeout_ms")];

/// Point keys `read modbus` takes from flags.
const POINT_KEYS: [(&str, &str); 9] = [
    ("--register", "register"),
    ("--kind", "kind"),
    ("--table", "kind"),
    ("--type", "type"),
    ("--length", "length"),
    ("--word-order", "word_order"),
    ("--byte-order", "byte_order"),
    ("--scale", "scale"),
    ("--offset", "offset"),
];

/// `read modbus TARGET --register N ...`: reads one point `--count` times, `--interval-ms`
/// apart, and prints each value with its quality (or the exception and what it means).
pub fn read(target: &str, flags: &Flags<'_>, out: &mut dyn Write) -> Result<Outcome, Error> {
    let (count, interval) = repeat(flags)?;
    let mut entry = modbus_target(target)?;
    entry.set_flags(flags, &DEVICE_KEYS);
    let mut point = vec![("name", json!("value"), "the point".to_string())];
    for (flag, key) in POINT_KEYS {
        if let Some(v) = value_of(flags, flag) {
            point.push((key, v, (*flag).to_string()));
        }
    }
    if !point.iter().any(|(k, _, _)| *k == "register") {
        return Err(Error::Usage("read modbus needs --register N".into()));
    }
    entry.push("points", point);
    let device = entry.modbus()?;
    let Some(pt) = device.points.first() else {
        return Err(Error::Usage("read modbus needs --register N".into()));
    };
    let req = ReadRequest {
        kind: pt.kind,
        start: pt.register,
        count: pt.data_type.width(),
        points: vec![0],
    };
    let label = format!(
        "{} ({})",
        hints::units_at(pt.kind, req.start, req.count),
        describe_type(&device)
    );
    runtime()?.block_on(async {
        let mut link = Link::new(&device);
        let mut outcome = Outcome::Done;
        for i in 0..count {
            if i > 0 {
                tokio::time::sleep(interval).await;
            }
            let at = now_ms();
            match link.read(&req).await {
                Err(e) if i == 0 => return Err(link.failure(&e)),
                Err(e) => {
                    outcome = Outcome::Partial;
                    let why = format!("{e}: {}", link.hint(&e));
                    emit(
                        out,
                        &point_line(
                            at,
                            &label,
                            &json!({"value": null, "quality": "bad"}),
                            Some(&why),
                        ),
                    )?;
                }
                Ok(Err(code)) => {
                    outcome = Outcome::Partial;
                    let why = format!(
                        "{}: {}",
                        hints::exception_text(code, req.kind, req.start, req.count),
                        hints::exception_hint(code, req.kind, req.start, req.count)
                    );
                    let point = exception_point(code, &pt.unit);
                    emit(out, &point_line(at, &label, &point, Some(&why)))?;
                }
                Ok(Ok(answer)) => {
                    let mut payload = Map::new();
                    decode_answer(&device.points, &req, &answer, &mut payload);
                    let point = payload.remove("value").unwrap_or(Value::Null);
                    if point["quality"] != "good" {
                        outcome = Outcome::Partial;
                    }
                    emit(out, &point_line(at, &label, &point, None))?;
                }
            }
        }
        Ok(outcome)
    })
}

/// `f32, little word order` and the like: how the point is read, as its keys say.
fn describe_type(device: &ModbusDeviceConfig) -> String {
    use crate::sources::modbus::config::{DataType, Order};
    let Some(pt) = device.points.first() else {
        return String::new();
    };
    let mut parts = vec![match pt.data_type {
        DataType::String(len) => format!("string of {len} bytes"),
        other => format!("{other:?}").to_lowercase(),
    }];
    if pt.word_order == Order::Little {
        parts.push("little word order".into());
    }
    if pt.byte_order == Order::Little {
        parts.push("little byte order".into());
    }
    if let Some(s) = pt.scale {
        parts.push(format!("scale {s}"));
    }
    if let Some(o) = pt.offset {
        parts.push(format!("offset {o}"));
    }
    format!("unit {}, {}", device.unit, parts.join(", "))
}

/// The addresses `scan modbus` reads without `--range`: the first 10 000 of the table, where
/// nearly every device keeps its map (the 40001-49999 of the old 5-digit numbering).
pub const DEFAULT_RANGE: &str = "0-9999";

/// `scan modbus TARGET --table holding --range 0-9999`: which addresses of one table exist.
/// Ctrl-C stops it with what it found so far.
pub fn scan(target: &str, flags: &Flags<'_>, out: &mut dyn Write) -> Result<Outcome, Error> {
    let mut entry = modbus_target(target)?;
    entry.set_flags(flags, &DEVICE_KEYS);
    let (first, last) = range(text(flags, "--range").unwrap_or(DEFAULT_RANGE))?;
    // The table is a point's `kind`, read by the config's own code; the scan reads ranges,
    // not that point.
    let mut point = vec![
        ("name", json!("scan"), "the point".to_string()),
        ("register", json!(first), "--range".to_string()),
    ];
    for flag in ["--kind", "--table"] {
        if let Some(v) = value_of(flags, flag) {
            point.push(("kind", v, flag.to_string()));
        }
    }
    entry.push("points", point);
    let device = entry.modbus()?;
    let kind = device
        .points
        .first()
        .map_or(RegisterKind::Holding, |p| p.kind);
    let block = number(
        flags,
        "--block",
        u64::from(kind.max_per_request()),
        1..=u64::from(kind.max_per_request()),
    )? as u16;
    // Enough for any map: a stretch that exists costs a read per block, one that does not a
    // read per address, and each change between them a few halvings.
    let enough = 2 * (u64::from(last - first) + 1) + 64;
    let max_requests = number(flags, "--max-requests", enough, 1..=1_000_000)?;
    let (_, many) = hints::unit_words(kind);
    emit(
        out,
        &format!(
            "scan of {many} {first}-{last}, unit {}, at {target}",
            device.unit
        ),
    )?;
    let mut plan = Scan::new(kind, first, last, block);
    let mut progress = Progress::new(u64::from(last - first) + 1, many);
    let scanned = runtime()?.block_on(async {
        let mut link = Link::new(&device);
        // Ctrl-C ends the scan, not the process: what was found so far is still printed. The
        // handler is in place once this task first runs (at the first read's first wait).
        let interrupted = Arc::new(tokio::sync::Notify::new());
        let on_ctrl_c = interrupted.clone();
        tokio::spawn(async move {
            if tokio::signal::ctrl_c().await.is_ok() {
                on_ctrl_c.notify_one();
            }
        });
        let mut sent: u64 = 0;
        let mut failed_in_a_row = 0u32;
        while let Some((start, count)) = plan.next() {
            progress.show(&plan);
            if sent >= max_requests {
                return Ok((
                    sent,
                    Some(format!(
                        "stopped after --max-requests {max_requests} requests"
                    )),
                ));
            }
            sent += 1;
            let req = ReadRequest {
                kind,
                start,
                count,
                points: Vec::new(),
            };
            let reply = tokio::select! {
                reply = link.read(&req) => reply,
                () = interrupted.notified() => {
                    return Ok((
                        sent,
                        Some(format!(
                            "stopped by Ctrl-C at {}",
                            hints::units_at(kind, start, count)
                        )),
                    ));
                }
            };
            match reply {
                Ok(Ok(_)) => {
                    failed_in_a_row = 0;
                    plan.answer(Reply::Answered);
                }
                Ok(Err(code)) => {
                    failed_in_a_row = 0;
                    plan.answer(Reply::Exception(code));
                }
                Err(e) if sent == 1 => return Err(link.failure(&e)),
                // Once more on a fresh link, then give up with what was found.
                Err(e) if failed_in_a_row >= 1 => {
                    return Ok((
                        sent,
                        Some(format!(
                            "stopped at {}: {e}: {}",
                            hints::units_at(kind, start, count),
                            link.hint(&e)
                        )),
                    ));
                }
                Err(_) => failed_in_a_row += 1,
            }
        }
        Ok((sent, None))
    });
    progress.clear();
    let (sent, stopped) = scanned?;
    let ranges = plan.ranges();
    let mut existing: u64 = 0;
    let mut runs = 0;
    for (a, b, found) in &ranges {
        let n = u64::from(*b - *a) + 1;
        let what = match found {
            Found::Exists => {
                existing += n;
                runs += 1;
                format!(
                    "exists   {}  ({n} {})",
                    span(*a, *b),
                    if n == 1 {
                        hints::unit_words(kind).0
                    } else {
                        many
                    }
                )
            }
            Found::Missing => continue,
            Found::Refused(code) => format!(
                "refused  {}  exception {code} \"{}\"",
                span(*a, *b),
                hints::exception_name(*code)
            ),
            Found::NotScanned => format!("unread   {}", span(*a, *b)),
        };
        emit(out, &what)?;
    }
    let total = u64::from(last - first) + 1;
    emit(
        out,
        &format!(
            "{existing} of {total} {many} exist, in {runs} range{}; {sent} requests",
            if runs == 1 { "" } else { "s" }
        ),
    )?;
    match stopped {
        Some(why) => {
            emit(out, &why)?;
            Ok(Outcome::Partial)
        }
        None if ranges.iter().any(|r| matches!(r.2, Found::Refused(_))) => Ok(Outcome::Partial),
        None => Ok(Outcome::Done),
    }
}

/// The scan's progress line on stderr (addresses done, found, elapsed): only when stderr is
/// a terminal, so a log or a pipe gets the results alone; redrawn at most 5 times a second,
/// and wiped before the results are printed.
struct Progress {
    on: bool,
    started: Instant,
    shown: Option<Instant>,
    total: u64,
    many: &'static str,
}

impl Progress {
    fn new(total: u64, many: &'static str) -> Self {
        Self {
            on: std::io::stderr().is_terminal(),
            started: Instant::now(),
            shown: None,
            total,
            many,
        }
    }

    fn show(&mut self, plan: &Scan) {
        if !self.on
            || self
                .shown
                .is_some_and(|t| t.elapsed() < Duration::from_millis(200))
        {
            return;
        }
        self.shown = Some(Instant::now());
        let (done, found) = plan.progress();
        // A terminal that cannot be written to loses only this line.
        let _ = write!(
            std::io::stderr(),
            "\r\x1b[Kscanning: {done} of {} {} done, {found} found, {} s",
            self.total,
            self.many,
            self.started.elapsed().as_secs()
        );
    }

    fn clear(&self) {
        if self.on {
            let _ = write!(std::io::stderr(), "\r\x1b[K");
        }
    }
}

/// `A-B`, or `A` alone.
fn span(a: u16, b: u16) -> String {
    if a == b {
        a.to_string()
    } else {
        format!("{a}-{b}")
    }
}

/// `A-B` (or one address `A`) inside 0..=65535.
fn range(s: &str) -> Result<(u16, u16), Error> {
    let bad = || {
        Error::Usage(format!(
            "--range: expected FIRST-LAST like 0-9999, got {s:?}"
        ))
    };
    let (a, b) = s.split_once('-').unwrap_or((s, s));
    let a: u16 = a.trim().parse().map_err(|_| bad())?;
    let b: u16 = b.trim().parse().map_err(|_| bad())?;
    if a > b {
        return Err(bad());
    }
    Ok((a, b))
}

/// The tools' link to one device: opened on first use, dropped after a link error and opened
/// again on the next read (as the pollers do: a late answer must not answer the next request).
struct Link<'a> {
    device: &'a ModbusDeviceConfig,
    opener: Opener,
    ctx: Option<Context>,
}

impl<'a> Link<'a> {
    fn new(device: &'a ModbusDeviceConfig) -> Self {
        Self {
            device,
            opener: Opener::of(&device.transport),
            ctx: None,
        }
    }

    async fn read(
        &mut self,
        req: &ReadRequest,
    ) -> Result<Result<crate::sources::modbus::decode::Answer, u8>, LinkError> {
        let ctx = match &mut self.ctx {
            Some(ctx) => ctx,
            None => {
                let mut ctx = self.opener.open(self.device.timeout).await?;
                ctx.set_slave(Slave(self.device.unit));
                self.ctx.insert(ctx)
            }
        };
        match request(ctx, req, self.device.timeout).await {
            Ok(answer) => Ok(answer.map_err(u8::from)),
            Err(e) => {
                self.ctx = None;
                Err(e)
            }
        }
    }

    fn hint(&self, e: &LinkError) -> String {
        hints::link_hint(
            e,
            &self.device.transport,
            self.device.unit,
            self.device.timeout,
        )
    }

    /// The one line of a failure to reach the device.
    fn failure(&self, e: &LinkError) -> Error {
        let at = match &self.device.transport {
            crate::sources::modbus::config::Transport::Tcp { host, port } => {
                format!("{host}:{port}")
            }
            crate::sources::modbus::config::Transport::Rtu(line) => line.path.clone(),
        };
        Error::Failed(format!("{at}: {e}: {}", self.hint(e)))
    }
}
