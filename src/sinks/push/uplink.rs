//! The uplink: the push sink's destination, an HTTP receiver that takes batches of records as
//! NDJSON `POST`s to `url`. A [`crate::sinks::queue::Deliverer`] drains the queue into it.
//!
//! A receiver's answer is judged by [`judge`]: 2xx delivered; 408, 429, 5xx, timeouts and
//! connection errors retried with back-off (a `Retry-After` in seconds is honoured); 400, 413,
//! 415 and 422 name the content, so the batch goes row by row and a row refused alone is a dead
//! letter; every other answer (401, 403, 404, 405, 407, 410, 411, 421, 426, a redirect ...)
//! says something about the request or the configuration, so the rows are kept, retried and
//! the queue held with an alert. A rotated token never empties the queue.

use std::time::Duration;

use super::config::UplinkConfig;
use crate::http::client::{Client, ClientError, Request, Response};
use crate::sinks::queue::{Destination, Failure, Verdict};
use crate::store::Row;

/// Longest part of a receiver's error body kept.
const MAX_REASON: usize = 512;

/// How a receiver's non-2xx answer is taken.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    /// Transient (408, 429, 5xx): send again later.
    Transient,
    /// The request or configuration is refused (authentication, address, method): keep what
    /// was sent, send it again later, alert.
    Request,
    /// The content is refused (400, 413, 415, 422).
    Content,
}

impl Refusal {
    /// The class of HTTP status `status` (not 2xx).
    pub fn of(status: u16) -> Self {
        match status {
            400 | 413 | 415 | 422 => Self::Content,
            408 | 429 | 500..=599 => Self::Transient,
            _ => Self::Request,
        }
    }
}

/// Judges a receiver's non-2xx answer: its class, and the failure (`HTTP <status>` as the
/// public class, the status with at most `max` bytes of the body as the detail).
pub fn judge(response: &Response, max: usize) -> (Refusal, Failure) {
    let status = response.status();
    let body = response.body();
    let text = String::from_utf8_lossy(&body[..body.len().min(max)]);
    let class = format!("HTTP {status}");
    let detail = format!("HTTP {status}: {}", text.trim());
    (Refusal::of(status), Failure::new(class, detail))
}

/// The HTTP receiver of a push sink.
pub struct HttpUplink {
    cfg: UplinkConfig,
    client: Client,
    /// `Bearer <token>`, when the config has a token.
    auth: Option<String>,
}

impl HttpUplink {
    /// A client for `cfg.url`.
    pub fn new(cfg: UplinkConfig) -> Self {
        let client = Client::new(cfg.timeout);
        let auth = cfg.token.as_ref().map(|t| format!("Bearer {t}"));
        Self { cfg, client, auth }
    }
}

impl Destination for HttpUplink {
    fn send(&mut self, rows: &[Row]) -> Verdict {
        let mut body = Vec::with_capacity(rows.iter().map(|r| r.line.len() + 1).sum());
        for r in rows {
            body.extend_from_slice(&r.line);
            body.push(b'\n');
        }
        let mut request = Request::post(&self.cfg.url, &body)
            .header("Content-Type", "application/x-ndjson")
            .max_body(MAX_REASON);
        if let Some(auth) = &self.auth {
            request = request.header("Authorization", auth);
        }
        let response = match self.client.send(request) {
            Ok(r) => r,
            Err(e) => {
                let class = match &e {
                    ClientError::Timeout(_) => "timeout",
                    ClientError::Io(_) | ClientError::Connect(_) => "connect",
                    ClientError::HostNotFound(..) => "host not found",
                    _ => "request failed",
                };
                return Verdict::Retry {
                    error: Failure::new(class, e.to_string()),
                    after: None,
                };
            }
        };
        if response.is_success() {
            return Verdict::Delivered;
        }
        let after = response
            .header("retry-after")
            .and_then(|v| v.trim().parse::<u64>().ok())
            .map(Duration::from_secs);
        match judge(&response, MAX_REASON) {
            (Refusal::Transient, error) => Verdict::Retry { error, after },
            (Refusal::Request, error) => Verdict::Held { error },
            (Refusal::Content, error) => Verdict::Refused { error },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_refusal_that_names_the_content_dead_letters() {
        for s in [400, 413, 415, 422] {
            assert_eq!(Refusal::of(s), Refusal::Content, "{s}");
        }
        for s in [401, 403, 404, 405, 407, 410, 411, 421, 426, 301, 302, 409] {
            assert_eq!(Refusal::of(s), Refusal::Request, "{s}");
        }
        for s in [408, 429, 500, 502, 503, 504] {
            assert_eq!(Refusal::of(s), Refusal::Transient, "{s}");
        }
    }
}
