//! The checks every section's validation shares: names of list entries, numbers in a range,
//! bearer tokens. Pure, like all of validation: each problem is pushed with its path and the
//! caller goes on.

use std::net::SocketAddr;

use super::{Problem, Problems};

/// Fewest characters of a bearer token (`ingest.sources[].token`,
/// `connector.http.admin_token`): 16 random letters and digits are about 95 bits, out of reach
/// of guessing over the network even without the slowdown of failed attempts.
pub const MIN_TOKEN_CHARS: usize = 16;

/// How strictly bearer tokens are checked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TokenRule {
    /// A token shorter than [`MIN_TOKEN_CHARS`] is an error.
    Strict,
    /// The demo (`connector.demo: true`) on a loopback listener: a short token is a warning,
    /// so the demo's `demo-token` works out of the box while a copy of the demo opened to the
    /// network does not start with it.
    Demo,
}

impl TokenRule {
    /// The rule for a config: [`TokenRule::Demo`] only when it says `connector.demo: true`
    /// and listens on a loopback address.
    pub fn new(demo: bool, listen: SocketAddr) -> Self {
        if demo && listen.ip().is_loopback() {
            Self::Demo
        } else {
            Self::Strict
        }
    }
}

/// Checks a bearer token at `path`: it must not be empty, and under [`TokenRule::Strict`] it
/// must have at least [`MIN_TOKEN_CHARS`] characters (under [`TokenRule::Demo`] a shorter one
/// is pushed to `warnings`). False when an error was pushed.
pub fn checked_token(
    token: &str,
    path: &str,
    rule: TokenRule,
    p: &mut Problems,
    warnings: &mut Vec<Problem>,
) -> bool {
    let chars = token.chars().count();
    if chars == 0 {
        p.push(path, "must not be empty");
        return false;
    }
    if chars >= MIN_TOKEN_CHARS {
        return true;
    }
    match rule {
        TokenRule::Strict => {
            p.push(
                path,
                format!(
                    "is {chars} characters, fewer than {MIN_TOKEN_CHARS}: use a long random token"
                ),
            );
            false
        }
        TokenRule::Demo => {
            warnings.push(Problem {
                path: path.to_string(),
                message: format!(
                    "is {chars} characters, fewer than {MIN_TOKEN_CHARS}: accepted only because \
                     connector.demo is true and the listener is on loopback"
                ),
            });
            true
        }
    }
}

/// The source a rule at `at` names (`<at>.source`): required, and one of the configured
/// `sources`. `None` when a problem was pushed.
pub fn known_source(
    source: Option<&str>,
    at: &str,
    sources: &[String],
    p: &mut Problems,
) -> Option<String> {
    match source {
        None => {
            p.push(format!("{at}.source"), "is required");
            None
        }
        Some(s) if !sources.iter().any(|k| k == s) => {
            p.push(
                format!("{at}.source"),
                format!("unknown source {s:?} (known: {})", sources.join(", ")),
            );
            None
        }
        Some(s) => Some(s.to_string()),
    }
}

/// True for names that are safe in a URL path, a flow reference and a metric label: 1 to 64
/// letters, digits, `-` or `_`.
pub fn valid_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 64
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
}

/// Checks `<at>.name` of a list entry: required, a [`valid_name`], and not `taken` by an
/// earlier entry (reported, but the name is still returned so the entry's other keys get
/// checked). `None` when the entry has no usable name.
pub fn checked_name(
    name: Option<&str>,
    at: &str,
    taken: impl Fn(&str) -> bool,
    p: &mut Problems,
) -> Option<String> {
    match name {
        None => {
            p.push(format!("{at}.name"), "is required");
            None
        }
        Some(n) if !valid_name(n) => {
            p.push(
                format!("{at}.name"),
                format!("{n:?} must be 1 to 64 letters, digits, '-' or '_'"),
            );
            None
        }
        Some(n) => {
            if taken(n) {
                p.push(format!("{at}.name"), format!("{n:?} is used twice"));
            }
            Some(n.to_string())
        }
    }
}

/// `value` or `default`; a value outside `range` is reported at `path` and the default used.
pub fn in_range(
    value: Option<u64>,
    default: u64,
    range: std::ops::RangeInclusive<u64>,
    path: impl Into<String>,
    p: &mut Problems,
) -> u64 {
    let v = value.unwrap_or(default);
    if !range.contains(&v) {
        p.push(
            path,
            format!("{v} is outside {}..={}", range.start(), range.end()),
        );
        return default;
    }
    v
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_one_to_sixty_four_safe_characters() {
        assert!(valid_name("line-3_a"));
        assert!(!valid_name(""));
        assert!(!valid_name("a/b"));
        assert!(!valid_name(&"x".repeat(65)));
    }

    #[test]
    fn a_name_used_twice_is_reported_and_still_returned() {
        let mut p = Problems::default();
        assert_eq!(
            checked_name(Some("a"), "x[1]", |n| n == "a", &mut p).as_deref(),
            Some("a")
        );
        assert_eq!(p.0[0].to_string(), r#"x[1].name: "a" is used twice"#);
        assert_eq!(checked_name(None, "x[2]", |_| false, &mut p), None);
        assert_eq!(p.0[1].to_string(), "x[2].name: is required");
    }

    #[test]
    fn out_of_range_falls_back_to_the_default() {
        let mut p = Problems::default();
        assert_eq!(in_range(Some(9), 5, 1..=8, "a.b", &mut p), 5);
        assert_eq!(in_range(None, 5, 1..=8, "a.b", &mut p), 5);
        assert_eq!(p.0.len(), 1);
        assert_eq!(p.0[0].to_string(), "a.b: 9 is outside 1..=8");
    }

    #[test]
    fn a_token_shorter_than_sixteen_characters_is_an_error_except_in_the_demo_on_loopback() {
        let loopback: SocketAddr = "127.0.0.1:8080".parse().unwrap();
        let open: SocketAddr = "0.0.0.0:8080".parse().unwrap();
        assert_eq!(TokenRule::new(true, loopback), TokenRule::Demo);
        assert_eq!(TokenRule::new(true, open), TokenRule::Strict);
        assert_eq!(TokenRule::new(false, loopback), TokenRule::Strict);

        let (mut p, mut w) = (Problems::default(), Vec::new());
        assert!(checked_token(
            "0123456789abcdef",
            "t",
            TokenRule::Strict,
            &mut p,
            &mut w
        ));
        // Characters, not bytes: 15 of them are still too few.
        assert!(!checked_token(
            "äöüäöüäöüäöüäöü",
            "a",
            TokenRule::Strict,
            &mut p,
            &mut w
        ));
        assert!(!checked_token(
            "demo-token",
            "b",
            TokenRule::Strict,
            &mut p,
            &mut w
        ));
        assert!(!checked_token("", "c", TokenRule::Demo, &mut p, &mut w));
        assert!(checked_token(
            "demo-token",
            "d",
            TokenRule::Demo,
            &mut p,
            &mut w
        ));
        let errors: Vec<String> = p.0.iter().map(ToString::to_string).collect();
        assert_eq!(
            errors,
            [
                "a: is 15 characters, fewer than 16: use a long random token",
                "b: is 10 characters, fewer than 16: use a long random token",
                "c: must not be empty",
            ]
        );
        assert_eq!(w.len(), 1);
        assert_eq!(w[0].path, "d");
        assert!(w[0].message.contains("connector.demo"), "{}", w[0].message);
    }
}
