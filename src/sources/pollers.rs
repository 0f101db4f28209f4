//! The pollers' own thread and runtime, so that HTTP or sink load cannot delay a poll: this is
//! what "prioritizes the polling loops" means. Poll tasks are spawned here; everything else runs
//! on the main runtime.
//!
//! [`Pollers`] is the one start path of every device, whatever its protocol: built from the
//! config (each device registered with the commands service), started on this runtime, and
//! joined at stop.

use std::future::Future;
use std::path::Path;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use crate::commands::Commands;
use crate::engine::Engine;
use crate::shutdown::Shutdown;
use crate::sources::catalogue::Catalogue;
use crate::sources::devices::DevicesConfig;
use crate::sources::modbus::ModbusPollers;
#[cfg(feature = "opcua")]
use crate::sources::opcua::driver::OpcuaDriver;
#[cfg(any(feature = "s7", feature = "opcua"))]
use crate::sources::poll_loop::PollLoop;
#[cfg(feature = "s7")]
use crate::sources::s7::driver::S7Driver;

/// How long the stop waits for the device tasks to end after the shutdown signal (a sample
/// held for a full sink is given up with it); then the runtime drops what is left.
pub const STOP_WAIT: Duration = Duration::from_secs(5);

/// A single-threaded runtime on a thread of its own.
pub struct PollerRuntime {
    handle: tokio::runtime::Handle,
    thread: Option<JoinHandle<()>>,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
}

impl PollerRuntime {
    /// Starts the thread and its runtime.
    pub fn start() -> std::io::Result<Self> {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .thread_name("pollers")
            .build()?;
        let handle = runtime.handle().clone();
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let thread = std::thread::Builder::new()
            .name("pollers".into())
            .spawn(move || {
                crate::priority::pollers_thread();
                runtime.block_on(async {
                    let _ = stopped.await;
                });
            })?;
        Ok(Self {
            handle,
            thread: Some(thread),
            stop: Some(stop),
        })
    }

    /// Runs `task` on the pollers' thread.
    pub fn spawn<F>(&self, task: F) -> tokio::task::JoinHandle<F::Output>
    where
        F: Future + Send + 'static,
        F::Output: Send + 'static,
    {
        self.handle.spawn(task)
    }

    /// Stops the runtime (tasks should have ended on the shutdown signal) and joins its thread.
    pub fn stop(mut self) {
        self.shutdown();
    }

    fn shutdown(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(t) = self.thread.take() {
            if t.join().is_err() {
                log::error!("pollers thread panicked");
            }
        }
    }
}

/// Every device's task: built, then running on the pollers' runtime, then joined.
pub struct Pollers {
    modbus: ModbusPollers,
    #[cfg(feature = "opcua")]
    opcua: Vec<PollLoop<OpcuaDriver>>,
    #[cfg(feature = "s7")]
    s7: Vec<PollLoop<S7Driver>>,
    runtime: Option<PollerRuntime>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

impl Pollers {
    /// The tasks of every device of `devices`, each showing its figures in its status in
    /// `catalogue`, not yet running. With `commands` (when `commands:` is configured), every
    /// device is registered there with its writable points. `data_dir` holds the default
    /// OPC-UA PKI folder.
    pub fn build(
        devices: &DevicesConfig,
        catalogue: &Catalogue,
        commands: Option<&mut Commands>,
        data_dir: &Path,
    ) -> Self {
        #[cfg(any(feature = "opcua", feature = "s7"))]
        let mut commands = commands;
        // Without its client there is no device of a protocol (validation refuses them).
        // Each OPC-UA device makes its key pair first, when its PKI folder has none.
        #[cfg(feature = "opcua")]
        let opcua = crate::sources::opcua::driver::poll_loops(
            &devices.opcua,
            catalogue,
            data_dir,
            commands.as_deref_mut(),
        );
        #[cfg(not(feature = "opcua"))]
        let _ = data_dir;
        #[cfg(feature = "s7")]
        let s7 =
            crate::sources::s7::driver::poll_loops(&devices.s7, catalogue, commands.as_deref_mut());
        Self {
            modbus: ModbusPollers::new(&devices.modbus, catalogue, commands),
            #[cfg(feature = "opcua")]
            opcua,
            #[cfg(feature = "s7")]
            s7,
            runtime: None,
            tasks: Vec::new(),
        }
    }

    /// Starts the pollers' thread, when there is a device, and every device's task on it.
    pub fn start(&mut self, engine: &Arc<Engine>, shutdown: &Shutdown) -> std::io::Result<()> {
        #[cfg(feature = "s7")]
        let no_s7 = self.s7.is_empty();
        #[cfg(not(feature = "s7"))]
        let no_s7 = true;
        #[cfg(feature = "opcua")]
        let no_opcua = self.opcua.is_empty();
        #[cfg(not(feature = "opcua"))]
        let no_opcua = true;
        if self.modbus.is_empty() && no_opcua && no_s7 {
            return Ok(());
        }
        let runtime = PollerRuntime::start()?;
        self.modbus.start(engine, &runtime, shutdown);
        #[cfg(feature = "s7")]
        for plc in std::mem::take(&mut self.s7) {
            self.tasks
                .push(runtime.spawn(plc.run(Arc::clone(engine), shutdown.clone())));
        }
        #[cfg(feature = "opcua")]
        for device in std::mem::take(&mut self.opcua) {
            self.tasks
                .push(runtime.spawn(device.run(Arc::clone(engine), shutdown.clone())));
        }
        self.runtime = Some(runtime);
        Ok(())
    }

    /// Waits, after the shutdown signal, for every device task to end (up to [`STOP_WAIT`]),
    /// then stops the pollers' thread, before the stores close.
    pub async fn join(mut self) {
        let tasks = std::mem::take(&mut self.tasks);
        let modbus = std::mem::replace(&mut self.modbus, ModbusPollers::empty());
        let waited = tokio::time::timeout(STOP_WAIT, async {
            modbus.join().await;
            for t in tasks {
                if let Err(e) = t.await {
                    log::error!("device task ended abnormally: {e}");
                }
            }
        })
        .await;
        if waited.is_err() {
            log::warn!("device tasks still running after the stop wait, dropping them");
        }
        if let Some(rt) = self.runtime.take() {
            // Joining a thread blocks: not on the caller's runtime.
            let _ = tokio::task::spawn_blocking(move || rt.stop()).await;
        }
    }
}

impl Drop for PollerRuntime {
    fn drop(&mut self) {
        self.shutdown();
    }
}
