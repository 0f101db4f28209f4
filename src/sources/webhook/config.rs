//! `webhooks:`: raw, validated without I/O. A `secret_file` is read when the daemon starts.

use std::path::PathBuf;
use std::time::Duration;

use serde::Deserialize;

use crate::config::checks::checked_name;
use crate::config::Problems;

/// `webhooks[]`
#[derive(Debug, Default, Deserialize)]
pub struct RawWebhook {
    /// The `{name}` of `POST /api/hooks/{name}`; records carry `source: webhook/<name>`.
    pub name: Option<String>,
    /// The shared secret the sender signs with. Give this or `secret_file`.
    pub secret: Option<String>,
    /// A file holding the secret (first line); it must not be readable by other users.
    pub secret_file: Option<String>,
    /// `on_done` (default): answer 200 only after the flow finished and every sink accepted, so
    /// the sender sees the real verdict. `on_receipt`: record the request durably, answer 200,
    /// then run the flow; a record that then fails transiently is parked in the dead-letter
    /// queue as "accepted (200) but not handled".
    pub respond: Option<String>,
    /// How far the signature's timestamp may be from now, in seconds. Default 300.
    pub tolerance_secs: Option<u64>,
}

/// When a webhook answers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Respond {
    /// After the flow finished.
    OnDone,
    /// After the request is durably recorded.
    OnReceipt,
}

/// Where the secret comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Secret {
    /// Written in the config.
    Inline(String),
    /// Read from this file at start.
    File(PathBuf),
}

/// One webhook, validated.
#[derive(Debug, Clone)]
pub struct WebhookConfig {
    /// Its name.
    pub name: String,
    /// Its secret.
    pub secret: Secret,
    /// When it answers.
    pub respond: Respond,
    /// Allowed clock difference and replay window.
    pub tolerance: Duration,
}

/// Validates `webhooks:`.
pub fn validate_webhooks(
    raw: Option<&[RawWebhook]>,
    path: &str,
    p: &mut Problems,
) -> Vec<WebhookConfig> {
    let mut out: Vec<WebhookConfig> = Vec::new();
    for (i, w) in raw.unwrap_or_default().iter().enumerate() {
        let at = format!("{path}[{i}]");
        let before = p.0.len();
        let name = checked_name(
            w.name.as_deref(),
            &at,
            |n| out.iter().any(|o| o.name == n),
            p,
        )
        .unwrap_or_default();
        let secret = match (w.secret.as_deref(), w.secret_file.as_deref()) {
            (Some(_), Some(_)) => {
                p.push(
                    format!("{at}.secret"),
                    "give secret or secret_file, not both",
                );
                Secret::Inline(String::new())
            }
            (Some(""), None) => {
                p.push(format!("{at}.secret"), "must not be empty");
                Secret::Inline(String::new())
            }
            (Some(s), None) => Secret::Inline(s.to_string()),
            (None, Some(f)) if !f.is_empty() => Secret::File(PathBuf::from(f)),
            (None, _) => {
                p.push(format!("{at}.secret"), "is required (or secret_file)");
                Secret::Inline(String::new())
            }
        };
        let respond = match w.respond.as_deref() {
            None | Some("on_done") => Respond::OnDone,
            Some("on_receipt") => Respond::OnReceipt,
            Some(other) => {
                p.push(
                    format!("{at}.respond"),
                    format!("expected on_done or on_receipt, got {other:?}"),
                );
                Respond::OnDone
            }
        };
        let tolerance = w.tolerance_secs.unwrap_or(300);
        if !(1..=86_400).contains(&tolerance) {
            p.push(
                format!("{at}.tolerance_secs"),
                format!("{tolerance} is outside 1..=86400"),
            );
        }
        if p.0.len() == before {
            out.push(WebhookConfig {
                name,
                secret,
                respond,
                tolerance: Duration::from_secs(tolerance),
            });
        }
    }
    out
}

/// Reads a secret: inline, or the first line of its file, refusing a file that other users can
/// read (a leaked webhook secret lets anyone inject records).
pub fn load_secret(secret: &Secret) -> Result<Vec<u8>, String> {
    match secret {
        Secret::Inline(s) => Ok(s.as_bytes().to_vec()),
        Secret::File(path) => {
            crate::config::check_private_file(path)?;
            let text =
                std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
            let line = text.lines().next().unwrap_or("").trim();
            if line.is_empty() {
                return Err(format!("{} holds no secret", path.display()));
            }
            Ok(line.as_bytes().to_vec())
        }
    }
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::PermissionsExt;

    use super::*;

    #[test]
    fn a_secret_file_readable_by_every_user_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("secret");
        std::fs::write(&path, "whsec_abc\n").unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
        let err = load_secret(&Secret::File(path.clone())).unwrap_err();
        assert!(err.contains("readable by every user"), "{err}");
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
        assert_eq!(load_secret(&Secret::File(path)).unwrap(), b"whsec_abc");
    }

    #[test]
    fn webhook_problems_are_reported_with_their_paths() {
        let raw = vec![
            RawWebhook {
                name: Some("a b".into()),
                respond: Some("later".into()),
                ..Default::default()
            },
            RawWebhook {
                name: Some("ok".into()),
                secret: Some("s".into()),
                secret_file: Some("/f".into()),
                tolerance_secs: Some(0),
                ..Default::default()
            },
        ];
        let mut p = Problems::default();
        assert!(validate_webhooks(Some(&raw), "webhooks", &mut p).is_empty());
        let paths: Vec<&str> = p.0.iter().map(|x| x.path.as_str()).collect();
        assert_eq!(
            paths,
            [
                "webhooks[0].name",
                "webhooks[0].secret",
                "webhooks[0].respond",
                "webhooks[1].secret",
                "webhooks[1].tolerance_secs"
            ]
        );
    }
}
