//! Per-device buffers between a message source (JetStream, MQTT) and the engine.
//!
//! Each device (a subject, a subscription) has its own FIFO bounded at `cap`, so one chatty
//! device cannot push out another's messages. What happens at the cap is the caller's business
//! (JetStream returns the pushed-out message with a nak, MQTT drops and counts it): [`push`]
//! hands it back. In `latest` mode a device holds only its newest message and has at most one
//! message in the pipeline; a newer arrival replaces the waiting one, and the replaced one is
//! handed back too.
//!
//! [`pop`] takes devices in turn (round robin), so the engine sees every device fairly.
//!
//! [`push`]: DeviceBuffers::push
//! [`pop`]: DeviceBuffers::pop

use std::collections::{HashMap, HashSet, VecDeque};

/// What [`DeviceBuffers::push`] did.
#[derive(Debug, PartialEq, Eq)]
pub enum Pushed<T> {
    /// Queued; nothing left.
    Queued,
    /// Queued; the device's oldest entry was pushed out at the cap.
    Overflowed(T),
    /// `latest` mode: queued in place of the waiting entry, handed back.
    Replaced(T),
}

/// The buffers of one source.
#[derive(Debug)]
pub struct DeviceBuffers<T> {
    cap: usize,
    latest: bool,
    queues: HashMap<String, VecDeque<T>>,
    /// Devices with something queued, in turn order.
    turns: VecDeque<String>,
    /// `latest` mode: devices with a message in the pipeline.
    busy: HashSet<String>,
    len: usize,
}

impl<T> DeviceBuffers<T> {
    /// Buffers of `cap` entries per device; `latest` keeps only the newest (cap 1, one in the
    /// pipeline per device).
    pub fn new(cap: usize, latest: bool) -> Self {
        Self {
            cap: if latest { 1 } else { cap.max(1) },
            latest,
            queues: HashMap::new(),
            turns: VecDeque::new(),
            busy: HashSet::new(),
            len: 0,
        }
    }

    /// Entries waiting, over every device.
    pub fn len(&self) -> usize {
        self.len
    }

    /// True when nothing waits.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Queues `item` for `device`.
    pub fn push(&mut self, device: &str, item: T) -> Pushed<T> {
        let queue = match self.queues.get_mut(device) {
            Some(q) => q,
            None => self.queues.entry(device.to_string()).or_default(),
        };
        if queue.is_empty() {
            self.turns.push_back(device.to_string());
        }
        let out = if queue.len() >= self.cap {
            match queue.pop_front() {
                Some(old) if self.latest => Pushed::Replaced(old),
                Some(old) => Pushed::Overflowed(old),
                None => Pushed::Queued,
            }
        } else {
            self.len += 1;
            Pushed::Queued
        };
        queue.push_back(item);
        out
    }

    /// The next entry, taking devices in turn; in `latest` mode a device whose previous entry is
    /// still in the pipeline waits (call [`DeviceBuffers::done`] when it settles).
    pub fn pop(&mut self) -> Option<(String, T)> {
        for _ in 0..self.turns.len() {
            let device = self.turns.pop_front()?;
            if self.busy.contains(&device) {
                self.turns.push_back(device);
                continue;
            }
            let Some(queue) = self.queues.get_mut(&device) else {
                continue;
            };
            let Some(item) = queue.pop_front() else {
                self.queues.remove(&device);
                continue;
            };
            self.len -= 1;
            if queue.is_empty() {
                self.queues.remove(&device);
            } else {
                self.turns.push_back(device.clone());
            }
            if self.latest {
                self.busy.insert(device.clone());
            }
            return Some((device, item));
        }
        None
    }

    /// The pipeline is done with `device`'s entry (`latest` mode: its next one may go).
    pub fn done(&mut self, device: &str) {
        self.busy.remove(device);
    }

    /// Takes every waiting entry (at shutdown).
    pub fn drain(&mut self) -> Vec<T> {
        self.turns.clear();
        self.busy.clear();
        self.len = 0;
        self.queues.drain().flat_map(|(_, q)| q).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_full_device_pushes_out_its_own_oldest_entry_only() {
        let mut b = DeviceBuffers::new(2, false);
        assert_eq!(b.push("a", 1), Pushed::Queued);
        assert_eq!(b.push("a", 2), Pushed::Queued);
        assert_eq!(b.push("b", 10), Pushed::Queued);
        assert_eq!(b.push("a", 3), Pushed::Overflowed(1));
        assert_eq!(b.len(), 3);
        let order: Vec<_> = std::iter::from_fn(|| b.pop()).collect();
        assert_eq!(
            order,
            vec![("a".into(), 2), ("b".into(), 10), ("a".into(), 3)]
        );
        assert!(b.is_empty());
    }

    #[test]
    fn latest_mode_keeps_the_newest_and_one_in_the_pipeline_per_device() {
        let mut b = DeviceBuffers::new(1024, true);
        b.push("a", 1);
        assert_eq!(b.pop(), Some(("a".into(), 1)));
        assert_eq!(b.push("a", 2), Pushed::Queued);
        assert_eq!(b.push("a", 3), Pushed::Replaced(2));
        assert_eq!(b.pop(), None, "a is busy with 1");
        b.done("a");
        assert_eq!(b.pop(), Some(("a".into(), 3)));
        assert_eq!(b.len(), 0);
    }
}
