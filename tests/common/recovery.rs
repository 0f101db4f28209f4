//! Recovery time after a peer outage: from the moment the peer is back to the first record
//! delivered (or polled) again. Printed as one line that `scripts/faults.sh` collects:
//! `recovery: peer=<peer> secs=<s>`.

use std::time::{Duration, Instant};

use super::poll_until;

/// The longest recovery the fault tests accept: the clients' reconnect back-offs in the test
/// configs are at most a few seconds, so this leaves room for a loaded CI box.
pub const RECOVERY_BOUND: Duration = Duration::from_secs(20);

/// Polls `recovered` from `back` (when the peer came back) until it holds; prints the
/// recovery line and returns the time taken. Panics after `bound`.
pub fn measure_recovery(
    peer: &str,
    back: Instant,
    bound: Duration,
    recovered: impl FnMut() -> bool,
) -> Duration {
    let left = bound.saturating_sub(back.elapsed());
    assert!(
        poll_until(left, recovered),
        "{peer}: nothing delivered within {bound:?} of the peer coming back"
    );
    let took = back.elapsed();
    eprintln!("recovery: peer={peer} secs={:.3}", took.as_secs_f64());
    took
}
