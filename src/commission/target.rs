//! What a tool talks to, in the config's own words: the URL and flags become a `devices:`
//! entry (`tcp://HOST:PORT` gives `host` and `port`, `--word-order little` gives a point's
//! `word_order: little`), which is parsed and validated by the config's own code. A tool
//! therefore accepts exactly what a config accepts, and says what is wrong the same way, at
//! the flag that set it: `--register: 70000 is outside 0..=65535`.

use serde_json::{json, Map, Value};

use super::{Error, Flags};
use crate::config::Problems;
use crate::sources::devices::{read_device, DeviceCommon, RawDeviceKind};
use crate::sources::modbus::config::{validate_modbus_device, ModbusDeviceConfig};
use crate::sources::opcua::config::validate_opcua_device;
use crate::sources::opcua::OpcuaDeviceConfig;

/// The device name the tools give the entry they make (it shows in no output).
const NAME: &str = "commissioning";

/// The keys of an entry being made, each with where it came from (for messages).
#[derive(Debug, Default)]
pub struct Entry {
    tree: Map<String, Value>,
    /// (path in the entry, what set it), e.g. `("points[0].register", "--register")`.
    origins: Vec<(String, String)>,
}

impl Entry {
    /// An entry of `protocol`.
    pub fn new(protocol: &str) -> Self {
        let mut e = Entry::default();
        e.tree.insert("name".into(), json!(NAME));
        e.tree.insert("protocol".into(), json!(protocol));
        e
    }

    /// Sets device key `key`, set by `origin`.
    pub fn set(&mut self, key: &str, value: Value, origin: impl Into<String>) {
        self.tree.insert(key.to_string(), value);
        self.origins.push((key.to_string(), origin.into()));
    }

    /// Adds one list entry under `list` (`points`, `nodes`) with its keys and their origins.
    pub fn push(&mut self, list: &str, keys: Vec<(&str, Value, String)>) {
        let items = self
            .tree
            .entry(list.to_string())
            .or_insert_with(|| Value::Array(Vec::new()));
        let Value::Array(items) = items else { return };
        let at = items.len();
        let mut item = Map::new();
        for (key, value, origin) in keys {
            item.insert(key.to_string(), value);
            self.origins.push((format!("{list}[{at}].{key}"), origin));
        }
        items.push(Value::Object(item));
    }

    /// Sets each flag of `flags` that `keys` names (flag, device key) as that device key.
    pub fn set_flags(&mut self, flags: &Flags<'_>, keys: &[(&str, &str)]) {
        for (flag, key) in keys {
            if let Some(v) = value_of(flags, flag) {
                self.set(key, v, *flag);
            }
        }
    }

    /// The device's common keys, validated, and its protocol's raw keys, or every problem
    /// (parse and validation alike) at the flag that caused it.
    pub fn raw(&self) -> Result<(DeviceCommon, RawDeviceKind), Error> {
        let mut problems = Problems::default();
        let entry = read_device(&self.tree, "", true, &mut problems);
        let common = entry.common.validate(NAME.to_string(), "", &mut problems);
        match entry.kind {
            Some(kind) if problems.is_empty() => Ok((common, kind)),
            _ => Err(self.usage(problems)),
        }
    }

    /// `problems` as a usage error when there is one.
    fn checked<T>(&self, device: Option<T>, problems: Problems) -> Result<T, Error> {
        match device {
            Some(device) if problems.is_empty() => Ok(device),
            _ => Err(self.usage(problems)),
        }
    }

    /// `problems` as a usage error, each at the flag or URL part that set its key.
    pub fn usage(&self, problems: Problems) -> Error {
        let lines: Vec<String> = problems
            .0
            .iter()
            .map(|p| {
                let path = p.path.trim_start_matches('.');
                let origin = self
                    .origins
                    .iter()
                    .find(|(key, _)| path == key || path.starts_with(&format!("{key}.")))
                    .map_or(path, |(_, origin)| origin.as_str());
                format!("{origin}: {}", p.message)
            })
            .collect();
        Error::Usage(lines.join("; "))
    }

    /// The validated Modbus device (the entry's protocol is `modbus_tcp` or `modbus_rtu`).
    pub fn modbus(&self) -> Result<ModbusDeviceConfig, Error> {
        let (common, kind) = self.raw()?;
        let mut p = Problems::default();
        let device = match &kind {
            RawDeviceKind::ModbusTcp(d) | RawDeviceKind::ModbusRtu(d) => {
                validate_modbus_device(d, common, kind.protocol(), "", &mut p)
            }
            other => {
                p.push("protocol", format!("{} is not Modbus", other.protocol()));
                None
            }
        };
        self.checked(device, p)
    }

    /// The validated OPC-UA device (the entry's protocol is `opcua`).
    pub fn opcua(&self) -> Result<OpcuaDeviceConfig, Error> {
        let (common, kind) = self.raw()?;
        let mut p = Problems::default();
        let device = match &kind {
            RawDeviceKind::Opcua(d) => validate_opcua_device(d, common, "", &mut p),
            other => {
                p.push("protocol", format!("{} is not OPC-UA", other.protocol()));
                None
            }
        };
        self.checked(device, p)
    }
}

/// A flag's value as the config would read it: a whole number, a number, `true`/`false`, or
/// text. `None` when the flag is not given; a switch (no value) is `true`.
pub fn value_of(flags: &Flags<'_>, flag: &str) -> Option<Value> {
    let (_, v) = flags.iter().find(|(f, _)| *f == flag)?;
    Some(match v {
        None => Value::Bool(true),
        Some(v) => scalar(v),
    })
}

fn scalar(v: &str) -> Value {
    if let Ok(n) = v.parse::<u64>() {
        json!(n)
    } else if let Ok(n) = v.parse::<i64>() {
        json!(n)
    } else if let Some(n) = v.parse::<f64>().ok().filter(|n| n.is_finite()) {
        json!(n)
    } else if let Ok(b) = v.parse::<bool>() {
        json!(b)
    } else {
        json!(v)
    }
}

/// A Modbus target: `tcp://HOST[:PORT]` (port 502 by default) or
/// `rtu:///dev/ttyUSB0?baud=19200&parity=even&data_bits=8&stop_bits=1`, as the entry's keys.
pub fn modbus_target(url: &str) -> Result<Entry, Error> {
    if let Some(rest) = url.strip_prefix("tcp://") {
        let rest = rest.trim_end_matches('/');
        let (host, port) = split_host_port(rest)
            .ok_or_else(|| Error::Usage(format!("{url:?}: expected tcp://HOST:PORT")))?;
        let mut e = Entry::new("modbus_tcp");
        e.set("host", json!(host), "the URL's host");
        if let Some(port) = port {
            let n = port
                .parse::<u64>()
                .map_err(|_| Error::Usage(format!("{url:?}: the port {port:?} is not a number")))?;
            e.set("port", json!(n), "the URL's port");
        }
        return Ok(e);
    }
    if let Some(rest) = url.strip_prefix("rtu://") {
        let (path, query) = rest.split_once('?').unwrap_or((rest, ""));
        if !path.starts_with('/') {
            return Err(Error::Usage(format!(
                "{url:?}: expected rtu:///dev/ttyUSB0?baud=19200 (the serial device's full path)"
            )));
        }
        let mut e = Entry::new("modbus_rtu");
        e.set("port", json!(path), "the URL's serial device");
        for pair in query.split('&').filter(|p| !p.is_empty()) {
            let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
            if !["baud", "parity", "data_bits", "stop_bits"].contains(&key) {
                return Err(Error::Usage(format!(
                    "{url:?}: unknown setting {key:?} (baud, parity, data_bits, stop_bits)"
                )));
            }
            e.set(key, scalar(value), format!("{key}= in the URL"));
        }
        return Ok(e);
    }
    Err(Error::Usage(format!(
        "{url:?}: expected tcp://HOST:PORT or rtu:///dev/ttyX?baud=19200"
    )))
}

/// `host:port`, `host`, `[v6]:port` or `[v6]`.
fn split_host_port(s: &str) -> Option<(&str, Option<&str>)> {
    if let Some(rest) = s.strip_prefix('[') {
        let (host, after) = rest.split_once(']')?;
        return match after {
            "" => Some((host, None)),
            a => Some((host, Some(a.strip_prefix(':')?))),
        };
    }
    match s.rsplit_once(':') {
        Some((host, port)) if !host.is_empty() && !host.contains(':') => Some((host, Some(port))),
        Some(_) => None,
        None if !s.is_empty() => Some((s, None)),
        None => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_tcp_target_and_point_flags_make_a_validated_device() {
        let flags = [("--unit", Some("3")), ("--timeout-ms", Some("250"))];
        let mut e = modbus_target("tcp://10.0.0.5:5020").expect("target");
        e.set_flags(
            &flags,
            &[("--unit", "unit"), ("--timeout-ms", "timeout_ms")],
        );
        e.push(
            "points",
            vec![
                ("name", json!("value"), "the point".into()),
                ("register", json!(100), "--register".into()),
                ("type", json!("f32"), "--type".into()),
            ],
        );
        let d = e.modbus().expect("valid");
        assert_eq!(d.unit, 3);
        assert_eq!(d.timeout, std::time::Duration::from_millis(250));
        assert_eq!(d.points[0].register, 100);
    }

    #[test]
    fn a_bad_value_is_reported_at_the_flag_that_set_it() {
        let mut e = modbus_target("rtu:///dev/ttyS0?baud=12&parity=mark").expect("target");
        e.set("unit", json!(300), "--unit");
        e.push(
            "points",
            vec![
                ("name", json!("value"), "the point".into()),
                ("register", json!(70000), "--register".into()),
                ("type", json!("f16"), "--type".into()),
            ],
        );
        let Err(Error::Usage(text)) = e.modbus() else {
            panic!("expected a usage error")
        };
        for want in [
            "baud= in the URL: 12 is outside 50..=4000000",
            "parity= in the URL: expected none, even or odd, got \"mark\"",
            "--unit: 300 is outside 0..=247",
            "--register: 70000 is outside 0..=65535",
            "--type: expected bool",
        ] {
            assert!(text.contains(want), "{want} in {text}");
        }
    }

    #[test]
    fn targets_that_are_not_urls_of_a_known_kind_are_refused() {
        for url in ["tcp://", "udp://h:1", "rtu://dev/ttyS0", "tcp://h:x"] {
            assert!(matches!(modbus_target(url), Err(Error::Usage(_))), "{url}");
        }
        assert!(modbus_target("tcp://[::1]:502").is_ok());
        assert!(modbus_target("tcp://plc-7").is_ok());
        assert!(matches!(
            modbus_target("rtu:///dev/ttyS0?speed=9600"),
            Err(Error::Usage(m)) if m.contains("unknown setting \"speed\"")
        ));
    }
}
