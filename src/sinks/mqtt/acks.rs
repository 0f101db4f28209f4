//! Which publish a broker's PUBACK confirms: the `mqtt` sink settles a QoS 1 record only after
//! its PUBACK, but the client (rumqttc) hands out packet ids only when it writes a publish.
//!
//! The client writes publishes in the order they were queued, and tells each write as
//! `Outgoing::Publish(pkid)`. So the waiters are kept in that order too: a write with a packet
//! id not seen before belongs to the oldest waiter without one; a write with a packet id still
//! waiting for its PUBACK is a retransmission (after a reconnect); `AwaitAck(pkid)` holds the
//! oldest waiter back until that id is free (the broker acked out of order). QoS 0 writes carry
//! id 0 and settle as unconfirmed at once.
//!
//! When a connection drops, the client moves what it had in flight and in its channel to a list
//! it resends on the next connection, but drops that list when the broker answers the new
//! connection without the old session (a broker restarted without persistence). Every waiter
//! queued before the drop then fails, and its source is told to retry: nothing is settled that
//! the broker did not confirm.

use std::collections::{HashMap, VecDeque};

use tokio::sync::oneshot;

/// How a publish ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Ack {
    /// The broker acknowledged it (QoS 1).
    Confirmed,
    /// Written to the network with nothing to confirm it (QoS 0).
    Unconfirmed,
}

/// The answer a waiter gets.
pub type Answer = Result<Ack, String>;

struct Waiter {
    id: u64,
    done: oneshot::Sender<Answer>,
}

/// The publishes of one client that wait for their write or their PUBACK.
#[derive(Default)]
pub struct Acks {
    next_id: u64,
    /// Queued, not yet written (no packet id), oldest first.
    queued: VecDeque<Waiter>,
    /// Written with a packet id, waiting for its PUBACK.
    inflight: HashMap<u16, Waiter>,
    /// A publish the client holds back until its packet id is acked.
    collided: Option<(u16, Waiter)>,
    /// True between a ConnAck and the next error.
    connected: bool,
    /// Waiters up to this id were with the client when the connection last dropped.
    lost_mark: Option<u64>,
}

impl Acks {
    /// Publishes someone still waits for. A waiter whose caller gave up (its PUBACK timed out)
    /// keeps its place, so the writes after it still find theirs, but no longer counts: the
    /// queue's bound is about the records sources wait on.
    pub fn depth(&self) -> usize {
        let live = |w: &Waiter| !w.done.is_closed();
        self.queued.iter().filter(|w| live(w)).count()
            + self.inflight.values().filter(|w| live(w)).count()
            + self.collided.iter().filter(|(_, w)| live(w)).count()
    }

    /// A new waiter for the publish about to be queued; returns its id and its answer.
    pub fn add(&mut self) -> (u64, oneshot::Receiver<Answer>) {
        let (done, answer) = oneshot::channel();
        let id = self.next_id;
        self.next_id += 1;
        self.queued.push_back(Waiter { id, done });
        (id, answer)
    }

    /// Takes back waiter `id` when its publish could not be queued after all.
    pub fn cancel(&mut self, id: u64) {
        if self.queued.back().is_some_and(|w| w.id == id) {
            self.queued.pop_back();
        }
    }

    /// The client wrote a publish with packet id `pkid` (0 for QoS 0).
    pub fn written(&mut self, pkid: u16) {
        if pkid == 0 {
            if let Some(w) = self.queued.pop_front() {
                let _ = w.done.send(Ok(Ack::Unconfirmed));
            }
            return;
        }
        if self.inflight.contains_key(&pkid) {
            return; // a retransmission
        }
        if self.collided.as_ref().is_some_and(|(id, _)| *id == pkid) {
            if let Some((id, w)) = self.collided.take() {
                self.inflight.insert(id, w);
            }
            return;
        }
        if let Some(w) = self.queued.pop_front() {
            self.inflight.insert(pkid, w);
        }
    }

    /// The client holds the oldest queued publish back until `pkid` is acked.
    pub fn held_back(&mut self, pkid: u16) {
        if let Some(w) = self.queued.pop_front() {
            self.collided = Some((pkid, w));
        }
    }

    /// The broker acknowledged packet id `pkid`.
    pub fn acked(&mut self, pkid: u16) -> bool {
        match self.inflight.remove(&pkid) {
            Some(w) => {
                let _ = w.done.send(Ok(Ack::Confirmed));
                true
            }
            None => false,
        }
    }

    /// The connection dropped (or could not be made).
    pub fn disconnected(&mut self) {
        if self.connected {
            // The client moved every publish it had to its resend list.
            self.lost_mark = self.next_id.checked_sub(1).max(self.lost_mark);
        }
        self.connected = false;
    }

    /// The broker accepted a connection; `session_present` false means it forgot the old
    /// session, and the client dropped its resend list: those waiters fail.
    pub fn connected(&mut self, session_present: bool) {
        self.connected = true;
        let Some(mark) = self.lost_mark.take() else {
            return;
        };
        if session_present {
            return;
        }
        let why = "the broker lost the session: publish not confirmed";
        while self.queued.front().is_some_and(|w| w.id <= mark) {
            if let Some(w) = self.queued.pop_front() {
                let _ = w.done.send(Err(why.into()));
            }
        }
        let lost: Vec<u16> = self
            .inflight
            .iter()
            .filter(|(_, w)| w.id <= mark)
            .map(|(k, _)| *k)
            .collect();
        for k in lost {
            if let Some(w) = self.inflight.remove(&k) {
                let _ = w.done.send(Err(why.into()));
            }
        }
        if self.collided.as_ref().is_some_and(|(_, w)| w.id <= mark) {
            if let Some((_, w)) = self.collided.take() {
                let _ = w.done.send(Err(why.into()));
            }
        }
    }

    /// Fails every waiter (the sink stops).
    pub fn fail_all(&mut self, why: &str) {
        for w in self.queued.drain(..) {
            let _ = w.done.send(Err(why.into()));
        }
        for (_, w) in self.inflight.drain() {
            let _ = w.done.send(Err(why.into()));
        }
        if let Some((_, w)) = self.collided.take() {
            let _ = w.done.send(Err(why.into()));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn answer(rx: &mut oneshot::Receiver<Answer>) -> Option<Answer> {
        rx.try_recv().ok()
    }

    #[test]
    fn each_puback_confirms_the_publish_written_with_its_id() {
        let mut a = Acks::default();
        a.connected(false);
        let (_, mut r1) = a.add();
        let (_, mut r2) = a.add();
        a.written(7);
        a.written(8);
        assert!(a.acked(8));
        assert_eq!(answer(&mut r2), Some(Ok(Ack::Confirmed)));
        assert_eq!(answer(&mut r1), None);
        assert!(a.acked(7));
        assert_eq!(answer(&mut r1), Some(Ok(Ack::Confirmed)));
        assert_eq!(a.depth(), 0);
    }

    #[test]
    fn a_retransmission_after_a_reconnect_keeps_its_waiter() {
        let mut a = Acks::default();
        a.connected(false);
        let (_, mut r1) = a.add();
        a.written(1);
        a.disconnected();
        a.connected(true);
        a.written(1);
        let (_, mut r2) = a.add();
        a.written(2);
        assert!(a.acked(1) && a.acked(2));
        assert_eq!(answer(&mut r1), Some(Ok(Ack::Confirmed)));
        assert_eq!(answer(&mut r2), Some(Ok(Ack::Confirmed)));
    }

    #[test]
    fn a_broker_that_lost_the_session_fails_what_it_had_but_not_what_came_after() {
        let mut a = Acks::default();
        a.connected(false);
        let (_, mut sent) = a.add();
        a.written(1);
        let (_, mut queued) = a.add();
        a.disconnected();
        // Queued while the broker was away: still in the client's channel, not lost.
        let (_, mut later) = a.add();
        a.disconnected(); // a failed reconnect attempt changes nothing
        a.connected(false);
        assert!(matches!(answer(&mut sent), Some(Err(_))));
        assert!(matches!(answer(&mut queued), Some(Err(_))));
        assert_eq!(answer(&mut later), None);
        a.written(1);
        assert!(a.acked(1));
        assert_eq!(answer(&mut later), Some(Ok(Ack::Confirmed)));
    }

    #[test]
    fn qos0_writes_settle_unconfirmed_and_a_collision_waits_for_its_id() {
        let mut a = Acks::default();
        a.connected(false);
        let (_, mut q0) = a.add();
        a.written(0);
        assert_eq!(answer(&mut q0), Some(Ok(Ack::Unconfirmed)));
        let (_, mut first) = a.add();
        a.written(3);
        let (_, mut second) = a.add();
        a.held_back(3);
        assert!(a.acked(3));
        assert_eq!(answer(&mut first), Some(Ok(Ack::Confirmed)));
        a.written(3);
        assert!(a.acked(3));
        assert_eq!(answer(&mut second), Some(Ok(Ack::Confirmed)));
    }

    #[test]
    fn a_waiter_whose_caller_gave_up_keeps_its_place_but_not_its_count() {
        let mut a = Acks::default();
        a.connected(false);
        let (_, gave_up) = a.add();
        let (_, mut waits) = a.add();
        drop(gave_up);
        assert_eq!(a.depth(), 1);
        a.written(1);
        a.written(2);
        assert!(a.acked(2));
        assert_eq!(answer(&mut waits), Some(Ok(Ack::Confirmed)));
        assert_eq!(a.depth(), 0);
    }

    #[test]
    fn a_publish_that_could_not_be_queued_is_taken_back() {
        let mut a = Acks::default();
        let (id, _r) = a.add();
        a.cancel(id);
        assert_eq!(a.depth(), 0);
    }
}
