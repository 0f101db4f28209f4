//! An OPC-UA client nobody here wrote: asyncua (pinned in scripts/test.sh) running
//! `opcua_client.py` (beside this file), a long-running process the test drives with one JSON
//! request a line on its standard input, each answered with one JSON line on its standard
//! output (the script's doc lists the requests and answers).
//!
//! It is what a SCADA or MES client does to the connector's OPC-UA server: connect with a
//! security policy, mode and user, browse, read values and attributes, subscribe, write.
//! Each client runs in a temp dir of its own (its log, and its certificate under `pki/`
//! unless [`ClientOptions::cert_dir`] names another folder); it is ready when it prints
//! `ready`, read with a deadline. Every request carries an id, and the answer with that id
//! is awaited with a deadline ([`REQUEST_DEADLINE`] unless given): a late answer of an
//! earlier request is skipped, never taken for the next one's.

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError};
use std::sync::Mutex;
use std::thread;
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use tempfile::TempDir;

use super::process::{require_python, show_log_if_failing, PEER_START_DEADLINE};

/// The client script.
const SCRIPT: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/tests/common/peers/opcua_client.py"
);

/// How long [`OpcuaClient::request`] waits for an answer. The script gives up on a request
/// itself two seconds earlier (`timeout_ms`) and answers `{"error":"timeout"}`.
pub const REQUEST_DEADLINE: Duration = Duration::from_secs(10);
/// How long the script may take to exit after `quit` before it is killed.
const QUIT_DEADLINE: Duration = Duration::from_secs(5);

/// How an OPC-UA client of the tests connects: its user, security policy and mode, and
/// where its certificate is. The default is security None, anonymous.
#[derive(Debug, Clone, Default)]
pub struct ClientOptions {
    /// User name and password; `None`: anonymous.
    pub user: Option<(String, String)>,
    /// `Basic256Sha256`, `Aes128_Sha256_RsaOaep`, `Aes256_Sha256_RsaPss` or `None` (the
    /// default).
    pub policy: Option<String>,
    /// `Sign`, `SignAndEncrypt` or `None`; with a policy other than `None` it defaults to
    /// `SignAndEncrypt`.
    pub mode: Option<String>,
    /// The folder of the client's certificate and key, made there when missing (a test that
    /// moves the certificate between the server's `trusted/` and `rejected/` knows it by
    /// it); `None`: the client's temp dir.
    pub cert_dir: Option<PathBuf>,
}

impl ClientOptions {
    /// Security None, anonymous.
    pub fn anonymous() -> ClientOptions {
        ClientOptions::default()
    }

    /// `policy` and `mode`, e.g. `("Basic256Sha256", "SignAndEncrypt")`, anonymous.
    pub fn secure(policy: &str, mode: &str) -> ClientOptions {
        ClientOptions {
            policy: Some(policy.to_string()),
            mode: Some(mode.to_string()),
            ..ClientOptions::default()
        }
    }

    /// The same, logging in as `user` with `password`.
    pub fn user(mut self, user: &str, password: &str) -> ClientOptions {
        self.user = Some((user.to_string(), password.to_string()));
        self
    }

    /// The same, with the certificate and key in `dir`.
    pub fn cert_dir(mut self, dir: &Path) -> ClientOptions {
        self.cert_dir = Some(dir.to_path_buf());
        self
    }

    /// Whether the client needs a certificate (a policy other than `None`).
    pub fn is_secure(&self) -> bool {
        self.policy.as_deref().is_some_and(|p| p != "None")
    }
}

/// Why a request has no answer.
enum Unanswered {
    /// None came before the deadline.
    Late,
    /// The script cannot be asked or has exited: what happened.
    Gone(String),
}

/// What the script's standard streams are tied to: its input, and the lines of its output
/// (read by a thread, so an answer can be awaited with a deadline).
struct Pipes {
    stdin: ChildStdin,
    lines: Receiver<String>,
    /// The log, where each request is written as it is sent (`> ...`).
    log: std::fs::File,
}

/// A running asyncua client. Dropping it sends `quit` (the session is closed) and kills the
/// process if it does not exit; when a test fails, its log's tail is printed.
pub struct OpcuaClient {
    endpoint: String,
    cert_dir: Option<PathBuf>,
    child: Child,
    /// Held for a whole request: one request is answered at a time.
    pipes: Mutex<Pipes>,
    next_id: AtomicU64,
    log: PathBuf,
    dir: TempDir,
}

impl OpcuaClient {
    /// Starts a client of `endpoint` (not connected yet: see [`OpcuaClient::connect`]);
    /// returns once it is ready.
    pub fn start(endpoint: &str, options: &ClientOptions) -> OpcuaClient {
        require_python(
            "asyncua",
            "run scripts/test.sh (it installs the pinned asyncua) or `python3 -m pip install asyncua==1.1.8`",
        );
        let dir = tempfile::Builder::new()
            .prefix("opex-opcua-client-")
            .tempdir()
            .expect("temp dir");
        let log = dir.path().join("client.log");
        let log_file = std::fs::File::create(&log).expect("create the client's log");
        let mut cmd = Command::new("python3");
        cmd.arg(SCRIPT).arg(endpoint).current_dir(dir.path());
        if let Some((user, password)) = &options.user {
            cmd.args(["--user", user, "--password", password]);
        }
        if let Some(policy) = &options.policy {
            cmd.args(["--policy", policy]);
        }
        if let Some(mode) = &options.mode {
            cmd.args(["--mode", mode]);
        }
        let cert_dir = options.is_secure().then(|| {
            options
                .cert_dir
                .clone()
                .unwrap_or_else(|| dir.path().join("pki"))
        });
        if let Some(cert_dir) = &cert_dir {
            cmd.arg("--cert-dir").arg(cert_dir);
        }
        let mut child = cmd
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(log_file.try_clone().expect("clone the log file"))
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start the asyncua client ({cmd:?}): {e}"));
        let stdin = child.stdin.take().expect("stdin is piped");
        let stdout = child.stdout.take().expect("stdout is piped");
        let (send, lines) = mpsc::channel();
        let requests_log = log_file.try_clone().expect("clone the log file");
        // Copies every output line into the log too, so the log reads as the conversation.
        // It ends when the process closes its output; the channel is unbounded, but a test
        // reads every answer it asked for.
        thread::spawn(move || {
            let mut log_file = log_file;
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                let _ = writeln!(log_file, "< {line}");
                if send.send(line).is_err() {
                    break;
                }
            }
        });
        let client = OpcuaClient {
            endpoint: endpoint.to_string(),
            cert_dir,
            child,
            pipes: Mutex::new(Pipes {
                stdin,
                lines,
                log: requests_log,
            }),
            next_id: AtomicU64::new(1),
            log,
            dir,
        };
        client.wait_ready();
        client
    }

    /// Waits for the `ready` line; panics with the log when the script exits first or
    /// [`PEER_START_DEADLINE`] passes.
    fn wait_ready(&self) {
        let pipes = self.pipes.lock().unwrap_or_else(|e| e.into_inner());
        let deadline = Instant::now() + PEER_START_DEADLINE;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match pipes.lines.recv_timeout(left) {
                Ok(line) if line == "ready" => return,
                Ok(_) => continue,
                Err(RecvTimeoutError::Timeout) => {
                    self.fail(&format!("not ready within {PEER_START_DEADLINE:?}"))
                }
                Err(RecvTimeoutError::Disconnected) => self.fail("exited before it was ready"),
            }
        }
    }

    /// Panics with `what`; the log's tail is shown as the client is dropped.
    fn fail(&self, what: &str) -> ! {
        panic!(
            "asyncua client of {}: {what} (its log: {})",
            self.endpoint,
            self.log.display()
        )
    }

    /// Sends `request` (an object with `"op"`; an `"id"` is added) and returns its answer,
    /// `{"error": ..}` included; panics when none comes within [`REQUEST_DEADLINE`].
    pub fn request(&self, request: Value) -> Value {
        let op = request["op"].clone();
        self.request_within(request, REQUEST_DEADLINE)
            .unwrap_or_else(|| self.fail(&format!("no answer to {op} within {REQUEST_DEADLINE:?}")))
    }

    /// Sends `request` and waits at most `deadline` for its answer; `None` when none came.
    /// The script is told to give up two seconds before (at least one second after the
    /// send), unless `request` says its own `timeout_ms`. Panics when the script is gone.
    pub fn request_within(&self, request: Value, deadline: Duration) -> Option<Value> {
        match self.exchange(request, deadline) {
            Ok(answer) => Some(answer),
            Err(Unanswered::Late) => None,
            Err(Unanswered::Gone(why)) => self.fail(&why),
        }
    }

    /// One request and its answer (see [`OpcuaClient::request_within`]), without panicking.
    fn exchange(&self, mut request: Value, deadline: Duration) -> Result<Value, Unanswered> {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let Some(fields) = request.as_object_mut() else {
            panic!("a request is a JSON object with \"op\", not {request}");
        };
        fields.insert("id".into(), json!(id));
        let script_limit = deadline
            .saturating_sub(Duration::from_secs(2))
            .max(Duration::from_secs(1));
        fields
            .entry("timeout_ms")
            .or_insert_with(|| json!(u64::try_from(script_limit.as_millis()).unwrap_or(u64::MAX)));
        // A test that panicked while it held the lock left the pipes as they were: usable.
        let mut pipes = self.pipes.lock().unwrap_or_else(|e| e.into_inner());
        let line = format!("{request}\n");
        let _ = write!(pipes.log, "> {line}");
        let mut stdin = &pipes.stdin;
        stdin
            .write_all(line.as_bytes())
            .and_then(|()| stdin.flush())
            .map_err(|e| Unanswered::Gone(format!("cannot send {request}: {e}")))?;
        let until = Instant::now() + deadline;
        loop {
            let left = until.saturating_duration_since(Instant::now());
            match pipes.lines.recv_timeout(left) {
                Ok(line) => {
                    // A line that is not JSON, or an earlier request's late answer, is skipped.
                    let Ok(answer) = serde_json::from_str::<Value>(&line) else {
                        continue;
                    };
                    if answer["id"] == json!(id) {
                        return Ok(answer);
                    }
                }
                Err(RecvTimeoutError::Timeout) => return Err(Unanswered::Late),
                Err(RecvTimeoutError::Disconnected) => {
                    return Err(Unanswered::Gone(format!(
                        "exited while {request} waited for its answer"
                    )))
                }
            }
        }
    }

    /// Like [`OpcuaClient::request`]; panics when the answer is an error.
    fn request_ok(&self, request: Value) -> Value {
        let answer = self.request(request.clone());
        if let Some(error) = answer.get("error") {
            self.fail(&format!("{request} was answered with the error {error}"));
        }
        answer
    }

    /// Opens the session: `Err` holds the StatusCode's name (`BadIdentityTokenRejected`,
    /// `BadSecurityChecksFailed`, `BadCertificateUntrusted`, ...) or asyncua's error text.
    pub fn connect(&self) -> Result<(), String> {
        let answer = self.request(json!({"op": "connect"}));
        match answer.get("error") {
            Some(error) => Err(error.as_str().unwrap_or_default().to_string()),
            None => Ok(()),
        }
    }

    /// The tree under `Objects` down to the server's own nodes (not into namespace 0
    /// below it): each node `{"node_id","browse_name","display_name","node_class",
    /// "children"}`. Panics on an error.
    pub fn browse(&self) -> Vec<Value> {
        self.browse_from("i=85", true)
    }

    /// The children of `node`, and theirs when `recursive`. Panics on an error.
    pub fn browse_from(&self, node: &str, recursive: bool) -> Vec<Value> {
        let answer = self.request_ok(json!({"op": "browse", "node": node, "recursive": recursive}));
        answer["nodes"].as_array().cloned().unwrap_or_default()
    }

    /// Every reference of `node` in both directions, each `{"type","forward","node_id",
    /// "browse_name","node_class","type_definition"}` (`type` the reference type's browse
    /// name), asking for at most `per_answer` references an answer (0: the server's bound),
    /// and how many answers (Browse and BrowseNext) they took. Panics on an error.
    pub fn references(&self, node: &str, per_answer: u32) -> (Vec<Value>, u64) {
        let answer =
            self.request_ok(json!({"op": "references", "node": node, "per_answer": per_answer}));
        let refs = answer["references"].as_array().cloned().unwrap_or_default();
        (refs, answer["answers"].as_u64().unwrap_or(0))
    }

    /// Reads the values of `nodes` in one Read request: per node, in order, `{"node",
    /// "value","data_type","status","source_ts"}` (`data_type` the value's built-in type,
    /// `status` a StatusCode name: a bad node is a result, not an error). Panics when the
    /// request itself fails.
    pub fn read(&self, nodes: &[&str]) -> Vec<Value> {
        let answer = self.request_ok(json!({"op": "read", "nodes": nodes}));
        answer["results"].as_array().cloned().unwrap_or_default()
    }

    /// One variable's `data_type`, `access_level`, `user_access_level`, `description`,
    /// `EngineeringUnits` (`{"display_name","unit_id","namespace_uri"}`) and `EURange`
    /// (`{"low","high"}`), the last two `null` when it has no such property. Panics on an
    /// error.
    pub fn read_attrs(&self, node: &str) -> Value {
        self.request_ok(json!({"op": "read_attrs", "node": node}))
    }

    /// Subscribes to `nodes` with a publishing interval of `interval_ms`, no deadband, and
    /// returns the subscription's id; the changes are then buffered
    /// ([`OpcuaClient::changes`]). Panics on an error or a monitored item refused.
    pub fn subscribe(&self, nodes: &[&str], interval_ms: u64) -> u64 {
        self.subscribe_with(json!({"nodes": nodes, "interval_ms": interval_ms}))
    }

    /// The same with the request's fields given (`deadband`: `{"type":"absolute"|"percent",
    /// "value":x}`, `sampling_ms`, `queue_size`). Panics on an error or a monitored item
    /// refused; see [`OpcuaClient::request`] for an answer with the items' statuses.
    pub fn subscribe_with(&self, mut fields: Value) -> u64 {
        fields["op"] = json!("subscribe");
        let answer = self.request_ok(fields);
        let items = answer["items"].as_array().cloned().unwrap_or_default();
        if let Some(bad) = items.iter().find(|i| i["status"] != json!("Good")) {
            self.fail(&format!("monitored item refused: {bad}"));
        }
        answer["subscription"]
            .as_u64()
            .unwrap_or_else(|| self.fail(&format!("no subscription id in {answer}")))
    }

    /// The data changes buffered since index `since` (0: all), oldest first: `{"subscription",
    /// "node","value","status","source_ts"}`. The next call's `since` is the old one plus
    /// the length.
    pub fn changes(&self, since: usize) -> Vec<Value> {
        let answer = self.request_ok(json!({"op": "changes", "since": since}));
        answer["changes"].as_array().cloned().unwrap_or_default()
    }

    /// Writes `value` as the built-in type `data_type` (`Double`, `Float`, `Int16`, `UInt16`,
    /// `Int32`, `UInt32`, `Boolean`, `String`, ...) and returns the write's StatusCode name
    /// (`Good`, `BadOutOfRange`, `BadUserAccessDenied`, `Uncertain`...). Panics when the
    /// request fails as a whole.
    pub fn write(&self, node: &str, value: Value, data_type: &str) -> String {
        let answer = self
            .request_ok(json!({"op": "write", "node": node, "value": value, "type": data_type}));
        answer["status"].as_str().unwrap_or_default().to_string()
    }

    /// Closes the session (the process stays, and may connect again).
    pub fn disconnect(&self) {
        self.request_ok(json!({"op": "disconnect"}));
    }

    /// The folder of the client's certificate (`client-cert.der`, DER) and key, in secure
    /// modes.
    pub fn cert_dir(&self) -> Option<&Path> {
        self.cert_dir.as_deref()
    }

    /// The client's certificate, DER, in secure modes (made on the first connect).
    pub fn certificate(&self) -> Option<PathBuf> {
        self.cert_dir.as_ref().map(|d| d.join("client-cert.der"))
    }

    /// The temp dir (log; the certificate under `pki/` unless given).
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }
}

impl Drop for OpcuaClient {
    fn drop(&mut self) {
        show_log_if_failing("asyncua client", &self.log);
        // Closes the session as a client that leaves does; no answer needed.
        let _ = self.exchange(json!({"op": "quit"}), QUIT_DEADLINE);
        let deadline = Instant::now() + QUIT_DEADLINE;
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            thread::sleep(Duration::from_millis(20));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The first node named `browse_name` in `tree` (an answer of [`OpcuaClient::browse`]),
/// depth first.
pub fn find_node<'a>(tree: &'a [Value], browse_name: &str) -> Option<&'a Value> {
    tree.iter().find_map(|node| {
        if node["browse_name"] == json!(browse_name) {
            return Some(node);
        }
        find_node(node["children"].as_array()?, browse_name)
    })
}
