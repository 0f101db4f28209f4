//! The broker paths in for commands: [`nats`] (request-reply) and [`mqtt`] (a command topic,
//! MQTT 5). The HTTP path is a route of the HTTP server (`http/commands.rs`).
//!
//! Both read the body every path shares, take the device from the subject or topic (the
//! `{device}` piece of the configured template, subscribed as a one-piece wildcard), run
//! the command through [`Commands::execute`] in a task of its own, and answer its outcome, or
//! `{"ok":false,"error":..}` for a body that is not a command or a device that takes none
//! (counted here, logged, and never sent to a device).
//!
//! Bounded: at most [`MAX_IN_FLIGHT`] commands of one path run at once; one more is answered
//! `{"ok":false,"error":"busy: ..."}` at once and counted in `busy`, never held for later. At
//! shutdown a path stops taking commands (a message that still arrives is answered that the
//! connector is stopping), lets the running ones finish (each is bounded by its expiry), and
//! sends their answers before it closes its connection.

pub mod mqtt;
pub mod nats;

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::{json, Value};

use super::command::{parse_request, Request};
use super::config::{CommandsConfig, DEVICE};
use super::service::Commands;
use crate::engine::Engine;
use crate::shutdown::Shutdown;
use crate::telemetry::prometheus::{Kind, Page};

pub use mqtt::MqttCommands;
pub use nats::NatsCommands;

/// Most commands one path runs at once.
pub const MAX_IN_FLIGHT: usize = 256;
/// How long the answers of the last commands get to leave at shutdown.
const FLUSH_AT_SHUTDOWN: Duration = Duration::from_secs(2);

/// Counters of one path, shown in `commands.nats` / `commands.mqtt` of `/api/status`.
#[derive(Debug, Default)]
pub struct PathStats {
    /// Messages received on the command subject or topic.
    pub received: AtomicU64,
    /// Commands handed to the commands service (each counted by its device as well).
    pub taken: AtomicU64,
    /// Bodies that are not a command: answered with the reason.
    pub malformed: AtomicU64,
    /// Commands for a device that takes none: answered with the reason.
    pub unknown_device: AtomicU64,
    /// Commands refused because [`MAX_IN_FLIGHT`] were running, or the connector was
    /// stopping.
    pub busy: AtomicU64,
    /// NATS requests without a reply subject (run all the same; their outcome is only logged
    /// and recorded).
    pub no_reply: AtomicU64,
    /// MQTT messages delivered as retained: ignored, a retained command is never run.
    pub retained: AtomicU64,
    /// Answers sent.
    pub answered: AtomicU64,
    /// Answers that could not be sent (the connection was down or its queue full).
    pub answer_errors: AtomicU64,
    /// True while connected and subscribed.
    pub connected: AtomicBool,
    /// The last connection error.
    pub last_error: Mutex<Option<String>>,
}

impl PathStats {
    /// The status object.
    pub fn to_json(&self, connection: &str, filter: &str) -> Value {
        let l = |c: &AtomicU64| c.load(Ordering::Relaxed);
        json!({
            "connection": connection,
            "subscribed": filter,
            "connected": self.connected.load(Ordering::Relaxed),
            "received": l(&self.received),
            "taken": l(&self.taken),
            "malformed": l(&self.malformed),
            "unknown_device": l(&self.unknown_device),
            "busy": l(&self.busy),
            "no_reply": l(&self.no_reply),
            "retained": l(&self.retained),
            "answered": l(&self.answered),
            "answer_errors": l(&self.answer_errors),
            "last_error": *self.last_error.lock().unwrap_or_else(|e| e.into_inner()),
        })
    }

    fn set_error(&self, e: Option<String>) {
        *self.last_error.lock().unwrap_or_else(|e| e.into_inner()) = e;
    }
}

/// A subject or topic template: the filter to subscribe with and where the device is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Template {
    /// The template with `{device}` replaced by the one-piece wildcard.
    pub filter: String,
    sep: char,
    at: usize,
    pieces: usize,
}

impl Template {
    /// `template` (validated: `{device}` once, as a whole piece) split at `sep`, with
    /// `wildcard` for the device.
    pub fn new(template: &str, sep: char, wildcard: &str) -> Self {
        let pieces: Vec<&str> = template.split(sep).collect();
        let at = pieces.iter().position(|p| *p == DEVICE).unwrap_or(0);
        Self {
            filter: template.replace(DEVICE, wildcard),
            sep,
            at,
            pieces: pieces.len(),
        }
    }

    /// The device a subject or topic the filter matched names.
    pub fn device<'a>(&self, subject: &'a str) -> Option<&'a str> {
        let pieces: Vec<&'a str> = subject.split(self.sep).collect();
        if pieces.len() != self.pieces {
            return None;
        }
        pieces.get(self.at).copied().filter(|d| !d.is_empty())
    }
}

/// Why a message was not a command for a device, as its answer says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NotTaken {
    /// The body is not a command.
    Malformed(String),
    /// No device of that name takes commands (or the subject names none).
    UnknownDevice(String),
}

impl NotTaken {
    /// `{"ok":false,"error":..}`.
    pub fn to_json(&self) -> Value {
        let e = match self {
            Self::Malformed(e) => e.clone(),
            Self::UnknownDevice(d) => format!("no device {d:?} takes commands"),
        };
        error(&e)
    }
}

/// `{"ok":false,"error":message}`.
pub fn error(message: &str) -> Value {
    json!({"ok": false, "error": message})
}

/// The device and request of a message on `subject`, or why it is none; counted in `stats`.
pub fn take(
    commands: &Commands,
    template: &Template,
    subject: &str,
    body: &[u8],
    stats: &PathStats,
) -> Result<(String, Request), NotTaken> {
    let result = match parse_request(body) {
        Err(e) => Err(NotTaken::Malformed(e)),
        Ok(request) => match template.device(subject) {
            Some(d) if commands.takes(d) => Ok((d.to_string(), request)),
            other => Err(NotTaken::UnknownDevice(other.unwrap_or("").to_string())),
        },
    };
    match &result {
        Ok(_) => {
            stats.taken.fetch_add(1, Ordering::Relaxed);
        }
        Err(NotTaken::Malformed(e)) => {
            let total = stats.malformed.fetch_add(1, Ordering::Relaxed) + 1;
            log::warn!("command refused, not a command: subject={subject} error=\"{e}\" malformed_total={total}");
        }
        Err(NotTaken::UnknownDevice(_)) => {
            let total = stats.unknown_device.fetch_add(1, Ordering::Relaxed) + 1;
            log::warn!(
                "command refused, no such device: subject={subject} unknown_device_total={total}"
            );
        }
    }
    result
}

/// The answer to a command refused for `why` (too many running, stopping); counted.
fn busy(stats: &PathStats, subject: &str, why: &str) -> Value {
    let total = stats.busy.fetch_add(1, Ordering::Relaxed) + 1;
    log::warn!("command refused: subject={subject} reason=\"{why}\" busy_total={total}");
    error(why)
}

/// The NATS and MQTT paths configured in `commands:`, while they run: started with the
/// connector, and stopped and started again whole by a reload that changes them.
#[derive(Default)]
pub struct CommandPaths {
    now: Mutex<Paths>,
}

#[derive(Default)]
struct Paths {
    /// `commands.nats`.
    nats: Option<Arc<NatsCommands>>,
    /// `commands.mqtt`.
    mqtt: Option<Arc<MqttCommands>>,
    /// Their stop, once started.
    stop: Option<Shutdown>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

impl Paths {
    fn of(cfg: Option<&CommandsConfig>) -> Self {
        let Some(cfg) = cfg else {
            return Self::default();
        };
        Self {
            nats: cfg
                .nats
                .as_ref()
                .map(|(c, subject)| Arc::new(NatsCommands::new(c.clone(), subject))),
            mqtt: cfg
                .mqtt
                .as_ref()
                .map(|(c, topic)| Arc::new(MqttCommands::new(c.clone(), topic))),
            stop: None,
            tasks: Vec::new(),
        }
    }
}

impl CommandPaths {
    /// The paths `cfg` configures (none without `commands:`), not yet running.
    pub fn new(cfg: Option<&CommandsConfig>) -> Self {
        Self {
            now: Mutex::new(Paths::of(cfg)),
        }
    }

    /// Starts every path, on the current runtime, until `shutdown` (or a reload's restart):
    /// each runs its commands through `commands`, their records to `engine`.
    pub fn start(&self, commands: &Arc<Commands>, engine: &Arc<Engine>, shutdown: &Shutdown) {
        let mut now = self.lock();
        let stop = shutdown.child();
        let nats = now.nats.iter().map(|n| {
            tokio::spawn(Arc::clone(n).run(Arc::clone(commands), Arc::clone(engine), stop.clone()))
        });
        let mqtt = now.mqtt.iter().map(|m| {
            tokio::spawn(Arc::clone(m).run(Arc::clone(commands), Arc::clone(engine), stop.clone()))
        });
        let tasks: Vec<_> = nats.chain(mqtt).collect();
        now.tasks = tasks;
        now.stop = Some(stop);
    }

    /// Stops the running paths (each answers the commands it runs first), then starts the
    /// ones `cfg` configures.
    pub async fn restart(
        &self,
        cfg: Option<&CommandsConfig>,
        commands: &Arc<Commands>,
        engine: &Arc<Engine>,
        shutdown: &Shutdown,
    ) {
        let old = std::mem::replace(&mut *self.lock(), Paths::of(cfg));
        if let Some(stop) = &old.stop {
            stop.trigger();
        }
        for t in old.tasks {
            let _ = t.await;
        }
        self.start(commands, engine, shutdown);
    }

    /// Waits, after the shutdown signal, for every path to end.
    pub async fn join(&self) {
        let tasks = std::mem::take(&mut self.lock().tasks);
        for t in tasks {
            let _ = t.await;
        }
    }

    /// `commands` of `/api/status`: each path's counters, `null` when not configured.
    pub fn to_json(&self, http: bool) -> Value {
        let now = self.lock();
        json!({
            "http": http,
            "nats": now.nats.as_ref().map(|n| n.status()),
            "mqtt": now.mqtt.as_ref().map(|m| m.status()),
        })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Paths> {
        self.now.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Their families on `/metrics`, labelled `path`.
    pub fn write_metrics(&self, p: &mut Page) {
        let (nats, mqtt) = {
            let now = self.lock();
            (now.nats.clone(), now.mqtt.clone())
        };
        let mut items: Vec<(&str, &PathStats)> = Vec::new();
        if let Some(n) = &nats {
            items.push(("nats", &n.stats));
        }
        if let Some(m) = &mqtt {
            items.push(("mqtt", &m.stats));
        }
        if items.is_empty() {
            return;
        }
        p.counters(
            "path",
            &items,
            &[
                (
                    "opex_connector_command_path_received_total",
                    "Messages received on a command subject or topic.",
                    |s| l(&s.received),
                ),
                (
                    "opex_connector_command_path_malformed_total",
                    "Command messages whose body is not a command.",
                    |s| l(&s.malformed),
                ),
                (
                    "opex_connector_command_path_unknown_device_total",
                    "Command messages for a device that takes no commands.",
                    |s| l(&s.unknown_device),
                ),
                (
                    "opex_connector_command_path_busy_total",
                    "Commands refused because too many were running or the connector was stopping.",
                    |s| l(&s.busy),
                ),
                (
                    "opex_connector_command_path_answer_errors_total",
                    "Command answers that could not be sent.",
                    |s| l(&s.answer_errors),
                ),
            ],
        );
        let samples: Vec<([(&str, &str); 1], f64)> = items
            .iter()
            .map(|(n, s)| {
                let up = s.connected.load(Ordering::Relaxed);
                ([("path", *n)], if up { 1.0 } else { 0.0 })
            })
            .collect();
        let samples: Vec<(&[(&str, &str)], f64)> =
            samples.iter().map(|(l, v)| (l.as_slice(), *v)).collect();
        p.family(
            "opex_connector_command_path_connected",
            Kind::Gauge,
            "1 while a command path is connected and subscribed.",
            &samples,
        );
    }
}

fn l(c: &AtomicU64) -> u64 {
    c.load(Ordering::Relaxed)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_template_subscribes_with_a_wildcard_and_finds_the_device_in_its_piece() {
        let t = Template::new("opex.cmd.{device}", '.', "*");
        assert_eq!(t.filter, "opex.cmd.*");
        assert_eq!(t.device("opex.cmd.plant-1"), Some("plant-1"));
        assert_eq!(t.device("opex.cmd"), None);
        assert_eq!(t.device("opex.cmd.plant-1.x"), None);
        let t = Template::new("site/{device}/cmd", '/', "+");
        assert_eq!(t.filter, "site/+/cmd");
        assert_eq!(t.device("site/oven/cmd"), Some("oven"));
        assert_eq!(t.device("site//cmd"), None);
    }
}
