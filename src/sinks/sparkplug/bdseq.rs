//! The node's `bdSeq`, kept in `sparkplug-<sink>.bdseq` under the data dir.
//!
//! A host ties an NDEATH to the NBIRTH with the same `bdSeq`; the NDEATH of a session that
//! died can reach it after the next session's NBIRTH (the broker notices a dead connection
//! late), so two sessions must never share one. The value of a new session is therefore
//! stored, and synced, **before** its CONNECT carries it in the Will: a kill at any moment
//! leaves the file at the last value a broker may have seen, and the next start takes the
//! one after it. The file is replaced whole (written beside, synced, renamed, the folder
//! synced), so it is the old value or the new one, never a torn one.
//!
//! The value runs 0 to 255 and then wraps to 0, as the specification wants.

use std::fs;
use std::io::ErrorKind;
use std::path::{Path, PathBuf};

/// Why the file could not be read or written.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BdSeqError {
    /// An I/O error, with the file; retried before the next connection attempt.
    Io(String),
}

impl BdSeqError {
    /// Every error is retried: the disk may come back.
    pub fn is_retriable(&self) -> bool {
        true
    }
}

impl std::fmt::Display for BdSeqError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Io(e) => write!(f, "{e}"),
        }
    }
}

/// The file of one sink's `bdSeq`.
#[derive(Debug, Clone)]
pub struct BdSeqFile {
    path: PathBuf,
}

/// The file name of sink `sink`'s `bdSeq`.
pub fn file_name(sink: &str) -> String {
    format!("sparkplug-{sink}.bdseq")
}

impl BdSeqFile {
    /// The file of sink `sink` under `data_dir`.
    pub fn new(data_dir: &Path, sink: &str) -> Self {
        Self {
            path: data_dir.join(file_name(sink)),
        }
    }

    /// The value stored last; `None` before the first session. A file that does not hold a
    /// number (it can only be damaged: it is always replaced whole) reads as none, logged.
    pub fn load(&self) -> Result<Option<u64>, BdSeqError> {
        match fs::read_to_string(&self.path) {
            Ok(text) => match text.trim().parse::<u64>() {
                Ok(v) => Ok(Some(v % 256)),
                Err(_) => {
                    log::error!(
                        "sparkplug bdSeq file unreadable, starting again at 0: file={}",
                        self.path.display()
                    );
                    Ok(None)
                }
            },
            Err(e) if e.kind() == ErrorKind::NotFound => Ok(None),
            Err(e) => Err(self.error("read", &e)),
        }
    }

    /// The `bdSeq` of a new session: one after the stored value (0 first, wrapping after
    /// 255), stored and synced before it is returned.
    pub fn next(&self) -> Result<u64, BdSeqError> {
        let next = match self.load()? {
            None => 0,
            Some(v) => (v + 1) % 256,
        };
        self.store(next)?;
        Ok(next)
    }

    fn store(&self, value: u64) -> Result<(), BdSeqError> {
        crate::store::file::write_whole(&self.path, format!("{value}\n").as_bytes())
            .map_err(|e| self.error("write", &e))
    }

    fn error(&self, what: &str, e: &std::io::Error) -> BdSeqError {
        BdSeqError::Io(format!("cannot {what} {}: {e}", self.path.display()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_new_session_takes_the_next_value_and_255_wraps_to_0() {
        let dir = tempfile::tempdir().unwrap();
        let f = BdSeqFile::new(dir.path(), "uns");
        assert_eq!(f.load().unwrap(), None);
        assert_eq!(f.next().unwrap(), 0);
        assert_eq!(f.next().unwrap(), 1);
        // Another handle on the same file (a restart) goes on from the file.
        assert_eq!(BdSeqFile::new(dir.path(), "uns").next().unwrap(), 2);
        fs::write(dir.path().join(file_name("uns")), "255\n").unwrap();
        assert_eq!(f.next().unwrap(), 0);
        assert!(!dir.path().join("sparkplug-uns.bdseq.tmp").exists());
    }

    #[test]
    fn a_damaged_file_starts_again_at_0_and_a_missing_folder_is_an_error() {
        let dir = tempfile::tempdir().unwrap();
        fs::write(dir.path().join(file_name("uns")), "\u{0}\u{1}").unwrap();
        let f = BdSeqFile::new(dir.path(), "uns");
        assert_eq!(f.next().unwrap(), 0);
        let gone = BdSeqFile::new(&dir.path().join("nope"), "uns");
        assert!(matches!(gone.next(), Err(BdSeqError::Io(_))));
    }
}
