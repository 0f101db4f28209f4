//! The bounded table of series: names to rings, at most `max` of them.
//!
//! A series is made by its first sample. At the bound a new series may take the place of the
//! one that has gone longest without a sample (its ring is reused, nothing is allocated but
//! the name), if that one has been silent for [`EVICT_AFTER_MS`]: a live series is never given
//! up for a newcomer, so a config with more points than the bound keeps the first ones whole
//! instead of every one in pieces. The connector's own series (queues, rates) are *pinned*:
//! they take the place of the stalest unpinned series even when it is live, so they are always
//! kept. Otherwise the newcomer's samples are refused. Both are counted by the caller.
//!
//! Pure: the time is an argument.

use std::collections::HashMap;

use super::series::{Bucket, Series, BUCKET_MS};

/// How long an unpinned series must have been silent before a new series may take its place.
pub const EVICT_AFTER_MS: u64 = 10 * 60 * 1000;

/// What became of a sample.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Taken {
    /// Added to its series.
    Kept,
    /// Its series was made.
    New,
    /// Its series was made in the place of the series named here, which is gone.
    Replaced(Box<str>),
    /// Not kept: the table is at its bound and every kept series is live.
    Refused,
}

struct Entry {
    name: Box<str>,
    unit: Option<Box<str>>,
    pinned: bool,
    series: Series,
}

/// A copy of one series' buckets.
#[derive(Debug, Clone, PartialEq)]
pub struct Copied {
    /// The unit its samples were given with, if any.
    pub unit: Option<Box<str>>,
    /// Its buckets, oldest first.
    pub buckets: Vec<Bucket>,
}

/// The table.
pub struct Table {
    index: HashMap<Box<str>, usize>,
    entries: Vec<Entry>,
    max: usize,
    /// The earliest time an unpinned newcomer could find a silent series to replace (the last
    /// search found none): until then a newcomer is refused without a search.
    no_room_before_ms: u64,
}

impl Table {
    /// An empty table of at most `max` series.
    pub fn new(max: usize) -> Self {
        Table {
            index: HashMap::new(),
            entries: Vec::new(),
            max,
            no_room_before_ms: 0,
        }
    }

    /// Series kept.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// True when no series is kept.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// The bound.
    pub fn max(&self) -> usize {
        self.max
    }

    /// Bytes the series take: their rings and their names.
    pub fn bytes(&self) -> usize {
        self.entries
            .iter()
            .map(|e| {
                super::series::SERIES_BYTES
                    + std::mem::size_of::<Entry>()
                    + 2 * e.name.len()
                    + e.unit.as_ref().map_or(0, |u| u.len())
            })
            .sum()
    }

    /// Adds sample `value` at `now_ms` to series `name` (made with `unit` if new).
    pub fn record(
        &mut self,
        name: &str,
        unit: Option<&str>,
        value: f64,
        now_ms: u64,
        pinned: bool,
    ) -> Taken {
        if let Some(&i) = self.index.get(name) {
            self.entries[i].series.push(value, now_ms);
            return Taken::Kept;
        }
        if self.max == 0 {
            return Taken::Refused;
        }
        if self.entries.len() < self.max {
            let mut series = Series::new(now_ms);
            series.push(value, now_ms);
            self.index.insert(name.into(), self.entries.len());
            self.entries.push(Entry {
                name: name.into(),
                unit: unit.map(Into::into),
                pinned,
                series,
            });
            return Taken::New;
        }
        let Some(i) = self.room(now_ms, pinned) else {
            return Taken::Refused;
        };
        let e = &mut self.entries[i];
        let old = std::mem::replace(&mut e.name, name.into());
        e.unit = unit.map(Into::into);
        e.pinned = pinned;
        // The old ring is emptied and reused: nothing of the old series shows in the new one.
        e.series.reset(now_ms);
        e.series.push(value, now_ms);
        self.index.remove(&old);
        self.index.insert(name.into(), i);
        Taken::Replaced(old)
    }

    /// The slot a newcomer may take at the bound, if any.
    fn room(&mut self, now_ms: u64, pinned: bool) -> Option<usize> {
        if !pinned && now_ms < self.no_room_before_ms {
            return None;
        }
        let (i, last) = self
            .entries
            .iter()
            .enumerate()
            .filter(|(_, e)| !e.pinned)
            .map(|(i, e)| (i, e.series.last_sample_ms()))
            .min_by_key(|&(_, last)| last)?;
        if pinned || now_ms.saturating_sub(last) >= EVICT_AFTER_MS {
            return Some(i);
        }
        self.no_room_before_ms = last + EVICT_AFTER_MS;
        None
    }

    /// Every kept name, sorted.
    pub fn names(&self) -> Vec<String> {
        let mut out: Vec<String> = self.entries.iter().map(|e| e.name.to_string()).collect();
        out.sort_unstable();
        out
    }

    /// A copy of series `name`'s buckets from epoch `from` to the epoch of `now_ms`.
    pub fn copy(&self, name: &str, from: u64, now_ms: u64) -> Option<Copied> {
        let e = &self.entries[*self.index.get(name)?];
        let now = now_ms / BUCKET_MS;
        let mut buckets = Vec::with_capacity(now.saturating_sub(from) as usize + 1);
        e.series.copy_into(from, now, &mut buckets);
        Some(Copied {
            unit: e.unit.clone(),
            buckets,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const T0: u64 = 1_700_000_000_000;

    #[test]
    fn a_sample_makes_its_series_and_the_next_one_adds_to_it() {
        let mut t = Table::new(4);
        assert_eq!(t.record("point/a", Some("°C"), 1.0, T0, false), Taken::New);
        assert_eq!(t.record("point/a", None, 3.0, T0 + 1, false), Taken::Kept);
        let c = t.copy("point/a", T0 / BUCKET_MS, T0).expect("kept");
        assert_eq!(c.unit.as_deref(), Some("°C"));
        assert_eq!(c.buckets.len(), 1);
        assert_eq!(c.buckets[0].mean, 2.0);
        assert_eq!(t.copy("point/b", 0, T0), None);
    }

    #[test]
    fn at_the_bound_a_live_table_refuses_newcomers_and_keeps_every_kept_series_whole() {
        let mut t = Table::new(2);
        t.record("a", None, 1.0, T0, false);
        t.record("b", None, 1.0, T0, false);
        assert_eq!(t.record("c", None, 1.0, T0 + 1000, false), Taken::Refused);
        // Still refused without a new search while no kept series can have gone silent.
        assert_eq!(t.no_room_before_ms, T0 + EVICT_AFTER_MS);
        assert_eq!(
            t.record("c", None, 1.0, T0 + EVICT_AFTER_MS - 1, false),
            Taken::Refused
        );
        assert_eq!(t.len(), 2);
        assert_eq!(t.names(), ["a", "b"]);
    }

    #[test]
    fn at_the_bound_a_newcomer_replaces_the_series_silent_longest_once_it_is_silent_ten_minutes() {
        let mut t = Table::new(2);
        t.record("a", None, 1.0, T0, false);
        t.record("b", None, 1.0, T0, false);
        let later = T0 + EVICT_AFTER_MS;
        t.record("b", None, 2.0, later, false);
        assert_eq!(
            t.record("c", None, 7.0, later, false),
            Taken::Replaced("a".into())
        );
        assert_eq!(t.names(), ["b", "c"]);
        let c = t.copy("c", T0 / BUCKET_MS, later).expect("kept");
        // The reused ring holds only the new series' sample.
        assert_eq!(c.buckets.iter().filter(|b| !b.is_empty()).count(), 1);
        assert_eq!(c.buckets.last().map(|b| b.last), Some(7.0));
        assert_eq!(t.record("a", None, 1.0, later, false), Taken::Refused);
    }

    #[test]
    fn a_pinned_series_takes_the_place_of_the_stalest_unpinned_one_even_when_it_is_live() {
        let mut t = Table::new(2);
        t.record("queue/push", None, 1.0, T0, true);
        t.record("point/a", None, 1.0, T0, false);
        assert_eq!(
            t.record("in/x", None, 1.0, T0 + 1, true),
            Taken::Replaced("point/a".into())
        );
        // Nothing unpinned is left to give up.
        assert_eq!(t.record("out/y", None, 1.0, T0 + 2, true), Taken::Refused);
        assert_eq!(t.names(), ["in/x", "queue/push"]);
    }

    #[test]
    fn a_table_of_no_series_keeps_nothing() {
        let mut t = Table::new(0);
        assert_eq!(t.record("a", None, 1.0, T0, true), Taken::Refused);
        assert!(t.is_empty());
    }

    #[test]
    fn two_thousand_series_stay_under_twelve_mib() {
        let mut t = Table::new(2000);
        for i in 0..2100 {
            t.record(
                &format!("point/press-{i:04}/process.oven_temperature"),
                Some("°C"),
                1.0,
                T0,
                false,
            );
        }
        assert_eq!(t.len(), 2000);
        assert!(t.bytes() < 12 * 1024 * 1024, "{}", t.bytes());
    }
}
