//! A Modbus device nobody here wrote: pymodbus (pinned in scripts/test.sh) serving the
//! register map of `modbus_device.py` (beside this file), over TCP on a free loopback port or
//! over RTU on a `socat` pty pair in the device's temp dir.
//!
//! Readiness is polled with a deadline: the TCP port accepting connections, or the RTU
//! device having opened its end of the pty pair. A restart brings the device back on the same
//! port (TCP) or the same line (RTU: the pty pair stays up while the device is down, as a
//! cable does when the device loses power).

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

use tempfile::TempDir;

use super::process::{require_python, PeerProcess};
use crate::common::free_port;

/// The device script.
const SCRIPT: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/tests/common/peers/modbus_device.py"
);
/// What to do when pymodbus is missing.
const INSTALL: &str = "run scripts/test.sh (it pins pymodbus 3.7.4 and pyserial 3.5)";

/// A pymodbus device on Modbus TCP: unit 1, and unit 2 with a sparse map (see the script).
pub struct ModbusTcp {
    port: u16,
    process: PeerProcess,
    dir: TempDir,
}

impl ModbusTcp {
    /// Starts the device on a free loopback port; returns once it listens.
    pub fn start() -> ModbusTcp {
        require_python("pymodbus, serial", INSTALL);
        let dir = tempfile::Builder::new()
            .prefix("opex-modbus-")
            .tempdir()
            .expect("temp dir");
        let process = PeerProcess::new("pymodbus (TCP)", dir.path().join("device.log"));
        let mut device = ModbusTcp {
            port: free_port(),
            process,
            dir,
        };
        device.launch();
        device
    }

    fn launch(&mut self) {
        self.process.spawn(
            Command::new("python3")
                .args([SCRIPT, "tcp", &self.port.to_string()])
                .current_dir(self.dir.path()),
        );
        self.process.wait_for_port(self.port);
    }

    /// The port.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// The device's log so far: a `request unit=U function=F` line per request.
    pub fn log(&self) -> String {
        fs::read_to_string(self.dir.path().join("device.log")).unwrap_or_default()
    }

    /// SIGTERM.
    pub fn stop(&mut self) {
        self.process.stop();
    }

    /// SIGKILL (a power cut).
    pub fn kill9(&mut self) {
        self.process.kill9();
    }

    /// Reads `count` holding registers from `start` on a connection of the test's own, as
    /// the device holds them (its datastore, not what the connector last polled).
    pub fn read_holding(&self, start: u16, count: u16) -> Vec<u16> {
        self.read(|mut ctx| async move {
            use tokio_modbus::client::Reader;
            ctx.read_holding_registers(start, count).await
        })
    }

    /// Reads `count` coils from `start`, as [`ModbusTcp::read_holding`] does.
    pub fn read_coils(&self, start: u16, count: u16) -> Vec<bool> {
        let mut bits = self.read(|mut ctx| async move {
            use tokio_modbus::client::Reader;
            ctx.read_coils(start, count).await
        });
        bits.truncate(usize::from(count));
        bits
    }

    /// Writes holding register `addr` (FC 6) on a connection of the test's own: how a test
    /// sets the device's control registers (see the script).
    pub fn write_holding(&self, addr: u16, value: u16) {
        self.read(|mut ctx| async move {
            use tokio_modbus::client::Writer;
            ctx.write_single_register(addr, value).await
        })
    }

    /// When each write of unit 1 was stored (Unix ms), by its first address, oldest first,
    /// from the device's log.
    pub fn writes_at(&self) -> Vec<(u16, u64)> {
        self.log()
            .lines()
            .filter_map(|l| {
                let l = l.strip_prefix("write address=")?;
                let (addr, rest) = l.split_once(' ')?;
                let at = rest.rsplit_once("at_ms=")?.1;
                Some((addr.parse().ok()?, at.trim().parse().ok()?))
            })
            .collect()
    }

    fn read<T, F>(&self, f: impl FnOnce(tokio_modbus::client::Context) -> F) -> T
    where
        F: std::future::Future<Output = tokio_modbus::Result<T>>,
    {
        let port = self.port;
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("a runtime for the test's Modbus client");
        rt.block_on(async move {
            let addr = std::net::SocketAddr::from(([127, 0, 0, 1], port));
            let ctx = tokio::time::timeout(
                std::time::Duration::from_secs(5),
                tokio_modbus::client::tcp::connect_slave(addr, tokio_modbus::Slave(1)),
            )
            .await
            .expect("connect in time")
            .expect("connect to pymodbus");
            tokio::time::timeout(std::time::Duration::from_secs(5), f(ctx))
                .await
                .expect("pymodbus answers the test's read in time")
                .expect("no transport error")
                .expect("no exception")
        })
    }

    /// Starts again on the same port (after [`ModbusTcp::stop`] or [`ModbusTcp::kill9`]);
    /// returns once it listens.
    pub fn restart(&mut self) {
        self.launch();
    }
}

/// A pymodbus device on Modbus RTU (19200 baud, unit 1; other units get no answer at all) at
/// one end of a `socat` pty pair; the connector opens [`ModbusRtu::serial_port`].
pub struct ModbusRtu {
    device_end: PathBuf,
    connector_end: PathBuf,
    // Dropped in this order: the device, then the line, then the temp dir.
    process: PeerProcess,
    _line: PeerProcess,
    dir: TempDir,
}

impl ModbusRtu {
    /// Makes the pty pair, starts the device on its end; returns once the device opened it.
    pub fn start() -> ModbusRtu {
        require_python("pymodbus, serial", INSTALL);
        let dir = tempfile::Builder::new()
            .prefix("opex-modbus-rtu-")
            .tempdir()
            .expect("temp dir");
        let device_end = dir.path().join("device");
        let connector_end = dir.path().join("connector");
        let mut line = PeerProcess::new("socat (pty pair)", dir.path().join("socat.log"));
        line.spawn(Command::new("socat").args([
            format!("pty,raw,echo=0,link={}", device_end.display()),
            format!("pty,raw,echo=0,link={}", connector_end.display()),
        ]));
        line.wait_ready("making the pty links", || {
            device_end.exists() && connector_end.exists()
        });
        let process = PeerProcess::new("pymodbus (RTU)", dir.path().join("device.log"));
        let mut device = ModbusRtu {
            device_end,
            connector_end,
            process,
            _line: line,
            dir,
        };
        device.launch();
        device
    }

    fn launch(&mut self) {
        self.process.spawn(
            Command::new("python3")
                .args([SCRIPT, "rtu", &self.device_end.to_string_lossy()])
                .current_dir(self.dir.path()),
        );
        // The pty the link points to, as /proc shows the device's open files.
        let pty = fs::canonicalize(&self.device_end).expect("resolve the device's pty link");
        let pid = self.process.pid().expect("the device was spawned");
        self.process
            .wait_ready(&format!("opening {}", pty.display()), || {
                has_open(pid, &pty)
            });
    }

    /// The connector's end of the line (its `port`).
    pub fn serial_port(&self) -> &Path {
        &self.connector_end
    }

    /// The device's log so far: a `request unit=U function=F` line per request.
    pub fn log(&self) -> String {
        fs::read_to_string(self.dir.path().join("device.log")).unwrap_or_default()
    }

    /// SIGTERM to the device; the line stays.
    pub fn stop(&mut self) {
        self.process.stop();
    }

    /// SIGKILL to the device (a power cut); the line stays.
    pub fn kill9(&mut self) {
        self.process.kill9();
    }

    /// Starts the device again on the same line (after [`ModbusRtu::stop`] or
    /// [`ModbusRtu::kill9`]); returns once it opened its end.
    pub fn restart(&mut self) {
        self.launch();
    }
}

/// Whether process `pid` has `file` open (Linux: its `/proc/<pid>/fd` links).
fn has_open(pid: u32, file: &Path) -> bool {
    fs::read_dir(format!("/proc/{pid}/fd"))
        .into_iter()
        .flatten()
        .flatten()
        .any(|fd| fs::read_link(fd.path()).is_ok_and(|target| target == file))
}
