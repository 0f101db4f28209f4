//! The point catalogue: every device's points, whatever protocol reads them.
//!
//! Each protocol describes its devices once, from their validated config, as a
//! [`DeviceDef`]: the device's name, its records' source, where it is, its groups and its
//! points with their data type, unit, scale, bounds and whether commands may write them. The
//! running connector holds one [`DeviceStatus`] per device (built from its definition), whose
//! live values (value, quality, timestamp per point) the device's task keeps current.
//!
//! Everything that reads points (Sparkplug births and data, the trends, the status page,
//! the commands' list of writable points) reads this catalogue and never names a protocol.

use std::collections::HashMap;
use std::sync::{Arc, RwLock};
use std::time::Duration;

use serde_json::Value;
use tokio::sync::Notify;

use crate::commands::WritablePoint;
use crate::sources::status::DeviceStatus;

/// A point's value type, when the config fixes it before the first read. Protocols whose
/// device decides (OPC-UA without a configured type) leave it out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DataKind {
    /// true / false.
    Bool,
    /// Unsigned, 16 bits.
    U16,
    /// Signed, 16 bits.
    I16,
    /// Unsigned, 32 bits.
    U32,
    /// Signed, 32 bits.
    I32,
    /// Unsigned, 64 bits.
    U64,
    /// Signed, 64 bits.
    I64,
    /// IEEE 754 single precision.
    F32,
    /// IEEE 754 double precision (also every scaled value).
    F64,
    /// Text.
    String,
}

/// One point of a device, as its config defines it.
#[derive(Debug, Clone, PartialEq)]
pub struct PointDef {
    /// The group that reads it (its records' key).
    pub group: String,
    /// Its name (its key in the group's records).
    pub name: String,
    /// Where it lives in the device, in the protocol's words (`holding_register`, `coil`,
    /// `node`, ...), as the commands' list shows it.
    pub area: &'static str,
    /// Its data type in the config's words (`u16`, `f32`, `Double`, ...).
    pub type_name: String,
    /// The type of its value, when known before the first read.
    pub kind: Option<DataKind>,
    /// Its engineering unit.
    pub unit: Option<String>,
    /// The multiplier from raw to engineering value.
    pub scale: Option<f64>,
    /// Commands may write it.
    pub writable: bool,
    /// Lowest value a command may write, in engineering units.
    pub min: Option<f64>,
    /// Highest value a command may write, in engineering units.
    pub max: Option<f64>,
}

/// One poll group of a device, as its config defines it.
#[derive(Debug, Clone, PartialEq)]
pub struct GroupDef {
    /// Its name (its records' key).
    pub name: String,
    /// How often it is polled (for a pushed group: its publishing interval).
    pub interval: Duration,
    /// True when the device pushes its changes (an OPC-UA subscription): a value that does
    /// not change is not sent again, so its age says nothing.
    pub pushed: bool,
}

impl GroupDef {
    /// Group `name` polled every `interval`.
    pub fn new(name: &str, interval: Duration) -> Self {
        Self {
            name: name.to_string(),
            interval,
            pushed: false,
        }
    }

    /// The same group, pushed by the device when `pushed`.
    pub fn pushed(self, pushed: bool) -> Self {
        Self { pushed, ..self }
    }
}

/// One device, as its config defines it.
#[derive(Debug, Clone, PartialEq)]
pub struct DeviceDef {
    /// Its name.
    pub name: String,
    /// Its records' source: `<family>/<name>`, e.g. `modbus/press-1`.
    pub source: String,
    /// Its protocol as `devices[].protocol` names it (`modbus_tcp`, `opcua`, ...).
    pub protocol: &'static str,
    /// Where it is: `host:port`, a serial device and unit, an endpoint URL.
    pub address: String,
    /// The template it was made from.
    pub template: Option<String>,
    /// Its groups, in config order.
    pub groups: Vec<GroupDef>,
    /// Its points, in config order.
    pub points: Vec<PointDef>,
    /// Fields of its protocol that its `/api/status` entry shows besides the common ones
    /// (an OPC-UA device's `endpoint`).
    pub details: Vec<(&'static str, Value)>,
}

impl DeviceDef {
    /// Its writable points, as the commands service lists them.
    pub fn writable(&self) -> Vec<WritablePoint> {
        self.points
            .iter()
            .filter(|p| p.writable)
            .map(|p| WritablePoint {
                name: p.name.clone(),
                area: p.area,
                data_type: p.type_name.clone(),
                min: p.min,
                max: p.max,
            })
            .collect()
    }
}

/// A point's live value.
#[derive(Debug, Clone, PartialEq)]
pub struct Live {
    /// The value (`null` when bad).
    pub value: Value,
    /// True when the device answered it good.
    pub good: bool,
    /// Unix milliseconds of the poll (or notification) it came with.
    pub ts_ms: u64,
    /// The point's entry in the group's last record when it carries more than its value and
    /// quality (a bad point's `error`, `exception` or `status`, a unit); `null` otherwise.
    pub detail: Value,
}

/// Every device of the connector with its points and their live values, in config order.
/// Its clones share one list, which a reload replaces whole ([`Self::replace`]).
#[derive(Debug, Clone, Default)]
pub struct Catalogue {
    list: Arc<RwLock<Arc<Listed>>>,
    changed: Arc<Notify>,
}

/// The devices of one config.
#[derive(Debug, Default)]
pub struct Listed {
    devices: Vec<Arc<DeviceStatus>>,
    by_source: HashMap<String, usize>,
}

impl std::ops::Deref for Listed {
    type Target = [Arc<DeviceStatus>];

    fn deref(&self) -> &Self::Target {
        &self.devices
    }
}

impl Catalogue {
    /// The catalogue of `devices`.
    pub fn new(devices: Vec<Arc<DeviceStatus>>) -> Self {
        let changed = Arc::new(Notify::new());
        let list = Arc::new(RwLock::new(listed(devices, &changed)));
        Self { list, changed }
    }

    /// Lists `devices` in the place of the ones listed (a reload: a device kept is listed
    /// with the status it had), and wakes the watcher.
    pub fn replace(&self, devices: Vec<Arc<DeviceStatus>>) {
        let listed = listed(devices, &self.changed);
        match self.list.write() {
            Ok(mut l) => *l = listed,
            Err(poisoned) => *poisoned.into_inner() = listed,
        }
        self.changed.notify_one();
    }

    /// Woken (one waiter) when a device polled or its connection state changed.
    pub fn changed(&self) -> &Notify {
        &self.changed
    }

    /// Every device, in config order, as listed now.
    pub fn devices(&self) -> Arc<Listed> {
        // Only `replace` writes, and it writes one whole value.
        match self.list.read() {
            Ok(l) => Arc::clone(&l),
            Err(poisoned) => Arc::clone(&poisoned.into_inner()),
        }
    }

    /// True without devices.
    pub fn is_empty(&self) -> bool {
        self.devices().is_empty()
    }

    /// The device whose records carry `source`.
    pub fn by_source(&self, source: &str) -> Option<Arc<DeviceStatus>> {
        let list = self.devices();
        let i = *list.by_source.get(source)?;
        list.devices.get(i).cloned()
    }

    /// The device named `name`.
    pub fn by_name(&self, name: &str) -> Option<Arc<DeviceStatus>> {
        self.devices().iter().find(|d| d.def.name == name).cloned()
    }

    /// Point `name` of device `device`, with its live value once read.
    pub fn point(&self, device: &str, name: &str) -> Option<(PointDef, Option<Live>)> {
        let d = self.by_name(device)?;
        let def = d.def.points.iter().find(|p| p.name == name)?;
        Some((def.clone(), d.live(&def.group, name)))
    }
}

/// `devices` as one list, each waking `changed` at its polls and changes of state.
fn listed(devices: Vec<Arc<DeviceStatus>>, changed: &Arc<Notify>) -> Arc<Listed> {
    let by_source = devices
        .iter()
        .enumerate()
        .map(|(i, d)| (d.def.source.clone(), i))
        .collect();
    for d in &devices {
        d.watch(Arc::clone(changed));
    }
    Arc::new(Listed { devices, by_source })
}

/// The value in engineering units of raw number `x` at a point with `scale` and `offset`
/// (each absent: 1 and 0). A `whole` raw number (from an integer) times `scale` plus
/// `offset` has no more decimals than they have, so the binary noise is rounded away (`41 *
/// 0.1` is 4.1, not 4.1000000000000005); a float is kept as it is: its digits are the
/// device's. What a poll reads, and what a command's rounded raw number will read as (its
/// `min` / `max` are checked on it).
pub fn engineering(x: f64, scale: Option<f64>, offset: Option<f64>, whole: bool) -> f64 {
    let (scale, offset) = (scale.unwrap_or(1.0), offset.unwrap_or(0.0));
    let mut v = x * scale + offset;
    if whole {
        let places = decimals(scale).max(decimals(offset));
        let p = 10f64.powi(i32::from(places));
        let rounded = (v * p).round() / p;
        if rounded.is_finite() {
            v = rounded;
        }
    }
    v
}

/// The decimals of `x` as written in a config (`0.1` has 1, `0.25` has 2, `5` has 0), at
/// most 12 (past that a float has no decimals worth keeping).
pub fn decimals(x: f64) -> u8 {
    let mut p = 1.0;
    for places in 0..12u8 {
        if ((x * p).round() / p - x).abs() <= f64::EPSILON * x.abs().max(1.0) {
            return places;
        }
        p *= 10.0;
    }
    12
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn def() -> DeviceDef {
        let point = |name: &str, writable| PointDef {
            group: "main".into(),
            name: name.into(),
            area: "holding_register",
            type_name: "u16".into(),
            kind: Some(DataKind::U16),
            unit: Some("bar".into()),
            scale: None,
            writable,
            min: Some(0.0),
            max: Some(10.0),
        };
        DeviceDef {
            name: "press-1".into(),
            source: "modbus/press-1".into(),
            protocol: "modbus_tcp",
            address: "h:502".into(),
            template: None,
            groups: vec![GroupDef::new("main", Duration::from_secs(1))],
            points: vec![point("p", false), point("sp", true)],
            details: Vec::new(),
        }
    }

    #[test]
    fn a_point_is_found_by_device_and_name_with_its_live_value() {
        let status = Arc::new(DeviceStatus::new(def()));
        let cat = Catalogue::new(vec![Arc::clone(&status)]);
        let (p, live) = cat.point("press-1", "sp").expect("catalogued");
        assert!(p.writable && live.is_none());
        let mut points = serde_json::Map::new();
        points.insert("sp".into(), json!({"value": 4, "quality": "good"}));
        status.values_in(0, &points, 1234);
        let (_, live) = cat.point("press-1", "sp").expect("catalogued");
        let live = live.expect("read");
        assert_eq!((live.value, live.good, live.ts_ms), (json!(4), true, 1234));
        assert!(cat.by_source("modbus/press-1").is_some());
        assert_eq!(def().writable().len(), 1);
    }
}
