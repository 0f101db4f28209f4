//! The server while it runs, as a part a reload can stop and start again: its address space
//! lists every device's points, so a change of the devices restarts it whole (its clients
//! reconnect and browse the new space; its figures and its `trusted/` and `rejected/`
//! folders stay), and a change of its section starts it with the new settings (or, when it
//! cannot start so, as it was).

use std::sync::Mutex;

use tokio::task::JoinHandle;

use super::OpcuaServerConfig;
use crate::shutdown::Shutdown;

/// Starts the server of a config until the given stop: its task, or why it cannot start.
pub type Start =
    Box<dyn Fn(&OpcuaServerConfig, Shutdown) -> Result<JoinHandle<()>, String> + Send + Sync>;

/// The running server, when `opcua_server:` is configured.
#[derive(Default)]
pub struct Serving {
    inner: Mutex<Option<Inner>>,
}

struct Inner {
    start: Start,
    config: OpcuaServerConfig,
    stop: Shutdown,
    task: JoinHandle<()>,
}

impl Serving {
    /// Starts the server of `config` with `start`, until `shutdown` (or a restart).
    pub fn start(
        &self,
        start: Start,
        config: OpcuaServerConfig,
        shutdown: &Shutdown,
    ) -> Result<(), String> {
        let stop = shutdown.child();
        let task = start(&config, stop.clone())?;
        *self.lock() = Some(Inner {
            start,
            config,
            stop,
            task,
        });
        Ok(())
    }

    /// Stops the server, waits for its task (its sessions closed, its port released), and
    /// starts it again until `shutdown`: it serves the catalogue as it is now. A server that
    /// cannot start again (its port taken meanwhile) is logged and stays stopped until the
    /// next reload that changes the devices tries again.
    pub async fn restart(&self, shutdown: &Shutdown) {
        let Some(config) = self.config() else {
            return;
        };
        if let Err(e) = self.reconfigure(config, shutdown).await {
            log::error!("opcua server: not started again after a reload: {e}");
        }
    }

    /// Stops the server and starts it with `config` (a reload changed `opcua_server:`); the
    /// config it ran with. When it cannot start so (its new port taken, a file unreadable),
    /// it is started again as it was, and the reason returned.
    pub async fn reconfigure(
        &self,
        config: OpcuaServerConfig,
        shutdown: &Shutdown,
    ) -> Result<OpcuaServerConfig, String> {
        let Some(Inner {
            start,
            config: was,
            stop,
            task,
        }) = self.lock().take()
        else {
            return Err("the OPC-UA server is not running".into());
        };
        stop.trigger();
        let _ = task.await;
        let stop = shutdown.child();
        match start(&config, stop.clone()) {
            Ok(task) => {
                *self.lock() = Some(Inner {
                    start,
                    config,
                    stop,
                    task,
                });
                Ok(was)
            }
            Err(e) => {
                let task = start(&was, stop.clone()).unwrap_or_else(|again| {
                    log::error!("opcua server: not started again as it was: {again}");
                    tokio::spawn(async {})
                });
                *self.lock() = Some(Inner {
                    start,
                    config: was,
                    stop,
                    task,
                });
                Err(e)
            }
        }
    }

    /// The config it runs with; `None` when it does not run.
    pub fn config(&self) -> Option<OpcuaServerConfig> {
        self.lock().as_ref().map(|i| i.config.clone())
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
