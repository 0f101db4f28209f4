//! The OPC-UA device runtime: one task per device on the pollers' runtime.
//!
//! A device lives in *rounds*. A round builds a client, asks the server for its endpoints,
//! opens a session and runs it: the session's event loop reconnects by itself, forever, with
//! the device's backoff; each polled group reads its nodes in one batched Read request per
//! interval; each subscribed group has a subscription whose notifications become records. A
//! round ends on shutdown, when the event loop gives up, or when the **no-data watchdog**
//! fires (no read answer, notification or keep-alive for `watchdog`): then everything is
//! dropped and the next round starts from the endpoints again, after the backoff. That also
//! recovers from what the event loop cannot: a server that came back with a new certificate,
//! or a session that stays "connected" but delivers nothing.
//!
//! Before a secure session, the server certificate of the chosen endpoint is checked by the
//! library (trusted, key length) and then by [`super::server_cert`] (validity, host name over
//! every subject alternative name, application URI), instead of the library's own host name
//! and URI checks that look at the names' order.
//!
//! The client's key pair is made by [`spawn`], before the device's task starts: devices that
//! share a PKI folder (the default one) would otherwise race to make it on first start, and
//! the loser would run without a certificate.
//!
//! After the event loop reports a reconnect that made a **new session**, the crate recreates
//! the subscriptions but does not publish on them until `trigger_publish_now()` is called
//! (DESIGN.md): the event loop driver does that.
//!
//! Commands (`commands:`) reach the device through its inbox, which this task reads: between
//! its other work while the session is up ([`super::write`] runs them), and answered
//! `unavailable` at once while there is no session (connecting, waiting out the backoff), so
//! none waits for a session to come back.
//!
//! A node the server does not know comes back with a bad status: that point gets quality
//! `bad` and the other points of the group go on. Samples are offered through
//! [`offer_with_hold`]: while a sink refuses them, the group's task is held up to the device's
//! `hold`, then the sample is dropped and counted.

use std::path::{Path, PathBuf};
use std::str::FromStr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use futures_util::StreamExt;
use opcua::client::transport::TcpConnector;
use opcua::client::{
    Client, ClientBuilder, ClientEndpoint, IdentityToken, MonitoredItemMap,
    OnSubscriptionNotificationCore, Session, SessionConnectMode, SessionEventLoop,
    SessionPollResult,
};
use opcua::core::comms::url::{
    hostname_from_url, url_matches_except_host, url_with_replaced_hostname,
};
use opcua::crypto::X509;
use opcua::types::{
    AttributeId, DataChangeFilter, DataChangeNotification, DataChangeTrigger, DataValue,
    DeadbandType, EndpointDescription, ExtensionObject, MessageSecurityMode,
    MonitoredItemCreateRequest, MonitoringMode, MonitoringParameters, NodeId, NotificationMessage,
    ReadValueId, StatusCode, TimestampsToReturn,
};
use serde_json::{Map, Value};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

use super::config::{Identity, OpcuaDeviceConfig, OpcuaGroupConfig, SecurityMode, SecurityPolicy};
use super::values::{bad_point, point_json, unix_ms};
use super::write::Writer;
use crate::commands::{CommandReceiver, Pending};
use crate::engine::Engine;
use crate::record::{now_ms, Record};
use crate::shutdown::Shutdown;
use crate::sources::hints;
use crate::sources::hold::{offer_with_hold, Held};
use crate::sources::pollers::PollerRuntime;
use crate::sources::status::{ConnState, DeviceStatus};

/// Subscription notifications waiting to become records, per device. The callback runs
/// inside the session's event loop and must not wait: past this cap a notification is
/// dropped and counted in `notifications_dropped_total`.
pub const NOTIFICATION_CAP: usize = 256;

/// The folder of the client certificate when the config names none: `<data_dir>/opcua-pki`.
pub fn default_pki_dir(data_dir: &Path) -> PathBuf {
    data_dir.join("opcua-pki")
}

/// What a command is answered while the device has no session yet.
const CONNECTING: &str = "the device has no session yet (connecting)";

/// Starts the device's task on the pollers' runtime; `inbox` brings its commands (`None`
/// without `commands:`).
///
/// First, on the caller's thread, it makes the client's key pair in the device's PKI folder
/// unless the folder has one: seconds of CPU on a small board, once per folder. Called for
/// each device in turn (the daemon's build step does), so the first device of a folder makes
/// the pair and the others read it; call it outside an async context.
pub fn spawn(
    pollers: &PollerRuntime,
    config: OpcuaDeviceConfig,
    data_dir: &Path,
    engine: Arc<Engine>,
    status: Arc<DeviceStatus>,
    shutdown: Shutdown,
    inbox: Option<CommandReceiver>,
) -> JoinHandle<()> {
    let pki_dir = config
        .pki_dir
        .clone()
        .unwrap_or_else(|| default_pki_dir(data_dir));
    match (ensure_key_pair(&config, &pki_dir), config.security_policy) {
        (Ok(()), _) => {}
        // Sessions without security do not use it.
        (Err(e), SecurityPolicy::None) => log::warn!(
            "opcua client certificate missing: device={} pki_dir={} error={e}",
            config.name,
            pki_dir.display()
        ),
        (Err(e), SecurityPolicy::Basic256Sha256) => {
            log::error!(
                "opcua client certificate missing, no secure session is possible: device={} pki_dir={} error={e}",
                config.name,
                pki_dir.display()
            );
            failed(
                &status,
                format!("client certificate in {}: {e}", pki_dir.display()),
            );
        }
    }
    if !config.check_server_hostname {
        log::warn!(
            "opcua server certificate host name not checked (check_server_hostname: false): device={} endpoint={}",
            config.name,
            config.endpoint
        );
    }
    let device = Device {
        config: Arc::new(config),
        pki_dir,
        engine,
        status,
        shutdown,
    };
    pollers.spawn(device.run(Writer::new(inbox)))
}

/// The client as every round of the device builds it (the commissioning tools start from it
/// too).
pub fn client_builder(c: &OpcuaDeviceConfig, pki_dir: &Path) -> ClientBuilder {
    // The device's endpoint, so that the library's config is complete (without one it warns
    // "Endpoint config contains no endpoints" at every client made); sessions are still
    // opened on the endpoint `open_session` chooses from the server's list.
    let (policy, mode) = security(c);
    let mut endpoint = ClientEndpoint::new(c.endpoint.as_str());
    endpoint.security_policy = policy.to_str().to_string();
    endpoint.security_mode = mode.into();
    ClientBuilder::new()
        .endpoint("device", endpoint)
        .application_name("opex-connector")
        .application_uri("urn:opex-connector:client")
        .product_uri("urn:opex-connector")
        .create_sample_keypair(true)
        .pki_dir(pki_dir)
        .trust_server_certs(c.trust_server_certs)
        // Trust and key length are still checked by the library; validity, host name and
        // application URI by `check_server_certificate`.
        .verify_server_certs(false)
        .session_retry_limit(-1)
        .session_retry_initial(c.reconnect_initial)
        .session_retry_max(c.reconnect_max)
        .request_timeout(c.request_timeout)
        .keep_alive_interval(Duration::from_secs(5).min(c.watchdog / 3))
        .max_failed_keep_alive_count(3)
        .session_name(format!("opex-connector {}", c.name))
}

/// Makes the client's certificate and private key in `pki_dir` unless they are there (the
/// library does it when a client is made), and checks both can be read.
fn ensure_key_pair(c: &OpcuaDeviceConfig, pki_dir: &Path) -> Result<(), String> {
    let client = client_builder(c, pki_dir)
        .client()
        .map_err(|errors| errors.join("; "))?;
    let store = client.certificate_store().read();
    store.read_own_cert()?;
    store.read_own_pkey()?;
    Ok(())
}

/// The user token of the device's identity.
fn identity_token(identity: &Identity) -> IdentityToken {
    match identity {
        Identity::Anonymous => IdentityToken::Anonymous,
        Identity::User { username, password } => {
            IdentityToken::new_user_name(username.clone(), password.clone())
        }
    }
}

/// Opens a session with the server of `c`, a client made by `builder` (see
/// [`client_builder`]): asks the server for its endpoints, picks the one with the device's
/// policy and mode, checks its certificate when the policy is not `None`, and connects. The
/// session does nothing until its event loop is driven; keep the client as long as the
/// session. `Err` says what failed, in one line.
pub async fn open_session(
    c: &OpcuaDeviceConfig,
    builder: ClientBuilder,
) -> Result<(Client, Arc<Session>, SessionEventLoop<TcpConnector>), String> {
    // Making the client reads its certificate and key (made by `spawn`), kept off the
    // pollers' thread.
    let mut client = match tokio::task::spawn_blocking(move || builder.client()).await {
        Ok(Ok(client)) => client,
        Ok(Err(errors)) => return Err(format!("client: {}", errors.join("; "))),
        Err(e) => return Err(format!("client: {e}")),
    };
    let asked = client.get_server_endpoints_from_url(c.endpoint.as_str());
    let endpoints = match tokio::time::timeout(c.request_timeout * 2, asked).await {
        Ok(Ok(endpoints)) => endpoints,
        Ok(Err(e)) => return Err(format!("endpoints of {}: {e}", c.endpoint)),
        Err(_) => return Err(format!("endpoints of {}: timed out", c.endpoint)),
    };
    let endpoint =
        choose_endpoint(c, &client, &endpoints).map_err(|e| format!("{}: {e}", c.endpoint))?;
    let (session, event_loop) = client
        .connect_to_endpoint_directly(endpoint, identity_token(&c.identity))
        .map_err(|e| format!("session with {}: {e}", c.endpoint))?;
    Ok((client, session, event_loop))
}

/// The device's security policy and mode in the library's words.
fn security(c: &OpcuaDeviceConfig) -> (opcua::crypto::SecurityPolicy, MessageSecurityMode) {
    let mode = match c.security_mode {
        SecurityMode::None => MessageSecurityMode::None,
        SecurityMode::Sign => MessageSecurityMode::Sign,
        SecurityMode::SignAndEncrypt => MessageSecurityMode::SignAndEncrypt,
    };
    let policy = match c.security_policy {
        SecurityPolicy::None => opcua::crypto::SecurityPolicy::None,
        SecurityPolicy::Basic256Sha256 => opcua::crypto::SecurityPolicy::Basic256Sha256,
    };
    (policy, mode)
}

/// The server's endpoint with the device's policy and mode (its URL's host replaced by
/// the configured one), its certificate checked when the policy is not `None`.
fn choose_endpoint(
    c: &OpcuaDeviceConfig,
    client: &Client,
    endpoints: &[EndpointDescription],
) -> Result<EndpointDescription, String> {
    let (policy, mode) = security(c);
    let Some(endpoint) = Client::find_matching_endpoint(endpoints, &c.endpoint, policy, mode)
    else {
        if let Some(elsewhere) = endpoints_elsewhere(c, endpoints) {
            return Err(elsewhere);
        }
        let offered: Vec<String> = endpoints
            .iter()
            .take(16)
            .map(|e| {
                let uri = e.security_policy_uri.as_ref();
                let name = uri.rsplit('#').next().unwrap_or(uri);
                format!("{name}/{:?}", e.security_mode)
            })
            .collect();
        return Err(format!(
            "the server offers no {} {mode:?} endpoint (it offers: {})",
            c.security_policy.as_str(),
            offered.join(", ")
        ));
    };
    if c.security_policy != SecurityPolicy::None {
        check_server_certificate(c, client, &endpoint, policy)?;
    }
    Ok(endpoint)
}

/// When none of the server's endpoints is at the URL's path (`/line/` asked, `/` served):
/// where they are, with the configured host, so the technician can copy the URL.
fn endpoints_elsewhere(c: &OpcuaDeviceConfig, endpoints: &[EndpointDescription]) -> Option<String> {
    let host = hostname_from_url(&c.endpoint).ok()?;
    let mut urls: Vec<String> = Vec::new();
    for e in endpoints.iter().take(16) {
        let url = e.endpoint_url.as_ref();
        if url_matches_except_host(&c.endpoint, url) {
            return None;
        }
        let url = url_with_replaced_hostname(url, &host).unwrap_or_else(|_| url.to_string());
        if !urls.contains(&url) {
            urls.push(url);
        }
    }
    (!urls.is_empty()).then(|| {
        format!(
            "the server's endpoints are at {}, not at this path: use that URL as the endpoint",
            urls.join(", ")
        )
    })
}

/// The library's checks of the endpoint's certificate (trusted or not, stored in
/// `trusted/` or `rejected/`; key length), then ours ([`super::server_cert`]).
fn check_server_certificate(
    c: &OpcuaDeviceConfig,
    client: &Client,
    endpoint: &EndpointDescription,
    policy: opcua::crypto::SecurityPolicy,
) -> Result<(), String> {
    let cert = X509::from_byte_string(&endpoint.server_certificate)
        .map_err(|e| format!("server certificate: {e}"))?;
    client
        .certificate_store()
        .read()
        .validate_or_reject_application_instance_cert(&cert, policy, None, None)
        .map_err(|e| format!("server certificate: {e}"))?;
    let host = hostname_from_url(&c.endpoint).map_err(|e| format!("{}: {e}", c.endpoint))?;
    super::server_cert::check(
        endpoint.server_certificate.as_ref(),
        &host,
        endpoint.server.application_uri.as_ref(),
        c.check_server_hostname,
        SystemTime::now(),
    )
    .map_err(|e| e.to_string())
}

struct Device {
    config: Arc<OpcuaDeviceConfig>,
    pki_dir: PathBuf,
    engine: Arc<Engine>,
    status: Arc<DeviceStatus>,
    shutdown: Shutdown,
}

/// Why a round ended.
enum RoundEnd {
    Shutdown,
    /// Could not connect or set up; wait the backoff.
    Failed(String),
    /// The watchdog saw no data; start over at once.
    Watchdog,
}

/// One subscription notification's points, for the group at `group`.
struct Notification {
    group: usize,
    points: Vec<(usize, DataValue)>,
}

impl Device {
    async fn run(self, mut writer: Writer) {
        let name = self.config.name.clone();
        let mut wait = self.config.reconnect_initial;
        loop {
            let started = Instant::now();
            let end = self.round(&mut writer).await;
            let (wait_for, why) = match end {
                RoundEnd::Shutdown => break,
                RoundEnd::Watchdog => (
                    self.config.reconnect_initial,
                    "the device has no session (making a new one: no data came)".to_string(),
                ),
                RoundEnd::Failed(reason) => {
                    log::warn!("opcua device failed: device={name} error={reason}");
                    // A round that ran for a while was a success: start the backoff over.
                    if started.elapsed() > self.config.reconnect_max {
                        wait = self.config.reconnect_initial;
                    }
                    let w = wait;
                    wait = (wait * 2).min(self.config.reconnect_max);
                    let why = format!(
                        "the device has no session (next try in {} ms): {reason}",
                        w.as_millis()
                    );
                    failed(&self.status, reason);
                    (w, why)
                }
            };
            self.status.set_state(ConnState::Connecting);
            let stop = writer
                .while_down(&why, async {
                    tokio::select! {
                        _ = tokio::time::sleep(wait_for) => false,
                        _ = self.shutdown.wait() => true,
                    }
                })
                .await;
            if stop {
                break;
            }
        }
        writer.close("the connector is stopping");
        self.status.set_state(ConnState::Stopped);
        log::info!("opcua device stopped: device={name}");
    }

    async fn round(&self, writer: &mut Writer) -> RoundEnd {
        writer.new_session();
        // The client is kept for the whole round, as the session was made by it.
        let (_client, session, event_loop) = match writer.while_down(CONNECTING, self.open()).await
        {
            Ok(opened) => opened,
            Err(end) => return end,
        };
        let sessions = Arc::new(AtomicU64::new(0));
        let events = tokio::spawn(drive(
            event_loop,
            Arc::clone(&session),
            Arc::clone(&self.status),
            self.config.name.clone(),
            Arc::clone(&sessions),
        ));
        let mut tasks: Vec<JoinHandle<()>> = Vec::new();
        let end = self
            .run_session(&session, &events, &mut tasks, writer, &sessions)
            .await;
        for t in &tasks {
            t.abort();
        }
        // Best effort: tell the server; a dead one is not waited for.
        let _ = tokio::time::timeout(Duration::from_secs(1), session.disconnect()).await;
        events.abort();
        end
    }

    /// A client, and a session with the server (not yet connected) with its event loop.
    async fn open(
        &self,
    ) -> Result<(Client, Arc<Session>, SessionEventLoop<TcpConnector>), RoundEnd> {
        let c = &self.config;
        tokio::select! {
            r = open_session(c, client_builder(c, &self.pki_dir)) => r.map_err(RoundEnd::Failed),
            _ = self.shutdown.wait() => Err(RoundEnd::Shutdown),
        }
    }

    /// Connects the session, starts its groups, then serves its commands and watches it until
    /// it ends. Commands run as soon as the session is connected: also while its
    /// subscriptions are being made.
    async fn run_session(
        &self,
        session: &Arc<Session>,
        events: &JoinHandle<Result<(), StatusCode>>,
        tasks: &mut Vec<JoinHandle<()>>,
        writer: &mut Writer,
        sessions: &AtomicU64,
    ) -> RoundEnd {
        let c = &self.config;
        let connected = writer
            .while_down(CONNECTING, self.connect_session(session))
            .await;
        if let Err(end) = connected {
            return end;
        }
        let mut seen = sessions.load(Ordering::Relaxed);
        let started = {
            let start = self.start_groups(session, tasks);
            tokio::pin!(start);
            loop {
                tokio::select! {
                    r = &mut start => break r,
                    p = writer.next() => {
                        self.command(session, writer, sessions, &mut seen, p).await;
                    }
                    _ = self.shutdown.wait() => return RoundEnd::Shutdown,
                }
            }
        };
        if let Err(end) = started {
            return end;
        }
        let mut check = tokio::time::interval(Duration::from_millis(500));
        loop {
            tokio::select! {
                _ = check.tick() => {},
                p = writer.next() => self.command(session, writer, sessions, &mut seen, p).await,
                _ = self.shutdown.wait() => return RoundEnd::Shutdown,
            }
            if events.is_finished() {
                return RoundEnd::Failed("the session's event loop ended".into());
            }
            let silent_ms = now_ms().saturating_sub(self.status.last_alive_ms());
            if silent_ms > c.watchdog.as_millis() as u64 {
                self.status
                    .watchdog_resets_total
                    .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                log::warn!(
                    "opcua watchdog: no data, making a new session: device={} silent_ms={silent_ms}",
                    c.name
                );
                return RoundEnd::Watchdog;
            }
        }
    }

    /// Runs command `p` on `session`; `seen` is the count of `sessions` the writer's data types
    /// were read in.
    async fn command(
        &self,
        session: &Session,
        writer: &mut Writer,
        sessions: &AtomicU64,
        seen: &mut u64,
        p: Pending,
    ) {
        // Data types are read again in a new session.
        let now = sessions.load(Ordering::Relaxed);
        if now != *seen {
            writer.new_session();
            *seen = now;
        }
        let connected = self.status.state() == ConnState::Connected;
        writer.run(&self.config, session, connected, p).await;
    }

    /// Waits for the session to be connected.
    async fn connect_session(&self, session: &Session) -> Result<(), RoundEnd> {
        let c = &self.config;
        let connected = tokio::select! {
            r = tokio::time::timeout(c.request_timeout * 2, session.wait_for_connection()) => r,
            _ = self.shutdown.wait() => return Err(RoundEnd::Shutdown),
        };
        if !matches!(connected, Ok(true)) {
            return Err(RoundEnd::Failed(format!("no session with {}", c.endpoint)));
        }
        self.status.alive();
        Ok(())
    }

    /// Starts the session's polled groups' tasks and its subscriptions.
    async fn start_groups(
        &self,
        session: &Arc<Session>,
        tasks: &mut Vec<JoinHandle<()>>,
    ) -> Result<(), RoundEnd> {
        let c = &self.config;
        let (tx, rx) = mpsc::channel::<Notification>(NOTIFICATION_CAP);
        for (i, group) in c.groups.iter().enumerate() {
            if group.subscribe {
                if let Err(e) = self.subscribe(session, i, group, tx.clone()).await {
                    return Err(RoundEnd::Failed(format!(
                        "subscription {}: {e}",
                        group.group.name
                    )));
                }
            } else {
                tasks.push(tokio::spawn(poll_group(
                    Arc::clone(session),
                    Arc::clone(&self.config),
                    i,
                    Arc::clone(&self.engine),
                    Arc::clone(&self.status),
                )));
            }
        }
        drop(tx);
        tasks.push(tokio::spawn(deliver_notifications(
            rx,
            Arc::clone(&self.config),
            Arc::clone(&self.engine),
            Arc::clone(&self.status),
        )));
        Ok(())
    }

    /// Creates the subscription of `group` and its monitored items. Nodes the server refuses
    /// (unknown node id, ...) are reported once as bad points.
    async fn subscribe(
        &self,
        session: &Arc<Session>,
        index: usize,
        group: &OpcuaGroupConfig,
        tx: mpsc::Sender<Notification>,
    ) -> Result<(), String> {
        let interval = group.group.interval;
        // Keep-alives about every 5 s (and well inside the watchdog) when nothing changes.
        let keep_alive_every = Duration::from_secs(5).min(self.config.watchdog / 3);
        let keep_alive_count =
            (keep_alive_every.as_millis() / interval.as_millis().max(1)).clamp(1, 1000) as u32;
        let callback = Callback {
            group: index,
            tx,
            status: Arc::clone(&self.status),
            device: self.config.name.clone(),
        };
        let id = session
            .create_subscription(
                interval,
                keep_alive_count * 3,
                keep_alive_count,
                0,
                0,
                true,
                callback,
            )
            .await
            .map_err(|e| e.to_string())?;
        let filter = group.deadband.map(|value| {
            ExtensionObject::from_message(DataChangeFilter {
                trigger: DataChangeTrigger::StatusValue,
                deadband_type: DeadbandType::Absolute as u32,
                deadband_value: value,
            })
        });
        let request = |node: usize, filter: Option<&ExtensionObject>| {
            let id =
                NodeId::from_str(&group.nodes[node].node_id).unwrap_or_else(|_| NodeId::null());
            MonitoredItemCreateRequest {
                item_to_monitor: ReadValueId::from(id),
                monitoring_mode: MonitoringMode::Reporting,
                requested_parameters: MonitoringParameters {
                    // Handles start at 1: 0 asks the crate to pick one.
                    client_handle: node as u32 + 1,
                    sampling_interval: interval.as_millis() as f64,
                    filter: filter.cloned().unwrap_or_else(ExtensionObject::null),
                    queue_size: 1,
                    discard_oldest: true,
                },
            }
        };
        let items: Vec<_> = (0..group.nodes.len())
            .map(|n| request(n, filter.as_ref()))
            .collect();
        let created = session
            .create_monitored_items(id, TimestampsToReturn::Both, items)
            .await
            .map_err(|e| e.to_string())?;
        let mut refused: Vec<(usize, StatusCode)> = Vec::new();
        let mut retry: Vec<usize> = Vec::new();
        for (n, item) in created.iter().enumerate() {
            let code = item.result.status_code;
            if code.is_good() {
                continue;
            }
            let filter_refused = matches!(
                code,
                StatusCode::BadFilterNotAllowed
                    | StatusCode::BadMonitoredItemFilterUnsupported
                    | StatusCode::BadMonitoredItemFilterInvalid
                    | StatusCode::BadDeadbandFilterInvalid
            );
            if filter_refused && filter.is_some() {
                retry.push(n);
            } else {
                refused.push((n, code));
            }
        }
        if !retry.is_empty() {
            log::info!(
                "opcua server refused a deadband, monitoring without one: device={} group={} nodes={}",
                self.config.name,
                group.group.name,
                retry.len()
            );
            let items: Vec<_> = retry.iter().map(|n| request(*n, None)).collect();
            let again = session
                .create_monitored_items(id, TimestampsToReturn::Both, items)
                .await
                .map_err(|e| e.to_string())?;
            for (n, item) in retry.iter().zip(&again) {
                if !item.result.status_code.is_good() {
                    refused.push((*n, item.result.status_code));
                }
            }
        }
        if !refused.is_empty() {
            let mut points = Map::new();
            for (n, code) in &refused {
                log::warn!(
                    "opcua node refused: device={} group={} node_id={} status={code}",
                    self.config.name,
                    group.group.name,
                    group.nodes[*n].node_id
                );
                points.insert(group.nodes[*n].name.clone(), bad_point(*code));
            }
            self.status.values_in(index, &points, now_ms());
            self.status.polled(Duration::ZERO);
            let record = Record::from_value(
                self.config.source(),
                &group.group.name,
                &Value::Object(points),
            );
            offer(&self.engine, &self.status, &self.config, record).await;
        }
        Ok(())
    }
}

/// Drives the session's event loop; reports connection changes; after a reconnect that made
/// a new session, asks the crate to publish again. `sessions` counts the connections lost and
/// made again (a command reads the data types again after a change).
async fn drive(
    event_loop: SessionEventLoop<TcpConnector>,
    session: Arc<Session>,
    status: Arc<DeviceStatus>,
    device: String,
    sessions: Arc<AtomicU64>,
) -> Result<(), StatusCode> {
    let stream = event_loop.enter();
    futures_util::pin_mut!(stream);
    let mut first = true;
    while let Some(event) = stream.next().await {
        match event? {
            SessionPollResult::Reconnected(mode) => {
                status.set_state(ConnState::Connected);
                status.alive();
                if !first {
                    sessions.fetch_add(1, Ordering::Relaxed);
                    status
                        .reconnects_total
                        .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    log::info!("opcua reconnected: device={device} mode={mode:?}");
                    // The first session's subscriptions start publishing when they are made;
                    // triggering it before they exist only draws BadNoSubscription.
                    if matches!(mode, SessionConnectMode::NewSession(_)) {
                        session.trigger_publish_now();
                    }
                }
                first = false;
            }
            SessionPollResult::ConnectionLost(code) => {
                sessions.fetch_add(1, Ordering::Relaxed);
                status.set_state(ConnState::Reconnecting);
                failed(&status, format!("connection lost: {code}"));
                log::warn!("opcua connection lost: device={device} status={code}");
            }
            SessionPollResult::ReconnectFailed(code) => {
                failed(&status, format!("reconnect failed: {code}"));
            }
            _ => {}
        }
    }
    Ok(())
}

/// Reads one group's nodes in one batched Read request per interval.
async fn poll_group(
    session: Arc<Session>,
    config: Arc<OpcuaDeviceConfig>,
    index: usize,
    engine: Arc<Engine>,
    status: Arc<DeviceStatus>,
) {
    let Some(group) = config.groups.get(index) else {
        return;
    };
    let ids: Vec<ReadValueId> = group
        .nodes
        .iter()
        .map(|n| ReadValueId {
            node_id: NodeId::from_str(&n.node_id).unwrap_or_else(|_| NodeId::null()),
            attribute_id: AttributeId::Value as u32,
            ..Default::default()
        })
        .collect();
    let mut ticks = tokio::time::interval(group.group.interval);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
    loop {
        let scheduled = ticks.tick().await;
        if status.state() != ConnState::Connected {
            continue;
        }
        status.record_jitter(tokio::time::Instant::now().saturating_duration_since(scheduled));
        let started = Instant::now();
        let poll_ms = now_ms();
        let read = tokio::time::timeout(
            config.request_timeout,
            session.read(&ids, TimestampsToReturn::Both, 0.0),
        )
        .await;
        let values = match read {
            Ok(Ok(values)) => values,
            Ok(Err(e)) => {
                failed(&status, format!("read {}: {e}", group.group.name));
                continue;
            }
            Err(_) => {
                failed(&status, format!("read {}: timed out", group.group.name));
                continue;
            }
        };
        status.alive();
        let mut points = Map::new();
        let mut newest: Option<u64> = None;
        for (i, node) in group.nodes.iter().enumerate() {
            let point = match values.get(i) {
                Some(dv) => {
                    if dv.status.is_none_or(|s| s.is_good()) {
                        let ts = dv.source_timestamp.as_ref().and_then(unix_ms);
                        newest = newest.max(ts);
                    }
                    point_json(dv)
                }
                // A server that answers fewer results than asked: those points are bad.
                None => bad_point(StatusCode::BadUnexpectedError),
            };
            points.insert(node.name.clone(), point);
        }
        status.values_in(index, &points, newest.unwrap_or(poll_ms));
        status.polled(started.elapsed());
        let mut record =
            Record::from_value(config.source(), &group.group.name, &Value::Object(points));
        record.ts_ms = newest.unwrap_or(poll_ms);
        offer(&engine, &status, &config, record).await;
    }
}

/// Turns subscription notifications into records: one per notification and group, with the
/// nodes that changed.
async fn deliver_notifications(
    mut rx: mpsc::Receiver<Notification>,
    config: Arc<OpcuaDeviceConfig>,
    engine: Arc<Engine>,
    status: Arc<DeviceStatus>,
) {
    while let Some(n) = rx.recv().await {
        let Some(group) = config.groups.get(n.group) else {
            continue;
        };
        let mut points = Map::new();
        let mut newest: Option<u64> = None;
        for (node, dv) in &n.points {
            let Some(cfg) = group.nodes.get(*node) else {
                continue;
            };
            newest = newest.max(dv.source_timestamp.as_ref().and_then(unix_ms));
            points.insert(cfg.name.clone(), point_json(dv));
        }
        if points.is_empty() {
            continue;
        }
        status.values_in(n.group, &points, newest.unwrap_or_else(now_ms));
        status.polled(Duration::ZERO);
        let mut record =
            Record::from_value(config.source(), &group.group.name, &Value::Object(points));
        record.ts_ms = newest.unwrap_or(record.ts_ms);
        offer(&engine, &status, &config, record).await;
    }
}

/// Counts an error of the device and keeps it, with what it means.
fn failed(status: &DeviceStatus, text: String) {
    let hint = hints::opcua_hint(&text);
    status.error(text, hint);
}

async fn offer(engine: &Engine, status: &DeviceStatus, config: &OpcuaDeviceConfig, record: Record) {
    if let Held::Lost { .. } = offer_with_hold(engine, record, config.hold).await {
        status
            .lost_total
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    }
}

/// The subscription callback: runs inside the event loop, so it only forwards.
struct Callback {
    group: usize,
    tx: mpsc::Sender<Notification>,
    status: Arc<DeviceStatus>,
    device: String,
}

impl OnSubscriptionNotificationCore for Callback {
    fn on_subscription_notification(
        &mut self,
        notification: NotificationMessage,
        _items: MonitoredItemMap<'_>,
    ) {
        // Data or keep-alive: the subscription is alive.
        self.status.alive();
        let mut points = Vec::new();
        for obj in notification.notification_data.into_iter().flatten() {
            if let Some(change) = obj.inner_as::<DataChangeNotification>() {
                for item in change.monitored_items.iter().flatten() {
                    if let Some(node) = (item.client_handle as usize).checked_sub(1) {
                        points.push((node, item.value.clone()));
                    }
                }
            }
        }
        if points.is_empty() {
            return;
        }
        let n = Notification {
            group: self.group,
            points,
        };
        if self.tx.try_send(n).is_err() {
            let total = self
                .status
                .notifications_dropped_total
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed)
                + 1;
            log::error!(
                "alert: opcua notification dropped, channel full: device={} cap={NOTIFICATION_CAP} dropped_total={total}",
                self.device
            );
        }
    }
}
