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
/// `Counter`, `PumpOn` and `Setpoint` (see the script).
pub struct OpcuaServer {
    port: u16,
    /// User name and password in secure mode.
    secure: Option<(String, String)>,
    /// The folder of the server's certificate in secure mode (under the temp dir unless given).
    pki: Option<std::path::PathBuf>,
    process: PeerProcess,
    dir: TempDir,
}

impl OpcuaServer {
    /// Security None, anonymous.
    pub fn start() -> OpcuaServer {
        OpcuaServer::launch_new(None, None)
    }

    /// Only Basic256Sha256 Sign and SignAndEncrypt, and only `user` with `password` may log in.
    pub fn start_secure(user: &str, password: &str) -> OpcuaServer {
        OpcuaServer::launch_new(Some((user.to_string(), password.to_string())), None)
    }

    /// As [`OpcuaServer::start_secure`], with the certificate and key in `pki`
    /// (`server-cert.der`, `server-key.pem`): a pair put there first is used as it is (made
    /// with other subject alternative names, say), else one is made there.
    pub fn start_secure_in(user: &str, password: &str, pki: &Path) -> OpcuaServer {
        OpcuaServer::launch_new(
            Some((user.to_string(), password.to_string())),
            Some(pki.to_path_buf()),
        )
    }

    fn launch_new(
        secure: Option<(String, String)>,
        pki: Option<std::path::PathBuf>,
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
