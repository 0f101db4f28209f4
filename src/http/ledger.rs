//! `GET /api/ledger`: the loss ledger, public; with `?verify=1` also the check of the push
//! queue's pending counts against its rows, an admin call.
//!
//! The check reads every row of the push queue in one LMDB read transaction, holding the
//! queue's resize lock for reading: a writer that must grow the map waits until it ends,
//! overlapping checks could keep it waiting indefinitely, and pages freed meanwhile cannot be
//! reused. Hence it needs the admin token (without `admin_token` configured it does not
//! exist: `404`, like the other admin endpoints), and one runs at a time ([`LedgerScan`]):
//! another call while one runs gets `503` with `Retry-After`, as the live view answers when
//! it is full. The scan itself is the ledger's ([`crate::ledger::report`]).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use hyper::body::Incoming;
use hyper::header::{HeaderValue, RETRY_AFTER};
use hyper::{Request, StatusCode};
use serde_json::{json, Value};

use super::respond::{error, json_response, Resp};
use super::{admin, AppState};

/// `Retry-After` of a check refused because another one runs, in seconds.
pub const BUSY_RETRY_AFTER_SECS: u64 = 5;

/// One push queue check at a time: [`LedgerScan::try_begin`] hands out the only
/// [`ScanPermit`], which frees the slot when dropped.
#[derive(Debug, Default)]
pub struct LedgerScan {
    running: Arc<AtomicBool>,
}

/// The right to run the check, held until the scan ends (dropped).
#[derive(Debug)]
pub struct ScanPermit {
    running: Arc<AtomicBool>,
}

impl LedgerScan {
    /// The permit, or `None` while another check holds it.
    pub fn try_begin(&self) -> Option<ScanPermit> {
        self.running
            .compare_exchange(false, true, Ordering::Acquire, Ordering::Relaxed)
            .ok()
            .map(|_| ScanPermit {
                running: Arc::clone(&self.running),
            })
    }

    /// True while a check runs.
    pub fn is_running(&self) -> bool {
        self.running.load(Ordering::Acquire)
    }
}

impl Drop for ScanPermit {
    fn drop(&mut self) {
        self.running.store(false, Ordering::Release);
    }
}

/// Serves `GET /api/ledger`.
pub async fn handle(state: &AppState, req: &Request<Incoming>) -> Resp {
    let verify = req
        .uri()
        .query()
        .is_some_and(|q| q.split('&').any(|p| p == "verify=1" || p == "verify=true"));
    let engine = Arc::clone(&state.engine);
    if !verify {
        return run(move || crate::ledger::report(&engine, false)).await;
    }
    if let Some(refused) = admin::refusal(state, req).await {
        return refused;
    }
    verify_one_at_a_time(&state.ledger_scan, move || {
        crate::ledger::report(&engine, true)
    })
    .await
}

/// Runs `scan` (the report with the push queue check) if no other check runs, else `503`.
/// The permit goes with the scan onto its blocking thread: a caller that hangs up does not
/// free the slot before the scan has ended.
async fn verify_one_at_a_time(
    gate: &LedgerScan,
    scan: impl FnOnce() -> Value + Send + 'static,
) -> Resp {
    let Some(permit) = gate.try_begin() else {
        log::info!("ledger check refused: another one is running");
        let mut r = json_response(
            StatusCode::SERVICE_UNAVAILABLE,
            &json!({
                "ok": false,
                "error": "a queue check is running already; one runs at a time",
                "retry_after_secs": BUSY_RETRY_AFTER_SECS,
            }),
        );
        r.headers_mut()
            .insert(RETRY_AFTER, HeaderValue::from(BUSY_RETRY_AFTER_SECS));
        return r;
    };
    run(move || {
        let report = scan();
        drop(permit);
        report
    })
    .await
}

/// The report, built off the async threads (the check reads the disk).
async fn run(report: impl FnOnce() -> Value + Send + 'static) -> Resp {
    match tokio::task::spawn_blocking(report).await {
        Ok(ledger) => json_response(StatusCode::OK, &ledger),
        Err(_) => error(StatusCode::INTERNAL_SERVER_ERROR, "ledger report failed"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::mpsc;

    async fn body(resp: Resp) -> Value {
        use http_body_util::BodyExt;
        let bytes = resp.into_body().collect().await.unwrap().to_bytes();
        serde_json::from_slice(&bytes).unwrap()
    }

    #[tokio::test]
    async fn a_check_while_another_holds_the_permit_is_refused_with_503_and_retry_after() {
        let gate = LedgerScan::default();
        let held = gate.try_begin().expect("the first permit");
        let resp = verify_one_at_a_time(&gate, || json!({"scanned": true})).await;
        assert_eq!(resp.status(), StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!(resp.headers()[RETRY_AFTER], "5");
        let b = body(resp).await;
        assert_eq!(b["ok"], json!(false));
        assert_eq!(b["retry_after_secs"], json!(BUSY_RETRY_AFTER_SECS));
        assert!(b["error"].as_str().unwrap().contains("one runs at a time"));
        drop(held);
        let resp = verify_one_at_a_time(&gate, || json!({"scanned": true})).await;
        assert_eq!(resp.status(), StatusCode::OK);
        assert_eq!(body(resp).await, json!({"scanned": true}));
        assert!(!gate.is_running());
    }

    #[tokio::test]
    async fn two_concurrent_checks_one_scans_and_the_other_is_refused_even_after_its_caller_hung_up(
    ) {
        let gate = Arc::new(LedgerScan::default());
        let (started_tx, started) = mpsc::channel::<()>();
        let (finish, finish_rx) = mpsc::channel::<()>();
        // The first scan runs until the test lets it finish.
        let first = {
            let gate = Arc::clone(&gate);
            tokio::spawn(async move {
                verify_one_at_a_time(&gate, move || {
                    started_tx.send(()).unwrap();
                    finish_rx.recv().unwrap();
                    json!({"scanned": 1})
                })
                .await
            })
        };
        tokio::task::spawn_blocking(move || started.recv().unwrap())
            .await
            .unwrap();
        let second = verify_one_at_a_time(&gate, || json!({"scanned": 2})).await;
        assert_eq!(second.status(), StatusCode::SERVICE_UNAVAILABLE);
        // The first caller hangs up: its scan still runs, and still holds the slot.
        first.abort();
        assert!(first.await.unwrap_err().is_cancelled());
        assert!(gate.is_running());
        let third = verify_one_at_a_time(&gate, || json!({"scanned": 3})).await;
        assert_eq!(third.status(), StatusCode::SERVICE_UNAVAILABLE);
        // Once the scan ends, the next check runs.
        finish.send(()).unwrap();
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while gate.is_running() {
            assert!(std::time::Instant::now() < deadline, "the scan never ended");
            tokio::task::yield_now().await;
        }
        let fourth = verify_one_at_a_time(&gate, || json!({"scanned": 4})).await;
        assert_eq!(fourth.status(), StatusCode::OK);
        assert_eq!(body(fourth).await, json!({"scanned": 4}));
    }
}
