//! The node manager the stack is given: [`Points`] in async-opcua's in-memory manager, with
//! Browse and TranslateBrowsePaths of its own. The address space keeps the folders' and the
//! connector's references, but not the points': those are made from the catalogue when asked
//! ([`Space::made`]), so a browse here reads both. Every other service (Read, Write, the
//! monitored items) is the in-memory manager's, whose nodes are all there.
//!
//! [`Space::made`]: super::space::Space::made

use std::collections::VecDeque;
use std::sync::Arc;

use async_trait::async_trait;
use opcua::types::{
    BrowseDescriptionResultMask, BrowseDirection, ExpandedNodeId, MonitoringMode, NodeClass,
    NodeId, ReferenceDescription, ReferenceTypeId, StatusCode, TimestampsToReturn,
};
use ua_server::address_space::{AddressSpace, DefaultTypeTree, ReferenceDirection};
use ua_server::diagnostics::NamespaceMetadata;
use ua_server::node_manager::memory::{InMemoryNodeManager, InMemoryNodeManagerBuilder};
use ua_server::node_manager::{
    impl_translate_browse_paths_using_browse, AddReferenceResult, BrowseNode, BrowsePathItem,
    DynNodeManager, ExternalReferenceRequest, MonitoredItemRef, MonitoredItemUpdateRef,
    NodeManager, NodeManagerBuilder, NodeMetadata, ReadNode, RequestContext, ServerContext,
    WriteNode,
};
use ua_server::CreateMonitoredItem;

use super::points::{Points, PointsBuilder};
use crate::sources::status::DeviceStatus;

/// Builds [`Browsed`] around the in-memory manager of [`Points`].
pub struct BrowsedBuilder(pub PointsBuilder);

impl NodeManagerBuilder for BrowsedBuilder {
    fn build(self: Box<Self>, context: ServerContext) -> Arc<DynNodeManager> {
        let inner = Box::new(InMemoryNodeManagerBuilder::new(self.0)).build(context);
        match inner
            .into_any_arc()
            .downcast::<InMemoryNodeManager<Points>>()
        {
            Ok(inner) => Arc::new(Browsed { inner }),
            Err(_) => unreachable!("the in-memory builder makes an in-memory manager"),
        }
    }
}

/// The server's node manager.
pub struct Browsed {
    inner: Arc<InMemoryNodeManager<Points>>,
}

/// The references of a node that did not fit in one browse answer.
struct Rest(VecDeque<ReferenceDescription>);

impl Browsed {
    /// The in-memory manager: its address space, and [`Points`] as `inner()`.
    pub fn inner(&self) -> &Arc<InMemoryNodeManager<Points>> {
        &self.inner
    }

    /// Every reference of `node` in `direction`: the address space's and the made ones, each
    /// as its type, its direction (forward: true) and its other end.
    fn references(
        &self,
        space: &AddressSpace,
        devices: &[Arc<DeviceStatus>],
        tree: &DefaultTypeTree,
        node: &NodeId,
        direction: BrowseDirection,
    ) -> Vec<(NodeId, bool, NodeId)> {
        let forward = matches!(direction, BrowseDirection::Forward | BrowseDirection::Both);
        let inverse = matches!(direction, BrowseDirection::Inverse | BrowseDirection::Both);
        let mut out: Vec<_> = space
            .find_references(node, None::<(NodeId, bool)>, tree, direction)
            .map(|r| {
                let forward = matches!(r.direction, ReferenceDirection::Forward);
                (r.reference_type.clone(), forward, r.target_node.clone())
            })
            .collect();
        let made = self
            .inner
            .inner()
            .space
            .made(devices, node)
            .unwrap_or_default();
        out.extend(
            made.into_iter()
                .filter(|m| if m.forward { forward } else { inverse })
                .map(|m| (m.kind.into(), m.forward, m.target)),
        );
        out
    }

    /// What a reference to `node` says of it, as the in-memory manager would say it.
    fn describe(
        &self,
        space: &AddressSpace,
        devices: &[Arc<DeviceStatus>],
        tree: &DefaultTypeTree,
        node: &NodeId,
        mask: BrowseDescriptionResultMask,
    ) -> Option<NodeMetadata> {
        let n = space.find_node(node)?.as_node();
        let class = n.node_class();
        let wanted = mask.contains(BrowseDescriptionResultMask::RESULT_MASK_TYPE_DEFINITION)
            && matches!(class, NodeClass::Object | NodeClass::Variable);
        let type_definition = if !wanted {
            None
        } else if let Some(t) = self.inner.inner().space.type_definition(devices, node) {
            Some(t)
        } else {
            let filter = Some((ReferenceTypeId::HasTypeDefinition, false));
            let mut found = space.find_references(node, filter, tree, BrowseDirection::Forward);
            found.next().map(|r| r.target_node.clone())
        };
        Some(NodeMetadata {
            node_id: ExpandedNodeId::new(node.clone()),
            type_definition: type_definition.map_or_else(ExpandedNodeId::null, ExpandedNodeId::new),
            browse_name: n.browse_name().clone(),
            display_name: n.display_name().clone(),
            node_class: class,
        })
    }

    /// Answers one browse from the start, leaving what does not fit for a continuation.
    fn browse_node(
        &self,
        space: &AddressSpace,
        devices: &[Arc<DeviceStatus>],
        tree: &DefaultTypeTree,
        node: &mut BrowseNode,
    ) {
        let mut rest = VecDeque::new();
        let id = node.node_id().clone();
        for (kind, forward, target) in
            self.references(space, devices, tree, &id, node.browse_direction())
        {
            if !node.allows_reference_type(&kind, tree) {
                continue;
            }
            let Some(meta) = self.describe(space, devices, tree, &target, node.result_mask())
            else {
                continue;
            };
            if let AddReferenceResult::Full(r) = node.add(tree, meta.into_ref_desc(forward, kind)) {
                rest.push_back(r);
            }
        }
        if !rest.is_empty() {
            node.set_next_continuation_point(Box::new(Rest(rest)));
        }
    }
}

#[async_trait]
impl NodeManager for Browsed {
    fn owns_node(&self, id: &NodeId) -> bool {
        self.inner.owns_node(id)
    }

    fn name(&self) -> &str {
        self.inner.name()
    }

    fn namespaces_for_user(&self, context: &RequestContext) -> Vec<NamespaceMetadata> {
        self.inner.namespaces_for_user(context)
    }

    async fn init(&self, type_tree: &mut DefaultTypeTree, context: ServerContext) {
        self.inner.init(type_tree, context).await;
    }

    async fn resolve_external_references(
        &self,
        context: &RequestContext,
        items: &mut [&mut ExternalReferenceRequest],
    ) {
        let space = self.inner.address_space().read();
        let tree = context.type_tree.read();
        let devices = self.inner.inner().devices();
        for item in items {
            let id = item.node_id().clone();
            if let Some(meta) = self.describe(&space, &devices, &tree, &id, item.result_mask()) {
                item.set(meta);
            }
        }
    }

    async fn browse(
        &self,
        context: &RequestContext,
        nodes_to_browse: &mut [BrowseNode],
    ) -> Result<(), StatusCode> {
        let space = self.inner.address_space().read();
        let tree = context.type_tree.read();
        let devices = self.inner.inner().devices();
        for node in nodes_to_browse.iter_mut() {
            if node.node_id().is_null() {
                continue;
            }
            node.set_status(StatusCode::Good);
            let Some(mut rest) = node.take_continuation_point::<Rest>() else {
                self.browse_node(&space, &devices, &tree, node);
                continue;
            };
            while node.remaining() > 0 {
                let Some(r) = rest.0.pop_front() else { break };
                node.add_unchecked(r);
            }
            if !rest.0.is_empty() {
                node.set_next_continuation_point(rest);
            }
        }
        Ok(())
    }

    async fn translate_browse_paths_to_node_ids(
        &self,
        context: &RequestContext,
        nodes: &mut [&mut BrowsePathItem],
    ) -> Result<(), StatusCode> {
        impl_translate_browse_paths_using_browse(self, context, nodes).await
    }

    async fn read(
        &self,
        context: &RequestContext,
        max_age: f64,
        timestamps_to_return: TimestampsToReturn,
        nodes_to_read: &mut [&mut ReadNode],
    ) -> Result<(), StatusCode> {
        self.inner
            .read(context, max_age, timestamps_to_return, nodes_to_read)
            .await
    }

    async fn write(
        &self,
        context: &RequestContext,
        nodes_to_write: &mut [&mut WriteNode],
    ) -> Result<(), StatusCode> {
        self.inner.write(context, nodes_to_write).await
    }

    async fn create_monitored_items(
        &self,
        context: &RequestContext,
        items: &mut [&mut CreateMonitoredItem],
    ) -> Result<(), StatusCode> {
        self.inner.create_monitored_items(context, items).await
    }

    async fn modify_monitored_items(
        &self,
        context: &RequestContext,
        items: &[&MonitoredItemUpdateRef],
    ) {
        self.inner.modify_monitored_items(context, items).await;
    }

    async fn set_monitoring_mode(
        &self,
        context: &RequestContext,
        mode: MonitoringMode,
        items: &[&MonitoredItemRef],
    ) {
        self.inner.set_monitoring_mode(context, mode, items).await;
    }

    async fn delete_monitored_items(&self, context: &RequestContext, items: &[&MonitoredItemRef]) {
        self.inner.delete_monitored_items(context, items).await;
    }
}
