//! The OPC-UA side of the tools: a session made the way an OPC-UA device makes its own
//! ([`open_session`]: the same endpoint choice and server certificate checks), but one that
//! gives up at the first failure instead of retrying, and `read opcua`.
//!
//! Without a security policy the tools need no client certificate: their PKI folder is a
//! fresh one in the temp dir, removed at the end, and no key pair is made. With one,
//! `--pki-dir` names the folder of the client certificate: the daemon's own
//! (`<data_dir>/opcua-pki`, which the server may already trust) or another (a key pair is made
//! there on first use).

use std::io::Write;
use std::path::PathBuf;
use std::str::FromStr;
use std::sync::Arc;

use futures_util::StreamExt;
use opcua::client::{Client, Session, SessionPollResult};
use opcua::types::{AttributeId, NodeId, ReadValueId, StatusCode, TimestampsToReturn};
use serde_json::json;
use tokio::task::JoinHandle;

use super::target::{value_of, Entry};
use super::{emit, point_line, repeat, Error, Flags, Outcome};
use crate::record::now_ms;
use crate::sources::hints;
use crate::sources::opcua::client::{client_builder, open_session};
use crate::sources::opcua::config::{OpcuaDeviceConfig, SecurityPolicy};
use crate::sources::opcua::values::point_json;

/// Most node ids one `read opcua` reads.
pub const MAX_NODES: usize = 1000;

/// The device entry for `endpoint` with the security flags, reading `nodes`.
pub fn device(
    endpoint: &str,
    nodes: &[&str],
    flags: &Flags<'_>,
) -> Result<OpcuaDeviceConfig, Error> {
    let mut entry = Entry::new("opcua");
    entry.set("endpoint", json!(endpoint), "the endpoint URL");
    entry.set_flags(
        flags,
        &[
            ("--security-policy", "security_policy"),
            ("--security-mode", "security_mode"),
            ("--username", "username"),
            ("--pki-dir", "pki_dir"),
            ("--trust-server-certs", "trust_server_certs"),
            ("--timeout-ms", "request_timeout_ms"),
        ],
    );
    if value_of(flags, "--no-check-hostname").is_some() {
        entry.set("check_server_hostname", json!(false), "--no-check-hostname");
    }
    if let Some(file) = super::text(flags, "--password-file") {
        let text = std::fs::read_to_string(file)
            .map_err(|e| Error::Usage(format!("--password-file {file}: {e}")))?;
        let password = text.lines().next().unwrap_or_default().to_string();
        entry.set("password", json!(password), "--password-file");
    }
    for (i, node) in nodes.iter().enumerate() {
        entry.push(
            "nodes",
            vec![
                ("name", json!(format!("n{i}")), "the node".to_string()),
                ("node_id", json!(node), format!("node id {node:?}")),
            ],
        );
    }
    let device = entry.opcua()?;
    if device.security_policy != SecurityPolicy::None && device.pki_dir.is_none() {
        return Err(Error::Usage(
            "--pki-dir is needed with a security policy: the folder of the client certificate the server trusts (the daemon's is <data_dir>/opcua-pki)".into(),
        ));
    }
    Ok(device)
}

/// A connected session, its event loop driven, and what to clean up after it.
pub struct Connected {
    /// The session.
    pub session: Arc<Session>,
    /// The client that made the session, kept as long as it.
    _client: Client,
    events: JoinHandle<StatusCode>,
    temp_pki: Option<PathBuf>,
}

impl Connected {
    /// Ends the session (politely, briefly) and removes a temporary PKI folder.
    pub async fn close(self) {
        let _ = tokio::time::timeout(std::time::Duration::from_secs(2), self.session.disconnect())
            .await;
        self.events.abort();
        if let Some(dir) = self.temp_pki {
            let _ = std::fs::remove_dir_all(dir);
        }
    }
}

/// Opens a session with `c`'s server, failing at the first refusal with one line: what
/// failed and what to check.
pub async fn connect(c: &OpcuaDeviceConfig) -> Result<Connected, Error> {
    let (pki_dir, temp_pki) = match &c.pki_dir {
        Some(dir) => (dir.clone(), None),
        None => {
            let dir =
                std::env::temp_dir().join(format!("opex-connector-tools-{}", std::process::id()));
            (dir.clone(), Some(dir))
        }
    };
    let fail = |text: String| {
        if let Some(dir) = &temp_pki {
            let _ = std::fs::remove_dir_all(dir);
        }
        let hint = hints::opcua_hint(&text)
            .map(|h| format!(": {h}"))
            .unwrap_or_default();
        Error::Failed(format!("{text}{hint}"))
    };
    let builder = client_builder(c, &pki_dir)
        .session_retry_limit(0)
        .create_sample_keypair(c.security_policy != SecurityPolicy::None);
    let (client, session, event_loop) = open_session(c, builder).await.map_err(fail)?;
    let events = tokio::spawn(async move {
        let stream = event_loop.enter();
        futures_util::pin_mut!(stream);
        while let Some(event) = stream.next().await {
            match event {
                Err(code) | Ok(SessionPollResult::ConnectionLost(code)) => return code,
                Ok(_) => {}
            }
        }
        StatusCode::BadConnectionClosed
    });
    let mut events = events;
    let connected = tokio::select! {
        up = tokio::time::timeout(c.request_timeout * 2, session.wait_for_connection()) => up,
        code = &mut events => {
            let code = code.unwrap_or(StatusCode::BadUnexpectedError);
            return Err(fail(format!("session with {}: {code}", c.endpoint)));
        }
    };
    if !matches!(connected, Ok(true)) {
        events.abort();
        return Err(fail(format!("session with {}: timed out", c.endpoint)));
    }
    Ok(Connected {
        session,
        _client: client,
        events,
        temp_pki,
    })
}

/// `read opcua ENDPOINT NODE...`: reads the nodes `--count` times, `--interval-ms` apart,
/// and prints each value with its quality and status.
pub fn read(
    endpoint: &str,
    nodes: &[&str],
    flags: &Flags<'_>,
    out: &mut dyn Write,
) -> Result<Outcome, Error> {
    if nodes.is_empty() {
        return Err(Error::Usage(
            "read opcua needs a node id, e.g. \"ns=2;s=Temperature\"".into(),
        ));
    }
    if nodes.len() > MAX_NODES {
        return Err(Error::Usage(format!(
            "read opcua reads at most {MAX_NODES} nodes at once"
        )));
    }
    let (count, interval) = repeat(flags)?;
    let c = device(endpoint, nodes, flags)?;
    let ids: Vec<ReadValueId> = nodes
        .iter()
        .map(|n| ReadValueId {
            // Checked by the validation: every node id parses.
            node_id: NodeId::from_str(n).unwrap_or_else(|_| NodeId::null()),
            attribute_id: AttributeId::Value as u32,
            ..Default::default()
        })
        .collect();
    super::runtime()?.block_on(async {
        let connected = connect(&c).await?;
        let result = read_loop(&connected, &c, nodes, &ids, count, interval, out).await;
        connected.close().await;
        result
    })
}

async fn read_loop(
    connected: &Connected,
    c: &OpcuaDeviceConfig,
    nodes: &[&str],
    ids: &[ReadValueId],
    count: u64,
    interval: std::time::Duration,
    out: &mut dyn Write,
) -> Result<Outcome, Error> {
    let mut outcome = Outcome::Done;
    for i in 0..count {
        if i > 0 {
            tokio::time::sleep(interval).await;
        }
        let at = now_ms();
        let read = tokio::time::timeout(
            c.request_timeout,
            connected.session.read(ids, TimestampsToReturn::Both, 0.0),
        )
        .await;
        let values = match read {
            Ok(Ok(values)) => values,
            Ok(Err(e)) if i == 0 => {
                let text = format!("read: {e}");
                let hint = hints::opcua_hint(&text)
                    .map(|h| format!(": {h}"))
                    .unwrap_or_default();
                return Err(Error::Failed(format!("{text}{hint}")));
            }
            Err(_) if i == 0 => {
                return Err(Error::Failed(format!(
                    "read: no answer from {} within {} ms",
                    c.endpoint,
                    c.request_timeout.as_millis()
                )))
            }
            Ok(Err(e)) => {
                outcome = Outcome::Partial;
                emit(
                    out,
                    &format!("{}  read failed: {e}", crate::time::rfc3339(at)),
                )?;
                continue;
            }
            Err(_) => {
                outcome = Outcome::Partial;
                emit(
                    out,
                    &format!("{}  read failed: timed out", crate::time::rfc3339(at)),
                )?;
                continue;
            }
        };
        for (n, node) in nodes.iter().enumerate() {
            let point = values.get(n).map(point_json).unwrap_or_else(
                || json!({"value": null, "quality": "bad", "status": "BadUnexpectedError"}),
            );
            let why = match point["status"].as_str() {
                Some(s) if point["quality"] != "good" => {
                    outcome = Outcome::Partial;
                    Some(match hints::opcua_hint(s) {
                        Some(h) => format!("{s}: {h}"),
                        None => s.to_string(),
                    })
                }
                _ => None,
            };
            emit(out, &point_line(at, node, &point, why.as_deref()))?;
        }
    }
    Ok(outcome)
}
