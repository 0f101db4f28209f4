//! An OPC-UA server nobody here wrote: asyncua (pinned in scripts/test.sh) running
//! `opcua_server.py` (beside this file) on a free loopback port, in its own temp dir.
//!
//! Readiness is the script's `ready` line (printed once the address space is built and the
//! server listens), polled with a deadline. In secure mode its certificate is made under the
//! temp dir on first start and kept across restarts, so a restart on the same port is the
//! same server to a client that trusted it.

use std::path::Path;
use std::process::Command;

use tempfile::TempDir;

use super::process::{require_python, PeerProcess};
use crate::common::free_port;

/// The server script.
const SCRIPT: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/tests/common/peers/opcua_server.py"
);

/// The asyncua server: namespace `urn:opex-test` (index 2) with `ns=2;s=Temperature`,
/// `Counter`, `PumpOn` and `Setpoint` (read only), and writable `W.<Type>` for every type a
/// command writes, `W.Slow` and `W.Clamped` (see the script). It logs what clients write:
/// [`OpcuaServer::writes`].
pub struct OpcuaServer {
    port: u16,
    /// User name and password in secure mode.
    secure: Option<(String, String)>,
    /// The folder of the server's certificate in secure mode (under the temp dir unless given).
    pki: Option<std::path::PathBuf>,
    /// More arguments of the script (`--hold-subscribe-ms`, ...).
    args: Vec<String>,
    process: PeerProcess,
    dir: TempDir,
}

impl OpcuaServer {
    /// Security None, anonymous.
    pub fn start() -> OpcuaServer {
        OpcuaServer::launch_new(None, None, &[])
    }

    /// Security None, anonymous, with more arguments of the script (see its doc), e.g.
    /// `["--hold-subscribe-ms", "1500"]`.
    pub fn start_with(args: &[&str]) -> OpcuaServer {
        OpcuaServer::launch_new(None, None, args)
    }

    /// Only Basic256Sha256 Sign and SignAndEncrypt, and only `user` with `password` may log in.
    pub fn start_secure(user: &str, password: &str) -> OpcuaServer {
        OpcuaServer::launch_new(Some((user.to_string(), password.to_string())), None, &[])
    }

    /// As [`OpcuaServer::start_secure`], with the certificate and key in `pki`
    /// (`server-cert.der`, `server-key.pem`): a pair put there first is used as it is (made
    /// with other subject alternative names, say), else one is made there.
    pub fn start_secure_in(user: &str, password: &str, pki: &Path) -> OpcuaServer {
        OpcuaServer::launch_new(
            Some((user.to_string(), password.to_string())),
            Some(pki.to_path_buf()),
            &[],
        )
    }

    fn launch_new(
        secure: Option<(String, String)>,
        pki: Option<std::path::PathBuf>,
        args: &[&str],
    ) -> OpcuaServer {
        require_python(
            "asyncua",
            "run scripts/test.sh (it installs the pinned asyncua) or `python3 -m pip install asyncua==1.1.8`",
        );
        let dir = tempfile::Builder::new()
            .prefix("opex-opcua-")
            .tempdir()
            .expect("temp dir");
        let process = PeerProcess::new("asyncua server", dir.path().join("server.log"));
        let mut server = OpcuaServer {
            port: free_port(),
            secure,
            pki,
            args: args.iter().map(|a| a.to_string()).collect(),
            process,
            dir,
        };
        server.launch();
        server
    }

    fn launch(&mut self) {
        let mut cmd = Command::new("python3");
        cmd.arg(SCRIPT)
            .arg("--port")
            .arg(self.port.to_string())
            .arg("--writes")
            .arg(self.writes_log())
            .args(&self.args)
            .current_dir(self.dir.path());
        if let Some((user, password)) = &self.secure {
            let pki = self
                .pki
                .clone()
                .unwrap_or_else(|| self.dir.path().join("pki"));
            cmd.arg("--secure")
                .arg(pki)
                .args(["--user", user, "--password", password]);
        }
        self.process.spawn(&mut cmd);
        self.process.wait_for_line("ready");
    }

    /// `opc.tcp://127.0.0.1:<port>/opex-test/`.
    pub fn endpoint(&self) -> String {
        format!("opc.tcp://127.0.0.1:{}/opex-test/", self.port)
    }

    /// The same endpoint by name (`localhost`) instead of by address.
    pub fn endpoint_by_name(&self) -> String {
        format!("opc.tcp://localhost:{}/opex-test/", self.port)
    }

    /// Where the script logs the clients' writes, data type reads and monitored items (JSON
    /// lines).
    fn writes_log(&self) -> std::path::PathBuf {
        self.dir.path().join("writes.jsonl")
    }

    /// Each Write request a client sent, oldest first: per node `{"node":"W.Double",
    /// "sent_type","sent","status","stored","stored_type"}` (`stored`: the node's value after
    /// the write, read in the server's address space).
    pub fn writes(&self) -> Vec<Vec<serde_json::Value>> {
        self.log_entries("write")
    }

    /// The nodes of each Read request of DataType attributes a client sent, oldest first.
    pub fn data_type_reads(&self) -> Vec<Vec<serde_json::Value>> {
        self.log_entries("data_types")
    }

    /// The nodes of each CreateMonitoredItems request a client sent, oldest first (logged
    /// before the answer, which `--hold-subscribe-ms` holds).
    pub fn monitored_item_requests(&self) -> Vec<Vec<serde_json::Value>> {
        self.log_entries("monitored_items")
    }

    fn log_entries(&self, key: &str) -> Vec<Vec<serde_json::Value>> {
        let text = std::fs::read_to_string(self.writes_log()).unwrap_or_default();
        text.lines()
            .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
            .filter_map(|v| v.get(key).and_then(|n| n.as_array()).cloned())
            .collect()
    }

    /// The port.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// The temp dir (log; the certificate under `pki/` in secure mode).
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// SIGTERM.
    pub fn stop(&mut self) {
        self.process.stop();
    }

    /// SIGKILL.
    pub fn kill9(&mut self) {
        self.process.kill9();
    }

    /// Starts again on the same port and certificate (after [`OpcuaServer::stop`] or
    /// [`OpcuaServer::kill9`]); returns once it is ready.
    pub fn restart(&mut self) {
        self.launch();
    }
}

/// The built-in simulator's OPC-UA plant (`opex_connector::simulator::opcua`), served in the
/// test's process on a runtime of its own, on a free loopback port.
#[cfg(feature = "simulator")]
pub struct SimulatorPlant {
    /// Its endpoint and namespace.
    pub sim: opex_connector::simulator::opcua::Simulator,
    shutdown: opex_connector::shutdown::Shutdown,
    server: Option<tokio::task::JoinHandle<Result<(), String>>>,
    runtime: tokio::runtime::Runtime,
    _pki: TempDir,
}

#[cfg(feature = "simulator")]
impl SimulatorPlant {
    /// Starts it; returns once it listens.
    pub fn start() -> SimulatorPlant {
        let shutdown = opex_connector::shutdown::Shutdown::new();
        let pki = tempfile::tempdir().expect("temp dir");
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .expect("runtime");
        let (sim, run) = runtime
            .block_on(async {
                let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
                opex_connector::simulator::opcua::start(listener, pki.path(), shutdown.clone())
                    .map_err(std::io::Error::other)
            })
            .expect("start the simulator");
        let server = Some(runtime.spawn(run));
        SimulatorPlant {
            sim,
            shutdown,
            server,
            runtime,
            _pki: pki,
        }
    }

    /// Stops it and returns how its server ended.
    pub fn stop(mut self) -> Result<(), String> {
        self.shutdown.trigger();
        match self.server.take() {
            Some(task) => self
                .runtime
                .block_on(task)
                .unwrap_or_else(|e| Err(format!("the simulator's task failed: {e}"))),
            None => Ok(()),
        }
    }
}
