//! The server while it runs, as a part a reload can stop and start again: its address space
//! lists every device's points, so a change of the devices restarts it whole (its clients
//! reconnect and browse the new space; its figures and its `trusted/` and `rejected/`
//! folders stay).

use std::sync::Mutex;

use tokio::task::JoinHandle;

use crate::shutdown::Shutdown;

/// Starts the server until the given stop: its task, or why it cannot start.
pub type Start = Box<dyn Fn(Shutdown) -> Result<JoinHandle<()>, String> + Send + Sync>;

/// The running server, when `opcua_server:` is configured.
#[derive(Default)]
pub struct Serving {
    inner: Mutex<Option<Inner>>,
}

struct Inner {
    start: Start,
    stop: Shutdown,
    task: JoinHandle<()>,
}

impl Serving {
    /// Starts the server with `start`, until `shutdown` (or a restart).
    pub fn start(&self, start: Start, shutdown: &Shutdown) -> Result<(), String> {
        let stop = shutdown.child();
        let task = start(stop.clone())?;
        *self.lock() = Some(Inner { start, stop, task });
        Ok(())
    }

    /// Stops the server, waits for its task (its sessions closed, its port released), and
    /// starts it again until `shutdown`: it serves the catalogue as it is now. A server that
    /// cannot start again (its port taken meanwhile) is logged and stays stopped until the
    /// next reload that changes the devices tries again.
    pub async fn restart(&self, shutdown: &Shutdown) {
        let Some(Inner { start, stop, task }) = self.lock().take() else {
            return;
        };
        stop.trigger();
        let _ = task.await;
        let stop = shutdown.child();
        let task = start(stop.clone()).unwrap_or_else(|e| {
            log::error!("opcua server: not started again after a reload: {e}");
            tokio::spawn(async {})
        });
        *self.lock() = Some(Inner { start, stop, task });
    }

    /// Waits, after the shutdown signal, for the server's task to end.
    pub async fn join(&self) {
        // Taken whole: what the start closure holds (the state it reads) goes with it.
        let inner = self.lock().take();
        if let Some(i) = inner {
            let _ = i.task.await;
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Option<Inner>> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }
}
