//! The commissioning tools, run from the shell at the machine: `browse` walks an OPC-UA
//! server's address space and prints a ready `nodes:` list, `read` reads one point as a
//! config would (like `mbpoll`), `scan` lists the Modbus addresses a device has.
//!
//! What they promise:
//! - **They never write.** Modbus: only the four read functions (1 to 4) go out; OPC-UA: only
//!   GetEndpoints, session calls, Browse, BrowseNext and Read; S7: ISO connect, setup
//!   communication and ReadVar. No code path here builds a write request.
//! - **The config's own words and code.** The target and flags become a `devices:` entry,
//!   validated by the config's validators ([`target`]); values are decoded by the pollers'
//!   decoder, links opened by the pollers' opener, sessions by the OPC-UA device's own
//!   session code (its endpoint choice and certificate checks). A point that reads right here
//!   reads the same in the daemon.
//! - **One line when they cannot go on.** A connection or security failure ends the tool with
//!   exit status 1 and one line on stderr: what failed, and what to check
//!   ([`crate::sources::hints`]).
//! - **Bounded.** `browse` stops at a depth and a node count and says so; `scan` at a number
//!   of requests; `read --count` at [`MAX_COUNT`].
//!
//! - [`target`]: URLs and flags → validated device configs.
//! - [`modbus`]: `read modbus` and `scan modbus` against a device; [`scan`], the scan's plan.
//! - `s7` (feature `s7`): `read s7` against a Siemens S7 PLC (ISO connect, setup and ReadVar
//!   only).
//! - `opcua` (feature `opcua`): the tools' OPC-UA session and `read opcua`; `browse`: the walk.

pub mod modbus;
#[cfg(feature = "s7")]
pub mod s7;
pub mod scan;
pub mod target;

#[cfg(feature = "opcua")]
pub mod browse;
#[cfg(feature = "opcua")]
pub mod opcua;

use std::fmt;
use std::io::Write;
use std::time::Duration;

use serde_json::Value;

/// The flags of a tool, as parsed: `(--name, value)`, a switch without a value.
pub type Flags<'a> = [(&'a str, Option<&'a str>)];

/// Most reads one `read --count` makes.
pub const MAX_COUNT: u64 = 100_000;

/// Why a tool stopped.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Error {
    /// The arguments are wrong: exit status 2, with the usage.
    Usage(String),
    /// A connection, security or device failure: exit status 1, one line.
    Failed(String),
}

impl Error {
    /// The exit status the binary gives it.
    pub fn exit_code(&self) -> u8 {
        match self {
            Self::Usage(_) => 2,
            Self::Failed(_) => 1,
        }
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Usage(m) | Self::Failed(m) => f.write_str(m),
        }
    }
}

impl std::error::Error for Error {}

/// How a tool that ran to its end went.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// Every read was answered: exit status 0.
    Done,
    /// The device answered, but refused some reads (an exception, a bad status), some
    /// reads failed after the first, or a bound cut the work short: exit status 3.
    Partial,
}

impl Outcome {
    /// The exit status the binary gives it.
    pub fn exit_code(self) -> u8 {
        match self {
            Self::Done => 0,
            Self::Partial => 3,
        }
    }
}

/// The flag's value as a whole number in `range`, or `default` when it is not given.
pub fn number(
    flags: &Flags<'_>,
    flag: &str,
    default: u64,
    range: std::ops::RangeInclusive<u64>,
) -> Result<u64, Error> {
    let Some((_, v)) = flags.iter().find(|(f, _)| *f == flag) else {
        return Ok(default);
    };
    let n = v
        .and_then(|v| v.parse::<u64>().ok())
        .ok_or_else(|| Error::Usage(format!("{flag}: expected a whole number")))?;
    if !range.contains(&n) {
        return Err(Error::Usage(format!(
            "{flag}: {n} is outside {}..={}",
            range.start(),
            range.end()
        )));
    }
    Ok(n)
}

/// The text value of a flag.
pub fn text<'a>(flags: &Flags<'a>, flag: &str) -> Option<&'a str> {
    flags.iter().find(|(f, _)| *f == flag).and_then(|(_, v)| *v)
}

/// `--count N` and `--interval-ms M`: how many reads, how far apart.
pub fn repeat(flags: &Flags<'_>) -> Result<(u64, Duration), Error> {
    let count = number(flags, "--count", 1, 1..=MAX_COUNT)?;
    let interval = number(flags, "--interval-ms", 1000, 10..=3_600_000)?;
    Ok((count, Duration::from_millis(interval)))
}

/// A small runtime of its own for one tool run.
pub fn runtime() -> Result<tokio::runtime::Runtime, Error> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| Error::Failed(format!("cannot start: {e}")))
}

/// One point's line: `TIME  LABEL  VALUE [UNIT]  QUALITY[  WHY]`.
pub fn point_line(time_ms: u64, label: &str, point: &Value, why: Option<&str>) -> String {
    let value = match &point["value"] {
        Value::Null => "-".to_string(),
        v => v.to_string(),
    };
    let unit = point["unit"]
        .as_str()
        .map(|u| format!(" {u}"))
        .unwrap_or_default();
    let quality = point["quality"].as_str().unwrap_or("bad");
    let mut line = format!(
        "{}  {label}  {value}{unit}  {quality}",
        crate::time::rfc3339(time_ms)
    );
    if let Some(why) = why {
        line.push_str("  ");
        line.push_str(why);
    }
    line
}

/// Writes `line` and a newline; a stdout that cannot be written (closed by `| head`) ends
/// the tool.
pub fn emit(out: &mut dyn Write, line: &str) -> Result<(), Error> {
    writeln!(out, "{line}").map_err(|e| Error::Failed(format!("cannot write the output: {e}")))
}
