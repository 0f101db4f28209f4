//! Field deployment: `scripts/install.sh` lays out a board's install (binary, OTA layout,
//! site config with the board's overlay), and the systemd unit passes `systemd-analyze verify`.

mod common;

use std::path::Path;
use std::process::Command;

use common::{run_cli, BIN};

fn repo() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

#[test]
fn install_lays_out_a_pi_3_with_its_smaller_queue_and_a_valid_config() {
    let d = tempfile::tempdir().unwrap();
    let out = Command::new("bash")
        .arg(repo().join("scripts/install.sh"))
        .args([
            "--board",
            "rpi3",
            "--binary",
            BIN,
            "--no-systemd",
            "--no-user",
        ])
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
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let current = std::fs::read_link(d.path().join("root/current")).unwrap();
    assert!(current.to_string_lossy().starts_with("releases/0.1.0-"));
    let linked = d.path().join("bin/opex-connector");
    let version = Command::new(&linked).arg("--version").output().unwrap();
    assert!(String::from_utf8_lossy(&version.stdout).starts_with("opex-connector 0.1.0"));
    let config = d.path().join("etc/config.yaml");
    let text = std::fs::read_to_string(&config).unwrap();
    let value: serde_json::Value = serde_saphyr::from_str(&text).unwrap();
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
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("rpi4") && err.contains("x86_64-ipc"), "{err}");
}

#[test]
fn the_systemd_unit_passes_systemd_analyze_verify() {
    if Command::new("systemd-analyze")
        .arg("--version")
        .output()
        .is_err()
    {
        eprintln!("SKIPPED: systemd-analyze is not installed on this machine");
        return;
    }
    let d = tempfile::tempdir().unwrap();
    let unit = std::fs::read_to_string(repo().join("systemd/opex-connector.service")).unwrap();
    // The unit names the installed path; verify it against the binary under test.
    let unit = unit.replace("/usr/local/bin/opex-connector", BIN);
    let path = d.path().join("opex-connector.service");
    std::fs::write(&path, unit).unwrap();
    let out = Command::new("systemd-analyze")
        .arg("verify")
        .arg(&path)
        .output()
        .unwrap();
    assert!(
        out.status.success() && out.stderr.is_empty(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}
