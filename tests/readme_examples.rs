//! The README and the book (`docs/`) cannot drift from the product: every YAML example
//! validates with the real binary, every `curl` example names a route the router serves with
//! that method, every internal link and `#anchor` resolves, and every page of the book is in
//! its `SUMMARY.md`.

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Component, Path, PathBuf};

use common::{run_cli, Daemon};
use serde_json::json;

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn book_src() -> PathBuf {
    root().join("docs/src")
}

/// Every Markdown page under `dir`, sorted.
fn pages_under(dir: &Path) -> Vec<PathBuf> {
    let mut pages = Vec::new();
    let mut dirs = vec![dir.to_path_buf()];
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                dirs.push(path);
            } else if path.extension().is_some_and(|e| e == "md") {
                pages.push(path);
            }
        }
    }
    pages.sort();
    pages
}

/// The README and every page of the book, each with its text.
fn documents() -> Vec<(PathBuf, String)> {
    let mut docs = vec![root().join("README.md")];
    docs.extend(pages_under(&book_src()));
    docs.into_iter()
        .map(|path| {
            let text = std::fs::read_to_string(&path).unwrap();
            (path, text)
        })
        .collect()
}

/// The reference pages the code generates (`docs/generated-pages`), as paths under
/// `docs/src`: a link to one is good while it is not generated yet.
fn generated_pages() -> BTreeSet<PathBuf> {
    std::fs::read_to_string(root().join("docs/generated-pages"))
        .unwrap()
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .map(|l| book_src().join(l))
        .collect()
}

fn shown(path: &Path) -> String {
    path.strip_prefix(root())
        .unwrap_or(path)
        .display()
        .to_string()
}

/// A document's lines, each with whether it is inside a fenced code block (the fences
/// themselves count as inside) and the fence's info string.
fn lines_with_fences(text: &str) -> Vec<(&str, Option<&str>)> {
    let mut fence: Option<&str> = None;
    let mut out = Vec::new();
    for line in text.lines() {
        let trimmed = line.trim_start();
        match fence {
            None if trimmed.starts_with("```") => {
                let info = trimmed.trim_start_matches('`').trim();
                fence = Some(info);
                out.push((line, fence));
            }
            Some(_) if trimmed.starts_with("```") => {
                out.push((line, fence));
                fence = None;
            }
            _ => out.push((line, fence)),
        }
    }
    out
}

/// The fenced blocks of a document whose info string starts with `lang`.
fn blocks(text: &str, lang: &str) -> Vec<String> {
    let mut found = Vec::new();
    let mut current: Option<String> = None;
    for line in text.lines() {
        match (&mut current, line.trim_start()) {
            (None, l) if l.starts_with("```") => {
                if l.trim_start_matches('`').starts_with(lang) {
                    current = Some(String::new());
                } else {
                    // Another language: skip to its closing fence.
                    current = Some(String::from("\u{0}"));
                }
            }
            (Some(_), l) if l.starts_with("```") => {
                found.extend(current.take().filter(|b| !b.starts_with('\u{0}')));
            }
            (Some(block), _) => {
                block.push_str(line);
                block.push('\n');
            }
            (None, _) => {}
        }
    }
    found
}

fn validate(name: &str, yaml: &str, place: &str) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join(name);
    std::fs::write(&path, yaml).unwrap();
    let out = run_cli(&["validate", path.to_str().unwrap()]);
    assert!(
        out.status.success(),
        "the example {place} does not validate:\n{yaml}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn every_yaml_example_in_the_readme_and_the_book_validates() {
    let mut count = 0;
    for (path, text) in documents() {
        for (i, block) in blocks(&text, "yaml").iter().enumerate() {
            // A fragment (flows, a sink, devices only) gets the sections it refers to and
            // does not have itself.
            let has = |section: &str| block.lines().any(|l| l.starts_with(section));
            let mut yaml = String::new();
            if !has("connector:") {
                yaml.push_str("connector:\n  data_dir: /tmp/readme\n");
            }
            if !has("webhooks:") {
                yaml.push_str("webhooks:\n  - name: stripe\n    secret: whsec_test\n");
            }
            if !has("connector:") && !has("storage:") {
                yaml.push_str("storage:\n  max_quota_mb: 16\n");
            }
            yaml.push_str(block);
            let place = format!("{} (yaml block {i})", shown(&path));
            validate(&format!("example-{count}.yaml"), &yaml, &place);
            count += 1;
        }
    }
    assert!(count >= 20, "expected the book's examples, found {count}");
}

#[test]
fn every_shipped_example_config_validates() {
    let root = root().join("config");
    let mut files = Vec::new();
    for dir in [root.clone(), root.join("examples")] {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            if path.extension().is_some_and(|e| e == "yaml") {
                files.push(path);
            }
        }
    }
    assert!(files.len() >= 3, "{files:?}");
    for path in files {
        let out = run_cli(&["validate", path.to_str().unwrap()]);
        assert!(
            out.status.success(),
            "{} does not validate:\n{}",
            path.display(),
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

// ---------------------------------------------------------------- curl

/// One `curl` command of an example: where it is, its method and the path it calls.
#[derive(Debug)]
struct Curl {
    place: String,
    method: String,
    path: String,
}

/// Splits a shell command line into words, honouring single and double quotes.
fn shell_words(line: &str) -> Vec<String> {
    let mut words = Vec::new();
    let mut word = String::new();
    let mut in_word = false;
    let mut quote: Option<char> = None;
    for c in line.chars() {
        match (quote, c) {
            (Some(q), c) if c == q => quote = None,
            (Some(_), c) => word.push(c),
            (None, '\'' | '"') => {
                quote = Some(c);
                in_word = true;
            }
            (None, c) if c.is_whitespace() => {
                if in_word {
                    words.push(std::mem::take(&mut word));
                    in_word = false;
                }
            }
            (None, c) => {
                word.push(c);
                in_word = true;
            }
        }
    }
    if in_word {
        words.push(word);
    }
    words
}

/// The method and path of a `curl` command's words: `-X`/`--request` names the method, a
/// body option (`-d`, `--data...`, `--json`, `-F`, `-T`) makes it `POST`, else `GET`.
fn method_and_path(words: &[String]) -> Option<(String, String)> {
    let mut method = None;
    let mut has_body = false;
    let mut url = None;
    let mut words = words.iter();
    while let Some(w) = words.next() {
        match w.as_str() {
            "-X" | "--request" => method = words.next().cloned(),
            "-d" | "--data" | "--data-raw" | "--data-binary" | "--data-urlencode" | "--json"
            | "-F" | "--form" | "-T" | "--upload-file" => {
                has_body = true;
                words.next();
            }
            "-H" | "--header" | "-o" | "--output" | "-u" | "--user" => {
                words.next();
            }
            w if w.starts_with("http://") || w.starts_with("https://") => {
                url.get_or_insert(w.to_string());
            }
            _ => {}
        }
    }
    let url = url?;
    let after_scheme = url.split_once("://").map_or(url.as_str(), |(_, rest)| rest);
    let path = after_scheme
        .find('/')
        .map_or("/", |i| &after_scheme[i..])
        .split(['?', '#'])
        .next()
        .unwrap_or("/")
        .to_string();
    let method = method.unwrap_or_else(|| if has_body { "POST" } else { "GET" }.to_string());
    Some((method, path))
}

/// Every `curl` command in the code blocks of the README and the book (a command may go on
/// over lines ending in `\`; a `$ ` prompt is left out).
fn curl_examples() -> Vec<Curl> {
    let mut found = Vec::new();
    for (path, text) in documents() {
        let lines = lines_with_fences(&text);
        let mut i = 0;
        while i < lines.len() {
            let (line, fence) = lines[i];
            i += 1;
            let command = line.trim_start().trim_start_matches("$ ");
            if fence.is_none() || !command.starts_with("curl ") {
                continue;
            }
            let mut joined = command.to_string();
            while joined.ends_with('\\') && i < lines.len() {
                joined.pop();
                joined.push(' ');
                joined.push_str(lines[i].0.trim());
                i += 1;
            }
            // Only the curl itself, not what it is piped into.
            let joined = joined.split(" | ").next().unwrap_or_default();
            let place = format!("{}: {}", shown(&path), joined.trim());
            let (method, path) = method_and_path(&shell_words(joined))
                .unwrap_or_else(|| panic!("no URL in the curl example {place}"));
            found.push(Curl {
                place,
                method,
                path,
            });
        }
    }
    found
}

#[test]
fn every_curl_example_calls_a_route_the_router_serves_with_its_method() {
    let examples = curl_examples();
    assert!(
        examples.len() >= 10,
        "expected the README's and the book's curl lines: {examples:#?}"
    );
    assert!(
        examples
            .iter()
            .any(|c| c.method == "POST" && c.path == "/api/devices/plant-1/write"),
        "{examples:#?}"
    );
    // A connector with admin endpoints: a route answers for itself (an unknown source,
    // device or webhook, a missing token), only a path that names no endpoint gets the
    // router's own 404, and a wrong method 405.
    let d = Daemon::start(json!({
        "connector": {"http": {"admin_token": "readme-admin-token-0123456789"}}
    }));
    for c in &examples {
        let reply = d.request(&c.method, &c.path, None, &[], None);
        assert_ne!(reply.status, 405, "{}: {}", c.place, reply.body);
        assert!(
            !(reply.status == 404 && reply.body.contains("no such endpoint")),
            "{}: no route serves {} {}: {}",
            c.place,
            c.method,
            c.path,
            reply.body
        );
    }
}

#[test]
fn a_curl_example_is_read_for_its_method_and_path() {
    let words =
        shell_words("curl -X POST 'http://127.0.0.1:8080/api/x?y=1' -H \"A: b c\" -d '{\"k\": 1}'");
    assert_eq!(
        method_and_path(&words),
        Some(("POST".into(), "/api/x".into()))
    );
    let words = shell_words("curl -d '{}' http://box/api/ingest/demo/k");
    assert_eq!(
        method_and_path(&words),
        Some(("POST".into(), "/api/ingest/demo/k".into()))
    );
    let words = shell_words("curl -s http://127.0.0.1:8080/metrics");
    assert_eq!(
        method_and_path(&words),
        Some(("GET".into(), "/metrics".into()))
    );
}

// ---------------------------------------------------------------- links

/// The id mdBook gives a heading: its text without markup, lower case, white space as `-`,
/// only letters, digits, `_` and `-` kept.
fn heading_id(heading: &str) -> String {
    // A link in a heading keeps its text only.
    let mut text = String::new();
    let mut rest = heading;
    while let Some(open) = rest.find('[') {
        let Some(close) = rest[open..].find("](").map(|c| open + c) else {
            break;
        };
        let Some(end) = rest[close..].find(')').map(|e| close + e) else {
            break;
        };
        text.push_str(&rest[..open]);
        text.push_str(&rest[open + 1..close]);
        rest = &rest[end + 1..];
    }
    text.push_str(rest);
    text.chars()
        .filter_map(|c| {
            if c.is_alphanumeric() || c == '_' || c == '-' {
                Some(c.to_ascii_lowercase())
            } else if c.is_whitespace() {
                Some('-')
            } else {
                None
            }
        })
        .collect()
}

/// The ids of a document's headings, as mdBook makes them (a repeated id gets `-1`, `-2`...).
fn anchors(text: &str) -> BTreeSet<String> {
    let mut seen: BTreeMap<String, usize> = BTreeMap::new();
    let mut ids = BTreeSet::new();
    for (line, fence) in lines_with_fences(text) {
        if fence.is_some() || !line.starts_with('#') {
            continue;
        }
        let hashes = line.chars().take_while(|&c| c == '#').count();
        if hashes > 6 || !line[hashes..].starts_with(' ') {
            continue;
        }
        let id = heading_id(line[hashes..].trim());
        let n = seen.entry(id.clone()).or_insert(0);
        ids.insert(if *n == 0 {
            id.clone()
        } else {
            format!("{id}-{n}")
        });
        *n += 1;
    }
    ids
}

/// A line without its inline code spans (a link inside backticks is text, not a link).
fn without_code_spans(line: &str) -> String {
    let mut out = String::new();
    let mut in_code = false;
    for c in line.chars() {
        if c == '`' {
            in_code = !in_code;
        } else if !in_code {
            out.push(c);
        }
    }
    out
}

/// The targets of a document's Markdown links and images, outside code.
fn link_targets(text: &str) -> Vec<String> {
    let mut targets = Vec::new();
    for (line, fence) in lines_with_fences(text) {
        if fence.is_some() {
            continue;
        }
        let line = without_code_spans(line);
        let mut rest = line.as_str();
        while let Some(at) = rest.find("](") {
            let after = &rest[at + 2..];
            let Some(end) = after.find(')') else {
                break;
            };
            targets.push(after[..end].trim().to_string());
            rest = &after[end..];
        }
    }
    targets
}

/// `path` with its `.` and `..` components resolved, without touching the disk.
fn normalize(path: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for part in path.components() {
        match part {
            Component::ParentDir => {
                out.pop();
            }
            Component::CurDir => {}
            other => out.push(other),
        }
    }
    out
}

#[test]
fn every_internal_link_and_anchor_in_the_readme_and_the_book_resolves() {
    let docs = documents();
    let texts: BTreeMap<PathBuf, &str> = docs
        .iter()
        .map(|(p, t)| (normalize(p), t.as_str()))
        .collect();
    let generated = generated_pages();
    let mut problems = Vec::new();
    let mut checked = 0;
    for (path, text) in &docs {
        for target in link_targets(text) {
            if target.contains("://") || target.starts_with("mailto:") {
                continue;
            }
            checked += 1;
            let (file, anchor) = match target.split_once('#') {
                Some((file, anchor)) => (file, Some(anchor)),
                None => (target.as_str(), None),
            };
            let resolved = if file.is_empty() {
                normalize(path)
            } else {
                normalize(&path.parent().unwrap().join(file))
            };
            let place = format!("{}: link to {target}", shown(path));
            if generated.contains(&resolved) && !resolved.exists() {
                // Generated later; its anchors cannot be checked before it is.
                continue;
            }
            if !resolved.exists() {
                problems.push(format!("{place}: {} does not exist", shown(&resolved)));
                continue;
            }
            let Some(anchor) = anchor else { continue };
            match texts.get(&resolved) {
                Some(target_text) if anchors(target_text).contains(anchor) => {}
                Some(target_text) => problems.push(format!(
                    "{place}: no heading #{anchor} in {} (it has {:?})",
                    shown(&resolved),
                    anchors(target_text)
                )),
                None => problems.push(format!(
                    "{place}: #{anchor} in {}, which is not a page",
                    shown(&resolved)
                )),
            }
        }
    }
    assert!(checked >= 100, "expected the book's links, found {checked}");
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

#[test]
fn every_page_of_the_book_is_in_its_summary_and_every_entry_is_a_page() {
    let src = book_src();
    let summary_path = src.join("SUMMARY.md");
    let summary = std::fs::read_to_string(&summary_path).unwrap();
    let listed: BTreeSet<PathBuf> = link_targets(&summary)
        .iter()
        .map(|t| normalize(&src.join(t)))
        .collect();
    let generated = generated_pages();
    for page in &generated {
        assert!(
            listed.contains(page),
            "{} is generated but not in SUMMARY.md",
            shown(page)
        );
    }
    for page in &listed {
        assert!(
            page.exists() || generated.contains(page),
            "SUMMARY.md lists {}, which does not exist",
            shown(page)
        );
    }
    let missing: Vec<String> = pages_under(&src)
        .into_iter()
        .filter(|p| *p != summary_path && !listed.contains(&normalize(p)))
        .map(|p| shown(&p))
        .collect();
    assert!(missing.is_empty(), "pages not in SUMMARY.md: {missing:?}");
}

#[test]
fn a_heading_gets_the_id_mdbook_gives_it() {
    assert_eq!(
        heading_id("The campaign: `scripts/chaos.sh`"),
        "the-campaign-scriptschaossh"
    );
    assert_eq!(heading_id("`GET /api/status`"), "get-apistatus");
    assert_eq!(
        heading_id("Scale-out: many gateways into one JetStream cluster"),
        "scale-out-many-gateways-into-one-jetstream-cluster"
    );
    assert_eq!(heading_id("See [Flows](flows.md) now"), "see-flows-now");
    let ids = anchors("# A\n\n```sh\n# not a heading\n```\n\n## A\n## B b\n#nope\n");
    assert_eq!(
        ids,
        BTreeSet::from(["a".to_string(), "a-1".to_string(), "b-b".to_string()])
    );
}
