//! The `opex-connector` command: parses arguments, validates, dispatches. All behaviour lives
//! in the library.

use std::path::PathBuf;
use std::process::ExitCode;

use opex_connector::{commission, config, daemon, record, release, simulator, time, VERSION};

const USAGE: &str = "usage:
  opex-connector                       run the demo (config/demo.yaml, embedded)
  opex-connector run --config FILE     run the daemon
  opex-connector validate FILE         check a config; print every problem with its path
  opex-connector demo-config           print the demo config (config/demo.yaml, embedded), to
                                       start a site's config from it
  opex-connector simulate [--modbus ADDR] [--opcua ADDR] [--s7 ADDR]
                                       serve the simulated plant over Modbus TCP (default
                                       127.0.0.1:5020), OPC-UA (default 127.0.0.1:4840) and
                                       as a Siemens S7 CPU (default 127.0.0.1:1102);
                                       an address of `off` leaves that protocol out
  opex-connector --version
  opex-connector sign-manifest ARTIFACT KEY OUT --version V --target TRIPLE
                (--valid-for DURATION | --not-after RFC3339)
                                       write ARTIFACT's release manifest to OUT and its
                                       ed25519 signature to OUT.sig (release tooling)
  opex-connector verify-manifest MANIFEST ARTIFACT PUBKEY --target TRIPLE [--sig SIG]
                [--running VERSION] [--allow-downgrade]
                                       check a manifest (signature MANIFEST.sig unless
                                       --sig) and the artifact it names; print its fields
  opex-connector check-status VERSION  check a GET /api/status document on stdin: the
                                       connector is healthy and runs VERSION
  opex-connector keygen DIR            new release.key / release.pub in DIR
  opex-connector overlay SITE.yaml BOARD.yaml      print SITE with the board's config overlay
  opex-connector overlay FILE          print FILE with its device templates expanded
  opex-connector browse opc.tcp://HOST:PORT/ [--from NODE] [--depth N] [--max-nodes N]
                [--match GLOB] [--yaml GROUP] [SECURITY]
                                       walk an OPC-UA server's address space and print the
                                       tree, or with --yaml a nodes: list for a device entry
  opex-connector read modbus tcp://HOST:PORT | rtu:///dev/ttyX?baud=19200 --register N
                [--unit U] [--kind holding|input|coil|discrete] [--type T] [--length N]
                [--word-order big|little] [--byte-order big|little] [--scale S] [--offset O]
                [--timeout-ms MS] [--count N] [--interval-ms MS]
  opex-connector read opcua opc.tcp://HOST:PORT/ NODE_ID... [SECURITY] [--count N]
                [--interval-ms MS]
  opex-connector read s7 s7://HOST:PORT?rack=0&slot=1 ADDRESS... [--type T] [--length N]
                [--timeout-ms MS] [--count N] [--interval-ms MS]
                                       read a point as a config would; print the value and
                                       its quality, or the exception or status and why
  opex-connector scan modbus tcp://HOST:PORT | rtu:///dev/ttyX?baud=19200 [--unit U]
                [--table holding|input|coil|discrete] [--range FIRST-LAST] [--block N]
                [--max-requests N] [--timeout-ms MS]
                                       list the address ranges of a table the device has;
                                       --range defaults to 0-9999; Ctrl-C stops with what it
                                       found; progress on stderr when it is a terminal
      SECURITY: [--security-policy None|Basic256Sha256] [--security-mode Sign|SignAndEncrypt]
                [--username NAME --password-file FILE] [--pki-dir DIR] [--trust-server-certs]
                [--no-check-hostname] [--timeout-ms MS]
      browse, read and scan never write to a device. Exit status: 0 done; 1 no connection or
      a security failure (one line on stderr says why); 2 wrong arguments; 3 the device
      refused some reads, or a limit cut the walk or the scan";

/// The log filter of the commissioning tools without `RUST_LOG`: their output is their own
/// lines; the OPC-UA stack's complaints about a missing client certificate (not needed
/// without security) stay out.
const TOOLS_LOG_DEFAULT: &str =
    "error,opcua_client=off,opcua_core=off,opcua_crypto=off,opcua_types=off,tracing::span=off";

/// The log filter without `RUST_LOG`: our own lines at info; the OPC-UA stack's chatter
/// (every channel it opens, config notes) only from warn, its client's only from error, since
/// the device task logs each connection change and failure itself.
const LOG_DEFAULT: &str = "info,opcua_client=error,opcua_core=warn,opcua_server=warn,opcua_crypto=warn,opcua_types=warn,tracing::span=warn";

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let filter = match args.first() {
        Some(&("browse" | "read" | "scan")) => TOOLS_LOG_DEFAULT,
        _ => LOG_DEFAULT,
    };
    env_logger::Builder::from_env(env_logger::Env::default().default_filter_or(filter)).init();
    match args.as_slice() {
        [] => run_demo(),
        ["--version" | "-V" | "version"] => {
            println!("opex-connector {VERSION}");
            if let Some(previous) = release::previous_version() {
                println!("previous {previous}");
            }
            ExitCode::SUCCESS
        }
        ["sign-manifest", artifact, key, out, rest @ ..] => sign_manifest(artifact, key, out, rest),
        ["verify-manifest", manifest, artifact, pubkey, rest @ ..] => {
            verify_manifest(manifest, artifact, pubkey, rest)
        }
        ["check-status", version] => check_status(version),
        ["overlay", site, board] => {
            let read = |p: &str| std::fs::read_to_string(p).map_err(|e| format!("{p}: {e}"));
            match read(site)
                .and_then(|s| read(board).map(|b| (s, b)))
                .and_then(|(s, b)| config::overlay(&s, &b))
            {
                Ok(merged) => {
                    print!("{merged}");
                    ExitCode::SUCCESS
                }
                Err(e) => {
                    eprintln!("{e}");
                    ExitCode::from(1)
                }
            }
        }
        ["overlay", file] => {
            let expanded = std::fs::read_to_string(file)
                .map_err(|e| {
                    let mut p = config::Problems::default();
                    p.push("", format!("cannot read {file}: {e}"));
                    p
                })
                .and_then(|text| config::expanded_yaml(&text));
            match expanded {
                Ok(yaml) => {
                    print!("{yaml}");
                    ExitCode::SUCCESS
                }
                Err(problems) => report(file, &problems),
            }
        }
        ["keygen", dir] => match release::keygen(dir.as_ref()) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("{e}");
                ExitCode::from(1)
            }
        },
        ["run", "--config", file] | ["run", "-c", file] => match config::load(&PathBuf::from(file))
        {
            Ok(cfg) => run(cfg),
            Err(problems) => report(file, &problems),
        },
        ["validate", file] => match config::load(&PathBuf::from(file)) {
            Ok(cfg) => {
                for w in &cfg.warnings {
                    eprintln!("warning: {w}");
                }
                println!("{file}: ok");
                ExitCode::SUCCESS
            }
            Err(problems) => report(file, &problems),
        },
        ["demo-config"] => {
            print!("{}", config::DEMO_YAML);
            ExitCode::SUCCESS
        }
        ["simulate", rest @ ..] => simulate(rest),
        ["read", "modbus", target, rest @ ..] => {
            let valued = [&commission::modbus::READ_FLAGS[..]].concat();
            tool("read", rest, &valued, &[], |flags, out| {
                commission::modbus::read(target, flags, out)
            })
        }
        ["read", "s7", url, rest @ ..] => {
            // The addresses come before the flags.
            let addresses = rest.iter().take_while(|a| !a.starts_with("--")).count();
            let (addresses, rest) = rest.split_at(addresses);
            tool(
                "read",
                rest,
                &commission::s7::READ_FLAGS,
                &[],
                |flags, out| commission::s7::read(url, addresses, flags, out),
            )
        }
        ["scan", "modbus", target, rest @ ..] => {
            let valued = [&commission::modbus::SCAN_FLAGS[..]].concat();
            tool("scan", rest, &valued, &[], |flags, out| {
                commission::modbus::scan(target, flags, out)
            })
        }
        #[cfg(feature = "opcua")]
        ["read", "opcua", endpoint, rest @ ..] => {
            use commission::opcua::{READ_FLAGS, SECURITY_FLAGS, SECURITY_SWITCHES};
            // The node ids come before the flags.
            let nodes = rest.iter().take_while(|a| !a.starts_with("--")).count();
            let (nodes, rest) = rest.split_at(nodes);
            let valued = [&READ_FLAGS[..], &SECURITY_FLAGS[..]].concat();
            tool("read", rest, &valued, &SECURITY_SWITCHES, |flags, out| {
                commission::opcua::read(endpoint, nodes, flags, out)
            })
        }
        #[cfg(feature = "opcua")]
        ["browse", endpoint, rest @ ..] => {
            use commission::opcua::{SECURITY_FLAGS, SECURITY_SWITCHES};
            let valued = [&commission::browse::FLAGS[..], &SECURITY_FLAGS[..]].concat();
            tool("browse", rest, &valued, &SECURITY_SWITCHES, |flags, out| {
                commission::browse::browse(endpoint, flags, out)
            })
        }
        #[cfg(not(feature = "opcua"))]
        ["browse", ..] | ["read", "opcua", ..] => {
            eprintln!("opex-connector: this build has no OPC-UA client (it was built without the `opcua` feature)");
            ExitCode::from(2)
        }
        ["help" | "--help" | "-h"] => {
            println!("{USAGE}");
            ExitCode::SUCCESS
        }
        _ => {
            eprintln!("{USAGE}");
            ExitCode::from(2)
        }
    }
}

fn simulate(args: &[&str]) -> ExitCode {
    let mut raw = simulator::RawSimulator {
        modbus: Some("127.0.0.1:5020".to_string()),
        opcua: cfg!(feature = "simulator").then(|| "127.0.0.1:4840".to_string()),
        s7: Some("127.0.0.1:1102".to_string()),
    };
    for pair in args.chunks(2) {
        let value = |v: &str| (v != "off").then(|| v.to_string());
        match pair {
            ["--modbus", addr] => raw.modbus = value(addr),
            ["--opcua", addr] => raw.opcua = value(addr),
            ["--s7", addr] => raw.s7 = value(addr),
            _ => {
                eprintln!("{USAGE}");
                return ExitCode::from(2);
            }
        }
    }
    let mut problems = config::Problems::default();
    let cfg = simulator::SimulatorConfig::validate(Some(&raw), "simulate", &mut problems);
    if !problems.is_empty() {
        return report("simulate", &problems);
    }
    match simulator::run(&cfg) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("opex-connector simulate: {e}");
            ExitCode::FAILURE
        }
    }
}

/// The `--name value` options and bare `--switch`es that follow a release command's
/// positional arguments; each at most once.
struct Options<'a>(Vec<(&'a str, Option<&'a str>)>);

impl<'a> Options<'a> {
    fn parse(args: &[&'a str], valued: &[&str], switches: &[&str]) -> Result<Self, String> {
        let mut found: Vec<(&'a str, Option<&'a str>)> = Vec::new();
        let mut rest = args.iter();
        while let Some(&name) = rest.next() {
            let value = if valued.contains(&name) {
                Some(*rest.next().ok_or(format!("{name} needs a value"))?)
            } else if switches.contains(&name) {
                None
            } else {
                return Err(format!("unknown argument {name}"));
            };
            if found.iter().any(|(n, _)| *n == name) {
                return Err(format!("{name} given twice"));
            }
            found.push((name, value));
        }
        Ok(Options(found))
    }

    fn value(&self, name: &str) -> Option<&'a str> {
        self.0
            .iter()
            .find(|(n, _)| *n == name)
            .and_then(|(_, v)| *v)
    }

    fn has(&self, name: &str) -> bool {
        self.0.iter().any(|(n, _)| *n == name)
    }
}

/// Runs a commissioning tool with its flags parsed; its output goes to stdout, a failure is
/// one line on stderr.
fn tool(
    name: &str,
    rest: &[&str],
    valued: &[&str],
    switches: &[&str],
    run: impl FnOnce(
        &commission::Flags<'_>,
        &mut dyn std::io::Write,
    ) -> Result<commission::Outcome, commission::Error>,
) -> ExitCode {
    let opts = match Options::parse(rest, valued, switches) {
        Ok(o) => o,
        Err(e) => return usage_error(&format!("{name}: {e}")),
    };
    let stdout = std::io::stdout();
    let mut out = stdout.lock();
    match run(&opts.0, &mut out) {
        Ok(outcome) => ExitCode::from(outcome.exit_code()),
        Err(e @ commission::Error::Usage(_)) => usage_error(&format!("{name}: {e}")),
        Err(e) => {
            eprintln!("opex-connector {name}: {e}");
            ExitCode::from(e.exit_code())
        }
    }
}

fn usage_error(message: &str) -> ExitCode {
    eprintln!("opex-connector: {message}\n{USAGE}");
    ExitCode::from(2)
}

fn sign_manifest(artifact: &str, key: &str, out: &str, rest: &[&str]) -> ExitCode {
    let opts = match Options::parse(
        rest,
        &["--version", "--target", "--valid-for", "--not-after"],
        &[],
    ) {
        Ok(o) => o,
        Err(e) => return usage_error(&e),
    };
    let (Some(version), Some(target)) = (opts.value("--version"), opts.value("--target")) else {
        return usage_error("sign-manifest needs --version and --target");
    };
    let not_after_ms = match (opts.value("--valid-for"), opts.value("--not-after")) {
        (Some(d), None) => match time::parse_duration(d) {
            Ok(d) => record::now_ms().saturating_add(d.as_millis() as u64),
            Err(e) => return usage_error(&format!("--valid-for {e}")),
        },
        (None, Some(t)) => match time::parse_rfc3339(t) {
            Some(ms) => ms,
            None => return usage_error(&format!("--not-after {t:?} is not an RFC 3339 time")),
        },
        _ => return usage_error("sign-manifest needs one of --valid-for and --not-after"),
    };
    let signed = release::sign_manifest(
        artifact.as_ref(),
        key.as_ref(),
        out.as_ref(),
        version,
        target,
        not_after_ms,
    );
    match signed {
        Ok(m) => {
            if not_after_ms < record::now_ms() {
                eprintln!("warning: {out} has already expired ({})", m.not_after);
            }
            print!("{}", String::from_utf8_lossy(&m.to_bytes()));
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("{artifact}: {e}");
            ExitCode::from(1)
        }
    }
}

fn verify_manifest(manifest: &str, artifact: &str, pubkey: &str, rest: &[&str]) -> ExitCode {
    let opts = match Options::parse(
        rest,
        &["--target", "--sig", "--running"],
        &["--allow-downgrade"],
    ) {
        Ok(o) => o,
        Err(e) => return usage_error(&e),
    };
    let Some(target) = opts.value("--target") else {
        return usage_error("verify-manifest needs --target (this board's target triple)");
    };
    let running = match opts.value("--running").unwrap_or(VERSION).parse() {
        Ok(v) => v,
        Err(e) => return usage_error(&format!("--running: {e}")),
    };
    let expect = release::Expect {
        target: target.to_string(),
        running,
        allow_downgrade: opts.has("--allow-downgrade"),
        now_ms: record::now_ms(),
    };
    let sig = opts
        .value("--sig")
        .map_or_else(|| release::signature_path(manifest.as_ref()), PathBuf::from);
    match release::verify_manifest(
        manifest.as_ref(),
        &sig,
        pubkey.as_ref(),
        artifact.as_ref(),
        &expect,
    ) {
        Ok(m) => {
            println!("version={}", m.version);
            println!("target={}", m.target);
            println!("sha256={}", m.sha256);
            println!("not_after={}", m.not_after);
            eprintln!("{manifest}: ok, {artifact} may be installed");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("{manifest}: refused: {e}");
            ExitCode::from(1)
        }
    }
}

fn check_status(version: &str) -> ExitCode {
    match release::check_status_of(std::io::stdin(), version) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("not healthy: {e}");
            ExitCode::from(1)
        }
    }
}

fn report(file: &str, problems: &config::Problems) -> ExitCode {
    eprintln!("{file}: {} problem(s)", problems.0.len());
    for p in &problems.0 {
        eprintln!("{p}");
    }
    ExitCode::from(1)
}

fn run_demo() -> ExitCode {
    let cfg = match config::from_yaml(config::DEMO_YAML) {
        Ok(c) => c,
        Err(problems) => return report("config/demo.yaml (embedded)", &problems),
    };
    println!(
        "opex-connector {VERSION}: running the demo (config/demo.yaml), data in {}",
        cfg.connector.data_dir.display()
    );
    println!(
        "  status page: http://{0}/   status JSON: http://{0}/api/status   metrics: http://{0}/metrics",
        cfg.connector.http.listen
    );
    if let Some(s) = cfg.ingest.sources.first() {
        println!(
            "  try: curl -H 'Authorization: Bearer {}' -d '{{\"temp\": 21.5}}' http://{}/api/ingest/{}/sensor-1",
            s.token, cfg.connector.http.listen, s.name
        );
    }
    run(cfg)
}

fn run(cfg: config::Config) -> ExitCode {
    match daemon::run(cfg) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            log::error!("{e}");
            eprintln!("opex-connector: {e}");
            ExitCode::FAILURE
        }
    }
}
