//! The pipeline dead-letter queue (DLQ) and the webhook inbox: `dead_letters.db` under the
//! data dir.
//!
//! On disk (one LMDB environment, one file):
//! - `entries`: key = big-endian `u64` id (given in park order, never reused), value = JSON
//!   `{"flow","node","reason","at_ms","state","accepted","resolution","resolved_at_ms","record"}`
//!   where `record` is the record's line (`{id,source,key,ts,payload}`).
//! - `heads`: same key, value = JSON `{"state","flow","node"}`: the few fields the in-memory
//!   index needs, so that opening reads a few bytes per entry instead of every record.
//! - `inbox`: key = big-endian `u64`, value = the raw request of an `on_receipt` webhook,
//!   written (and synced) before its `200` and removed once its flow has run; what is left at
//!   start was accepted but not handled, and is replayed.
//! - `meta`: `next_id`, `inbox_next`, `parked_total`, `trimmed_total`, `trimmed_open_total`,
//!   written in the same transaction as the rows they describe.
//! - `replay`: the webhooks' replay windows (`window.rs`): key = webhook name, a zero byte and
//!   the request's MAC; value = the signed timestamp (big-endian `i64`) and the JSON of the
//!   `200` it was answered. An `on_receipt` request's row is written in the transaction of its
//!   inbox entry.
//!
//! Writes are direct write transactions (each commit syncs), serialized by the writer lock and
//! called from blocking threads: a dead letter is rare, so a writer thread would buy nothing.
//!
//! In memory, the ids of the open and of the resolved entries are kept as ordered sets (and per
//! flow), loaded at open from `heads`. They change only after the transaction that changed the
//! disk has committed, so they always describe the last commit. The index has a lock of its
//! own, never held across a commit: `/api/status`, the live view and the alert checks read the
//! counts on the runtime's worker threads, and must not wait for an fsync. They make
//! the trim at the cap cheap: at [`DeadLetterQueue::open`]'s `max_rows` the oldest (lowest id)
//! resolved entries go first, then the oldest open ones, each trim counted and logged. An open
//! entry trimmed is a record lost: counted apart (`trimmed_open_total`, alerted), logged as an
//! error, and its source kept for the loss ledger ([`DeadLetterQueue::take_trimmed_open`]).

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::ops::Bound;
use std::path::Path;
use std::sync::{Mutex, MutexGuard, RwLock};

use heed::byteorder::BigEndian;
use heed::types::{Bytes, Str, U64};
use heed::{CommitOrAbort, Database, Env, PutFlags, RoTxn, RwTxn, WithoutTls};
use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;

use super::{lmdb, StoreError};
use crate::record::{now_ms, Record};
use crate::telemetry::events;

/// Entries kept by default (`dead_letters.max_rows`).
pub const DEFAULT_MAX_ROWS: u64 = 100_000;
/// Most entries one [`DeadLetterQueue::list`] returns, whatever the filter asks.
pub const MAX_LIST_ROWS: usize = 1000;
/// First map size: virtual address space only, the file grows with the data.
const INITIAL_MAP: usize = 256 << 20;
/// Most map size on 32-bit boards (armv7), whose address space is shared with the other stores.
const MAX_MAP_32BIT: usize = 256 << 20;
/// Map growths tried for one write before it fails with [`StoreError::MapFull`].
const MAX_GROWTHS: usize = 3;

type Id = U64<BigEndian>;

/// Whether an entry still waits for someone.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum DlqState {
    /// Waiting to be corrected and replayed, or deleted.
    Open,
    /// Replayed successfully or deleted; kept for inspection until trimmed.
    Resolved,
}

impl DlqState {
    /// Parses the spelling of the API's `state=` parameter.
    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "open" => Some(Self::Open),
            "resolved" => Some(Self::Resolved),
            _ => None,
        }
    }

    /// The spelling in JSON and logs.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Open => "open",
            Self::Resolved => "resolved",
        }
    }
}

/// A record to park, and where and why it failed.
#[derive(Debug, Clone)]
pub struct NewDeadLetter {
    /// The record as it was when it failed.
    pub record: Record,
    /// The flow it failed in.
    pub flow: String,
    /// The node it failed at.
    pub node: String,
    /// Why.
    pub reason: String,
    /// True for "accepted (200) but not handled": an `on_receipt` webhook already answered.
    pub accepted: bool,
}

/// One entry of the queue, as the API shows it.
#[derive(Clone, Debug, Serialize)]
pub struct DeadLetterEntry {
    /// Its id: increasing in park order.
    pub id: u64,
    /// The flow it failed in.
    pub flow: String,
    /// The node it failed at.
    pub node: String,
    /// Why it failed.
    pub reason: String,
    /// When it was parked, Unix milliseconds.
    pub at_ms: u64,
    /// Open or resolved.
    pub state: DlqState,
    /// True for "accepted (200) but not handled".
    pub accepted: bool,
    /// How it was resolved: `replayed` or `deleted`.
    pub resolution: Option<String>,
    /// When it was resolved, Unix milliseconds.
    pub resolved_at_ms: Option<u64>,
    /// The record: `{id, source, key, ts, payload}`.
    pub record: serde_json::Value,
}

/// Which entries [`DeadLetterQueue::list`] returns.
#[derive(Debug, Clone, Default)]
pub struct DlqFilter {
    /// Only this flow's entries.
    pub flow: Option<String>,
    /// Only entries in this state.
    pub state: Option<DlqState>,
    /// Only ids greater than this one (paging: pass the last id seen).
    pub after: Option<u64>,
    /// Most entries returned (capped at [`MAX_LIST_ROWS`]).
    pub limit: usize,
}

/// The sizes and counters of the queue (`dead_letters` in `/api/status`).
#[derive(Default, Debug, Clone, PartialEq, Eq, Serialize)]
pub struct DlqCounts {
    /// Open entries now.
    pub open: u64,
    /// Resolved entries now.
    pub resolved: u64,
    /// Entries ever parked.
    pub parked_total: u64,
    /// Entries deleted at the cap.
    pub trimmed_total: u64,
    /// Of those, entries still open when deleted: records lost (alerted, and booked in the
    /// ledger as `trimmed`).
    pub trimmed_open_total: u64,
}

/// An entry as stored in `entries`.
#[derive(Serialize, Deserialize)]
struct Stored {
    flow: String,
    node: String,
    reason: String,
    at_ms: u64,
    state: DlqState,
    accepted: bool,
    resolution: Option<String>,
    resolved_at_ms: Option<u64>,
    /// The record's line, kept as text.
    record: Box<RawValue>,
}

/// What the index needs of an entry, stored in `heads`.
#[derive(Serialize, Deserialize)]
struct Head {
    state: DlqState,
    flow: String,
    node: String,
}

/// The ids and counters kept in `meta`.
#[derive(Clone, Copy, Default)]
struct Meta {
    next_id: u64,
    inbox_next: u64,
    parked_total: u64,
    trimmed_total: u64,
    trimmed_open_total: u64,
}

const META_KEYS: [&str; 5] = [
    "next_id",
    "inbox_next",
    "parked_total",
    "trimmed_total",
    "trimmed_open_total",
];

impl Meta {
    fn values(&self) -> [u64; 5] {
        [
            self.next_id,
            self.inbox_next,
            self.parked_total,
            self.trimmed_total,
            self.trimmed_open_total,
        ]
    }
}

/// The in-memory index and counters; describes the last commit.
#[derive(Default)]
struct Index {
    open: BTreeSet<u64>,
    resolved: BTreeSet<u64>,
    by_flow: HashMap<String, BTreeSet<u64>>,
    meta: Meta,
    /// Open entries trimmed and not yet taken by the ledger, by their record's source (at most
    /// [`crate::ledger::MAX_SOURCES`] sources; beyond, under [`crate::ledger::OTHER_SOURCES`]).
    trimmed_open: BTreeMap<String, u64>,
}

impl Index {
    fn set(&mut self, state: DlqState) -> &mut BTreeSet<u64> {
        match state {
            DlqState::Open => &mut self.open,
            DlqState::Resolved => &mut self.resolved,
        }
    }

    fn insert(&mut self, id: u64, state: DlqState, flow: &str) {
        self.set(state).insert(id);
        match self.by_flow.get_mut(flow) {
            Some(ids) => {
                ids.insert(id);
            }
            None => {
                self.by_flow.insert(flow.to_string(), BTreeSet::from([id]));
            }
        }
    }

    fn remove(&mut self, id: u64, state: DlqState, flow: &str) {
        self.set(state).remove(&id);
        if let Some(ids) = self.by_flow.get_mut(flow) {
            ids.remove(&id);
            if ids.is_empty() {
                self.by_flow.remove(flow);
            }
        }
    }
}

/// An entry trimmed at the cap, logged after the commit.
struct Trimmed {
    id: u64,
    head: Head,
    /// The source of its record, when it was open (a loss to book).
    source: Option<String>,
}

/// The source of a stored entry's record, read to book a trimmed open entry.
fn source_of(value: &[u8]) -> String {
    #[derive(Deserialize)]
    struct Source {
        source: String,
    }
    serde_json::from_slice::<Stored>(value)
        .ok()
        .and_then(|s| serde_json::from_str::<Source>(s.record.get()).ok())
        .map_or_else(String::new, |r| r.source)
}

/// The pipeline dead-letter queue and the webhook inbox. Share it behind an `Arc`.
pub struct DeadLetterQueue {
    env: Env<WithoutTls>,
    entries: Database<'static, Id, Bytes>,
    heads: Database<'static, Id, Bytes>,
    inbox: Database<'static, Id, Bytes>,
    meta: Database<'static, Str, Id>,
    window: Database<'static, Bytes, Bytes>,
    /// Serializes the writes: held across a write transaction and its commit (an fsync).
    writer: Mutex<()>,
    /// The index; held only to read or change it, never across a commit (see the module doc).
    index: Mutex<Index>,
    /// A test's hold on the commits.
    #[cfg(test)]
    pub(crate) commit_hold: CommitHold,
    /// Readers and writers hold it for reading while a transaction is open; a map resize holds
    /// it for writing, because LMDB may only resize while no transaction is open.
    resize_lock: RwLock<()>,
    map_size: Mutex<usize>,
    max_map: usize,
    max_rows: std::sync::atomic::AtomicU64,
}

fn io(e: impl std::fmt::Display) -> StoreError {
    StoreError::Io(e.to_string())
}

/// Folds line breaks out of a payload (white space between tokens in valid JSON), so that the
/// record's line stays one line for the uplink's NDJSON.
fn one_line(payload: Box<RawValue>) -> Box<RawValue> {
    let bytes = payload.get().as_bytes();
    if !bytes.contains(&b'\n') && !bytes.contains(&b'\r') {
        return payload;
    }
    RawValue::from_string(payload.get().replace(['\n', '\r'], " ")).unwrap_or(payload)
}

fn line_value(record: &Record) -> Result<Box<RawValue>, StoreError> {
    let line = String::from_utf8(record.to_line()).map_err(io)?;
    RawValue::from_string(line).map_err(io)
}

impl DeadLetterQueue {
    /// Opens (or creates) `dead_letters.db` in `dir`, keeping at most `max_rows` entries (at
    /// least 1). Entries, states and counters are those of the last commit.
    pub fn open(dir: &Path, max_rows: u64) -> Result<Self, StoreError> {
        std::fs::create_dir_all(dir).map_err(io)?;
        let max_map = if usize::BITS < 64 {
            MAX_MAP_32BIT
        } else {
            usize::MAX / 2
        };
        let map_size = lmdb::round_to_pages(INITIAL_MAP.min(max_map));
        let env = lmdb::open(&dir.join("dead_letters.db"), map_size, 6)?;
        let (entries, heads, inbox, meta, window) = env
            .create_databases_and_commit(env.write_txn()?, |opener, wtxn| {
                Ok::<_, heed::Error>(CommitOrAbort::<_, ()>::Commit((
                    opener.create_database::<Id, Bytes>(wtxn, Some("entries"))?,
                    opener.create_database::<Id, Bytes>(wtxn, Some("heads"))?,
                    opener.create_database::<Id, Bytes>(wtxn, Some("inbox"))?,
                    opener.create_database::<Str, Id>(wtxn, Some("meta"))?,
                    opener.create_database::<Bytes, Bytes>(wtxn, Some("replay"))?,
                )))
            })?
            .unwrap_commit();
        let mut wtxn = env.write_txn()?;
        // `heads` is written with `entries` in every transaction; a different count means the
        // file was touched outside LMDB: rebuild it from the entries.
        let (entry_count, head_count) = (entries.len(&wtxn)?, heads.len(&wtxn)?);
        if entry_count != head_count {
            heads.clear(&mut wtxn)?;
            let mut rebuilt = Vec::new();
            for item in entries.iter(&wtxn)? {
                let (id, value) = item?;
                let head = match serde_json::from_slice::<Stored>(value) {
                    Ok(s) => Head {
                        state: s.state,
                        flow: s.flow,
                        node: s.node,
                    },
                    Err(_) => Head {
                        state: DlqState::Open,
                        flow: String::new(),
                        node: String::new(),
                    },
                };
                rebuilt.push((id, serde_json::to_vec(&head).map_err(io)?));
            }
            for (id, head) in &rebuilt {
                heads.put(&mut wtxn, id, head)?;
            }
            events::dead_letter_index_repaired(entry_count, head_count);
        }
        let mut index = Index::default();
        for item in heads.iter(&wtxn)? {
            let (id, value) = item?;
            // A damaged head still counts as an open entry: `get` then reports the damage.
            match serde_json::from_slice::<Head>(value) {
                Ok(head) => index.insert(id, head.state, &head.flow),
                Err(_) => index.insert(id, DlqState::Open, ""),
            }
        }
        let mut stored = [0u64; 5];
        for (key, value) in META_KEYS.iter().zip(stored.iter_mut()) {
            *value = meta.get(&wtxn, key)?.unwrap_or(0);
        }
        let [next_id, inbox_next, parked_total, trimmed_total, trimmed_open_total] = stored;
        // The ids must stay above every key in use, whatever `meta` says.
        let after = |last: Option<(u64, &[u8])>| last.map_or(0, |(k, _)| k + 1);
        index.meta = Meta {
            next_id: next_id.max(after(entries.last(&wtxn)?)),
            inbox_next: inbox_next.max(after(inbox.last(&wtxn)?)),
            parked_total,
            trimmed_total,
            trimmed_open_total,
        };
        put_meta(&meta, &mut wtxn, &index.meta)?;
        wtxn.commit()?;
        Ok(Self {
            env,
            entries,
            heads,
            inbox,
            meta,
            writer: Mutex::new(()),
            window,
            index: Mutex::new(index),
            #[cfg(test)]
            commit_hold: CommitHold::default(),
            resize_lock: RwLock::new(()),
            map_size: Mutex::new(map_size),
            max_map,
            max_rows: max_rows.max(1).into(),
        })
    }

    fn index(&self) -> MutexGuard<'_, Index> {
        self.index.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Runs `f` in a write transaction and commits it, growing the map and trying again when
    /// it is full. `f` reads the index under its lock; the commit runs without it, so readers
    /// see the last commit meanwhile. Returns the index lock, taken again before the writer
    /// lock is let go, so the caller updates the index to match the commit before the next
    /// write reads it.
    fn write<T>(
        &self,
        mut f: impl FnMut(&mut RwTxn<'_>, &Index) -> Result<T, StoreError>,
    ) -> Result<(MutexGuard<'_, Index>, T), StoreError> {
        let _writer = self.writer.lock().unwrap_or_else(|e| e.into_inner());
        let mut growths = 0;
        loop {
            let result = {
                let _guard = self.resize_lock.read().unwrap_or_else(|e| e.into_inner());
                let mut txn = self.env.write_txn()?;
                let staged = f(&mut txn, &self.index());
                match staged {
                    Ok(value) => {
                        #[cfg(test)]
                        self.commit_hold.pass();
                        txn.commit().map(|()| value).map_err(StoreError::from)
                    }
                    Err(e) => {
                        txn.abort();
                        Err(e)
                    }
                }
            };
            match result {
                Err(StoreError::MapFull) if growths < MAX_GROWTHS && self.grow_map() => {
                    growths += 1;
                }
                Err(e) => return Err(e),
                Ok(value) => return Ok((self.index(), value)),
            }
        }
    }

    /// Grows the map by half, up to the limit of the board; false when it could not.
    fn grow_map(&self) -> bool {
        let _guard = self.resize_lock.write().unwrap_or_else(|e| e.into_inner());
        let mut size = self.map_size.lock().unwrap_or_else(|e| e.into_inner());
        let new_size = size.saturating_add(*size / 2).min(self.max_map);
        if new_size <= *size {
            log::error!("dead letter map is at its limit of {} bytes", *size);
            return false;
        }
        match lmdb::resize(&self.env, new_size) {
            Ok(()) => {
                log::warn!("dead letter map grown from {} to {new_size} bytes", *size);
                *size = new_size;
                true
            }
            Err(e) => {
                log::error!("dead letter map could not grow: {e}");
                false
            }
        }
    }

    /// Parks a record; returns its id once committed. At the cap, the oldest resolved entries
    /// are trimmed first, then the oldest open ones, each counted and logged.
    pub fn park(&self, entry: NewDeadLetter) -> Result<u64, StoreError> {
        let head = Head {
            state: DlqState::Open,
            flow: entry.flow,
            node: entry.node,
        };
        let stored = Stored {
            flow: head.flow.clone(),
            node: head.node.clone(),
            reason: entry.reason,
            at_ms: now_ms(),
            state: DlqState::Open,
            accepted: entry.accepted,
            resolution: None,
            resolved_at_ms: None,
            record: line_value(&entry.record)?,
        };
        let value = serde_json::to_vec(&stored).map_err(io)?;
        let head_value = serde_json::to_vec(&head).map_err(io)?;
        let (mut index, (meta, trimmed)) = self.write(|txn, index| {
            let id = index.meta.next_id;
            let total = (index.open.len() + index.resolved.len()) as u64 + 1;
            let excess = total.saturating_sub(self.max_rows()) as usize;
            let victims: Vec<(u64, DlqState)> = index
                .resolved
                .iter()
                .map(|&v| (v, DlqState::Resolved))
                .chain(index.open.iter().map(|&v| (v, DlqState::Open)))
                .take(excess)
                .collect();
            self.entries
                .put_with_flags(txn, PutFlags::APPEND, &id, &value)?;
            self.heads
                .put_with_flags(txn, PutFlags::APPEND, &id, &head_value)?;
            let mut trimmed = Vec::with_capacity(victims.len());
            for (victim, state) in victims {
                // A damaged head was indexed as open with no flow (see `open`).
                let head = self
                    .heads
                    .get(txn, &victim)?
                    .and_then(|h| serde_json::from_slice(h).ok())
                    .unwrap_or(Head {
                        state,
                        flow: String::new(),
                        node: String::new(),
                    });
                let source = match head.state {
                    DlqState::Open => Some(
                        self.entries
                            .get(txn, &victim)?
                            .map_or_else(String::new, source_of),
                    ),
                    DlqState::Resolved => None,
                };
                self.entries.delete(txn, &victim)?;
                self.heads.delete(txn, &victim)?;
                trimmed.push(Trimmed {
                    id: victim,
                    head,
                    source,
                });
            }
            let open = trimmed.iter().filter(|t| t.source.is_some()).count() as u64;
            let meta = Meta {
                next_id: id + 1,
                parked_total: index.meta.parked_total + 1,
                trimmed_total: index.meta.trimmed_total + trimmed.len() as u64,
                trimmed_open_total: index.meta.trimmed_open_total + open,
                ..index.meta
            };
            put_meta(&self.meta, txn, &meta)?;
            Ok((meta, trimmed))
        })?;
        let id = meta.next_id - 1;
        index.meta = meta;
        index.insert(id, DlqState::Open, &head.flow);
        let mut trimmed_total = meta.trimmed_total - trimmed.len() as u64;
        let mut open_total = meta.trimmed_open_total;
        open_total -= trimmed.iter().filter(|t| t.source.is_some()).count() as u64;
        for t in trimmed {
            index.remove(t.id, t.head.state, &t.head.flow);
            trimmed_total += 1;
            match t.source {
                None => events::dead_letter_trimmed(
                    t.id,
                    t.head.state.as_str(),
                    &t.head.flow,
                    &t.head.node,
                    trimmed_total,
                ),
                Some(source) => {
                    open_total += 1;
                    events::dead_letter_trimmed_open(
                        t.id,
                        &source,
                        &t.head.flow,
                        &t.head.node,
                        open_total,
                    );
                    let full = index.trimmed_open.len() >= crate::ledger::MAX_SOURCES;
                    let key = if full && !index.trimmed_open.contains_key(&source) {
                        crate::ledger::OTHER_SOURCES.to_string()
                    } else {
                        source
                    };
                    *index.trimmed_open.entry(key).or_default() += 1;
                }
            }
        }
        Ok(id)
    }

    fn read<T>(
        &self,
        f: impl FnOnce(&RoTxn<'_>) -> Result<T, StoreError>,
    ) -> Result<T, StoreError> {
        let _guard = self.resize_lock.read().unwrap_or_else(|e| e.into_inner());
        let rtxn = self.env.read_txn()?;
        f(&rtxn)
    }

    fn stored(&self, txn: &RoTxn<'_>, id: u64) -> Result<Option<Stored>, StoreError> {
        match self.entries.get(txn, &id)? {
            None => Ok(None),
            Some(value) => serde_json::from_slice(value)
                .map(Some)
                .map_err(|e| StoreError::Io(format!("dead letter {id} is unreadable: {e}"))),
        }
    }

    /// One entry.
    pub fn get(&self, id: u64) -> Result<Option<DeadLetterEntry>, StoreError> {
        self.read(|txn| Ok(self.stored(txn, id)?.map(|s| entry(id, s))))
    }

    /// The record of an entry (to replay it) and the flow it failed in.
    pub fn record(&self, id: u64) -> Result<Option<(Record, String)>, StoreError> {
        let Some(stored) = self.read(|txn| self.stored(txn, id))? else {
            return Ok(None);
        };
        let record = Record::from_line(stored.record.get().as_bytes()).map_err(|e| {
            StoreError::Io(format!("dead letter {id} has an unreadable record: {e}"))
        })?;
        Ok(Some((record, stored.flow)))
    }

    /// Entries matching `f`, oldest first, ids greater than `f.after`, at most `f.limit`
    /// (and [`MAX_LIST_ROWS`]).
    pub fn list(&self, f: &DlqFilter) -> Result<Vec<DeadLetterEntry>, StoreError> {
        let limit = f.limit.min(MAX_LIST_ROWS);
        let range = (
            f.after.map_or(Bound::Unbounded, Bound::Excluded),
            Bound::Unbounded,
        );
        let ids: Vec<u64> = {
            let index = self.index();
            let state_set = |s: DlqState| match s {
                DlqState::Open => &index.open,
                DlqState::Resolved => &index.resolved,
            };
            match (&f.flow, f.state) {
                (Some(flow), state) => match index.by_flow.get(flow) {
                    None => Vec::new(),
                    Some(ids) => ids
                        .range(range)
                        .filter(|id| state.is_none_or(|s| state_set(s).contains(id)))
                        .take(limit)
                        .copied()
                        .collect(),
                },
                (None, Some(state)) => state_set(state).range(range).take(limit).copied().collect(),
                (None, None) => {
                    let mut ids: Vec<u64> = index
                        .open
                        .range(range)
                        .take(limit)
                        .chain(index.resolved.range(range).take(limit))
                        .copied()
                        .collect();
                    ids.sort_unstable();
                    ids.truncate(limit);
                    ids
                }
            }
        };
        // Read after the index lock is released: an id trimmed meanwhile is simply skipped.
        self.read(|txn| {
            let mut out = Vec::with_capacity(ids.len());
            for id in ids {
                let Some(value) = self.entries.get(txn, &id)? else {
                    continue;
                };
                // One damaged entry must not hide the others; `get` reports it.
                match serde_json::from_slice(value) {
                    Ok(s) => out.push(entry(id, s)),
                    Err(e) => {
                        log::warn!("dead letter unreadable, not listed: id={id} error=\"{e}\"")
                    }
                }
            }
            Ok(out)
        })
    }

    /// Replaces the payload of an entry's record (the correction before a replay); false when
    /// there is no such entry. Line breaks in the payload are folded to spaces.
    pub fn update_payload(&self, id: u64, payload: Box<RawValue>) -> Result<bool, StoreError> {
        let payload = one_line(payload);
        let (_index, found) = self.write(|txn, _| {
            let Some(mut stored) = self.stored(txn, id)? else {
                return Ok(false);
            };
            let mut record = Record::from_line(stored.record.get().as_bytes()).map_err(|e| {
                StoreError::Io(format!("dead letter {id} has an unreadable record: {e}"))
            })?;
            record.payload = payload.clone();
            stored.record = line_value(&record)?;
            let value = serde_json::to_vec(&stored).map_err(io)?;
            self.entries.put(txn, &id, &value)?;
            Ok(true)
        })?;
        Ok(found)
    }

    /// Resolves an entry with `resolution` (`replayed` or `deleted`); false when there is no
    /// such entry. An entry already resolved keeps its first resolution (and answers true).
    pub fn resolve(&self, id: u64, resolution: &str) -> Result<bool, StoreError> {
        let at_ms = now_ms();
        let (mut index, outcome) = self.write(|txn, _| {
            let Some(mut stored) = self.stored(txn, id)? else {
                return Ok(None);
            };
            if stored.state == DlqState::Resolved {
                return Ok(Some(None));
            }
            stored.state = DlqState::Resolved;
            stored.resolution = Some(resolution.to_string());
            stored.resolved_at_ms = Some(at_ms);
            let head = Head {
                state: DlqState::Resolved,
                flow: stored.flow.clone(),
                node: stored.node.clone(),
            };
            self.entries
                .put(txn, &id, &serde_json::to_vec(&stored).map_err(io)?)?;
            self.heads
                .put(txn, &id, &serde_json::to_vec(&head).map_err(io)?)?;
            Ok(Some(Some(stored.flow)))
        })?;
        match outcome {
            None => Ok(false),
            Some(None) => Ok(true),
            Some(Some(flow)) => {
                index.remove(id, DlqState::Open, &flow);
                index.insert(id, DlqState::Resolved, &flow);
                Ok(true)
            }
        }
    }

    /// The open entries trimmed since the last call, by their record's source: the losses the
    /// ledger has not booked yet ([`crate::ledger::book_trimmed_dead_letters`]).
    pub fn take_trimmed_open(&self) -> BTreeMap<String, u64> {
        let mut index = self.index();
        std::mem::take(&mut index.trimmed_open)
    }

    /// Most entries kept (`dead_letters.max_rows`).
    pub fn max_rows(&self) -> u64 {
        self.max_rows.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Keeps at most `max_rows` entries from the next one parked on (a reload): a lower cap
    /// trims the oldest at that moment, as it does at a start with it, each open one counted
    /// as trimmed.
    pub fn set_max_rows(&self, max_rows: u64) {
        self.max_rows
            .store(max_rows.max(1), std::sync::atomic::Ordering::Relaxed);
    }

    /// Sizes and counters now.
    pub fn counts(&self) -> DlqCounts {
        let index = self.index();
        DlqCounts {
            open: index.open.len() as u64,
            resolved: index.resolved.len() as u64,
            parked_total: index.meta.parked_total,
            trimmed_total: index.meta.trimmed_total,
            trimmed_open_total: index.meta.trimmed_open_total,
        }
    }

    /// Stores the raw request of an `on_receipt` webhook, and its replay window row when given,
    /// in one transaction; returns once it is on disk, with its inbox id. Blocking.
    pub fn inbox_put(&self, data: &[u8], row: Option<&WindowRow>) -> Result<u64, StoreError> {
        let (mut index, id) = self.write(|txn, index| {
            let id = index.meta.inbox_next;
            self.inbox
                .put_with_flags(txn, PutFlags::APPEND, &id, data)?;
            if let Some(row) = row {
                self.put_window_row(txn, row)?;
            }
            let meta = Meta {
                inbox_next: id + 1,
                ..index.meta
            };
            put_meta(&self.meta, txn, &meta)?;
            Ok(id)
        })?;
        index.meta.inbox_next = id + 1;
        Ok(id)
    }

    /// Removes an inbox request once its flow has run (missing ids are ignored). Blocking.
    pub fn inbox_remove(&self, id: u64) -> Result<(), StoreError> {
        let (_index, _found) = self.write(|txn, _| Ok(self.inbox.delete(txn, &id)?))?;
        Ok(())
    }

    /// Every request still in the inbox, oldest first: accepted but not handled before the
    /// last stop, to replay at start.
    pub fn inbox_all(&self) -> Result<Vec<(u64, Vec<u8>)>, StoreError> {
        self.read(|txn| {
            let mut out = Vec::new();
            for item in self.inbox.iter(txn)? {
                let (id, data) = item?;
                out.push((id, data.to_vec()));
            }
            Ok(out)
        })
    }

    /// Closes the environment and waits until LMDB has closed the file, so that it can be
    /// opened again in this process.
    pub fn close(self) {
        let event = self.env.clone().prepare_for_closing();
        drop(self);
        event.wait();
    }
}

/// A test's hold on the commits: while it is armed, every commit waits before it syncs.
#[cfg(test)]
#[derive(Default)]
pub(crate) struct CommitHold {
    /// Whether armed, and how many commits wait.
    state: Mutex<(bool, usize)>,
    changed: std::sync::Condvar,
}

#[cfg(test)]
impl CommitHold {
    /// Holds every commit from now on until [`Self::release`].
    pub(crate) fn arm(&self) {
        self.state.lock().unwrap().0 = true;
    }

    /// Lets the held commits go on.
    pub(crate) fn release(&self) {
        self.state.lock().unwrap().0 = false;
        self.changed.notify_all();
    }

    /// Waits until a commit is held (at most `limit`); false when none came.
    pub(crate) fn wait_held(&self, limit: std::time::Duration) -> bool {
        let state = self.state.lock().unwrap();
        let (state, _) = self
            .changed
            .wait_timeout_while(state, limit, |s| s.1 == 0)
            .unwrap();
        state.1 > 0
    }

    fn pass(&self) {
        let mut state = self.state.lock().unwrap();
        state.1 += 1;
        self.changed.notify_all();
        state = self.changed.wait_while(state, |s| s.0).unwrap();
        state.1 -= 1;
    }
}

fn put_meta(
    db: &Database<'static, Str, Id>,
    txn: &mut RwTxn<'_>,
    meta: &Meta,
) -> Result<(), StoreError> {
    for (key, value) in META_KEYS.iter().zip(meta.values()) {
        db.put(txn, key, &value)?;
    }
    Ok(())
}

fn entry(id: u64, s: Stored) -> DeadLetterEntry {
    DeadLetterEntry {
        id,
        record: serde_json::from_str(s.record.get()).unwrap_or(serde_json::Value::Null),
        flow: s.flow,
        node: s.node,
        reason: s.reason,
        at_ms: s.at_ms,
        state: s.state,
        accepted: s.accepted,
        resolution: s.resolution,
        resolved_at_ms: s.resolved_at_ms,
    }
}

#[cfg(test)]
mod tests;
mod window;

pub use window::{WindowEntry, WindowRow};
