//! The commands service: the devices that take commands, their writable points and counters,
//! and [`Commands::execute`], the one way a command reaches a device whatever path it came
//! by (HTTP, NATS, MQTT).
//!
//! A command is checked here (the device exists, `max_per_second`), given its deadline, and
//! handed to the device's inbox; the device's own task runs it between polls and answers. A
//! full inbox is answered `unavailable` at once: nothing waits for later. Every command
//! becomes one record of source `command/<device>` (origin, values, results, latency),
//! offered through the pollers' hold-then-drop so a full sink never delays the answer.
//!
//! **A repeated command is answered, not run again; a reused id is refused** (with other
//! content): see [`super::recent`], which remembers each device's recent ids per path.

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};

use serde_json::{json, Map, Value};

use super::command::{all, Command, Origin, PointResult, Request};
use super::config::CommandsConfig;
use super::inbox::{channel, CommandReceiver, CommandSender, Pending};
use super::recent::{content, Recent, Seen, Shared, ID_REUSED};
use crate::engine::Engine;
use crate::record::Record;
use crate::sources::hold::{offer_with_hold, DEFAULT_HOLD};
use crate::telemetry::events;
use crate::telemetry::prometheus::Page;

/// How long past its deadline a command's answer may still take (the device's own timeout
/// bounds a write; this guards against a task that never answers).
const ANSWER_GRACE: Duration = Duration::from_secs(30);

/// One writable point, as the status page shows it.
#[derive(Debug, Clone, PartialEq)]
pub struct WritablePoint {
    /// Its name.
    pub name: String,
    /// `coil`, `holding_register` or `node`.
    pub area: &'static str,
    /// Its data type (`u16`, `f32`, `bool`, `Double`, ...).
    pub data_type: String,
    /// Lowest value allowed, in engineering units.
    pub min: Option<f64>,
    /// Highest value allowed, in engineering units.
    pub max: Option<f64>,
}

/// The counters of one device's commands, per point result (a command counts once in
/// `received`).
#[derive(Debug, Default)]
pub struct CommandStats {
    /// Commands received.
    pub received: AtomicU64,
    /// Points written.
    pub written: AtomicU64,
    /// Points refused before anything was sent: not writable, unknown, out of range, rate
    /// limited.
    pub refused: AtomicU64,
    /// Points whose command expired before its turn.
    pub expired: AtomicU64,
    /// Points of commands the device could not take (down, backoff, inbox full).
    pub unavailable: AtomicU64,
    /// Points the device refused (an exception, a bad status).
    pub failed: AtomicU64,
    /// Points whose outcome is not known (timeout after sending): never retried.
    pub unknown: AtomicU64,
    /// Commands whose id was one of a recent command's: answered with its outcome, not run.
    pub duplicates: AtomicU64,
    /// Commands refused because their id was a recent command's with other content (their
    /// points count in `refused` too).
    pub id_reused: AtomicU64,
}

impl CommandStats {
    fn count(&self, result: &PointResult) {
        let c = match result {
            PointResult::Written => &self.written,
            PointResult::Refused(_) | PointResult::OutOfRange(_) | PointResult::RateLimited => {
                &self.refused
            }
            PointResult::Expired => &self.expired,
            PointResult::Unavailable(_) => &self.unavailable,
            PointResult::Exception(_) => &self.failed,
            PointResult::Unknown(_) => &self.unknown,
        };
        c.fetch_add(1, Ordering::Relaxed);
    }

    /// `devices[].commands` of `/api/status`.
    pub fn to_json(&self) -> Value {
        json!({
            "received": l(&self.received),
            "written": l(&self.written),
            "refused": l(&self.refused),
            "expired": l(&self.expired),
            "unavailable": l(&self.unavailable),
            "failed": l(&self.failed),
            "unknown": l(&self.unknown),
            "duplicates": l(&self.duplicates),
            "id_reused": l(&self.id_reused),
        })
    }
}

/// Commands of one device within the current second.
#[derive(Debug)]
struct Window {
    started: Instant,
    count: u32,
}

struct Device {
    /// The inbox of the device's running task and its writable points: a reload that
    /// restarts the device replaces them; its counters and recent ids stay, so a command
    /// sent again after the reload is still answered, not run twice.
    task: RwLock<Task>,
    stats: CommandStats,
    window: Mutex<Window>,
    /// Per path ([`Origin::path`]), its recent ids.
    recent: Mutex<HashMap<&'static str, Recent>>,
}

struct Task {
    inbox: CommandSender,
    points: Vec<WritablePoint>,
}

impl Device {
    fn inbox(&self) -> CommandSender {
        self.task
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .inbox
            .clone()
    }
}

/// What a command came to.
#[derive(Debug, Clone, PartialEq)]
pub struct Outcome {
    /// The command's id.
    pub id: String,
    /// The device.
    pub device: String,
    /// Each point's result, in the command's order.
    pub points: Vec<(String, PointResult)>,
    /// From receipt to answer.
    pub latency: Duration,
    /// Why the command was refused whole before any point was looked at ([`ID_REUSED`]);
    /// `None` when its points were.
    pub refused: Option<&'static str>,
}

impl Outcome {
    /// True when every point was written.
    pub fn ok(&self) -> bool {
        self.points.iter().all(|(_, r)| *r == PointResult::Written)
    }

    /// The answer every path gives: `{"ok","id","device","points":{name:{"result",..}}}`.
    pub fn to_json(&self) -> Value {
        let points: Map<String, Value> = self
            .points
            .iter()
            .map(|(n, r)| (n.clone(), r.to_json()))
            .collect();
        let mut answer = json!({
            "ok": self.ok(),
            "id": self.id,
            "device": self.device,
            "points": points,
            "latency_ms": self.latency.as_secs_f64() * 1000.0,
        });
        if let Some(why) = self.refused {
            answer["result"] = json!("refused");
            answer["reason"] = json!(why);
        }
        answer
    }
}

/// Why a command was not taken at all.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CommandError {
    /// No device of that name takes commands.
    UnknownDevice(String),
}

impl std::fmt::Display for CommandError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::UnknownDevice(d) => write!(f, "no device {d:?} takes commands"),
        }
    }
}

/// The devices that take commands, and the one way to send them one.
pub struct Commands {
    cfg: RwLock<Arc<CommandsConfig>>,
    devices: RwLock<BTreeMap<String, Arc<Device>>>,
    next_id: AtomicU64,
}

impl Commands {
    /// No devices yet; `cfg` is `commands:` (its defaults when absent).
    pub fn new(cfg: CommandsConfig) -> Self {
        Self {
            cfg: RwLock::new(Arc::new(cfg)),
            devices: RwLock::default(),
            next_id: AtomicU64::new(0),
        }
    }

    /// The config now (`commands:`, its defaults when absent).
    pub fn config(&self) -> Arc<CommandsConfig> {
        Arc::clone(&self.cfg.read().unwrap_or_else(|e| e.into_inner()))
    }

    /// Puts `cfg` in place (a reload): the next command reads its token, expiry and rate.
    pub fn set_config(&self, cfg: CommandsConfig) {
        *self.cfg.write().unwrap_or_else(|e| e.into_inner()) = Arc::new(cfg);
    }

    /// Registers `device` with its writable `points`, and returns the inbox its task reads.
    pub fn register(&self, device: &str, points: Vec<WritablePoint>) -> CommandReceiver {
        let (tx, rx) = channel();
        self.register_with(device, points, tx);
        rx
    }

    /// Registers `device` on an inbox it shares with others (the devices of one RTU line,
    /// whose one task reads one inbox). A device registered again (restarted by a reload)
    /// keeps its counters and recent ids; commands go to its new task from now on.
    pub fn register_with(&self, device: &str, points: Vec<WritablePoint>, inbox: CommandSender) {
        let mut devices = self.devices.write().unwrap_or_else(|e| e.into_inner());
        if let Some(d) = devices.get(device) {
            *d.task.write().unwrap_or_else(|e| e.into_inner()) = Task { inbox, points };
            return;
        }
        devices.insert(
            device.to_string(),
            Arc::new(Device {
                task: RwLock::new(Task { inbox, points }),
                stats: CommandStats::default(),
                window: Mutex::new(Window {
                    started: Instant::now(),
                    count: 0,
                }),
                recent: Mutex::new(HashMap::new()),
            }),
        );
    }

    /// Forgets `device` (removed by a reload): its commands are refused as for an unknown
    /// device from now on.
    pub fn unregister(&self, device: &str) {
        self.devices
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .remove(device);
    }

    fn device(&self, device: &str) -> Option<Arc<Device>> {
        let devices = self.devices.read().unwrap_or_else(|e| e.into_inner());
        devices.get(device).cloned()
    }

    /// True when `device` takes commands.
    pub fn takes(&self, device: &str) -> bool {
        self.device(device).is_some()
    }

    /// The writable points of `device` (empty for an unknown one).
    pub fn points(&self, device: &str) -> Vec<WritablePoint> {
        self.device(device).map_or_else(Vec::new, |d| {
            d.task
                .read()
                .unwrap_or_else(|e| e.into_inner())
                .points
                .clone()
        })
    }

    /// The counters of `device` as `/api/status` shows them.
    pub fn stats_json(&self, device: &str) -> Option<Value> {
        self.device(device).map(|d| d.stats.to_json())
    }

    /// The `command/<device>` sources, for flows.
    pub fn source_names(&self) -> Vec<String> {
        let devices = self.devices.read().unwrap_or_else(|e| e.into_inner());
        devices.keys().map(|d| format!("command/{d}")).collect()
    }

    /// True when `device` may take another command this second.
    fn allowed(&self, d: &Device, now: Instant) -> bool {
        let mut w = d.window.lock().unwrap_or_else(|e| e.into_inner());
        if now.duration_since(w.started) >= Duration::from_secs(1) {
            w.started = now;
            w.count = 0;
        }
        if w.count >= self.config().max_per_second {
            return false;
        }
        w.count += 1;
        true
    }

    /// Runs `request` on `device` and returns what each point came to; `engine` takes the
    /// command's record. Errs only when no device of that name takes commands. A request
    /// whose id and content a recent command of the device on the same path had gets that
    /// command's outcome and runs nothing; one with that id and other content is refused
    /// (module doc). A caller that may be cancelled runs this in a task of its own, so
    /// a command handed to the device is always counted and recorded.
    pub async fn execute(
        &self,
        engine: &Arc<Engine>,
        device: &str,
        request: Request,
        origin: Origin,
    ) -> Result<Outcome, CommandError> {
        let d = self
            .device(device)
            .ok_or_else(|| CommandError::UnknownDevice(device.to_string()))?;
        let d = &*d;
        let received = Instant::now();
        let mut reused = false;
        let first = match &request.id {
            None => None,
            Some(id) => {
                let seen = d
                    .recent
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .entry(origin.path())
                    .or_default()
                    .claim(id, content(&request.points), request.points.len(), received);
                match seen {
                    Seen::New(tx) => Some(tx),
                    Seen::Repeat(first) => {
                        return Ok(repeated(d, device, id, &request.points, first).await)
                    }
                    Seen::Reused => {
                        events::command_id_reused(device, id, origin.path(), &d.stats.id_reused);
                        reused = true;
                        None
                    }
                }
            }
        };
        d.stats.received.fetch_add(1, Ordering::Relaxed);
        let id = request.id.unwrap_or_else(|| {
            format!(
                "cmd-{}-{}",
                crate::record::now_ms(),
                self.next_id.fetch_add(1, Ordering::Relaxed)
            )
        });
        let command = Command {
            id: id.clone(),
            device: device.to_string(),
            points: request.points,
            verify: request.verify,
            received,
            deadline: received + request.expires.unwrap_or(self.config().expires),
            origin,
        };
        let results = if reused {
            all(&command.points, &PointResult::Refused(ID_REUSED.into()))
        } else if !self.allowed(d, received) {
            all(&command.points, &PointResult::RateLimited)
        } else {
            let (pending, answer) = Pending::new(command.clone());
            match d.inbox().try_send(pending) {
                Err(_) => all(
                    &command.points,
                    &PointResult::Unavailable("the device has too many commands waiting".into()),
                ),
                Ok(()) => {
                    let wait =
                        command.deadline.saturating_duration_since(Instant::now()) + ANSWER_GRACE;
                    match tokio::time::timeout(wait, answer).await {
                        Ok(Ok(results)) => results,
                        Ok(Err(_)) => all(
                            &command.points,
                            &PointResult::Unavailable("the device's task stopped".into()),
                        ),
                        Err(_) => all(
                            &command.points,
                            &PointResult::Unknown("the device's task did not answer".into()),
                        ),
                    }
                }
            }
        };
        for (_, r) in &results {
            d.stats.count(r);
        }
        let outcome = Outcome {
            id,
            device: device.to_string(),
            points: results,
            latency: received.elapsed(),
            refused: reused.then_some(ID_REUSED),
        };
        log_outcome(&command, &outcome);
        if let Some(first) = first {
            first.send_replace(Some(outcome.clone()));
        }
        let record = command_record(&command, &outcome);
        let engine = Arc::clone(engine);
        tokio::spawn(async move {
            offer_with_hold(&engine, record, DEFAULT_HOLD).await;
        });
        Ok(outcome)
    }

    /// The commands' families on `/metrics`, per device.
    pub fn write_metrics(&self, p: &mut Page) {
        let devices: Vec<(String, Arc<Device>)> = {
            let devices = self.devices.read().unwrap_or_else(|e| e.into_inner());
            devices
                .iter()
                .map(|(n, d)| (n.clone(), Arc::clone(d)))
                .collect()
        };
        let items: Vec<(&str, &CommandStats)> = devices
            .iter()
            .map(|(n, d)| (n.as_str(), &d.stats))
            .collect();
        p.counters(
            "device",
            &items,
            &[
                ("opex_connector_commands_received_total", "Commands received.", |s| l(&s.received)),
                ("opex_connector_command_points_written_total", "Command points written.", |s| l(&s.written)),
                ("opex_connector_command_points_refused_total", "Command points refused before anything was sent (not writable, unknown, out of range, rate limited).", |s| l(&s.refused)),
                ("opex_connector_command_points_expired_total", "Command points whose command expired before its turn.", |s| l(&s.expired)),
                ("opex_connector_command_points_unavailable_total", "Command points the device could not take (down, backoff, busy).", |s| l(&s.unavailable)),
                ("opex_connector_command_points_failed_total", "Command points the device refused (exception, bad status).", |s| l(&s.failed)),
                ("opex_connector_command_points_unknown_total", "Command points whose outcome is not known (sent, no answer): never retried.", |s| l(&s.unknown)),
                ("opex_connector_commands_duplicate_total", "Commands whose id and content a recent command of the same path had: answered with its outcome, not run again.", |s| l(&s.duplicates)),
                ("opex_connector_commands_id_reused_total", "Commands refused because a recent command of the same path had their id with other content; nothing was sent.", |s| l(&s.id_reused)),
            ],
        );
    }
}

/// The answer to a command whose id `first` had: its outcome once known, nothing run.
async fn repeated(
    d: &Device,
    device: &str,
    id: &str,
    points: &[(String, Value)],
    mut first: Shared,
) -> Outcome {
    let total = d.stats.duplicates.fetch_add(1, Ordering::Relaxed) + 1;
    log::info!("command id repeated, answered with its first outcome, nothing written: device={device} id={id} duplicates_total={total}");
    let known = first
        .wait_for(Option::is_some)
        .await
        .ok()
        .and_then(|o| o.clone());
    known.unwrap_or_else(|| Outcome {
        id: id.to_string(),
        device: device.to_string(),
        points: all(
            points,
            &PointResult::Unknown("the first command with this id did not finish".into()),
        ),
        latency: Duration::ZERO,
        refused: None,
    })
}

fn l(c: &AtomicU64) -> u64 {
    c.load(Ordering::Relaxed)
}

/// The record of a command: source `command/<device>`, key its id.
fn command_record(command: &Command, outcome: &Outcome) -> Record {
    let points: Map<String, Value> = command
        .points
        .iter()
        .zip(&outcome.points)
        .map(|((name, value), (_, result))| {
            let mut v = result.to_json();
            v["value"] = value.clone();
            (name.clone(), v)
        })
        .collect();
    let mut payload = json!({
        "id": command.id,
        "device": command.device,
        "origin": command.origin.to_json(),
        "verify": command.verify,
        "points": points,
        "ok": outcome.ok(),
        "latency_ms": outcome.latency.as_secs_f64() * 1000.0,
    });
    if let Some(why) = outcome.refused {
        payload["result"] = json!("refused");
        payload["reason"] = json!(why);
    }
    Record::from_value(format!("command/{}", command.device), &command.id, &payload)
}

fn log_outcome(command: &Command, outcome: &Outcome) {
    let results: Vec<String> = outcome
        .points
        .iter()
        .map(|(n, r)| format!("{n}={}", r.name()))
        .collect();
    if outcome.ok() {
        log::info!(
            "command written: device={} id={} points=\"{}\" latency_ms={}",
            command.device,
            command.id,
            results.join(" "),
            outcome.latency.as_millis()
        );
    } else {
        log::warn!(
            "command not (all) written: device={} id={} points=\"{}\" latency_ms={}",
            command.device,
            command.id,
            results.join(" "),
            outcome.latency.as_millis()
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::flow::Plan;
    use crate::sinks::Sinks;
    use crate::store::dead_letters::DeadLetterQueue;

    fn engine(dir: &std::path::Path) -> Arc<Engine> {
        let dlq = Arc::new(DeadLetterQueue::open(dir, 100).unwrap());
        Arc::new(Engine::new(
            Plan::direct(&[], "push"),
            Sinks::default(),
            dlq,
        ))
    }

    fn request(id: Option<&str>) -> Request {
        Request {
            id: id.map(str::to_string),
            points: vec![("setpoint".into(), json!(72.5))],
            expires: None,
            verify: false,
        }
    }

    #[tokio::test]
    async fn a_reused_id_with_other_content_is_refused_and_ids_are_kept_per_path() {
        let dir = tempfile::tempdir().unwrap();
        let engine = engine(dir.path());
        let commands = Commands::new(CommandsConfig::default());
        let mut inbox = commands.register("oven", Vec::new());
        let commands = Arc::new(commands);
        let taken = Arc::new(AtomicU64::new(0));
        let seen = Arc::clone(&taken);
        let device = tokio::spawn(async move {
            while let Some(p) = inbox.recv().await {
                seen.fetch_add(1, Ordering::Relaxed);
                p.answer_all(PointResult::Written);
            }
        });
        let http = || Origin::Http {
            token: "commands".into(),
        };
        let mqtt = || Origin::Mqtt {
            topic: "opex/cmd/oven".into(),
            client_id: "c".into(),
        };
        let run = |value: f64, origin: Origin| {
            let (c, e) = (Arc::clone(&commands), Arc::clone(&engine));
            let mut r = request(Some("cmd-9"));
            r.points[0].1 = json!(value);
            async move { c.execute(&e, "oven", r, origin).await.unwrap() }
        };
        assert!(run(50.0, http()).await.ok());
        let other = run(60.0, http()).await;
        assert_eq!(other.refused, Some(ID_REUSED));
        assert_eq!(
            other.points,
            vec![("setpoint".into(), PointResult::Refused(ID_REUSED.into()))]
        );
        assert_eq!(other.to_json()["result"], "refused");
        assert_eq!(other.to_json()["reason"], ID_REUSED);
        assert!(run(50.0, http()).await.ok(), "the same content is a repeat");
        // Another path's ids are its own.
        assert!(run(60.0, mqtt()).await.ok());
        assert_eq!(run(70.0, mqtt()).await.refused, Some(ID_REUSED));
        assert_eq!(taken.load(Ordering::Relaxed), 2);
        let stats = commands.stats_json("oven").unwrap();
        assert_eq!(stats["received"], 4);
        assert_eq!(stats["refused"], 2);
        assert_eq!(stats["id_reused"], 2);
        assert_eq!(stats["duplicates"], 1);
        device.abort();
    }

    #[tokio::test]
    async fn a_repeated_id_gets_the_first_outcome_and_reaches_the_device_once() {
        let dir = tempfile::tempdir().unwrap();
        let engine = engine(dir.path());
        let commands = Commands::new(CommandsConfig::default());
        let mut inbox = commands.register("oven", Vec::new());
        let commands = Arc::new(commands);
        let taken = Arc::new(AtomicU64::new(0));
        let seen = Arc::clone(&taken);
        let device = tokio::spawn(async move {
            while let Some(p) = inbox.recv().await {
                seen.fetch_add(1, Ordering::Relaxed);
                // Slow enough for the repeats to arrive while it runs.
                tokio::time::sleep(Duration::from_millis(50)).await;
                p.answer_all(PointResult::Written);
            }
        });
        let run = |id: Option<&'static str>| {
            let (c, e) = (Arc::clone(&commands), Arc::clone(&engine));
            tokio::spawn(async move {
                c.execute(
                    &e,
                    "oven",
                    request(id),
                    Origin::Nats {
                        subject: "s".into(),
                    },
                )
                .await
                .unwrap()
            })
        };
        let first = run(Some("cmd-17"));
        tokio::task::yield_now().await;
        let again = run(Some("cmd-17"));
        let (first, again) = (first.await.unwrap(), again.await.unwrap());
        let late = run(Some("cmd-17")).await.unwrap();
        assert!(first.ok(), "{first:?}");
        assert_eq!(again, first);
        assert_eq!(late, first);
        // Without an id every command is new.
        assert!(run(None).await.unwrap().ok());
        assert!(run(None).await.unwrap().ok());
        assert_eq!(taken.load(Ordering::Relaxed), 3);
        let stats = commands.stats_json("oven").unwrap();
        assert_eq!(stats["received"], 3);
        assert_eq!(stats["written"], 3);
        assert_eq!(stats["duplicates"], 2);
        device.abort();
    }
}
