//! `X-Opex-Signature` parsing and checking never panic, and a header made by `sign` for any
//! body, key, secret and timestamp always verifies (and stops verifying when the body or the
//! key changes). Whatever other `v1` entries a header adds, in whatever order, a verified
//! request yields the same computed MAC: the identity the replay window keeps.
#![no_main]

use libfuzzer_sys::arbitrary::{Arbitrary, Unstructured};
use libfuzzer_sys::fuzz_target;
use opex_connector::sources::webhook::signature::{parse, sign, verify, SigError};

fuzz_target!(|data: &[u8]| {
    let mut u = Unstructured::new(data);
    let header = <&str>::arbitrary(&mut u).unwrap_or("");
    let secret = <&[u8]>::arbitrary(&mut u).unwrap_or(b"");
    let key = <Option<&str>>::arbitrary(&mut u).unwrap_or(None);
    let now = i64::arbitrary(&mut u).unwrap_or(0);
    let tolerance = i64::arbitrary(&mut u).unwrap_or(300);
    let body = u.take_rest();
    if let Ok(sig) = parse(header) {
        assert!(!sig.v1.is_empty());
        let _ = verify(&sig, secret, key, body, now, tolerance);
    }
    // Round trip: what `sign` makes parses and verifies at its own time.
    let made = sign(secret, now, key, body);
    let sig = parse(&made).expect("a signed header parses");
    let computed = verify(&sig, secret, key, body, now, 300).expect("own signature verifies");
    let mut other = body.to_vec();
    other.push(b'x');
    assert_eq!(
        verify(&sig, secret, key, &other, now, 300),
        Err(SigError::Mismatch)
    );
    let other_key = format!("{}x", key.unwrap_or(""));
    assert_eq!(
        verify(&sig, secret, Some(&other_key), body, now, 300),
        Err(SigError::Mismatch)
    );
    // Extra and reordered entries: the same request, the same MAC.
    if let Some((_, good)) = made.split_once(",v1=") {
        let padded = format!("t={now},v1={},v1={good}", "0".repeat(64));
        let sig = parse(&padded).expect("a padded header parses");
        assert_eq!(verify(&sig, secret, key, body, now, 300), Ok(computed));
    }
});
