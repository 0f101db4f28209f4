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
//!   `pending`, `delivered`, `evicted`, `dead_lettered`), also written in the transaction that
//!   changes the rows it counts.
//!
//! A row's value is a small header, then the uplink line: byte `0x00` (a JSON line never starts
//! with it; rows written before the header existed start with `{` and are read as untagged),
//! a flags byte (bit 0: the row is the copy the ledger tracks for its record), the source name's
//! length (`u16`, big-endian) and the source name. So an eviction or a delivery knows the
//! source of every row without parsing its JSON.
//!
//! Accounting is in logical bytes: key (8) + line + [`ENTRY_OVERHEAD`] per row (the header is
//! not counted, so admission can reserve a record's bytes from its line alone).
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
//!   before them. A seq that is taken (or not below `next_seq`, which a later append would
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
use std::sync::mpsc::{Receiver, SyncSender, TrySendError};
use std::sync::{Arc, Condvar, Mutex, RwLock};
use std::time::{Duration, Instant};

use heed::byteorder::BigEndian;
use heed::types::{Bytes, Str, U64};
use heed::{CommitOrAbort, Database, Env, PutFlags, RwTxn, WithoutTls};
use tokio::sync::oneshot;

use super::writer::{read_meta, write_meta, Linger, Meta, WriterThread};
use super::{lmdb, StoreError};
use crate::admission::{Gate, OnFull, Reservation};
use crate::ledger::{Book, Counts};
use crate::record::Record;
use crate::telemetry::events;

/// Fixed logical overhead counted for every row, on top of its key and value.
pub const ENTRY_OVERHEAD: u64 = 64;
/// Capacity of the writer's channel; when it is full a record is refused (`dropped_total`).
pub const WRITER_CHANNEL: usize = 8192;
/// Rows kept in the push dead-letter table; the oldest are trimmed beyond it.
pub const DEAD_LETTER_CAP: u64 = 50_000;
/// Most commands applied in one transaction.
const MAX_GROUP: usize = 4096;
/// Most map size on 32-bit boards (armv7): the address space is small.
const MAX_MAP_32BIT: usize = 1 << 30;

type Seq = U64<BigEndian>;

/// Logical bytes of a row whose value is `value_len` bytes.
pub fn row_bytes(value_len: usize) -> u64 {
    8 + value_len as u64 + ENTRY_OVERHEAD
}

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
}

/// The source of a row, and whether it is the copy of its record that the ledger tracks.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Tag {
    /// The record's source (`ingest/orders`).
    pub source: String,
    /// Counted in the ledger's per-source figures (one copy per record).
    pub tracked: bool,
}

/// First byte of a row with a header.
const HEADER_MARK: u8 = 0;
/// Longest source name kept in a header; longer names are cut.
const MAX_TAG: usize = 1024;

/// A row's value: the header for `tag`, then `line`.
pub fn encode_row(tag: &Tag, line: &[u8]) -> Vec<u8> {
    let name = tag_name(&tag.source);
    let mut v = Vec::with_capacity(4 + name.len() + line.len());
    push_header(&mut v, name, tag.tracked);
    v.extend_from_slice(line);
    v
}

/// The row [`encode_row`] makes of `record`'s line for `source`, written in one buffer: the
/// line is not made first and copied. `line_len`: [`Record::line_len`], which the caller has
/// counted already for admission.
pub fn record_row(source: &str, tracked: bool, record: &Record, line_len: usize) -> Vec<u8> {
    let name = tag_name(source);
    let mut v = Vec::with_capacity(4 + name.len() + line_len);
    push_header(&mut v, name, tracked);
    record.write_line(&mut v);
    v
}

/// The source name a header keeps: at most [`MAX_TAG`] bytes.
fn tag_name(source: &str) -> &[u8] {
    let name = source.as_bytes();
    &name[..name.len().min(MAX_TAG)]
}

fn push_header(v: &mut Vec<u8>, name: &[u8], tracked: bool) {
    v.push(HEADER_MARK);
    v.push(u8::from(tracked));
    v.extend_from_slice(&(name.len() as u16).to_be_bytes());
    v.extend_from_slice(name);
}

/// Splits a row's value into its tag (`None` for rows without a header, or a damaged one)
/// and its uplink line.
pub fn decode_row(value: &[u8]) -> (Option<(&str, bool)>, &[u8]) {
    if value.first() != Some(&HEADER_MARK) || value.len() < 4 {
        return (None, value);
    }
    let len = u16::from_be_bytes([value[2], value[3]]) as usize;
    let Some(name) = value.get(4..4 + len) else {
        return (None, &value[value.len()..]);
    };
    let line = &value[4 + len..];
    match std::str::from_utf8(name) {
        Ok(name) => (Some((name, value[1] & 1 == 1)), line),
        Err(_) => (None, line),
    }
}

/// The tracked source of a row, when it has one.
fn tracked_source(value: &[u8]) -> Option<&str> {
    match decode_row(value).0 {
        Some((source, true)) => Some(source),
        _ => None,
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

/// An entry of the push dead-letter table.
#[derive(Debug, Clone)]
pub struct DeadLetter {
    /// Key in the dead-letter table.
    pub id: u64,
    /// The JSON object stored.
    pub json: Vec<u8>,
}

/// Most dead letters one replay command puts back (one writer command, one transaction).
const REPLAY_CHUNK: usize = 256;

/// The JSON of a dead letter: the row's seq, why it was refused, when (Unix ms), its source
/// and whether the ledger tracks it (`tag`, `None` for a row without a header), and the row's
/// uplink line as it was (`line` is a JSON object, written unchanged).
pub fn dead_letter_json(
    seq: u64,
    reason: &str,
    at_ms: u64,
    tag: Option<(&str, bool)>,
    line: &[u8],
) -> String {
    let reason = serde_json::Value::from(reason);
    let tag = match tag {
        Some((source, tracked)) => {
            format!(
                r#""source":{},"tracked":{tracked},"#,
                serde_json::Value::from(source)
            )
        }
        None => r#""tracked":false,"#.to_string(),
    };
    let record = String::from_utf8_lossy(line);
    format!(r#"{{"seq":{seq},"reason":{reason},"at":{at_ms},{tag}"record":{record}}}"#)
}

/// What a replay needs of a dead letter: its original seq, the row to put back, and the
/// logical bytes it takes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Revived {
    /// The seq it had in the queue.
    pub seq: u64,
    /// Its tag: the source it had and whether it was tracked (false for old entries).
    pub tag: Tag,
    /// The uplink line.
    pub line: Vec<u8>,
}

/// Reads a dead letter's JSON back into the row it was; the reason when it cannot be.
pub fn revive(json: &[u8]) -> Result<Revived, String> {
    #[derive(serde::Deserialize)]
    struct Stored<'a> {
        seq: u64,
        #[serde(default)]
        source: Option<String>,
        #[serde(default)]
        tracked: Option<bool>,
        #[serde(borrow)]
        record: &'a serde_json::value::RawValue,
    }
    let stored: Stored<'_> = serde_json::from_slice(json)
        .map_err(|e| format!("the dead letter cannot be read back: {e}"))?;
    let tracked = stored.source.is_some() && stored.tracked == Some(true);
    Ok(Revived {
        seq: stored.seq,
        tag: Tag {
            source: stored.source.unwrap_or_default(),
            tracked,
        },
        line: stored.record.get().as_bytes().to_vec(),
    })
}

/// Why a dead letter was not put back into its queue. In every case nothing changed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ReplayError {
    /// No dead letter has this id (never had, or it was replayed, deleted or trimmed).
    NotFound,
    /// The queue has no room for it now: `bytes` more would not fit `used` of `quota`.
    /// Retriable, once the queue drained.
    Full {
        /// Logical bytes of the row.
        bytes: u64,
        /// Logical bytes in the queue (committed and reserved).
        used: u64,
        /// The quota.
        quota: u64,
    },
    /// Its original seq is taken by a queued row, or is not below the queue's next seq (a
    /// later append would collide with it): refused rather than overwritten.
    SeqTaken(u64),
    /// The stored entry cannot be read back as a row.
    Damaged(String),
    /// The store failed; nothing of the transaction is stored.
    Store(StoreError),
}

impl ReplayError {
    /// True when the same call may succeed later (a full queue, a store error).
    pub fn is_retriable(&self) -> bool {
        match self {
            Self::Full { .. } | Self::Store(_) => true,
            Self::NotFound | Self::SeqTaken(_) | Self::Damaged(_) => false,
        }
    }
}

impl std::fmt::Display for ReplayError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::NotFound => write!(f, "no such dead letter"),
            Self::Full { bytes, used, quota } => write!(
                f,
                "the queue is full: the record takes {bytes} bytes, {used} of {quota} are in use; nothing changed, try again once the queue drained"
            ),
            Self::SeqTaken(seq) => write!(
                f,
                "seq {seq} is taken in the queue (or not below its next seq): the dead letter was left as it is rather than overwrite a row"
            ),
            Self::Damaged(e) => write!(f, "{e}"),
            Self::Store(e) => write!(f, "{e}"),
        }
    }
}

impl std::error::Error for ReplayError {}

impl From<StoreError> for ReplayError {
    fn from(e: StoreError) -> Self {
        Self::Store(e)
    }
}

/// What a bounded replay of many dead letters did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ReplaySummary {
    /// Ids put back, with their seqs, in seq order.
    pub replayed: Vec<(u64, u64)>,
    /// Ids left as they were, and why (taken seq, damaged entry).
    pub failed: Vec<(u64, ReplayError)>,
    /// Why it stopped before the end (a full queue), when it did; the rest were left as
    /// they were.
    pub stopped: Option<ReplayError>,
    /// Dead letters left in the table afterwards.
    pub left: u64,
}

type Reply<T> = oneshot::Sender<Result<T, StoreError>>;

enum Command {
    Append {
        /// The encoded row (header and line).
        value: Vec<u8>,
        /// Released after the commit, once the committed bytes are published.
        _reservation: Reservation,
        reply: Reply<u64>,
    },
    RemoveRange {
        first: u64,
        last: u64,
        reply: Reply<u64>,
    },
    /// Puts dead letters back, in this order; stops at the first that does not fit.
    Replay {
        ids: Vec<u64>,
        /// Their bytes under `block`; released after the commit.
        _reservation: Option<Reservation>,
        reply: Reply<Vec<Result<u64, ReplayError>>>,
    },
    DeleteDead {
        id: u64,
        reply: Reply<bool>,
    },
    DeadLetter {
        seq: u64,
        reason: String,
        at_ms: u64,
        reply: Reply<bool>,
    },
}

/// What the writer knows; published to the gate and the counters after each commit.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
struct State {
    next_seq: u64,
    used: u64,
    rows: u64,
    evicted_total: u64,
    dropped_total: u64,
    write_errors_total: u64,
    blocked_total: u64,
    sent_total: u64,
    dead_next: u64,
    dead_rows: u64,
    dead_lettered_total: u64,
    dead_trimmed_total: u64,
    appended_total: u64,
    dead_replayed_total: u64,
    dead_deleted_total: u64,
}

const META_KEYS: [&str; 15] = [
    "next_seq",
    "used_bytes",
    "rows",
    "evicted_total",
    "dropped_total",
    "write_errors_total",
    "blocked_total",
    "sent_total",
    "dead_next",
    "dead_rows",
    "dead_lettered_total",
    "dead_trimmed_total",
    "appended_total",
    "dead_replayed_total",
    "dead_deleted_total",
];

impl State {
    fn fields(&mut self) -> [&mut u64; 15] {
        [
            &mut self.next_seq,
            &mut self.used,
            &mut self.rows,
            &mut self.evicted_total,
            &mut self.dropped_total,
            &mut self.write_errors_total,
            &mut self.blocked_total,
            &mut self.sent_total,
            &mut self.dead_next,
            &mut self.dead_rows,
            &mut self.dead_lettered_total,
            &mut self.dead_trimmed_total,
            &mut self.appended_total,
            &mut self.dead_replayed_total,
            &mut self.dead_deleted_total,
        ]
    }
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
}

/// A durable queue. Cheap to share behind an `Arc`.
pub struct DurableQueue {
    shared: Arc<Shared>,
    writer: WriterThread<Command>,
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
            state.appended_total =
                state.rows + state.sent_total + state.evicted_total + state.dead_lettered_total;
        }
        write_meta(&meta, &mut wtxn, &META_KEYS, state.fields())?;
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

    fn sender(&self) -> Result<SyncSender<Command>, StoreError> {
        self.writer.sender()
    }

    /// True while the writer takes records (until [`close`](Self::close)).
    pub fn accepting(&self) -> bool {
        self.writer.sender().is_ok()
    }

    /// Appends one row (its value, from [`record_row`] or [`encode_row`]); resolves to its
    /// sequence number once the transaction holding it has committed. `reservation` must come
    /// from this queue's [`gate`](Self::gate). The row's header names the record's source for
    /// the ledger (a tracked row is counted acked and pending in the same transaction that
    /// stores it).
    ///
    /// When the writer's channel is full the record is refused at once ([`StoreError::Busy`],
    /// counted in `dropped_total`): nothing was stored, the caller tells its source to retry.
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
        let sender = self.sender()?;
        // Counted before the send: the writer may take it (and count it off) at once.
        let queued = &self.shared.counters.writer_queued;
        queued.fetch_add(1, Ordering::Relaxed);
        let sent = sender.try_send(command);
        if sent.is_err() {
            queued.fetch_sub(1, Ordering::Relaxed);
        }
        match sent {
            Ok(()) => {}
            Err(TrySendError::Full(_)) => {
                events::queue_writer_channel_full(&self.shared.sink, &self.shared.counters);
                return Err(StoreError::Busy);
            }
            Err(TrySendError::Disconnected(_)) => return Err(StoreError::Closed),
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
            .and_then(|s| s.send(make(reply)).map_err(|_| StoreError::Closed))
            .is_err()
        {
            queued.fetch_sub(1, Ordering::Relaxed);
            return Err(StoreError::Closed);
        }
        rx.blocking_recv().unwrap_or(Err(StoreError::Closed))
    }

    /// Deletes the rows from `first` through `last` (delivered by the deliverer). Blocking: call
    /// it from a plain thread. Returns the rows deleted. A row below `first` (a dead letter
    /// replayed while the batch was on its way) stays: it was not in the batch.
    pub fn remove_range(&self, first: u64, last: u64) -> Result<u64, StoreError> {
        self.call(|reply| Command::RemoveRange { first, last, reply })
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

/// A dead letter chosen for a replay.
#[derive(Debug, Clone, Copy)]
struct Planned {
    id: u64,
    /// Its original seq (`u64::MAX` when the entry cannot be read back).
    seq: u64,
    /// The logical bytes of its row.
    bytes: u64,
}

/// An answer owed to one caller once the transaction ends.
enum Pending {
    Seq(Reply<u64>, u64, Reservation),
    Count(Reply<u64>, u64),
    Moved(Reply<bool>, bool),
    Replayed(
        Reply<Vec<Result<u64, ReplayError>>>,
        Vec<Result<u64, ReplayError>>,
        Option<Reservation>,
    ),
}

struct Writer {
    shared: Arc<Shared>,
    state: State,
    /// The committed ledger counts by source.
    sources: BTreeMap<String, Counts>,
    /// The counts the open transaction changed (its new values); merged into `sources` after
    /// the commit, dropped when it fails.
    touched: BTreeMap<String, Counts>,
    /// The open transaction puts rows in (appends, replays): the deliverer is woken after it.
    adds_rows: bool,
}

impl Writer {
    fn new(shared: Arc<Shared>, state: State, sources: BTreeMap<String, Counts>) -> Self {
        Self {
            shared,
            state,
            sources,
            touched: BTreeMap::new(),
            adds_rows: false,
        }
    }

    /// The counts of `source` as the open transaction sees them.
    fn counts(&self, source: &str) -> Counts {
        self.touched
            .get(source)
            .or_else(|| self.sources.get(source))
            .copied()
            .unwrap_or_default()
    }

    /// Changes the ledger counts of `source` inside the open transaction.
    fn tally(&mut self, source: &str, change: impl FnOnce(&mut Counts)) {
        if !self.touched.contains_key(source) {
            let now = self.sources.get(source).copied().unwrap_or_default();
            self.touched.insert(source.to_string(), now);
        }
        if let Some(c) = self.touched.get_mut(source) {
            change(c);
        }
    }

    fn run(mut self, rx: Receiver<Command>) {
        let mut linger = Linger::new();
        while let Some(group) = linger.next_group(&rx, MAX_GROUP) {
            self.shared
                .counters
                .held_nanos_total
                .fetch_add(nanos(linger.held()), Ordering::Relaxed);
            let c = &self.shared.counters.writer_queued;
            let n = group.len() as u64;
            // Saturating, so a count can never wrap; sends are counted before they happen.
            let _ = c.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |v| {
                Some(v.saturating_sub(n))
            });
            self.commit_group(group, &mut linger, &rx);
        }
        self.flush_counters();
    }

    /// Refusals and channel drops are counted outside the writer and reach the disk with the
    /// next commit; at a clean stop, commit them on their own so a restart keeps them. (After
    /// a crash, the ones since the last commit are missing from the restored counters.)
    fn flush_counters(&mut self) {
        let blocked = self.shared.gate.blocked_total();
        let dropped = self.shared.counters.dropped_total.load(Ordering::Relaxed);
        if blocked == self.state.blocked_total && dropped == self.state.dropped_total {
            return;
        }
        self.state.blocked_total = blocked;
        self.state.dropped_total = dropped;
        let mut state = self.state;
        let result = self.shared.env.write_txn().and_then(|mut txn| {
            write_meta(&self.shared.meta, &mut txn, &META_KEYS, state.fields())?;
            txn.commit()
        });
        if let Err(e) = result {
            log::error!(
                "queue counters not saved at stop: sink={} error=\"{e}\"",
                self.shared.sink
            );
        }
    }

    /// Applies and commits `group`, then answers its callers; after a commit and before the
    /// answers, `linger` notes the sync and takes what arrived meanwhile from `rx`.
    fn commit_group(
        &mut self,
        group: Vec<Command>,
        linger: &mut Linger<Command>,
        rx: &Receiver<Command>,
    ) {
        let before = self.state;
        self.touched.clear();
        self.adds_rows = false;
        let group_len = group.len() as u64;
        let mut evicted = (0u64, 0u64);
        let shared = Arc::clone(&self.shared);
        let result = {
            let _guard = shared.resize_lock.read().unwrap_or_else(|e| e.into_inner());
            self.apply(group, &mut evicted)
        };
        match result {
            Ok((pending, synced_in)) => {
                linger.committed(rx, group_len as usize, synced_in, MAX_GROUP);
                let touched = std::mem::take(&mut self.touched);
                self.shared.book.store(touched.clone());
                self.sources.extend(touched);
                self.shared
                    .appended_total
                    .store(self.state.appended_total, Ordering::Relaxed);
                self.shared.gate.publish(self.state.used, self.state.rows);
                let c = &self.shared.counters;
                c.commits_total.fetch_add(1, Ordering::Relaxed);
                c.committed_commands_total
                    .fetch_add(group_len, Ordering::Relaxed);
                c.sync_nanos_total
                    .fetch_add(nanos(synced_in), Ordering::Relaxed);
                c.sent_total.store(self.state.sent_total, Ordering::Relaxed);
                c.dead_lettered_total
                    .store(self.state.dead_lettered_total, Ordering::Relaxed);
                c.dead_trimmed_total
                    .store(self.state.dead_trimmed_total, Ordering::Relaxed);
                c.dead_rows.store(self.state.dead_rows, Ordering::Relaxed);
                c.dead_replayed_total
                    .store(self.state.dead_replayed_total, Ordering::Relaxed);
                c.dead_deleted_total
                    .store(self.state.dead_deleted_total, Ordering::Relaxed);
                if evicted.0 > 0 {
                    events::queue_evicted(&self.shared.sink, c, evicted.0, evicted.1);
                }
                if self.state.dead_trimmed_total > before.dead_trimmed_total {
                    events::queue_dead_letters_trimmed(
                        &self.shared.sink,
                        self.state.dead_trimmed_total - before.dead_trimmed_total,
                    );
                }
                let appended = self.adds_rows;
                // Answer only now: the transaction is on disk.
                for p in pending {
                    match p {
                        Pending::Seq(reply, seq, reservation) => {
                            // The committed bytes are published: the reservation can go.
                            drop(reservation);
                            let _ = reply.send(Ok(seq));
                        }
                        Pending::Count(reply, n) => {
                            let _ = reply.send(Ok(n));
                        }
                        Pending::Moved(reply, moved) => {
                            let _ = reply.send(Ok(moved));
                        }
                        Pending::Replayed(reply, results, reservation) => {
                            drop(reservation);
                            let _ = reply.send(Ok(results));
                        }
                    }
                }
                if appended {
                    let (lock, cvar) = &self.shared.appended;
                    *lock.lock().unwrap_or_else(|e| e.into_inner()) += 1;
                    cvar.notify_all();
                }
            }
            Err((error, pending)) => {
                linger.failed();
                self.state = before;
                self.touched.clear();
                self.state.write_errors_total += 1;
                events::queue_write_failed(&self.shared.sink, &self.shared.counters, &error);
                for p in pending {
                    match p {
                        Pending::Seq(reply, _, reservation) => {
                            drop(reservation);
                            let _ = reply.send(Err(error.clone()));
                        }
                        Pending::Count(reply, _) => {
                            let _ = reply.send(Err(error.clone()));
                        }
                        Pending::Moved(reply, _) => {
                            let _ = reply.send(Err(error.clone()));
                        }
                        Pending::Replayed(reply, _, reservation) => {
                            drop(reservation);
                            let _ = reply.send(Err(error.clone()));
                        }
                    }
                }
                if error == StoreError::MapFull {
                    self.grow_map();
                }
            }
        }
    }

    /// Applies a group in one transaction; the answers owed and how long the commit (its sync)
    /// took. On error, every caller is still in the returned list so that each gets the error.
    #[allow(clippy::type_complexity)]
    fn apply(
        &mut self,
        group: Vec<Command>,
        evicted: &mut (u64, u64),
    ) -> Result<(Vec<Pending>, Duration), (StoreError, Vec<Pending>)> {
        let mut pending = Vec::with_capacity(group.len());
        let mut failure: Option<StoreError> = None;
        let shared = Arc::clone(&self.shared);
        let mut wtxn = match shared.env.write_txn() {
            Ok(t) => Some(t),
            Err(e) => {
                failure = Some(e.into());
                None
            }
        };
        for command in group {
            let outcome = match (&mut wtxn, &failure) {
                (Some(txn), None) => self.apply_one(txn, &command, evicted),
                _ => Ok(Outcome::None),
            };
            let outcome = outcome.unwrap_or_else(|e| {
                failure = Some(e.into());
                Outcome::None
            });
            pending.push(match command {
                Command::Append {
                    _reservation,
                    reply,
                    ..
                } => Pending::Seq(reply, outcome.number(), _reservation),
                Command::RemoveRange { reply, .. } => Pending::Count(reply, outcome.number()),
                Command::DeadLetter { reply, .. } | Command::DeleteDead { reply, .. } => {
                    Pending::Moved(reply, matches!(outcome, Outcome::Number(1)))
                }
                Command::Replay {
                    _reservation,
                    reply,
                    ..
                } => Pending::Replayed(reply, outcome.into_replays(), _reservation),
            });
        }
        let Some(mut txn) = wtxn else {
            return Err((failure.unwrap_or(StoreError::Closed), pending));
        };
        if let Some(e) = failure {
            txn.abort();
            return Err((e, pending));
        }
        self.state.blocked_total = self.shared.gate.blocked_total();
        self.state.dropped_total = self.shared.counters.dropped_total.load(Ordering::Relaxed);
        let mut state = self.state;
        if let Err(e) = write_meta(&self.shared.meta, &mut txn, &META_KEYS, state.fields()) {
            txn.abort();
            return Err((e.into(), pending));
        }
        for (source, counts) in &self.touched {
            if let Err(e) = write_ledger(&self.shared.ledger, &mut txn, source, counts) {
                txn.abort();
                return Err((e.into(), pending));
            }
        }
        let syncing = Instant::now();
        match txn.commit() {
            Ok(()) => Ok((pending, syncing.elapsed())),
            Err(e) => Err((e.into(), pending)),
        }
    }

    fn apply_one(
        &mut self,
        txn: &mut RwTxn<'_>,
        command: &Command,
        evicted: &mut (u64, u64),
    ) -> heed::Result<Outcome> {
        let s = Arc::clone(&self.shared);
        match command {
            Command::Append { value: row, .. } => {
                let (tag, text) = decode_row(row);
                let size = row_bytes(text.len());
                let tracked = match tag {
                    Some((source, true)) => Some(source),
                    _ => None,
                };
                if s.gate.on_full() == OnFull::EvictOldest {
                    while self.state.used + size > s.gate.quota() && self.state.rows > 0 {
                        let Some((seq, value)) = s.rows.first(txn)? else {
                            break;
                        };
                        let bytes = row_bytes(decode_row(value).1.len());
                        let source = tracked_source(value).map(str::to_string);
                        s.rows.delete(txn, &seq)?;
                        if let Some(source) = source {
                            self.tally(&source, |c| {
                                c.pending = c.pending.saturating_sub(1);
                                c.evicted += 1;
                            });
                        }
                        self.state.used -= bytes;
                        self.state.rows -= 1;
                        self.state.evicted_total += 1;
                        evicted.0 += 1;
                        evicted.1 += bytes;
                    }
                }
                let seq = self.state.next_seq;
                s.rows.put_with_flags(txn, PutFlags::APPEND, &seq, row)?;
                self.adds_rows = true;
                self.state.next_seq += 1;
                self.state.used += size;
                self.state.rows += 1;
                self.state.appended_total += 1;
                if let Some(source) = tracked {
                    self.tally(source, |c| {
                        c.acked += 1;
                        c.pending += 1;
                    });
                }
                Ok(Outcome::Number(seq))
            }
            Command::RemoveRange { first, last, .. } => {
                let range = *first..=*last;
                let mut bytes = 0;
                let mut count = 0;
                let mut delivered: BTreeMap<String, u64> = BTreeMap::new();
                for item in s.rows.range(txn, &range)? {
                    let (_, value) = item?;
                    bytes += row_bytes(decode_row(value).1.len());
                    count += 1;
                    if let Some(source) = tracked_source(value) {
                        match delivered.get_mut(source) {
                            Some(n) => *n += 1,
                            None => {
                                delivered.insert(source.to_string(), 1);
                            }
                        }
                    }
                }
                for (source, n) in delivered {
                    self.tally(&source, |c| {
                        c.pending = c.pending.saturating_sub(n);
                        c.delivered += n;
                    });
                }
                if count > 0 {
                    s.rows.delete_range(txn, &range)?;
                }
                self.state.used -= bytes;
                self.state.rows -= count;
                self.state.sent_total += count;
                Ok(Outcome::Number(count))
            }
            Command::DeadLetter {
                seq, reason, at_ms, ..
            } => {
                let Some(value) = s.rows.get(txn, seq)? else {
                    return Ok(Outcome::Number(0));
                };
                let (tag, line) = decode_row(value);
                let entry = dead_letter_json(*seq, reason, *at_ms, tag, line);
                let source = tracked_source(value).map(str::to_string);
                let line_len = line.len();
                if let Some(source) = source {
                    self.tally(&source, |c| {
                        c.pending = c.pending.saturating_sub(1);
                        c.dead_lettered += 1;
                    });
                }
                let id = self.state.dead_next;
                s.dead
                    .put_with_flags(txn, PutFlags::APPEND, &id, entry.as_bytes())?;
                s.rows.delete(txn, seq)?;
                self.state.dead_next += 1;
                self.state.dead_rows += 1;
                self.state.dead_lettered_total += 1;
                self.state.used -= row_bytes(line_len);
                self.state.rows -= 1;
                while self.state.dead_rows > s.dead_cap.load(Ordering::Relaxed) {
                    let Some((oldest, _)) = s.dead.first(txn)? else {
                        break;
                    };
                    s.dead.delete(txn, &oldest)?;
                    self.state.dead_rows -= 1;
                    self.state.dead_trimmed_total += 1;
                }
                Ok(Outcome::Number(1))
            }
            Command::Replay { ids, .. } => {
                let mut results = Vec::with_capacity(ids.len());
                let mut full: Option<ReplayError> = None;
                for id in ids {
                    if let Some(e) = &full {
                        results.push(Err(e.clone()));
                        continue;
                    }
                    let result = self.replay_one(txn, *id)?;
                    if let Err(e @ ReplayError::Full { .. }) = &result {
                        full = Some(e.clone());
                    }
                    results.push(result);
                }
                Ok(Outcome::Replays(results))
            }
            Command::DeleteDead { id, .. } => {
                if !s.dead.delete(txn, id)? {
                    return Ok(Outcome::Number(0));
                }
                self.state.dead_rows = self.state.dead_rows.saturating_sub(1);
                self.state.dead_deleted_total += 1;
                Ok(Outcome::Number(1))
            }
        }
    }

    /// Puts dead letter `id` back under its original seq, inside the open transaction.
    fn replay_one(
        &mut self,
        txn: &mut RwTxn<'_>,
        id: u64,
    ) -> heed::Result<Result<u64, ReplayError>> {
        let s = Arc::clone(&self.shared);
        let Some(json) = s.dead.get(txn, &id)? else {
            return Ok(Err(ReplayError::NotFound));
        };
        let revived = match revive(json) {
            Ok(r) => r,
            Err(e) => return Ok(Err(ReplayError::Damaged(e))),
        };
        let seq = revived.seq;
        if seq >= self.state.next_seq || s.rows.get(txn, &seq)?.is_some() {
            return Ok(Err(ReplayError::SeqTaken(seq)));
        }
        let size = row_bytes(revived.line.len());
        let quota = s.gate.quota();
        // The admission rule (a record larger than the quota only into an empty queue), on the
        // committed rows; under `block` the gate reserved these bytes before, so this holds.
        let fits = if size > quota {
            self.state.rows == 0
        } else {
            self.state.used + size <= quota
        };
        if !fits {
            return Ok(Err(ReplayError::Full {
                bytes: size,
                used: self.state.used,
                quota,
            }));
        }
        let mut tag = revived.tag;
        // Tracked only while its source has a dead letter counted that can move back.
        tag.tracked = tag.tracked && self.counts(&tag.source).dead_lettered > 0;
        let value = encode_row(&tag, &revived.line);
        s.rows
            .put_with_flags(txn, PutFlags::NO_OVERWRITE, &seq, &value)?;
        s.dead.delete(txn, &id)?;
        self.adds_rows = true;
        self.state.used += size;
        self.state.rows += 1;
        self.state.dead_rows = self.state.dead_rows.saturating_sub(1);
        self.state.dead_replayed_total += 1;
        if tag.tracked {
            self.tally(&tag.source, |c| {
                c.dead_lettered -= 1;
                c.pending += 1;
            });
        }
        Ok(Ok(seq))
    }

    /// After `MDB_MAP_FULL`: grows the map by half, up to the limit of the board.
    fn grow_map(&self) {
        let s = &self.shared;
        let _guard = s.resize_lock.write().unwrap_or_else(|e| e.into_inner());
        let mut size = s.map_size.lock().unwrap_or_else(|e| e.into_inner());
        let new_size = size.saturating_add(*size / 2).min(s.max_map);
        if new_size <= *size {
            log::error!("queue map is at its limit: sink={} bytes={}", s.sink, *size);
            return;
        }
        match lmdb::resize(&s.env, new_size) {
            Ok(()) => {
                log::warn!(
                    "queue map grown: sink={} from_bytes={} to_bytes={new_size}",
                    s.sink,
                    *size
                );
                *size = new_size;
            }
            Err(e) => log::error!("queue map could not grow: sink={} error=\"{e}\"", s.sink),
        }
    }
}

/// The ledger fields a durable queue keeps on disk.
const LEDGER_FIELDS: [&str; 5] = ["acked", "pending", "delivered", "evicted", "dead_lettered"];

/// `d` in whole nanoseconds, saturating (a u64 holds 584 years of them).
fn nanos(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

fn ledger_field<'a>(c: &'a mut Counts, field: &str) -> Option<&'a mut u64> {
    Some(match field {
        "acked" => &mut c.acked,
        "pending" => &mut c.pending,
        "delivered" => &mut c.delivered,
        "evicted" => &mut c.evicted,
        "dead_lettered" => &mut c.dead_lettered,
        _ => return None,
    })
}

/// Reads the ledger counts (`<field>:<source>` keys) of the queue.
fn read_ledger(
    db: &Meta,
    txn: &heed::RoTxn<'_, WithoutTls>,
) -> heed::Result<BTreeMap<String, Counts>> {
    let mut out: BTreeMap<String, Counts> = BTreeMap::new();
    for item in db.iter(txn)? {
        let (key, value) = item?;
        let Some((field, source)) = key.split_once(':') else {
            continue;
        };
        let counts = out.entry(source.to_string()).or_default();
        if let Some(slot) = ledger_field(counts, field) {
            *slot = value;
        }
    }
    Ok(out)
}

/// Writes the ledger counts of one source in the caller's transaction.
fn write_ledger(db: &Meta, txn: &mut RwTxn<'_>, source: &str, c: &Counts) -> heed::Result<()> {
    let mut c = *c;
    for field in LEDGER_FIELDS {
        if let Some(value) = ledger_field(&mut c, field) {
            db.put(txn, &format!("{field}:{source}"), value)?;
        }
    }
    Ok(())
}

enum Outcome {
    None,
    Number(u64),
    Replays(Vec<Result<u64, ReplayError>>),
}

impl Outcome {
    fn number(&self) -> u64 {
        match self {
            Self::None | Self::Replays(_) => 0,
            Self::Number(n) => *n,
        }
    }

    fn into_replays(self) -> Vec<Result<u64, ReplayError>> {
        match self {
            Self::Replays(r) => r,
            Self::None | Self::Number(_) => Vec::new(),
        }
    }
}

#[cfg(test)]
mod tests;
