//! The pollers' own thread and runtime, so that HTTP or sink load cannot delay a poll: this is
//! what "prioritizes the polling loops" means. Poll tasks are spawned here; everything else runs
//! on the main runtime.
//!
//! [`Pollers`] is the one start path of every device, whatever its protocol: [`Pollers::build`]
//! makes the poll loop of each connection (a TCP device, the devices of one serial line, an
//! OPC-UA server, a PLC) from the config, each device registered with the commands service;
//! [`Pollers::start`] runs them on this runtime, each with a stop of its own, so that a reload
//! stops and starts one connection's loop and leaves the others polling
//! ([`Pollers::stop`]); [`Pollers::join`] waits for them all at the stop.

use std::future::Future;
use std::path::Path;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use crate::commands::Commands;
use crate::engine::Engine;
use crate::shutdown::Shutdown;
use crate::sources::catalogue::Catalogue;
use crate::sources::devices::DevicesConfig;
use crate::sources::driver::Driver;
use crate::sources::poll_loop::PollLoop;

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

/// A connection's poll loop, built and not yet running.
pub struct Ready {
    devices: Vec<String>,
    run: Box<dyn FnOnce(Arc<Engine>, Shutdown) -> Task + Send>,
}

type Task = Pin<Box<dyn Future<Output = ()> + Send>>;

impl Ready {
    fn of<D: Driver>(poll_loop: PollLoop<D>) -> Self {
        Self {
            devices: poll_loop.devices(),
            run: Box::new(move |engine, stop| Box::pin(poll_loop.run(engine, stop))),
        }
    }
}

/// A connection's poll loop, running.
struct Running {
    devices: Vec<String>,
    stop: Shutdown,
    task: tokio::task::JoinHandle<()>,
}

/// Every device's task, running on the pollers' runtime (started with the first device).
#[derive(Default)]
pub struct Pollers {
    runtime: Mutex<Option<PollerRuntime>>,
    running: Mutex<Vec<Running>>,
}

impl Pollers {
    /// The poll loops of the devices of `devices` that are `wanted` (every device of a
    /// serial line shared with a wanted one must be wanted too), each device showing its
    /// figures in its status in `catalogue`, not yet running. With `commands` (when
    /// `commands:` is configured), each device is registered there with its writable points.
    /// `data_dir` holds the default OPC-UA PKI folder.
    pub fn build(
        devices: &DevicesConfig,
        wanted: impl Fn(&str) -> bool,
        catalogue: &Catalogue,
        commands: Option<&Commands>,
        data_dir: &Path,
    ) -> Vec<Ready> {
        fn only<'a, T>(
            all: &'a [T],
            name: impl Fn(&T) -> &str,
            wanted: &dyn Fn(&str) -> bool,
        ) -> Vec<&'a T> {
            all.iter().filter(|d| wanted(name(d))).collect()
        }
        let modbus = only(&devices.modbus, |d| &d.name, &wanted);
        #[cfg_attr(not(any(feature = "opcua", feature = "s7")), allow(unused_mut))]
        let mut ready: Vec<Ready> = crate::sources::modbus::lines(&modbus, catalogue, commands)
            .into_iter()
            .map(Ready::of)
            .collect();
        // Without its client there is no device of a protocol (validation refuses them).
        // Each OPC-UA device makes its key pair first, when its PKI folder has none.
        #[cfg(feature = "opcua")]
        {
            let opcua = only(&devices.opcua, |d| &d.name, &wanted);
            let loops =
                crate::sources::opcua::driver::poll_loops(&opcua, catalogue, data_dir, commands);
            ready.extend(loops.into_iter().map(Ready::of));
        }
        #[cfg(not(feature = "opcua"))]
        let _ = data_dir;
        #[cfg(feature = "s7")]
        {
            let s7 = only(&devices.s7, |d| &d.name, &wanted);
            let loops = crate::sources::s7::driver::poll_loops(&s7, catalogue, commands);
            ready.extend(loops.into_iter().map(Ready::of));
        }
        ready
    }

    /// Runs `ready` on the pollers' runtime (started first, when no device ran yet), each
    /// loop until `shutdown` or its own stop.
    pub fn start(
        &self,
        ready: Vec<Ready>,
        engine: &Arc<Engine>,
        shutdown: &Shutdown,
    ) -> std::io::Result<()> {
        if ready.is_empty() {
            return Ok(());
        }
        let mut runtime = lock(&self.runtime);
        let runtime = match &mut *runtime {
            Some(r) => r,
            None => runtime.insert(PollerRuntime::start()?),
        };
        // The stops forward the connector's from a task on the pollers' runtime.
        let _entered = runtime.handle.enter();
        let mut running = lock(&self.running);
        for r in ready {
            let stop = shutdown.child();
            let task = runtime.spawn((r.run)(Arc::clone(engine), stop.clone()));
            running.push(Running {
                devices: r.devices,
                stop,
                task,
            });
        }
        Ok(())
    }

    /// Stops the loops that poll any of `devices` (a reload: the devices changed or removed,
    /// and those sharing a serial line with them), each waited for up to [`STOP_WAIT`]. The
    /// other loops keep polling.
    pub async fn stop(&self, devices: &[&str]) {
        let stopped: Vec<Running> = {
            let mut running = lock(&self.running);
            let (stopped, kept) = std::mem::take(&mut *running)
                .into_iter()
                .partition(|r| r.devices.iter().any(|d| devices.contains(&d.as_str())));
            *running = kept;
            stopped
        };
        for r in &stopped {
            r.stop.trigger();
        }
        wait(stopped).await;
    }

    /// Waits, after the shutdown signal, for every device task to end (up to [`STOP_WAIT`]),
    /// then stops the pollers' thread, before the stores close.
    pub async fn join(&self) {
        let running = std::mem::take(&mut *lock(&self.running));
        wait(running).await;
        let runtime = lock(&self.runtime).take();
        if let Some(rt) = runtime {
            // Joining a thread blocks: not on the caller's runtime.
            let _ = tokio::task::spawn_blocking(move || rt.stop()).await;
        }
    }
}

/// Waits for the stopped loops' tasks, up to [`STOP_WAIT`] in all.
async fn wait(stopped: Vec<Running>) {
    let aborts: Vec<_> = stopped.iter().map(|r| r.task.abort_handle()).collect();
    let waited = tokio::time::timeout(STOP_WAIT, async {
        for r in stopped {
            if let Err(e) = r.task.await {
                log::error!(
                    "device task ended abnormally: devices={:?} error={e}",
                    r.devices
                );
            }
        }
    })
    .await;
    if waited.is_err() {
        log::warn!("device tasks still running after the stop wait, dropping them");
        for a in aborts {
            a.abort();
        }
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl Drop for PollerRuntime {
    fn drop(&mut self) {
        self.shutdown();
    }
}
