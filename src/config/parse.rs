//! YAML → raw structs, collecting every structural problem.
//!
//! serde stops at the first error, but an operator fixing a config on a box wants the whole list.
//! So the text is first read into a generic tree and the raw structs out of it by
//! [`read`](super::read): every unknown key is reported with its path; a value of the wrong
//! type is reported with its path, removed from the tree, and the tree is read again, until it
//! succeeds. Every raw field is optional, so removing a bad value never causes a second,
//! misleading "missing field" report: required keys are checked by validation.

use serde::de::DeserializeOwned;
use serde_json::Value;

use super::keys::Seg;
use super::raw::RawConfig;
use super::read;
use super::Problems;
use crate::sources::templates::{self, Expansion};

/// How many wrong-typed values are reported before giving up on the rest.
const MAX_TYPE_ERRORS: usize = 100;

fn render(path: &[Seg]) -> String {
    let mut out = String::new();
    for seg in path {
        match seg {
            Seg::Key(k) => {
                if !out.is_empty() {
                    out.push('.');
                }
                out.push_str(k);
            }
            Seg::Index(i) => out.push_str(&format!("[{i}]")),
        }
    }
    out
}

/// Removes the value at `path`; false when nothing was there to remove.
fn remove(tree: &mut Value, path: &[Seg]) -> bool {
    let Some((last, parents)) = path.split_last() else {
        return false;
    };
    let mut node = tree;
    for seg in parents {
        node = match (seg, node) {
            (Seg::Key(k), Value::Object(m)) => match m.get_mut(k) {
                Some(v) => v,
                None => return false,
            },
            (Seg::Index(i), Value::Array(a)) => match a.get_mut(*i) {
                Some(v) => v,
                None => return false,
            },
            _ => return false,
        };
    }
    match (last, node) {
        (Seg::Key(k), Value::Object(m)) => m.remove(k).is_some(),
        // Replace rather than remove, so later indexes keep their meaning in messages.
        (Seg::Index(i), Value::Array(a)) if *i < a.len() => {
            a[*i] = Value::Object(Default::default());
            true
        }
        _ => false,
    }
}

/// Reads YAML text into [`RawConfig`], device templates expanded first
/// ([`crate::sources::templates`]). Wrong-typed values and unknown keys are left out of the
/// result and listed in the returned problems, so that validation can still check the rest;
/// `Err` only when the text is not a YAML mapping at all. The [`Expansion`] puts the paths of
/// later problems back on the keys as written.
pub fn parse_raw(text: &str) -> Result<(RawConfig, Problems, Expansion), Problems> {
    let mut tree = read_tree(text)?;
    let mut problems = Problems::default();
    let expansion = templates::expand(&mut tree, &mut problems);
    match parse_tree::<RawConfig>(tree, "", false) {
        (Some(raw), more) => {
            problems.0.extend(more.0);
            Ok((raw, problems, expansion))
        }
        (None, more) => {
            problems.0.extend(more.0);
            Err(expansion.rewrite(problems))
        }
    }
}

/// The config as written with its templates expanded, as YAML: what `opex-connector overlay
/// FILE` prints. `Err` with every problem (paths as written) when the config is not valid.
pub fn expanded_yaml(text: &str) -> Result<String, Problems> {
    super::from_yaml(text)?;
    let tree = expanded_tree(text)?;
    serde_saphyr::to_string(&tree).map_err(|e| {
        let mut p = Problems::default();
        p.push("", format!("cannot write the expanded config: {e}"));
        p
    })
}

/// The config as written with its templates expanded, as the generic tree (not validated:
/// for a config already known to be valid). What a reload compares part by part.
pub fn expanded_tree(text: &str) -> Result<Value, Problems> {
    let mut tree = read_tree(text)?;
    templates::expand(&mut tree, &mut Problems::default());
    Ok(tree)
}

/// YAML text → the generic tree; `Err` when it is not YAML or not a mapping.
fn read_tree(text: &str) -> Result<Value, Problems> {
    let mut problems = Problems::default();
    let tree: Value = match serde_saphyr::from_str(text) {
        Ok(Value::Null) => Value::Object(Default::default()),
        Ok(v) => v,
        Err(e) => {
            problems.push("", format!("not valid YAML: {e}"));
            return Err(problems);
        }
    };
    if !tree.is_object() {
        problems.push(
            "",
            "expected a mapping of sections (connector, ingest, ...)",
        );
        return Err(problems);
    }
    Ok(tree)
}

/// Reads a tree into `T` the same way: every unknown key and every wrong-typed value is a
/// problem, the bad value left out and the rest read again. Paths are prefixed with `prefix`.
/// With `tagged`, `T` is an externally tagged enum and the tree `{variant: content}`: paths are
/// reported as if the content stood alone. `None` when the tree cannot be read even with the
/// bad values left out.
pub fn parse_tree<T: DeserializeOwned>(
    mut tree: Value,
    prefix: &str,
    tagged: bool,
) -> (Option<T>, Problems) {
    let mut problems = Problems::default();
    // A tagged enum's variant is the first segment of every path inside it.
    let skip = usize::from(tagged);
    let at = |segs: &[Seg]| {
        let rest = render(segs.get(skip..).unwrap_or_default());
        match (prefix.is_empty(), rest.is_empty(), rest.starts_with('[')) {
            (true, _, _) => rest,
            (false, true, _) => prefix.to_string(),
            (false, false, true) => format!("{prefix}{rest}"),
            (false, false, false) => format!("{prefix}.{rest}"),
        }
    };
    // Every pass reads past the same unknown keys: each is reported once, after the values
    // of the wrong type.
    let mut unknown: Vec<(String, String)> = Vec::new();
    let mut raw = None;
    for _ in 0..=MAX_TYPE_ERRORS {
        let mut this_pass = Vec::new();
        let result = read::read::<T>(&tree, &mut this_pass);
        for (segs, message) in this_pass {
            let path = at(&segs);
            if !unknown.iter().any(|(p, _)| *p == path) {
                unknown.push((path, message));
            }
        }
        match result {
            Ok(read) => {
                raw = Some(read);
                break;
            }
            Err(e) => {
                let segs = e.path.unwrap_or_default();
                problems.push(at(&segs), e.message);
                if !remove(&mut tree, &segs) {
                    break;
                }
            }
        }
    }
    for (path, message) in unknown {
        problems.push(path, message);
    }
    (raw, problems)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_wrong_type_and_unknown_key_is_reported_with_its_path() {
        let text = r#"
connector:
  data_dir: /tmp/x
  colour: blue
  http:
    max_body_kb: lots
  push_queue:
    max_quota_mb: [1]
ingest:
  sources:
    - name: a
      token: t
      extra: 1
"#;
        let (_, problems, _) = parse_raw(text).unwrap();
        let paths: Vec<&str> = problems.0.iter().map(|p| p.path.as_str()).collect();
        assert!(paths.contains(&"connector.http.max_body_kb"), "{problems}");
        assert!(
            paths.contains(&"connector.push_queue.max_quota_mb"),
            "{problems}"
        );
        assert!(paths.contains(&"connector.colour"), "{problems}");
        assert!(paths.contains(&"ingest.sources[0].extra"), "{problems}");
    }

    #[test]
    fn a_misspelled_key_is_told_the_key_it_was_meant_to_be() {
        // A device's keys are read by its protocol when it is validated.
        let text = "connector:\n  data_dir: /d\n  push_queu: {}\ndevices:\n  - name: p\n    protocol: modbus_tcp\n    host: h\n    colour: blue\n    groups:\n      - { name: fast, intervall_ms: 100 }\n    points: [{name: a, register: 1}]\n";
        let problems = crate::config::from_yaml(text).unwrap_err();
        let lines: Vec<String> = problems.0.iter().map(|p| p.to_string()).collect();
        assert_eq!(
            lines,
            [
                "connector.push_queu: unknown key; did you mean `push_queue`?",
                "devices[0].colour: unknown key",
                "devices[0].groups[0].intervall_ms: unknown key; did you mean `interval_ms`?",
            ]
        );
    }

    #[test]
    fn a_misspelled_key_of_a_sinks_entry_is_told_the_key_of_its_type() {
        use crate::sinks::config::RawSinkKind;
        let tree = serde_json::json!({"storage": {"retention_dys": 3}});
        let (_, problems) = parse_tree::<RawSinkKind>(tree, "sinks[1]", true);
        assert_eq!(
            problems.to_string(),
            "sinks[1].retention_dys: unknown key; did you mean `retention_days`?"
        );
    }

    #[test]
    fn yaml_syntax_error_is_one_problem_not_a_panic() {
        let problems = parse_raw("connector: [unclosed").unwrap_err();
        assert_eq!(problems.0.len(), 1);
        assert!(problems.0[0].message.starts_with("not valid YAML"));
    }

    #[test]
    fn empty_file_parses_to_defaults() {
        assert!(parse_raw("").unwrap().1.is_empty());
    }
}
