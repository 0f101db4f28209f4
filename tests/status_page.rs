//! The status page (`GET /`) and its live view (`/api/live`) against the real binary.
//!
//! The browser tests run Debian's `chromium` headless (installed by `scripts/test.sh`; skipped,
//! saying so, when it is missing). One drives it over the DevTools protocol against a
//! connector polling its built-in Modbus simulator, polls the DOM the page's script built
//! until the values, the queue and a live message are there, and keeps two screenshots
//! (phone and laptop size) under `CARGO_TARGET_TMPDIR/status_page/`. One clicks Replay on a
//! queue dead letter and sees the test receiver get it, ahead of the rows behind it, and
//! deletes another with its two clicks. One writes a pymodbus device's setpoint and pump from
//! the Commands section (token, confirmation, result per point) and reads them back from the
//! device; another does the same with a python-snap7 S7 PLC's setpoint and one bit of a byte.
//! Another draws a fixture
//! of the status fields other parts add (queues, alerts, schedules, backfills, Sparkplug nodes) with
//! `--dump-dom`. The WebSocket test speaks RFC 6455 by hand over a TCP socket.

mod common;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use common::*;
use serde_json::{json, Value};

/// Longest the page may take to show polled values and a live message.
const BROWSER_DEADLINE: Duration = Duration::from_secs(120);

// ---------------------------------------------------------------- Chromium

fn chromium() -> Option<PathBuf> {
    let fixed = PathBuf::from("/usr/bin/chromium");
    if fixed.exists() {
        return Some(fixed);
    }
    std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|p| p.join("chromium"))
            .find(|p| p.exists())
    })
}

/// Headless, and without the background networking a closed network makes fail.
const CHROMIUM_FLAGS: [&str; 9] = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--hide-scrollbars",
];

/// Runs headless Chromium once on a fresh profile with `args`; returns its stdout.
fn run_chromium(bin: &Path, args: &[String]) -> String {
    let profile = tempfile::tempdir().expect("profile dir");
    let mut cmd = Command::new(bin);
    cmd.args(CHROMIUM_FLAGS)
        .arg(format!("--user-data-dir={}", profile.path().display()))
        .args(args)
        .stdin(Stdio::null())
        .stderr(Stdio::null());
    let out = cmd.output().expect("run chromium");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The text of the element right after `marker` (up to the next tag).
fn text_after<'a>(dom: &'a str, marker: &str) -> Option<&'a str> {
    let at = dom.find(marker)? + marker.len();
    let rest = &dom[at..];
    rest.find('<').map(|end| &rest[..end])
}

/// A `data-NAME="N"` attribute as a number.
fn data_number(dom: &str, name: &str) -> u64 {
    let marker = format!("data-{name}=\"");
    dom.find(&marker)
        .and_then(|at| {
            let rest = &dom[at + marker.len()..];
            rest[..rest.find('"')?].parse().ok()
        })
        .unwrap_or(0)
}

/// What the page must show; the first thing missing, if any.
fn missing_in(dom: &str) -> Option<&'static str> {
    if !dom.contains("data-status-loaded=\"1\"") {
        return Some("the status drawn");
    }
    if text_after(dom, "<h1 id=\"name\">") != Some("line-3") {
        return Some("the connector name");
    }
    let oven = text_after(dom, "data-point=\"plant-1/process.oven_temp\">");
    if oven.is_none_or(|t| t.parse::<f64>().is_err()) {
        return Some("the oven temperature as a number");
    }
    // `scale: 0.1`: one decimal at most, never binary noise.
    let pressure = text_after(dom, "data-point=\"plant-1/process.pressure\">");
    if pressure.is_none_or(|t| {
        t.parse::<f64>().is_err() || t.split('.').nth(1).is_some_and(|d| d.len() > 1)
    }) {
        return Some("the pressure rounded to its scale");
    }
    if text_after(dom, "data-point=\"plant-1/counters.model\">") != Some("OPEX-SIM") {
        return Some("the model string");
    }
    if !dom.contains("data-device=\"plant-1\" data-state=\"connected\"") {
        return Some("the device connected");
    }
    if !dom.contains("data-queue=\"push_queue\" data-level=\"ok\"") {
        return Some("the push queue at level ok");
    }
    if !text_after(dom, "class=\"fill-text\">").is_some_and(|t| t.contains(" % ")) {
        return Some("the queue's fill");
    }
    if data_number(dom, "live-values") < 1 {
        return Some("a value message from the live view");
    }
    let spark = dom
        .find("data-spark=\"point/plant-1/process.oven_temp\"")
        .map(|at| &dom[at..dom.len().min(at + 300)]);
    if spark.is_none_or(|s| data_number(s, "points") < 1) {
        return Some("the oven temperature's sparkline with a bucket");
    }
    None
}

/// A headless Chromium driven over the DevTools protocol (`--remote-debugging-port=0`, a
/// WebSocket spoken by hand below): the page runs in real time, and the test reads its DOM
/// whenever it likes.
struct Browser {
    child: std::process::Child,
    ws: TcpStream,
    next_id: u64,
    _profile: tempfile::TempDir,
}

impl Browser {
    fn start(bin: &Path) -> Browser {
        let profile = tempfile::tempdir().expect("profile dir");
        let mut child = Command::new(bin)
            // Times drawn in UTC, so a screenshot does not depend on the machine's zone.
            .env("TZ", "UTC")
            .args(CHROMIUM_FLAGS)
            .arg(format!("--user-data-dir={}", profile.path().display()))
            .args(["--remote-debugging-port=0", "about:blank"])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start chromium");
        let stderr = child.stderr.take().expect("piped stderr");
        let (tx, rx) = std::sync::mpsc::channel::<String>();
        // Reads the DevTools address, then keeps draining stderr so Chromium never blocks.
        std::thread::spawn(move || {
            use std::io::BufRead;
            for line in std::io::BufReader::new(stderr).lines() {
                let Ok(line) = line else { break };
                if let Some(url) = line.trim().strip_prefix("DevTools listening on ws://") {
                    let _ = tx.send(url.split('/').next().unwrap_or("").to_string());
                }
            }
        });
        let host = rx
            .recv_timeout(Duration::from_secs(60))
            .expect("chromium printed its DevTools address");
        let mut page = None;
        wait_until(Duration::from_secs(30), "chromium's page target", || {
            let Ok(r) = Client::new().get(&format!("http://{host}/json/list"), None) else {
                return false;
            };
            page = r.json().as_array().and_then(|targets| {
                targets
                    .iter()
                    .find(|t| t["type"] == "page")
                    .and_then(|t| t["webSocketDebuggerUrl"].as_str())
                    .map(str::to_string)
            });
            page.is_some()
        });
        let url = page.unwrap_or_default();
        let path = &url[url.find("/devtools/").expect("a DevTools path")..];
        let mut ws = TcpStream::connect(&host).expect("connect to DevTools");
        ws.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
        write!(
            ws,
            "GET {path} HTTP/1.1\r\nHost: {host}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Key: AQIDBAUGBwgJCgsMDQ4PEA==\r\nSec-WebSocket-Version: 13\r\n\r\n"
        )
        .unwrap();
        let head = read_head(&mut ws);
        assert!(head.starts_with("http/1.1 101"), "DevTools said {head}");
        Browser {
            child,
            ws,
            next_id: 0,
            _profile: profile,
        }
    }

    /// Calls a DevTools method and returns its result (events in between are skipped).
    fn call(&mut self, method: &str, params: Value) -> Value {
        self.next_id += 1;
        let id = self.next_id;
        let msg = json!({"id": id, "method": method, "params": params}).to_string();
        self.ws.write_all(&client_frame(1, msg.as_bytes())).unwrap();
        loop {
            let mut payload = Vec::new();
            loop {
                let (fin, _, part) = read_frame_parts(&mut self.ws);
                payload.extend(part);
                if fin {
                    break;
                }
            }
            let Ok(m) = serde_json::from_slice::<Value>(&payload) else {
                continue;
            };
            if m["id"] == id {
                assert!(m.get("error").is_none(), "{method}: {m}");
                return m["result"].clone();
            }
        }
    }

    /// Runs `expression` in the page; its value.
    fn eval(&mut self, expression: &str) -> Value {
        let r = self.call(
            "Runtime.evaluate",
            json!({"expression": expression, "returnByValue": true}),
        );
        r["result"]["value"].clone()
    }

    /// The page's DOM as HTML.
    fn dom(&mut self) -> String {
        let v = self.eval("document.documentElement.outerHTML");
        v.as_str().unwrap_or("").to_string()
    }

    /// Clicks the element with `id`, then waits until the admin panel says `starting`.
    fn click_until_said(&mut self, id: &str, starting: &str) {
        self.click_selector_until_said(&format!("#{id}"), starting);
    }

    /// Clicks the first element matching the CSS `selector`, then waits until the admin panel
    /// says `starting`.
    fn click_selector_until_said(&mut self, selector: &str, starting: &str) {
        self.click(selector);
        let mut said = Value::Null;
        let ok = poll_until(Duration::from_secs(20), || {
            said = self.eval("document.getElementById('dlq-msg').textContent");
            said.as_str().is_some_and(|t| t.starts_with(starting))
        });
        assert!(
            ok,
            "after clicking {selector} the page says {said}, not {starting:?}"
        );
    }

    /// Types `token` into the admin token field and submits it.
    fn enter_token(&mut self, token: &str) {
        self.eval(&format!(
            "document.getElementById('token').value = {}; document.getElementById('token-form').requestSubmit()",
            json!(token)
        ));
    }

    /// A PNG of the page drawn `width` x `height` CSS pixels.
    fn screenshot(&mut self, width: u32, height: u32, mobile: bool) -> Vec<u8> {
        self.call(
            "Emulation.setDeviceMetricsOverride",
            json!({"width": width, "height": height, "deviceScaleFactor": 1, "mobile": mobile}),
        );
        let r = self.call("Page.captureScreenshot", json!({"format": "png"}));
        use base64::Engine as _;
        base64::engine::general_purpose::STANDARD
            .decode(r["data"].as_str().unwrap_or(""))
            .expect("base64 PNG")
    }
}

impl Drop for Browser {
    fn drop(&mut self) {
        // Closed politely, Chromium ends its helper processes too; killed only if it hangs.
        let close = json!({"id": 0, "method": "Browser.close"}).to_string();
        let _ = self.ws.write_all(&client_frame(1, close.as_bytes()));
        if !poll_until(Duration::from_secs(10), || {
            matches!(self.child.try_wait(), Ok(Some(_)))
        }) {
            let _ = self.child.kill();
        }
        let _ = self.child.wait();
    }
}

#[test]
fn the_status_page_shows_device_values_and_queue_levels_in_chromium_live_values_arrive_and_the_admin_token_stays_in_the_tab(
) {
    let Some(bin) = chromium() else {
        println!("SKIPPED: chromium is not installed (scripts/test.sh installs Debian's chromium)");
        return;
    };
    let port = free_port();
    let daemon = Daemon::start(plant_config(port));
    wait_until(Duration::from_secs(20), "the simulator polled", || {
        daemon.status()["devices"][0]["polls_total"]
            .as_u64()
            .unwrap_or(0)
            >= 2
    });
    let mut browser = Browser::start(&bin);
    browser.call("Page.navigate", json!({"url": daemon.url("/")}));
    let mut dom = String::new();
    let mut missing = None;
    let shown = poll_until(BROWSER_DEADLINE, || {
        dom = browser.dom();
        missing = missing_in(&dom);
        missing.is_none()
    });
    assert!(
        shown,
        "the page still lacks {}; its DOM:\n{}",
        missing.unwrap_or("?"),
        truncate(&dom, 6000)
    );
    assert!(data_number(&dom, "live-count") >= 1, "{dom}");
    assert!(
        dom.contains("<span id=\"live-state\" class=\"badge ok\">live</span>"),
        "{dom}"
    );
    assert!(!dom.contains(TOKEN), "the page shows a token");

    // The connector counted what it published to the page.
    let status = daemon.status();
    assert!(u64_at(&status, "/live/published_total") >= 1, "{status}");
    assert_eq!(u64_at(&status, "/live/clients"), 1, "{status}");
    assert!(status["connector"]["disk_free_bytes"].as_u64().unwrap_or(0) > 0);
    let metrics = daemon.metrics();
    assert!(metric(&metrics, "opex_connector_live_skipped_total").is_some());

    // Screenshots at a phone's and a laptop's size, kept with the test's output.
    let out = Path::new(env!("CARGO_TARGET_TMPDIR")).join("status_page");
    std::fs::create_dir_all(&out).expect("screenshot dir");
    for (name, width, height, mobile) in [("phone", 390, 1500, true), ("laptop", 1280, 1000, false)]
    {
        let png = browser.screenshot(width, height, mobile);
        assert!(
            png.starts_with(b"\x89PNG") && png.len() > 10_000,
            "{name}: {} bytes",
            png.len()
        );
        let path = out.join(format!("status-page-{name}.png"));
        std::fs::write(&path, png).expect("write screenshot");
        println!("screenshot: {}", path.display());
    }

    // The dead letters' panel asks for the admin token, keeps it in the tab's session
    // storage only, and uses it for the admin endpoints.
    browser.click_until_said("dlq-open", "enter the admin token first");
    browser.enter_token("not-the-token");
    browser.click_until_said("dlq-open", "the admin token is wrong");
    browser.enter_token(ADMIN_TOKEN);
    browser.click_until_said("dlq-open", "0 open dead letters");
    browser.click_until_said("queue-dlq-open", "0 of 0 queue dead letters");
    assert_eq!(
        browser.eval("sessionStorage.getItem('opex-admin-token')"),
        json!(ADMIN_TOKEN)
    );
    assert_eq!(
        browser.eval("document.getElementById('token').value"),
        json!("")
    );
    let dom = browser.dom();
    assert!(!dom.contains(ADMIN_TOKEN), "the page shows the admin token");
    browser.click_until_said("token-forget", "admin token forgotten");
    assert_eq!(
        browser.eval("sessionStorage.getItem('opex-admin-token')"),
        Value::Null
    );
}

#[test]
fn clicking_replay_on_a_queue_dead_letter_delivers_it_ahead_of_the_rows_behind_it_and_delete_takes_two_clicks(
) {
    let Some(bin) = chromium() else {
        println!("SKIPPED: chromium is not installed (scripts/test.sh installs Debian's chromium)");
        return;
    };
    let receiver = Receiver::start();
    receiver.reject_payloads_containing("POISON-PILL");
    let mut config = queue_config(8, "block");
    config["connector"]["http"]["admin_token"] = json!(ADMIN_TOKEN);
    config["connector"]["push"] = json!({
        "url": receiver.url(), "batch_rows": 10, "retry_initial_ms": 50, "retry_max_ms": 300,
    });
    let daemon = Daemon::start(config);
    let post =
        |key: &str, payload: Value| assert_stored(&daemon.ingest(key, &payload.to_string()), key);
    let dead_rows = |n: u64| {
        wait_until(POLL_DEADLINE, &format!("{n} push dead letters"), || {
            u64_at(&daemon.status(), "/uplink/dead_letter_rows") == n
        })
    };
    let bad = post("bad", json!({"note": "POISON-PILL <b>not markup</b>"}));
    dead_rows(1);
    receiver.down();
    let behind = vec![post("k1", json!({"n": 1})), post("k2", json!({"n": 2}))];
    wait_until(POLL_DEADLINE, "two rows queued behind it", || {
        u64_at(&daemon.status(), "/push_queue/rows") == 2
    });
    receiver.reject_payloads_containing("NO-RECORD-CARRIES-THIS");

    let mut browser = Browser::start(&bin);
    browser.call("Page.navigate", json!({"url": daemon.url("/")}));
    wait_until(BROWSER_DEADLINE, "the page drew the status", || {
        browser.dom().contains("data-status-loaded=\"1\"")
    });
    browser.enter_token(ADMIN_TOKEN);
    browser.click_until_said("queue-dlq-open", "1 of 1 queue dead letters");
    let dom = browser.dom();
    assert!(dom.contains("data-dead-letter=\"push/0\""), "{dom}");
    assert!(dom.contains("HTTP 400"), "the reason is shown: {dom}");
    assert!(
        dom.contains("&lt;b&gt;not markup"),
        "the record is shown as text: {dom}"
    );
    let out = Path::new(env!("CARGO_TARGET_TMPDIR")).join("status_page");
    std::fs::create_dir_all(&out).expect("screenshot dir");
    let png = browser.screenshot(1280, 1400, false);
    let shot = out.join("status-page-queue-dead-letters.png");
    std::fs::write(&shot, png).expect("write screenshot");
    println!("screenshot: {}", shot.display());
    browser.click_selector_until_said(
        "[data-dead-letter=\"push/0\"] button",
        "push dead letter 0 replayed",
    );
    receiver.up();
    let mut all = vec![bad.clone()];
    all.extend(behind);
    wait_until(
        POLL_DEADLINE,
        "the replayed record and the rows behind it delivered",
        || receiver.has_all(&all),
    );
    let order: Vec<String> = receiver
        .first_arrivals()
        .into_iter()
        .filter(|id| all.contains(id))
        .collect();
    assert_eq!(order, all, "the replayed record first");

    // Delete: the first click only arms the button.
    receiver.reject_payloads_containing("POISON-PILL");
    post("bad2", json!({"note": "POISON-PILL"}));
    dead_rows(1);
    browser.click_until_said("queue-dlq-open", "1 of 1 queue dead letters");
    let delete = "[data-dead-letter=\"push/1\"] button.danger";
    browser.click_selector_until_said(delete, "1 of 1 queue dead letters");
    assert_eq!(
        browser.eval(&format!(
            "document.querySelector({}).textContent",
            json!(delete)
        )),
        json!("Confirm delete")
    );
    browser.click_selector_until_said(delete, "push dead letter 1 deleted · 0 of 0");
    let l = assert_balanced(&ledger(&daemon, true), "after replay and delete");
    assert_eq!(
        source_figure(&l, &format!("ingest/{SOURCE}"), "/dead_lettered"),
        1
    );
    assert_eq!(
        source_figure(&l, &format!("ingest/{SOURCE}"), "/delivered"),
        3
    );
}

/// The commands token of the write test.
const COMMANDS_TOKEN: &str = "cmd-t0ken-page-0123456";

/// A pymodbus device with a writable setpoint (holding register 50, u16, 0.1 units, 0 to
/// 200) and pump (coil 3), and the commands token.
fn writable_config(port: u16) -> Value {
    json!({
        "connector": {"name": "line-3", "push_queue": {"enabled": true, "max_quota_mb": 16}},
        "ingest": {"sources": [{"name": SOURCE, "token": TOKEN}]},
        "commands": {"token": COMMANDS_TOKEN},
        "devices": [{
            "name": "oven",
            "protocol": "modbus_tcp",
            "host": "127.0.0.1",
            "port": port,
            "timeout_ms": 1000,
            "groups": [{"name": "process", "interval_ms": 250}],
            "points": [
                {"name": "temp", "group": "process", "register": 6, "type": "f32"},
                {"name": "setpoint", "group": "process", "register": 50, "type": "u16",
                 "scale": 0.1, "writable": true, "min": 0, "max": 200},
                {"name": "pump", "group": "process", "register": 3, "kind": "coil", "writable": true},
            ],
        }],
    })
}

/// Holding register 50 and coil 3 of the device, read by the test itself.
fn read_setpoint_and_pump(port: u16) -> (u16, bool) {
    use tokio_modbus::client::Reader;
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    rt.block_on(async {
        let sock = format!("127.0.0.1:{port}").parse().unwrap();
        let mut ctx = tokio_modbus::client::tcp::connect_slave(sock, tokio_modbus::Slave(1))
            .await
            .expect("connect");
        let r = ctx.read_holding_registers(50, 1).await.unwrap().unwrap();
        let c = ctx.read_coils(3, 1).await.unwrap().unwrap();
        (r[0], c[0])
    })
}

impl Browser {
    /// Waits until `expression` is `want`; panics with what it was.
    fn wait_for(&mut self, expression: &str, want: &Value) {
        let mut got = Value::Null;
        let ok = poll_until(Duration::from_secs(30), || {
            got = self.eval(expression);
            got == *want
        });
        assert!(ok, "{expression} is {got}, not {want}");
    }

    /// Clicks the first element matching `selector`.
    fn click(&mut self, selector: &str) {
        let clicked = self.eval(&format!(
            "(function () {{ var e = document.querySelector({}); if (!e) return false; e.click(); return true; }})()",
            json!(selector)
        ));
        assert_eq!(
            clicked,
            json!(true),
            "nothing on the page matches {selector}"
        );
    }

    /// The text of the first element matching `selector` (null when there is none).
    fn text(&mut self, selector: &str) -> Value {
        self.eval(&format!(
            "(function () {{ var e = document.querySelector({}); return e ? e.textContent : null; }})()",
            json!(selector)
        ))
    }

    /// Submits `token` in the Commands section's token form.
    fn submit_commands_token(&mut self, token: &str) {
        self.eval(&format!(
            "document.getElementById('cmd-token').value = {}; document.getElementById('cmd-token-form').requestSubmit()",
            json!(token)
        ));
    }

    /// Enters `value` in the form of `point` (`device/point`), clicks Write, checks that the
    /// page asks to confirm that value, confirms, and waits for the point's result to be
    /// `outcome`.
    fn write_confirmed(&mut self, point: &str, value: &str, outcome: &str) {
        self.eval(&format!(
            "document.querySelector('[data-value=\"{point}\"]').value = {}",
            json!(value)
        ));
        self.click(&format!("[data-write=\"{point}\"]"));
        assert_eq!(
            self.text(".confirm"),
            json!(format!("Write {value} to {point}?"))
        );
        self.click(&format!("[data-confirm=\"{point}\"]"));
        self.wait_for(
            &format!("document.querySelector('[data-result=\"{point}\"]').dataset.outcome"),
            &json!(outcome),
        );
    }
}

#[test]
fn the_page_lists_writable_points_and_with_the_commands_token_writes_a_value_after_a_confirmation()
{
    let Some(bin) = chromium() else {
        println!("SKIPPED: chromium is not installed (scripts/test.sh installs Debian's chromium)");
        return;
    };
    let device = ModbusTcp::start();
    let port = device.port();
    let daemon = Daemon::start(writable_config(port));
    let mut browser = Browser::start(&bin);
    browser.call("Page.navigate", json!({"url": daemon.url("/")}));

    // Without the token: the points, their types and ranges, and no way to write.
    browser.wait_for(
        "document.getElementById('sec-commands').hidden",
        &json!(false),
    );
    let dom = browser.dom();
    assert!(dom.contains("data-commands=\"oven\""), "{dom}");
    assert!(
        dom.contains("u16 (holding_register)") && dom.contains("0 … 200"),
        "{dom}"
    );
    assert!(dom.contains("bool (coil)"), "{dom}");
    assert!(dom.contains("Enter the commands token to write."), "{dom}");
    assert!(
        !dom.contains("data-write="),
        "a write form without the token: {dom}"
    );

    // With it: a form per point. The first click asks, Cancel writes nothing.
    browser.submit_commands_token(COMMANDS_TOKEN);
    browser.wait_for(
        "document.querySelectorAll('[data-write]').length",
        &json!(2),
    );
    browser.eval("document.querySelector('[data-value=\"oven/setpoint\"]').value = '72.5'");
    browser.click("[data-write=\"oven/setpoint\"]");
    assert_eq!(
        browser.text(".confirm"),
        json!("Write 72.5 to oven/setpoint?")
    );
    browser.click("[data-cancel=\"oven/setpoint\"]");
    browser.wait_for(
        "document.getElementById('cmd-msg').textContent",
        &json!("write to oven/setpoint cancelled"),
    );
    assert_eq!(read_setpoint_and_pump(port).0, 0, "nothing written");

    // Confirmed: written, and the result shows per point.
    browser.click("[data-write=\"oven/setpoint\"]");
    browser.click("[data-confirm=\"oven/setpoint\"]");
    browser.wait_for(
        "document.querySelector('[data-result=\"oven/setpoint\"]').dataset.outcome",
        &json!("written"),
    );
    assert_eq!(read_setpoint_and_pump(port).0, 725);
    // The pump, from its on/off choice.
    browser.write_confirmed("oven/pump", "true", "written");
    assert_eq!(read_setpoint_and_pump(port), (725, true));
    // A value past max: its result, and nothing sent.
    browser.write_confirmed("oven/setpoint", "250", "out_of_range");
    assert_eq!(read_setpoint_and_pump(port).0, 725);

    // The counters, as the status has them (polled or live).
    browser.wait_for(
        "document.querySelector('[data-commands=\"oven\"] p').textContent",
        &json!("received 3 · written 2 · refused 1 · expired 0 · unavailable 0 · failed 0 · unknown 0 · duplicates 0"),
    );
    // The token stays in the tab, never on the page; a wrong one says so.
    assert_eq!(
        browser.eval("sessionStorage.getItem('opex-commands-token')"),
        json!(COMMANDS_TOKEN)
    );
    assert!(
        !browser.dom().contains(COMMANDS_TOKEN),
        "the page shows the token"
    );
    browser.submit_commands_token("not-the-token-0123");
    browser.wait_for(
        "document.querySelectorAll('[data-write]').length",
        &json!(2),
    );
    browser.eval("document.querySelector('[data-value=\"oven/setpoint\"]').value = '10'");
    browser.click("[data-write=\"oven/setpoint\"]");
    browser.click("[data-confirm=\"oven/setpoint\"]");
    browser.wait_for(
        "document.querySelector('[data-result=\"oven/setpoint\"]').textContent",
        &json!("the commands token is wrong"),
    );
    assert_eq!(read_setpoint_and_pump(port).0, 725);
    browser.click("#cmd-token-forget");
    assert_eq!(
        browser.eval("sessionStorage.getItem('opex-commands-token')"),
        Value::Null
    );
    browser.wait_for(
        "document.querySelectorAll('[data-write]').length",
        &json!(0),
    );
}

#[test]
#[cfg(feature = "s7")]
fn the_page_writes_an_s7_plcs_setpoint_and_one_bit_alone_after_a_confirmation() {
    let Some(bin) = chromium() else {
        println!("SKIPPED: chromium is not installed (scripts/test.sh installs Debian's chromium)");
        return;
    };
    let mut db = vec![0u8; 8];
    db[0] = 0b0010_1000; // DBX0.3 and DBX0.5 set: the program's other bits
    let plc = S7Plc::start(&[("DB", 10, db)]);
    let daemon = Daemon::start(json!({
        "connector": {"name": "line-3", "push_queue": {"enabled": true, "max_quota_mb": 16}},
        "commands": {"token": COMMANDS_TOKEN},
        "devices": [{
            "name": "plc",
            "protocol": "s7",
            "host": "127.0.0.1",
            "port": plc.port(),
            "timeout_ms": 2000,
            "groups": [{"name": "process", "interval_ms": 250}],
            "points": [
                {"name": "setpoint", "address": "DB10.DBD2", "type": "real",
                 "writable": true, "min": 0, "max": 250},
                {"name": "lamp", "address": "DB10.DBX0.4", "writable": true},
            ],
        }],
    }));
    let mut browser = Browser::start(&bin);
    browser.call("Page.navigate", json!({"url": daemon.url("/")}));
    browser.wait_for(
        "document.getElementById('sec-commands').hidden",
        &json!(false),
    );
    let dom = browser.dom();
    assert!(dom.contains("data-commands=\"plc\""), "{dom}");
    assert!(dom.contains("0 … 250"), "{dom}");
    browser.submit_commands_token(COMMANDS_TOKEN);
    browser.wait_for(
        "document.querySelectorAll('[data-write]').length",
        &json!(2),
    );
    browser.write_confirmed("plc/setpoint", "120.5", "written");
    assert_eq!(&plc.memory("DB", 10)[2..6], &120.5f32.to_be_bytes());

    browser.write_confirmed("plc/lamp", "true", "written");
    assert_eq!(
        plc.memory("DB", 10)[0],
        0b0011_1000,
        "DBX0.4 set, its neighbours left alone"
    );
    // A value past max: its result, and nothing sent.
    browser.write_confirmed("plc/setpoint", "300", "out_of_range");
    assert_eq!(&plc.memory("DB", 10)[2..6], &120.5f32.to_be_bytes());
}

/// Serves the page's own files (from the source tree), `status` as `/api/status` and, unless
/// null, `trends` as every `/api/trends` answer, on a loopback port, one request per
/// connection; everything else is 404. Returns the base URL.
fn serve_fixture(status: Value, trends: Value) -> String {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let base = format!("http://{}", listener.local_addr().expect("addr"));
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("src/http/page");
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut s) = stream else { continue };
            let mut head = Vec::new();
            let mut byte = [0u8; 1];
            while !head.ends_with(b"\r\n\r\n") && s.read_exact(&mut byte).is_ok() {
                head.push(byte[0]);
            }
            let head = String::from_utf8_lossy(&head).into_owned();
            let path = head.split(' ').nth(1).unwrap_or("").to_string();
            let file = |name: &str| std::fs::read(dir.join(name)).expect("page file");
            let (code, kind, body) = match path.as_str() {
                "/" => ("200 OK", "text/html", file("index.html")),
                "/page.js" => ("200 OK", "text/javascript", file("page.js")),
                "/page.css" => ("200 OK", "text/css", file("page.css")),
                "/api/status" => (
                    "200 OK",
                    "application/json",
                    status.to_string().into_bytes(),
                ),
                p if p.starts_with("/api/trends?") && !trends.is_null() => (
                    "200 OK",
                    "application/json",
                    trends.to_string().into_bytes(),
                ),
                _ => ("404 Not Found", "text/plain", b"no".to_vec()),
            };
            let _ = write!(
                s,
                "HTTP/1.1 {code}\r\nContent-Type: {kind}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
                body.len()
            );
            let _ = s.write_all(&body);
        }
    });
    base
}

#[test]
fn the_page_draws_queues_alerts_schedules_backfills_and_sparkplug_nodes_and_shows_markup_in_data_as_text(
) {
    let Some(bin) = chromium() else {
        println!("SKIPPED: chromium is not installed (scripts/test.sh installs Debian's chromium)");
        return;
    };
    // The /api/status contract of queues, alerts, schedules and backfills, with markup where
    // a name could carry it.
    let evil = "<img src=x onerror=\"document.body.dataset.pwned=1\">";
    let base = serve_fixture(
        json!({
            "connector": {"name": evil, "version": "9.9.9", "uptime_secs": 3700,
                          "disk_free_bytes": 1_073_741_824u64, "healthy": true},
            "push_queue": {"on_full": "evict_oldest", "quota_bytes": 100, "fill_pct": 1.0, "level": "ok"},
            "queues": [
                {"name": "push_queue", "kind": "disk", "on_full": "block", "quota": 1_048_576, "quota_unit": "bytes",
                 "used": 943_718, "fill_pct": 90.0, "level": "high", "blocked_total": 3, "evicted_total": 0, "dropped_total": 0},
                {"name": "clickhouse", "kind": "memory", "on_full": "evict_oldest", "quota": 10000, "quota_unit": "rows",
                 "used": 10000, "fill_pct": 100.0, "level": "full", "blocked_total": 0, "evicted_total": 12, "dropped_total": 0},
            ],
            "alerts": [{"connector": "c", "queue": "push_queue", "level": "high", "message": evil,
                        "fill_pct": 90.0, "time": "2026-11-29T15:00:00Z", "repeat": 0}],
            "schedules": [{"name": "hourly", "every": "1h", "next_tick": 1_800_000_000_000u64,
                           "last_tick": null, "last_result": "backpressured"}],
            "backfills": [{"name": "history", "file": "/data/h.jsonl", "state": "running",
                           "done": 250, "total": 1000, "rate_per_sec": 12.5, "eta_secs": 60}],
            "devices": [{"name": evil, "source": "modbus/x", "state": "backoff", "last_error": evil,
                         "values": {"g": {"p": {"value": evil, "quality": "good"}}}}],
            "sinks": [
                {"name": "push", "dropped": 0, "blocked": 3, "queue_rows": 900},
                {"name": "uns", "type": "sparkplug", "dropped": 0, "blocked": 0, "queue_rows": 40, "connected": true,
                 "sparkplug": {"group_id": evil, "edge_node_id": "gw-1", "connected": true, "publishing": false,
                               "primary_host": {"id": "scada", "state": "offline"}, "bdSeq": 7, "seq": 12,
                               "births": 4, "data_messages": 90, "commands": {"received": 2},
                               "historical": {"waiting": 40, "sent": 300}}},
            ],
            "dead_letters": {"open": 2, "resolved": 1, "parked_total": 3, "trimmed_total": 0},
            "config": {"revision": 7, "hash": "ab", "loaded_at": "2026-11-29T15:00:00Z", "reloads": 3,
                       "last_error": format!("nothing was changed: sink/{evil} cannot start")},
        }),
        Value::Null,
    );
    let mut dom = String::new();
    let drawn = poll_until(Duration::from_secs(60), || {
        dom = run_chromium(
            &bin,
            &[
                "--virtual-time-budget=3000".to_string(),
                "--dump-dom".to_string(),
                format!("{base}/"),
            ],
        );
        dom.contains("data-status-loaded=\"1\"")
    });
    assert!(
        drawn,
        "the page never drew the fixture:\n{}",
        truncate(&dom, 4000)
    );
    // `queues` wins over `push_queue`; each queue shows its level.
    assert!(
        dom.contains("data-queue=\"push_queue\" data-level=\"high\""),
        "{dom}"
    );
    assert!(
        dom.contains("data-queue=\"clickhouse\" data-level=\"full\""),
        "{dom}"
    );
    assert!(dom.contains("100.0 % · 10000 of 10000 rows"), "{dom}");
    assert!(
        dom.contains("on_full block · blocked 3 · evicted 0 · dropped 0"),
        "{dom}"
    );
    assert!(
        dom.contains("hourly") && dom.contains("backpressured"),
        "{dom}"
    );
    assert!(
        dom.contains("250 of 1000 (25.0 %)") && dom.contains("ETA 1 min 0 s"),
        "{dom}"
    );
    assert!(dom.contains("disk free 1.0 GiB"), "{dom}");
    // The running config's revision, its reloads, why the last one was not applied.
    assert!(
        dom.contains("config revision 7 since ") && dom.contains(" · 3 reloads since the start"),
        "{dom}"
    );
    assert!(
        dom.contains("last config change not applied: nothing was changed: sink/&lt;img"),
        "{dom}"
    );
    // A Sparkplug node in the sinks table: waiting for its host, with its counts.
    assert!(
        dom.contains("/gw-1 · waiting for its primary host · host scada offline · bdSeq 7 · seq 12 · births 4 · data 90 · commands 2 · historical 40 waiting, 300 sent"),
        "{dom}"
    );
    // Every piece of markup in the data is text: escaped, never an element.
    assert!(dom.contains("&lt;img src=x onerror="), "{dom}");
    assert!(
        !dom.contains("<img"),
        "markup from data became an element:\n{dom}"
    );
    assert!(dom.contains("<body>"), "a script from data ran:\n{dom}");
}

/// The end of the fixture's hour: 2026-03-02 10:00 UTC.
const HOUR_END_MS: u64 = 1_772_445_600_000;

/// An hour of `/api/trends` for the fixture's series: smooth curves with a min/max band, the
/// pump switching, the queue filling and draining, and the pressure missing for two minutes.
fn trends_fixture() -> Value {
    let start = HOUR_END_MS - 3_600_000;
    let times: Vec<u64> = (0..360).map(|i| start + i * 10_000).collect();
    let wave = |i: usize, base: f64, amp: f64, spread: f64, gap: Option<std::ops::Range<usize>>| {
        let f = i as f64;
        let mean = base + amp * (f / 38.0).sin() + amp * 0.3 * (f / 7.0).sin();
        let missing = gap.as_ref().is_some_and(|g| g.contains(&i));
        let cell = |v: f64| {
            if missing {
                Value::Null
            } else {
                json!((v * 100.0).round() / 100.0)
            }
        };
        let half = spread * (1.0 + 0.6 * (f / 11.0).cos().abs());
        (
            cell(mean - half),
            cell(mean + half),
            cell(mean),
            cell(mean + half * 0.4),
        )
    };
    let series = |name: &str,
                  unit: &str,
                  base: f64,
                  amp: f64,
                  spread: f64,
                  gap: Option<std::ops::Range<usize>>| {
        let cols: Vec<_> = (0..360)
            .map(|i| wave(i, base, amp, spread, gap.clone()))
            .collect();
        json!({
            "name": name, "unit": unit,
            "min": cols.iter().map(|c| c.0.clone()).collect::<Vec<_>>(),
            "max": cols.iter().map(|c| c.1.clone()).collect::<Vec<_>>(),
            "mean": cols.iter().map(|c| c.2.clone()).collect::<Vec<_>>(),
            "last": cols.iter().map(|c| c.3.clone()).collect::<Vec<_>>(),
        })
    };
    let pump: Vec<Value> = (0..360).map(|i| json!(u8::from(i % 90 < 60))).collect();
    json!({
        "bucket_ms": 10_000, "start_ms": start, "times_ms": times,
        "series": [
            series("point/press-1/process.oven_temp", "°C", 182.0, 6.0, 0.8, None),
            series("point/press-1/process.pressure", "bar", 4.1, 0.3, 0.05, Some(200..212)),
            {"name": "point/press-1/process.pump_running", "unit": null,
             "min": pump, "max": pump, "mean": pump, "last": pump},
            series("queue/push_queue", "%", 18.0, 12.0, 1.5, None),
            series("in/ingest/orders", "records/s", 3.0, 1.5, 0.0, None),
            series("out/push", "records/s", 3.0, 1.4, 0.0, None),
        ],
        "unknown": [],
    })
}

#[test]
fn the_page_draws_a_sparkline_beside_each_value_and_queue_and_opens_the_hour_chart_on_a_click() {
    let Some(bin) = chromium() else {
        println!("SKIPPED: chromium is not installed (scripts/test.sh installs Debian's chromium)");
        return;
    };
    let point =
        |value: Value, unit: Option<&str>| json!({"value": value, "quality": "good", "unit": unit});
    let base = serve_fixture(
        json!({
            "connector": {"name": "line-3", "version": "0.1.0", "uptime_secs": 3700,
                          "disk_free_bytes": 8_589_934_592u64, "healthy": true},
            "queues": [{"name": "push_queue", "kind": "disk", "on_full": "evict_oldest", "quota": 67_108_864,
                        "quota_unit": "bytes", "used": 12_884_901, "fill_pct": 19.2, "level": "ok",
                        "blocked_total": 0, "evicted_total": 0, "dropped_total": 0}],
            "alerts": [],
            "devices": [{"name": "press-1", "source": "modbus/press-1", "protocol": "modbus_tcp",
                         "address": "10.0.0.5:502", "state": "connected", "last_poll_ms": HOUR_END_MS - 1000,
                         "polls_total": 14_400, "errors_total": 0, "timeouts_total": 0,
                         "values": {"process": {
                             "oven_temp": point(json!(183.4), Some("°C")),
                             "pressure": point(json!(4.1), Some("bar")),
                             "pump_running": point(json!(true), None),
                             "model": point(json!("OPEX-SIM"), None),
                         }}}],
            "sinks": [{"name": "push", "type": "push", "dropped": 0, "blocked": 0, "queue_rows": 1200}],
            "sources": [{"name": "ingest/orders", "received": 10_800, "stored": 10_800, "refused": 0,
                         "rejected": 0, "unauthorized": 0}],
        }),
        trends_fixture(),
    );
    let mut browser = Browser::start(&bin);
    // The page's clock stands at the fixture's hour, so the screenshot is the same every run.
    browser.call("Page.enable", json!({}));
    browser.call(
        "Page.addScriptToEvaluateOnNewDocument",
        json!({"source": format!("Date.now = function () {{ return {HOUR_END_MS}; }};")}),
    );
    browser.call("Page.navigate", json!({"url": format!("{base}/")}));
    let oven = "point/press-1/process.oven_temp";
    let points_of = |browser: &mut Browser, name: &str| {
        browser
            .eval(&format!(
                "(function () {{ var b = document.querySelector('[data-spark=\"' + {} + '\"]'); return b ? Number(b.dataset.points) : -1; }})()",
                json!(name)
            ))
            .as_i64()
            .unwrap_or(-1)
    };
    let mut drawn = -1;
    let shown = poll_until(BROWSER_DEADLINE, || {
        drawn = points_of(&mut browser, oven);
        drawn >= 360
    });
    assert!(
        shown,
        "the oven's sparkline has {drawn} buckets; the page:\n{}",
        truncate(&browser.dom(), 6000)
    );
    // A sparkline beside each number, boolean, queue and rate; none beside a string.
    for (name, want) in [
        ("point/press-1/process.pressure", 348),
        ("point/press-1/process.pump_running", 360),
        ("queue/push_queue", 360),
        ("in/ingest/orders", 360),
        ("out/push", 360),
        ("in/modbus/press-1", 0),
    ] {
        assert_eq!(points_of(&mut browser, name), want, "{name}");
    }
    assert_eq!(
        browser.eval("document.querySelectorAll('[data-spark*=\"model\"]').length"),
        json!(0)
    );
    // The pressure's two missing minutes split its line in two.
    assert_eq!(
        browser.eval("document.querySelectorAll('[data-spark=\"point/press-1/process.pressure\"] path').length"),
        json!(2)
    );
    assert_eq!(
        browser.eval("document.getElementById('chart').hidden"),
        json!(true)
    );

    // A click on the value opens the hour's chart: a min/max band, the mean line, the axes.
    let clicked = browser.eval(
        "(function () { var e = document.querySelector('[data-point=\"press-1/process.oven_temp\"]'); if (!e) return false; e.click(); return true; })()",
    );
    assert_eq!(clicked, json!(true));
    let chart = browser.eval(
        "(function () { var c = document.getElementById('chart'), s = document.getElementById('chart-svg');
           var texts = function (cls) { return Array.prototype.map.call(s.querySelectorAll('.' + cls), function (t) { return t.textContent; }); };
           var band = s.querySelector('path.band');
           return { hidden: c.hidden, series: c.dataset.series, title: document.getElementById('chart-title').textContent,
                    note: document.getElementById('chart-note').textContent, buckets: s.dataset.buckets,
                    bands: s.querySelectorAll('path.band').length, band: band ? band.getAttribute('d').length : 0,
                    means: s.querySelectorAll('path.mean').length, x: texts('tick-x'), y: texts('tick-y'),
                    height: s.getBoundingClientRect().height }; })()",
    );
    assert_eq!(chart["hidden"], json!(false), "{chart}");
    assert_eq!(chart["series"], oven, "{chart}");
    assert_eq!(chart["title"], format!("{oven} (°C)"), "{chart}");
    assert_eq!(chart["buckets"], "360", "{chart}");
    assert_eq!(chart["bands"], 1, "{chart}");
    assert!(chart["band"].as_u64().unwrap_or(0) > 720 * 10, "{chart}");
    assert_eq!(chart["means"], 1, "{chart}");
    assert_eq!(
        chart["x"],
        json!(["09:10", "09:20", "09:30", "09:40", "09:50"]),
        "a time axis every 10 min: {chart}"
    );
    assert_eq!(
        chart["y"],
        json!(["175", "180", "185", "190"]),
        "a value axis in round steps: {chart}"
    );
    assert!(chart["height"].as_f64().unwrap_or(0.0) > 150.0, "{chart}");
    assert!(
        chart["note"].as_str().unwrap_or("").starts_with("now "),
        "{chart}"
    );

    // The screenshot the book shows (`docs/src/status/page.md`), taken again on every run.
    let png = browser.screenshot(1280, 1000, false);
    assert!(
        png.starts_with(b"\x89PNG") && png.len() > 20_000,
        "{} bytes",
        png.len()
    );
    let shot = Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/src/images/trends.png");
    std::fs::write(&shot, png).expect("write docs/src/images/trends.png");
    println!("screenshot: {}", shot.display());

    // Close hides it; Escape does too, after a click on a sparkline opens it again.
    browser.eval("document.getElementById('chart-close').click()");
    assert_eq!(
        browser.eval("document.getElementById('chart').hidden"),
        json!(true)
    );
    browser.eval("document.querySelector('[data-spark=\"queue/push_queue\"]').click()");
    assert_eq!(
        browser.eval("document.getElementById('chart').dataset.series"),
        json!("queue/push_queue")
    );
    browser.eval("document.dispatchEvent(new KeyboardEvent('keydown', {key: 'Escape'}))");
    assert_eq!(
        browser.eval("document.getElementById('chart').hidden"),
        json!(true)
    );
}

// ---------------------------------------------------------------- WebSocket by hand

/// Sends a WebSocket upgrade request; returns the response head.
fn upgrade(stream: &mut TcpStream, key: &str) -> String {
    write!(
        stream,
        "GET /api/live HTTP/1.1\r\nHost: 127.0.0.1\r\nUpgrade: websocket\r\nConnection: keep-alive, Upgrade\r\nSec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n\r\n"
    )
    .expect("send upgrade");
    read_head(stream)
}

/// Reads an HTTP response head, lowercased.
fn read_head(stream: &mut TcpStream) -> String {
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        stream.read_exact(&mut byte).expect("read response head");
        head.push(byte[0]);
    }
    String::from_utf8_lossy(&head).to_ascii_lowercase()
}

fn connect(daemon: &Daemon) -> TcpStream {
    let s = TcpStream::connect(daemon.base().trim_start_matches("http://")).expect("connect");
    s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    s
}

/// Reads one server frame: (opcode, payload). The connector's frames are always final.
fn read_frame(s: &mut TcpStream) -> (u8, Vec<u8>) {
    let (fin, op, payload) = read_frame_parts(s);
    assert!(fin, "server frames are final");
    (op, payload)
}

/// Reads one server frame: (final, opcode, payload). Server frames are never masked.
fn read_frame_parts(s: &mut TcpStream) -> (bool, u8, Vec<u8>) {
    let mut h = [0u8; 2];
    s.read_exact(&mut h).expect("frame header");
    assert_eq!(h[1] & 0x80, 0, "server frames are not masked");
    let len = match h[1] & 0x7F {
        126 => {
            let mut b = [0u8; 2];
            s.read_exact(&mut b).unwrap();
            u64::from(u16::from_be_bytes(b))
        }
        127 => {
            let mut b = [0u8; 8];
            s.read_exact(&mut b).unwrap();
            u64::from_be_bytes(b)
        }
        n => u64::from(n),
    };
    let mut payload = vec![0u8; len as usize];
    s.read_exact(&mut payload).expect("frame payload");
    (h[0] & 0x80 != 0, h[0] & 0x0F, payload)
}

/// Reads frames until a JSON text message for which `want` holds.
fn read_until(s: &mut TcpStream, want: impl Fn(&Value) -> bool) -> Value {
    loop {
        let (op, payload) = read_frame(s);
        assert_eq!(op, 1, "only text frames come unasked");
        let m: Value = serde_json::from_slice(&payload).expect("JSON message");
        if want(&m) {
            return m;
        }
    }
}

/// A masked client frame.
fn client_frame(opcode: u8, payload: &[u8]) -> Vec<u8> {
    let mask = [0x12, 0x34, 0x56, 0x78];
    let mut f = vec![0x80 | opcode];
    match payload.len() {
        n if n < 126 => f.push(0x80 | n as u8),
        n => {
            f.push(0x80 | 126);
            f.extend_from_slice(&u16::try_from(n).expect("a small message").to_be_bytes());
        }
    }
    f.extend_from_slice(&mask);
    f.extend(payload.iter().enumerate().map(|(i, b)| b ^ mask[i % 4]));
    f
}

#[test]
fn the_live_websocket_answers_the_rfc_handshake_and_pings_hides_callers_payloads_and_caps_its_clients(
) {
    let daemon = Daemon::start(queue_config(16, "block"));

    // RFC 6455's example key and its accept value.
    let mut ws = connect(&daemon);
    let head = upgrade(&mut ws, "dGhlIHNhbXBsZSBub25jZQ==");
    assert!(head.starts_with("http/1.1 101"), "{head}");
    assert!(
        head.contains("sec-websocket-accept: s3pplmbitxaq9kygzzhzrbk+xoo=\r\n"),
        "{head}"
    );
    let first = read_until(&mut ws, |_| true);
    assert_eq!(first["type"], "status", "{first}");
    assert_eq!(first["status"]["connector"]["name"], "it");
    assert!(
        first["status"].get("push_status").is_none(),
        "the live status is compact"
    );

    // An ingested record shows with its result and size, not its (business) key or payload.
    let reply = daemon.ingest("order-7", r#"{"card":"4111-1111"}"#);
    assert_eq!(reply.status, 200);
    let value = read_until(&mut ws, |m| m["type"] == "value");
    assert_eq!(value["source"], format!("ingest/{SOURCE}"), "{value}");
    assert!(value.get("key").is_none(), "{value}");
    assert_eq!(value["result"], "stored");
    assert!(value.get("payload").is_none(), "{value}");
    assert_eq!(value["payload_bytes"], 20);

    // Ping → pong with the same payload (other messages may come first).
    ws.write_all(&client_frame(0x9, b"hi")).unwrap();
    loop {
        let (op, payload) = read_frame(&mut ws);
        if op == 0xA {
            assert_eq!(payload, b"hi");
            break;
        }
    }

    // Sixteen clients at most; the seventeenth is refused and counted.
    let mut others: Vec<TcpStream> = (1..16)
        .map(|_| {
            let mut s = connect(&daemon);
            let head = upgrade(&mut s, "AQIDBAUGBwgJCgsMDQ4PEA==");
            assert!(head.starts_with("http/1.1 101"), "{head}");
            s
        })
        .collect();
    let mut refused = connect(&daemon);
    let head = upgrade(&mut refused, "AQIDBAUGBwgJCgsMDQ4PEA==");
    assert!(head.starts_with("http/1.1 503"), "{head}");
    let status = daemon.status();
    assert_eq!(u64_at(&status, "/live/clients"), 16, "{status}");
    assert_eq!(u64_at(&status, "/live/refused_clients_total"), 1);

    // A close is answered with a close, and the slot is free again.
    let mut last = others.pop().expect("a client");
    last.write_all(&client_frame(0x8, &1000u16.to_be_bytes()))
        .unwrap();
    loop {
        let (op, _) = read_frame(&mut last);
        if op == 0x8 {
            break;
        }
    }
    wait_until(Duration::from_secs(10), "the slot freed", || {
        u64_at(&daemon.status(), "/live/clients") == 15
    });

    // Another web site's page may not read the live view (browsers send its Origin).
    let mut cross = connect(&daemon);
    write!(
        cross,
        "GET /api/live HTTP/1.1\r\nHost: {}\r\nOrigin: http://evil.example\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Key: AQIDBAUGBwgJCgsMDQ4PEA==\r\nSec-WebSocket-Version: 13\r\n\r\n",
        daemon.base().trim_start_matches("http://")
    )
    .unwrap();
    let mut answer = [0u8; 12];
    cross.read_exact(&mut answer).unwrap();
    assert_eq!(&answer, b"HTTP/1.1 403");

    // Without an upgrade, 426; a bad key, 400.
    let plain = daemon.get("/api/live", None);
    assert_eq!(plain.status, 426);
    let mut bad = connect(&daemon);
    let head = upgrade(&mut bad, "short");
    assert!(head.starts_with("http/1.1 400"), "{head}");

    // Open live sessions do not hold up a stop: each gets a close (1001, going away).
    let mut daemon = daemon;
    let started = std::time::Instant::now();
    assert!(daemon.stop().success());
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "{:?}",
        started.elapsed()
    );
    loop {
        let (op, payload) = read_frame(&mut ws);
        if op == 0x8 {
            assert_eq!(payload[..2], 1001u16.to_be_bytes());
            break;
        }
    }
}

#[test]
fn the_page_files_have_their_types_and_no_other_path_exists() {
    let daemon = Daemon::start(queue_config(16, "evict_oldest"));
    for (path, kind) in [
        ("/", "text/html"),
        ("/page.js", "text/javascript"),
        ("/page.css", "text/css"),
    ] {
        let r = daemon.request("GET", path, None, &[("Accept-Encoding", "gzip")], None);
        assert_eq!(r.status, 200, "{path}");
        assert!(
            r.header("content-type").unwrap_or("").starts_with(kind),
            "{path}"
        );
        assert_eq!(r.header("cache-control"), Some("no-cache"), "{path}");
        assert_eq!(r.header("content-encoding"), Some("gzip"), "{path}");
        assert!(!r.body.is_empty(), "{path}");
        assert!(r.header("etag").is_some(), "{path}");
        assert!(r
            .header("content-security-policy")
            .is_some_and(|c| c.contains("default-src 'none'")));
        let refused = daemon.request(
            "GET",
            path,
            None,
            &[("Accept-Encoding", "br, identity;q=0")],
            None,
        );
        assert_eq!(refused.status, 406, "{path}");
        assert!(refused.body.contains("identity"), "{}", refused.body);
    }
    for path in [
        "/index.html",
        "/page.js/x",
        "/page/page.js",
        "/%2e%2e/Cargo.toml",
        "/../Cargo.toml",
        "/page.jss",
    ] {
        assert_eq!(daemon.get(path, None).status, 404, "{path}");
    }
    let r = daemon.post("/page.js", None, b"");
    assert_eq!(r.status, 405);
}

/// `curl` (installed by `scripts/test.sh`) fetching `path` with `args`: the head and the
/// body it printed.
fn curl(daemon: &Daemon, path: &str, args: &[&str]) -> (String, Vec<u8>) {
    let head = tempfile::NamedTempFile::new().expect("a temp file");
    let out = Command::new("curl")
        .args(["--silent", "--show-error", "--fail", "--dump-header"])
        .arg(head.path())
        .args(args)
        .arg(daemon.url(path))
        .output()
        .expect("run curl");
    assert!(
        out.status.success(),
        "curl {args:?} {path}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let head = std::fs::read_to_string(head.path()).expect("curl wrote the head");
    (head.to_ascii_lowercase(), out.stdout)
}

#[test]
fn curl_without_compressed_or_with_identity_prints_the_page_as_text_and_with_compressed_gets_gzip()
{
    let daemon = Daemon::start(queue_config(16, "evict_oldest"));
    for (path, source) in [
        ("/", &include_bytes!("../src/http/page/index.html")[..]),
        ("/page.js", &include_bytes!("../src/http/page/page.js")[..]),
        (
            "/page.css",
            &include_bytes!("../src/http/page/page.css")[..],
        ),
    ] {
        for args in [
            &[][..],
            &["--header", "Accept-Encoding: identity"][..],
            &["--header", "Accept-Encoding: br, gzip;q=0"][..],
        ] {
            let (head, body) = curl(&daemon, path, args);
            assert!(
                !head.contains("content-encoding"),
                "{path} {args:?}: {head}"
            );
            assert!(head.contains("vary: accept-encoding"), "{head}");
            assert!(
                head.contains(&format!("content-length: {}", source.len())),
                "{head}"
            );
            assert_eq!(body, source, "{path} {args:?}");
        }
        let (head, body) = curl(&daemon, path, &["--compressed"]);
        assert!(head.contains("content-encoding: gzip"), "{path}: {head}");
        assert_eq!(body, source, "{path} --compressed");
        let (_, raw) = curl(&daemon, path, &["--header", "Accept-Encoding: gzip"]);
        assert_eq!(raw[..2], [0x1f, 0x8b], "{path}: gzip on the wire");
    }
    let (head, _) = curl(&daemon, "/", &["--head"]);
    assert!(head.starts_with("http/1.1 200"), "{head}");
}

/// Writes a screenshot of the page to `docs/src/images/<name>.png` when `OPEX_SCREENSHOTS` is set (they
/// carry times, so a plain run leaves the committed ones alone).
fn keep_screenshot(browser: &mut Browser, name: &str) {
    if std::env::var_os("OPEX_SCREENSHOTS").is_none() {
        return;
    }
    let png = browser.screenshot(1400, 1900, false);
    let shot = Path::new(env!("CARGO_MANIFEST_DIR")).join(format!("docs/src/images/{name}.png"));
    std::fs::write(&shot, png).expect("write the screenshot");
    println!("screenshot: {}", shot.display());
}

/// Waits until the header shows `state`, and returns the header's text.
fn state_is(browser: &mut Browser, state: &str) -> String {
    browser.wait_for(
        "document.getElementById('state').dataset.state",
        &json!(state),
    );
    browser.text("#state").as_str().unwrap_or("").to_string()
}

#[test]
fn three_faults_one_after_the_other_each_show_at_the_top_on_their_part_and_as_recovered_after() {
    let Some(bin) = chromium() else {
        println!("SKIPPED: chromium is not installed (scripts/test.sh installs Debian's chromium)");
        return;
    };
    let mut device = ModbusTcp::start();
    let mut broker = Mosquitto::start();
    let uplink = Receiver::start();
    let mut config = writable_config(device.port());
    config["connector"]["push"] = json!({
        "url": uplink.url(), "batch_rows": 10, "timeout_secs": 2,
        "retry_initial_ms": 50, "retry_max_ms": 200,
    });
    config["mqtt"] = json!({"connections": [
        {"name": "b", "url": broker.url(), "client_id": "it-page", "reconnect_max_ms": 200},
    ]});
    config["sinks"] = json!([{"name": "uns", "type": "mqtt", "topic": "p/{{key}}", "qos": 1}]);
    config["telemetry"] = json!({"alerts": {"check_interval_secs": 1}});
    let daemon = Daemon::start(config);
    let mut browser = Browser::start(&bin);
    browser.call("Page.navigate", json!({"url": daemon.url("/")}));
    state_is(&mut browser, "ok");
    assert_eq!(
        browser.eval("document.getElementById('sec-problems').hidden"),
        json!(true)
    );
    // Writer channels and dead-letter tables are under Details, closed.
    assert_eq!(
        browser.eval("document.getElementById('sec-details').open"),
        json!(false)
    );
    assert_eq!(
        browser.eval("!!document.querySelector('#plumbing [data-queue=\"push_writer\"]')"),
        json!(true)
    );
    assert_eq!(
        browser.eval("document.getElementById('sec-schedules').hidden"),
        json!(true),
        "no schedule is configured: no section"
    );
    keep_screenshot(&mut browser, "status-page");

    // 1. The device stops: its problem at the top, its badge not green, its values greyed.
    device.stop();
    let header = state_is(&mut browser, "degraded");
    assert!(header.starts_with("degraded · 1 problem"), "{header}");
    browser.wait_for(
        "document.querySelectorAll('#problems [data-component=\"device oven\"]').length",
        &json!(1),
    );
    let card = browser.text("#problems [data-component=\"device oven\"]");
    let card = card.as_str().unwrap_or("");
    assert!(card.contains("not connected"), "{card}");
    assert!(card.contains("since "), "{card}");
    assert!(card.contains("nothing accepts connections"), "{card}");
    browser.wait_for(
        "document.querySelector('[data-device=\"oven\"] .values').classList.contains('stale')",
        &json!(true),
    );
    assert_eq!(
        browser.eval(
            "document.querySelector('[data-device=\"oven\"] h3 .badge').classList.contains('ok')"
        ),
        json!(false)
    );
    let grey = browser.eval(
        "getComputedStyle(document.querySelector('[data-device=\"oven\"] .values td:nth-child(2)')).color",
    );
    let plain = browser.eval("getComputedStyle(document.body).color");
    assert_ne!(grey, plain, "the old values are greyed");
    let device_card = browser.text("[data-device=\"oven\"]");
    assert!(
        device_card
            .as_str()
            .is_some_and(|t| t.contains("values as of the last poll")),
        "{device_card}"
    );
    keep_screenshot(&mut browser, "status-page-device-down");
    device.restart();
    state_is(&mut browser, "ok");
    browser.wait_for(
        "!!document.querySelector('[data-device=\"oven\"] .last-error.recovered')",
        &json!(true),
    );
    let device_card = browser.text("[data-device=\"oven\"] .last-error");
    assert!(
        device_card
            .as_str()
            .is_some_and(|t| t.contains("recovered")),
        "{device_card}"
    );

    // 2. The broker stops: the sink's reason and hint are on the page.
    broker.stop();
    state_is(&mut browser, "degraded");
    browser.wait_for(
        "document.querySelector('[data-sink=\"uns\"]').dataset.state",
        &json!("problem"),
    );
    let sink = browser.text("[data-sink=\"uns\"]");
    let sink = sink.as_str().unwrap_or("");
    assert!(sink.contains("not connected"), "{sink}");
    assert!(sink.contains("since "), "{sink}");
    assert!(
        sink.contains("check that the destination runs") || sink.contains("nothing accepts"),
        "{sink}"
    );
    keep_screenshot(&mut browser, "status-page-broker-down");
    broker.restart();
    state_is(&mut browser, "ok");
    browser.wait_for(
        "document.querySelector('[data-sink=\"uns\"]').dataset.state",
        &json!("ok"),
    );

    // 3. The uplink answers 500: the push sink's row says so, then recovers.
    uplink.answer_every_request_with(500);
    assert_eq!(daemon.ingest("k-1", r#"{"n":1}"#).status, 200);
    state_is(&mut browser, "degraded");
    browser.wait_for(
        "document.querySelector('[data-sink=\"push\"]').dataset.state",
        &json!("problem"),
    );
    let push = browser.text("[data-sink=\"push\"]");
    let push = push.as_str().unwrap_or("");
    assert!(push.contains("500"), "{push}");
    assert!(push.contains("server error"), "{push}");
    keep_screenshot(&mut browser, "status-page-uplink-failing");
    uplink.answer_normally();
    state_is(&mut browser, "ok");
    browser.wait_for(
        "(document.querySelector('[data-sink=\"push\"]').textContent.indexOf('recovered') >= 0)",
        &json!(true),
    );
    assert_eq!(
        browser.eval("document.getElementById('sec-problems').hidden"),
        json!(true)
    );
}

#[test]
fn the_page_shows_the_opcua_server_and_its_open_sessions_with_their_user_and_client_application() {
    let Some(bin) = chromium() else {
        println!("SKIPPED: chromium is not installed (scripts/test.sh installs Debian's chromium)");
        return;
    };
    let device = ModbusTcp::start();
    let ua = free_port();
    let mut config = writable_config(device.port());
    config["opcua_server"] = json!({
        "listen": format!("127.0.0.1:{ua}"),
        "security": [{"policy": "None", "mode": "None"}],
        "anonymous": true,
    });
    let daemon = Daemon::start(config);
    let client = OpcuaClient::start(
        &format!("opc.tcp://127.0.0.1:{ua}/"),
        &ClientOptions::anonymous(),
    );
    wait_until(Duration::from_secs(30), "a session", || {
        client.connect().is_ok()
    });
    let version = client
        .browse()
        .iter()
        .flat_map(|n| {
            std::iter::once(n.clone()).chain(n["children"].as_array().cloned().unwrap_or_default())
        })
        .filter_map(|n| n["node_id"].as_str().map(str::to_string))
        .find(|id| id.ends_with("s=@connector.version"))
        .expect("Objects/Connector/Version");
    assert_eq!(client.read(&[&version])[0]["status"], json!("Good"));

    let mut browser = Browser::start(&bin);
    browser.call("Page.navigate", json!({"url": daemon.url("/")}));
    browser.wait_for("document.getElementById('sec-opcua').hidden", &json!(false));
    browser.wait_for(
        "document.querySelector('[data-opcua-listening]').dataset.opcuaListening",
        &json!("1"),
    );
    browser.wait_for(
        "(document.querySelector('[data-opcua-session]') || {}).textContent || ''",
        &json!("anonymous"),
    );
    let dom = browser.dom();
    assert!(
        dom.contains("data-opcua-session=\"opex test client\""),
        "{dom}"
    );
    assert!(
        dom.contains(&format!("opc.tcp://127.0.0.1:{ua}/ None")),
        "{dom}"
    );
    assert!(dom.contains("None None"), "the session's security: {dom}");
}
