//! One commit for a batch: the rows a batch's records append to a durable queue while the batch
//! runs are held back and handed to that queue's writer as one command, which the writer applies
//! in one transaction (one sync, one commit), so a batch is stored whole or not at all.
//!
//! A batch's records each run through the flows on their own (the engine runs every record's
//! nodes once), and a row reaches its queue several layers below the batch (engine, sink, queue).
//! Rather than thread a batch handle through every sink's `deliver`, the batch's task carries
//! it: [`in_one_commit`] runs the records' futures with a task-local list of held appends, and
//! after each poll of them sends each queue the appends its records made during the poll,
//! as one [`Sent::Batch`]. The records' runs are polled together, and nothing before a
//! queue's append waits in the plain flows (source, maps, filters, sinks), so every record of
//! the batch reaches its queue in the first poll and the batch is one group. A record held up on
//! the way (a dead-letter write, a sink before the queue that waits for its destination) reaches
//! the queue in a later poll, and its row in a later commit; the answer still comes only after
//! every row's commit.
//!
//! Outside [`in_one_commit`] nothing is held: an append goes to its writer at once.

use std::cell::RefCell;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::Ordering;
use std::sync::mpsc::{SyncSender, TrySendError};
use std::sync::Arc;
use std::task::Poll;

use super::commit::{Command, Sent};
use super::{Shared, StoreError};
use crate::telemetry::events;

tokio::task_local! {
    /// The appends held for the batch running on this task.
    static HELD: RefCell<Vec<Held>>;
}

/// One append held for its queue's writer.
struct Held {
    shared: Arc<Shared>,
    sender: SyncSender<Sent>,
    command: Command,
}

/// Runs `records` (one future for each record of a batch) together, and returns their outputs
/// in order, so that the rows they append to each durable queue during one poll reach that
/// queue's writer together, in one transaction; see the module doc.
///
/// Each poll polls every future not yet done, in order (a general join may stop early within a
/// poll to yield, which would split the batch); a batch's futures are woken together by their
/// commit, so a batch of `n` records costs a few polls of `n`.
pub async fn in_one_commit<F: Future>(records: Vec<F>) -> Vec<F::Output> {
    let mut running: Vec<Option<Pin<Box<F>>>> =
        records.into_iter().map(|f| Some(Box::pin(f))).collect();
    let mut outputs: Vec<Option<F::Output>> = running.iter().map(|_| None).collect();
    let mut left = running.len();
    let all = std::future::poll_fn(move |cx| {
        for (slot, out) in running.iter_mut().zip(outputs.iter_mut()) {
            let Some(f) = slot else { continue };
            if let Poll::Ready(v) = f.as_mut().poll(cx) {
                *out = Some(v);
                *slot = None;
                left -= 1;
            }
        }
        flush();
        if left == 0 {
            Poll::Ready(std::mem::take(&mut outputs).into_iter().flatten().collect())
        } else {
            Poll::Pending
        }
    });
    HELD.scope(RefCell::new(Vec::new()), all).await
}

/// Holds `command` (for the writer behind `sender`, of queue `shared`) for the batch running
/// on this task; gives it back when no batch runs here.
pub(super) fn hold(
    shared: &Arc<Shared>,
    sender: SyncSender<Sent>,
    command: Command,
) -> Option<(SyncSender<Sent>, Command)> {
    let mut slot = Some((sender, command));
    let _ = HELD.try_with(|list| {
        if let Some((sender, command)) = slot.take() {
            list.borrow_mut().push(Held {
                shared: Arc::clone(shared),
                sender,
                command,
            });
        }
    });
    slot
}

/// Sends each queue the appends held for it, as one command.
fn flush() {
    let held = HELD
        .try_with(|list| std::mem::take(&mut *list.borrow_mut()))
        .unwrap_or_default();
    // Queues in the order of their first row; each queue's rows in the order they came.
    type Queue = (Arc<Shared>, SyncSender<Sent>, Vec<Command>);
    let mut queues: Vec<Queue> = Vec::new();
    for h in held {
        match queues.iter_mut().find(|q| Arc::ptr_eq(&q.0, &h.shared)) {
            Some(q) => q.2.push(h.command),
            None => queues.push((h.shared, h.sender, vec![h.command])),
        }
    }
    for (shared, sender, mut commands) in queues {
        let sent = if commands.len() == 1 {
            Sent::One(commands.remove(0))
        } else {
            Sent::Batch(commands)
        };
        send(&shared, &sender, sent);
    }
}

/// Sends `sent` (an append or a batch of them) to the writer; when the channel is full or
/// closed, every append in it is answered with the refusal, as a single append would be.
pub(super) fn send(shared: &Shared, sender: &SyncSender<Sent>, sent: Sent) {
    // Counted before the send: the writer may take it (and count it off) at once.
    let queued = &shared.counters.writer_queued;
    queued.fetch_add(1, Ordering::Relaxed);
    let (sent, error) = match sender.try_send(sent) {
        Ok(()) => return,
        Err(TrySendError::Full(c)) => (c, StoreError::Busy),
        Err(TrySendError::Disconnected(c)) => (c, StoreError::Closed),
    };
    queued.fetch_sub(1, Ordering::Relaxed);
    let refused = sent.refuse(&error);
    if error == StoreError::Busy {
        for _ in 0..refused {
            events::queue_writer_channel_full(&shared.sink, &shared.counters);
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::{Duration, Instant};

    use super::super::{encode_row, row_bytes, DurableQueue, QueueCounters, Tag};
    use super::*;
    use crate::admission::OnFull;

    fn open(dir: &std::path::Path) -> DurableQueue {
        DurableQueue::open(
            &dir.join("push_queue.db"),
            "push",
            OnFull::Block,
            1 << 20,
            Arc::new(QueueCounters::default()),
        )
        .unwrap()
    }

    /// The appends of rows `0..n`, the way a batch's records reach the queue.
    fn appends(
        q: &DurableQueue,
        n: usize,
    ) -> Vec<impl Future<Output = Result<u64, StoreError>> + '_> {
        let tag = Tag {
            source: "ingest/t".into(),
            tracked: true,
        };
        (0..n)
            .map(|i| {
                let line = format!("{{\"i\":{i}}}");
                let r = q.gate().admit(row_bytes(line.len())).unwrap();
                q.append(encode_row(&tag, line.as_bytes()), r)
            })
            .collect()
    }

    #[test]
    fn a_batch_is_stored_in_one_commit_in_order_and_answered_only_after_a_slow_commit() {
        let dir = tempfile::tempdir().unwrap();
        let q = open(dir.path());
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .build()
            .unwrap();
        let commits = || q.counters().commits_total.load(Ordering::Relaxed);
        let before = commits();
        let slow = Duration::from_millis(400);
        q.set_commit_delay(slow);
        let began = Instant::now();
        let seqs = rt.block_on(in_one_commit(appends(&q, 100)));
        let took = began.elapsed();
        let seqs: Vec<u64> = seqs.into_iter().map(Result::unwrap).collect();
        assert_eq!(seqs, (0..100).collect::<Vec<u64>>(), "stored in order");
        assert_eq!(commits() - before, 1, "one commit for the whole batch");
        assert!(
            took >= slow,
            "answered after {took:?}, before the slow commit ended"
        );
        let rows = q.peek(usize::MAX).unwrap();
        assert_eq!(rows.len(), 100);
        assert_eq!(rows[99].line, br#"{"i":99}"#);
        assert_eq!(q.ledger()["ingest/t"].acked, 100);
    }

    #[test]
    fn appends_outside_a_batch_are_sent_at_once_one_command_each() {
        let dir = tempfile::tempdir().unwrap();
        let q = open(dir.path());
        let rt = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        for i in 0..3 {
            let seq = rt.block_on(appends(&q, 1).remove(0));
            assert_eq!(seq, Ok(i));
        }
        let c = q.counters();
        assert_eq!(c.committed_commands_total.load(Ordering::Relaxed), 3);
        assert_eq!(c.commits_total.load(Ordering::Relaxed), 3);
        assert_eq!(c.writer_queued.load(Ordering::Relaxed), 0);
    }
}
