//! Release artifacts and versions: what over-the-air updates rely on.
//!
//! # What is signed
//!
//! A release is a binary and its **manifest**, one line of JSON that says which build this is
//! and where and until when it may be installed ([`manifest`]):
//!
//! ```text
//! {"version":"0.2.0","target":"aarch64-unknown-linux-gnu","sha256":"<64 hex>","not_after":"2025-10-01T00:00:00Z"}
//! ```
//!
//! Beside it, `<manifest>.sig` holds the ed25519 signature over the manifest's exact bytes, as
//! one line of hex. The binary itself is not signed: the manifest's `sha256` binds it. A
//! signature over the file alone would only say "we built this", so whoever controls the
//! artifact server could install any older signed build (with the holes fixed since) or
//! another board's build. The manifest says "this build, for this target, until then", and
//! the box refuses a version not newer than the running one (unless the operator asks for a
//! downgrade), a target that is not its board's, and an expired manifest.
//!
//! - `opex-connector keygen DIR` makes `release.key` (PKCS#8, hex, mode 0600) and
//!   `release.pub` (32 bytes, hex); `sign-manifest` writes a manifest and its signature
//!   (release tooling); `verify-manifest` checks one on the box with the *running* binary,
//!   which is trusted, unlike the new one; `check-status` is the health check of an update
//!   ([`status`]).
//! - Versions are compared by semantic-versioning precedence ([`version`]).
//! - The install layout of `scripts/ota-update.sh` is `<root>/releases/<version>-<sha8>/opex-connector`
//!   with `<root>/current` and `<root>/previous` symlinks to release folders, so the running
//!   binary finds the previous version from its own path.

pub mod manifest;
pub mod status;
pub mod version;

pub use manifest::{
    sign_manifest, signature_path, verify_manifest, Expect, Manifest, Refusal, MAX_MANIFEST_BYTES,
};
pub use status::{check_status, check_status_of, MAX_STATUS_BYTES};
pub use version::Version;

use std::fmt;
use std::io::Read;
use std::path::{Path, PathBuf};

use ring::signature::{Ed25519KeyPair, KeyPair, UnparsedPublicKey, ED25519};
use sha2::{Digest, Sha256};

/// Why a release was refused, a key could not be used, or an update is not healthy.
#[derive(Debug)]
pub enum ReleaseError {
    /// A file could not be read or written.
    Io(PathBuf, std::io::Error),
    /// A key, signature or manifest file does not hold what it should.
    Format(PathBuf, &'static str),
    /// The signature does not match the manifest and the key.
    BadSignature,
    /// The key could not be generated or parsed.
    Key,
    /// The manifest's fields are malformed or not in canonical form: every problem.
    Manifest(Vec<String>),
    /// Not a semantic version (`MAJOR.MINOR.PATCH[-PRE][+BUILD]`).
    Version(String),
    /// A well-formed, correctly signed manifest that must not be installed here: every reason.
    Refused(Vec<Refusal>),
    /// The status document does not show the expected version as healthy: every reason.
    Unhealthy(Vec<String>),
}

impl fmt::Display for ReleaseError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Io(p, e) => write!(f, "{}: {e}", p.display()),
            Self::Format(p, what) => write!(f, "{}: expected {what}", p.display()),
            Self::BadSignature => write!(f, "signature does not match the manifest and key"),
            Self::Key => write!(f, "unusable key"),
            Self::Manifest(problems) => write!(f, "malformed manifest: {}", problems.join("; ")),
            Self::Version(v) => write!(
                f,
                "{v:?} is not a semantic version (MAJOR.MINOR.PATCH[-PRE][+BUILD])"
            ),
            Self::Refused(reasons) => {
                let reasons: Vec<String> = reasons.iter().map(Refusal::to_string).collect();
                write!(f, "{}", reasons.join("; "))
            }
            Self::Unhealthy(reasons) => write!(f, "{}", reasons.join("; ")),
        }
    }
}

impl std::error::Error for ReleaseError {}

/// Reads a whole file of at most `limit` bytes.
fn read_bounded(path: &Path, limit: u64, what: &'static str) -> Result<Vec<u8>, ReleaseError> {
    let file = std::fs::File::open(path).map_err(|e| ReleaseError::Io(path.into(), e))?;
    let mut data = Vec::new();
    file.take(limit + 1)
        .read_to_end(&mut data)
        .map_err(|e| ReleaseError::Io(path.into(), e))?;
    if data.len() as u64 > limit {
        return Err(ReleaseError::Format(path.into(), what));
    }
    Ok(data)
}

/// Reads a file holding one line of hex, `len` bytes once decoded (any length when 0).
fn read_hex(path: &Path, len: usize, what: &'static str) -> Result<Vec<u8>, ReleaseError> {
    // A PKCS#8 ed25519 key is 83 bytes: 1 KiB of text is plenty for every file read here.
    let text = String::from_utf8(read_bounded(path, 1024, what)?)
        .map_err(|_| ReleaseError::Format(path.into(), what))?;
    let bytes = from_hex(text.trim()).ok_or(ReleaseError::Format(path.into(), what))?;
    if len != 0 && bytes.len() != len {
        return Err(ReleaseError::Format(path.into(), what));
    }
    Ok(bytes)
}

fn from_hex(s: &str) -> Option<Vec<u8>> {
    if s.len() % 2 != 0 {
        return None;
    }
    s.as_bytes()
        .chunks_exact(2)
        .map(|p| {
            let hi = (p[0] as char).to_digit(16)?;
            let lo = (p[1] as char).to_digit(16)?;
            Some((hi * 16 + lo) as u8)
        })
        .collect()
}

/// Lower-case hex.
pub fn to_hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// SHA-256 of a file, in hex, read in 64 KiB pieces (a binary is never held in memory whole).
pub fn sha256_file(path: &Path) -> Result<String, ReleaseError> {
    let mut file = std::fs::File::open(path).map_err(|e| ReleaseError::Io(path.into(), e))?;
    let mut hasher = Sha256::new();
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        let n = file
            .read(&mut buf)
            .map_err(|e| ReleaseError::Io(path.into(), e))?;
        if n == 0 {
            break;
        }
        hasher.update(&buf[..n]);
    }
    Ok(to_hex(&hasher.finalize()))
}

/// Signs `data` with the PKCS#8 key in the file `key` (hex); returns the signature in hex.
fn sign(data: &[u8], key: &Path) -> Result<String, ReleaseError> {
    Ok(to_hex(key_pair(key)?.sign(data).as_ref()))
}

/// The key pair in the file `key` (PKCS#8, hex), as `keygen` writes it.
pub fn key_pair(key: &Path) -> Result<Ed25519KeyPair, ReleaseError> {
    let pkcs8 = read_hex(key, 0, "hex of a PKCS#8 ed25519 key")?;
    Ed25519KeyPair::from_pkcs8(&pkcs8).map_err(|_| ReleaseError::Key)
}

/// The public key in the file `path` (hex, 32 bytes), as `keygen` writes it.
pub fn public_key(path: &Path) -> Result<Vec<u8>, ReleaseError> {
    read_hex(path, 32, "32 bytes of hex (an ed25519 public key)")
}

/// Checks the signature in the file `sig` (hex, 64 bytes) over `data` against the public key
/// in the file `pubkey` (hex, 32 bytes).
fn verify(data: &[u8], sig: &Path, pubkey: &Path) -> Result<(), ReleaseError> {
    let sig = read_hex(sig, 64, "64 bytes of hex (an ed25519 signature)")?;
    let key = public_key(pubkey)?;
    UnparsedPublicKey::new(&ED25519, &key)
        .verify(data, &sig)
        .map_err(|_| ReleaseError::BadSignature)
}

/// Writes a new key pair: `<dir>/release.key` (PKCS#8, hex, mode 0600) and
/// `<dir>/release.pub` (hex).
pub fn keygen(dir: &Path) -> Result<(), ReleaseError> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let rng = ring::rand::SystemRandom::new();
    let pkcs8 = Ed25519KeyPair::generate_pkcs8(&rng).map_err(|_| ReleaseError::Key)?;
    let pair = Ed25519KeyPair::from_pkcs8(pkcs8.as_ref()).map_err(|_| ReleaseError::Key)?;
    let key_path = dir.join("release.key");
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&key_path)
        .map_err(|e| ReleaseError::Io(key_path.clone(), e))?;
    writeln!(f, "{}", to_hex(pkcs8.as_ref())).map_err(|e| ReleaseError::Io(key_path, e))?;
    let pub_path = dir.join("release.pub");
    std::fs::write(
        &pub_path,
        format!("{}\n", to_hex(pair.public_key().as_ref())),
    )
    .map_err(|e| ReleaseError::Io(pub_path, e))
}

/// The version the OTA layout kept as `previous`, when this binary runs from
/// `<root>/releases/<version>/opex-connector`.
pub fn previous_version() -> Option<String> {
    let exe = std::env::current_exe().ok()?.canonicalize().ok()?;
    let releases = exe.parent()?.parent()?;
    if releases.file_name()? != "releases" {
        return None;
    }
    let previous = std::fs::read_link(releases.parent()?.join("previous")).ok()?;
    Some(previous.file_name()?.to_string_lossy().into_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn signed_bytes_verify_and_any_change_or_a_malformed_signature_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        keygen(d).unwrap();
        let sig = d.join("data.sig");
        std::fs::write(&sig, sign(b"some bytes", &d.join("release.key")).unwrap()).unwrap();
        verify(b"some bytes", &sig, &d.join("release.pub")).unwrap();
        assert!(matches!(
            verify(b"some bytez", &sig, &d.join("release.pub")),
            Err(ReleaseError::BadSignature)
        ));
        std::fs::write(&sig, "zz").unwrap();
        assert!(matches!(
            verify(b"some bytes", &sig, &d.join("release.pub")),
            Err(ReleaseError::Format(..))
        ));
    }

    #[test]
    fn the_streamed_sha256_is_the_sha256_of_the_whole_file() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("f");
        let data: Vec<u8> = (0..200_000u32).map(|i| (i % 251) as u8).collect();
        std::fs::write(&file, &data).unwrap();
        assert_eq!(sha256_file(&file).unwrap(), to_hex(&Sha256::digest(&data)));
    }
}
