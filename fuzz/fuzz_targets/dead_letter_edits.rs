//! Any sequence of dead-letter operations (park, correct the payload with any body, resolve,
//! read, list, page) never panics the queue, and a correction that the API accepts is what a
//! replay reads back.
#![no_main]

use std::sync::OnceLock;

use libfuzzer_sys::arbitrary::{Arbitrary, Result, Unstructured};
use libfuzzer_sys::fuzz_target;
use opex_connector::record::Record;
use opex_connector::store::{DeadLetterQueue, DlqFilter, DlqState, NewDeadLetter};
use serde_json::value::RawValue;

/// One queue for the whole run (opening LMDB per input would dominate), small enough that
/// trimming happens often.
fn queue() -> &'static DeadLetterQueue {
    static Q: OnceLock<(tempfile::TempDir, DeadLetterQueue)> = OnceLock::new();
    let (_, q) = Q.get_or_init(|| {
        let dir = tempfile::tempdir().expect("temp dir");
        let q = DeadLetterQueue::open(dir.path(), 64).expect("open the queue");
        (dir, q)
    });
    q
}

fn run(u: &mut Unstructured) -> Result<()> {
    let q = queue();
    let mut ids: Vec<u64> = Vec::new();
    for _ in 0..u.int_in_range(1..=16u8)? {
        let id = if ids.is_empty() || bool::arbitrary(u)? {
            u64::arbitrary(u)?
        } else {
            *u.choose(&ids)?
        };
        match u.int_in_range(0..=6u8)? {
            0 => {
                let payload = <&[u8]>::arbitrary(u)?;
                let record = Record::from_json("webhook/fuzz", <&str>::arbitrary(u)?, payload)
                    .unwrap_or_else(|_| {
                        Record::from_value("webhook/fuzz", "k", &serde_json::Value::Null)
                    });
                let entry = NewDeadLetter {
                    record,
                    flow: <String>::arbitrary(u)?,
                    node: <String>::arbitrary(u)?,
                    reason: <String>::arbitrary(u)?,
                    accepted: bool::arbitrary(u)?,
                };
                if let Ok(id) = q.park(entry) {
                    ids.push(id);
                }
            }
            1 => {
                // The admin API's `PUT /api/dead-letters/{id}`: any body that is JSON.
                let body = <&[u8]>::arbitrary(u)?;
                if let Ok(payload) = serde_json::from_slice::<Box<RawValue>>(body) {
                    let text = payload.get().to_string();
                    if q.update_payload(id, payload) == Ok(true) {
                        if let Ok(Some((record, _))) = q.record(id) {
                            assert_eq!(record.payload.get(), text);
                        }
                    }
                }
            }
            2 => {
                let _ = q.resolve(id, <&str>::arbitrary(u)?);
                if let Ok(Some(e)) = q.get(id) {
                    assert_eq!(e.state, DlqState::Resolved);
                }
            }
            3 => {
                let _ = q.get(id);
                let _ = q.record(id);
            }
            4 => {
                let filter = DlqFilter {
                    flow: Option::<String>::arbitrary(u)?,
                    state: *u.choose(&[None, Some(DlqState::Open), Some(DlqState::Resolved)])?,
                    after: Option::<u64>::arbitrary(u)?,
                    limit: usize::arbitrary(u)?,
                };
                if let Ok(rows) = q.list(&filter) {
                    assert!(rows.windows(2).all(|w| w[0].id < w[1].id));
                }
            }
            5 => {
                let id = q.inbox_put(<&[u8]>::arbitrary(u)?);
                if let Ok(id) = id {
                    let _ = q.inbox_remove(id);
                }
            }
            _ => {
                let c = q.counts();
                let _ = serde_json::to_string(&c);
            }
        }
    }
    Ok(())
}

fuzz_target!(|data: &[u8]| {
    let _ = run(&mut Unstructured::new(data));
});
