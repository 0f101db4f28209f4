//! `devices:`: the field devices the pollers read, one list for every protocol.
//!
//! One raw struct, [`RawDevice`], holds the fields of every protocol, each `Option`: the
//! `protocol` key picks which validator reads the entry, and that validator reports the keys
//! of another protocol as problems (an `endpoint` on a Modbus device is a mistake worth a
//! message, not a silent no-op). Poll groups are shared: each names an interval, and points
//! (Modbus) or nodes (OPC-UA) say which group polls them.

use serde::Deserialize;

use crate::config::Problems;
use crate::sources::ingest::config::valid_name;
use crate::sources::opcua::config::{validate_opcua_device, OpcuaDeviceConfig, RawOpcuaNode};

/// `devices[]`
#[derive(Debug, Default, Deserialize)]
pub struct RawDevice {
    /// The device's name; its records carry `source: <protocol family>/<name>`, e.g.
    /// `opcua/line-1`. 1 to 64 letters, digits, '-' or '_', unique among devices.
    pub name: Option<String>,
    /// `opcua` (or `modbus_tcp`, `modbus_rtu`). Required.
    pub protocol: Option<String>,
    /// Poll groups: each polls its points on its own interval. Without groups, one group
    /// `default` polls every point each second.
    pub groups: Option<Vec<RawGroup>>,
    /// How long a poll is held, in milliseconds, while a sink refuses its sample (`block` at
    /// the quota); then the sample is dropped and counted. Default 10000.
    pub hold_ms: Option<u64>,

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

/// A poll group, validated.
#[derive(Debug, Clone, PartialEq)]
pub struct GroupConfig {
    /// Its name.
    pub name: String,
    /// Its interval.
    pub interval: std::time::Duration,
}

/// `devices:`, validated, by protocol.
#[derive(Debug, Clone, Default)]
pub struct DevicesConfig {
    /// The OPC-UA devices.
    pub opcua: Vec<OpcuaDeviceConfig>,
}

impl DevicesConfig {
    /// Every device's source name, as flows name it: `opcua/<name>`.
    pub fn source_names(&self) -> Vec<String> {
        self.opcua
            .iter()
            .map(|d| format!("opcua/{}", d.name))
            .collect()
    }
}

/// The OPC-UA keys an entry has, to report them on a device of another protocol.
pub fn opcua_keys(d: &RawDevice) -> Vec<&'static str> {
    [
        ("endpoint", d.endpoint.is_some()),
        ("security_policy", d.security_policy.is_some()),
        ("security_mode", d.security_mode.is_some()),
        ("username", d.username.is_some()),
        ("password", d.password.is_some()),
        ("pki_dir", d.pki_dir.is_some()),
        ("trust_server_certs", d.trust_server_certs.is_some()),
        ("request_timeout_ms", d.request_timeout_ms.is_some()),
        ("reconnect_initial_ms", d.reconnect_initial_ms.is_some()),
        ("reconnect_max_ms", d.reconnect_max_ms.is_some()),
        ("watchdog_ms", d.watchdog_ms.is_some()),
        ("nodes", d.nodes.is_some()),
    ]
    .into_iter()
    .filter_map(|(k, present)| present.then_some(k))
    .collect()
}

/// The OPC-UA keys of a group, to report them on a device of another protocol.
pub fn opcua_group_keys(g: &RawGroup) -> Vec<&'static str> {
    [
        ("subscribe", g.subscribe.is_some()),
        ("deadband", g.deadband.is_some()),
    ]
    .into_iter()
    .filter_map(|(k, present)| present.then_some(k))
    .collect()
}

/// Validates `devices:`.
pub fn validate_devices(raw: Option<&[RawDevice]>, path: &str, p: &mut Problems) -> DevicesConfig {
    let mut out = DevicesConfig::default();
    let mut names: Vec<String> = Vec::new();
    for (i, d) in raw.unwrap_or_default().iter().enumerate() {
        let at = format!("{path}[{i}]");
        let name = match d.name.as_deref() {
            None => {
                p.push(format!("{at}.name"), "is required");
                String::new()
            }
            Some(n) if !valid_name(n) => {
                p.push(
                    format!("{at}.name"),
                    format!("{n:?} must be 1 to 64 letters, digits, '-' or '_'"),
                );
                String::new()
            }
            Some(n) => {
                if names.iter().any(|o| o == n) {
                    p.push(format!("{at}.name"), format!("{n:?} is used twice"));
                }
                names.push(n.to_string());
                n.to_string()
            }
        };
        match d.protocol.as_deref() {
            Some("opcua") => {
                if let Some(dev) = validate_opcua_device(d, name, &at, p) {
                    out.opcua.push(dev);
                }
            }
            None => p.push(format!("{at}.protocol"), "is required"),
            Some(other) => p.push(
                format!("{at}.protocol"),
                format!("expected modbus_tcp, modbus_rtu or opcua, got {other:?}"),
            ),
        }
    }
    out
}

/// Validates `groups:` of one device: every problem with its path. Without groups, one group
/// `default` every second.
pub fn validate_groups(raw: Option<&[RawGroup]>, at: &str, p: &mut Problems) -> Vec<GroupConfig> {
    let Some(raw) = raw else {
        return vec![GroupConfig {
            name: "default".into(),
            interval: std::time::Duration::from_secs(1),
        }];
    };
    if raw.is_empty() {
        p.push(format!("{at}.groups"), "must not be empty when given");
    }
    let mut out: Vec<GroupConfig> = Vec::new();
    for (i, g) in raw.iter().enumerate() {
        let gat = format!("{at}.groups[{i}]");
        let name = match g.name.as_deref() {
            None => {
                p.push(format!("{gat}.name"), "is required");
                String::new()
            }
            Some(n) if !valid_name(n) => {
                p.push(
                    format!("{gat}.name"),
                    format!("{n:?} must be 1 to 64 letters, digits, '-' or '_'"),
                );
                String::new()
            }
            Some(n) => {
                if out.iter().any(|o| o.name == n) {
                    p.push(format!("{gat}.name"), format!("{n:?} is used twice"));
                }
                n.to_string()
            }
        };
        let ms = g.interval_ms.unwrap_or(1000);
        if !(10..=86_400_000).contains(&ms) {
            p.push(
                format!("{gat}.interval_ms"),
                format!("{ms} is outside 10..=86400000"),
            );
        }
        out.push(GroupConfig {
            name,
            interval: std::time::Duration::from_millis(ms),
        });
    }
    out
}
