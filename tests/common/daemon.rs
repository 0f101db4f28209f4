//! The real `opex-connector run` process on a temp data dir.

use std::fs::OpenOptions;
use std::io::{BufRead, BufReader, Write};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Output, Stdio};
use std::sync::mpsc;
use std::thread;
use std::time::{Duration, Instant};

use serde_json::Value;
use tempfile::TempDir;

use super::{to_yaml, Client, KeepAlive, Reply, BIN, SOURCE, START_DEADLINE, TOKEN};

/// What the daemon prints on stdout once its HTTP server is bound.
const LISTENING_PREFIX: &str = "opex-connector listening on http://";

/// The real `opex-connector run` process on a temp data dir.
pub struct Daemon {
    /// The binary it runs.
    bin: PathBuf,
    dir: TempDir,
    config_path: PathBuf,
    stderr_path: PathBuf,
    child: Option<Child>,
    addr: String,
    client: Client,
    starts: u32,
    data_dir: PathBuf,
    admin_token: Option<String>,
    /// Largest file the daemon may write, in bytes (`RLIMIT_FSIZE`), from its next start.
    file_limit: Option<u64>,
}

impl Daemon {
    /// Writes `config` (with, unless given, `connector.data_dir` in a new temp dir,
    /// `connector.http.listen: 127.0.0.1:0` and `telemetry.alerts.disk_free_pct: 0`) and
    /// starts the daemon on it.
    pub fn start(config: Value) -> Daemon {
        Daemon::start_binary(Path::new(BIN), config)
    }

    /// [`Daemon::start`] with another build of the binary (a bench's release build).
    pub fn start_binary(bin: &Path, config: Value) -> Daemon {
        Daemon::start_limited(bin, config, None)
    }

    /// [`Daemon::start`] with no file of the daemon allowed to grow past `bytes`: a write past
    /// it fails with `EFBIG` (`SIGXFSZ` is ignored), as a write to a full disk fails.
    pub fn start_with_file_limit(config: Value, bytes: u64) -> Daemon {
        Daemon::start_limited(Path::new(BIN), config, Some(bytes))
    }

    fn start_limited(bin: &Path, mut config: Value, file_limit: Option<u64>) -> Daemon {
        let dir = tempfile::Builder::new()
            .prefix("opex-it-")
            .tempdir()
            .expect("create temp dir");
        if config["connector"]["data_dir"].is_null() {
            let data_dir = dir.path().join("data");
            config["connector"]["data_dir"] = Value::from(data_dir.to_string_lossy().into_owned());
        }
        let data_dir = PathBuf::from(config["connector"]["data_dir"].as_str().expect("data_dir"));
        // The test box's own free space is not under test: a nearly full disk there would
        // make every state degraded (the tests of the disk finding set their own).
        if config["telemetry"]["alerts"]["disk_free_pct"].is_null() {
            config["telemetry"]["alerts"]["disk_free_pct"] = Value::from(0);
        }
        if config["connector"]["http"]["listen"].is_null() {
            config["connector"]["http"]["listen"] = Value::from("127.0.0.1:0");
        }
        let admin_token = config["connector"]["http"]["admin_token"]
            .as_str()
            .map(str::to_string);
        let config_path = dir.path().join("config.yaml");
        std::fs::write(&config_path, to_yaml(&config)).expect("write config");
        let stderr_path = dir.path().join("stderr.log");
        let mut daemon = Daemon {
            bin: bin.to_path_buf(),
            dir,
            config_path,
            stderr_path,
            child: None,
            addr: String::new(),
            client: Client::new(),
            starts: 0,
            data_dir,
            admin_token,
            file_limit,
        };
        daemon.spawn();
        keep_for_the_schema_check(&config);
        daemon
    }

    fn spawn(&mut self) {
        assert!(self.child.is_none(), "daemon is already running");
        self.starts += 1;
        let mut log = OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.stderr_path)
            .expect("open stderr log");
        // Mark each start in the log so a failure shows which run said what.
        writeln!(log, "===== harness: start #{} =====", self.starts).expect("write log");
        let mut cmd = match self.file_limit {
            None => Command::new(&self.bin),
            // bash counts `ulimit -f` in KiB; the ignored signal survives the `exec`.
            Some(bytes) => {
                let mut cmd = Command::new("bash");
                cmd.arg("-c")
                    .arg(r#"trap '' XFSZ; ulimit -f "$1"; shift; exec "$@""#)
                    .arg("bash")
                    .arg((bytes / 1024).to_string())
                    .arg(&self.bin);
                cmd
            }
        };
        cmd.arg("run")
            .arg("--config")
            .arg(&self.config_path)
            .current_dir(self.dir.path())
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::from(log));
        if std::env::var_os("RUST_LOG").is_none() {
            cmd.env("RUST_LOG", "info");
        }
        let mut child = cmd.spawn().expect("spawn opex-connector");
        let stdout = child.stdout.take().expect("piped stdout");
        let (tx, rx) = mpsc::channel::<String>();
        // Reads the listening line, then keeps draining stdout so the daemon never blocks on it.
        thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if let Some(rest) = line.trim().strip_prefix(LISTENING_PREFIX) {
                    let _ = tx.send(rest.trim_end_matches('/').to_string());
                }
            }
        });
        self.child = Some(child);
        match rx.recv_timeout(START_DEADLINE) {
            Ok(addr) => {
                addr.parse::<SocketAddr>()
                    .unwrap_or_else(|e| panic!("listening line has a bad address {addr:?}: {e}"));
                self.addr = addr;
            }
            Err(mpsc::RecvTimeoutError::Timeout) => {
                self.kill_child();
                panic!(
                    "no listening line within {START_DEADLINE:?}; stderr:\n{}",
                    self.stderr_tail(200)
                );
            }
            Err(mpsc::RecvTimeoutError::Disconnected) => {
                let status = self.kill_child();
                panic!(
                    "daemon closed stdout before listening (exit {status:?}); stderr:\n{}",
                    self.stderr_tail(200)
                );
            }
        }
    }

    fn kill_child(&mut self) -> Option<ExitStatus> {
        let mut child = self.child.take()?;
        let _ = child.kill();
        child.wait().ok()
    }

    /// `http://127.0.0.1:PORT` of the current run.
    pub fn base(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// `base() + path`.
    pub fn url(&self, path: &str) -> String {
        format!("{}{}", self.base(), path)
    }

    pub fn pid(&self) -> u32 {
        self.child.as_ref().expect("daemon is not running").id()
    }

    pub fn data_dir(&self) -> PathBuf {
        self.data_dir.clone()
    }

    /// `connector.http.admin_token` of the config, when it has one.
    pub fn admin_token(&self) -> Option<&str> {
        self.admin_token.as_deref()
    }

    pub fn config_path(&self) -> &Path {
        &self.config_path
    }

    pub fn client(&self) -> Client {
        self.client.clone()
    }

    /// A keep-alive connection to the daemon, spoken to by hand.
    pub fn keep_alive(&self) -> KeepAlive {
        KeepAlive::connect(&self.addr).expect("connect to the daemon")
    }

    /// Whether the process is still alive.
    pub fn is_running(&mut self) -> bool {
        match self.child.as_mut() {
            Some(child) => matches!(child.try_wait(), Ok(None)),
            None => false,
        }
    }

    /// SIGKILL (no chance to flush or commit anything), then reap.
    pub fn kill9(&mut self) {
        let mut child = self.child.take().expect("daemon is not running");
        child.kill().expect("SIGKILL");
        child.wait().expect("reap killed daemon");
    }

    /// SIGTERM and wait (30 s) for the graceful exit; returns its status.
    pub fn stop(&mut self) -> ExitStatus {
        let pid = self.pid();
        let sent = Command::new("kill")
            .arg("-TERM")
            .arg(pid.to_string())
            .status()
            .expect("run kill -TERM");
        assert!(sent.success(), "kill -TERM {pid} failed: {sent}");
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let child = self.child.as_mut().expect("daemon is not running");
            if let Some(status) = child.try_wait().expect("try_wait") {
                self.child = None;
                return status;
            }
            if Instant::now() >= deadline {
                self.kill_child();
                panic!(
                    "daemon did not exit within 30 s of SIGTERM; stderr:\n{}",
                    self.stderr_tail(200)
                );
            }
            thread::sleep(Duration::from_millis(20));
        }
    }

    /// Sets or lifts the file size limit of [`Daemon::start_with_file_limit`] for the next
    /// start.
    pub fn set_file_limit(&mut self, bytes: Option<u64>) {
        self.file_limit = bytes;
    }

    /// Starts again on the same data dir and config (the port changes: see [`Daemon::base`]).
    pub fn restart(&mut self) {
        self.spawn();
    }

    /// Everything the daemon wrote to stderr over all its runs.
    pub fn stderr(&self) -> String {
        std::fs::read_to_string(&self.stderr_path).unwrap_or_default()
    }

    pub fn stderr_tail(&self, lines: usize) -> String {
        let all = self.stderr();
        let v: Vec<&str> = all.lines().collect();
        v[v.len().saturating_sub(lines)..].join("\n")
    }

    /// GET `path`; panics (with the daemon's stderr) on a transport error.
    pub fn get(&self, path: &str, token: Option<&str>) -> Reply {
        self.client
            .get(&self.url(path), token)
            .unwrap_or_else(|e| self.transport_panic("GET", path, e))
    }

    /// POST `body` to `path`; panics (with the daemon's stderr) on a transport error.
    pub fn post(&self, path: &str, token: Option<&str>, body: &[u8]) -> Reply {
        self.client
            .post(&self.url(path), token, body)
            .unwrap_or_else(|e| self.transport_panic("POST", path, e))
    }

    /// Any method with extra headers and an optional body; panics (with the daemon's stderr)
    /// on a transport error.
    pub fn request(
        &self,
        method: &str,
        path: &str,
        token: Option<&str>,
        headers: &[(&str, &str)],
        body: Option<&[u8]>,
    ) -> Reply {
        self.client
            .request(method, &self.url(path), token, headers, body)
            .unwrap_or_else(|e| self.transport_panic(method, path, e))
    }

    /// PUT `body` to `path`.
    pub fn put(&self, path: &str, token: Option<&str>, body: &[u8]) -> Reply {
        self.request("PUT", path, token, &[], Some(body))
    }

    /// DELETE `path`.
    pub fn delete(&self, path: &str, token: Option<&str>) -> Reply {
        self.request("DELETE", path, token, &[], None)
    }

    /// POST a record to the test source with its token.
    pub fn ingest(&self, key: &str, body: &str) -> Reply {
        self.post(
            &format!("/api/ingest/{SOURCE}/{key}"),
            Some(TOKEN),
            body.as_bytes(),
        )
    }

    /// POST a batch to the test source with its token (`POST /api/ingest/{source}{query}`),
    /// as `content_type`.
    pub fn ingest_batch(&self, query: &str, content_type: &str, body: &[u8]) -> Reply {
        self.request(
            "POST",
            &format!("/api/ingest/{SOURCE}{query}"),
            Some(TOKEN),
            &[("Content-Type", content_type)],
            Some(body),
        )
    }

    /// `GET /api/status` as JSON (must answer 200).
    pub fn status(&self) -> Value {
        let reply = self.get("/api/status", None);
        assert_eq!(reply.status, 200, "GET /api/status: {}", reply.body);
        reply.json()
    }

    /// `GET /metrics` text (must answer 200).
    pub fn metrics(&self) -> String {
        let reply = self.get("/metrics", None);
        assert_eq!(reply.status, 200, "GET /metrics: {}", reply.body);
        reply.body
    }

    fn transport_panic(&self, method: &str, path: &str, e: ureq::Error) -> ! {
        panic!(
            "{method} {path} failed: {e}; stderr:\n{}",
            self.stderr_tail(100)
        )
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        self.kill_child();
        if thread::panicking() {
            eprintln!(
                "----- opex-connector stderr (last 150 lines) -----\n{}\n-----",
                self.stderr_tail(150)
            );
        }
    }
}

/// Runs the binary with `args` to completion (for `validate` and `--version`).
pub fn run_cli(args: &[&str]) -> Output {
    Command::new(BIN)
        .args(args)
        .stdin(Stdio::null())
        .output()
        .expect("run opex-connector")
}

/// Copies a config the daemon started on into `$OPEX_CONFIGS_SEEN` (when set), named by the
/// test: `scripts/test.sh` checks every one against the config schema after the suite, so the
/// configs the tests build inline are checked as the committed ones are (tests/config_schema.rs).
fn keep_for_the_schema_check(config: &Value) {
    let Some(dir) = std::env::var_os("OPEX_CONFIGS_SEEN") else {
        return;
    };
    static SEQ: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let n = SEQ.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let binary = std::env::args()
        .next()
        .map(PathBuf::from)
        .and_then(|p| p.file_name().map(|f| f.to_string_lossy().into_owned()))
        .unwrap_or_default();
    let binary = binary.rsplit_once('-').map_or(binary.as_str(), |(b, _)| b);
    let test = thread::current()
        .name()
        .unwrap_or("main")
        .replace("::", ".");
    let name = format!("{binary}.{test}.{}.{n}.json", std::process::id());
    let text = serde_json::to_vec_pretty(config).expect("JSON");
    std::fs::write(PathBuf::from(dir).join(name), text).expect("write the config's copy");
}
