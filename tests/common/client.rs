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

    /// Any method, with extra headers; `body` (sent as `application/json`) or none.
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
        let resp = match body {
            Some(body) => {
                let req = builder
                    .header("Content-Type", "application/json")
                    .body(body.to_vec())
                    .expect("build request");
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
    let body = resp.body_mut().read_to_string()?;
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
