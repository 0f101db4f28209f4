//! `devices:`: the field devices the pollers read, one list for every protocol.
//!
//! One raw struct, [`RawDevice`], holds the fields of every protocol, each `Option`: the
//! `protocol` key picks which validator reads the entry, and the keys of another protocol
//! are reported as problems here, from one table of which protocols read which key (an
//! `endpoint` on a Modbus device is a mistake worth a message, not a silent no-op). Poll groups are shared: each names an interval, and points
//! (Modbus, S7) or nodes (OPC-UA) say which group polls them.

use std::time::Duration;

use serde::Deserialize;

use crate::config::checks::{checked_name, in_range};
use crate::config::Problems;
use crate::sources::catalogue::DeviceDef;
use crate::sources::modbus::config::{check_lines, validate_modbus_device, ModbusDeviceConfig};
use crate::sources::opcua::config::{validate_opcua_device, OpcuaDeviceConfig, RawOpcuaNode};
use crate::sources::s7::config::{validate_s7_device, S7DeviceConfig};

/// `devices[]`
#[derive(Debug, Default, Deserialize)]
pub struct RawDevice {
    /// The device's name; its records carry `source: <protocol family>/<name>`, e.g.
    /// `modbus/press-1`. 1 to 64 letters, digits, '-' or '_', unique among devices.
    pub name: Option<String>,
    /// `modbus_tcp`, `modbus_rtu`, `opcua` or `s7`. Required (here or in the template).
    pub protocol: Option<String>,
    /// The template this device starts from (a `templates[].name`): the device has the
    /// template's keys, each key given here replacing the template's, and its `points`,
    /// `nodes` and `groups` merged by name. `/api/status` names it.
    pub template: Option<String>,
    /// Values for `{{NAME}}` in the device's OPC-UA node ids, e.g. `{line: L1}` for
    /// `ns=2;s={{line}}.Temperature`; a template's `vars` are the defaults. `{{device}}` is
    /// always the device's name.
    pub vars: Option<std::collections::BTreeMap<String, serde_json::Value>>,
    /// Poll groups: each polls its points on its own interval. Without groups, one group
    /// `default` polls every point each second.
    pub groups: Option<Vec<RawGroup>>,

    // ---- Modbus (TCP and RTU) ----
    /// Modbus TCP and S7: the device's host name or IP address.
    pub host: Option<String>,
    /// Modbus TCP: the TCP port (default 502). Modbus RTU: the serial device, e.g.
    /// `/dev/ttyUSB0`; devices with the same port share the line. S7: the ISO-on-TCP port
    /// (default 102).
    pub port: Option<RawPort>,
    /// Modbus unit id (slave address), 0 to 247; default 1 (TCP: 255 also allowed).
    pub unit: Option<u64>,
    /// Modbus RTU: baud rate, default 9600. Every device of a line must agree.
    pub baud: Option<u64>,
    /// Modbus RTU: `none` (default), `even` or `odd`.
    pub parity: Option<String>,
    /// Modbus RTU: 5 to 8 data bits, default 8.
    pub data_bits: Option<u64>,
    /// Modbus RTU: 1 (default) or 2 stop bits.
    pub stop_bits: Option<u64>,
    /// Modbus RTU: quiet time between two frames on the line, in milliseconds. Default 0
    /// (the 3.5 character times of the standard are kept by the serial timing itself).
    pub inter_frame_delay_ms: Option<u64>,
    /// Modbus and S7: how long one request (and the connect) may take, in milliseconds; then
    /// the connection (or the serial port) is dropped and reopened. Default 1000.
    pub timeout_ms: Option<u64>,
    /// Modbus: registers (or bits) that may lie unread between two points read in one
    /// request. Default 8; 0 coalesces only contiguous points.
    pub max_gap: Option<u64>,
    /// Modbus and S7: the most the circuit breaker waits before trying a failing device
    /// again, in seconds (it starts at 1 s and doubles). Default 60.
    pub backoff_max_secs: Option<u64>,
    /// How long a poll is held, in milliseconds, while a sink refuses its sample (`block` at
    /// the quota); then the sample is dropped and counted. Default 10000.
    pub hold_ms: Option<u64>,
    /// Modbus: the registers and bits to read. S7: the addresses to read.
    pub points: Option<Vec<RawPoint>>,

    // ---- S7 ----
    /// S7: the CPU's rack, 0 to 7 (default 0). With `slot`, instead of `remote_tsap`.
    pub rack: Option<u64>,
    /// S7: the CPU's slot, 0 to 31 (default 1: S7-1200/1500; an S7-300 is in slot 2).
    pub slot: Option<u64>,
    /// S7: our TSAP as TIA Portal writes it, e.g. `"01.00"` (the default, a PG
    /// connection), for CPs and CPUs configured for other connection resources.
    pub local_tsap: Option<String>,
    /// S7: the CPU's TSAP as TIA Portal writes it, e.g. `"03.01"`, instead of `rack` and
    /// `slot`.
    pub remote_tsap: Option<String>,
    /// S7: the PDU size asked for, 240 to 960 bytes (default 480). The CPU may grant less;
    /// the size it granted is used, and shown in the device's status as `pdu_size`.
    pub pdu_size: Option<u64>,

    // ---- OPC-UA ----
    /// OPC-UA: the server's endpoint URL, e.g. `opc.tcp://10.0.0.5:4840/`. Required.
    pub endpoint: Option<String>,
    /// OPC-UA: `None` (default) or `Basic256Sha256`.
    pub security_policy: Option<String>,
    /// OPC-UA: `None`, `Sign` or `SignAndEncrypt`. Default `None` with the `None` policy,
    /// `SignAndEncrypt` otherwise.
    pub security_mode: Option<String>,
    /// OPC-UA: user name; without it the session is anonymous. Needs `password`.
    pub username: Option<String>,
    /// OPC-UA: the user's password.
    pub password: Option<String>,
    /// OPC-UA: folder of the client certificate (created on first start: `own/cert.der`,
    /// `private/private.pem`), trusted server certificates (`trusted/`) and rejected ones
    /// (`rejected/`: move one to `trusted/` to trust it). Default `<data_dir>/opcua-pki`.
    pub pki_dir: Option<String>,
    /// OPC-UA: trust a server certificate the first time it is seen instead of rejecting it
    /// until an operator moves it to `trusted/`. Default false.
    pub trust_server_certs: Option<bool>,
    /// OPC-UA, with a security policy other than `None`: refuse a server certificate that
    /// does not name the endpoint URL's host (a DNS or IP subject alternative name, any
    /// place in the list). `false` accepts it, as "suppress hostname invalid" does in other
    /// clients, for PLCs whose certificate names another address than the one in use; the
    /// device logs a warning at start. Trust, validity period and application URI are
    /// checked either way. Default true.
    pub check_server_hostname: Option<bool>,
    /// OPC-UA: how long one request (a read, a subscription call) may take, in
    /// milliseconds. Default 5000.
    pub request_timeout_ms: Option<u64>,
    /// OPC-UA: first wait before reconnecting, in milliseconds; it doubles up to
    /// `reconnect_max_ms`. Reconnects never stop. Default 1000.
    pub reconnect_initial_ms: Option<u64>,
    /// OPC-UA: the longest wait between reconnect attempts, in milliseconds. Default 30000.
    pub reconnect_max_ms: Option<u64>,
    /// OPC-UA: the no-data watchdog. A connected session that delivers nothing (no read
    /// answer, no notification, no subscription keep-alive) for this long is dropped and made
    /// anew. Default: three times the slowest group's interval, at least 30000.
    pub watchdog_ms: Option<u64>,
    /// OPC-UA: the nodes to read.
    pub nodes: Option<Vec<RawOpcuaNode>>,
}

/// `devices[].groups[]`
#[derive(Debug, Default, Deserialize)]
pub struct RawGroup {
    /// The group's name: the key of its records. Unique within the device.
    pub name: Option<String>,
    /// How often the group is polled, in milliseconds (10 to 86400000). Default 1000. With
    /// `subscribe: true` (OPC-UA), the sampling and publishing interval.
    pub interval_ms: Option<u64>,
    /// OPC-UA: monitor the group's nodes in a subscription instead of reading them each
    /// interval; a record then carries the nodes that changed. Default false.
    pub subscribe: Option<bool>,
    /// OPC-UA, with `subscribe: true`: absolute deadband; a numeric value is reported only
    /// when it moved by more than this. Asked of the server per node; nodes where the server
    /// refuses a filter are monitored without one.
    pub deadband: Option<f64>,
}

/// `devices[].points[]`
#[derive(Debug, Default, Deserialize)]
pub struct RawPoint {
    /// The point's name: its key in the record's payload. Unique within the device.
    pub name: Option<String>,
    /// The poll group that reads it; may be left out when the device has one group.
    pub group: Option<String>,
    /// Modbus: the address of its first register or bit, 0 to 65535 (protocol addresses,
    /// starting at 0). Required for Modbus.
    pub register: Option<u64>,
    /// S7: where it is in the PLC, as TIA Portal and STEP 7 write it: `DB10.DBD4`,
    /// `DB10.DBW2`, `DB10.DBB0`, `DB1.DBX0.3`, `MW20`, `MD24`, `M0.1`, `IW0`, `I0.1`, `QW2`,
    /// `Q4.0` (`E` and `A` for inputs and outputs also). Required for S7.
    pub address: Option<String>,
    /// Modbus: `holding` (default), `input`, `coil` or `discrete`.
    pub kind: Option<String>,
    /// The value's data type. Modbus: `bool`, `u16`, `i16`, `u32`, `i32`, `u64`, `i64`,
    /// `f32`, `f64` or `string`; default `u16` for registers and `bool` for coils and
    /// discrete inputs (which can only be `bool`); a `bool` register is true when it is not
    /// 0. S7: `bool`, `byte`, `word`, `int`, `dword`, `dint`, `real`, `lreal`, `char`,
    /// `string`, `date_and_time`, `dtl` (both as RFC 3339 text), `s5time` or `time` (both in
    /// milliseconds); default `bool` for a bit address, `byte`, `word` or `dword` for the
    /// others. It must fit the address's width (`real` needs a double word address such as
    /// `DB10.DBD4`).
    #[serde(rename = "type")]
    pub data_type: Option<String>,
    /// For `string`: Modbus, its length in bytes (2 per register), 1 to 250; S7, its
    /// declared maximum in characters, 1 to 254 (the two-byte header not counted).
    pub length: Option<u64>,
    /// Modbus: `big` (default: the first register holds the high word) or `little`.
    pub word_order: Option<String>,
    /// Modbus: `big` (default: the high byte first within a register, as the standard says)
    /// or `little`.
    pub byte_order: Option<String>,
    /// Multiplies the raw number (after which the value is a float). Default 1. A whole-number
    /// register's value is rounded to the decimals of `scale` and `offset` (`scale: 0.1` gives
    /// `4.1`, not `4.1000000000000005`); a float register's is not.
    pub scale: Option<f64>,
    /// Modbus: added after `scale`. Default 0.
    pub offset: Option<f64>,
    /// The engineering unit, copied into the record (e.g. `°C`).
    pub unit: Option<String>,
    /// S7: a number is reported only once it moved by more than this (in engineering
    /// units) from the value last reported; until then the point's entry keeps that value.
    /// Default: every change is reported.
    pub deadband: Option<f64>,
    /// Commands may write this point (`POST /api/devices/{device}/write`, NATS, MQTT; needs
    /// `commands:`). Modbus: only holding registers and coils can be writable; S7: every
    /// area but the inputs (I), which the PLC's input modules write. Default false: nothing
    /// is writable unless it says so.
    pub writable: Option<bool>,
    /// The lowest value a command may write, in engineering units (after `scale` and
    /// `offset`, as the point reads). A lower value is refused `out_of_range` before anything
    /// is sent. Only for writable numeric points.
    pub min: Option<f64>,
    /// The highest value a command may write, in engineering units. Only for writable
    /// numeric points; not below `min`.
    pub max: Option<f64>,
}

/// A poll group, validated.
#[derive(Debug, Clone, PartialEq)]
pub struct GroupConfig {
    /// Its name.
    pub name: String,
    /// Its interval.
    pub interval: Duration,
}

/// Every protocol `devices[].protocol` names, with the family its devices' records carry in
/// their source (`modbus/press-1`): the one list of the protocols.
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

/// The keys of a `devices[]` entry that not every protocol reads, each with the families of
/// the protocols that read it. A key set on a device of another protocol is a mistake worth a
/// message (an `endpoint` on a Modbus device), not a silent no-op. Keys every device has
/// (`name`, `protocol`, `template`, `vars`, `groups`, `hold_ms`) are not here.
const PROTOCOL_KEYS: [(&str, &[&str]); 27] = [
    ("host", &["modbus", "s7"]),
    ("port", &["modbus", "s7"]),
    ("unit", &["modbus"]),
    ("baud", &["modbus"]),
    ("parity", &["modbus"]),
    ("data_bits", &["modbus"]),
    ("stop_bits", &["modbus"]),
    ("inter_frame_delay_ms", &["modbus"]),
    ("timeout_ms", &["modbus", "s7"]),
    ("max_gap", &["modbus"]),
    ("backoff_max_secs", &["modbus", "s7"]),
    ("points", &["modbus", "s7"]),
    ("rack", &["s7"]),
    ("slot", &["s7"]),
    ("local_tsap", &["s7"]),
    ("remote_tsap", &["s7"]),
    ("pdu_size", &["s7"]),
    ("endpoint", &["opcua"]),
    ("security_policy", &["opcua"]),
    ("security_mode", &["opcua"]),
    ("username", &["opcua"]),
    ("password", &["opcua"]),
    ("pki_dir", &["opcua"]),
    ("trust_server_certs", &["opcua"]),
    ("check_server_hostname", &["opcua"]),
    ("request_timeout_ms", &["opcua"]),
    ("reconnect_initial_ms", &["opcua"]),
];

/// The keys of a group that not every protocol reads, as [`PROTOCOL_KEYS`].
const GROUP_KEYS: [(&str, &[&str]); 2] = [("subscribe", &["opcua"]), ("deadband", &["opcua"])];

/// The keys of [`PROTOCOL_KEYS`] set on `d` (and three more of OPC-UA's, read by it alone).
fn keys_set(d: &RawDevice) -> Vec<(&'static str, &'static [&'static str])> {
    let set = [
        d.host.is_some(),
        d.port.is_some(),
        d.unit.is_some(),
        d.baud.is_some(),
        d.parity.is_some(),
        d.data_bits.is_some(),
        d.stop_bits.is_some(),
        d.inter_frame_delay_ms.is_some(),
        d.timeout_ms.is_some(),
        d.max_gap.is_some(),
        d.backoff_max_secs.is_some(),
        d.points.is_some(),
        d.rack.is_some(),
        d.slot.is_some(),
        d.local_tsap.is_some(),
        d.remote_tsap.is_some(),
        d.pdu_size.is_some(),
        d.endpoint.is_some(),
        d.security_policy.is_some(),
        d.security_mode.is_some(),
        d.username.is_some(),
        d.password.is_some(),
        d.pki_dir.is_some(),
        d.trust_server_certs.is_some(),
        d.check_server_hostname.is_some(),
        d.request_timeout_ms.is_some(),
        d.reconnect_initial_ms.is_some(),
    ];
    let opcua_only: [(&'static str, bool); 3] = [
        ("reconnect_max_ms", d.reconnect_max_ms.is_some()),
        ("watchdog_ms", d.watchdog_ms.is_some()),
        ("nodes", d.nodes.is_some()),
    ];
    PROTOCOL_KEYS
        .iter()
        .zip(set)
        .filter(|(_, on)| *on)
        .map(|(k, _)| *k)
        .chain(
            opcua_only
                .into_iter()
                .filter(|(_, on)| *on)
                .map(|(k, _)| (k, &["opcua"][..])),
        )
        .collect()
}

/// Reports every key of entry `d` (device and groups) that devices of `protocol` (of
/// `family`) do not read; true when there was one.
fn report_other_protocols_keys(
    d: &RawDevice,
    protocol: &str,
    family: &str,
    at: &str,
    p: &mut Problems,
) -> bool {
    let article = if protocol.starts_with(['o', 's']) {
        "an"
    } else {
        "a"
    };
    let why = format!("is not a key of {article} {protocol} device");
    let mut found = false;
    for (key, families) in keys_set(d) {
        if !families.contains(&family) {
            p.push(format!("{at}.{key}"), why.clone());
            found = true;
        }
    }
    for (i, g) in d.groups.as_deref().unwrap_or_default().iter().enumerate() {
        let set = [g.subscribe.is_some(), g.deadband.is_some()];
        for ((key, families), on) in GROUP_KEYS.iter().zip(set) {
            if on && !families.contains(&family) {
                p.push(format!("{at}.groups[{i}].{key}"), why.clone());
                found = true;
            }
        }
    }
    found
}

/// Validates `devices:`.
pub fn validate_devices(raw: Option<&[RawDevice]>, path: &str, p: &mut Problems) -> DevicesConfig {
    let mut out = DevicesConfig::default();
    let mut names: Vec<String> = Vec::new();
    for (i, d) in raw.unwrap_or_default().iter().enumerate() {
        let at = format!("{path}[{i}]");
        let name = checked_name(d.name.as_deref(), &at, |n| names.iter().any(|o| o == n), p)
            .unwrap_or_default();
        names.push(name.clone());
        if let Some(protocol) = d.protocol.as_deref() {
            if let Some(family) = family(protocol) {
                report_other_protocols_keys(d, protocol, family, &at, p);
            }
        }
        match d.protocol.as_deref() {
            Some(proto @ ("modbus_tcp" | "modbus_rtu")) => {
                if let Some(dev) = validate_modbus_device(d, name, proto, &at, p) {
                    out.modbus.push(dev);
                }
            }
            Some("opcua") => {
                if let Some(dev) = validate_opcua_device(d, name, &at, p) {
                    out.opcua.push(dev);
                }
            }
            Some("s7") => {
                if let Some(dev) = validate_s7_device(d, name, &at, p) {
                    out.s7.push(dev);
                }
            }
            None => p.push(format!("{at}.protocol"), "is required"),
            Some(other) => {
                let known: Vec<&str> = PROTOCOLS.iter().map(|(p, _)| *p).collect();
                let (last, rest) = known.split_last().unwrap_or((&"", &[]));
                p.push(
                    format!("{at}.protocol"),
                    format!("expected {} or {last}, got {other:?}", rest.join(", ")),
                )
            }
        }
    }
    check_lines(&out.modbus, path, p);
    out
}

/// `devices[].port`: a TCP port number or a serial device path.
#[derive(Debug, Clone, Deserialize)]
#[serde(untagged)]
pub enum RawPort {
    /// A TCP port (Modbus TCP, S7).
    Number(u64),
    /// A serial device (Modbus RTU).
    Path(String),
}

/// `host` and `port` of a device of `protocol` reached over TCP, `default_port` when `port`
/// is not set: every problem with its path.
pub fn tcp_address(
    d: &RawDevice,
    protocol: &str,
    default_port: u16,
    at: &str,
    p: &mut Problems,
) -> (String, u16) {
    let host = match d.host.as_deref() {
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
    let port = match &d.port {
        None => default_port,
        Some(RawPort::Number(n)) => match u16::try_from(*n) {
            Ok(port) if port > 0 => port,
            _ => {
                p.push(format!("{at}.port"), format!("{n} is outside 1..=65535"));
                default_port
            }
        },
        Some(RawPort::Path(s)) => {
            p.push(
                format!("{at}.port"),
                format!("expected a TCP port number for {protocol}, got {s:?}"),
            );
            default_port
        }
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
    /// `hold_ms`: how long a refused sample holds the loop.
    pub hold: Duration,
}

/// `timeout_ms`, `backoff_max_secs` and `hold_ms` of device `d`: every problem with its path.
pub fn timing(d: &RawDevice, at: &str, p: &mut Problems) -> Timing {
    let timeout = in_range(
        d.timeout_ms,
        1000,
        10..=60_000,
        format!("{at}.timeout_ms"),
        p,
    );
    let backoff_max = in_range(
        d.backoff_max_secs,
        60,
        1..=3600,
        format!("{at}.backoff_max_secs"),
        p,
    );
    Timing {
        timeout: Duration::from_millis(timeout),
        backoff_max: Duration::from_secs(backoff_max),
        hold: hold(d, at, p),
    }
}

/// `hold_ms` of device `d` [the delivery document's 10 s; 0..=600000].
pub fn hold(d: &RawDevice, at: &str, p: &mut Problems) -> Duration {
    let ms = in_range(
        d.hold_ms,
        crate::sources::hold::DEFAULT_HOLD.as_millis() as u64,
        0..=600_000,
        format!("{at}.hold_ms"),
        p,
    );
    Duration::from_millis(ms)
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

/// A point's name (`points[i].name`): 1 to 64 characters, not `taken` by an earlier point.
pub fn point_name(
    r: &RawPoint,
    pat: &str,
    taken: impl Fn(&str) -> bool,
    p: &mut Problems,
) -> String {
    match r.name.as_deref() {
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

/// The index of a point's group in `groups` (`points[i].group`, which may be left out when
/// the device has one group).
pub fn point_group(r: &RawPoint, groups: &[GroupConfig], pat: &str, p: &mut Problems) -> usize {
    match r.group.as_deref() {
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
