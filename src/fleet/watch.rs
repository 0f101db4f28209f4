//! The fleet task: connects to the bucket's cluster, follows key `config.<id>` with an
//! ordered consumer (its current value first, then each new one), applies each value as a
//! reload and writes the outcome to `state.<id>` (also at each connection). It starts again
//! from the connection when the consumer fails (the bucket not there yet, the cluster away),
//! backed off; a value it already handled, or whose config it already runs, is not applied
//! again.

use std::sync::Arc;
use std::time::Duration;

use async_nats::jetstream::consumer::pull::OrderedConfig;
use async_nats::jetstream::consumer::DeliverPolicy;
use futures_util::StreamExt;
use serde_json::{json, Value};

use super::FleetConfig;
use crate::http::AppState;
use crate::reload::{Leftovers, Origin, Refused};

/// Longest wait before the watch starts again after a failure.
const RETRY_MAX: Duration = Duration::from_secs(10);

/// The longest pull request of the watch; the client's idle heartbeat is half of it.
const PULL_EXPIRES: Duration = Duration::from_secs(2);

/// Starts the fleet task of `cfg` on the current runtime, until the connector stops.
pub fn start(state: &Arc<AppState>, cfg: FleetConfig) {
    // A key file that cannot be read is said now, not only when a value comes.
    super::read_keys(&cfg.trusted_keys);
    let state = Arc::clone(state);
    tokio::spawn(async move {
        let mut seen = Seen::default();
        while !state.shutdown.is_triggered() {
            let shutdown = state.shutdown.clone();
            let client_name = format!("opex-connector fleet/{}", cfg.id);
            let Some(client) =
                crate::brokers::nats::connect(&cfg.connection, &client_name, &shutdown).await
            else {
                return;
            };
            let error = tokio::select! {
                e = follow(&state, &cfg, client, &mut seen) => e,
                _ = shutdown.wait() => return,
            };
            seen.failures += 1;
            let wait = crate::brokers::nats::reconnect_delay(seen.failures, RETRY_MAX);
            log::warn!(
                "fleet: watch of {}.config.{} failed, starting again: retry_in_ms={} error=\"{error}\"",
                cfg.bucket,
                cfg.id,
                wait.as_millis()
            );
            tokio::select! {
                _ = tokio::time::sleep(wait) => {}
                _ = shutdown.wait() => return,
            }
        }
    });
}

/// What the task has handled, kept across its restarts.
#[derive(Default)]
struct Seen {
    /// The stream sequence of the last value handled: one delivered again after a restart
    /// of the watch is not applied again (a local change made since stays).
    sequence: u64,
    /// The last value's outcome, reported again at each (re)connection.
    outcome: Outcome,
    /// Failures since the watch last followed the key.
    failures: usize,
}

/// Follows the key until the consumer fails; why. Writes the state first: the controller
/// sees the gateway up, with the revision it runs.
async fn follow(
    state: &Arc<AppState>,
    cfg: &FleetConfig,
    client: async_nats::Client,
    seen: &mut Seen,
) -> String {
    let js = async_nats::jetstream::new(client);
    let subject = format!("$KV.{}.state.{}", cfg.bucket, cfg.id);
    let report = |outcome: &Outcome| {
        let js = js.clone();
        let subject = subject.clone();
        let body = state_json(state, outcome).to_string();
        async move {
            let put = match js.publish(subject, body.into()).await {
                Ok(ack) => ack.await.map(drop).map_err(|e| e.to_string()),
                Err(e) => Err(e.to_string()),
            };
            if let Err(e) = put {
                log::warn!("fleet: state not written: error=\"{e}\"");
            }
        }
    };
    let stream = match js.get_stream(format!("KV_{}", cfg.bucket)).await {
        Ok(s) => s,
        Err(e) => return format!("bucket {}: {e}", cfg.bucket),
    };
    let consumer = stream
        .create_consumer(OrderedConfig {
            filter_subject: format!("$KV.{}.config.{}", cfg.bucket, cfg.id),
            deliver_policy: DeliverPolicy::LastPerSubject,
            // Pull requests of 2 s carry an idle heartbeat of 1 s: a consumer lost with a
            // server of the cluster is made again within some 4 s (two heartbeats missed
            // twice), not the half minute of the client's defaults.
            max_expires: PULL_EXPIRES,
            ..Default::default()
        })
        .await;
    let mut messages = match consumer {
        Ok(c) => match c.messages().await {
            Ok(m) => m,
            Err(e) => return e.to_string(),
        },
        Err(e) => return e.to_string(),
    };
    log::info!("fleet: following {}.config.{}", cfg.bucket, cfg.id);
    seen.failures = 0;
    report(&seen.outcome).await;
    while let Some(message) = messages.next().await {
        let message = match message {
            Ok(m) => m,
            Err(e) => return e.to_string(),
        };
        // A deleted or purged key leaves the running config as it is.
        let removed = message
            .headers
            .as_ref()
            .and_then(|h| h.get("KV-Operation"))
            .is_some_and(|op| op.as_str() == "DEL" || op.as_str() == "PURGE");
        let sequence = message.info().map_or(0, |i| i.stream_sequence);
        if removed || (sequence != 0 && sequence <= seen.sequence) {
            continue;
        }
        seen.sequence = sequence;
        seen.outcome = apply(state, cfg, message.payload.to_vec()).await;
        report(&seen.outcome).await;
    }
    "the consumer ended".into()
}

/// What became of one value: applied (or already running), or every problem.
#[derive(Default)]
enum Outcome {
    /// Applied, or none came yet.
    #[default]
    Ok,
    /// Refused: every problem, each with its path.
    Refused(Vec<Value>),
}

/// Opens `value` and applies the config it carries, off the runtime's threads.
async fn apply(state: &Arc<AppState>, cfg: &FleetConfig, value: Vec<u8>) -> Outcome {
    let trusted = cfg.trusted_keys.clone();
    let shared = Arc::clone(state);
    let done = tokio::task::spawn_blocking(move || {
        // Refused before it is a config: the last error `/api/status` shows too.
        let refuse = |e: String| {
            shared.config.note_error(format!("fleet: {e}"));
            one(e)
        };
        let (text, key) = super::open(&value, &super::read_keys(&trusted)).map_err(refuse)?;
        let local = shared.config.tree()["fleet"].clone();
        let text = super::with_local_section(&text, &local).map_err(refuse)?;
        if crate::reload::revisions::hash(&text) == shared.config.hash() {
            return Ok(());
        }
        let targets = shared.targets();
        let by = format!("fleet key {}", &key[..key.len().min(16)]);
        shared
            .config
            .apply(
                &text,
                Origin::Fleet,
                Some(&by),
                None,
                Leftovers::Refuse,
                &targets,
            )
            .map(drop)
            .map_err(|refused| problems(&refused))
    })
    .await;
    match done {
        Ok(Ok(())) => Outcome::Ok,
        Ok(Err(problems)) => Outcome::Refused(problems),
        Err(e) => Outcome::Refused(one(e.to_string())),
    }
}

/// One problem of the whole value.
fn one(message: String) -> Vec<Value> {
    vec![json!({"path": "", "message": message})]
}

/// Every problem of a refusal, each with its path.
fn problems(refused: &Refused) -> Vec<Value> {
    match refused {
        Refused::Invalid(p) => {
            p.0.iter()
                .map(|p| json!({"path": p.path, "message": p.message}))
                .collect()
        }
        Refused::Failed { part, reason, .. } => {
            vec![json!({"path": part, "message": format!("cannot start: {reason}")})]
        }
        Refused::NotLive { diff, parts } => diff
            .needs_restart
            .iter()
            .map(|s| json!({"path": s, "message": "needs a restart"}))
            .chain(
                parts
                    .iter()
                    .map(|(part, why)| json!({"path": part, "message": why})),
            )
            .collect(),
        Refused::Conflict { .. } | Refused::Io(_) => one(refused.to_string()),
    }
}

/// `state.<id>`: the revision it runs, the last value's outcome, version, health, time.
fn state_json(state: &AppState, outcome: &Outcome) -> Value {
    let (ok, problems) = match outcome {
        Outcome::Ok => (true, Vec::new()),
        Outcome::Refused(p) => (false, p.clone()),
    };
    json!({
        "revision": state.config.revision(),
        "ok": ok,
        "problems": problems,
        "version": crate::VERSION,
        "healthy": crate::http::problems::assess(state).state == crate::health::State::Ok,
        "at": crate::time::rfc3339(crate::record::now_ms()),
    })
}
