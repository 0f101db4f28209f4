//! Whatever a device answers (any length, any values) to whatever points a config lists,
//! coalescing and decoding never panic, and every point of a request gets an entry.
#![no_main]

use libfuzzer_sys::arbitrary::{Arbitrary, Result, Unstructured};
use libfuzzer_sys::fuzz_target;
use opex_connector::sources::modbus::config::{DataType, Order, PointConfig, RegisterKind};
use opex_connector::sources::modbus::decode::{decode_answer, Answer};
use opex_connector::sources::modbus::plan::{coalesce, split};

fn point(u: &mut Unstructured, n: usize) -> Result<PointConfig> {
    let kind = *u.choose(&[
        RegisterKind::Holding,
        RegisterKind::Input,
        RegisterKind::Coil,
        RegisterKind::Discrete,
    ])?;
    let data_type = if kind.is_bits() {
        DataType::Bool
    } else {
        match u.int_in_range(0..=9u8)? {
            0 => DataType::Bool,
            1 => DataType::U16,
            2 => DataType::I16,
            3 => DataType::U32,
            4 => DataType::I32,
            5 => DataType::U64,
            6 => DataType::I64,
            7 => DataType::F32,
            8 => DataType::F64,
            _ => DataType::String(u.int_in_range(1..=250u16)?),
        }
    };
    let order = |b: bool| if b { Order::Little } else { Order::Big };
    Ok(PointConfig {
        name: format!("p{n}"),
        group: 0,
        register: u16::arbitrary(u)?,
        kind,
        data_type,
        word_order: order(bool::arbitrary(u)?),
        byte_order: order(bool::arbitrary(u)?),
        scale: Option::<f64>::arbitrary(u)?,
        offset: Option::<f64>::arbitrary(u)?,
        unit: Option::<String>::arbitrary(u)?,
        writable: false,
        min: None,
        max: None,
    })
}

fn run(u: &mut Unstructured) -> Result<()> {
    let n = u.int_in_range(1..=12usize)?;
    let points = (0..n).map(|i| point(u, i)).collect::<Result<Vec<_>>>()?;
    let members: Vec<usize> = (0..n).collect();
    let max_gap = u.int_in_range(0..=130u16)?;
    let requests = coalesce(&points, &members, max_gap);
    let covered: usize = requests.iter().map(|r| r.points.len()).sum();
    assert_eq!(covered, n, "every point is in exactly one request");
    for req in &requests {
        let max = u32::from(req.kind.max_per_request());
        assert!(
            u32::from(req.count) <= max.max(u32::from(points[req.points[0]].data_type.width()))
        );
        let len = u.int_in_range(0..=300usize)?;
        let answer = if req.kind.is_bits() {
            Answer::Bits(
                (0..len)
                    .map(|_| bool::arbitrary(u))
                    .collect::<Result<_>>()?,
            )
        } else {
            Answer::Words((0..len).map(|_| u16::arbitrary(u)).collect::<Result<_>>()?)
        };
        let mut payload = serde_json::Map::new();
        decode_answer(&points, req, &answer, &mut payload);
        for &i in &req.points {
            let entry = &payload[&points[i].name];
            assert!(entry["quality"] == "good" || entry["quality"] == "bad");
        }
        for one in split(&points, req) {
            decode_answer(&points, &one, &answer, &mut payload);
        }
    }
    Ok(())
}

fuzz_target!(|data: &[u8]| {
    let _ = run(&mut Unstructured::new(data));
});
