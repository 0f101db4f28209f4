//! The command table written out: the help of each command, the overview, the shell
//! completions, the man page and the book's page. Only the help and the completions are
//! printed by the binary; the man page and the page are written by the tests
//! (`tests/command_line.rs`, `UPDATE_REFERENCE=1`) and committed, so their writers cost the
//! binary nothing.

use std::fmt::Write;

use super::parse::group;
use super::table::{Command, Opt, COMMANDS};

/// Width the help wraps its text at.
const WIDTH: usize = 80;
/// The widest option column of the help; a longer option puts its text on the next line.
const OPTION_COLUMN: usize = 30;

/// What the program is, in one line.
const WHAT: &str =
    "edge gateway for industrial boxes: polls machines, takes records, delivers them at least once";

/// `--opt VALUE` as written on a command line.
fn option_form(o: &Opt) -> String {
    let mut s = match o.short {
        Some(short) => format!("{short}, {}", o.long),
        None => o.long.to_string(),
    };
    if let Some(v) = o.value {
        s.push(' ');
        s.push_str(v);
    }
    s
}

/// `opex-connector read modbus TARGET --register N [OPTIONS]`.
pub fn synopsis(c: &Command) -> String {
    let mut s = format!("opex-connector {}", c.name);
    for a in c.args {
        s.push(' ');
        s.push_str(a);
    }
    for o in c.all_options().filter(|o| o.required) {
        let _ = write!(s, " {} {}", o.long, o.value.unwrap_or(""));
    }
    if c.all_options().any(|o| !o.required) {
        s.push_str(" [OPTIONS]");
    }
    s
}

/// `text` wrapped at [`WIDTH`], each line after `indent` spaces.
fn wrap(out: &mut String, text: &str, indent: usize) {
    let mut line = 0;
    for word in text.split_whitespace() {
        if line > 0 && line + 1 + word.len() > WIDTH {
            out.push('\n');
            line = 0;
        }
        if line == 0 {
            out.extend(std::iter::repeat_n(' ', indent));
            line = indent;
        } else {
            out.push(' ');
            line += 1;
        }
        out.push_str(word);
        line += word.len();
    }
    out.push('\n');
}

/// `opex-connector COMMAND --help`.
pub fn help(c: &Command) -> String {
    let mut out = String::new();
    wrap(
        &mut out,
        &format!("opex-connector {}: {}", c.name, c.summary),
        0,
    );
    let _ = writeln!(out, "\nusage: {}", synopsis(c));
    for paragraph in c.about.split("\n\n") {
        out.push('\n');
        wrap(&mut out, paragraph, 0);
    }
    if c.all_options().next().is_some() {
        out.push_str("\noptions:\n");
        for o in c.all_options() {
            let form = format!("  {}", option_form(o));
            let text = if o.required {
                format!("{} (required)", o.help)
            } else {
                o.help.to_string()
            };
            let mut item = String::new();
            wrap(&mut item, &text, OPTION_COLUMN + 2);
            if form.len() < OPTION_COLUMN + 1 {
                out.push_str(&form);
                out.push_str(&item[form.len()..]);
            } else {
                out.push_str(&form);
                out.push('\n');
                out.push_str(&item);
            }
        }
    }
    out.push('\n');
    wrap(&mut out, &format!("exit status: {}", c.exit), 0);
    out.push_str("\nexamples:\n");
    for (line, what) in c.examples {
        let _ = writeln!(out, "  {line}\n      {what}");
    }
    out
}

/// The help of the commands named `word` and another word (`read`).
pub fn group_help(word: &str) -> Option<String> {
    let mut out = String::new();
    for c in group(word) {
        if out.is_empty() {
            let _ = writeln!(out, "opex-connector {word}: one of\n");
        }
        let _ = writeln!(out, "  {:<30} {}", c.name, c.summary);
    }
    (!out.is_empty()).then(|| {
        let _ = write!(
            out,
            "\n`opex-connector {word} KIND --help` shows one with its options and examples.\n"
        );
        out
    })
}

/// `opex-connector --help`.
pub fn overview() -> String {
    let mut out = format!(
        "opex-connector {}: {WHAT}\n\nusage: opex-connector COMMAND [ARGUMENTS] [OPTIONS]\n       opex-connector             run the demo (config/demo.yaml, embedded)\n\ncommands:\n",
        crate::VERSION
    );
    for c in COMMANDS {
        let _ = writeln!(out, "  {:<24} {}", c.name, c.summary);
    }
    out.push_str("\n`opex-connector COMMAND --help` (or `opex-connector help COMMAND`) shows a\ncommand's arguments, options, exit status and examples.\n");
    out
}

/// The first words of the commands (`read` once for `read modbus`, `read opcua`...).
fn first_words() -> Vec<&'static str> {
    let mut words: Vec<&str> = Vec::new();
    for c in COMMANDS {
        let first = c.name.split(' ').next().unwrap_or(c.name);
        if !words.contains(&first) {
            words.push(first);
        }
    }
    words
}

/// The words a command's positional argument can take, when they are a fixed list.
fn values_of(c: &Command) -> String {
    match c.name {
        "completions" => SHELLS.join(" "),
        "help" => first_words().join(" "),
        _ => String::new(),
    }
}

/// Every option of `c` as typed, with `--help`.
fn option_words(c: &Command) -> String {
    let mut words: Vec<&str> = c
        .all_options()
        .flat_map(|o| [Some(o.long), o.short].into_iter().flatten())
        .collect();
    words.push("--help");
    words.join(" ")
}

/// The shells [`completions`] writes for.
pub const SHELLS: [&str; 3] = ["bash", "zsh", "fish"];

/// `opex-connector completions SHELL`; `None` for a shell not in [`SHELLS`].
pub fn completions(shell: &str) -> Option<String> {
    match shell {
        "bash" => Some(bash()),
        "zsh" => Some(zsh()),
        "fish" => Some(fish()),
        _ => None,
    }
}

/// The kinds of each group word: `read` → `modbus opcua s7`.
fn groups() -> Vec<(&'static str, String)> {
    first_words()
        .into_iter()
        .filter_map(|w| {
            let kinds: Vec<&str> = group(w)
                .filter_map(|c| c.name.split_once(' ').map(|(_, k)| k))
                .collect();
            (!kinds.is_empty()).then(|| (w, kinds.join(" ")))
        })
        .collect()
}

fn bash() -> String {
    let mut out = String::from(
        "# bash completion for opex-connector (written by `opex-connector completions bash`)\n_opex_connector() {\n    local cur=\"${COMP_WORDS[COMP_CWORD]}\" key=\"${COMP_WORDS[1]}\" at=2 opts=\"\" values=\"\"\n",
    );
    let groups = groups();
    let _ = writeln!(
        out,
        "    if [ \"$COMP_CWORD\" -eq 1 ]; then\n        mapfile -t COMPREPLY < <(compgen -W \"{} --help --version\" -- \"$cur\")\n        return\n    fi",
        first_words().join(" ")
    );
    out.push_str("    case \"$key\" in\n");
    for (word, kinds) in &groups {
        let _ = writeln!(
            out,
            "        {word})\n            if [ \"$COMP_CWORD\" -eq 2 ]; then\n                mapfile -t COMPREPLY < <(compgen -W \"{kinds}\" -- \"$cur\")\n                return\n            fi\n            key=\"{word} ${{COMP_WORDS[2]}}\" at=3 ;;"
        );
    }
    out.push_str("    esac\n    case \"$key\" in\n");
    for c in COMMANDS {
        let _ = writeln!(
            out,
            "        \"{}\") opts=\"{}\" values=\"{}\" ;;",
            c.name,
            option_words(c),
            values_of(c)
        );
    }
    out.push_str(
        "    esac\n    if [[ \"$cur\" == -* ]]; then\n        mapfile -t COMPREPLY < <(compgen -W \"$opts\" -- \"$cur\")\n    elif [ -n \"$values\" ] && [ \"$COMP_CWORD\" -ge \"$at\" ]; then\n        mapfile -t COMPREPLY < <(compgen -W \"$values\" -- \"$cur\")\n    fi\n}\ncomplete -o default -F _opex_connector opex-connector\n",
    );
    out
}

/// `text` inside single quotes for a shell.
fn quoted(text: &str) -> String {
    format!("'{}'", text.replace('\'', "'\\''"))
}

fn zsh() -> String {
    let mut out = String::from(
        "#compdef opex-connector\n# zsh completion for opex-connector (written by `opex-connector completions zsh`)\n_opex-connector() {\n    local -a commands opts values\n    commands=(\n",
    );
    for w in first_words() {
        let summary = match find_command(w) {
            Some(c) => c.summary.to_string(),
            None => format!(
                "{w} one of: {}",
                groups()
                    .into_iter()
                    .find(|(g, _)| *g == w)
                    .map(|(_, k)| k)
                    .unwrap_or_default()
            ),
        };
        let _ = writeln!(out, "        {}", quoted(&format!("{w}:{summary}")));
    }
    out.push_str("    )\n    if (( CURRENT == 2 )); then\n        _describe command commands\n        return\n    fi\n    local key=$words[2]\n    case $key in\n");
    for (word, kinds) in groups() {
        let _ = writeln!(
            out,
            "        ({word})\n            if (( CURRENT == 3 )); then\n                values=({kinds})\n                compadd -a values\n                return\n            fi\n            key=\"{word} $words[3]\" ;;"
        );
    }
    out.push_str("    esac\n    case $key in\n");
    for c in COMMANDS {
        let _ = writeln!(
            out,
            "        ({})\n            opts=({})\n            values=({}) ;;",
            quoted(c.name),
            option_words(c),
            values_of(c)
        );
    }
    out.push_str("    esac\n    if [[ $PREFIX == -* ]]; then\n        compadd -a opts\n    elif (( ${#values} )); then\n        compadd -a values\n    else\n        _files\n    fi\n}\n_opex-connector \"$@\"\n");
    out
}

/// The command named exactly `name`.
fn find_command(name: &str) -> Option<&'static Command> {
    COMMANDS.iter().find(|c| c.name == name)
}

fn fish() -> String {
    let mut out = String::from(
        "# fish completion for opex-connector (written by `opex-connector completions fish`)\n",
    );
    let groups = groups();
    for w in first_words() {
        let summary = find_command(w).map_or("", |c| c.summary);
        let _ = writeln!(
            out,
            "complete -c opex-connector -n __fish_use_subcommand -a {w} -d {}",
            quoted(summary)
        );
    }
    for (word, kinds) in &groups {
        let _ = writeln!(
            out,
            "complete -c opex-connector -n {} -a {}",
            quoted(&format!(
                "__fish_seen_subcommand_from {word}; and not __fish_seen_subcommand_from {kinds}"
            )),
            quoted(kinds)
        );
    }
    for c in COMMANDS {
        let condition = match c.name.split_once(' ') {
            Some((w, k)) => {
                format!("__fish_seen_subcommand_from {w}; and __fish_seen_subcommand_from {k}")
            }
            None => format!("__fish_seen_subcommand_from {}", c.name),
        };
        for o in c.all_options() {
            let mut line = format!(
                "complete -c opex-connector -n {} -l {}",
                quoted(&condition),
                o.long.trim_start_matches("--")
            );
            if let Some(s) = o.short {
                let _ = write!(line, " -s {}", s.trim_start_matches('-'));
            }
            if o.value.is_some() {
                line.push_str(" -r");
            }
            let _ = writeln!(out, "{line} -d {}", quoted(o.help));
        }
        let values = values_of(c);
        if !values.is_empty() {
            let _ = writeln!(
                out,
                "complete -c opex-connector -n {} -f -a {}",
                quoted(&condition),
                quoted(&values)
            );
        }
    }
    out
}

/// `text` for roff: backslashes and dashes escaped, no line starting with a control
/// character.
fn roff(text: &str) -> String {
    let escaped = text.replace('\\', "\\e").replace('-', "\\-");
    escaped
        .lines()
        .map(|l| {
            if l.starts_with('.') || l.starts_with('\'') {
                format!("\\&{l}")
            } else {
                l.to_string()
            }
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// The man page, `man/opex-connector.1`.
pub fn man_page() -> String {
    let mut out = format!(
        ".TH OPEX\\-CONNECTOR 1 \"\" \"opex\\-connector\" \"User Commands\"\n.SH NAME\nopex\\-connector \\- {}\n.SH SYNOPSIS\n.B opex\\-connector\n.br\n.B opex\\-connector\n.I COMMAND\n.RI [ ARGUMENTS ]\n.RI [ OPTIONS ]\n.SH DESCRIPTION\n{}\n.PP\nWithout a command it runs the demo config it carries (config/demo.yaml) against its built\\-in simulated plant.\n.SH COMMANDS\n",
        roff(WHAT),
        roff("opex-connector runs as a service on an industrial box: it polls field devices (Modbus RTU and TCP, OPC-UA, S7), takes records from webhooks, an HTTP ingest API, NATS and MQTT, and delivers every record at least once to its sinks. Its commands run it, check its config, commission a line and sign its releases."),
    );
    for c in COMMANDS {
        let _ = writeln!(out, ".SS \"{}\"", roff(&synopsis(c)));
        for (i, p) in c.about.split("\n\n").enumerate() {
            if i > 0 {
                out.push_str(".PP\n");
            }
            let _ = writeln!(out, "{}", roff(p));
        }
        for o in c.all_options() {
            let mut form = String::new();
            if let Some(s) = o.short {
                let _ = write!(form, "\\fB{}\\fR, ", roff(s));
            }
            let _ = write!(form, "\\fB{}\\fR", roff(o.long));
            if let Some(v) = o.value {
                let _ = write!(form, " \\fI{}\\fR", roff(v));
            }
            let req = if o.required { " (required)" } else { "" };
            let _ = writeln!(out, ".TP\n{form}\n{}{req}", roff(o.help));
        }
        let _ = writeln!(out, ".PP\nExit status: {}.", roff(c.exit));
        out.push_str(".PP\nExamples:\n.RS\n");
        for (line, what) in c.examples {
            let _ = writeln!(out, ".nf\n{}\n.fi\n{}\n.sp", roff(line), roff(what));
        }
        out.push_str(".RE\n");
    }
    out.push_str(".SH ENVIRONMENT\n.TP\n.B RUST_LOG\nthe log filter, e.g. \\fBRUST_LOG=debug\\fR (default: info for the daemon, errors only for the commissioning tools); the release binaries of scripts/build\\-release.sh carry no debug or trace lines\n.SH FILES\n.TP\n.I /etc/opex\\-connector/config.yaml\nthe config the systemd unit runs\n.SH SEE ALSO\nThe book in the release archive and the repository (docs/), chapter Reference.\n");
    out
}

/// A Markdown table cell.
fn cell(text: &str) -> String {
    text.replace('|', "\\|")
}

/// The book's page, `docs/src/reference/command-line.md`.
pub fn markdown() -> String {
    let mut out = String::from(
        "<!-- Written by `UPDATE_REFERENCE=1 cargo test --test command_line` from the command table in src/cli/table.rs: edit that, not this page. -->\n\n# Command line\n\n`opex-connector` is one binary with a few commands: `run` for the daemon, `validate` to check a config, the commissioning tools `browse`, `read` and `scan`, and the release tools. Without a command it runs the demo. Every command answers `--help` with what it does, its options, its exit status and examples; `opex-connector --help` lists them. A wrong or missing argument is one line that names it and points at the command's `--help` (exit status 2). `opex-connector completions bash|zsh|fish` prints shell completions, and the release archive carries the man page `opex-connector.1`. This page, the man page, the help and the completions are written from one table in the code, so they always agree with what the binary takes.\n\n| command | does |\n| --- | --- |\n| `opex-connector` | runs the demo config it carries (`config/demo.yaml`) against its built-in simulated plant |\n",
    );
    for c in COMMANDS {
        let _ = writeln!(
            out,
            "| [`{}`](#{}) | {} |",
            c.name,
            c.name.replace(' ', "-"),
            cell(c.summary)
        );
    }
    for c in COMMANDS {
        let _ = write!(out, "\n## {}\n\n```text\n{}\n```\n", c.name, synopsis(c));
        for p in c.about.split("\n\n") {
            let _ = write!(out, "\n{p}\n");
        }
        if c.all_options().next().is_some() {
            out.push_str("\n| option | |\n| --- | --- |\n");
            for o in c.all_options() {
                let req = if o.required { " (required)" } else { "" };
                let _ = writeln!(out, "| `{}` | {}{req} |", option_form(o), cell(o.help));
            }
        }
        let _ = write!(out, "\nExit status: {}.\n\n```sh\n", c.exit);
        for (i, (line, what)) in c.examples.iter().enumerate() {
            if i > 0 {
                out.push('\n');
            }
            let _ = writeln!(out, "# {what}\n{line}");
        }
        out.push_str("```\n");
    }
    out
}
