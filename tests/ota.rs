//! `scripts/ota-update.sh` against a temp install root, artifacts and their signed manifests
//! served over loopback HTTP, and a real daemon restarted by the script: a good update; the
//! refusals (downgrade, another board's target, an expired manifest, an artifact that is not
//! the manifest's, a manifest changed after signing, a binary that is not the version its
//! manifest says); and updates that fail the health check and roll back by themselves.
//!
//! Every real binary here is the one under test, so all report the same version. To have an
//! older or newer version installed or offered, a release is a wrapper that answers
//! `--version` with another version and runs the binary under test for everything else (the
//! script reads the running version from `current/opex-connector --version`). Wrappers also
//! keep the tests from copying the large debug binary around: only the good update installs a
//! real copy, since `previous_version` is found from the running binary's own path.

mod common;

use std::io::{BufRead, BufReader, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::thread;

use common::{free_port, run_cli, BIN};

/// The version of the binary under test.
const VERSION: &str = env!("CARGO_PKG_VERSION");
/// The board every test box is: `boards/x86_64-ipc.yaml`.
const BOARD: &str = "boards/x86_64-ipc.yaml";
const BOARD_TARGET: &str = "x86_64-unknown-linux-musl";

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
    /// The release folder of the installed version, under `root/releases/`.
    old: String,
}

/// Where a manifest says the artifact may go and until when.
struct Signed<'a> {
    version: &'a str,
    target: &'a str,
    /// `--valid-for D` or `--not-after T` of `sign-manifest`.
    validity: [&'a str; 2],
}

impl Signed<'_> {
    /// For this board, valid for a day.
    fn version(version: &str) -> Signed<'_> {
        Signed {
            version,
            target: BOARD_TARGET,
            validity: ["--valid-for", "1d"],
        }
    }
}

/// A shell script that answers `--version` with `version` and runs the real binary otherwise.
fn reporting(version: &str) -> Vec<u8> {
    format!(
        "#!/bin/sh\nif [ \"$1\" = --version ]; then echo 'opex-connector {version}'; exit 0; fi\nexec {BIN} \"$@\"\n"
    )
    .into_bytes()
}

/// The binary under test with some bytes added: another file, the same version.
fn rebuilt() -> Vec<u8> {
    let mut bytes = std::fs::read(BIN).unwrap();
    bytes.extend_from_slice(b"\nota-test build 2\n");
    bytes
}

impl Box_ {
    /// An install root whose current release (`<version>-old`) runs the binary under test and
    /// reports `version`, with a key pair, a config, and the daemon running from `current`.
    fn running(version: &str) -> Box_ {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        let old = format!("{version}-old");
        let old_dir = d.join("root/releases").join(&old);
        std::fs::create_dir_all(&old_dir).unwrap();
        let bin = old_dir.join("opex-connector");
        std::fs::write(&bin, reporting(version)).unwrap();
        std::fs::set_permissions(&bin, std::os::unix::fs::PermissionsExt::from_mode(0o755))
            .unwrap();
        std::os::unix::fs::symlink(format!("releases/{old}"), d.join("root/current")).unwrap();
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
            old,
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

    /// Asserts that the box still runs its old release and kept no trace of the refused one.
    fn assert_unchanged(&self) {
        assert_eq!(self.current(), format!("releases/{}", self.old));
        assert!(!self.path("root/previous").exists());
        let releases: Vec<_> = std::fs::read_dir(self.path("root/releases"))
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(releases, [self.old.as_str()], "nothing installed");
    }

    /// Serves `bytes` as `name` with `name.manifest.json` and its signature, signed with the
    /// box's key; returns the artifact's SHA-256.
    fn publish(&self, name: &str, bytes: &[u8], signed: Signed) -> String {
        let file = self.served.join(name);
        std::fs::write(&file, bytes).unwrap();
        let manifest = self.served.join(format!("{name}.manifest.json"));
        let out = run_cli(&[
            "sign-manifest",
            file.to_str().unwrap(),
            self.path("release.key").to_str().unwrap(),
            manifest.to_str().unwrap(),
            "--version",
            signed.version,
            "--target",
            signed.target,
            signed.validity[0],
            signed.validity[1],
        ]);
        assert!(out.status.success(), "{}", stderr(&out));
        sha256(&file)
    }

    /// Runs the script on the artifact `name` and its manifest, with `extra` arguments.
    fn update(&self, name: &str, timeout: u32, extra: &[&str]) -> Output {
        let repo = Path::new(env!("CARGO_MANIFEST_DIR"));
        Command::new("bash")
            .arg(repo.join("scripts/ota-update.sh"))
            .args(["--artifact", &format!("{}/{name}", self.url)])
            .args(["--manifest", &format!("{}/{name}.manifest.json", self.url)])
            .args(["--root", self.path("root").to_str().unwrap()])
            .args(["--pubkey", self.path("release.pub").to_str().unwrap()])
            .args(["--board", repo.join(BOARD).to_str().unwrap()])
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
            .args(extra)
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

/// Asserts that the script refused (exit 2) and said `why`.
fn assert_refused(out: &Output, why: &str) {
    assert_eq!(out.status.code(), Some(2), "{}", stderr(out));
    assert!(stderr(out).contains(why), "{}", stderr(out));
}

#[test]
fn a_signed_update_is_installed_beside_the_old_one_and_reports_the_previous_version() {
    let b = Box_::running("0.0.9");
    let sha = b.publish("opex-connector-new", &rebuilt(), Signed::version(VERSION));
    let out = b.update("opex-connector-new", 60, &[]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(b.current(), format!("releases/{VERSION}-{}", &sha[..8]));
    assert!(
        b.path("root/releases/0.0.9-old/opex-connector").exists(),
        "old kept"
    );
    let s = status(b.port);
    assert_eq!(s["connector"]["previous_version"], "0.0.9-old", "{s}");
    assert_eq!(s["connector"]["healthy"], true);
    assert_eq!(s["connector"]["version"], VERSION);
    let version = Command::new(b.path("root/current/opex-connector"))
        .arg("--version")
        .output()
        .unwrap();
    assert!(String::from_utf8_lossy(&version.stdout).contains("previous 0.0.9-old"));
}

#[test]
fn regression_an_older_signed_build_is_refused_as_a_downgrade_and_nothing_changes() {
    let b = Box_::running("0.2.0");
    // Correctly signed, for this board, not expired: only older than what runs.
    b.publish(
        "opex-connector-old",
        &reporting(VERSION),
        Signed::version(VERSION),
    );
    let out = b.update("opex-connector-old", 10, &[]);
    assert_refused(
        &out,
        &format!("version {VERSION} is not newer than the running 0.2.0"),
    );
    b.assert_unchanged();
}

#[test]
fn allow_downgrade_installs_an_older_signed_build() {
    let b = Box_::running("0.2.0");
    let sha = b.publish(
        "opex-connector-old",
        &reporting(VERSION),
        Signed::version(VERSION),
    );
    let out = b.update("opex-connector-old", 60, &["--allow-downgrade"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(b.current(), format!("releases/{VERSION}-{}", &sha[..8]));
    assert_eq!(status(b.port)["connector"]["version"], VERSION);
}

#[test]
fn a_build_of_the_running_version_is_refused_as_not_newer() {
    let b = Box_::running(VERSION);
    // Another file than the installed one, of the same version.
    let mut other = reporting(VERSION);
    other.extend_from_slice(b"# another build\n");
    b.publish("opex-connector-same", &other, Signed::version(VERSION));
    let out = b.update("opex-connector-same", 10, &[]);
    assert_refused(&out, "is not newer than the running");
    b.assert_unchanged();
}

#[test]
fn regression_a_build_for_another_boards_target_is_refused() {
    let b = Box_::running("0.0.9");
    let signed = Signed {
        target: "armv7-unknown-linux-gnueabihf",
        ..Signed::version(VERSION)
    };
    b.publish("opex-connector-pi3", &reporting(VERSION), signed);
    let out = b.update("opex-connector-pi3", 10, &[]);
    assert_refused(
        &out,
        &format!("built for armv7-unknown-linux-gnueabihf, but this board is {BOARD_TARGET}"),
    );
    b.assert_unchanged();
}

#[test]
fn regression_an_expired_manifest_is_refused() {
    let b = Box_::running("0.0.9");
    let signed = Signed {
        validity: ["--not-after", "2001-01-01T00:00:00Z"],
        ..Signed::version(VERSION)
    };
    b.publish("opex-connector-stale", &reporting(VERSION), signed);
    let out = b.update("opex-connector-stale", 10, &[]);
    assert_refused(&out, "the manifest expired at 2001-01-01T00:00:00Z");
    b.assert_unchanged();
}

#[test]
fn regression_an_artifact_whose_sha256_is_not_its_manifests_is_refused_and_nothing_changes() {
    let b = Box_::running("0.0.9");
    let mut new = reporting(VERSION);
    b.publish("opex-connector-new", &new, Signed::version(VERSION));
    // The file served is altered after its manifest was signed.
    new.extend_from_slice(b"tampered");
    std::fs::write(b.served.join("opex-connector-new"), &new).unwrap();
    let out = b.update("opex-connector-new", 10, &[]);
    assert_refused(&out, "sha256 mismatch");
    b.assert_unchanged();
}

#[test]
fn a_manifest_changed_after_signing_is_refused_and_nothing_changes() {
    let b = Box_::running("0.2.0");
    b.publish(
        "opex-connector-new",
        &reporting(VERSION),
        Signed::version(VERSION),
    );
    // Still canonical, only the version raised past the running one.
    let manifest = b.served.join("opex-connector-new.manifest.json");
    let text = std::fs::read_to_string(&manifest).unwrap();
    let raised = text.replace(
        &format!("\"version\":\"{VERSION}\""),
        "\"version\":\"9.0.0\"",
    );
    assert_ne!(text, raised);
    std::fs::write(&manifest, raised).unwrap();
    let out = b.update("opex-connector-new", 10, &[]);
    assert_refused(&out, "signature does not match");
    b.assert_unchanged();
}

#[test]
fn a_binary_that_is_not_the_version_its_manifest_says_is_refused() {
    let b = Box_::running(VERSION);
    b.publish(
        "opex-connector-odd",
        &reporting("0.3.0"),
        Signed::version("0.2.0"),
    );
    let out = b.update("opex-connector-odd", 10, &[]);
    assert_refused(
        &out,
        "the new binary reports version 0.3.0, its manifest says 0.2.0",
    );
    b.assert_unchanged();
}

#[test]
fn a_new_version_that_never_becomes_healthy_is_rolled_back_by_itself() {
    let b = Box_::running(VERSION);
    // Runs, knows its version, accepts the config, but the service never comes up.
    let broken = b"#!/bin/sh\ncase \"$1\" in\n  --version) echo 'opex-connector 0.2.0' ;;\n  validate) echo ok ;;\n  *) exit 1 ;;\nesac\n";
    b.publish("opex-connector-broken", broken, Signed::version("0.2.0"));
    let out = b.update("opex-connector-broken", 3, &[]);
    assert_eq!(out.status.code(), Some(3), "{}", stderr(&out));
    assert!(
        stderr(&out).contains(&format!("rolled back to {VERSION}-old")),
        "{}",
        stderr(&out)
    );
    assert_eq!(b.current(), format!("releases/{VERSION}-old"));
    assert!(!b.path("root/previous").exists(), "previous restored");
    assert_eq!(status(b.port)["connector"]["healthy"], true);
}

#[test]
fn regression_a_service_that_answers_as_another_version_after_the_restart_fails_the_health_check() {
    let b = Box_::running(VERSION);
    // Says 0.2.0 and passes every check before the switch, but the service it runs is the
    // old binary: healthy, and the wrong version.
    b.publish(
        "opex-connector-new",
        &reporting("0.2.0"),
        Signed::version("0.2.0"),
    );
    let out = b.update("opex-connector-new", 3, &[]);
    assert_eq!(out.status.code(), Some(3), "{}", stderr(&out));
    assert!(
        stderr(&out).contains(&format!(
            "connector.version is \"{VERSION}\", expected \"0.2.0\""
        )),
        "{}",
        stderr(&out)
    );
    assert_eq!(b.current(), format!("releases/{VERSION}-old"));
    assert_eq!(status(b.port)["connector"]["version"], VERSION);
}

#[test]
fn regression_healthy_true_elsewhere_in_the_status_does_not_pass_an_unhealthy_connector() {
    let b = Box_::running("0.0.9");
    b.publish(
        "opex-connector-new",
        &reporting(VERSION),
        Signed::version(VERSION),
    );
    // What a connector that refuses every record while its uplink works answers.
    std::fs::write(
        b.served.join("status.json"),
        format!(
            r#"{{"connector":{{"version":"{VERSION}","healthy":false}},"uplink":{{"enabled":true,"healthy":true}}}}"#
        ),
    )
    .unwrap();
    let status_url = format!("{}/status.json", b.url);
    let out = b.update("opex-connector-new", 2, &["--status-url", &status_url]);
    // Neither the new version nor the old one ever looks healthy through this document.
    assert_eq!(out.status.code(), Some(4), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("connector.healthy is false"),
        "{}",
        stderr(&out)
    );
    assert_eq!(b.current(), "releases/0.0.9-old");
}
