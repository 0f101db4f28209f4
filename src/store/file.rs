//! Small files written whole: a checkpoint, a sequence number, a config revision. The bytes
//! go to `<name>.tmp` beside the file, are synced, renamed over it, and the folder is synced:
//! a crash leaves the old file or the new one, never a part of either.

use std::fs::{self, File};
use std::io::{self, Write};
use std::path::{Path, PathBuf};

/// Writes `bytes` to `path` whole (see the module doc). The error names the step that
/// failed (`create`, `write`, `sync`, `rename`, `sync folder`).
pub fn write_whole(path: &Path, bytes: &[u8]) -> io::Result<()> {
    let step =
        |what: &'static str| move |e: io::Error| io::Error::new(e.kind(), format!("{what}: {e}"));
    let dir = path.parent().unwrap_or(Path::new("."));
    let tmp = tmp_path(path);
    let mut f = File::create(&tmp).map_err(step("create"))?;
    f.write_all(bytes).map_err(step("write"))?;
    f.sync_all().map_err(step("sync"))?;
    drop(f);
    fs::rename(&tmp, path).map_err(step("rename"))?;
    File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(step("sync folder"))
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
    fn the_error_names_the_step() {
        let e = write_whole(Path::new("/nonexistent-folder/x"), b"x").expect_err("no folder");
        assert!(e.to_string().starts_with("create: "), "{e}");
    }
}
