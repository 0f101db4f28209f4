//! The config file's JSON Schema (`opex-connector schema`) against a JSON Schema validator
//! written by others: Python `jsonschema` (pinned and installed by `scripts/test.sh`). The
//! schema is a valid 2020-12 schema; every config of `config/`, the board overlays, the
//! README's, the book's and the tests' configs that `opex-connector validate` accepts validate against
//! it; a typo'd key, a key of the wrong type and a value outside the allowed ones fail it.
//! The committed `config/opex-connector.schema.json` and
//! `docs/src/reference/configuration.md` are what the build writes from the config types
//! (`UPDATE_REFERENCE=1` rewrites them).

mod common;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use common::*;
use opex_connector::config::schema;
use serde_json::{json, Value};

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

#[test]
fn the_committed_schema_and_configuration_page_are_what_the_config_types_give() {
    let text = schema::schema().expect("the schema inflates");
    committed_page("config/opex-connector.schema.json", &text, "config_schema");
    committed_page(
        "docs/src/reference/configuration.md",
        schema::REFERENCE_PAGE,
        "config_schema",
    );
    let out = run_cli(&["schema"]);
    assert!(out.status.success());
    assert_eq!(String::from_utf8_lossy(&out.stdout), text);
}

/// The id mdBook gives a heading: lower case, letters, digits, `_` and `-` kept, spaces as
/// `-`.
fn heading_id(heading: &str) -> String {
    heading
        .to_lowercase()
        .chars()
        .filter_map(|c| match c {
            c if c.is_alphanumeric() || c == '_' || c == '-' => Some(c),
            ' ' => Some('-'),
            _ => None,
        })
        .collect()
}

#[test]
fn every_link_within_the_reference_pages_names_a_heading_of_its_page() {
    for page in [
        "docs/src/reference/configuration.md",
        "docs/src/reference/command-line.md",
    ] {
        let text = std::fs::read_to_string(root().join(page)).expect("read");
        let ids: Vec<String> = text
            .lines()
            .filter_map(|l| l.strip_prefix("## ").or(l.strip_prefix("# ")))
            .map(heading_id)
            .collect();
        let mut links = 0;
        for part in text.split("](#").skip(1) {
            let anchor = &part[..part.find(')').expect("a closed link")];
            assert!(ids.iter().any(|i| i == anchor), "{page}: #{anchor}");
            links += 1;
        }
        assert!(links > 10, "{page}: {links} links");
    }
}

#[test]
fn the_example_configs_name_the_schema_on_their_first_line() {
    for file in config_files() {
        let text = std::fs::read_to_string(&file).expect("read");
        let first = text.lines().next().unwrap_or_default();
        assert!(
            first.starts_with("# yaml-language-server: $schema=")
                && first.ends_with("opex-connector.schema.json"),
            "{}: {first}",
            file.display()
        );
    }
}

/// `config/*.yaml` and `config/examples/*.yaml`.
fn config_files() -> Vec<PathBuf> {
    let mut files = Vec::new();
    for dir in ["config", "config/examples"] {
        for entry in std::fs::read_dir(root().join(dir)).expect("read the folder") {
            let path = entry.expect("an entry").path();
            if path.extension().is_some_and(|e| e == "yaml") {
                files.push(path);
            }
        }
    }
    files.sort();
    files
}

fn yaml(text: &str) -> Value {
    serde_saphyr::from_str(text).expect("YAML")
}

/// The YAML of every raw string in `text` that looks like a config: it opens with a
/// top-level key of the config.
fn raw_strings(text: &str) -> Vec<String> {
    const KEYS: [&str; 8] = [
        "connector:",
        "ingest:",
        "devices:",
        "sinks:",
        "flows:",
        "nats:",
        "mqtt:",
        "webhooks:",
    ];
    let mut out = Vec::new();
    let mut rest = text;
    while let Some(at) = rest.find("r#\"") {
        let body = &rest[at + 3..];
        let Some(end) = body.find("\"#") else { break };
        let s = &body[..end];
        let first = s.lines().map(str::trim_end).find(|l| !l.trim().is_empty());
        if first.is_some_and(|l| KEYS.iter().any(|k| l.starts_with(k))) {
            out.push(s.to_string());
        }
        rest = &body[end + 2..];
    }
    out
}

/// Whether the binary's `validate` accepts `yaml`.
fn valid(yaml: &str) -> bool {
    let dir = tempfile::tempdir().expect("a temp dir");
    let path = dir.path().join("c.yaml");
    std::fs::write(&path, yaml).expect("write");
    run_cli(&["validate", path.to_str().expect("UTF-8")])
        .status
        .success()
}

/// Each document's problems according to `jsonschema` (none when it validates).
fn check(docs: &[(String, Value)]) -> BTreeMap<String, Vec<String>> {
    let schema_file = tempfile::NamedTempFile::new().expect("a temp file");
    std::fs::write(schema_file.path(), schema::schema().expect("inflates")).expect("write");
    let script = r#"
import json, sys
from jsonschema import Draft202012Validator
schema = json.load(open(sys.argv[1]))
Draft202012Validator.check_schema(schema)
validator = Draft202012Validator(schema)
out = {}
for name, doc in json.load(sys.stdin):
    errors = sorted(validator.iter_errors(doc), key=lambda e: list(map(str, e.absolute_path)))
    out[name] = ["/".join(map(str, e.absolute_path)) + ": " + e.message for e in errors][:5]
json.dump(out, sys.stdout)
"#;
    let mut child = Command::new("python3")
        .args(["-c", script])
        .arg(schema_file.path())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run python3");
    let input = serde_json::to_vec(docs).expect("JSON");
    {
        use std::io::Write;
        let mut stdin = child.stdin.take().expect("stdin");
        stdin.write_all(&input).expect("write to python3");
    }
    let out = child.wait_with_output().expect("python3 ends");
    assert!(
        out.status.success(),
        "python3 jsonschema (scripts/test.sh installs it): {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("its answer")
}

/// Every Markdown page under `dir`, the book's, in a stable order.
fn markdown_under(dir: &Path, out: &mut Vec<PathBuf>) {
    let mut entries: Vec<PathBuf> = std::fs::read_dir(dir)
        .map(|d| d.filter_map(|e| e.ok().map(|e| e.path())).collect())
        .unwrap_or_default();
    entries.sort();
    for path in entries {
        if path.is_dir() {
            markdown_under(&path, out);
        } else if path.extension().is_some_and(|e| e == "md") {
            out.push(path);
        }
    }
}

#[test]
fn every_config_that_validate_accepts_validates_against_the_schema() {
    let mut docs: Vec<(String, Value)> = Vec::new();
    for file in config_files() {
        let text = std::fs::read_to_string(&file).expect("read");
        docs.push((file.display().to_string(), yaml(&text)));
    }
    let demo = root().join("config/demo.yaml");
    for entry in std::fs::read_dir(root().join("boards")).expect("boards/") {
        let path = entry.expect("an entry").path();
        if path.extension().is_some_and(|e| e == "yaml") {
            // The demo as it runs on the board: its config overlay merged over it.
            let out = run_cli(&[
                "overlay",
                demo.to_str().expect("UTF-8"),
                path.to_str().expect("UTF-8"),
            ]);
            assert!(
                out.status.success(),
                "{}",
                String::from_utf8_lossy(&out.stderr)
            );
            let merged = yaml(&String::from_utf8_lossy(&out.stdout));
            docs.push((format!("config/demo.yaml on {}", path.display()), merged));
        }
    }
    let mut sources: Vec<(String, String)> = Vec::new();
    let mut pages = vec![root().join("README.md")];
    markdown_under(&root().join("docs/src"), &mut pages);
    for page in pages {
        let text = std::fs::read_to_string(&page).expect("a page");
        for (i, block) in yaml_blocks(&text).into_iter().enumerate() {
            sources.push((format!("{} yaml block {i}", page.display()), block));
        }
    }
    let mut tests: Vec<PathBuf> = std::fs::read_dir(root().join("tests"))
        .expect("tests/")
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|e| e == "rs"))
        .collect();
    tests.sort();
    for file in tests {
        let text = std::fs::read_to_string(&file).expect("read");
        for (i, s) in raw_strings(&text).into_iter().enumerate() {
            sources.push((format!("{} raw string {i}", file.display()), s));
        }
    }
    let mut from_sources = 0;
    for (name, text) in sources {
        if valid(&text) {
            docs.push((name, yaml(&text)));
            from_sources += 1;
        }
    }
    assert!(
        from_sources >= 8,
        "only {from_sources} configs from the README, the book and the tests"
    );
    // The configs the tests' daemons run, with the data dir the harness adds.
    let mut with_flow = queue_config(16, "block");
    with_flow["flows"] = ingest_flow(&["push"]);
    let mut plant = plant_config(5020);
    for c in [&mut with_flow, &mut plant] {
        c["connector"]["data_dir"] = json!("/var/lib/opex-connector");
        assert!(valid(&to_yaml(c)), "{c}");
    }
    docs.push(("queue_config + ingest_flow".into(), with_flow));
    docs.push(("plant_config".into(), plant));
    let problems = check(&docs);
    let failed: Vec<_> = problems.iter().filter(|(_, p)| !p.is_empty()).collect();
    assert!(failed.is_empty(), "{failed:#?}");
    eprintln!("{} configs validate against the schema", docs.len());
}

#[test]
fn a_typod_key_a_wrong_type_and_a_value_not_allowed_fail_the_schema() {
    let demo = yaml(&std::fs::read_to_string(root().join("config/demo.yaml")).expect("demo"));
    let mut typo = demo.clone();
    typo["connector"]["push_queue"]["max_quota_mbb"] = json!(64);
    let mut nested = demo.clone();
    nested["devices"][0]["groups"][0]["intervall_ms"] = json!(500);
    let mut other_protocol = demo.clone();
    other_protocol["devices"][0]["endpoint"] = json!("opc.tcp://h:4840/");
    let mut wrong_type = demo.clone();
    wrong_type["connector"]["push_queue"]["max_quota_mb"] = json!("a lot");
    let mut not_allowed = demo.clone();
    not_allowed["connector"]["push_queue"]["on_full"] = json!("drop");
    let mut sink = demo.clone();
    sink["sinks"] =
        json!([{"name": "lake", "type": "clickhouse", "url": "http://h:8123", "tabel": "t"}]);
    let mut unknown_kind = demo;
    unknown_kind["sinks"] = json!([{"name": "lake", "type": "kafka"}]);
    let docs = vec![
        ("typo".to_string(), typo),
        ("nested".to_string(), nested),
        ("other_protocol".to_string(), other_protocol),
        ("wrong_type".to_string(), wrong_type),
        ("not_allowed".to_string(), not_allowed),
        ("sink".to_string(), sink),
        ("unknown_kind".to_string(), unknown_kind),
    ];
    let problems = check(&docs);
    for (name, want) in [
        (
            "typo",
            "connector/push_queue: Additional properties are not allowed ('max_quota_mbb'",
        ),
        (
            "nested",
            "devices/0/groups/0: Additional properties are not allowed ('intervall_ms'",
        ),
        (
            "other_protocol",
            "devices/0: Additional properties are not allowed ('endpoint'",
        ),
        (
            "wrong_type",
            "connector/push_queue/max_quota_mb: 'a lot' is not of type 'integer'",
        ),
        (
            "not_allowed",
            "connector/push_queue/on_full: 'drop' is not one of ['evict_oldest', 'block']",
        ),
        ("sink", "sinks/0"),
        ("unknown_kind", "sinks/0"),
    ] {
        let got = &problems[name];
        assert!(got.iter().any(|p| p.starts_with(want)), "{name}: {got:#?}");
    }
}

/// The YAML blocks of a Markdown text.
fn yaml_blocks(text: &str) -> Vec<String> {
    let mut blocks = Vec::new();
    let mut current: Option<String> = None;
    for line in text.lines() {
        match (&mut current, line.trim_start()) {
            (None, l) if l.starts_with("```yaml") => current = Some(String::new()),
            (Some(_), l) if l.starts_with("```") => blocks.extend(current.take()),
            (Some(block), _) => {
                block.push_str(line);
                block.push('\n');
            }
            (None, _) => {}
        }
    }
    blocks
}
