//! A batch of records from one source (`POST /api/ingest/{source}`): admitted as a whole,
//! each record run through the flows once, the rows committed together.
//!
//! Admission asks each reachable sink once for the bytes of the whole batch (the sum of its
//! records'), so under `block` a batch is refused whole or admitted whole, and the rule that a
//! record larger than the whole quota enters an empty queue applies to the batch: a batch
//! larger than the quota enters an empty queue. The admitted reservation is then split into
//! each record's part, so every record's run holds exactly what a record offered alone would.
//! The runs go together through [`in_one_commit`]: the rows the batch leaves in a durable queue
//! are stored in one transaction. The ledger counts every record (received, and refused or
//! acked as each record's run ends), as it would for records offered one by one.

use std::sync::atomic::Ordering;

use super::offer::{Admitted, Engine, Mode};
use crate::record::{Record, Settlement};
use crate::store::queue::in_one_commit;

impl Engine {
    /// Offers `records`, every one of source `source`, as one batch (see the module doc).
    /// `Err`: a sink refused the batch; nothing ran, every record is booked refused. `Ok`: each
    /// record's settlement, in order, once every row is committed.
    pub async fn offer_batch(
        &self,
        source: &str,
        records: Vec<Record>,
    ) -> Result<Vec<Settlement>, Settlement> {
        for _ in &records {
            self.ledger.received(source);
        }
        let routes = self.routes();
        let plan = &routes.plan;
        let entries = plan.entries(source);
        if entries.is_empty() {
            return Ok(records.iter().map(|_| self.unrouted(source)).collect());
        }
        let reachable = plan.reachable_sinks(source);
        let mut admitted: Vec<Admitted> = records
            .iter()
            .map(|_| Admitted {
                routes: routes.clone(),
                reservations: Vec::with_capacity(reachable.len()),
            })
            .collect();
        for name in reachable {
            let (Some(index), Some(sink)) = (routes.sinks.position(name), routes.sinks.get(name))
            else {
                continue;
            };
            let bytes: Vec<u64> = records.iter().map(|r| sink.bytes(r)).collect();
            let total = bytes.iter().fold(0u64, |sum, b| sum.saturating_add(*b));
            match sink.admit(total) {
                Ok(mut whole) => {
                    for (part, b) in admitted.iter_mut().zip(bytes) {
                        part.reservations.push((index, whole.split(b)));
                    }
                }
                Err(refused) => {
                    let n = records.len() as u64;
                    self.stats.backpressured.fetch_add(n, Ordering::Relaxed);
                    for _ in &records {
                        self.ledger.refused(source);
                    }
                    return Err(Settlement::Retry {
                        sink: sink.name().to_string(),
                        after: refused.after,
                    });
                }
            }
        }
        let runs = records
            .into_iter()
            .zip(admitted)
            .map(|(record, admitted)| async move {
                let watched = self.hub.watch(&record);
                let settlement = self.run(record, entries, admitted, Mode::Normal).await;
                if let Some(w) = watched {
                    self.hub.publish_value(w, &settlement);
                }
                settlement
            })
            .collect();
        Ok(in_one_commit(runs).await)
    }
}
