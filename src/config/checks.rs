//! The checks every section's validation shares: names of list entries and numbers in a range.
//! Pure, like all of validation: each problem is pushed with its path and the caller goes on.

use super::Problems;

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
}
