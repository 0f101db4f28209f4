//! What every peer shares: finding its program, running it as a child whose output goes to a
//! log in the peer's temp dir, waiting for readiness by polling with a deadline, stopping it
//! (SIGTERM with a deadline, or SIGKILL), and showing the log's tail when a test fails.

use std::fs::{self, OpenOptions};
use std::io::Write;
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::thread;
use std::time::{Duration, Instant};

use crate::common::poll_until;

/// How long a peer may take to become ready (a loaded CI box builds in parallel).
pub const PEER_START_DEADLINE: Duration = Duration::from_secs(60);
/// How long a peer may take to exit after SIGTERM before it is killed.
const STOP_DEADLINE: Duration = Duration::from_secs(20);
/// Log lines shown when a test fails.
const TAIL_LINES: usize = 60;

/// `name` on `PATH` or in the usual sbin folders (mosquitto and clickhouse-server live in
/// `/usr/sbin`, which a user's `PATH` may lack).
pub(super) fn find_binary(name: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .chain(["/usr/sbin", "/usr/local/sbin", "/usr/local/bin", "/usr/bin"].map(PathBuf::from))
        .map(|dir| dir.join(name))
        .find(|candidate| candidate.is_file())
}

/// Like [`find_binary`]; panics with what to do when `name` is missing.
pub(super) fn binary(name: &str) -> PathBuf {
    find_binary(name).unwrap_or_else(|| {
        panic!(
            "{name} is not installed: run scripts/test.sh, which installs the test peers (NEEDED_PEERS)"
        )
    })
}

/// Panics with `hint` unless `python3` can import every module of `modules` (`"a, b"`).
pub(super) fn require_python(modules: &str, hint: &str) {
    let ok = Command::new("python3")
        .args(["-c", &format!("import {modules}")])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    assert!(ok, "python3 cannot import {modules}: {hint}");
}

/// Runs `cmd` to completion; panics with its output unless it succeeds.
pub(super) fn run(cmd: &mut Command, what: &str) -> Output {
    let out = cmd
        .output()
        .unwrap_or_else(|e| panic!("{what}: cannot run {cmd:?}: {e}"));
    assert!(
        out.status.success(),
        "{what} failed ({}):\n{}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// Whether the tests run as root (PostgreSQL refuses to, mosquitto drops to its own user).
pub(super) fn is_root() -> bool {
    Command::new("id")
        .arg("-u")
        .output()
        .is_ok_and(|o| String::from_utf8_lossy(&o.stdout).trim() == "0")
}

/// The name of the user that runs the tests.
pub(super) fn user_name() -> String {
    Command::new("id")
        .arg("-un")
        .output()
        .ok()
        .and_then(|o| String::from_utf8(o.stdout).ok())
        .map(|u| u.trim().to_string())
        .filter(|u| !u.is_empty())
        .unwrap_or_else(|| "root".into())
}

/// The last `lines` lines of a log file (empty when it cannot be read).
pub(super) fn log_tail(path: &Path, lines: usize) -> String {
    let text = fs::read_to_string(path).unwrap_or_default();
    let all: Vec<&str> = text.lines().collect();
    all[all.len().saturating_sub(lines)..].join("\n")
}

/// When the thread is panicking (a test failed), prints the tail of `what`'s log.
pub(super) fn show_log_if_failing(what: &str, log: &Path) {
    if thread::panicking() {
        eprintln!(
            "{what} log {} (last lines):\n{}",
            log.display(),
            log_tail(log, TAIL_LINES)
        );
    }
}

/// What `log` holds past its first `start` bytes.
fn output_since(log: &Path, start: u64) -> String {
    let all = fs::read(log).unwrap_or_default();
    let start = usize::try_from(start).unwrap_or(usize::MAX).min(all.len());
    String::from_utf8_lossy(&all[start..]).into_owned()
}

/// A peer's server process: started (and started again) with its output appended to one
/// log file, killed on drop, its log tail shown when a test fails.
pub(super) struct PeerProcess {
    what: String,
    log: PathBuf,
    /// Log files the program writes itself, shown on failure too.
    own_logs: Vec<PathBuf>,
    child: Option<Child>,
    starts: u32,
    /// Length of the log when the current run started (see [`PeerProcess::wait_for_line`]).
    log_start: u64,
}

impl PeerProcess {
    /// A process `what` (for messages) that is not running yet, logging to `log`.
    pub(super) fn new(what: &str, log: PathBuf) -> PeerProcess {
        PeerProcess {
            what: what.to_string(),
            log,
            own_logs: Vec::new(),
            child: None,
            starts: 0,
            log_start: 0,
        }
    }

    /// Also shows the tail of `log` (a file the program writes itself) when something fails.
    pub(super) fn with_log(mut self, log: PathBuf) -> PeerProcess {
        self.own_logs.push(log);
        self
    }

    /// The tails of every log, for a failure message.
    fn logs(&self) -> String {
        std::iter::once(&self.log)
            .chain(&self.own_logs)
            .map(|log| format!("{}:\n{}", log.display(), log_tail(log, TAIL_LINES)))
            .collect::<Vec<_>>()
            .join("\n")
    }

    /// Spawns `cmd` (stdin null, stdout and stderr appended to the log); panics if the
    /// process is already running. Readiness is the caller's: see [`PeerProcess::wait_ready`].
    pub(super) fn spawn(&mut self, cmd: &mut Command) {
        assert!(
            self.child.is_none(),
            "{} is already running: stop or kill9 it first",
            self.what
        );
        self.starts += 1;
        let mut log = OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.log)
            .unwrap_or_else(|e| panic!("open {}: {e}", self.log.display()));
        // Mark each start in the log so a failure shows which run said what.
        writeln!(log, "===== harness: start #{} =====", self.starts).expect("write the log");
        self.log_start = fs::metadata(&self.log).map(|m| m.len()).unwrap_or(0);
        let err = log.try_clone().expect("clone the log file");
        let child = cmd
            .stdin(Stdio::null())
            .stdout(log)
            .stderr(err)
            .spawn()
            .unwrap_or_else(|e| {
                panic!(
                    "cannot start {} ({cmd:?}): {e}; scripts/test.sh installs it",
                    self.what
                )
            });
        self.child = Some(child);
    }

    /// Whether it was spawned and not stopped or killed since (it may have died on its own).
    pub(super) fn is_started(&self) -> bool {
        self.child.is_some()
    }

    /// Its process id, while it runs.
    pub(super) fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// Polls `ready` until it holds; panics with the log if the process exits first or
    /// [`PEER_START_DEADLINE`] passes.
    pub(super) fn wait_ready(&mut self, what: &str, mut ready: impl FnMut() -> bool) {
        let mut exited = None;
        let child = self.child.as_mut().expect("the peer was spawned");
        let held = poll_until(PEER_START_DEADLINE, || {
            if let Ok(Some(status)) = child.try_wait() {
                exited = Some(status);
                return true;
            }
            ready()
        });
        if let Some(status) = exited {
            self.child = None;
            panic!(
                "{} exited ({status}) before {what}:\n{}",
                self.what,
                self.logs()
            );
        }
        assert!(
            held,
            "{}: not {what} within {PEER_START_DEADLINE:?}:\n{}",
            self.what,
            self.logs()
        );
    }

    /// Waits until something accepts connections on `127.0.0.1:port`.
    pub(super) fn wait_for_port(&mut self, port: u16) {
        self.wait_ready(&format!("listening on 127.0.0.1:{port}"), || {
            TcpStream::connect(("127.0.0.1", port)).is_ok()
        });
    }

    /// Waits until the current run has written the line `line`.
    pub(super) fn wait_for_line(&mut self, line: &str) {
        let (log, start) = (self.log.clone(), self.log_start);
        self.wait_ready(&format!("saying {line:?}"), || {
            output_since(&log, start).lines().any(|l| l == line)
        });
    }

    /// SIGTERM, then waits for the exit; SIGKILL if it takes longer than 20 s. Does nothing
    /// when the process is not running.
    pub(super) fn stop(&mut self) {
        let Some(mut child) = self.child.take() else {
            return;
        };
        let _ = Command::new("kill")
            .arg("-TERM")
            .arg(child.id().to_string())
            .status();
        let deadline = Instant::now() + STOP_DEADLINE;
        while Instant::now() < deadline {
            if let Ok(Some(_)) = child.try_wait() {
                return;
            }
            thread::sleep(Duration::from_millis(20));
        }
        eprintln!(
            "{} did not exit within {STOP_DEADLINE:?} of SIGTERM: killed",
            self.what
        );
        let _ = child.kill();
        let _ = child.wait();
    }

    /// SIGKILL (no chance to flush anything), then reap. Does nothing when the process is
    /// not running.
    pub(super) fn kill9(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// SIGSTOP (`freeze`) or SIGCONT: a stopped peer keeps its connections open and answers
    /// nothing, as a wedged server does.
    pub(super) fn signal(&self, signal: &str) {
        let pid = self.pid().expect("the peer is running");
        let sent = Command::new("kill")
            .arg(format!("-{signal}"))
            .arg(pid.to_string())
            .status()
            .expect("run kill");
        assert!(sent.success(), "kill -{signal} {pid} failed: {sent}");
    }
}

impl Drop for PeerProcess {
    fn drop(&mut self) {
        self.kill9();
        if thread::panicking() {
            eprintln!("{} logs (last lines):\n{}", self.what, self.logs());
        }
    }
}
