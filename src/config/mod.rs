//! Configuration: YAML text → raw structs → validated [`Config`].
//!
//! Three steps, each with one job:
//! 1. [`parse`] turns YAML into the raw structs of [`raw`], collecting *every* structural problem
//!    (syntax, unknown key, wrong type) with its path instead of stopping at the first.
//! 2. [`validate`] checks the raw structs without any I/O and reports every problem with its path,
//!    e.g. `connector.push_queue.on_full: expected evict_oldest or block, got "drop"`.
//! 3. The daemon builds its runtime parts from the validated [`Config`]; only that step touches the
//!    disk or the network.
//!
//! `opex-connector validate FILE` runs steps 1 and 2 alone; systemd runs it before every start.

pub mod checks;
mod keys;
mod overlay;
mod parse;
pub mod raw;
mod read;
mod routes;
pub mod schema;
mod validate;

use std::fmt;
use std::path::Path;

pub use crate::http::config::HttpConfig;
pub(crate) use keys::fields_of;
pub use overlay::overlay;
pub use parse::{expanded_tree, expanded_yaml, parse_raw, parse_tree};
pub use validate::{validate, Config, ConnectorConfig, DEFAULT_NAME};

/// The default a newcomer runs: `cargo run --release` with no arguments.
pub const DEMO_YAML: &str = include_str!("../../config/demo.yaml");

/// One problem in a config, with the path of the key it is about.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Problem {
    /// Dotted path with list indexes, e.g. `ingest.sources[1].token`; empty for the whole file.
    pub path: String,
    /// What is wrong, in a short sentence.
    pub message: String,
}

impl fmt::Display for Problem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.path.is_empty() {
            write!(f, "{}", self.message)
        } else {
            write!(f, "{}: {}", self.path, self.message)
        }
    }
}

/// Every problem found in a config; never empty when returned as an error.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Problems(pub Vec<Problem>);

impl Problems {
    /// Records a problem at `path`.
    pub fn push(&mut self, path: impl Into<String>, message: impl Into<String>) {
        self.0.push(Problem {
            path: path.into(),
            message: message.into(),
        });
    }

    /// True when nothing was recorded.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

impl fmt::Display for Problems {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, p) in self.0.iter().enumerate() {
            if i > 0 {
                writeln!(f)?;
            }
            write!(f, "{p}")?;
        }
        Ok(())
    }
}

impl std::error::Error for Problems {}

/// The connection a source or sink names (`<at>.connection`) among `connections` (`list`
/// is their config path, for messages), or the only one when it names none.
pub fn pick_connection<T: Clone>(
    connections: &[T],
    name_of: impl Fn(&T) -> &str,
    name: Option<&str>,
    list: &str,
    at: &str,
    p: &mut Problems,
) -> Option<T> {
    match name {
        Some(n) => {
            let found = connections.iter().find(|c| name_of(c) == n).cloned();
            if found.is_none() {
                p.push(
                    format!("{at}.connection"),
                    format!("no connection named {n:?} in {list}"),
                );
            }
            found
        }
        None if connections.len() == 1 => connections.first().cloned(),
        None if connections.is_empty() => {
            p.push(
                format!("{at}.connection"),
                format!("{list} is empty: configure a connection"),
            );
            None
        }
        None => {
            p.push(
                format!("{at}.connection"),
                "is required when there are several connections",
            );
            None
        }
    }
}

/// The problems of `text` as a config (after a `connector:` section with a data dir), each
/// as `path: message`; none when it is valid. The config tests' one helper.
#[cfg(test)]
pub fn test_problems(text: &str) -> Vec<String> {
    match from_yaml(&format!("connector:\n  data_dir: /d\n{text}")) {
        Ok(_) => Vec::new(),
        Err(problems) => problems.0.into_iter().map(|p| p.to_string()).collect(),
    }
}

/// Parses and validates YAML text. Pure: no I/O.
///
/// Structural problems (unknown keys, wrong types) and value problems are reported together;
/// a value left out for its wrong type is not reported a second time as missing.
pub fn from_yaml(text: &str) -> Result<Config, Problems> {
    let (raw, mut problems, expansion) = parse_raw(text)?;
    match validate(&raw) {
        Ok(config) if problems.is_empty() => Ok(config),
        Ok(_) => Err(expansion.rewrite(problems)),
        Err(more) => {
            let structural: Vec<String> = problems.0.iter().map(|p| p.path.clone()).collect();
            problems
                .0
                .extend(more.0.into_iter().filter(|p| !structural.contains(&p.path)));
            Err(expansion.rewrite(problems))
        }
    }
}

/// Checks that a file holding a secret (webhook secret, NATS credentials, a TLS private key)
/// cannot be read by every user of the box: `Err` with the reason when it can, or when it
/// cannot be inspected. Part of building, not of validation (it looks at the disk).
pub fn check_private_file(path: &Path) -> Result<(), String> {
    use std::os::unix::fs::PermissionsExt;
    let meta = std::fs::metadata(path).map_err(|e| format!("{}: {e}", path.display()))?;
    if meta.permissions().mode() & 0o004 != 0 {
        return Err(format!(
            "{} holds a secret and is readable by every user; chmod o-r it",
            path.display()
        ));
    }
    Ok(())
}

/// Reads a config file's text; a file that cannot be read is the one problem.
pub fn read(path: &Path) -> Result<String, Problems> {
    std::fs::read_to_string(path).map_err(|e| {
        let mut p = Problems::default();
        p.push("", format!("cannot read {}: {e}", path.display()));
        p
    })
}

/// Reads, parses and validates a config file.
pub fn load(path: &Path) -> Result<Config, Problems> {
    from_yaml(&read(path)?)
}
