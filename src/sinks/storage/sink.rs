//! The storage sink: admission against the event history's gate, a durable append
//! acknowledged after its commit, reads for the API, and the retention sweeper.

use std::path::Path;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use serde::Serialize;

use super::config::StorageConfig;
use crate::admission::level::{Level, LevelTracker};
use crate::admission::{Gate, Refused, Reservation};
use crate::alerts::{ComponentReport, QueueReport};
use crate::alerts::{QueueKind, QueueReading};
use crate::record::{now_ms, Record};
use crate::shutdown::Shutdown;
use crate::sinks::report::{Report, Samples, SinkFigures};
use crate::sinks::{Delivered, DeliveryError, Running, StartContext};
use crate::store::{EventCounters, EventStore, StoreError};
use crate::telemetry::events;

/// How often the retention sweeper runs (and once at start).
pub const SWEEP_EVERY: Duration = Duration::from_secs(3600);

/// A storage sink: a local event history (`events.db` for the sink called `storage`,
/// `events-<name>.db` for the others).
pub struct StorageSink {
    name: String,
    /// Shared with the sweeper thread.
    store: Arc<EventStore>,
    level: Arc<LevelTracker>,
}

/// `storage` in `/api/status`.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct StorageStatus {
    /// Quota in logical bytes.
    pub quota_bytes: u64,
    /// Logical bytes stored.
    pub used_bytes: u64,
    /// Rows stored.
    pub rows: u64,
    /// `used_bytes / quota_bytes` in percent.
    pub fill_pct: f64,
    /// `evict_oldest` or `block`.
    pub on_full: &'static str,
    /// Refusing new records now (`block`).
    pub blocking: bool,
    /// Records refused at the quota (`block`), not lost: their sources retry.
    pub blocked_total: u64,
    /// Rows deleted at the quota (`evict_oldest`).
    pub evicted_total: u64,
    /// Rows deleted because they were older than the retention.
    pub expired_total: u64,
    /// Records refused because the writer channel was full (their sources retry).
    pub dropped_total: u64,
    /// Failed write transactions.
    pub write_errors_total: u64,
    /// `ok`, `high` (80 % or more) or `full`.
    pub level: Level,
}

impl StorageSink {
    /// Opens storage sink `name`'s event history under `data_dir`.
    pub fn open(name: &str, cfg: &StorageConfig, data_dir: &Path) -> Result<Self, StoreError> {
        let file = if name == "storage" {
            "events.db".to_string()
        } else {
            format!("events-{name}.db")
        };
        let store = EventStore::open(
            &data_dir.join(file),
            cfg.on_full,
            cfg.quota_bytes,
            cfg.retention_ms,
            Arc::new(EventCounters::default()),
        )?;
        Ok(Self {
            name: name.to_string(),
            store: Arc::new(store),
            level: Arc::default(),
        })
    }

    /// The admission gate.
    pub fn gate(&self) -> &Arc<Gate> {
        self.store.gate()
    }

    /// Asks the gate to admit a record of `bytes` logical bytes
    /// ([`EventStore::row_bytes`]).
    pub fn admit(&self, bytes: u64) -> Result<Reservation, Refused> {
        self.gate().admit(bytes)
    }

    /// The logical bytes `record` takes.
    pub fn bytes(&self, record: &Record) -> u64 {
        EventStore::row_bytes(record)
    }

    /// Stores one record; returns once the transaction holding it has committed.
    pub async fn deliver(
        &self,
        record: &Record,
        mut reservation: Reservation,
    ) -> Result<Delivered, DeliveryError> {
        reservation
            .top_up(self.gate(), EventStore::row_bytes(record))
            .map_err(DeliveryError::Refused)?;
        self.store
            .append(record, reservation)
            .await
            .map_err(DeliveryError::Store)?;
        Ok(Delivered::Stored)
    }

    /// Starts the retention sweeper, which stops on the signal.
    pub fn start(&self, ctx: &StartContext) -> std::io::Result<Running> {
        let mut running = Running::default();
        running
            .on_signal
            .push(self.start_sweeper(ctx.shutdown.clone())?);
        Ok(running)
    }

    /// Everything the rest of the program reads of it.
    pub fn report(&self) -> Report {
        let st = self.status();
        let c = self.counters();
        let l = |a: &std::sync::atomic::AtomicU64| a.load(Ordering::Relaxed);
        let mut r = Report {
            accepting: self.store.accepting(),
            ..Report::default()
        };
        r.entry.insert(
            "dropped".into(),
            (st.evicted_total + st.dropped_total).into(),
        );
        r.entry.insert("blocked".into(), st.blocked_total.into());
        r.entry.insert("queue_rows".into(), st.rows.into());
        r.entry.insert("durable".into(), true.into());
        r.status = serde_json::to_value(&st).unwrap_or_default();
        if self.name == "storage" {
            r.documents = vec![("storage", r.status.clone())];
        }
        r.queues = vec![QueueReport {
            name: self.name.clone(),
            tracker: Arc::clone(&self.level),
            reading: QueueReading {
                kind: QueueKind::Disk,
                on_full: st.on_full,
                quota: st.quota_bytes,
                quota_unit: "bytes",
                used: st.used_bytes,
                blocked_total: st.blocked_total,
                evicted_total: st.evicted_total,
                dropped_total: st.dropped_total,
            },
        }];
        r.components = vec![ComponentReport {
            name: format!("{}.write_errors", self.name),
            message: "storage writes failed: their callers got the error",
            counters: vec![("write_errors_total", st.write_errors_total)],
        }];
        // A stored record is delivered: its copy is not tracked as pending anywhere.
        let stored = l(&c.stored_total);
        r.ledger = SinkFigures {
            accepted: stored,
            delivered: stored,
            kept: "disk",
            ..SinkFigures::default()
        };
        let mut s = Samples::new(&self.name);
        s.counter(
            "opex_connector_storage_stored_total",
            "Records the event history stored.",
            stored,
        );
        s.counter(
            "opex_connector_storage_evicted_total",
            "Rows the event history deleted at its quota (evict_oldest).",
            st.evicted_total,
        );
        s.counter(
            "opex_connector_storage_expired_total",
            "Rows the event history deleted past the retention.",
            st.expired_total,
        );
        s.counter(
            "opex_connector_storage_blocked_total",
            "Records refused at the event history's quota (block); their sources retry.",
            st.blocked_total,
        );
        s.gauge(
            "opex_connector_storage_rows",
            "Rows in the event history.",
            st.rows as f64,
        );
        s.gauge(
            "opex_connector_storage_used_bytes",
            "Logical bytes in the event history.",
            st.used_bytes as f64,
        );
        r.metrics = s.finish();
        r
    }

    /// The counters.
    pub fn counters(&self) -> &EventCounters {
        self.store.counters()
    }

    /// The level tracker that the alert checker advances.
    pub fn level(&self) -> &Arc<LevelTracker> {
        &self.level
    }

    /// The status now.
    pub fn status(&self) -> StorageStatus {
        let gate = self.gate();
        let (used, rows, _) = gate.usage();
        let quota = gate.quota();
        let fill_pct = if quota == 0 {
            0.0
        } else {
            (used as f64 * 10_000.0 / quota as f64).round() / 100.0
        };
        let c = self.counters();
        let blocked_total = gate.blocked_total();
        let evicted_total = c.evicted_total.load(Ordering::Relaxed);
        let dropped_total = c.dropped_total.load(Ordering::Relaxed);
        StorageStatus {
            quota_bytes: quota,
            used_bytes: used,
            rows,
            fill_pct,
            on_full: gate.on_full().as_str(),
            blocking: gate.blocking(),
            blocked_total,
            evicted_total,
            expired_total: c.expired_total.load(Ordering::Relaxed),
            dropped_total,
            write_errors_total: c.write_errors_total.load(Ordering::Relaxed),
            // Expiry is the retention working as configured, not a loss at the quota.
            level: self
                .level
                .peek(fill_pct, blocked_total + evicted_total + dropped_total),
        }
    }

    /// Up to `limit` records, `ts` ascending, of `source` (all when `None`) from `since_ms`
    /// on. Reads LMDB: call it from a blocking thread.
    pub fn query(
        &self,
        source: Option<&str>,
        since_ms: Option<u64>,
        limit: usize,
    ) -> Result<Vec<Record>, StoreError> {
        self.store.query(source, since_ms, limit)
    }

    /// Deletes the rows older than the retention now; returns how many. Blocking.
    pub fn expire(&self, now_ms: u64) -> Result<u64, StoreError> {
        self.store.expire(now_ms)
    }

    /// Starts the retention sweeper: a thread that expires old rows once now and then every
    /// [`SWEEP_EVERY`], until `shutdown` (checked between transactions, so a long sweep stops
    /// promptly) or until the store is closed. Fails only when the thread cannot be started.
    pub fn start_sweeper(&self, shutdown: Shutdown) -> std::io::Result<JoinHandle<()>> {
        let store = Arc::clone(&self.store);
        std::thread::Builder::new()
            .name("storage-sweeper".into())
            .spawn(move || {
                crate::priority::background_thread();
                loop {
                    match store.expire_while(now_ms(), || !shutdown.is_triggered()) {
                        Ok(_) => {}
                        Err(StoreError::Closed) => return,
                        Err(e) => events::storage_sweep_failed(&e),
                    }
                    if shutdown.wait_timeout(SWEEP_EVERY) {
                        return;
                    }
                }
            })
    }

    /// Stops the writer after it committed what it holds. Idempotent.
    pub fn close(&self) {
        self.store.close();
    }
}

#[cfg(test)]
mod tests {
    use std::time::Instant;

    use serde_json::json;

    use super::*;
    use crate::admission::OnFull;

    const DAY_MS: u64 = 24 * 60 * 60 * 1000;

    fn cfg(on_full: OnFull, quota_bytes: u64) -> StorageConfig {
        StorageConfig {
            quota_bytes,
            retention_ms: DAY_MS,
            on_full,
        }
    }

    fn record(source: &str, ts: u64) -> Record {
        let mut r = Record::from_value(source, "k", &json!({"v": ts}));
        r.ts_ms = ts;
        r
    }

    async fn put(sink: &StorageSink, r: &Record) -> Result<(), Refused> {
        let reservation = sink.admit(EventStore::row_bytes(r))?;
        sink.deliver(r, reservation).await.unwrap();
        Ok(())
    }

    #[tokio::test]
    async fn stored_records_read_back_and_show_in_the_status() {
        let dir = tempfile::tempdir().unwrap();
        let sink =
            StorageSink::open("storage", &cfg(OnFull::EvictOldest, 1 << 20), dir.path()).unwrap();
        let now = now_ms();
        let a = record("webhook/stripe", now);
        let b = record("ingest/orders", now + 1);
        put(&sink, &a).await.unwrap();
        put(&sink, &b).await.unwrap();
        assert_eq!(
            sink.query(Some("webhook/stripe"), None, 10).unwrap(),
            vec![a.clone()]
        );
        assert_eq!(sink.query(None, Some(now), 10).unwrap(), vec![a.clone(), b]);
        let st = sink.status();
        assert_eq!(st.rows, 2);
        assert_eq!(st.quota_bytes, 1 << 20);
        assert!(st.used_bytes > 0);
        assert_eq!(st.on_full, "evict_oldest");
        assert_eq!(st.level, Level::Ok);
        let v = serde_json::to_value(&st).unwrap();
        for key in [
            "quota_bytes",
            "used_bytes",
            "rows",
            "fill_pct",
            "on_full",
            "blocking",
            "blocked_total",
            "evicted_total",
            "expired_total",
            "write_errors_total",
            "level",
        ] {
            assert!(v.get(key).is_some(), "status has {key}");
        }
        assert_eq!(v["level"], "ok");
        sink.close();
    }

    #[tokio::test]
    async fn block_refuses_at_the_quota_and_the_status_says_full() {
        let dir = tempfile::tempdir().unwrap();
        let r = record("s", 1);
        let quota = EventStore::row_bytes(&r) * 2;
        let sink = StorageSink::open("storage", &cfg(OnFull::Block, quota), dir.path()).unwrap();
        put(&sink, &record("s", 1)).await.unwrap();
        put(&sink, &record("s", 2)).await.unwrap();
        assert!(put(&sink, &record("s", 3)).await.is_err());
        let st = sink.status();
        assert!(st.blocking);
        assert_eq!(st.blocked_total, 1);
        assert_eq!(st.fill_pct, 100.0);
        assert_eq!(st.level, Level::Full);
        assert_eq!(sink.query(None, None, 10).unwrap().len(), 2);
    }

    #[test]
    fn the_sweeper_expires_old_rows_at_start_and_stops_on_shutdown() {
        let dir = tempfile::tempdir().unwrap();
        let sink =
            StorageSink::open("storage", &cfg(OnFull::EvictOldest, 1 << 20), dir.path()).unwrap();
        let now = now_ms();
        let rt = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        rt.block_on(async {
            for i in 0..5 {
                put(&sink, &record("s", now - 2 * DAY_MS + i))
                    .await
                    .unwrap();
            }
            put(&sink, &record("s", now)).await.unwrap();
        });
        let shutdown = Shutdown::new();
        let sweeper = sink.start_sweeper(shutdown.clone()).unwrap();
        let deadline = Instant::now() + Duration::from_secs(10);
        while sink.status().expired_total < 5 {
            assert!(
                Instant::now() < deadline,
                "the sweeper did not run at start"
            );
            std::thread::sleep(Duration::from_millis(5));
        }
        shutdown.trigger();
        sweeper.join().unwrap();
        let st = sink.status();
        assert_eq!(st.expired_total, 5);
        assert_eq!(st.rows, 1);
        assert_eq!(st.level, Level::Ok, "expiry is not a loss at the quota");
        assert_eq!(sink.query(None, None, 10).unwrap()[0].ts_ms, now);
    }

    #[test]
    fn the_sweeper_ends_when_the_store_is_closed() {
        let dir = tempfile::tempdir().unwrap();
        let sink =
            StorageSink::open("storage", &cfg(OnFull::EvictOldest, 1 << 20), dir.path()).unwrap();
        sink.close();
        let sweeper = sink.start_sweeper(Shutdown::new()).unwrap();
        sweeper.join().unwrap();
    }
}
