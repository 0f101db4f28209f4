//! Alert channels: the log (always), and a webhook, an MQTT topic and a NATS subject when
//! configured.
//!
//! Sending never blocks the checker: each channel has its own bounded queue of
//! [`CHANNEL_QUEUE`] alerts and its own worker. An alert that finds the queue full is dropped
//! and counted (`dropped_total`); one the worker could not deliver is counted in
//! `failed_total` with its `last_error`.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use serde_json::{json, Value};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

use super::alert::Alert;
use super::config::{AlertsConfig, WebhookChannelConfig};
use crate::http::client::{Client, Request};
use crate::shutdown::Shutdown;

/// Alerts waiting per channel; beyond it new ones are dropped and counted.
pub const CHANNEL_QUEUE: usize = 256;
/// Most bytes of an error answer kept in `last_error`.
const MAX_REASON: usize = 200;

/// Counters of one channel (`alert_channels[]` in `/api/status`).
#[derive(Debug, Default)]
pub struct ChannelStats {
    /// Alerts delivered.
    pub sent_total: AtomicU64,
    /// Alerts given up after their attempts.
    pub failed_total: AtomicU64,
    /// Alerts dropped because the channel's queue was full.
    pub dropped_total: AtomicU64,
    /// The last delivery error.
    pub last_error: Mutex<Option<String>>,
    /// True from an error until the next alert delivered: the channel fails now.
    pub failing: AtomicBool,
}

impl ChannelStats {
    /// Counts a delivered alert.
    pub fn sent(&self) {
        self.sent_total.fetch_add(1, Ordering::Relaxed);
        self.failing.store(false, Ordering::Relaxed);
    }

    /// Counts an alert given up, and logs it.
    pub fn failed(&self, channel: &str, error: &str) {
        let total = self.failed_total.fetch_add(1, Ordering::Relaxed) + 1;
        self.set_error(error);
        log::warn!("alert not delivered: channel={channel} failed_total={total} error=\"{error}\"");
    }

    /// Remembers the last error.
    pub fn set_error(&self, error: &str) {
        self.failing.store(true, Ordering::Relaxed);
        *self.last_error.lock().unwrap_or_else(|e| e.into_inner()) = Some(error.to_string());
    }

    /// The entry of `alert_channels` in `/api/status`.
    pub fn to_json(&self, name: &str) -> Value {
        let l = |c: &AtomicU64| c.load(Ordering::Relaxed);
        json!({
            "name": name,
            "sent_total": l(&self.sent_total),
            "failed_total": l(&self.failed_total),
            "dropped_total": l(&self.dropped_total),
            "last_error": *self.last_error.lock().unwrap_or_else(|e| e.into_inner()),
            "failing": self.failing.load(Ordering::Relaxed),
        })
    }
}

/// The sending end of one channel.
pub struct ChannelHandle {
    /// `webhook`, `mqtt`, `nats` (or a test's name).
    pub name: String,
    tx: mpsc::Sender<Alert>,
    /// Its counters.
    pub stats: Arc<ChannelStats>,
}

impl ChannelHandle {
    /// A channel and the receiving end its worker reads.
    pub fn new(name: &str) -> (Self, mpsc::Receiver<Alert>) {
        let (tx, rx) = mpsc::channel(CHANNEL_QUEUE);
        let handle = Self {
            name: name.to_string(),
            tx,
            stats: Arc::new(ChannelStats::default()),
        };
        (handle, rx)
    }

    /// Queues `alert` without waiting; counts it dropped when the queue is full.
    pub fn offer(&self, alert: &Alert) {
        if self.tx.try_send(alert.clone()).is_err() {
            let total = self.stats.dropped_total.fetch_add(1, Ordering::Relaxed) + 1;
            if total.is_power_of_two() {
                log::warn!(
                    "alert channel queue full, alert dropped: channel={} dropped_total={total}",
                    self.name
                );
            }
        }
    }
}

/// A configured channel whose worker is not started yet.
enum Pending {
    Webhook(WebhookChannelConfig),
    Mqtt(crate::brokers::mqtt::MqttConnectionConfig, String),
    Nats(crate::brokers::nats::NatsConnectionConfig, String),
}

/// The workers of the configured channels, built before the runtime runs.
pub struct Workers(Vec<(Pending, mpsc::Receiver<Alert>, Arc<ChannelStats>)>);

/// The handles and (not yet started) workers of the channels `cfg` configures.
pub fn build(cfg: &AlertsConfig) -> (Vec<ChannelHandle>, Workers) {
    let mut configured = Vec::new();
    if let Some(w) = &cfg.webhook {
        configured.push(("webhook", Pending::Webhook(w.clone())));
    }
    if let Some((c, topic)) = &cfg.mqtt {
        configured.push(("mqtt", Pending::Mqtt(c.clone(), topic.clone())));
    }
    if let Some((c, subject)) = &cfg.nats {
        configured.push(("nats", Pending::Nats(c.clone(), subject.clone())));
    }
    let mut handles = Vec::new();
    let mut workers = Vec::new();
    for (name, pending) in configured {
        let (handle, rx) = ChannelHandle::new(name);
        workers.push((pending, rx, Arc::clone(&handle.stats)));
        handles.push(handle);
    }
    (handles, Workers(workers))
}

impl Workers {
    /// Starts every worker on the current runtime; each ends on `shutdown`.
    pub fn spawn(self, shutdown: &Shutdown) -> Vec<JoinHandle<()>> {
        self.0
            .into_iter()
            .map(|(pending, rx, stats)| match pending {
                Pending::Webhook(cfg) => tokio::spawn(webhook(cfg, rx, stats, shutdown.clone())),
                Pending::Mqtt(c, topic) => {
                    tokio::spawn(super::brokers::mqtt(c, topic, rx, stats, shutdown.clone()))
                }
                Pending::Nats(c, subject) => tokio::spawn(super::brokers::nats(
                    c,
                    subject,
                    rx,
                    stats,
                    shutdown.clone(),
                )),
            })
            .collect()
    }
}

/// What one webhook attempt came to.
enum Attempt {
    Delivered,
    Retry(String),
    GiveUp(String),
}

/// The webhook worker: one alert at a time, each POSTed with retries (on a blocking thread,
/// with the connector's HTTP client, as the uplink).
pub async fn webhook(
    cfg: WebhookChannelConfig,
    mut rx: mpsc::Receiver<Alert>,
    stats: Arc<ChannelStats>,
    shutdown: Shutdown,
) {
    let cfg = Arc::new(cfg);
    loop {
        let alert = tokio::select! {
            a = rx.recv() => match a { Some(a) => a, None => return },
            _ = shutdown.wait() => return,
        };
        let body = Arc::new(alert.to_json());
        let mut delay = cfg.retry_initial;
        let mut attempt = 0;
        loop {
            let (cfg2, body2) = (Arc::clone(&cfg), Arc::clone(&body));
            let request = tokio::task::spawn_blocking(move || post(&cfg2, &body2));
            // A request in flight at shutdown ends within its timeout on its own thread.
            let outcome = tokio::select! {
                r = request => r
                    .unwrap_or_else(|e| Attempt::GiveUp(format!("sender thread failed: {e}"))),
                _ = shutdown.wait() => return,
            };
            match outcome {
                Attempt::Delivered => {
                    stats.sent();
                    break;
                }
                Attempt::GiveUp(reason) => {
                    stats.failed("webhook", &reason);
                    break;
                }
                Attempt::Retry(reason) if attempt >= cfg.retries => {
                    stats.failed(
                        "webhook",
                        &format!("after {} attempts: {reason}", attempt + 1),
                    );
                    break;
                }
                Attempt::Retry(reason) => {
                    stats.set_error(&reason);
                    attempt += 1;
                    tokio::select! {
                        _ = tokio::time::sleep(delay) => {},
                        _ = shutdown.wait() => return,
                    }
                    delay = (delay * 2).min(cfg.retry_max);
                }
            }
        }
    }
}

/// One attempt, on a fresh connection (alerts are rare; nothing is kept between them).
fn post(cfg: &WebhookChannelConfig, body: &[u8]) -> Attempt {
    let auth = cfg.token.as_ref().map(|t| format!("Bearer {t}"));
    let mut request = Request::post(&cfg.url, body)
        .header("Content-Type", "application/json")
        .max_body(MAX_REASON);
    if let Some(auth) = &auth {
        request = request.header("Authorization", auth);
    }
    for (k, v) in &cfg.headers {
        request = request.header(k, v);
    }
    let response = match Client::new(cfg.timeout).send(request) {
        Ok(r) => r,
        Err(e) => return Attempt::Retry(e.to_string()),
    };
    if response.is_success() {
        return Attempt::Delivered;
    }
    // The same judgement as the push uplink's: only a refusal of the content is final.
    match crate::sinks::push::judge(&response, MAX_REASON) {
        (crate::sinks::push::Refusal::Content, f) => Attempt::GiveUp(f.detail),
        (_, f) => Attempt::Retry(f.detail),
    }
}
