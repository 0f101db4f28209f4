//! The sampler: every [`SAMPLE_EVERY`], in the middle of a bucket, the connector's own series.
//!
//! | series | what | unit |
//! | --- | --- | --- |
//! | `queue/<name>` | each bounded queue's fill, as `queues[]` of `/api/status` shows it | `%` |
//! | `in/<source>` | records per second the engine took from the source (its offers less the ones it refused), from the ledger | `records/s` |
//! | `out/<sink>` | records per second the sink's destination confirmed, from the sink's ledger figures | `records/s` |
//!
//! A rate needs two readings, so the `in/` and `out/` series start with the second; a source
//! that shows up later (its first record) is counted from zero. A counter that went down gives
//! no rate that time.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::feed::Trends;
use super::series::BUCKET_MS;
use crate::alerts::Hub;
use crate::engine::Engine;
use crate::shutdown::Shutdown;

/// How often the sampler looks: once per bucket.
pub const SAMPLE_EVERY: Duration = Duration::from_millis(BUCKET_MS);

/// One look at the connector.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct Reading {
    /// Each queue's fill in percent, by queue name.
    pub fills: Vec<(String, f64)>,
    /// Records taken in since start, by source.
    pub taken_in: Vec<(String, u64)>,
    /// Records delivered since start (or since the queue's start), by sink.
    pub delivered: Vec<(String, u64)>,
}

/// Reads the queues (through the alert hub, which knows every one) and the counters.
pub fn read(engine: &Engine, alerts: &Hub) -> Reading {
    let fills = alerts
        .queues_json()
        .iter()
        .filter_map(|q| Some((q["name"].as_str()?.to_string(), q["fill_pct"].as_f64()?)))
        .collect();
    let taken_in = engine
        .ledger
        .snapshot()
        .into_iter()
        .map(|(source, c)| (source, c.received.saturating_sub(c.refused)))
        .collect();
    let delivered = engine
        .sinks()
        .iter()
        .map(|s| (s.name().to_string(), s.report().ledger.delivered))
        .collect();
    Reading {
        fills,
        taken_in,
        delivered,
    }
}

/// Turns readings into samples; keeps the last counters for the rates.
#[derive(Debug, Default)]
pub struct Sampler {
    /// The last count of each `in/` and `out/` series (bounded by the sources and sinks).
    last: HashMap<String, u64>,
}

impl Sampler {
    /// Records `reading`, taken `elapsed` after the previous one (`None` for the first).
    pub fn sample(&mut self, trends: &Trends, reading: Reading, elapsed: Option<Duration>) {
        for (queue, fill) in reading.fills {
            trends.record(&format!("queue/{queue}"), "%", fill);
        }
        let secs = elapsed.map_or(0.0, |e| e.as_secs_f64());
        let counters = reading
            .taken_in
            .into_iter()
            .map(|(s, n)| (format!("in/{s}"), n))
            .chain(
                reading
                    .delivered
                    .into_iter()
                    .map(|(s, n)| (format!("out/{s}"), n)),
            );
        for (name, count) in counters {
            // Counters start at zero with the process: one that shows up after the first
            // reading (a source's first record) counted from zero.
            let before = self.last.insert(name.clone(), count).or(elapsed.map(|_| 0));
            if let Some(before) = before.filter(|b| *b <= count && secs > 0.0) {
                trends.record(&name, "records/s", (count - before) as f64 / secs);
            }
        }
    }
}

/// How long from `now_ms` to the middle of the next bucket (of this one, if still ahead).
pub fn until_mid_bucket(now_ms: u64) -> Duration {
    let into = now_ms % BUCKET_MS;
    let mid = BUCKET_MS / 2;
    Duration::from_millis(if into < mid {
        mid - into
    } else {
        BUCKET_MS + mid - into
    })
}

/// Samples at once, then in the middle of every bucket, until `shutdown`.
pub async fn run(trends: Arc<Trends>, engine: Arc<Engine>, alerts: Arc<Hub>, shutdown: Shutdown) {
    let mut sampler = Sampler::default();
    let mut previous: Option<Instant> = None;
    loop {
        let reading = read(&engine, &alerts);
        let now = Instant::now();
        sampler.sample(&trends, reading, previous.map(|p| now - p));
        previous = Some(now);
        tokio::select! {
            _ = tokio::time::sleep(until_mid_bucket(trends.now_ms())) => {}
            _ = shutdown.wait() => return,
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicU64, Ordering};

    use super::*;
    use crate::trends::series::BUCKETS;

    const T0: u64 = 1_700_000_000_000;

    fn reading(taken: u64, delivered: u64, fill: f64) -> Reading {
        Reading {
            fills: vec![("push_queue".into(), fill)],
            taken_in: vec![("modbus/plant-1".into(), taken)],
            delivered: vec![("push".into(), delivered)],
        }
    }

    fn last(t: &Trends, name: &str) -> Option<f32> {
        let r = t.read(&[name.to_string()], None);
        let b = r.series[0].1.as_ref()?.buckets[BUCKETS - 1];
        (!b.is_empty()).then_some(b.last)
    }

    #[test]
    fn fills_are_sampled_at_once_and_rates_from_the_second_reading_on() {
        let now = Arc::new(AtomicU64::new(T0 + 5_000));
        let read = Arc::clone(&now);
        let t = Trends::new(10, Box::new(move || read.load(Ordering::Relaxed)));
        let mut s = Sampler::default();
        s.sample(&t, reading(100, 40, 12.5), None);
        assert_eq!(last(&t, "queue/push_queue"), Some(12.5));
        assert_eq!(last(&t, "in/modbus/plant-1"), None);
        now.store(T0 + 15_000, Ordering::Relaxed);
        s.sample(&t, reading(150, 60, 13.0), Some(Duration::from_secs(10)));
        assert_eq!(last(&t, "in/modbus/plant-1"), Some(5.0));
        assert_eq!(last(&t, "out/push"), Some(2.0));
        // A counter that went down gives no rate, and the next reading counts from it.
        now.store(T0 + 25_000, Ordering::Relaxed);
        s.sample(&t, reading(160, 10, 13.0), Some(Duration::from_secs(10)));
        assert_eq!(last(&t, "out/push"), None);
        assert_eq!(last(&t, "in/modbus/plant-1"), Some(1.0));
        // A source that shows up later counts from zero.
        let mut later = reading(170, 20, 13.0);
        later.taken_in.push(("ingest/orders".into(), 30));
        s.sample(&t, later, Some(Duration::from_secs(10)));
        assert_eq!(last(&t, "in/ingest/orders"), Some(3.0));
    }

    #[test]
    fn the_sampler_aims_at_the_middle_of_a_bucket() {
        assert_eq!(until_mid_bucket(T0), Duration::from_millis(5_000));
        assert_eq!(until_mid_bucket(T0 + 4_999), Duration::from_millis(1));
        assert_eq!(until_mid_bucket(T0 + 5_000), Duration::from_millis(10_000));
        assert_eq!(until_mid_bucket(T0 + 9_000), Duration::from_millis(6_000));
    }
}
