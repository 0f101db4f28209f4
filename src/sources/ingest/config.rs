//! `ingest:`: raw, validated without I/O.

use serde::Deserialize;

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

/// True for names that are safe in a URL path and a flow reference.
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

impl IngestConfig {
    /// Validates `ingest:`.
    pub fn validate(raw: Option<&RawIngest>, path: &str, p: &mut Problems) -> Self {
        let mut sources: Vec<IngestSourceConfig> = Vec::new();
        let raw_sources = raw.and_then(|r| r.sources.as_deref()).unwrap_or_default();
        for (i, s) in raw_sources.iter().enumerate() {
            let at = format!("{path}.sources[{i}]");
            let name = match s.name.as_deref() {
                None => {
                    p.push(format!("{at}.name"), "is required");
                    continue;
                }
                Some(n) if !valid_name(n) => {
                    p.push(
                        format!("{at}.name"),
                        format!("{n:?} must be 1 to 64 letters, digits, '-' or '_'"),
                    );
                    continue;
                }
                Some(n) => n.to_string(),
            };
            if sources.iter().any(|o| o.name == name) {
                p.push(format!("{at}.name"), format!("{name:?} is used twice"));
            }
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
