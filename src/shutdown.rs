//! One shutdown signal that every task and thread selects on, and the signals of the parts a
//! reload stops alone ([`Shutdown::child`]).
//!
//! Async tasks await [`Shutdown::wait`]; plain threads sleep in [`Shutdown::wait_timeout`],
//! which returns at once when the signal comes, so no thread sleeps through a stop.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

use tokio::sync::watch;

struct Inner {
    flag: AtomicBool,
    lock: Mutex<()>,
    cvar: Condvar,
    tx: watch::Sender<bool>,
}

/// The shutdown signal; clones share it.
#[derive(Clone)]
pub struct Shutdown {
    inner: Arc<Inner>,
}

impl Default for Shutdown {
    fn default() -> Self {
        Self::new()
    }
}

impl Shutdown {
    /// A signal not yet triggered.
    pub fn new() -> Self {
        let (tx, _) = watch::channel(false);
        Self {
            inner: Arc::new(Inner {
                flag: AtomicBool::new(false),
                lock: Mutex::new(()),
                cvar: Condvar::new(),
                tx,
            }),
        }
    }

    /// Triggers it; idempotent.
    pub fn trigger(&self) {
        let _guard = self.inner.lock.lock().unwrap_or_else(|e| e.into_inner());
        self.inner.flag.store(true, Ordering::SeqCst);
        self.inner.cvar.notify_all();
        self.inner.tx.send_replace(true);
    }

    /// A signal of its own that this one triggers too: a part a reload stops alone, and
    /// that stops with everything at the connector's stop. A task of the runtime forwards
    /// the trigger, so it needs one.
    pub fn child(&self) -> Shutdown {
        let child = Shutdown::new();
        let (parent, forward) = (self.clone(), child.clone());
        tokio::spawn(async move {
            tokio::select! {
                _ = parent.wait() => forward.trigger(),
                _ = forward.wait() => {}
            }
        });
        child
    }

    /// True once triggered.
    pub fn is_triggered(&self) -> bool {
        self.inner.flag.load(Ordering::SeqCst)
    }

    /// Resolves once triggered.
    pub async fn wait(&self) {
        let mut rx = self.inner.tx.subscribe();
        let _ = rx.wait_for(|v| *v).await;
    }

    /// Sleeps up to `timeout`, returning early (true) when triggered.
    pub fn wait_timeout(&self, timeout: Duration) -> bool {
        let guard = self.inner.lock.lock().unwrap_or_else(|e| e.into_inner());
        let (_guard, _) = self
            .inner
            .cvar
            .wait_timeout_while(guard, timeout, |_| !self.is_triggered())
            .unwrap_or_else(|e| e.into_inner());
        self.is_triggered()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_child_stops_alone_or_with_its_parent() {
        let parent = Shutdown::new();
        let alone = parent.child();
        let with_parent = parent.child();
        alone.trigger();
        alone.wait().await;
        assert!(!parent.is_triggered() && !with_parent.is_triggered());
        parent.trigger();
        with_parent.wait().await;
        assert!(with_parent.is_triggered());
    }
}
