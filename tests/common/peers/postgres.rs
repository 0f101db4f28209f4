//! PostgreSQL of its own: `initdb` in the server's temp dir, then `pg_ctl` on a free
//! loopback port. When the tests run as root the tools run as the `postgres` user (the
//! server refuses to run as root). Readiness is `pg_ctl start -w`, which polls the server
//! until it accepts connections, with a deadline; a restart keeps the port and the data dir.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use tempfile::TempDir;

use super::process::{find_binary, is_root, run, show_log_if_failing, PEER_START_DEADLINE};
use crate::common::free_port;

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
        pg.launch();
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

    /// Starts again on the same port and data dir (after [`Postgres::stop`] or
    /// [`Postgres::kill9`]); returns once it accepts connections.
    pub fn restart(&mut self) {
        self.launch();
    }

    fn launch(&self) {
        let opts = format!(
            "-p {} -k {} -c listen_addresses=127.0.0.1 -c fsync=off -c full_page_writes=off -c synchronous_commit=off{}",
            self.port,
            self.dir.path().display(),
            self.opts
        );
        let log = self.log();
        let data = self.data();
        let secs = PEER_START_DEADLINE.as_secs().to_string();
        // The port may be held for a moment by another process's outgoing connection (an
        // ephemeral port of a test running beside this one, after a restart on the same
        // port): the start is tried again while the server says so, until the deadline.
        let deadline = std::time::Instant::now() + PEER_START_DEADLINE;
        loop {
            let logged = fs::metadata(&log).map_or(0, |m| m.len() as usize);
            let out = self.start_once(&data, &log, &opts, &secs);
            if out.status.success() {
                return;
            }
            let text = fs::read_to_string(&log).unwrap_or_default();
            let busy = text
                .get(logged..)
                .is_some_and(|t| t.contains("Address already in use"));
            if busy && std::time::Instant::now() < deadline {
                std::thread::sleep(std::time::Duration::from_millis(100));
                continue;
            }
            panic!(
                "pg_ctl start failed: {}\n{text}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
    }

    fn start_once(&self, data: &Path, log: &Path, opts: &str, secs: &str) -> std::process::Output {
        self.cmd(
            "pg_ctl",
            &[
                "-D",
                &data.to_string_lossy(),
                "-l",
                &log.to_string_lossy(),
                "-o",
                opts,
                "-w",
                "-t",
                secs,
                "start",
            ],
        )
        .output()
        .expect("run pg_ctl start")
    }

    /// Stops the server (`pg_ctl -m fast`: open connections are cut, a clean shutdown).
    pub fn stop(&mut self) {
        self.pg_ctl_stop("fast");
    }

    /// Stops the server as a crash would (`pg_ctl -m immediate`: no shutdown checkpoint; the
    /// next start recovers from the WAL).
    pub fn kill9(&mut self) {
        self.pg_ctl_stop("immediate");
    }

    fn pg_ctl_stop(&self, mode: &str) {
        let data = self.data();
        run(
            &mut self.cmd(
                "pg_ctl",
                &["-D", &data.to_string_lossy(), "-m", mode, "-w", "stop"],
            ),
            &format!("pg_ctl stop -m {mode}"),
        );
    }

    fn log(&self) -> PathBuf {
        self.dir.path().join("server.log")
    }

    /// `postgres://postgres@127.0.0.1:<port>/postgres`.
    pub fn url(&self) -> String {
        format!("postgres://postgres@127.0.0.1:{}/postgres", self.port)
    }

    /// Runs SQL with `psql` and returns its unaligned output (`|` between fields).
    pub fn sql(&self, sql: &str) -> String {
        let out = run(
            Command::new(self.psql())
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
        show_log_if_failing("postgres", &self.log());
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
    if let Some(dir) = find_binary("initdb").and_then(|p| p.parent().map(Path::to_path_buf)) {
        return dir;
    }
    panic!(
        "PostgreSQL is not installed (no /usr/lib/postgresql/*/bin/initdb, no initdb on PATH): \
         run scripts/test.sh, which installs it (apt-get install postgresql)"
    );
}
