//! Real database servers for the sink tests, each started on a free loopback port in its own
//! temp dir and stopped on drop: PostgreSQL (`initdb` + `pg_ctl`, run as the `postgres` user
//! when the tests run as root) and ClickHouse (`clickhouse-server --config-file` with a
//! minimal config). A missing binary fails the test with the command that installs it.
//! Readiness is polled, never slept for.
#![allow(dead_code)]

use std::fs;
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::thread;
use std::time::{Duration, Instant};

use tempfile::TempDir;

/// How long a server may take to start (a loaded CI box builds in parallel).
const START_DEADLINE: Duration = Duration::from_secs(60);

/// A free loopback port (bound, read back, released: the server binds it right after).
pub fn free_port() -> u16 {
    let l = TcpListener::bind("127.0.0.1:0").expect("bind a free port");
    l.local_addr().expect("local addr").port()
}

fn run(cmd: &mut Command, what: &str) -> Output {
    let out = cmd
        .output()
        .unwrap_or_else(|e| panic!("{what}: cannot run {cmd:?}: {e}"));
    assert!(
        out.status.success(),
        "{what} failed ({}):\n{}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

fn is_root() -> bool {
    Command::new("id")
        .arg("-u")
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim() == "0")
        .unwrap_or(false)
}

// ------------------------------------------------------------------ PostgreSQL

/// A PostgreSQL server of its own: superuser `postgres`, trust auth, database `postgres`.
pub struct Postgres {
    dir: TempDir,
    bin: PathBuf,
    port: u16,
    /// `Some("postgres")` when the tests run as root (the server refuses to run as root).
    user: Option<String>,
    /// Extra server options (TLS).
    opts: String,
}

impl Postgres {
    /// `initdb` and start a server on a free port.
    pub fn start() -> Postgres {
        Self::init(false)
    }

    /// Like [`Postgres::start`] with TLS on (`ssl=on`, a server certificate for `127.0.0.1`
    /// signed by a CA made here with the `openssl` tool); returns the CA's PEM file too.
    pub fn start_tls() -> (Postgres, PathBuf) {
        let pg = Self::init(true);
        let ca = pg.dir.path().join("ca.pem");
        (pg, ca)
    }

    fn init(tls: bool) -> Postgres {
        let bin = pg_bin();
        let dir = tempfile::Builder::new()
            .prefix("opex-pg-")
            .tempdir()
            .expect("temp dir");
        let user = is_root().then(|| "postgres".to_string());
        if let Some(u) = &user {
            run(
                Command::new("chown").arg(format!("{u}:")).arg(dir.path()),
                "chown the temp dir to the postgres user",
            );
        }
        let mut pg = Postgres {
            bin,
            port: free_port(),
            user,
            dir,
            opts: String::new(),
        };
        if tls {
            pg.make_certificates();
        }
        run(
            &mut pg.cmd(
                "initdb",
                &[
                    "-D",
                    &pg.data().to_string_lossy(),
                    "-U",
                    "postgres",
                    "--auth=trust",
                    "-E",
                    "UTF8",
                    "--no-sync",
                ],
            ),
            "initdb",
        );
        pg.up();
        pg
    }

    fn make_certificates(&mut self) {
        let d = self.dir.path();
        let ec = [
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:prime256v1",
            "-nodes",
        ];
        let openssl = |args: &[&str], what: &str| {
            run(Command::new("openssl").args(args).current_dir(d), what);
        };
        openssl(
            &[
                &["req", "-x509"][..],
                &ec[..],
                &[
                    "-keyout",
                    "ca.key",
                    "-out",
                    "ca.pem",
                    "-days",
                    "2",
                    "-subj",
                    "/CN=opex test CA",
                    "-addext",
                    "basicConstraints=critical,CA:TRUE",
                    "-addext",
                    "keyUsage=critical,keyCertSign,cRLSign",
                ],
            ]
            .concat(),
            "openssl: the test CA",
        );
        openssl(
            &[
                &["req"][..],
                &ec[..],
                &[
                    "-keyout",
                    "server.key",
                    "-out",
                    "server.csr",
                    "-subj",
                    "/CN=127.0.0.1",
                ],
            ]
            .concat(),
            "openssl: the server key",
        );
        fs::write(
            d.join("server.ext"),
            "subjectAltName=IP:127.0.0.1\nbasicConstraints=CA:FALSE\nkeyUsage=digitalSignature\nextendedKeyUsage=serverAuth\n",
        )
        .expect("write server.ext");
        openssl(
            &[
                "x509",
                "-req",
                "-in",
                "server.csr",
                "-CA",
                "ca.pem",
                "-CAkey",
                "ca.key",
                "-CAcreateserial",
                "-out",
                "server.crt",
                "-days",
                "2",
                "-extfile",
                "server.ext",
            ],
            "openssl: the server certificate",
        );
        if let Some(u) = &self.user {
            for f in ["server.key", "server.crt"] {
                run(
                    Command::new("chown").arg(format!("{u}:")).arg(d.join(f)),
                    "chown the server key",
                );
            }
        }
        run(
            Command::new("chmod").arg("600").arg(d.join("server.key")),
            "chmod the server key",
        );
        self.opts = format!(
            " -c ssl=on -c ssl_cert_file={} -c ssl_key_file={}",
            d.join("server.crt").display(),
            d.join("server.key").display()
        );
    }

    fn data(&self) -> PathBuf {
        self.dir.path().join("data")
    }

    fn cmd(&self, tool: &str, args: &[&str]) -> Command {
        let exe = self.bin.join(tool);
        let mut c = match &self.user {
            Some(u) => {
                let mut c = Command::new("runuser");
                c.arg("-u").arg(u).arg("--").arg(&exe);
                c
            }
            None => Command::new(&exe),
        };
        c.args(args)
            .stdin(Stdio::null())
            .current_dir(self.dir.path());
        c
    }

    /// Starts the server (again) on its port; returns once it accepts connections.
    pub fn up(&self) {
        let opts = format!(
            "-p {} -k {} -c listen_addresses=127.0.0.1 -c fsync=off -c full_page_writes=off -c synchronous_commit=off{}",
            self.port,
            self.dir.path().display(),
            self.opts
        );
        let log = self.dir.path().join("server.log");
        let data = self.data();
        let secs = START_DEADLINE.as_secs().to_string();
        let out = self
            .cmd(
                "pg_ctl",
                &[
                    "-D",
                    &data.to_string_lossy(),
                    "-l",
                    &log.to_string_lossy(),
                    "-o",
                    &opts,
                    "-w",
                    "-t",
                    &secs,
                    "start",
                ],
            )
            .output()
            .expect("run pg_ctl start");
        assert!(
            out.status.success(),
            "pg_ctl start failed: {}\n{}",
            String::from_utf8_lossy(&out.stderr),
            fs::read_to_string(&log).unwrap_or_default()
        );
    }

    /// Stops the server (fast: open connections are cut).
    pub fn down(&self) {
        let data = self.data();
        run(
            &mut self.cmd(
                "pg_ctl",
                &["-D", &data.to_string_lossy(), "-m", "fast", "-w", "stop"],
            ),
            "pg_ctl stop",
        );
    }

    /// `postgres://postgres@127.0.0.1:<port>/postgres`.
    pub fn url(&self) -> String {
        format!("postgres://postgres@127.0.0.1:{}/postgres", self.port)
    }

    /// Runs SQL with `psql` and returns its unaligned output (`|` between fields).
    pub fn sql(&self, sql: &str) -> String {
        let psql = self.bin.join("psql");
        let out = run(
            Command::new(if psql.exists() {
                psql
            } else {
                PathBuf::from("psql")
            })
            .args([
                "-X",
                "-q",
                "-A",
                "-t",
                "-v",
                "ON_ERROR_STOP=1",
                "-h",
                "127.0.0.1",
            ])
            .args([
                "-p",
                &self.port.to_string(),
                "-U",
                "postgres",
                "-d",
                "postgres",
            ])
            .args(["-c", sql])
            .stdin(Stdio::null()),
            &format!("psql -c {sql:?}"),
        );
        String::from_utf8_lossy(&out.stdout).trim().to_string()
    }

    /// The temp dir (for files the bulk load reads).
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// The port.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// The `psql` to use.
    pub fn psql(&self) -> PathBuf {
        let psql = self.bin.join("psql");
        if psql.exists() {
            psql
        } else {
            PathBuf::from("psql")
        }
    }
}

impl Drop for Postgres {
    fn drop(&mut self) {
        let data = self.data();
        let _ = self
            .cmd(
                "pg_ctl",
                &[
                    "-D",
                    &data.to_string_lossy(),
                    "-m",
                    "immediate",
                    "-w",
                    "stop",
                ],
            )
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
    }
}

/// The newest `/usr/lib/postgresql/<version>/bin`, or the folder of `initdb` on `PATH`.
fn pg_bin() -> PathBuf {
    let mut versions: Vec<(u32, PathBuf)> = fs::read_dir("/usr/lib/postgresql")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| {
            let v = e.file_name().to_string_lossy().parse::<u32>().ok()?;
            let bin = e.path().join("bin");
            bin.join("initdb").exists().then_some((v, bin))
        })
        .collect();
    versions.sort();
    if let Some((_, bin)) = versions.pop() {
        return bin;
    }
    if let Some(dir) = on_path("initdb").and_then(|p| p.parent().map(Path::to_path_buf)) {
        return dir;
    }
    panic!(
        "PostgreSQL is not installed (no /usr/lib/postgresql/*/bin/initdb, no initdb on PATH): \
         run scripts/test.sh, which installs it (apt-get install postgresql)"
    );
}

fn on_path(name: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .chain([PathBuf::from("/usr/sbin"), PathBuf::from("/usr/bin")])
        .map(|d| d.join(name))
        .find(|p| p.is_file())
}

// ------------------------------------------------------------------ ClickHouse

/// A ClickHouse server of its own: HTTP interface only, user `default` with [`CH_PASSWORD`].
pub struct ClickHouse {
    dir: TempDir,
    bin: PathBuf,
    port: u16,
    child: Option<Child>,
    agent: ureq::Agent,
}

/// The password of the `default` user.
pub const CH_PASSWORD: &str = "ch-pass";

impl ClickHouse {
    /// Writes a minimal config and starts the server on a free port.
    pub fn start() -> ClickHouse {
        let bin = on_path("clickhouse-server").unwrap_or_else(|| {
            panic!(
                "clickhouse-server is not installed: run scripts/test.sh, which installs it \
                 (apt-get install clickhouse-server)"
            )
        });
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
        let mut ch = ClickHouse {
            dir,
            bin,
            port,
            child: None,
            agent,
        };
        ch.up();
        ch
    }

    /// Starts the server (again) on its port; returns once `/ping` answers.
    pub fn up(&mut self) {
        assert!(self.child.is_none(), "clickhouse is already running");
        let out = fs::File::create(self.dir.path().join("stdout.log")).expect("log file");
        let child = Command::new(&self.bin)
            .arg(format!(
                "--config-file={}",
                self.dir.path().join("config.xml").display()
            ))
            .current_dir(self.dir.path())
            .stdin(Stdio::null())
            .stdout(Stdio::from(out.try_clone().expect("clone log")))
            .stderr(Stdio::from(out))
            .spawn()
            .expect("spawn clickhouse-server");
        self.child = Some(child);
        let deadline = Instant::now() + START_DEADLINE;
        loop {
            let ping = self
                .agent
                .get(format!("http://127.0.0.1:{}/ping", self.port))
                .call();
            if matches!(&ping, Ok(r) if r.status() == 200) {
                return;
            }
            if let Some(Ok(Some(status))) = self.child.as_mut().map(|c| c.try_wait()) {
                panic!("clickhouse-server exited ({status}):\n{}", self.logs());
            }
            assert!(
                Instant::now() < deadline,
                "clickhouse-server did not answer /ping within {START_DEADLINE:?}:\n{}",
                self.logs()
            );
            thread::sleep(Duration::from_millis(20));
        }
    }

    /// Kills the server (as a crash or a pulled cable would).
    pub fn down(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// `http://127.0.0.1:<port>`.
    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
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

    fn logs(&self) -> String {
        let mut s = String::new();
        for f in ["stdout.log", "error.log"] {
            s.push_str(&fs::read_to_string(self.dir.path().join(f)).unwrap_or_default());
        }
        s
    }
}

impl Drop for ClickHouse {
    fn drop(&mut self) {
        self.down();
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
