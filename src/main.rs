//! The `opex-connector` command: parses arguments, validates, dispatches. All behaviour lives
//! in the library.

use std::path::PathBuf;
use std::process::ExitCode;

use opex_connector::{config, daemon, simulator, VERSION};

const USAGE: &str = "usage:
  opex-connector                       run the demo (config/demo.yaml, embedded)
  opex-connector run --config FILE     run the daemon
  opex-connector validate FILE         check a config; print every problem with its path
  opex-connector simulate [--modbus ADDR]
                                       serve the simulated plant (Modbus TCP, default 127.0.0.1:5020)
  opex-connector --version";

fn main() -> ExitCode {
    env_logger::Builder::from_env(env_logger::Env::default().default_filter_or("info")).init();
    let args: Vec<String> = std::env::args().skip(1).collect();
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    match args.as_slice() {
        [] => run_demo(),
        ["--version" | "-V" | "version"] => {
            println!("opex-connector {VERSION}");
            ExitCode::SUCCESS
        }
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
        ["simulate"] => simulate("127.0.0.1:5020"),
        ["simulate", "--modbus", addr] => simulate(addr),
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

fn simulate(modbus: &str) -> ExitCode {
    let raw = simulator::RawSimulator {
        modbus: Some(modbus.to_string()),
    };
    let mut problems = config::Problems::default();
    let cfg = simulator::SimulatorConfig::validate(Some(&raw), "--modbus", &mut problems);
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
