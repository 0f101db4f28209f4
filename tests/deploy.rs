//! Field deployment: `scripts/install.sh` lays out a board's install (binary, OTA layout,
//! site config with the board's overlay, the unit with the board's devices); the systemd unit
//! passes `systemd-analyze verify` and keeps its exposure rating; and the daemon runs under
//! the unit's restrictions, started by a real systemd.
//!
//! That last test runs systemd as PID 1 of private namespaces (pid, mount, network, UTS,
//! IPC, cgroup) below a cgroup of the test's own, with only our unit in view, so nothing of
//! the host boots and the host's network, files and processes are out of reach. It needs
//! root, `unshare` and systemd installed (not running); elsewhere it says why it skips.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::Duration;

use serde_json::Value;

use common::{poll_until, run_cli, wait_until, BIN};

fn repo() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// The board profiles of `boards/`, by name.
fn boards() -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(repo().join("boards"))
        .unwrap()
        .filter_map(|e| {
            let name = e.unwrap().file_name().to_string_lossy().into_owned();
            name.strip_suffix(".yaml").map(str::to_string)
        })
        .collect();
    names.sort();
    names
}

/// Runs `install.sh` for `board` into a temp dir (units in `units/`), with `how`
/// (`--no-start`: the unit installed but not started; `--no-systemd`: no unit).
fn install(board: &str, how: &str) -> (tempfile::TempDir, Output) {
    let d = tempfile::tempdir().unwrap();
    let out = Command::new("bash")
        .arg(repo().join("scripts/install.sh"))
        .args(["--board", board, "--binary", BIN, "--no-user", how])
        .args([
            "--config",
            repo()
                .join("config/examples/business.yaml")
                .to_str()
                .unwrap(),
        ])
        .args(["--root", d.path().join("root").to_str().unwrap()])
        .args(["--etc", d.path().join("etc").to_str().unwrap()])
        .args(["--bin-dir", d.path().join("bin").to_str().unwrap()])
        .args(["--unit-dir", d.path().join("units").to_str().unwrap()])
        .args(["--share", d.path().join("share").to_str().unwrap()])
        .output()
        .unwrap();
    (d, out)
}

/// The unit and `board`'s device drop-in as installed, in one file (a drop-in's section may
/// repeat the unit's), with the binary under test in place of the installed path.
fn unit_for(board: &str, dir: &Path) -> PathBuf {
    let (d, out) = install(board, "--no-start");
    assert!(out.status.success(), "{}", stderr(&out));
    let units = d.path().join("units");
    let unit = std::fs::read_to_string(units.join("opex-connector.service")).unwrap();
    let devices =
        std::fs::read_to_string(units.join("opex-connector.service.d/devices.conf")).unwrap();
    let path = dir.join(format!("opex-connector-{board}.service"));
    std::fs::write(
        &path,
        format!("{unit}\n{devices}").replace("/usr/local/bin/opex-connector", BIN),
    )
    .unwrap();
    path
}

fn systemd_analyze() -> bool {
    let there = Command::new("systemd-analyze")
        .arg("--version")
        .output()
        .is_ok();
    if !there {
        eprintln!("SKIPPED: systemd-analyze is not installed on this machine (scripts/test.sh installs it)");
    }
    there
}

#[test]
fn install_lays_out_a_pi_3_with_its_smaller_queue_and_a_valid_config() {
    let (d, out) = install("rpi3", "--no-systemd");
    assert!(out.status.success(), "{}", stderr(&out));
    let current = std::fs::read_link(d.path().join("root/current")).unwrap();
    assert!(current.to_string_lossy().starts_with("releases/0.1.0-"));
    let linked = d.path().join("bin/opex-connector");
    let version = Command::new(&linked).arg("--version").output().unwrap();
    assert!(String::from_utf8_lossy(&version.stdout).starts_with("opex-connector 0.1.0"));
    let config = d.path().join("etc/config.yaml");
    let text = std::fs::read_to_string(&config).unwrap();
    let value: Value = serde_saphyr::from_str(&text).unwrap();
    assert_eq!(
        value["connector"]["push_queue"]["max_quota_mb"], 384,
        "{text}"
    );
    assert_eq!(
        value["connector"]["push_queue"]["on_full"], "block",
        "{text}"
    );
    assert!(run_cli(&["validate", config.to_str().unwrap()])
        .status
        .success());
    // The board profile, whose target scripts/ota-update.sh checks updates against.
    let board = std::fs::read_to_string(d.path().join("etc/board.yaml")).unwrap();
    assert!(board.contains("target: armv7-unknown-linux-gnueabihf"));
    // The man page the unit's Documentation= names, and the completions of the binary.
    let share = d.path().join("share");
    let man = std::fs::read_to_string(share.join("man/man1/opex-connector.1")).unwrap();
    assert!(
        man.starts_with(".TH OPEX\\-CONNECTOR 1"),
        "{}",
        &man[..man.len().min(200)]
    );
    for (file, says) in [
        (
            "bash-completion/completions/opex-connector",
            "-F _opex_connector opex-connector",
        ),
        (
            "zsh/site-functions/_opex-connector",
            "#compdef opex-connector",
        ),
        (
            "fish/vendor_completions.d/opex-connector.fish",
            "complete -c opex-connector",
        ),
    ] {
        let text = std::fs::read_to_string(share.join(file)).unwrap();
        assert!(text.contains(says), "{file}: {text}");
    }
}

#[test]
fn install_refuses_an_unknown_board_and_names_the_known_ones() {
    let out = Command::new("bash")
        .arg(repo().join("scripts/install.sh"))
        .args([
            "--board",
            "pi-zero",
            "--binary",
            BIN,
            "--no-systemd",
            "--no-user",
        ])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = stderr(&out);
    assert!(err.contains("rpi4") && err.contains("x86_64-ipc"), "{err}");
}

/// The character-device major numbers a serial port of this name can have (Linux's
/// `Documentation/admin-guide/devices.txt`); each must be allowed.
fn majors_of(port: &str) -> &'static [u32] {
    let name = port.trim_start_matches("/dev/");
    match name {
        // A Pi's serial0 is the mini UART or, with disable-bt, the PL011.
        "serial0" => &[4, 204],
        _ if name.starts_with("ttyS") => &[4],
        _ if name.starts_with("ttyAMA") => &[204],
        _ if name.starts_with("ttyUSB") => &[188],
        _ if name.starts_with("ttyACM") => &[166],
        _ => panic!("no major number known for {port}: add it here"),
    }
}

#[test]
fn regression_each_board_allows_its_serial_ports_by_major_number_so_an_adapter_plugged_in_later_opens(
) {
    for board in boards() {
        let (d, out) = install(&board, "--no-start");
        assert!(out.status.success(), "{board}: {}", stderr(&out));
        let dropin =
            std::fs::read_to_string(d.path().join("units/opex-connector.service.d/devices.conf"))
                .unwrap();
        let allowed: Vec<&str> = dropin
            .lines()
            .filter_map(|l| l.strip_prefix("DeviceAllow="))
            .collect();
        // By name (`char-ttyUSB`) systemd looks the class up in /proc/devices when the service
        // starts, which has no ttyUSB line until a USB serial driver is loaded: the adapter
        // plugged in later would be refused.
        for entry in &allowed {
            let major = entry
                .strip_prefix("char-")
                .and_then(|e| e.strip_suffix(" rw"))
                .and_then(|m| m.parse::<u32>().ok());
            assert!(major.is_some(), "{board}: {entry} is not char-<major> rw");
        }
        let profile: Value = serde_saphyr::from_str(
            &std::fs::read_to_string(repo().join(format!("boards/{board}.yaml"))).unwrap(),
        )
        .unwrap();
        let ports = profile["serial_ports"].as_array().unwrap();
        assert!(!ports.is_empty(), "{board}");
        for port in ports {
            for major in majors_of(port.as_str().unwrap()) {
                assert!(
                    allowed.contains(&format!("char-{major} rw").as_str()),
                    "{board}: {port} (major {major}) is not allowed by\n{dropin}"
                );
            }
        }
    }
}

#[test]
fn the_systemd_unit_with_each_boards_devices_passes_systemd_analyze_verify() {
    if !systemd_analyze() {
        return;
    }
    let d = tempfile::tempdir().unwrap();
    for board in boards() {
        let path = unit_for(&board, d.path());
        let out = Command::new("systemd-analyze")
            .arg("verify")
            .arg(&path)
            .output()
            .unwrap();
        assert!(
            out.status.success() && out.stderr.is_empty(),
            "{board}: {}",
            stderr(&out)
        );
    }
}

/// The exposure `systemd-analyze security` gave the unit (systemd 252), as the book reports it
/// (`docs/src/deployment/systemd.md`); it was 5.1 before the unit's second round of hardening.
const EXPOSURE: f64 = 1.7;

#[test]
fn the_units_exposure_is_at_most_the_figure_the_book_reports() {
    if !systemd_analyze() {
        return;
    }
    let page = include_str!("../docs/src/deployment/systemd.md");
    assert!(
        page.contains(&format!("exposure level **{EXPOSURE}")),
        "docs/src/deployment/systemd.md does not report {EXPOSURE}"
    );
    let d = tempfile::tempdir().unwrap();
    for board in boards() {
        let path = unit_for(&board, d.path());
        let out = Command::new("systemd-analyze")
            .args(["security", "--offline=yes", "--no-pager"])
            .arg(&path)
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout);
        let score: f64 = text
            .lines()
            .find_map(|l| l.split("Overall exposure level for ").nth(1))
            .and_then(|l| l.split(": ").nth(1))
            .and_then(|l| l.split_whitespace().next())
            .and_then(|s| s.parse().ok())
            .unwrap_or_else(|| panic!("{board}: no exposure in\n{text}{}", stderr(&out)));
        eprintln!("{board}: exposure {score}");
        assert!(score <= EXPOSURE, "{board}: exposure {score}\n{text}");
    }
}

/// Runs systemd as PID 1 of private namespaces. `outer DIR NAME`: moves itself into a new
/// cgroup NAME below its own in every hierarchy, then starts `inner` in new namespaces, whose
/// cgroup root is that cgroup. `inner DIR BIN`: mounts what the namespaces need (cgroup file
/// systems showing the new root; tmpfs over /run, /tmp, /var/tmp, /var/lib, and over the unit
/// folders, which then hold only DIR/units), then becomes systemd.
const SANDBOX: &str = r#"#!/bin/bash
set -euo pipefail
mode=$1 dir=$2
# The controllers (or name=) of a cgroup v1 mount, from its mount options.
controllers() {
    local o out=()
    for o in ${1//,/ }; do
        if [[ $o == name=* ]] || awk -v c="$o" '$1 == c { f = 1 } END { exit !f }' /proc/cgroups; then
            out+=("$o")
        fi
    done
    local IFS=,
    echo "${out[*]}"
}
if [ "$mode" = outer ]; then
    name=$3
    # Exit 3: this machine cannot host it (the test skips); anything else is a failure.
    if ! err=$(unshare --cgroup --pid --fork --mount --net --uts --ipc true 2>&1); then
        echo "cannot create namespaces: $err" >&2
        exit 3
    fi
    while read -r _ mnt fstype opts _; do
        case "$fstype" in
            cgroup2) path=$(awk -F: '$1 == "0" && $2 == "" { print $3 }' /proc/self/cgroup) ;;
            cgroup)
                c=$(controllers "$opts")
                path=$(awk -F: -v c="$c" '$2 == c { print $3 }' /proc/self/cgroup)
                ;;
            *) continue ;;
        esac
        [ -n "$path" ] || continue
        sub="${mnt}${path%/}/$name"
        mkdir -p "$sub" || { echo "cannot create the cgroup $sub" >&2; exit 3; }
        if [ -f "$sub/cpuset.cpus" ]; then
            cat "$(dirname "$sub")/cpuset.cpus" >"$sub/cpuset.cpus"
            cat "$(dirname "$sub")/cpuset.mems" >"$sub/cpuset.mems"
        fi
        echo $$ >"$sub/cgroup.procs" || { echo "cannot move into the cgroup $sub" >&2; exit 3; }
    done </proc/mounts
    exec unshare --cgroup --pid --fork --mount --net --uts --ipc --propagation private \
        --mount-proc bash "$0" inner "$dir" "$4"
fi
bin=$3
mounts=$(awk '$3 == "cgroup" || $3 == "cgroup2" { print $2, $3, $4 }' /proc/mounts)
if [ "$(awk '$2 == "/sys/fs/cgroup" { t = $3 } END { print t }' /proc/mounts)" = cgroup2 ]; then
    mount -t cgroup2 cgroup2 /sys/fs/cgroup
else
    mount -t tmpfs -o mode=755 cgroup_root /sys/fs/cgroup
    while read -r mnt fstype opts; do
        mkdir -p "$mnt"
        if [ "$fstype" = cgroup2 ]; then
            mount -t cgroup2 cgroup2 "$mnt"
        else
            c=$(controllers "$opts")
            [[ $c == name=* ]] && c="none,$c"
            mount -t cgroup -o "$c" cgroup "$mnt"
        fi
    done <<<"$mounts"
fi
mount -t tmpfs -o mode=755 run /run
mkdir /run/opex-test
cp "$dir/config.yaml" /run/opex-test/
touch /run/opex-test/opex-connector
mount --bind "$bin" /run/opex-test/opex-connector
for units in /etc/systemd/system /lib/systemd/system /usr/lib/systemd/system; do
    if [ -d "$units" ]; then mount -t tmpfs -o mode=755 units "$units"; fi
done
cp -r "$dir/units/." /etc/systemd/system/
mount -t tmpfs -o mode=755 varlib /var/lib
mount -t tmpfs -o mode=1777 tmp /tmp
mount -t tmpfs -o mode=1777 vartmp /var/tmp
# Nodes of device classes without a driver here: opening one fails with ENXIO when the
# unit's device policy lets it through, and with EPERM when it does not.
mknod -m 666 /run/opex-test/ttyUSB0 c 188 0
mknod -m 666 /run/opex-test/usb-device c 189 0
export container=opex-test
exec /lib/systemd/systemd --system --unit=opex-test.target --log-target=null --show-status=false
"#;

/// The test's overrides of the unit, beside the board's devices.
const TEST_DROP_IN: &str = "\
# Only this unit: no sysinit.target, so nothing of the host's boot runs.
[Unit]
DefaultDependencies=no
[Service]
User=nobody
Group=@GROUP@
# A system call outside the filter kills the daemon, so none can fail unseen.
SystemCallErrorNumber=kill
StandardOutput=append:/run/opex-test/daemon.log
StandardError=append:/run/opex-test/daemon.log
";

/// Every kind of device the pollers know, against the built-in simulator. The ports are fixed:
/// the namespace has its own network, where nothing else listens.
const SANDBOX_CONFIG: &str = r#"
connector:
  name: unit-test
  data_dir: /var/lib/opex-connector
  http:
    listen: 127.0.0.1:8080
  push_queue:
    enabled: true
    max_quota_mb: 16
  push:
    url: http://127.0.0.1:9/ingest
    token: s3cret-uplink
ingest:
  sources:
    - name: orders
      token: s3cret-t0ken-0123
simulator:
  modbus: 127.0.0.1:5020
  opcua: 127.0.0.1:4840
devices:
  - name: plant-1
    protocol: modbus_tcp
    host: 127.0.0.1
    port: 5020
    timeout_ms: 500
    groups:
      - {name: process, interval_ms: 200}
    points:
      - {name: oven_temp, group: process, register: 0, type: f32}
  - name: usb-meter
    protocol: modbus_rtu
    port: /run/opex-test/ttyUSB0
    baud: 19200
    unit: 3
    timeout_ms: 200
    points:
      - {name: energy, register: 0, type: u32}
  - name: not-allowed
    protocol: modbus_rtu
    port: /run/opex-test/usb-device
    baud: 19200
    unit: 4
    timeout_ms: 200
    points:
      - {name: energy, register: 0, type: u32}
  - name: boiler-1
    protocol: opcua
    endpoint: opc.tcp://127.0.0.1:4840/
    reconnect_initial_ms: 500
    groups:
      - {name: boiler, interval_ms: 500}
    nodes:
      - {node_id: "ns=2;s=Plant.Boiler.Temperature", name: temperature, group: boiler}
"#;

/// systemd as PID 1 of private namespaces; killed (and with it everything in them), and its
/// cgroups removed, when dropped.
struct Sandbox {
    child: Child,
    /// systemd's pid as this process sees it.
    systemd: u32,
    cgroup: String,
    /// The scripts, units and the sandbox's log; removed last.
    _dir: tempfile::TempDir,
}

impl Sandbox {
    /// Starts it, or says why this machine cannot host it; panics when it fails otherwise.
    fn start(board: &str) -> Result<Sandbox, String> {
        let id = Command::new("id")
            .arg("-u")
            .output()
            .map_err(|e| e.to_string())?;
        if String::from_utf8_lossy(&id.stdout).trim() != "0" {
            return Err("not root (systemd as PID 1 of namespaces needs it)".into());
        }
        for tool in [
            "/lib/systemd/systemd",
            "/usr/bin/unshare",
            "/usr/bin/nsenter",
        ] {
            if !Path::new(tool).exists() {
                return Err(format!(
                    "{tool} is not installed (scripts/test.sh installs systemd)"
                ));
            }
        }
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        let (installed, out) = install(board, "--no-start");
        assert!(out.status.success(), "{}", stderr(&out));
        let units = installed.path().join("units");
        let unit = std::fs::read_to_string(units.join("opex-connector.service"))
            .unwrap()
            .replace(
                "/usr/local/bin/opex-connector",
                "/run/opex-test/opex-connector",
            )
            .replace(
                "/etc/opex-connector/config.yaml",
                "/run/opex-test/config.yaml",
            );
        let group = Command::new("id").args(["-gn", "nobody"]).output().unwrap();
        let group = String::from_utf8_lossy(&group.stdout).trim().to_string();
        std::fs::create_dir_all(d.join("units/opex-connector.service.d")).unwrap();
        std::fs::write(d.join("units/opex-connector.service"), unit).unwrap();
        std::fs::copy(
            units.join("opex-connector.service.d/devices.conf"),
            d.join("units/opex-connector.service.d/devices.conf"),
        )
        .unwrap();
        std::fs::write(
            d.join("units/opex-connector.service.d/zz-test.conf"),
            TEST_DROP_IN.replace("@GROUP@", &group),
        )
        .unwrap();
        std::fs::write(
            d.join("units/opex-test.target"),
            "[Unit]\nDescription=opex-connector under its unit\nWants=opex-connector.service\n",
        )
        .unwrap();
        std::fs::write(d.join("config.yaml"), SANDBOX_CONFIG).unwrap();
        std::fs::write(d.join("sandbox.sh"), SANDBOX).unwrap();
        let cgroup = format!("opex-unit-test-{}", std::process::id());
        let mut child = Command::new("bash")
            .arg(d.join("sandbox.sh"))
            .args(["outer", d.to_str().unwrap(), &cgroup, BIN])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(d.join("sandbox.log")).unwrap())
            .spawn()
            .unwrap();
        let pid = child.id();
        let mut systemd = None;
        // The child of `unshare` (the bash that becomes it) once it is systemd: not the
        // namespace check the script runs first.
        let started = poll_until(Duration::from_secs(10), || {
            systemd = std::fs::read_to_string(format!("/proc/{pid}/task/{pid}/children"))
                .ok()
                .and_then(|c| {
                    c.split_whitespace()
                        .find(|c| {
                            std::fs::read_to_string(format!("/proc/{c}/comm"))
                                .is_ok_and(|comm| comm.trim() == "systemd")
                        })?
                        .parse()
                        .ok()
                });
            systemd.is_some() || child.try_wait().ok().flatten().is_some()
        });
        let log_path = d.join("sandbox.log");
        let log = || std::fs::read_to_string(&log_path).unwrap_or_default();
        let Some(systemd) = systemd.filter(|_| started) else {
            let _ = child.kill();
            let exit = child.wait().ok().and_then(|s| s.code());
            remove_cgroups(&cgroup);
            if exit == Some(3) {
                return Err(log());
            }
            panic!("the sandbox did not start (exit {exit:?}): {}", log());
        };
        let sandbox = Sandbox {
            child,
            systemd,
            cgroup,
            _dir: dir,
        };
        // systemd answers once it runs as a manager.
        let up = poll_until(Duration::from_secs(30), || {
            sandbox
                .systemctl(&["show", "-p", "Version"])
                .status
                .success()
        });
        assert!(up, "systemd did not come up as PID 1: {}", log());
        Ok(sandbox)
    }

    /// Runs a command in all of systemd's namespaces.
    fn nsenter(&self, args: &[&str]) -> Output {
        Command::new("nsenter")
            .args([
                "-t",
                &self.systemd.to_string(),
                "-m",
                "-p",
                "-n",
                "-u",
                "-i",
            ])
            .args(args)
            .output()
            .unwrap()
    }

    fn systemctl(&self, args: &[&str]) -> Output {
        let mut all = vec!["systemctl", "--no-pager"];
        all.extend_from_slice(args);
        self.nsenter(&all)
    }

    /// One property of the service.
    fn property(&self, name: &str) -> String {
        let out = self.systemctl(&["show", "opex-connector", "-p", name, "--value"]);
        String::from_utf8_lossy(&out.stdout).trim().to_string()
    }

    /// A GET on the daemon, from inside the namespaces.
    fn get(&self, path: &str) -> Option<Value> {
        let out = self.nsenter(&["curl", "-sf", &format!("http://127.0.0.1:8080{path}")]);
        serde_json::from_slice(&out.stdout).ok()
    }

    /// Something of the namespaces' files, seen from here.
    fn file(&self, path: &str) -> PathBuf {
        PathBuf::from(format!("/proc/{}/root{path}", self.systemd))
    }

    /// What went on, for a failing assertion.
    fn diagnostics(&self) -> String {
        let status = self.systemctl(&["status", "opex-connector"]);
        format!(
            "{}\n{}\ndaemon log:\n{}",
            String::from_utf8_lossy(&status.stdout),
            stderr(&status),
            std::fs::read_to_string(self.file("/run/opex-test/daemon.log")).unwrap_or_default()
        )
    }

    /// The daemon's pid as this process sees it: the child of systemd whose pid in the
    /// namespace is the service's main pid.
    fn daemon_pid(&self) -> u32 {
        let main = self.property("MainPID");
        let children =
            std::fs::read_to_string(format!("/proc/{0}/task/{0}/children", self.systemd)).unwrap();
        children
            .split_whitespace()
            .find(|pid| {
                std::fs::read_to_string(format!("/proc/{pid}/status"))
                    .ok()
                    .and_then(|s| {
                        let line = s.lines().find(|l| l.starts_with("NSpid:"))?.to_string();
                        Some(line.split_whitespace().last()? == main)
                    })
                    .unwrap_or(false)
            })
            .and_then(|p| p.parse().ok())
            .unwrap_or_else(|| panic!("no process of main pid {main}\n{}", self.diagnostics()))
    }
}

impl Drop for Sandbox {
    fn drop(&mut self) {
        // The namespace's init: its end kills every process in it.
        let _ = Command::new("kill")
            .args(["-KILL", &self.systemd.to_string()])
            .status();
        let exited = poll_until(Duration::from_secs(10), || {
            self.child.try_wait().ok().flatten().is_some()
        });
        if !exited {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
        remove_cgroups(&self.cgroup);
    }
}

/// Kills what is left in the test's cgroups (`cgroup.kill` of cgroup v2) and removes them,
/// with those systemd made below them, in every hierarchy.
fn remove_cgroups(name: &str) {
    let _ = Command::new("sh")
        .arg("-c")
        .arg(format!(
            "for d in $(find /sys/fs/cgroup -type d -name {name} 2>/dev/null); do \
               [ -f \"$d/cgroup.kill\" ] && echo 1 >\"$d/cgroup.kill\"; \
             done; sleep 0.2; \
             for d in $(find /sys/fs/cgroup -type d -name {name} 2>/dev/null); do \
               find \"$d\" -depth -type d -exec rmdir {{}} + 2>/dev/null; \
             done; true"
        ))
        .status();
}

fn status_field(status: &str, key: &str) -> String {
    status
        .lines()
        .find_map(|l| l.strip_prefix(&format!("{key}:")))
        .unwrap_or_default()
        .trim()
        .to_string()
}

fn device<'a>(status: &'a Value, name: &str) -> &'a Value {
    status["devices"]
        .as_array()
        .and_then(|d| d.iter().find(|d| d["name"] == name))
        .unwrap_or(&Value::Null)
}

#[test]
fn the_daemon_runs_under_the_units_restrictions_with_systemd_as_pid_1_of_private_namespaces() {
    let sandbox = match Sandbox::start("rpi4") {
        Ok(s) => s,
        Err(why) => {
            eprintln!("SKIPPED: cannot start the unit under systemd here: {why}");
            return;
        }
    };
    let deadline = Duration::from_secs(60);
    // Type=notify: active only once the daemon sent READY=1.
    let active = poll_until(deadline, || sandbox.property("ActiveState") == "active");
    assert!(active, "{}", sandbox.diagnostics());
    let mut status = Value::Null;
    let polled = poll_until(deadline, || {
        status = sandbox.get("/api/status").unwrap_or(Value::Null);
        let plant = device(&status, "plant-1");
        let boiler = device(&status, "boiler-1");
        plant["polls_total"].as_u64().unwrap_or(0) >= 5
            && boiler["polls_total"].as_u64().unwrap_or(0) >= 2
            && !device(&status, "usb-meter")["last_error"].is_null()
            && !device(&status, "not-allowed")["last_error"].is_null()
    });
    assert!(polled, "{status}\n{}", sandbox.diagnostics());
    assert_eq!(status["connector"]["healthy"], true, "{status}");
    // Modbus TCP and OPC-UA poll; a ttyUSB node passes the device policy (there is no driver
    // behind it here) and a node of a class the board does not list does not.
    let usb = device(&status, "usb-meter")["last_error"].to_string();
    assert!(usb.contains("No such device or address"), "{usb}");
    let other = device(&status, "not-allowed")["last_error"].to_string();
    assert!(other.contains("Operation not permitted"), "{other}");
    let stored = sandbox.nsenter(&[
        "curl",
        "-sf",
        "-H",
        "Authorization: Bearer s3cret-t0ken-0123",
        "-d",
        r#"{"temp":21.5}"#,
        "http://127.0.0.1:8080/api/ingest/orders/sensor-1",
    ]);
    assert!(
        String::from_utf8_lossy(&stored.stdout).contains("\"stored\""),
        "{}",
        sandbox.diagnostics()
    );

    let pid = sandbox.daemon_pid();
    let proc_status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    assert_eq!(status_field(&proc_status, "NoNewPrivs"), "1");
    assert_eq!(status_field(&proc_status, "Seccomp"), "2", "a filter is on");
    assert_eq!(status_field(&proc_status, "Umask"), "0077");
    // CAP_SYS_NICE (bit 23) and nothing else.
    assert_eq!(status_field(&proc_status, "CapEff"), "0000000000800000");
    // The pollers got their nice -10 (setpriority, not realtime) through the filter.
    let nice_of = |comm: &str| {
        std::fs::read_dir(format!("/proc/{pid}/task"))
            .unwrap()
            .filter_map(|t| {
                let t = t.ok()?.path();
                let name = std::fs::read_to_string(t.join("comm")).ok()?;
                (name.trim() == comm).then(|| {
                    let stat = std::fs::read_to_string(t.join("stat")).ok()?;
                    // Field 19 is the nice value; the fields after `comm` (in parentheses) start at 3.
                    let after = stat.rsplit_once(") ")?.1;
                    after.split_whitespace().nth(16)?.parse::<i32>().ok()
                })?
            })
            .next()
    };
    assert_eq!(nice_of("pollers"), Some(-10), "{}", sandbox.diagnostics());
    let mounts = std::fs::read_to_string(format!("/proc/{pid}/mountinfo")).unwrap();
    let proc_mount = mounts
        .lines()
        .find(|l| l.split(' ').nth(4) == Some("/proc"))
        .unwrap_or_default();
    assert!(
        proc_mount.contains("hidepid=invisible") && proc_mount.contains("subset=pid"),
        "{proc_mount}"
    );
    use std::os::unix::fs::PermissionsExt;
    let queue = std::fs::metadata(sandbox.file("/var/lib/opex-connector/push_queue.db")).unwrap();
    assert_eq!(queue.permissions().mode() & 0o077, 0, "UMask=0077");

    // Nothing it did was outside the filter (which kills), and it stops cleanly.
    assert_eq!(
        sandbox.property("NRestarts"),
        "0",
        "{}",
        sandbox.diagnostics()
    );
    assert_eq!(sandbox.property("ActiveState"), "active");
    let stop = sandbox.systemctl(&["stop", "opex-connector"]);
    assert!(stop.status.success(), "{}", stderr(&stop));
    wait_until(deadline, "the service to stop", || {
        sandbox.property("ActiveState") == "inactive"
    });
    assert_eq!(
        sandbox.property("Result"),
        "success",
        "{}",
        sandbox.diagnostics()
    );
    assert_eq!(sandbox.property("ExecMainStatus"), "0");
}
