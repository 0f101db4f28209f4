//! S7 devices (`protocol: s7`): their raw keys, where the PLC is, and its points as TIA
//! Portal addresses with a type each, validated without I/O.

use std::time::Duration;

use serde::Deserialize;

use super::address::{Area, Width};
use super::endpoint::{parse_tsap, rack_slot_tsap, Endpoint, DEFAULT_PDU, LOCAL_TSAP, PDU_RANGE};
use super::plan::Item;
use super::types::DataType;
use crate::config::checks::in_range;
use crate::config::Problems;
use crate::sources::catalogue::{DataKind, DeviceDef, GroupDef, PointDef};
use crate::sources::devices::{
    check_groups_used, point_group, point_name, tcp_address, timing, validate_groups, DeviceCommon,
    GroupConfig, RawGroup,
};

/// `devices[]` with `protocol: s7`: the keys besides those every device has.
#[derive(Debug, Default, Deserialize)]
pub struct RawS7Device {
    /// The PLC's host name or IP address.
    pub host: Option<String>,
    /// The ISO-on-TCP port (default 102).
    pub port: Option<u64>,
    /// The CPU's rack, 0 to 7 (default 0). With `slot`, instead of `remote_tsap`.
    pub rack: Option<u64>,
    /// The CPU's slot, 0 to 31 (default 1: S7-1200/1500; an S7-300 is in slot 2).
    pub slot: Option<u64>,
    /// Our TSAP as TIA Portal writes it, e.g. `"01.00"` (the default, a PG connection), for
    /// CPs and CPUs configured for other connection resources.
    pub local_tsap: Option<String>,
    /// The CPU's TSAP as TIA Portal writes it, e.g. `"03.01"`, instead of `rack` and `slot`.
    pub remote_tsap: Option<String>,
    /// The PDU size asked for, 240 to 960 bytes (default 480). The CPU may grant less; the
    /// size it granted is used, and shown in the device's status as `pdu_size`.
    pub pdu_size: Option<u64>,
    /// How long one request (and the connect) may take, in milliseconds; then the
    /// connection is dropped and reopened. Default 1000.
    pub timeout_ms: Option<u64>,
    /// The most the circuit breaker waits before trying a failing PLC again, in seconds (it
    /// starts at 1 s and doubles). Default 60.
    pub backoff_max_secs: Option<u64>,
    /// Poll groups: each polls its points on its own interval. Without groups, one group
    /// `default` polls every point each second.
    pub groups: Option<Vec<RawGroup>>,
    /// The addresses to read.
    pub points: Option<Vec<RawS7Point>>,
}

/// `devices[].points[]` of an S7 device.
#[derive(Debug, Default, Deserialize)]
pub struct RawS7Point {
    /// The point's name: its key in the record's payload. Unique within the device.
    pub name: Option<String>,
    /// The poll group that reads it; may be left out when the device has one group.
    pub group: Option<String>,
    /// Where it is in the PLC, as TIA Portal and STEP 7 write it: `DB10.DBD4`, `DB10.DBW2`,
    /// `DB10.DBB0`, `DB1.DBX0.3`, `MW20`, `MD24`, `M0.1`, `IW0`, `I0.1`, `QW2`, `Q4.0` (`E`
    /// and `A` for inputs and outputs also). Required.
    pub address: Option<String>,
    /// The value's data type: `bool`, `byte`, `word`, `int`, `dword`, `dint`, `real`,
    /// `lreal`, `char`, `string`, `date_and_time`, `dtl` (both as RFC 3339 text), `s5time` or
    /// `time` (both in milliseconds); default `bool` for a bit address, `byte`, `word` or
    /// `dword` for the others. It must fit the address's width (`real` needs a double word
    /// address such as `DB10.DBD4`).
    #[serde(rename = "type")]
    pub data_type: Option<String>,
    /// For `string`: its declared maximum in characters, 1 to 254 (the two-byte header not
    /// counted).
    pub length: Option<u64>,
    /// Multiplies the PLC's number (after which the value is a float). Default 1. A whole
    /// number is rounded to the decimals of `scale` (`scale: 0.1` gives `4.1`, not
    /// `4.1000000000000005`); a `real` is not.
    pub scale: Option<f64>,
    /// The engineering unit, copied into the record (e.g. `°C`).
    pub unit: Option<String>,
    /// A number is reported only once it moved by more than this (in engineering units)
    /// from the value last reported; until then the point's entry keeps that value. Default:
    /// every change is reported.
    pub deadband: Option<f64>,
    /// Commands may write this point (`POST /api/devices/{device}/write`, NATS, MQTT; needs
    /// `commands:`); every area but the inputs (I), which the PLC's input modules write.
    /// Default false: nothing is writable unless it says so.
    pub writable: Option<bool>,
    /// The lowest value a command may write, in engineering units (after `scale`, as the
    /// point reads). A lower value is refused `out_of_range` before anything is sent. Only
    /// for writable numeric points.
    pub min: Option<f64>,
    /// The highest value a command may write, in engineering units. Only for writable
    /// numeric points; not below `min`.
    pub max: Option<f64>,
}

/// One point, validated.
#[derive(Debug, Clone, PartialEq)]
pub struct S7PointConfig {
    /// Its name.
    pub name: String,
    /// Index into the device's groups.
    pub group: usize,
    /// Where it is and its type.
    pub item: Item,
    /// Multiplier from the PLC's number to the engineering value.
    pub scale: Option<f64>,
    /// Engineering unit.
    pub unit: Option<String>,
    /// A number is reported only once it moved by more than this.
    pub deadband: Option<f64>,
    /// Commands may write it.
    pub writable: bool,
    /// Lowest value a command may write, in engineering units.
    pub min: Option<f64>,
    /// Highest value a command may write, in engineering units.
    pub max: Option<f64>,
}

impl S7PointConfig {
    /// True for the types whose value is a number (and so may have a scale, a deadband,
    /// bounds): not bool, text or a date.
    pub fn is_number(&self) -> bool {
        is_number(self.item.data_type)
    }
}

fn is_number(t: DataType) -> bool {
    !matches!(
        t,
        DataType::Bool
            | DataType::Char
            | DataType::String { .. }
            | DataType::DateAndTime
            | DataType::Dtl
    )
}

/// One S7 device, validated.
#[derive(Debug, Clone, PartialEq)]
pub struct S7DeviceConfig {
    /// Its name.
    pub name: String,
    /// The template it was made from (`template:`), shown in `/api/status`.
    pub template: Option<String>,
    /// How to reach the CPU (its timeout is every request's).
    pub endpoint: Endpoint,
    /// Longest circuit-breaker wait.
    pub backoff_max: Duration,
    /// How long a refused sample holds the poll.
    pub hold: Duration,
    /// Its poll groups.
    pub groups: Vec<GroupConfig>,
    /// Its points.
    pub points: Vec<S7PointConfig>,
}

impl S7DeviceConfig {
    /// The source name of its records.
    pub fn source(&self) -> String {
        format!("s7/{}", self.name)
    }

    /// The device and its points as the point catalogue lists them.
    pub fn describe(&self) -> DeviceDef {
        let ep = &self.endpoint;
        let points = self
            .points
            .iter()
            .map(|p| PointDef {
                group: self
                    .groups
                    .get(p.group)
                    .map_or_else(|| "default".to_string(), |g| g.name.clone()),
                name: p.name.clone(),
                area: area_name(p.item.address.area),
                type_name: p.item.data_type.name().to_string(),
                kind: Some(if p.scale.is_some() {
                    DataKind::F64
                } else {
                    kind(p.item.data_type)
                }),
                unit: p.unit.clone(),
                scale: p.scale,
                writable: p.writable,
                min: p.min,
                max: p.max,
            })
            .collect();
        DeviceDef {
            name: self.name.clone(),
            source: self.source(),
            protocol: "s7",
            address: format!("{}:{}", ep.host, ep.port),
            template: self.template.clone(),
            groups: self
                .groups
                .iter()
                .map(|g| GroupDef::new(&g.name, g.interval))
                .collect(),
            points,
            details: vec![(
                "remote_tsap",
                format!("{:02X}.{:02X}", ep.remote_tsap >> 8, ep.remote_tsap & 0xFF).into(),
            )],
        }
    }
}

/// The area as the commands' list of writable points names it.
fn area_name(area: Area) -> &'static str {
    match area {
        Area::Inputs => "input",
        Area::Outputs => "output",
        Area::Flags => "bit_memory",
        Area::Db(_) => "data_block",
    }
}

/// The type of a point's value.
fn kind(t: DataType) -> DataKind {
    match t {
        DataType::Bool => DataKind::Bool,
        DataType::Byte | DataType::Word => DataKind::U16,
        DataType::Int => DataKind::I16,
        DataType::DWord => DataKind::U32,
        DataType::DInt | DataType::Time | DataType::S5Time => DataKind::I32,
        DataType::Real => DataKind::F32,
        DataType::LReal => DataKind::F64,
        DataType::Char | DataType::String { .. } | DataType::DateAndTime | DataType::Dtl => {
            DataKind::String
        }
    }
}

/// Validates a `protocol: s7` entry of `devices[]` with its common keys; `None` when a
/// problem was found.
pub fn validate_s7_device(
    d: &RawS7Device,
    common: DeviceCommon,
    at: &str,
    p: &mut Problems,
) -> Option<S7DeviceConfig> {
    let before = p.0.len();
    if cfg!(not(feature = "s7")) {
        p.push(
            format!("{at}.protocol"),
            "this build has no S7 client (it was built without the `s7` feature)",
        );
    }
    let (host, port) = tcp_address(
        d.host.as_deref(),
        d.port,
        "s7",
        super::endpoint::DEFAULT_PORT,
        at,
        p,
    );
    let tsap = |key: &str, raw: Option<&str>, p: &mut Problems| -> Option<u16> {
        let text = raw?;
        parse_tsap(text)
            .map_err(|e| p.push(format!("{at}.{key}"), e))
            .ok()
    };
    let local_tsap = tsap("local_tsap", d.local_tsap.as_deref(), p).unwrap_or(LOCAL_TSAP);
    let remote_tsap = match (
        tsap("remote_tsap", d.remote_tsap.as_deref(), p),
        d.rack.is_some() || d.slot.is_some(),
    ) {
        (Some(_), true) => {
            p.push(
                format!("{at}.remote_tsap"),
                "give rack and slot or remote_tsap, not both",
            );
            0
        }
        (Some(t), false) => t,
        (None, _) => {
            let rack = in_range(d.rack, 0, 0..=7, format!("{at}.rack"), p) as u8;
            let slot = in_range(d.slot, 1, 0..=31, format!("{at}.slot"), p) as u8;
            rack_slot_tsap(rack.min(7), slot.min(31)).unwrap_or_default()
        }
    };
    let pdu_size = in_range(
        d.pdu_size,
        u64::from(DEFAULT_PDU),
        u64::from(*PDU_RANGE.start())..=u64::from(*PDU_RANGE.end()),
        format!("{at}.pdu_size"),
        p,
    ) as u16;
    let timing = timing(d.timeout_ms, d.backoff_max_secs, at, p);
    let groups = validate_groups(d.groups.as_deref(), at, p);
    let points = validate_points(d.points.as_deref(), &groups, at, p);
    let used: Vec<usize> = points.iter().map(|pt| pt.group).collect();
    check_groups_used(&groups, &used, at, p);
    (p.0.len() == before).then_some(S7DeviceConfig {
        name: common.name,
        template: common.template,
        endpoint: Endpoint {
            host,
            port,
            local_tsap,
            remote_tsap,
            pdu_size,
            timeout: timing.timeout,
        },
        backoff_max: timing.backoff_max,
        hold: common.hold,
        groups,
        points,
    })
}

fn validate_points(
    raw: Option<&[RawS7Point]>,
    groups: &[GroupConfig],
    at: &str,
    p: &mut Problems,
) -> Vec<S7PointConfig> {
    let raw = raw.unwrap_or_default();
    if raw.is_empty() {
        p.push(
            format!("{at}.points"),
            "an S7 device needs at least one point",
        );
    }
    let mut out: Vec<S7PointConfig> = Vec::new();
    for (i, r) in raw.iter().enumerate() {
        let pat = format!("{at}.points[{i}]");
        let name = point_name(
            r.name.as_deref(),
            &pat,
            |n| out.iter().any(|o| o.name == n),
            p,
        );
        let group = point_group(r.group.as_deref(), groups, &pat, p);
        let Some(item) = item(r, &pat, p) else {
            continue;
        };
        let number = is_number(item.data_type);
        let not_a_number = |key: &str, p: &mut Problems| {
            p.push(
                format!("{pat}.{key}"),
                format!("is only for numbers, not a {}", item.data_type.name()),
            )
        };
        match r.scale {
            Some(_) if !number => not_a_number("scale", p),
            Some(s) if !s.is_finite() || s == 0.0 => p.push(
                format!("{pat}.scale"),
                format!("{s} must be a number other than 0"),
            ),
            _ => {}
        }
        match r.deadband {
            Some(_) if !number => not_a_number("deadband", p),
            Some(d) if !d.is_finite() || d < 0.0 => {
                p.push(format!("{pat}.deadband"), format!("{d} must be 0 or more"))
            }
            _ => {}
        }
        let writable = r.writable.unwrap_or(false);
        if writable && item.address.area == Area::Inputs {
            p.push(
                format!("{pat}.writable"),
                "inputs (I) are written by the PLC's input modules, not by commands",
            );
        }
        for (key, v) in [("min", r.min), ("max", r.max)] {
            if v.is_some() && !(writable && number) {
                p.push(
                    format!("{pat}.{key}"),
                    "is only for writable numeric points",
                );
            }
        }
        if let (Some(lo), Some(hi)) = (r.min, r.max) {
            if hi < lo {
                p.push(format!("{pat}.max"), format!("{hi} is below min {lo}"));
            }
        }
        out.push(S7PointConfig {
            name,
            group,
            item,
            scale: r.scale,
            unit: r.unit.clone(),
            deadband: r.deadband,
            writable,
            min: r.min,
            max: r.max,
        });
    }
    out
}

/// The point's address and type; `None` (with the problem) when either is wrong or they do
/// not fit each other.
fn item(r: &RawS7Point, pat: &str, p: &mut Problems) -> Option<Item> {
    let Some(text) = r.address.as_deref() else {
        p.push(
            format!("{pat}.address"),
            "is required for an S7 point (e.g. DB10.DBD4, MW20, I0.1)",
        );
        return None;
    };
    let address = super::address::Address::parse(text)
        .map_err(|e| p.push(format!("{pat}.address"), e))
        .ok()?;
    let type_name = r.data_type.as_deref().unwrap_or(match address.width {
        Width::Bit(_) => "bool",
        Width::Byte => "byte",
        Width::Word => "word",
        Width::DWord => "dword",
    });
    let length = match r.length {
        Some(n) if type_name != "string" => {
            p.push(
                format!("{pat}.length"),
                format!("is only for a string, not {n}"),
            );
            return None;
        }
        Some(n) => Some(u32::try_from(n).unwrap_or(u32::MAX)),
        None => None,
    };
    let data_type = DataType::parse(type_name, length)
        .map_err(|e| {
            let key = if e.contains("length") {
                "length"
            } else {
                "type"
            };
            p.push(format!("{pat}.{key}"), e)
        })
        .ok()?;
    Item::new(address, data_type)
        .map_err(|e| p.push(format!("{pat}.type"), e))
        .ok()
}

#[cfg(all(test, not(feature = "s7")))]
mod without_the_client {
    #[test]
    fn a_build_without_the_client_refuses_s7_devices() {
        let text = "connector:\n  data_dir: /d\ndevices:\n  - name: plc\n    protocol: s7\n    host: 127.0.0.1\n    groups: [{name: fast, interval_ms: 200}]\n    points: [{name: t, group: fast, address: DB1.DBW0}]\n";
        let problems = crate::config::from_yaml(text).unwrap_err();
        assert!(
            problems.0.iter().any(|p| p
                .to_string()
                .contains("devices[0].protocol: this build has no S7 client")),
            "{problems:?}"
        );
    }
}

#[cfg(test)]
mod tests {
    use crate::config::from_yaml;

    use crate::config::test_problems as problems;

    #[test]
    fn a_valid_s7_device_gets_its_defaults_types_from_its_widths_and_names_a_flow_source() {
        let cfg = from_yaml(
            r#"
connector: {data_dir: /d}
devices:
  - name: line-plc
    protocol: s7
    host: 10.0.0.9
    slot: 2
    points:
      - {name: temp, address: DB10.DBD4, type: real, unit: "°C", deadband: 0.5}
      - {name: count, address: DB10.DBW8}
      - {name: running, address: DB1.DBX0.3, writable: true}
      - {name: setpoint, address: MW20, type: int, scale: 0.1, writable: true, min: 0, max: 100}
      - {name: label, address: DB10.DBB20, type: string, length: 16}
"#,
        )
        .expect("valid");
        let d = &cfg.devices.s7[0];
        let ep = &d.endpoint;
        assert_eq!(
            (ep.port, ep.local_tsap, ep.remote_tsap, ep.pdu_size),
            (102, 0x0100, 0x0102, 480)
        );
        assert_eq!(d.points[1].item.data_type.name(), "word");
        assert_eq!(d.points[2].item.data_type.name(), "bool");
        assert!(cfg.source_names().contains(&"s7/line-plc".to_string()));
        let def = d.describe();
        assert_eq!(def.protocol, "s7");
        assert_eq!(def.writable().len(), 2);
    }

    #[test]
    fn every_problem_of_an_s7_device_is_reported_with_its_path() {
        let errs = problems(
            r#"
devices:
  - name: plc
    protocol: s7
    rack: 9
    remote_tsap: "03.01"
    pdu_size: 100
    unit: 3
    endpoint: opc.tcp://x
    points:
      - {name: a, address: DB10.DBB4, type: real}
      - {name: b, address: DB10.DBQ4}
      - {name: c, address: DB10.DBD4, type: float}
      - {name: d, address: IW0, writable: true}
      - {name: e, address: DB1.DBB0, type: string}
      - {name: f, register: 4, address: MW0, deadband: -1}
      - {name: g, address: M0.1, scale: 2}
      - {name: h}
"#,
        );
        for want in [
            "devices[0].host: is required for s7",
            "devices[0].remote_tsap: give rack and slot or remote_tsap, not both",
            "devices[0].pdu_size: 100 is outside 240..=960",
            "devices[0].unit: unknown key",
            "devices[0].endpoint: unknown key",
            "devices[0].points[0].type: DB10.DBB4 does not fit the type real",
            "devices[0].points[1].address: ",
            "devices[0].points[2].type: ",
            "devices[0].points[3].writable: inputs (I) are written by the PLC's input modules, not by commands",
            "devices[0].points[4].length: ",
            "devices[0].points[5].register: unknown key",
            "devices[0].points[5].deadband: -1 must be 0 or more",
            "devices[0].points[6].scale: is only for numbers, not a bool",
            "devices[0].points[7].address: is required for an S7 point (e.g. DB10.DBD4, MW20, I0.1)",
        ] {
            assert!(
                errs.iter().any(|e| e.starts_with(want)),
                "missing {want:?} in {errs:#?}"
            );
        }
    }

    #[test]
    fn s7_keys_on_a_modbus_device_and_an_address_on_a_modbus_point_are_unknown_keys() {
        let errs = problems(
            "devices:\n  - {name: m, protocol: modbus_tcp, host: h, slot: 2, points: [{name: a, register: 1, address: DB1.DBW0}]}\n",
        );
        assert_eq!(
            errs,
            [
                "devices[0].slot: unknown key",
                "devices[0].points[0].address: unknown key",
            ],
            "{errs:#?}"
        );
    }
}
