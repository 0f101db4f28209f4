//! A blocking HTTP client for the daemon's API, and helpers to build and read what it sends.

use std::time::Duration;

use serde_json::Value;

/// A complete HTTP reply.
#[derive(Debug, Clone)]
pub struct Reply {
    pub status: u16,
    /// Header names in lower case.
    pub headers: Vec<(String, String)>,
    pub body: String,
}

impl Reply {
    /// The first header of that name (case-insensitive).
    pub fn header(&self, name: &str) -> Option<&str> {
        let name = name.to_ascii_lowercase();
        self.headers
            .iter()
            .find(|(k, _)| *k == name)
            .map(|(_, v)| v.as_str())
    }

    /// The body as JSON; panics with the body when it is not.
    pub fn json(&self) -> Value {
        serde_json::from_str(&self.body).unwrap_or_else(|e| {
            panic!(
                "reply {} is not JSON ({e}): {:?}",
                self.status,
                truncate(&self.body, 500)
            )
        })
    }
}

/// A blocking HTTP client: 4xx/5xx come back as [`Reply`], transport failures as `Err`.
#[derive(Clone)]
pub struct Client {
    agent: ureq::Agent,
}

impl Default for Client {
    fn default() -> Self {
        Self::new()
    }
}

impl Client {
    pub fn new() -> Client {
        let config = ureq::Agent::config_builder()
            .http_status_as_error(false)
            .timeout_global(Some(Duration::from_secs(60)))
            // A server closes a keep-alive connection idle for its header read timeout (1 s at
            // the least). A request sent on one as it closes fails with "Peer disconnected";
            // the pool keeps a connection only for half that time so none is reused so late.
            .max_idle_age(Duration::from_millis(500))
            .build();
        Client {
            agent: config.into(),
        }
    }

    pub fn get(&self, url: &str, token: Option<&str>) -> Result<Reply, ureq::Error> {
        let mut req = self.agent.get(url);
        if let Some(token) = token {
            req = req.header("Authorization", format!("Bearer {token}"));
        }
        into_reply(req.call()?)
    }

    /// Any method, with extra headers; `body` (sent as `application/json` unless `headers`
    /// name a `Content-Type`) or none.
    pub fn request(
        &self,
        method: &str,
        url: &str,
        token: Option<&str>,
        headers: &[(&str, &str)],
        body: Option<&[u8]>,
    ) -> Result<Reply, ureq::Error> {
        let mut builder = ureq::http::Request::builder().method(method).uri(url);
        if let Some(token) = token {
            builder = builder.header("Authorization", format!("Bearer {token}"));
        }
        for (name, value) in headers {
            builder = builder.header(*name, *value);
        }
        let typed = headers
            .iter()
            .any(|(name, _)| name.eq_ignore_ascii_case("content-type"));
        let resp = match body {
            Some(body) => {
                if !typed {
                    builder = builder.header("Content-Type", "application/json");
                }
                let req = builder.body(body.to_vec()).expect("build request");
                self.agent.run(req)?
            }
            None => self.agent.run(builder.body(()).expect("build request"))?,
        };
        into_reply(resp)
    }

    pub fn post(&self, url: &str, token: Option<&str>, body: &[u8]) -> Result<Reply, ureq::Error> {
        let mut req = self
            .agent
            .post(url)
            .header("Content-Type", "application/json");
        if let Some(token) = token {
            req = req.header("Authorization", format!("Bearer {token}"));
        }
        into_reply(req.send(body)?)
    }
}

fn into_reply(mut resp: ureq::http::Response<ureq::Body>) -> Result<Reply, ureq::Error> {
    let status = resp.status().as_u16();
    let headers = resp
        .headers()
        .iter()
        .map(|(k, v)| {
            (
                k.as_str().to_ascii_lowercase(),
                String::from_utf8_lossy(v.as_bytes()).into_owned(),
            )
        })
        .collect();
    let gzip = resp
        .headers()
        .get("content-encoding")
        .is_some_and(|v| v.as_bytes().eq_ignore_ascii_case(b"gzip"));
    let bytes = resp.body_mut().read_to_vec()?;
    // The status page's files come gzip-compressed: read as a browser would.
    let bytes = if gzip {
        let mut text = Vec::new();
        std::io::Read::read_to_end(&mut flate2::read::GzDecoder::new(&bytes[..]), &mut text)
            .map_err(ureq::Error::Io)?;
        text
    } else {
        bytes
    };
    let body = String::from_utf8(bytes)
        .map_err(|e| ureq::Error::Io(std::io::Error::new(std::io::ErrorKind::InvalidData, e)))?;
    Ok(Reply {
        status,
        headers,
        body,
    })
}

/// `http://ADDR/api/ingest/{source}/{key}`.
pub fn ingest_url(base: &str, source: &str, key: &str) -> String {
    format!("{base}/api/ingest/{source}/{key}")
}

/// A JSON object of exactly `size` bytes (at least ~30): `{"key":"...","pad":"xxxx"}`.
pub fn padded_payload(key: &str, size: usize) -> String {
    let head = format!("{{\"key\":{},\"pad\":\"", Value::from(key));
    let tail = "\"}";
    let pad = size.saturating_sub(head.len() + tail.len());
    format!("{head}{}{tail}", "x".repeat(pad))
}

/// The value of the first sample of `name` in Prometheus text (labels ignored).
pub fn metric(text: &str, name: &str) -> Option<f64> {
    text.lines()
        .filter(|l| !l.starts_with('#'))
        .find_map(|line| {
            let mut parts = line.split_whitespace();
            let series = parts.next()?;
            let value = parts.next()?;
            let bare = series.split('{').next()?;
            (bare == name).then(|| value.parse::<f64>().ok()).flatten()
        })
}

/// `value[pointer]` as u64; panics with the whole value when absent or not a u64.
pub fn u64_at(value: &Value, pointer: &str) -> u64 {
    value
        .pointer(pointer)
        .and_then(Value::as_u64)
        .unwrap_or_else(|| panic!("{pointer} is not a u64 in {value:#}"))
}

pub fn truncate(s: &str, max: usize) -> String {
    if s.len() <= max {
        return s.to_string();
    }
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}...[{} more bytes]", &s[..end], s.len() - end)
}

/// One keep-alive connection spoken to by hand: each request's head and body go out in two
/// writes (as a client streaming its body does), each reply is read whole by its
/// `Content-Length`, and the connection stays open for the next request.
pub struct KeepAlive {
    stream: std::net::TcpStream,
    /// Bytes read past the last reply.
    pending: Vec<u8>,
}

impl KeepAlive {
    /// Connects to `addr` (`host:port`).
    pub fn connect(addr: &str) -> std::io::Result<KeepAlive> {
        let stream = std::net::TcpStream::connect(addr)?;
        stream.set_read_timeout(Some(Duration::from_secs(30)))?;
        stream.set_nodelay(true)?;
        Ok(KeepAlive {
            stream,
            pending: Vec::new(),
        })
    }

    /// Sends `method path` with `headers` (lines without their CRLF; `Host: 127.0.0.1` unless
    /// they have a `Host`) and `body`, and reads the reply. An error is the connection failing
    /// (closed, reset, broken pipe).
    pub fn send(
        &mut self,
        method: &str,
        path: &str,
        headers: &[&str],
        body: &[u8],
    ) -> std::io::Result<Reply> {
        use std::io::Write;
        let mut head = format!("{method} {path} HTTP/1.1\r\n");
        if !headers
            .iter()
            .any(|h| h.to_ascii_lowercase().starts_with("host:"))
        {
            head.push_str("Host: 127.0.0.1\r\n");
        }
        for h in headers {
            head.push_str(h);
            head.push_str("\r\n");
        }
        if !body.is_empty() {
            head.push_str(&format!("Content-Length: {}\r\n", body.len()));
        }
        head.push_str("\r\n");
        self.stream.write_all(head.as_bytes())?;
        self.exchange(body)
    }

    /// Writes `bytes` (a whole request, or what is left of one) in one write, and reads the
    /// reply.
    pub fn exchange(&mut self, bytes: &[u8]) -> std::io::Result<Reply> {
        use std::io::Write;
        if !bytes.is_empty() {
            self.stream.write_all(bytes)?;
        }
        self.read_reply()
    }

    fn read_reply(&mut self) -> std::io::Result<Reply> {
        let broken = |what: &str| std::io::Error::new(std::io::ErrorKind::InvalidData, what);
        let end = loop {
            if let Some(i) = self.pending.windows(4).position(|w| w == b"\r\n\r\n") {
                break i + 4;
            }
            self.fill()?;
        };
        let head = String::from_utf8_lossy(&self.pending[..end]).into_owned();
        let mut lines = head.split("\r\n");
        let status = lines
            .next()
            .and_then(|l| l.split(' ').nth(1))
            .and_then(|s| s.parse().ok())
            .ok_or_else(|| broken("no status line"))?;
        let headers: Vec<(String, String)> = lines
            .filter_map(|l| l.split_once(':'))
            .map(|(k, v)| (k.trim().to_ascii_lowercase(), v.trim().to_string()))
            .collect();
        let length: usize = headers
            .iter()
            .find(|(k, _)| k == "content-length")
            .and_then(|(_, v)| v.parse().ok())
            .ok_or_else(|| broken("no content-length"))?;
        while self.pending.len() < end + length {
            self.fill()?;
        }
        let body = String::from_utf8_lossy(&self.pending[end..end + length]).into_owned();
        self.pending.drain(..end + length);
        Ok(Reply {
            status,
            headers,
            body,
        })
    }

    fn fill(&mut self) -> std::io::Result<()> {
        use std::io::Read;
        let mut buf = [0u8; 8192];
        match self.stream.read(&mut buf)? {
            0 => Err(std::io::Error::new(
                std::io::ErrorKind::UnexpectedEof,
                "the server closed the connection",
            )),
            n => {
                self.pending.extend_from_slice(&buf[..n]);
                Ok(())
            }
        }
    }
}
