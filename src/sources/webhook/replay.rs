//! The requests of one webhook seen within the tolerance window, and what became of each, so
//! that the same request is never stored twice and its sender always learns the outcome.
//!
//! A request is known by the MAC the connector computed over what it signs (timestamp, key,
//! body), never by what the header lists: a header may carry several `v1` entries, and a
//! replay could put any of them first.
//!
//! An entry is either **running** (a copy of the request is in the flow now) or **settled**
//! (it was answered `200`; the answer is kept). A copy that is not answered `200` (a `503`
//! the sender retries, a `400`), or that is dropped before it settles, leaves the window, so
//! the sender's next copy is a new request. An identical request meanwhile waits for the
//! running copy, then gets its answer; a settled entry is answered again as it was, and
//! nothing is stored twice. Settled entries are also written beside the inbox
//! (`store::dead_letters`), so the window survives a restart.
//!
//! Bounded: at most [`CAP`] entries are remembered; entries leave when their timestamp falls
//! out of the window, and at the cap the oldest leaves (counted): past about 200 accepted
//! requests per second for a 300 s window, the oldest ones could be stored once more.

use std::collections::{HashMap, VecDeque};

use serde::{Deserialize, Serialize};
use tokio::sync::watch;

use crate::sources::SourceOutcome;

/// Most requests remembered per webhook.
pub const CAP: usize = 65_536;

/// The `200` a request was answered, given again to an identical request.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Answer {
    /// `stored`, `dead_lettered`, `unrouted` or `accepted`.
    pub result: String,
    /// The record id.
    pub id: String,
    /// The dead-letter entry, when one was made.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dead_letter_id: Option<u64>,
}

impl Answer {
    /// The answer to keep for `outcome`; `None` for anything but a `200`.
    pub fn of(outcome: &SourceOutcome) -> Option<Self> {
        match outcome {
            SourceOutcome::Stored {
                id,
                result,
                dead_letter_id,
            } => Some(Self {
                result: (*result).to_string(),
                id: id.clone(),
                dead_letter_id: *dead_letter_id,
            }),
            SourceOutcome::Accepted { id } => Some(Self {
                result: "accepted".into(),
                id: id.clone(),
                dead_letter_id: None,
            }),
            _ => None,
        }
    }

    /// The outcome to answer again; `None` for a result this build does not know (an entry
    /// written by another version), which is then forgotten.
    pub fn outcome(&self) -> Option<SourceOutcome> {
        let result = match self.result.as_str() {
            "accepted" => {
                return Some(SourceOutcome::Accepted {
                    id: self.id.clone(),
                })
            }
            "stored" => "stored",
            "dead_lettered" => "dead_lettered",
            "unrouted" => "unrouted",
            _ => return None,
        };
        Some(SourceOutcome::Stored {
            id: self.id.clone(),
            result,
            dead_letter_id: self.dead_letter_id,
        })
    }
}

/// What the window says of a request.
pub enum Claim {
    /// Not seen: the caller runs it, and holds the sender until it settles or forgets it;
    /// dropping the sender wakes every identical request waiting on it.
    New(watch::Sender<()>),
    /// A copy is running: wait on this until it settles (or is dropped), then ask again.
    Running(watch::Receiver<()>),
    /// Answered `200` before: answer the same.
    Settled(Answer),
}

enum Slot {
    Running(watch::Receiver<()>),
    Settled(Answer),
}

/// The replay window of one webhook.
#[derive(Default)]
pub struct ReplayWindow {
    order: VecDeque<(i64, [u8; 32])>,
    slots: HashMap<[u8; 32], Slot>,
    /// Settled entries that left the window since the last write: the next write deletes them
    /// on disk too.
    gone: Vec<[u8; 32]>,
    /// Entries forgotten at the cap before their time.
    pub forgotten_total: u64,
}

impl ReplayWindow {
    /// What to do with the request `mac` signed at `t`, at `now`; a new one is recorded as
    /// running. Forgets entries older than `now - tolerance` first.
    pub fn claim(&mut self, t: i64, mac: [u8; 32], now: i64, tolerance: i64) -> Claim {
        self.expire(now.saturating_sub(tolerance));
        match self.slots.get(&mac) {
            Some(Slot::Running(rx)) => return Claim::Running(rx.clone()),
            Some(Slot::Settled(answer)) => return Claim::Settled(answer.clone()),
            None => {}
        }
        self.make_room();
        let (tx, rx) = watch::channel(());
        self.order.push_back((t, mac));
        self.slots.insert(mac, Slot::Running(rx));
        Claim::New(tx)
    }

    /// Records that the running request `mac` was answered `answer`.
    pub fn settle(&mut self, mac: &[u8; 32], answer: Answer) {
        if let Some(slot) = self.slots.get_mut(mac) {
            *slot = Slot::Settled(answer);
        }
    }

    /// Forgets `mac`: the request it signed was not answered `200` (503, 400) or was dropped
    /// before it settled, so the sender's next copy of it is a new request.
    pub fn forget(&mut self, mac: &[u8; 32]) {
        if let Some(slot) = self.slots.remove(mac) {
            self.order.retain(|(_, m)| m != mac);
            if matches!(slot, Slot::Settled(_)) {
                self.gone.push(*mac);
            }
        }
    }

    /// Puts back an entry read from disk at start, unless it is older than `oldest` or
    /// already known. Entries must come oldest first.
    pub fn restore(&mut self, t: i64, mac: [u8; 32], answer: Answer, oldest: i64) {
        if t < oldest || self.slots.contains_key(&mac) {
            return;
        }
        self.make_room();
        self.order.push_back((t, mac));
        self.slots.insert(mac, Slot::Settled(answer));
    }

    /// The settled entries that left the window since the last call, to delete on disk.
    pub fn take_gone(&mut self) -> Vec<[u8; 32]> {
        std::mem::take(&mut self.gone)
    }

    /// Entries now.
    pub fn len(&self) -> usize {
        self.slots.len()
    }

    fn expire(&mut self, oldest: i64) {
        while self.order.front().is_some_and(|(t, _)| *t < oldest) {
            if let Some((_, mac)) = self.order.pop_front() {
                self.drop_slot(&mac);
            }
        }
    }

    fn make_room(&mut self) {
        while self.order.len() >= CAP {
            let Some((_, mac)) = self.order.pop_front() else {
                break;
            };
            self.drop_slot(&mac);
            self.forgotten_total += 1;
        }
    }

    fn drop_slot(&mut self, mac: &[u8; 32]) {
        if let Some(Slot::Settled(_)) = self.slots.remove(mac) {
            self.gone.push(*mac);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn answer(id: &str) -> Answer {
        Answer {
            result: "stored".into(),
            id: id.into(),
            dead_letter_id: None,
        }
    }

    #[test]
    fn a_request_runs_once_is_answered_the_same_after_and_leaves_with_its_window() {
        let mut w = ReplayWindow::default();
        let Claim::New(tx) = w.claim(100, [1; 32], 100, 300) else {
            panic!("a new request must run");
        };
        let Claim::Running(rx) = w.claim(100, [1; 32], 101, 300) else {
            panic!("the identical request must wait for the running one");
        };
        w.settle(&[1; 32], answer("a"));
        drop(tx);
        assert!(rx.has_changed().is_err(), "the waiter is woken");
        assert!(matches!(w.claim(100, [1; 32], 150, 300), Claim::Settled(a) if a.id == "a"));
        // At 401 the entry is older than the window: such a request would be stale anyway.
        assert!(matches!(w.claim(100, [1; 32], 401, 300), Claim::New(_)));
        assert_eq!(w.take_gone(), vec![[1; 32]]);
    }

    #[test]
    fn a_forgotten_request_is_new_again() {
        let mut w = ReplayWindow::default();
        let Claim::New(_tx) = w.claim(100, [2; 32], 100, 300) else {
            panic!("a new request must run");
        };
        w.forget(&[2; 32]);
        assert!(matches!(w.claim(100, [2; 32], 100, 300), Claim::New(_)));
        assert!(w.take_gone().is_empty(), "a running entry is not on disk");
    }

    #[test]
    fn a_kept_answer_reads_back_as_the_same_outcome() {
        for outcome in [
            SourceOutcome::Stored {
                id: "a".into(),
                result: "dead_lettered",
                dead_letter_id: Some(7),
            },
            SourceOutcome::Accepted { id: "b".into() },
        ] {
            let again = Answer::of(&outcome).and_then(|a| a.outcome());
            assert_eq!(format!("{again:?}"), format!("{:?}", Some(outcome)));
        }
        let retry = SourceOutcome::Retry {
            sink: "push".into(),
            after_secs: 5,
        };
        assert!(Answer::of(&retry).is_none());
    }
}
