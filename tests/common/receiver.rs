//! An uplink receiver: a tiny HTTP/1.1 server (std only, a thread per connection,
//! keep-alive, Content-Length or chunked request bodies) that records the NDJSON it accepts.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use serde_json::Value;

/// One request the receiver answered.
#[derive(Debug, Clone)]
pub struct Received {
    pub method: String,
    pub path: String,
    /// Header names in lower case.
    pub headers: BTreeMap<String, String>,
    pub body: String,
    /// What the receiver answered.
    pub status: u16,
}

impl Received {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .get(&name.to_ascii_lowercase())
            .map(String::as_str)
    }
}

#[derive(Default)]
struct RecvState {
    /// Every answered request, in arrival order.
    requests: Vec<Received>,
    /// Every NDJSON object of every 2xx-answered request, in arrival order.
    accepted: Vec<Value>,
    /// Lines that were not JSON objects (answered 400; a test asserts there are none).
    bad_lines: Vec<String>,
}

struct RecvShared {
    /// Answer 503 instead of 200.
    unavailable: AtomicBool,
    /// Listener closed: requests in flight get their connection cut, not an answer.
    down: AtomicBool,
    /// A record whose `payload` (as JSON text) contains this is answered 400.
    reject_marker: Mutex<Option<String>>,
    /// Every request is answered with this status and an echo of its body, as a receiver
    /// with a rotated token (401) or one refusing every record (422) would.
    forced: Mutex<Option<u16>>,
    state: Mutex<RecvState>,
    /// Open connections, so going down can cut them.
    conns: Mutex<HashMap<u64, TcpStream>>,
    next_conn: AtomicU64,
}

struct AcceptLoop {
    stop: Arc<AtomicBool>,
    handle: JoinHandle<()>,
}

/// A tiny HTTP/1.1 uplink receiver on `127.0.0.1:PORT` (keep-alive, Content-Length or
/// chunked request bodies).
pub struct Receiver {
    port: u16,
    shared: Arc<RecvShared>,
    accept: Mutex<Option<AcceptLoop>>,
}

impl Receiver {
    /// Listening and answering 200.
    pub fn start() -> Receiver {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind receiver");
        let port = listener.local_addr().expect("local addr").port();
        let receiver = Receiver::new(port);
        *receiver.accept.lock().unwrap() = Some(spawn_accept(listener, receiver.shared.clone()));
        receiver
    }

    /// A port is chosen but nothing listens on it: connections are refused until [`Receiver::up`].
    pub fn start_down() -> Receiver {
        let receiver = Receiver::new(super::free_port());
        receiver.shared.down.store(true, Ordering::SeqCst);
        receiver
    }

    fn new(port: u16) -> Receiver {
        Receiver {
            port,
            shared: Arc::new(RecvShared {
                unavailable: AtomicBool::new(false),
                down: AtomicBool::new(false),
                reject_marker: Mutex::new(None),
                forced: Mutex::new(None),
                state: Mutex::new(RecvState::default()),
                conns: Mutex::new(HashMap::new()),
                next_conn: AtomicU64::new(0),
            }),
            accept: Mutex::new(None),
        }
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    /// The uplink URL to configure as `connector.push.url`.
    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}/ingest", self.port)
    }

    /// Closes the listener (connections are refused) and cuts every open connection.
    pub fn down(&self) {
        self.shared.down.store(true, Ordering::SeqCst);
        if let Some(acceptor) = self.accept.lock().unwrap().take() {
            acceptor.stop.store(true, Ordering::SeqCst);
            // Wake the blocking accept so the loop sees the flag and drops the listener.
            let _ = TcpStream::connect(("127.0.0.1", self.port));
            acceptor.handle.join().expect("accept loop panicked");
        }
        for (_, conn) in self.shared.conns.lock().unwrap().drain() {
            let _ = conn.shutdown(Shutdown::Both);
        }
    }

    /// Listens again on the same port and answers 200 (also clears [`Receiver::unavailable`]).
    pub fn up(&self) {
        self.shared.unavailable.store(false, Ordering::SeqCst);
        let mut accept = self.accept.lock().unwrap();
        if accept.is_none() {
            let deadline = Instant::now() + Duration::from_secs(15);
            let listener = loop {
                match TcpListener::bind(("127.0.0.1", self.port)) {
                    Ok(l) => break l,
                    Err(e) if Instant::now() < deadline => {
                        eprintln!("receiver: rebinding port {}: {e}; retrying", self.port);
                        thread::sleep(Duration::from_millis(50));
                    }
                    Err(e) => panic!("receiver could not rebind port {}: {e}", self.port),
                }
            };
            self.shared.down.store(false, Ordering::SeqCst);
            *accept = Some(spawn_accept(listener, self.shared.clone()));
        }
    }

    /// Keeps listening but answers every request 503 (no `Retry-After`).
    pub fn unavailable(&self) {
        self.shared.unavailable.store(true, Ordering::SeqCst);
    }

    /// Answers every request with `status`, its body echoing the request's first bytes (which
    /// hold a record), until [`Receiver::answer_normally`].
    pub fn answer_every_request_with(&self, status: u16) {
        *self.shared.forced.lock().unwrap() = Some(status);
    }

    /// Back to answering 200 (or 400 for a marked record).
    pub fn answer_normally(&self) {
        *self.shared.forced.lock().unwrap() = None;
    }

    /// Answers 400 to any request holding a record whose payload contains `marker`.
    pub fn reject_payloads_containing(&self, marker: &str) {
        *self.shared.reject_marker.lock().unwrap() = Some(marker.to_string());
    }

    /// Every request answered so far.
    pub fn requests(&self) -> Vec<Received> {
        self.shared.state.lock().unwrap().requests.clone()
    }

    /// Every accepted NDJSON object, in arrival order (duplicates included).
    pub fn records(&self) -> Vec<Value> {
        self.shared.state.lock().unwrap().accepted.clone()
    }

    /// Lines that were not JSON objects.
    pub fn bad_lines(&self) -> Vec<String> {
        self.shared.state.lock().unwrap().bad_lines.clone()
    }

    /// Accepted record ids in arrival order (duplicates included).
    pub fn ids(&self) -> Vec<String> {
        self.records()
            .iter()
            .map(|r| r["id"].as_str().unwrap_or("<no id>").to_string())
            .collect()
    }

    /// Accepted record ids, each at its first arrival.
    pub fn first_arrivals(&self) -> Vec<String> {
        let mut seen = HashSet::new();
        self.ids()
            .into_iter()
            .filter(|id| seen.insert(id.clone()))
            .collect()
    }

    pub fn unique_ids(&self) -> HashSet<String> {
        self.ids().into_iter().collect()
    }

    /// Whether every id in `ids` has been accepted.
    pub fn has_all(&self, ids: &[String]) -> bool {
        let got = self.unique_ids();
        ids.iter().all(|id| got.contains(id))
    }
}

impl Drop for Receiver {
    fn drop(&mut self) {
        self.down();
    }
}

fn spawn_accept(listener: TcpListener, shared: Arc<RecvShared>) -> AcceptLoop {
    let stop = Arc::new(AtomicBool::new(false));
    let flag = stop.clone();
    let handle = thread::spawn(move || {
        for conn in listener.incoming() {
            if flag.load(Ordering::SeqCst) {
                break;
            }
            let Ok(stream) = conn else { continue };
            let id = shared.next_conn.fetch_add(1, Ordering::SeqCst);
            if let Ok(clone) = stream.try_clone() {
                shared.conns.lock().unwrap().insert(id, clone);
            }
            let shared = shared.clone();
            thread::spawn(move || {
                let _ = serve_connection(&shared, stream);
                shared.conns.lock().unwrap().remove(&id);
            });
        }
        // The listener drops here: the port is closed.
    });
    AcceptLoop { stop, handle }
}

fn read_line_crlf(reader: &mut impl BufRead) -> std::io::Result<Option<String>> {
    let mut line = String::new();
    if reader.read_line(&mut line)? == 0 {
        return Ok(None);
    }
    Ok(Some(line.trim_end_matches(['\r', '\n']).to_string()))
}

fn serve_connection(shared: &RecvShared, stream: TcpStream) -> std::io::Result<()> {
    let mut reader = BufReader::new(stream.try_clone()?);
    let mut writer = stream;
    loop {
        let Some(request_line) = read_line_crlf(&mut reader)? else {
            return Ok(());
        };
        if request_line.is_empty() {
            continue;
        }
        let mut parts = request_line.split_whitespace();
        let method = parts.next().unwrap_or_default().to_string();
        let path = parts.next().unwrap_or_default().to_string();
        let mut headers = BTreeMap::new();
        loop {
            let Some(line) = read_line_crlf(&mut reader)? else {
                return Ok(());
            };
            if line.is_empty() {
                break;
            }
            if let Some((k, v)) = line.split_once(':') {
                headers.insert(k.trim().to_ascii_lowercase(), v.trim().to_string());
            }
        }
        if headers
            .get("expect")
            .is_some_and(|v| v.eq_ignore_ascii_case("100-continue"))
        {
            writer.write_all(b"HTTP/1.1 100 Continue\r\n\r\n")?;
        }
        let body = if headers
            .get("transfer-encoding")
            .is_some_and(|v| v.to_ascii_lowercase().contains("chunked"))
        {
            read_chunked(&mut reader)?
        } else {
            let len: usize = headers
                .get("content-length")
                .and_then(|v| v.parse().ok())
                .unwrap_or(0);
            let mut buf = vec![0; len];
            reader.read_exact(&mut buf)?;
            buf
        };
        let body = String::from_utf8_lossy(&body).into_owned();
        let head: String = body.chars().take(120).collect();
        let close = headers
            .get("connection")
            .is_some_and(|v| v.eq_ignore_ascii_case("close"));

        let status = {
            let mut state = shared.state.lock().unwrap();
            if shared.down.load(Ordering::SeqCst) {
                // Gone: cut the connection without an answer.
                return Ok(());
            }
            let status = decide(shared, &body, &mut state);
            state.requests.push(Received {
                method,
                path,
                headers,
                body,
                status,
            });
            status
        };
        let forced = *shared.forced.lock().unwrap();
        let echo;
        let (reason, answer) = match (status, forced) {
            (s, Some(f)) if s == f => {
                echo =
                    serde_json::json!({"ok": false, "error": "refused", "echo": head}).to_string();
                ("Refused", echo.as_str())
            }
            (200, _) => ("OK", r#"{"ok":true}"#),
            (400, _) => ("Bad Request", r#"{"ok":false,"error":"rejected"}"#),
            _ => (
                "Service Unavailable",
                r#"{"ok":false,"error":"unavailable"}"#,
            ),
        };
        // One write: `write!` on the bare stream would send each piece in a segment of its
        // own, and the client's delayed ACK would hold the last ones back ~40 ms per answer.
        let reply = format!(
            "HTTP/1.1 {status} {reason}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{answer}",
            answer.len()
        );
        writer.write_all(reply.as_bytes())?;
        writer.flush()?;
        if close {
            return Ok(());
        }
    }
}

/// The forced status when there is one, 503 when unavailable, 400 when a line is not a JSON
/// object or holds the reject marker,
/// else 200 and the lines are recorded as accepted.
fn decide(shared: &RecvShared, body: &str, state: &mut RecvState) -> u16 {
    if let Some(status) = *shared.forced.lock().unwrap() {
        return status;
    }
    if shared.unavailable.load(Ordering::SeqCst) {
        return 503;
    }
    let marker = shared.reject_marker.lock().unwrap().clone();
    let mut records = Vec::new();
    let mut bad = false;
    for line in body.lines().filter(|l| !l.trim().is_empty()) {
        match serde_json::from_str::<Value>(line) {
            Ok(v) if v.is_object() => records.push(v),
            _ => {
                state.bad_lines.push(line.to_string());
                bad = true;
            }
        }
    }
    let marked = marker.is_some_and(|m| {
        records
            .iter()
            .any(|r| r["payload"].to_string().contains(&m))
    });
    if bad || marked {
        return 400;
    }
    state.accepted.extend(records);
    200
}

fn read_chunked(reader: &mut impl BufRead) -> std::io::Result<Vec<u8>> {
    let mut body = Vec::new();
    loop {
        let Some(size_line) = read_line_crlf(reader)? else {
            return Err(std::io::ErrorKind::UnexpectedEof.into());
        };
        let size = usize::from_str_radix(size_line.split(';').next().unwrap_or("").trim(), 16)
            .map_err(|_| std::io::Error::from(std::io::ErrorKind::InvalidData))?;
        if size == 0 {
            // Trailers, then the empty line.
            while let Some(line) = read_line_crlf(reader)? {
                if line.is_empty() {
                    break;
                }
            }
            return Ok(body);
        }
        let start = body.len();
        body.resize(start + size, 0);
        reader.read_exact(&mut body[start..])?;
        read_line_crlf(reader)?;
    }
}
