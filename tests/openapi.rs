//! The OpenAPI document of the HTTP API (`docs/src/reference/openapi.json`, served at
//! `GET /api/openapi.json`): valid for `openapi-spec-validator` (PyPI, installed by
//! `scripts/test.sh`), every route of the router in it (read from the router's own match arms)
//! and every path in it served. The book's page `reference/http-api.md` is generated from it
//! (`UPDATE_REFERENCE=1` writes it again). The answers of the demo match the document's
//! schemas in `tests/demo.rs`.

mod common;

use std::collections::BTreeSet;
use std::path::Path;
use std::process::Command;

use common::*;
use serde_json::{json, Value};

const ADMIN: &str = "admin-token-0123456789";

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

fn document() -> Value {
    let text = std::fs::read_to_string(root().join("docs/src/reference/openapi.json"))
        .expect("the OpenAPI document");
    serde_json::from_str(&text).expect("JSON")
}

/// Every path template of the document with its methods (upper case).
fn operations(doc: &Value) -> Vec<(String, String)> {
    let mut out = Vec::new();
    for (path, item) in doc["paths"].as_object().expect("paths") {
        for method in item.as_object().expect("a path item").keys() {
            out.push((method.to_ascii_uppercase(), path.clone()));
        }
    }
    out
}

/// A connector with every part a route needs: an ingest source, a webhook, a device that takes
/// commands, the admin token.
fn every_route_config() -> Value {
    json!({
        "connector": {"http": {"admin_token": ADMIN},
                      "push_queue": {"enabled": true, "max_quota_mb": 16}},
        "ingest": {"sources": [{"name": "line", "token": "token-0123456789"}]},
        "webhooks": [{"name": "pay", "secret": "webhook-secret-0123456789"}],
        "commands": {"token": "commands-token-0123456789"},
        "devices": [{"name": "press-1", "protocol": "modbus_tcp", "host": "127.0.0.1",
                     "port": free_port(),
                     "points": [{"name": "sp", "register": 0, "type": "u16", "writable": true}]}],
    })
}

#[test]
fn the_served_document_is_the_books_file_and_valid_openapi() {
    let daemon = Daemon::start(every_route_config());
    let out = Command::new("curl")
        .args(["--silent", "--show-error", "--compressed", "--fail"])
        .arg(daemon.url("/api/openapi.json"))
        .output()
        .expect("run curl");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let served: Value = serde_json::from_slice(&out.stdout).expect("JSON");
    assert_eq!(served, document(), "the served document is the book's file");
    assert_eq!(served["openapi"], "3.1.0");
    assert_eq!(served["info"]["version"], env!("CARGO_PKG_VERSION"));

    let check = Command::new("python3")
        .args(["-m", "openapi_spec_validator"])
        .arg(root().join("docs/src/reference/openapi.json"))
        .output()
        .expect("run python3");
    if String::from_utf8_lossy(&check.stderr).contains("No module named openapi_spec_validator") {
        println!("SKIPPED the validator: scripts/test.sh installs openapi-spec-validator");
        return;
    }
    assert!(
        check.status.success(),
        "openapi-spec-validator: {}{}",
        String::from_utf8_lossy(&check.stdout),
        String::from_utf8_lossy(&check.stderr)
    );
}

/// The router's routes, read from its match arms: each slice pattern of `routes.rs` and
/// `admin.rs` as segments (`"api"`, a literal; `{}`, a name bound or `_`), the admin
/// prefixes (`rest @ ..`) joined with each pattern of the queue verbs, and `/api/config`
/// joined with each pattern of `config_api.rs`.
fn router_routes() -> BTreeSet<Vec<String>> {
    // The code only: a unit test's patterns are not routes.
    let read = |f: &str| {
        let text = std::fs::read_to_string(root().join("src/http").join(f)).expect("source");
        text.split("#[cfg(test)]").next().unwrap_or("").to_string()
    };
    let (routes, admin, config) = (read("routes.rs"), read("admin.rs"), read("config_api.rs"));
    let verbs_at = admin.find("async fn queue_verbs").expect("queue_verbs");
    let verbs_end = verbs_at + admin[verbs_at..].find("\n}\n").expect("its end");
    let (admin_main, verbs) = (
        format!("{}{}", &admin[..verbs_at], &admin[verbs_end..]),
        &admin[verbs_at..verbs_end],
    );
    let mut out = BTreeSet::new();
    let mut rests = Vec::new();
    // A literal segment is itself, a binding (`name`, `_`) a template, `rest @ ..` the rest.
    let segments = |pattern: &str| -> Vec<String> {
        pattern
            .split(',')
            .map(str::trim)
            .filter(|p| !p.is_empty())
            .map(|p| {
                if p.starts_with('"') {
                    p.trim_matches('"').to_string()
                } else if p.ends_with("..") {
                    "..".to_string()
                } else {
                    "{}".to_string()
                }
            })
            .collect()
    };
    // `config_api.rs` serves the rest of `/api/config/...`: its patterns follow that prefix.
    let config_rests: Vec<Vec<String>> = slice_patterns(&config)
        .iter()
        .map(|pattern| segments(pattern))
        .collect();
    for (text, top) in [
        (routes.as_str(), true),
        (admin_main.as_str(), true),
        (verbs, false),
    ] {
        for pattern in slice_patterns(text) {
            let parts = segments(&pattern);
            if !top {
                rests.push(parts);
            } else if parts.first().is_some_and(|p| {
                ["api", "metrics", "", "page.js", "page.css"].contains(&p.as_str())
            }) {
                out.insert(parts);
            }
        }
    }
    // A prefix that hands its rest to the queue verbs (`rest @ ..`) is one route per verb;
    // one handed to admin.rs whole (`..` in routes.rs) is covered by admin.rs's own arms.
    let prefixes: Vec<Vec<String>> = out
        .iter()
        .filter(|p| p.last().is_some_and(|s| s == ".."))
        .cloned()
        .collect();
    for p in prefixes {
        out.remove(&p);
        let base = &p[..p.len() - 1];
        if admin_main.contains(&format!("[{}, rest @ ..]", quoted(base))) {
            for r in &rests {
                out.insert(base.iter().chain(r).cloned().collect());
            }
        }
        if routes.contains(&format!(
            "[{}, rest @ ..] => return Ok(config_api::",
            quoted(base)
        )) {
            for r in &config_rests {
                out.insert(base.iter().chain(r).cloned().collect());
            }
        }
    }
    out
}

fn quoted(segments: &[String]) -> String {
    segments
        .iter()
        .map(|s| {
            if s == "{}" {
                "name".to_string()
            } else {
                format!("\"{s}\"")
            }
        })
        .collect::<Vec<_>>()
        .join(", ")
}

/// The insides of `[...]` patterns that start a match arm's path: `["api", ...]`, `[]`,
/// `["replay"]`, `[id, "replay"]`.
fn slice_patterns(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    for line in text.lines() {
        let t = line.trim_start().trim_start_matches('|').trim_start();
        let t = t.strip_prefix('(').unwrap_or(t);
        let Some(inside) = t.strip_prefix('[') else {
            continue;
        };
        let Some(end) = inside.find(']') else {
            continue;
        };
        let after = inside[end + 1..].trim_start();
        // A pattern is followed by its guard, its arm, the next alternative or the method.
        if after.starts_with("if ")
            || after.starts_with("=>")
            || after.starts_with(',')
            || after.is_empty()
        {
            out.push(inside[..end].to_string());
        }
    }
    out
}

/// True when the document has a path whose segments match `route` (a `{}` matches a
/// template, a literal itself).
fn documented(route: &[String], paths: &BTreeSet<String>) -> bool {
    paths.iter().any(|p| {
        let segs: Vec<&str> = p.trim_start_matches('/').split('/').collect();
        segs.len() == route.len()
            && segs.iter().zip(route).all(|(s, r)| {
                if r == "{}" {
                    s.starts_with('{')
                } else {
                    *s == r
                }
            })
    })
}

#[test]
fn every_route_of_the_router_is_in_the_document_and_every_path_in_it_is_served() {
    let doc = document();
    let paths: BTreeSet<String> = doc["paths"]
        .as_object()
        .expect("paths")
        .keys()
        .cloned()
        .collect();
    let routes = router_routes();
    assert!(
        routes.len() >= 20,
        "the router's arms were not read: {routes:?}"
    );
    let missing: Vec<String> = routes
        .iter()
        .filter(|r| !documented(r, &paths))
        .map(|r| format!("/{}", r.join("/")))
        .collect();
    assert!(
        missing.is_empty(),
        "routes missing from the document: {missing:?}"
    );

    // Every operation of the document answers with something of its own: never the router's
    // 404 for an unknown path, never 405.
    let daemon = Daemon::start(every_route_config());
    for (method, path) in operations(&doc) {
        let concrete = path
            .replace("/api/hooks/{name}", "/api/hooks/pay")
            .replace("/api/sinks/{name}", "/api/sinks/push")
            .replace("{source}", "line")
            .replace("{device}", "press-1")
            .replace("{id}", "1");
        let r = daemon.request(&method, &concrete, None, &[], Some(b"{}"));
        assert_ne!(r.status, 405, "{method} {concrete}: {}", r.body);
        assert!(
            !(r.status == 404 && r.body.contains("no such endpoint")),
            "{method} {concrete} is not served: {}",
            r.body
        );
        // Every status the route answered is one the document lists for it.
        let listed = &doc["paths"][&path][method.to_ascii_lowercase()]["responses"];
        assert!(
            listed.get(r.status.to_string()).is_some(),
            "{method} {path} answered {} ({}), which the document does not list",
            r.status,
            r.body
        );
    }
    // The admin routes with the token reach their handlers too.
    let r = daemon.get("/api/sinks/push/dead-letters", Some(ADMIN));
    assert_eq!(r.status, 200, "{}", r.body);
}

/// The book's page of the HTTP API: each operation with its summary, its token and its
/// answers, generated from the document.
fn http_api_page(doc: &Value) -> String {
    let mut out = String::from(
        "# HTTP API\n\n\
         Every route of the connector's HTTP API, from its OpenAPI 3.1 document\n\
         ([`openapi.json`](openapi.json), also served by the connector at\n\
         `GET /api/openapi.json`): load it into an OpenAPI tool (Swagger UI, Postman, a client\n\
         generator) for the request and answer bodies. Every route first checks the request's\n\
         `Host` (`421` for a name that is not the connector's); a wrong method gets `405` with\n\
         `Allow`; every error is `{\"ok\":false,\"error\":\"<reason>\"}`.\n\n\
         This page is generated from the document by `tests/openapi.rs`\n\
         (`UPDATE_REFERENCE=1 cargo test --test openapi` writes it again).\n\n\
         | method | path | does | token | answers |\n\
         | --- | --- | --- | --- | --- |\n",
    );
    for (method, path) in operations(doc) {
        let op = &doc["paths"][&path][method.to_ascii_lowercase()];
        let token = op["security"]
            .as_array()
            .and_then(|s| s.first())
            .and_then(|s| s.as_object())
            .and_then(|s| s.keys().next().cloned())
            .map_or("none".to_string(), |s| format!("`{s}`"));
        let answers: Vec<&String> = op["responses"]
            .as_object()
            .expect("responses")
            .keys()
            .collect();
        let answers: Vec<String> = answers.iter().map(|a| format!("`{a}`")).collect();
        out.push_str(&format!(
            "| {method} | `{path}` | {} | {token} | {} |\n",
            op["summary"].as_str().unwrap_or("").replace('|', "\\|"),
            answers.join(" ")
        ));
    }
    out.push_str("\nThe tokens:\n\n");
    for (name, scheme) in doc["components"]["securitySchemes"]
        .as_object()
        .expect("securitySchemes")
    {
        out.push_str(&format!(
            "- `{name}`: {}\n",
            scheme["description"].as_str().unwrap_or("")
        ));
    }
    out
}

#[test]
fn the_books_http_api_page_is_what_the_document_says() {
    committed_page(
        "docs/src/reference/http-api.md",
        &http_api_page(&document()),
        "openapi",
    );
}
