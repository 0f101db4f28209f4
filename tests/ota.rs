//! `scripts/ota-update.sh` against a temp install root, artifacts served over loopback HTTP,
//! and a real daemon restarted by the script: a good update, a corrupt artifact, a bad
//! signature, and a new binary that never becomes healthy (rolled back by itself).

mod common;

use std::io::{BufRead, BufReader, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::thread;

use common::{free_port, run_cli, BIN};

/// Serves the files of `dir` at `/name` on a loopback port, until the process ends.
fn serve_dir(dir: PathBuf) -> String {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    thread::spawn(move || {
        for stream in listener.incoming().flatten() {
            let dir = dir.clone();
            thread::spawn(move || answer(stream, &dir));
        }
    });
    format!("http://{addr}")
}

fn answer(mut stream: TcpStream, dir: &Path) {
    let mut reader = BufReader::new(stream.try_clone().unwrap());
    let mut line = String::new();
    if reader.read_line(&mut line).is_err() {
        return;
    }
    let name = line
        .split(' ')
        .nth(1)
        .unwrap_or("/")
        .trim_start_matches('/');
    loop {
        let mut h = String::new();
        if reader.read_line(&mut h).unwrap_or(0) == 0 || h == "\r\n" {
            break;
        }
    }
    let body = std::fs::read(dir.join(name)).ok();
    let head = match &body {
        Some(b) => format!(
            "HTTP/1.1 200 OK\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
            b.len()
        ),
        None => "HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\nConnection: close\r\n\r\n".into(),
    };
    let _ = stream.write_all(head.as_bytes());
    if let Some(b) = body {
        let _ = stream.write_all(&b);
    }
}

fn sha256(path: &Path) -> String {
    let out = Command::new("sha256sum").arg(path).output().unwrap();
    String::from_utf8_lossy(&out.stdout)
        .split(' ')
        .next()
        .unwrap()
        .to_string()
}

struct Box_ {
    dir: tempfile::TempDir,
    served: PathBuf,
    url: String,
    port: u16,
}

impl Box_ {
    /// An install root with the current binary as release `0.1.0-old`, a key pair, a config,
    /// and the daemon running from `current`.
    fn new() -> Box_ {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        let old = d.join("root/releases/0.1.0-old");
        std::fs::create_dir_all(&old).unwrap();
        std::fs::copy(BIN, old.join("opex-connector")).unwrap();
        std::os::unix::fs::symlink("releases/0.1.0-old", d.join("root/current")).unwrap();
        assert!(run_cli(&["keygen", d.to_str().unwrap()]).status.success());
        let port = free_port();
        std::fs::write(
            d.join("config.yaml"),
            format!(
                "connector:\n  data_dir: {}\n  http:\n    listen: 127.0.0.1:{port}\n  push_queue:\n    max_quota_mb: 16\ningest:\n  sources:\n    - name: orders\n      token: s3cret-t0ken-0123\n",
                d.join("data").display()
            ),
        )
        .unwrap();
        std::fs::write(
            d.join("restart.sh"),
            format!(
                r#"#!/bin/sh
ROOT={root}
if [ -f "$ROOT/daemon.pid" ]; then
  pid=$(cat "$ROOT/daemon.pid"); kill "$pid" 2>/dev/null
  while kill -0 "$pid" 2>/dev/null; do sleep 0.1; done
fi
setsid "$ROOT/current/opex-connector" run --config {cfg} >> "$ROOT/daemon.log" 2>&1 < /dev/null &
echo $! > "$ROOT/daemon.pid"
"#,
                root = d.join("root").display(),
                cfg = d.join("config.yaml").display()
            ),
        )
        .unwrap();
        let served = d.join("served");
        std::fs::create_dir_all(&served).unwrap();
        let url = serve_dir(served.clone());
        let b = Box_ {
            dir,
            served,
            url,
            port,
        };
        assert!(Command::new("sh")
            .arg(b.path("restart.sh"))
            .status()
            .unwrap()
            .success());
        b
    }

    fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    fn current(&self) -> String {
        std::fs::read_link(self.path("root/current"))
            .unwrap()
            .to_string_lossy()
            .into_owned()
    }

    /// Publishes `bytes` as `name` with a signature made by `key` (default: the box's key).
    fn publish(&self, name: &str, bytes: &[u8], signed_bytes: Option<&[u8]>) -> String {
        let file = self.served.join(name);
        std::fs::write(&file, bytes).unwrap();
        let to_sign = self.path("to-sign");
        std::fs::write(&to_sign, signed_bytes.unwrap_or(bytes)).unwrap();
        let out = run_cli(&[
            "sign-artifact",
            to_sign.to_str().unwrap(),
            self.path("release.key").to_str().unwrap(),
        ]);
        assert!(out.status.success());
        std::fs::write(self.served.join(format!("{name}.sig")), &out.stdout).unwrap();
        sha256(&file)
    }

    fn update(&self, name: &str, sha: &str, timeout: u32) -> Output {
        let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/ota-update.sh");
        Command::new("bash")
            .arg(script)
            .args(["--artifact", &format!("{}/{name}", self.url)])
            .args(["--sha256", sha])
            .args(["--sig", &format!("{}/{name}.sig", self.url)])
            .args(["--root", self.path("root").to_str().unwrap()])
            .args(["--pubkey", self.path("release.pub").to_str().unwrap()])
            .args(["--config", self.path("config.yaml").to_str().unwrap()])
            .args([
                "--restart",
                &format!("sh {}", self.path("restart.sh").display()),
            ])
            .args([
                "--status-url",
                &format!("http://127.0.0.1:{}/api/status", self.port),
            ])
            .args(["--health-timeout", &timeout.to_string()])
            .output()
            .unwrap()
    }
}

impl Drop for Box_ {
    fn drop(&mut self) {
        if let Ok(pid) = std::fs::read_to_string(self.path("root/daemon.pid")) {
            let _ = Command::new("kill").arg(pid.trim()).status();
        }
    }
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

fn status(port: u16) -> serde_json::Value {
    let body = ureq::get(&format!("http://127.0.0.1:{port}/api/status"))
        .call()
        .unwrap()
        .body_mut()
        .read_to_string()
        .unwrap();
    serde_json::from_str(&body).unwrap()
}

#[test]
fn a_signed_update_is_installed_beside_the_old_one_and_reports_the_previous_version() {
    let b = Box_::new();
    let mut new = std::fs::read(BIN).unwrap();
    new.extend_from_slice(b"\nota-test build 2\n");
    let sha = b.publish("opex-connector-new", &new, None);
    let out = b.update("opex-connector-new", &sha, 60);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(b.current(), format!("releases/0.1.0-{}", &sha[..8]));
    assert!(
        b.path("root/releases/0.1.0-old/opex-connector").exists(),
        "old kept"
    );
    let s = status(b.port);
    assert_eq!(s["connector"]["previous_version"], "0.1.0-old", "{s}");
    assert_eq!(s["connector"]["healthy"], true);
    let version = Command::new(b.path("root/current/opex-connector"))
        .arg("--version")
        .output()
        .unwrap();
    assert!(String::from_utf8_lossy(&version.stdout).contains("previous 0.1.0-old"));
}

#[test]
fn a_corrupt_artifact_is_refused_and_nothing_changes() {
    let b = Box_::new();
    let mut new = std::fs::read(BIN).unwrap();
    let sha = b.publish("opex-connector-new", &new, None);
    // The file served is altered after its hash and signature were made.
    new.extend_from_slice(b"tampered");
    std::fs::write(b.served.join("opex-connector-new"), &new).unwrap();
    let out = b.update("opex-connector-new", &sha, 10);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(stderr(&out).contains("sha256 mismatch"), "{}", stderr(&out));
    assert_eq!(b.current(), "releases/0.1.0-old");
}

#[test]
fn an_artifact_with_a_bad_signature_is_refused_and_nothing_changes() {
    let b = Box_::new();
    let mut new = std::fs::read(BIN).unwrap();
    new.extend_from_slice(b"\nbuild 3\n");
    // Signed over other bytes: the hash matches the file, the signature does not.
    let sha = b.publish("opex-connector-new", &new, Some(b"something else"));
    let out = b.update("opex-connector-new", &sha, 10);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(stderr(&out).contains("signature"), "{}", stderr(&out));
    assert_eq!(b.current(), "releases/0.1.0-old");
    assert!(!b.path("root/previous").exists());
}

#[test]
fn a_new_version_that_never_becomes_healthy_is_rolled_back_by_itself() {
    let b = Box_::new();
    // Runs, knows its version, accepts the config, but the service never comes up.
    let broken = b"#!/bin/sh\ncase \"$1\" in\n  --version) echo 'opex-connector 0.2.0' ;;\n  validate) echo ok ;;\n  *) exit 1 ;;\nesac\n";
    let sha = b.publish("opex-connector-broken", broken, None);
    let out = b.update("opex-connector-broken", &sha, 3);
    assert_eq!(out.status.code(), Some(3), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("rolled back to 0.1.0-old"),
        "{}",
        stderr(&out)
    );
    assert_eq!(b.current(), "releases/0.1.0-old");
    assert!(!b.path("root/previous").exists(), "previous restored");
    assert_eq!(status(b.port)["connector"]["healthy"], true);
}
