//! Dead letters as stored: the JSON of an entry, reading it back into its row, and what a
//! replay answers (see [Dead letters](super#dead-letters)).

use super::row::Tag;
use super::StoreError;

/// An entry of the push dead-letter table.
#[derive(Debug, Clone)]
pub struct DeadLetter {
    /// Key in the dead-letter table.
    pub id: u64,
    /// The JSON object stored.
    pub json: Vec<u8>,
}

/// Most dead letters one replay command puts back (one writer command, one transaction).
pub(super) const REPLAY_CHUNK: usize = 256;

/// The JSON of a dead letter: the row's seq, why it was refused, when (Unix ms), its source
/// and whether the ledger tracks it (`tag`, `None` for a row without a header), and the row's
/// uplink line as it was (`line` is a JSON object, written unchanged).
pub fn dead_letter_json(
    seq: u64,
    reason: &str,
    at_ms: u64,
    tag: Option<(&str, bool)>,
    line: &[u8],
) -> String {
    let reason = serde_json::Value::from(reason);
    let tag = match tag {
        Some((source, tracked)) => {
            format!(
                r#""source":{},"tracked":{tracked},"#,
                serde_json::Value::from(source)
            )
        }
        None => r#""tracked":false,"#.to_string(),
    };
    let record = String::from_utf8_lossy(line);
    format!(r#"{{"seq":{seq},"reason":{reason},"at":{at_ms},{tag}"record":{record}}}"#)
}

/// What a replay needs of a dead letter: its original seq, the row to put back, and the
/// logical bytes it takes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Revived {
    /// The seq it had in the queue.
    pub seq: u64,
    /// Its tag: the source it had and whether it was tracked (false for old entries).
    pub tag: Tag,
    /// The uplink line.
    pub line: Vec<u8>,
}

/// Reads a dead letter's JSON back into the row it was; the reason when it cannot be.
pub fn revive(json: &[u8]) -> Result<Revived, String> {
    #[derive(serde::Deserialize)]
    struct Stored<'a> {
        seq: u64,
        #[serde(default)]
        source: Option<String>,
        #[serde(default)]
        tracked: Option<bool>,
        #[serde(borrow)]
        record: &'a serde_json::value::RawValue,
    }
    let stored: Stored<'_> = serde_json::from_slice(json)
        .map_err(|e| format!("the dead letter cannot be read back: {e}"))?;
    let tracked = stored.source.is_some() && stored.tracked == Some(true);
    Ok(Revived {
        seq: stored.seq,
        tag: Tag {
            source: stored.source.unwrap_or_default(),
            tracked,
        },
        line: stored.record.get().as_bytes().to_vec(),
    })
}

/// Why a dead letter was not put back into its queue. In every case nothing changed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ReplayError {
    /// No dead letter has this id (never had, or it was replayed, deleted or trimmed).
    NotFound,
    /// The queue has no room for it now: `bytes` more would not fit `used` of `quota`.
    /// Retriable, once the queue drained.
    Full {
        /// Logical bytes of the row.
        bytes: u64,
        /// Logical bytes in the queue (committed and reserved).
        used: u64,
        /// The quota.
        quota: u64,
    },
    /// Its original seq is taken by a queued row, or is not below the queue's next seq (a
    /// later append would collide with it): refused rather than overwritten.
    SeqTaken(u64),
    /// The stored entry cannot be read back as a row.
    Damaged(String),
    /// The store failed; nothing of the transaction is stored.
    Store(StoreError),
}

impl ReplayError {
    /// True when the same call may succeed later (a full queue, a store error).
    pub fn is_retriable(&self) -> bool {
        match self {
            Self::Full { .. } | Self::Store(_) => true,
            Self::NotFound | Self::SeqTaken(_) | Self::Damaged(_) => false,
        }
    }
}

impl std::fmt::Display for ReplayError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::NotFound => write!(f, "no such dead letter"),
            Self::Full { bytes, used, quota } => write!(
                f,
                "the queue is full: the record takes {bytes} bytes, {used} of {quota} are in use; nothing changed, try again once the queue drained"
            ),
            Self::SeqTaken(seq) => write!(
                f,
                "seq {seq} is taken in the queue (or not below its next seq): the dead letter was left as it is rather than overwrite a row"
            ),
            Self::Damaged(e) => write!(f, "{e}"),
            Self::Store(e) => write!(f, "{e}"),
        }
    }
}

impl std::error::Error for ReplayError {}

impl From<StoreError> for ReplayError {
    fn from(e: StoreError) -> Self {
        Self::Store(e)
    }
}

/// What a bounded replay of many dead letters did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ReplaySummary {
    /// Ids put back, with their seqs, in seq order.
    pub replayed: Vec<(u64, u64)>,
    /// Ids left as they were, and why (taken seq, damaged entry).
    pub failed: Vec<(u64, ReplayError)>,
    /// Why it stopped before the end (a full queue), when it did; the rest were left as
    /// they were.
    pub stopped: Option<ReplayError>,
    /// Dead letters left in the table afterwards.
    pub left: u64,
}

/// A dead letter chosen for a replay.
#[derive(Debug, Clone, Copy)]
pub(super) struct Planned {
    pub(super) id: u64,
    /// Its original seq (`u64::MAX` when the entry cannot be read back).
    pub(super) seq: u64,
    /// The logical bytes of its row.
    pub(super) bytes: u64,
}
