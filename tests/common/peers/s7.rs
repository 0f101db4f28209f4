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
        plc.start_again();
        plc
    }

    /// Stops the PLC (SIGTERM): its port refuses connections until [`S7Plc::start_again`].
    pub fn stop(&mut self) {
        self.process.stop();
    }

    /// Starts the PLC on its port with the areas and bytes it was first given; returns once
    /// it listens.
    pub fn start_again(&mut self) {
        let spec_file = self.dir.path().join("areas.json");
        self.process.spawn(
            Command::new("python3")
                .args([SCRIPT, &self.port.to_string(), &spec_file.to_string_lossy()])
                .current_dir(self.dir.path()),
        );
        self.process.wait_for_port(self.port);
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

/// DB10 with one value of every S7 type at a known place, big-endian as the CPU stores it:
/// `DBX0.3` and `DBX0.5` set (`DBX0.4` clear), `DBB1` byte 200, `DBB2` char `Z`, `DBW4` word
/// 65534, `DBW6` int -2, `DBD8` dword 0xDEADBEEF, `DBD12` dint -100000, `DBD16` real -3.5,
/// `DBB20` lreal 12345.678, `DBB28` string[10] `Ofen 3`, `DBB40` date_and_time and `DBB48`
/// dtl 2026-12-04 18:03:49 (.123 and .250), `DBW60` s5time 12.3 s, `DBD62` time -5 s.
pub fn typed_db() -> Vec<u8> {
    let mut db = vec![0u8; 66];
    db[0] = 0b0010_1000; // DBX0.3 and DBX0.5 set, DBX0.4 clear
    db[1] = 200; // byte
    db[2] = b'Z'; // char
    db[4..6].copy_from_slice(&[0xFF, 0xFE]); // word 65534
    db[6..8].copy_from_slice(&(-2i16).to_be_bytes()); // int
    db[8..12].copy_from_slice(&0xDEAD_BEEFu32.to_be_bytes()); // dword
    db[12..16].copy_from_slice(&(-100_000i32).to_be_bytes()); // dint
    db[16..20].copy_from_slice(&(-3.5f32).to_be_bytes()); // real
    db[20..28].copy_from_slice(&12345.678f64.to_be_bytes()); // lreal
    db[28..36].copy_from_slice(&[10, 6, b'O', b'f', b'e', b'n', b' ', b'3']); // string[10]
    db[40..48].copy_from_slice(&[0x26, 0x12, 0x04, 0x18, 0x03, 0x49, 0x12, 0x36]); // DT
    db[48..60].copy_from_slice(&[0x07, 0xEA, 12, 4, 6, 18, 3, 49, 0x0E, 0xE6, 0xB2, 0x80]); // DTL
    db[60..62].copy_from_slice(&[0x11, 0x23]); // s5time: 123 × 100 ms
    db[62..66].copy_from_slice(&(-5000i32).to_be_bytes()); // time
    db
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
