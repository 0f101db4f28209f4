//! Requests accepted within the tolerance window, so the same request is refused again.
//!
//! A request is known by the MAC the connector computed over what it signs (timestamp, key,
//! body), never by what the header lists: a header may carry several `v1` entries, and a
//! replay could put any of them first.
//!
//! Bounded: at most [`CAP`] MACs are remembered; entries leave when their timestamp falls
//! out of the window, and at the cap the oldest leaves (counted): past about 200 accepted
//! requests per second for a 300 s window, the oldest ones could be replayed once more.

use std::collections::{HashSet, VecDeque};

/// Most MACs remembered per webhook.
pub const CAP: usize = 65_536;

/// The replay window of one webhook.
#[derive(Debug, Default)]
pub struct ReplayWindow {
    order: VecDeque<(i64, [u8; 32])>,
    seen: HashSet<[u8; 32]>,
    /// Entries forgotten at the cap before their time.
    pub forgotten_total: u64,
}

impl ReplayWindow {
    /// Records `mac` signed at `t`; false when it was seen already. Forgets entries older than
    /// `now - tolerance`.
    pub fn admit(&mut self, t: i64, mac: [u8; 32], now: i64, tolerance: i64) -> bool {
        while self
            .order
            .front()
            .is_some_and(|(old, _)| *old < now.saturating_sub(tolerance))
        {
            if let Some((_, m)) = self.order.pop_front() {
                self.seen.remove(&m);
            }
        }
        if self.seen.contains(&mac) {
            return false;
        }
        if self.order.len() >= CAP {
            if let Some((_, m)) = self.order.pop_front() {
                self.seen.remove(&m);
                self.forgotten_total += 1;
            }
        }
        self.order.push_back((t, mac));
        self.seen.insert(mac);
        true
    }
}

impl ReplayWindow {
    /// Forgets `mac` again: the request it signed was not accepted (503, 400), so the sender's
    /// retry of the very same request must not count as a replay.
    pub fn forget(&mut self, mac: &[u8; 32]) {
        if self.seen.remove(mac) {
            self.order.retain(|(_, m)| m != mac);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_same_signature_is_refused_until_it_leaves_the_window() {
        let mut w = ReplayWindow::default();
        assert!(w.admit(100, [1; 32], 100, 300));
        assert!(!w.admit(100, [1; 32], 150, 300));
        assert!(w.admit(150, [2; 32], 150, 300));
        // At 401 the first entry is older than the window: a replay would be stale anyway.
        assert!(w.admit(100, [1; 32], 401, 300));
    }
}
