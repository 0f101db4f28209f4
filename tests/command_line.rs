//! The command line of the real binary: `--help` for it and every command, the one-line
//! errors of a wrong or missing argument, `--version`, output to a reader that is gone, the
//! shell completions (run in bash,
//! and checked by zsh and fish when they are installed, as `scripts/test.sh` does), and the
//! man page and the book's page, which are written from the same table and committed: a
//! test fails when they differ from what the code writes (`UPDATE_REFERENCE=1` rewrites
//! them).

mod common;

use std::path::Path;
use std::process::{Command, Output};

use common::committed_page;

use opex_connector::cli::{render, COMMANDS};

const BIN: &str = env!("CARGO_BIN_EXE_opex-connector");

fn run(args: &[&str]) -> Output {
    Command::new(BIN)
        .args(args)
        .env_remove("RUST_LOG")
        .output()
        .expect("run opex-connector")
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

#[test]
fn help_lists_every_command_and_each_command_answers_help_with_its_options_and_examples() {
    for args in [&["--help"][..], &["-h"][..], &["help"][..]] {
        let o = run(args);
        assert!(o.status.success(), "{args:?}");
        let text = stdout(&o);
        assert_eq!(text, render::overview());
        for c in COMMANDS {
            assert!(
                text.contains(&format!("\n  {:<24} {}", c.name, c.summary)),
                "{}",
                c.name
            );
        }
    }
    for c in COMMANDS {
        let words: Vec<&str> = c.name.split(' ').collect();
        let want = render::help(c);
        for args in [
            [&words[..], &["--help"]].concat(),
            [&words[..], &["-h"]].concat(),
            [&["help"], &words[..]].concat(),
            // --help anywhere after the command's words, whatever comes before it.
            [&words[..], &["x", "--unknown", "--help"]].concat(),
        ] {
            let o = run(&args);
            assert!(o.status.success(), "{args:?}: {}", stderr(&o));
            assert_eq!(stdout(&o), want, "{args:?}");
        }
        assert!(want.contains(&render::synopsis(c)), "{}", c.name);
        for o in c.all_options() {
            assert!(want.contains(o.long), "{}: {}", c.name, o.long);
        }
        for (line, _) in c.examples {
            assert!(want.contains(line), "{}", c.name);
        }
        assert!(c.summary.len() <= 50, "{}: the summary is too long", c.name);
        let wide = |l: &&str| {
            l.len() > 80 && !l.starts_with("  opex-connector ") && !l.starts_with("usage: ")
        };
        assert!(
            !want.lines().any(|l| wide(&l)),
            "{}: a line over 80 columns:\n{want}",
            c.name
        );
    }
    let o = run(&["read", "--help"]);
    assert!(o.status.success());
    for kind in ["read modbus", "read opcua", "read s7"] {
        assert!(stdout(&o).contains(kind), "{}", stdout(&o));
    }
}

#[test]
fn a_wrong_or_missing_argument_is_one_line_that_names_it_and_points_at_help_with_exit_status_2() {
    for (args, want) in [
        (&["valdate", "site.yaml"][..], "opex-connector: unknown command `valdate` (see `opex-connector --help`)"),
        (&["--verbose"][..], "opex-connector: unknown command `--verbose` (see `opex-connector --help`)"),
        (&["validate"][..], "opex-connector validate: missing FILE (see `opex-connector validate --help`)"),
        (&["validate", "a.yaml", "b.yaml"][..], "opex-connector validate: unexpected argument `b.yaml` (see `opex-connector validate --help`)"),
        (&["run", "site.yaml"][..], "opex-connector run: unexpected argument `site.yaml` (see `opex-connector run --help`)"),
        (&["run"][..], "opex-connector run: missing --config FILE (see `opex-connector run --help`)"),
        (&["run", "--config"][..], "opex-connector run: --config needs a value (FILE) (see `opex-connector run --help`)"),
        (&["simulate", "--modbus", "1.2.3.4:5", "--modbus", "off"][..], "opex-connector simulate: --modbus given twice (see `opex-connector simulate --help`)"),
        (&["read", "modbus", "tcp://127.0.0.1:9", "--registr", "1"][..], "opex-connector read modbus: unknown option `--registr` (see `opex-connector read modbus --help`)"),
        (&["read", "modbus", "tcp://127.0.0.1:9"][..], "opex-connector read modbus: missing --register N (see `opex-connector read modbus --help`)"),
        (&["read", "modbus", "tcp://127.0.0.1:9", "--register", "1", "--count", "x"][..], "opex-connector read modbus: --count: expected a whole number (see `opex-connector read modbus --help`)"),
        (&["read"][..], "opex-connector: read needs one of: modbus, opcua, s7 (see `opex-connector --help`)"),
        (&["scan", "opcua", "x"][..], "opex-connector: scan has no `opcua`; it takes one of: modbus (see `opex-connector --help`)"),
        (&["sign-manifest", "a", "k", "o", "--version", "1.0.0", "--target", "t"][..], "opex-connector sign-manifest: needs one of --valid-for and --not-after (see `opex-connector sign-manifest --help`)"),
        (&["completions", "tcsh"][..], "opex-connector completions: no completions for `tcsh`; SHELL is one of: bash, zsh, fish (see `opex-connector completions --help`)"),
        (&["help", "frobnicate"][..], "opex-connector: unknown command `frobnicate` (see `opex-connector --help`)"),
    ] {
        let o = run(args);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {}", stderr(&o));
        assert_eq!(stderr(&o), format!("{want}\n"), "{args:?}");
        assert!(o.stdout.is_empty(), "{args:?}");
    }
}

#[test]
fn version_prints_the_packages_version() {
    for args in [&["--version"][..], &["-V"][..], &["version"][..]] {
        let o = run(args);
        assert!(o.status.success());
        assert_eq!(
            stdout(&o).lines().next(),
            Some(format!("opex-connector {}", env!("CARGO_PKG_VERSION")).as_str())
        );
    }
}

#[test]
fn a_reader_gone_before_the_output_is_written_is_exit_status_1_without_a_panic() {
    use std::os::fd::OwnedFd;
    use std::os::unix::net::UnixStream;
    use std::process::Stdio;
    for args in [
        &["--version"][..],
        &["--help"][..],
        &["validate", "config/demo.yaml"][..],
    ] {
        // Stdout is a socket whose other end is closed before the command starts: every
        // write fails, as after `| head` has read its lines.
        let (ours, theirs) = UnixStream::pair().expect("socket pair");
        drop(ours);
        let o = Command::new(BIN)
            .args(args)
            .env_remove("RUST_LOG")
            .stdout(Stdio::from(OwnedFd::from(theirs)))
            .stderr(Stdio::piped())
            .output()
            .expect("run opex-connector");
        assert_eq!(o.status.code(), Some(1), "{args:?}: {}", stderr(&o));
        assert!(!stderr(&o).contains("panicked"), "{args:?}: {}", stderr(&o));
    }
}

/// Whether `program` runs here.
fn installed(program: &str) -> bool {
    Command::new(program)
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success())
}

/// What bash completes for the words of `line` (the last one being completed).
fn bash_completes(script: &Path, line: &[&str]) -> Vec<String> {
    let words: Vec<String> = line.iter().map(|w| format!("'{w}'")).collect();
    let program = format!(
        "source '{}'; COMP_WORDS=({}); COMP_CWORD={}; _opex_connector; printf '%s\\n' \"${{COMPREPLY[@]}}\"",
        script.display(),
        words.join(" "),
        line.len() - 1
    );
    let o = Command::new("bash")
        .args(["--norc", "-c", &program])
        .output()
        .expect("run bash");
    assert!(o.status.success(), "{}", stderr(&o));
    stdout(&o)
        .lines()
        .filter(|l| !l.is_empty())
        .map(String::from)
        .collect()
}

#[test]
fn the_completions_offer_the_commands_their_kinds_options_and_shells_in_bash_zsh_and_fish() {
    let dir = tempfile::tempdir().expect("a temp dir");
    for shell in render::SHELLS {
        let o = run(&["completions", shell]);
        assert!(o.status.success(), "{shell}");
        assert_eq!(stdout(&o), render::completions(shell).expect("a shell"));
        std::fs::write(dir.path().join(shell), &o.stdout).expect("write the script");
    }
    let bash = dir.path().join("bash");
    let top = bash_completes(&bash, &["opex-connector", ""]);
    for word in [
        "run",
        "validate",
        "read",
        "scan",
        "completions",
        "--help",
        "--version",
    ] {
        assert!(top.contains(&word.to_string()), "{word} in {top:?}");
    }
    assert_eq!(
        bash_completes(&bash, &["opex-connector", "va"]),
        ["validate"]
    );
    assert_eq!(
        bash_completes(&bash, &["opex-connector", "read", ""]),
        ["modbus", "opcua", "s7"]
    );
    assert_eq!(
        bash_completes(
            &bash,
            &["opex-connector", "read", "modbus", "tcp://h", "--wo"]
        ),
        ["--word-order"]
    );
    assert_eq!(
        bash_completes(&bash, &["opex-connector", "run", "-"]),
        ["--config", "-c", "--help"]
    );
    assert_eq!(
        bash_completes(&bash, &["opex-connector", "completions", "z"]),
        ["zsh"]
    );
    assert_eq!(
        bash_completes(&bash, &["opex-connector", "browse", "e", "--trust"]),
        ["--trust-server-certs"]
    );
    for (shell, check) in [("zsh", &["-n"][..]), ("fish", &["--no-execute"][..])] {
        if !installed(shell) {
            eprintln!("{shell} is not installed (scripts/test.sh installs it): its completions are not checked");
            continue;
        }
        let o = Command::new(shell)
            .args(check)
            .arg(dir.path().join(shell))
            .output()
            .expect("run the shell");
        assert!(o.status.success(), "{shell}: {}", stderr(&o));
    }
    if installed("fish") {
        // fish's own completion of a command line, with the script loaded.
        let program = format!(
            "source {}; complete --do-complete 'opex-connector read modbus tcp://h --regi'",
            dir.path().join("fish").display()
        );
        let o = Command::new("fish")
            .args(["-c", &program])
            .output()
            .expect("run fish");
        assert!(
            stdout(&o).starts_with("--register"),
            "{}{}",
            stdout(&o),
            stderr(&o)
        );
    }
}

#[test]
fn the_committed_man_page_and_command_line_page_are_what_the_command_table_writes() {
    committed_page("man/opex-connector.1", &render::man_page(), "command_line");
    committed_page(
        "docs/src/reference/command-line.md",
        &render::markdown(),
        "command_line",
    );
    let page = render::markdown();
    for c in COMMANDS {
        assert!(page.contains(&format!("\n## {}\n", c.name)), "{}", c.name);
        assert!(
            render::man_page().contains(&format!(
                ".SS \"opex\\-connector {}",
                c.name.replace('-', "\\-")
            )),
            "{}",
            c.name
        );
    }
}

#[test]
fn the_man_page_renders_without_a_warning() {
    if !installed("groff") {
        eprintln!(
            "groff is not installed (scripts/test.sh installs it): the man page is not rendered"
        );
        return;
    }
    let dir = tempfile::tempdir().expect("a temp dir");
    let page = dir.path().join("opex-connector.1");
    std::fs::write(&page, render::man_page()).expect("write the page");
    let o = Command::new("groff")
        .args(["-man", "-Tutf8", "-ww", "-z"])
        .arg(&page)
        .output()
        .expect("run groff");
    assert!(o.status.success() && o.stderr.is_empty(), "{}", stderr(&o));
    let o = Command::new("groff")
        .args(["-man", "-Tascii", "-P-cbou"])
        .arg(&page)
        .output()
        .expect("run groff");
    let text = stdout(&o);
    assert!(text.contains("read modbus TARGET --register N"), "{text}");
}
