//! `storage:`: raw, validated without I/O.

use serde::Deserialize;

use crate::admission::OnFull;
use crate::config::Problems;

/// Default quota of the event history, in MiB.
pub const DEFAULT_QUOTA_MB: u64 = 256;
/// Default retention of the event history, in days.
pub const DEFAULT_RETENTION_DAYS: u64 = 30;
/// Longest retention accepted, in days (ten years).
const MAX_RETENTION_DAYS: u64 = 3650;
/// Largest quota on 32-bit boards, whose address space the push queue shares.
const MAX_QUOTA_MB_32BIT: u64 = 256;
const DAY_MS: u64 = 24 * 60 * 60 * 1000;

/// `storage:`
#[derive(Debug, Default, Deserialize)]
pub struct RawStorage {
    /// The event history's quota in MiB of logical bytes (8 + 8 + source + record + 64 bytes
    /// per row), in `events.db` under the data dir. Default 256.
    pub max_quota_mb: Option<u64>,
    /// Days a record is kept; older ones are deleted by an hourly sweep (counted in
    /// `storage.expired_total`). Default 30.
    pub retention_days: Option<u64>,
    /// What happens at the quota: `evict_oldest` (default: the oldest records are deleted,
    /// counted in `storage.evicted_total`) or `block` (new records are refused and their sources
    /// told to retry). Changing it takes effect at restart.
    pub on_full: Option<String>,
}

/// The storage sink, validated.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StorageConfig {
    /// Quota in logical bytes.
    pub quota_bytes: u64,
    /// How long records are kept, in milliseconds.
    pub retention_ms: u64,
    /// Policy at the quota.
    pub on_full: OnFull,
}

impl StorageConfig {
    /// Validates `storage:` (absent: the defaults).
    pub fn validate(raw: Option<&RawStorage>, path: &str, p: &mut Problems) -> Self {
        let default = RawStorage::default();
        let raw = raw.unwrap_or(&default);
        let quota_mb = raw.max_quota_mb.unwrap_or(DEFAULT_QUOTA_MB);
        if quota_mb == 0 {
            p.push(format!("{path}.max_quota_mb"), "must be > 0");
        } else if quota_mb > 1 << 24 {
            p.push(
                format!("{path}.max_quota_mb"),
                format!("{quota_mb} is over 16 TiB"),
            );
        } else if usize::BITS < 64 && quota_mb > MAX_QUOTA_MB_32BIT {
            p.push(
                format!("{path}.max_quota_mb"),
                format!(
                    "{quota_mb} is over {MAX_QUOTA_MB_32BIT} MiB, the most a 32-bit board can map"
                ),
            );
        }
        let days = raw.retention_days.unwrap_or(DEFAULT_RETENTION_DAYS);
        if !(1..=MAX_RETENTION_DAYS).contains(&days) {
            p.push(
                format!("{path}.retention_days"),
                format!("{days} is outside 1..={MAX_RETENTION_DAYS}"),
            );
        }
        let on_full = match raw.on_full.as_deref() {
            None => OnFull::EvictOldest,
            Some(s) => OnFull::parse(s).unwrap_or_else(|| {
                p.push(
                    format!("{path}.on_full"),
                    format!("expected evict_oldest or block, got {s:?}"),
                );
                OnFull::EvictOldest
            }),
        };
        Self {
            quota_bytes: quota_mb.clamp(1, 1 << 24) << 20,
            retention_ms: days.clamp(1, MAX_RETENTION_DAYS) * DAY_MS,
            on_full,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn messages(p: &Problems) -> Vec<String> {
        p.0.iter().map(|x| x.to_string()).collect()
    }

    #[test]
    fn an_absent_section_gets_the_defaults() {
        let mut p = Problems::default();
        let cfg = StorageConfig::validate(None, "storage", &mut p);
        assert!(p.is_empty());
        assert_eq!(
            cfg,
            StorageConfig {
                quota_bytes: 256 << 20,
                retention_ms: 30 * DAY_MS,
                on_full: OnFull::EvictOldest,
            }
        );
    }

    #[test]
    fn every_bad_value_is_reported_with_its_path() {
        let mut p = Problems::default();
        let raw = RawStorage {
            max_quota_mb: Some(0),
            retention_days: Some(0),
            on_full: Some("drop".into()),
        };
        StorageConfig::validate(Some(&raw), "storage", &mut p);
        assert_eq!(
            messages(&p),
            vec![
                "storage.max_quota_mb: must be > 0",
                "storage.retention_days: 0 is outside 1..=3650",
                r#"storage.on_full: expected evict_oldest or block, got "drop""#,
            ]
        );
    }

    #[test]
    fn block_and_custom_limits_are_kept() {
        let mut p = Problems::default();
        let raw = RawStorage {
            max_quota_mb: Some(8),
            retention_days: Some(2),
            on_full: Some("block".into()),
        };
        let cfg = StorageConfig::validate(Some(&raw), "storage", &mut p);
        assert!(p.is_empty());
        assert_eq!(cfg.quota_bytes, 8 << 20);
        assert_eq!(cfg.retention_ms, 2 * DAY_MS);
        assert_eq!(cfg.on_full, OnFull::Block);
    }
}
