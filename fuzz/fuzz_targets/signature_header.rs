//! `X-Opex-Signature` parsing and checking never panic, and a header made by `sign` for any
//! body, secret and timestamp always verifies (and stops verifying when the body changes).
#![no_main]

use libfuzzer_sys::arbitrary::{Arbitrary, Unstructured};
use libfuzzer_sys::fuzz_target;
use opex_connector::sources::webhook::signature::{parse, sign, verify, SigError};

fuzz_target!(|data: &[u8]| {
    let mut u = Unstructured::new(data);
    let header = <&str>::arbitrary(&mut u).unwrap_or("");
    let secret = <&[u8]>::arbitrary(&mut u).unwrap_or(b"");
    let now = i64::arbitrary(&mut u).unwrap_or(0);
    let tolerance = i64::arbitrary(&mut u).unwrap_or(300);
    let body = u.take_rest();
    if let Ok(sig) = parse(header) {
        assert!(!sig.v1.is_empty());
        let _ = verify(&sig, secret, body, now, tolerance);
    }
    // Round trip: what `sign` makes parses and verifies at its own time.
    let made = sign(secret, now, body);
    let sig = parse(&made).expect("a signed header parses");
    assert_eq!(verify(&sig, secret, body, now, 300), Ok(()));
    let mut other = body.to_vec();
    other.push(b'x');
    assert_eq!(
        verify(&sig, secret, &other, now, 300),
        Err(SigError::Mismatch)
    );
});
