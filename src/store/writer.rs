//! What every store's writer thread shares: the bounded channel and the thread behind it, the
//! group-commit receive loop, and the named counters kept in a `meta` database.
//!
//! The stores differ in what a command does inside the transaction; this module holds only
//! the parts that are the same, so the ack rule ("answer after the commit") is written once
//! per store where it matters, next to the rows it protects.

use std::sync::mpsc::{self, Receiver, SyncSender, TryRecvError};
use std::sync::Mutex;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use heed::byteorder::BigEndian;
use heed::types::{Str, U64};
use heed::{Database, Env, RoTxn, RwTxn, WithoutTls};

use super::StoreError;

/// A `meta` database: counter name → big-endian `u64`.
pub type Meta = Database<'static, Str, U64<BigEndian>>;

/// A writer thread fed by a bounded channel of commands.
pub struct WriterThread<C> {
    name: String,
    tx: Mutex<Option<SyncSender<C>>>,
    thread: Mutex<Option<JoinHandle<()>>>,
}

impl<C: Send + 'static> WriterThread<C> {
    /// Starts thread `name` running `run` on the receiving end of a channel of `capacity`.
    pub fn spawn(
        name: &str,
        capacity: usize,
        run: impl FnOnce(Receiver<C>) + Send + 'static,
    ) -> Result<Self, StoreError> {
        let (tx, rx) = mpsc::sync_channel(capacity);
        let thread = std::thread::Builder::new()
            .name(name.into())
            .spawn(move || {
                crate::priority::background_thread();
                run(rx)
            })
            .map_err(|e| StoreError::Io(format!("cannot start thread {name}: {e}")))?;
        Ok(Self {
            name: name.to_string(),
            tx: Mutex::new(Some(tx)),
            thread: Mutex::new(Some(thread)),
        })
    }

    /// A sender for one command; `Closed` once the writer was told to stop.
    pub fn sender(&self) -> Result<SyncSender<C>, StoreError> {
        self.tx
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
            .ok_or(StoreError::Closed)
    }

    /// True while the writer takes commands: it was not told to stop and its thread still
    /// runs (a thread that panicked or returned leaves the channel open with nobody behind it).
    pub fn running(&self) -> bool {
        let open = self.tx.lock().unwrap_or_else(|e| e.into_inner()).is_some();
        let thread = self.thread.lock().unwrap_or_else(|e| e.into_inner());
        open && thread.as_ref().is_some_and(|t| !t.is_finished())
    }

    /// Closes the channel, lets the writer commit what is on it, and joins the thread.
    /// Idempotent.
    pub fn close(&self) {
        self.tx.lock().unwrap_or_else(|e| e.into_inner()).take();
        if let Some(t) = self.thread.lock().unwrap_or_else(|e| e.into_inner()).take() {
            if t.join().is_err() {
                log::error!("writer thread panicked: thread={}", self.name);
            }
        }
    }
}

/// The next group to commit: blocks for the first command, then takes every command already
/// waiting, up to `max`. `None` once the channel is closed and empty.
pub fn next_group<C>(rx: &Receiver<C>, max: usize) -> Option<Vec<C>> {
    let first = rx.recv().ok()?;
    let mut group = Vec::with_capacity(64);
    group.push(first);
    drain(rx, &mut group, max);
    Some(group)
}

/// Takes every command already waiting into `group`, up to `max`; false once the channel is
/// closed (and empty).
fn drain<C>(rx: &Receiver<C>, group: &mut Vec<C>, max: usize) -> bool {
    while group.len() < max {
        match rx.try_recv() {
            Ok(c) => group.push(c),
            Err(TryRecvError::Empty) => return true,
            Err(TryRecvError::Disconnected) => return false,
        }
    }
    true
}

/// Longest a group is held open for more callers, whatever the syncs cost and however many
/// keep coming: a disk whose commit takes longer than this (a worn SD card) still answers
/// within one sync of this bound.
pub const MAX_LINGER: Duration = Duration::from_millis(20);
/// Shortest step between two looks at the channel while a group waits (the kernel's timer
/// slack makes shorter sleeps last about this long anyway). The longest is an eighth of
/// [`MAX_LINGER`], whatever the wait.
const MIN_STEP: Duration = Duration::from_micros(20);

/// Group commit that grows with load: the writer does not commit while the callers it expects
/// are still arriving within one sync's time.
///
/// A commit costs one sync whatever its size, so under load the rate of answers is the group
/// size over the sync time. Taking only what is already waiting makes a group as small as the
/// moment its first caller arrived: a caller that comes a few microseconds later waits a whole
/// extra commit, and the writer syncs far more often than the load needs. So the writer
/// expects two kinds of callers in the next group: those that arrived while the last group
/// committed (gathered right after the commit, before anyone is answered, so none of them is
/// an answered caller), and the callers of the last group, each likely to send its next record
/// once answered. It waits for them while they keep coming: the group goes once all are in, or
/// once none has arrived for one sync (the mean of the last commits), or after
/// [`MAX_LINGER`] in all. A sync is the price of one more commit, so a caller still due within
/// one sync is worth waiting for, however long the callers take to come back in all (with
/// many callers sharing two cores, their round trip can be longer than a sync). A group whose
/// callers stop coming waits one sync more than it would have, and a single caller sending
/// one record after the other (the last group was one command, its own) never waits at all.
/// A steady stream of commands less than a sync apart, which do not wait for each other's
/// answers, makes each target larger than the last (the last group, expected back, and those
/// that came meanwhile): its groups are held open up to [`MAX_LINGER`], fewer syncs for at
/// most that much more time to each answer.
///
/// While it waits the writer sleeps in short steps and takes what arrived, instead of blocking
/// on the channel: a blocked receiver makes every sender wake it, one thread switch per
/// record. Nothing here answers anyone: the ack rule stays with the store (answer after the
/// synced commit).
#[derive(Debug)]
pub struct Linger<C> {
    /// Mean time of the last syncs (exponentially weighted).
    sync: Duration,
    /// Commands in the last group.
    last_group: usize,
    /// Commands that arrived while the last group committed, taken before its answers.
    carry: Vec<C>,
    /// How long the last group was held open for callers still arriving.
    held: Duration,
    /// [`MAX_LINGER`]; longer in tests, so that a slow test machine cannot end a wait early.
    max_wait: Duration,
}

impl<C> Default for Linger<C> {
    fn default() -> Self {
        Self::new()
    }
}

impl<C> Linger<C> {
    /// No commit measured yet: the first group takes only what is waiting.
    pub fn new() -> Self {
        Self {
            sync: Duration::ZERO,
            last_group: 0,
            carry: Vec::new(),
            held: Duration::ZERO,
            max_wait: MAX_LINGER,
        }
    }

    /// A linger whose waits may last up to `max_wait`.
    #[cfg(test)]
    fn with_max_wait(max_wait: Duration) -> Self {
        Self {
            max_wait,
            ..Self::new()
        }
    }

    /// How many commands the next group waits for: those that arrived while the last group
    /// committed, and the callers of the last group, coming back; at most `max`.
    pub fn target(&self, max: usize) -> usize {
        self.carry.len().saturating_add(self.last_group).min(max)
    }

    /// The longest the next group waits for the next of them: the mean sync, at most
    /// [`MAX_LINGER`].
    pub fn wait(&self) -> Duration {
        self.sync.min(self.max_wait)
    }

    /// Notes a commit of `group` commands whose sync took `took`, and takes (up to `max`) the
    /// commands that arrived meanwhile. Call it after the commit and before the answers.
    pub fn committed(&mut self, rx: &Receiver<C>, group: usize, took: Duration, max: usize) {
        self.last_group = group;
        // Weight 1/4: follows a disk that slows down within a few commits.
        self.sync = if self.sync.is_zero() {
            took
        } else {
            (self.sync * 3 + took) / 4
        };
        drain(rx, &mut self.carry, max);
    }

    /// How long the last group [`Linger::next_group`] gave was held open for callers still
    /// arriving (zero when it went at once).
    pub fn held(&self) -> Duration {
        self.held
    }

    /// Notes a failed transaction: the next group waits for nobody.
    pub fn failed(&mut self) {
        self.last_group = 0;
    }

    /// The next group: the commands gathered after the last commit and every one waiting now,
    /// else the first to come; then it waits (see the type's doc) for the expected callers, up
    /// to `max` in all. `None` once the channel is closed and empty.
    pub fn next_group(&mut self, rx: &Receiver<C>, max: usize) -> Option<Vec<C>> {
        let target = self.target(max);
        self.held = Duration::ZERO;
        let mut group = std::mem::take(&mut self.carry);
        group.reserve(target.max(64).min(max).saturating_sub(group.len()));
        let mut open = drain(rx, &mut group, max);
        if group.is_empty() {
            if !open {
                return None;
            }
            group.push(rx.recv().ok()?);
            open = drain(rx, &mut group, max);
        }
        let wait = self.wait();
        if !open || group.len() >= target || wait.is_zero() {
            return Some(group);
        }
        let step = (wait / 8).clamp(MIN_STEP, MAX_LINGER / 8);
        let began = Instant::now();
        let mut last_arrival = began;
        while group.len() < target {
            let quiet = wait.saturating_sub(last_arrival.elapsed());
            let longest = self.max_wait.saturating_sub(began.elapsed());
            let left = quiet.min(longest);
            if left.is_zero() {
                break;
            }
            std::thread::sleep(step.min(left));
            let had = group.len();
            if !drain(rx, &mut group, max) {
                break;
            }
            if group.len() > had {
                last_arrival = Instant::now();
            }
        }
        self.held = began.elapsed();
        Some(group)
    }
}

/// Reads named counters (missing ones are 0).
pub fn read_meta<const N: usize>(
    meta: &Meta,
    txn: &RoTxn<'_, WithoutTls>,
    keys: &[&str; N],
    fields: [&mut u64; N],
) -> heed::Result<()> {
    for (key, field) in keys.iter().zip(fields) {
        *field = meta.get(txn, key)?.unwrap_or(0);
    }
    Ok(())
}

/// Writes named counters in the caller's transaction, beside the rows they describe: every
/// one, or with `saved` (the values the last commit wrote) only those that changed since. A
/// group of appends moves four of a queue's fifteen; each put costs about a thousand
/// instructions.
pub fn write_meta<const N: usize>(
    meta: &Meta,
    txn: &mut RwTxn<'_>,
    keys: &[&str; N],
    fields: [&mut u64; N],
    saved: Option<[&mut u64; N]>,
) -> heed::Result<()> {
    let saved = saved.map(|s| s.map(|v| *v));
    for (i, (key, value)) in keys.iter().zip(fields).enumerate() {
        if saved.is_some_and(|s| s[i] == *value) {
            continue;
        }
        meta.put(txn, key, value)?;
    }
    Ok(())
}

/// Commits the counters of `state` that differ from `saved` in a transaction of their own
/// (a writer's counters at a clean stop, when no rows go with them); then `saved` is `state`.
/// `fields` names a state's counters in the order of `keys`.
pub fn commit_meta<S: Copy + PartialEq, const N: usize>(
    env: &Env<WithoutTls>,
    meta: &Meta,
    keys: &[&str; N],
    state: S,
    saved: &mut S,
    fields: fn(&mut S) -> [&mut u64; N],
) -> heed::Result<()> {
    if state == *saved {
        return Ok(());
    }
    let (mut new, mut old) = (state, *saved);
    let mut txn = env.write_txn()?;
    write_meta(
        meta,
        &mut txn,
        keys,
        fields(&mut new),
        Some(fields(&mut old)),
    )?;
    txn.commit()?;
    *saved = state;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;

    const HOUR: Duration = Duration::from_secs(3600);

    #[test]
    fn a_writer_whose_thread_ended_is_not_running_though_nobody_closed_it() {
        let w = WriterThread::<u8>::spawn("test-writer", 4, |rx| {
            let _ = rx.recv();
            panic!("the writer's own failure");
        })
        .unwrap();
        assert!(w.running());
        w.sender().unwrap().send(1).unwrap();
        let deadline = Instant::now() + Duration::from_secs(10);
        while w.running() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(5));
        }
        assert!(!w.running(), "a panicked writer thread is seen as stopped");
        w.close();
        assert!(!w.running());
    }

    #[test]
    fn a_single_caller_sending_one_record_after_the_other_is_committed_without_waiting() {
        let (tx, rx) = mpsc::sync_channel(16);
        let mut linger = Linger::with_max_wait(HOUR);
        linger.committed(&rx, 1, HOUR, 16);
        assert_eq!(linger.target(16), 1);
        tx.send(7).unwrap();
        assert_eq!(linger.next_group(&rx, 16), Some(vec![7]));
    }

    #[test]
    fn a_group_waits_for_the_callers_of_the_last_group_besides_those_that_came_meanwhile() {
        let (tx, rx) = mpsc::sync_channel(64);
        let mut linger = Linger::with_max_wait(HOUR);
        // Two callers arrive while a group of four commits; the four come back after it.
        tx.send(1).unwrap();
        tx.send(2).unwrap();
        linger.committed(&rx, 4, HOUR, 64);
        assert_eq!(linger.target(64), 6);
        let late = std::thread::spawn(move || {
            for n in 3..=6 {
                tx.send(n).unwrap();
            }
            tx
        });
        assert_eq!(linger.next_group(&rx, 64), Some(vec![1, 2, 3, 4, 5, 6]));
        drop(late.join().unwrap());
        assert_eq!(linger.next_group(&rx, 64), None);
    }

    #[test]
    fn a_group_whose_callers_stop_coming_goes_one_sync_later_and_says_how_long() {
        let (tx, rx) = mpsc::sync_channel(16);
        let mut linger = Linger::with_max_wait(HOUR);
        let sync = Duration::from_millis(5);
        linger.committed(&rx, 2, sync, 16);
        tx.send(1).unwrap();
        // The other caller of the last group never comes: the group goes after one sync.
        assert_eq!(linger.next_group(&rx, 16), Some(vec![1]));
        assert!(linger.held() >= sync, "held {:?}", linger.held());
        assert!(linger.held() < HOUR);
        // A group that has its callers at once is not held.
        linger.committed(&rx, 1, sync, 16);
        tx.send(2).unwrap();
        assert_eq!(linger.next_group(&rx, 16), Some(vec![2]));
        assert_eq!(linger.held(), Duration::ZERO);
    }

    #[test]
    fn a_group_stays_open_past_one_sync_while_its_callers_keep_coming() {
        let (tx, rx) = mpsc::sync_channel(64);
        let mut linger = Linger::with_max_wait(HOUR);
        let sync = Duration::from_millis(400);
        linger.committed(&rx, 6, sync, 64);
        tx.send(0).unwrap();
        // Five more callers, one every 100 ms: 500 ms in all, longer than the sync, but each
        // comes well within one sync of the one before.
        let late = std::thread::spawn(move || {
            for n in 1..=5 {
                std::thread::sleep(Duration::from_millis(100));
                tx.send(n).unwrap();
            }
            tx
        });
        assert_eq!(linger.next_group(&rx, 64), Some((0..=5).collect()));
        assert!(linger.held() > sync, "held {:?}", linger.held());
        drop(late.join().unwrap());
    }

    #[test]
    fn a_group_is_held_open_at_most_its_maximum_while_callers_keep_coming() {
        let (tx, rx) = mpsc::sync_channel(64);
        let most = Duration::from_millis(600);
        let mut linger = Linger::with_max_wait(most);
        // A sync shorter than the maximum: the group outlives it while callers keep coming.
        let sync = Duration::from_millis(200);
        linger.committed(&rx, 60, sync, 64);
        tx.send(0).unwrap();
        // A caller every 20 ms, each within the sync of the one before, more than the group
        // expects to take within its maximum: it goes after the maximum with those that came.
        let stop = Arc::new(AtomicBool::new(false));
        let keep = Arc::clone(&stop);
        let late = std::thread::spawn(move || {
            let mut n = 1;
            while !keep.load(Ordering::Relaxed) {
                std::thread::sleep(Duration::from_millis(20));
                if tx.try_send(n).is_err() {
                    break;
                }
                n += 1;
            }
        });
        let group = linger.next_group(&rx, 64).unwrap();
        stop.store(true, Ordering::Relaxed);
        assert!(group.len() < 60, "{} callers", group.len());
        assert!(linger.held() >= most, "held {:?}", linger.held());
        assert!(linger.held() < HOUR);
        late.join().unwrap();
    }

    #[test]
    fn a_group_never_waits_for_more_than_its_maximum() {
        let (tx, rx) = mpsc::sync_channel(64);
        let mut linger = Linger::with_max_wait(HOUR);
        linger.committed(&rx, 40, HOUR, 8);
        assert_eq!(linger.target(8), 8);
        for n in 0..10 {
            tx.send(n).unwrap();
        }
        assert_eq!(linger.next_group(&rx, 8), Some((0..8).collect()));
        drop(tx);
        assert_eq!(linger.next_group(&rx, 8), Some(vec![8, 9]));
    }

    #[test]
    fn a_closed_channel_ends_the_wait_with_what_arrived() {
        let (tx, rx) = mpsc::sync_channel(16);
        let mut linger = Linger::with_max_wait(HOUR);
        linger.committed(&rx, 8, HOUR, 16);
        tx.send(1).unwrap();
        drop(tx);
        assert_eq!(linger.next_group(&rx, 16), Some(vec![1]));
        assert_eq!(linger.next_group(&rx, 16), None);
    }

    #[test]
    fn after_a_failed_transaction_the_next_group_waits_for_nobody() {
        let (tx, rx) = mpsc::sync_channel(16);
        let mut linger = Linger::with_max_wait(HOUR);
        linger.committed(&rx, 8, HOUR, 16);
        linger.failed();
        assert_eq!(linger.target(16), 0);
        tx.send(1).unwrap();
        assert_eq!(linger.next_group(&rx, 16), Some(vec![1]));
    }

    #[test]
    fn a_disk_without_measured_syncs_makes_no_group_wait() {
        let (tx, rx) = mpsc::sync_channel(16);
        let mut linger: Linger<u32> = Linger::with_max_wait(HOUR);
        linger.committed(&rx, 8, Duration::ZERO, 16);
        assert_eq!(linger.wait(), Duration::ZERO);
        tx.send(1).unwrap();
        assert_eq!(linger.next_group(&rx, 16), Some(vec![1]));
    }

    #[test]
    fn only_the_counters_that_moved_since_the_last_commit_are_written() {
        let dir = tempfile::tempdir().unwrap();
        let env = crate::store::lmdb::open(&dir.path().join("meta.mdb"), 1 << 20, 1).unwrap();
        let meta: Meta = env
            .create_databases_and_commit(env.write_txn().unwrap(), |opener, txn| {
                let meta = opener.create_database(txn, Some("meta"))?;
                Ok::<_, heed::Error>(heed::CommitOrAbort::<_, ()>::Commit(meta))
            })
            .unwrap()
            .unwrap_commit();
        let keys = ["a", "b", "c"];
        let read = |env: &Env<WithoutTls>| {
            let txn = env.read_txn().unwrap();
            let (mut a, mut b, mut c) = (0, 0, 0);
            read_meta(&meta, &txn, &keys, [&mut a, &mut b, &mut c]).unwrap();
            [a, b, c]
        };
        // Without `saved` every key is written.
        let (mut a, mut b, mut c) = (1, 2, 3);
        let mut txn = env.write_txn().unwrap();
        write_meta(&meta, &mut txn, &keys, [&mut a, &mut b, &mut c], None).unwrap();
        txn.commit().unwrap();
        assert_eq!(read(&env), [1, 2, 3]);
        // A key changed on disk behind the writer's back shows which ones it writes: with
        // `saved`, only `b` (2 -> 7) is put; `a` and `c` are left as they are.
        let mut txn = env.write_txn().unwrap();
        meta.put(&mut txn, "a", &40).unwrap();
        meta.put(&mut txn, "c", &60).unwrap();
        txn.commit().unwrap();
        fn fields(s: &mut [u64; 3]) -> [&mut u64; 3] {
            s.each_mut()
        }
        let mut saved = [a, b, c];
        commit_meta(&env, &meta, &keys, [1, 7, 3], &mut saved, fields).unwrap();
        assert_eq!(read(&env), [40, 7, 60]);
        assert_eq!(saved, [1, 7, 3]);
    }
}
