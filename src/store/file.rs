//! Small files written whole: a checkpoint, a sequence number, a config revision. The bytes
//! go to `<name>.tmp` beside the file, are synced, renamed over it, and the folder is synced:
//! a crash leaves the old file or the new one, never a part of either.

use std::fs::{self, File};
use std::io::{self, Write};
use std::path::{Path, PathBuf};

/// Writes `bytes` to `path` whole (see the module doc). The error names the step that
/// failed (`create`, `write`, `sync`, `rename`, `sync folder`).
pub fn write_whole(path: &Path, bytes: &[u8]) -> io::Result<()> {
    stage(path, bytes)?.commit()
}

/// The error of `what`, the step's name before it.
fn step(what: &'static str) -> impl Fn(io::Error) -> io::Error {
    move |e| io::Error::new(e.kind(), format!("{what}: {e}"))
}

/// A file written and synced beside its place, not in it yet: what can fail for lack of
/// room is done. [`Staged::commit`] renames it into place; dropped uncommitted, it is removed.
pub struct Staged {
    tmp: PathBuf,
    path: PathBuf,
    committed: bool,
}

/// Writes `bytes` beside `path` and syncs them (the first half of [`write_whole`]).
pub fn stage(path: &Path, bytes: &[u8]) -> io::Result<Staged> {
    let staged = Staged {
        tmp: tmp_path(path),
        path: path.to_path_buf(),
        committed: false,
    };
    let mut f = File::create(&staged.tmp).map_err(step("create"))?;
    f.write_all(bytes).map_err(step("write"))?;
    f.sync_all().map_err(step("sync"))?;
    Ok(staged)
}

impl Staged {
    /// Puts the file in its place (rename, then a sync of the folder).
    pub fn commit(mut self) -> io::Result<()> {
        self.committed = true;
        fs::rename(&self.tmp, &self.path).map_err(step("rename"))?;
        let dir = self.path.parent().unwrap_or(Path::new("."));
        File::open(dir)
            .and_then(|d| d.sync_all())
            .map_err(step("sync folder"))
    }
}

impl Drop for Staged {
    fn drop(&mut self) {
        if !self.committed {
            let _ = fs::remove_file(&self.tmp);
        }
    }
}

/// `path` with `.tmp` after its whole name.
fn tmp_path(path: &Path) -> PathBuf {
    let mut name = path.file_name().unwrap_or_default().to_os_string();
    name.push(".tmp");
    path.with_file_name(name)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_file_is_replaced_whole_and_no_temporary_file_is_left() {
        let dir = tempfile::tempdir().expect("tmp");
        let path = dir.path().join("state.json");
        write_whole(&path, b"one").expect("write");
        write_whole(&path, b"two").expect("write");
        assert_eq!(fs::read(&path).expect("read"), b"two");
        assert!(!dir.path().join("state.json.tmp").exists());
    }

    #[test]
    fn a_staged_file_is_in_place_once_committed_and_gone_when_dropped() {
        let dir = tempfile::tempdir().expect("tmp");
        let path = dir.path().join("run.yaml");
        write_whole(&path, b"one").expect("write");
        drop(stage(&path, b"two").expect("stage"));
        assert_eq!(fs::read(&path).expect("read"), b"one");
        assert!(!dir.path().join("run.yaml.tmp").exists());
        stage(&path, b"three")
            .expect("stage")
            .commit()
            .expect("commit");
        assert_eq!(fs::read(&path).expect("read"), b"three");
    }

    #[test]
    fn the_error_names_the_step() {
        let e = write_whole(Path::new("/nonexistent-folder/x"), b"x").expect_err("no folder");
        assert!(e.to_string().starts_with("create: "), "{e}");
    }
}
