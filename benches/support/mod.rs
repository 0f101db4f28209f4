//! What every benchmark needs around the daemon: its binary, a child process killed on drop,
//! a wait for a port, a process's memory and CPU time and the machine's stolen CPU time from
//! `/proc`. Included by each bench with `mod support;`.

#![allow(dead_code)]

pub mod daemon;

use std::error::Error;
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::Child;
use std::time::{Duration, Instant};

/// A child process, killed and reaped when this is dropped.
pub struct Kill(pub Child);

impl Drop for Kill {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// The daemon binary: `OPEX_CONNECTOR_BIN`, else the `opex-connector` that cargo built for
/// this bench (`CARGO_BIN_EXE_*`: the same profile, inside `CARGO_TARGET_DIR`), else
/// `opex-connector` in the profile folder this bench runs from (`<target>/<profile>/deps/*`).
pub fn daemon_binary() -> Result<PathBuf, Box<dyn Error>> {
    if let Some(bin) = std::env::var_os("OPEX_CONNECTOR_BIN") {
        return Ok(PathBuf::from(bin));
    }
    if let Some(bin) = option_env!("CARGO_BIN_EXE_opex-connector") {
        if Path::new(bin).is_file() {
            return Ok(PathBuf::from(bin));
        }
    }
    let exe = std::env::current_exe()?;
    let profile_dir = exe
        .parent()
        .and_then(Path::parent)
        .ok_or("cannot locate the target profile folder from the bench executable")?;
    let bin = profile_dir.join("opex-connector");
    if !bin.is_file() {
        return Err(format!(
            "{} not found: run `cargo build --release` first (scripts/bench.sh does), or set OPEX_CONNECTOR_BIN",
            bin.display()
        )
        .into());
    }
    Ok(bin)
}

/// Waits up to 20 s for something to listen on 127.0.0.1:`port`.
pub fn wait_for_port(port: u16) -> Result<(), Box<dyn Error>> {
    let began = Instant::now();
    while began.elapsed() < Duration::from_secs(20) {
        if TcpStream::connect(("127.0.0.1", port)).is_ok() {
            return Ok(());
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    Err(format!("nothing listens on 127.0.0.1:{port}").into())
}

/// `VmRSS` of a process from `/proc/PID/status`, in KiB.
pub fn rss_kib(pid: u32) -> Option<u64> {
    proc_status_kib(pid, "VmRSS:")
}

/// A `... kB` field of `/proc/PID/status` (`field` with its colon, e.g. `"RssAnon:"`), in KiB.
pub fn proc_status_kib(pid: u32, field: &str) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    status
        .lines()
        .find_map(|l| l.strip_prefix(field))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|kib| kib.parse().ok())
}

/// User and system CPU seconds of a process so far, from `/proc/PID/stat`.
pub fn cpu_secs(pid: u32) -> Option<f64> {
    let (user, system) = user_system_secs(pid)?;
    Some(user + system)
}

/// The system part of [`cpu_secs`]: the kernel's work for the process (its system calls,
/// the TCP path of its sockets, its wake-ups).
pub fn system_cpu_secs(pid: u32) -> Option<f64> {
    Some(user_system_secs(pid)?.1)
}

/// User and system CPU seconds of a process so far, apart.
fn user_system_secs(pid: u32) -> Option<(f64, f64)> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The fields after the command name (which may hold spaces) start at the state, field 3;
    // utime and stime are fields 14 and 15.
    let mut fields = stat.rsplit_once(')')?.1.split_whitespace().skip(11);
    let utime: f64 = fields.next()?.parse().ok()?;
    let stime: f64 = fields.next()?.parse().ok()?;
    Some((utime / clock_ticks(), stime / clock_ticks()))
}

/// The machine's CPU time so far, from the `cpu` line of `/proc/stat`, in clock ticks: all of
/// it, and the part the hypervisor ran other guests on this guest's CPUs (`steal`). On a shared
/// virtual machine a run whose steal is high measured the neighbours as much as the code.
#[derive(Debug, Clone, Copy)]
pub struct HostCpu {
    total: u64,
    steal: u64,
}

impl HostCpu {
    /// Now; `None` where `/proc/stat` cannot be read (not Linux).
    pub fn read() -> Option<HostCpu> {
        let stat = std::fs::read_to_string("/proc/stat").ok()?;
        let line = stat.lines().find(|l| l.starts_with("cpu "))?;
        // user nice system idle iowait irq softirq steal (guest time is inside user and nice).
        let ticks: Vec<u64> = line
            .split_whitespace()
            .skip(1)
            .take(8)
            .map(|v| v.parse().ok())
            .collect::<Option<_>>()?;
        (ticks.len() == 8).then(|| HostCpu {
            total: ticks.iter().sum(),
            steal: ticks[7],
        })
    }

    /// The share of the CPU time between the readings `before` and `later` that was stolen, in
    /// percent; `None` when either is missing.
    pub fn steal_percent(before: Option<HostCpu>, later: Option<HostCpu>) -> Option<f64> {
        let (before, later) = (before?, later?);
        let total = later.total.checked_sub(before.total)?;
        let steal = later.steal.checked_sub(before.steal)?;
        (total > 0).then(|| steal as f64 * 100.0 / total as f64)
    }
}

/// The kernel's clock ticks per second (`getconf CLK_TCK`; 100 when that fails).
fn clock_ticks() -> f64 {
    static TICKS: std::sync::OnceLock<f64> = std::sync::OnceLock::new();
    *TICKS.get_or_init(|| {
        std::process::Command::new("getconf")
            .arg("CLK_TCK")
            .output()
            .ok()
            .and_then(|o| String::from_utf8(o.stdout).ok())
            .and_then(|s| s.trim().parse().ok())
            .unwrap_or(100.0)
    })
}
