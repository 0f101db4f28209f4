//! ClickHouse of its own: `clickhouse-server --config-file` with a minimal config in the
//! server's temp dir, the HTTP interface only, on a free loopback port. Readiness is `/ping`
//! answering 200, polled with a deadline; a restart keeps the port and the data dir.

use std::fs;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

use tempfile::TempDir;

use super::process::{binary, PeerProcess};
use crate::common::free_port;

/// The password of the `default` user.
pub const CH_PASSWORD: &str = "ch-pass";

/// A ClickHouse server of its own: HTTP interface only, user `default` with [`CH_PASSWORD`].
pub struct ClickHouse {
    dir: TempDir,
    port: u16,
    process: PeerProcess,
    agent: ureq::Agent,
}

impl ClickHouse {
    /// Writes a minimal config and starts the server on a free port.
    pub fn start() -> ClickHouse {
        let dir = tempfile::Builder::new()
            .prefix("opex-ch-")
            .tempdir()
            .expect("temp dir");
        let port = free_port();
        let d = dir.path().display();
        // `<yandex>` is the root element 18.16 reads; current servers still accept it.
        let config = format!(
            r#"<yandex>
  <logger><level>warning</level><log>{d}/server.log</log><errorlog>{d}/error.log</errorlog></logger>
  <http_port>{port}</http_port>
  <listen_host>127.0.0.1</listen_host>
  <path>{d}/data/</path>
  <tmp_path>{d}/tmp/</tmp_path>
  <user_files_path>{d}/user_files/</user_files_path>
  <format_schema_path>{d}/format_schemas/</format_schema_path>
  <users_config>{d}/users.xml</users_config>
  <default_profile>default</default_profile>
  <default_database>default</default_database>
  <mark_cache_size>67108864</mark_cache_size>
</yandex>
"#
        );
        let users = format!(
            r#"<yandex>
  <profiles><default></default></profiles>
  <users><default><password>{CH_PASSWORD}</password><networks><ip>127.0.0.1</ip><ip>::1</ip></networks><profile>default</profile><quota>default</quota></default></users>
  <quotas><default></default></quotas>
</yandex>
"#
        );
        fs::write(dir.path().join("config.xml"), config).expect("write config.xml");
        fs::write(dir.path().join("users.xml"), users).expect("write users.xml");
        let agent = ureq::Agent::config_builder()
            .timeout_global(Some(Duration::from_secs(30)))
            .http_status_as_error(false)
            .build()
            .into();
        // Its own log files hold the errors; stdout.log what it says before it reads them.
        let process = PeerProcess::new("clickhouse-server", dir.path().join("stdout.log"))
            .with_log(dir.path().join("error.log"));
        let mut ch = ClickHouse {
            dir,
            port,
            process,
            agent,
        };
        ch.launch();
        ch
    }

    fn launch(&mut self) {
        let config = self.dir.path().join("config.xml");
        self.process.spawn(
            Command::new(binary("clickhouse-server"))
                .arg(format!("--config-file={}", config.display()))
                .current_dir(self.dir.path()),
        );
        let (agent, ping) = (self.agent.clone(), format!("{}/ping", self.url()));
        self.process.wait_ready("answering /ping", || {
            agent.get(&ping).call().is_ok_and(|r| r.status() == 200)
        });
    }

    /// Starts again on the same port and data dir (after [`ClickHouse::stop`] or
    /// [`ClickHouse::kill9`]); returns once `/ping` answers.
    pub fn restart(&mut self) {
        self.launch();
    }

    /// SIGTERM: the server shuts down cleanly.
    pub fn stop(&mut self) {
        self.process.stop();
    }

    /// SIGKILL (as a crash or a pulled cable would).
    pub fn kill9(&mut self) {
        self.process.kill9();
    }

    /// `http://127.0.0.1:<port>`.
    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// The HTTP port.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// The temp dir (config, logs, data).
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// Runs a query and returns the body; panics on an error.
    pub fn sql(&self, sql: &str) -> String {
        let mut reply = self
            .agent
            .post(format!("{}/", self.url()))
            .header("Authorization", basic("default", CH_PASSWORD))
            .send(sql)
            .unwrap_or_else(|e| panic!("clickhouse {sql:?}: {e}"));
        let status = reply.status().as_u16();
        let body = reply.body_mut().read_to_string().unwrap_or_default();
        assert_eq!(status, 200, "clickhouse {sql:?}: {body}");
        body
    }

    /// Posts a raw body to `/?query=...` (the bulk load); returns the status and body.
    pub fn insert_raw(&self, query_encoded: &str, body: &[u8]) -> (u16, String) {
        let mut reply = self
            .agent
            .post(format!("{}/?query={query_encoded}", self.url()))
            .header("Authorization", basic("default", CH_PASSWORD))
            .send(body)
            .unwrap_or_else(|e| panic!("clickhouse insert: {e}"));
        let status = reply.status().as_u16();
        (
            status,
            reply.body_mut().read_to_string().unwrap_or_default(),
        )
    }
}

/// `Basic base64(user:password)`.
pub fn basic(user: &str, password: &str) -> String {
    const ABC: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let data = format!("{user}:{password}").into_bytes();
    let mut out = String::new();
    for chunk in data.chunks(3) {
        let b = [
            chunk[0],
            *chunk.get(1).unwrap_or(&0),
            *chunk.get(2).unwrap_or(&0),
        ];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(ABC[((n >> (18 - 6 * i)) & 63) as usize] as char);
            } else {
                out.push('=');
            }
        }
    }
    format!("Basic {out}")
}
