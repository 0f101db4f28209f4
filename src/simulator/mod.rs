//! The built-in simulator: a small plant served over Modbus TCP, so that a newcomer sees live
//! machine values without a machine (`opex-connector simulate`, or `simulator:` in a config,
//! which the demo uses to poll itself). With the `simulator` cargo feature, [`opcua`] serves
//! the plant over OPC-UA too (a large addition to the binary; see the README).

pub mod modbus;
#[cfg(feature = "simulator")]
pub mod opcua;

use std::net::SocketAddr;

use serde::Deserialize;

use crate::config::Problems;
use crate::shutdown::Shutdown;

/// `simulator:`
#[derive(Debug, Default, Deserialize)]
pub struct RawSimulator {
    /// Serve the simulated plant over Modbus TCP at this address and port, e.g.
    /// `127.0.0.1:5020`, inside the connector's process.
    pub modbus: Option<String>,
}

/// `simulator:`, validated.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SimulatorConfig {
    /// Where the Modbus TCP plant listens; `None`: not started.
    pub modbus: Option<SocketAddr>,
}

impl SimulatorConfig {
    /// Validates `simulator:`.
    pub fn validate(raw: Option<&RawSimulator>, path: &str, p: &mut Problems) -> Self {
        let Some(raw) = raw else {
            return Self::default();
        };
        let modbus = raw
            .modbus
            .as_deref()
            .and_then(|s| match s.parse::<SocketAddr>() {
                Ok(a) => Some(a),
                Err(_) => {
                    p.push(
                        format!("{path}.modbus"),
                        format!("expected an address and port like 127.0.0.1:5020, got {s:?}"),
                    );
                    None
                }
            });
        Self { modbus }
    }
}

/// The simulator's listeners, bound before anything polls them.
pub struct Simulator {
    modbus: Option<std::net::TcpListener>,
}

impl Simulator {
    /// Binds what `cfg` asks for.
    pub fn bind(cfg: &SimulatorConfig) -> std::io::Result<Self> {
        let modbus = match cfg.modbus {
            Some(addr) => {
                let l = std::net::TcpListener::bind(addr)?;
                l.set_nonblocking(true)?;
                Some(l)
            }
            None => None,
        };
        Ok(Self { modbus })
    }

    /// The Modbus TCP address actually bound (port 0 picks one).
    pub fn modbus_addr(&self) -> Option<SocketAddr> {
        self.modbus.as_ref().and_then(|l| l.local_addr().ok())
    }

    /// Serves until `shutdown`; call inside a tokio runtime.
    pub fn spawn(self, shutdown: Shutdown) -> Vec<tokio::task::JoinHandle<()>> {
        let mut tasks = Vec::new();
        if let Some(l) = self.modbus {
            let addr = l.local_addr().ok();
            tasks.push(tokio::spawn(async move {
                let result = match tokio::net::TcpListener::from_std(l) {
                    Ok(l) => modbus::serve(l, shutdown).await,
                    Err(e) => Err(e),
                };
                if let Err(e) = result {
                    log::error!("simulator stopped: protocol=modbus addr={addr:?} error=\"{e}\"");
                }
            }));
        }
        tasks
    }
}

/// `opex-connector simulate`: serves the plant until SIGINT or SIGTERM.
pub fn run(cfg: &SimulatorConfig) -> std::io::Result<()> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    let sim = Simulator::bind(cfg)?;
    if let Some(a) = sim.modbus_addr() {
        println!("simulator: Modbus TCP plant on {a} (any unit id; see src/simulator/modbus.rs for the map)");
    }
    let shutdown = Shutdown::new();
    runtime.block_on(async {
        let tasks = sim.spawn(shutdown.clone());
        crate::daemon::wait_for_signal().await;
        shutdown.trigger();
        for t in tasks {
            let _ = t.await;
        }
    });
    Ok(())
}
