//! A fleet's configs from a JetStream key-value bucket: nats-py as the fleet's controller puts
//! signed configs under `config.<id>`, the real binary applies them as reloads and writes its
//! state under `state.<id>`; a bad config, a wrong signature and another `fleet:` section are
//! refused and reported; with NATS away the gateway keeps its config and catches up after.

mod common;

use std::path::{Path, PathBuf};
use std::time::Duration;

use common::*;
use serde_json::{json, Value};

const BUCKET: &str = "gateways";

/// A key pair made by `opex-connector keygen` in `dir`: (private, public).
fn keygen(dir: &Path) -> (PathBuf, PathBuf) {
    std::fs::create_dir_all(dir).expect("key dir");
    let out = run_cli(&["keygen", dir.to_str().expect("UTF-8")]);
    assert!(out.status.success(), "{out:?}");
    (dir.join("release.key"), dir.join("release.pub"))
}

/// `config` signed with `key` by `opex-connector sign-config`: the value to put.
fn signed(config: &Value, key: &Path) -> String {
    let file = tempfile::NamedTempFile::new().expect("temp file");
    std::fs::write(file.path(), to_yaml(config)).expect("write");
    let out = run_cli(&[
        "sign-config",
        key.to_str().expect("UTF-8"),
        file.path().to_str().expect("UTF-8"),
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).expect("UTF-8")
}

/// A gateway `id` of the fleet at `urls` that trusts `public`, with ingest source `orders`.
fn gateway_config(urls: &[String], id: &str, public: &Path) -> Value {
    json!({
        "connector": {"name": id, "http": {"admin_token": ADMIN_TOKEN}},
        "ingest": {"sources": [{"name": SOURCE, "token": TOKEN}]},
        "nats": {"connections": [{"name": "fleet", "servers": urls, "reconnect_max_ms": 200}]},
        "fleet": {"connection": "fleet", "bucket": BUCKET, "id": id,
                  "trusted_keys": [public.to_str().expect("UTF-8")]},
    })
}

/// The running config without its `fleet:` section (a config from the fleet keeps the local
/// one), as the controller would write it.
fn fleet_side(daemon: &Daemon) -> Value {
    let text = std::fs::read_to_string(daemon.config_path()).expect("the config file");
    let mut tree: Value = serde_saphyr::from_str(&text).expect("YAML");
    tree.as_object_mut().expect("config").remove("fleet");
    tree
}

/// The gateway's `state.<id>`, once it has one.
fn state(controller: &FleetController, id: &str) -> Option<Value> {
    controller
        .get(BUCKET, &format!("state.{id}"))
        .map(|v| serde_json::from_str(&v).expect("state is JSON"))
}

/// Waits until `state.<id>` says revision `revision` with `ok`.
fn wait_state(
    controller: &FleetController,
    id: &str,
    what: &str,
    revision: u64,
    ok: bool,
) -> Value {
    let mut last = None;
    wait_until(Duration::from_secs(30), what, || {
        last = state(controller, id);
        last.as_ref()
            .is_some_and(|s| s["revision"] == json!(revision) && s["ok"] == json!(ok))
    });
    last.expect("a state")
}

#[test]
fn a_signed_config_from_the_bucket_is_applied_and_a_bad_one_a_forged_one_and_another_fleet_section_are_refused_and_reported(
) {
    let mut nats = NatsServer::start();
    let controller = FleetController::new(&[nats.url()]);
    controller.create(BUCKET, 1);
    let keys = tempfile::tempdir().expect("keys");
    let (key, public) = keygen(&keys.path().join("fleet"));
    let (stranger, _) = keygen(&keys.path().join("stranger"));
    let mut daemon = Daemon::start(gateway_config(&[nats.url()], "line-1", &public));

    // A second ingest source, put by the controller: applied as revision 2 and reported.
    let mut config = fleet_side(&daemon);
    config["ingest"]["sources"]
        .as_array_mut()
        .expect("sources")
        .push(json!({"name": "extra", "token": "extra-t0ken-0123456"}));
    controller.put(BUCKET, "config.line-1", &signed(&config, &key));
    let st = wait_state(&controller, "line-1", "revision 2 applied", 2, true);
    assert_eq!(st["problems"], json!([]), "{st}");
    assert!(st["version"].is_string(), "{st}");
    assert!(st["healthy"].is_boolean() && st["at"].is_string(), "{st}");
    let status = daemon.status();
    assert_eq!(status["config"]["revision"], json!(2));
    let revisions = daemon
        .get("/api/config/revisions", Some(ADMIN_TOKEN))
        .json();
    assert_eq!(
        revisions["revisions"][0]["origin"],
        json!("fleet"),
        "{revisions}"
    );
    let reply = daemon.post(
        "/api/ingest/extra/e-1",
        Some("extra-t0ken-0123456"),
        b"{\"v\": 1}",
    );
    assert_eq!(reply.status, 200, "{}", reply.body);
    // The file given to `run` holds it, with the local fleet section.
    let kept = std::fs::read_to_string(daemon.config_path()).expect("the config file");
    assert!(kept.contains("extra") && kept.contains(BUCKET), "{kept}");

    // A config with problems: the gateway keeps revision 2 and reports every problem.
    let mut bad = config.clone();
    bad["connector"]["colour"] = json!("blue");
    bad["ingest"]["sources"][1]["token"] = json!("");
    controller.put(BUCKET, "config.line-1", &sign_unchecked(&bad, &key));
    let st = wait_state(&controller, "line-1", "the bad config refused", 2, false);
    let paths: Vec<&str> = st["problems"]
        .as_array()
        .expect("problems")
        .iter()
        .filter_map(|p| p["path"].as_str())
        .collect();
    assert!(paths.contains(&"connector.colour"), "{st}");
    assert!(
        paths.iter().any(|p| p.starts_with("ingest.sources[1]")),
        "{st}"
    );

    // Signed by a key the gateway does not trust: refused.
    controller.put(BUCKET, "config.line-1", &signed(&config, &stranger));
    let st = wait_until_problem(&controller, "line-1", "not among fleet.trusted_keys");
    assert_eq!(st["revision"], json!(2), "{st}");
    // Another fleet section: refused, the box stays on its fleet.
    let mut moved = config.clone();
    moved["fleet"] = json!({"connection": "fleet", "bucket": "elsewhere", "id": "line-1",
                            "trusted_keys": [public.to_str().expect("UTF-8")]});
    controller.put(BUCKET, "config.line-1", &signed(&moved, &key));
    wait_until_problem(&controller, "line-1", "fleet: section differs");
    assert_eq!(daemon.status()["config"]["revision"], json!(2));
    assert!(
        daemon.status()["config"]["last_error"]
            .as_str()
            .is_some_and(|e| e.contains("differs")),
        "the page says why too"
    );

    // NATS away: the gateway runs on; back, the latest value is applied.
    nats.stop();
    assert_eq!(daemon.ingest("while-away", "{\"v\": 1}").status, 200);
    nats.restart();
    config["ingest"]["sources"][1]["token"] = json!("extra-t0ken-6543210");
    controller.put(BUCKET, "config.line-1", &signed(&config, &key));
    wait_state(&controller, "line-1", "caught up after the outage", 3, true);
    let reply = daemon.post(
        "/api/ingest/extra/e-2",
        Some("extra-t0ken-6543210"),
        b"{\"v\": 2}",
    );
    assert_eq!(reply.status, 200, "{}", reply.body);

    // A local change made since stays across a restart: the value already handled is not
    // applied again.
    let mut local = fleet_side(&daemon);
    local["ingest"]["sources"]
        .as_array_mut()
        .expect("sources")
        .push(json!({"name": "local", "token": "local-t0ken-0123456"}));
    let text = std::fs::read_to_string(daemon.config_path()).expect("the config file");
    let mut with_fleet: Value = serde_saphyr::from_str(&text).expect("YAML");
    with_fleet["ingest"] = local["ingest"].clone();
    let reply = daemon.post(
        "/api/config",
        Some(ADMIN_TOKEN),
        to_yaml(&with_fleet).as_bytes(),
    );
    assert_eq!(reply.status, 200, "{}", reply.body);
    daemon.stop();
    daemon.restart();
    wait_until(Duration::from_secs(30), "the key read again", || {
        let log = daemon.stderr();
        log.rsplit("harness: start #2")
            .next()
            .is_some_and(|run| run.contains("holds the value already handled"))
    });
    let status = daemon.status();
    assert_eq!(status["config"]["revision"], json!(4), "{status}");
    let reply = daemon.post("/api/ingest/local/l-1", Some("local-t0ken-0123456"), b"{}");
    assert_eq!(reply.status, 200, "{}", reply.body);
}

/// Waits until `state.<id>` reports a problem containing `text`.
fn wait_until_problem(controller: &FleetController, id: &str, text: &str) -> Value {
    let mut last = None;
    wait_until(Duration::from_secs(30), text, || {
        last = state(controller, id);
        last.as_ref()
            .is_some_and(|s| s["ok"] == json!(false) && s["problems"].to_string().contains(text))
    });
    last.expect("a state")
}

/// `config` signed without the check `sign-config` makes first (it refuses a config with
/// problems): what a controller that skips it would put.
fn sign_unchecked(config: &Value, key: &Path) -> String {
    opex_connector::fleet::sign(&to_yaml(config), key).expect("signed")
}

#[test]
fn four_gateways_on_a_three_node_cluster_apply_each_its_config_and_the_one_with_a_bad_config_keeps_its_own(
) {
    let mut cluster = NatsCluster::start();
    let urls = cluster.urls();
    let controller = FleetController::new(&urls);
    controller.create(BUCKET, 3);
    let keys = tempfile::tempdir().expect("keys");
    let (key, public) = keygen(keys.path());
    let ids: Vec<String> = (1..=4).map(|i| format!("gw-{i}")).collect();
    // Each gateway's client starts on another server of the cluster.
    let daemons: Vec<Daemon> = ids
        .iter()
        .enumerate()
        .map(|(i, id)| {
            let mut own = urls.clone();
            own.rotate_left(i % urls.len());
            Daemon::start(gateway_config(&own, id, &public))
        })
        .collect();
    for (i, (id, daemon)) in ids.iter().zip(&daemons).enumerate() {
        let mut config = fleet_side(daemon);
        config["ingest"]["sources"]
            .as_array_mut()
            .expect("sources")
            .push(json!({"name": format!("line-{i}"), "token": "line-t0ken-0123456"}));
        let value = if i == 3 {
            config["connector"]["colour"] = json!("blue");
            sign_unchecked(&config, &key)
        } else {
            signed(&config, &key)
        };
        controller.put(BUCKET, &format!("config.{id}"), &value);
    }
    for (i, (id, daemon)) in ids.iter().zip(&daemons).enumerate().take(3) {
        wait_state(&controller, id, "the gateway's config applied", 2, true);
        let reply = daemon.post(
            &format!("/api/ingest/line-{i}/r-1"),
            Some("line-t0ken-0123456"),
            b"{\"v\": 1}",
        );
        assert_eq!(reply.status, 200, "{id}: {}", reply.body);
    }
    let st = wait_state(&controller, "gw-4", "the bad config refused", 1, false);
    assert!(
        st["problems"].to_string().contains("connector.colour"),
        "{st}"
    );
    assert_eq!(daemons[3].status()["config"]["revision"], json!(1));

    // A wrongly signed value (the config changed after it was signed): refused, gw-3 keeps
    // revision 2.
    let mut forged: Value =
        serde_json::from_str(&signed(&fleet_side(&daemons[2]), &key)).expect("an envelope");
    forged["config"] = json!(forged["config"]
        .as_str()
        .expect("the config")
        .replace("line-t0ken-0123456", "stolen-t0ken-0123456"));
    controller.put(BUCKET, "config.gw-3", &forged.to_string());
    let st = wait_until_problem(&controller, "gw-3", "does not match");
    assert_eq!(st["revision"], json!(2), "{st}");

    // The whole cluster away and back: every gateway catches up with its latest value.
    cluster.stop();
    assert_eq!(daemons[0].ingest("while-away", "{\"v\": 1}").status, 200);
    cluster.restart();
    for (id, daemon) in ids.iter().zip(&daemons) {
        let mut config = fleet_side(daemon);
        config["ingest"]["sources"]
            .as_array_mut()
            .expect("sources")
            .push(json!({"name": "after", "token": "after-t0ken-0123456"}));
        let value = signed(&config, &key);
        wait_until(Duration::from_secs(60), "the bucket writable again", || {
            controller
                .try_put(BUCKET, &format!("config.{id}"), &value)
                .is_ok()
        });
    }
    for (i, (id, daemon)) in ids.iter().zip(&daemons).enumerate() {
        // gw-4 had kept revision 1: the good config is its second.
        let revision = if i == 3 { 2 } else { 3 };
        let st = wait_state(
            &controller,
            id,
            "caught up after the outage",
            revision,
            true,
        );
        assert_eq!(st["problems"], json!([]), "{id}: {st}");
        let reply = daemon.post("/api/ingest/after/a-1", Some("after-t0ken-0123456"), b"{}");
        assert_eq!(reply.status, 200, "{id}: {}", reply.body);
    }
}
