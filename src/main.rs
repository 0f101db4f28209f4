//! The `opex-connector` command: parses arguments, validates, dispatches. All behaviour lives
//! in the library.

use std::path::PathBuf;
use std::process::ExitCode;

use opex_connector::{config, daemon, release, simulator, VERSION};

const USAGE: &str = "usage:
  opex-connector                       run the demo (config/demo.yaml, embedded)
  opex-connector run --config FILE     run the daemon
  opex-connector validate FILE         check a config; print every problem with its path
  opex-connector simulate [--modbus ADDR] [--opcua ADDR]
                                       serve the simulated plant over Modbus TCP (default
                                       127.0.0.1:5020) and OPC-UA (default 127.0.0.1:4840);
                                       an address of `off` leaves that protocol out
  opex-connector --version
  opex-connector verify-artifact FILE SIG PUBKEY   check a release artifact's ed25519 signature
  opex-connector sign-artifact FILE KEY            sign one (release tooling)
  opex-connector keygen DIR                        new release.key / release.pub in DIR
  opex-connector overlay SITE.yaml BOARD.yaml      print SITE with the board's config overlay";

/// The log filter without `RUST_LOG`: our own lines at info; the OPC-UA stack's chatter
/// (every channel it opens, config notes) only from warn, its client's only from error, since
/// the device task logs each connection change and failure itself.
const LOG_DEFAULT: &str = "info,opcua_client=error,opcua_core=warn,opcua_server=warn,opcua_crypto=warn,opcua_types=warn,tracing::span=warn";

fn main() -> ExitCode {
    env_logger::Builder::from_env(env_logger::Env::default().default_filter_or(LOG_DEFAULT)).init();
    let args: Vec<String> = std::env::args().skip(1).collect();
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    match args.as_slice() {
        [] => run_demo(),
        ["--version" | "-V" | "version"] => {
            println!("opex-connector {VERSION}");
            if let Some(previous) = release::previous_version() {
                println!("previous {previous}");
            }
            ExitCode::SUCCESS
        }
        ["verify-artifact", file, sig, key] => {
            match release::verify_artifact(file.as_ref(), sig.as_ref(), key.as_ref()) {
                Ok(sha) => {
                    println!("{file}: signature ok sha256={sha}");
                    ExitCode::SUCCESS
                }
                Err(e) => {
                    eprintln!("{file}: refused: {e}");
                    ExitCode::from(1)
                }
            }
        }
        ["sign-artifact", file, key] => match release::sign_artifact(file.as_ref(), key.as_ref()) {
            Ok(sig) => {
                println!("{sig}");
                ExitCode::SUCCESS
            }
            Err(e) => {
                eprintln!("{file}: {e}");
                ExitCode::from(1)
            }
        },
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
        ["simulate", rest @ ..] => simulate(rest),
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
    };
    for pair in args.chunks(2) {
        let value = |v: &str| (v != "off").then(|| v.to_string());
        match pair {
            ["--modbus", addr] => raw.modbus = value(addr),
            ["--opcua", addr] => raw.opcua = value(addr),
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
