//! A second OPC-UA client nobody here wrote: node-opcua (`node-opcua-client`, pinned in
//! scripts/test.sh and installed with npm into [`NPM_DIR`]) running `node_opcua_client.js`
//! (beside this file) once per read: connect, open a session, read one node, print one JSON
//! line, exit.
//!
//! It is the client Node-RED users run, with a PKI of its own: its certificate is made on
//! first use in the PKI folder the test gives ([`node_opcua_certificate`]), and presented to
//! the server in secure modes, so a server test can find it in its `rejected/` folder and
//! trust it. Each run is awaited with a deadline ([`NODE_OPCUA_DEADLINE`]); the script gives
//! up on its own before that and says so.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::thread;
use std::time::{Duration, Instant};

use base64::Engine as _;
use serde_json::Value;

use super::opcua_client::ClientOptions;
use super::process::{binary, log_tail};

/// Where scripts/test.sh installs the npm peers (`install_nodeopcua`, beside lighthouse).
pub const NPM_DIR: &str = "/var/tmp/opex-connector-npm";
/// How long one run may take: node starts, and the first run makes an RSA key.
pub const NODE_OPCUA_DEADLINE: Duration = Duration::from_secs(40);
/// What the script is told: it answers `{"ok":false,"error":"timeout"}` past this.
const SCRIPT_TIMEOUT: Duration = Duration::from_secs(30);

/// The client script.
const SCRIPT: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/tests/common/peers/node_opcua_client.js"
);

/// Connects to `endpoint` as `options` say (policy, mode, user; its `cert_dir` is not used:
/// node-opcua keeps its certificate in `pki_dir`), reads the Value of `node` and returns the
/// script's answer: `{"ok":true,"value":..,"status":"Good","data_type":"Double"}`, or
/// `{"ok":false,"error":"<StatusCode name or message>","message":..}` when it could not
/// connect, log in or read. Panics when node-opcua is not installed, on a usage error, or
/// when no answer comes within [`NODE_OPCUA_DEADLINE`].
pub fn node_opcua_read(
    endpoint: &str,
    options: &ClientOptions,
    pki_dir: &Path,
    node: &str,
) -> Value {
    let node_bin = binary("node");
    let package = Path::new(NPM_DIR).join("node_modules/node-opcua-client/package.json");
    assert!(
        package.is_file(),
        "node-opcua-client is not installed in {NPM_DIR}: run scripts/test.sh (NEEDED_PEERS: nodeopcua)"
    );
    let out_dir = tempfile::Builder::new()
        .prefix("opex-node-opcua-")
        .tempdir()
        .expect("temp dir");
    let (stdout, stderr) = (out_dir.path().join("stdout"), out_dir.path().join("stderr"));
    let mut cmd = Command::new(node_bin);
    cmd.arg(SCRIPT)
        .arg(endpoint)
        .args(["--read", node])
        .arg("--pki")
        .arg(pki_dir)
        .args(["--timeout-ms", &SCRIPT_TIMEOUT.as_millis().to_string()])
        .env("NODE_PATH", Path::new(NPM_DIR).join("node_modules"))
        .current_dir(out_dir.path());
    if let Some(policy) = &options.policy {
        cmd.args(["--policy", policy]);
    }
    if let Some(mode) = &options.mode {
        cmd.args(["--mode", mode]);
    }
    if let Some((user, password)) = &options.user {
        cmd.args(["--user", user, "--password", password]);
    }
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(fs::File::create(&stdout).expect("create the stdout file"))
        .stderr(fs::File::create(&stderr).expect("create the stderr file"))
        .spawn()
        .unwrap_or_else(|e| panic!("cannot start node-opcua ({cmd:?}): {e}"));
    let deadline = Instant::now() + NODE_OPCUA_DEADLINE;
    let status = loop {
        if let Ok(Some(status)) = child.try_wait() {
            break status;
        }
        if Instant::now() >= deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!(
                "node-opcua read of {node} at {endpoint}: no answer within {NODE_OPCUA_DEADLINE:?}; \
                 its stderr:\n{}",
                log_tail(&stderr, 40)
            );
        }
        thread::sleep(Duration::from_millis(20));
    };
    let printed = fs::read_to_string(&stdout).unwrap_or_default();
    let answer = printed
        .lines()
        .rev()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .find(|v| v.get("ok").is_some());
    match answer {
        Some(answer) if status.success() => answer,
        _ => panic!(
            "node-opcua read of {node} at {endpoint} ended {status} without an answer:\n\
             stdout:\n{printed}\nstderr:\n{}",
            log_tail(&stderr, 40)
        ),
    }
}

/// The client certificate node-opcua made in `pki_dir` (PEM), there after the first
/// [`node_opcua_read`] with it.
pub fn node_opcua_certificate(pki_dir: &Path) -> PathBuf {
    pki_dir.join("own/certs/client_certificate.pem")
}

/// That certificate as DER, the form a server keeps in its `rejected/` and `trusted/`
/// folders, so a test can tell which file there is node-opcua's; `None` before it is made.
pub fn node_opcua_certificate_der(pki_dir: &Path) -> Option<Vec<u8>> {
    let pem = fs::read_to_string(node_opcua_certificate(pki_dir)).ok()?;
    let body: String = pem
        .lines()
        .skip_while(|l| !l.starts_with("-----BEGIN CERTIFICATE-----"))
        .skip(1)
        .take_while(|l| !l.starts_with("-----END"))
        .collect();
    base64::engine::general_purpose::STANDARD
        .decode(body.trim())
        .ok()
}
