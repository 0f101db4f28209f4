//! The config API and the kept revisions (admin token): `GET /api/config` with its secrets
//! redacted, `GET /api/config/revisions` across restarts, `POST /api/config?dry_run=1` part by
//! part, a bad config's every problem, a new flow plan applied live by `POST /api/config`
//! and by `SIGHUP`, `If-Match`, and the changes this version cannot make live refused with
//! nothing changed. Drives the real binary.

mod common;

use std::io::{Read, Write};

use common::*;
use serde_json::{json, Value};

const ADMIN: &str = ADMIN_TOKEN;

fn config() -> Value {
    json!({
        "connector": {"http": {"admin_token": ADMIN}},
        "ingest": {"sources": [{"name": SOURCE, "token": TOKEN}]},
        "webhooks": [{"name": "pay", "secret": "webhook-secret-0123"}],
    })
}

fn running_text(daemon: &Daemon) -> String {
    std::fs::read_to_string(daemon.config_path()).expect("the config file")
}

#[test]
fn the_running_config_is_shown_with_its_secrets_redacted_and_its_revision() {
    let daemon = Daemon::start(config());
    let reply = daemon.get("/api/config", Some(ADMIN));
    assert_eq!(reply.status, 200, "{}", reply.body);
    let body = reply.json();
    assert_eq!(body["revision"], json!(1), "{body}");
    assert_eq!(body["origin"], json!("start"), "{body}");
    let shown = body["config"].as_str().expect("the config as text");
    for secret in [ADMIN, TOKEN, "webhook-secret-0123"] {
        assert!(!shown.contains(secret), "{secret} shown in {shown}");
    }
    assert!(shown.contains("<redacted>"), "{shown}");
    assert!(shown.contains(SOURCE), "{shown}");
    let hash = body["hash"].as_str().expect("hash");
    assert_eq!(hash.len(), 64, "{hash}");

    let status = daemon.status();
    assert_eq!(
        status["config"]["revision"],
        json!(1),
        "{}",
        status["config"]
    );
    assert_eq!(status["config"]["hash"], json!(hash));
    assert_eq!(status["config"]["reloads"], json!(0));
    assert!(status["config"]["last_error"].is_null());
    assert!(status["config"]["loaded_at"]
        .as_str()
        .is_some_and(|t| t.ends_with('Z')));
    let metrics = daemon.metrics();
    assert_eq!(
        metric(&metrics, "opex_connector_config_revision"),
        Some(1.0)
    );
    assert_eq!(
        metric(&metrics, "opex_connector_config_reloads_total"),
        Some(0.0)
    );

    // Without the admin token: refused, nothing shown.
    assert_eq!(daemon.get("/api/config", None).status, 401);
    assert_eq!(
        daemon
            .get("/api/config", Some("wrong-token-0123456"))
            .status,
        401
    );
    assert_eq!(daemon.get("/api/config/revisions", None).status, 401);
}

#[test]
fn a_restart_with_the_same_config_keeps_its_revision_and_another_config_is_the_next() {
    let mut daemon = Daemon::start(config());
    let first = daemon.get("/api/config", Some(ADMIN)).json();
    daemon.stop();
    daemon.restart();
    let again = daemon.get("/api/config", Some(ADMIN)).json();
    assert_eq!(again["revision"], json!(1));
    assert_eq!(again["hash"], first["hash"]);

    daemon.stop();
    let changed = running_text(&daemon).replace(TOKEN, "another-t0ken-0123");
    std::fs::write(daemon.config_path(), changed).expect("write");
    daemon.restart();
    let body = daemon.get("/api/config/revisions", Some(ADMIN)).json();
    let list = body["revisions"].as_array().expect("revisions");
    assert_eq!(list.len(), 2, "{body}");
    assert_eq!(list[0]["revision"], json!(2), "newest first: {body}");
    assert_eq!(list[1]["revision"], json!(1));
    for r in list {
        assert_eq!(r["origin"], json!("start"), "{body}");
        assert!(r["at"].as_str().is_some_and(|t| t.ends_with('Z')), "{body}");
        assert_eq!(r["hash"].as_str().map(str::len), Some(64), "{body}");
    }
    assert_ne!(list[0]["hash"], list[1]["hash"]);
    // The texts are kept in the data dir.
    let kept = daemon.data_dir().join("config-revisions");
    assert!(kept.join("1.yaml").exists() && kept.join("2.yaml").exists());
    assert_eq!(daemon.status()["config"]["revision"], json!(2));
}

#[test]
fn a_dry_run_says_part_by_part_what_a_config_would_change() {
    let daemon = Daemon::start(config());
    let text = running_text(&daemon);

    let same = daemon.post("/api/config?dry_run=1", Some(ADMIN), text.as_bytes());
    assert_eq!(same.status, 200, "{}", same.body);
    let body = same.json();
    assert_eq!(body["dry_run"], json!(true));
    assert_eq!(body["revision"], json!(1));
    for change in ["start", "stop", "restart"] {
        assert_eq!(body["changes"][change], json!([]), "{body}");
    }
    let kept = parts_under(&body, "keep");
    for part in ["ingest/orders", "webhook/pay", "sink/push", "flows", "http"] {
        assert!(kept.contains(&part), "{part} not kept: {body}");
    }

    // A source renamed, a webhook's secret changed, a storage sink added, the listen address
    // moved.
    let mut changed: Value = serde_saphyr::from_str(&text).expect("YAML");
    changed["ingest"]["sources"][0]["name"] = json!("cell");
    changed["webhooks"][0]["secret"] = json!("webhook-secret-9876");
    changed["storage"] = json!({"max_quota_mb": 16});
    changed["connector"]["http"]["listen"] = json!("127.0.0.1:1");
    let reply = daemon.post(
        "/api/config?dry_run=1",
        Some(ADMIN),
        to_yaml(&changed).as_bytes(),
    );
    assert_eq!(reply.status, 200, "{}", reply.body);
    let body = reply.json();
    assert_eq!(
        body["changes"]["start"],
        json!(["ingest/cell", "sink/storage"]),
        "{body}"
    );
    assert_eq!(body["changes"]["stop"], json!(["ingest/orders"]), "{body}");
    assert_eq!(body["changes"]["restart"], json!(["webhook/pay"]), "{body}");
    assert_eq!(
        body["needs_restart"],
        json!(["connector.http.listen"]),
        "{body}"
    );

    // Nothing changed: the same revision runs, the answer of a dry run is not kept.
    assert_eq!(daemon.status()["config"]["revision"], json!(1));
    let revisions = daemon.get("/api/config/revisions", Some(ADMIN)).json();
    assert_eq!(revisions["revisions"].as_array().map(Vec::len), Some(1));
}

#[test]
fn a_bad_config_is_answered_with_every_problem_and_its_path() {
    let daemon = Daemon::start(config());
    let mut bad: Value = serde_saphyr::from_str(&running_text(&daemon)).expect("YAML");
    bad["ingest"]["sources"][0]["token"] = json!("");
    bad["devices"] = json!([{"name": "press", "protocol": "modbus_tcp", "host": "127.0.0.1",
        "points": [{"name": "a", "register": 70000, "type": "u16"}]}]);
    let reply = daemon.post(
        "/api/config?dry_run=1",
        Some(ADMIN),
        to_yaml(&bad).as_bytes(),
    );
    assert_eq!(reply.status, 400, "{}", reply.body);
    let body = reply.json();
    assert_eq!(body["ok"], json!(false));
    let paths: Vec<&str> = body["problems"]
        .as_array()
        .expect("problems")
        .iter()
        .filter_map(|p| p["path"].as_str())
        .collect();
    assert!(paths.contains(&"ingest.sources[0].token"), "{body}");
    assert!(paths.contains(&"devices[0].points[0].register"), "{body}");

    for (body, what) in [
        (&b"connector: [1, 2"[..], "not YAML"),
        (&b"\xff\xfe"[..], "not UTF-8"),
    ] {
        let reply = daemon.post("/api/config?dry_run=1", Some(ADMIN), body);
        assert_eq!(reply.status, 400, "{what}: {}", reply.body);
        assert!(
            reply.json()["error"].as_str().is_some(),
            "{what}: {}",
            reply.body
        );
    }
    // A body over 4 MiB is refused on its declared length, before it is read.
    let mut conn =
        std::net::TcpStream::connect(daemon.base().trim_start_matches("http://")).expect("connect");
    let head = format!(
        "POST /api/config?dry_run=1 HTTP/1.1\r\nHost: localhost\r\nAuthorization: Bearer {ADMIN}\r\nContent-Length: {}\r\n\r\n",
        5 << 20
    );
    conn.write_all(head.as_bytes()).expect("send the head");
    let mut answer = String::new();
    let _ = conn.read_to_string(&mut answer);
    assert!(answer.starts_with("HTTP/1.1 413"), "{answer}");
    assert!(answer.contains("4096 KiB"), "{answer}");
    assert_eq!(daemon.post("/api/config?dry_run=1", None, b"").status, 401);
    assert_eq!(daemon.status()["config"]["revision"], json!(1));
}

/// Push queue and storage, the orders source wired to `push` only by a flow.
fn flow_config() -> Value {
    let mut c = config();
    c["connector"]["push_queue"] = json!({"enabled": true, "max_quota_mb": 16});
    c["storage"] = json!({"max_quota_mb": 16});
    c["flows"] = ingest_flow(&["push"]);
    c
}

fn rows(daemon: &Daemon) -> u64 {
    u64_at(&daemon.status(), "/push_queue/rows")
}

#[test]
fn a_new_flow_plan_is_applied_at_once_kept_as_the_next_revision_and_in_the_file() {
    let mut daemon = Daemon::start(flow_config());
    assert_eq!(daemon.ingest("before", "{\"v\": 1}").status, 200);
    assert_eq!(rows(&daemon), 1);
    assert!(events(&daemon, &format!("source=ingest/{SOURCE}")).is_empty());

    let mut new: Value = serde_saphyr::from_str(&running_text(&daemon)).expect("YAML");
    new["flows"] = ingest_flow(&["storage"]);
    let reply = daemon.post("/api/config", Some(ADMIN), to_yaml(&new).as_bytes());
    assert_eq!(reply.status, 200, "{}", reply.body);
    let body = reply.json();
    assert_eq!(body["revision"], json!(2), "{body}");
    assert_eq!(body["changes"]["restart"], json!(["flows"]), "{body}");

    // The next record goes by the new plan: to storage, not to the push queue.
    assert_eq!(daemon.ingest("after", "{\"v\": 2}").status, 200);
    assert_eq!(rows(&daemon), 1);
    let stored = events(&daemon, &format!("source=ingest/{SOURCE}"));
    assert_eq!(stored.len(), 1, "{stored:?}");
    let status = daemon.status();
    assert_eq!(status["config"]["revision"], json!(2));
    assert_eq!(status["config"]["reloads"], json!(1));
    assert!(status["config"]["last_error"].is_null());
    let revisions = daemon.get("/api/config/revisions", Some(ADMIN)).json();
    assert_eq!(
        revisions["revisions"][0]["origin"],
        json!("api"),
        "{revisions}"
    );
    assert_eq!(
        revisions["revisions"][0]["by"],
        json!("admin"),
        "{revisions}"
    );
    assert!(
        running_text(&daemon).contains("to-storage"),
        "the file given to run holds it"
    );

    // A restart comes back with it, as the same revision.
    daemon.stop();
    daemon.restart();
    assert_eq!(daemon.status()["config"]["revision"], json!(2));
    assert_eq!(daemon.ingest("restarted", "{\"v\": 3}").status, 200);
    assert_eq!(events(&daemon, &format!("source=ingest/{SOURCE}")).len(), 2);
}

#[test]
fn a_config_the_file_given_to_run_cannot_take_is_refused_before_anything_changes() {
    let daemon = Daemon::start(flow_config());
    // A folder where the new file is written first: the write fails as on a full disk.
    let mut blocked = daemon.config_path().as_os_str().to_owned();
    blocked.push(".tmp");
    std::fs::create_dir(&blocked).expect("a folder in the way");
    let mut new: Value = serde_saphyr::from_str(&running_text(&daemon)).expect("YAML");
    new["flows"] = ingest_flow(&["storage"]);
    new["storage"]["max_quota_mb"] = json!(24);
    let reply = daemon.post("/api/config", Some(ADMIN), to_yaml(&new).as_bytes());
    assert_eq!(reply.status, 500, "{}", reply.body);
    let error = reply.json()["error"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    assert!(
        error.contains(".tmp") || error.contains("create"),
        "{error}"
    );
    // Nothing changed: the old plan, the old storage, the old file.
    assert_eq!(daemon.ingest("refused", "{\"v\": 1}").status, 200);
    assert_eq!(rows(&daemon), 1);
    let status = daemon.status();
    assert_eq!(status["config"]["revision"], json!(1));
    assert!(status["config"]["last_error"].is_string(), "{status}");
    assert!(!running_text(&daemon).contains("to-storage"));

    std::fs::remove_dir(&blocked).expect("the folder out of the way");
    let reply = daemon.post("/api/config", Some(ADMIN), to_yaml(&new).as_bytes());
    assert_eq!(reply.status, 200, "{}", reply.body);
    assert!(running_text(&daemon).contains("to-storage"));
}

#[test]
fn a_config_file_that_cannot_be_replaced_is_a_problem_until_an_apply_writes_it() {
    let daemon = Daemon::start(flow_config());
    let path = daemon.config_path();
    let text = running_text(&daemon);
    // The file's place taken by a folder with something in it, as a file mounted alone into a
    // container: the new file is written beside it, but cannot be renamed over it.
    std::fs::remove_file(path).expect("the file out of its place");
    std::fs::create_dir(path).expect("a folder in its place");
    std::fs::write(path.join("inside"), b"x").expect("a file in the folder");
    let mut new: Value = serde_saphyr::from_str(&text).expect("YAML");
    new["flows"] = ingest_flow(&["storage"]);
    let reply = daemon.post("/api/config", Some(ADMIN), to_yaml(&new).as_bytes());
    assert_eq!(reply.status, 200, "{}", reply.body);
    // It runs, and the status says the file does not hold it.
    assert_eq!(daemon.ingest("after", "{\"v\": 1}").status, 200);
    assert_eq!(events(&daemon, &format!("source=ingest/{SOURCE}")).len(), 1);
    let status = daemon.status();
    assert_eq!(status["config"]["revision"], json!(2), "{status}");
    assert!(status["config"]["last_error"].is_null(), "{status}");
    let error = status["config"]["file_error"].as_str().unwrap_or_default();
    assert!(error.contains("rename"), "{status}");
    let problem = status["problems"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|p| p["kind"] == "config_not_saved")
        .unwrap_or_else(|| panic!("no config_not_saved problem: {status}"));
    assert_eq!(problem["component"], json!("config"), "{problem}");
    assert!(
        problem["message"]
            .as_str()
            .is_some_and(|m| m.contains("revision 2") && m.contains("restart")),
        "{problem}"
    );
    assert_eq!(status["state"], json!("degraded"), "{status}");

    // The folder gone, the next apply writes the file, and the problem clears.
    std::fs::remove_dir_all(path).expect("the folder out of the way");
    new["storage"]["max_quota_mb"] = json!(24);
    let reply = daemon.post("/api/config", Some(ADMIN), to_yaml(&new).as_bytes());
    assert_eq!(reply.status, 200, "{}", reply.body);
    assert!(running_text(&daemon).contains("to-storage"));
    let status = daemon.status();
    assert!(status["config"]["file_error"].is_null(), "{status}");
    assert!(
        !status["problems"].to_string().contains("config_not_saved"),
        "{status}"
    );
}

#[test]
fn if_match_refuses_a_change_made_on_top_of_another_revision() {
    let daemon = Daemon::start(flow_config());
    let mut new: Value = serde_saphyr::from_str(&running_text(&daemon)).expect("YAML");
    new["flows"] = ingest_flow(&["push", "storage"]);
    let text = to_yaml(&new);
    let stale = daemon.request(
        "POST",
        "/api/config",
        Some(ADMIN),
        &[("If-Match", "7")],
        Some(text.as_bytes()),
    );
    assert_eq!(stale.status, 412, "{}", stale.body);
    assert_eq!(stale.json()["revision"], json!(1));
    let bad = daemon.request(
        "POST",
        "/api/config",
        Some(ADMIN),
        &[("If-Match", "seven")],
        Some(text.as_bytes()),
    );
    assert_eq!(bad.status, 400, "{}", bad.body);
    assert_eq!(daemon.status()["config"]["revision"], json!(1));
    let fresh = daemon.request(
        "POST",
        "/api/config",
        Some(ADMIN),
        &[("If-Match", "\"1\"")],
        Some(text.as_bytes()),
    );
    assert_eq!(fresh.status, 200, "{}", fresh.body);
    assert_eq!(daemon.status()["config"]["revision"], json!(2));
}

#[test]
fn a_change_this_version_cannot_make_live_is_refused_with_its_parts_and_nothing_changes() {
    let daemon = Daemon::start(flow_config());
    let mut new: Value = serde_saphyr::from_str(&running_text(&daemon)).expect("YAML");
    new["connector"]["name"] = json!("renamed");
    new["flows"] = ingest_flow(&["storage"]);
    new["connector"]["http"]["listen"] = json!("127.0.0.1:1");
    let reply = daemon.post("/api/config", Some(ADMIN), to_yaml(&new).as_bytes());
    assert_eq!(reply.status, 409, "{}", reply.body);
    let body = reply.json();
    assert_eq!(body["not_live"], json!(["connector"]), "{body}");
    // The answer has the fields of every config answer (the OpenAPI document's ConfigDiff).
    assert_eq!(body["dry_run"], json!(false), "{body}");
    assert_eq!(body["hash"].as_str().map(str::len), Some(64), "{body}");
    assert_eq!(
        body["needs_restart"],
        json!(["connector.http.listen"]),
        "{body}"
    );
    let error = body["error"].as_str().expect("error");
    assert!(
        error.contains("nothing was changed") && error.contains("connector"),
        "{error}"
    );

    // Nothing changed: the old name, the old flow, the same revision; the refusal is the
    // last error.
    assert_eq!(daemon.ingest("k-1", "{\"v\": 1}").status, 200);
    assert_eq!(rows(&daemon), 1);
    let status = daemon.status();
    assert_eq!(status["config"]["revision"], json!(1));
    assert_eq!(status["config"]["reloads"], json!(0));
    assert!(status["config"]["last_error"]
        .as_str()
        .is_some_and(|e| e.contains("connector")));
    assert!(!running_text(&daemon).contains("renamed"));

    // A bad config is refused whole by the apply too.
    new = serde_saphyr::from_str(&running_text(&daemon)).expect("YAML");
    new["flows"] = json!([{"id": "out", "nodes": [{"id": "in", "kind": "source", "source": "ingest/nope"}], "wires": []}]);
    let reply = daemon.post("/api/config", Some(ADMIN), to_yaml(&new).as_bytes());
    assert_eq!(reply.status, 400, "{}", reply.body);
    assert_eq!(daemon.status()["config"]["revision"], json!(1));
}

#[test]
fn sighup_applies_the_file_again_and_a_bad_file_changes_nothing() {
    let daemon = Daemon::start(flow_config());
    let hup = || {
        let sent = std::process::Command::new("kill")
            .args(["-HUP", &daemon.pid().to_string()])
            .status()
            .expect("kill -HUP");
        assert!(sent.success());
    };
    let mut new: Value = serde_saphyr::from_str(&running_text(&daemon)).expect("YAML");
    new["flows"] = ingest_flow(&["storage"]);
    std::fs::write(daemon.config_path(), to_yaml(&new)).expect("write");
    hup();
    wait_until(std::time::Duration::from_secs(10), "the reload", || {
        daemon.status()["config"]["revision"] == json!(2)
    });
    let revisions = daemon.get("/api/config/revisions", Some(ADMIN)).json();
    assert_eq!(
        revisions["revisions"][0]["origin"],
        json!("sighup"),
        "{revisions}"
    );
    assert_eq!(daemon.ingest("k-1", "{\"v\": 1}").status, 200);
    assert_eq!(events(&daemon, &format!("source=ingest/{SOURCE}")).len(), 1);

    std::fs::write(daemon.config_path(), "connector: [not, a, mapping").expect("write");
    hup();
    wait_until(std::time::Duration::from_secs(10), "the refusal", || {
        daemon.status()["config"]["last_error"].is_string()
    });
    assert_eq!(daemon.status()["config"]["revision"], json!(2));
    assert_eq!(daemon.ingest("k-2", "{\"v\": 2}").status, 200);
    assert_eq!(events(&daemon, &format!("source=ingest/{SOURCE}")).len(), 2);
}

#[test]
fn a_kept_revision_is_rolled_back_to_as_the_next_revision() {
    let daemon = Daemon::start(flow_config());
    let first = daemon.get("/api/config", Some(ADMIN)).json();
    let mut new: Value = serde_saphyr::from_str(&running_text(&daemon)).expect("YAML");
    new["flows"] = ingest_flow(&["storage"]);
    let reply = daemon.post("/api/config", Some(ADMIN), to_yaml(&new).as_bytes());
    assert_eq!(reply.status, 200, "{}", reply.body);

    // Not kept, or made on top of another revision: refused, nothing changed.
    let missing = daemon.post("/api/config/rollback/9", Some(ADMIN), b"");
    assert_eq!(missing.status, 404, "{}", missing.body);
    assert!(
        missing.body.contains("revision 9 is not kept"),
        "{}",
        missing.body
    );
    let stale = daemon.request(
        "POST",
        "/api/config/rollback/1",
        Some(ADMIN),
        &[("If-Match", "1")],
        None,
    );
    assert_eq!(stale.status, 412, "{}", stale.body);
    assert_eq!(
        daemon.get("/api/config/rollback/1", Some(ADMIN)).status,
        405
    );
    assert_eq!(daemon.post("/api/config/rollback/1", None, b"").status, 401);
    assert_eq!(daemon.status()["config"]["revision"], json!(2));

    let back = daemon.request(
        "POST",
        "/api/config/rollback/1",
        Some(ADMIN),
        &[("If-Match", "2")],
        None,
    );
    assert_eq!(back.status, 200, "{}", back.body);
    let body = back.json();
    assert_eq!(body["revision"], json!(3), "the next revision: {body}");
    assert_eq!(body["hash"], first["hash"], "revision 1's text: {body}");
    assert_eq!(body["changes"]["restart"], json!(["flows"]), "{body}");
    // The first plan again: to the push queue.
    assert_eq!(daemon.ingest("after", "{\"v\": 1}").status, 200);
    assert_eq!(rows(&daemon), 1);
    assert!(events(&daemon, &format!("source=ingest/{SOURCE}")).is_empty());
    let shown = daemon.get("/api/config", Some(ADMIN)).json();
    assert_eq!(shown["config"], first["config"]);
    assert!(
        !running_text(&daemon).contains("to-storage"),
        "the file holds it"
    );
    let list = daemon.get("/api/config/revisions", Some(ADMIN)).json();
    assert_eq!(
        list["revisions"].as_array().map(Vec::len),
        Some(3),
        "{list}"
    );
}

#[test]
fn the_reload_command_asks_the_daemon_to_apply_its_file() {
    let mut config = flow_config();
    let port = free_port();
    config["connector"]["http"]["listen"] = json!(format!("127.0.0.1:{port}"));
    let daemon = Daemon::start(config);
    let file = daemon.config_path();
    let file = file.to_str().expect("a UTF-8 path");
    let reload = || run_cli(&["reload", "--config", file]);

    let mut new: Value = serde_saphyr::from_str(&running_text(&daemon)).expect("YAML");
    new["flows"] = ingest_flow(&["storage"]);
    std::fs::write(file, to_yaml(&new)).expect("write");
    let applied = reload();
    let stdout = String::from_utf8_lossy(&applied.stdout);
    assert!(
        applied.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&applied.stderr)
    );
    assert!(stdout.starts_with("applied: revision 2 "), "{stdout}");
    assert!(stdout.contains("restart: flows"), "{stdout}");
    assert_eq!(daemon.status()["config"]["revision"], json!(2));

    // --drain and --discard together: a wrong command line, nothing sent.
    let both = run_cli(&["reload", "--config", file, "--drain", "--discard"]);
    let stderr = String::from_utf8_lossy(&both.stderr);
    assert_eq!(both.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("exclude each other"), "{stderr}");
    // With --discard, the same file applies again (nothing to give up): revision 3.
    let again = run_cli(&["reload", "--config", file, "--discard"]);
    let stdout = String::from_utf8_lossy(&again.stdout);
    assert!(stdout.starts_with("applied: revision 3 "), "{stdout}");

    // A change this version cannot make live: the daemon's reason, exit 1.
    new["connector"]["name"] = json!("renamed");
    std::fs::write(file, to_yaml(&new)).expect("write");
    let refused = reload();
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert_eq!(refused.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains(" 409 nothing was changed"), "{stderr}");
    assert!(stderr.contains("connector"), "{stderr}");

    // A file with problems: each with its path, nothing sent.
    std::fs::write(file, "connector:\n  colour: blue\n").expect("write");
    let invalid = reload();
    let stderr = String::from_utf8_lossy(&invalid.stderr);
    assert_eq!(invalid.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("connector.colour: unknown key"), "{stderr}");
    assert!(stderr.contains("nothing was sent"), "{stderr}");
    let status = daemon.status();
    assert_eq!(status["config"]["revision"], json!(3));
    assert_eq!(status["config"]["reloads"], json!(2));
}

#[test]
fn the_reload_command_without_an_admin_api_says_to_send_sighup() {
    let mut config = config();
    config["connector"]["http"]["admin_token"] = Value::Null;
    config["connector"]["http"]["listen"] = json!("127.0.0.1:8080");
    let dir = tempfile::tempdir().expect("tmp");
    config["connector"]["data_dir"] = json!(dir.path().join("data"));
    let file = dir.path().join("config.yaml");
    std::fs::write(&file, to_yaml(&config)).expect("write");
    let out = run_cli(&["reload", "--config", file.to_str().expect("UTF-8")]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("admin_token is not set"), "{stderr}");
    assert!(stderr.contains("SIGHUP"), "{stderr}");
}

#[test]
fn new_http_settings_and_limits_hold_from_the_next_request_and_max_connections_needs_a_restart() {
    const NEW_ADMIN: &str = "new-admin-t0ken-0123456";
    let daemon = Daemon::start(config());
    let mut new: Value = serde_saphyr::from_str(&running_text(&daemon)).expect("YAML");
    new["connector"]["http"]["admin_token"] = json!(NEW_ADMIN);
    new["connector"]["http"]["max_body_kb"] = json!(1);
    new["ingest"]["max_batch_records"] = json!(2);
    new["dead_letters"] = json!({"max_rows": 5});
    let reply = daemon.post("/api/config", Some(ADMIN), to_yaml(&new).as_bytes());
    assert_eq!(reply.status, 200, "{}", reply.body);
    assert_eq!(
        reply.json()["changes"]["restart"],
        json!(["dead_letters", "http", "ingest", format!("ingest/{SOURCE}")])
    );
    // The ingest source, restarted with its section, takes its new batch limit; the
    // dead-letter queue its new cap.
    let lines = "{\"id\":\"a\",\"payload\":1}\n{\"id\":\"b\",\"payload\":2}\n{\"id\":\"c\",\"payload\":3}\n";
    let batch = daemon.ingest_batch("", "application/x-ndjson", lines.as_bytes());
    assert_eq!(batch.status, 413, "{}", batch.body);
    assert!(batch.body.contains("max_batch_records"), "{}", batch.body);
    let status = daemon.status();
    let dlq = status["queues"]
        .as_array()
        .and_then(|q| q.iter().find(|q| q["name"] == "dead_letters"))
        .cloned()
        .unwrap_or_default();
    assert_eq!(dlq["quota"], json!(5), "{status:#}");

    // The old admin token is refused from now on, the new one taken.
    assert_eq!(daemon.get("/api/config", Some(ADMIN)).status, 401);
    assert_eq!(daemon.get("/api/config", Some(NEW_ADMIN)).status, 200);
    // The new body limit holds.
    let big = format!("{{\"pad\": \"{}\"}}", "x".repeat(2048));
    assert_eq!(daemon.ingest("big", &big).status, 413);
    assert_eq!(daemon.ingest("small", "{\"v\": 1}").status, 200);

    // The connection slots need a restart: refused, named, nothing changed.
    let mut slots: Value = serde_saphyr::from_str(&running_text(&daemon)).expect("YAML");
    slots["connector"]["http"]["max_connections"] = json!(16);
    let reply = daemon.post("/api/config", Some(NEW_ADMIN), to_yaml(&slots).as_bytes());
    assert_eq!(reply.status, 409, "{}", reply.body);
    assert_eq!(
        reply.json()["needs_restart"],
        json!(["connector.http.max_connections"])
    );
    assert_eq!(daemon.status()["config"]["revision"], json!(2));
}
