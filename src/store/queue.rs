//! The durable queue: the one implementation of a bounded FIFO on disk that waits in front of
//! a destination. The push sink's is `push_queue.db` under the data dir (other push sinks'
//! `push-<name>.db`); a sink with `queue: disk` has `queue-<name>.db`. Each is drained by its
//! sink's deliverer, which deletes rows only after the destination confirmed them.
//!
//! On disk (one LMDB environment, one file):
//! - `rows`: key = big-endian `u64` sequence number, value = the record's uplink line (one JSON
//!   object, no newline). Big-endian keys make a cursor walk FIFO order and let appends use
//!   `MDB_APPEND`.
//! - `dead`: the queue's dead-letter table (rows its destination refused for good), key =
//!   big-endian `u64` id, value = JSON
//!   `{"seq":..,"reason":..,"at":..,"source":..,"tracked":..,"record":{..}}` (`record` is the
//!   row's uplink line as it was, byte for byte); at most [`DEAD_LETTER_CAP`] rows, the oldest
//!   trimmed (logged). Entries written before `source` and `tracked` were kept have neither and
//!   are replayed untracked (see [Dead letters](#dead-letters)).
//! - `meta`: `next_seq`, `used_bytes`, `rows` and the counters, written in the same transaction
//!   as the rows they describe, so a crash can never separate the accounting from the rows.
//! - `ledger`: the queue's part of the loss ledger, key `<field>:<source>` (`acked`,
//!   `pending`, `delivered`, `evicted`, `dead_lettered`, `discarded`), also written in the transaction that
//!   changes the rows it counts.
//!
//! A row's value starts with a small header naming the record's source ([`encode_row`]), so an
//! eviction or a delivery knows whose row it is without parsing its JSON; the quota counts
//! logical bytes ([`row_bytes`]).
//!
//! The parts: `row.rs`, the row's bytes; `dead.rs`, dead-letter entries and what a replay
//! answers; `commit.rs`, the writer thread that applies and commits every change; `tests.rs`,
//! the queue against a model.
//!
//! # Dead letters
//!
//! An operator can put a dead letter back ([`DurableQueue::replay_dead_letter`], and
//! [`DurableQueue::replay_dead_letters`] for many), or delete it
//! ([`DurableQueue::delete_dead_letter`]); each is a writer command, applied in the group's
//! transaction with the rows and the ledger counts it changes.
//!
//! - A replay puts the row back under its **original seq**. The deliverer dead-letters the
//!   head of the queue, so that seq is below every row queued after it: the row is delivered
//!   before them. A batch in flight may start with a row replayed earlier and end with rows
//!   queued after a later replay, so the later row's seq lies between the batch's: a
//!   delivered batch therefore deletes exactly the seqs it carried
//!   ([`DurableQueue::remove_delivered`]), never the range between its first and last. A seq that is taken (or not below `next_seq`, which a later append would
//!   collide with) is refused, never overwritten. The row takes room as an append does (used
//!   bytes, rows, the gate published after the commit), but never more than there is: a
//!   replay into a full queue is refused under both policies (under `block` its bytes are
//!   reserved at the gate first, like an admission, so it can never go over the quota; under
//!   `evict_oldest` it does not evict queued rows to make room, because an operator's replay
//!   should not cost anyone else's data). A tracked row moves `dead_lettered -1, pending +1`
//!   of its source.
//! - A deleted dead letter stays counted as dead-lettered in the ledger (the operator gave up
//!   on it; nothing is lost silently); only the table's row count goes down.
//! - Entries from before `source` and `tracked` were stored come back untracked: their
//!   `dead_lettered` count stays where it is, and the row is not counted pending, so when it
//!   is delivered no count moves. Every identity still holds (nothing moved); the record is
//!   counted dead-lettered though it was delivered, an overstatement and never a silent loss.
//!   For the same reason a tracked entry whose source has no `dead_lettered` count left is
//!   replayed untracked.
//!
//! Ack rule: one writer thread owns every write transaction. It takes every command waiting
//! on its channel (group commit), applies them in one transaction, commits (the commit syncs),
//! and only then answers each caller. A failed transaction answers every caller with the
//! error and stores nothing of it.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::SyncSender;
use std::sync::{Arc, Condvar, Mutex, RwLock};
use std::time::Duration;

use heed::byteorder::BigEndian;
use heed::types::{Bytes, Str, U64};
use heed::{CommitOrAbort, Database, Env, WithoutTls};
use tokio::sync::oneshot;

use super::writer::{read_meta, write_meta, Meta, WriterThread};
use super::{lmdb, StoreError};
use crate::admission::{Gate, OnFull, Reservation};
use crate::ledger::{Book, Counts};
use crate::telemetry::events;

mod commit;
mod dead;
mod row;
mod together;

use commit::{read_ledger, Command, Reply, Sent, State, Writer, META_KEYS};
pub use dead::{dead_letter_json, revive, DeadLetter, ReplayError, ReplaySummary, Revived};
use dead::{Planned, REPLAY_CHUNK};
use row::tracked_source;
pub use row::{decode_row, encode_row, record_row, row_bytes, Tag, ENTRY_OVERHEAD};
pub use together::in_one_commit;

/// Capacity of the writer's channel; when it is full a record is refused (`dropped_total`).
pub const WRITER_CHANNEL: usize = 8192;
/// Rows kept in the push dead-letter table; the oldest are trimmed beyond it.
pub const DEAD_LETTER_CAP: u64 = 50_000;
/// Most map size on 32-bit boards (armv7): the address space is small.
const MAX_MAP_32BIT: usize = 1 << 30;

type Seq = U64<BigEndian>;

/// Counters of a push buffer (durable or volatile) that are not admission refusals.
#[derive(Debug, Default)]
pub struct QueueCounters {
    /// Rows deleted at the quota under `evict_oldest` (`opex_connector_push_queue_gaps_total`).
    pub evicted_total: AtomicU64,
    /// Records refused because the writer's channel was full.
    pub dropped_total: AtomicU64,
    /// Failed write transactions (every caller of one got the error).
    pub write_errors_total: AtomicU64,
    /// Rows the uplink delivered.
    pub sent_total: AtomicU64,
    /// Rows moved to the push dead-letter table.
    pub dead_lettered_total: AtomicU64,
    /// Dead letters trimmed at [`DEAD_LETTER_CAP`].
    pub dead_trimmed_total: AtomicU64,
    /// Rows in the push dead-letter table now.
    pub dead_rows: AtomicU64,
    /// Dead letters an operator put back into the queue.
    pub dead_replayed_total: AtomicU64,
    /// Dead letters an operator deleted (still counted dead-lettered in the ledger).
    pub dead_deleted_total: AtomicU64,
    /// Write transactions committed (each one sync to disk).
    pub commits_total: AtomicU64,
    /// Commands applied by those transactions; over `commits_total`, the mean group size.
    pub committed_commands_total: AtomicU64,
    /// Time those commits spent syncing to disk, in nanoseconds; over `commits_total`, the
    /// disk's mean sync (a worn SD card shows here first).
    pub sync_nanos_total: AtomicU64,
    /// Time the writer held groups open for callers still arriving, in nanoseconds.
    pub held_nanos_total: AtomicU64,
    /// Commands waiting in the writer's channel now (of [`WRITER_CHANNEL`]).
    pub writer_queued: AtomicU64,
    /// Rows a clean stop left in the volatile push buffer: lost with the process's memory
    /// (always 0 for a durable queue, whose rows wait on disk).
    pub lost_at_stop_total: AtomicU64,
}

impl QueueCounters {
    /// Adds the totals of `former` (a former instance's, handed over by a reload) to these;
    /// the gauges (`dead_rows`, `writer_queued`) stay these.
    pub fn add_totals(&self, former: &QueueCounters) {
        fn totals(c: &QueueCounters) -> [&AtomicU64; 13] {
            [
                &c.evicted_total,
                &c.dropped_total,
                &c.write_errors_total,
                &c.sent_total,
                &c.dead_lettered_total,
                &c.dead_trimmed_total,
                &c.dead_replayed_total,
                &c.dead_deleted_total,
                &c.commits_total,
                &c.committed_commands_total,
                &c.sync_nanos_total,
                &c.held_nanos_total,
                &c.lost_at_stop_total,
            ]
        }
        for (mine, theirs) in totals(self).into_iter().zip(totals(former)) {
            mine.fetch_add(theirs.load(Ordering::Relaxed), Ordering::Relaxed);
        }
    }
}

/// The stored `pending` counts and the tracked rows of each source, read in one transaction.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PendingCheck {
    /// `pending` as stored in the ledger (sources with 0 left out).
    pub kept: BTreeMap<String, u64>,
    /// Tracked rows counted one by one.
    pub rows: BTreeMap<String, u64>,
}

/// A row read from the head of the queue.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Row {
    /// Its sequence number.
    pub seq: u64,
    /// The uplink line.
    pub line: Vec<u8>,
}

struct Shared {
    /// The sink this queue belongs to, for logs.
    sink: String,
    env: Env<WithoutTls>,
    rows: Database<'static, Seq, Bytes>,
    dead: Database<'static, Seq, Bytes>,
    meta: Meta,
    /// The ledger counts by `<field>:<source>`.
    ledger: Meta,
    /// The committed ledger counts, for readers.
    book: Book,
    gate: Arc<Gate>,
    counters: Arc<QueueCounters>,
    /// Readers hold it for reading while a transaction is open; a map resize holds it for
    /// writing, because LMDB may only resize while no transaction is open in the process.
    resize_lock: RwLock<()>,
    map_size: Mutex<usize>,
    max_map: usize,
    /// Rows kept in the dead-letter table: [`DEAD_LETTER_CAP`], smaller in tests.
    dead_cap: AtomicU64,
    /// Bumped after every commit that added rows (appends, replays); the deliverer waits on it.
    appended: (Mutex<u64>, Condvar),
    /// Rows ever appended, as of the last commit.
    appended_total: AtomicU64,
    /// A fault injected by tests: every commit waits this long before it syncs.
    #[cfg(test)]
    commit_delay: Mutex<Duration>,
}

impl Shared {
    /// Waits the injected commit delay (tests only: a slow disk on demand).
    #[cfg(test)]
    fn slow_commit_for_tests(&self) {
        let delay = *self.commit_delay.lock().unwrap_or_else(|e| e.into_inner());
        if !delay.is_zero() {
            std::thread::sleep(delay);
        }
    }
}

/// A durable queue. Cheap to share behind an `Arc`.
pub struct DurableQueue {
    shared: Arc<Shared>,
    writer: WriterThread<Sent>,
}

impl DurableQueue {
    /// Opens (or creates) the queue file `path` of sink `sink` with a quota of `quota` logical
    /// bytes.
    ///
    /// Rows, order, counters and accounting are those of the last commit. Changing `on_full`
    /// takes effect here, at start.
    pub fn open(
        path: &Path,
        sink: &str,
        on_full: OnFull,
        quota: u64,
        counters: Arc<QueueCounters>,
    ) -> Result<Self, StoreError> {
        // Room for the rows, the B-tree pages around them, the freelist and the dead letters.
        let wanted = quota.saturating_mul(2).saturating_add(64 << 20);
        Self::open_with_map(path, sink, on_full, quota, counters, wanted)
    }

    fn open_with_map(
        path: &Path,
        sink: &str,
        on_full: OnFull,
        quota: u64,
        counters: Arc<QueueCounters>,
        wanted_map: u64,
    ) -> Result<Self, StoreError> {
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir).map_err(|e| StoreError::Io(e.to_string()))?;
        }
        let max_map = if usize::BITS < 64 {
            MAX_MAP_32BIT
        } else {
            usize::MAX / 2
        };
        let map_size = lmdb::round_to_pages(wanted_map.min(max_map as u64) as usize);
        let env = lmdb::open(path, map_size, 4)?;
        let (rows, dead, meta, ledger) = env
            .create_databases_and_commit(env.write_txn()?, |opener, wtxn| {
                Ok::<_, heed::Error>(CommitOrAbort::<_, ()>::Commit((
                    opener.create_database::<Seq, Bytes>(wtxn, Some("rows"))?,
                    opener.create_database::<Seq, Bytes>(wtxn, Some("dead"))?,
                    opener.create_database::<Str, Seq>(wtxn, Some("meta"))?,
                    opener.create_database::<Str, Seq>(wtxn, Some("ledger"))?,
                )))
            })?
            .unwrap_commit();
        let mut wtxn = env.write_txn()?;
        let mut state = State::default();
        read_meta(&meta, &wtxn, &META_KEYS, state.fields())?;
        // The meta keys are committed with the rows, so they agree unless the file was
        // tampered with; a cheap check of the row count catches that, and a full recount
        // repairs it.
        let actual_rows = rows.len(&wtxn)?;
        if actual_rows != state.rows || (actual_rows == 0 && state.used != 0) {
            let mut used = 0;
            let mut last = None;
            for item in rows.iter(&wtxn)? {
                let (seq, value) = item?;
                used += row_bytes(decode_row(value).1.len());
                last = Some(seq);
            }
            events::queue_accounting_repaired(sink, state.rows, actual_rows, state.used, used);
            state.rows = actual_rows;
            state.used = used;
            state.next_seq = state.next_seq.max(last.map_or(0, |s| s + 1));
        }
        state.dead_rows = dead.len(&wtxn)?;
        if state.appended_total == 0 {
            // A queue written before `appended_total` existed: every row it ever took is in
            // one of these.
            state.appended_total = state.rows
                + state.sent_total
                + state.evicted_total
                + state.dead_lettered_total
                + state.discarded_total;
        }
        write_meta(&meta, &mut wtxn, &META_KEYS, state.fields(), None)?;
        let sources = read_ledger(&ledger, &wtxn)?;
        wtxn.commit()?;
        let book = Book::default();
        book.store(sources.clone());

        for (counter, value) in [
            (&counters.evicted_total, state.evicted_total),
            (&counters.dropped_total, state.dropped_total),
            (&counters.write_errors_total, state.write_errors_total),
            (&counters.sent_total, state.sent_total),
            (&counters.dead_lettered_total, state.dead_lettered_total),
            (&counters.dead_trimmed_total, state.dead_trimmed_total),
            (&counters.dead_rows, state.dead_rows),
            (&counters.dead_replayed_total, state.dead_replayed_total),
            (&counters.dead_deleted_total, state.dead_deleted_total),
        ] {
            counter.store(value, Ordering::Relaxed);
        }
        let gate = Arc::new(Gate::new(
            on_full,
            quota,
            state.used,
            state.rows,
            state.blocked_total,
        ));
        let shared = Arc::new(Shared {
            sink: sink.to_string(),
            env,
            rows,
            dead,
            meta,
            ledger,
            book,
            gate,
            counters,
            resize_lock: RwLock::new(()),
            map_size: Mutex::new(map_size),
            max_map,
            dead_cap: AtomicU64::new(DEAD_LETTER_CAP),
            appended: (Mutex::new(0), Condvar::new()),
            appended_total: AtomicU64::new(state.appended_total),
            #[cfg(test)]
            commit_delay: Mutex::new(Duration::ZERO),
        });
        let writer_shared = Arc::clone(&shared);
        let writer = WriterThread::spawn(&format!("queue-{sink}"), WRITER_CHANNEL, move |rx| {
            Writer::new(writer_shared, state, sources).run(rx)
        })?;
        Ok(Self { shared, writer })
    }

    /// The admission gate of this queue.
    pub fn gate(&self) -> &Arc<Gate> {
        &self.shared.gate
    }

    /// Rows the dead-letter table keeps before it trims the oldest.
    pub fn dead_letter_cap(&self) -> u64 {
        self.shared.dead_cap.load(Ordering::Relaxed)
    }

    /// The counters of this queue.
    pub fn counters(&self) -> &Arc<QueueCounters> {
        &self.shared.counters
    }

    fn sender(&self) -> Result<SyncSender<Sent>, StoreError> {
        self.writer.sender()
    }

    /// True while the writer takes records: until [`close`](Self::close), or its thread ended.
    pub fn accepting(&self) -> bool {
        self.writer.running()
    }

    /// Appends one row (its value, from [`record_row`] or [`encode_row`]); resolves to its
    /// sequence number once the transaction holding it has committed. `reservation` must come
    /// from this queue's [`gate`](Self::gate). The row's header names the record's source for
    /// the ledger (a tracked row is counted acked and pending in the same transaction that
    /// stores it).
    ///
    /// When the writer's channel is full the record is refused at once ([`StoreError::Busy`],
    /// counted in `dropped_total`): nothing was stored, the caller tells its source to retry.
    ///
    /// Inside [`in_one_commit`] the row is held and sent with the other rows of its batch.
    pub async fn append(
        &self,
        value: Vec<u8>,
        reservation: Reservation,
    ) -> Result<u64, StoreError> {
        let (reply, rx) = oneshot::channel();
        let command = Command::Append {
            value,
            _reservation: reservation,
            reply,
        };
        // A batch running on this task sends its rows together (`together.rs`).
        if let Some((sender, command)) = together::hold(&self.shared, self.sender()?, command) {
            together::send(&self.shared, &sender, Sent::One(command));
        }
        rx.await.unwrap_or(Err(StoreError::Closed))
    }

    fn call<T>(&self, make: impl FnOnce(Reply<T>) -> Command) -> Result<T, StoreError> {
        let (reply, rx) = oneshot::channel();
        // Counted before the send: the writer may take it (and count it off) at once.
        let queued = &self.shared.counters.writer_queued;
        queued.fetch_add(1, Ordering::Relaxed);
        if self
            .sender()
            .and_then(|s| {
                s.send(Sent::One(make(reply)))
                    .map_err(|_| StoreError::Closed)
            })
            .is_err()
        {
            queued.fetch_sub(1, Ordering::Relaxed);
            return Err(StoreError::Closed);
        }
        rx.blocking_recv().unwrap_or(Err(StoreError::Closed))
    }

    /// Deletes rows `seqs`, the very rows of a batch the destination confirmed, counted
    /// delivered. Blocking: call it from a plain thread. Returns the rows deleted (a seq no
    /// longer queued is skipped). Any other row stays, whatever its seq: a dead letter replayed
    /// while the batch was on its way may lie between the batch's seqs, and it was not sent.
    pub fn remove_delivered(&self, seqs: &[u64]) -> Result<u64, StoreError> {
        let seqs = seqs.to_vec();
        self.call(|reply| Command::RemoveDelivered { seqs, reply })
    }

    /// Moves row `seq` to the dead-letter table with `reason`. Blocking. False when the row was
    /// no longer there (evicted meanwhile).
    pub fn dead_letter(&self, seq: u64, reason: &str) -> Result<bool, StoreError> {
        let at_ms = crate::record::now_ms();
        self.call(|reply| Command::DeadLetter {
            seq,
            reason: reason.to_string(),
            at_ms,
            reply,
        })
    }

    /// Deletes every queued row, counted `discarded` in the ledger (the sink was removed with
    /// `discard`: the operator gave them up); the rows deleted. The dead letters stay.
    /// Blocking.
    pub fn discard(&self) -> Result<u64, StoreError> {
        let rows = self.call(|reply| Command::Discard { reply })?;
        if rows > 0 {
            events::queue_discarded(&self.shared.sink, rows);
        }
        Ok(rows)
    }

    /// Reads up to `max` rows from the head of the queue, oldest first.
    pub fn peek(&self, max: usize) -> Result<Vec<Row>, StoreError> {
        self.peek_from(0, max)
    }

    /// Reads up to `max` rows from seq `from` on, oldest first.
    pub fn peek_from(&self, from: u64, max: usize) -> Result<Vec<Row>, StoreError> {
        self.read(|rtxn| {
            let mut out = Vec::new();
            for item in self.shared.rows.range(rtxn, &(from..))?.take(max) {
                let (seq, value) = item?;
                out.push(Row {
                    seq,
                    line: decode_row(value).1.to_vec(),
                });
            }
            Ok(out)
        })
    }

    /// Runs `f` in a read transaction, with the map held at its size meanwhile.
    fn read<T>(
        &self,
        f: impl FnOnce(&heed::RoTxn<'_, WithoutTls>) -> heed::Result<T>,
    ) -> Result<T, StoreError> {
        let _guard = self
            .shared
            .resize_lock
            .read()
            .unwrap_or_else(|e| e.into_inner());
        let rtxn = self.shared.env.read_txn()?;
        Ok(f(&rtxn)?)
    }

    /// Reads up to `max` dead letters, oldest first, starting after `after`.
    pub fn dead_letters(
        &self,
        after: Option<u64>,
        max: usize,
    ) -> Result<Vec<DeadLetter>, StoreError> {
        let start = after.map_or(0, |a| a.saturating_add(1));
        self.read(|rtxn| {
            let mut out = Vec::new();
            for item in self.shared.dead.range(rtxn, &(start..))?.take(max) {
                let (id, json) = item?;
                out.push(DeadLetter {
                    id,
                    json: json.to_vec(),
                });
            }
            Ok(out)
        })
    }

    /// Dead letter `id`, when the table has it.
    pub fn get_dead_letter(&self, id: u64) -> Result<Option<DeadLetter>, StoreError> {
        self.read(|rtxn| {
            Ok(self.shared.dead.get(rtxn, &id)?.map(|json| DeadLetter {
                id,
                json: json.to_vec(),
            }))
        })
    }

    /// Puts dead letter `id` back into the queue under its original seq (see the module doc);
    /// returns that seq once the transaction committed. Blocking.
    pub fn replay_dead_letter(&self, id: u64) -> Result<u64, ReplayError> {
        let plan = self.replay_plan(Some(id), 1)?;
        if plan.is_empty() {
            return Err(ReplayError::NotFound);
        }
        let summary = self.replay_planned(plan)?;
        if let Some(&(_, seq)) = summary.replayed.first() {
            return Ok(seq);
        }
        match (summary.failed.into_iter().next(), summary.stopped) {
            (Some((_, e)), _) | (None, Some(e)) => Err(e),
            (None, None) => Err(ReplayError::NotFound),
        }
    }

    /// Puts back up to `max` dead letters (the oldest in the table), in seq order, so that they
    /// keep their order at the head of the queue; stops at the first that does not fit.
    /// Blocking.
    pub fn replay_dead_letters(&self, max: usize) -> Result<ReplaySummary, StoreError> {
        let plan = self.replay_plan(None, max)?;
        self.replay_planned(plan)
    }

    /// Deletes dead letter `id` (the operator gave up on it); false when there was none. The
    /// ledger keeps it counted as dead-lettered. Blocking.
    pub fn delete_dead_letter(&self, id: u64) -> Result<bool, StoreError> {
        let deleted = self.call(|reply| Command::DeleteDead { id, reply })?;
        if deleted {
            events::queue_dead_letter_deleted(&self.shared.sink, id);
        }
        Ok(deleted)
    }

    /// The dead letters to replay (`only` that one, or up to `max` from the oldest), with
    /// their seqs and bytes, in seq order. An entry that cannot be read back is kept in the
    /// plan (with 0 bytes) so that the writer reports it.
    fn replay_plan(&self, only: Option<u64>, max: usize) -> Result<Vec<Planned>, StoreError> {
        let mut plan = self.read(|rtxn| {
            let mut plan = Vec::new();
            let mut add = |id: u64, json: &[u8]| {
                let (seq, bytes) = match revive(json) {
                    Ok(r) => (r.seq, row_bytes(r.line.len())),
                    Err(_) => (u64::MAX, 0),
                };
                plan.push(Planned { id, seq, bytes });
            };
            match only {
                Some(id) => {
                    if let Some(json) = self.shared.dead.get(rtxn, &id)? {
                        add(id, json);
                    }
                }
                None => {
                    for item in self.shared.dead.iter(rtxn)?.take(max) {
                        let (id, json) = item?;
                        add(id, json);
                    }
                }
            }
            Ok(plan)
        })?;
        plan.sort_by_key(|p| (p.seq, p.id));
        Ok(plan)
    }

    /// Replays `plan` in chunks of [`REPLAY_CHUNK`]: under `block` each chunk's bytes are
    /// reserved at the gate first (as far as they fit), then the writer puts them back.
    fn replay_planned(&self, plan: Vec<Planned>) -> Result<ReplaySummary, StoreError> {
        let gate = self.gate();
        let mut summary = ReplaySummary::default();
        'chunks: for chunk in plan.chunks(REPLAY_CHUNK) {
            let mut reservation: Option<Reservation> = None;
            let mut ids = Vec::with_capacity(chunk.len());
            for p in chunk {
                match gate.reserve(p.bytes) {
                    Some(r) => {
                        match reservation.as_mut() {
                            Some(all) => all.absorb(r),
                            None => reservation = Some(r),
                        }
                        ids.push(p.id);
                    }
                    None => {
                        let (used, _, reserved) = gate.usage();
                        summary.stopped = Some(ReplayError::Full {
                            bytes: p.bytes,
                            used: used + reserved,
                            quota: gate.quota(),
                        });
                        break;
                    }
                }
            }
            if !ids.is_empty() {
                let asked = ids.clone();
                let results = self.call(|reply| Command::Replay {
                    ids,
                    _reservation: reservation,
                    reply,
                })?;
                for (id, result) in asked.into_iter().zip(results) {
                    match result {
                        Ok(seq) => summary.replayed.push((id, seq)),
                        Err(e @ ReplayError::Full { .. }) => {
                            summary.stopped.get_or_insert(e);
                        }
                        Err(e) => summary.failed.push((id, e)),
                    }
                }
            }
            if summary.stopped.is_some() {
                break 'chunks;
            }
        }
        events::queue_dead_letters_replayed(&self.shared.sink, &summary.replayed);
        summary.left = self.shared.counters.dead_rows.load(Ordering::Relaxed);
        Ok(summary)
    }

    /// Waits up to `timeout` for a commit that adds rows after the one counted in `seen`;
    /// returns the new count to pass next time.
    pub fn wait_appended(&self, seen: u64, timeout: Duration) -> u64 {
        let (lock, cvar) = &self.shared.appended;
        let guard = lock.lock().unwrap_or_else(|e| e.into_inner());
        let (guard, _) = cvar
            .wait_timeout_while(guard, timeout, |n| *n == seen)
            .unwrap_or_else(|e| e.into_inner());
        *guard
    }

    /// The ledger counts of this queue by source, as of the last commit.
    pub fn ledger(&self) -> BTreeMap<String, Counts> {
        self.shared.book.snapshot()
    }

    /// The check that the durable `pending` counts agree with the rows (after a crash, say):
    /// in one read transaction, the stored counts by source and the tracked rows of each
    /// source counted one by one. Returns `(stored pending, rows)`.
    pub fn count_pending(&self) -> Result<PendingCheck, StoreError> {
        self.read(|rtxn| {
            let mut rows = BTreeMap::new();
            for item in self.shared.rows.iter(rtxn)? {
                let (_, value) = item?;
                if let Some(source) = tracked_source(value) {
                    *rows.entry(source.to_string()).or_insert(0) += 1;
                }
            }
            let kept = read_ledger(&self.shared.ledger, rtxn)?
                .into_iter()
                .map(|(source, c)| (source, c.pending))
                .filter(|(_, n)| *n > 0)
                .collect();
            Ok(PendingCheck { kept, rows })
        })
    }

    /// Rows the queue ever took (`accepted` of the push sink in the ledger).
    pub fn appended_total(&self) -> u64 {
        self.shared.appended_total.load(Ordering::Relaxed)
    }

    /// Makes every commit from now on take `delay` longer: a slow disk, for tests.
    #[cfg(test)]
    fn set_commit_delay(&self, delay: Duration) {
        *self
            .shared
            .commit_delay
            .lock()
            .unwrap_or_else(|e| e.into_inner()) = delay;
    }

    /// Lowers the dead-letter cap, so that trimming can be tested without 50 000 rows.
    #[cfg(test)]
    fn set_dead_letter_cap(&self, cap: u64) {
        self.shared.dead_cap.store(cap, Ordering::Relaxed);
    }

    /// Stops the writer after it has committed everything already on its channel, and closes
    /// the environment once every other holder of it is gone. Idempotent.
    pub fn close(&self) {
        self.writer.close();
    }

    /// Closes the queue and waits until LMDB has closed the file, so it can be opened again in
    /// this process (restart tests).
    pub fn close_and_wait(self) {
        self.close();
        let event = self.shared.env.clone().prepare_for_closing();
        drop(self);
        event.wait();
    }
}

impl Drop for DurableQueue {
    fn drop(&mut self) {
        self.close();
    }
}

#[cfg(test)]
mod tests;
