//! The webhooks' replay windows on disk: table `replay` of `dead_letters.db`, beside the inbox,
//! so that a request answered `200` before a restart is known after it (and a captured request
//! cannot be replayed once after a reboot).
//!
//! Key: the webhook's name, a zero byte (names never hold one), the request's 32-byte MAC.
//! Value: the signed timestamp as big-endian `i64`, then the answer's bytes (JSON, opaque
//! here). Rows leave with the window in memory: each write deletes the rows the window let go
//! of since the last one, and [`DeadLetterQueue::window_load`] deletes those older than the
//! window at start, so the table holds about what the windows hold.

use heed::RwTxn;

use super::{DeadLetterQueue, StoreError};

/// One request to remember, with the rows to delete in the same transaction.
#[derive(Debug, Clone)]
pub struct WindowRow {
    /// The webhook's name.
    pub hook: String,
    /// The request's MAC.
    pub mac: [u8; 32],
    /// Its signed timestamp, Unix seconds.
    pub t: i64,
    /// What it was answered.
    pub answer: Vec<u8>,
    /// MACs of this webhook that left its window.
    pub gone: Vec<[u8; 32]>,
}

/// A request read back at start.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WindowEntry {
    /// The request's MAC.
    pub mac: [u8; 32],
    /// Its signed timestamp, Unix seconds.
    pub t: i64,
    /// What it was answered.
    pub answer: Vec<u8>,
}

fn key(hook: &str, mac: &[u8; 32]) -> Vec<u8> {
    let mut key = Vec::with_capacity(hook.len() + 33);
    key.extend_from_slice(hook.as_bytes());
    key.push(0);
    key.extend_from_slice(mac);
    key
}

impl DeadLetterQueue {
    /// Writes one request of a webhook's window (and deletes the rows it let go of). Blocking.
    pub fn window_put(&self, row: &WindowRow) -> Result<(), StoreError> {
        let (_index, ()) = self.write(|txn, _| self.put_window_row(txn, row))?;
        Ok(())
    }

    pub(super) fn put_window_row(
        &self,
        txn: &mut RwTxn<'_>,
        row: &WindowRow,
    ) -> Result<(), StoreError> {
        for mac in &row.gone {
            self.window.delete(txn, &key(&row.hook, mac))?;
        }
        let mut value = Vec::with_capacity(8 + row.answer.len());
        value.extend_from_slice(&row.t.to_be_bytes());
        value.extend_from_slice(&row.answer);
        self.window.put(txn, &key(&row.hook, &row.mac), &value)?;
        Ok(())
    }

    /// The window of webhook `hook` as last written, oldest first, after deleting its rows
    /// signed before `oldest` (and any row too short to read). Blocking; called at start.
    pub fn window_load(&self, hook: &str, oldest: i64) -> Result<Vec<WindowEntry>, StoreError> {
        let mut prefix = hook.as_bytes().to_vec();
        prefix.push(0);
        let (_index, mut kept) = self.write(|txn, _| {
            let mut kept = Vec::new();
            let mut stale = Vec::new();
            for item in self.window.prefix_iter(txn, &prefix)? {
                let (k, v) = item?;
                let mac: Option<[u8; 32]> = k.get(prefix.len()..).and_then(|m| m.try_into().ok());
                let t = v
                    .get(..8)
                    .and_then(|b| b.try_into().ok())
                    .map(i64::from_be_bytes);
                match (mac, t) {
                    (Some(mac), Some(t)) if t >= oldest => kept.push(WindowEntry {
                        mac,
                        t,
                        answer: v.get(8..).unwrap_or_default().to_vec(),
                    }),
                    _ => stale.push(k.to_vec()),
                }
            }
            for k in &stale {
                self.window.delete(txn, k)?;
            }
            Ok(kept)
        })?;
        kept.sort_by_key(|e| e.t);
        Ok(kept)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_window_survives_a_reopen_per_webhook_and_stale_rows_leave_at_load() {
        let dir = tempfile::tempdir().unwrap();
        let q = DeadLetterQueue::open(dir.path(), 10).unwrap();
        let row = |hook: &str, mac, t, gone: &[[u8; 32]]| WindowRow {
            hook: hook.to_string(),
            mac,
            t,
            answer: b"{}".to_vec(),
            gone: gone.to_vec(),
        };
        q.window_put(&row("pay", [1; 32], 100, &[])).unwrap();
        q.window_put(&row("pay", [2; 32], 200, &[])).unwrap();
        q.window_put(&row("pay", [3; 32], 300, &[[2; 32]])).unwrap();
        q.inbox_put(b"req", Some(&row("pay-2", [4; 32], 250, &[])))
            .unwrap();
        q.close();

        let q = DeadLetterQueue::open(dir.path(), 10).unwrap();
        let macs = |v: Vec<WindowEntry>| v.into_iter().map(|e| (e.mac[0], e.t)).collect::<Vec<_>>();
        assert_eq!(macs(q.window_load("pay", 150).unwrap()), [(3, 300)]);
        // The stale row was deleted: an older window finds it no more.
        assert_eq!(macs(q.window_load("pay", 0).unwrap()), [(3, 300)]);
        assert_eq!(macs(q.window_load("pay-2", 0).unwrap()), [(4, 250)]);
        assert_eq!(q.inbox_all().unwrap().len(), 1);
    }
}
