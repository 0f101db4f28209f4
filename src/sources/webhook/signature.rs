//! `X-Opex-Signature: t=<unix secs>,v1=<hex HMAC-SHA256 of the signed string>`.
//!
//! The signed string is `<t>.<raw body>`, or `<t>.<key>.<raw body>` when the request carries
//! an `X-Opex-Key` header: the key becomes the record's key and is spliced into topic and
//! subject templates, so it is covered by the signature like the body (a key changed after
//! signing is a mismatch). A request without the header is signed as before.
//!
//! The MAC is compared in constant time (`Mac::verify_slice`). The timestamp must be within the
//! tolerance of now, either side, so a captured request cannot be replayed later; within the
//! window, [`super::replay`] knows a request seen before: it is never stored twice. Several
//! `v1=` entries are allowed (a sender rotating its secret signs with both), so the header does
//! not identify a request: [`verify`] returns the MAC the connector computed, and that is what
//! the replay window keeps. Reordering the entries or adding any number of others yields the
//! same MAC, hence the same request.

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

/// The MAC of a request, computed by the connector: `v1` of `<t>.<body>`, or of
/// `<t>.<key>.<body>` when the request has an `X-Opex-Key` header. `None` only for a secret
/// HMAC cannot take, which does not exist (it takes keys of any length).
fn mac(secret: &[u8], t: i64, key: Option<&str>, body: &[u8]) -> Option<Hmac<Sha256>> {
    let mut mac = Hmac::<Sha256>::new_from_slice(secret).ok()?;
    mac.update(t.to_string().as_bytes());
    mac.update(b".");
    if let Some(key) = key {
        mac.update(key.as_bytes());
        mac.update(b".");
    }
    mac.update(body);
    Some(mac)
}

/// Checks a parsed signature against `key` (the `X-Opex-Key` header, when present), `body` and
/// `secret` at `now` (Unix seconds). On success returns the MAC the connector computed: the
/// identity of the request for the replay window, whatever else the header lists.
pub fn verify(
    sig: &Signature,
    secret: &[u8],
    key: Option<&str>,
    body: &[u8],
    now: i64,
    tolerance_secs: i64,
) -> Result<[u8; 32], SigError> {
    // `abs_diff` cannot overflow: a header may carry any i64, `t=-9223372036854775808`
    // included (a plain `now - t` panicked there in debug builds and wrapped in release).
    if now.abs_diff(sig.t) > tolerance_secs.max(0).unsigned_abs() {
        return Err(SigError::Stale);
    }
    let expected = mac(secret, sig.t, key, body).ok_or(SigError::Mismatch)?;
    // Every candidate is compared (in constant time), so the time taken does not say which.
    let matched = sig
        .v1
        .iter()
        .fold(false, |m, c| expected.clone().verify_slice(c).is_ok() | m);
    if matched {
        Ok(expected.finalize().into_bytes().into())
    } else {
        Err(SigError::Mismatch)
    }
}

/// Signs `body` (and `key`, when the request will carry an `X-Opex-Key` header) at `t`: the
/// header value a sender would send. Used by tests and tools.
pub fn sign(secret: &[u8], t: i64, key: Option<&str>, body: &[u8]) -> String {
    let Some(mac) = mac(secret, t, key, body) else {
        return String::new();
    };
    let hex: String = mac
        .finalize()
        .into_bytes()
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    format!("t={t},v1={hex}")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hex(bytes: &[u8]) -> String {
        bytes.iter().map(|b| format!("{b:02x}")).collect()
    }

    #[test]
    fn a_signature_made_with_the_secret_verifies_and_any_change_does_not() {
        let h = sign(b"whsec", 1000, None, b"{\"a\":1}");
        let s = parse(&h).unwrap();
        assert_eq!(
            verify(&s, b"whsec", None, b"{\"a\":1}", 1000, 300),
            Ok(s.v1[0])
        );
        assert_eq!(
            verify(&s, b"whsec", None, b"{\"a\":2}", 1000, 300),
            Err(SigError::Mismatch)
        );
        assert_eq!(
            verify(&s, b"other", None, b"{\"a\":1}", 1000, 300),
            Err(SigError::Mismatch)
        );
        assert_eq!(
            verify(&s, b"whsec", None, b"{\"a\":1}", 1301, 300),
            Err(SigError::Stale)
        );
        assert_eq!(
            verify(&s, b"whsec", None, b"{\"a\":1}", 699, 300),
            Err(SigError::Stale)
        );
    }

    #[test]
    fn the_signed_string_is_time_and_body_or_time_key_and_body() {
        let keyless = sign(b"Jefe", 1_700_000_000, None, b"{}");
        let mut m = Hmac::<Sha256>::new_from_slice(b"Jefe").unwrap();
        m.update(b"1700000000.{}");
        assert_eq!(
            keyless,
            format!("t=1700000000,v1={}", hex(&m.finalize().into_bytes()))
        );
        let keyed = sign(b"Jefe", 1_700_000_000, Some("order-7"), b"{}");
        let mut m = Hmac::<Sha256>::new_from_slice(b"Jefe").unwrap();
        m.update(b"1700000000.order-7.{}");
        assert_eq!(
            keyed,
            format!("t=1700000000,v1={}", hex(&m.finalize().into_bytes()))
        );
    }

    #[test]
    fn a_key_changed_added_or_removed_after_signing_is_a_mismatch() {
        let body = b"{\"amount\":5}";
        let keyed = parse(&sign(b"whsec", 1000, Some("order-7"), body)).unwrap();
        assert!(verify(&keyed, b"whsec", Some("order-7"), body, 1000, 300).is_ok());
        for key in [Some("order-8"), Some(""), Some("order-7/#"), None] {
            assert_eq!(
                verify(&keyed, b"whsec", key, body, 1000, 300),
                Err(SigError::Mismatch),
                "{key:?}"
            );
        }
        let keyless = parse(&sign(b"whsec", 1000, None, body)).unwrap();
        assert!(verify(&keyless, b"whsec", None, body, 1000, 300).is_ok());
        assert_eq!(
            verify(&keyless, b"whsec", Some("order-7"), body, 1000, 300),
            Err(SigError::Mismatch)
        );
    }

    #[test]
    fn extra_and_reordered_v1_entries_verify_to_the_same_computed_mac() {
        let body = b"{\"order\":1}";
        let good = sign(b"whsec", 1000, None, body);
        let good_v1 = good.split_once(",v1=").unwrap().1;
        let other = "ab".repeat(32);
        let computed = verify(&parse(&good).unwrap(), b"whsec", None, body, 1000, 300).unwrap();
        for header in [
            format!("t=1000,v1={other},v1={good_v1}"),
            format!("v1={good_v1},t=1000,v1={other}"),
            format!("t=1000,v1={good_v1},v1={good_v1},v1={other}"),
            format!("t=1000,v0=x,v1={other},v1={good_v1}"),
        ] {
            let sig = parse(&header).unwrap();
            assert_eq!(
                verify(&sig, b"whsec", None, body, 1000, 300),
                Ok(computed),
                "{header}"
            );
        }
    }

    #[test]
    fn a_signature_timestamp_near_i64_min_no_longer_overflows_the_staleness_check() {
        let body = b"{}";
        for t in [i64::MIN, i64::MIN + 1, i64::MAX, -1] {
            let s = parse(&sign(b"whsec", t, None, body)).unwrap();
            assert_eq!(
                verify(&s, b"whsec", None, body, 1_700_000_000, 300),
                Err(SigError::Stale),
                "t={t}"
            );
            assert!(verify(&s, b"whsec", None, body, t, 300).is_ok(), "t={t}");
        }
        let s = parse(&sign(b"whsec", -1, None, body)).unwrap();
        assert!(verify(&s, b"whsec", None, body, 1_700_000_000, i64::MAX).is_ok());
        assert_eq!(
            verify(&s, b"whsec", None, body, 1_700_000_000, -5),
            Err(SigError::Stale)
        );
    }

    #[test]
    fn hmac_sha256_matches_rfc_4231_case_2() {
        let mut mac = Hmac::<Sha256>::new_from_slice(b"Jefe").unwrap();
        mac.update(b"what do ya want for nothing?");
        assert_eq!(
            hex(&mac.finalize().into_bytes()),
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
