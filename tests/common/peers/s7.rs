//! A Siemens S7 PLC nobody here wrote: python-snap7's pure-Python server (pinned in
//! scripts/test.sh) run by `s7_plc.py` (beside this file), serving the areas a test gives it
//! with the bytes the test wrote, on a free loopback port.
//!
//! What the PLC holds is read from the files the script rewrites after every write
//! (`mem/DB10.hex`), not through a client: a test checks the PLC's memory itself. Its log
//! has a line per ReadVar (`read items=N`) and per WriteVar.

use std::fs;
use std::process::Command;

use tempfile::TempDir;

use super::process::{require_python, PeerProcess};
use crate::common::free_port;

/// The PLC script.
const SCRIPT: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/common/peers/s7_plc.py");
/// What to do when python-snap7 is missing.
const INSTALL: &str = "run scripts/test.sh (it pins python-snap7 3.3.0)";

/// An S7 PLC: its areas and their bytes.
pub struct S7Plc {
    port: u16,
    process: PeerProcess,
    dir: TempDir,
}

impl S7Plc {
    /// Starts the PLC serving `areas`, each `("DB", 10, bytes)`, `("M", 0, bytes)`, `("I",
    /// 0, ..)` or `("Q", 0, ..)`; returns once it listens.
    pub fn start(areas: &[(&str, u16, Vec<u8>)]) -> S7Plc {
        require_python("snap7.server", INSTALL);
        let dir = tempfile::Builder::new()
            .prefix("opex-s7-")
            .tempdir()
            .expect("temp dir");
        let spec: Vec<serde_json::Value> = areas
            .iter()
            .map(|(area, index, bytes)| {
                let hex: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
                serde_json::json!({"area": area, "index": index, "hex": hex})
            })
            .collect();
        let spec_file = dir.path().join("areas.json");
        fs::write(&spec_file, serde_json::to_vec(&spec).expect("json")).expect("areas.json");
        let process = PeerProcess::new("python-snap7 server", dir.path().join("plc.log"));
        let mut plc = S7Plc {
            port: free_port(),
            process,
            dir,
        };
        plc.process.spawn(
            Command::new("python3")
                .args([SCRIPT, &plc.port.to_string(), &spec_file.to_string_lossy()])
                .current_dir(plc.dir.path()),
        );
        plc.process.wait_for_port(plc.port);
        plc
    }

    /// The port.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// `s7://127.0.0.1:PORT?rack=0&slot=1`.
    pub fn url(&self) -> String {
        format!("s7://127.0.0.1:{}?rack=0&slot=1", self.port)
    }

    /// The bytes the PLC holds in `area` (`"DB"`, `"M"`, ...) `index` now.
    pub fn memory(&self, area: &str, index: u16) -> Vec<u8> {
        let path = self.dir.path().join(format!("mem/{area}{index}.hex"));
        let hex = fs::read_to_string(&path).unwrap_or_default();
        (0..hex.len() / 2)
            .filter_map(|i| u8::from_str_radix(&hex[2 * i..2 * i + 2], 16).ok())
            .collect()
    }

    /// The PLC's log so far.
    pub fn log(&self) -> String {
        fs::read_to_string(self.dir.path().join("plc.log")).unwrap_or_default()
    }

    /// How many ReadVar requests the PLC answered, and with how many items each.
    pub fn read_requests(&self) -> Vec<usize> {
        self.log()
            .lines()
            .filter_map(|l| l.strip_prefix("read items="))
            .filter_map(|n| n.trim().parse().ok())
            .collect()
    }
}

/// The connector's own simulated S7 CPU (`opex-connector simulate --s7`), run as the real
/// binary on a free loopback port.
pub struct SimulatedCpu {
    port: u16,
    process: PeerProcess,
    _dir: TempDir,
}

impl SimulatedCpu {
    /// Starts `opex-connector simulate` serving only the S7 CPU; returns once it listens.
    pub fn start() -> SimulatedCpu {
        let dir = tempfile::Builder::new()
            .prefix("opex-s7sim-")
            .tempdir()
            .expect("temp dir");
        let port = free_port();
        let mut process = PeerProcess::new("simulated S7 CPU", dir.path().join("sim.log"));
        process.spawn(Command::new(crate::common::BIN).args([
            "simulate",
            "--modbus",
            "off",
            "--opcua",
            "off",
            "--s7",
            &format!("127.0.0.1:{port}"),
        ]));
        process.wait_for_port(port);
        SimulatedCpu {
            port,
            process,
            _dir: dir,
        }
    }

    /// `s7://127.0.0.1:PORT?rack=0&slot=1`.
    pub fn url(&self) -> String {
        format!("s7://127.0.0.1:{}?rack=0&slot=1", self.port)
    }

    /// The port.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// Stops it (SIGTERM).
    pub fn stop(&mut self) {
        self.process.stop();
    }
}
