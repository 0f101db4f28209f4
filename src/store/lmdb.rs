//! The one place that opens and resizes LMDB environments: both are `unsafe` in heed.
//!
//! Invariants this module relies on, and that the rest of the crate upholds:
//! - each environment file is opened once per process (heed refuses a second open) and by one
//!   process at a time (the daemon holds the data dir; LMDB's lock file guards the rest);
//! - the files live on a local filesystem and are never modified outside LMDB;
//! - no unsafe flags: every commit syncs to disk (no `NO_SYNC`, `NO_META_SYNC`, `WRITE_MAP`);
//! - [`resize`] is called only while no transaction of the environment is open in this process,
//!   which callers guarantee by holding the environment's resize lock for writing.
#![allow(unsafe_code)]

use std::path::Path;

use heed::{Env, EnvFlags, EnvOpenOptions, WithoutTls};

/// Opens (creating when missing) the environment stored in the single file `path`
/// (plus its `-lock` file beside it).
pub fn open(path: &Path, map_size: usize, max_dbs: u32) -> heed::Result<Env<WithoutTls>> {
    let mut options = EnvOpenOptions::new().read_txn_without_tls();
    options.map_size(round_to_pages(map_size)).max_dbs(max_dbs);
    // SAFETY: NO_SUB_DIR only changes the file layout (one data file instead of a folder); it
    // relaxes no durability or locking guarantee.
    unsafe {
        options.flags(EnvFlags::NO_SUB_DIR);
    }
    // SAFETY: see the module invariants: one open per file and process, local filesystem, the
    // file is only touched through LMDB.
    unsafe { options.open(path) }
}

/// Grows the memory map of `env` to `new_size` bytes (rounded up to whole pages).
///
/// The caller must hold the environment's resize lock for writing, so that no transaction of
/// this environment is open in the process.
pub fn resize(env: &Env<WithoutTls>, new_size: usize) -> heed::Result<()> {
    // SAFETY: the caller holds the resize lock for writing: no transaction is open (module
    // invariants).
    unsafe { env.resize(round_to_pages(new_size)) }
}

/// Map sizes must be a multiple of the OS page size: 4 KiB on most boards, 16 or 64 KiB on
/// some aarch64 kernels. A multiple of 64 KiB is a multiple of all of them.
pub fn round_to_pages(size: usize) -> usize {
    const ALIGN: usize = 64 * 1024;
    size.div_ceil(ALIGN).saturating_mul(ALIGN)
}
