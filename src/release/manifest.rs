//! The release manifest: which build a file is, for which target, until when.
//!
//! On disk it is one line of JSON in **canonical form**: the four keys in the order
//! `version`, `target`, `sha256`, `not_after`, no spaces, one final newline; `sha256` in
//! lower-case hex; `not_after` in UTC as [`crate::time::rfc3339`] writes it
//! (`2025-10-01T00:00:00Z`). The signature (`<manifest>.sig`) is ed25519 over exactly those
//! bytes. [`verify_manifest`] checks the signature over the bytes as they are *before*
//! reading anything in them, then refuses any other spelling of the same content (unknown or
//! repeated keys, another order, spaces): one manifest has one byte form, so what was signed
//! is exactly what is checked, and no JSON parser's leniency can make two readings of it.

use std::fmt;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::version::Version;
use super::{read_bounded, sha256_file, sign, verify, ReleaseError};
use crate::time::{parse_rfc3339, rfc3339};

/// The largest manifest file read (a canonical one is about 200 bytes).
pub const MAX_MANIFEST_BYTES: u64 = 4096;

/// A release manifest. Fields are in canonical order: do not reorder them.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Manifest {
    /// The version the artifact reports (`opex-connector --version`), a semantic version.
    pub version: String,
    /// The Rust target triple the artifact is built for, as the board profiles name it.
    pub target: String,
    /// SHA-256 of the artifact, lower-case hex.
    pub sha256: String,
    /// The last moment the manifest may be installed, RFC 3339 in UTC.
    pub not_after: String,
}

/// What the box expects of a manifest.
#[derive(Debug, Clone)]
pub struct Expect {
    /// This board's target triple (`target:` of its profile in `boards/`).
    pub target: String,
    /// The version running now; the manifest's must be newer.
    pub running: Version,
    /// Install a version that is not newer (an operator's deliberate downgrade).
    pub allow_downgrade: bool,
    /// Now, in Unix milliseconds.
    pub now_ms: u64,
}

/// Why a correctly signed manifest is not installed here.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refusal {
    /// The artifact is not the file the manifest describes.
    Sha256 {
        /// The manifest's `sha256`.
        manifest: String,
        /// The artifact's.
        artifact: String,
    },
    /// The artifact is built for another target than this board's.
    Target {
        /// The manifest's `target`.
        manifest: String,
        /// This board's.
        board: String,
    },
    /// `not_after` has passed.
    Expired {
        /// The manifest's `not_after`.
        not_after: String,
        /// Now, RFC 3339.
        now: String,
    },
    /// Not newer than the running version, and no downgrade was asked for.
    NotNewer {
        /// The manifest's `version`.
        version: String,
        /// The running one.
        running: String,
    },
}

impl fmt::Display for Refusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Sha256 { manifest, artifact } => write!(
                f,
                "sha256 mismatch: the manifest says {manifest}, the artifact is {artifact}"
            ),
            Self::Target { manifest, board } => write!(
                f,
                "built for {manifest}, but this board is {board}"
            ),
            Self::Expired { not_after, now } => {
                write!(f, "the manifest expired at {not_after} (now {now})")
            }
            Self::NotNewer { version, running } => write!(
                f,
                "version {version} is not newer than the running {running}: a downgrade (--allow-downgrade installs it anyway)"
            ),
        }
    }
}

fn target_ok(t: &str) -> bool {
    !t.is_empty()
        && t.len() <= 100
        && t.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-' || b == b'.')
}

impl Manifest {
    /// A manifest for these values, checked like a received one.
    pub fn new(
        version: &str,
        target: &str,
        sha256: &str,
        not_after_ms: u64,
    ) -> Result<Self, ReleaseError> {
        let m = Manifest {
            version: version.to_string(),
            target: target.to_string(),
            sha256: sha256.to_string(),
            not_after: rfc3339(not_after_ms),
        };
        let problems = m.problems();
        if problems.is_empty() {
            Ok(m)
        } else {
            Err(ReleaseError::Manifest(problems))
        }
    }

    /// Every problem of the fields, each with its key.
    fn problems(&self) -> Vec<String> {
        let mut problems = Vec::new();
        if let Err(e) = self.version.parse::<Version>() {
            problems.push(format!("version: {e}"));
        }
        if !target_ok(&self.target) {
            problems.push(format!(
                "target: {:?} is not a target triple (letters, digits, `_`, `-`, `.`)",
                self.target
            ));
        }
        if self.sha256.len() != 64
            || !self
                .sha256
                .bytes()
                .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
        {
            problems.push(format!(
                "sha256: {:?} is not 64 lower-case hex digits",
                self.sha256
            ));
        }
        match parse_rfc3339(&self.not_after) {
            Some(ms) if rfc3339(ms) == self.not_after => {}
            _ => problems.push(format!(
                "not_after: {:?} is not an RFC 3339 time in UTC like 2025-10-01T00:00:00Z",
                self.not_after
            )),
        }
        problems
    }

    /// The canonical bytes: what is signed and what is written.
    pub fn to_bytes(&self) -> Vec<u8> {
        // Serializing a struct of four strings cannot fail.
        let mut bytes = serde_json::to_vec(self).expect("four strings serialize");
        bytes.push(b'\n');
        bytes
    }

    /// Reads a manifest from its bytes, which must be canonical.
    pub fn from_bytes(bytes: &[u8]) -> Result<Self, ReleaseError> {
        let m: Manifest = serde_json::from_slice(bytes)
            .map_err(|e| ReleaseError::Manifest(vec![format!("not a manifest: {e}")]))?;
        let mut problems = m.problems();
        if problems.is_empty() && m.to_bytes() != bytes {
            problems.push(
                "not in canonical form (one line, keys version, target, sha256, not_after, no spaces)"
                    .into(),
            );
        }
        if problems.is_empty() {
            Ok(m)
        } else {
            Err(ReleaseError::Manifest(problems))
        }
    }

    /// Every reason not to install the artifact with this SHA-256 (hex) here; none when it may be.
    pub fn refusals(&self, artifact_sha256: &str, expect: &Expect) -> Vec<Refusal> {
        let mut refusals = Vec::new();
        if self.sha256 != artifact_sha256 {
            refusals.push(Refusal::Sha256 {
                manifest: self.sha256.clone(),
                artifact: artifact_sha256.to_string(),
            });
        }
        if self.target != expect.target {
            refusals.push(Refusal::Target {
                manifest: self.target.clone(),
                board: expect.target.clone(),
            });
        }
        // `problems` checked it; a manifest that slipped past counts as expired.
        if parse_rfc3339(&self.not_after).is_none_or(|ms| ms < expect.now_ms) {
            refusals.push(Refusal::Expired {
                not_after: self.not_after.clone(),
                now: rfc3339(expect.now_ms - expect.now_ms % 1000),
            });
        }
        let newer = self
            .version
            .parse::<Version>()
            .is_ok_and(|v| v > expect.running);
        if !newer && !expect.allow_downgrade {
            refusals.push(Refusal::NotNewer {
                version: self.version.clone(),
                running: expect.running.to_string(),
            });
        }
        refusals
    }
}

/// Where a manifest's signature is kept: `<manifest>.sig`.
pub fn signature_path(manifest: &Path) -> PathBuf {
    let mut p = manifest.as_os_str().to_owned();
    p.push(".sig");
    PathBuf::from(p)
}

/// Writes the manifest of `artifact` to `out` and its signature, made with `key`, to
/// `<out>.sig`. `not_after_ms` is cut to the second.
pub fn sign_manifest(
    artifact: &Path,
    key: &Path,
    out: &Path,
    version: &str,
    target: &str,
    not_after_ms: u64,
) -> Result<Manifest, ReleaseError> {
    let sha256 = sha256_file(artifact)?;
    let manifest = Manifest::new(version, target, &sha256, not_after_ms - not_after_ms % 1000)?;
    let bytes = manifest.to_bytes();
    let sig = sign(&bytes, key)?;
    std::fs::write(out, &bytes).map_err(|e| ReleaseError::Io(out.into(), e))?;
    let sig_path = signature_path(out);
    std::fs::write(&sig_path, format!("{sig}\n")).map_err(|e| ReleaseError::Io(sig_path, e))?;
    Ok(manifest)
}

/// Checks the manifest in the file `manifest` against its signature `sig` and the public key
/// `pubkey`, then against the `artifact` it names and what this box expects. Returns the
/// manifest when the artifact may be installed.
pub fn verify_manifest(
    manifest: &Path,
    sig: &Path,
    pubkey: &Path,
    artifact: &Path,
    expect: &Expect,
) -> Result<Manifest, ReleaseError> {
    let bytes = read_bounded(
        manifest,
        MAX_MANIFEST_BYTES,
        "a manifest of at most 4096 bytes",
    )?;
    verify(&bytes, sig, pubkey)?;
    let m = Manifest::from_bytes(&bytes)?;
    let refusals = m.refusals(&sha256_file(artifact)?, expect);
    if refusals.is_empty() {
        Ok(m)
    } else {
        Err(ReleaseError::Refused(refusals))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::release::keygen;

    const SHA: &str = "5891b5b522d5df086d0ff0b110fbd9d21bb4fc7163af34d08286a2e846f6be03";
    const DAY: u64 = 86_400_000;
    const NOW: u64 = 1_750_000_000_000;

    fn expect(running: &str) -> Expect {
        Expect {
            target: "aarch64-unknown-linux-gnu".into(),
            running: running.parse().unwrap(),
            allow_downgrade: false,
            now_ms: NOW,
        }
    }

    fn manifest(version: &str) -> Manifest {
        Manifest::new(version, "aarch64-unknown-linux-gnu", SHA, NOW + DAY).unwrap()
    }

    #[test]
    fn the_canonical_bytes_are_one_line_in_field_order_and_read_back() {
        let m = manifest("0.2.0");
        let bytes = m.to_bytes();
        assert_eq!(
            String::from_utf8(bytes.clone()).unwrap(),
            format!("{{\"version\":\"0.2.0\",\"target\":\"aarch64-unknown-linux-gnu\",\"sha256\":\"{SHA}\",\"not_after\":\"2025-06-16T15:06:40Z\"}}\n")
        );
        assert_eq!(Manifest::from_bytes(&bytes).unwrap(), m);
    }

    #[test]
    fn another_spelling_of_the_same_manifest_is_refused() {
        let canonical = String::from_utf8(manifest("0.2.0").to_bytes()).unwrap();
        let spaced = canonical.replace("\",\"", "\", \"");
        let reordered = format!(
            "{{\"target\":\"aarch64-unknown-linux-gnu\",\"version\":\"0.2.0\",\"sha256\":\"{SHA}\",\"not_after\":\"2025-06-16T15:06:40Z\"}}\n"
        );
        let no_newline = canonical.trim_end().to_string();
        let upper = canonical.replace(SHA, &SHA.to_uppercase());
        let offset = canonical.replace("15:06:40Z", "17:06:40+02:00");
        let extra = canonical.replace("{", "{\"url\":\"http://x\",");
        let twice = canonical.replace("{", "{\"version\":\"9.0.0\",");
        for bad in [spaced, reordered, no_newline, upper, offset, extra, twice] {
            assert!(
                matches!(
                    Manifest::from_bytes(bad.as_bytes()),
                    Err(ReleaseError::Manifest(_))
                ),
                "accepted {bad}"
            );
        }
    }

    #[test]
    fn every_malformed_field_is_reported_with_its_key() {
        let Err(ReleaseError::Manifest(problems)) =
            Manifest::new("v2", "aarch64 linux", "abc", NOW)
        else {
            panic!("accepted");
        };
        assert_eq!(problems.len(), 3, "{problems:?}");
        for key in ["version:", "target:", "sha256:"] {
            assert!(problems.iter().any(|p| p.starts_with(key)), "{problems:?}");
        }
    }

    #[test]
    fn a_newer_version_for_this_target_before_its_expiry_may_be_installed() {
        assert_eq!(manifest("0.2.0").refusals(SHA, &expect("0.1.0")), vec![]);
        assert_eq!(manifest("0.10.0").refusals(SHA, &expect("0.9.3")), vec![]);
    }

    #[test]
    fn regression_an_older_or_equal_version_is_refused_unless_a_downgrade_is_asked_for() {
        for running in ["0.2.0", "0.3.0", "0.2.0+other-build"] {
            let r = manifest("0.2.0").refusals(SHA, &expect(running));
            assert!(matches!(r.as_slice(), [Refusal::NotNewer { .. }]), "{r:?}");
        }
        let downgrade = Expect {
            allow_downgrade: true,
            ..expect("0.3.0")
        };
        assert_eq!(manifest("0.2.0").refusals(SHA, &downgrade), vec![]);
    }

    #[test]
    fn every_reason_to_refuse_is_reported_at_once() {
        let m = Manifest::new("0.1.0", "armv7-unknown-linux-gnueabihf", SHA, NOW - 1000).unwrap();
        let other_sha = "0".repeat(64);
        let r = m.refusals(&other_sha, &expect("0.2.0"));
        assert_eq!(r.len(), 4, "{r:?}");
        let text: Vec<String> = r.iter().map(Refusal::to_string).collect();
        assert!(text[0].contains("sha256 mismatch"), "{text:?}");
        assert!(
            text[1].contains("this board is aarch64-unknown-linux-gnu"),
            "{text:?}"
        );
        assert!(
            text[2].contains("expired at 2025-06-15T15:06:39Z"),
            "{text:?}"
        );
        assert!(
            text[3].contains("not newer than the running 0.2.0"),
            "{text:?}"
        );
    }

    #[test]
    fn a_signed_manifest_verifies_and_a_changed_byte_breaks_the_signature() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        keygen(d).unwrap();
        let art = d.join("artifact");
        std::fs::write(&art, b"binary bytes").unwrap();
        let out = d.join("artifact.manifest.json");
        let target = "aarch64-unknown-linux-gnu";
        let signed = sign_manifest(
            &art,
            &d.join("release.key"),
            &out,
            "0.2.0",
            target,
            NOW + 1500,
        )
        .unwrap();
        assert_eq!(signed.not_after, rfc3339(NOW + 1000), "cut to the second");
        let sig = signature_path(&out);
        let pubkey = d.join("release.pub");
        let m = verify_manifest(&out, &sig, &pubkey, &art, &expect("0.1.0")).unwrap();
        assert_eq!(m, signed);
        let text = std::fs::read_to_string(&out).unwrap();
        std::fs::write(&out, text.replace("0.2.0", "0.3.0")).unwrap();
        assert!(matches!(
            verify_manifest(&out, &sig, &pubkey, &art, &expect("0.1.0")),
            Err(ReleaseError::BadSignature)
        ));
        std::fs::write(&out, vec![b' '; 5000]).unwrap();
        assert!(matches!(
            verify_manifest(&out, &sig, &pubkey, &art, &expect("0.1.0")),
            Err(ReleaseError::Format(..))
        ));
    }
}
