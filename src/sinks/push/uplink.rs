//! The uplink: drains the push queue head to `connector.push.url`, in order.
//!
//! Rows are deleted only after a 2xx. 408, 429, 5xx, timeouts and connection errors are
//! retried with exponential backoff (a `Retry-After` in seconds is honoured), the batch kept and
//! the order with it. Any other 4xx means the receiver refuses something in the batch for good:
//! the uplink then sends that batch one record at a time, and each record refused alone moves to
//! the push dead-letter table, so one bad record cannot hold the queue back.
//!
//! It runs on its own thread with a blocking client (`ureq`), so a slow receiver never occupies
//! the async runtime.

use std::io::Read;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use super::config::UplinkConfig;
use super::Drain;
use crate::shutdown::Shutdown;
use crate::telemetry::events;

/// Longest reason kept from a receiver's error body.
const MAX_REASON: u64 = 512;

/// What `/api/status` shows of the uplink.
#[derive(Debug, Default)]
pub struct UplinkStatus {
    /// The last failure, cleared by the next delivery.
    pub last_error: Mutex<Option<String>>,
    /// Failed attempts (each is retried).
    pub failures_total: AtomicU64,
    /// True while the last attempt succeeded.
    pub healthy: AtomicBool,
}

enum Outcome {
    Delivered,
    Retry {
        reason: String,
        after: Option<Duration>,
    },
    Rejected {
        reason: String,
    },
}

/// The uplink thread.
pub struct Uplink {
    cfg: UplinkConfig,
    drain: Arc<dyn Drain>,
    status: Arc<UplinkStatus>,
    shutdown: Shutdown,
}

impl Uplink {
    /// An uplink draining `drain`.
    pub fn new(
        cfg: UplinkConfig,
        drain: Arc<dyn Drain>,
        status: Arc<UplinkStatus>,
        shutdown: Shutdown,
    ) -> Self {
        Self {
            cfg,
            drain,
            status,
            shutdown,
        }
    }

    /// Starts the thread; it stops when `shutdown` triggers.
    pub fn spawn(self) -> std::io::Result<JoinHandle<()>> {
        std::thread::Builder::new()
            .name("push-uplink".into())
            .spawn(move || {
                crate::priority::background_thread();
                self.run()
            })
    }

    fn agent(&self) -> ureq::Agent {
        ureq::Agent::config_builder()
            .timeout_global(Some(self.cfg.timeout))
            .http_status_as_error(false)
            .max_redirects(0)
            .build()
            .into()
    }

    fn run(self) {
        let agent = self.agent();
        let mut mark = 0;
        let mut delay = self.cfg.retry_initial;
        // After a non-retriable 4xx on a batch, records up to this seq go one at a time.
        let mut singles_through: Option<u64> = None;
        while !self.shutdown.is_triggered() {
            let max = if singles_through.is_some() {
                1
            } else {
                self.cfg.batch_rows
            };
            let rows = match self.drain.peek(max) {
                Ok(rows) => rows,
                Err(e) => {
                    self.failed(&format!("cannot read the push queue: {e}"), delay);
                    self.shutdown.wait_timeout(delay);
                    continue;
                }
            };
            let (Some(first), Some(last)) = (rows.first(), rows.last()) else {
                singles_through = None;
                mark = self.drain.wait_appended(mark, Duration::from_millis(500));
                continue;
            };
            if singles_through.is_some_and(|s| first.seq > s) {
                singles_through = None;
                continue;
            }
            let mut body = Vec::with_capacity(rows.iter().map(|r| r.line.len() + 1).sum());
            for r in &rows {
                body.extend_from_slice(&r.line);
                body.push(b'\n');
            }
            match self.post(&agent, body) {
                Outcome::Delivered => {
                    delay = self.cfg.retry_initial;
                    self.status.healthy.store(true, Ordering::Relaxed);
                    *self
                        .status
                        .last_error
                        .lock()
                        .unwrap_or_else(|e| e.into_inner()) = None;
                    match self.drain.remove_through(last.seq) {
                        Ok(n) => events::uplink_delivered(n),
                        Err(e) => {
                            // Delivered but not deleted: it will be sent again (a duplicate
                            // with the same id, which the receiver drops).
                            self.failed(&format!("cannot delete delivered rows: {e}"), delay);
                            self.shutdown.wait_timeout(delay);
                        }
                    }
                }
                Outcome::Retry { reason, after } => {
                    let wait = after.unwrap_or(delay).min(self.cfg.retry_max.max(delay));
                    self.failed(&reason, wait);
                    delay = (delay * 2).min(self.cfg.retry_max);
                    self.shutdown.wait_timeout(wait);
                }
                Outcome::Rejected { reason } => {
                    if rows.len() > 1 {
                        singles_through = Some(last.seq);
                        log::warn!(
                            "uplink receiver refused a batch, sending it one record at a time: rows={} reason=\"{reason}\"",
                            rows.len()
                        );
                    } else {
                        events::uplink_dead_lettered(first.seq, &reason);
                        if let Err(e) = self.drain.dead_letter(first.seq, &reason) {
                            self.failed(&format!("cannot move a dead letter: {e}"), delay);
                            self.shutdown.wait_timeout(delay);
                        }
                    }
                }
            }
        }
    }

    fn failed(&self, reason: &str, wait: Duration) {
        self.status.failures_total.fetch_add(1, Ordering::Relaxed);
        self.status.healthy.store(false, Ordering::Relaxed);
        *self
            .status
            .last_error
            .lock()
            .unwrap_or_else(|e| e.into_inner()) = Some(reason.to_string());
        events::uplink_retry(reason, wait.as_millis() as u64);
    }

    fn post(&self, agent: &ureq::Agent, body: Vec<u8>) -> Outcome {
        let mut request = agent
            .post(&self.cfg.url)
            .header("Content-Type", "application/x-ndjson");
        if let Some(token) = &self.cfg.token {
            request = request.header("Authorization", &format!("Bearer {token}"));
        }
        let mut response = match request.send(&body[..]) {
            Ok(r) => r,
            Err(e) => {
                return Outcome::Retry {
                    reason: e.to_string(),
                    after: None,
                }
            }
        };
        let status = response.status().as_u16();
        if (200..300).contains(&status) {
            return Outcome::Delivered;
        }
        let after = response
            .headers()
            .get("retry-after")
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.trim().parse::<u64>().ok())
            .map(Duration::from_secs);
        match refusal(&mut response, MAX_REASON) {
            (reason, true) => Outcome::Retry { reason, after },
            (reason, false) => Outcome::Rejected { reason },
        }
    }
}

/// Judges a receiver's non-2xx answer: the reason (status and at most `max` bytes of its
/// body) and whether to send again. 408, 429 and 5xx are transient; any other 4xx refuses
/// what was sent. A redirect or an informational answer is a misconfiguration, not a verdict
/// on what was sent: keep it and retry.
pub fn refusal(response: &mut ureq::http::Response<ureq::Body>, max: u64) -> (String, bool) {
    let status = response.status().as_u16();
    let mut text = String::new();
    let _ = response
        .body_mut()
        .as_reader()
        .take(max)
        .read_to_string(&mut text);
    let reason = format!("HTTP {status}: {}", text.trim());
    let retry = !matches!(status, 400..=499) || matches!(status, 408 | 429);
    (reason, retry)
}
