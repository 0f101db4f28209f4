//! The server: `async-opcua`'s, with the address space of [`super::space`] in our own node
//! manager ([`super::points`]: reads from the address space, writes through the commands
//! path; browsed by [`super::browse`]), our own user check ([`super::users`]), and a task
//! that keeps the values current.
//!
//! - **Values.** At each poll of a device and change of its connection state (the catalogue
//!   wakes the task), and at least every [`REFRESH`], the task looks at each device: when it
//!   polled (or its connection state changed) since the last look, its points' values are
//!   set anew; the server's subscriptions see the ones that changed. A point is served as its
//!   device last read it, with the poll's timestamp. Once a second every device is looked at
//!   again (a value turns stale without a poll), and the gateway's own figures are set.
//! - **Writes.** A write to a variable is checked by the stack first (the node writable, the
//!   user's access level: a `read` user and anonymous sessions have none, the value of the
//!   variable's data type), then handed to the commands service as a command of its own with
//!   origin `opcua` and the session's user: bounds, expiry, rate limit, at most once, the
//!   record `command/<device>`. The answer maps to the write's status: `written` Good,
//!   `out_of_range` BadOutOfRange, `refused` BadNotWritable, `expired` BadTimeout,
//!   `unavailable` BadCommunicationError, `exception` BadDeviceFailure, `unknown` Uncertain.
//! - **Certificates.** The server's own is made on first start into `pki_dir` with the
//!   configured host names; a client's certificate that is not trusted is refused and written
//!   to `rejected/` (moving it to `trusted/` trusts it: the store is read at each connection).

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use opcua::crypto::{CertificateStore, SecurityPolicy, X509Data};
use opcua::types::{
    ApplicationDescription, ApplicationType, DataValue, LocalizedText, MessageSecurityMode, NodeId,
    UAString, Variant,
};
use serde_json::json;
use ua_server::node_manager::memory::InMemoryNodeManager;
use ua_server::{ServerBuilder, ServerEndpoint};

use super::browse::{Browsed, BrowsedBuilder};
use super::config::{Mode, OpcuaServerConfig, Policy};
use super::points::{Points, PointsBuilder};
use super::space::{self, Gateway};
use super::users::Users;
use super::Stats;
use crate::commands::Commands;
use crate::engine::Engine;
use crate::shutdown::Shutdown;
use crate::sources::catalogue::Catalogue;

/// How often the values are brought up to date.
pub const REFRESH: Duration = Duration::from_millis(100);

/// What the server reads and writes through: the catalogue for the points, the commands
/// service and the engine (whose records a command makes) for writes.
#[derive(Clone)]
pub struct Parts {
    /// Every device's points.
    pub catalogue: Catalogue,
    /// The commands service (without `commands:`, every write is refused).
    pub commands: Arc<Commands>,
    /// Where a command's record goes.
    pub engine: Arc<Engine>,
    /// The connector's version, served as `Connector/Version`.
    pub version: String,
    /// The gateway's health, sinks and queues, served under `Connector/` (read once a second).
    pub gateway: Arc<dyn Fn() -> Gateway + Send + Sync>,
}

/// Binds `config.listen` and starts the server on the current runtime, its figures in
/// `stats`: the task that runs it until `shutdown`.
pub fn start(
    config: &OpcuaServerConfig,
    name: &str,
    parts: Parts,
    stats: Arc<Stats>,
    shutdown: Shutdown,
) -> Result<tokio::task::JoinHandle<()>, String> {
    let listener = std::net::TcpListener::bind(config.listen)
        .map_err(|e| format!("opcua_server.listen {}: {e}", config.listen))?;
    listener
        .set_nonblocking(true)
        .map_err(|e| format!("opcua_server.listen {}: {e}", config.listen))?;
    let listener = tokio::net::TcpListener::from_std(listener)
        .map_err(|e| format!("opcua_server.listen {}: {e}", config.listen))?;
    let host = endpoint_host(config);
    make_certificate(config, name, &host);
    let users = Arc::new(Users::new(config, Arc::clone(&stats)));
    // The standard namespace's nodes are our own (`base`), not the stack's generated ones.
    let mut builder = ServerBuilder::new()
        .without_node_managers()
        .application_name(format!("opex-connector {name}"))
        .application_uri(config.application_uri.clone())
        .product_uri("urn:opex-connector")
        .host(host.clone())
        .port(config.listen.port())
        .pki_dir(config.pki_dir.clone())
        .create_sample_keypair(true)
        .trust_client_certs(false)
        .discovery_urls(vec!["/".to_owned()])
        .max_sessions(config.limits.sessions)
        // The session and subscription counts /api/status shows.
        .diagnostics_enabled(true)
        .with_authenticator(users)
        .with_node_manager(BrowsedBuilder(PointsBuilder {
            namespace: config.namespace_uri.clone(),
            parts: parts.clone(),
            monitored_items: config.limits.monitored_items as u64,
        }));
    {
        let limits = builder.limits_mut();
        limits.subscriptions.max_subscriptions_per_session =
            config.limits.subscriptions_per_session;
        // The limit of all sessions together is kept by the node manager.
        limits.subscriptions.max_monitored_items_per_sub = config.limits.monitored_items;
        limits.subscriptions.min_publishing_interval_ms =
            config.limits.min_publishing_interval.as_millis() as f64;
        limits.subscriptions.min_sampling_interval_ms =
            config.limits.min_publishing_interval.as_millis() as f64;
        // The stack's default is no bound: when every point changes at once (a network
        // outage turns every device's variables bad together) one publish response would
        // carry them all, over the message size, and the client gets BadResponseTooLarge
        // instead of its notifications. Bounded, the rest follow in the next responses.
        limits.subscriptions.max_notifications_per_publish = MAX_NOTIFICATIONS_PER_PUBLISH;
    }
    let mut endpoints = Vec::new();
    for (i, (policy, mode)) in config.security.iter().enumerate() {
        let mut e = ServerEndpoint::new("/", stack_policy(*policy), stack_mode(*mode), &[]);
        if *policy == Policy::None {
            // A password still goes encrypted, as the user token policy says.
            e.password_security_policy = Some(SecurityPolicy::Basic256Sha256.to_string());
        }
        builder = builder.add_endpoint(format!("e{i}"), e);
        endpoints.push(json!({
            "url": format!("opc.tcp://{host}:{}/", config.listen.port()),
            "policy": policy.as_str(),
            "mode": mode.as_str(),
        }));
    }
    let (server, handle) = builder.build()?;
    let ns = handle
        .get_namespace_index(&config.namespace_uri)
        .ok_or("the devices' namespace was not registered")?;
    let manager = handle
        .node_managers()
        .get_of_type::<Browsed>()
        .ok_or("the node manager is missing")?
        .inner()
        .clone();
    if let Ok(mut e) = stats.endpoints.lock() {
        *e = endpoints;
    }
    manager.inner().set_stats(Arc::clone(&stats));
    let subscriptions = handle.subscriptions().clone();
    let info = Arc::clone(handle.info());
    let listening = Arc::clone(&stats);
    log::info!(
        "opcua server listening: listen={} namespace={} ns={ns} points={}",
        config.listen,
        config.namespace_uri,
        manager.inner().space.points.len()
    );
    let task = tokio::spawn(async move {
        listening.listening.store(true, Ordering::Relaxed);
        let refresh = async {
            let mut last: Vec<Option<Seen>> = vec![None; parts.catalogue.devices().len()];
            let mut tick = tokio::time::interval(REFRESH);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            let mut second = 0;
            loop {
                tokio::select! {
                    _ = tick.tick() => {}
                    _ = parts.catalogue.changed().notified() => {}
                }
                refresh(&manager, &subscriptions, &parts.catalogue, &mut last);
                let now = crate::record::now_ms() / 1000;
                if now != second {
                    second = now;
                    count_sessions(&info, &listening);
                    let gateway = (parts.gateway)();
                    let values = gateway.values(&manager.inner().space);
                    let updates = values
                        .into_iter()
                        .map(|(n, v)| (n, None, DataValue::new_now(v)));
                    if let Err(e) = manager.set_values(&subscriptions, updates) {
                        log::warn!("opcua server: cannot set the connector's values: {e}");
                    }
                    if let Ok(mut open) = listening.open_sessions.lock() {
                        *open = manager.inner().sessions.rows();
                    }
                }
            }
        };
        tokio::select! {
            r = server.run_with(listener) => {
                if let Err(e) = r {
                    log::error!("opcua server ended: error={e}");
                }
            }
            _ = refresh => {}
            _ = shutdown.wait() => handle.cancel(),
        }
        listening.listening.store(false, Ordering::Relaxed);
    });
    Ok(task)
}

/// Most notifications in one publish response: about 40 bytes each, well inside the stack's
/// message size.
pub const MAX_NOTIFICATIONS_PER_PUBLISH: u64 = 1000;

/// What the values of a device were last set from: its polls, its state, and the second (a
/// value turns stale without a poll).
type Seen = (u64, &'static str, u64);

/// Sets the values of every device that polled, changed state, or was last looked at in
/// another second, since `last`.
fn refresh(
    manager: &InMemoryNodeManager<Points>,
    subscriptions: &ua_server::SubscriptionCache,
    catalogue: &Catalogue,
    last: &mut [Option<Seen>],
) {
    let space = &manager.inner().space;
    let now_ms = crate::record::now_ms();
    let mut values: Vec<(&NodeId, Option<&opcua::types::NumericRange>, DataValue)> = Vec::new();
    for (d, device) in catalogue.devices().iter().enumerate() {
        let now = (
            device.polls_total.load(Ordering::Relaxed),
            device.state().as_str(),
            now_ms / 1000,
        );
        if last.get(d).copied().flatten() == Some(now) {
            continue;
        }
        if let Some(slot) = last.get_mut(d) {
            *slot = Some(now);
        }
        let range = space.by_device.get(d).cloned().unwrap_or_default();
        for served in space.points.get(range).unwrap_or_default() {
            let Some(p) = device.def.points.get(served.point) else {
                continue;
            };
            let live = device.live(&p.group, &p.name);
            values.push((
                &served.node,
                None,
                space::value(p, live.as_ref(), device, now_ms),
            ));
        }
        if let Some(state) = space.device_states.get(d) {
            values.push((state, None, DataValue::new_now(Variant::from(now.1))));
        }
    }
    if values.is_empty() {
        return;
    }
    if let Err(e) = manager.set_values(subscriptions, values.into_iter()) {
        log::warn!("opcua server: cannot set values: {e}");
    }
}

/// Copies the stack's session and subscription counts into `stats`.
fn count_sessions(info: &ua_server::ServerInfo, stats: &Stats) {
    use opcua::types::VariableId;
    let summary = &info.diagnostics.summary;
    let count = |id| match summary.get(id).and_then(|v| v.value) {
        Some(Variant::UInt32(n)) => u64::from(n),
        _ => 0,
    };
    stats.sessions.store(
        count(VariableId::Server_ServerDiagnostics_ServerDiagnosticsSummary_CurrentSessionCount),
        Ordering::Relaxed,
    );
    stats.subscriptions.store(
        count(
            VariableId::Server_ServerDiagnostics_ServerDiagnosticsSummary_CurrentSubscriptionCount,
        ),
        Ordering::Relaxed,
    );
}

/// The host of the endpoint URLs: the first configured host name, else the listen address
/// unless it is every interface, else this machine's name.
fn endpoint_host(config: &OpcuaServerConfig) -> String {
    if let Some(h) = config.hostnames.first() {
        return h.clone();
    }
    if !config.listen.ip().is_unspecified() {
        return config.listen.ip().to_string();
    }
    X509Data::computer_hostnames()
        .into_iter()
        .next()
        .unwrap_or_else(|| "localhost".into())
}

/// Makes the server's certificate in `pki_dir` unless there is one: the application URI and
/// the configured host names (else this machine's names and addresses).
fn make_certificate(config: &OpcuaServerConfig, name: &str, host: &str) {
    let description = ApplicationDescription {
        application_uri: UAString::from(config.application_uri.as_str()),
        application_name: LocalizedText::new("", &format!("opex-connector {name}")),
        application_type: ApplicationType::Server,
        product_uri: UAString::from("urn:opex-connector"),
        ..Default::default()
    };
    let mut names = config.hostnames.clone();
    if names.is_empty() {
        names.push(host.to_string());
        if !config.listen.ip().is_unspecified() {
            names.push(config.listen.ip().to_string());
        }
    }
    let (_, cert, key) = CertificateStore::new_with_x509_data(
        &config.pki_dir,
        false,
        None,
        None,
        Some(X509Data::from((description, Some(names)))),
    );
    if cert.is_none() || key.is_none() {
        log::error!(
            "opcua server has no certificate, secure endpoints will refuse clients: pki_dir={}",
            config.pki_dir.display()
        );
    }
}

fn stack_policy(p: Policy) -> SecurityPolicy {
    match p {
        Policy::None => SecurityPolicy::None,
        Policy::Basic256Sha256 => SecurityPolicy::Basic256Sha256,
        Policy::Aes128Sha256RsaOaep => SecurityPolicy::Aes128Sha256RsaOaep,
        Policy::Aes256Sha256RsaPss => SecurityPolicy::Aes256Sha256RsaPss,
    }
}

fn stack_mode(m: Mode) -> MessageSecurityMode {
    match m {
        Mode::None => MessageSecurityMode::None,
        Mode::Sign => MessageSecurityMode::Sign,
        Mode::SignAndEncrypt => MessageSecurityMode::SignAndEncrypt,
    }
}
