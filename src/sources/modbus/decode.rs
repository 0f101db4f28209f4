//! Registers → values. Pure; the words come from a read request that covers the point.
//!
//! Byte order is the order of the two bytes inside one register (the standard sends the high
//! byte first: `big`); word order is the order of the registers of a multi-register value
//! (`big`: the first register holds the most significant word). Devices disagree on both, so
//! both are per point.

use serde_json::{json, Map, Number, Value};

use super::config::{DataType, Order, PointConfig};
use super::plan::ReadRequest;
use crate::sources::catalogue;

/// What a device answered to one read request: registers or bits, as many as it sent (a
/// device may answer with fewer or more than asked).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Answer {
    /// Holding or input registers.
    Words(Vec<u16>),
    /// Coils or discrete inputs.
    Bits(Vec<bool>),
}

/// Decodes `answer` to `request` into one `{"value":..,"quality":..}` entry per point of the
/// request, inserted in `payload` under the point's name. Pure and total: a point the answer
/// does not cover (short answer, wrong table, an index outside `points`) gets
/// `{"value":null,"quality":"bad","error":"short response"}`; nothing here can panic, whatever
/// the device sent. This is the entry point the fuzz targets and property tests drive.
pub fn decode_answer(
    points: &[PointConfig],
    request: &ReadRequest,
    answer: &Answer,
    payload: &mut Map<String, Value>,
) {
    for &i in &request.points {
        let Some(pt) = points.get(i) else { continue };
        let value = pt.register.checked_sub(request.start).and_then(|at| {
            let at = usize::from(at);
            match answer {
                Answer::Bits(bits) => bits.get(at).map(|&b| Value::Bool(b)),
                Answer::Words(words) => words.get(at..).and_then(|w| decode_registers(pt, w)),
            }
        });
        let mut v = match value {
            Some(value) => json!({"value": value, "quality": "good"}),
            None => json!({"value": null, "quality": "bad", "error": "short response"}),
        };
        add_unit(&mut v, &pt.unit);
        payload.insert(pt.name.clone(), v);
    }
}

/// A point the device refused with exception `code`:
/// `{"value":null,"quality":"bad","exception":2}` (with its unit).
pub fn exception_point(code: u8, unit: &Option<String>) -> Value {
    let mut v = json!({"value": null, "quality": "bad", "exception": code});
    add_unit(&mut v, unit);
    v
}

/// Adds `"unit"` to a point's entry when the point has one.
pub fn add_unit(v: &mut Value, unit: &Option<String>) {
    if let (Some(u), Value::Object(m)) = (unit, v) {
        m.insert("unit".into(), Value::String(u.clone()));
    }
}

/// The value of `point` from `words`, the registers starting at the point's own address.
/// `None` when `words` is too short (a device answered with fewer registers than asked).
pub fn decode_registers(point: &PointConfig, words: &[u16]) -> Option<Value> {
    let width = usize::from(point.data_type.width());
    let words = words.get(..width)?;
    let mut bytes: Vec<u8> = Vec::with_capacity(width * 2);
    let mut push = |w: u16| {
        let [hi, lo] = w.to_be_bytes();
        match point.byte_order {
            Order::Big => bytes.extend([hi, lo]),
            Order::Little => bytes.extend([lo, hi]),
        }
    };
    // Strings are byte sequences: word order does not apply to them.
    if point.word_order == Order::Big || matches!(point.data_type, DataType::String(_)) {
        words.iter().copied().for_each(&mut push);
    } else {
        words.iter().rev().copied().for_each(&mut push);
    }
    let raw: Raw = match point.data_type {
        DataType::Bool => return Some(Value::Bool(words[0] != 0)),
        DataType::U16 => Raw::U(u64::from(u16::from_be_bytes(arr(&bytes)?))),
        DataType::I16 => Raw::I(i64::from(i16::from_be_bytes(arr(&bytes)?))),
        DataType::U32 => Raw::U(u64::from(u32::from_be_bytes(arr(&bytes)?))),
        DataType::I32 => Raw::I(i64::from(i32::from_be_bytes(arr(&bytes)?))),
        DataType::U64 => Raw::U(u64::from_be_bytes(arr(&bytes)?)),
        DataType::I64 => Raw::I(i64::from_be_bytes(arr(&bytes)?)),
        DataType::F32 => Raw::F(f64::from(f32::from_be_bytes(arr(&bytes)?))),
        DataType::F64 => Raw::F(f64::from_be_bytes(arr(&bytes)?)),
        DataType::String(len) => {
            let b = bytes.get(..usize::from(len))?;
            let text = String::from_utf8_lossy(b);
            return Some(Value::String(
                text.trim_end_matches(['\0', ' ']).to_string(),
            ));
        }
    };
    Some(scaled(point, raw))
}

enum Raw {
    U(u64),
    I(i64),
    F(f64),
}

fn arr<const N: usize>(bytes: &[u8]) -> Option<[u8; N]> {
    bytes.try_into().ok()
}

fn scaled(point: &PointConfig, raw: Raw) -> Value {
    if point.scale.is_none() && point.offset.is_none() {
        return match raw {
            Raw::U(u) => Value::Number(u.into()),
            Raw::I(i) => Value::Number(i.into()),
            // NaN and infinities are not JSON: null.
            Raw::F(f) => Number::from_f64(f).map_or(Value::Null, Value::Number),
        };
    }
    let v = match raw {
        Raw::U(u) => engineering(point, u as f64, true),
        Raw::I(i) => engineering(point, i as f64, true),
        Raw::F(f) => engineering(point, f, false),
    };
    Number::from_f64(v).map_or(Value::Null, Value::Number)
}

/// The value in engineering units of raw number `x` (a `whole` one from an integer register)
/// at a point with `scale` or `offset`: what a poll reads, and what a command's rounded raw
/// number will read as ([`super::encode`] checks `min` / `max` on it).
pub fn engineering(point: &PointConfig, x: f64, whole: bool) -> f64 {
    catalogue::engineering(x, point.scale, point.offset, whole)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sources::modbus::config::RegisterKind;

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
            writable: false,
            min: None,
            max: None,
        }
    }

    #[test]
    fn every_type_decodes_in_both_word_orders() {
        use Order::*;
        let f = 21.5f32.to_bits();
        let (hi, lo) = ((f >> 16) as u16, f as u16);
        assert_eq!(
            decode_registers(&pt(DataType::F32, Big, Big), &[hi, lo]),
            Some(json!(21.5))
        );
        assert_eq!(
            decode_registers(&pt(DataType::F32, Little, Big), &[lo, hi]),
            Some(json!(21.5))
        );
        assert_eq!(
            decode_registers(&pt(DataType::I16, Big, Big), &[0xFFFE]),
            Some(json!(-2))
        );
        assert_eq!(
            decode_registers(&pt(DataType::U16, Big, Big), &[0xFFFE]),
            Some(json!(65534))
        );
        assert_eq!(
            decode_registers(&pt(DataType::U32, Big, Big), &[0x0001, 0x0002]),
            Some(json!(65538))
        );
        assert_eq!(
            decode_registers(&pt(DataType::I32, Little, Big), &[0xFFFF, 0xFFFF]),
            Some(json!(-1))
        );
        assert_eq!(
            decode_registers(&pt(DataType::U64, Little, Big), &[4, 3, 2, 1]),
            Some(json!(0x0001_0002_0003_0004u64))
        );
        assert_eq!(
            decode_registers(
                &pt(DataType::I64, Big, Big),
                &[0xFFFF, 0xFFFF, 0xFFFF, 0xFFF6]
            ),
            Some(json!(-10))
        );
        let d = (-1234.5f64).to_bits();
        let w = [
            (d >> 48) as u16,
            (d >> 32) as u16,
            (d >> 16) as u16,
            d as u16,
        ];
        assert_eq!(
            decode_registers(&pt(DataType::F64, Big, Big), &w),
            Some(json!(-1234.5))
        );
        let rev = [w[3], w[2], w[1], w[0]];
        assert_eq!(
            decode_registers(&pt(DataType::F64, Little, Big), &rev),
            Some(json!(-1234.5))
        );
        assert_eq!(
            decode_registers(&pt(DataType::Bool, Big, Big), &[7]),
            Some(json!(true))
        );
    }

    #[test]
    fn byte_order_swaps_the_bytes_inside_each_register() {
        assert_eq!(
            decode_registers(&pt(DataType::U16, Order::Big, Order::Little), &[0x0102]),
            Some(json!(0x0201))
        );
    }

    #[test]
    fn strings_are_trimmed_of_padding_and_ignore_word_order() {
        let words = [u16::from_be_bytes(*b"OP"), u16::from_be_bytes(*b"EX"), 0];
        let p = pt(DataType::String(6), Order::Little, Order::Big);
        assert_eq!(decode_registers(&p, &words), Some(json!("OPEX")));
        let odd = pt(DataType::String(3), Order::Big, Order::Big);
        assert_eq!(decode_registers(&odd, &words), Some(json!("OPE")));
    }

    #[test]
    fn scaled_values_are_rounded_to_the_decimals_of_scale_and_offset() {
        let mut p = pt(DataType::I16, Order::Big, Order::Big);
        p.scale = Some(0.1);
        // 41 * 0.1 is 4.1000000000000005 in binary floating point.
        assert_eq!(decode_registers(&p, &[41]), Some(json!(4.1)));
        assert_eq!(decode_registers(&p, &[(-3i16) as u16]), Some(json!(-0.3)));
        p.scale = Some(0.01);
        p.offset = Some(-40.5);
        assert_eq!(decode_registers(&p, &[7]), Some(json!(-40.43)));
        p.scale = Some(0.001);
        p.offset = None;
        assert_eq!(decode_registers(&p, &[12345]), Some(json!(12.345)));
        let mut f = pt(DataType::F32, Order::Big, Order::Big);
        f.scale = Some(0.1);
        let raw = 21.53f32.to_bits();
        let v = decode_registers(&f, &[(raw >> 16) as u16, raw as u16]);
        assert_eq!(
            v,
            Some(json!(f64::from(21.53f32) * 0.1)),
            "a float is not rounded"
        );
        assert_eq!(
            [0.1, 0.25, 5.0, 1e-3].map(catalogue::decimals),
            [1, 2, 0, 3]
        );
    }

    #[test]
    fn scale_and_offset_make_a_float_and_short_answers_give_none() {
        let mut p = pt(DataType::I16, Order::Big, Order::Big);
        p.scale = Some(0.1);
        p.offset = Some(-40.0);
        assert_eq!(
            decode_registers(&p, &[650]),
            Some(json!(650.0 * 0.1 - 40.0))
        );
        assert_eq!(
            decode_registers(&pt(DataType::U32, Order::Big, Order::Big), &[1]),
            None
        );
        let nan = f32::NAN.to_bits();
        assert_eq!(
            decode_registers(
                &pt(DataType::F32, Order::Big, Order::Big),
                &[(nan >> 16) as u16, nan as u16]
            ),
            Some(Value::Null)
        );
    }
}
