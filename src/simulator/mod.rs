//! The built-in simulator: a small plant served over Modbus TCP and as a Siemens S7 CPU
//! ([`s7`]), so that a newcomer sees live machine values without a machine
//! (`opex-connector simulate`, or `simulator:` in a config, which the demo uses to poll
//! itself). With the `simulator` cargo feature, [`opcua`] serves the plant over OPC-UA too (a
//! large addition to the binary; see the book's `docs/src/deployment/README.md`, "Three
//! builds").

pub mod modbus;
#[cfg(feature = "simulator")]
pub mod opcua;
pub mod s7;

use std::io::Write;
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
    /// Serve the simulated plant over OPC-UA (security None, anonymous) at this address and
    /// port, e.g. `127.0.0.1:4840`; node ids are `ns=<plant namespace>;s=Plant...` (see
    /// `src/simulator/opcua.rs`). Needs a build with the `simulator` feature (the default).
    pub opcua: Option<String>,
    /// Serve the simulated plant as a Siemens S7 CPU (S7comm over ISO-on-TCP, any rack and
    /// slot) at this address and port, e.g. `127.0.0.1:1102`; its memory map is in
    /// `src/simulator/s7.rs` (the plant in `DB1`).
    pub s7: Option<String>,
}

/// `simulator:`, validated.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SimulatorConfig {
    /// Where the Modbus TCP plant listens; `None`: not started.
    pub modbus: Option<SocketAddr>,
    /// Where the OPC-UA plant listens; `None`: not started.
    pub opcua: Option<SocketAddr>,
    /// Where the S7 CPU listens; `None`: not started.
    pub s7: Option<SocketAddr>,
}

impl SimulatorConfig {
    /// Validates `simulator:`.
    pub fn validate(raw: Option<&RawSimulator>, path: &str, p: &mut Problems) -> Self {
        let Some(raw) = raw else {
            return Self::default();
        };
        let mut address = |key: &str, value: Option<&str>, example: &str| {
            value.and_then(|s| match s.parse::<SocketAddr>() {
                Ok(a) => Some(a),
                Err(_) => {
                    p.push(
                        format!("{path}.{key}"),
                        format!("expected an address and port like {example}, got {s:?}"),
                    );
                    None
                }
            })
        };
        let modbus = address("modbus", raw.modbus.as_deref(), "127.0.0.1:5020");
        let opcua = address("opcua", raw.opcua.as_deref(), "127.0.0.1:4840");
        let s7 = address("s7", raw.s7.as_deref(), "127.0.0.1:1102");
        if cfg!(not(feature = "simulator")) && opcua.is_some() {
            p.push(
                format!("{path}.opcua"),
                "this build has no OPC-UA simulator (it was built without the `simulator` feature)",
            );
        }
        Self { modbus, opcua, s7 }
    }
}

/// The simulator's listeners, bound before anything polls them.
pub struct Simulator {
    modbus: Option<std::net::TcpListener>,
    opcua: Option<std::net::TcpListener>,
    s7: Option<std::net::TcpListener>,
}

impl Simulator {
    /// Binds what `cfg` asks for.
    pub fn bind(cfg: &SimulatorConfig) -> std::io::Result<Self> {
        let listen = |addr: Option<SocketAddr>| -> std::io::Result<_> {
            match addr {
                Some(addr) => {
                    let l = std::net::TcpListener::bind(addr)?;
                    l.set_nonblocking(true)?;
                    Ok(Some(l))
                }
                None => Ok(None),
            }
        };
        Ok(Self {
            modbus: listen(cfg.modbus)?,
            opcua: listen(cfg.opcua)?,
            s7: listen(cfg.s7)?,
        })
    }

    /// The Modbus TCP address actually bound (port 0 picks one).
    pub fn modbus_addr(&self) -> Option<SocketAddr> {
        self.modbus.as_ref().and_then(|l| l.local_addr().ok())
    }

    /// The OPC-UA address actually bound (port 0 picks one).
    pub fn opcua_addr(&self) -> Option<SocketAddr> {
        self.opcua.as_ref().and_then(|l| l.local_addr().ok())
    }

    /// The S7 address actually bound (port 0 picks one).
    pub fn s7_addr(&self) -> Option<SocketAddr> {
        self.s7.as_ref().and_then(|l| l.local_addr().ok())
    }

    /// Serves until `shutdown`; call inside a tokio runtime.
    pub fn spawn(self, shutdown: Shutdown) -> Vec<tokio::task::JoinHandle<()>> {
        let mut tasks = Vec::new();
        if let Some(l) = self.modbus {
            let addr = l.local_addr().ok();
            let shutdown = shutdown.clone();
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
        if let Some(l) = self.s7 {
            let addr = l.local_addr().ok();
            let shutdown = shutdown.clone();
            tasks.push(tokio::spawn(async move {
                let result = match tokio::net::TcpListener::from_std(l) {
                    Ok(l) => s7::serve(l, shutdown).await,
                    Err(e) => Err(e),
                };
                if let Err(e) = result {
                    log::error!("simulator stopped: protocol=s7 addr={addr:?} error=\"{e}\"");
                }
            }));
        }
        #[cfg(feature = "simulator")]
        if let Some(l) = self.opcua {
            tasks.push(tokio::spawn(async move {
                if let Err(e) = opcua::serve_on(l, shutdown).await {
                    log::error!("simulator stopped: protocol=opcua error=\"{e}\"");
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
    // What it serves, on stdout; a closed stdout (`| head`) does not stop the simulator.
    let mut out = std::io::stdout();
    if let Some(a) = sim.modbus_addr() {
        let _ = writeln!(
            out,
            "simulator: Modbus TCP plant on {a} (any unit id; see src/simulator/modbus.rs for the map)"
        );
    }
    if let Some(a) = sim.s7_addr() {
        let _ = writeln!(
            out,
            "simulator: Siemens S7 CPU on {a} (any rack and slot; the plant in DB1, see src/simulator/s7.rs for the map)"
        );
    }
    #[cfg(feature = "simulator")]
    if let Some(a) = sim.opcua_addr() {
        let _ = writeln!(
            out,
            "simulator: OPC-UA plant on opc.tcp://{a}/ (security None, anonymous; node ids ns={};s=Plant..., see src/simulator/opcua.rs)",
            opcua::PLANT_NAMESPACE
        );
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
