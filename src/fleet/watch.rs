//! The fleet task: connects to the bucket's cluster, follows key `config.<id>` (its current
//! value first, then each new one, see [`follow`]), applies each value as a reload and writes
//! the outcome to `state.<id>` (also at each connection). It starts again from the
//! connection when the key cannot be read or a state cannot be written (the bucket not there
//! yet, the cluster away), backed off; a value it already handled, or whose config it already
//! runs, is not applied again.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use async_nats::jetstream::stream::LastRawMessageErrorKind;
use futures_util::StreamExt;
use serde_json::{json, Value};

use super::FleetConfig;
use crate::http::AppState;
use crate::reload::{Leftovers, Origin, Refused};

/// Longest wait before the watch starts again after a failure.
const RETRY_MAX: Duration = Duration::from_secs(10);

/// How often the watch looks whether its client connected again.
const TICK: Duration = Duration::from_secs(1);

/// The key is read at least this often, whatever was heard.
const READ_ANYWAY: Duration = Duration::from_secs(30);

/// The wait before the key is read again when a put was heard and the bucket does not show
/// it yet, and how many times (a second in all).
const AGAIN: Duration = Duration::from_millis(20);
const AGAIN_TIMES: u32 = 50;

/// Starts the fleet task of `cfg` on the current runtime, until the connector stops.
pub fn start(state: &Arc<AppState>, cfg: FleetConfig) {
    // A key file that cannot be read is said now, not only when a value comes.
    super::read_keys(&cfg.trusted_keys);
    let state = Arc::clone(state);
    tokio::spawn(async move {
        let mut seen = Seen::load(&state.data_dir);
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

/// The file under the data dir that keeps the stream sequence of the last value handled.
const SEEN_FILE: &str = "fleet-seen";

/// What the task has handled, kept across its restarts.
#[derive(Default)]
struct Seen {
    /// The stream sequence of the last value handled, kept in [`SEEN_FILE`] too: that value
    /// read again after a restart of the watch or of the connector is not applied again (a
    /// local change made since stays). Another sequence is another value, even a lower one
    /// (the bucket made again).
    sequence: u64,
    /// Where the sequence is kept.
    file: std::path::PathBuf,
    /// The last value's outcome, reported again at each (re)connection.
    outcome: Outcome,
    /// Failures since the watch last followed the key.
    failures: usize,
}

impl Seen {
    /// What was handled before the connector started, as kept in `data_dir`.
    fn load(data_dir: &std::path::Path) -> Seen {
        let file = data_dir.join(SEEN_FILE);
        let sequence = std::fs::read_to_string(&file)
            .ok()
            .and_then(|t| t.trim().parse().ok())
            .unwrap_or(0);
        Seen {
            sequence,
            file,
            ..Seen::default()
        }
    }

    /// `sequence` handled, and kept (off the runtime's threads: the file is synced).
    async fn handled(&mut self, sequence: u64) {
        self.sequence = sequence;
        let file = self.file.clone();
        let text = format!("{sequence}\n");
        let written = tokio::task::spawn_blocking(move || {
            crate::store::file::write_whole(&file, text.as_bytes()).map_err(|e| e.to_string())
        })
        .await
        .unwrap_or_else(|e| Err(e.to_string()));
        if let Err(e) = written {
            log::warn!(
                "fleet: {} not written (the value may be applied again after a restart): {e}",
                self.file.display()
            );
        }
    }
}

/// Follows the key until the connection or the bucket fails; why. Writes the state first:
/// the controller sees the gateway up, with the revision it runs.
///
/// A put of the key is a message on its subject: a plain subscription hears it at once, on
/// whichever server of the cluster the client is (it moves with the client when a server is
/// lost). The value applied is then read from the bucket, the last one stored under the key
/// (a put the stream refused is never applied). The key is also read at the start, after
/// each reconnection of the client (a put made while it was away) and every
/// [`READ_ANYWAY`].
async fn follow(
    state: &Arc<AppState>,
    cfg: &FleetConfig,
    client: async_nats::Client,
    seen: &mut Seen,
) -> String {
    let js = async_nats::jetstream::new(client.clone());
    let state_subject = format!("$KV.{}.state.{}", cfg.bucket, cfg.id);
    let report = |outcome: &Outcome| {
        let js = js.clone();
        let subject = state_subject.clone();
        let body = state_json(state, outcome).to_string();
        async move {
            match js.publish(subject.clone(), body.into()).await {
                Ok(ack) => ack.await.map(drop),
                Err(e) => Err(e),
            }
            .map_err(|e| format!("{subject} not written: {e}"))
        }
    };
    let key = format!("$KV.{}.config.{}", cfg.bucket, cfg.id);
    let mut puts = match client.subscribe(key.clone()).await {
        Ok(s) => s,
        Err(e) => return format!("{key}: {e}"),
    };
    let stream = match js.get_stream(format!("KV_{}", cfg.bucket)).await {
        Ok(s) => s,
        Err(e) => return format!("bucket {}: {e}", cfg.bucket),
    };
    log::info!("fleet: following {}.config.{}", cfg.bucket, cfg.id);
    seen.failures = 0;
    if let Err(e) = report(&seen.outcome).await {
        return e;
    }
    let connects = || client.statistics().connects.load(Ordering::Relaxed);
    let mut connected = connects();
    let mut tick = tokio::time::interval(TICK);
    let mut read_at;
    // Reads left for a put heard that the bucket does not show yet (the subscription can
    // hear it before the stream's leader has stored it; one the stream refused never shows).
    let mut heard = 0;
    // The value handled last: a put of it heard was read already, with an earlier put.
    let mut handled: Option<bytes::Bytes> = None;
    let mut first = true;
    loop {
        let last = match stream.get_last_raw_message_by_subject(&key).await {
            Ok(m) => Some(m),
            Err(e) if e.kind() == LastRawMessageErrorKind::NoMessageFound => None,
            Err(e) => return format!("{key}: {e}"),
        };
        read_at = tokio::time::Instant::now();
        if first && last.as_ref().is_some_and(|m| m.sequence == seen.sequence) {
            log::info!(
                "fleet: {}.config.{} holds the value already handled: sequence={}",
                cfg.bucket,
                cfg.id,
                seen.sequence
            );
        }
        first = false;
        match last.filter(|m| m.sequence != seen.sequence) {
            Some(message) => {
                heard = 0;
                // A deleted or purged key leaves the running config as it is.
                let removed = is_removal(Some(&message.headers));
                if !removed {
                    seen.outcome = apply(state, cfg, message.payload.to_vec()).await;
                }
                handled = (!removed).then(|| message.payload.clone());
                seen.handled(message.sequence).await;
                // A state not written (the bucket's leader being elected again) is written
                // when the watch starts again, after a short wait.
                if !removed {
                    if let Err(e) = report(&seen.outcome).await {
                        return e;
                    }
                }
            }
            None if heard > 0 => {
                heard -= 1;
                tokio::time::sleep(AGAIN).await;
                continue;
            }
            None => {}
        }
        // Until a put is heard, the client has connected again, or it is time to read anyway.
        loop {
            tokio::select! {
                put = puts.next() => {
                    let Some(put) = put else {
                        return "the subscription ended".into();
                    };
                    let removal = is_removal(put.headers.as_ref());
                    heard = reads_after(removal, &put.payload, handled.as_deref());
                    break;
                }
                _ = tick.tick() => {
                    let now = connects();
                    if now != connected || read_at.elapsed() >= READ_ANYWAY {
                        connected = now;
                        break;
                    }
                }
            }
        }
    }
}

/// Whether a message of the key with `headers` is a delete or a purge, not a value.
fn is_removal(headers: Option<&async_nats::HeaderMap>) -> bool {
    headers
        .and_then(|h| h.get("KV-Operation"))
        .is_some_and(|op| op.as_str() == "DEL" || op.as_str() == "PURGE")
}

/// The reads to make again, after the one that follows at once, for a put heard (`removal`: a
/// delete or purge) while `handled` is the value handled last: none when the put carries that
/// value (it was read already, with an earlier put; or it is the same config put again, which
/// changes nothing, and a read within [`READ_ANYWAY`] writes its state if this one comes too
/// early), else up to [`AGAIN_TIMES`] while the bucket does not show it yet.
fn reads_after(removal: bool, payload: &[u8], handled: Option<&[u8]>) -> u32 {
    if !removal && handled == Some(payload) {
        0
    } else {
        AGAIN_TIMES
    }
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_put_of_the_value_handled_last_is_read_once_and_another_until_the_bucket_shows_it() {
        assert_eq!(reads_after(false, b"a", Some(b"a")), 0);
        assert_eq!(reads_after(false, b"b", Some(b"a")), AGAIN_TIMES);
        assert_eq!(reads_after(false, b"a", None), AGAIN_TIMES);
        // A delete carries no value: it is read until the bucket shows it.
        assert_eq!(reads_after(true, b"", Some(b"")), AGAIN_TIMES);
    }
}
