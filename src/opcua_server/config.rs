//! `opcua_server:`: raw, validated without I/O. Absent: no server.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Deserialize;

use crate::config::checks::{checked_name, in_range};
use crate::config::{Problem, Problems};

/// Where the server listens when the config says nothing: every interface, OPC-UA's port.
pub const DEFAULT_LISTEN: &str = "0.0.0.0:4840";

/// `opcua_server:`
#[derive(Debug, Default, Deserialize)]
pub struct RawOpcuaServer {
    /// Address and port the server listens on. Default `0.0.0.0:4840`: every interface, as
    /// the SCADA, HMI and MES systems of the plant network reach it (the demo listens on
    /// `127.0.0.1:4840`).
    pub listen: Option<String>,
    /// The host names and addresses clients reach this box by, e.g. `[gw-line-3,
    /// 10.0.4.17]`: the server's certificate, made on first start, carries each of them
    /// (clients check the endpoint URL's host against it), and the endpoint URLs use the
    /// first. Default: this machine's host name, and the listen address unless it is
    /// `0.0.0.0`.
    pub hostnames: Option<Vec<String>>,
    /// The server's application URI, as its certificate carries it. Default
    /// `urn:opex-connector:<connector.name>`.
    pub application_uri: Option<String>,
    /// The namespace of the devices' nodes (`ns=<index>;s=<device>.<point>`). Default
    /// `urn:opex-connector:<connector.name>:devices`.
    pub namespace_uri: Option<String>,
    /// The endpoints offered, each `{policy, mode}`: policy `None`, `Basic256Sha256`,
    /// `Aes128_Sha256_RsaOaep` or `Aes256_Sha256_RsaPss`; mode `Sign` or `SignAndEncrypt`
    /// (`None` with policy `None` only). An endpoint without security is offered only when
    /// listed, and `validate` warns of it. Default `[{policy: Basic256Sha256, mode:
    /// SignAndEncrypt}]`.
    pub security: Option<Vec<RawEndpointSecurity>>,
    /// The server's certificate and key (`own/cert.der`, `private/private.pem`, made on first
    /// start), and the client certificates: `trusted/` and `rejected/`, flat folders of `.der`
    /// files. A client whose certificate is not trusted is refused and its certificate
    /// written to `rejected/`; moving the file to `trusted/` trusts it, without a restart.
    /// Default `<data_dir>/opcua-server-pki`.
    pub pki_dir: Option<String>,
    /// Who may log in: `{name, password_hash, role}`. `password_hash` is what `opex-connector
    /// hash-password` prints (an Argon2id PHC string); `role` is `read` (browse, read,
    /// subscribe; the default) or `write` (also write writable points, through the commands
    /// path: `commands:` must be configured).
    pub users: Option<Vec<RawUser>>,
    /// Anonymous sessions, read only. Default false.
    pub anonymous: Option<bool>,
    /// How much the server takes on, to keep a small board safe.
    pub limits: Option<RawLimits>,
}

/// `opcua_server.security[]`
#[derive(Debug, Default, Deserialize)]
pub struct RawEndpointSecurity {
    /// `None`, `Basic256Sha256`, `Aes128_Sha256_RsaOaep` or `Aes256_Sha256_RsaPss`.
    pub policy: Option<String>,
    /// `None` (with policy `None` only), `Sign` or `SignAndEncrypt`.
    pub mode: Option<String>,
}

/// `opcua_server.users[]`
#[derive(Debug, Default, Deserialize)]
pub struct RawUser {
    /// The user name a client logs in with: 1 to 64 letters, digits, '-' or '_', unique.
    pub name: Option<String>,
    /// The password's Argon2id hash, as `opex-connector hash-password` prints it
    /// (`$argon2id$v=19$m=...`). The password itself is never in the config.
    pub password_hash: Option<String>,
    /// `read` (the default) or `write`.
    pub role: Option<String>,
}

/// `opcua_server.limits:`
#[derive(Debug, Default, Deserialize)]
pub struct RawLimits {
    /// Sessions open at once. Default 10.
    pub sessions: Option<u64>,
    /// Subscriptions of one session. Default 10.
    pub subscriptions_per_session: Option<u64>,
    /// Monitored items of all sessions together. Default 10000.
    pub monitored_items: Option<u64>,
    /// The shortest publishing (and sampling) interval granted, in milliseconds; a client
    /// asking less gets this. Default 100.
    pub min_publishing_interval_ms: Option<u64>,
}

/// A security policy an endpoint offers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Policy {
    /// No security.
    None,
    /// `Basic256Sha256`.
    Basic256Sha256,
    /// `Aes128_Sha256_RsaOaep`.
    Aes128Sha256RsaOaep,
    /// `Aes256_Sha256_RsaPss`.
    Aes256Sha256RsaPss,
}

impl Policy {
    /// Every policy by its name in the config.
    const NAMES: [(&'static str, Policy); 4] = [
        ("None", Policy::None),
        ("Basic256Sha256", Policy::Basic256Sha256),
        ("Aes128_Sha256_RsaOaep", Policy::Aes128Sha256RsaOaep),
        ("Aes256_Sha256_RsaPss", Policy::Aes256Sha256RsaPss),
    ];

    /// Its name in the config and in `/api/status`.
    pub fn as_str(self) -> &'static str {
        name_of(&Self::NAMES, self)
    }
}

/// A message security mode.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// No security (with policy `None`).
    None,
    /// Signed.
    Sign,
    /// Signed and encrypted.
    SignAndEncrypt,
}

impl Mode {
    /// Every mode by its name in the config.
    const NAMES: [(&'static str, Mode); 3] = [
        ("None", Mode::None),
        ("Sign", Mode::Sign),
        ("SignAndEncrypt", Mode::SignAndEncrypt),
    ];

    /// Its name in the config and in `/api/status`.
    pub fn as_str(self) -> &'static str {
        name_of(&Self::NAMES, self)
    }
}

/// The name of `v` in `names` (every value has one).
fn name_of<T: PartialEq>(names: &[(&'static str, T)], v: T) -> &'static str {
    names
        .iter()
        .find(|(_, x)| *x == v)
        .map_or("None", |(n, _)| n)
}

/// What a user may do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// Browse, read, subscribe.
    Read,
    /// Also write writable points.
    Write,
}

/// A user who may log in.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct User {
    /// The user name.
    pub name: String,
    /// The password's Argon2id PHC string.
    pub password_hash: String,
    /// What the user may do.
    pub role: Role,
}

/// `opcua_server.limits`, validated.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Sessions open at once.
    pub sessions: usize,
    /// Subscriptions of one session.
    pub subscriptions_per_session: usize,
    /// Monitored items of all sessions.
    pub monitored_items: usize,
    /// The shortest publishing and sampling interval.
    pub min_publishing_interval: Duration,
}

/// `opcua_server:`, validated.
#[derive(Debug, Clone, PartialEq)]
pub struct OpcuaServerConfig {
    /// Where to listen.
    pub listen: SocketAddr,
    /// The names the certificate carries; the endpoint URLs use the first.
    pub hostnames: Vec<String>,
    /// The application URI.
    pub application_uri: String,
    /// The devices' namespace.
    pub namespace_uri: String,
    /// The endpoints offered.
    pub security: Vec<(Policy, Mode)>,
    /// The PKI folder.
    pub pki_dir: PathBuf,
    /// Who may log in.
    pub users: Vec<User>,
    /// Anonymous read-only sessions.
    pub anonymous: bool,
    /// How much the server takes on.
    pub limits: Limits,
}

impl OpcuaServerConfig {
    /// Validates `raw` at `path` for the connector named `name` with its stores in
    /// `data_dir`; `commands` says whether `commands:` is configured. Problems and warnings
    /// go to `p` and `warnings`; `None` when the section is absent or has a problem.
    pub fn validate(
        raw: Option<&RawOpcuaServer>,
        path: &str,
        name: &str,
        data_dir: &Path,
        commands: bool,
        p: &mut Problems,
        warnings: &mut Vec<Problem>,
    ) -> Option<Self> {
        let raw = raw?;
        let before = p.0.len();
        if !cfg!(feature = "opcua-server") {
            p.push(
                path,
                "this build has no OPC-UA server (built without the opcua-server feature)",
            );
        }
        let listen = match raw.listen.as_deref().unwrap_or(DEFAULT_LISTEN).parse() {
            Ok(a) => a,
            Err(_) => {
                p.push(
                    format!("{path}.listen"),
                    format!(
                        "expected ADDRESS:PORT, e.g. 0.0.0.0:4840, got {:?}",
                        raw.listen.as_deref().unwrap_or_default()
                    ),
                );
                SocketAddr::from(([0, 0, 0, 0], 4840))
            }
        };
        let hostnames = match &raw.hostnames {
            Some(names) => {
                if names.is_empty() {
                    p.push(format!("{path}.hostnames"), "must name at least one host");
                }
                for (i, h) in names.iter().enumerate() {
                    if h.is_empty() || h.len() > 253 || !h.chars().all(host_char) {
                        p.push(
                            format!("{path}.hostnames[{i}]"),
                            format!("{h:?} is not a host name or IP address"),
                        );
                    }
                }
                names.clone()
            }
            None => Vec::new(),
        };
        // The connector's name as a URI holds it.
        let slug: String = name
            .chars()
            .map(|c| {
                if c.is_ascii_alphanumeric() || "-._".contains(c) {
                    c
                } else {
                    '-'
                }
            })
            .collect();
        let application_uri = uri(
            raw.application_uri.as_deref(),
            format!("urn:opex-connector:{slug}"),
            &format!("{path}.application_uri"),
            p,
        );
        let namespace_uri = uri(
            raw.namespace_uri.as_deref(),
            format!("urn:opex-connector:{slug}:devices"),
            &format!("{path}.namespace_uri"),
            p,
        );
        let security = security(raw.security.as_deref(), path, p, warnings);
        let users = users(raw.users.as_deref(), path, p);
        let anonymous = raw.anonymous.unwrap_or(false);
        if users.is_empty() && !anonymous {
            p.push(
                format!("{path}.users"),
                "no one could log in: add a user (`opex-connector hash-password` makes its password_hash), or set anonymous: true for read-only sessions",
            );
        }
        if !commands && users.iter().any(|u| u.role == Role::Write) {
            warnings.push(Problem {
                path: format!("{path}.users"),
                message: "a user has role write, but commands: is not configured, so every write is refused".into(),
            });
        }
        let limits = limits(raw.limits.as_ref(), &format!("{path}.limits"), p);
        let pki_dir = raw
            .pki_dir
            .as_deref()
            .map_or_else(|| data_dir.join("opcua-server-pki"), PathBuf::from);
        (p.0.len() == before).then_some(Self {
            listen,
            hostnames,
            application_uri,
            namespace_uri,
            security,
            pki_dir,
            users,
            anonymous,
            limits,
        })
    }
}

/// A character of a host name or an IP address (v4 or v6).
fn host_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | ':')
}

/// A URI: `default` when absent; else at least a scheme and something after it.
fn uri(raw: Option<&str>, default: String, at: &str, p: &mut Problems) -> String {
    let Some(u) = raw else {
        return default;
    };
    let scheme = u.split(':').next().unwrap_or_default();
    let ok = !scheme.is_empty()
        && u.len() > scheme.len() + 1
        && scheme
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '+' || c == '.' || c == '-')
        && !u.chars().any(char::is_whitespace);
    if !ok {
        p.push(at, format!("{u:?} is not a URI (e.g. urn:acme:line-3)"));
    }
    u.to_string()
}

fn security(
    raw: Option<&[RawEndpointSecurity]>,
    path: &str,
    p: &mut Problems,
    warnings: &mut Vec<Problem>,
) -> Vec<(Policy, Mode)> {
    let Some(raw) = raw else {
        return vec![(Policy::Basic256Sha256, Mode::SignAndEncrypt)];
    };
    if raw.is_empty() {
        p.push(
            format!("{path}.security"),
            "must offer at least one endpoint",
        );
    }
    let mut out: Vec<(Policy, Mode)> = Vec::new();
    for (i, e) in raw.iter().enumerate() {
        let at = format!("{path}.security[{i}]");
        let policy = pick(
            e.policy.as_deref(),
            &Policy::NAMES,
            &format!("{at}.policy"),
            p,
        );
        let mode = pick(e.mode.as_deref(), &Mode::NAMES, &format!("{at}.mode"), p);
        let (Some(policy), Some(mode)) = (policy, mode) else {
            continue;
        };
        if (policy == Policy::None) != (mode == Mode::None) {
            p.push(
                format!("{at}.mode"),
                "mode None goes with policy None only, and policy None with mode None only",
            );
            continue;
        }
        if out.contains(&(policy, mode)) {
            p.push(at, "is listed twice");
            continue;
        }
        if policy == Policy::None {
            warnings.push(Problem {
                path: format!("{path}.security"),
                message: "offers an endpoint without security (policy None): what it serves crosses the network readable and unsigned, and passwords are protected only by the user token policy".into(),
            });
        }
        out.push((policy, mode));
    }
    out
}

/// The entry of `names` called `raw`, or a problem at `at`.
fn pick<T: Copy>(raw: Option<&str>, names: &[(&str, T)], at: &str, p: &mut Problems) -> Option<T> {
    let known = || names.iter().map(|(n, _)| *n).collect::<Vec<_>>().join(", ");
    let Some(raw) = raw else {
        p.push(at, format!("is required ({})", known()));
        return None;
    };
    match names.iter().find(|(n, _)| *n == raw) {
        Some((_, v)) => Some(*v),
        None => {
            p.push(at, format!("expected one of {}, got {raw:?}", known()));
            None
        }
    }
}

fn users(raw: Option<&[RawUser]>, path: &str, p: &mut Problems) -> Vec<User> {
    let mut out: Vec<User> = Vec::new();
    for (i, u) in raw.unwrap_or_default().iter().enumerate() {
        let at = format!("{path}.users[{i}]");
        let name = checked_name(
            u.name.as_deref(),
            &at,
            |n| out.iter().any(|o| o.name == n),
            p,
        );
        let hash = match u.password_hash.as_deref() {
            None => {
                p.push(
                    format!("{at}.password_hash"),
                    "is required: `opex-connector hash-password` prints it",
                );
                None
            }
            Some(h) if is_argon2id(h) => Some(h.to_string()),
            Some(_) => {
                p.push(
                    format!("{at}.password_hash"),
                    "is not an Argon2id hash ($argon2id$v=19$...): `opex-connector hash-password` prints one",
                );
                None
            }
        };
        let role = match u.role.as_deref() {
            None | Some("read") => Some(Role::Read),
            Some("write") => Some(Role::Write),
            Some(other) => {
                p.push(
                    format!("{at}.role"),
                    format!("expected read or write, got {other:?}"),
                );
                None
            }
        };
        if let (Some(name), Some(password_hash), Some(role)) = (name, hash, role) {
            out.push(User {
                name,
                password_hash,
                role,
            });
        }
    }
    out
}

/// True for the shape of an Argon2id PHC string: `$argon2id$v=19$m=..,t=..,p=..$salt$hash`.
fn is_argon2id(h: &str) -> bool {
    let parts: Vec<&str> = h.split('$').collect();
    parts.len() == 6
        && parts[0].is_empty()
        && parts[1] == "argon2id"
        && parts[2].starts_with("v=")
        && parts[3].contains("m=")
        && parts[4..].iter().all(|b| {
            !b.is_empty()
                && b.chars()
                    .all(|c| c.is_ascii_alphanumeric() || c == '+' || c == '/')
        })
}

fn limits(raw: Option<&RawLimits>, at: &str, p: &mut Problems) -> Limits {
    let d = RawLimits::default();
    let raw = raw.unwrap_or(&d);
    let n = |v: Option<u64>, default: u64, max: u64, key: &str, p: &mut Problems| {
        usize::try_from(in_range(v, default, 1..=max, format!("{at}.{key}"), p))
            .unwrap_or(usize::MAX)
    };
    Limits {
        sessions: n(raw.sessions, 10, 100, "sessions", p),
        subscriptions_per_session: n(
            raw.subscriptions_per_session,
            10,
            100,
            "subscriptions_per_session",
            p,
        ),
        monitored_items: n(raw.monitored_items, 10_000, 100_000, "monitored_items", p),
        min_publishing_interval: Duration::from_millis(in_range(
            raw.min_publishing_interval_ms,
            100,
            50..=60_000,
            format!("{at}.min_publishing_interval_ms"),
            p,
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const HASH: &str = "$argon2id$v=19$m=19456,t=2,p=1$c2FsdHNhbHRzYWx0$6Y1l5Sp0C0gJYgqfgbQGd8z0Ci4ct2PniQ2BrBh1dmc";

    fn check(
        raw: &RawOpcuaServer,
        commands: bool,
    ) -> (Option<OpcuaServerConfig>, Vec<String>, Vec<String>) {
        let mut p = Problems::default();
        let mut w = Vec::new();
        let c = OpcuaServerConfig::validate(
            Some(raw),
            "opcua_server",
            "gw",
            Path::new("/d"),
            commands,
            &mut p,
            &mut w,
        );
        let lines = |v: &[Problem]| v.iter().map(ToString::to_string).collect::<Vec<_>>();
        (c, lines(&p.0), lines(&w))
    }

    fn user(name: &str, role: Option<&str>) -> RawUser {
        RawUser {
            name: Some(name.into()),
            password_hash: Some(HASH.into()),
            role: role.map(str::to_string),
        }
    }

    #[test]
    fn a_user_alone_gets_the_secure_defaults() {
        let raw = RawOpcuaServer {
            users: Some(vec![user("scada", None)]),
            ..Default::default()
        };
        let (c, problems, warnings) = check(&raw, false);
        assert!(
            problems.is_empty() && warnings.is_empty(),
            "{problems:?} {warnings:?}"
        );
        let c = c.expect("valid");
        assert_eq!(c.listen, "0.0.0.0:4840".parse().expect("address"));
        assert_eq!(
            c.security,
            vec![(Policy::Basic256Sha256, Mode::SignAndEncrypt)]
        );
        assert_eq!(c.pki_dir, PathBuf::from("/d/opcua-server-pki"));
        assert_eq!(c.application_uri, "urn:opex-connector:gw");
        assert_eq!(c.namespace_uri, "urn:opex-connector:gw:devices");
        assert_eq!(c.users[0].role, Role::Read);
        assert!(!c.anonymous);
        assert_eq!(c.limits.sessions, 10);
    }

    #[test]
    fn every_problem_is_reported_with_its_path_and_none_security_is_warned_of() {
        let raw = RawOpcuaServer {
            listen: Some("4840".into()),
            hostnames: Some(vec!["gw line".into()]),
            namespace_uri: Some("no uri".into()),
            security: Some(vec![
                RawEndpointSecurity {
                    policy: Some("None".into()),
                    mode: Some("None".into()),
                },
                RawEndpointSecurity {
                    policy: Some("Basic128".into()),
                    mode: Some("Sign".into()),
                },
                RawEndpointSecurity {
                    policy: Some("Basic256Sha256".into()),
                    mode: Some("None".into()),
                },
            ]),
            users: Some(vec![
                user("ops", Some("admin")),
                RawUser {
                    name: Some("eng".into()),
                    password_hash: Some("secret".into()),
                    role: Some("write".into()),
                },
            ]),
            limits: Some(RawLimits {
                sessions: Some(0),
                ..Default::default()
            }),
            ..Default::default()
        };
        let (c, problems, warnings) = check(&raw, false);
        assert!(c.is_none());
        assert_eq!(
            problems,
            [
                "opcua_server.listen: expected ADDRESS:PORT, e.g. 0.0.0.0:4840, got \"4840\"",
                "opcua_server.hostnames[0]: \"gw line\" is not a host name or IP address",
                "opcua_server.namespace_uri: \"no uri\" is not a URI (e.g. urn:acme:line-3)",
                "opcua_server.security[1].policy: expected one of None, Basic256Sha256, Aes128_Sha256_RsaOaep, Aes256_Sha256_RsaPss, got \"Basic128\"",
                "opcua_server.security[2].mode: mode None goes with policy None only, and policy None with mode None only",
                "opcua_server.users[0].role: expected read or write, got \"admin\"",
                "opcua_server.users[1].password_hash: is not an Argon2id hash ($argon2id$v=19$...): `opex-connector hash-password` prints one",
                "opcua_server.users: no one could log in: add a user (`opex-connector hash-password` makes its password_hash), or set anonymous: true for read-only sessions",
                "opcua_server.limits.sessions: 0 is outside 1..=100",
            ]
        );
        assert_eq!(warnings.len(), 1, "{warnings:?}");
        assert!(
            warnings[0].starts_with("opcua_server.security: offers an endpoint without security")
        );
    }

    #[test]
    fn a_write_user_without_commands_is_warned_of() {
        let raw = RawOpcuaServer {
            users: Some(vec![user("eng", Some("write"))]),
            anonymous: Some(true),
            ..Default::default()
        };
        let (c, problems, warnings) = check(&raw, false);
        assert!(c.is_some() && problems.is_empty(), "{problems:?}");
        assert_eq!(
            warnings,
            ["opcua_server.users: a user has role write, but commands: is not configured, so every write is refused"]
        );
        let (_, _, warnings) = check(&raw, true);
        assert!(warnings.is_empty());
    }
}
