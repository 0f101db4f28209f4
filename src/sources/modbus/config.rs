//! Modbus devices (`protocol: modbus_tcp` and `modbus_rtu`): their raw keys, the point list
//! and the line settings, validated without I/O. Both protocols read [`RawModbusDevice`]; the
//! keys of the other transport (`baud` on a TCP device, `host` on an RTU one) are problems.

use std::time::Duration;

use serde::Deserialize;

use crate::config::checks::in_range;
use crate::config::Problems;
use crate::sources::catalogue::{DataKind, DeviceDef, GroupDef, PointDef};
use crate::sources::devices::{
    check_groups_used, point_group, point_name, tcp_address, timing, validate_groups, DeviceCommon,
    GroupConfig, RawGroup,
};

/// `devices[]` with `protocol: modbus_tcp` or `modbus_rtu`: the keys besides those every
/// device has.
#[derive(Debug, Default, Deserialize)]
pub struct RawModbusDevice {
    /// Modbus TCP: the device's host name or IP address.
    pub host: Option<String>,
    /// Modbus TCP: the TCP port (default 502). Modbus RTU: the serial device, e.g.
    /// `/dev/ttyUSB0`; devices with the same port share the line.
    pub port: Option<RawPort>,
    /// The unit id (slave address), 0 to 247; default 1 (TCP: 255 also allowed).
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
    /// How long one request (and the connect) may take, in milliseconds; then the
    /// connection (or the serial port) is dropped and reopened. Default 1000.
    pub timeout_ms: Option<u64>,
    /// Registers (or bits) that may lie unread between two points read in one request.
    /// Default 8; 0 coalesces only contiguous points.
    pub max_gap: Option<u64>,
    /// The most the circuit breaker waits before trying a failing device again, in seconds
    /// (it starts at 1 s and doubles). Default 60.
    pub backoff_max_secs: Option<u64>,
    /// Poll groups: each polls its points on its own interval. Without groups, one group
    /// `default` polls every point each second.
    pub groups: Option<Vec<RawGroup>>,
    /// The registers and bits to read.
    pub points: Option<Vec<RawModbusPoint>>,
}

/// `devices[].port` of a Modbus device: a TCP port number or a serial device path.
#[derive(Debug, Clone, Deserialize)]
#[serde(untagged)]
pub enum RawPort {
    /// A TCP port (Modbus TCP).
    Number(u64),
    /// A serial device (Modbus RTU).
    Path(String),
}

/// `devices[].points[]` of a Modbus device.
#[derive(Debug, Default, Deserialize)]
pub struct RawModbusPoint {
    /// The point's name: its key in the record's payload. Unique within the device.
    pub name: Option<String>,
    /// The poll group that reads it; may be left out when the device has one group.
    pub group: Option<String>,
    /// The address of its first register or bit, 0 to 65535 (protocol addresses, starting
    /// at 0). Required.
    pub register: Option<u64>,
    /// `holding` (default), `input`, `coil` or `discrete`.
    pub kind: Option<String>,
    /// The value's data type: `bool`, `u16`, `i16`, `u32`, `i32`, `u64`, `i64`, `f32`, `f64`
    /// or `string`; default `u16` for registers and `bool` for coils and discrete inputs
    /// (which can only be `bool`); a `bool` register is true when it is not 0.
    #[serde(rename = "type")]
    pub data_type: Option<String>,
    /// For `string`: its length in bytes (2 per register), 1 to 250.
    pub length: Option<u64>,
    /// `big` (default: the first register holds the high word) or `little`.
    pub word_order: Option<String>,
    /// `big` (default: the high byte first within a register, as the standard says) or
    /// `little`.
    pub byte_order: Option<String>,
    /// Multiplies the raw number (after which the value is a float). Default 1. A whole-number
    /// register's value is rounded to the decimals of `scale` and `offset` (`scale: 0.1` gives
    /// `4.1`, not `4.1000000000000005`); a float register's is not.
    pub scale: Option<f64>,
    /// Added after `scale`. Default 0.
    pub offset: Option<f64>,
    /// The engineering unit, copied into the record (e.g. `°C`).
    pub unit: Option<String>,
    /// Commands may write this point (`POST /api/devices/{device}/write`, NATS, MQTT; needs
    /// `commands:`); only holding registers and coils can be writable. Default false:
    /// nothing is writable unless it says so.
    pub writable: Option<bool>,
    /// The lowest value a command may write, in engineering units (after `scale` and
    /// `offset`, as the point reads). A lower value is refused `out_of_range` before anything
    /// is sent. Only for writable numeric points.
    pub min: Option<f64>,
    /// The highest value a command may write, in engineering units. Only for writable
    /// numeric points; not below `min`.
    pub max: Option<f64>,
}

/// Most registers one read request may carry (the protocol's limit for function 3 and 4).
pub const MAX_REGISTERS: u16 = 125;
/// Most bits one read request may carry (the protocol's limit for function 1 and 2).
pub const MAX_BITS: u16 = 2000;
/// Most registers one write request may carry (the protocol's limit for function 16).
pub const MAX_WRITE_REGISTERS: u16 = 123;
/// Most coils one write request may carry (the protocol's limit for function 15).
pub const MAX_WRITE_BITS: u16 = 1968;

/// How a device is reached.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Transport {
    /// Modbus TCP.
    Tcp {
        /// Host name or address.
        host: String,
        /// TCP port.
        port: u16,
    },
    /// Modbus RTU on a serial line.
    Rtu(LineConfig),
}

/// A serial line's settings; every device on the line shares them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LineConfig {
    /// The serial device.
    pub path: String,
    /// Baud rate.
    pub baud: u32,
    /// `none`, `even` or `odd`.
    pub parity: Parity,
    /// 5 to 8.
    pub data_bits: u8,
    /// 1 or 2.
    pub stop_bits: u8,
    /// Quiet time between two frames.
    pub inter_frame_delay: Duration,
}

/// Serial parity.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Parity {
    /// No parity bit.
    None,
    /// Even parity.
    Even,
    /// Odd parity.
    Odd,
}

/// The four Modbus tables.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum RegisterKind {
    /// Holding registers (function 3).
    Holding,
    /// Input registers (function 4).
    Input,
    /// Coils (function 1).
    Coil,
    /// Discrete inputs (function 2).
    Discrete,
}

impl RegisterKind {
    /// The table's name in a writable point's `area`: `coil` or `holding_register` (the
    /// two tables a command can write), `input_register` or `discrete_input`.
    pub fn area(self) -> &'static str {
        match self {
            Self::Holding => "holding_register",
            Self::Input => "input_register",
            Self::Coil => "coil",
            Self::Discrete => "discrete_input",
        }
    }

    /// True for coils and discrete inputs.
    pub fn is_bits(self) -> bool {
        matches!(self, Self::Coil | Self::Discrete)
    }

    /// Most units one request may read.
    pub fn max_per_request(self) -> u16 {
        if self.is_bits() {
            MAX_BITS
        } else {
            MAX_REGISTERS
        }
    }
}

/// How the registers of a point are read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DataType {
    /// One bit, or a register that is not 0.
    Bool,
    /// One register.
    U16,
    /// One register, two's complement.
    I16,
    /// Two registers.
    U32,
    /// Two registers.
    I32,
    /// Four registers.
    U64,
    /// Four registers.
    I64,
    /// Two registers, IEEE 754.
    F32,
    /// Four registers, IEEE 754.
    F64,
    /// `length` bytes, two per register; trailing NUL and spaces are trimmed.
    String(u16),
}

impl DataType {
    /// Its name in the config: `bool`, `u16`, ... `string`.
    pub fn name(self) -> &'static str {
        match self {
            Self::Bool => "bool",
            Self::U16 => "u16",
            Self::I16 => "i16",
            Self::U32 => "u32",
            Self::I32 => "i32",
            Self::U64 => "u64",
            Self::I64 => "i64",
            Self::F32 => "f32",
            Self::F64 => "f64",
            Self::String(_) => "string",
        }
    }

    /// The catalogue's type of its raw value.
    pub fn kind(self) -> DataKind {
        match self {
            Self::Bool => DataKind::Bool,
            Self::U16 => DataKind::U16,
            Self::I16 => DataKind::I16,
            Self::U32 => DataKind::U32,
            Self::I32 => DataKind::I32,
            Self::U64 => DataKind::U64,
            Self::I64 => DataKind::I64,
            Self::F32 => DataKind::F32,
            Self::F64 => DataKind::F64,
            Self::String(_) => DataKind::String,
        }
    }

    /// Registers (or bits) the point spans.
    pub fn width(self) -> u16 {
        match self {
            Self::Bool | Self::U16 | Self::I16 => 1,
            Self::U32 | Self::I32 | Self::F32 => 2,
            Self::U64 | Self::I64 | Self::F64 => 4,
            Self::String(len) => len.div_ceil(2),
        }
    }
}

/// Word or byte order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Order {
    /// Most significant first.
    Big,
    /// Least significant first.
    Little,
}

/// One point, validated.
#[derive(Debug, Clone, PartialEq)]
pub struct PointConfig {
    /// Its name.
    pub name: String,
    /// Index into the device's groups.
    pub group: usize,
    /// First register or bit.
    pub register: u16,
    /// Its table.
    pub kind: RegisterKind,
    /// Its type.
    pub data_type: DataType,
    /// Word order of multi-register values.
    pub word_order: Order,
    /// Byte order within a register.
    pub byte_order: Order,
    /// Multiplier.
    pub scale: Option<f64>,
    /// Offset after the multiplier.
    pub offset: Option<f64>,
    /// Engineering unit.
    pub unit: Option<String>,
    /// Commands may write it (holding registers and coils only).
    pub writable: bool,
    /// Lowest value a command may write, in engineering units.
    pub min: Option<f64>,
    /// Highest value a command may write, in engineering units.
    pub max: Option<f64>,
}

/// One Modbus device, validated.
#[derive(Debug, Clone, PartialEq)]
pub struct ModbusDeviceConfig {
    /// Its name.
    pub name: String,
    /// The template it was made from (`template:`), shown in `/api/status`.
    pub template: Option<String>,
    /// How it is reached.
    pub transport: Transport,
    /// Unit id.
    pub unit: u8,
    /// Per-request timeout.
    pub timeout: Duration,
    /// Largest unread gap inside one request.
    pub max_gap: u16,
    /// Longest circuit-breaker wait.
    pub backoff_max: Duration,
    /// How long a refused sample holds the poll.
    pub hold: Duration,
    /// Its poll groups.
    pub groups: Vec<GroupConfig>,
    /// Its points.
    pub points: Vec<PointConfig>,
}

impl ModbusDeviceConfig {
    /// The source name of its records.
    pub fn source(&self) -> String {
        format!("modbus/{}", self.name)
    }

    /// The device and its points as the point catalogue lists them. A scaled or offset
    /// point's value is a float whatever its registers hold.
    pub fn describe(&self) -> DeviceDef {
        let (protocol, address) = match &self.transport {
            Transport::Tcp { host, port } => ("modbus_tcp", format!("{host}:{port}")),
            Transport::Rtu(l) => ("modbus_rtu", format!("{} unit {}", l.path, self.unit)),
        };
        let points = self
            .points
            .iter()
            .map(|p| PointDef {
                group: self
                    .groups
                    .get(p.group)
                    .map_or_else(|| "default".to_string(), |g| g.name.clone()),
                name: p.name.clone(),
                area: p.kind.area(),
                type_name: p.data_type.name().to_string(),
                kind: Some(if p.scale.is_some() || p.offset.is_some() {
                    DataKind::F64
                } else {
                    p.data_type.kind()
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
            protocol,
            address,
            template: self.template.clone(),
            groups: self
                .groups
                .iter()
                .map(|g| GroupDef::new(&g.name, g.interval))
                .collect(),
            points,
            details: Vec::new(),
        }
    }
}

fn order(raw: Option<&str>, path: String, p: &mut Problems) -> Order {
    match raw {
        None | Some("big") => Order::Big,
        Some("little") => Order::Little,
        Some(o) => {
            p.push(path, format!("expected big or little, got {o:?}"));
            Order::Big
        }
    }
}

/// Validates a `devices[]` entry of `protocol` (`modbus_tcp` or `modbus_rtu`) with its
/// common keys; `None` when a problem was found.
pub fn validate_modbus_device(
    d: &RawModbusDevice,
    common: DeviceCommon,
    protocol: &str,
    at: &str,
    p: &mut Problems,
) -> Option<ModbusDeviceConfig> {
    let before = p.0.len();
    let tcp = protocol == "modbus_tcp";
    let transport = if tcp {
        let port = match &d.port {
            None => None,
            Some(RawPort::Number(n)) => Some(*n),
            Some(RawPort::Path(s)) => {
                p.push(
                    format!("{at}.port"),
                    format!("expected a TCP port number for {protocol}, got {s:?}"),
                );
                None
            }
        };
        let (host, port) = tcp_address(d.host.as_deref(), port, protocol, 502, at, p);
        for (key, present) in [
            ("baud", d.baud.is_some()),
            ("parity", d.parity.is_some()),
            ("data_bits", d.data_bits.is_some()),
            ("stop_bits", d.stop_bits.is_some()),
            ("inter_frame_delay_ms", d.inter_frame_delay_ms.is_some()),
        ] {
            if present {
                p.push(format!("{at}.{key}"), "is a modbus_rtu setting");
            }
        }
        Transport::Tcp { host, port }
    } else {
        let path = match &d.port {
            Some(RawPort::Path(s)) if !s.trim().is_empty() => s.clone(),
            Some(_) => {
                p.push(
                    format!("{at}.port"),
                    "expected a serial device like /dev/ttyUSB0 for modbus_rtu",
                );
                String::new()
            }
            None => {
                p.push(
                    format!("{at}.port"),
                    "is required for modbus_rtu (e.g. /dev/ttyUSB0)",
                );
                String::new()
            }
        };
        if d.host.is_some() {
            p.push(format!("{at}.host"), "is a modbus_tcp setting");
        }
        let baud = in_range(d.baud, 9600, 50..=4_000_000, format!("{at}.baud"), p) as u32;
        let parity = match d.parity.as_deref() {
            None | Some("none") => Parity::None,
            Some("even") => Parity::Even,
            Some("odd") => Parity::Odd,
            Some(o) => {
                p.push(
                    format!("{at}.parity"),
                    format!("expected none, even or odd, got {o:?}"),
                );
                Parity::None
            }
        };
        let data_bits = in_range(d.data_bits, 8, 5..=8, format!("{at}.data_bits"), p) as u8;
        let stop_bits = in_range(d.stop_bits, 1, 1..=2, format!("{at}.stop_bits"), p) as u8;
        let delay = in_range(
            d.inter_frame_delay_ms,
            0,
            0..=1000,
            format!("{at}.inter_frame_delay_ms"),
            p,
        );
        Transport::Rtu(LineConfig {
            path,
            baud,
            parity,
            data_bits,
            stop_bits,
            inter_frame_delay: Duration::from_millis(delay),
        })
    };
    let max_unit = if tcp { 255 } else { 247 };
    let unit = in_range(d.unit, 1, 0..=max_unit, format!("{at}.unit"), p) as u8;
    let timing = timing(d.timeout_ms, d.backoff_max_secs, at, p);
    let max_gap = in_range(d.max_gap, 8, 0..=124, format!("{at}.max_gap"), p) as u16;
    let groups = validate_groups(d.groups.as_deref(), at, p);
    let points = validate_points(d.points.as_deref(), &groups, at, p);
    let used: Vec<usize> = points.iter().map(|pt| pt.group).collect();
    check_groups_used(&groups, &used, at, p);
    (p.0.len() == before).then_some(ModbusDeviceConfig {
        name: common.name,
        template: common.template,
        transport,
        unit,
        timeout: timing.timeout,
        max_gap,
        backoff_max: timing.backoff_max,
        hold: common.hold,
        groups,
        points,
    })
}

fn validate_points(
    raw: Option<&[RawModbusPoint]>,
    groups: &[GroupConfig],
    at: &str,
    p: &mut Problems,
) -> Vec<PointConfig> {
    let raw = raw.unwrap_or_default();
    if raw.is_empty() {
        p.push(
            format!("{at}.points"),
            "a Modbus device needs at least one point",
        );
    }
    let mut out: Vec<PointConfig> = Vec::new();
    for (i, r) in raw.iter().enumerate() {
        let pat = format!("{at}.points[{i}]");
        let name = point_name(
            r.name.as_deref(),
            &pat,
            |n| out.iter().any(|o| o.name == n),
            p,
        );
        let group = point_group(r.group.as_deref(), groups, &pat, p);
        let kind = match r.kind.as_deref() {
            None | Some("holding") => RegisterKind::Holding,
            Some("input") => RegisterKind::Input,
            Some("coil") => RegisterKind::Coil,
            Some("discrete") => RegisterKind::Discrete,
            Some(k) => {
                p.push(
                    format!("{pat}.kind"),
                    format!("expected holding, input, coil or discrete, got {k:?}"),
                );
                RegisterKind::Holding
            }
        };
        let data_type = match (r.data_type.as_deref(), kind.is_bits()) {
            (None, true) | (Some("bool"), _) => DataType::Bool,
            (Some(t), true) => {
                p.push(
                    format!("{pat}.type"),
                    format!("coils and discrete inputs are bool, got {t:?}"),
                );
                DataType::Bool
            }
            (None, false) | (Some("u16"), false) => DataType::U16,
            (Some("i16"), false) => DataType::I16,
            (Some("u32"), false) => DataType::U32,
            (Some("i32"), false) => DataType::I32,
            (Some("u64"), false) => DataType::U64,
            (Some("i64"), false) => DataType::I64,
            (Some("f32"), false) => DataType::F32,
            (Some("f64"), false) => DataType::F64,
            (Some("string"), false) => match r.length {
                Some(n @ 1..=250) => DataType::String(n as u16),
                Some(n) => {
                    p.push(format!("{pat}.length"), format!("{n} is outside 1..=250"));
                    DataType::String(1)
                }
                None => {
                    p.push(format!("{pat}.length"), "is required for a string");
                    DataType::String(1)
                }
            },
            (Some(t), false) => {
                p.push(
                    format!("{pat}.type"),
                    format!("expected bool, u16, i16, u32, i32, u64, i64, f32, f64 or string, got {t:?}"),
                );
                DataType::U16
            }
        };
        if r.length.is_some() && !matches!(data_type, DataType::String(_)) {
            p.push(format!("{pat}.length"), "is only for type string");
        }
        let register = match r.register {
            None => {
                p.push(format!("{pat}.register"), "is required");
                0
            }
            Some(a) if a > 65_535 => {
                p.push(
                    format!("{pat}.register"),
                    format!("{a} is outside 0..=65535"),
                );
                0
            }
            Some(a) => {
                let end = a + u64::from(data_type.width()) - 1;
                if end > 65_535 {
                    p.push(
                        format!("{pat}.register"),
                        format!("the point ends at {end}, past 65535"),
                    );
                }
                a as u16
            }
        };
        let word_order = order(r.word_order.as_deref(), format!("{pat}.word_order"), p);
        let byte_order = order(r.byte_order.as_deref(), format!("{pat}.byte_order"), p);
        for (key, v) in [("scale", r.scale), ("offset", r.offset)] {
            if v.is_some_and(|v| !v.is_finite()) {
                p.push(format!("{pat}.{key}"), "must be a finite number");
            }
        }
        let numeric = !kind.is_bits() && !matches!(data_type, DataType::String(_) | DataType::Bool);
        if !numeric && (r.scale.is_some() || r.offset.is_some()) {
            p.push(
                format!("{pat}.scale"),
                "scale and offset are for numbers only",
            );
        }
        let writable = r.writable.unwrap_or(false);
        if writable && !matches!(kind, RegisterKind::Holding | RegisterKind::Coil) {
            p.push(
                format!("{pat}.writable"),
                format!(
                    "{} are read-only: only holding registers and coils can be writable",
                    if kind == RegisterKind::Input {
                        "input registers"
                    } else {
                        "discrete inputs"
                    }
                ),
            );
        }
        if let (true, DataType::String(len)) = (writable, data_type) {
            if len.div_ceil(2) > MAX_WRITE_REGISTERS {
                p.push(
                    format!("{pat}.length"),
                    format!(
                        "a writable string is at most {} bytes (the most one write carries)",
                        MAX_WRITE_REGISTERS * 2
                    ),
                );
            }
        }
        for (key, v) in [("min", r.min), ("max", r.max)] {
            let Some(v) = v else { continue };
            if !v.is_finite() {
                p.push(format!("{pat}.{key}"), "must be a finite number");
            } else if !writable {
                p.push(
                    format!("{pat}.{key}"),
                    "bounds what a command may write: only for writable: true",
                );
            } else if !numeric {
                p.push(format!("{pat}.{key}"), "min and max are for numbers only");
            }
        }
        if let (Some(min), Some(max)) = (r.min, r.max) {
            if min > max {
                p.push(format!("{pat}.min"), format!("{min} is above max {max}"));
            }
        }
        out.push(PointConfig {
            name,
            group,
            register,
            kind,
            data_type,
            word_order,
            byte_order,
            scale: r.scale,
            offset: r.offset,
            unit: r.unit.clone(),
            writable,
            min: r.min,
            max: r.max,
        });
    }
    out
}

/// Checks what devices on one serial line must agree on: the line settings and distinct
/// unit ids.
pub fn check_lines(devices: &[ModbusDeviceConfig], path: &str, p: &mut Problems) {
    for (i, a) in devices.iter().enumerate() {
        let Transport::Rtu(la) = &a.transport else {
            continue;
        };
        for b in &devices[..i] {
            let Transport::Rtu(lb) = &b.transport else {
                continue;
            };
            if la.path != lb.path {
                continue;
            }
            if la != lb {
                p.push(
                    path,
                    format!(
                        "devices {:?} and {:?} share {} but not its settings (baud, parity, data_bits, stop_bits, inter_frame_delay_ms)",
                        b.name, a.name, la.path
                    ),
                );
            }
            if a.unit == b.unit {
                p.push(
                    path,
                    format!(
                        "devices {:?} and {:?} share {} and unit {}",
                        b.name, a.name, la.path, a.unit
                    ),
                );
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use crate::config::from_yaml;

    fn problems(points: &str) -> Vec<String> {
        let text = format!(
            "connector:\n  data_dir: /d\ndevices:\n  - name: press-1\n    protocol: modbus_tcp\n    host: h\n    points:\n{points}"
        );
        match from_yaml(&text) {
            Ok(_) => Vec::new(),
            Err(e) => e.0.into_iter().map(|p| p.to_string()).collect(),
        }
    }

    #[test]
    fn only_holding_registers_and_coils_can_be_writable_and_min_stays_below_max() {
        let errs = problems(
            r#"      - {name: a, register: 0, kind: input, writable: true}
      - {name: b, register: 0, kind: discrete, writable: true}
      - {name: c, register: 1, type: f32, writable: true, min: 10, max: 5}
      - {name: d, register: 3, min: 0}
      - {name: e, register: 1, kind: coil, writable: true, max: 1}
      - {name: f, register: 4, type: string, length: 4, writable: true, min: 0}
"#,
        );
        for want in [
            "devices[0].points[0].writable: input registers are read-only: only holding registers and coils can be writable",
            "devices[0].points[1].writable: discrete inputs are read-only: only holding registers and coils can be writable",
            "devices[0].points[2].min: 10 is above max 5",
            "devices[0].points[3].min: bounds what a command may write: only for writable: true",
            "devices[0].points[4].max: min and max are for numbers only",
            "devices[0].points[5].min: min and max are for numbers only",
        ] {
            assert!(
                errs.iter().any(|e| e == want),
                "missing {want:?} in {errs:#?}"
            );
        }
        assert_eq!(errs.len(), 6, "{errs:#?}");
    }

    #[test]
    fn a_point_is_read_only_unless_it_says_writable() {
        let cfg = from_yaml(
            "connector:\n  data_dir: /d\ndevices:\n  - {name: x, protocol: modbus_tcp, host: h, points: [{name: a, register: 0}, {name: b, register: 1, type: f32, writable: true, min: -5.5, max: 300}, {name: c, register: 0, kind: coil, writable: true}]}\n",
        )
        .expect("valid");
        let p = &cfg.devices.modbus[0].points;
        assert!(!p[0].writable);
        assert!(p[1].writable && p[2].writable);
        assert_eq!((p[1].min, p[1].max), (Some(-5.5), Some(300.0)));
        assert_eq!(p[2].kind.area(), "coil");
        assert_eq!(p[1].kind.area(), "holding_register");
        assert_eq!(p[1].data_type.name(), "f32");
    }
}
