//! Applying a new config while the connector runs: validated whole, compared part by part,
//! refused with the reason when it changes what cannot change live, else kept (the file given
//! to `run`, the revisions) and put in place. This version changes live the flows, the
//! devices (the OPC-UA server restarts with them, and with a change of its section), the
//! sinks (within `sinks_not_live`'s limits), the sources of [`crate::sources::live`],
//! the alert channels and checks (`telemetry:`), the commands, the HTTP server's settings,
//! the ingest limits, the dead-letter cap, and the NATS and MQTT connections only they use
//! (they restart with them).

use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use super::{diff, revisions, Change, Diff, Origin, Revision, Running};
use crate::alerts::Hub;
use crate::commands::paths::CommandPaths;
use crate::commands::Commands;
use crate::config::Config;
use crate::engine::Engine;
use crate::opcua_server::Serving;
use crate::shutdown::Shutdown;
use crate::sinks::End;
use crate::sources::catalogue::Catalogue;
use crate::sources::live::{Built, Sources, PREFIXES};
use crate::sources::pollers::Pollers;
use crate::sources::status::DeviceStatus;
use crate::trends::Trends;

/// The parts a reload changes while the connector runs besides the sources of
/// [`crate::sources::live::PREFIXES`] (a name ending in `/` stands for every part of that
/// kind); any other changed part is refused.
pub const LIVE_PARTS: [&str; 10] = [
    "flows",
    "opcua_server",
    "alerts",
    "commands",
    "http",
    "ingest",
    "dead_letters",
    "device/",
    "nats-connection/",
    "mqtt-connection/",
];

/// Why a part that is not one of [`LIVE_PARTS`] was not changed.
const NOT_LIVE: &str = "not changed while running in this version: restart with it";

/// Whether a reload changes `part` while the connector runs (a sink: as
/// [`sinks_not_live`] says).
fn live(part: &str) -> bool {
    if part.starts_with("sink/") {
        return true;
    }
    let kind = |l: &&str| match l.strip_suffix('/') {
        Some(_) => part.starts_with(*l),
        None => part == *l,
    };
    LIVE_PARTS.iter().any(kind) || PREFIXES.iter().any(kind)
}

/// What a reload changes while the connector runs.
pub struct Targets<'a> {
    /// Its flow plan is swapped.
    pub engine: &'a Arc<Engine>,
    /// Its sources are stopped, started and replaced one at a time.
    pub sources: &'a Sources,
    /// Its alert channels are replaced, its check interval and `after` changed.
    pub alerts: &'a Hub,
    /// `telemetry.alerts.disk_free_pct`.
    pub disk_free_pct: &'a AtomicU64,
    /// The connector's stop, which stops a part started by a reload too.
    pub shutdown: &'a Shutdown,
    /// Its devices' poll loops are stopped and started one connection at a time.
    pub pollers: &'a Pollers,
    /// Its devices are listed again, a device kept with the status it had.
    pub catalogue: &'a Catalogue,
    /// A started device is registered there, a removed one forgotten; its config replaced.
    pub commands: &'a Arc<Commands>,
    /// The NATS and MQTT command paths, started again when they change.
    pub command_paths: &'a CommandPaths,
    /// The sinks while they run: a new one started, a removed or replaced one stopped.
    pub sinks: &'a crate::sinks::Started,
    /// A started device's points keep their last hour there.
    pub trends: &'a Arc<Trends>,
    /// `connector.data_dir` (an OPC-UA device's default PKI folder).
    pub data_dir: &'a Path,
    /// The northbound OPC-UA server, started again when the devices change.
    pub opcua_server: &'a Serving,
    /// The HTTP server's settings (`connector.http` but its address and connection slots).
    pub http: &'a crate::http::Settings,
    /// The bytes webhook bodies may hold before their check, grown with `max_body_kb`.
    pub body_budget: &'a crate::http::BodyBudget,
}

/// What a reload does with the rows a removed sink still holds for its destination, or a
/// changed one whose new instance keeps its rows elsewhere (another kind, another queue).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Leftovers {
    /// The config is refused, naming the sink and its rows.
    #[default]
    Refuse,
    /// The old instance leaves the routes and runs until it holds none (`drain=1`).
    Drain,
    /// The old instance stops and its rows are given up, counted `discarded` and alerted
    /// (`discard=1`).
    Discard,
}

impl Leftovers {
    /// From the request's `drain` and `discard` (or the command line's `--drain` and
    /// `--discard`); `None` when both are given: they exclude each other.
    pub fn from_flags(drain: bool, discard: bool) -> Option<Self> {
        match (drain, discard) {
            (false, false) => Some(Self::Refuse),
            (true, false) => Some(Self::Drain),
            (false, true) => Some(Self::Discard),
            (true, true) => None,
        }
    }

    /// Its query string on `POST /api/config` (empty for [`Self::Refuse`]).
    pub fn query(self) -> &'static str {
        match self {
            Self::Refuse => "",
            Self::Drain => "?drain=1",
            Self::Discard => "?discard=1",
        }
    }
}

/// A config applied.
#[derive(Debug)]
pub struct Applied {
    /// Its revision.
    pub revision: Revision,
    /// What it changed.
    pub diff: Diff,
}

/// Why a config was not applied; nothing changed.
#[derive(Debug)]
pub enum Refused {
    /// It is not a valid config: every problem with its path.
    Invalid(crate::config::Problems),
    /// It was made on top of another revision than the running one (`If-Match`).
    Conflict {
        /// The running revision.
        running: u64,
    },
    /// It changes what this version cannot change while it runs.
    NotLive {
        /// What it would change.
        diff: Diff,
        /// The changed parts that cannot change live, each with why (the settings of
        /// `diff.needs_restart` besides).
        parts: Vec<(String, String)>,
    },
    /// A part it starts could not be built (a webhook's secret file unreadable).
    Failed {
        /// What it would change.
        diff: Diff,
        /// The part.
        part: String,
        /// Why.
        reason: String,
    },
    /// It could not be kept: the file given to `run` could not be rewritten.
    Io(String),
}

impl std::fmt::Display for Refused {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Invalid(p) => write!(
                f,
                "the config has {} problem(s): {}",
                p.0.len(),
                p.to_string().replace('\n', "; ")
            ),
            Self::Conflict { running } => write!(
                f,
                "the running config is revision {running}, not the one this change was made on"
            ),
            Self::NotLive { diff, parts } => {
                let mut what: Vec<String> = diff
                    .needs_restart
                    .iter()
                    .map(|s| format!("{s} (needs a restart)"))
                    .collect();
                what.extend(parts.iter().map(|(p, why)| format!("{p} ({why})")));
                write!(f, "nothing was changed: {}", what.join(", "))
            }
            Self::Failed { part, reason, .. } => {
                write!(f, "nothing was changed: {part} cannot start: {reason}")
            }
            Self::Io(e) => write!(f, "nothing was changed: {e}"),
        }
    }
}

impl Running {
    /// Stops the running instances of sinks `names` (out of the routes first: a record for
    /// them meanwhile is refused and its source retries), then builds and starts their new
    /// instances from `config`, which open what the old ones left in files and take the rows
    /// they held in memory. When one cannot be built, the old instances are built again from
    /// the running config and put back (with those rows), and nothing has changed: the part
    /// and why.
    fn reopen_sinks(
        &self,
        config: &Config,
        names: &[&str],
        targets: &Targets<'_>,
        runtime: &tokio::runtime::Handle,
    ) -> Result<Vec<Arc<crate::sinks::Sink>>, (String, String)> {
        if names.is_empty() {
            return Ok(Vec::new());
        }
        let before = targets.engine.sinks();
        let order: Vec<String> = before.iter().map(|s| s.name().to_string()).collect();
        let (old, kept): (Vec<_>, Vec<_>) = before
            .shared_iter()
            .cloned()
            .partition(|s| names.contains(&s.name()));
        targets
            .engine
            .set_sinks(Arc::new(crate::sinks::Sinks::shared(kept)));
        drop(before);
        let mut held = Vec::new();
        for sink in old {
            let name = sink.name().to_string();
            // A new instance that keeps its rows in another file (or in memory) does not go on
            // from this one's (it holds none: `sinks_not_live`): it ends as removed.
            let kept_in = config.sinks.iter().find(|c| c.name == name);
            let end = match kept_in.map(crate::sinks::Sink::rows_file_of) {
                Some(file) if sink.is_durable() && file.as_deref() != sink.rows_file() => {
                    End::Removed
                }
                _ => End::Reopened,
            };
            if let Some(h) = targets.sinks.stop(sink, end, runtime) {
                held.push((name, h));
            }
        }
        let built = build_sinks(config, names, targets.data_dir);
        let (new, failure) = match built {
            Ok(new) => (new, None),
            Err(failure) => {
                // The running config's instances, as they were.
                let running = crate::config::from_yaml(&self.with(|c| c.text.clone()));
                let again = running
                    .map_err(|p| ("config".to_string(), p.to_string()))
                    .and_then(|c| build_sinks(&c, names, targets.data_dir));
                match again {
                    Ok(old) => (old, Some(failure)),
                    Err((part, e)) => {
                        log::error!(
                            "sink not built again after a failed reload: part={part} error={e}"
                        );
                        (Vec::new(), Some(failure))
                    }
                }
            }
        };
        for (name, h) in held {
            let taken = match new.iter().find(|s| s.name() == name) {
                Some(sink) => sink.adopt(h),
                None => Err(h),
            };
            if let Err(h) = taken {
                targets.engine.retire_part(h.give_up(&name));
            }
        }
        for sink in &new {
            if let Err(e) = targets.sinks.start(Arc::clone(sink)) {
                log::error!("sink not started: name={} error={e}", sink.name());
            }
        }
        // In the order they had, the new instances in the place of the old.
        let now = targets.engine.sinks();
        let list: Vec<_> = order
            .iter()
            .filter_map(|name| {
                new.iter()
                    .find(|s| s.name() == name)
                    .cloned()
                    .or_else(|| now.get_shared(name))
            })
            .collect();
        drop(now);
        targets
            .engine
            .set_sinks(Arc::new(crate::sinks::Sinks::shared(list)));
        match failure {
            None => Ok(new),
            Some(failure) => Err(failure),
        }
    }

    /// Applies config `text` from `origin` (applied by `by`, on top of revision `if_match`
    /// when given; `leftovers` says what becomes of the rows a removed sink holds):
    /// validated whole, compared part by part, refused with the reason when it changes what
    /// cannot change live or starts a part that cannot start; else the file given to `run`
    /// rewritten with it (written whole, then renamed), kept as the next
    /// revision, and its changed parts put in the place of the old ones in `targets`. A
    /// refusal is the last error `/api/status` shows.
    pub fn apply(
        &self,
        text: &str,
        origin: Origin,
        by: Option<&str>,
        if_match: Option<u64>,
        leftovers: Leftovers,
        targets: &Targets<'_>,
    ) -> Result<Applied, Refused> {
        let _one = self.applying.lock().unwrap_or_else(|p| p.into_inner());
        let result = self.try_apply(text, origin, by, if_match, leftovers, targets);
        let error = result.as_ref().err().map(|e| e.to_string());
        if let Some(e) = &error {
            log::warn!(
                "config: not applied: origin={} error=\"{e}\"",
                origin.as_str()
            );
        }
        if let Ok(mut c) = self.current.lock() {
            c.last_error = error;
        }
        result
    }

    /// Notes `error` as the last reload's (a file that could not be read on `SIGHUP`).
    pub fn note_error(&self, error: String) {
        log::warn!("config: not applied: error=\"{error}\"");
        if let Ok(mut c) = self.current.lock() {
            c.last_error = Some(error);
        }
    }

    fn try_apply(
        &self,
        text: &str,
        origin: Origin,
        by: Option<&str>,
        if_match: Option<u64>,
        leftovers: Leftovers,
        targets: &Targets<'_>,
    ) -> Result<Applied, Refused> {
        // The parts' tasks are stopped and started on the runtime this is called from (off
        // its worker threads: `spawn_blocking`).
        let runtime = tokio::runtime::Handle::try_current()
            .map_err(|_| Refused::Io("no runtime to stop and start the parts on".into()))?;
        let config = crate::config::from_yaml(text).map_err(Refused::Invalid)?;
        let running = self.revision();
        if if_match.is_some_and(|r| r != running) {
            return Err(Refused::Conflict { running });
        }
        let tree = crate::config::expanded_tree(text).map_err(Refused::Invalid)?;
        let old = self.tree();
        let diff = diff(&old, &tree);
        let mut parts: Vec<(String, String)> = diff
            .parts
            .iter()
            .filter(|(name, c)| **c != Change::Keep && !live(name))
            .map(|(name, _)| (name.clone(), NOT_LIVE.to_string()))
            .collect();
        // The server restarts with the devices it lists, and with its new settings; it is
        // added or removed with a restart of the service.
        let server_changed = old["opcua_server"] != tree["opcua_server"];
        if server_changed && (old["opcua_server"].is_null() || tree["opcua_server"].is_null()) {
            parts.push((
                "opcua_server".into(),
                "the OPC-UA server is added or removed with a restart of the service".into(),
            ));
        }
        let sinks_now = targets.engine.sinks();
        parts.extend(sinks_not_live(&config, &diff, &sinks_now, leftovers));
        if !parts.is_empty() || !diff.needs_restart.is_empty() {
            return Err(Refused::NotLive { diff, parts });
        }
        // The parts that begin are built first (a webhook reads its secret): one that cannot
        // be refuses the whole config, and nothing changes.
        let named = |changes: &[Change]| -> Vec<&str> {
            diff.parts
                .iter()
                .filter(|(_, c)| changes.contains(c))
                .map(|(name, _)| name.as_str())
                .collect()
        };
        // The names of the parts of one kind (`device/`, `sink/`) with one of `changes`.
        let of = |kind: &str, changes: &[Change]| -> Vec<&str> {
            named(changes)
                .into_iter()
                .filter_map(|part| part.strip_prefix(kind))
                .collect()
        };
        let changed = |part: &str| diff.parts.get(part) != Some(&Change::Keep);
        let failed = |(part, reason)| Refused::Failed {
            diff: diff.clone(),
            part,
            reason,
        };
        let started = named(&[Change::Start, Change::Restart]);
        let built = Built::new(
            &config,
            |part| started.contains(&part),
            targets.engine.dead_letters(),
        )
        .map_err(failed)?;
        // A changed sink with state of its own (a queue file, a history, a memory backlog) is
        // stopped before its new instance opens or takes what it left; one without, or one
        // whose new instance keeps its rows elsewhere (the old one drains or discards them),
        // is replaced as a new one starts.
        let (reopened, fresh): (Vec<&str>, Vec<&str>) =
            of("sink/", &[Change::Start, Change::Restart])
                .into_iter()
                .partition(|name| {
                    let cfg = config.sinks.iter().find(|c| c.name == *name);
                    diff.parts.get(&format!("sink/{name}")) == Some(&Change::Restart)
                        && sinks_now.get(name).is_some_and(|s| {
                            !s.is_stateless() && (s.held_rows() == 0 || goes_on_from(s, cfg))
                        })
                });
        // A Sparkplug node reads the devices and the routes when it starts: a new or changed
        // one starts once those are in place, at the end (checked now, as far as that goes
        // before its queue is opened).
        let is_sparkplug = |name: &&str| {
            config.sinks.iter().any(|c| {
                c.name == *name && matches!(c.spec, crate::sinks::config::SinkSpec::Sparkplug(_))
            })
        };
        let (reborn, reopened): (Vec<&str>, Vec<&str>) =
            reopened.into_iter().partition(is_sparkplug);
        for cfg in config
            .sinks
            .iter()
            .filter(|c| reborn.contains(&c.name.as_str()))
        {
            crate::sinks::Sink::check(cfg, targets.data_dir)
                .map_err(|e| failed((format!("sink/{}", cfg.name), e.to_string())))?;
        }
        let new_sinks = build_sinks(&config, &fresh, targets.data_dir).map_err(failed)?;
        // The file given to `run` will hold what runs, so that a restart comes back with it
        // (on SIGHUP it already does): written and synced beside it now, while nothing has
        // changed (a full disk refuses the config here), put in its place below.
        let staged = match (&self.path, origin == Origin::Sighup) {
            (Some(path), false) => Some((
                path,
                crate::store::file::stage(path, text.as_bytes())
                    .map_err(|e| Refused::Io(format!("{}: {e}", path.display())))?,
            )),
            _ => None,
        };
        // A server with new settings starts before anything else changes: when it cannot (its
        // new port taken), it runs as it was and nothing changes.
        let server_was = match (&config.opcua_server, server_changed) {
            (Some(server), true) => Some(
                runtime
                    .block_on(
                        targets
                            .opcua_server
                            .reconfigure(server.clone(), targets.shutdown),
                    )
                    .map_err(|e| failed(("opcua_server".into(), e)))?,
            ),
            _ => None,
        };
        // The old instances go when nothing holds them any more (their files close then).
        drop(sinks_now);
        let reopened_sinks = match self.reopen_sinks(&config, &reopened, targets, &runtime) {
            Ok(sinks) => sinks,
            Err(failure) => {
                if let Some(was) = server_was {
                    let again = targets.opcua_server.reconfigure(was, targets.shutdown);
                    if let Err(e) = runtime.block_on(again) {
                        log::error!("opcua server: not started again as it was: {e}");
                    }
                }
                return Err(failed(failure));
            }
        };
        let sinks_now = targets.engine.sinks();
        // A rename in the file's own folder: the one step left that could fail after a part
        // changed. Its failure is a problem of the connector's until an apply writes the file
        // (or SIGHUP reads it): a restart would come back with the config the file holds.
        let file_error = staged.and_then(|(path, staged)| {
            let error = format!("{}: {}", path.display(), staged.commit().err()?);
            log::error!("config: the file given to run keeps the previous config: {error}");
            Some(error)
        });
        let now = crate::record::now_ms();
        let at = crate::time::rfc3339(now);
        let kept = self
            .revisions
            .lock()
            .map_err(|_| "the revisions' lock".to_string())
            .and_then(|mut r| r.record(text, origin, by, at.clone()));
        let revision = kept.unwrap_or_else(|e| {
            log::warn!(
                "config revisions: cannot keep the applied config, it runs as revision 0: {e}"
            );
            Revision {
                revision: 0,
                at,
                origin,
                by: by.map(str::to_string),
                hash: revisions::hash(text),
            }
        });
        // The parts that end first, under the plan they ran with (a consumer settles what it
        // holds), then the new plan, then the parts that begin.
        runtime.block_on(async {
            targets.sources.stop(&named(&[Change::Stop]), false).await;
            targets.sources.stop(&named(&[Change::Restart]), true).await;
            targets
                .pollers
                .stop(&of("device/", &[Change::Stop, Change::Restart]))
                .await;
        });
        // The new sinks run before any record reaches them; the plan, compiled again whatever
        // changed (without `flows:` it names every source), goes in with them; the sinks
        // replaced or removed stop once the records that reached them under the old routes
        // are done.
        let ending: Vec<Arc<crate::sinks::Sink>> = of("sink/", &[Change::Stop, Change::Restart])
            .into_iter()
            .filter(|name| !reopened.contains(name) && !reborn.contains(name))
            .filter_map(|name| sinks_now.get_shared(name))
            .collect();
        let mut list = Vec::with_capacity(config.sinks.len());
        let mut born_late = Vec::new();
        for cfg in &config.sinks {
            if let Some(new) = new_sinks.iter().find(|s| s.name() == cfg.name) {
                if is_sparkplug(&cfg.name.as_str()) {
                    // Its queue takes what the routes send it until it starts.
                    born_late.push(Arc::clone(new));
                } else if let Err(e) = targets.sinks.start(Arc::clone(new)) {
                    log::error!("sink not started: name={} error={e}", cfg.name);
                }
                list.push(Arc::clone(new));
            } else if let Some(new) = reopened_sinks.iter().find(|s| s.name() == cfg.name) {
                list.push(Arc::clone(new));
            } else if let Some(kept) = sinks_now.get_shared(&cfg.name) {
                list.push(kept);
            } else {
                log::error!("sink kept by a reload is missing: name={}", cfg.name);
            }
        }
        drop(sinks_now);
        targets
            .engine
            .set_routes(config.plan(), Arc::new(crate::sinks::Sinks::shared(list)));
        // What a removed sink, or one whose new instance keeps its rows elsewhere, leaves
        // behind is delivered by it first (drain) or given up (discard).
        for sink in ending {
            let left = sink.held_rows() > 0;
            match leftovers {
                Leftovers::Drain if left => targets.sinks.drain(&sink),
                Leftovers::Discard if left => {
                    targets.sinks.stop(sink, End::Discarded, &runtime);
                }
                _ => {
                    targets.sinks.stop(sink, End::Removed, &runtime);
                }
            }
        }
        if changed("commands") {
            targets
                .commands
                .set_config(config.commands.clone().unwrap_or_default());
            if command_paths_changed(&old, &tree, &diff) {
                runtime.block_on(targets.command_paths.restart(
                    config.commands.as_ref(),
                    targets.commands,
                    targets.engine,
                    targets.shutdown,
                ));
            }
        }
        if changed("dead_letters") {
            targets
                .engine
                .dead_letters()
                .set_max_rows(config.dead_letters_max_rows);
        }
        if changed("http") {
            targets
                .body_budget
                .fit(config.connector.http.max_body_bytes);
            targets.http.set(config.connector.http.clone());
        }
        if changed("alerts") {
            targets.alerts.reconfigure(&config.alerts, targets.shutdown);
            targets
                .disk_free_pct
                .store(config.alerts.disk_free_pct, Ordering::Relaxed);
        }
        targets.sources.add(built, targets.engine, targets.shutdown);
        start_devices(
            &config,
            &of("device/", &[Change::Start, Change::Restart]),
            &of("device/", &[Change::Stop]),
            targets,
        );
        // Its address space follows the devices (a server started with new settings above
        // served the old ones).
        let devices_changed =
            !of("device/", &[Change::Start, Change::Stop, Change::Restart]).is_empty();
        if changed("opcua_server") && devices_changed {
            runtime.block_on(targets.opcua_server.restart(targets.shutdown));
        }
        for sink in born_late {
            if let Err(e) = targets.sinks.start(Arc::clone(&sink)) {
                log::error!("sink not started: name={} error={e}", sink.name());
            }
        }
        if let Err((part, e)) = self.reopen_sinks(&config, &reborn, targets, &runtime) {
            log::error!("config: {part} not born again with the new devices and flows, it runs as it was: {e}");
        }
        if let Ok(mut c) = self.current.lock() {
            c.text = text.to_string();
            c.revision = revision.clone();
            c.loaded_at_ms = now;
            c.reloads += 1;
            c.file_error = file_error;
        }
        log::info!(
            "config: applied revision={} origin={} hash={} restarted={:?}",
            revision.revision,
            origin.as_str(),
            revision.hash,
            diff.with(Change::Restart)
        );
        Ok(Applied { revision, diff })
    }
}

/// The sink parts of `diff` that cannot change while the connector runs, each with why: a
/// removed sink that still holds rows its destination has not confirmed, a changed sink that
/// holds such rows where its new settings do not go on from them (another file, another kind
/// of memory), unless `leftovers` says to drain or discard them. Any other sink is started, replaced
/// or removed live: a changed one's new instance takes the rows the old one held in memory.
fn sinks_not_live(
    config: &Config,
    diff: &Diff,
    sinks: &crate::sinks::Sinks,
    leftovers: Leftovers,
) -> Vec<(String, String)> {
    let mut out = Vec::new();
    for (part, change) in &diff.parts {
        let Some(name) = part.strip_prefix("sink/") else {
            continue;
        };
        let cfg = config.sinks.iter().find(|s| s.name == name);
        let Some(sink) = sinks.get(name) else {
            continue;
        };
        let held = sink.held_rows();
        match change {
            Change::Stop if held > 0 && leftovers == Leftovers::Refuse => out.push((
                part.clone(),
                format!("it holds {held} rows its destination has not confirmed: remove it once they are delivered, or with drain=1 (delivered first) or discard=1 (given up)"),
            )),
            Change::Restart
                if held > 0 && !goes_on_from(sink, cfg) && leftovers == Leftovers::Refuse =>
            {
                out.push((
                    part.clone(),
                    format!(
                        "it holds {held} rows its destination has not confirmed and its new settings keep them elsewhere (another kind, queue): change it once they are delivered, or with drain=1 (the old instance delivers them first) or discard=1 (given up)"
                    ),
                ))
            }
            Change::Stop | Change::Restart | Change::Start | Change::Keep => {}
        }
    }
    out
}

/// Whether a new instance of `sink` built from `cfg` goes on from the rows it holds: it
/// keeps them in the same file, or in memory of the same sort (which it takes over).
fn goes_on_from(sink: &crate::sinks::Sink, cfg: Option<&crate::sinks::SinkConfig>) -> bool {
    let Some(cfg) = cfg else {
        return false;
    };
    if sink.is_durable() {
        crate::sinks::Sink::rows_file_of(cfg).as_deref() == sink.rows_file()
    } else {
        crate::sinks::Sink::memory_of(cfg) == sink.memory()
    }
}

/// Sinks `names` of `config`, built (a store opened, a client set up) but not started; the
/// part of the first that cannot be built, with why.
fn build_sinks(
    config: &Config,
    names: &[&str],
    data_dir: &Path,
) -> Result<Vec<Arc<crate::sinks::Sink>>, (String, String)> {
    let mut out = Vec::new();
    for cfg in config
        .sinks
        .iter()
        .filter(|c| names.contains(&c.name.as_str()))
    {
        let sink = crate::sinks::Sink::build(cfg, data_dir)
            .map_err(|e| (format!("sink/{}", cfg.name), e.to_string()))?;
        out.push(Arc::new(sink));
    }
    Ok(out)
}

/// Whether the NATS or MQTT command path changes from `old` to `new`: its settings, or the
/// connection it names.
fn command_paths_changed(old: &serde_json::Value, new: &serde_json::Value, diff: &Diff) -> bool {
    ["nats", "mqtt"].iter().any(|path| {
        let (was, now) = (&old["commands"][path], &new["commands"][path]);
        let connection = now["connection"]
            .as_str()
            .map(|c| format!("{path}-connection/{c}"));
        was != now
            || connection.is_some_and(|c| diff.parts.get(&c).is_some_and(|c| *c != Change::Keep))
    })
}

/// Lists `config`'s devices (a device kept with the status it had, a `started` one with a new
/// one), forgets the `stopped` ones' commands, and starts the poll loops of the `started`
/// ones, each device registered for commands when `commands:` is configured.
fn start_devices(config: &Config, started: &[&str], stopped: &[&str], targets: &Targets<'_>) {
    let was = targets.catalogue.devices();
    let listed = config
        .devices
        .catalogue()
        .into_iter()
        .map(|def| {
            let kept = was
                .iter()
                .find(|d| d.def.name == def.name && !started.contains(&def.name.as_str()));
            match kept {
                Some(d) => Arc::clone(d),
                None => Arc::new(DeviceStatus::new(def).with_trends(Arc::clone(targets.trends))),
            }
        })
        .collect();
    targets.catalogue.replace(listed);
    for device in stopped {
        targets.commands.unregister(device);
    }
    // Without `commands:` the started devices take none.
    if config.commands.is_none() {
        for device in started {
            targets.commands.unregister(device);
        }
    }
    let ready = Pollers::build(
        &config.devices,
        |name| started.contains(&name),
        targets.catalogue,
        config.commands.is_some().then_some(targets.commands),
        targets.data_dir,
    );
    if let Err(e) = targets
        .pollers
        .start(ready, targets.engine, targets.shutdown)
    {
        log::error!("devices not started: the pollers' thread cannot start: {e}");
    }
}

#[cfg(test)]
mod tests {
    use super::live;

    #[test]
    fn the_flows_the_alerts_the_sections_the_devices_and_the_sources_change_live_and_nothing_else()
    {
        for part in [
            "flows",
            "alerts",
            "ingest/orders",
            "webhook/pay",
            "nats/events",
            "mqtt/plant",
            "schedule/tick",
            "backfill/history",
            "nats-connection/js",
            "mqtt-connection/plant",
            "device/press-1",
            "http",
            "ingest",
            "dead_letters",
            "commands",
            "opcua_server",
            // Judged one by one by `sinks_not_live`.
            "sink/push",
        ] {
            assert!(live(part), "{part}");
        }
        for part in ["connector", "simulator", "httpx", "flowsx", "ingestx"] {
            assert!(!live(part), "{part}");
        }
    }
}
