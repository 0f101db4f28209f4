//! What every store's writer thread shares: the bounded channel and the thread behind it, the
//! group-commit receive loop, and the named counters kept in a `meta` database.
//!
//! The stores differ in what a command does inside the transaction; this module holds only
//! the parts that are the same, so the ack rule ("answer after the commit") is written once
//! per store where it matters, next to the rows it protects.

use std::sync::mpsc::{self, Receiver, SyncSender};
use std::sync::Mutex;
use std::thread::JoinHandle;

use heed::byteorder::BigEndian;
use heed::types::{Str, U64};
use heed::{Database, RoTxn, RwTxn, WithoutTls};

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
    while group.len() < max {
        match rx.try_recv() {
            Ok(c) => group.push(c),
            Err(_) => break,
        }
    }
    Some(group)
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

/// Writes named counters in the caller's transaction, beside the rows they describe.
pub fn write_meta<const N: usize>(
    meta: &Meta,
    txn: &mut RwTxn<'_>,
    keys: &[&str; N],
    fields: [&mut u64; N],
) -> heed::Result<()> {
    for (key, value) in keys.iter().zip(fields) {
        meta.put(txn, key, value)?;
    }
    Ok(())
}
