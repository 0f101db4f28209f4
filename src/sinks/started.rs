//! The sinks while they run: each started with a stop of its own (a child of the connector's),
//! so that a reload stops one sink alone (its clients and deliverer, then its close) and
//! leaves the others running. The connector's own stop takes them all back in one
//! [`Running`] and keeps its order (`daemon`).

use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use super::sink::{Held, Running, Sink, StartContext};
use crate::shutdown::Shutdown;

/// How long a reload waits for the records still running under the old routes to leave a
/// sink it stops; then the sink stops under them (their delivery fails and their sources
/// retry: nothing is lost, a copy may be delivered twice).
pub const STOP_WAIT: Duration = Duration::from_secs(5);

/// How a sink a reload stops ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum End {
    /// Replaced or removed: its close delivers what it can (a memory backlog inserts what it
    /// holds up to its stop deadline; a queue file keeps its rows).
    Removed,
    /// Its new instance goes on from it: opens its files, or takes the rows it held in memory.
    Reopened,
    /// Removed with `discard`: the rows it holds are given up, counted `discarded`.
    Discarded,
}

/// Every started sink, with what it runs.
#[derive(Default)]
pub struct Started {
    /// What a sink started by a reload is started with (set at the connector's start).
    ctx: OnceLock<StartContext>,
    entries: Mutex<Vec<Entry>>,
}

struct Entry {
    sink: Arc<Sink>,
    stop: Shutdown,
    running: Running,
    /// Removed by a reload with `drain`: out of the routes, delivering what it holds.
    draining: bool,
    /// Being stopped ([`Started::stop`]): its `running` taken, listed until its ledger part
    /// is retired, so that `config.draining` and the ledger agree.
    stopping: bool,
}

impl Started {
    /// Starts every sink of the connector with `ctx` (kept for the sinks a reload starts).
    pub fn start_all<'a>(
        &self,
        sinks: impl Iterator<Item = &'a Arc<Sink>>,
        ctx: StartContext,
    ) -> std::io::Result<()> {
        for sink in sinks {
            self.start_with(Arc::clone(sink), &ctx)?;
        }
        let _ = self.ctx.set(ctx);
        Ok(())
    }

    /// Starts `sink` (a reload's new or replacing one) as the connector's sinks were started.
    pub fn start(&self, sink: Arc<Sink>) -> std::io::Result<()> {
        let Some(ctx) = self.ctx.get() else {
            return Err(std::io::Error::other("the sinks were not started"));
        };
        self.start_with(sink, ctx)
    }

    fn start_with(&self, sink: Arc<Sink>, ctx: &StartContext) -> std::io::Result<()> {
        let stop = {
            let _entered = ctx.runtime.enter();
            ctx.shutdown.child()
        };
        let own = StartContext {
            shutdown: stop.clone(),
            ..ctx.clone()
        };
        let running = sink.start(&own)?;
        self.lock().push(Entry {
            sink,
            stop,
            running,
            draining: false,
            stopping: false,
        });
        Ok(())
    }

    /// Stops `sink` alone (the instance a reload replaced or removed), once the records
    /// running under older routes left it (up to [`STOP_WAIT`]): its stop signalled, its tasks
    /// and threads ended, then, as `end` says, what it holds delivered in its close (it
    /// commits or inserts what it holds), kept for its next instance (the rows it held in
    /// memory are returned, for [`Sink::adopt`]) or given up, and closed. Its ledger part is
    /// kept by the engine ([`crate::engine::Engine::retire`]) unless its next instance goes on
    /// with it (in its files, or with the rows it held in memory). Blocking: call it off the
    /// runtime's worker threads, with `runtime` to wait for its tasks on.
    pub fn stop(
        &self,
        sink: Arc<Sink>,
        end: End,
        runtime: &tokio::runtime::Handle,
    ) -> Option<Held> {
        // The entry stays listed (a draining one in `config.draining`) until its part of the
        // ledger is retired below.
        let (stop, running, draining) = {
            let mut entries = self.lock();
            let e = entries
                .iter_mut()
                .find(|e| Arc::ptr_eq(&e.sink, &sink) && !e.stopping)?;
            e.stopping = true;
            (e.stop.clone(), std::mem::take(&mut e.running), e.draining)
        };
        let name = sink.name().to_string();
        // Held by its entry, by this call (and by the engine's ledger while it drained) and by
        // the routes now gone: wait for the records that hold those.
        let own = 2 + usize::from(draining);
        let began = std::time::Instant::now();
        while Arc::strong_count(&sink) > own && began.elapsed() < STOP_WAIT {
            std::thread::sleep(Duration::from_millis(5));
        }
        stop.trigger();
        let Running {
            on_signal,
            mut on_close,
            tasks,
        } = running;
        runtime.block_on(async {
            for t in tasks {
                let _ = t.await;
            }
        });
        let join = |threads: Vec<std::thread::JoinHandle<()>>| {
            for t in threads {
                if t.join().is_err() {
                    log::error!("a thread of sink {name} panicked");
                }
            }
        };
        join(on_signal);
        let mut held = None;
        if end != End::Removed {
            // A memory backlog ends after its insert in flight, leaving the rest.
            sink.release();
            join(std::mem::take(&mut on_close));
            match end {
                End::Reopened => held = sink.take_held(),
                End::Discarded => self.discard(&sink),
                End::Removed => {}
            }
        }
        sink.close();
        join(on_close);
        // Its part of the ledger stays, as it ended: the records it took still count. A part
        // kept in its own files, or with the rows it held, goes on in the next instance.
        let goes_on = end == End::Reopened && (sink.is_durable() || held.is_some());
        if !goes_on {
            if let Some(ctx) = self.ctx.get() {
                ctx.engine.retire(&sink);
            }
        }
        self.lock().retain(|e| !Arc::ptr_eq(&e.sink, &sink));
        log::info!("sink stopped: name={name}");
        held
    }

    /// Gives up what `sink` holds (see [`Sink::discard`]), counted in the engine's
    /// `discarded` too, which is alerted.
    fn discard(&self, sink: &Sink) {
        match sink.discard() {
            Ok(rows) => {
                if let Some(ctx) = self.ctx.get() {
                    ctx.engine
                        .stats
                        .discarded
                        .fetch_add(rows, std::sync::atomic::Ordering::Relaxed);
                }
            }
            Err(e) => log::error!(
                "the rows of a sink removed with discard are kept, not given up: sink={} error=\"{e}\"",
                sink.name()
            ),
        }
    }

    /// Keeps `sink` (removed from the routes by a reload) running until what it holds is
    /// delivered; [`Self::finish_drained`] stops it then.
    pub fn drain(&self, sink: &Arc<Sink>) {
        if let Some(e) = self.lock().iter_mut().find(|e| Arc::ptr_eq(&e.sink, sink)) {
            e.draining = true;
            if let Some(ctx) = self.ctx.get() {
                ctx.engine.draining(Arc::clone(sink));
            }
            log::info!(
                "sink draining: name={} rows={}",
                sink.name(),
                sink.held_rows()
            );
        }
    }

    /// True while a sink drains.
    pub fn any_draining(&self) -> bool {
        self.lock().iter().any(|e| e.draining)
    }

    /// The sinks draining, with the rows each still holds (`/api/status`'s
    /// `config.draining`).
    pub fn draining(&self) -> Vec<(String, u64)> {
        self.lock()
            .iter()
            .filter(|e| e.draining)
            .map(|e| (e.sink.name().to_string(), e.sink.held_rows()))
            .collect()
    }

    /// Stops the draining sinks that hold nothing any more. Blocking, as [`Self::stop`].
    pub fn finish_drained(&self, runtime: &tokio::runtime::Handle) {
        let done: Vec<Arc<Sink>> = self
            .lock()
            .iter()
            .filter(|e| e.draining && !e.stopping && e.sink.held_rows() == 0)
            .map(|e| Arc::clone(&e.sink))
            .collect();
        for sink in done {
            self.stop(sink, End::Removed, runtime);
        }
    }

    /// What every started sink runs, for the connector's stop, and the draining sinks (out
    /// of the routes: the stop closes them beside the routed ones).
    pub fn take_all(&self) -> (Running, Vec<Arc<Sink>>) {
        let mut all = Running::default();
        let mut draining = Vec::new();
        for e in self.lock().drain(..) {
            all.extend(e.running);
            // One being stopped is closed by its stop.
            if e.draining && !e.stopping {
                draining.push(e.sink);
            }
        }
        (all, draining)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<Entry>> {
        self.entries.lock().unwrap_or_else(|e| e.into_inner())
    }
}
