//! What the server serves: `Objects/<device>/<group>/<point>` for every point of the point
//! catalogue, whatever protocol reads it, and `Objects/Connector` for the gateway itself.
//!
//! - **Node ids** are `ns=<ns>;s=<device>.<point>` (a device folder `s=<device>`, a group
//!   folder `s=<device>/<group>`): made of names only, so they stay the same across restarts
//!   and config changes that do not rename the point. The connector's own nodes are under
//!   `s=@connector`, a name no device can have.
//! - **References** of the points are not kept in the address space, where each would take
//!   two hash sets (some 1.2 KB a point): [`Space::made`] makes a group's, a point's and its
//!   properties' references from the catalogue when a browse or a browse path asks
//!   ([`super::browse`]). The folders and the connector's own nodes keep theirs.
//! - **Variables** carry the point's data type (a point with a `scale` other than 1 is a
//!   Double; a point whose type the device decides, an OPC-UA node without `data_type`, is
//!   BaseDataType), `EngineeringUnits` from its `unit`, `EURange` from `min` and `max` when
//!   both are set, an access level from `writable`, and a description naming where it lives in
//!   the device (`holding_register u16`).
//! - **Values** carry the poll's timestamp and a status from the point's quality: Good; the
//!   device's own status for a bad point (an OPC-UA status name as it is, any other refusal
//!   `BadDeviceFailure`); `BadCommunicationError` (the last value kept) while the device is
//!   not connected; `UncertainLastUsableValue` for a polled value older than
//!   [`STALE_AFTER`] poll intervals (a device that answers, but not this group, or late).

use std::collections::HashMap;
use std::str::FromStr;
use std::sync::Arc;

use opcua::types::{
    DataTypeId, DataValue, DateTime, EUInformation, ExtensionObject, Identifier, LocalizedText,
    NodeId, ObjectId, QualifiedName, Range, ReferenceTypeId, StatusCode, SubStatusCode,
    VariableTypeId, Variant,
};
use serde_json::Value;
use ua_server::address_space::{AccessLevel, AddressSpace, VariableBuilder};

use crate::sources::catalogue::{Catalogue, DataKind, Live, PointDef};
use crate::sources::status::{ConnState, DeviceStatus};

/// Poll intervals after which a polled value is served as `UncertainLastUsableValue`.
pub const STALE_AFTER: u32 = 3;

/// The namespace URI of the units in `EngineeringUnits` (UNECE codes).
const UNITS_NAMESPACE: &str = "http://www.opcfoundation.org/UA/units/un/cefact";

/// The node id of point `point` of device `device`.
pub fn point_id(ns: u16, device: &str, point: &str) -> NodeId {
    NodeId::new(ns, format!("{device}.{point}"))
}

/// The node id of one of the connector's own nodes (`version`, `devices.<name>.state`).
pub fn connector_id(ns: u16, name: &str) -> NodeId {
    NodeId::new(ns, format!("@connector.{name}"))
}

/// A point as the server serves it.
#[derive(Debug, Clone)]
pub struct Served {
    /// The device, by its index in the catalogue.
    pub device: usize,
    /// The point, by its index in the device's points.
    pub point: usize,
    /// Its node.
    pub node: NodeId,
}

/// The served points and the connector's nodes.
#[derive(Debug, Default)]
pub struct Space {
    /// The devices' namespace.
    pub ns: u16,
    /// Every point, devices in catalogue order.
    pub points: Vec<Served>,
    /// The index in `points` of each point's node.
    pub by_node: HashMap<NodeId, usize>,
    /// The indices in `points` of each device's points, in catalogue order.
    pub by_device: Vec<std::ops::Range<usize>>,
    /// Each group folder's device, by its index in the catalogue.
    pub groups: HashMap<NodeId, usize>,
    /// Each device's state node, in catalogue order.
    pub device_states: Vec<NodeId>,
    /// The connector's health node.
    pub health: NodeId,
    /// Each sink's node (true while it takes records), in the order of [`Gateway::sinks`].
    pub sinks: Vec<NodeId>,
    /// Each queue's fill and level nodes, in the order of [`Gateway::queues`].
    pub queues: Vec<(NodeId, NodeId)>,
}

/// The gateway's own figures, served under `Objects/Connector`.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Gateway {
    /// The health model's state: `ok`, `degraded`, ... (what `/api/status` `state` says).
    pub health: String,
    /// Each sink, and whether it takes records.
    pub sinks: Vec<(String, bool)>,
    /// Each bounded queue: its fill in percent and its level (`ok`, `warning`, ...).
    pub queues: Vec<(String, f64, String)>,
}

impl Gateway {
    /// Each node of `space` with its value, in the order [`build`] made them.
    pub fn values<'a>(&self, space: &'a Space) -> Vec<(&'a NodeId, Variant)> {
        let mut out = vec![(&space.health, Variant::from(self.health.as_str()))];
        for ((_, accepting), node) in self.sinks.iter().zip(&space.sinks) {
            out.push((node, Variant::Boolean(*accepting)));
        }
        for ((_, fill, level), (f, l)) in self.queues.iter().zip(&space.queues) {
            out.push((f, Variant::Double(*fill)));
            out.push((l, Variant::from(level.as_str())));
        }
        out
    }
}

/// Adds the catalogue's devices and the connector's own nodes (its version, and the sinks
/// and queues of `gateway`) to `space` in namespace `ns`.
pub fn build(
    space: &mut AddressSpace,
    ns: u16,
    catalogue: &Catalogue,
    version: &str,
    gateway: &Gateway,
) -> Space {
    let objects: NodeId = ObjectId::ObjectsFolder.into();
    let mut out = Space {
        ns,
        ..Space::default()
    };
    for (d, device) in catalogue.devices().iter().enumerate() {
        let def = &device.def;
        let folder = NodeId::new(ns, def.name.clone());
        add_folder(space, &folder, &def.name, &objects);
        for group in &def.groups {
            let g = group_id(ns, &def.name, &group.name);
            add_folder(space, &g, &group.name, &folder);
            out.groups.insert(g, d);
        }
        let first = out.points.len();
        for (p, point) in def.points.iter().enumerate() {
            let node = point_id(ns, &def.name, &point.name);
            add_point(space, ns, &node, point);
            out.by_node.insert(node.clone(), out.points.len());
            out.points.push(Served {
                device: d,
                point: p,
                node,
            });
        }
        out.by_device.push(first..out.points.len());
    }
    let connector = NodeId::new(ns, "@connector");
    add_folder(space, &connector, "Connector", &objects);
    read_only(
        space,
        &connector_id(ns, "version"),
        "Version",
        DataTypeId::String,
        Variant::from(version),
        &connector,
    );
    out.health = connector_id(ns, "health");
    read_only(
        space,
        &out.health,
        "Health",
        DataTypeId::String,
        Variant::from(gateway.health.as_str()),
        &connector,
    );
    let sinks = connector_id(ns, "sinks");
    add_folder(space, &sinks, "Sinks", &connector);
    for (name, accepting) in &gateway.sinks {
        let node = connector_id(ns, &format!("sinks.{name}.accepting"));
        read_only(
            space,
            &node,
            &format!("{name}.Accepting"),
            DataTypeId::Boolean,
            Variant::Boolean(*accepting),
            &sinks,
        );
        out.sinks.push(node);
    }
    let queues = connector_id(ns, "queues");
    add_folder(space, &queues, "Queues", &connector);
    for (name, fill, level) in &gateway.queues {
        let folder = connector_id(ns, &format!("queues.{name}"));
        add_folder(space, &folder, name, &queues);
        let f = connector_id(ns, &format!("queues.{name}.fill_pct"));
        read_only(
            space,
            &f,
            "FillPercent",
            DataTypeId::Double,
            Variant::Double(*fill),
            &folder,
        );
        let l = connector_id(ns, &format!("queues.{name}.level"));
        read_only(
            space,
            &l,
            "Level",
            DataTypeId::String,
            Variant::from(level.as_str()),
            &folder,
        );
        out.queues.push((f, l));
    }
    let devices = connector_id(ns, "devices");
    add_folder(space, &devices, "Devices", &connector);
    for device in catalogue.devices().iter() {
        let name = &device.def.name;
        let folder = connector_id(ns, &format!("devices.{name}"));
        add_folder(space, &folder, name, &devices);
        let state = connector_id(ns, &format!("devices.{name}.state"));
        read_only(
            space,
            &state,
            "State",
            DataTypeId::String,
            Variant::from(device.state().as_str()),
            &folder,
        );
        out.device_states.push(state);
    }
    out
}

/// A folder `name` (its browse name in `node`'s namespace) under `parent`.
fn add_folder(space: &mut AddressSpace, node: &NodeId, name: &str, parent: &NodeId) {
    space.add_folder(node, QualifiedName::new(node.namespace, name), name, parent);
}

/// A read-only variable of the connector's own.
fn read_only(
    space: &mut AddressSpace,
    node: &NodeId,
    name: &str,
    data_type: DataTypeId,
    value: Variant,
    parent: &NodeId,
) {
    VariableBuilder::new(node, QualifiedName::new(node.namespace, name), name)
        .data_type(data_type)
        .value(value)
        .access_level(AccessLevel::CURRENT_READ)
        .user_access_level(AccessLevel::CURRENT_READ)
        .has_type_definition(VariableTypeId::BaseDataVariableType)
        .component_of(parent.clone())
        .insert(space);
}

/// One point's variable with its properties, without their references ([`Space::made`]).
fn add_point(space: &mut AddressSpace, ns: u16, node: &NodeId, p: &PointDef) {
    let access = if p.writable {
        AccessLevel::CURRENT_READ | AccessLevel::CURRENT_WRITE
    } else {
        AccessLevel::CURRENT_READ
    };
    VariableBuilder::new(
        node,
        QualifiedName::new(ns, p.name.as_str()),
        p.name.as_str(),
    )
    .data_type(data_type(p))
    .description(format!("{} {}", p.area, p.type_name))
    .access_level(access)
    .user_access_level(access)
    .minimum_sampling_interval(0.0)
    .insert(space);
    let property = |space: &mut AddressSpace, name: &str, data_type: DataTypeId, value: Variant| {
        VariableBuilder::new(&property_id(node, name), QualifiedName::new(0, name), name)
            .data_type(data_type)
            .value(value)
            .access_level(AccessLevel::CURRENT_READ)
            .user_access_level(AccessLevel::CURRENT_READ)
            .insert(space);
    };
    if let Some(unit) = &p.unit {
        let eu = EUInformation {
            namespace_uri: UNITS_NAMESPACE.into(),
            // Not one of the UNECE codes: the display name says the unit.
            unit_id: -1,
            display_name: LocalizedText::from(unit.as_str()),
            description: LocalizedText::from(unit.as_str()),
        };
        property(
            space,
            ENGINEERING_UNITS,
            DataTypeId::EUInformation,
            Variant::from(ExtensionObject::from_message(eu)),
        );
    }
    if let (Some(low), Some(high)) = (p.min, p.max) {
        property(
            space,
            EU_RANGE,
            DataTypeId::Range,
            Variant::from(ExtensionObject::from_message(Range { low, high })),
        );
    }
}

/// The browse names of a point's properties.
const ENGINEERING_UNITS: &str = "EngineeringUnits";
const EU_RANGE: &str = "EURange";

/// The node id of group `group` of device `device`.
fn group_id(ns: u16, device: &str, group: &str) -> NodeId {
    NodeId::new(ns, format!("{device}/{group}"))
}

/// The node id of property `name` of point `node`: `<device>.<point>#<name>`.
fn property_id(node: &NodeId, name: &str) -> NodeId {
    NodeId::new(
        node.namespace,
        format!("{}#{name}", text(node).unwrap_or_default()),
    )
}

/// The text of a string node id.
fn text(node: &NodeId) -> Option<&str> {
    match &node.identifier {
        Identifier::String(s) => s.value().as_deref(),
        _ => None,
    }
}

/// A reference that [`Space::made`] makes rather than the address space keeping it.
#[derive(Debug, Clone, PartialEq)]
pub struct Made {
    /// Its type.
    pub kind: ReferenceTypeId,
    /// True from the node asked about to `target`, false from `target` to it.
    pub forward: bool,
    /// The node at its other end.
    pub target: NodeId,
}

impl Made {
    fn new(kind: ReferenceTypeId, forward: bool, target: NodeId) -> Self {
        Made {
            kind,
            forward,
            target,
        }
    }
}

/// The properties point `p` has, by browse name.
fn properties(p: &PointDef) -> impl Iterator<Item = &'static str> {
    let range = p.min.is_some() && p.max.is_some();
    [(p.unit.is_some(), ENGINEERING_UNITS), (range, EU_RANGE)]
        .into_iter()
        .filter_map(|(has, name)| has.then_some(name))
}

impl Space {
    /// The device and the definition of the point whose variable is `node`.
    fn point<'a>(
        &self,
        devices: &'a [Arc<DeviceStatus>],
        node: &NodeId,
    ) -> Option<(&'a str, &'a PointDef)> {
        let s = self.points.get(*self.by_node.get(node)?)?;
        let def = &devices.get(s.device)?.def;
        Some((def.name.as_str(), def.points.get(s.point)?))
    }

    /// The point that owns property `node` (`<device>.<point>#<name>`), if it has that
    /// property: its variable's node id.
    fn property(&self, devices: &[Arc<DeviceStatus>], node: &NodeId) -> Option<NodeId> {
        let (point, name) = text(node)?.rsplit_once('#')?;
        let owner = NodeId::new(self.ns, point);
        let (_, p) = self.point(devices, &owner)?;
        properties(p).any(|n| n == name).then_some(owner)
    }

    /// The references of `node` that the address space does not keep, made from the
    /// catalogue's `devices`: a group's to its points (`HasComponent`), a point's to its type,
    /// its group and its properties, a property's to its type and its point. `None` for a
    /// node whose references are all kept (a group's others are: its type and its device).
    pub fn made(&self, devices: &[Arc<DeviceStatus>], node: &NodeId) -> Option<Vec<Made>> {
        if node.namespace != self.ns {
            return None;
        }
        if let Some(&d) = self.groups.get(node) {
            let def = &devices.get(d)?.def;
            let group = text(node)?.strip_prefix(def.name.as_str())?.get(1..)?;
            let range = self.by_device.get(d).cloned().unwrap_or_default();
            let points = self.points.get(range).unwrap_or_default();
            return Some(
                points
                    .iter()
                    .filter(|s| def.points.get(s.point).is_some_and(|p| p.group == group))
                    .map(|s| Made::new(ReferenceTypeId::HasComponent, true, s.node.clone()))
                    .collect(),
            );
        }
        if let Some((device, p)) = self.point(devices, node) {
            let group = group_id(self.ns, device, &p.group);
            let mut out = vec![
                Made::new(ReferenceTypeId::HasTypeDefinition, true, variable_type(p)),
                Made::new(ReferenceTypeId::HasComponent, false, group),
            ];
            out.extend(properties(p).map(|name| {
                Made::new(ReferenceTypeId::HasProperty, true, property_id(node, name))
            }));
            return Some(out);
        }
        let owner = self.property(devices, node)?;
        Some(vec![
            Made::new(
                ReferenceTypeId::HasTypeDefinition,
                true,
                VariableTypeId::PropertyType.into(),
            ),
            Made::new(ReferenceTypeId::HasProperty, false, owner),
        ])
    }

    /// The type definition of a point's variable or property; `None` for any other node.
    pub fn type_definition(&self, devices: &[Arc<DeviceStatus>], node: &NodeId) -> Option<NodeId> {
        if node.namespace != self.ns {
            return None;
        }
        if let Some((_, p)) = self.point(devices, node) {
            return Some(variable_type(p));
        }
        self.property(devices, node)
            .map(|_| VariableTypeId::PropertyType.into())
    }
}

/// The type definition of point `p`'s variable: `AnalogItemType` when it has a unit or a
/// range, else `BaseDataVariableType`.
fn variable_type(p: &PointDef) -> NodeId {
    if properties(p).next().is_some() {
        VariableTypeId::AnalogItemType.into()
    } else {
        VariableTypeId::BaseDataVariableType.into()
    }
}

/// The OPC-UA data type of point `p`.
pub fn data_type(p: &PointDef) -> DataTypeId {
    if p.scale.is_some_and(|s| s != 1.0) {
        return DataTypeId::Double;
    }
    match p.kind {
        Some(DataKind::Bool) => DataTypeId::Boolean,
        Some(DataKind::U16) => DataTypeId::UInt16,
        Some(DataKind::I16) => DataTypeId::Int16,
        Some(DataKind::U32) => DataTypeId::UInt32,
        Some(DataKind::I32) => DataTypeId::Int32,
        Some(DataKind::U64) => DataTypeId::UInt64,
        Some(DataKind::I64) => DataTypeId::Int64,
        Some(DataKind::F32) => DataTypeId::Float,
        Some(DataKind::F64) => DataTypeId::Double,
        Some(DataKind::String) => DataTypeId::String,
        None => DataTypeId::BaseDataType,
    }
}

/// Point `p`'s value as the server serves it at `now_ms`, from its live value (`None` before
/// the first read) and its device's status.
pub fn value(p: &PointDef, live: Option<&Live>, device: &DeviceStatus, now_ms: u64) -> DataValue {
    let Some(live) = live else {
        // Not read yet: no value, and why.
        let status = match device.state() {
            ConnState::Connected => StatusCode::BadWaitingForInitialData,
            _ => StatusCode::BadCommunicationError,
        };
        return DataValue {
            value: None,
            status: Some(status),
            ..Default::default()
        };
    };
    let variant = to_variant(p, &live.value);
    let status = if device.state() != ConnState::Connected {
        StatusCode::BadCommunicationError
    } else if !live.good {
        point_status(&live.detail)
    } else if variant.is_none() {
        // A value the point's type cannot hold (a device that answered another type).
        StatusCode::BadTypeMismatch
    } else if is_stale(p, live.ts_ms, device, now_ms) {
        StatusCode::UncertainLastUsableValue
    } else {
        StatusCode::Good
    };
    let ts = from_unix_ms(live.ts_ms);
    DataValue {
        value: variant,
        status: Some(status),
        source_timestamp: Some(ts),
        server_timestamp: Some(DateTime::now()),
        ..Default::default()
    }
}

/// True when point `p`'s value, read at `ts_ms`, is older than [`STALE_AFTER`] intervals of
/// its polled group at `now_ms`.
fn is_stale(p: &PointDef, ts_ms: u64, device: &DeviceStatus, now_ms: u64) -> bool {
    let Some(group) = device.def.groups.iter().find(|g| g.name == p.group) else {
        return false;
    };
    let limit = group.interval.saturating_mul(STALE_AFTER).as_millis() as u64;
    !group.pushed && now_ms.saturating_sub(ts_ms) > limit
}

/// Unix milliseconds as an OPC-UA DateTime (100 ns ticks since 1601).
fn from_unix_ms(ms: u64) -> DateTime {
    /// Milliseconds from 1601-01-01 to 1970-01-01.
    const UNIX_EPOCH_MS: i64 = 11_644_473_600_000;
    let ms = i64::try_from(ms).unwrap_or(i64::MAX / 20_000);
    DateTime::from(ms.saturating_add(UNIX_EPOCH_MS).saturating_mul(10_000))
}

/// The status of a bad point's entry: its OPC-UA status when it has one (a re-served OPC-UA
/// device's), else `BadDeviceFailure` (a Modbus exception, an S7 item error).
fn point_status(entry: &Value) -> StatusCode {
    entry["status"]
        .as_str()
        .and_then(|s| SubStatusCode::from_str(s).ok())
        .map(StatusCode::from_category)
        .filter(|s| !s.is_good())
        .unwrap_or(StatusCode::BadDeviceFailure)
}

/// A JSON value as point `p`'s OPC-UA type holds it; `None` when it does not fit.
pub fn to_variant(p: &PointDef, v: &Value) -> Option<Variant> {
    if v.is_null() {
        return None;
    }
    Some(match data_type(p) {
        DataTypeId::Boolean => Variant::Boolean(v.as_bool()?),
        DataTypeId::UInt16 => Variant::UInt16(u16::try_from(v.as_u64()?).ok()?),
        DataTypeId::Int16 => Variant::Int16(i16::try_from(v.as_i64()?).ok()?),
        DataTypeId::UInt32 => Variant::UInt32(u32::try_from(v.as_u64()?).ok()?),
        DataTypeId::Int32 => Variant::Int32(i32::try_from(v.as_i64()?).ok()?),
        DataTypeId::UInt64 => Variant::UInt64(v.as_u64()?),
        DataTypeId::Int64 => Variant::Int64(v.as_i64()?),
        // The value read from a 32-bit float, as close as a Float holds it.
        DataTypeId::Float => Variant::Float(v.as_f64()? as f32),
        DataTypeId::Double => Variant::Double(v.as_f64()?),
        DataTypeId::String => Variant::from(v.as_str()?),
        _ => match v {
            Value::Bool(b) => Variant::Boolean(*b),
            Value::Number(n) if n.is_u64() => Variant::UInt64(n.as_u64()?),
            Value::Number(n) if n.is_i64() => Variant::Int64(n.as_i64()?),
            Value::Number(n) => Variant::Double(n.as_f64()?),
            Value::String(s) => Variant::from(s.as_str()),
            _ => return None,
        },
    })
}

/// True when a client's value `v` is of point `p`'s data type exactly (a Float for a Float
/// point, not a Double or an Int32: the stack lets numbers of other types through). A point
/// whose type the device decides takes any scalar.
pub fn fits(p: &PointDef, v: &Variant) -> bool {
    let want = data_type(p);
    if want == DataTypeId::BaseDataType {
        return !matches!(v, Variant::Empty | Variant::Array(_));
    }
    v.data_type().is_some_and(|t| t.node_id == want)
}

/// A value a client wrote, as the JSON a command carries; `None` for a type commands do not
/// write (the server already refused a value of another type than the node's).
pub fn to_json(v: &Variant) -> Option<Value> {
    Some(match v {
        Variant::Boolean(b) => Value::from(*b),
        Variant::SByte(x) => Value::from(*x),
        Variant::Byte(x) => Value::from(*x),
        Variant::Int16(x) => Value::from(*x),
        Variant::UInt16(x) => Value::from(*x),
        Variant::Int32(x) => Value::from(*x),
        Variant::UInt32(x) => Value::from(*x),
        Variant::Int64(x) => Value::from(*x),
        Variant::UInt64(x) => Value::from(*x),
        // The shortest decimal that reads back as the same Float: what the client meant.
        Variant::Float(x) => serde_json::from_str::<Value>(&x.to_string()).ok()?,
        Variant::Double(x) => Value::from(*x),
        Variant::String(s) => Value::from(s.as_ref()),
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sources::catalogue::{DeviceDef, GroupDef};
    use serde_json::json;
    use std::time::Duration;

    /// Device `d` (Modbus) with `groups` and `points`.
    fn device(groups: Vec<GroupDef>, points: Vec<PointDef>) -> DeviceStatus {
        DeviceStatus::new(DeviceDef {
            name: "d".into(),
            source: "modbus/d".into(),
            protocol: "modbus_tcp",
            address: "h:502".into(),
            template: None,
            groups,
            points,
            details: Vec::new(),
        })
    }

    fn point(kind: Option<DataKind>, scale: Option<f64>) -> PointDef {
        PointDef {
            group: "main".into(),
            name: "p".into(),
            area: "holding_register",
            type_name: "u16".into(),
            kind,
            unit: None,
            scale,
            writable: false,
            min: None,
            max: None,
        }
    }

    #[test]
    fn a_scaled_point_is_a_double_and_values_fit_their_type_or_not_at_all() {
        assert_eq!(
            data_type(&point(Some(DataKind::U16), Some(0.1))),
            DataTypeId::Double
        );
        assert_eq!(
            data_type(&point(Some(DataKind::U16), Some(1.0))),
            DataTypeId::UInt16
        );
        let u16p = point(Some(DataKind::U16), None);
        assert_eq!(
            to_variant(&u16p, &json!(65535)),
            Some(Variant::UInt16(65535))
        );
        assert_eq!(to_variant(&u16p, &json!(65536)), None);
        assert_eq!(to_variant(&u16p, &json!(-1)), None);
        let any = point(None, None);
        assert_eq!(to_variant(&any, &json!(-3)), Some(Variant::Int64(-3)));
        assert_eq!(to_variant(&any, &json!("on")), Some(Variant::from("on")));
        assert_eq!(to_json(&Variant::Float(72.1)), Some(json!(72.1)));
        assert_eq!(to_json(&Variant::Int32(-5)), Some(json!(-5)));
        assert_eq!(to_json(&Variant::Empty), None);
    }

    #[test]
    fn a_value_is_good_while_fresh_uncertain_when_stale_and_bad_while_its_device_is_down() {
        let p = point(Some(DataKind::U16), None);
        let device = device(
            vec![GroupDef::new("main", Duration::from_millis(100))],
            vec![p.clone()],
        );
        let before = value(&p, None, &device, 0);
        assert_eq!(before.status, Some(StatusCode::BadCommunicationError));
        let mut points = serde_json::Map::new();
        points.insert("p".into(), json!({"value": 7, "quality": "good"}));
        device.values_in(0, &points, 1_000);
        device.set_state(ConnState::Connected);
        let live = device.live("main", "p");
        let fresh = value(&p, live.as_ref(), &device, 1_250);
        assert_eq!(fresh.status, Some(StatusCode::Good));
        assert_eq!(fresh.value, Some(Variant::UInt16(7)));
        assert_eq!(
            fresh.source_timestamp.map(|t| t.ticks()),
            Some(from_unix_ms(1_000).ticks())
        );
        let stale = value(&p, live.as_ref(), &device, 1_301);
        assert_eq!(stale.status, Some(StatusCode::UncertainLastUsableValue));
        device.set_state(ConnState::Backoff);
        let down = value(&p, live.as_ref(), &device, 1_250);
        assert_eq!(down.status, Some(StatusCode::BadCommunicationError));
        assert_eq!(
            down.value,
            Some(Variant::UInt16(7)),
            "the last value is kept"
        );
    }

    #[test]
    fn the_points_references_are_made_from_the_catalogue_and_not_kept() {
        use ua_server::address_space::DefaultTypeTree;
        use ReferenceTypeId::{HasComponent, HasProperty, HasTypeDefinition};
        let mut a = point(Some(DataKind::F32), None);
        (a.name, a.unit) = ("a".into(), Some("°C".into()));
        let mut b = point(Some(DataKind::U16), None);
        (b.name, b.group, b.min, b.max) = ("b".into(), "slow".into(), Some(0.0), Some(9.0));
        let mut c = point(Some(DataKind::U16), None);
        c.name = "c".into();
        let groups = vec![
            GroupDef::new("main", Duration::from_secs(1)),
            GroupDef::new("slow", Duration::from_secs(10)),
        ];
        let catalogue = Catalogue::new(vec![Arc::new(device(groups, vec![a, b, c]))]);
        let mut address_space = AddressSpace::new();
        address_space.add_namespace("urn:test", 2);
        let space = build(&mut address_space, 2, &catalogue, "1", &Gateway::default());
        let devices = catalogue.devices();
        let id = |s: &str| NodeId::new(2, s);
        let made = |s: &str| space.made(&devices, &id(s));
        let m = |kind, forward, target: NodeId| Made::new(kind, forward, target);

        assert_eq!(
            made("d/main"),
            Some(vec![
                m(HasComponent, true, id("d.a")),
                m(HasComponent, true, id("d.c"))
            ])
        );
        assert_eq!(
            made("d.a"),
            Some(vec![
                m(
                    HasTypeDefinition,
                    true,
                    VariableTypeId::AnalogItemType.into()
                ),
                m(HasComponent, false, id("d/main")),
                m(HasProperty, true, id("d.a#EngineeringUnits")),
            ])
        );
        assert_eq!(
            made("d.c"),
            Some(vec![
                m(
                    HasTypeDefinition,
                    true,
                    VariableTypeId::BaseDataVariableType.into()
                ),
                m(HasComponent, false, id("d/main")),
            ])
        );
        assert_eq!(
            made("d.b#EURange"),
            Some(vec![
                m(HasTypeDefinition, true, VariableTypeId::PropertyType.into()),
                m(HasProperty, false, id("d.b")),
            ])
        );
        assert_eq!(
            space.type_definition(&devices, &id("d.b#EURange")),
            Some(VariableTypeId::PropertyType.into())
        );
        // Not a property the point has, a folder, an unknown node, another namespace.
        for none in ["d.c#EURange", "d", "d.x", "@connector.version"] {
            assert_eq!(made(none), None, "{none}");
            assert_eq!(space.type_definition(&devices, &id(none)), None, "{none}");
        }
        assert_eq!(space.made(&devices, &NodeId::new(0, "d.a")), None);

        // The address space holds the nodes but none of their references; a folder keeps
        // its own.
        let tree = DefaultTypeTree::new();
        let kept = |node: &NodeId| {
            let both = opcua::types::BrowseDirection::Both;
            let none = None::<(NodeId, bool)>;
            address_space
                .find_references(node, none, &tree, both)
                .count()
        };
        for node in ["d.a", "d.b", "d.a#EngineeringUnits", "d.b#EURange"] {
            assert!(address_space.find_node(&id(node)).is_some(), "{node}");
            assert_eq!(kept(&id(node)), 0, "{node}");
        }
        assert_eq!(
            kept(&id("d/main")),
            2,
            "a folder keeps its type and its device"
        );
    }

    #[test]
    fn a_bad_point_keeps_its_devices_status_or_is_a_device_failure() {
        assert_eq!(
            point_status(&json!({"value": null, "quality": "bad", "status": "BadNodeIdUnknown"})),
            StatusCode::BadNodeIdUnknown
        );
        assert_eq!(
            point_status(&json!({"value": null, "quality": "bad", "error": "exception 2"})),
            StatusCode::BadDeviceFailure
        );
    }
}
