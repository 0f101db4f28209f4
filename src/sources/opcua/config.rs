//! OPC-UA devices (`devices[]` with `protocol: opcua`): their raw keys, groups and nodes, and
//! the pure validation of every OPC-UA key, each problem with its path.

use std::fmt;
use std::path::PathBuf;
use std::time::Duration;

use serde::Deserialize;

use crate::config::checks::{in_range, valid_name};
use crate::config::Problems;
use crate::sources::catalogue::{DeviceDef, GroupDef, PointDef};
use crate::sources::devices::{validate_groups, DeviceCommon, GroupConfig, RawGroup};

/// `devices[]` with `protocol: opcua`: the keys besides those every device has.
#[derive(Debug, Default, Deserialize)]
pub struct RawOpcuaDevice {
    /// The server's endpoint URL, e.g. `opc.tcp://10.0.0.5:4840/`. Required.
    pub endpoint: Option<String>,
    /// `None` (default) or `Basic256Sha256`.
    pub security_policy: Option<String>,
    /// `None`, `Sign` or `SignAndEncrypt`. Default `None` with the `None` policy,
    /// `SignAndEncrypt` otherwise.
    pub security_mode: Option<String>,
    /// User name; without it the session is anonymous. Needs `password`.
    pub username: Option<String>,
    /// The user's password.
    pub password: Option<String>,
    /// Folder of the client certificate (created on first start: `own/cert.der`,
    /// `private/private.pem`), trusted server certificates (`trusted/`) and rejected ones
    /// (`rejected/`: move one to `trusted/` to trust it). Default `<data_dir>/opcua-pki`.
    pub pki_dir: Option<String>,
    /// Trust a server certificate the first time it is seen instead of rejecting it until an
    /// operator moves it to `trusted/`. Default false.
    pub trust_server_certs: Option<bool>,
    /// With a security policy other than `None`: refuse a server certificate that does not
    /// name the endpoint URL's host (a DNS or IP subject alternative name, any place in the
    /// list). `false` accepts it, as "suppress hostname invalid" does in other clients, for
    /// PLCs whose certificate names another address than the one in use; the device logs a
    /// warning at start. Trust, validity period and application URI are checked either way.
    /// Default true.
    pub check_server_hostname: Option<bool>,
    /// How long one request (a read, a subscription call) may take, in milliseconds.
    /// Default 5000.
    pub request_timeout_ms: Option<u64>,
    /// First wait before reconnecting, in milliseconds; it doubles up to
    /// `reconnect_max_ms`. Reconnects never stop. Default 1000.
    pub reconnect_initial_ms: Option<u64>,
    /// The longest wait between reconnect attempts, in milliseconds. Default 30000.
    pub reconnect_max_ms: Option<u64>,
    /// The no-data watchdog. A connected session that delivers nothing (no read answer, no
    /// notification, no subscription keep-alive) for this long is dropped and made anew.
    /// Default: three times the slowest group's interval, at least 30000.
    pub watchdog_ms: Option<u64>,
    /// Groups: each reads its nodes on its own interval, or subscribes to them. Without
    /// groups, one group `default` reads every node each second.
    pub groups: Option<Vec<RawOpcuaGroup>>,
    /// The nodes to read.
    pub nodes: Option<Vec<RawOpcuaNode>>,
}

/// `devices[].groups[]` of an OPC-UA device.
#[derive(Debug, Default, Deserialize)]
pub struct RawOpcuaGroup {
    /// The group's name: the key of its records. Unique within the device.
    pub name: Option<String>,
    /// How often the group is read, in milliseconds (10 to 86400000). Default 1000. With
    /// `subscribe: true`, the sampling and publishing interval.
    pub interval_ms: Option<u64>,
    /// Monitor the group's nodes in a subscription instead of reading them each interval; a
    /// record then carries the nodes that changed. Default false.
    pub subscribe: Option<bool>,
    /// With `subscribe: true`: absolute deadband; a numeric value is reported only when it
    /// moved by more than this. Asked of the server per node; nodes where the server refuses
    /// a filter are monitored without one.
    pub deadband: Option<f64>,
}

/// `devices[].nodes[]` of an OPC-UA device.
#[derive(Debug, Default, Deserialize)]
pub struct RawOpcuaNode {
    /// The node id in the OPC-UA text form, e.g. `ns=2;s=Line1.Temperature` or `i=2258`.
    pub node_id: Option<String>,
    /// The name of the value in the records. Unique within its group.
    pub name: Option<String>,
    /// The group that reads it; may be left out when the device has one group.
    pub group: Option<String>,
    /// Commands (`commands:`) may write this node. Default false: a node is read only unless
    /// it says `writable: true`. Its name must then be unique in the device, since a command
    /// names the points it writes.
    pub writable: Option<bool>,
    /// The node's data type, for a writable node: `Boolean`, `String`, `SByte`, `Byte`,
    /// `Int16`, `UInt16`, `Int32`, `UInt32`, `Int64`, `UInt64`, `Float` or `Double`.
    /// Optional: the connector reads the node's DataType attribute from the server before
    /// its first write in each session anyway. When given, the status page shows it before
    /// that, and a server that says otherwise has the write refused.
    pub data_type: Option<String>,
    /// Lowest value a command may write to this (writable, numeric) node; a value below is
    /// refused `out_of_range` before anything is sent.
    pub min: Option<f64>,
    /// Highest value a command may write to this (writable, numeric) node; a value above is
    /// refused `out_of_range` before anything is sent.
    pub max: Option<f64>,
}

/// The data types of the nodes a command can write (namespace 0 ids 1 to 12).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum NodeType {
    /// `true` / `false`.
    Boolean,
    /// -128..=127.
    SByte,
    /// 0..=255.
    Byte,
    /// 16 bits, signed.
    Int16,
    /// 16 bits, unsigned.
    UInt16,
    /// 32 bits, signed.
    Int32,
    /// 32 bits, unsigned.
    UInt32,
    /// 64 bits, signed.
    Int64,
    /// 64 bits, unsigned.
    UInt64,
    /// 32-bit floating point.
    Float,
    /// 64-bit floating point.
    Double,
    /// Text.
    String,
}

impl NodeType {
    /// Every type, in the order of their namespace 0 ids (`i=1` to `i=12`).
    pub const ALL: [NodeType; 12] = [
        Self::Boolean,
        Self::SByte,
        Self::Byte,
        Self::Int16,
        Self::UInt16,
        Self::Int32,
        Self::UInt32,
        Self::Int64,
        Self::UInt64,
        Self::Float,
        Self::Double,
        Self::String,
    ];

    /// The type's OPC-UA name (`Double`).
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Boolean => "Boolean",
            Self::SByte => "SByte",
            Self::Byte => "Byte",
            Self::Int16 => "Int16",
            Self::UInt16 => "UInt16",
            Self::Int32 => "Int32",
            Self::UInt32 => "UInt32",
            Self::Int64 => "Int64",
            Self::UInt64 => "UInt64",
            Self::Float => "Float",
            Self::Double => "Double",
            Self::String => "String",
        }
    }

    /// The type named `name` (as [`NodeType::as_str`] writes it).
    pub fn parse(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|t| t.as_str() == name)
    }

    /// The type whose DataType node is `i=<id>` in namespace 0: the twelve built-in types,
    /// and `Duration` (`i=290`, a Double).
    pub fn from_ns0(id: u32) -> Option<Self> {
        match id {
            290 => Some(Self::Double),
            1..=12 => Self::ALL.get(id as usize - 1).copied(),
            _ => None,
        }
    }

    /// True for the integer and floating point types (those `min` / `max` apply to).
    pub fn is_numeric(self) -> bool {
        !matches!(self, Self::Boolean | Self::String)
    }
}

impl fmt::Display for NodeType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// `security_policy`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SecurityPolicy {
    /// No signing, no encryption.
    None,
    /// RSA 2048+ keys, SHA-256 signatures, AES-256 encryption.
    Basic256Sha256,
}

impl SecurityPolicy {
    /// The name the OPC-UA stack uses.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::None => "None",
            Self::Basic256Sha256 => "Basic256Sha256",
        }
    }
}

/// `security_mode`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SecurityMode {
    /// Messages are neither signed nor encrypted.
    None,
    /// Messages are signed.
    Sign,
    /// Messages are signed and encrypted.
    SignAndEncrypt,
}

/// How the session authenticates.
#[derive(Clone, PartialEq, Eq)]
pub enum Identity {
    /// No user.
    Anonymous,
    /// User name and password.
    User {
        /// The user name.
        username: String,
        /// The password (never printed).
        password: String,
    },
}

impl fmt::Debug for Identity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Anonymous => write!(f, "Anonymous"),
            Self::User { username, .. } => write!(f, "User({username:?}, password: ***)"),
        }
    }
}

/// One node to read, validated.
#[derive(Debug, Clone, PartialEq)]
pub struct OpcuaNodeConfig {
    /// The node id text (checked to parse).
    pub node_id: String,
    /// The value's name in the records.
    pub name: String,
    /// Commands may write it.
    pub writable: bool,
    /// Its data type, when the config names one (else the server's DataType decides).
    pub data_type: Option<NodeType>,
    /// Lowest value a command may write.
    pub min: Option<f64>,
    /// Highest value a command may write.
    pub max: Option<f64>,
}

/// One group of an OPC-UA device, validated.
#[derive(Debug, Clone, PartialEq)]
pub struct OpcuaGroupConfig {
    /// Name (the records' key) and interval.
    pub group: GroupConfig,
    /// Monitored items in a subscription instead of reads.
    pub subscribe: bool,
    /// Absolute deadband asked of the server for a subscribed group.
    pub deadband: Option<f64>,
    /// Its nodes, in config order.
    pub nodes: Vec<OpcuaNodeConfig>,
}

/// An OPC-UA device, validated.
#[derive(Debug, Clone, PartialEq)]
pub struct OpcuaDeviceConfig {
    /// The device's name; records carry `source: opcua/<name>`.
    pub name: String,
    /// The template it was made from (`template:`), shown in `/api/status`.
    pub template: Option<String>,
    /// The endpoint URL.
    pub endpoint: String,
    /// The security policy.
    pub security_policy: SecurityPolicy,
    /// The message security mode.
    pub security_mode: SecurityMode,
    /// Anonymous or user name and password.
    pub identity: Identity,
    /// The PKI folder; `None`: `<data_dir>/opcua-pki`.
    pub pki_dir: Option<PathBuf>,
    /// Trust unknown server certificates.
    pub trust_server_certs: bool,
    /// Refuse a server certificate that does not name the endpoint's host.
    pub check_server_hostname: bool,
    /// The timeout of one request.
    pub request_timeout: Duration,
    /// First reconnect wait.
    pub reconnect_initial: Duration,
    /// Longest reconnect wait.
    pub reconnect_max: Duration,
    /// The no-data watchdog.
    pub watchdog: Duration,
    /// How long a refused sample holds the poll.
    pub hold: Duration,
    /// Its groups, each with at least one node.
    pub groups: Vec<OpcuaGroupConfig>,
}

impl OpcuaDeviceConfig {
    /// The source name of its records: `opcua/<name>`.
    pub fn source(&self) -> String {
        format!("opcua/{}", self.name)
    }

    /// Its nodes, group by group.
    pub fn nodes(&self) -> impl Iterator<Item = &OpcuaNodeConfig> {
        self.groups.iter().flat_map(|g| &g.nodes)
    }

    /// The writable node named `name` or, when none is, the first node of that name (read
    /// only); `None` when the device has no node of that name.
    pub fn node_named(&self, name: &str) -> Option<&OpcuaNodeConfig> {
        let mut named = self.nodes().filter(|n| n.name == name);
        let first = named.next()?;
        if first.writable {
            return Some(first);
        }
        Some(named.find(|n| n.writable).unwrap_or(first))
    }

    /// The device and its nodes as the point catalogue lists them. A node's value type is
    /// the server's (a configured `data_type` only checks what a command writes).
    pub fn describe(&self) -> DeviceDef {
        let points = self
            .groups
            .iter()
            .flat_map(|g| {
                g.nodes.iter().map(|n| PointDef {
                    group: g.group.name.clone(),
                    name: n.name.clone(),
                    area: "node",
                    type_name: n
                        .data_type
                        .map_or_else(|| UNKNOWN_TYPE.to_string(), |t| t.as_str().to_string()),
                    kind: None,
                    unit: None,
                    scale: None,
                    writable: n.writable,
                    min: n.min,
                    max: n.max,
                })
            })
            .collect();
        DeviceDef {
            name: self.name.clone(),
            source: self.source(),
            protocol: "opcua",
            address: self.endpoint.clone(),
            template: self.template.clone(),
            groups: self
                .groups
                .iter()
                .map(|g| GroupDef::new(&g.group.name, g.group.interval).pushed(g.subscribe))
                .collect(),
            points,
            details: vec![("endpoint", self.endpoint.clone().into())],
        }
    }
}

/// What the status page shows as the type of a writable node whose config names none.
pub const UNKNOWN_TYPE: &str = "unknown until read";

/// Validates one `protocol: opcua` entry of `devices:` at `at` with its common keys; `None`
/// when it has problems (all of them pushed to `p`).
pub fn validate_opcua_device(
    d: &RawOpcuaDevice,
    common: DeviceCommon,
    at: &str,
    p: &mut Problems,
) -> Option<OpcuaDeviceConfig> {
    let before = p.0.len();
    if cfg!(not(feature = "opcua")) {
        p.push(
            format!("{at}.protocol"),
            "this build has no OPC-UA client (it was built without the `opcua` feature)",
        );
    }
    let endpoint = match d.endpoint.as_deref() {
        None => {
            p.push(format!("{at}.endpoint"), "is required");
            String::new()
        }
        Some(e) => {
            let rest = e.strip_prefix("opc.tcp://").unwrap_or("");
            let host_port = rest.split('/').next().unwrap_or("");
            if rest.is_empty() || host_port.is_empty() {
                p.push(
                    format!("{at}.endpoint"),
                    format!("expected a URL like opc.tcp://host:4840/, got {e:?}"),
                );
            }
            e.to_string()
        }
    };
    let policy = match d.security_policy.as_deref() {
        None | Some("None") => SecurityPolicy::None,
        Some("Basic256Sha256") => SecurityPolicy::Basic256Sha256,
        Some(other) => {
            p.push(
                format!("{at}.security_policy"),
                format!("expected None or Basic256Sha256, got {other:?}"),
            );
            SecurityPolicy::None
        }
    };
    let mode = match (d.security_mode.as_deref(), policy) {
        (None, SecurityPolicy::None) => SecurityMode::None,
        (None, _) => SecurityMode::SignAndEncrypt,
        (Some("None"), _) => SecurityMode::None,
        (Some("Sign"), _) => SecurityMode::Sign,
        (Some("SignAndEncrypt"), _) => SecurityMode::SignAndEncrypt,
        (Some(other), _) => {
            p.push(
                format!("{at}.security_mode"),
                format!("expected None, Sign or SignAndEncrypt, got {other:?}"),
            );
            SecurityMode::None
        }
    };
    match (policy, mode) {
        (SecurityPolicy::None, SecurityMode::Sign | SecurityMode::SignAndEncrypt) => p.push(
            format!("{at}.security_mode"),
            "needs a security_policy other than None",
        ),
        (SecurityPolicy::Basic256Sha256, SecurityMode::None) => p.push(
            format!("{at}.security_mode"),
            "must be Sign or SignAndEncrypt with security_policy Basic256Sha256",
        ),
        _ => {}
    }
    let identity = match (&d.username, &d.password) {
        (None, None) => Identity::Anonymous,
        (Some(u), Some(pw)) if !u.is_empty() => Identity::User {
            username: u.clone(),
            password: pw.clone(),
        },
        (Some(_), Some(_)) => {
            p.push(format!("{at}.username"), "must not be empty");
            Identity::Anonymous
        }
        (Some(_), None) => {
            p.push(format!("{at}.password"), "is required with username");
            Identity::Anonymous
        }
        (None, Some(_)) => {
            p.push(format!("{at}.username"), "is required with password");
            Identity::Anonymous
        }
    };
    if d.check_server_hostname.is_some() && policy == SecurityPolicy::None {
        p.push(
            format!("{at}.check_server_hostname"),
            "needs a security_policy other than None (without one no server certificate is checked)",
        );
    }
    let pki_dir = match d.pki_dir.as_deref() {
        Some("") => {
            p.push(format!("{at}.pki_dir"), "must not be empty");
            None
        }
        other => other.map(PathBuf::from),
    };
    let request_timeout = in_range(
        d.request_timeout_ms,
        5000,
        100..=600_000,
        format!("{at}.request_timeout_ms"),
        p,
    );
    let reconnect_initial = in_range(
        d.reconnect_initial_ms,
        1000,
        10..=600_000,
        format!("{at}.reconnect_initial_ms"),
        p,
    );
    let reconnect_max = in_range(
        d.reconnect_max_ms,
        30_000,
        10..=3_600_000,
        format!("{at}.reconnect_max_ms"),
        p,
    );
    if reconnect_initial > reconnect_max {
        p.push(
            format!("{at}.reconnect_initial_ms"),
            format!("{reconnect_initial} is more than reconnect_max_ms ({reconnect_max})"),
        );
    }
    let raw_groups = d.groups.as_deref();
    // The keys every group has, checked as every protocol's are.
    let plain: Option<Vec<RawGroup>> = raw_groups.map(|groups| {
        groups
            .iter()
            .map(|g| RawGroup {
                name: g.name.clone(),
                interval_ms: g.interval_ms,
            })
            .collect()
    });
    let groups = validate_groups(plain.as_deref(), at, p);
    let mut opcua_groups: Vec<OpcuaGroupConfig> = groups
        .into_iter()
        .enumerate()
        .map(|(i, group)| {
            let raw = raw_groups.and_then(|g| g.get(i));
            let subscribe = raw.and_then(|g| g.subscribe).unwrap_or(false);
            let deadband = raw.and_then(|g| g.deadband);
            if let Some(db) = deadband {
                let gat = format!("{at}.groups[{i}].deadband");
                if !db.is_finite() || db < 0.0 {
                    p.push(gat, format!("{db} must be a number >= 0"));
                } else if !subscribe {
                    p.push(gat, "needs subscribe: true (reads have no deadband)");
                }
            }
            OpcuaGroupConfig {
                group,
                subscribe,
                deadband,
                nodes: Vec::new(),
            }
        })
        .collect();
    validate_nodes(d.nodes.as_deref(), &mut opcua_groups, at, p);
    for (i, g) in opcua_groups.iter().enumerate() {
        if g.nodes.is_empty() && d.nodes.as_ref().is_some_and(|n| !n.is_empty()) {
            p.push(
                format!("{at}.groups[{i}]"),
                format!("group {:?} has no nodes", g.group.name),
            );
        }
    }
    let slowest = opcua_groups
        .iter()
        .map(|g| g.group.interval.as_millis() as u64)
        .max()
        .unwrap_or(1000);
    let watchdog = in_range(
        d.watchdog_ms,
        slowest.saturating_mul(3).max(30_000),
        1000..=86_400_000,
        format!("{at}.watchdog_ms"),
        p,
    );
    if p.0.len() > before {
        return None;
    }
    Some(OpcuaDeviceConfig {
        name: common.name,
        template: common.template,
        endpoint,
        security_policy: policy,
        security_mode: mode,
        identity,
        pki_dir,
        trust_server_certs: d.trust_server_certs.unwrap_or(false),
        check_server_hostname: d.check_server_hostname.unwrap_or(true),
        request_timeout: Duration::from_millis(request_timeout),
        reconnect_initial: Duration::from_millis(reconnect_initial),
        reconnect_max: Duration::from_millis(reconnect_max),
        watchdog: Duration::from_millis(watchdog),
        hold: common.hold,
        groups: opcua_groups,
    })
}

fn validate_nodes(
    raw: Option<&[RawOpcuaNode]>,
    groups: &mut [OpcuaGroupConfig],
    at: &str,
    p: &mut Problems,
) {
    let nodes = match raw {
        None | Some([]) => {
            p.push(format!("{at}.nodes"), "needs at least one node");
            return;
        }
        Some(n) => n,
    };
    for (i, n) in nodes.iter().enumerate() {
        let nat = format!("{at}.nodes[{i}]");
        let node_id = match n.node_id.as_deref() {
            None => {
                p.push(format!("{nat}.node_id"), "is required");
                String::new()
            }
            Some(id) => {
                if !node_id_parses(id) {
                    p.push(
                        format!("{nat}.node_id"),
                        format!("{id:?} is not a node id like ns=2;s=Name or i=2258"),
                    );
                }
                id.to_string()
            }
        };
        let name = match n.name.as_deref() {
            None => {
                p.push(format!("{nat}.name"), "is required");
                String::new()
            }
            Some(s) if !valid_name(s) => {
                p.push(
                    format!("{nat}.name"),
                    format!("{s:?} must be 1 to 64 letters, digits, '-' or '_'"),
                );
                String::new()
            }
            Some(s) => s.to_string(),
        };
        let group = match n.group.as_deref() {
            None if groups.len() <= 1 => 0,
            None => {
                p.push(
                    format!("{nat}.group"),
                    "is required when the device has more than one group",
                );
                continue;
            }
            Some(g) => match groups.iter().position(|c| c.group.name == g) {
                Some(i) => i,
                None => {
                    p.push(format!("{nat}.group"), format!("no group is named {g:?}"));
                    continue;
                }
            },
        };
        let Some(target) = groups.get_mut(group) else {
            continue;
        };
        if !name.is_empty() && target.nodes.iter().any(|o| o.name == name) {
            p.push(
                format!("{nat}.name"),
                format!("{name:?} is used twice in group {:?}", target.group.name),
            );
        }
        let write = validate_write_keys(n, &nat, p);
        target.nodes.push(OpcuaNodeConfig {
            node_id,
            name,
            writable: write.writable,
            data_type: write.data_type,
            min: write.min,
            max: write.max,
        });
    }
    unique_writable_names(nodes, at, p);
}

/// `writable`, `data_type`, `min` and `max` of one node, checked.
struct WriteKeys {
    writable: bool,
    data_type: Option<NodeType>,
    min: Option<f64>,
    max: Option<f64>,
}

fn validate_write_keys(n: &RawOpcuaNode, nat: &str, p: &mut Problems) -> WriteKeys {
    let writable = n.writable.unwrap_or(false);
    let data_type = n.data_type.as_deref().and_then(|t| {
        let parsed = NodeType::parse(t);
        if parsed.is_none() {
            let names: Vec<&str> = NodeType::ALL.iter().map(|t| t.as_str()).collect();
            p.push(
                format!("{nat}.data_type"),
                format!("expected one of {}, got {t:?}", names.join(", ")),
            );
        }
        parsed
    });
    let mut bound = |key: &str, value: Option<f64>| -> Option<f64> {
        let v = value?;
        if !v.is_finite() {
            p.push(
                format!("{nat}.{key}"),
                format!("{v} must be a finite number"),
            );
            return None;
        }
        if let Some(t) = data_type.filter(|t| !t.is_numeric()) {
            p.push(
                format!("{nat}.{key}"),
                format!("a {t} node has no range: min and max are for numeric nodes"),
            );
        }
        Some(v)
    };
    let min = bound("min", n.min);
    let max = bound("max", n.max);
    if let (Some(lo), Some(hi)) = (min, max) {
        if lo > hi {
            p.push(
                format!("{nat}.min"),
                format!("{lo} is more than max ({hi})"),
            );
        }
    }
    if !writable {
        for (key, set) in [
            ("data_type", n.data_type.is_some()),
            ("min", n.min.is_some()),
            ("max", n.max.is_some()),
        ] {
            if set {
                p.push(
                    format!("{nat}.{key}"),
                    "is only for a writable node (writable: true)",
                );
            }
        }
    }
    WriteKeys {
        writable,
        data_type,
        min,
        max,
    }
}

/// A command names the points it writes: a writable node's name may name no other node of
/// the device (names are otherwise unique only within a group).
fn unique_writable_names(nodes: &[RawOpcuaNode], at: &str, p: &mut Problems) {
    for (i, n) in nodes.iter().enumerate() {
        let Some(name) = n.name.as_deref() else {
            continue;
        };
        if n.writable != Some(true) {
            continue;
        }
        let others: Vec<String> = nodes
            .iter()
            .enumerate()
            .filter(|(j, o)| *j != i && o.name.as_deref() == Some(name))
            .map(|(j, _)| format!("nodes[{j}]"))
            .collect();
        if !others.is_empty() {
            p.push(
                format!("{at}.nodes[{i}].name"),
                format!(
                    "{name:?} is writable, so it must name no other node of the device (also {})",
                    others.join(", ")
                ),
            );
        }
    }
}

#[cfg(all(test, not(feature = "opcua")))]
mod without_the_client {
    #[test]
    fn a_build_without_the_client_refuses_opcua_devices() {
        let text = "connector:\n  data_dir: /d\ndevices:\n  - name: line-1\n    protocol: opcua\n    endpoint: opc.tcp://127.0.0.1:4840/\n    groups: [{name: fast, interval_ms: 200}]\n    nodes: [{node_id: \"ns=2;s=T\", name: t, group: fast}]\n";
        let problems = crate::config::from_yaml(text).unwrap_err();
        assert!(
            problems
                .0
                .iter()
                .any(|p| p.to_string().contains("devices[0].protocol")),
            "{problems:?}"
        );
    }
}

#[cfg(all(test, feature = "opcua"))]
mod tests {
    use crate::config::from_yaml;

    fn errors(devices: &str) -> Vec<String> {
        let text = format!("connector:\n  data_dir: /d\ndevices:\n{devices}");
        match from_yaml(&text) {
            Ok(_) => Vec::new(),
            Err(e) => e.0.into_iter().map(|p| p.to_string()).collect(),
        }
    }

    #[test]
    fn a_full_opcua_device_is_valid_with_its_defaults() {
        let text = "connector:\n  data_dir: /d\ndevices:\n  - name: line-1\n    protocol: opcua\n    endpoint: opc.tcp://127.0.0.1:4840/\n    groups:\n      - name: fast\n        interval_ms: 200\n      - name: slow\n        interval_ms: 60000\n        subscribe: true\n        deadband: 0.5\n    nodes:\n      - { node_id: \"ns=2;s=Temp\", name: temp, group: fast }\n      - { node_id: \"i=2258\", name: time, group: slow }\n";
        let cfg = from_yaml(text).unwrap();
        let d = &cfg.devices.opcua[0];
        assert_eq!(d.source(), "opcua/line-1");
        assert_eq!(d.security_policy, super::SecurityPolicy::None);
        assert_eq!(d.security_mode, super::SecurityMode::None);
        assert_eq!(d.hold, crate::sources::hold::DEFAULT_HOLD);
        assert_eq!(d.watchdog, std::time::Duration::from_secs(180));
        assert_eq!(d.groups[1].deadband, Some(0.5));
        assert!(d.groups[1].subscribe);
        assert_eq!(d.groups[0].nodes[0].name, "temp");
        assert!(cfg.source_names().contains(&"opcua/line-1".to_string()));
    }

    #[test]
    fn every_opcua_problem_is_reported_with_its_path() {
        let errs = errors(
            "  - name: plc\n    protocol: opcua\n    endpoint: http://x\n    security_policy: Basic128\n    security_mode: Sign\n    username: u\n    groups:\n      - name: a\n        deadband: 1\n      - name: b\n    nodes:\n      - { node_id: \"ns=x;q=1\", name: t, group: a }\n      - { node_id: \"i=1\", name: t, group: a }\n      - { node_id: \"i=2\", name: u }\n",
        );
        for expected in [
            "devices[0].endpoint: expected a URL",
            "devices[0].security_policy: expected None or Basic256Sha256",
            "devices[0].security_mode: needs a security_policy other than None",
            "devices[0].password: is required with username",
            "devices[0].groups[0].deadband: needs subscribe: true",
            "devices[0].nodes[0].node_id: \"ns=x;q=1\" is not a node id",
            "devices[0].nodes[1].name: \"t\" is used twice in group \"a\"",
            "devices[0].nodes[2].group: is required when the device has more than one group",
            "devices[0].groups[1]: group \"b\" has no nodes",
        ] {
            assert!(
                errs.iter().any(|e| e.starts_with(expected)),
                "missing {expected:?} in {errs:#?}"
            );
        }
    }

    #[test]
    fn basic256sha256_defaults_to_sign_and_encrypt_and_refuses_mode_none() {
        let ok = "connector:\n  data_dir: /d\ndevices:\n  - name: s\n    protocol: opcua\n    endpoint: opc.tcp://h:4840\n    security_policy: Basic256Sha256\n    nodes: [ { node_id: \"i=2258\", name: t } ]\n";
        let cfg = from_yaml(ok).unwrap();
        assert_eq!(
            cfg.devices.opcua[0].security_mode,
            super::SecurityMode::SignAndEncrypt
        );
        let errs = errors("  - name: s\n    protocol: opcua\n    endpoint: opc.tcp://h:4840\n    security_policy: Basic256Sha256\n    security_mode: None\n    nodes: [ { node_id: \"i=2258\", name: t } ]\n");
        assert!(
            errs.iter()
                .any(|e| e.starts_with("devices[0].security_mode: must be Sign or SignAndEncrypt")),
            "{errs:?}"
        );
    }

    #[test]
    fn check_server_hostname_defaults_to_true_and_needs_a_security_policy() {
        let secure = "connector:\n  data_dir: /d\ndevices:\n  - name: s\n    protocol: opcua\n    endpoint: opc.tcp://h:4840\n    security_policy: Basic256Sha256\n    nodes: [ { node_id: \"i=2258\", name: t } ]\n";
        assert!(from_yaml(secure).unwrap().devices.opcua[0].check_server_hostname);
        let off = secure.replace("    nodes:", "    check_server_hostname: false\n    nodes:");
        assert!(!from_yaml(&off).unwrap().devices.opcua[0].check_server_hostname);
        let errs = errors("  - name: s\n    protocol: opcua\n    endpoint: opc.tcp://h:4840\n    check_server_hostname: false\n    nodes: [ { node_id: \"i=2258\", name: t } ]\n");
        assert!(
            errs.iter().any(|e| e.starts_with(
                "devices[0].check_server_hostname: needs a security_policy other than None"
            )),
            "{errs:?}"
        );
        let modbus = errors("  - name: m\n    protocol: modbus_tcp\n    host: 127.0.0.1\n    check_server_hostname: false\n    points: [ { name: p, register: 1 } ]\n");
        assert!(
            modbus
                .iter()
                .any(|e| e.starts_with("devices[0].check_server_hostname")),
            "{modbus:?}"
        );
    }

    #[test]
    fn nothing_is_writable_by_default_and_writable_nodes_keep_their_type_and_range() {
        let text = "connector:\n  data_dir: /d\ndevices:\n  - name: s\n    protocol: opcua\n    endpoint: opc.tcp://h:4840\n    nodes:\n      - { node_id: \"ns=2;s=T\", name: t }\n      - { node_id: \"ns=2;s=SP\", name: sp, writable: true, data_type: Double, min: 0, max: 120.5 }\n      - { node_id: \"ns=2;s=On\", name: pump, writable: true }\n";
        let cfg = from_yaml(text).unwrap();
        let d = &cfg.devices.opcua[0];
        let nodes: Vec<_> = d.nodes().collect();
        assert!(!nodes[0].writable);
        assert!(nodes[1].writable);
        assert_eq!(nodes[1].data_type, Some(super::NodeType::Double));
        assert_eq!((nodes[1].min, nodes[1].max), (Some(0.0), Some(120.5)));
        let points = d.describe().writable();
        assert_eq!(points.len(), 2, "{points:?}");
        assert_eq!(points[0].name, "sp");
        assert_eq!(points[0].area, "node");
        assert_eq!(points[0].data_type, "Double");
        assert_eq!(points[0].max, Some(120.5));
        assert_eq!(points[1].data_type, super::UNKNOWN_TYPE);
        assert!(d.node_named("t").is_some_and(|n| !n.writable));
        assert!(d.node_named("pump").is_some_and(|n| n.writable));
        assert!(d.node_named("nope").is_none());
    }

    #[test]
    fn every_problem_of_a_writable_node_is_reported_with_its_path() {
        let errs = errors(
            "  - name: s\n    protocol: opcua\n    endpoint: opc.tcp://h:4840\n    groups: [ { name: a }, { name: b } ]\n    nodes:\n      - { node_id: \"i=1\", name: sp, group: a, writable: true, min: 80, max: 75 }\n      - { node_id: \"i=2\", name: pump, group: a, writable: true, data_type: Boolean, max: 1 }\n      - { node_id: \"i=3\", name: t, group: a, min: 0, data_type: Double }\n      - { node_id: \"i=4\", name: x, group: a, writable: true, data_type: Real }\n      - { node_id: \"i=5\", name: sp, group: b }\n",
        );
        for expected in [
            "devices[0].nodes[0].min: 80 is more than max (75)",
            "devices[0].nodes[0].name: \"sp\" is writable, so it must name no other node of the device (also nodes[4])",
            "devices[0].nodes[1].max: a Boolean node has no range",
            "devices[0].nodes[2].min: is only for a writable node (writable: true)",
            "devices[0].nodes[2].data_type: is only for a writable node",
            "devices[0].nodes[3].data_type: expected one of Boolean, SByte,",
        ] {
            assert!(
                errs.iter().any(|e| e.starts_with(expected)),
                "missing {expected:?} in {errs:#?}"
            );
        }
    }

    #[test]
    fn node_types_name_themselves_and_map_from_their_namespace_0_ids() {
        use super::NodeType;
        for (i, t) in NodeType::ALL.iter().enumerate() {
            assert_eq!(NodeType::from_ns0(i as u32 + 1), Some(*t));
            assert_eq!(NodeType::parse(t.as_str()), Some(*t));
        }
        assert_eq!(NodeType::from_ns0(290), Some(NodeType::Double));
        assert_eq!(NodeType::from_ns0(13), None);
        assert_eq!(NodeType::from_ns0(0), None);
        assert!(!NodeType::Boolean.is_numeric() && !NodeType::String.is_numeric());
        assert!(NodeType::Byte.is_numeric() && NodeType::Float.is_numeric());
    }

    #[test]
    fn a_password_is_never_printed_in_the_config_debug_form() {
        let text = "connector:\n  data_dir: /d\ndevices:\n  - name: s\n    protocol: opcua\n    endpoint: opc.tcp://h:4840\n    username: op\n    password: hunter22\n    nodes: [ { node_id: \"i=2258\", name: t } ]\n";
        let cfg = from_yaml(text).unwrap();
        let shown = format!("{cfg:?}");
        assert!(shown.contains("op"), "{shown}");
        assert!(!shown.contains("hunter22"), "{shown}");
    }
}

/// True when `id` is a node id the client can use (`ns=2;s=Name`, `i=2258`, ...).
#[cfg(feature = "opcua")]
fn node_id_parses(id: &str) -> bool {
    <opcua::types::NodeId as std::str::FromStr>::from_str(id).is_ok()
}

/// Without the client every OPC-UA device is refused already; the node ids are not checked.
#[cfg(not(feature = "opcua"))]
fn node_id_parses(_: &str) -> bool {
    true
}
