//! `ingest:`: raw, validated without I/O.

use serde::Deserialize;

use crate::config::checks::{checked_name, checked_token, in_range, TokenRule};
use crate::config::{Problem, Problems};

/// `ingest:`
#[derive(Debug, Default, Deserialize)]
pub struct RawIngest {
    /// The sources callers may post to, each `POST /api/ingest/{name}/{id}` (one record) and
    /// `POST /api/ingest/{name}` (a batch).
    pub sources: Option<Vec<RawIngestSource>>,
    /// Most records in one batch (`POST /api/ingest/{source}`); more is a `413`. Default
    /// 10 000, at most 100 000.
    pub max_batch_records: Option<u64>,
    /// Most KiB in one batch's body; more is a `413` (each record's payload is held to
    /// `connector.http.max_body_kb`). Default 4096, at most 65 536.
    pub max_batch_kb: Option<u64>,
}

/// `ingest.sources[]`
#[derive(Debug, Default, Deserialize)]
pub struct RawIngestSource {
    /// The `{source}` of the path; letters, digits, `-` and `_`. Records carry
    /// `source: ingest/<name>`.
    pub name: Option<String>,
    /// Bearer token callers must present (`Authorization: Bearer <token>`). Required, at least
    /// 16 characters (e.g. `openssl rand -hex 16`).
    pub token: Option<String>,
}

/// Default of `ingest.max_batch_records`.
pub const DEFAULT_MAX_BATCH_RECORDS: u64 = 10_000;
/// Default of `ingest.max_batch_kb`.
pub const DEFAULT_MAX_BATCH_KB: u64 = 4096;

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
    /// The limits of its batches (`ingest.max_batch_records`, `ingest.max_batch_kb`).
    pub batch: BatchLimits,
}

/// The bounds of one batch request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BatchLimits {
    /// Most records.
    pub max_records: usize,
    /// Most bytes of body.
    pub max_bytes: usize,
}

impl Default for BatchLimits {
    fn default() -> Self {
        Self {
            max_records: DEFAULT_MAX_BATCH_RECORDS as usize,
            max_bytes: DEFAULT_MAX_BATCH_KB as usize * 1024,
        }
    }
}

impl IngestConfig {
    /// Validates `ingest:`; `tokens` says whether a short token is an error or, in the demo,
    /// a warning.
    pub fn validate(
        raw: Option<&RawIngest>,
        path: &str,
        tokens: TokenRule,
        p: &mut Problems,
        warnings: &mut Vec<Problem>,
    ) -> Self {
        let mut sources: Vec<IngestSourceConfig> = Vec::new();
        // Every name given so far, also of entries refused for their token: a second
        // `orders` is reported even when the first one's token was too short.
        let mut names: Vec<String> = Vec::new();
        let batch = BatchLimits {
            max_records: in_range(
                raw.and_then(|r| r.max_batch_records),
                DEFAULT_MAX_BATCH_RECORDS,
                1..=100_000,
                format!("{path}.max_batch_records"),
                p,
            ) as usize,
            max_bytes: in_range(
                raw.and_then(|r| r.max_batch_kb),
                DEFAULT_MAX_BATCH_KB,
                1..=65_536,
                format!("{path}.max_batch_kb"),
                p,
            ) as usize
                * 1024,
        };
        let raw_sources = raw.and_then(|r| r.sources.as_deref()).unwrap_or_default();
        for (i, s) in raw_sources.iter().enumerate() {
            let at = format!("{path}.sources[{i}]");
            let Some(name) =
                checked_name(s.name.as_deref(), &at, |n| names.iter().any(|o| o == n), p)
            else {
                continue;
            };
            names.push(name.clone());
            let Some(token) = s.token.as_deref() else {
                p.push(format!("{at}.token"), "is required");
                continue;
            };
            if !checked_token(token, &format!("{at}.token"), tokens, p, warnings) {
                continue;
            }
            sources.push(IngestSourceConfig {
                name,
                token: token.to_string(),
                batch,
            });
        }
        Self { sources }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn source(name: &str, token: Option<&str>) -> RawIngestSource {
        RawIngestSource {
            name: Some(name.into()),
            token: token.map(str::to_string),
        }
    }

    #[test]
    fn ingest_tokens_are_required_and_at_least_sixteen_characters_with_their_paths() {
        let raw = RawIngest {
            sources: Some(vec![
                source("a", Some("0123456789abcdef")),
                source("b", None),
                source("c", Some("")),
                source("d", Some("s3cret-t0ken")),
                source("d", Some("0123456789abcdef")),
            ]),
            ..RawIngest::default()
        };
        let (mut p, mut w) = (Problems::default(), Vec::new());
        let cfg = IngestConfig::validate(Some(&raw), "ingest", TokenRule::Strict, &mut p, &mut w);
        // Only entries with a good token are kept (the config is refused as a whole anyway).
        assert_eq!(cfg.sources.len(), 2);
        let problems: Vec<String> = p.0.iter().map(ToString::to_string).collect();
        assert_eq!(
            problems,
            [
                "ingest.sources[1].token: is required",
                "ingest.sources[2].token: must not be empty",
                "ingest.sources[3].token: is 12 characters, fewer than 16: use a long random token",
                r#"ingest.sources[4].name: "d" is used twice"#,
            ]
        );
        assert!(w.is_empty());
    }

    #[test]
    fn the_demo_rule_accepts_a_short_ingest_token_with_a_warning() {
        let raw = RawIngest {
            sources: Some(vec![source("demo", Some("demo-token"))]),
            ..RawIngest::default()
        };
        let (mut p, mut w) = (Problems::default(), Vec::new());
        let cfg = IngestConfig::validate(Some(&raw), "ingest", TokenRule::Demo, &mut p, &mut w);
        assert!(p.is_empty(), "{p}");
        assert_eq!(cfg.sources[0].token, "demo-token");
        assert_eq!(w[0].path, "ingest.sources[0].token");
        assert_eq!(cfg.sources[0].batch, BatchLimits::default());
    }

    #[test]
    fn batch_limits_are_checked_with_their_paths_and_given_to_every_source() {
        let raw = RawIngest {
            sources: Some(vec![source("a", Some("0123456789abcdef"))]),
            max_batch_records: Some(500),
            max_batch_kb: Some(64),
        };
        let (mut p, mut w) = (Problems::default(), Vec::new());
        let cfg = IngestConfig::validate(Some(&raw), "ingest", TokenRule::Strict, &mut p, &mut w);
        assert!(p.is_empty(), "{p}");
        let want = BatchLimits {
            max_records: 500,
            max_bytes: 64 * 1024,
        };
        assert_eq!(cfg.sources[0].batch, want);
        let raw = RawIngest {
            max_batch_records: Some(0),
            max_batch_kb: Some(70_000),
            ..RawIngest::default()
        };
        let mut p = Problems::default();
        IngestConfig::validate(Some(&raw), "ingest", TokenRule::Strict, &mut p, &mut w);
        let problems: Vec<String> = p.0.iter().map(ToString::to_string).collect();
        assert_eq!(
            problems,
            [
                "ingest.max_batch_records: 0 is outside 1..=100000",
                "ingest.max_batch_kb: 70000 is outside 1..=65536",
            ]
        );
    }
}
