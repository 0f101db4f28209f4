//! Commissioning a line: device templates polled against the built-in simulator, and the
//! shell tools (`browse`, `read`, `scan`) against devices nobody here wrote: pymodbus over
//! TCP and over RTU on a `socat` pty pair, and an asyncua OPC-UA server
//! (`tests/common/peers/`). Drives the real binary.

#![cfg(feature = "simulator")]

mod common;

use std::time::Duration;

use common::*;
use serde_json::{json, Value};

/// 100 Modbus presses from one template, two OPC-UA boilers from another (their node ids
/// made from `{{area}}`), all polling the simulator the daemon runs inside itself.
fn templated_plant(modbus: u16, opcua: u16) -> Value {
    let mut config = queue_config(16, "evict_oldest");
    config["simulator"] = json!({
        "modbus": format!("127.0.0.1:{modbus}"),
        "opcua": format!("127.0.0.1:{opcua}"),
    });
    config["templates"] = json!([
        {
            "name": "press",
            "protocol": "modbus_tcp",
            "host": "127.0.0.1",
            "port": modbus,
            "timeout_ms": 2000,
            "groups": [{"name": "process", "interval_ms": 1000}],
            "points": [
                {"name": "oven", "register": 0, "type": "f32", "unit": "°C"},
                {"name": "parts", "register": 4, "type": "u32"},
                {"name": "pressure", "register": 7, "type": "i16", "scale": 0.1, "unit": "bar"},
            ],
        },
        {
            "name": "boiler",
            "protocol": "opcua",
            "endpoint": format!("opc.tcp://127.0.0.1:{opcua}/"),
            "vars": {"area": "Boiler"},
            "groups": [{"name": "process", "interval_ms": 500}],
            "nodes": [
                {"name": "temperature", "node_id": "ns=2;s=Plant.{{area}}.Temperature"},
                {"name": "pressure", "node_id": "ns=2;s=Plant.{{area}}.Pressure"},
            ],
        },
    ]);
    let mut devices: Vec<Value> = (1..=100)
        .map(|i| json!({"name": format!("press-{i}"), "template": "press", "unit": i}))
        .collect();
    // One press reads one more point and polls at its own pace.
    devices[41]["points"] = json!([{"name": "pump", "register": 6, "type": "bool"}]);
    devices.push(json!({"name": "boiler-1", "template": "boiler"}));
    devices.push(json!({
        "name": "pump-1",
        "template": "boiler",
        "vars": {"area": "Pump"},
        "nodes": [
            {"name": "temperature", "node_id": "ns=2;s=Plant.{{area}}.Speed"},
            {"name": "running", "node_id": "ns=2;s=Plant.{{area}}.Running"},
        ],
    }));
    config["devices"] = json!(devices);
    config
}

#[test]
fn a_hundred_devices_from_one_template_poll_the_simulator_and_name_their_template() {
    let (modbus, opcua) = (free_port(), free_port());
    let mut config = templated_plant(modbus, opcua);
    let dir = tempfile::tempdir().expect("temp dir");
    config["connector"]["data_dir"] = json!(dir.path().join("data"));
    let file = dir.path().join("plant.yaml");
    std::fs::write(&file, to_yaml(&config)).expect("write config");
    let file = file.to_string_lossy().into_owned();

    let checked = run_cli(&["validate", &file]);
    assert!(
        checked.status.success(),
        "{}",
        String::from_utf8_lossy(&checked.stderr)
    );
    // `overlay FILE` prints the config as the pollers see it.
    let shown = run_cli(&["overlay", &file]);
    assert!(shown.status.success(), "{shown:?}");
    let expanded: Value =
        serde_saphyr::from_str(&String::from_utf8_lossy(&shown.stdout)).expect("YAML");
    let press_42 = &expanded["devices"][41];
    assert_eq!(press_42["protocol"], "modbus_tcp");
    assert_eq!(press_42["unit"], 42);
    assert_eq!(press_42["points"].as_array().map(Vec::len), Some(4));
    assert_eq!(
        expanded["devices"][101]["nodes"][0]["node_id"],
        "ns=2;s=Plant.Pump.Speed"
    );

    let daemon = Daemon::start(config);
    wait_until(Duration::from_secs(60), "every device polled twice", || {
        let status = daemon.status();
        let devices = status["devices"].as_array().cloned().unwrap_or_default();
        devices.len() == 102
            && devices
                .iter()
                .all(|d| d["polls_total"].as_u64().unwrap_or(0) >= 2)
    });
    let status = daemon.status();
    let devices = status["devices"].as_array().expect("devices");
    for d in devices {
        let name = d["name"].as_str().unwrap_or_default();
        let template = if name.starts_with("press-") {
            "press"
        } else {
            "boiler"
        };
        assert_eq!(d["template"], template, "{d}");
        assert_eq!(d["state"], "connected", "{d}");
        assert_eq!(d["errors_total"], 0, "{d}");
    }
    let press_42 = named(&status, "/devices", "press-42");
    let values = &press_42["values"]["process"];
    for point in ["oven", "parts", "pressure", "pump"] {
        assert_eq!(values[point]["quality"], "good", "{point}: {values}");
    }
    let oven = values["oven"]["value"].as_f64().expect("oven is a number");
    assert!((175.0..=185.0).contains(&oven), "{oven}");
    let pump = named(&status, "/devices", "pump-1");
    assert_eq!(
        pump["values"]["process"]["running"]["quality"], "good",
        "{pump}"
    );
    let boiler = named(&status, "/devices", "boiler-1");
    let pressure = boiler["values"]["process"]["pressure"]["value"]
        .as_f64()
        .expect("boiler pressure is a number");
    assert!((3.5..=4.5).contains(&pressure), "{boiler}");
}
