//! The plan of `scan modbus`: which address ranges of one table exist. Pure: the runner
//! ([`super::modbus`]) asks [`Scan::next`] for a range to read and tells [`Scan::answer`]
//! what the device said.
//!
//! Reads start with blocks of at most 125 registers (2000 bits), and the block size adapts
//! like a window: a block the device answers exists as a whole, and the next block is twice
//! as long (up to the limit); a block the device refuses with exception 2 (illegal data
//! address) or 3 (illegal data value: some devices answer that for a read past their map, or
//! for a block longer than they serve) is read again at half its length, down to a single
//! address, which then does not exist. So a table that exists costs one read per full block,
//! and a stretch that does not costs one read per address (a refused multi-address read only
//! says that *some* address in it is missing, so each one must be tried alone). Any other
//! exception is kept as it is for that block (a busy or failed device says nothing about its
//! map), and the scan goes on after it.
//!
//! Bounded: `n` addresses cost at most `n` plus a few halvings per block of reads, and the
//! runner stops at its request limit.

use crate::sources::modbus::config::RegisterKind;

/// What one read of a range drew.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reply {
    /// The device answered it.
    Answered,
    /// The device refused it with this exception code.
    Exception(u8),
}

/// What is known of one range of addresses, at the end.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Found {
    /// The device answers these addresses.
    Exists,
    /// The device refuses these addresses (exception 2 or 3 on each one).
    Missing,
    /// The device answered this exception for the block; nothing more is known.
    Refused(u8),
    /// Not read: the scan stopped first.
    NotScanned,
}

/// A scan of `first..=last` of one table.
#[derive(Debug)]
pub struct Scan {
    /// The table.
    pub kind: RegisterKind,
    /// The first address of the scan.
    first: u32,
    /// The next address to read.
    at: u32,
    /// The last address to read.
    last: u32,
    /// The length of the next read.
    size: u16,
    /// The longest read.
    max: u16,
    /// Ranges read: (start, count, found), merged when adjacent and alike.
    done: Vec<(u32, u32, Found)>,
}

impl Scan {
    /// A scan of `first..=last` in blocks of at most `block` (capped by the table's request
    /// limit).
    pub fn new(kind: RegisterKind, first: u16, last: u16, block: u16) -> Self {
        let max = block.clamp(1, kind.max_per_request());
        Self {
            kind,
            first: u32::from(first),
            at: u32::from(first),
            last: u32::from(last.max(first)),
            size: max,
            max,
            done: Vec::new(),
        }
    }

    /// The next range to read: (start, count); `None` once the range is done.
    pub fn next(&self) -> Option<(u16, u16)> {
        if self.at > self.last {
            return None;
        }
        let count = u32::from(self.size).min(self.last - self.at + 1);
        // Both fit: at <= last <= 65535 and count <= size <= 2000.
        Some((self.at as u16, count as u16))
    }

    /// What the device said to the range [`Scan::next`] gave.
    pub fn answer(&mut self, reply: Reply) {
        let Some((start, count)) = self.next() else {
            return;
        };
        match reply {
            Reply::Answered => {
                self.record(start, count, Found::Exists);
                self.size = self.size.saturating_mul(2).min(self.max);
            }
            Reply::Exception(2 | 3) if count > 1 => self.size = (count / 2).max(1),
            Reply::Exception(2 | 3) => self.record(start, count, Found::Missing),
            Reply::Exception(code) => self.record(start, count, Found::Refused(code)),
        }
    }

    fn record(&mut self, start: u16, count: u16, found: Found) {
        let (start, count) = (u32::from(start), u32::from(count));
        self.at = start + count;
        match self.done.last_mut() {
            Some((s, c, f)) if *f == found && *s + *c == start => *c += count,
            _ => self.done.push((start, count, found)),
        }
    }

    /// How far the scan is: (addresses done, addresses found to exist).
    pub fn progress(&self) -> (u32, u32) {
        let found = self
            .done
            .iter()
            .filter(|(_, _, f)| *f == Found::Exists)
            .map(|(_, c, _)| c)
            .sum();
        (self.at - self.first, found)
    }

    /// The ranges, in address order: `(first, last, found)`; what was not read yet is
    /// [`Found::NotScanned`].
    pub fn ranges(&self) -> Vec<(u16, u16, Found)> {
        let rest =
            (self.at <= self.last).then(|| (self.at, self.last - self.at + 1, Found::NotScanned));
        self.done
            .iter()
            .copied()
            .chain(rest)
            // Both fit: every range lies inside 0..=65535.
            .map(|(start, count, found)| (start as u16, (start + count - 1) as u16, found))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Runs a scan against a map where `exists` says which addresses answer; a read answers
    /// when every address of it exists, else exception 2 (as pymodbus's sparse block does).
    fn run(scan: &mut Scan, exists: impl Fn(u16) -> bool) -> usize {
        let mut reads = 0;
        while let Some((start, count)) = scan.next() {
            reads += 1;
            let all = (start..start + count).all(&exists);
            scan.answer(if all {
                Reply::Answered
            } else {
                Reply::Exception(2)
            });
        }
        reads
    }

    #[test]
    fn a_sparse_map_comes_out_as_its_ranges() {
        let map = |a: u16| a < 10 || (100..104).contains(&a) || a == 1000;
        let mut scan = Scan::new(RegisterKind::Holding, 0, 1999, 125);
        let reads = run(&mut scan, map);
        let exists: Vec<(u16, u16)> = scan
            .ranges()
            .into_iter()
            .filter(|r| r.2 == Found::Exists)
            .map(|(a, b, _)| (a, b))
            .collect();
        assert_eq!(exists, [(0, 9), (100, 103), (1000, 1000)]);
        assert_eq!(scan.ranges().first(), Some(&(0, 9, Found::Exists)));
        assert_eq!(scan.ranges().last(), Some(&(1001, 1999, Found::Missing)));
        assert_eq!(scan.progress(), (2000, 15));
        // A read per missing address, and a few per stretch that exists.
        assert!(reads < 2000 - 15 + 40, "{reads}");
    }

    #[test]
    fn a_full_table_costs_one_read_per_block_and_an_empty_one_too() {
        let mut full = Scan::new(RegisterKind::Holding, 0, 999, 125);
        assert_eq!(run(&mut full, |_| true), 8);
        assert_eq!(full.ranges(), [(0, 999, Found::Exists)]);
        let mut empty = Scan::new(RegisterKind::Coil, 0, 9999, 2000);
        // Halved down to one coil (11 reads), then one read per coil.
        assert_eq!(run(&mut empty, |_| false), 10 + 10_000);
        assert_eq!(empty.ranges(), [(0, 9999, Found::Missing)]);
    }

    #[test]
    fn other_exceptions_are_kept_and_the_unread_rest_is_named() {
        let mut scan = Scan::new(RegisterKind::Input, 10, 29, 10);
        scan.answer(Reply::Exception(6));
        assert_eq!(
            scan.ranges(),
            [(10, 19, Found::Refused(6)), (20, 29, Found::NotScanned)]
        );
        let mut last = Scan::new(RegisterKind::Holding, 65530, 65535, 125);
        assert_eq!(last.next(), Some((65530, 6)));
        last.answer(Reply::Answered);
        assert_eq!(last.ranges(), [(65530, 65535, Found::Exists)]);
    }
}
