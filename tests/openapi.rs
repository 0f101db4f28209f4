//! `GET /api/openapi.json`, the OpenAPI 3.1 description of the HTTP API, against the real
//! binary: it validates with `openapi-spec-validator` (PyPI, pinned and installed by
//! `scripts/test.sh`); every path and method in it is served (none answers the router's
//! `404 no such endpoint` or `405`); every route the router matches (`src/http/routes.rs`
//! and `src/http/admin.rs`, read as text) is in it; the answers of a running connector
//! (status, ledger, an ingest, refusals) match their schemas in it (Python `jsonschema`); and
//! the book's
//! `docs/src/reference/http-api.md` is what the document gives (`UPDATE_REFERENCE=1`
//! rewrites it).

mod common;

use std::collections::BTreeSet;
use std::fmt::Write as _;
use std::io::Write as _;
use std::path::Path;
use std::process::{Command, Stdio};

use common::*;
use serde_json::{json, Value};

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// The committed document (the one the binary serves, checked below).
fn document() -> Value {
    let text = std::fs::read_to_string(root().join("src/http/openapi.json")).expect("read");
    serde_json::from_str(&text).expect("JSON")
}

const METHODS: [&str; 5] = ["get", "put", "post", "delete", "patch"];

/// A config whose every route has something behind it: the admin and commands tokens, a
/// webhook.
fn served_config() -> Value {
    let mut c = plant_config(0);
    c.as_object_mut().expect("an object").remove("simulator");
    c["devices"] = json!([]);
    c["commands"] = json!({"token": "c0mmands-t0ken-0123"});
    c["webhooks"] = json!([{"name": "shop", "secret": "whsec-0123456789abcdef"}]);
    c
}

#[test]
fn the_served_document_is_valid_openapi_3_1_and_is_the_committed_one() {
    let daemon = Daemon::start(served_config());
    let r = daemon.request(
        "GET",
        "/api/openapi.json",
        None,
        &[("Accept-Encoding", "identity")],
        None,
    );
    assert_eq!(r.status, 200);
    assert!(r
        .header("content-type")
        .is_some_and(|t| t.starts_with("application/json")));
    let served: Value = serde_json::from_str(&r.body).expect("JSON");
    assert_eq!(served, document());
    assert_eq!(served["openapi"], "3.1.0");
    assert_eq!(served["info"]["version"], env!("CARGO_PKG_VERSION"));
    let mut child = Command::new("python3")
        .args([
            "-c",
            "import json, sys\nfrom openapi_spec_validator import validate\nvalidate(json.load(sys.stdin))\nprint('valid')",
        ])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run python3");
    child
        .stdin
        .take()
        .expect("stdin")
        .write_all(r.body.as_bytes())
        .expect("write");
    let out = child.wait_with_output().expect("python3 ends");
    assert!(
        out.status.success(),
        "openapi-spec-validator (scripts/test.sh installs it): {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// `path` with each `{param}` filled in.
fn filled(path: &str) -> String {
    path.replace("{source}", SOURCE)
        .replace("{id}", "1")
        .replace(
            "{name}",
            if path.starts_with("/api/hooks") {
                "shop"
            } else {
                "push"
            },
        )
        .replace("{device}", "plant-1")
}

#[test]
fn every_path_and_method_of_the_document_is_served() {
    let daemon = Daemon::start(served_config());
    let doc = document();
    let paths = doc["paths"].as_object().expect("paths");
    let mut tried = 0;
    for (path, item) in paths {
        for method in METHODS.iter().filter(|m| item.get(**m).is_some()) {
            let url = filled(path);
            let upper = method.to_uppercase();
            let body = matches!(upper.as_str(), "POST" | "PUT").then_some(&b"{}"[..]);
            let r = daemon.request(&upper, &url, Some(ADMIN_TOKEN), &[], body);
            assert_ne!(r.status, 405, "{upper} {url}: {}", r.body);
            assert!(
                !(r.status == 404 && r.body.contains("no such endpoint")),
                "{upper} {url} is not served: {}",
                r.body
            );
            tried += 1;
        }
    }
    assert!(tried >= 30, "{tried}");
}

/// The path patterns of the router's match arms in `file`: `["api", "ingest", source, id]`
/// as `/api/ingest/{}/{}`; a pattern ending in `rest @ ..` gives the patterns of `tails`
/// after it, one ending in `..` alone none (another file answers it).
fn patterns(file: &str, tails: &[Vec<String>]) -> BTreeSet<String> {
    let text = std::fs::read_to_string(root().join(file)).expect("read");
    // The router's code only: not its unit tests, nor the tails' own match (read by
    // `queue_tails`).
    let text = &text[..text.find("#[cfg(test)]").unwrap_or(text.len())];
    let text = match text.find("async fn queue_verbs") {
        Some(at) => {
            let end = text[at..].find("\n}\n").map_or(text.len(), |e| at + e);
            format!("{}{}", &text[..at], &text[end..])
        }
        None => text.to_string(),
    };
    let mut out = BTreeSet::new();
    for line in text.lines() {
        let line = line
            .trim_start()
            .trim_start_matches('|')
            .trim_start()
            .trim_start_matches('(');
        let Some(body) = line.strip_prefix("[\"") else {
            continue;
        };
        let Some(end) = body.find(']') else { continue };
        let segments: Vec<String> = format!("\"{}", &body[..end])
            .split(", ")
            .map(|s| s.trim().to_string())
            .collect();
        let mut path = String::new();
        let mut open_tail = false;
        let mut delegated = false;
        for s in &segments {
            if s == ".." {
                delegated = true;
            } else if s.ends_with("@ ..") {
                open_tail = true;
            } else if let Some(lit) = s.strip_prefix('"').and_then(|s| s.strip_suffix('"')) {
                path.push('/');
                path.push_str(lit);
            } else {
                path.push_str("/{}");
            }
        }
        if delegated {
            continue;
        }
        if open_tail {
            for tail in tails {
                let mut p = path.clone();
                for t in tail {
                    p.push('/');
                    p.push_str(t);
                }
                out.insert(p);
            }
        } else {
            out.insert(if path.is_empty() { "/".into() } else { path });
        }
    }
    out
}

/// The tails of a queue's dead letters (`queue_verbs` in `src/http/admin.rs`).
fn queue_tails() -> Vec<Vec<String>> {
    let text = std::fs::read_to_string(root().join("src/http/admin.rs")).expect("read");
    let verbs = &text[text.find("async fn queue_verbs").expect("queue_verbs")..];
    let verbs = &verbs[..verbs.find("\n}\n").unwrap_or(verbs.len())];
    let mut tails = BTreeSet::new();
    for line in verbs.lines() {
        let Some(rest) = line.trim_start().strip_prefix("([") else {
            continue;
        };
        let Some(end) = rest.find(']') else { continue };
        let tail: Vec<String> = rest[..end]
            .split(", ")
            .filter(|s| !s.is_empty())
            .map(|s| match s.trim_matches('"') {
                t if s.starts_with('"') => t.to_string(),
                _ => "{}".to_string(),
            })
            .collect();
        tails.insert(tail);
    }
    tails.into_iter().collect()
}

#[test]
fn every_route_the_router_matches_is_in_the_document() {
    let mut served = patterns("src/http/routes.rs", &[]);
    served.extend(patterns("src/http/admin.rs", &queue_tails()));
    let doc = document();
    let documented: BTreeSet<String> = doc["paths"]
        .as_object()
        .expect("paths")
        .keys()
        .map(|p| {
            p.split('/')
                .map(|s| if s.starts_with('{') { "{}" } else { s })
                .collect::<Vec<_>>()
                .join("/")
        })
        .collect();
    assert!(served.len() >= 20, "{served:#?}");
    let missing: Vec<_> = served.difference(&documented).collect();
    assert!(
        missing.is_empty(),
        "served but not in the document: {missing:#?}"
    );
    let extra: Vec<_> = documented.difference(&served).collect();
    assert!(
        extra.is_empty(),
        "in the document but not matched by the router: {extra:#?}"
    );
}

/// The book's page, written from the document.
fn page(doc: &Value) -> String {
    let mut out = String::from("<!-- Written from src/http/openapi.json by `UPDATE_REFERENCE=1 cargo test --test openapi`: edit the document, not this page. -->\n\n# HTTP API\n\n");
    let _ = writeln!(
        out,
        "{}\n",
        doc["info"]["description"].as_str().unwrap_or_default()
    );
    out.push_str("The connector serves this description itself as OpenAPI 3.1 at `GET /api/openapi.json` (the same file as `src/http/openapi.json`): load it into any OpenAPI tool to browse the API or generate a client. A test checks that every route the server matches is in it and every path in it is served.\n\n## Authentication\n\n| scheme | how |\n| --- | --- |\n");
    for (name, s) in doc["components"]["securitySchemes"]
        .as_object()
        .expect("schemes")
    {
        let how = match s["type"].as_str() {
            Some("http") => "`Authorization: Bearer <token>`".to_string(),
            _ => format!("header `{}`", s["name"].as_str().unwrap_or_default()),
        };
        let _ = writeln!(
            out,
            "| `{name}` | {how}: {} |",
            s["description"]
                .as_str()
                .unwrap_or_default()
                .replace('|', "\\|")
        );
    }
    out.push_str("\n## Status codes\n\n| status | meaning |\n| --- | --- |\n");
    let codes = [
        ("400", "BadRequest"),
        ("401", "Unauthorized"),
        ("404", "NotFound"),
        ("405", "MethodNotAllowed"),
        ("406", "NotAcceptable"),
        ("408", "Timeout"),
        ("409", "Conflict"),
        ("413", "TooLarge"),
        ("421", "MisdirectedRequest"),
        ("503", "Retry"),
    ];
    for (code, name) in codes {
        let d = doc["components"]["responses"][name]["description"]
            .as_str()
            .unwrap_or_default();
        let _ = writeln!(out, "| `{code}` | {d} |");
    }
    out.push_str("\n## Routes\n\n| method | path | what | auth |\n| --- | --- | --- | --- |\n");
    for (path, item) in doc["paths"].as_object().expect("paths") {
        for m in METHODS {
            let Some(op) = item.get(m) else { continue };
            let auth: Vec<String> = op["security"]
                .as_array()
                .map(|a| {
                    a.iter()
                        .filter_map(|s| s.as_object()?.keys().next().map(|k| format!("`{k}`")))
                        .collect()
                })
                .unwrap_or_default();
            let auth = if auth.is_empty() {
                "none".to_string()
            } else {
                auth.join(", ")
            };
            let _ = writeln!(
                out,
                "| `{}` | `{path}` | {} | {auth} |",
                m.to_uppercase(),
                op["summary"].as_str().unwrap_or_default()
            );
        }
    }
    for (path, item) in doc["paths"].as_object().expect("paths") {
        for m in METHODS {
            let Some(op) = item.get(m) else { continue };
            let _ = write!(
                out,
                "\n### `{} {path}`\n\n{}\n\n",
                m.to_uppercase(),
                op["description"].as_str().unwrap_or_default()
            );
            let params: Vec<&Value> = item["parameters"]
                .as_array()
                .into_iter()
                .flatten()
                .chain(op["parameters"].as_array().into_iter().flatten())
                .collect();
            for p in params {
                let p = match p["$ref"].as_str() {
                    Some(r) => {
                        &doc["components"]["parameters"][r.rsplit('/').next().unwrap_or_default()]
                    }
                    None => p,
                };
                let _ = writeln!(
                    out,
                    "- `{}` ({}): {}",
                    p["name"].as_str().unwrap_or_default(),
                    p["in"].as_str().unwrap_or_default(),
                    p["description"].as_str().unwrap_or_default()
                );
            }
            let codes: Vec<String> = op["responses"]
                .as_object()
                .expect("responses")
                .keys()
                .map(|c| format!("`{c}`"))
                .collect();
            let _ = writeln!(out, "\nAnswers: {}.", codes.join(", "));
        }
    }
    out
}

#[test]
fn the_committed_http_api_page_is_what_the_document_gives() {
    let generated = page(&document());
    let file = root().join("docs/src/reference/http-api.md");
    if std::env::var_os("UPDATE_REFERENCE").is_some_and(|v| v == "1") {
        std::fs::write(&file, &generated).expect("write");
        return;
    }
    let on_disk = std::fs::read_to_string(&file).unwrap_or_default();
    assert!(
        on_disk == generated,
        "docs/src/reference/http-api.md differs from what src/http/openapi.json gives: run `UPDATE_REFERENCE=1 cargo test --test openapi` and commit it"
    );
}

/// The JSON schema the document gives the answer `status` of `method path`, with the
/// document's component schemas as its `$defs`.
fn answer_schema(doc: &Value, path: &str, method: &str, status: u16) -> Value {
    let mut response = &doc["paths"][path][method]["responses"][status.to_string()];
    if let Some(r) = response["$ref"].as_str() {
        response = &doc["components"]["responses"][r.rsplit('/').next().unwrap_or_default()];
    }
    let schema = &response["content"]["application/json"]["schema"];
    assert!(
        schema.is_object(),
        "{method} {path} {status} has no JSON schema"
    );
    let text = serde_json::to_string(schema)
        .expect("JSON")
        .replace("#/components/schemas/", "#/$defs/");
    let defs = serde_json::to_string(&doc["components"]["schemas"])
        .expect("JSON")
        .replace("#/components/schemas/", "#/$defs/");
    let mut s: Value = serde_json::from_str(&text).expect("JSON");
    s["$defs"] = serde_json::from_str(&defs).expect("JSON");
    s["$schema"] = json!("https://json-schema.org/draft/2020-12/schema");
    s
}

#[test]
fn the_answers_of_a_running_connector_match_their_schemas_in_the_document() {
    let daemon = Daemon::start(served_config());
    let doc = document();
    let ingest = format!("/api/ingest/{SOURCE}/order-1");
    let cases = [
        ("/api/status", "get", daemon.get("/api/status", None)),
        ("/api/ledger", "get", daemon.get("/api/ledger", None)),
        (
            "/api/ingest/{source}/{id}",
            "post",
            daemon.post(&ingest, Some(TOKEN), br#"{"qty": 3}"#),
        ),
        (
            "/api/ingest/{source}/{id}",
            "post",
            daemon.post(&ingest, Some("a-wrong-token-0123"), b"{}"),
        ),
        (
            "/api/ingest/{source}/{id}",
            "post",
            daemon.post("/api/ingest/nosuch/1", Some(TOKEN), b"{}"),
        ),
        (
            "/api/devices/{device}/write",
            "post",
            daemon.request(
                "POST",
                "/api/devices/nosuch/write",
                Some("c0mmands-t0ken-0123"),
                &[],
                Some(br#"{"points": {"setpoint": 1}}"#),
            ),
        ),
        (
            "/api/status",
            "get",
            daemon.request("DELETE", "/api/status", None, &[], None),
        ),
    ];
    let mut docs = Vec::new();
    for (path, method, reply) in &cases {
        let schema = answer_schema(&doc, path, method, reply.status);
        let body: Value = serde_json::from_str(&reply.body).expect("a JSON answer");
        docs.push(json!([
            format!("{method} {path} {}", reply.status),
            schema,
            body
        ]));
    }
    let statuses: Vec<u16> = cases.iter().map(|(_, _, r)| r.status).collect();
    assert_eq!(statuses, [200, 200, 200, 401, 404, 404, 405]);
    let script = "import json, sys\nfrom jsonschema import Draft202012Validator\nbad = []\nfor name, schema, body in json.load(sys.stdin):\n    bad += [name + ': ' + e.message for e in Draft202012Validator(schema).iter_errors(body)]\nprint('\\n'.join(bad))\nsys.exit(1 if bad else 0)";
    let mut child = Command::new("python3")
        .args(["-c", script])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run python3");
    child
        .stdin
        .take()
        .expect("stdin")
        .write_all(&serde_json::to_vec(&docs).expect("JSON"))
        .expect("write");
    let out = child.wait_with_output().expect("python3 ends");
    assert!(
        out.status.success(),
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}
