//! The event history of a storage sink: `events.db` under the data dir (other storage sinks'
//! `events-<name>.db`).
//!
//! On disk (one LMDB environment, one file):
//! - `rows`: key = `ts` (big-endian `u64`, Unix ms) then `seq` (big-endian `u64`, a counter
//!   that makes keys unique), value = the source's length (big-endian `u32`), the source, then
//!   the record's line (`{id,source,key,ts,payload}`).
//! - `by_source`: key = source, `0x00`, then the 16 bytes of the `rows` key; empty value.
//! - `meta`: `next_seq`, `used_bytes`, `rows` and the counters, written in the same
//!   transaction as the rows they describe, so a crash can never separate the accounting from
//!   the rows.
//!
//! Why two tables: the API reads one source's records from a time on, and the quota and the
//! retention delete the globally oldest rows. `rows` in time order makes both deletions a walk
//! from the first key; `by_source` makes a per-source read a range walk from `source\0since`.
//! The index key ends with the primary key, so it needs no value, and a row's value starts with
//! its source, so deleting a row finds its index key without parsing the record. A source that
//! itself contains `0x00` cannot be confused with another: an index key of source `s` is exactly
//! `len(s) + 17` bytes long, and reads check it.
//!
//! Accounting is in logical bytes: 8 (ts) + 8 (seq) + source + line + [`ROW_OVERHEAD`] per row
//! ([`EventStore::row_bytes`]).
//!
//! Ack rule (as the push queue): one writer thread owns every write transaction. It takes every
//! command waiting on its bounded channel ([`WRITER_CHANNEL`]; full: [`StoreError::Busy`],
//! counted in `dropped_total`), applies them in one transaction, commits (the commit syncs),
//! and only then answers each caller. A failed transaction answers every caller with the error
//! and stores nothing of it; `MDB_MAP_FULL` grows the map and tries the same group again.
//!
//! At the quota: `evict_oldest` deletes the oldest rows (by `ts`) to make room
//! (`evicted_total`); `block` relies on the [`Gate`]'s reservations, taken by the caller before
//! the record reaches the writer. Rows older than the retention are deleted by
//! [`EventStore::expire`] (`expired_total`), in transactions of a bounded size so that appends
//! are not held up behind a large sweep.

use std::ops::Bound;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{Receiver, SyncSender, TrySendError};
use std::sync::{Arc, Mutex, RwLock};

use heed::byteorder::BigEndian;
use heed::types::{Bytes, Str, U64};
use heed::{CommitOrAbort, Database, Env, RwTxn, WithoutTls};
use tokio::sync::oneshot;

use super::writer::{commit_meta, next_group, read_meta, write_meta, Meta, WriterThread};
use super::{lmdb, StoreError};
use crate::admission::{Gate, OnFull, Reservation};
use crate::record::Record;
use crate::telemetry::events;

/// Fixed logical overhead counted for every row, on top of its key, source and line.
pub const ROW_OVERHEAD: u64 = 64;
/// Capacity of the writer's channel; when it is full a record is refused (`dropped_total`).
pub const WRITER_CHANNEL: usize = 8192;
/// Most records one [`EventStore::query`] returns, whatever the caller asks.
pub const MAX_QUERY_ROWS: usize = 10_000;
/// Most rows one retention transaction deletes; [`EventStore::expire`] loops until done.
const EXPIRE_BATCH: usize = if cfg!(test) { 7 } else { 10_000 };
/// Most commands applied in one transaction.
const MAX_GROUP: usize = 4096;
/// Most map size on 32-bit boards (armv7): the push queue maps up to 1 GiB beside it.
const MAX_MAP_32BIT: usize = 768 << 20;
/// Map growths tried for one group before it fails with [`StoreError::MapFull`].
const MAX_GROWTHS: usize = 3;

/// Counters of the event history.
#[derive(Default, Debug)]
pub struct EventCounters {
    /// Rows deleted at the quota under `evict_oldest`.
    pub evicted_total: AtomicU64,
    /// Rows deleted because they were older than the retention.
    pub expired_total: AtomicU64,
    /// Failed write transactions (every caller of one got the error).
    pub write_errors_total: AtomicU64,
    /// Records refused because the writer's channel was full.
    pub dropped_total: AtomicU64,
    /// Records stored.
    pub stored_total: AtomicU64,
}

/// Logical bytes of a row of `source_len` and `line_len` bytes.
fn logical_bytes(source_len: usize, line_len: usize) -> u64 {
    16 + source_len as u64 + line_len as u64 + ROW_OVERHEAD
}

fn primary_key(ts: u64, seq: u64) -> [u8; 16] {
    let mut key = [0u8; 16];
    key[..8].copy_from_slice(&ts.to_be_bytes());
    key[8..].copy_from_slice(&seq.to_be_bytes());
    key
}

fn index_key(source: &[u8], primary: &[u8]) -> Vec<u8> {
    let mut key = Vec::with_capacity(source.len() + 1 + primary.len());
    key.extend_from_slice(source);
    key.push(0);
    key.extend_from_slice(primary);
    key
}

fn encode_value(source: &[u8], line: &[u8]) -> Vec<u8> {
    let mut value = Vec::with_capacity(4 + source.len() + line.len());
    // Sources are short names; one longer than 4 GiB cannot reach here (body limits).
    value.extend_from_slice(&(source.len() as u32).to_be_bytes());
    value.extend_from_slice(source);
    value.extend_from_slice(line);
    value
}

/// The source and the line of a stored value; `None` when it is damaged.
fn decode_value(value: &[u8]) -> Option<(&[u8], &[u8])> {
    let len_bytes: [u8; 4] = value.get(..4)?.try_into().ok()?;
    let len = u32::from_be_bytes(len_bytes) as usize;
    let source = value.get(4..4usize.checked_add(len)?)?;
    Some((source, &value[4 + len..]))
}

/// Logical bytes of a stored row (a damaged value counts as all line).
fn stored_bytes(value: &[u8]) -> u64 {
    match decode_value(value) {
        Some((source, line)) => logical_bytes(source.len(), line.len()),
        None => logical_bytes(0, value.len()),
    }
}

type Reply<T> = oneshot::Sender<Result<T, StoreError>>;

enum Command {
    Append {
        source: String,
        ts: u64,
        line: Vec<u8>,
        /// Released after the commit, once the committed bytes are published.
        _reservation: Reservation,
        reply: Reply<()>,
    },
    Expire {
        /// Rows with `ts` below it go.
        cutoff_ms: u64,
        reply: Reply<u64>,
    },
}

/// What the writer knows; published to the gate and the counters after each commit.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
struct State {
    next_seq: u64,
    used: u64,
    rows: u64,
    evicted_total: u64,
    expired_total: u64,
    dropped_total: u64,
    write_errors_total: u64,
    blocked_total: u64,
    stored_total: u64,
}

const META_KEYS: [&str; 9] = [
    "next_seq",
    "used_bytes",
    "rows",
    "evicted_total",
    "expired_total",
    "dropped_total",
    "write_errors_total",
    "blocked_total",
    "stored_total",
];

impl State {
    fn fields(&mut self) -> [&mut u64; 9] {
        [
            &mut self.next_seq,
            &mut self.used,
            &mut self.rows,
            &mut self.evicted_total,
            &mut self.expired_total,
            &mut self.dropped_total,
            &mut self.write_errors_total,
            &mut self.blocked_total,
            &mut self.stored_total,
        ]
    }
}

struct Shared {
    env: Env<WithoutTls>,
    rows: Database<'static, Bytes, Bytes>,
    by_source: Database<'static, Bytes, Bytes>,
    meta: Meta,
    gate: Arc<Gate>,
    counters: Arc<EventCounters>,
    /// Readers hold it for reading while a transaction is open; a map resize holds it for
    /// writing, because LMDB may only resize while no transaction is open in the process.
    resize_lock: RwLock<()>,
    map_size: Mutex<usize>,
    max_map: usize,
}

/// The event history. Cheap to share behind an `Arc`.
pub struct EventStore {
    shared: Arc<Shared>,
    retention_ms: u64,
    writer: WriterThread<Command>,
}

impl EventStore {
    /// Opens (or creates) the event history file `path` with a quota of `quota_bytes` logical bytes,
    /// keeping rows `retention_ms` (0: no retention). Rows, counters and accounting are those
    /// of the last commit.
    pub fn open(
        path: &Path,
        on_full: OnFull,
        quota_bytes: u64,
        retention_ms: u64,
        counters: Arc<EventCounters>,
    ) -> Result<Self, StoreError> {
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir).map_err(|e| StoreError::Io(e.to_string()))?;
        }
        let max_map = if usize::BITS < 64 {
            MAX_MAP_32BIT
        } else {
            usize::MAX / 2
        };
        // Room for the rows, the index, the B-tree pages around them and the freelist.
        let wanted = quota_bytes
            .saturating_mul(2)
            .saturating_add(64 << 20)
            .min(max_map as u64) as usize;
        let map_size = lmdb::round_to_pages(wanted);
        let env = lmdb::open(path, map_size, 4)?;
        let (rows, by_source, meta) = env
            .create_databases_and_commit(env.write_txn()?, |opener, wtxn| {
                Ok::<_, heed::Error>(CommitOrAbort::<_, ()>::Commit((
                    opener.create_database::<Bytes, Bytes>(wtxn, Some("rows"))?,
                    opener.create_database::<Bytes, Bytes>(wtxn, Some("by_source"))?,
                    opener.create_database::<Str, U64<BigEndian>>(wtxn, Some("meta"))?,
                )))
            })?
            .unwrap_commit();
        let mut wtxn = env.write_txn()?;
        let mut state = State::default();
        read_meta(&meta, &wtxn, &META_KEYS, state.fields())?;
        // The meta keys are committed with the rows, so they agree unless the file was touched
        // outside LMDB; a cheap check of the counts catches that, and a recount repairs it.
        let actual_rows = rows.len(&wtxn)?;
        let index_rows = by_source.len(&wtxn)?;
        if actual_rows != state.rows || (actual_rows == 0 && state.used != 0) {
            let mut used = 0;
            let mut next_seq = state.next_seq;
            for item in rows.iter(&wtxn)? {
                let (key, value) = item?;
                used += stored_bytes(value);
                if let Some(seq) = key.get(8..16).and_then(|s| <[u8; 8]>::try_from(s).ok()) {
                    next_seq = next_seq.max(u64::from_be_bytes(seq) + 1);
                }
            }
            events::event_store_accounting_repaired(state.rows, actual_rows, state.used, used);
            state.rows = actual_rows;
            state.used = used;
            state.next_seq = next_seq;
        }
        if index_rows != actual_rows {
            by_source.clear(&mut wtxn)?;
            let mut keys = Vec::new();
            for item in rows.iter(&wtxn)? {
                let (key, value) = item?;
                if let Some((source, _)) = decode_value(value) {
                    keys.push(index_key(source, key));
                }
            }
            for key in &keys {
                by_source.put(&mut wtxn, key, &[])?;
            }
            events::event_store_index_rebuilt(index_rows, actual_rows);
        }
        write_meta(&meta, &mut wtxn, &META_KEYS, state.fields(), None)?;
        wtxn.commit()?;

        for (counter, value) in [
            (&counters.evicted_total, state.evicted_total),
            (&counters.expired_total, state.expired_total),
            (&counters.write_errors_total, state.write_errors_total),
            (&counters.dropped_total, state.dropped_total),
            (&counters.stored_total, state.stored_total),
        ] {
            counter.store(value, Ordering::Relaxed);
        }
        let gate = Arc::new(Gate::new(
            on_full,
            quota_bytes,
            state.used,
            state.rows,
            state.blocked_total,
        ));
        let shared = Arc::new(Shared {
            env,
            rows,
            by_source,
            meta,
            gate,
            counters,
            resize_lock: RwLock::new(()),
            map_size: Mutex::new(map_size),
            max_map,
        });
        let writer_shared = Arc::clone(&shared);
        let writer = WriterThread::spawn("events-writer", WRITER_CHANNEL, move |rx| {
            Writer::new(writer_shared, state).run(rx)
        })?;
        Ok(Self {
            shared,
            retention_ms,
            writer,
        })
    }

    /// The admission gate.
    pub fn gate(&self) -> &Arc<Gate> {
        &self.shared.gate
    }

    /// The counters.
    pub fn counters(&self) -> &Arc<EventCounters> {
        &self.shared.counters
    }

    /// How long rows are kept, in milliseconds (0: no retention).
    pub fn retention_ms(&self) -> u64 {
        self.retention_ms
    }

    /// The logical bytes `record` takes: 8 + 8 + source + line + [`ROW_OVERHEAD`]. Admit
    /// exactly this much before [`append`](Self::append).
    pub fn row_bytes(record: &Record) -> u64 {
        logical_bytes(record.source.len(), record.line_len())
    }

    fn sender(&self) -> Result<SyncSender<Command>, StoreError> {
        self.writer.sender()
    }

    /// Stores one record; resolves once the transaction holding it has committed.
    /// `reservation` must come from this store's [`gate`](Self::gate).
    ///
    /// When the writer's channel is full the record is refused at once ([`StoreError::Busy`],
    /// counted in `dropped_total`): nothing was stored, the caller tells its source to retry.
    pub async fn append(
        &self,
        record: &Record,
        reservation: Reservation,
    ) -> Result<(), StoreError> {
        let (reply, rx) = oneshot::channel();
        let command = Command::Append {
            source: record.source.clone(),
            ts: record.ts_ms,
            line: record.to_line(),
            _reservation: reservation,
            reply,
        };
        match self.sender()?.try_send(command) {
            Ok(()) => {}
            Err(TrySendError::Full(_)) => {
                events::event_writer_channel_full(&self.shared.counters);
                return Err(StoreError::Busy);
            }
            Err(TrySendError::Disconnected(_)) => return Err(StoreError::Closed),
        }
        rx.await.unwrap_or(Err(StoreError::Closed))
    }

    /// Up to `limit` records (at most [`MAX_QUERY_ROWS`]), `ts` ascending, of `source` (all
    /// sources when `None`), with `ts >= since_ms`.
    pub fn query(
        &self,
        source: Option<&str>,
        since_ms: Option<u64>,
        limit: usize,
    ) -> Result<Vec<Record>, StoreError> {
        let limit = limit.min(MAX_QUERY_ROWS);
        let start = primary_key(since_ms.unwrap_or(0), 0);
        let s = &self.shared;
        let _guard = s.resize_lock.read().unwrap_or_else(|e| e.into_inner());
        let rtxn = s.env.read_txn()?;
        let mut out = Vec::new();
        if limit == 0 {
            return Ok(out);
        }
        match source {
            None => {
                let range = (Bound::Included(&start[..]), Bound::Unbounded);
                for item in s.rows.range(&rtxn, &range)? {
                    let (key, value) = item?;
                    if let Some(record) = decode_record(key, value) {
                        out.push(record);
                        if out.len() == limit {
                            break;
                        }
                    }
                }
            }
            Some(source) => {
                let source = source.as_bytes();
                let low = index_key(source, &start);
                let high = index_key(source, &[0xff; 16]);
                let range = (Bound::Included(&low[..]), Bound::Included(&high[..]));
                for item in s.by_source.range(&rtxn, &range)? {
                    let (key, _) = item?;
                    if key.len() != source.len() + 17 {
                        continue;
                    }
                    let primary = &key[source.len() + 1..];
                    let Some(value) = s.rows.get(&rtxn, primary)? else {
                        continue;
                    };
                    if let Some(record) = decode_record(primary, value) {
                        out.push(record);
                        if out.len() == limit {
                            break;
                        }
                    }
                }
            }
        }
        Ok(out)
    }

    /// Deletes every row older than the retention (`ts < now_ms - retention`); returns how many
    /// (counted in `expired_total`). Blocking: call it from a plain thread.
    pub fn expire(&self, now_ms: u64) -> Result<u64, StoreError> {
        self.expire_while(now_ms, || true)
    }

    /// [`expire`](Self::expire), stopping early (between transactions) once `go_on` says no.
    pub(crate) fn expire_while(
        &self,
        now_ms: u64,
        go_on: impl Fn() -> bool,
    ) -> Result<u64, StoreError> {
        if self.retention_ms == 0 {
            return Ok(0);
        }
        let cutoff_ms = now_ms.saturating_sub(self.retention_ms);
        let mut total = 0;
        while go_on() {
            let (reply, rx) = oneshot::channel();
            self.sender()?
                .send(Command::Expire { cutoff_ms, reply })
                .map_err(|_| StoreError::Closed)?;
            let deleted = rx.blocking_recv().unwrap_or(Err(StoreError::Closed))?;
            total += deleted;
            if deleted < EXPIRE_BATCH as u64 {
                break;
            }
        }
        Ok(total)
    }

    /// True while the writer takes records: until [`close`](Self::close), or its thread ended.
    pub fn accepting(&self) -> bool {
        self.writer.running()
    }

    /// Stops the writer after it has committed everything already on its channel, and closes
    /// the environment once every other holder of it is gone. Idempotent.
    pub fn close(&self) {
        self.writer.close();
    }

    /// Closes the store and waits until LMDB has closed the file, so it can be opened again in
    /// this process (restart tests).
    pub fn close_and_wait(self) {
        self.close();
        let event = self.shared.env.clone().prepare_for_closing();
        drop(self);
        event.wait();
    }
}

impl Drop for EventStore {
    fn drop(&mut self) {
        self.close();
    }
}

fn decode_record(key: &[u8], value: &[u8]) -> Option<Record> {
    let record = decode_value(value).and_then(|(_, line)| Record::from_line(line).ok());
    if record.is_none() {
        log::warn!("event history row unreadable, skipped: key={key:02x?}");
    }
    record
}

/// Rows deleted by one transaction, logged and counted after its commit.
#[derive(Default)]
struct Deleted {
    evicted_rows: u64,
    evicted_bytes: u64,
    expired_rows: u64,
    cutoff_ms: u64,
}

/// What deleting a row needs of it, copied out of the transaction: not its record.
struct OldRow {
    key: Vec<u8>,
    /// `None` when the value is damaged (its index key cannot be found).
    source: Option<Vec<u8>>,
    bytes: u64,
}

impl OldRow {
    fn new((key, value): (&[u8], &[u8])) -> Self {
        Self {
            key: key.to_vec(),
            source: decode_value(value).map(|(source, _)| source.to_vec()),
            bytes: stored_bytes(value),
        }
    }
}

struct Writer {
    shared: Arc<Shared>,
    state: State,
    /// `state` as the last commit wrote it: a commit writes only the meta keys that moved.
    saved: State,
}

impl Writer {
    fn new(shared: Arc<Shared>, state: State) -> Self {
        Self {
            shared,
            state,
            saved: state,
        }
    }

    fn run(mut self, rx: Receiver<Command>) {
        while let Some(group) = next_group(&rx, MAX_GROUP) {
            self.commit_group(group);
        }
        self.flush_counters();
    }

    /// Refusals and channel drops are counted outside the writer and reach the disk with the
    /// next commit; at a clean stop, commit them (and a failed last commit's write error) on
    /// their own so a restart keeps them.
    fn flush_counters(&mut self) {
        self.state.blocked_total = self.shared.gate.blocked_total();
        self.state.dropped_total = self.shared.counters.dropped_total.load(Ordering::Relaxed);
        let (env, meta) = (&self.shared.env, &self.shared.meta);
        let saved = &mut self.saved;
        if let Err(e) = commit_meta(env, meta, &META_KEYS, self.state, saved, State::fields) {
            log::error!("event history counters not saved at stop: error=\"{e}\"");
        }
    }

    fn commit_group(&mut self, group: Vec<Command>) {
        let before = self.state;
        let mut growths = 0;
        let (result, deleted) = loop {
            let mut deleted = Deleted::default();
            let result = {
                let shared = Arc::clone(&self.shared);
                let _guard = shared.resize_lock.read().unwrap_or_else(|e| e.into_inner());
                self.apply(&group, &mut deleted)
            };
            if result.is_err() {
                self.state = before;
            }
            match result {
                Err(StoreError::MapFull) if growths < MAX_GROWTHS && self.grow_map() => {
                    growths += 1;
                }
                other => break (other, deleted),
            }
        };
        match result {
            Ok(outcomes) => {
                self.saved = self.state;
                let s = &self.shared;
                s.gate.publish(self.state.used, self.state.rows);
                s.counters
                    .stored_total
                    .store(self.state.stored_total, Ordering::Relaxed);
                if deleted.evicted_rows > 0 {
                    events::event_store_evicted(
                        &s.counters,
                        deleted.evicted_rows,
                        deleted.evicted_bytes,
                    );
                }
                if deleted.expired_rows > 0 {
                    events::event_store_expired(
                        &s.counters,
                        deleted.expired_rows,
                        deleted.cutoff_ms,
                    );
                }
                // Answer only now: the transaction is on disk, and the committed bytes are
                // published, so the reservations can go.
                for (command, n) in group.into_iter().zip(outcomes) {
                    match command {
                        Command::Append {
                            reply,
                            _reservation,
                            ..
                        } => {
                            drop(_reservation);
                            let _ = reply.send(Ok(()));
                        }
                        Command::Expire { reply, .. } => {
                            let _ = reply.send(Ok(n));
                        }
                    }
                }
            }
            Err(error) => {
                self.state.write_errors_total += 1;
                events::event_store_write_failed(&self.shared.counters, &error);
                for command in group {
                    match command {
                        Command::Append {
                            reply,
                            _reservation,
                            ..
                        } => {
                            drop(_reservation);
                            let _ = reply.send(Err(error.clone()));
                        }
                        Command::Expire { reply, .. } => {
                            let _ = reply.send(Err(error.clone()));
                        }
                    }
                }
            }
        }
    }

    /// Applies a group in one transaction and commits it; one outcome per command (rows
    /// expired, 0 for an append). On error `self.state` is left for the caller to restore.
    fn apply(&mut self, group: &[Command], deleted: &mut Deleted) -> Result<Vec<u64>, StoreError> {
        let shared = Arc::clone(&self.shared);
        let mut txn = shared.env.write_txn()?;
        let mut outcomes = Vec::with_capacity(group.len());
        for command in group {
            match self.apply_one(&mut txn, command, deleted) {
                Ok(n) => outcomes.push(n),
                Err(e) => {
                    txn.abort();
                    return Err(e.into());
                }
            }
        }
        self.state.blocked_total = shared.gate.blocked_total();
        self.state.dropped_total = shared.counters.dropped_total.load(Ordering::Relaxed);
        let (mut state, mut saved) = (self.state, self.saved);
        if let Err(e) = write_meta(
            &shared.meta,
            &mut txn,
            &META_KEYS,
            state.fields(),
            Some(saved.fields()),
        ) {
            txn.abort();
            return Err(e.into());
        }
        txn.commit()?;
        Ok(outcomes)
    }

    fn apply_one(
        &mut self,
        txn: &mut RwTxn<'_>,
        command: &Command,
        deleted: &mut Deleted,
    ) -> heed::Result<u64> {
        let s = Arc::clone(&self.shared);
        match command {
            Command::Append {
                source, ts, line, ..
            } => {
                let size = logical_bytes(source.len(), line.len());
                if s.gate.on_full() == OnFull::EvictOldest {
                    while self.state.used + size > s.gate.quota() && self.state.rows > 0 {
                        let Some(row) = s.rows.first(txn)?.map(OldRow::new) else {
                            break;
                        };
                        let bytes = self.delete_row(txn, &row)?;
                        self.state.evicted_total += 1;
                        deleted.evicted_rows += 1;
                        deleted.evicted_bytes += bytes;
                    }
                }
                let primary = primary_key(*ts, self.state.next_seq);
                let source = source.as_bytes();
                s.rows.put(txn, &primary, &encode_value(source, line))?;
                s.by_source.put(txn, &index_key(source, &primary), &[])?;
                self.state.next_seq += 1;
                self.state.used += size;
                self.state.rows += 1;
                self.state.stored_total += 1;
                Ok(0)
            }
            Command::Expire { cutoff_ms, .. } => {
                let cutoff = primary_key(*cutoff_ms, 0);
                let range = (Bound::Unbounded, Bound::Excluded(&cutoff[..]));
                let mut old = Vec::new();
                for item in s.rows.range(txn, &range)?.take(EXPIRE_BATCH) {
                    old.push(OldRow::new(item?));
                }
                for row in &old {
                    self.delete_row(txn, row)?;
                }
                let n = old.len() as u64;
                self.state.expired_total += n;
                deleted.expired_rows += n;
                deleted.cutoff_ms = *cutoff_ms;
                Ok(n)
            }
        }
    }

    /// Deletes one row and its index key; returns its logical bytes.
    fn delete_row(&mut self, txn: &mut RwTxn<'_>, row: &OldRow) -> heed::Result<u64> {
        let s = &self.shared;
        s.rows.delete(txn, &row.key)?;
        if let Some(source) = &row.source {
            s.by_source.delete(txn, &index_key(source, &row.key))?;
        }
        self.state.used = self.state.used.saturating_sub(row.bytes);
        self.state.rows = self.state.rows.saturating_sub(1);
        Ok(row.bytes)
    }

    /// After `MDB_MAP_FULL`: grows the map by half, up to the limit of the board; false when
    /// it could not.
    fn grow_map(&self) -> bool {
        let s = &self.shared;
        let _guard = s.resize_lock.write().unwrap_or_else(|e| e.into_inner());
        let mut size = s.map_size.lock().unwrap_or_else(|e| e.into_inner());
        let new_size = size.saturating_add(*size / 2).min(s.max_map);
        if new_size <= *size {
            log::error!("event history map is at its limit of {} bytes", *size);
            return false;
        }
        match lmdb::resize(&s.env, new_size) {
            Ok(()) => {
                log::warn!("event history map grown from {} to {new_size} bytes", *size);
                *size = new_size;
                true
            }
            Err(e) => {
                log::error!("event history map could not grow: {e}");
                false
            }
        }
    }
}

#[cfg(test)]
mod tests;
