//! The pollers' own thread and runtime, so that HTTP or sink load cannot delay a poll: this is
//! what "prioritizes the polling loops" means. Poll tasks are spawned here; everything else runs
//! on the main runtime.
//!
//! [`Pollers`] is the one start path of every device, whatever its protocol: built from the
//! config (each device registered with the commands service), started on this runtime, and
//! joined at stop.

use std::future::Future;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use crate::commands::{CommandReceiver, Commands};
use crate::engine::Engine;
use crate::shutdown::Shutdown;
use crate::sources::catalogue::Catalogue;
use crate::sources::devices::DevicesConfig;
use crate::sources::modbus::ModbusPollers;
use crate::sources::opcua::OpcuaDeviceConfig;
#[cfg(feature = "s7")]
use crate::sources::poll_loop::PollLoop;
#[cfg(feature = "s7")]
use crate::sources::s7::driver::{poll_loops, S7Driver};
use crate::sources::status::DeviceStatus;

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

/// An OPC-UA device waiting to start: its config, status and command inbox.
#[cfg_attr(not(feature = "opcua"), allow(dead_code))]
struct OpcuaDevice {
    config: OpcuaDeviceConfig,
    status: Arc<DeviceStatus>,
    inbox: Option<CommandReceiver>,
}

/// Every device's task: built, then running on the pollers' runtime, then joined.
pub struct Pollers {
    modbus: ModbusPollers,
    opcua: Vec<OpcuaDevice>,
    #[cfg(feature = "s7")]
    s7: Vec<PollLoop<S7Driver>>,
    #[cfg_attr(not(feature = "opcua"), allow(dead_code))]
    data_dir: PathBuf,
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
        mut commands: Option<&mut Commands>,
        data_dir: &Path,
    ) -> Self {
        let mut opcua = Vec::new();
        for d in &devices.opcua {
            let Some(status) = catalogue.by_name(&d.name).cloned() else {
                log::error!("opcua device missing from the catalogue: device={}", d.name);
                continue;
            };
            let inbox = commands
                .as_deref_mut()
                .map(|c| c.register(&d.name, status.def.writable()));
            opcua.push(OpcuaDevice {
                config: d.clone(),
                status,
                inbox,
            });
        }
        // Without the client there is no S7 device (validation refuses them).
        #[cfg(feature = "s7")]
        let s7 = poll_loops(&devices.s7, catalogue, commands.as_deref_mut());
        Self {
            modbus: ModbusPollers::new(&devices.modbus, catalogue, commands),
            opcua,
            #[cfg(feature = "s7")]
            s7,
            data_dir: data_dir.to_path_buf(),
            runtime: None,
            tasks: Vec::new(),
        }
    }

    /// Starts the pollers' thread, when there is a device, and every device's task on it.
    /// Call it outside an async context (an OPC-UA device may make its key pair first).
    pub fn start(&mut self, engine: &Arc<Engine>, shutdown: &Shutdown) -> std::io::Result<()> {
        #[cfg(feature = "s7")]
        let no_s7 = self.s7.is_empty();
        #[cfg(not(feature = "s7"))]
        let no_s7 = true;
        if self.modbus.is_empty() && self.opcua.is_empty() && no_s7 {
            return Ok(());
        }
        let runtime = PollerRuntime::start()?;
        self.modbus.start(engine, &runtime, shutdown);
        #[cfg(feature = "s7")]
        for plc in std::mem::take(&mut self.s7) {
            self.tasks
                .push(runtime.spawn(plc.run(Arc::clone(engine), shutdown.clone())));
        }
        for d in std::mem::take(&mut self.opcua) {
            #[cfg(feature = "opcua")]
            self.tasks.push(crate::sources::opcua::spawn(
                &runtime,
                d.config,
                &self.data_dir,
                Arc::clone(engine),
                d.status,
                shutdown.clone(),
                d.inbox,
            ));
            // Without the client there is no OPC-UA device (validation refuses them).
            #[cfg(not(feature = "opcua"))]
            drop(d);
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
