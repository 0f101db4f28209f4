//! One series' last hour: [`BUCKETS`] buckets of [`BUCKET_MS`] on the wall clock's grid, the
//! newest one open (still taking samples), the others closed.
//!
//! The ring is allocated once, when the series is made, and never grows: a sample only updates
//! the open bucket's sums, and crossing a 10 s boundary closes it into its ring slot (the
//! epoch's index modulo [`BUCKETS`]) and marks the slots it skipped empty. So no sample
//! allocates, and a series that has been silent for an hour reads as empty.
//!
//! Closed buckets are kept as 32-bit floats (about seven significant digits, enough to draw;
//! the exact value is the status page's). A clock that steps back by less than a bucket puts
//! its samples in the open bucket; one that steps back further starts the series anew.

/// The width of a bucket: 10 s.
pub const BUCKET_MS: u64 = 10_000;
/// Buckets kept: one hour of 10 s.
pub const BUCKETS: usize = 360;

/// One closed bucket. An empty one (no sample) has every field NaN.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Bucket {
    /// The lowest sample.
    pub min: f32,
    /// The highest sample.
    pub max: f32,
    /// The mean of the samples.
    pub mean: f32,
    /// The last sample.
    pub last: f32,
}

impl Bucket {
    /// A bucket without samples.
    pub const EMPTY: Bucket = Bucket {
        min: f32::NAN,
        max: f32::NAN,
        mean: f32::NAN,
        last: f32::NAN,
    };

    /// True when no sample fell into it.
    pub fn is_empty(&self) -> bool {
        self.mean.is_nan()
    }
}

/// The open bucket's running figures, in full precision.
#[derive(Debug, Clone, Copy)]
struct Open {
    min: f64,
    max: f64,
    sum: f64,
    count: u32,
    last: f64,
}

impl Open {
    const NONE: Open = Open {
        min: f64::INFINITY,
        max: f64::NEG_INFINITY,
        sum: 0.0,
        count: 0,
        last: f64::NAN,
    };

    fn add(&mut self, v: f64) {
        self.min = self.min.min(v);
        self.max = self.max.max(v);
        self.sum += v;
        self.count = self.count.saturating_add(1);
        self.last = v;
    }

    fn bucket(&self) -> Bucket {
        if self.count == 0 {
            return Bucket::EMPTY;
        }
        Bucket {
            min: self.min as f32,
            max: self.max as f32,
            mean: (self.sum / f64::from(self.count)) as f32,
            last: self.last as f32,
        }
    }
}

/// The ring of one series.
#[derive(Debug)]
pub struct Series {
    /// `BUCKETS` slots; the slot of epoch `e` is `e % BUCKETS`.
    ring: Box<[Bucket]>,
    /// The epoch (unix ms / [`BUCKET_MS`]) of the open bucket.
    head: u64,
    open: Open,
    /// Unix ms of the last sample.
    last_sample_ms: u64,
}

/// Bytes one series' buckets take: the ring, the open bucket and the bookkeeping.
pub const SERIES_BYTES: usize =
    BUCKETS * std::mem::size_of::<Bucket>() + std::mem::size_of::<Series>();

// The bound the module states: a series' buckets take under 6 KiB.
const _: () = assert!(SERIES_BYTES < 6 * 1024);

fn slot(epoch: u64) -> usize {
    // The remainder is below BUCKETS, so it fits a usize.
    (epoch % BUCKETS as u64) as usize
}

impl Series {
    /// A series whose first sample comes at `now_ms`.
    pub fn new(now_ms: u64) -> Self {
        Series {
            ring: vec![Bucket::EMPTY; BUCKETS].into_boxed_slice(),
            head: now_ms / BUCKET_MS,
            open: Open::NONE,
            last_sample_ms: now_ms,
        }
    }

    /// Empties the series for a new start at `now_ms`, keeping its ring's memory.
    pub fn reset(&mut self, now_ms: u64) {
        self.ring.fill(Bucket::EMPTY);
        self.head = now_ms / BUCKET_MS;
        self.open = Open::NONE;
        self.last_sample_ms = now_ms;
    }

    /// Unix ms of the last sample.
    pub fn last_sample_ms(&self) -> u64 {
        self.last_sample_ms
    }

    /// Takes one sample at `now_ms`. Values that are not finite are ignored.
    pub fn push(&mut self, value: f64, now_ms: u64) {
        if !value.is_finite() {
            return;
        }
        let epoch = now_ms / BUCKET_MS;
        if epoch > self.head {
            self.advance(epoch);
        } else if epoch + 1 < self.head {
            // The clock stepped back by more than a bucket: the hour it showed is not this one.
            self.reset(now_ms);
        }
        self.open.add(value);
        self.last_sample_ms = now_ms;
    }

    /// Closes the open bucket and opens the one of `epoch`, emptying the skipped ones.
    fn advance(&mut self, epoch: u64) {
        self.ring[slot(self.head)] = self.open.bucket();
        let skipped = (epoch - self.head - 1).min(BUCKETS as u64);
        for e in self.head + 1..self.head + 1 + skipped {
            self.ring[slot(e)] = Bucket::EMPTY;
        }
        self.head = epoch;
        self.open = Open::NONE;
    }

    /// The bucket of `epoch`, as a reader at epoch `now` sees it: empty outside the last
    /// [`BUCKETS`] up to `now`, or after the last sample's bucket.
    pub fn bucket(&self, epoch: u64, now: u64) -> Bucket {
        let oldest = now.saturating_sub(BUCKETS as u64 - 1);
        if epoch < oldest || epoch > now || epoch > self.head {
            return Bucket::EMPTY;
        }
        if epoch == self.head {
            return self.open.bucket();
        }
        if self.head - epoch >= BUCKETS as u64 {
            return Bucket::EMPTY;
        }
        self.ring[slot(epoch)]
    }

    /// The buckets from epoch `from` to `now`, oldest first, into `out`.
    pub fn copy_into(&self, from: u64, now: u64, out: &mut Vec<Bucket>) {
        out.extend((from..=now).map(|e| self.bucket(e, now)));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Unix ms of second `s` of an hour that starts on a bucket boundary.
    fn at(s: u64) -> u64 {
        1_700_000_000_000 + s * 1000
    }

    fn epoch(s: u64) -> u64 {
        at(s) / BUCKET_MS
    }

    #[test]
    fn samples_of_one_ten_second_bucket_give_its_min_max_mean_and_last() {
        let mut s = Series::new(at(0));
        for (t, v) in [(0, 4.0), (3, 1.0), (9, 7.0)] {
            s.push(v, at(t) + 999);
        }
        let b = s.bucket(epoch(0), epoch(0));
        assert_eq!(
            b,
            Bucket {
                min: 1.0,
                max: 7.0,
                mean: 4.0,
                last: 7.0
            }
        );
    }

    #[test]
    fn a_sample_on_the_ten_second_boundary_opens_the_next_bucket() {
        let mut s = Series::new(at(0));
        s.push(1.0, at(10) - 1);
        s.push(5.0, at(10));
        let now = epoch(10);
        assert_eq!(s.bucket(epoch(0), now).last, 1.0);
        assert_eq!(s.bucket(epoch(10), now).min, 5.0);
        assert_eq!(s.bucket(epoch(10), now).mean, 5.0);
    }

    #[test]
    fn skipped_buckets_are_empty_and_a_silent_series_reads_empty_after_its_last_bucket() {
        let mut s = Series::new(at(0));
        s.push(1.0, at(0));
        s.push(2.0, at(35));
        let now = epoch(60);
        assert!(!s.bucket(epoch(0), now).is_empty());
        assert!(s.bucket(epoch(10), now).is_empty());
        assert!(s.bucket(epoch(20), now).is_empty());
        assert_eq!(s.bucket(epoch(30), now).last, 2.0);
        assert!(s.bucket(epoch(40), now).is_empty());
        assert!(s.bucket(epoch(60), now).is_empty());
    }

    #[test]
    fn after_an_hour_the_ring_wraps_and_keeps_only_the_last_360_buckets() {
        let mut s = Series::new(at(0));
        // Two hours of one sample per bucket, the value its bucket number.
        for i in 0..720u64 {
            s.push(i as f64, at(i * 10 + 5));
        }
        let now = epoch(7195);
        let mut out = Vec::new();
        s.copy_into(now - 359, now, &mut out);
        assert_eq!(out.len(), BUCKETS);
        for (k, b) in out.iter().enumerate() {
            assert_eq!(b.mean, (360 + k) as f32, "bucket {k}");
        }
        // The hour before is gone, even where its slots are asked for by epoch.
        assert!(s.bucket(now - 360, now).is_empty());
        assert!(s.bucket(epoch(5), now).is_empty());
    }

    #[test]
    fn a_gap_longer_than_an_hour_empties_the_whole_ring() {
        let mut s = Series::new(at(0));
        for i in 0..360u64 {
            s.push(1.0, at(i * 10));
        }
        s.push(9.0, at(3600 * 3));
        let now = epoch(3600 * 3);
        let mut out = Vec::new();
        s.copy_into(now - 359, now, &mut out);
        assert_eq!(out.iter().filter(|b| !b.is_empty()).count(), 1);
        assert_eq!(out[359].last, 9.0);
    }

    #[test]
    fn a_clock_stepping_back_a_little_keeps_the_sample_and_far_back_starts_anew() {
        let mut s = Series::new(at(0));
        s.push(1.0, at(25));
        s.push(2.0, at(19)); // one bucket back: into the open one
        assert_eq!(s.bucket(epoch(20), epoch(20)).max, 2.0);
        assert_eq!(s.bucket(epoch(20), epoch(20)).min, 1.0);
        s.push(3.0, at(0)); // two buckets back: a new start
        assert_eq!(s.bucket(epoch(0), epoch(0)).last, 3.0);
        assert!(s.bucket(epoch(20), epoch(20)).is_empty());
    }

    #[test]
    fn values_that_are_not_finite_are_ignored() {
        let mut s = Series::new(at(0));
        s.push(f64::NAN, at(1));
        s.push(f64::INFINITY, at(2));
        assert!(s.bucket(epoch(0), epoch(0)).is_empty());
        s.push(1.5, at(3));
        assert_eq!(s.bucket(epoch(0), epoch(0)).mean, 1.5);
    }
}
