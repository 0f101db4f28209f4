//! Semantic versions, compared the way semver.org 2.0 orders them: `MAJOR.MINOR.PATCH`
//! numerically, a pre-release (`1.0.0-rc.1`) before its release, pre-release identifiers one
//! by one (numbers numerically and before words, words in ASCII order, more identifiers after
//! fewer), build metadata (`+...`) ignored. So `0.10.0` is newer than `0.9.3`, which a string
//! comparison would get wrong, and `1.0.0+a` is *not* newer than `1.0.0+b`.

use std::cmp::Ordering;
use std::fmt;
use std::str::FromStr;

use super::ReleaseError;

/// A parsed semantic version; ordered by precedence.
#[derive(Debug, Clone)]
pub struct Version {
    major: u64,
    minor: u64,
    patch: u64,
    pre: Vec<Ident>,
    /// The text it was parsed from, for messages.
    text: String,
}

/// One dot-separated pre-release identifier.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
enum Ident {
    // Declared first: a numeric identifier orders before a word.
    Num(u64),
    Word(String),
}

/// A number without leading zeros (`0`, `17`, not `017`), as semver requires.
fn number(s: &str) -> Option<u64> {
    if s.is_empty() || !s.bytes().all(|b| b.is_ascii_digit()) || (s.len() > 1 && s.starts_with('0'))
    {
        return None;
    }
    s.parse().ok()
}

fn identifiers_ok(s: &str) -> bool {
    s.split('.')
        .all(|i| !i.is_empty() && i.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-'))
}

impl FromStr for Version {
    type Err = ReleaseError;

    fn from_str(s: &str) -> Result<Self, ReleaseError> {
        let bad = || ReleaseError::Version(s.to_string());
        if s.len() > 128 {
            return Err(bad());
        }
        let (rest, build) = match s.split_once('+') {
            Some((r, b)) => (r, Some(b)),
            None => (s, None),
        };
        if build.is_some_and(|b| !identifiers_ok(b)) {
            return Err(bad());
        }
        let (core, pre) = match rest.split_once('-') {
            Some((c, p)) => (c, Some(p)),
            None => (rest, None),
        };
        let parts: Vec<&str> = core.split('.').collect();
        let [major, minor, patch] = parts.as_slice() else {
            return Err(bad());
        };
        let pre = match pre {
            None => Vec::new(),
            Some(p) if !identifiers_ok(p) => return Err(bad()),
            Some(p) => p
                .split('.')
                .map(|i| {
                    if i.bytes().all(|b| b.is_ascii_digit()) {
                        number(i).map(Ident::Num)
                    } else {
                        Some(Ident::Word(i.to_string()))
                    }
                })
                .collect::<Option<Vec<_>>>()
                .ok_or_else(bad)?,
        };
        Ok(Version {
            major: number(major).ok_or_else(bad)?,
            minor: number(minor).ok_or_else(bad)?,
            patch: number(patch).ok_or_else(bad)?,
            pre,
            text: s.to_string(),
        })
    }
}

impl Ord for Version {
    fn cmp(&self, other: &Self) -> Ordering {
        (self.major, self.minor, self.patch)
            .cmp(&(other.major, other.minor, other.patch))
            .then_with(|| match (self.pre.is_empty(), other.pre.is_empty()) {
                (true, true) => Ordering::Equal,
                // A release is newer than any of its pre-releases.
                (true, false) => Ordering::Greater,
                (false, true) => Ordering::Less,
                // Element by element, then the longer list: exactly `Vec`'s order.
                (false, false) => self.pre.cmp(&other.pre),
            })
    }
}

impl PartialOrd for Version {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

/// Equal precedence: build metadata does not count.
impl PartialEq for Version {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other) == Ordering::Equal
    }
}

impl Eq for Version {}

impl fmt::Display for Version {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v(s: &str) -> Version {
        s.parse().unwrap()
    }

    #[test]
    fn versions_follow_semver_precedence_including_pre_releases() {
        // The example chain of semver.org 2.0, section 11, then numbers a string sort gets wrong.
        let chain = [
            "1.0.0-alpha",
            "1.0.0-alpha.1",
            "1.0.0-alpha.beta",
            "1.0.0-beta",
            "1.0.0-beta.2",
            "1.0.0-beta.11",
            "1.0.0-rc.1",
            "1.0.0",
            "1.0.1",
            "1.9.0",
            "1.10.0",
            "2.0.0",
        ];
        for pair in chain.windows(2) {
            assert!(v(pair[0]) < v(pair[1]), "{} < {}", pair[0], pair[1]);
        }
        assert!(v("0.10.0") > v("0.9.3"));
    }

    #[test]
    fn build_metadata_does_not_make_a_version_newer() {
        assert_eq!(v("1.0.0+a"), v("1.0.0+b"));
        assert_eq!(v("1.0.0+a").to_string(), "1.0.0+a");
        assert!(v("1.0.0-rc.1+x") < v("1.0.0"));
    }

    #[test]
    fn malformed_versions_are_refused() {
        for bad in [
            "",
            "1",
            "1.0",
            "1.0.0.0",
            "01.0.0",
            "1.00.0",
            "v1.0.0",
            "1.0.0-",
            "1.0.0-01",
            "1.0.0-a..b",
            "1.0.0+",
            "1.0.0-a_b",
            " 1.0.0",
            "99999999999999999999.0.0",
        ] {
            assert!(bad.parse::<Version>().is_err(), "{bad:?} was accepted");
        }
        for good in [
            "0.0.0",
            "1.2.3-0",
            "1.2.3-a-b.0.x",
            "1.2.3+001.sha-1",
            "10.20.30",
        ] {
            assert!(good.parse::<Version>().is_ok(), "{good:?} was refused");
        }
    }
}
