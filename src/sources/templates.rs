//! Device templates: `templates:` and the devices that say `template: NAME`.
//!
//! Templates are expanded on the config's YAML tree, before the tree is read into raw structs:
//! a template may hold any device key (those of every protocol, and any added later), and the
//! devices it makes go through the same parse and validation as devices written out in full,
//! by their protocol ([`crate::sources::devices::read_device`]).
//!
//! The rules:
//! - A template has a `name`, unique among templates, and any device keys. It cannot use
//!   another template. It may give `protocol` or leave it to its devices; when it gives it,
//!   its keys are checked as that protocol's on their own, once.
//! - A device with `template: NAME` starts from the template's keys. Every key the device
//!   gives replaces the template's, except the lists `points`, `nodes` and `groups`, which
//!   are merged by name (a node by its group and name): a device entry with the name of a
//!   template entry replaces that entry in place, the others are added after the template's.
//!   `vars` are merged key by key.
//! - `{{device}}` (the device's name) and `{{NAME}}` for each of the device's `vars` (the
//!   template's `vars` are the defaults) are put into OPC-UA node ids, e.g.
//!   `ns=2;s={{line}}.Temperature`, for every device. A name with no value is a problem.
//! - A problem keeps both paths: in a key that came from the template it reads
//!   `devices[7] (template press): points[3].register: ...`, the index being the template's
//!   own; in a key the device gave, `devices[7].points[0].register: ...`. The same problem
//!   in several devices of one template is reported once, with how many more devices have it;
//!   one the template's own check already reported (an unknown key, a wrong type) is not
//!   repeated for each device.
//!
//! Expanding is pure and bounded by the config's size: each device copies one template.

use std::collections::BTreeMap;

use serde_json::{Map, Value};

use crate::config::checks::checked_name;
use crate::config::{Problem, Problems};
use crate::sources::devices::read_device;

/// The device lists merged by name, with the keys that name an entry.
const LISTS: [(&str, &[&str]); 3] = [
    ("points", &["name"]),
    ("nodes", &["group", "name"]),
    ("groups", &["name"]),
];

/// Where one entry of a merged list, or one key, of an expanded device came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum From {
    /// The template's entry at this index.
    Template(usize),
    /// The device's own entry at this index.
    Device(usize),
}

/// How one device was expanded.
#[derive(Debug, Default)]
struct Origin {
    /// The template's name.
    template: String,
    /// The keys the device gave itself.
    own: Vec<String>,
    /// Each merged list, the origin of each of its entries in expanded order.
    lists: BTreeMap<String, Vec<From>>,
    /// The `vars` the device gave itself (the others are the template's defaults).
    own_vars: Vec<String>,
    /// The template could not be used: the device's other problems would only be noise.
    broken: bool,
}

/// What expanding did, to put the problems found later back on the keys as written.
#[derive(Debug, Default)]
pub struct Expansion {
    /// By device index: the devices that use a template.
    devices: BTreeMap<usize, Origin>,
    /// By template name: its index in `templates:`.
    index: BTreeMap<String, usize>,
    /// The problems the templates' own check found, as `templates[i].path: message`.
    own_problems: Vec<String>,
}

/// Where a problem's path leads after expanding.
enum Located {
    /// Not in a device made from a template.
    Elsewhere,
    /// In a device whose template is unknown: dropped.
    Broken,
    /// At the device's own key: the rewritten path.
    Device(String),
    /// At a key that came from the template.
    Template {
        /// The device's index.
        device: usize,
        /// The template's name.
        template: String,
        /// The template's index in `templates:`.
        at: usize,
        /// The path inside the template, e.g. `points[3].register`.
        rel: String,
    },
}

/// Expands every `template:` of `devices:` in `tree` from `templates:` and puts the variables
/// into node ids; pushes every problem it finds (paths of the expanded tree: [`Expansion::rewrite`]
/// puts them back). The `templates:` section stays, so the expanded tree is a valid config
/// that expands to itself.
pub fn expand(tree: &mut Value, p: &mut Problems) -> Expansion {
    let mut out = Expansion::default();
    // A copy: the devices beside it are rewritten.
    let section = tree.get("templates").cloned();
    let templates = read_templates(section.as_ref(), &mut out, p);
    let Some(devices) = tree.get_mut("devices").and_then(Value::as_array_mut) else {
        return out;
    };
    for (i, device) in devices.iter_mut().enumerate() {
        let Some(entry) = device.as_object_mut() else {
            continue;
        };
        if let Some(named) = entry.get("template").cloned() {
            let at = format!("devices[{i}]");
            let origin = match named.as_str() {
                None => {
                    p.push(format!("{at}.template"), "expected the name of a template");
                    broken()
                }
                Some(name) => match templates.get(name) {
                    None => {
                        let known: Vec<&str> = templates.keys().map(String::as_str).collect();
                        p.push(
                            format!("{at}.template"),
                            if known.is_empty() {
                                format!("no template is named {name:?}: templates: is empty")
                            } else {
                                format!(
                                    "no template is named {name:?} (templates: {})",
                                    known.join(", ")
                                )
                            },
                        );
                        broken()
                    }
                    Some(template) => {
                        let (merged, mut origin) = merge(template, entry);
                        *entry = merged;
                        origin.template = name.to_string();
                        origin
                    }
                },
            };
            out.devices.insert(i, origin);
        }
        if !out.devices.get(&i).is_some_and(|o| o.broken) {
            substitute(entry, &format!("devices[{i}]"), p);
        }
    }
    out
}

fn broken() -> Origin {
    Origin {
        broken: true,
        ..Origin::default()
    }
}

/// The usable templates by name; every problem of `templates:` pushed, and remembered in
/// `out` so that devices do not repeat them.
fn read_templates<'a>(
    raw: Option<&'a Value>,
    out: &mut Expansion,
    p: &mut Problems,
) -> BTreeMap<String, &'a Map<String, Value>> {
    let mut found: BTreeMap<String, &'a Map<String, Value>> = BTreeMap::new();
    let list = match raw {
        None | Some(Value::Null) => return found,
        Some(Value::Array(list)) => list,
        Some(_) => {
            p.push("templates", "expected a list of templates");
            return found;
        }
    };
    let mut names: Vec<String> = Vec::new();
    for (i, t) in list.iter().enumerate() {
        let at = format!("templates[{i}]");
        let Some(map) = t.as_object() else {
            p.push(at, "expected a mapping with a name and device keys");
            continue;
        };
        let name = checked_name(
            map.get("name").and_then(Value::as_str),
            &at,
            |n| names.iter().any(|o| o == n),
            p,
        );
        if map.contains_key("template") {
            p.push(
                format!("{at}.template"),
                "a template cannot use another template",
            );
        }
        // Unknown keys and wrong types, once for the template rather than once per device;
        // without a protocol, its devices' check finds them.
        let mut own = Problems::default();
        read_device(map, &at, false, &mut own);
        out.own_problems
            .extend(own.0.iter().map(Problem::to_string));
        p.0.extend(own.0);
        if let Some(name) = name {
            names.push(name.clone());
            if let std::collections::btree_map::Entry::Vacant(slot) = found.entry(name.clone()) {
                out.index.insert(name, i);
                slot.insert(map);
            }
        }
    }
    found
}

/// The device `device` made from `template`, and where each of its keys came from.
fn merge(
    template: &Map<String, Value>,
    device: &Map<String, Value>,
) -> (Map<String, Value>, Origin) {
    // The device's name and template first, where a reader of the expanded config looks.
    let mut out: Map<String, Value> = ["name", "template"]
        .iter()
        .filter_map(|k| Some((k.to_string(), device.get(*k)?.clone())))
        .collect();
    out.extend(
        template
            .iter()
            .filter(|(k, _)| k.as_str() != "name")
            .map(|(k, v)| (k.clone(), v.clone())),
    );
    let mut origin = Origin::default();
    for (key, value) in device {
        let list = LISTS.iter().find(|(l, _)| l == key);
        match (list, out.get(key), value) {
            (Some((_, by)), Some(Value::Array(base)), Value::Array(own)) => {
                let (merged, from) = merge_list(base, own, by);
                origin.lists.insert(key.clone(), from);
                out.insert(key.clone(), Value::Array(merged));
            }
            (None, Some(Value::Object(base)), Value::Object(own)) if key == "vars" => {
                let mut vars = base.clone();
                vars.extend(own.iter().map(|(k, v)| (k.clone(), v.clone())));
                origin.own_vars = own.keys().cloned().collect();
                out.insert(key.clone(), Value::Object(vars));
            }
            _ => {
                origin.own.push(key.clone());
                out.insert(key.clone(), value.clone());
            }
        }
    }
    (out, origin)
}

/// The identity of a list entry: the values of its `by` keys (`None` without a name: such an
/// entry is never merged, and validation reports it).
fn identity(entry: &Value, by: &[&str]) -> Option<Vec<Value>> {
    entry.get("name")?;
    Some(
        by.iter()
            .map(|k| entry.get(*k).cloned().unwrap_or(Value::Null))
            .collect(),
    )
}

fn merge_list(base: &[Value], own: &[Value], by: &[&str]) -> (Vec<Value>, Vec<From>) {
    let mut merged: Vec<Value> = base.to_vec();
    let mut from: Vec<From> = (0..base.len()).map(From::Template).collect();
    for (j, entry) in own.iter().enumerate() {
        let id = identity(entry, by);
        let same = id.as_ref().and_then(|id| {
            base.iter()
                .position(|b| identity(b, by).as_ref() == Some(id))
        });
        match same {
            Some(k) => {
                merged[k] = entry.clone();
                from[k] = From::Device(j);
            }
            None => {
                merged.push(entry.clone());
                from.push(From::Device(j));
            }
        }
    }
    (merged, from)
}

/// Puts `{{device}}` and the device's `vars` into its node ids.
fn substitute(entry: &mut Map<String, Value>, at: &str, p: &mut Problems) {
    let device = entry
        .get("name")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_string();
    let mut vars: BTreeMap<String, String> = BTreeMap::new();
    match entry.get("vars") {
        None | Some(Value::Null) => {}
        Some(Value::Object(m)) => {
            for (k, v) in m {
                let text = match v {
                    Value::String(s) => s.clone(),
                    Value::Number(n) => n.to_string(),
                    Value::Bool(b) => b.to_string(),
                    _ => {
                        p.push(
                            format!("{at}.vars.{k}"),
                            "must be a string, a number or true/false",
                        );
                        continue;
                    }
                };
                if k == "device" {
                    p.push(
                        format!("{at}.vars.device"),
                        "is always the device's name and cannot be set",
                    );
                    continue;
                }
                vars.insert(k.clone(), text);
            }
        }
        // The raw struct's parse reports the wrong type.
        Some(_) => {}
    }
    vars.insert("device".into(), device);
    let Some(nodes) = entry.get_mut("nodes").and_then(Value::as_array_mut) else {
        return;
    };
    for (i, node) in nodes.iter_mut().enumerate() {
        let Some(Value::String(id)) = node.get_mut("node_id") else {
            continue;
        };
        if !id.contains("{{") {
            continue;
        }
        match fill(id, &vars) {
            Ok(filled) => *id = filled,
            Err(e) => p.push(format!("{at}.nodes[{i}].node_id"), e),
        }
    }
}

/// `text` with each `{{NAME}}` replaced by its value.
fn fill(text: &str, vars: &BTreeMap<String, String>) -> Result<String, String> {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(open) = rest.find("{{") {
        out.push_str(&rest[..open]);
        let after = &rest[open + 2..];
        let Some(close) = after.find("}}") else {
            return Err(format!("{text:?} has a {{{{ without its }}}}"));
        };
        let name = after[..close].trim();
        match vars.get(name) {
            Some(v) => out.push_str(v),
            None => {
                let known: Vec<&str> = vars.keys().map(String::as_str).collect();
                return Err(format!(
                    "{{{{{name}}}}} has no value: give the device vars: {{{name}: ...}} (known: {})",
                    known.join(", ")
                ));
            }
        }
        rest = &after[close + 2..];
    }
    out.push_str(rest);
    Ok(out)
}

impl Expansion {
    /// `problems` with the paths inside devices made from a template put back on the keys as
    /// written (see the module doc); the same template problem in several devices once.
    pub fn rewrite(&self, problems: Problems) -> Problems {
        if self.devices.is_empty() {
            return problems;
        }
        let mut out = Problems::default();
        // (template, path in it, message) → (index in out, devices that have it)
        let mut repeated: Vec<((String, String, String), usize, usize)> = Vec::new();
        for p in problems.0 {
            match self.locate(&p.path) {
                Located::Elsewhere => out.0.push(p),
                Located::Broken => {}
                Located::Device(path) => out.push(path, p.message),
                Located::Template {
                    device,
                    template,
                    at,
                    rel,
                } => {
                    let own = format!("templates[{at}].{rel}: {}", p.message);
                    if self.own_problems.contains(&own) {
                        continue;
                    }
                    let key = (template, rel, p.message);
                    if let Some(seen) = repeated.iter_mut().find(|(k, _, _)| *k == key) {
                        seen.2 += 1;
                        continue;
                    }
                    let (template, rel, message) = &key;
                    out.push(
                        format!("devices[{device}] (template {template}): {rel}"),
                        message.clone(),
                    );
                    repeated.push((key, out.0.len() - 1, 1));
                }
            }
        }
        for ((template, _, _), i, n) in repeated {
            if n > 1 {
                if let Some(p) = out.0.get_mut(i) {
                    let more = n - 1;
                    p.message.push_str(&format!(
                        " (and in {more} more device{} of template {template})",
                        if more == 1 { "" } else { "s" }
                    ));
                }
            }
        }
        out
    }

    fn locate(&self, path: &str) -> Located {
        let Some(rest) = path.strip_prefix("devices[") else {
            return Located::Elsewhere;
        };
        let Some((index, rest)) = rest.split_once(']') else {
            return Located::Elsewhere;
        };
        let Ok(device) = index.parse::<usize>() else {
            return Located::Elsewhere;
        };
        let Some(origin) = self.devices.get(&device) else {
            return Located::Elsewhere;
        };
        if origin.broken {
            // The unknown template itself stays reported.
            return if rest == ".template" {
                Located::Device(path.to_string())
            } else {
                Located::Broken
            };
        }
        let Some(inner) = rest.strip_prefix('.') else {
            return Located::Device(path.to_string());
        };
        let key_end = inner.find(['.', '[']).unwrap_or(inner.len());
        let (key, after) = inner.split_at(key_end);
        let template_at = self.index.get(&origin.template).copied().unwrap_or(0);
        let in_template = |rel: String| Located::Template {
            device,
            template: origin.template.clone(),
            at: template_at,
            rel,
        };
        if let Some(from) = origin.lists.get(key) {
            let entry = after
                .strip_prefix('[')
                .and_then(|a| a.split_once(']'))
                .and_then(|(n, tail)| Some((n.parse::<usize>().ok()?, tail)));
            return match entry {
                Some((n, tail)) => match from.get(n) {
                    Some(From::Template(j)) => in_template(format!("{key}[{j}]{tail}")),
                    Some(From::Device(j)) => {
                        Located::Device(format!("devices[{device}].{key}[{j}]{tail}"))
                    }
                    None => Located::Device(path.to_string()),
                },
                None => Located::Device(path.to_string()),
            };
        }
        if origin.own.iter().any(|k| k == key) || key == "name" || key == "template" {
            return Located::Device(path.to_string());
        }
        if key == "vars" {
            let var = after.strip_prefix('.').unwrap_or(after);
            let var = &var[..var.find(['.', '[']).unwrap_or(var.len())];
            if origin.own_vars.iter().any(|v| v == var) {
                return Located::Device(path.to_string());
            }
        }
        in_template(inner.to_string())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tree(yaml: &str) -> Value {
        serde_saphyr::from_str(yaml).expect("yaml")
    }

    #[test]
    fn a_device_takes_the_template_keys_overrides_some_and_merges_points_by_name() {
        let mut t = tree(
            r#"
templates:
  - name: press
    protocol: modbus_tcp
    port: 502
    timeout_ms: 300
    points:
      - {name: temp, register: 0, type: f32}
      - {name: pressure, register: 7, type: i16, scale: 0.1}
devices:
  - name: press-1
    template: press
    host: 10.0.0.1
    timeout_ms: 500
    points:
      - {name: pressure, register: 9, type: i16, scale: 0.01}
      - {name: speed, register: 20}
"#,
        );
        let mut p = Problems::default();
        expand(&mut t, &mut p);
        assert!(p.is_empty(), "{p}");
        let d = &t["devices"][0];
        assert_eq!(d["protocol"], "modbus_tcp");
        assert_eq!(d["host"], "10.0.0.1");
        assert_eq!(d["timeout_ms"], 500);
        assert_eq!(d["port"], 502);
        let names: Vec<&str> = d["points"]
            .as_array()
            .unwrap()
            .iter()
            .map(|p| p["name"].as_str().unwrap())
            .collect();
        assert_eq!(names, ["temp", "pressure", "speed"]);
        assert_eq!(d["points"][1]["register"], 9);
        assert_eq!(d["template"], "press");
    }

    #[test]
    fn node_ids_get_the_device_name_and_its_vars_with_template_defaults() {
        let mut t = tree(
            r#"
templates:
  - name: line
    protocol: opcua
    vars: {area: north, line: L0}
    nodes:
      - {name: t, node_id: "ns=2;s={{area}}.{{ line }}.Temperature"}
      - {name: label, node_id: "ns=2;s={{device}}.Name"}
devices:
  - {name: line-1, template: line, endpoint: "opc.tcp://h:4840/", vars: {line: L1}}
  - {name: line-2, template: line, endpoint: "opc.tcp://h:4840/", vars: {line: 2}}
"#,
        );
        let mut p = Problems::default();
        expand(&mut t, &mut p);
        assert!(p.is_empty(), "{p}");
        assert_eq!(
            t["devices"][0]["nodes"][0]["node_id"],
            "ns=2;s=north.L1.Temperature"
        );
        assert_eq!(t["devices"][0]["nodes"][1]["node_id"], "ns=2;s=line-1.Name");
        assert_eq!(
            t["devices"][1]["nodes"][0]["node_id"],
            "ns=2;s=north.2.Temperature"
        );
    }

    #[test]
    fn an_unknown_variable_an_unclosed_brace_and_an_unknown_template_are_problems() {
        let mut t = tree(
            r#"
templates:
  - {name: line, protocol: opcua, nodes: [{name: t, node_id: "ns=2;s={{cell}}.T"}, {name: u, node_id: "ns=2;s={{x"}]}
devices:
  - {name: a, template: line, endpoint: "opc.tcp://h:4840/"}
  - {name: b, template: nope, endpoint: 7}
"#,
        );
        let mut p = Problems::default();
        let e = expand(&mut t, &mut p);
        let shown = e.rewrite(p).to_string();
        assert!(
            shown.contains("devices[0] (template line): nodes[0].node_id: {{cell}} has no value"),
            "{shown}"
        );
        assert!(
            shown.contains("devices[0] (template line): nodes[1].node_id: \"ns=2;s={{x\" has a {{ without its }}"),
            "{shown}"
        );
        assert!(
            shown.contains("devices[1].template: no template is named \"nope\" (templates: line)"),
            "{shown}"
        );
    }

    #[test]
    fn a_template_problem_is_reported_once_with_the_count_of_devices_that_share_it() {
        let mut problems = Problems::default();
        let mut t = tree(
            "templates:\n  - {name: press, protocol: modbus_tcp, points: [{name: a, register: 1}, {name: b, register: 70000}]}\ndevices:\n  - {name: p1, template: press, host: h}\n  - {name: p2, template: press, host: h}\n  - {name: p3, template: press, host: h, points: [{name: c, register: 80000}]}\n",
        );
        let e = expand(&mut t, &mut problems);
        for d in 0..3 {
            problems.push(
                format!("devices[{d}].points[1].register"),
                "70000 is outside 0..=65535",
            );
        }
        problems.push(
            "devices[2].points[2].register",
            "80000 is outside 0..=65535",
        );
        problems.push("devices[1].host", "must not be empty");
        problems.push("devices", "devices \"p1\" and \"p2\" share ...");
        let shown: Vec<String> = e
            .rewrite(problems)
            .0
            .iter()
            .map(|p| p.to_string())
            .collect();
        assert_eq!(
            shown,
            [
                "devices[0] (template press): points[1].register: 70000 is outside 0..=65535 (and in 2 more devices of template press)",
                "devices[2].points[0].register: 80000 is outside 0..=65535",
                "devices[1].host: must not be empty",
                "devices: devices \"p1\" and \"p2\" share ...",
            ]
        );
    }

    #[test]
    fn a_bad_var_is_reported_where_it_was_written() {
        let mut t = tree(
            "templates:\n  - {name: line, protocol: opcua, vars: {a: [1], b: x}}\ndevices:\n  - {name: l1, template: line, vars: {b: [2]}}\n  - {name: l2, template: line}\n",
        );
        let mut p = Problems::default();
        let e = expand(&mut t, &mut p);
        let shown: Vec<String> = e.rewrite(p).0.iter().map(|p| p.to_string()).collect();
        assert_eq!(
            shown,
            [
                "devices[0] (template line): vars.a: must be a string, a number or true/false (and in 1 more device of template line)",
                "devices[0].vars.b: must be a string, a number or true/false",
            ]
        );
    }

    #[test]
    fn a_template_that_uses_a_template_or_has_no_name_is_refused() {
        let mut t =
            tree("templates:\n  - {protocol: modbus_tcp}\n  - {name: b, template: a}\n  - 7\n");
        let mut p = Problems::default();
        expand(&mut t, &mut p);
        let shown = p.to_string();
        assert!(shown.contains("templates[0].name: is required"), "{shown}");
        assert!(
            shown.contains("templates[1].template: a template cannot use another template"),
            "{shown}"
        );
        assert!(
            shown.contains("templates[2]: expected a mapping"),
            "{shown}"
        );
    }

    #[test]
    fn expanding_an_expanded_tree_changes_nothing() {
        let text = "templates:\n  - {name: press, protocol: modbus_tcp, points: [{name: a, register: 1}, {name: b, register: 2}]}\ndevices:\n  - {name: p1, template: press, host: h, points: [{name: b, register: 3}, {name: c, register: 4}]}\n";
        let mut once = tree(text);
        expand(&mut once, &mut Problems::default());
        let mut twice = once.clone();
        expand(&mut twice, &mut Problems::default());
        assert_eq!(once, twice);
    }
}
