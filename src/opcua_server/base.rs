//! The part of the standard namespace (`ns=0`) that the server serves itself, instead of the
//! stack's generated namespace of some 10 000 nodes (1.8 MB of the field build): the
//! folders a client browses from (`Root`, `Objects`, `Types`, `Views`), the `Server` object
//! with the variables clients read on connecting and watch for keep-alive (`ServerStatus` and
//! its parts, `NamespaceArray`, `ServerArray`, `ServiceLevel`, the capabilities and operation
//! limits), and the types the devices' variables refer to: the reference types with their
//! hierarchy (a browse for hierarchical references finds `Organizes` and `HasComponent`), the
//! built-in data types with theirs (a write's value is checked against the point's type),
//! `EUInformation` and `Range`, and the object and variable types of the nodes served.
//!
//! The values of the `Server` object are read when asked for, and sampled for monitored
//! items, as the stack's own core node manager does.

use std::sync::Arc;
use std::time::Duration;

use opcua::types::{
    AttributeId, DataTypeId, DataValue, DateTime, ExtensionObject, IdType, Identifier,
    MonitoringMode, NodeId, NumericRange, ObjectId, ObjectTypeId, QualifiedName, ReferenceTypeId,
    StatusCode, TimestampsToReturn, VariableId, VariableTypeId, Variant,
};
use ua_server::address_space::{
    read_node_value, AddressSpace, DataTypeBuilder, ObjectBuilder, ObjectTypeBuilder,
    ReferenceTypeBuilder, VariableBuilder, VariableTypeBuilder,
};
use ua_server::diagnostics::NamespaceMetadata;
use ua_server::node_manager::{
    MonitoredItemRef, MonitoredItemUpdateRef, NodeManagersRef, ParsedReadValueId, RequestContext,
    ServerContext, SyncSampler,
};
use ua_server::{CreateMonitoredItem, ServerInfo, ServerStatusWrapper};

/// The standard namespace's URI.
const UA_NAMESPACE: &str = "http://opcfoundation.org/UA/";

/// Adds the standard nodes and the server's own namespace (index 1, so that the devices'
/// comes after it: `ns=2`) to `space`: the part of [`Base`] the address space holds.
pub fn build(context: &ServerContext, space: &mut AddressSpace) -> Base {
    space.add_namespace(UA_NAMESPACE, 0);
    let own = context.info.application_uri.to_string();
    let index = context
        .type_tree
        .write()
        .namespaces_mut()
        .add_namespace(&own);
    space.add_namespace(&own, index);
    add_types(space);
    add_folders(space);
    add_server_object(space);
    Base {
        own: NamespaceMetadata {
            namespace_uri: own,
            namespace_index: index,
            ..Default::default()
        },
        sampler: SyncSampler::new(),
        values: Values {
            node_managers: context.node_managers.clone(),
            status: Arc::clone(&context.status),
            info: Arc::clone(&context.info),
        },
    }
}

/// The standard namespace's nodes above, served by the one node manager
/// ([`super::points::Points`]) beside the devices': one instance of the stack's generic
/// in-memory node manager instead of two.
pub struct Base {
    /// The server's own namespace.
    own: NamespaceMetadata,
    sampler: SyncSampler,
    values: Values,
}

/// Where the `Server` object's values come from.
#[derive(Clone)]
struct Values {
    node_managers: NodeManagersRef,
    status: Arc<ServerStatusWrapper>,
    info: Arc<ServerInfo>,
}

impl Values {
    /// The value of variable `id` of the `Server` object, when it is one that changes or comes
    /// from the configuration; `context` for the namespaces a user sees.
    fn value(&self, id: VariableId, context: Option<&RequestContext>) -> Option<Variant> {
        use VariableId as V;
        let limits = &self.info.config.limits;
        let operational = &limits.operational;
        let status = &self.status;
        Some(match id {
            V::Server_ServerStatus => status.full_status_obj().into(),
            V::Server_ServerStatus_StartTime => status.start_time().into(),
            V::Server_ServerStatus_CurrentTime => DateTime::now().into(),
            V::Server_ServerStatus_State => (status.state() as i32).into(),
            V::Server_ServerStatus_BuildInfo => {
                ExtensionObject::from_message(status.build_info()).into()
            }
            V::Server_ServerStatus_BuildInfo_ProductUri => status.build_info().product_uri.into(),
            V::Server_ServerStatus_BuildInfo_ManufacturerName => {
                status.build_info().manufacturer_name.into()
            }
            V::Server_ServerStatus_BuildInfo_ProductName => {
                status.build_info().product_name.into()
            }
            V::Server_ServerStatus_BuildInfo_SoftwareVersion => {
                status.build_info().software_version.into()
            }
            V::Server_ServerStatus_BuildInfo_BuildNumber => {
                status.build_info().build_number.into()
            }
            V::Server_ServerStatus_BuildInfo_BuildDate => status.build_info().build_date.into(),
            V::Server_ServerStatus_SecondsTillShutdown => match status.seconds_till_shutdown() {
                Some(s) => s.into(),
                None => Variant::Empty,
            },
            V::Server_ServerStatus_ShutdownReason => status.shutdown_reason().into(),
            V::Server_ServiceLevel => self
                .info
                .service_level
                .load(std::sync::atomic::Ordering::Relaxed)
                .into(),
            V::Server_ServerArray => self.info.servers.clone().into(),
            V::Server_NamespaceArray => {
                let context = context?;
                let mut names: Vec<String> = Vec::new();
                for manager in self.node_managers.iter() {
                    for ns in manager.namespaces_for_user(context) {
                        let i = ns.namespace_index as usize;
                        if names.len() <= i {
                            names.resize(i + 1, String::new());
                        }
                        names[i] = ns.namespace_uri;
                    }
                }
                names.into()
            }
            V::Server_ServerCapabilities_ServerProfileArray => {
                self.info.capabilities.profiles.clone().into()
            }
            V::Server_ServerCapabilities_LocaleIdArray => Vec::<String>::new().into(),
            V::Server_ServerCapabilities_MinSupportedSampleRate => {
                limits.subscriptions.min_sampling_interval_ms.into()
            }
            V::Server_ServerCapabilities_MaxBrowseContinuationPoints => {
                (limits.max_browse_continuation_points as u16).into()
            }
            V::Server_ServerCapabilities_MaxArrayLength => (limits.max_array_length as u32).into(),
            V::Server_ServerCapabilities_MaxStringLength => {
                (limits.max_string_length as u32).into()
            }
            V::Server_ServerCapabilities_MaxByteStringLength => {
                (limits.max_byte_string_length as u32).into()
            }
            V::Server_ServerCapabilities_OperationLimits_MaxNodesPerRead => {
                (operational.max_nodes_per_read as u32).into()
            }
            V::Server_ServerCapabilities_OperationLimits_MaxNodesPerWrite => {
                (operational.max_nodes_per_write as u32).into()
            }
            V::Server_ServerCapabilities_OperationLimits_MaxNodesPerBrowse => {
                (operational.max_nodes_per_browse as u32).into()
            }
            V::Server_ServerCapabilities_OperationLimits_MaxNodesPerRegisterNodes => {
                (operational.max_nodes_per_register_nodes as u32).into()
            }
            V::Server_ServerCapabilities_OperationLimits_MaxNodesPerTranslateBrowsePathsToNodeIds => {
                (operational.max_nodes_per_translate_browse_paths_to_node_ids as u32).into()
            }
            V::Server_ServerCapabilities_OperationLimits_MaxMonitoredItemsPerCall => {
                (operational.max_monitored_items_per_call as u32).into()
            }
            _ => return None,
        })
    }

    /// `value` as a data value read now, `range` applied.
    fn data_value(
        &self,
        id: VariableId,
        context: Option<&RequestContext>,
        range: &NumericRange,
    ) -> Option<DataValue> {
        let mut value = self.value(id, context)?;
        if !matches!(range, NumericRange::None) {
            value = match value.range_of(range) {
                Ok(v) => v,
                Err(e) => return Some(DataValue::new_now_status(Variant::Empty, e)),
            };
        }
        Some(DataValue::new_now(value))
    }
}

/// The variable of the `Server` object `node` is, when it is one. (Looked up in
/// [`SERVER_VARIABLES`] rather than with `VariableId::try_from`, whose match over every standard
/// variable would add its size to the binary.)
fn variable_id(node: &NodeId) -> Option<VariableId> {
    if node.namespace != 0 {
        return None;
    }
    let Identifier::Numeric(n) = node.identifier else {
        return None;
    };
    SERVER_VARIABLES
        .iter()
        .map(|v| v.0)
        .find(|&id| id as u32 == n)
}

impl Base {
    /// Starts sampling the monitored items of the `Server` object's changing values.
    pub fn init(&self, context: &ServerContext) {
        let floor = context
            .info
            .config
            .limits
            .subscriptions
            .min_sampling_interval_ms as u64;
        self.sampler.run(
            Duration::from_millis(floor.max(100)),
            Arc::clone(&context.subscriptions),
        );
    }

    /// The standard namespace and the server's own.
    pub fn namespaces(&self) -> [NamespaceMetadata; 2] {
        [
            NamespaceMetadata {
                is_namespace_subset: Some(true),
                namespace_uri: UA_NAMESPACE.to_owned(),
                static_node_id_types: Some(vec![IdType::Numeric]),
                namespace_index: 0,
                ..Default::default()
            },
            self.own.clone(),
        ]
    }

    /// Whether `node` is one of these (the standard namespace's).
    pub fn owns(node: &NodeId) -> bool {
        node.namespace == 0
    }

    /// Makes monitored item `item` of a standard node; its changing values are sampled.
    pub fn create_monitored_item(
        &self,
        context: &RequestContext,
        space: &AddressSpace,
        item: &mut CreateMonitoredItem,
    ) {
        let read = item.item_to_monitor().clone();
        let value = self.read_one(context, space, &read, 0.0, item.timestamps_to_return());
        let status = value.status();
        if status != StatusCode::BadAttributeIdInvalid {
            item.set_initial_value(value);
        }
        if matches!(
            status,
            StatusCode::BadNodeIdUnknown | StatusCode::BadUserAccessDenied
        ) {
            item.set_status(status);
            return;
        }
        item.set_status(StatusCode::Good);
        let (Some(id), AttributeId::Value) = (variable_id(&read.node_id), read.attribute_id) else {
            return;
        };
        if self.values.value(id, None).is_none() {
            return;
        }
        let values = self.values.clone();
        let range = read.index_range;
        self.sampler.add_sampler(
            read.node_id,
            read.attribute_id,
            move || values.data_value(id, None, &range),
            item.monitoring_mode(),
            item.handle(),
            Duration::from_millis(item.sampling_interval() as u64),
        );
    }

    /// Sets the monitoring mode of a standard node's item.
    pub fn set_monitoring_mode(&self, mode: MonitoringMode, item: &MonitoredItemRef) {
        self.sampler
            .set_sampler_mode(item.node_id(), item.attribute(), item.handle(), mode);
    }

    /// Changes the sampling interval of a standard node's item.
    pub fn modify_monitored_item(&self, item: &MonitoredItemUpdateRef) {
        self.sampler.update_sampler(
            item.node_id(),
            item.attribute(),
            item.handle(),
            Duration::from_millis(item.update().revised_sampling_interval as u64),
        );
    }

    /// Stops sampling a standard node's item.
    pub fn delete_monitored_item(&self, item: &MonitoredItemRef) {
        self.sampler
            .remove_sampler(item.node_id(), item.attribute(), item.handle());
    }

    /// Reads one attribute of a standard node.
    pub fn read_one(
        &self,
        context: &RequestContext,
        space: &AddressSpace,
        read: &ParsedReadValueId,
        max_age: f64,
        timestamps: TimestampsToReturn,
    ) -> DataValue {
        let node = match space.validate_node_read(context, read) {
            Ok(node) => node,
            Err(e) => {
                return DataValue {
                    status: Some(e),
                    ..Default::default()
                }
            }
        };
        if read.attribute_id == AttributeId::Value {
            if let Some(v) = variable_id(&read.node_id)
                .and_then(|id| self.values.data_value(id, Some(context), &read.index_range))
            {
                return v;
            }
        }
        read_node_value(node, context, read, max_age, timestamps)
    }
}

/// A reference type: (type, name, supertype, abstract, symmetric, inverse name).
type RefType = (
    ReferenceTypeId,
    &'static str,
    Option<ReferenceTypeId>,
    bool,
    bool,
    &'static str,
);

/// The reference types, each under its supertype.
#[rustfmt::skip]
const REFERENCE_TYPES: [RefType; 17] = {
    use ReferenceTypeId as R;
    [
        (R::References, "References", None, true, true, ""),
        (R::HierarchicalReferences, "HierarchicalReferences", Some(R::References), true, false, "InverseHierarchicalReferences"),
        (R::NonHierarchicalReferences, "NonHierarchicalReferences", Some(R::References), true, true, ""),
        (R::HasChild, "HasChild", Some(R::HierarchicalReferences), true, false, "ChildOf"),
        (R::Organizes, "Organizes", Some(R::HierarchicalReferences), false, false, "OrganizedBy"),
        (R::HasEventSource, "HasEventSource", Some(R::HierarchicalReferences), false, false, "EventSourceOf"),
        (R::HasNotifier, "HasNotifier", Some(R::HasEventSource), false, false, "NotifierOf"),
        (R::Aggregates, "Aggregates", Some(R::HasChild), true, false, "AggregatedBy"),
        (R::HasSubtype, "HasSubtype", Some(R::HasChild), false, false, "SubtypeOf"),
        (R::HasComponent, "HasComponent", Some(R::Aggregates), false, false, "ComponentOf"),
        (R::HasOrderedComponent, "HasOrderedComponent", Some(R::HasComponent), false, false, "OrderedComponentOf"),
        (R::HasProperty, "HasProperty", Some(R::Aggregates), false, false, "PropertyOf"),
        (R::HasModellingRule, "HasModellingRule", Some(R::NonHierarchicalReferences), false, false, "ModellingRuleOf"),
        (R::HasTypeDefinition, "HasTypeDefinition", Some(R::NonHierarchicalReferences), false, false, "TypeDefinitionOf"),
        (R::HasEncoding, "HasEncoding", Some(R::NonHierarchicalReferences), false, false, "EncodingOf"),
        (R::HasDescription, "HasDescription", Some(R::NonHierarchicalReferences), false, false, "DescriptionOf"),
        (R::GeneratesEvent, "GeneratesEvent", Some(R::NonHierarchicalReferences), false, false, "GeneratedBy"),
    ]
};

/// The built-in data types the points and the `Server` object use, each under its
/// supertype: (type, name, supertype, abstract).
#[rustfmt::skip]
const DATA_TYPES: [(DataTypeId, &str, Option<DataTypeId>, bool); 33] = {
    use DataTypeId as D;
    [
        (D::BaseDataType, "BaseDataType", None, true),
        (D::Boolean, "Boolean", Some(D::BaseDataType), false),
        (D::Number, "Number", Some(D::BaseDataType), true),
        (D::Integer, "Integer", Some(D::Number), true),
        (D::UInteger, "UInteger", Some(D::Number), true),
        (D::SByte, "SByte", Some(D::Integer), false),
        (D::Int16, "Int16", Some(D::Integer), false),
        (D::Int32, "Int32", Some(D::Integer), false),
        (D::Int64, "Int64", Some(D::Integer), false),
        (D::Byte, "Byte", Some(D::UInteger), false),
        (D::UInt16, "UInt16", Some(D::UInteger), false),
        (D::UInt32, "UInt32", Some(D::UInteger), false),
        (D::UInt64, "UInt64", Some(D::UInteger), false),
        (D::Float, "Float", Some(D::Number), false),
        (D::Double, "Double", Some(D::Number), false),
        (D::Duration, "Duration", Some(D::Double), false),
        (D::String, "String", Some(D::BaseDataType), false),
        (D::LocaleId, "LocaleId", Some(D::String), false),
        (D::DateTime, "DateTime", Some(D::BaseDataType), false),
        (D::UtcTime, "UtcTime", Some(D::DateTime), false),
        (D::Guid, "Guid", Some(D::BaseDataType), false),
        (D::ByteString, "ByteString", Some(D::BaseDataType), false),
        (D::NodeId, "NodeId", Some(D::BaseDataType), false),
        (D::StatusCode, "StatusCode", Some(D::BaseDataType), false),
        (D::QualifiedName, "QualifiedName", Some(D::BaseDataType), false),
        (D::LocalizedText, "LocalizedText", Some(D::BaseDataType), false),
        (D::Enumeration, "Enumeration", Some(D::BaseDataType), true),
        (D::ServerState, "ServerState", Some(D::Enumeration), false),
        (D::Structure, "Structure", Some(D::BaseDataType), true),
        (D::EUInformation, "EUInformation", Some(D::Structure), false),
        (D::Range, "Range", Some(D::Structure), false),
        (D::BuildInfo, "BuildInfo", Some(D::Structure), false),
        (D::ServerStatusDataType, "ServerStatusDataType", Some(D::Structure), false),
    ]
};

/// The object types of the nodes served: (type, name, supertype).
#[rustfmt::skip]
const OBJECT_TYPES: [(ObjectTypeId, &str, Option<ObjectTypeId>); 5] = {
    use ObjectTypeId as O;
    [
        (O::BaseObjectType, "BaseObjectType", None),
        (O::FolderType, "FolderType", Some(O::BaseObjectType)),
        (O::ServerType, "ServerType", Some(O::BaseObjectType)),
        (O::ServerCapabilitiesType, "ServerCapabilitiesType", Some(O::BaseObjectType)),
        (O::OperationLimitsType, "OperationLimitsType", Some(O::FolderType)),
    ]
};

/// The variable types of the nodes served: (type, name, supertype, data type).
#[rustfmt::skip]
const VARIABLE_TYPES: [(VariableTypeId, &str, Option<VariableTypeId>, DataTypeId); 8] = {
    use DataTypeId as D;
    use VariableTypeId as T;
    [
        (T::BaseVariableType, "BaseVariableType", None, D::BaseDataType),
        (T::BaseDataVariableType, "BaseDataVariableType", Some(T::BaseVariableType), D::BaseDataType),
        (T::PropertyType, "PropertyType", Some(T::BaseVariableType), D::BaseDataType),
        (T::DataItemType, "DataItemType", Some(T::BaseDataVariableType), D::BaseDataType),
        (T::BaseAnalogType, "BaseAnalogType", Some(T::DataItemType), D::Number),
        (T::AnalogItemType, "AnalogItemType", Some(T::BaseAnalogType), D::Number),
        (T::ServerStatusType, "ServerStatusType", Some(T::BaseDataVariableType), D::ServerStatusDataType),
        (T::BuildInfoType, "BuildInfoType", Some(T::BaseDataVariableType), D::BuildInfo),
    ]
};

/// The type nodes of the tables above, each under its supertype (a root type in its folder).
fn add_types(space: &mut AddressSpace) {
    for (id, name, parent, is_abstract, symmetric, inverse) in REFERENCE_TYPES {
        let mut b = ReferenceTypeBuilder::new(&id.into(), QualifiedName::new(0, name), name)
            .is_abstract(is_abstract)
            .symmetric(symmetric);
        if !inverse.is_empty() {
            b = b.inverse_name(inverse);
        }
        match parent {
            Some(p) => b.subtype_of(p),
            None => b.organized_by(ObjectId::ReferenceTypesFolder),
        }
        .insert(space);
    }
    for (id, name, parent, is_abstract) in DATA_TYPES {
        let b = DataTypeBuilder::new(&id.into(), QualifiedName::new(0, name), name)
            .is_abstract(is_abstract);
        match parent {
            Some(p) => b.subtype_of(p),
            None => b.organized_by(ObjectId::DataTypesFolder),
        }
        .insert(space);
    }
    for (id, name, parent) in OBJECT_TYPES {
        let b = ObjectTypeBuilder::new(&id.into(), QualifiedName::new(0, name), name);
        match parent {
            Some(p) => b.subtype_of(p),
            None => b.organized_by(ObjectId::ObjectTypesFolder),
        }
        .insert(space);
    }
    for (id, name, parent, data_type) in VARIABLE_TYPES {
        let b = VariableTypeBuilder::new(&id.into(), QualifiedName::new(0, name), name)
            .is_abstract(parent.is_none())
            .data_type(data_type)
            .value_rank(-2);
        match parent {
            Some(p) => b.subtype_of(p),
            None => b.organized_by(ObjectId::VariableTypesFolder),
        }
        .insert(space);
    }
}

/// `Root` and the folders under it.
fn add_folders(space: &mut AddressSpace) {
    let folder = |space: &mut AddressSpace, id: ObjectId, name: &str, parent: Option<ObjectId>| {
        let b = ObjectBuilder::new(&id.into(), QualifiedName::new(0, name), name).is_folder();
        match parent {
            Some(p) => b.organized_by(p),
            None => b,
        }
        .insert(space);
    };
    folder(space, ObjectId::RootFolder, "Root", None);
    folder(
        space,
        ObjectId::ObjectsFolder,
        "Objects",
        Some(ObjectId::RootFolder),
    );
    folder(
        space,
        ObjectId::TypesFolder,
        "Types",
        Some(ObjectId::RootFolder),
    );
    folder(
        space,
        ObjectId::ViewsFolder,
        "Views",
        Some(ObjectId::RootFolder),
    );
    for (id, name) in [
        (ObjectId::ObjectTypesFolder, "ObjectTypes"),
        (ObjectId::VariableTypesFolder, "VariableTypes"),
        (ObjectId::DataTypesFolder, "DataTypes"),
        (ObjectId::ReferenceTypesFolder, "ReferenceTypes"),
    ] {
        folder(space, id, name, Some(ObjectId::TypesFolder));
    }
}

/// The variables of the `Server` object: (variable, browse name, parent, data type, value
/// rank, a property rather than a component).
#[rustfmt::skip]
const SERVER_VARIABLES: [(VariableId, &str, u32, DataTypeId, i32, bool); 29] = {
    use DataTypeId as D;
    use VariableId as V;
    const SERVER: u32 = ObjectId::Server as u32;
    const STATUS: u32 = V::Server_ServerStatus as u32;
    const BUILD: u32 = V::Server_ServerStatus_BuildInfo as u32;
    const CAPS: u32 = ObjectId::Server_ServerCapabilities as u32;
    const LIMITS: u32 = ObjectId::Server_ServerCapabilities_OperationLimits as u32;
    [
        (V::Server_ServerArray, "ServerArray", SERVER, D::String, 1, true),
        (V::Server_NamespaceArray, "NamespaceArray", SERVER, D::String, 1, true),
        (V::Server_ServiceLevel, "ServiceLevel", SERVER, D::Byte, -1, true),
        (V::Server_ServerStatus, "ServerStatus", SERVER, D::ServerStatusDataType, -1, false),
        (V::Server_ServerStatus_StartTime, "StartTime", STATUS, D::UtcTime, -1, false),
        (V::Server_ServerStatus_CurrentTime, "CurrentTime", STATUS, D::UtcTime, -1, false),
        (V::Server_ServerStatus_State, "State", STATUS, D::ServerState, -1, false),
        (V::Server_ServerStatus_BuildInfo, "BuildInfo", STATUS, D::BuildInfo, -1, false),
        (V::Server_ServerStatus_SecondsTillShutdown, "SecondsTillShutdown", STATUS, D::UInt32, -1, false),
        (V::Server_ServerStatus_ShutdownReason, "ShutdownReason", STATUS, D::LocalizedText, -1, false),
        (V::Server_ServerStatus_BuildInfo_ProductUri, "ProductUri", BUILD, D::String, -1, false),
        (V::Server_ServerStatus_BuildInfo_ManufacturerName, "ManufacturerName", BUILD, D::String, -1, false),
        (V::Server_ServerStatus_BuildInfo_ProductName, "ProductName", BUILD, D::String, -1, false),
        (V::Server_ServerStatus_BuildInfo_SoftwareVersion, "SoftwareVersion", BUILD, D::String, -1, false),
        (V::Server_ServerStatus_BuildInfo_BuildNumber, "BuildNumber", BUILD, D::String, -1, false),
        (V::Server_ServerStatus_BuildInfo_BuildDate, "BuildDate", BUILD, D::UtcTime, -1, false),
        (V::Server_ServerCapabilities_ServerProfileArray, "ServerProfileArray", CAPS, D::String, 1, true),
        (V::Server_ServerCapabilities_LocaleIdArray, "LocaleIdArray", CAPS, D::LocaleId, 1, true),
        (V::Server_ServerCapabilities_MinSupportedSampleRate, "MinSupportedSampleRate", CAPS, D::Duration, -1, true),
        (V::Server_ServerCapabilities_MaxBrowseContinuationPoints, "MaxBrowseContinuationPoints", CAPS, D::UInt16, -1, true),
        (V::Server_ServerCapabilities_MaxArrayLength, "MaxArrayLength", CAPS, D::UInt32, -1, true),
        (V::Server_ServerCapabilities_MaxStringLength, "MaxStringLength", CAPS, D::UInt32, -1, true),
        (V::Server_ServerCapabilities_MaxByteStringLength, "MaxByteStringLength", CAPS, D::UInt32, -1, true),
        (V::Server_ServerCapabilities_OperationLimits_MaxNodesPerRead, "MaxNodesPerRead", LIMITS, D::UInt32, -1, true),
        (V::Server_ServerCapabilities_OperationLimits_MaxNodesPerWrite, "MaxNodesPerWrite", LIMITS, D::UInt32, -1, true),
        (V::Server_ServerCapabilities_OperationLimits_MaxNodesPerBrowse, "MaxNodesPerBrowse", LIMITS, D::UInt32, -1, true),
        (V::Server_ServerCapabilities_OperationLimits_MaxNodesPerRegisterNodes, "MaxNodesPerRegisterNodes", LIMITS, D::UInt32, -1, true),
        (V::Server_ServerCapabilities_OperationLimits_MaxNodesPerTranslateBrowsePathsToNodeIds, "MaxNodesPerTranslateBrowsePathsToNodeIds", LIMITS, D::UInt32, -1, true),
        (V::Server_ServerCapabilities_OperationLimits_MaxMonitoredItemsPerCall, "MaxMonitoredItemsPerCall", LIMITS, D::UInt32, -1, true),
    ]
};

/// The `Server` object and the variables under it (their values come from [`Values`]).
fn add_server_object(space: &mut AddressSpace) {
    use VariableId as V;
    ObjectBuilder::new(
        &ObjectId::Server.into(),
        QualifiedName::new(0, "Server"),
        "Server",
    )
    .has_type_definition(ObjectTypeId::ServerType)
    .organized_by(ObjectId::ObjectsFolder)
    .insert(space);
    ObjectBuilder::new(
        &ObjectId::Server_ServerCapabilities.into(),
        QualifiedName::new(0, "ServerCapabilities"),
        "ServerCapabilities",
    )
    .has_type_definition(ObjectTypeId::ServerCapabilitiesType)
    .component_of(ObjectId::Server)
    .insert(space);
    ObjectBuilder::new(
        &ObjectId::Server_ServerCapabilities_OperationLimits.into(),
        QualifiedName::new(0, "OperationLimits"),
        "OperationLimits",
    )
    .has_type_definition(ObjectTypeId::OperationLimitsType)
    .component_of(ObjectId::Server_ServerCapabilities)
    .insert(space);

    for (id, name, parent, data_type, rank, property) in SERVER_VARIABLES {
        let parent = NodeId::new(0, parent);
        let type_definition = match (property, id) {
            (true, _) => VariableTypeId::PropertyType,
            (false, V::Server_ServerStatus) => VariableTypeId::ServerStatusType,
            (false, V::Server_ServerStatus_BuildInfo) => VariableTypeId::BuildInfoType,
            (false, _) => VariableTypeId::BaseDataVariableType,
        };
        let b = VariableBuilder::new(&id.into(), QualifiedName::new(0, name), name)
            .data_type(data_type)
            .value_rank(rank)
            .has_type_definition(type_definition);
        if property {
            b.property_of(parent)
        } else {
            b.component_of(parent)
        }
        .insert(space);
    }
}
