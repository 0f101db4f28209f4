//! The `opex-connector` command: parses arguments against the command table
//! ([`opex_connector::cli`]), validates, dispatches. All behaviour lives in the library.

use std::path::PathBuf;
use std::process::ExitCode;

use opex_connector::reload::{self, Loaded};
use opex_connector::{
    cli, commission, config, daemon, fleet, record, release, simulator, time, VERSION,
};

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
        [] => return run_demo(),
        ["--version" | "-V"] => return version(),
        ["--help" | "-h"] => return help(&[]),
        _ => {}
    }
    // `COMMAND ... --help`: the help of the command its first words name.
    if let Some(at) = args.iter().position(|a| matches!(*a, "--help" | "-h")) {
        return help(&args[..at]);
    }
    match cli::parse(&args) {
        Ok(parsed) => dispatch(&parsed),
        Err(e) => {
            eprintln!("{e}");
            ExitCode::from(2)
        }
    }
}

/// Runs a command line that fits its command.
/// `hash-password`: the Argon2id hash of the password on standard input.
fn hash_password() -> ExitCode {
    let mut line = String::new();
    if let Err(e) = std::io::stdin().read_line(&mut line) {
        eprintln!("opex-connector hash-password: cannot read standard input: {e}");
        return ExitCode::from(1);
    }
    let password = line.strip_suffix('\n').unwrap_or(&line);
    let password = password.strip_suffix('\r').unwrap_or(password);
    if password.is_empty() {
        eprintln!("opex-connector hash-password: the password on standard input is empty");
        return ExitCode::from(1);
    }
    #[cfg(feature = "opcua-server")]
    match opex_connector::opcua_server::users::hash_password(password) {
        Ok(hash) => emit(&format!("{hash}\n")),
        Err(e) => {
            eprintln!("opex-connector hash-password: {e}");
            ExitCode::from(1)
        }
    }
    #[cfg(not(feature = "opcua-server"))]
    {
        eprintln!("opex-connector: this build has no OPC-UA server (it was built without the `opcua-server` feature)");
        ExitCode::from(2)
    }
}

fn dispatch(p: &cli::Parsed<'_>) -> ExitCode {
    match (p.command.name, p.args.as_slice()) {
        ("run", []) => {
            let file = p.value("--config").unwrap_or_default();
            let path = PathBuf::from(file);
            let text = match config::read(&path) {
                Ok(t) => t,
                Err(problems) => return report(file, &problems),
            };
            match config::from_yaml(&text) {
                Ok(cfg) => run(
                    cfg,
                    Loaded {
                        text,
                        path: Some(path),
                    },
                ),
                Err(problems) => report(file, &problems),
            }
        }
        ("reload", []) => {
            let file = p.value("--config").unwrap_or_default();
            let leftovers = match reload::Leftovers::from_flags(
                p.has("--drain"),
                p.has("--discard"),
            ) {
                Some(l) => l,
                None => {
                    eprintln!("reload: --drain and --discard exclude each other (see opex-connector reload --help)");
                    return ExitCode::from(2);
                }
            };
            match reload::ask::ask(file.as_ref(), leftovers) {
                Ok(applied) => emit(&applied),
                Err(why) => {
                    eprintln!("{why}");
                    ExitCode::from(1)
                }
            }
        }
        ("validate", [file]) => match config::load(&PathBuf::from(file)) {
            Ok(cfg) => {
                for w in &cfg.warnings {
                    eprintln!("warning: {w}");
                }
                emit(&format!("{file}: ok\n"))
            }
            Err(problems) => report(file, &problems),
        },
        ("demo-config", []) => emit(config::DEMO_YAML),
        ("schema", []) => match config::schema::schema() {
            Some(text) => emit(&text),
            None => {
                eprintln!("opex-connector schema: this build's schema does not inflate");
                ExitCode::from(1)
            }
        },
        ("overlay", [site, board]) => {
            let read = |p: &str| std::fs::read_to_string(p).map_err(|e| format!("{p}: {e}"));
            match read(site)
                .and_then(|s| read(board).map(|b| (s, b)))
                .and_then(|(s, b)| config::overlay(&s, &b))
            {
                Ok(merged) => emit(&merged),
                Err(e) => {
                    eprintln!("{e}");
                    ExitCode::from(1)
                }
            }
        }
        ("overlay", [file]) => {
            let expanded = std::fs::read_to_string(file)
                .map_err(|e| {
                    let mut p = config::Problems::default();
                    p.push("", format!("cannot read {file}: {e}"));
                    p
                })
                .and_then(|text| config::expanded_yaml(&text));
            match expanded {
                Ok(yaml) => emit(&yaml),
                Err(problems) => report(file, &problems),
            }
        }
        ("simulate", []) => simulate(p),
        ("read modbus", [target]) => {
            tool(p, |flags, out| commission::modbus::read(target, flags, out))
        }
        #[cfg(feature = "s7")]
        ("read s7", [url, addresses @ ..]) => tool(p, |flags, out| {
            commission::s7::read(url, addresses, flags, out)
        }),
        #[cfg(not(feature = "s7"))]
        ("read s7", _) => {
            eprintln!("opex-connector: this build has no S7 client (it was built without the `s7` feature)");
            ExitCode::from(2)
        }
        ("scan modbus", [target]) => {
            tool(p, |flags, out| commission::modbus::scan(target, flags, out))
        }
        #[cfg(feature = "opcua")]
        ("read opcua", [endpoint, nodes @ ..]) => tool(p, |flags, out| {
            commission::opcua::read(endpoint, nodes, flags, out)
        }),
        #[cfg(feature = "opcua")]
        ("browse", [endpoint]) => tool(p, |flags, out| {
            commission::browse::browse(endpoint, flags, out)
        }),
        #[cfg(not(feature = "opcua"))]
        ("browse" | "read opcua", _) => {
            eprintln!("opex-connector: this build has no OPC-UA client (it was built without the `opcua` feature)");
            ExitCode::from(2)
        }
        ("hash-password", []) => hash_password(),
        ("keygen", [dir]) => match release::keygen(dir.as_ref()) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("{e}");
                ExitCode::from(1)
            }
        },
        ("sign-config", [key, file]) => {
            let text = match config::read(file.as_ref()) {
                Ok(t) => t,
                Err(problems) => return report(file, &problems),
            };
            if let Err(problems) = config::from_yaml(&text) {
                return report(file, &problems);
            }
            match fleet::sign(&text, key.as_ref()) {
                Ok(value) => emit(&format!("{value}\n")),
                Err(e) => {
                    eprintln!("{key}: {e}");
                    ExitCode::from(1)
                }
            }
        }
        ("sign-manifest", [artifact, key, out]) => sign_manifest(p, artifact, key, out),
        ("verify-manifest", [manifest, artifact, pubkey]) => {
            verify_manifest(p, manifest, artifact, pubkey)
        }
        ("check-status", [version]) => check_status(version),
        ("completions", [shell]) => match cli::render::completions(shell) {
            Some(script) => emit(&script),
            None => usage_error(
                p,
                &format!(
                    "no completions for `{shell}`; SHELL is one of: {}",
                    cli::render::SHELLS.join(", ")
                ),
            ),
        },
        ("version", []) => version(),
        ("help", words) => help(words),
        // The parser checked the arguments against the command's row: a row without an arm
        // here is a command this build does not have.
        (name, _) => {
            eprintln!("opex-connector: `{name}` is not in this build");
            ExitCode::from(2)
        }
    }
}

/// Writes `text` to stdout: exit 1, without a panic, when it cannot be written (a closed
/// pipe, `| head`).
fn emit(text: &str) -> ExitCode {
    use std::io::Write;
    let mut out = std::io::stdout().lock();
    match out.write_all(text.as_bytes()).and_then(|()| out.flush()) {
        Ok(()) => ExitCode::SUCCESS,
        Err(_) => ExitCode::from(1),
    }
}

fn version() -> ExitCode {
    let mut text = format!("opex-connector {VERSION}\n");
    if let Some(previous) = release::previous_version() {
        text.push_str(&format!("previous {previous}\n"));
    }
    emit(&text)
}

/// The help of the command `words` name (`[]`: every command; `read`: the three reads).
fn help(words: &[&str]) -> ExitCode {
    let text = match cli::find(words) {
        Some((command, _)) => Some(cli::render::help(command)),
        None if words.is_empty() => Some(cli::render::overview()),
        None => words.first().and_then(|w| cli::render::group_help(w)),
    };
    match text {
        Some(text) => emit(&text),
        None => {
            let word = words.first().copied().unwrap_or_default();
            eprintln!("opex-connector: unknown command `{word}` (see `opex-connector --help`)");
            ExitCode::from(2)
        }
    }
}

fn simulate(p: &cli::Parsed<'_>) -> ExitCode {
    let value = |v: &str| (v != "off").then(|| v.to_string());
    let raw = simulator::RawSimulator {
        modbus: match p.value("--modbus") {
            Some(addr) => value(addr),
            None => Some("127.0.0.1:5020".to_string()),
        },
        opcua: match p.value("--opcua") {
            Some(addr) => value(addr),
            None => cfg!(feature = "simulator").then(|| "127.0.0.1:4840".to_string()),
        },
        s7: match p.value("--s7") {
            Some(addr) => value(addr),
            None => Some("127.0.0.1:1102".to_string()),
        },
    };
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

/// Runs a commissioning tool with its options; its output goes to stdout, a failure is one
/// line on stderr.
fn tool(
    p: &cli::Parsed<'_>,
    run: impl FnOnce(
        &commission::Flags<'_>,
        &mut dyn std::io::Write,
    ) -> Result<commission::Outcome, commission::Error>,
) -> ExitCode {
    let stdout = std::io::stdout();
    let mut out = stdout.lock();
    match run(&p.options, &mut out) {
        Ok(outcome) => ExitCode::from(outcome.exit_code()),
        Err(commission::Error::Usage(e)) => usage_error(p, &e),
        Err(e) => {
            let word = p.command.name.split(' ').next().unwrap_or_default();
            eprintln!("opex-connector {word}: {e}");
            ExitCode::from(e.exit_code())
        }
    }
}

/// A problem with the arguments that only the command itself could see: one line naming
/// it, pointing at the command's help; exit status 2.
fn usage_error(p: &cli::Parsed<'_>, message: &str) -> ExitCode {
    eprintln!("{}", cli::UsageError::new(p.command.name, message));
    ExitCode::from(2)
}

fn sign_manifest(p: &cli::Parsed<'_>, artifact: &str, key: &str, out: &str) -> ExitCode {
    let (Some(version), Some(target)) = (p.value("--version"), p.value("--target")) else {
        return usage_error(p, "missing --version or --target");
    };
    let not_after_ms = match (p.value("--valid-for"), p.value("--not-after")) {
        (Some(d), None) => match time::parse_duration(d) {
            Ok(d) => record::now_ms().saturating_add(d.as_millis() as u64),
            Err(e) => return usage_error(p, &format!("--valid-for {e}")),
        },
        (None, Some(t)) => match time::parse_rfc3339(t) {
            Some(ms) => ms,
            None => return usage_error(p, &format!("--not-after {t:?} is not an RFC 3339 time")),
        },
        _ => return usage_error(p, "needs one of --valid-for and --not-after"),
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
            emit(&String::from_utf8_lossy(&m.to_bytes()))
        }
        Err(e) => {
            eprintln!("{artifact}: {e}");
            ExitCode::from(1)
        }
    }
}

fn verify_manifest(p: &cli::Parsed<'_>, manifest: &str, artifact: &str, pubkey: &str) -> ExitCode {
    let Some(target) = p.value("--target") else {
        return usage_error(p, "missing --target TRIPLE (this board's target triple)");
    };
    let running = match p.value("--running").unwrap_or(VERSION).parse() {
        Ok(v) => v,
        Err(e) => return usage_error(p, &format!("--running: {e}")),
    };
    let expect = release::Expect {
        target: target.to_string(),
        running,
        allow_downgrade: p.has("--allow-downgrade"),
        now_ms: record::now_ms(),
    };
    let sig = p
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
            eprintln!("{manifest}: ok, {artifact} may be installed");
            emit(&format!(
                "version={}\ntarget={}\nsha256={}\nnot_after={}\n",
                m.version, m.target, m.sha256, m.not_after
            ))
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
    let mut banner = format!(
        "opex-connector {VERSION}: running the demo (config/demo.yaml), data in {}\n",
        cfg.connector.data_dir.display()
    );
    banner.push_str(&format!(
        "  status page: http://{0}/   status JSON: http://{0}/api/status   metrics: http://{0}/metrics\n",
        cfg.connector.http.listen
    ));
    if let Some(s) = cfg.ingest.sources.first() {
        banner.push_str(&format!(
            "  try: curl -H 'Authorization: Bearer {}' -d '{{\"temp\": 21.5}}' http://{}/api/ingest/{}/sensor-1\n",
            s.token, cfg.connector.http.listen, s.name
        ));
    }
    // The demo runs whether or not anyone reads its banner.
    let _ = emit(&banner);
    let loaded = Loaded {
        text: config::DEMO_YAML.to_string(),
        path: None,
    };
    run(cfg, loaded)
}

fn run(cfg: config::Config, loaded: Loaded) -> ExitCode {
    match daemon::run(cfg, loaded) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            log::error!("{e}");
            eprintln!("opex-connector: {e}");
            ExitCode::FAILURE
        }
    }
}
