//! The server's one node manager: the devices' points, the address space of [`super::space`]
//! built once the server knows the namespace's index; reads from it (counted); monitored
//! items held to `limits.monitored_items` of all sessions together; writes checked by the
//! stack, then each handed to the commands service as a command of its own. The standard
//! namespace's nodes ([`super::base`]) are in the same address space, and their requests
//! handed to [`Base`]: one node manager rather than two keeps one instance of the stack's
//! generic in-memory manager in the binary.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};

use async_trait::async_trait;
use opcua::sync::RwLock;
use opcua::types::{AttributeId, DataValue, MonitoringMode, StatusCode, TimestampsToReturn};
use serde_json::Value;
use ua_server::address_space::AddressSpace;
use ua_server::diagnostics::NamespaceMetadata;
use ua_server::node_manager::memory::{InMemoryNodeManagerImpl, InMemoryNodeManagerImplBuilder};
use ua_server::node_manager::{
    MonitoredItemRef, MonitoredItemUpdateRef, ParsedReadValueId, RequestContext, ServerContext,
    WriteNode,
};
use ua_server::CreateMonitoredItem;

use super::base::{self, Base};
use super::server::Parts;
use super::sessions::Sessions;
use super::space::{self, Space};
use super::Stats;
use crate::commands::{Origin, PointResult, Request};
use crate::sources::catalogue::Listed;

/// Builds [`Points`] once the server knows its namespace's index.
pub struct PointsBuilder {
    /// The devices' namespace URI.
    pub namespace: String,
    /// What the points are read and written through.
    pub parts: Parts,
    /// `limits.monitored_items`.
    pub monitored_items: u64,
}

impl InMemoryNodeManagerImplBuilder for PointsBuilder {
    type Impl = Points;

    fn build(self, context: ServerContext, address_space: &mut AddressSpace) -> Points {
        let base = base::build(&context, address_space);
        let ns = {
            let mut type_tree = context.type_tree.write();
            type_tree.namespaces_mut().add_namespace(&self.namespace)
        };
        address_space.add_namespace(&self.namespace, ns);
        let gateway = (self.parts.gateway)();
        let space = space::build(
            address_space,
            ns,
            &self.parts.catalogue,
            &self.parts.version,
            &gateway,
        );
        Points {
            base,
            namespace: NamespaceMetadata {
                namespace_uri: self.namespace,
                namespace_index: ns,
                ..Default::default()
            },
            space,
            parts: self.parts,
            stats: OnceLock::new(),
            monitored: AtomicU64::new(0),
            monitored_limit: self.monitored_items,
            sessions: Sessions::default(),
        }
    }
}

/// The node manager of the devices' points and of the standard nodes.
pub struct Points {
    /// The standard namespace's nodes.
    base: Base,
    namespace: NamespaceMetadata,
    /// The served points and the connector's nodes.
    pub space: Space,
    parts: Parts,
    stats: OnceLock<Arc<Stats>>,
    /// Monitored items of the points now, and their limit.
    monitored: AtomicU64,
    monitored_limit: u64,
    /// The sessions that asked for the devices' variables.
    pub sessions: Sessions,
}

impl Points {
    /// The catalogue's devices now.
    pub fn devices(&self) -> Arc<Listed> {
        self.parts.catalogue.devices()
    }

    /// Where its figures go (set once the server is built).
    pub fn set_stats(&self, stats: Arc<Stats>) {
        let _ = self.stats.set(stats);
    }

    /// Shows the count of monitored items.
    fn publish_monitored(&self) {
        if let Some(s) = self.stats.get() {
            s.monitored_items
                .store(self.monitored.load(Ordering::Relaxed), Ordering::Relaxed);
        }
    }

    fn count(&self, good: bool) {
        if let Some(s) = self.stats.get() {
            s.writes.fetch_add(1, Ordering::Relaxed);
            if good {
                s.writes_good.fetch_add(1, Ordering::Relaxed);
            }
        }
    }

    /// Writes `value` to point `served` as a command of user `user`: the write's status.
    async fn command(&self, served: usize, value: Value, user: &str) -> StatusCode {
        let Some(s) = self.space.points.get(served) else {
            return StatusCode::BadNodeIdUnknown;
        };
        let Some(device) = self.parts.catalogue.devices().get(s.device).cloned() else {
            return StatusCode::BadNodeIdUnknown;
        };
        let Some(point) = device.def.points.get(s.point) else {
            return StatusCode::BadNodeIdUnknown;
        };
        let request = Request {
            id: None,
            points: vec![(point.name.clone(), value)],
            expires: None,
            verify: false,
        };
        let origin = Origin::Opcua {
            user: user.to_string(),
        };
        match self
            .parts
            .commands
            .execute(&self.parts.engine, &device.def.name, request, origin)
            .await
        {
            Ok(outcome) => outcome
                .points
                .first()
                .map_or(StatusCode::BadUnexpectedError, |(_, r)| status(r)),
            Err(e) => {
                log::warn!(
                    "opcua server write refused: device={} error=\"{e}\"",
                    device.def.name
                );
                StatusCode::BadNotWritable
            }
        }
    }
}

/// The status a write answers for a command's point result.
fn status(r: &PointResult) -> StatusCode {
    match r {
        PointResult::Written => StatusCode::Good,
        PointResult::OutOfRange(_) => StatusCode::BadOutOfRange,
        PointResult::Expired => StatusCode::BadTimeout,
        PointResult::Unavailable(_) => StatusCode::BadCommunicationError,
        PointResult::Exception(_) => StatusCode::BadDeviceFailure,
        PointResult::Unknown(_) => StatusCode::Uncertain,
        _ => StatusCode::BadNotWritable,
    }
}

#[async_trait]
impl InMemoryNodeManagerImpl for Points {
    async fn init(&self, _address_space: &mut AddressSpace, context: ServerContext) {
        self.base.init(&context);
    }

    fn name(&self) -> &str {
        "opex-connector"
    }

    fn namespaces(&self) -> Vec<NamespaceMetadata> {
        let mut all = self.base.namespaces().to_vec();
        all.push(self.namespace.clone());
        all
    }

    async fn read_values(
        &self,
        context: &RequestContext,
        address_space: &RwLock<AddressSpace>,
        nodes: &[&ParsedReadValueId],
        max_age: f64,
        timestamps_to_return: TimestampsToReturn,
    ) -> Vec<DataValue> {
        let space = address_space.read();
        let mut devices = 0;
        let values = nodes
            .iter()
            .map(|n| {
                if Base::owns(&n.node_id) {
                    self.base
                        .read_one(context, &space, n, max_age, timestamps_to_return)
                } else {
                    devices += 1;
                    space.read(context, n, max_age, timestamps_to_return)
                }
            })
            .collect();
        if devices > 0 {
            self.sessions.note(context);
            if let Some(s) = self.stats.get() {
                s.reads.fetch_add(devices, Ordering::Relaxed);
            }
        }
        values
    }

    async fn create_value_monitored_items(
        &self,
        context: &RequestContext,
        address_space: &RwLock<AddressSpace>,
        items: &mut [&mut &mut CreateMonitoredItem],
    ) {
        let (standard, mut items): (Vec<_>, Vec<_>) = items
            .iter_mut()
            .partition(|i| Base::owns(&i.item_to_monitor().node_id));
        if !standard.is_empty() {
            let space = address_space.read();
            for item in standard {
                self.base.create_monitored_item(context, &space, item);
            }
        }
        if items.is_empty() {
            return;
        }
        let to_read: Vec<_> = items.iter().map(|r| r.item_to_monitor()).collect();
        let values = self
            .read_values(
                context,
                address_space,
                &to_read,
                0.0,
                TimestampsToReturn::Both,
            )
            .await;
        for (value, item) in values.into_iter().zip(items.iter_mut()) {
            let taken = self
                .monitored
                .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| {
                    (n < self.monitored_limit).then_some(n + 1)
                })
                .is_ok();
            if !taken {
                if let Some(s) = self.stats.get() {
                    s.monitored_items_refused.fetch_add(1, Ordering::Relaxed);
                }
                item.set_status(StatusCode::BadTooManyMonitoredItems);
                continue;
            }
            if value.status() != StatusCode::BadAttributeIdInvalid {
                item.set_initial_value(value);
            }
            item.set_status(StatusCode::Good);
        }
        self.publish_monitored();
    }

    async fn set_monitoring_mode(
        &self,
        _context: &RequestContext,
        mode: MonitoringMode,
        items: &[&MonitoredItemRef],
    ) {
        for item in items.iter().filter(|i| Base::owns(i.node_id())) {
            self.base.set_monitoring_mode(mode, item);
        }
    }

    async fn modify_monitored_items(
        &self,
        _context: &RequestContext,
        items: &[&MonitoredItemUpdateRef],
    ) {
        for item in items.iter().filter(|i| Base::owns(i.node_id())) {
            self.base.modify_monitored_item(item);
        }
    }

    async fn delete_monitored_items(&self, _context: &RequestContext, items: &[&MonitoredItemRef]) {
        let mut gone = 0;
        for item in items {
            if Base::owns(item.node_id()) {
                self.base.delete_monitored_item(item);
            } else {
                gone += 1;
            }
        }
        let _ = self
            .monitored
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| {
                Some(n.saturating_sub(gone))
            });
        self.publish_monitored();
    }

    async fn write(
        &self,
        context: &RequestContext,
        address_space: &RwLock<AddressSpace>,
        nodes_to_write: &mut [&mut WriteNode],
    ) -> Result<(), StatusCode> {
        self.sessions.note(context);
        // Checked by the stack under the lock; written without it, one command each.
        let mut todo: Vec<(usize, usize, Value)> = Vec::new();
        {
            let mut space = address_space.write();
            let type_tree = context.type_tree.read();
            for (i, w) in nodes_to_write.iter_mut().enumerate() {
                if let Err(e) = space.validate_node_write(context, w.value(), &*type_tree) {
                    w.set_status(e);
                    continue;
                }
                let v = w.value();
                let Some(&served) = self.space.by_node.get(&v.node_id) else {
                    w.set_status(StatusCode::BadNotWritable);
                    continue;
                };
                if v.attribute_id != AttributeId::Value {
                    w.set_status(StatusCode::BadNotWritable);
                    continue;
                }
                if v.index_range.has_range() {
                    w.set_status(StatusCode::BadIndexRangeInvalid);
                    continue;
                }
                let point = self.space.points.get(served).and_then(|s| {
                    let device = self.parts.catalogue.devices().get(s.device).cloned()?;
                    device.def.points.get(s.point).cloned()
                });
                let json = match (&point, v.value.value.as_ref()) {
                    (Some(p), Some(value)) if space::fits(p, value) => space::to_json(value),
                    _ => None,
                };
                match json {
                    Some(json) => todo.push((i, served, json)),
                    None => w.set_status(StatusCode::BadTypeMismatch),
                }
            }
        }
        let user = context.token.0.clone();
        for (i, served, value) in todo {
            let status = self.command(served, value, &user).await;
            self.count(status.is_good());
            if let Some(w) = nodes_to_write.get_mut(i) {
                w.set_status(status);
            }
        }
        Ok(())
    }
}
