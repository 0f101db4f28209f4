//! `X-Opex-Signature: t=<unix secs>,v1=<hex HMAC-SHA256 of "<t>.<raw body>">`.
//!
//! The MAC is compared in constant time (`Mac::verify_slice`). The timestamp must be within the
//! tolerance of now, either side, so a captured request cannot be replayed later; within the
//! window, [`super::replay`] refuses a signature seen before. Several `v1=` entries are allowed
//! (a sender rotating its secret signs with both).

use std::fmt;

use hmac::{Hmac, Mac};
use sha2::Sha256;

/// Why a signature was refused. Every variant is answered 401.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SigError {
    /// No signature header.
    Missing,
    /// The header is not `t=...,v1=...`.
    Malformed,
    /// The timestamp is too far from now.
    Stale,
    /// No `v1` matches the body and the secret.
    Mismatch,
    /// This exact signature was accepted before, within the tolerance.
    Replayed,
}

impl fmt::Display for SigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Missing => "missing X-Opex-Signature header",
            Self::Malformed => {
                "malformed X-Opex-Signature header (expected t=<unix secs>,v1=<hex>)"
            }
            Self::Stale => "signature timestamp outside the tolerance",
            Self::Mismatch => "signature does not match",
            Self::Replayed => "request already received (replay)",
        })
    }
}

/// A parsed header.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Signature {
    /// The signed timestamp, Unix seconds.
    pub t: i64,
    /// The candidate MACs.
    pub v1: Vec<[u8; 32]>,
}

/// Most `v1` entries read from one header.
const MAX_V1: usize = 4;

/// Parses the header value.
pub fn parse(header: &str) -> Result<Signature, SigError> {
    let mut t = None;
    let mut v1 = Vec::new();
    for part in header.split(',') {
        let Some((k, v)) = part.trim().split_once('=') else {
            return Err(SigError::Malformed);
        };
        match k {
            "t" => t = Some(v.parse::<i64>().map_err(|_| SigError::Malformed)?),
            "v1" if v1.len() < MAX_V1 => v1.push(hex32(v).ok_or(SigError::Malformed)?),
            // Unknown schemes (future versions) and surplus entries are ignored.
            _ => {}
        }
    }
    match (t, v1.is_empty()) {
        (Some(t), false) => Ok(Signature { t, v1 }),
        _ => Err(SigError::Malformed),
    }
}

fn hex32(s: &str) -> Option<[u8; 32]> {
    let b = s.as_bytes();
    if b.len() != 64 {
        return None;
    }
    let mut out = [0u8; 32];
    for (i, pair) in b.chunks_exact(2).enumerate() {
        let hi = (pair[0] as char).to_digit(16)?;
        let lo = (pair[1] as char).to_digit(16)?;
        out[i] = (hi * 16 + lo) as u8;
    }
    Some(out)
}

/// Checks a parsed signature against `body` and `secret` at `now` (Unix seconds).
pub fn verify(
    sig: &Signature,
    secret: &[u8],
    body: &[u8],
    now: i64,
    tolerance_secs: i64,
) -> Result<(), SigError> {
    // `abs_diff` cannot overflow: a header may carry any i64, `t=-9223372036854775808`
    // included (a plain `now - t` panicked there in debug builds and wrapped in release).
    if now.abs_diff(sig.t) > tolerance_secs.max(0).unsigned_abs() {
        return Err(SigError::Stale);
    }
    let matched = sig.v1.iter().any(|candidate| {
        // HMAC takes keys of any length.
        let Ok(mut mac) = Hmac::<Sha256>::new_from_slice(secret) else {
            return false;
        };
        mac.update(sig.t.to_string().as_bytes());
        mac.update(b".");
        mac.update(body);
        mac.verify_slice(candidate).is_ok()
    });
    if matched {
        Ok(())
    } else {
        Err(SigError::Mismatch)
    }
}

/// Signs `body` at `t`: the header value a sender would send. Used by tests and tools.
pub fn sign(secret: &[u8], t: i64, body: &[u8]) -> String {
    let mut mac = match Hmac::<Sha256>::new_from_slice(secret) {
        Ok(m) => m,
        Err(_) => return String::new(),
    };
    mac.update(t.to_string().as_bytes());
    mac.update(b".");
    mac.update(body);
    let bytes = mac.finalize().into_bytes();
    let hex: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
    format!("t={t},v1={hex}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_signature_made_with_the_secret_verifies_and_any_change_does_not() {
        let h = sign(b"whsec", 1000, b"{\"a\":1}");
        let s = parse(&h).unwrap();
        assert_eq!(verify(&s, b"whsec", b"{\"a\":1}", 1000, 300), Ok(()));
        assert_eq!(
            verify(&s, b"whsec", b"{\"a\":2}", 1000, 300),
            Err(SigError::Mismatch)
        );
        assert_eq!(
            verify(&s, b"other", b"{\"a\":1}", 1000, 300),
            Err(SigError::Mismatch)
        );
        assert_eq!(
            verify(&s, b"whsec", b"{\"a\":1}", 1301, 300),
            Err(SigError::Stale)
        );
        assert_eq!(
            verify(&s, b"whsec", b"{\"a\":1}", 699, 300),
            Err(SigError::Stale)
        );
    }

    #[test]
    fn a_signature_timestamp_near_i64_min_no_longer_overflows_the_staleness_check() {
        let body = b"{}";
        for t in [i64::MIN, i64::MIN + 1, i64::MAX, -1] {
            let s = parse(&sign(b"whsec", t, body)).unwrap();
            assert_eq!(
                verify(&s, b"whsec", body, 1_700_000_000, 300),
                Err(SigError::Stale),
                "t={t}"
            );
            assert_eq!(verify(&s, b"whsec", body, t, 300), Ok(()), "t={t}");
        }
        let s = parse(&sign(b"whsec", -1, body)).unwrap();
        assert_eq!(verify(&s, b"whsec", body, 1_700_000_000, i64::MAX), Ok(()));
        assert_eq!(
            verify(&s, b"whsec", body, 1_700_000_000, -5),
            Err(SigError::Stale)
        );
    }

    #[test]
    fn hmac_sha256_matches_rfc_4231_case_2() {
        let mut mac = Hmac::<Sha256>::new_from_slice(b"Jefe").unwrap();
        mac.update(b"what do ya want for nothing?");
        let hex: String = mac
            .finalize()
            .into_bytes()
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect();
        assert_eq!(
            hex,
            "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843"
        );
    }

    #[test]
    fn malformed_headers_are_refused_without_panicking() {
        for h in [
            "",
            "t=",
            "t=1",
            "v1=00",
            "t=x,v1=00",
            "t=1,v1=zz",
            "t=1,v1=é",
            "t=1,v1=0000000000000000000000000000000000000000000000000000000000000000é",
            ",,,",
            "t=1;v1=ab",
        ] {
            assert!(parse(h).is_err(), "{h:?}");
        }
        let many = format!("t=1{}", ",v1=".to_string() + &"0".repeat(64)).repeat(1);
        assert!(parse(&many).is_ok());
    }
}
