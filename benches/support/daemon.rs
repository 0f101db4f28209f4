//! The release daemon as the benches run it: a child process stopped on drop, a daemon with
//! an ingest source and a push queue plus the YAML a bench adds, its `/api/status`, and the
//! keep-alive ingest clients of the `bench.sh ingest` load.

use std::error::Error;
use std::fs;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::thread;
use std::time::{Duration, Instant};

type BoxResult<T> = Result<T, Box<dyn Error>>;

/// A child process stopped (SIGTERM, then SIGKILL) on drop.
pub struct Proc {
    pub child: Child,
}

impl Proc {
    pub fn spawn(cmd: &mut Command, log: &Path) -> BoxResult<Proc> {
        let child = cmd
            .env(
                "RUST_LOG",
                std::env::var("RUST_LOG").unwrap_or_else(|_| "warn".into()),
            )
            .stdin(Stdio::null())
            .stderr(Stdio::from(fs::File::create(log)?))
            .spawn()?;
        Ok(Proc { child })
    }

    pub fn stop(&mut self) {
        let _ = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status();
        let began = Instant::now();
        while began.elapsed() < Duration::from_secs(20) {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            thread::sleep(Duration::from_millis(20));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            self.stop();
        }
    }
}

pub struct Daemon {
    pub proc: Proc,
    /// `host:port` of its HTTP server.
    pub addr: String,
}

impl Daemon {
    pub fn start(bin: &Path, dir: &Path, extra: &str) -> BoxResult<Daemon> {
        fs::create_dir_all(dir)?;
        let data = serde_json::to_string(&dir.join("data").to_string_lossy())?;
        let config = dir.join("bench.yaml");
        fs::write(
            &config,
            format!(
                "connector:\n  name: bench\n  data_dir: {data}\n  http:\n    listen: 127.0.0.1:0\n    max_connections: 256\n  push_queue:\n    enabled: true\n    max_quota_mb: 1024\n    on_full: evict_oldest\ningest:\n  sources:\n    - name: bench\n      token: bench-token-0123\n{extra}"
            ),
        )?;
        Self::run(bin, dir, &config)
    }

    /// Runs the daemon with the config file `config` (its log in `dir`).
    pub fn run(bin: &Path, dir: &Path, config: &Path) -> BoxResult<Daemon> {
        let log = dir.join("daemon.log");
        let mut proc = Proc::spawn(
            Command::new(bin)
                .args(["run", "--config"])
                .arg(config)
                .stdout(Stdio::piped()),
            &log,
        )?;
        let stdout = proc.child.stdout.take().ok_or("no stdout")?;
        let (tx, rx) = mpsc::channel();
        thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if let Some(rest) = line
                    .trim()
                    .strip_prefix("opex-connector listening on http://")
                {
                    let _ = tx.send(rest.trim_end_matches('/').to_string());
                }
            }
        });
        match rx.recv_timeout(Duration::from_secs(30)) {
            Ok(addr) => Ok(Daemon { proc, addr }),
            Err(_) => {
                proc.stop();
                let log = fs::read_to_string(&log).unwrap_or_default();
                Err(format!("daemon did not start; log:\n{log}").into())
            }
        }
    }

    pub fn pid(&self) -> u32 {
        self.proc.child.id()
    }

    pub fn stop(&mut self) {
        self.proc.stop();
    }
}

pub fn bench_base_dir() -> PathBuf {
    if let Some(dir) = std::env::var_os("BENCH_DIR") {
        return PathBuf::from(dir);
    }
    match option_env!("CARGO_TARGET_TMPDIR") {
        Some(dir) => PathBuf::from(dir),
        None => std::env::temp_dir(),
    }
}

pub fn wait_until_polled(addr: &str, polls: u64) -> BoxResult<()> {
    let began = Instant::now();
    while began.elapsed() < Duration::from_secs(30) {
        if let Ok(s) = get_status(addr) {
            let done = s["devices"].as_array().is_some_and(|d| {
                d.iter()
                    .all(|d| d["polls_total"].as_u64().unwrap_or(0) >= polls)
            });
            if done {
                return Ok(());
            }
        }
        thread::sleep(Duration::from_millis(50));
    }
    Err("the devices were not polled".into())
}

/// One HTTP exchange on `stream`; returns the status and the body (Content-Length bodies).
pub fn exchange(
    stream: &mut TcpStream,
    reader: &mut BufReader<TcpStream>,
    request: &[u8],
) -> Result<(u16, Vec<u8>), String> {
    stream.write_all(request).map_err(|e| e.to_string())?;
    let mut line = String::new();
    reader.read_line(&mut line).map_err(|e| e.to_string())?;
    let status = line
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .ok_or_else(|| format!("bad status line {line:?}"))?;
    let mut length = 0usize;
    loop {
        line.clear();
        if reader.read_line(&mut line).map_err(|e| e.to_string())? == 0 {
            return Err("closed".into());
        }
        let h = line.trim_end();
        if h.is_empty() {
            break;
        }
        if let Some((k, v)) = h.split_once(':') {
            if k.eq_ignore_ascii_case("content-length") {
                length = v.trim().parse().map_err(|_| "bad length".to_string())?;
            }
        }
    }
    let mut body = vec![0; length];
    reader.read_exact(&mut body).map_err(|e| e.to_string())?;
    Ok((status, body))
}

pub fn connect(addr: &str) -> Result<(TcpStream, BufReader<TcpStream>), String> {
    let s = TcpStream::connect(addr).map_err(|e| e.to_string())?;
    s.set_nodelay(true).map_err(|e| e.to_string())?;
    s.set_read_timeout(Some(Duration::from_secs(30)))
        .map_err(|e| e.to_string())?;
    let r = BufReader::new(s.try_clone().map_err(|e| e.to_string())?);
    Ok((s, r))
}

pub fn get_status(addr: &str) -> BoxResult<serde_json::Value> {
    let (mut s, mut r) = connect(addr)?;
    let req = format!("GET /api/status HTTP/1.1\r\nHost: {addr}\r\n\r\n");
    let (code, body) = exchange(&mut s, &mut r, req.as_bytes())?;
    if code != 200 {
        return Err(format!("status {code}").into());
    }
    Ok(serde_json::from_slice(&body)?)
}

/// One keep-alive ingest client until `deadline`; returns the records acknowledged.
pub fn ingest_client(i: usize, addr: &str, deadline: Instant) -> u64 {
    let mut acked = 0;
    let pad = "x".repeat(1000);
    let mut conn = None;
    let mut n = 0u64;
    while Instant::now() < deadline {
        if conn.is_none() {
            conn = connect(addr).ok();
            if conn.is_none() {
                thread::sleep(Duration::from_millis(50));
                continue;
            }
        }
        let Some((s, r)) = conn.as_mut() else {
            continue;
        };
        let body = format!(r#"{{"client":{i},"n":{n},"pad":"{pad}"}}"#);
        n += 1;
        let req = format!(
            "POST /api/ingest/bench/c{i}-{n} HTTP/1.1\r\nHost: {addr}\r\nAuthorization: Bearer bench-token-0123\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
            body.len()
        );
        match exchange(s, r, req.as_bytes()) {
            Ok((200, _)) => acked += 1,
            Ok(_) => {}
            Err(_) => conn = None,
        }
    }
    acked
}
