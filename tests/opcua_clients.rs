//! The OPC-UA clients the connector's OPC-UA server is tested with, checked against servers
//! that exist today: asyncua's client (`common::OpcuaClient`:
//! `tests/common/peers/opcua_client.py`) against the built-in simulator's plant
//! (`common::SimulatorPlant`: security None, anonymous), and both clients against the asyncua
//! server in secure mode (`common::OpcuaServer::start_secure`: Basic256Sha256 and a user
//! name; it accepts any client certificate). If these fail, a failing server test says
//! nothing about the server.

#![cfg(feature = "simulator")]

mod common;

use common::*;
use serde_json::json;

const USER: &str = "scada";
const PASSWORD: &str = "c0ntrol-r00m";

/// The simulator's plant and an asyncua client of it, connected.
fn plant_and_client() -> (SimulatorPlant, OpcuaClient) {
    let plant = SimulatorPlant::start();
    let client = OpcuaClient::start(&plant.sim.endpoint(), &ClientOptions::anonymous());
    client.connect().expect("connect to the simulator");
    (plant, client)
}

#[test]
fn browsing_objects_finds_the_plant_and_its_boiler_temperature() {
    let (plant, client) = plant_and_client();
    let tree = client.browse();
    let found = find_node(&tree, "Plant").unwrap_or_else(|| panic!("no Plant in {tree:#?}"));
    assert_eq!(found["node_class"], json!("Object"), "{found:#}");
    let temperature = plant.sim.node_id("Plant.Boiler.Temperature");
    let below = found["children"].as_array().cloned().unwrap_or_default();
    let ids = node_ids(&below);
    assert!(
        ids.contains(&temperature),
        "{temperature} not under Plant: {ids:?}"
    );
}

/// Every node id in `tree`, depth first.
fn node_ids(tree: &[serde_json::Value]) -> Vec<String> {
    tree.iter()
        .flat_map(|n| {
            let mut ids = vec![n["node_id"].as_str().unwrap_or_default().to_string()];
            ids.extend(node_ids(n["children"].as_array().map_or(&[][..], |c| c)));
            ids
        })
        .collect()
}

#[test]
fn a_read_gives_the_temperature_as_a_good_double_with_its_source_time() {
    let (plant, client) = plant_and_client();
    let temperature = plant.sim.node_id("Plant.Boiler.Temperature");
    let results = client.read(&[&temperature, "ns=2;s=Plant.Nowhere"]);
    let t = &results[0];
    assert_eq!(t["node"], json!(temperature), "{t:#}");
    assert_eq!(t["data_type"], json!("Double"), "{t:#}");
    assert_eq!(t["status"], json!("Good"), "{t:#}");
    assert!(t["value"].is_f64(), "{t:#}");
    assert!(
        t["source_ts"].as_str().is_some_and(|ts| ts.ends_with('Z')),
        "{t:#}"
    );
    assert_eq!(
        results[1]["status"],
        json!("BadNodeIdUnknown"),
        "{results:#?}"
    );
}

#[test]
fn the_setpoint_attributes_say_double_and_writable() {
    let (plant, client) = plant_and_client();
    let attrs = client.read_attrs(&plant.sim.node_id("Plant.Boiler.Setpoint"));
    assert_eq!(attrs["data_type"], json!("Double"), "{attrs:#}");
    // AccessLevel bit 1 is CurrentWrite.
    let access = attrs["access_level"].as_u64().unwrap_or_default();
    assert_eq!(access & 0b11, 0b11, "{attrs:#}");
    assert!(attrs["EURange"].is_null(), "{attrs:#}");
}

#[test]
fn a_subscription_sees_the_line_counter_change() {
    let (plant, client) = plant_and_client();
    let counter = plant.sim.node_id("Plant.Line.Counter");
    client.subscribe(&[&counter], 200);
    wait_until(
        POLL_DEADLINE,
        "two counter values from the subscription",
        || {
            let values: Vec<u64> = client
                .changes(0)
                .iter()
                .filter(|c| c["node"] == json!(counter) && c["status"] == json!("Good"))
                .filter_map(|c| c["value"].as_u64())
                .collect();
            values.windows(2).any(|w| w[1] > w[0])
        },
    );
}

#[test]
fn a_setpoint_written_reads_back_and_a_read_only_node_answers_its_bad_status() {
    let (plant, client) = plant_and_client();
    let setpoint = plant.sim.node_id("Plant.Boiler.Setpoint");
    assert_eq!(client.write(&setpoint, json!(123.5), "Double"), "Good");
    assert_eq!(client.read(&[&setpoint])[0]["value"], json!(123.5));
    assert_eq!(
        client.write(&setpoint, json!(1000.0), "Double"),
        "BadOutOfRange"
    );
    let temperature = plant.sim.node_id("Plant.Boiler.Temperature");
    assert_eq!(
        client.write(&temperature, json!(20.0), "Double"),
        "BadUserAccessDenied"
    );
    assert_eq!(client.read(&[&setpoint])[0]["value"], json!(123.5));
}

#[test]
fn the_asyncua_client_logs_in_over_basic256sha256_and_a_wrong_password_is_named() {
    let server = OpcuaServer::start_secure(USER, PASSWORD);
    let options = ClientOptions::secure("Basic256Sha256", "SignAndEncrypt").user(USER, PASSWORD);
    let client = OpcuaClient::start(&server.endpoint(), &options);
    client.connect().expect("connect with the right password");
    assert_eq!(client.read(&["ns=2;s=Setpoint"])[0]["value"], json!(42.5));
    let cert = client
        .certificate()
        .expect("a secure client has a certificate");
    assert!(cert.is_file(), "{} was not made", cert.display());

    let wrong = ClientOptions::secure("Basic256Sha256", "Sign").user(USER, "guess");
    let refused = OpcuaClient::start(&server.endpoint(), &wrong);
    assert_eq!(refused.connect(), Err("BadUserAccessDenied".to_string()));
}

#[test]
fn node_opcua_reads_over_basic256sha256_sign_and_encrypt_with_a_user_name() {
    let server = OpcuaServer::start_secure(USER, PASSWORD);
    let pki = tempfile::tempdir().expect("temp dir");
    let options = ClientOptions::secure("Basic256Sha256", "SignAndEncrypt").user(USER, PASSWORD);
    let answer = node_opcua_read(&server.endpoint(), &options, pki.path(), "ns=2;s=Setpoint");
    assert_eq!(
        answer,
        json!({"ok": true, "value": 42.5, "status": "Good", "data_type": "Double"})
    );
    let der = node_opcua_certificate_der(pki.path()).expect("node-opcua made its certificate");
    // A DER certificate is a SEQUENCE.
    assert_eq!(
        der.first(),
        Some(&0x30),
        "{}",
        node_opcua_certificate(pki.path()).display()
    );

    let wrong = ClientOptions::secure("Basic256Sha256", "SignAndEncrypt").user(USER, "guess");
    let answer = node_opcua_read(&server.endpoint(), &wrong, pki.path(), "ns=2;s=Setpoint");
    assert_eq!(answer["ok"], json!(false), "{answer:#}");
    assert_eq!(answer["error"], json!("BadUserAccessDenied"), "{answer:#}");
}
