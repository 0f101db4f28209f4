//! The OPC-UA driver: one per device (one session), on the one poll loop
//! ([`crate::sources::poll_loop`]), which schedules its polled groups, keeps its session
//! open for its subscribed ones, runs its commands between polls and keeps its status.
//!
//! - **Open.** A session is opened from the endpoints again each time ([`super::client`]):
//!   the server's list, the endpoint with the device's security, its certificate checked.
//!   The session's event loop runs in a task of its own and does not reconnect by itself:
//!   when its connection is lost it ends, and the loop reopens the link after the breaker's
//!   wait (`reconnect_initial_ms` doubling up to `reconnect_max_ms`). That also recovers from
//!   what a reconnect of the same session cannot: a server that came back with a new
//!   certificate. Every subscribed group's subscription and monitored items are made as the
//!   session opens; the nodes the server refuses are pushed once as bad points.
//! - **Reads.** A polled group's nodes in one batched Read request; the record's timestamp is
//!   the newest source timestamp of its good values. A node the server does not know comes
//!   back with a bad status: that point gets quality `bad` and the others go on. A request the
//!   server refuses as a whole for a reason that is not the session's (too many operations)
//!   makes every point of the group bad with that status; a session or connection failure
//!   is a link error. No answer within `request_timeout_ms` is an error of the request
//!   alone: the session stays (its keep-alive and the watchdog watch it), and a write still
//!   held by the server is not cut off.
//! - **Pushed.** Subscription notifications arrive from the session's event loop through a
//!   channel of [`NOTIFICATION_CAP`] (the callback must not wait: past the cap one is dropped
//!   and counted); the loop takes them as records of their group. The push side fails the
//!   link when the event loop ended, or when the **no-data watchdog** fires: no read answer,
//!   notification or keep-alive for `watchdog_ms` (counted in `watchdog_resets_total`).
//! - **Writes** ([`super::write`]): checked, data types read once per session, all or
//!   nothing before sending, one Write request, never sent again.

use std::collections::VecDeque;
use std::path::{Path, PathBuf};
use std::str::FromStr;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use futures_util::StreamExt;
use opcua::client::transport::TcpConnector;
use opcua::client::{
    Client, MonitoredItemMap, OnSubscriptionNotificationCore, Session, SessionEventLoop,
    SessionPollResult,
};
use opcua::types::{
    AttributeId, DataChangeFilter, DataChangeNotification, DataChangeTrigger, DataValue,
    DeadbandType, ExtensionObject, MonitoredItemCreateRequest, MonitoringMode,
    MonitoringParameters, NodeId, NotificationMessage, ReadValueId, StatusCode, TimestampsToReturn,
};
use serde_json::Map;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tokio::time::Instant;

use super::client::{client_builder, default_pki_dir, ensure_key_pair, open_session};
use super::config::{OpcuaDeviceConfig, OpcuaGroupConfig, OpcuaNodeConfig, SecurityPolicy};
use super::values::{bad_point, point_json, unix_ms};
use super::write::{self, Types};
use crate::commands::{Command, Commands};
use crate::record::now_ms;
use crate::sources::catalogue::Catalogue;
use crate::sources::driver::{Driver, GroupRead, LinkError, Pushed, Results};
use crate::sources::hints;
use crate::sources::poll_loop::{PollLoop, Schedule};
use crate::sources::status::DeviceStatus;

/// Subscription notifications waiting for the loop, per device. The callback runs inside the
/// session's event loop and must not wait: past this cap a notification is dropped and
/// counted in `notifications_dropped_total`.
pub const NOTIFICATION_CAP: usize = 256;

/// How often the push side looks at the session's event loop and the watchdog.
const CHECK_EVERY: Duration = Duration::from_millis(500);

/// One polled group's Read request.
#[derive(Debug)]
pub struct GroupPlan {
    /// The group, by its index in the device's groups.
    group: usize,
    /// Its nodes' values, in the group's order.
    ids: Vec<ReadValueId>,
}

/// One OPC-UA device and its session.
pub struct OpcuaDriver {
    config: Arc<OpcuaDeviceConfig>,
    pki_dir: PathBuf,
    status: Arc<DeviceStatus>,
    live: Option<Live>,
    /// The data types of the nodes written in this session.
    types: Types,
    /// Sessions opened so far: each after the first is a reconnect.
    sessions: u64,
    /// Points the loop takes before any notification: the nodes a subscription refused.
    refused: VecDeque<Pushed>,
    /// When the push side looks at the event loop and the watchdog next.
    next_check: Instant,
}

/// A session and what runs it.
struct Live {
    /// The client the session was made by, kept as long as the session.
    _client: Client,
    session: Arc<Session>,
    /// Drives the session's event loop; ends, with the reason, when the connection is lost.
    events: JoinHandle<String>,
    /// The subscriptions' notifications.
    notifications: mpsc::Receiver<Pushed>,
    /// Kept, so that the channel stays open without a subscription.
    _sender: mpsc::Sender<Pushed>,
}

impl OpcuaDriver {
    /// The driver of `config`, not connected, showing its figures in `status`.
    ///
    /// First, on the caller's thread, it makes the client's key pair in the device's PKI
    /// folder unless the folder has one: seconds of CPU on a small board, once per folder.
    /// Called for each device in turn, so the first device of a folder makes the pair and the
    /// others read it; call it outside an async context.
    pub fn new(config: OpcuaDeviceConfig, data_dir: &Path, status: Arc<DeviceStatus>) -> Self {
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
                let text = format!("client certificate in {}: {e}", pki_dir.display());
                let hint = hints::opcua_hint(&text);
                status.error(text, hint);
            }
        }
        if !config.check_server_hostname {
            log::warn!(
                "opcua server certificate host name not checked (check_server_hostname: false): device={} endpoint={}",
                config.name,
                config.endpoint
            );
        }
        Self {
            config: Arc::new(config),
            pki_dir,
            status,
            live: None,
            types: Types::default(),
            sessions: 0,
            refused: VecDeque::new(),
            next_check: Instant::now(),
        }
    }

    /// Opens a session, waits for it to connect and makes its subscriptions.
    async fn connect(&mut self) -> Result<Live, LinkError> {
        let c = Arc::clone(&self.config);
        let builder = client_builder(&c, &self.pki_dir).session_retry_limit(0);
        let (client, session, event_loop) =
            open_session(&c, builder).await.map_err(LinkError::Open)?;
        let mut events = tokio::spawn(drive(event_loop, Arc::clone(&self.status)));
        let connected = tokio::select! {
            r = tokio::time::timeout(c.request_timeout * 2, session.wait_for_connection()) => {
                matches!(r, Ok(true)).then_some(()).ok_or_else(|| format!("no session with {}", c.endpoint))
            }
            ended = &mut events => Err(ended.unwrap_or_else(|e| e.to_string())),
        };
        let (tx, notifications) = mpsc::channel::<Pushed>(NOTIFICATION_CAP);
        let live = Live {
            _client: client,
            session,
            events,
            notifications,
            _sender: tx.clone(),
        };
        if let Err(why) = connected {
            live.close();
            return Err(LinkError::Open(why));
        }
        self.status.alive();
        for (g, group) in c.groups.iter().enumerate() {
            if !group.subscribe {
                continue;
            }
            if let Err(e) = self.subscribe(&live.session, g, group, tx.clone()).await {
                live.close();
                return Err(LinkError::Open(format!(
                    "subscription {}: {e}",
                    group.group.name
                )));
            }
        }
        Ok(live)
    }

    /// Creates the subscription of group `g` and its monitored items. Nodes the server
    /// refuses (unknown node id, ...) are pushed once as bad points.
    async fn subscribe(
        &mut self,
        session: &Arc<Session>,
        g: usize,
        group: &OpcuaGroupConfig,
        tx: mpsc::Sender<Pushed>,
    ) -> Result<(), String> {
        let interval = group.group.interval;
        // Keep-alives about every 5 s (and well inside the watchdog) when nothing changes.
        let keep_alive_every = Duration::from_secs(5).min(self.config.watchdog / 3);
        let keep_alive_count =
            (keep_alive_every.as_millis() / interval.as_millis().max(1)).clamp(1, 1000) as u32;
        let callback = Callback {
            group: g,
            nodes: group.nodes.clone(),
            tx,
            status: Arc::clone(&self.status),
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
        let request = |node: usize, filter: Option<&ExtensionObject>| MonitoredItemCreateRequest {
            item_to_monitor: ReadValueId::from(node_id(&group.nodes[node].node_id)),
            monitoring_mode: MonitoringMode::Reporting,
            requested_parameters: MonitoringParameters {
                // Handles start at 1: 0 asks the crate to pick one.
                client_handle: node as u32 + 1,
                sampling_interval: interval.as_millis() as f64,
                filter: filter.cloned().unwrap_or_else(ExtensionObject::null),
                queue_size: 1,
                discard_oldest: true,
            },
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
            self.refused.push_back(Pushed {
                member: 0,
                group: g,
                points,
                ts_ms: None,
            });
        }
        Ok(())
    }
}

impl Live {
    /// Ends the session: tells the server (best effort, a dead one is not waited for), then
    /// stops its event loop.
    fn close(self) {
        let Live {
            _client: client,
            session,
            events,
            ..
        } = self;
        tokio::spawn(async move {
            let _ = tokio::time::timeout(Duration::from_secs(1), session.disconnect()).await;
            events.abort();
            drop(client);
        });
    }
}

impl Driver for OpcuaDriver {
    type Plan = GroupPlan;
    type Writes = Vec<OpcuaNodeConfig>;

    const DOWN: &'static str = "the device has no session";

    fn plan(&self, _: usize, group: usize) -> GroupPlan {
        let ids = self
            .config
            .groups
            .get(group)
            .map(|g| {
                g.nodes
                    .iter()
                    .map(|n| ReadValueId {
                        node_id: node_id(&n.node_id),
                        attribute_id: AttributeId::Value as u32,
                        ..Default::default()
                    })
                    .collect()
            })
            .unwrap_or_default();
        GroupPlan { group, ids }
    }

    /// Open from the session's start until it is closed: a session whose event loop ended
    /// is reported by the push side, or fails the next request.
    fn is_open(&self) -> bool {
        self.live.is_some()
    }

    async fn open(&mut self, _: usize) -> Result<(), LinkError> {
        self.close();
        let live = self.connect().await?;
        self.sessions += 1;
        if self.sessions > 1 {
            self.status.reconnects_total.fetch_add(1, Ordering::Relaxed);
            log::info!("opcua reconnected: device={}", self.config.name);
        }
        self.live = Some(live);
        Ok(())
    }

    async fn read(
        &mut self,
        _: usize,
        plan: &mut GroupPlan,
        _: &DeviceStatus,
    ) -> Result<GroupRead, LinkError> {
        let c = &self.config;
        let Some(group) = c.groups.get(plan.group) else {
            return Ok(GroupRead::default());
        };
        let Some(live) = self.live.as_ref() else {
            return Err(LinkError::Transport("no session".into()));
        };
        let read = tokio::time::timeout(
            c.request_timeout,
            live.session.read(&plan.ids, TimestampsToReturn::Both, 0.0),
        )
        .await;
        let values = match read {
            Ok(Ok(values)) => values,
            Ok(Err(e)) if session_lost(e.status()) => {
                return Err(LinkError::Transport(format!(
                    "read {}: {e}",
                    group.group.name
                )))
            }
            // Refused as a whole, the session fine: every point bad with the reason.
            Ok(Err(e)) => {
                self.status.alive();
                let points = group
                    .nodes
                    .iter()
                    .map(|n| (n.name.clone(), bad_point(e.status())))
                    .collect();
                return Ok(GroupRead {
                    points,
                    requests: 1,
                    ts_ms: None,
                });
            }
            // The session stays: its keep-alive and the watchdog watch the link.
            Err(_) => {
                return Err(LinkError::Request(format!(
                    "read {}: timed out",
                    group.group.name
                )))
            }
        };
        self.status.alive();
        let mut points = Map::new();
        let mut newest: Option<u64> = None;
        for (i, node) in group.nodes.iter().enumerate() {
            let point = match values.get(i) {
                Some(dv) => {
                    if dv.status.is_none_or(|s| s.is_good()) {
                        newest = newest.max(dv.source_timestamp.as_ref().and_then(unix_ms));
                    }
                    point_json(dv)
                }
                // A server that answers fewer results than asked: those points are bad.
                None => bad_point(StatusCode::BadUnexpectedError),
            };
            points.insert(node.name.clone(), point);
        }
        Ok(GroupRead {
            points,
            requests: 1,
            ts_ms: newest,
        })
    }

    fn check(&self, _: usize, command: &Command) -> Result<Vec<OpcuaNodeConfig>, Results> {
        write::check(&self.config, command)
    }

    async fn write(
        &mut self,
        _: usize,
        command: &Command,
        nodes: Vec<OpcuaNodeConfig>,
        status: &DeviceStatus,
    ) -> (Results, Option<LinkError>) {
        let Some(live) = self.live.as_ref() else {
            let why = crate::commands::PointResult::Unavailable(
                "the device's session is not connected".into(),
            );
            return (crate::commands::command::all(&command.points, &why), None);
        };
        status.writes_total.fetch_add(1, Ordering::Relaxed);
        let results = self
            .types
            .write(&self.config, &live.session, command, &nodes)
            .await;
        (results, None)
    }

    fn hint(&self, _: usize, e: &LinkError) -> Option<String> {
        match e {
            LinkError::Timeout => hints::opcua_hint("timed out"),
            e => hints::opcua_hint(&e.to_string()),
        }
    }

    fn close(&mut self) {
        self.types = Types::default();
        if let Some(live) = self.live.take() {
            live.close();
        }
    }

    fn pushes(&self, _: usize, group: usize) -> bool {
        self.config.groups.get(group).is_some_and(|g| g.subscribe)
    }

    async fn pushed(&mut self) -> Result<Pushed, LinkError> {
        let Some(live) = self.live.as_mut() else {
            return std::future::pending().await;
        };
        if let Some(refused) = self.refused.pop_front() {
            return Ok(refused);
        }
        let watchdog = self.config.watchdog;
        loop {
            tokio::select! {
                n = live.notifications.recv() => if let Some(n) = n {
                    return Ok(n);
                },
                // The time is kept in the driver: the loop makes this future anew at every
                // poll, and frequent polls must not put the check off.
                _ = tokio::time::sleep_until(self.next_check) => {}
            }
            self.next_check = Instant::now() + CHECK_EVERY;
            if live.events.is_finished() {
                let why = (&mut live.events).await.unwrap_or_else(|e| e.to_string());
                return Err(LinkError::Transport(why));
            }
            let silent_ms = now_ms().saturating_sub(self.status.last_alive_ms());
            if silent_ms > watchdog.as_millis() as u64 {
                self.status
                    .watchdog_resets_total
                    .fetch_add(1, Ordering::Relaxed);
                log::warn!(
                    "opcua watchdog: no data, making a new session: device={} silent_ms={silent_ms}",
                    self.config.name
                );
                return Err(LinkError::Transport(format!(
                    "no data for {silent_ms} ms (the watchdog made a new session)"
                )));
            }
        }
    }
}

/// True when a request failed because the session or its connection did (the link is
/// reopened), not because the server refused the request itself.
fn session_lost(code: StatusCode) -> bool {
    matches!(
        code,
        StatusCode::BadTimeout
            | StatusCode::BadRequestTimeout
            | StatusCode::BadNotConnected
            | StatusCode::BadConnectionClosed
            | StatusCode::BadConnectionRejected
            | StatusCode::BadCommunicationError
            | StatusCode::BadDisconnect
            | StatusCode::BadServerNotConnected
            | StatusCode::BadServerHalted
            | StatusCode::BadShutdown
            | StatusCode::BadSessionIdInvalid
            | StatusCode::BadSessionClosed
            | StatusCode::BadSessionNotActivated
            | StatusCode::BadSecureChannelIdInvalid
            | StatusCode::BadSecureChannelClosed
            | StatusCode::BadTcpInternalError
            | StatusCode::BadUnexpectedError
    )
}

/// A node id as the config holds it (checked to parse by validation).
fn node_id(text: &str) -> NodeId {
    NodeId::from_str(text).unwrap_or_else(|_| NodeId::null())
}

/// Drives the session's event loop until its connection is lost or it ends: the reason.
async fn drive(event_loop: SessionEventLoop<TcpConnector>, status: Arc<DeviceStatus>) -> String {
    let stream = event_loop.enter();
    futures_util::pin_mut!(stream);
    while let Some(event) = stream.next().await {
        match event {
            Ok(SessionPollResult::Reconnected(_)) => status.alive(),
            Ok(SessionPollResult::ConnectionLost(code)) => {
                return format!("connection lost: {code}")
            }
            Ok(_) => {}
            Err(code) => return format!("the session ended: {code}"),
        }
    }
    "the session ended".into()
}

/// The subscription callback: runs inside the event loop, so it only forwards.
struct Callback {
    group: usize,
    nodes: Vec<OpcuaNodeConfig>,
    tx: mpsc::Sender<Pushed>,
    status: Arc<DeviceStatus>,
}

impl OnSubscriptionNotificationCore for Callback {
    fn on_subscription_notification(
        &mut self,
        notification: NotificationMessage,
        _items: MonitoredItemMap<'_>,
    ) {
        // Data or keep-alive: the subscription is alive.
        self.status.alive();
        let mut points = Map::new();
        let mut newest: Option<u64> = None;
        for obj in notification.notification_data.into_iter().flatten() {
            let Some(change) = obj.inner_as::<DataChangeNotification>() else {
                continue;
            };
            for item in change.monitored_items.iter().flatten() {
                let node = (item.client_handle as usize)
                    .checked_sub(1)
                    .and_then(|n| self.nodes.get(n));
                if let Some(node) = node {
                    newest = newest.max(changed_at(&item.value));
                    points.insert(node.name.clone(), point_json(&item.value));
                }
            }
        }
        if points.is_empty() {
            return;
        }
        let pushed = Pushed {
            member: 0,
            group: self.group,
            points,
            ts_ms: newest,
        };
        if self.tx.try_send(pushed).is_err() {
            let total = self
                .status
                .notifications_dropped_total
                .fetch_add(1, Ordering::Relaxed)
                + 1;
            log::error!(
                "alert: opcua notification dropped, channel full: device={} cap={NOTIFICATION_CAP} dropped_total={total}",
                self.status.name()
            );
        }
    }
}

/// The source timestamp of a changed value, in Unix ms.
fn changed_at(dv: &DataValue) -> Option<u64> {
    dv.source_timestamp.as_ref().and_then(unix_ms)
}

/// The poll loop of every OPC-UA device of `devices` (one per device), each showing its
/// figures in its status in `catalogue`; with `commands`, each registered there. Makes each
/// device's key pair first (see [`OpcuaDriver::new`]).
pub fn poll_loops(
    devices: &[&OpcuaDeviceConfig],
    catalogue: &Catalogue,
    data_dir: &Path,
    commands: Option<&Commands>,
) -> Vec<PollLoop<OpcuaDriver>> {
    let mut out = Vec::new();
    for d in devices {
        let Some(status) = catalogue.by_name(&d.name) else {
            log::error!("opcua device missing from the catalogue: device={}", d.name);
            continue;
        };
        let schedule = Schedule {
            intervals: d.groups.iter().map(|g| g.group.interval).collect(),
            hold: d.hold,
            backoff_start: d.reconnect_initial,
            backoff_max: d.reconnect_max,
        };
        let driver = OpcuaDriver::new((*d).clone(), data_dir, Arc::clone(&status));
        let mut poll_loop = PollLoop::new(driver, vec![(status, schedule)]);
        if let Some(c) = commands {
            poll_loop.register(c);
        }
        out.push(poll_loop);
    }
    out
}
