//! Request coalescing: the points of one poll group become as few read requests as the
//! protocol allows. Points of one table whose addresses are contiguous, or apart by at most
//! `max_gap` unread units, share a request of at most 125 registers (2000 bits).
//!
//! Pure: the plan is computed once per group at start. A request whose coalesced read draws
//! an exception is split into one request per point for the rest of the run (see the poller),
//! so one unreadable register does not blank its neighbours.

use super::config::{PointConfig, RegisterKind};

/// One read request and the points it carries.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReadRequest {
    /// The table.
    pub kind: RegisterKind,
    /// First address read.
    pub start: u16,
    /// Units read (registers or bits), 1 to 125 (2000).
    pub count: u16,
    /// Indexes into the device's points.
    pub points: Vec<usize>,
}

/// Coalesces the points `members` (indexes into `points`) into read requests.
pub fn coalesce(points: &[PointConfig], members: &[usize], max_gap: u16) -> Vec<ReadRequest> {
    let mut sorted: Vec<usize> = members.to_vec();
    sorted.sort_by_key(|&i| (points[i].kind, points[i].register, i));
    let mut out: Vec<ReadRequest> = Vec::new();
    for i in sorted {
        let pt = &points[i];
        let start = u32::from(pt.register);
        let end = start + u32::from(pt.data_type.width()); // exclusive
        if let Some(last) = out.last_mut() {
            let last_start = u32::from(last.start);
            let last_end = last_start + u32::from(last.count);
            let fits = last.kind == pt.kind
                && start <= last_end + u32::from(max_gap)
                && end.max(last_end) - last_start <= u32::from(pt.kind.max_per_request());
            if fits {
                // Both fit in u16: end - start <= max_per_request.
                last.count = (end.max(last_end) - last_start) as u16;
                last.points.push(i);
                continue;
            }
        }
        out.push(ReadRequest {
            kind: pt.kind,
            start: pt.register,
            count: pt.data_type.width(),
            points: vec![i],
        });
    }
    out
}

/// One request per point: what a request becomes after its coalesced read drew an exception.
pub fn split(points: &[PointConfig], request: &ReadRequest) -> Vec<ReadRequest> {
    request
        .points
        .iter()
        .map(|&i| ReadRequest {
            kind: points[i].kind,
            start: points[i].register,
            count: points[i].data_type.width(),
            points: vec![i],
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sources::modbus::config::{DataType, Order};

    fn point(register: u16, kind: RegisterKind, data_type: DataType) -> PointConfig {
        PointConfig {
            name: format!("p{register}"),
            group: 0,
            register,
            kind,
            data_type,
            word_order: Order::Big,
            byte_order: Order::Big,
            scale: None,
            offset: None,
            unit: None,
            writable: false,
            min: None,
            max: None,
        }
    }

    #[test]
    fn contiguous_and_near_registers_share_one_request_and_far_ones_do_not() {
        let pts = vec![
            point(0, RegisterKind::Holding, DataType::U16),
            point(1, RegisterKind::Holding, DataType::F32),
            point(10, RegisterKind::Holding, DataType::U16),
            point(100, RegisterKind::Holding, DataType::U16),
        ];
        let reqs = coalesce(&pts, &[0, 1, 2, 3], 8);
        assert_eq!(reqs.len(), 2);
        assert_eq!((reqs[0].start, reqs[0].count), (0, 11));
        assert_eq!(reqs[0].points, vec![0, 1, 2]);
        assert_eq!((reqs[1].start, reqs[1].count), (100, 1));
        let strict = coalesce(&pts, &[0, 1, 2, 3], 0);
        assert_eq!(strict.len(), 3);
    }

    #[test]
    fn a_request_never_exceeds_125_registers_or_2000_bits_and_kinds_never_mix() {
        let mut pts: Vec<PointConfig> = (0..300)
            .map(|r| point(r, RegisterKind::Holding, DataType::U16))
            .collect();
        pts.extend((0..5000).map(|r| point(r, RegisterKind::Coil, DataType::Bool)));
        pts.push(point(0, RegisterKind::Input, DataType::U16));
        let all: Vec<usize> = (0..pts.len()).collect();
        let reqs = coalesce(&pts, &all, 8);
        for r in &reqs {
            assert!(r.count <= r.kind.max_per_request(), "{r:?}");
            assert!(r.points.iter().all(|&i| pts[i].kind == r.kind));
        }
        let holding = reqs
            .iter()
            .filter(|r| r.kind == RegisterKind::Holding)
            .count();
        let coils = reqs.iter().filter(|r| r.kind == RegisterKind::Coil).count();
        assert_eq!((holding, coils), (3, 3));
        assert_eq!(
            reqs.iter().map(|r| r.points.len()).sum::<usize>(),
            pts.len()
        );
    }

    #[test]
    fn a_wide_point_at_the_edge_starts_a_new_request() {
        let pts = vec![
            point(0, RegisterKind::Holding, DataType::U16),
            point(123, RegisterKind::Holding, DataType::F64),
        ];
        let reqs = coalesce(&pts, &[0, 1], 124);
        assert_eq!(reqs.len(), 2);
        assert_eq!((reqs[1].start, reqs[1].count), (123, 4));
    }
}
