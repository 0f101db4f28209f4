//! `opex-connector reload --config FILE`: asks the running daemon to apply FILE, over its
//! config API (`POST /api/config` on the file's own `connector.http.listen`, with its admin
//! token), and tells what the daemon answered: the revision and the parts it changed, or why
//! nothing changed. The file is validated here first: its HTTP settings are what reach the
//! daemon, and an operator reads every problem at once without a round trip.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::path::Path;
use std::time::Duration;

use serde_json::Value;

use crate::http::client::{Client, Request};

/// How long the daemon has to answer: it validates, compares, writes the file and the
/// revision, and syncs them.
const ANSWER_TIMEOUT: Duration = Duration::from_secs(60);

/// Sends the config at `path` to the daemon that runs it (`leftovers`: what becomes of the
/// rows a sink it removes still holds); `Ok` with what the daemon applied, `Err` with why
/// nothing changed (every problem of an invalid file with its path).
pub fn ask(path: &Path, leftovers: super::Leftovers) -> Result<String, String> {
    let file = path.display();
    let text = crate::config::read(path).map_err(|p| format!("{file}: {p}"))?;
    let config = crate::config::from_yaml(&text)
        .map_err(|p| format!("{file}: {} problem(s), nothing was sent\n{p}", p.0.len()))?;
    let http = &config.connector.http;
    let token = http.admin_token.as_deref().ok_or_else(|| {
        format!(
            "{file}: connector.http.admin_token is not set, so the daemon has no config API to ask; \
             send it SIGHUP instead (systemctl reload opex-connector)"
        )
    })?;
    if http.listen.port() == 0 {
        return Err(format!(
            "{file}: connector.http.listen has port 0, so the daemon's port is not known here; \
             send it SIGHUP instead (systemctl reload opex-connector)"
        ));
    }
    let url = format!(
        "http://{}/api/config{}",
        reachable(http.listen),
        leftovers.query()
    );
    let bearer = format!("Bearer {token}");
    let answer = Client::new(ANSWER_TIMEOUT)
        .send(
            Request::post(&url, text.as_bytes())
                .header("Authorization", &bearer)
                .header("Content-Type", "application/yaml")
                .max_body(1 << 20),
        )
        .map_err(|e| format!("{url}: no answer from the daemon: {e}"))?;
    let body: Value = serde_json::from_slice(answer.body()).unwrap_or(Value::Null);
    if answer.status() == 200 {
        return Ok(applied(&body));
    }
    let mut why = match body["error"].as_str() {
        Some(e) => format!("{url}: {} {e}", answer.status()),
        None => format!("{url}: {} {}", answer.status(), answer.text().trim()),
    };
    for p in body["problems"].as_array().into_iter().flatten() {
        let path = p["path"].as_str().unwrap_or_default();
        let message = p["message"].as_str().unwrap_or_default();
        why.push_str(&format!("\n{path}: {message}"));
    }
    Err(why)
}

/// The address the daemon is reached at on this box: its own, or loopback when it listens on
/// every address.
fn reachable(listen: SocketAddr) -> SocketAddr {
    match listen.ip() {
        IpAddr::V4(ip) if ip.is_unspecified() => (Ipv4Addr::LOCALHOST, listen.port()).into(),
        IpAddr::V6(ip) if ip.is_unspecified() => (Ipv6Addr::LOCALHOST, listen.port()).into(),
        _ => listen,
    }
}

/// What an applied answer says, in lines: the revision, then each kind of change.
fn applied(body: &Value) -> String {
    let mut out = format!(
        "applied: revision {} (sha256 {})\n",
        body["revision"],
        body["hash"].as_str().unwrap_or_default()
    );
    for change in ["start", "stop", "restart"] {
        let parts: Vec<&str> = body["changes"][change]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(Value::as_str)
            .collect();
        if !parts.is_empty() {
            out.push_str(&format!("{change}: {}\n", parts.join(", ")));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_daemon_listening_everywhere_is_asked_on_loopback() {
        let any: SocketAddr = "0.0.0.0:8080".parse().unwrap();
        assert_eq!(reachable(any), "127.0.0.1:8080".parse().unwrap());
        let any6: SocketAddr = "[::]:8080".parse().unwrap();
        assert_eq!(reachable(any6), "[::1]:8080".parse().unwrap());
        let one: SocketAddr = "192.0.2.7:80".parse().unwrap();
        assert_eq!(reachable(one), one);
    }

    #[test]
    fn an_applied_answer_lists_what_changed() {
        let body = serde_json::json!({
            "revision": 4, "hash": "ab",
            "changes": {"start": [], "stop": [], "restart": ["flows"], "keep": ["sink/a"]},
        });
        assert_eq!(
            applied(&body),
            "applied: revision 4 (sha256 ab)\nrestart: flows\n"
        );
    }
}
