//! Release artifacts and versions: what over-the-air updates rely on.
//!
//! - `opex-connector verify-artifact FILE SIG PUBKEY` checks an ed25519 signature over the
//!   artifact's bytes, so a box needs no extra tool to refuse an unsigned or altered binary.
//!   `SIG` holds the 64-byte signature and `PUBKEY` the 32-byte public key, each as one line
//!   of hex. `sign-artifact` and `keygen` make them (release tooling, tests).
//! - The install layout of `scripts/ota-update.sh` is `<root>/releases/<version>/opex-connector`
//!   with `<root>/current` and `<root>/previous` symlinks to release folders, so the running
//!   binary finds the previous version from its own path.

use std::fmt;
use std::path::{Path, PathBuf};

use ring::signature::{Ed25519KeyPair, KeyPair, UnparsedPublicKey, ED25519};
use sha2::{Digest, Sha256};

/// Why an artifact was refused or a key could not be used.
#[derive(Debug)]
pub enum ReleaseError {
    /// A file could not be read or written.
    Io(PathBuf, std::io::Error),
    /// A key or signature file does not hold the expected hex.
    Format(PathBuf, &'static str),
    /// The signature does not match the artifact and the key.
    BadSignature,
    /// The key could not be generated or parsed.
    Key,
}

impl fmt::Display for ReleaseError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Io(p, e) => write!(f, "{}: {e}", p.display()),
            Self::Format(p, what) => write!(f, "{}: expected {what}", p.display()),
            Self::BadSignature => write!(f, "signature does not match the artifact and key"),
            Self::Key => write!(f, "unusable key"),
        }
    }
}

impl std::error::Error for ReleaseError {}

fn read(path: &Path) -> Result<Vec<u8>, ReleaseError> {
    std::fs::read(path).map_err(|e| ReleaseError::Io(path.to_path_buf(), e))
}

fn read_hex(path: &Path, len: usize, what: &'static str) -> Result<Vec<u8>, ReleaseError> {
    let text =
        String::from_utf8(read(path)?).map_err(|_| ReleaseError::Format(path.into(), what))?;
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

/// SHA-256 of a file, in hex.
pub fn sha256_file(path: &Path) -> Result<String, ReleaseError> {
    Ok(to_hex(&Sha256::digest(read(path)?)))
}

/// Checks `sig` (hex, 64 bytes) over the bytes of `file` against `pubkey` (hex, 32 bytes);
/// returns the artifact's SHA-256 in hex.
pub fn verify_artifact(file: &Path, sig: &Path, pubkey: &Path) -> Result<String, ReleaseError> {
    let data = read(file)?;
    let sig = read_hex(sig, 64, "64 bytes of hex (an ed25519 signature)")?;
    let key = read_hex(pubkey, 32, "32 bytes of hex (an ed25519 public key)")?;
    UnparsedPublicKey::new(&ED25519, &key)
        .verify(&data, &sig)
        .map_err(|_| ReleaseError::BadSignature)?;
    Ok(to_hex(&Sha256::digest(&data)))
}

/// Signs `file` with the PKCS#8 key in `key` (hex); returns the signature in hex.
pub fn sign_artifact(file: &Path, key: &Path) -> Result<String, ReleaseError> {
    let data = read(file)?;
    let pkcs8 = read_hex(key, 0, "hex of a PKCS#8 ed25519 key")?;
    let pair = Ed25519KeyPair::from_pkcs8(&pkcs8).map_err(|_| ReleaseError::Key)?;
    Ok(to_hex(pair.sign(&data).as_ref()))
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
    fn a_signed_artifact_verifies_and_any_change_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        keygen(d).unwrap();
        let art = d.join("artifact");
        std::fs::write(&art, b"binary bytes").unwrap();
        let sig = d.join("artifact.sig");
        std::fs::write(&sig, sign_artifact(&art, &d.join("release.key")).unwrap()).unwrap();
        let sha = verify_artifact(&art, &sig, &d.join("release.pub")).unwrap();
        assert_eq!(sha, sha256_file(&art).unwrap());
        std::fs::write(&art, b"binary bytez").unwrap();
        assert!(matches!(
            verify_artifact(&art, &sig, &d.join("release.pub")),
            Err(ReleaseError::BadSignature)
        ));
        std::fs::write(&sig, "zz").unwrap();
        assert!(matches!(
            verify_artifact(&art, &sig, &d.join("release.pub")),
            Err(ReleaseError::Format(..))
        ));
    }
}
