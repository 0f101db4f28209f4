//! The demo a newcomer runs (`config/demo.yaml`, embedded as the default of
//! `cargo run --release`): its built-in plant served over Modbus TCP and OPC-UA inside the
//! process, both polled, values on `/api/status` and stored in the push queue. The demo's
//! fixed ports are moved to free ones; everything else is the file as shipped.

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

#[test]
fn the_demo_polls_its_plant_over_modbus_and_opcua_and_stores_the_values() {
    let mut config: Value = serde_saphyr::from_str(DEMO).expect("demo.yaml parses");
    let (modbus, opcua) = (free_port(), free_port());
    config["connector"]["http"]["listen"] = json!("127.0.0.1:0");
    config["simulator"]["modbus"] = json!(format!("127.0.0.1:{modbus}"));
    config["simulator"]["opcua"] = json!(format!("127.0.0.1:{opcua}"));
    config["devices"][0]["port"] = json!(modbus);
    config["devices"][1]["endpoint"] = json!(format!("opc.tcp://127.0.0.1:{opcua}/"));
    let daemon = Daemon::start(config);
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
        "both simulated devices connected with values",
        || {
            let s = status();
            let plant = device(&s, "plant-1");
            let boiler = device(&s, "boiler-1");
            plant["state"] == json!("connected")
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
}
