//! Values → registers: the inverse of [`super::decode`], for commands. Pure.
//!
//! A command's value is in engineering units, as the point reads. It is checked against the
//! point's `min` / `max` first, then turned into the raw number (`raw = (value - offset) /
//! scale`, rounded to a whole number for an integer type), range-checked against the type,
//! checked against `min` / `max` again as the device will hold it once rounded (with
//! `scale: 10` and `max: 255`, 255 is raw 26 and reads 260: refused), and laid out in the
//! point's byte and word order. Anything that does not fit is an error
//! whose text says why; the executor answers it `out_of_range` before anything is sent.
//!
//! Without `scale` and `offset` an integer point takes whole numbers only (`3.7` for a `u16`
//! is refused, not rounded): there is no resolution to round to, and a silent change of the
//! value written would be a surprise. With them, the raw number is rounded to the nearest
//! (half away from zero), which is the point's resolution.

use serde_json::{Number, Value};

use super::config::{DataType, Order, PointConfig};
use super::decode::engineering;

/// What a point's value becomes on the wire.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Encoded {
    /// A coil.
    Bit(bool),
    /// Holding registers, from the point's first address.
    Words(Vec<u16>),
}

/// The registers (or the coil) that hold `value` at `point`; the error says why the value does
/// not fit.
pub fn encode(point: &PointConfig, value: &Value) -> Result<Encoded, String> {
    if point.kind.is_bits() {
        return boolean(value).map(Encoded::Bit);
    }
    let bytes = match point.data_type {
        DataType::Bool => return Ok(Encoded::Words(vec![u16::from(boolean(value)?)])),
        DataType::String(len) => string(len, value)?,
        t => number(point, t, value)?,
    };
    // Strings are byte sequences: word order does not apply to them (as when reading).
    let reverse =
        point.word_order == Order::Little && !matches!(point.data_type, DataType::String(_));
    Ok(Encoded::Words(words(&bytes, point.byte_order, reverse)))
}

/// `true` / `false`, or the numbers 1 and 0.
fn boolean(value: &Value) -> Result<bool, String> {
    match value {
        Value::Bool(b) => Ok(*b),
        Value::Number(n) if n.as_f64() == Some(0.0) => Ok(false),
        Value::Number(n) if n.as_f64() == Some(1.0) => Ok(true),
        other => Err(format!("expected true or false (or 1 or 0), got {other}")),
    }
}

/// The string's bytes, NUL-padded to whole registers.
fn string(len: u16, value: &Value) -> Result<Vec<u8>, String> {
    let Value::String(s) = value else {
        return Err(format!(
            "expected a string of at most {len} bytes, got {value}"
        ));
    };
    let b = s.as_bytes();
    if b.len() > usize::from(len) {
        return Err(format!(
            "{} bytes do not fit the point's {len} bytes",
            b.len()
        ));
    }
    let mut bytes = b.to_vec();
    bytes.resize(usize::from(len.div_ceil(2)) * 2, 0);
    Ok(bytes)
}

/// The raw number's big-endian bytes, after the checks.
fn number(point: &PointConfig, t: DataType, value: &Value) -> Result<Vec<u8>, String> {
    let Value::Number(n) = value else {
        return Err(format!("expected a number, got {value}"));
    };
    let x = n
        .as_f64()
        .ok_or_else(|| format!("{n} is not a number this point can take"))?;
    if let Some(min) = point.min.filter(|&m| x < m) {
        return Err(format!("{n} is below min {min}"));
    }
    if let Some(max) = point.max.filter(|&m| x > m) {
        return Err(format!("{n} is above max {max}"));
    }
    let scaled = point.scale.is_some() || point.offset.is_some();
    let raw = (x - point.offset.unwrap_or(0.0)) / point.scale.unwrap_or(1.0);
    let with_scale = if scaled {
        " with its scale and offset"
    } else {
        ""
    };
    match t {
        DataType::F32 => {
            let f = raw as f32;
            if !f.is_finite() {
                return Err(format!("{n} does not fit f32{with_scale}"));
            }
            return Ok(f.to_be_bytes().to_vec());
        }
        DataType::F64 => {
            if !raw.is_finite() {
                return Err(format!("{n} does not fit f64{with_scale}"));
            }
            return Ok(raw.to_be_bytes().to_vec());
        }
        _ => {}
    }
    let i = if scaled {
        whole(raw.round()).ok_or_else(|| format!("{n} does not fit {}{with_scale}", t.name()))?
    } else {
        exact(n).ok_or_else(|| {
            format!(
                "{n} is not a whole number (the point is {} without scale)",
                t.name()
            )
        })?
    };
    let (lo, hi) = bounds(t);
    if i < lo || i > hi {
        return Err(if scaled {
            format!(
                "{n} does not fit {}{with_scale}: the raw value {i} is outside {lo}..={hi}",
                t.name()
            )
        } else {
            format!("{n} does not fit {} ({lo}..={hi})", t.name())
        });
    }
    if scaled {
        // The bounds hold for what the device will hold, which rounding may have moved.
        let held = engineering(point, i as f64, true);
        if let Some(min) = point.min.filter(|&m| held < m) {
            return Err(format!(
                "{n} is below min {min} once rounded to the point's scale: the device would hold {held} (raw {i})"
            ));
        }
        if let Some(max) = point.max.filter(|&m| held > m) {
            return Err(format!(
                "{n} is above max {max} once rounded to the point's scale: the device would hold {held} (raw {i})"
            ));
        }
    }
    let width = usize::from(t.width()) * 2;
    Ok(i.to_be_bytes()[16 - width..].to_vec())
}

/// A JSON number as a whole number, exactly (a u64 or i64 as it is, a float only when it has
/// no fraction).
fn exact(n: &Number) -> Option<i128> {
    if let Some(u) = n.as_u64() {
        return Some(i128::from(u));
    }
    if let Some(i) = n.as_i64() {
        return Some(i128::from(i));
    }
    n.as_f64().filter(|f| f.fract() == 0.0).and_then(whole)
}

/// A float with no fraction as an i128, when it is well inside i128's range (anything that
/// large fits no Modbus type anyway).
fn whole(f: f64) -> Option<i128> {
    (f.is_finite() && f.abs() < 1e30).then_some(f as i128)
}

/// The range of an integer type.
fn bounds(t: DataType) -> (i128, i128) {
    match t {
        DataType::U16 => (0, i128::from(u16::MAX)),
        DataType::I16 => (i128::from(i16::MIN), i128::from(i16::MAX)),
        DataType::U32 => (0, i128::from(u32::MAX)),
        DataType::I32 => (i128::from(i32::MIN), i128::from(i32::MAX)),
        DataType::U64 => (0, i128::from(u64::MAX)),
        DataType::I64 => (i128::from(i64::MIN), i128::from(i64::MAX)),
        // Not integer types: never asked.
        DataType::Bool | DataType::F32 | DataType::F64 | DataType::String(_) => (0, 0),
    }
}

/// Big-endian bytes as registers in `byte_order`, the registers reversed for little word order.
fn words(bytes: &[u8], byte_order: Order, reverse: bool) -> Vec<u16> {
    let mut w: Vec<u16> = bytes
        .chunks(2)
        .map(|c| {
            let (a, b) = (c[0], c.get(1).copied().unwrap_or(0));
            match byte_order {
                Order::Big => u16::from_be_bytes([a, b]),
                Order::Little => u16::from_be_bytes([b, a]),
            }
        })
        .collect();
    if reverse {
        w.reverse();
    }
    w
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sources::modbus::config::RegisterKind;
    use crate::sources::modbus::decode::decode_registers;
    use serde_json::json;

    fn pt(data_type: DataType, word_order: Order, byte_order: Order) -> PointConfig {
        PointConfig {
            name: "p".into(),
            group: 0,
            register: 0,
            kind: RegisterKind::Holding,
            data_type,
            word_order,
            byte_order,
            scale: None,
            offset: None,
            unit: None,
            writable: true,
            min: None,
            max: None,
        }
    }

    const ORDERS: [(Order, Order); 4] = [
        (Order::Big, Order::Big),
        (Order::Big, Order::Little),
        (Order::Little, Order::Big),
        (Order::Little, Order::Little),
    ];

    fn roundtrip(p: &PointConfig, v: &Value) -> Value {
        let Ok(Encoded::Words(w)) = encode(p, v) else {
            panic!("{p:?} {v}: {:?}", encode(p, v));
        };
        assert_eq!(w.len(), usize::from(p.data_type.width()), "{p:?} {v}");
        decode_registers(p, &w).expect("decodes")
    }

    #[test]
    fn every_type_in_every_order_reads_back_what_was_written() {
        let cases: Vec<(DataType, Vec<Value>)> = vec![
            (DataType::Bool, vec![json!(true), json!(false)]),
            (DataType::U16, vec![json!(0), json!(1234), json!(65535)]),
            (DataType::I16, vec![json!(-32768), json!(-2), json!(32767)]),
            (DataType::U32, vec![json!(0), json!(70000), json!(u32::MAX)]),
            (
                DataType::I32,
                vec![json!(i32::MIN), json!(-123_456), json!(i32::MAX)],
            ),
            (
                DataType::U64,
                vec![json!(0), json!(0x0102_0304_0506_0708u64), json!(u64::MAX)],
            ),
            (
                DataType::I64,
                vec![json!(i64::MIN), json!(-5), json!(i64::MAX)],
            ),
            (
                DataType::F32,
                vec![json!(21.5), json!(-1234.25), json!(0.0), json!(f32::MAX)],
            ),
            (
                DataType::F64,
                vec![json!(-1234.5), json!(1e300), json!(5e-324), json!(0.1)],
            ),
            (
                DataType::String(8),
                vec![json!("PUMP-7"), json!("OPEX-SIM"), json!("")],
            ),
            (DataType::String(3), vec![json!("abc"), json!("a")]),
        ];
        for (t, values) in cases {
            for (wo, bo) in ORDERS {
                let p = pt(t, wo, bo);
                for v in &values {
                    assert_eq!(&roundtrip(&p, v), v, "{t:?} word {wo:?} byte {bo:?}");
                }
            }
        }
    }

    #[test]
    fn the_layout_is_the_one_the_decoder_reads() {
        let f = 21.5f32.to_bits();
        let (hi, lo) = ((f >> 16) as u16, f as u16);
        let big = pt(DataType::F32, Order::Big, Order::Big);
        assert_eq!(encode(&big, &json!(21.5)), Ok(Encoded::Words(vec![hi, lo])));
        let little = pt(DataType::F32, Order::Little, Order::Big);
        assert_eq!(
            encode(&little, &json!(21.5)),
            Ok(Encoded::Words(vec![lo, hi]))
        );
        let swapped = pt(DataType::U16, Order::Big, Order::Little);
        assert_eq!(
            encode(&swapped, &json!(0x0102)),
            Ok(Encoded::Words(vec![0x0201]))
        );
        let s = pt(DataType::String(3), Order::Little, Order::Big);
        assert_eq!(
            encode(&s, &json!("OPE")),
            Ok(Encoded::Words(vec![
                u16::from_be_bytes(*b"OP"),
                u16::from_be_bytes([b'E', 0])
            ]))
        );
    }

    #[test]
    fn scale_and_offset_are_undone_and_the_raw_number_rounded() {
        let mut p = pt(DataType::I16, Order::Big, Order::Big);
        p.scale = Some(0.1);
        p.offset = Some(-40.0);
        assert_eq!(encode(&p, &json!(25.0)), Ok(Encoded::Words(vec![650])));
        // 72.55 °C is 1125.5 raw: rounded half away from zero.
        assert_eq!(encode(&p, &json!(72.55)), Ok(Encoded::Words(vec![1126])));
        for (wo, bo) in ORDERS {
            let mut p = pt(DataType::U32, wo, bo);
            p.scale = Some(0.01);
            let back = roundtrip(&p, &json!(123.45)).as_f64().unwrap();
            assert!((back - 123.45).abs() < 1e-9, "{back}");
            let mut f = pt(DataType::F32, wo, bo);
            f.scale = Some(2.0);
            f.offset = Some(1.0);
            assert_eq!(roundtrip(&f, &json!(44.0)), json!(44.0));
        }
    }

    #[test]
    fn min_and_max_hold_for_the_value_the_rounded_raw_number_reads_as() {
        let mut p = pt(DataType::U16, Order::Big, Order::Big);
        p.scale = Some(10.0);
        p.min = Some(12.0);
        p.max = Some(255.0);
        let e = encode(&p, &json!(255)).unwrap_err();
        assert_eq!(
            e,
            "255 is above max 255 once rounded to the point's scale: the device would hold 260 (raw 26)"
        );
        let e = encode(&p, &json!(14)).unwrap_err();
        assert!(e.starts_with("14 is below min 12 once rounded"), "{e}");
        assert_eq!(encode(&p, &json!(254)), Ok(Encoded::Words(vec![25])));
        assert_eq!(encode(&p, &json!(15)), Ok(Encoded::Words(vec![2])));
        // A bound on the scale's grid is reached exactly, without binary noise.
        let mut tenths = pt(DataType::U16, Order::Big, Order::Big);
        tenths.scale = Some(0.1);
        tenths.max = Some(0.3);
        assert_eq!(encode(&tenths, &json!(0.3)), Ok(Encoded::Words(vec![3])));
        assert_eq!(encode(&tenths, &json!(0.29)), Ok(Encoded::Words(vec![3])));
        // The value asked for is held to the bounds too, even where it would round back in.
        assert!(encode(&tenths, &json!(0.31))
            .unwrap_err()
            .starts_with("0.31 is above max 0.3"));
    }

    #[test]
    fn coils_take_booleans_and_one_or_zero() {
        let mut p = pt(DataType::Bool, Order::Big, Order::Big);
        p.kind = RegisterKind::Coil;
        assert_eq!(encode(&p, &json!(true)), Ok(Encoded::Bit(true)));
        assert_eq!(encode(&p, &json!(0)), Ok(Encoded::Bit(false)));
        assert_eq!(encode(&p, &json!(1.0)), Ok(Encoded::Bit(true)));
        for bad in [json!(2), json!("on"), json!(null)] {
            let e = encode(&p, &bad).unwrap_err();
            assert!(e.starts_with("expected true or false"), "{bad}: {e}");
        }
    }

    #[test]
    fn every_value_that_does_not_fit_says_why() {
        let big = |t| pt(t, Order::Big, Order::Big);
        let mut bounded = big(DataType::F32);
        bounded.min = Some(0.0);
        bounded.max = Some(250.0);
        let mut scaled = big(DataType::U16);
        scaled.scale = Some(0.1);
        for (p, v, want) in [
            (big(DataType::U16), json!(65536), "65536 does not fit u16 (0..=65535)"),
            (big(DataType::U16), json!(-1), "-1 does not fit u16 (0..=65535)"),
            (
                big(DataType::I16),
                json!(40000),
                "40000 does not fit i16 (-32768..=32767)",
            ),
            (
                big(DataType::U16),
                json!(3.7),
                "3.7 is not a whole number (the point is u16 without scale)",
            ),
            (big(DataType::I64), json!(1e19), "1e+19 does not fit i64"),
            (big(DataType::U64), json!(-1), "-1 does not fit u64"),
            (big(DataType::F32), json!(1e39), "1e+39 does not fit f32"),
            (bounded.clone(), json!(-0.5), "-0.5 is below min 0"),
            (bounded, json!(250.5), "250.5 is above max 250"),
            (
                scaled,
                json!(6553.6),
                "6553.6 does not fit u16 with its scale and offset: the raw value 65536 is outside 0..=65535",
            ),
            (big(DataType::U32), json!("72"), "expected a number, got \"72\""),
            (
                big(DataType::String(4)),
                json!("OPEX-SIM"),
                "8 bytes do not fit the point's 4 bytes",
            ),
            (
                big(DataType::String(4)),
                json!(7),
                "expected a string of at most 4 bytes, got 7",
            ),
        ] {
            let e = encode(&p, &v).unwrap_err();
            assert!(e.starts_with(want), "{v}: {e}");
        }
    }
}
