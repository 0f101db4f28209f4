//! `devices:`: the field devices the pollers read, one list for every protocol.
//!
//! An entry is read in two parts, as a `sinks:` entry is ([`crate::sinks::config`]): the keys
//! every device has ([`RawDeviceCommon`]: `name`, `template`, `vars`, `hold_ms`) are taken out
//! of it first, and the rest is read as [`RawDeviceKind`], a closed serde enum tagged by
//! `protocol` whose variants are the protocols' own raw structs, each defined and validated
//! in its folder's `config.rs`. So a key of another protocol (an `endpoint` on a Modbus
//! device) is an unknown key with its path like any typo, and every problem of an entry is
//! reported, not only the first. Templates are merged into their devices as JSON before an
//! entry is read ([`crate::sources::templates`]), so they work alike for every protocol.
//!
//! Poll groups are shared: each names an interval, and points (Modbus, S7) or nodes (OPC-UA)
//! say which group polls them. The helpers below check what several protocols have in common
//! (a TCP address, the request timing, groups, point names), each from the pieces it reads.

use std::time::Duration;

use serde::Deserialize;
use serde_json::{Map, Value};

use crate::config::checks::{checked_name, in_range};
use crate::config::{fields_of, parse_tree, Problems};
use crate::sources::catalogue::DeviceDef;
use crate::sources::modbus::config::{
    check_lines, validate_modbus_device, ModbusDeviceConfig, RawModbusDevice,
};
use crate::sources::opcua::config::{validate_opcua_device, OpcuaDeviceConfig, RawOpcuaDevice};
use crate::sources::s7::config::{validate_s7_device, RawS7Device, S7DeviceConfig};

/// `devices[]`: the keys every device has, whatever its protocol. The others are the
/// protocol's own, by `protocol` ([`RawDeviceKind`]).
#[derive(Debug, Default, Deserialize)]
pub struct RawDeviceCommon {
    /// The device's name; its records carry `source: <protocol family>/<name>`, e.g.
    /// `modbus/press-1`. 1 to 64 letters, digits, '-' or '_', unique among devices.
    pub name: Option<String>,
    /// The template this device starts from (a `templates[].name`): the device has the
    /// template's keys, each key given here replacing the template's, and its `points`,
    /// `nodes` and `groups` merged by name. `/api/status` names it.
    pub template: Option<String>,
    /// Values for `{{NAME}}` in the device's OPC-UA node ids, e.g. `{line: L1}` for
    /// `ns=2;s={{line}}.Temperature`; a template's `vars` are the defaults. `{{device}}` is
    /// always the device's name.
    pub vars: Option<std::collections::BTreeMap<String, Value>>,
    /// How long a poll is held, in milliseconds, while a sink refuses its sample (`block` at
    /// the quota); then the sample is dropped and counted. Default 10000.
    pub hold_ms: Option<u64>,
}

/// A device: its name and the keys every device has, its `protocol`, and the keys of that
/// protocol (a key of another protocol is an unknown key).
// The one list of the protocols a config can name, with their families (`PROTOCOLS`) beside
// it; the keys of `RawDeviceCommon` are taken out before an entry is read as this.
#[derive(Debug, Deserialize)]
pub enum RawDeviceKind {
    /// `protocol: modbus_tcp`: a Modbus device over TCP.
    #[serde(rename = "modbus_tcp")]
    ModbusTcp(RawModbusDevice),
    /// `protocol: modbus_rtu`: a Modbus device on a serial line.
    #[serde(rename = "modbus_rtu")]
    ModbusRtu(RawModbusDevice),
    /// `protocol: opcua`: an OPC-UA server.
    #[serde(rename = "opcua")]
    Opcua(RawOpcuaDevice),
    /// `protocol: s7`: a Siemens S7 PLC over ISO-on-TCP.
    #[serde(rename = "s7")]
    S7(RawS7Device),
}

/// Every protocol `devices[].protocol` names (each a variant of [`RawDeviceKind`]), with the
/// family its devices' records carry in their source (`modbus/press-1`).
pub const PROTOCOLS: [(&str, &str); 4] = [
    ("modbus_tcp", "modbus"),
    ("modbus_rtu", "modbus"),
    ("opcua", "opcua"),
    ("s7", "s7"),
];

/// The source family of `protocol`'s devices (`modbus` for `modbus_tcp`).
pub fn family(protocol: &str) -> Option<&'static str> {
    PROTOCOLS
        .iter()
        .find(|(p, _)| *p == protocol)
        .map(|(_, f)| *f)
}

/// True when `source` is a device's (`<family>/<name>` of a protocol's family).
pub fn is_device_source(source: &str) -> bool {
    PROTOCOLS.iter().any(|(_, f)| {
        source
            .strip_prefix(f)
            .is_some_and(|rest| rest.starts_with('/'))
    })
}

/// One `devices[]` (or `templates[]`) entry as read.
#[derive(Debug, Default)]
pub struct RawDeviceEntry {
    /// The keys every device has (each `None` when absent or unusable).
    pub common: RawDeviceCommon,
    /// The protocol and its keys; `None` when the protocol is missing, unknown, or the keys
    /// cannot be read (the problem is reported already).
    pub kind: Option<RawDeviceKind>,
}

/// Reads one entry at `at`: the keys of [`RawDeviceCommon`] taken out, the rest read by its
/// `protocol` as [`RawDeviceKind`]. Every unknown key and wrong-typed value is pushed to `p`
/// with its path. Without `protocol` the rest is not read, and that is a problem only when
/// `protocol_required` (a template may leave it to its devices).
pub fn read_device(
    entry: &Map<String, Value>,
    at: &str,
    protocol_required: bool,
    p: &mut Problems,
) -> RawDeviceEntry {
    // The struct's own field names: not a second list of them.
    let common_keys = fields_of::<RawDeviceCommon>();
    let mut rest = entry.clone();
    let mut common = Map::new();
    for key in common_keys {
        if let Some(v) = rest.shift_remove(*key) {
            common.insert((*key).to_string(), v);
        }
    }
    let (common, problems) = parse_tree::<RawDeviceCommon>(Value::Object(common), at, false);
    p.0.extend(problems.0);
    let kind = match rest.shift_remove("protocol") {
        Some(Value::String(protocol)) if family(&protocol).is_some() => {
            let tree = Value::Object([(protocol, Value::Object(rest))].into_iter().collect());
            let (kind, problems) = parse_tree::<RawDeviceKind>(tree, at, true);
            p.0.extend(problems.0);
            kind
        }
        None if !protocol_required => None,
        None => {
            p.push(format!("{at}.protocol"), "is required");
            None
        }
        Some(other) => {
            let known: Vec<&str> = PROTOCOLS.iter().map(|(p, _)| *p).collect();
            let (last, first) = known.split_last().unwrap_or((&"", &[]));
            let got = match &other {
                Value::String(s) => format!("{s:?}"),
                v => v.to_string(),
            };
            p.push(
                format!("{at}.protocol"),
                format!("expected {} or {last}, got {got}", first.join(", ")),
            );
            None
        }
    };
    RawDeviceEntry {
        common: common.unwrap_or_default(),
        kind,
    }
}

impl RawDeviceKind {
    /// The `protocol` that names it.
    pub fn protocol(&self) -> &'static str {
        match self {
            Self::ModbusTcp(_) => "modbus_tcp",
            Self::ModbusRtu(_) => "modbus_rtu",
            Self::Opcua(_) => "opcua",
            Self::S7(_) => "s7",
        }
    }
}

/// The keys every device has, validated.
#[derive(Debug, Clone, PartialEq)]
pub struct DeviceCommon {
    /// Its name.
    pub name: String,
    /// The template it was made from.
    pub template: Option<String>,
    /// `hold_ms`: how long a refused sample holds the loop.
    pub hold: Duration,
}

impl RawDeviceCommon {
    /// `template` and `hold_ms` validated [the delivery document's 10 s; 0..=600000], with
    /// `name` (checked by the caller, who knows the other devices' names).
    pub fn validate(&self, name: String, at: &str, p: &mut Problems) -> DeviceCommon {
        let ms = in_range(
            self.hold_ms,
            crate::sources::hold::DEFAULT_HOLD.as_millis() as u64,
            0..=600_000,
            format!("{at}.hold_ms"),
            p,
        );
        DeviceCommon {
            name,
            template: self.template.clone(),
            hold: Duration::from_millis(ms),
        }
    }
}

/// `devices[].groups[]` of a polled device (Modbus, S7; OPC-UA groups have keys of their own).
#[derive(Debug, Default, Deserialize)]
pub struct RawGroup {
    /// The group's name: the key of its records. Unique within the device.
    pub name: Option<String>,
    /// How often the group is polled, in milliseconds (10 to 86400000). Default 1000.
    pub interval_ms: Option<u64>,
}

/// A poll group, validated.
#[derive(Debug, Clone, PartialEq)]
pub struct GroupConfig {
    /// Its name.
    pub name: String,
    /// Its interval.
    pub interval: Duration,
}

/// `devices:`, validated, by protocol.
#[derive(Debug, Clone, Default)]
pub struct DevicesConfig {
    /// The Modbus TCP and RTU devices.
    pub modbus: Vec<ModbusDeviceConfig>,
    /// The OPC-UA devices.
    pub opcua: Vec<OpcuaDeviceConfig>,
    /// The S7 PLCs.
    pub s7: Vec<S7DeviceConfig>,
}

impl DevicesConfig {
    /// The names of the devices with a point marked `writable: true`, in config order.
    pub fn with_writable_points(&self) -> Vec<String> {
        self.catalogue()
            .into_iter()
            .filter(|d| d.points.iter().any(|p| p.writable))
            .map(|d| d.name)
            .collect()
    }

    /// Every device as the point catalogue lists it, by protocol (Modbus, OPC-UA, S7), each
    /// in config order. The one place that lists the protocols a running connector reads.
    pub fn catalogue(&self) -> Vec<DeviceDef> {
        let modbus = self.modbus.iter().map(ModbusDeviceConfig::describe);
        let opcua = self.opcua.iter().map(OpcuaDeviceConfig::describe);
        let s7 = self.s7.iter().map(S7DeviceConfig::describe);
        modbus.chain(opcua).chain(s7).collect()
    }

    /// Every device's source name, as flows name it: `modbus/<name>`.
    pub fn source_names(&self) -> Vec<String> {
        self.catalogue().into_iter().map(|d| d.source).collect()
    }
}

/// Reads and validates `devices:` (templates expanded). A value left out for its wrong type
/// is not reported a second time as missing.
pub fn validate_devices(raw: Option<&[Value]>, path: &str, p: &mut Problems) -> DevicesConfig {
    let mut out = DevicesConfig::default();
    let mut names: Vec<String> = Vec::new();
    for (i, v) in raw.unwrap_or_default().iter().enumerate() {
        let at = format!("{path}[{i}]");
        let Value::Object(map) = v else {
            p.push(
                at,
                "expected a mapping with name, protocol and the protocol's keys",
            );
            continue;
        };
        let mut read = Problems::default();
        let entry = read_device(map, &at, true, &mut read);
        let mut checked = Problems::default();
        let name = checked_name(
            entry.common.name.as_deref(),
            &at,
            |n| names.iter().any(|o| o == n),
            &mut checked,
        )
        .unwrap_or_default();
        names.push(name.clone());
        let common = entry.common.validate(name, &at, &mut checked);
        let c = &mut checked;
        match &entry.kind {
            Some(kind @ (RawDeviceKind::ModbusTcp(d) | RawDeviceKind::ModbusRtu(d))) => {
                out.modbus
                    .extend(validate_modbus_device(d, common, kind.protocol(), &at, c));
            }
            Some(RawDeviceKind::Opcua(d)) => {
                out.opcua.extend(validate_opcua_device(d, common, &at, c));
            }
            Some(RawDeviceKind::S7(d)) => out.s7.extend(validate_s7_device(d, common, &at, c)),
            None => {}
        }
        let unreadable: Vec<String> = read.0.iter().map(|q| q.path.clone()).collect();
        p.0.extend(read.0);
        p.0.extend(
            checked
                .0
                .into_iter()
                .filter(|q| !unreadable.contains(&q.path)),
        );
    }
    check_lines(&out.modbus, path, p);
    out
}

/// `host` and `port` of a device of `protocol` reached over TCP, `default_port` when `port`
/// is not set: every problem with its path.
pub fn tcp_address(
    host: Option<&str>,
    port: Option<u64>,
    protocol: &str,
    default_port: u16,
    at: &str,
    p: &mut Problems,
) -> (String, u16) {
    let host = match host {
        Some(h) if !h.trim().is_empty() => h.to_string(),
        Some(_) => {
            p.push(format!("{at}.host"), "must not be empty");
            String::new()
        }
        None => {
            p.push(format!("{at}.host"), format!("is required for {protocol}"));
            String::new()
        }
    };
    let port = match port {
        None => default_port,
        Some(n) => match u16::try_from(n) {
            Ok(port) if port > 0 => port,
            _ => {
                p.push(format!("{at}.port"), format!("{n} is outside 1..=65535"));
                default_port
            }
        },
    };
    (host, port)
}

/// The timing keys of a polled device (Modbus, S7), validated.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Timing {
    /// `timeout_ms`: one request's answer [1000 ms; 10..=60000].
    pub timeout: Duration,
    /// `backoff_max_secs`: the breaker's longest wait [60 s; 1..=3600].
    pub backoff_max: Duration,
}

/// A polled device's `timeout_ms` and `backoff_max_secs`: every problem with its path.
pub fn timing(
    timeout_ms: Option<u64>,
    backoff_max_secs: Option<u64>,
    at: &str,
    p: &mut Problems,
) -> Timing {
    let timeout = in_range(timeout_ms, 1000, 10..=60_000, format!("{at}.timeout_ms"), p);
    let backoff_max = in_range(
        backoff_max_secs,
        60,
        1..=3600,
        format!("{at}.backoff_max_secs"),
        p,
    );
    Timing {
        timeout: Duration::from_millis(timeout),
        backoff_max: Duration::from_secs(backoff_max),
    }
}

/// Validates `groups:` of one device: every problem with its path. Without groups, one group
/// `default` every second.
pub fn validate_groups(raw: Option<&[RawGroup]>, at: &str, p: &mut Problems) -> Vec<GroupConfig> {
    let Some(raw) = raw else {
        return vec![GroupConfig {
            name: "default".into(),
            interval: Duration::from_secs(1),
        }];
    };
    if raw.is_empty() {
        p.push(format!("{at}.groups"), "must not be empty when given");
    }
    let mut out: Vec<GroupConfig> = Vec::new();
    for (i, g) in raw.iter().enumerate() {
        let gat = format!("{at}.groups[{i}]");
        let name = checked_name(
            g.name.as_deref(),
            &gat,
            |n| out.iter().any(|o| o.name == n),
            p,
        )
        .unwrap_or_default();
        let ms = g.interval_ms.unwrap_or(1000);
        if !(10..=86_400_000).contains(&ms) {
            p.push(
                format!("{gat}.interval_ms"),
                format!("{ms} is outside 10..=86400000"),
            );
        }
        out.push(GroupConfig {
            name,
            interval: Duration::from_millis(ms),
        });
    }
    out
}

/// A point's `name` (at `pat`, `points[i]`): 1 to 64 characters, not `taken` by an earlier
/// point.
pub fn point_name(
    name: Option<&str>,
    pat: &str,
    taken: impl Fn(&str) -> bool,
    p: &mut Problems,
) -> String {
    match name {
        None => {
            p.push(format!("{pat}.name"), "is required");
            String::new()
        }
        Some(n) if n.is_empty() || n.len() > 64 => {
            p.push(format!("{pat}.name"), "must be 1 to 64 characters");
            String::new()
        }
        Some(n) => {
            if taken(n) {
                p.push(format!("{pat}.name"), format!("{n:?} is used twice"));
            }
            n.to_string()
        }
    }
}

/// The index in `groups` of a point's `group` (at `pat`, `points[i]`), which may be left out
/// when the device has one group.
pub fn point_group(
    group: Option<&str>,
    groups: &[GroupConfig],
    pat: &str,
    p: &mut Problems,
) -> usize {
    match group {
        None if groups.len() <= 1 => 0,
        None => {
            p.push(
                format!("{pat}.group"),
                "is required when the device has more than one group",
            );
            0
        }
        Some(g) => match groups.iter().position(|c| c.name == g) {
            Some(i) => i,
            None => {
                p.push(format!("{pat}.group"), format!("no group is named {g:?}"));
                0
            }
        },
    }
}

/// Reports each group no point is in (`used`: every point's group), once there are points.
pub fn check_groups_used(groups: &[GroupConfig], used: &[usize], at: &str, p: &mut Problems) {
    if used.is_empty() {
        return;
    }
    for (g, group) in groups.iter().enumerate() {
        if !used.contains(&g) {
            p.push(
                format!("{at}.groups[{g}]"),
                format!("no point is in group {:?}", group.name),
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use crate::config::from_yaml;
    use crate::sources::modbus::config::{DataType, Order, RegisterKind, Transport};

    use crate::config::test_problems as problems;

    #[test]
    fn every_problem_of_a_modbus_device_is_reported_with_its_path() {
        let errs = problems(
            r#"
devices:
  - name: press-1
    protocol: modbus_tcp
    port: 70000
    baud: 9600
    groups: [{name: fast, interval_ms: 5}, {name: slow}]
    points:
      - {name: a, register: 70000, group: fast}
      - {name: b, register: 1, type: f16, group: slow}
      - {name: c, register: 65535, type: u32, group: fast}
      - {name: d, register: 2, kind: coil, type: u16, group: fast}
      - {name: e, register: 3, type: string, group: fast}
      - {name: f, register: 4}
      - {name: a, register: 5, group: nope, word_order: middle}
  - name: press-1
    protocol: profibus
"#,
        );
        for want in [
            "devices[0].host: is required for modbus_tcp",
            "devices[0].port: 70000 is outside 1..=65535",
            "devices[0].baud: is a modbus_rtu setting",
            "devices[0].groups[0].interval_ms: 5 is outside 10..=86400000",
            "devices[0].points[0].register: 70000 is outside 0..=65535",
            "devices[0].points[1].type: expected bool, u16, i16, u32, i32, u64, i64, f32, f64 or string, got \"f16\"",
            "devices[0].points[2].register: the point ends at 65536, past 65535",
            "devices[0].points[3].type: coils and discrete inputs are bool, got \"u16\"",
            "devices[0].points[4].length: is required for a string",
            "devices[0].points[5].group: is required when the device has more than one group",
            "devices[0].points[6].name: \"a\" is used twice",
            "devices[0].points[6].group: no group is named \"nope\"",
            "devices[0].points[6].word_order: expected big or little, got \"middle\"",
            "devices[1].name: \"press-1\" is used twice",
            "devices[1].protocol: expected modbus_tcp, modbus_rtu, opcua or s7, got \"profibus\"",
        ] {
            assert!(errs.iter().any(|e| e == want), "missing {want:?} in {errs:#?}");
        }
    }

    #[test]
    fn a_point_ending_exactly_at_65535_is_fine() {
        // Regression guard for the range check above: 65534 + 2 registers ends at 65535.
        let cfg = from_yaml(
            "connector:\n  data_dir: /d\ndevices:\n  - {name: x, protocol: modbus_tcp, host: h, points: [{name: a, register: 65534, type: u16}, {name: b, register: 65532, type: u32}]}\n",
        );
        assert!(cfg.is_ok(), "{cfg:?}");
    }

    #[test]
    fn rtu_devices_on_one_line_must_agree_on_its_settings_and_differ_in_unit() {
        let errs = problems(
            r#"
devices:
  - {name: a, protocol: modbus_rtu, port: /dev/ttyUSB0, unit: 1, baud: 9600, points: [{name: p, register: 0}]}
  - {name: b, protocol: modbus_rtu, port: /dev/ttyUSB0, unit: 1, baud: 19200, points: [{name: p, register: 0}]}
  - {name: c, protocol: modbus_rtu, port: 502, host: x, unit: 248, points: [{name: p, register: 0}]}
"#,
        );
        assert!(
            errs.iter()
                .any(|e| e.contains("share /dev/ttyUSB0 but not its settings")),
            "{errs:#?}"
        );
        assert!(
            errs.iter()
                .any(|e| e.contains("share /dev/ttyUSB0 and unit 1")),
            "{errs:#?}"
        );
        assert!(
            errs.iter()
                .any(|e| e.starts_with("devices[2].port: expected a serial device")),
            "{errs:#?}"
        );
        assert!(
            errs.contains(&"devices[2].host: is a modbus_tcp setting".to_string()),
            "{errs:#?}"
        );
        assert!(
            errs.contains(&"devices[2].unit: 248 is outside 0..=247".to_string()),
            "{errs:#?}"
        );
    }

    #[test]
    fn a_valid_device_gets_its_defaults_and_names_a_flow_source() {
        let cfg = from_yaml(
            r#"
connector: {data_dir: /d}
devices:
  - name: press-1
    protocol: modbus_tcp
    host: 10.0.0.5
    points:
      - {name: temp, register: 10, type: f32, word_order: little, unit: "°C"}
      - {name: run, register: 3, kind: discrete}
"#,
        )
        .expect("valid");
        let d = &cfg.devices.modbus[0];
        assert_eq!(
            d.transport,
            Transport::Tcp {
                host: "10.0.0.5".into(),
                port: 502
            }
        );
        assert_eq!(d.unit, 1);
        assert_eq!(d.hold, crate::sources::hold::DEFAULT_HOLD);
        assert_eq!(d.groups.len(), 1);
        assert_eq!(d.groups[0].name, "default");
        assert_eq!(d.points[0].data_type, DataType::F32);
        assert_eq!(d.points[0].word_order, Order::Little);
        assert_eq!(d.points[1].kind, RegisterKind::Discrete);
        assert_eq!(d.points[1].data_type, DataType::Bool);
        assert!(cfg.source_names().contains(&"modbus/press-1".to_string()));
    }

    #[test]
    fn a_problem_in_a_template_names_the_device_and_the_templates_own_path() {
        let plain: String = (0..7)
            .map(|i| format!("  - {{name: m{i}, protocol: modbus_tcp, host: h, points: [{{name: a, register: 1}}]}}\n"))
            .collect();
        let errs = problems(&format!(
            r#"
templates:
  - name: press
    protocol: modbus_tcp
    points:
      - {{name: a, register: 0}}
      - {{name: b, register: 1}}
      - {{name: c, register: 2, regster: 3}}
      - {{name: d, register: 70000}}
devices:
{plain}  - {{name: press-1, template: press, host: h, points: [{{name: e, register: 5, type: f16}}]}}
  - {{name: press-2, template: press, host: h}}
"#
        ));
        assert_eq!(
            errs,
            [
                "templates[0].points[2].regster: unknown key; did you mean `register`?",
                "devices[7] (template press): points[3].register: 70000 is outside 0..=65535 (and in 1 more device of template press)",
                "devices[7].points[0].type: expected bool, u16, i16, u32, i32, u64, i64, f32, f64 or string, got \"f16\"",
            ],
            "{errs:#?}"
        );
    }

    #[test]
    fn devices_made_from_a_template_are_validated_like_any_other_and_remember_it() {
        let cfg = from_yaml(
            r#"
connector: {data_dir: /d}
templates:
  - name: press
    protocol: modbus_tcp
    timeout_ms: 300
    groups: [{name: fast, interval_ms: 100}, {name: slow, interval_ms: 5000}]
    points:
      - {name: temp, group: fast, register: 0, type: f32}
      - {name: parts, group: slow, register: 4, type: u32}
devices:
  - {name: press-1, template: press, host: 10.0.0.1}
  - {name: press-2, template: press, host: 10.0.0.2, unit: 2, groups: [{name: slow, interval_ms: 60000}],
     points: [{name: speed, group: fast, register: 20}]}
  - {name: other, protocol: modbus_tcp, host: 10.0.0.3, points: [{name: x, register: 1}]}
"#,
        )
        .expect("valid");
        let [a, b, c] = &cfg.devices.modbus[..] else {
            panic!("three devices: {:?}", cfg.devices.modbus)
        };
        assert_eq!(a.timeout, std::time::Duration::from_millis(300));
        assert_eq!(a.points.len(), 2);
        assert_eq!((b.unit, b.points.len()), (2, 3));
        assert_eq!(b.groups[1].interval, std::time::Duration::from_secs(60));
        assert_eq!(c.points.len(), 1);
        assert_eq!(b.template.as_deref(), Some("press"));
        assert_eq!(c.template, None);
    }

    #[test]
    fn a_key_of_another_protocol_is_an_unknown_key_with_its_path() {
        let errs = problems(
            r#"
devices:
  - name: m
    protocol: modbus_tcp
    host: h
    endpoint: "opc.tcp://h:4840/"
    groups: [{name: g, subscribe: true}]
    points: [{name: a, register: 1, address: DB1.DBW0}]
  - name: o
    protocol: opcua
    endpoint: "opc.tcp://h:4840/"
    unit: 3
    nodes: [{node_id: "i=2258", name: t, register: 4}]
  - name: s
    protocol: s7
    host: h
    groups: [{name: g, deadband: 1}]
    points: [{name: a, address: DB1.DBW0, word_order: little}]
"#,
        );
        assert_eq!(
            errs,
            [
                "devices[0].endpoint: unknown key",
                "devices[0].groups[0].subscribe: unknown key",
                "devices[0].points[0].address: unknown key",
                "devices[1].unit: unknown key",
                "devices[1].nodes[0].register: unknown key",
                "devices[2].groups[0].deadband: unknown key",
                "devices[2].points[0].word_order: unknown key",
            ],
            "{errs:#?}"
        );
    }

    #[test]
    fn every_problem_of_an_entry_is_reported_unknown_keys_wrong_types_and_values_alike() {
        let errs = problems(
            r#"
devices:
  - name: m
    protocol: modbus_rtu
    port: /dev/ttyUSB0
    hold_ms: lots
    baud: fast
    parity: mark
    endpoint: "opc.tcp://h:4840/"
    points:
      - {name: a, register: x}
      - {name: b, register: 70000, nodes: 1}
"#,
        );
        assert_eq!(
            errs,
            [
                "devices[0].hold_ms: invalid type: string \"lots\", expected u64",
                "devices[0].baud: invalid type: string \"fast\", expected u64",
                "devices[0].points[0].register: invalid type: string \"x\", expected u64",
                "devices[0].points[1].nodes: unknown key",
                "devices[0].endpoint: unknown key",
                "devices[0].parity: expected none, even or odd, got \"mark\"",
                "devices[0].points[1].register: 70000 is outside 0..=65535",
            ],
            "{errs:#?}"
        );
    }

    #[test]
    fn an_entry_without_a_usable_protocol_says_so() {
        let errs = problems(
            "devices:\n  - {name: a, host: h}\n  - {name: b, protocol: 7}\n  - {name: c, protocol: Modbus_TCP}\n  - 7\n",
        );
        assert_eq!(
            errs,
            [
                "devices[0].protocol: is required",
                "devices[1].protocol: expected modbus_tcp, modbus_rtu, opcua or s7, got 7",
                "devices[2].protocol: expected modbus_tcp, modbus_rtu, opcua or s7, got \"Modbus_TCP\"",
                "devices[3]: expected a mapping with name, protocol and the protocol's keys",
            ],
            "{errs:#?}"
        );
    }

    #[test]
    fn every_protocol_of_the_table_is_a_variant_of_the_tagged_entry_and_no_other() {
        use super::{RawDeviceKind, PROTOCOLS};
        let names: Vec<String> = PROTOCOLS.iter().map(|(p, _)| format!("`{p}`")).collect();
        let err = serde_json::from_value::<RawDeviceKind>(serde_json::json!({"nope": {}}))
            .expect_err("no such protocol");
        assert!(
            err.to_string()
                .ends_with(&format!("expected one of {}", names.join(", "))),
            "{err}"
        );
        for (protocol, _) in PROTOCOLS {
            let kind: RawDeviceKind =
                serde_json::from_value(serde_json::json!({ protocol: {} })).expect(protocol);
            assert_eq!(kind.protocol(), protocol);
        }
    }

    #[test]
    fn templates_work_for_every_protocol_with_or_without_their_own_protocol() {
        let cfg = from_yaml(
            r#"
connector: {data_dir: /d}
templates:
  - name: plc
    protocol: s7
    slot: 2
    points:
      - {name: temp, address: DB10.DBD4, type: real}
  - name: line
    protocol: opcua
    hold_ms: 500
    groups: [{name: fast, interval_ms: 200, subscribe: true, deadband: 0.5}]
    nodes: [{node_id: "ns=2;s={{device}}.T", name: t}]
  - name: counters
    points: [{name: parts, register: 4, type: u32}]
devices:
  - {name: plc-1, template: plc, host: 10.0.0.1, points: [{name: count, address: DB10.DBW8}]}
  - {name: line-1, template: line, endpoint: "opc.tcp://h:4840/"}
  - {name: rtu-1, template: counters, protocol: modbus_rtu, port: /dev/ttyUSB0}
  - {name: press-1, template: counters, protocol: modbus_tcp, host: h}
"#,
        )
        .expect("valid");
        let plc = &cfg.devices.s7[0];
        assert_eq!(plc.endpoint.remote_tsap, 0x0102);
        assert_eq!(plc.points.len(), 2);
        assert_eq!(plc.template.as_deref(), Some("plc"));
        let line = &cfg.devices.opcua[0];
        assert_eq!(line.hold, std::time::Duration::from_millis(500));
        assert!(line.groups[0].subscribe);
        assert_eq!(line.groups[0].nodes[0].node_id, "ns=2;s=line-1.T");
        assert_eq!(line.template.as_deref(), Some("line"));
        let [rtu, tcp] = &cfg.devices.modbus[..] else {
            panic!("two Modbus devices: {:?}", cfg.devices.modbus)
        };
        assert!(matches!(rtu.transport, Transport::Rtu(_)));
        assert!(matches!(tcp.transport, Transport::Tcp { .. }));
        assert_eq!(rtu.points[0].data_type, DataType::U32);
    }

    #[test]
    fn a_templates_keys_are_checked_by_its_protocol_once_or_else_in_its_devices() {
        let errs = problems(
            r#"
templates:
  - name: line
    protocol: opcua
    host: h
    nodes: [{node_id: "i=2258", name: t}]
  - name: loose
    endpoint: "opc.tcp://h:4840/"
    points: [{name: a, register: 1}]
devices:
  - {name: l1, template: line, endpoint: "opc.tcp://h:4840/"}
  - {name: l2, template: line, endpoint: "opc.tcp://h:4840/"}
  - {name: m1, template: loose, protocol: modbus_tcp, host: h}
  - {name: m2, template: loose, protocol: modbus_tcp, host: h}
"#,
        );
        assert_eq!(
            errs,
            [
                "templates[0].host: unknown key",
                "devices[2] (template loose): endpoint: unknown key (and in 1 more device of template loose)",
            ],
            "{errs:#?}"
        );
    }

    #[test]
    fn an_unknown_key_in_a_point_is_reported() {
        let errs = problems(
            "devices:\n  - {name: x, protocol: modbus_tcp, host: h, points: [{name: a, register: 1, regster: 2}]}\n",
        );
        assert!(
            errs.iter()
                .any(|e| e.starts_with("devices[0].points[0].regster")),
            "{errs:#?}"
        );
    }
}
