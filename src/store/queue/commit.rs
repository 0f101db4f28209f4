//! The queue's writer: the commands callers send it, the state it keeps, and the thread that
//! applies each group of commands in one transaction and answers only after the commit (the
//! ack rule of the [queue](super)).

use std::collections::BTreeMap;
use std::sync::atomic::Ordering;
use std::sync::mpsc::Receiver;
use std::sync::Arc;
use std::time::{Duration, Instant};

use heed::{PutFlags, RwTxn, WithoutTls};
use tokio::sync::oneshot;

use super::dead::{dead_letter_json, revive, ReplayError};
use super::row::{decode_row, encode_row, row_bytes, tracked_source};
use super::{Shared, StoreError};
use crate::admission::{OnFull, Reservation};
use crate::ledger::Counts;
use crate::store::lmdb;
use crate::store::writer::{commit_meta, write_meta, Linger, Meta};
use crate::telemetry::events;

/// Most commands applied in one transaction.
const MAX_GROUP: usize = 4096;

pub(super) type Reply<T> = oneshot::Sender<Result<T, StoreError>>;

pub(super) enum Command {
    Append {
        /// The encoded row (header and line).
        value: Vec<u8>,
        /// Released after the commit, once the committed bytes are published.
        _reservation: Reservation,
        reply: Reply<u64>,
    },
    /// Deletes exactly these rows (a batch its destination confirmed), counted delivered; a
    /// seq no longer queued is skipped. Never a range: a dead letter replayed while the batch
    /// was on its way may lie between its seqs.
    RemoveDelivered {
        seqs: Vec<u64>,
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
    /// Deletes every queued row (the sink was removed with `discard`), counted discarded.
    Discard {
        reply: Reply<u64>,
    },
}

/// What the writer's channel carries: one caller's command, or the appends of one batch
/// ([`in_one_commit`](super::in_one_commit)), which the writer applies in the same transaction.
pub(super) enum Sent {
    One(Command),
    Batch(Vec<Command>),
}

impl Sent {
    /// Answers every append in it with `error` (the channel refused it); returns how many.
    pub(super) fn refuse(self, error: &StoreError) -> u64 {
        let commands = match self {
            Sent::One(c) => vec![c],
            Sent::Batch(cs) => cs,
        };
        let mut refused = 0;
        for c in commands {
            // Only appends are sent this way; any other command's caller sees its reply
            // dropped, which reads as `Closed`.
            if let Command::Append { reply, .. } = c {
                let _ = reply.send(Err(error.clone()));
                refused += 1;
            }
        }
        refused
    }
}

/// What the writer knows; published to the gate and the counters after each commit.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(super) struct State {
    pub(super) next_seq: u64,
    pub(super) used: u64,
    pub(super) rows: u64,
    pub(super) evicted_total: u64,
    pub(super) dropped_total: u64,
    pub(super) write_errors_total: u64,
    pub(super) blocked_total: u64,
    pub(super) sent_total: u64,
    pub(super) dead_next: u64,
    pub(super) dead_rows: u64,
    pub(super) dead_lettered_total: u64,
    pub(super) dead_trimmed_total: u64,
    pub(super) appended_total: u64,
    pub(super) dead_replayed_total: u64,
    pub(super) dead_deleted_total: u64,
    pub(super) discarded_total: u64,
}

pub(super) const META_KEYS: [&str; 16] = [
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
    "discarded_total",
];

impl State {
    pub(super) fn fields(&mut self) -> [&mut u64; 16] {
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
            &mut self.discarded_total,
        ]
    }
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

pub(super) struct Writer {
    shared: Arc<Shared>,
    state: State,
    /// `state` as the last commit wrote it: a commit writes only the meta keys that moved.
    saved: State,
    /// The committed ledger counts by source.
    sources: BTreeMap<String, Counts>,
    /// The counts the open transaction changed (its new values); merged into `sources` after
    /// the commit, dropped when it fails.
    touched: BTreeMap<String, Counts>,
    /// The open transaction puts rows in (appends, replays): the deliverer is woken after it.
    adds_rows: bool,
}

impl Writer {
    pub(super) fn new(
        shared: Arc<Shared>,
        state: State,
        sources: BTreeMap<String, Counts>,
    ) -> Self {
        Self {
            shared,
            state,
            saved: state,
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

    pub(super) fn run(mut self, rx: Receiver<Sent>) {
        let mut linger = Linger::new();
        while let Some(group) = linger.next_group(&rx, MAX_GROUP) {
            self.shared
                .counters
                .held_nanos_total
                .fetch_add(nanos(linger.held()), Ordering::Relaxed);
            let c = &self.shared.counters.writer_queued;
            let callers = group.len();
            let n = callers as u64;
            // Saturating, so a count can never wrap; sends are counted before they happen.
            let _ = c.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |v| {
                Some(v.saturating_sub(n))
            });
            let mut commands = Vec::with_capacity(callers);
            for sent in group {
                match sent {
                    Sent::One(c) => commands.push(c),
                    Sent::Batch(cs) => commands.extend(cs),
                }
            }
            self.commit_group(commands, callers, &mut linger, &rx);
        }
        self.flush_counters();
    }

    /// Refusals and channel drops are counted outside the writer and reach the disk with the
    /// next commit; at a clean stop, commit them (and a failed last commit's write error) on
    /// their own so a restart keeps them. (After a crash, the ones since the last commit are
    /// missing from the restored counters.)
    fn flush_counters(&mut self) {
        self.state.blocked_total = self.shared.gate.blocked_total();
        self.state.dropped_total = self.shared.counters.dropped_total.load(Ordering::Relaxed);
        let (env, meta) = (&self.shared.env, &self.shared.meta);
        let saved = &mut self.saved;
        if let Err(e) = commit_meta(env, meta, &META_KEYS, self.state, saved, State::fields) {
            log::error!(
                "queue counters not saved at stop: sink={} error=\"{e}\"",
                self.shared.sink
            );
        }
    }

    /// Applies and commits `group`, which `callers` sent (a batch is one caller), then answers
    /// them; after a commit and before the answers, `linger` notes the sync and takes what
    /// arrived meanwhile from `rx`.
    fn commit_group(
        &mut self,
        group: Vec<Command>,
        callers: usize,
        linger: &mut Linger<Sent>,
        rx: &Receiver<Sent>,
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
                self.saved = self.state;
                linger.committed(rx, callers, synced_in, MAX_GROUP);
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
                Command::RemoveDelivered { reply, .. } | Command::Discard { reply } => {
                    Pending::Count(reply, outcome.number())
                }
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
        let (mut state, mut saved) = (self.state, self.saved);
        if let Err(e) = write_meta(
            &self.shared.meta,
            &mut txn,
            &META_KEYS,
            state.fields(),
            Some(saved.fields()),
        ) {
            txn.abort();
            return Err((e.into(), pending));
        }
        for (source, counts) in &self.touched {
            if let Err(e) = write_ledger(&self.shared.ledger, &mut txn, source, counts) {
                txn.abort();
                return Err((e.into(), pending));
            }
        }
        #[cfg(test)]
        self.shared.slow_commit_for_tests();
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
            Command::RemoveDelivered { seqs, .. } => {
                let mut bytes = 0;
                let mut found = Vec::with_capacity(seqs.len());
                let mut delivered: BTreeMap<String, u64> = BTreeMap::new();
                for seq in seqs {
                    let Some(value) = s.rows.get(txn, seq)? else {
                        continue;
                    };
                    bytes += row_bytes(decode_row(value).1.len());
                    found.push(*seq);
                    if let Some(source) = tracked_source(value) {
                        match delivered.get_mut(source) {
                            Some(n) => *n += 1,
                            None => {
                                delivered.insert(source.to_string(), 1);
                            }
                        }
                    }
                }
                for seq in &found {
                    s.rows.delete(txn, seq)?;
                }
                for (source, n) in delivered {
                    self.tally(&source, |c| {
                        c.pending = c.pending.saturating_sub(n);
                        c.delivered += n;
                    });
                }
                let count = found.len() as u64;
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
            Command::Discard { .. } => {
                let mut discarded: BTreeMap<String, u64> = BTreeMap::new();
                let mut count = 0u64;
                for item in s.rows.iter(txn)? {
                    let (_, value) = item?;
                    count += 1;
                    if let Some(source) = tracked_source(value) {
                        *discarded.entry(source.to_string()).or_default() += 1;
                    }
                }
                s.rows.clear(txn)?;
                for (source, n) in discarded {
                    self.tally(&source, |c| {
                        c.pending = c.pending.saturating_sub(n);
                        c.discarded += n;
                    });
                }
                self.state.used = 0;
                self.state.rows = 0;
                self.state.discarded_total += count;
                Ok(Outcome::Number(count))
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
const LEDGER_FIELDS: [&str; 6] = [
    "acked",
    "pending",
    "delivered",
    "evicted",
    "dead_lettered",
    "discarded",
];

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
        "discarded" => &mut c.discarded,
        _ => return None,
    })
}

/// Reads the ledger counts (`<field>:<source>` keys) of the queue.
pub(super) fn read_ledger(
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
