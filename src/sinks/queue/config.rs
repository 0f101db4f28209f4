//! `queue`, `max_quota_mb` and `on_full` of a `clickhouse`, `postgres`, `nats` or `mqtt` sink:
//! what waits between the engine and the destination. The keys are the same in every kind's
//! raw struct; this file validates them, without I/O.

use crate::admission::OnFull;
use crate::config::Problems;

/// Default quota of a disk queue in MiB.
pub const DEFAULT_QUOTA_MB: u64 = 1024;
/// Largest quota on 32-bit boards, whose address space limits a memory map to about 1 GiB.
pub const MAX_QUOTA_MB_32BIT: u64 = 400;
/// Largest quota anywhere (16 TiB).
const MAX_QUOTA_MB: u64 = 1 << 24;

/// A disk queue's bound, validated.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DiskQueueConfig {
    /// Quota in logical bytes.
    pub quota_bytes: u64,
    /// Policy at the quota.
    pub on_full: OnFull,
}

/// What waits in front of a destination.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum QueueMode {
    /// The kind's own memory queue (a database's backlog, a broker client's queue): lost if
    /// the process crashes.
    Memory,
    /// A durable LMDB queue under the data dir, acknowledged after its commit.
    Disk(DiskQueueConfig),
}

impl QueueMode {
    /// True for `queue: disk`.
    pub fn is_disk(&self) -> bool {
        matches!(self, Self::Disk(_))
    }
}

/// Checks `max_quota_mb` (MiB of logical bytes) at `path`: above 0, within what the board can
/// map. Returns the quota in bytes.
pub fn validate_quota_mb(quota_mb: u64, path: &str, p: &mut Problems) -> u64 {
    if quota_mb == 0 {
        p.push(path, "must be > 0");
    }
    if usize::BITS < 64 && quota_mb > MAX_QUOTA_MB_32BIT {
        p.push(
            path,
            format!("{quota_mb} is over {MAX_QUOTA_MB_32BIT} MiB, the most a 32-bit board can map"),
        );
    }
    if quota_mb > MAX_QUOTA_MB {
        p.push(path, format!("{quota_mb} is over 16 TiB"));
    }
    quota_mb.min(MAX_QUOTA_MB) << 20
}

/// Parses `on_full` at `path` (absent: `evict_oldest`).
pub fn validate_on_full(on_full: Option<&str>, path: &str, p: &mut Problems) -> OnFull {
    match on_full {
        None => OnFull::EvictOldest,
        Some(s) => OnFull::parse(s).unwrap_or_else(|| {
            p.push(path, format!("expected evict_oldest or block, got {s:?}"));
            OnFull::EvictOldest
        }),
    }
}

/// Validates the queue keys of the sink at `at`. `queue` absent or `memory` keeps the kind's
/// memory queue, and then `max_quota_mb` and `on_full` are errors (a database's memory bound
/// is `sink_batch`).
pub fn validate_queue(
    queue: Option<&str>,
    max_quota_mb: Option<u64>,
    on_full: Option<&str>,
    at: &str,
    p: &mut Problems,
) -> QueueMode {
    match queue {
        None | Some("memory") => {
            for (key, given) in [
                ("max_quota_mb", max_quota_mb.is_some()),
                ("on_full", on_full.is_some()),
            ] {
                if given {
                    p.push(format!("{at}.{key}"), "only with queue: disk");
                }
            }
            QueueMode::Memory
        }
        Some("disk") => QueueMode::Disk(DiskQueueConfig {
            quota_bytes: validate_quota_mb(
                max_quota_mb.unwrap_or(DEFAULT_QUOTA_MB),
                &format!("{at}.max_quota_mb"),
                p,
            ),
            on_full: validate_on_full(on_full, &format!("{at}.on_full"), p),
        }),
        Some(other) => {
            p.push(
                format!("{at}.queue"),
                format!("expected memory or disk, got {other:?}"),
            );
            QueueMode::Memory
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_disk_queue_takes_its_quota_and_policy_and_memory_takes_neither() {
        let mut p = Problems::default();
        assert_eq!(
            validate_queue(Some("disk"), Some(2), Some("block"), "sinks[0]", &mut p),
            QueueMode::Disk(DiskQueueConfig {
                quota_bytes: 2 << 20,
                on_full: OnFull::Block
            })
        );
        assert!(p.is_empty());
        assert_eq!(
            validate_queue(None, Some(2), Some("block"), "sinks[1]", &mut p),
            QueueMode::Memory
        );
        assert_eq!(
            validate_queue(Some("flash"), None, None, "sinks[2]", &mut p),
            QueueMode::Memory
        );
        assert_eq!(
            validate_queue(Some("disk"), Some(0), Some("drop"), "sinks[3]", &mut p),
            QueueMode::Disk(DiskQueueConfig {
                quota_bytes: 0,
                on_full: OnFull::EvictOldest
            })
        );
        let got: Vec<String> = p.0.iter().map(|x| x.to_string()).collect();
        assert_eq!(
            got,
            vec![
                "sinks[1].max_quota_mb: only with queue: disk",
                "sinks[1].on_full: only with queue: disk",
                r#"sinks[2].queue: expected memory or disk, got "flash""#,
                "sinks[3].max_quota_mb: must be > 0",
                r#"sinks[3].on_full: expected evict_oldest or block, got "drop""#,
            ]
        );
    }
}
