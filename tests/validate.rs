//! `opex-connector validate FILE` and `--version`: exit codes, and every problem reported
//! on its own line with its path. Drives the real binary.

mod common;

use std::path::{Path, PathBuf};
use std::process::Output;

use common::*;
use tempfile::TempDir;

/// A valid config with every optional key set; cases below change one thing at a time.
const GOOD: &str = r#"connector:
  name: line-3
  data_dir: /var/lib/opex-connector
  http:
    listen: 127.0.0.1:8080
    max_body_kb: 1024
    admin_token: adm1n-t0ken-0123
  push_queue:
    enabled: true
    max_quota_mb: 2000
    on_full: block
  push:
    url: http://127.0.0.1:9000/ingest
    token: uplink-t0ken
    batch_rows: 500
    timeout_secs: 10
    retry_initial_ms: 500
    retry_max_ms: 60000
ingest:
  sources:
    - name: orders
      token: s3cret-t0ken-0123
    - name: returns
      token: returns-t0ken-0123
"#;

fn write(dir: &TempDir, name: &str, text: &str) -> PathBuf {
    let path = dir.path().join(name);
    std::fs::write(&path, text).expect("write config");
    path
}

fn validate(path: &Path) -> Output {
    run_cli(&["validate", path.to_str().expect("utf-8 path")])
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// `GOOD` with the line holding `old` replaced by `new` (which may span lines).
fn good_with(old: &str, new: &str) -> String {
    assert!(GOOD.contains(old), "{old:?} is not in GOOD");
    GOOD.replacen(old, new, 1)
}

/// Whether some stderr line reports `path` as `path: message`.
fn reports(stderr: &str, path: &str) -> bool {
    stderr.lines().any(|l| l.contains(&format!("{path}:")))
}

#[test]
fn validate_accepts_a_good_config_and_prints_file_ok() {
    let dir = TempDir::new().expect("temp dir");
    let path = write(&dir, "good.yaml", GOOD);
    let out = validate(&path);
    assert_eq!(out.status.code(), Some(0), "stderr:\n{}", text(&out.stderr));
    assert_eq!(
        text(&out.stdout).trim_end(),
        format!("{}: ok", path.display())
    );
}

/// The config example of the interface contract, verbatim except that its two `...`
/// placeholders are filled in.
const INTERFACE_EXAMPLE: &str = r#"connector:
  name: line-3                 # optional, default "opex-connector"
  data_dir: /var/lib/opex-connector
  http:
    listen: 127.0.0.1:8080
    max_body_kb: 1024
    max_connections: 256       # optional
    header_read_timeout_secs: 10  # optional
    admin_token: adm1n-t0ken   # optional; enables admin endpoints
  push_queue:
    enabled: true
    max_quota_mb: 2000         # integer MiB (1 = 1048576 bytes)
    on_full: evict_oldest      # evict_oldest (default) | block
  push:                        # optional: the uplink that drains the push queue
    url: http://127.0.0.1:9000/ingest
    token: uplink-t0ken        # optional bearer token
    batch_rows: 500
    timeout_secs: 10           # optional
    retry_initial_ms: 500      # optional, first backoff
    retry_max_ms: 60000        # optional, backoff cap
ingest:
  sources:
    - name: orders
      token: s3cret
"#;

#[test]
fn validate_refuses_the_interface_example_for_its_short_tokens_and_accepts_it_with_long_ones() {
    let dir = TempDir::new().expect("temp dir");
    let path = write(&dir, "example.yaml", INTERFACE_EXAMPLE);
    let out = validate(&path);
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "stderr:\n{stderr}");
    assert!(reports(&stderr, "connector.http.admin_token"), "{stderr}");
    assert!(reports(&stderr, "ingest.sources[0].token"), "{stderr}");
    let long = INTERFACE_EXAMPLE
        .replace("adm1n-t0ken ", "adm1n-t0ken-0123 ")
        .replace("token: s3cret\n", "token: s3cret-t0ken-0123\n");
    let path = write(&dir, "example-long.yaml", &long);
    let out = validate(&path);
    assert_eq!(out.status.code(), Some(0), "stderr:\n{}", text(&out.stderr));
}

#[test]
fn validate_accepts_a_minimal_config_without_optional_keys() {
    let dir = TempDir::new().expect("temp dir");
    let minimal = "connector:\n  data_dir: /tmp/opex\n  http:\n    listen: 127.0.0.1:0\n    max_body_kb: 64\n  push_queue:\n    enabled: true\n    max_quota_mb: 1\ningest:\n  sources:\n    - name: orders\n      token: s3cret-t0ken-0123\n";
    let path = write(&dir, "minimal.yaml", minimal);
    let out = validate(&path);
    assert_eq!(out.status.code(), Some(0), "stderr:\n{}", text(&out.stderr));
}

#[test]
fn validate_names_the_path_of_each_single_problem() {
    // (case, config text, paths of which at least one must be reported)
    let cases: Vec<(&str, String, Vec<&str>)> = vec![
        (
            "on_full drop",
            good_with("on_full: block", "on_full: drop"),
            vec!["connector.push_queue.on_full"],
        ),
        (
            "block with the queue disabled",
            good_with("enabled: true", "enabled: false"),
            vec![
                "connector.push_queue.enabled",
                "connector.push_queue.on_full",
            ],
        ),
        (
            "zero quota under block",
            good_with("max_quota_mb: 2000", "max_quota_mb: 0"),
            // The requirement belongs to `block`, so either key is a fair place to report it.
            vec![
                "connector.push_queue.max_quota_mb",
                "connector.push_queue.on_full",
            ],
        ),
        (
            "negative quota",
            good_with("max_quota_mb: 2000", "max_quota_mb: -5"),
            vec!["connector.push_queue.max_quota_mb"],
        ),
        (
            "unknown nested key",
            good_with(
                "    max_body_kb: 1024\n",
                "    max_body_kb: 1024\n    colour: blue\n",
            ),
            vec!["connector.http.colour"],
        ),
        (
            "unknown key in a list item",
            good_with(
                "      token: returns-t0ken-0123\n",
                "      token: returns-t0ken-0123\n      tokne: x\n",
            ),
            vec!["ingest.sources[1].tokne"],
        ),
        (
            "bad listen address",
            good_with("listen: 127.0.0.1:8080", "listen: not-an-address"),
            vec!["connector.http.listen"],
        ),
        (
            "ingest source without a name",
            good_with("    - name: returns\n      token", "    - token"),
            vec!["ingest.sources[1].name", "ingest.sources[1]"],
        ),
        (
            "duplicate source names",
            good_with("name: returns", "name: orders"),
            vec!["ingest.sources[1].name"],
        ),
    ];
    let dir = TempDir::new().expect("temp dir");
    let mut failures = Vec::new();
    for (i, (case, config, paths)) in cases.iter().enumerate() {
        let path = write(&dir, &format!("case{i}.yaml"), config);
        let out = validate(&path);
        let stderr = text(&out.stderr);
        if out.status.code() != Some(1) {
            failures.push(format!(
                "{case}: exit {:?} (want 1); stderr: {stderr}",
                out.status.code()
            ));
        } else if !paths.iter().any(|p| reports(&stderr, p)) {
            failures.push(format!("{case}: no line names {paths:?}; stderr: {stderr}"));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn validate_reports_on_full_drop_with_the_documented_message() {
    let dir = TempDir::new().expect("temp dir");
    let path = write(
        &dir,
        "drop.yaml",
        &good_with("on_full: block", "on_full: drop"),
    );
    let out = validate(&path);
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "stderr: {stderr}");
    assert!(
        stderr.lines().any(|l| l.contains(
            r#"connector.push_queue.on_full: expected evict_oldest or block, got "drop""#
        )),
        "stderr: {stderr}"
    );
}

/// The paths in `want` that no stderr line reports.
fn unreported<'a>(stderr: &str, want: &[&'a str]) -> Vec<&'a str> {
    want.iter()
        .copied()
        .filter(|p| !reports(stderr, p))
        .collect()
}

#[test]
fn validate_reports_every_value_problem_of_a_config_with_several() {
    let dir = TempDir::new().expect("temp dir");
    let many = r#"connector:
  data_dir: /var/lib/opex-connector
  http:
    listen: not-an-address
    max_body_kb: 1024
  push_queue:
    enabled: true
    max_quota_mb: 0
    on_full: drop
ingest:
  sources:
    - token: nameless-t0ken
    - name: orders
      token: orders-t0ken-1
    - name: orders
      token: orders-t0ken-2
"#;
    let path = write(&dir, "many.yaml", many);
    let out = validate(&path);
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "stderr: {stderr}");
    let missing = unreported(
        &stderr,
        &[
            "connector.http.listen",
            "connector.push_queue.max_quota_mb",
            "connector.push_queue.on_full",
            "ingest.sources[0].name",
            "ingest.sources[2].name",
        ],
    );
    assert!(
        missing.is_empty(),
        "not reported: {missing:?}\nstderr:\n{stderr}"
    );

    // Block on a disabled, zero-sized queue: both of block's requirements are reported.
    let block = good_with(
        "    enabled: true\n    max_quota_mb: 2000\n",
        "    enabled: false\n    max_quota_mb: 0\n",
    );
    let path = write(&dir, "block.yaml", &block);
    let out = validate(&path);
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "stderr: {stderr}");
    let queue_lines = stderr
        .lines()
        .filter(|l| l.contains("connector.push_queue."))
        .count();
    assert!(
        queue_lines >= 2,
        "block with enabled: false and max_quota_mb: 0 needs two problems: {stderr}"
    );
}

#[test]
fn validate_reports_shape_and_value_problems_of_one_config_together() {
    // A negative quota and an unknown key are shape problems (the raw structs refuse them);
    // the others are value problems. "Every problem" means all of them, in one run.
    let dir = TempDir::new().expect("temp dir");
    let many = r#"connector:
  data_dir: /var/lib/opex-connector
  http:
    listen: not-an-address
    max_body_kb: 1024
    colour: blue
  push_queue:
    enabled: true
    max_quota_mb: -5
    on_full: drop
ingest:
  sources:
    - token: nameless-t0ken
    - name: orders
      token: orders-t0ken-1
    - name: orders
      token: orders-t0ken-2
"#;
    let path = write(&dir, "mixed.yaml", many);
    let out = validate(&path);
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "stderr: {stderr}");
    let missing = unreported(
        &stderr,
        &[
            "connector.http.listen",
            "connector.http.colour",
            "connector.push_queue.max_quota_mb",
            "connector.push_queue.on_full",
            "ingest.sources[0].name",
            "ingest.sources[2].name",
        ],
    );
    assert!(
        missing.is_empty(),
        "not reported: {missing:?}\nstderr:\n{stderr}"
    );
}

#[test]
fn validate_refuses_yaml_syntax_errors_and_missing_files() {
    let dir = TempDir::new().expect("temp dir");
    let path = write(
        &dir,
        "broken.yaml",
        "connector:\n  http: [unclosed\n  name: x\n",
    );
    let out = validate(&path);
    assert_eq!(
        out.status.code(),
        Some(1),
        "syntax error; stderr: {}",
        text(&out.stderr)
    );
    assert!(
        !out.stderr.is_empty(),
        "a syntax error must say something on stderr"
    );

    let out = validate(&dir.path().join("absent.yaml"));
    assert_eq!(
        out.status.code(),
        Some(1),
        "missing file; stderr: {}",
        text(&out.stderr)
    );
}

#[test]
fn version_prints_the_crate_version() {
    let out = run_cli(&["--version"]);
    assert_eq!(out.status.code(), Some(0), "stderr: {}", text(&out.stderr));
    assert_eq!(text(&out.stdout).trim_end(), "opex-connector 0.1.0");
}

#[test]
fn demo_config_validates() {
    let demo = Path::new(env!("CARGO_MANIFEST_DIR")).join("config/demo.yaml");
    assert!(demo.exists(), "{} does not exist", demo.display());
    let out = validate(&demo);
    assert_eq!(out.status.code(), Some(0), "stderr:\n{}", text(&out.stderr));
    assert_eq!(
        text(&out.stdout).trim_end(),
        format!("{}: ok", demo.display())
    );
}

/// A line with a press and flows that route only the orders to the uplink.
fn with_flows(device_points: &str) -> String {
    format!(
        "{GOOD}storage: {{}}\ncommands:\n  token: c0mmands-t0ken-0123\ndevices:\n  - name: press-1\n    protocol: modbus_tcp\n    host: 127.0.0.1\n    points:\n{device_points}flows:\n  - id: orders\n    nodes:\n      - {{ id: in, kind: source, source: ingest/orders }}\n      - {{ id: press, kind: source, source: modbus/press-1 }}\n      - {{ id: up, kind: sink, sink: push }}\n    wires:\n      - {{ from: in, to: up }}\n      - {{ from: press, to: up }}\n"
    )
}

#[test]
fn validate_warns_of_a_sink_no_flow_reaches_and_of_command_records_no_flow_routes() {
    let dir = TempDir::new().expect("temp dir");
    let path = write(
        &dir,
        "flows.yaml",
        &with_flows("      - { name: setpoint, register: 12, writable: true }\n"),
    );
    let out = validate(&path);
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "stderr:\n{stderr}");
    for line in [
        "warning: storage: no flow reaches sink storage: it would get nothing",
        "warning: commands: no flow has a source node for command/press-1: the records of device press-1's commands would be booked unrouted and lost",
    ] {
        assert!(
            stderr.lines().any(|l| l.starts_with(line)),
            "no line {line:?}: {stderr}"
        );
    }
}

#[test]
fn validate_reports_a_bad_point_once_and_not_its_device_as_an_unknown_source() {
    let dir = TempDir::new().expect("temp dir");
    let path = write(
        &dir,
        "bad-point.yaml",
        &with_flows("      - { name: setpoint, register: 70000, writable: true }\n"),
    );
    let out = validate(&path);
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "stderr:\n{stderr}");
    // The first line counts the problems; one a line after it.
    let errors: Vec<&str> = stderr.lines().skip(1).collect();
    assert_eq!(
        errors,
        ["devices[0].points[0].register: 70000 is outside 0..=65535"],
        "{stderr}"
    );
}

#[test]
fn validate_tells_a_misspelled_key_the_key_it_was_meant_to_be() {
    let dir = TempDir::new().expect("temp dir");
    let path = write(
        &dir,
        "typo.yaml",
        &good_with("    max_body_kb: 1024", "    max_body_kbs: 1024"),
    );
    let out = validate(&path);
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "stderr:\n{stderr}");
    assert!(
        stderr.lines().any(|l| l
            .ends_with("connector.http.max_body_kbs: unknown key; did you mean `max_body_kb`?")),
        "{stderr}"
    );
}

/// A box with only the binary starts from the embedded demo: `demo-config` prints it as
/// shipped, and what it prints validates.
#[test]
fn demo_config_prints_the_embedded_demo_and_it_validates() {
    let out = run_cli(&["demo-config"]);
    assert_eq!(out.status.code(), Some(0), "stderr: {}", text(&out.stderr));
    let shipped =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("config/demo.yaml"))
            .expect("read config/demo.yaml");
    assert_eq!(text(&out.stdout), shipped);
    let dir = TempDir::new().expect("temp dir");
    let path = write(&dir, "site.yaml", &text(&out.stdout));
    let checked = validate(&path);
    assert_eq!(
        checked.status.code(),
        Some(0),
        "stderr:\n{}",
        text(&checked.stderr)
    );
}

#[test]
fn validate_reports_every_problem_of_telemetry_alerts_with_its_path() {
    let dir = TempDir::new().expect("temp dir");
    let bad = format!(
        "{GOOD}{}",
        r#"mqtt:
  connections:
    - name: plant
      url: mqtt://127.0.0.1:1883
    - name: office
      url: mqtt://127.0.0.1:1884
telemetry:
  alerts:
    check_interval_secs: 0
    colour: red
    webhook:
      url: ftp://alerts.example
      token: ""
      headers:
        "Bad Header": x
      retries: 1000
      retry_initial_ms: 90000
      retry_max_ms: 1000
    mqtt:
      topic: "alerts/#"
    nats:
      connection: nowhere
      subject: "alerts >"
"#
    );
    let path = write(&dir, "alerts.yaml", &bad);
    let out = validate(&path);
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "stderr: {stderr}");
    let missing = unreported(
        &stderr,
        &[
            "telemetry.alerts.check_interval_secs",
            "telemetry.alerts.colour",
            "telemetry.alerts.webhook.url",
            "telemetry.alerts.webhook.token",
            "telemetry.alerts.webhook.headers.Bad Header",
            "telemetry.alerts.webhook.retries",
            "telemetry.alerts.webhook.retry_initial_ms",
            "telemetry.alerts.mqtt.topic",
            "telemetry.alerts.mqtt.connection",
            "telemetry.alerts.nats.subject",
            "telemetry.alerts.nats.connection",
        ],
    );
    assert!(
        missing.is_empty(),
        "not reported: {missing:?}\nstderr:\n{stderr}"
    );

    let good = format!(
        "{GOOD}{}",
        r#"mqtt:
  connections:
    - name: plant
      url: mqtt://127.0.0.1:1883
telemetry:
  alerts:
    check_interval_secs: 2
    webhook:
      url: https://alerts.example/hook
      token: t0ken
      headers: { X-Site: hall-2 }
    mqtt:
      topic: opex/alerts/line-3
"#
    );
    let path = write(&dir, "alerts-ok.yaml", &good);
    let out = validate(&path);
    assert_eq!(out.status.code(), Some(0), "stderr: {}", text(&out.stderr));
}
