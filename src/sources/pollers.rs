//! The pollers' own thread and runtime, so that HTTP or sink load cannot delay a poll: this is
//! what "prioritizes the polling loops" means. Poll tasks are spawned here; everything else runs
//! on the main runtime.

use std::future::Future;
use std::thread::JoinHandle;

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

impl Drop for PollerRuntime {
    fn drop(&mut self) {
        self.shutdown();
    }
}
