//! The demo a newcomer runs (`config/demo.yaml`, embedded as the default of
//! `cargo run --release`): its built-in plant served over Modbus TCP, OPC-UA and S7 inside
//! the process, all three polled, values on `/api/status` and stored in the push queue. The demo's
//! fixed ports are moved to free ones; everything else is the file as shipped. Lighthouse (npm,
//! installed by `scripts/test.sh`) audits its status page in Debian's Chromium.

#![cfg(feature = "simulator")]

mod common;

use std::time::Duration;

use common::*;
use serde_json::{json, Value};

const DEMO: &str = include_str!("../config/demo.yaml");

fn device<'a>(status: &'a Value, name: &str) -> &'a Value {
    status["devices"]
        .as_array()
        .and_then(|ds| ds.iter().find(|d| d["name"] == json!(name)))
        .unwrap_or_else(|| panic!("no device {name} in {status:#}"))
}

/// The demo's config with its fixed ports moved to free ones.
fn demo_config() -> Value {
    let mut config: Value = serde_saphyr::from_str(DEMO).expect("demo.yaml parses");
    let (modbus, opcua, s7) = (free_port(), free_port(), free_port());
    config["connector"]["http"]["listen"] = json!("127.0.0.1:0");
    config["simulator"]["modbus"] = json!(format!("127.0.0.1:{modbus}"));
    config["simulator"]["opcua"] = json!(format!("127.0.0.1:{opcua}"));
    config["simulator"]["s7"] = json!(format!("127.0.0.1:{s7}"));
    config["opcua_server"]["listen"] = json!(format!("127.0.0.1:{}", free_port()));
    config["devices"][0]["port"] = json!(modbus);
    config["devices"][1]["endpoint"] = json!(format!("opc.tcp://127.0.0.1:{opcua}/"));
    config["devices"][2]["port"] = json!(s7);
    config
}

#[test]
fn the_demo_polls_its_plant_over_modbus_opcua_and_s7_and_stores_the_values() {
    let daemon = Daemon::start(demo_config());
    let client = daemon.client();
    let status = || {
        client
            .get(&daemon.url("/api/status"), None)
            .expect("GET /api/status")
            .json()
    };
    wait_until(
        // Generous: the first start makes the OPC-UA client's RSA key.
        Duration::from_secs(120),
        "the three simulated devices connected with values",
        || {
            let s = status();
            let plant = device(&s, "plant-1");
            let boiler = device(&s, "boiler-1");
            let plc = device(&s, "line-plc");
            plc["state"] == json!("connected")
                && plc["values"]["line"]["oven_temp"]["value"].is_f64()
                && plc["values"]["line"]["pump_running"]["value"].is_boolean()
                && plc["values"]["line"]["model"]["value"] == json!("OPEX-SIM")
                && plc["pdu_size"].is_u64()
                && plant["state"] == json!("connected")
                && plant["values"]["process"]["oven_temp"]["value"].is_f64()
                && boiler["state"] == json!("connected")
                && boiler["values"]["boiler"]["temperature"]["value"].is_f64()
                && boiler["values"]["boiler"]["parts"]["value"].is_u64()
        },
    );
    // Every poll is a record in the push queue (no uplink in the demo: they stay there).
    wait_until(Duration::from_secs(30), "polls stored", || {
        u64_at(&status(), "/push_queue/rows") >= 4
    });
    let s = status();
    assert_eq!(u64_at(&s, "/engine/stats/backpressure_lost"), 0, "{s:#}");
    assert_eq!(u64_at(device(&s, "boiler-1"), "/errors_total"), 0, "{s:#}");
    assert_eq!(u64_at(device(&s, "line-plc"), "/errors_total"), 0, "{s:#}");
    // And serves its points over OPC-UA.
    assert_eq!(s["opcua_server"]["listening"], json!(true), "{s:#}");
}

/// The demo started, once its simulated devices are connected.
fn demo_with_its_devices_connected() -> Daemon {
    let daemon = Daemon::start(demo_config());
    wait_until(
        Duration::from_secs(120),
        "the demo's devices connected",
        || {
            let s = daemon.status();
            s["devices"].as_array().is_some_and(|ds| {
                ds.len() == 3 && ds.iter().all(|d| d["state"] == json!("connected"))
            })
        },
    );
    daemon
}

/// Lighthouse on PATH (`scripts/test.sh` links it to `/usr/local/bin`).
fn lighthouse() -> Option<std::path::PathBuf> {
    let found = std::process::Command::new("lighthouse")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    found.then(|| "lighthouse".into())
}

#[test]
fn lighthouse_scores_the_demos_page_full_marks_in_accessibility_and_best_practices() {
    let (Some(lighthouse), true) = (
        lighthouse(),
        std::path::Path::new("/usr/bin/chromium").exists(),
    ) else {
        println!(
            "SKIPPED: lighthouse or chromium is not installed (scripts/test.sh installs both)"
        );
        return;
    };
    let daemon = demo_with_its_devices_connected();
    let dir = tempfile::tempdir().expect("temp dir");
    let report = dir.path().join("report.json");
    let out = std::process::Command::new(lighthouse)
        .env("CHROME_PATH", "/usr/bin/chromium")
        .args([
            daemon.url("/").as_str(),
            "--only-categories=accessibility,best-practices",
            "--output=json",
            "--quiet",
        ])
        .arg(format!("--output-path={}", report.display()))
        .arg(format!(
            "--chrome-flags=--headless=new --no-sandbox --disable-gpu --disable-quic --no-first-run \
             --disable-background-networking --disable-component-update --disable-sync --user-data-dir={}",
            dir.path().join("profile").display()
        ))
        .output()
        .expect("run lighthouse");
    assert!(
        out.status.success(),
        "lighthouse failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let report: Value =
        serde_json::from_slice(&std::fs::read(&report).expect("the report")).expect("JSON");
    // Every audit that did not pass, by its id and title, for the failure message.
    let failed: Vec<String> = report["audits"]
        .as_object()
        .into_iter()
        .flatten()
        .filter(|(_, a)| a["score"].as_f64().is_some_and(|s| s < 1.0))
        .map(|(id, a)| format!("{id}: {}", a["title"]))
        .collect();
    for category in ["accessibility", "best-practices"] {
        assert_eq!(
            report["categories"][category]["score"].as_f64(),
            Some(1.0),
            "{category}: {failed:#?}"
        );
    }
}

/// Checks `instance` against the schema `name` of the OpenAPI document with Python's
/// `jsonschema` (installed with `openapi-spec-validator` by `scripts/test.sh`); `None` when it
/// is not installed, else the errors (empty when it fits).
fn schema_errors(name: &str, instance: &Value) -> Option<String> {
    use std::io::Write;
    const CHECK: &str = r##"
import json, sys
try:
    import jsonschema
except ImportError:
    print("NO_JSONSCHEMA"); sys.exit(0)
doc = json.load(open(sys.argv[1]))
schema = {"$ref": "#/components/schemas/" + sys.argv[2], "components": doc["components"]}
v = jsonschema.Draft202012Validator(schema)
for e in v.iter_errors(json.load(sys.stdin)):
    print("/".join(map(str, e.absolute_path)) + ": " + e.message)
"##;
    let doc =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/src/reference/openapi.json");
    let mut child = std::process::Command::new("python3")
        .args(["-c", CHECK])
        .arg(doc)
        .arg(name)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("run python3");
    child
        .stdin
        .take()
        .expect("stdin")
        .write_all(instance.to_string().as_bytes())
        .expect("write the answer");
    let out = child.wait_with_output().expect("python3 ends");
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    (!text.contains("NO_JSONSCHEMA")).then_some(text)
}

#[test]
fn the_demos_status_ledger_and_a_write_match_the_schemas_of_the_openapi_document() {
    let daemon = demo_with_its_devices_connected();
    let write = daemon.request(
        "POST",
        "/api/devices/plant-1/write",
        Some("demo-commands-token"),
        &[],
        Some(br#"{"id":"schema-1","points":{"oven_setpoint":120}}"#),
    );
    assert_eq!(write.status, 200, "{}", write.body);
    let ledger = daemon.get("/api/ledger", None);
    assert_eq!(ledger.status, 200, "{}", ledger.body);
    for (name, answer) in [
        ("Status", daemon.status()),
        ("Ledger", ledger.json()),
        ("WriteOutcome", write.json()),
    ] {
        let Some(errors) = schema_errors(name, &answer) else {
            println!("SKIPPED: jsonschema is not installed (scripts/test.sh installs it)");
            return;
        };
        assert!(
            errors.trim().is_empty(),
            "{name} does not fit its schema:\n{errors}\n{answer:#}"
        );
    }
}
