//! The command line, described once: every command with its arguments, options and
//! examples is a row of [`COMMANDS`]. `main.rs` parses with it ([`parse`]); `--help`, the
//! shell completions, the man page `man/opex-connector.1` and the book's
//! `reference/command-line.md` are all written from it ([`render`]), so none of them can
//! name an option the parser does not take.
//!
//! The parser is our own, a few dozen lines: arguments are positional words, then
//! `--name value` options and bare `--switch`es, each at most once. A wrong or missing
//! argument is one line that names it and points at the command's `--help`.

mod parse;
pub mod render;
mod table;

pub use parse::{find, parse, Parsed, UsageError};
pub use table::{Command, Opt, COMMANDS};
