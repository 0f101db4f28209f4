//! `ingest:`: raw, validated without I/O.

use serde::Deserialize;

use crate::config::checks::checked_name;
use crate::config::Problems;

/// `ingest:`
#[derive(Debug, Default, Deserialize)]
pub struct RawIngest {
    /// The sources callers may post to, each `POST /api/ingest/{name}/{id}`.
    pub sources: Option<Vec<RawIngestSource>>,
}

/// `ingest.sources[]`
#[derive(Debug, Default, Deserialize)]
pub struct RawIngestSource {
    /// The `{source}` of the path; letters, digits, `-` and `_`. Records carry
    /// `source: ingest/<name>`.
    pub name: Option<String>,
    /// Bearer token callers must present (`Authorization: Bearer <token>`). Required.
    pub token: Option<String>,
}

/// `ingest:`, validated.
#[derive(Debug, Clone, Default)]
pub struct IngestConfig {
    /// The sources, in config order.
    pub sources: Vec<IngestSourceConfig>,
}

/// One ingest source, validated.
#[derive(Debug, Clone)]
pub struct IngestSourceConfig {
    /// Its name.
    pub name: String,
    /// Its bearer token.
    pub token: String,
}

impl IngestConfig {
    /// Validates `ingest:`.
    pub fn validate(raw: Option<&RawIngest>, path: &str, p: &mut Problems) -> Self {
        let mut sources: Vec<IngestSourceConfig> = Vec::new();
        let raw_sources = raw.and_then(|r| r.sources.as_deref()).unwrap_or_default();
        for (i, s) in raw_sources.iter().enumerate() {
            let at = format!("{path}.sources[{i}]");
            let Some(name) = checked_name(
                s.name.as_deref(),
                &at,
                |n| sources.iter().any(|o| o.name == n),
                p,
            ) else {
                continue;
            };
            let token = match s.token.as_deref() {
                None => {
                    p.push(format!("{at}.token"), "is required");
                    continue;
                }
                Some("") => {
                    p.push(format!("{at}.token"), "must not be empty");
                    continue;
                }
                Some(t) => t.to_string(),
            };
            sources.push(IngestSourceConfig { name, token });
        }
        Self { sources }
    }
}
