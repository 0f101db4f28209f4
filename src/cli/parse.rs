//! The command line against [`COMMANDS`]: the command's words, its positional arguments,
//! then `--name value` (or `--name=value`) options and bare switches, each at most once.

use super::table::{Command, COMMANDS};

/// A command line that fits its command's row.
#[derive(Debug)]
pub struct Parsed<'a> {
    /// The command.
    pub command: &'static Command,
    /// Its positional arguments, in order.
    pub args: Vec<&'a str>,
    /// Its options by their long name (`-c` is `--config`), each with its value (`None` for
    /// a switch); the form the commissioning tools read.
    pub options: Vec<(&'a str, Option<&'a str>)>,
}

impl<'a> Parsed<'a> {
    /// The value of option `long`, when given.
    pub fn value(&self, long: &str) -> Option<&'a str> {
        self.options
            .iter()
            .find(|(n, _)| *n == long)
            .and_then(|(_, v)| *v)
    }

    /// Whether switch `long` was given.
    pub fn has(&self, long: &str) -> bool {
        self.options.iter().any(|(n, _)| *n == long)
    }
}

/// A command line that does not fit: what is wrong, and the command whose `--help` says
/// what fits.
#[derive(Debug, PartialEq, Eq)]
pub struct UsageError {
    /// The command, when the words named one (`read modbus`), or the group (`read`).
    pub command: Option<&'static str>,
    /// What is wrong, naming the argument.
    pub message: String,
}

impl UsageError {
    /// A problem with `command`'s arguments.
    pub fn new(command: &'static str, message: impl Into<String>) -> Self {
        Self {
            command: Some(command),
            message: message.into(),
        }
    }
}

impl std::fmt::Display for UsageError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.command {
            Some(c) => write!(
                f,
                "opex-connector {c}: {} (see `opex-connector {c} --help`)",
                self.message
            ),
            None => write!(
                f,
                "opex-connector: {} (see `opex-connector --help`)",
                self.message
            ),
        }
    }
}

impl std::error::Error for UsageError {}

/// The command `words` start with (the longest name that fits) and how many words its name
/// takes.
pub fn find(words: &[&str]) -> Option<(&'static Command, usize)> {
    COMMANDS
        .iter()
        .filter_map(|c| {
            let n = c.name.split(' ').count();
            let fits = words.len() >= n && c.name.split(' ').zip(words).all(|(a, b)| a == *b);
            fits.then_some((c, n))
        })
        .max_by_key(|(_, n)| *n)
}

/// The commands whose name starts with `word` and another word (`read` gives `read modbus`,
/// `read opcua`, `read s7`).
pub fn group(word: &str) -> impl Iterator<Item = &'static Command> + '_ {
    COMMANDS.iter().filter(move |c| {
        c.name
            .split_once(' ')
            .is_some_and(|(first, _)| first == word)
    })
}

/// Parses `args` (without the program's name) against its command's row.
pub fn parse<'a>(args: &[&'a str]) -> Result<Parsed<'a>, UsageError> {
    let Some((command, used)) = find(args) else {
        let word = args.first().copied().unwrap_or("");
        let kinds: Vec<&str> = group(word)
            .filter_map(|c| c.name.split_once(' ').map(|(_, k)| k))
            .collect();
        return Err(match (kinds.is_empty(), args.get(1)) {
            (true, _) => UsageError {
                command: None,
                message: format!("unknown command `{word}`"),
            },
            (false, None) => UsageError {
                command: None,
                message: format!("{word} needs one of: {}", kinds.join(", ")),
            },
            (false, Some(kind)) => UsageError {
                command: None,
                message: format!(
                    "{word} has no `{kind}`; it takes one of: {}",
                    kinds.join(", ")
                ),
            },
        });
    };
    let mut parsed = Parsed {
        command,
        args: Vec::new(),
        options: Vec::new(),
    };
    let mut rest = args.iter().skip(used);
    while let Some(&arg) = rest.next() {
        if !(arg.starts_with('-') && arg.len() > 1) {
            parsed.args.push(arg);
            continue;
        }
        let (name, inline) = match arg.split_once('=') {
            Some((n, v)) if arg.starts_with("--") => (n, Some(v)),
            _ => (arg, None),
        };
        let Some(opt) = command
            .all_options()
            .find(|o| o.long == name || o.short == Some(name))
        else {
            return Err(UsageError::new(
                command.name,
                format!("unknown option `{name}`"),
            ));
        };
        let value = match (opt.value, inline) {
            (Some(_), Some(v)) => Some(v),
            (Some(v), None) => Some(*rest.next().ok_or_else(|| {
                UsageError::new(command.name, format!("{} needs a value ({v})", opt.long))
            })?),
            (None, Some(_)) => {
                return Err(UsageError::new(
                    command.name,
                    format!("{} takes no value", opt.long),
                ))
            }
            (None, None) => None,
        };
        if parsed.has(opt.long) {
            return Err(UsageError::new(
                command.name,
                format!("{} given twice", opt.long),
            ));
        }
        parsed.options.push((opt.long, value));
    }
    check_args(command, &parsed.args)?;
    if let Some(missing) = command
        .all_options()
        .find(|o| o.required && !parsed.has(o.long))
    {
        return Err(UsageError::new(
            command.name,
            format!("missing {} {}", missing.long, missing.value.unwrap_or("")),
        ));
    }
    Ok(parsed)
}

/// Checks the positional arguments against the command's: `NAME` one, `[NAME]` at most one,
/// `NAME...` one or more, `[NAME...]` any number.
fn check_args(command: &'static Command, given: &[&str]) -> Result<(), UsageError> {
    let mut at = 0;
    for spec in command.args {
        let optional = spec.starts_with('[');
        let name = spec.trim_matches(|c| c == '[' || c == ']');
        let many = name.ends_with("...");
        let left = given.len().saturating_sub(at);
        if left == 0 {
            if optional {
                return Ok(());
            }
            return Err(UsageError::new(command.name, format!("missing {name}")));
        }
        at += if many { left } else { 1 };
    }
    match given.get(at) {
        Some(extra) => Err(UsageError::new(
            command.name,
            format!("unexpected argument `{extra}`"),
        )),
        None => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn error(args: &[&str]) -> String {
        parse(args).expect_err("a usage error").to_string()
    }

    #[test]
    fn a_command_line_that_fits_gives_its_arguments_and_options_by_long_name() {
        let p = parse(&[
            "read",
            "modbus",
            "tcp://h:502",
            "--register",
            "7",
            "--unit=3",
        ])
        .expect("fits");
        assert_eq!(p.command.name, "read modbus");
        assert_eq!(p.args, ["tcp://h:502"]);
        assert_eq!(p.value("--register"), Some("7"));
        assert_eq!(p.value("--unit"), Some("3"));
        let p = parse(&["run", "-c", "site.yaml"]).expect("fits");
        assert_eq!(p.value("--config"), Some("site.yaml"));
        let p = parse(&[
            "read",
            "opcua",
            "opc.tcp://h/",
            "a",
            "b",
            "--trust-server-certs",
        ])
        .expect("fits");
        assert_eq!(p.args, ["opc.tcp://h/", "a", "b"]);
        assert!(p.has("--trust-server-certs"));
        assert_eq!(parse(&["help"]).expect("fits").args.len(), 0);
        assert_eq!(parse(&["help", "read", "s7"]).expect("fits").args.len(), 2);
        assert_eq!(
            parse(&["overlay", "a", "b"]).expect("fits").args,
            ["a", "b"]
        );
    }

    #[test]
    fn a_wrong_or_missing_argument_names_itself_and_points_at_the_commands_help() {
        for (args, want) in [
            (&["valdate", "x"][..], "opex-connector: unknown command `valdate` (see `opex-connector --help`)"),
            (&["validate"][..], "opex-connector validate: missing FILE (see `opex-connector validate --help`)"),
            (&["validate", "a", "b"][..], "opex-connector validate: unexpected argument `b` (see `opex-connector validate --help`)"),
            (&["run"][..], "opex-connector run: missing --config FILE (see `opex-connector run --help`)"),
            (&["run", "--config"][..], "opex-connector run: --config needs a value (FILE) (see `opex-connector run --help`)"),
            (&["run", "--confg", "x"][..], "opex-connector run: unknown option `--confg` (see `opex-connector run --help`)"),
            (&["read", "modbus", "tcp://h", "--register", "1", "--register", "2"][..], "opex-connector read modbus: --register given twice (see `opex-connector read modbus --help`)"),
            (&["read", "modbus", "tcp://h"][..], "opex-connector read modbus: missing --register N (see `opex-connector read modbus --help`)"),
            (&["read", "opcua", "opc.tcp://h/"][..], "opex-connector read opcua: missing NODE_ID... (see `opex-connector read opcua --help`)"),
            (&["read", "modbus", "tcp://h", "--register", "1", "--trust-server-certs"][..], "opex-connector read modbus: unknown option `--trust-server-certs` (see `opex-connector read modbus --help`)"),
            (&["browse", "e", "--trust-server-certs=yes"][..], "opex-connector browse: --trust-server-certs takes no value (see `opex-connector browse --help`)"),
            (&["read"][..], "opex-connector: read needs one of: modbus, opcua, s7 (see `opex-connector --help`)"),
            (&["read", "bacnet"][..], "opex-connector: read has no `bacnet`; it takes one of: modbus, opcua, s7 (see `opex-connector --help`)"),
        ] {
            assert_eq!(error(args), want, "{args:?}");
        }
    }

    #[test]
    fn every_option_name_is_unique_within_its_command_and_looks_like_an_option() {
        for c in COMMANDS {
            let names: Vec<&str> = c
                .all_options()
                .flat_map(|o| [Some(o.long), o.short].into_iter().flatten())
                .collect();
            for (i, n) in names.iter().enumerate() {
                assert!(!names[..i].contains(n), "{}: {n} twice", c.name);
                assert!(n.starts_with('-') && n.len() > 1, "{}: {n}", c.name);
            }
            assert!(!c.examples.is_empty(), "{} has no example", c.name);
        }
    }
}
