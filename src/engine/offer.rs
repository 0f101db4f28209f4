//! Admission, node execution and delivery of one record.

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex, RwLock};

use super::stats::EngineStats;
use crate::admission::Reservation;
use crate::flow::{run_node, NodeKind, NodeOutcome, NodeRef, Plan, Port};
use crate::hub::DataHub;
use crate::ledger::{Book, Cause, Counts};
use crate::record::{Record, Settlement};
use crate::sinks::{Delivered, DeliveryError, Sink, Sinks};
use crate::store::dead_letters::{DeadLetterQueue, NewDeadLetter};

/// Most node runs for one record: a bound on fan-out, which the graph (acyclic) cannot loop.
const MAX_STEPS: usize = 10_000;

/// Reason prefix of records a webhook answered 200 for and then could not deliver.
pub const ACCEPTED_NOT_HANDLED: &str = "accepted (200) but not handled: ";

/// The compiled flows and the sinks they deliver to, as one: a record runs under the routes
/// it was admitted with, even when a reload put others in place meanwhile (a sink it reached
/// is the instance that admitted it).
#[derive(Clone)]
pub struct Routes {
    /// The compiled flows.
    pub plan: Arc<Plan>,
    /// The sinks, by name.
    pub sinks: Arc<Sinks>,
}

/// Reservations taken at admission, one per reachable sink (by its index among the routes'
/// sinks); released when dropped. With the routes they were taken under.
pub struct Admitted {
    pub(super) routes: Routes,
    pub(super) reservations: Vec<(usize, Reservation)>,
}

impl Admitted {
    /// No reservation, under `routes`.
    pub(super) fn none(routes: &Routes) -> Self {
        Self {
            routes: routes.clone(),
            reservations: Vec::new(),
        }
    }

    fn take(&mut self, sink: usize) -> Option<Reservation> {
        let i = self.reservations.iter().position(|(s, _)| *s == sink)?;
        Some(self.reservations.swap_remove(i).1)
    }
}

/// The work items for `record` on each of `targets`, entered by `entry`: a borrowed record
/// stays borrowed.
fn fork<'r>(targets: &[NodeRef], entry: NodeRef, record: &Cow<'r, Record>) -> Vec<Item<'r>> {
    targets
        .iter()
        .map(|t| Item {
            at: *t,
            entry,
            record: record.clone(),
        })
        .collect()
}

/// How a run treats failures.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// The source is waiting for the verdict: sink failures go back to it (it retries).
    Normal,
    /// The source already answered 200 (webhook `on_receipt`, inbox recovery): a sink failure
    /// parks the record in the dead-letter queue as "accepted (200) but not handled".
    Accepted,
    /// A replay from the dead-letter queue: failures park nothing new; the entry stays open.
    Replay,
}

/// Runs records from sources to sinks.
pub struct Engine {
    /// The compiled flows and the sinks now; a reload swaps them whole
    /// ([`Engine::set_routes`]).
    routes: RwLock<Routes>,
    dlq: Arc<DeadLetterQueue>,
    pub(super) hub: DataHub,
    /// Its counters.
    pub stats: EngineStats,
    /// Its part of the loss ledger (memory): offers, refusals, and the records acked without a
    /// tracked queue copy.
    pub ledger: Book,
    /// The ledger parts of the sinks a reload removed ([`Engine::retire`]).
    retired: Mutex<Retired>,
}

/// The sinks a reload took out of the routes, for the ledger: the counts of those that
/// stopped, added up by source, and those still draining, read as they go.
#[derive(Default)]
struct Retired {
    counts: BTreeMap<String, Counts>,
    draining: Vec<Arc<Sink>>,
}

/// One record on its way: the node to run next and the entry node it came in by. The record is
/// the offered one, borrowed, until a map changes it: a record wired to several nodes is not
/// copied for each.
struct Item<'r> {
    at: NodeRef,
    entry: NodeRef,
    record: Cow<'r, Record>,
}

/// What happened on the way, folded into a [`Settlement`] at the end.
#[derive(Default)]
struct Run {
    /// The first transient sink failure.
    failure: Option<Settlement>,
    /// The first dead-letter entry made (or `Some(None)` for a failure in replay mode).
    dead_letter: Option<Option<u64>>,
    /// A queue (push, ClickHouse, Postgres) took the copy the ledger tracks.
    tracked: bool,
    /// A sink confirmed a copy.
    delivered: bool,
    /// A sink took a copy with nothing to confirm it (MQTT QoS 0).
    unconfirmed: bool,
}

impl Engine {
    /// An engine running `plan` over `sinks`, parking failures in `dlq`.
    pub fn new(plan: Plan, sinks: Sinks, dlq: Arc<DeadLetterQueue>) -> Self {
        Self {
            routes: RwLock::new(Routes {
                plan: Arc::new(plan),
                sinks: Arc::new(sinks),
            }),
            dlq,
            hub: DataHub::new(),
            stats: EngineStats::default(),
            ledger: Book::default(),
            retired: Mutex::default(),
        }
    }

    /// The live view's broadcast: every offered record is published there (only while a
    /// client watches) with its settlement.
    pub fn hub(&self) -> &DataHub {
        &self.hub
    }

    /// The compiled flows and the sinks now.
    pub fn routes(&self) -> Routes {
        // A panic cannot leave the routes half written: they are replaced whole.
        self.routes
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// The compiled flows now.
    pub fn plan(&self) -> Arc<Plan> {
        Arc::clone(&self.routes.read().unwrap_or_else(|e| e.into_inner()).plan)
    }

    /// The sinks now.
    pub fn sinks(&self) -> Arc<Sinks> {
        Arc::clone(&self.routes.read().unwrap_or_else(|e| e.into_inner()).sinks)
    }

    /// Puts `sinks` in the place of the running ones, the plan kept (a reload reopening a
    /// sink: a record for it meanwhile finds it missing and is refused).
    pub fn set_sinks(&self, sinks: Arc<Sinks>) {
        self.routes.write().unwrap_or_else(|e| e.into_inner()).sinks = sinks;
    }

    /// Puts `plan` and `sinks` in the place of the running ones together, at once (a reload
    /// that adds, removes or replaces a sink): a record admitted before finishes under the
    /// routes it was admitted with.
    pub fn set_routes(&self, plan: Plan, sinks: Arc<Sinks>) {
        let routes = Routes {
            plan: Arc::new(plan),
            sinks,
        };
        *self.routes.write().unwrap_or_else(|e| e.into_inner()) = routes;
    }

    /// Keeps `sink` (out of the routes, delivering what it holds) in the ledger until
    /// [`Engine::retire`].
    pub fn draining(&self, sink: Arc<Sink>) {
        self.retired().draining.push(sink);
    }

    /// Keeps the ledger part of `sink` (stopped by a reload that removed it) as it ended, so
    /// that the ledger still balances for the records it took.
    pub fn retire(&self, sink: &Arc<Sink>) {
        let part = sink.report().ledger_part;
        self.retired().draining.retain(|s| !Arc::ptr_eq(s, sink));
        if let Some((_, part)) = part {
            self.retire_part(part);
        }
    }

    /// Keeps `part`, a ledger part whose sink is gone (see [`Self::retire`]).
    pub fn retire_part(&self, part: BTreeMap<String, Counts>) {
        let mut retired = self.retired();
        for (source, counts) in part {
            retired.counts.entry(source).or_default().add(&counts);
        }
    }

    /// The ledger parts of the sinks a reload took out of the routes: each draining one's,
    /// and `retired` (those that stopped, added up).
    pub fn retired_parts(&self) -> Vec<(String, BTreeMap<String, Counts>)> {
        let (draining, counts) = {
            let r = self.retired();
            (r.draining.clone(), r.counts.clone())
        };
        // Named apart from the routed sinks' parts: a changed sink's new instance may run
        // under the same name while the old one drains.
        let mut parts: Vec<_> = draining
            .iter()
            .filter_map(|s| s.report().ledger_part)
            .map(|(name, part)| (format!("{name} (draining)"), part))
            .collect();
        if !counts.is_empty() {
            parts.push(("retired".to_string(), counts));
        }
        parts
    }

    fn retired(&self) -> std::sync::MutexGuard<'_, Retired> {
        self.retired.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The pipeline dead-letter queue.
    pub fn dead_letters(&self) -> &Arc<DeadLetterQueue> {
        &self.dlq
    }

    /// Asks every sink reachable from the record's source to admit it, before any node runs.
    /// `Ok(None)`: no flow takes this source. `Err`: the settlement to give the source now.
    pub fn admit(&self, record: &Record) -> Result<Option<Admitted>, Settlement> {
        let routes = self.routes();
        let entries = routes.plan.entries(&record.source);
        self.admit_from(record, &routes, entries)
    }

    /// [`Engine::admit`] under `routes`, for a record whose source's `entries` in its plan
    /// the caller has looked up (the plan is asked once a record).
    fn admit_from(
        &self,
        record: &Record,
        routes: &Routes,
        entries: &[NodeRef],
    ) -> Result<Option<Admitted>, Settlement> {
        self.ledger.received(&record.source);
        if entries.is_empty() {
            return Ok(None);
        }
        let reachable = routes.plan.reachable_sinks(&record.source);
        let mut admitted = Admitted {
            routes: routes.clone(),
            reservations: Vec::with_capacity(reachable.len()),
        };
        for name in reachable {
            let Some(index) = routes.sinks.position(name) else {
                continue;
            };
            let Some(sink) = routes.sinks.iter().nth(index) else {
                continue;
            };
            match sink.admit(sink.bytes(record)) {
                Ok(r) => admitted.reservations.push((index, r)),
                Err(refused) => {
                    self.stats.backpressured.fetch_add(1, Ordering::Relaxed);
                    self.ledger.refused(&record.source);
                    return Err(Settlement::Retry {
                        sink: sink.name().to_string(),
                        after: refused.after,
                    });
                }
            }
        }
        Ok(Some(admitted))
    }

    /// Offers one record: admission, then the flows. Resolves once every sink it reached
    /// stored it, or with the reason it must be retried.
    pub async fn offer(&self, record: Record) -> Settlement {
        let watched = self.hub.watch(&record);
        let routes = self.routes();
        let entries = routes.plan.entries(&record.source);
        let settlement = match self.admit_from(&record, &routes, entries) {
            Err(settlement) => settlement,
            Ok(None) => self.unrouted(&record.source),
            Ok(Some(admitted)) => self.run(record, entries, admitted, Mode::Normal).await,
        };
        if let Some(w) = watched {
            self.hub.publish_value(w, &settlement);
        }
        settlement
    }

    /// Runs an admitted record from its source nodes in every flow.
    pub async fn run_admitted(&self, record: Record, admitted: Admitted, mode: Mode) -> Settlement {
        let watched = match mode {
            Mode::Replay => None,
            Mode::Normal | Mode::Accepted => self.hub.watch(&record),
        };
        let plan = Arc::clone(&admitted.routes.plan);
        let entries = plan.entries(&record.source);
        let settlement = if entries.is_empty() {
            self.unrouted(&record.source)
        } else {
            self.run(record, entries, admitted, mode).await
        };
        if let Some(w) = watched {
            self.hub.publish_value(w, &settlement);
        }
        settlement
    }

    /// Offers a dead letter again, from the source node(s) of its flow only.
    pub async fn replay(&self, flow: &str, record: Record) -> Settlement {
        let routes = self.routes();
        let plan = &routes.plan;
        let entries = plan.flow_entries(flow, &record.source);
        if entries.is_empty() {
            return Settlement::Failed {
                sink: String::new(),
                reason: format!("flow {flow:?} has no source node for {:?}", record.source),
            };
        }
        match self.admit_from(&record, &routes, plan.entries(&record.source)) {
            Err(settlement) => settlement,
            Ok(admitted) => {
                let admitted = admitted.unwrap_or_else(|| Admitted::none(&routes));
                self.run(record, &entries, admitted, Mode::Replay).await
            }
        }
    }

    /// Parks a record that a source already acknowledged but that cannot be delivered now
    /// (its sinks refuse): "accepted (200) but not handled", never dropped. `DeadLettered`
    /// once parked; `Failed` when even the park failed, so the caller keeps the record.
    pub async fn park_unhandled(&self, record: Record, why: &Settlement) -> Settlement {
        let plan = self.plan();
        let Some(at) = plan.entries(&record.source).first().copied() else {
            return self.unrouted(&record.source);
        };
        let mut run = Run::default();
        let reason = format!("{ACCEPTED_NOT_HANDLED}{}", describe(why));
        self.park(&plan, &mut run, &record, at, at, reason, Mode::Accepted)
            .await;
        match (run.dead_letter, run.failure) {
            (Some(Some(id)), _) => {
                self.ledger.dead_lettered(&record.source);
                Settlement::DeadLettered { id: Some(id) }
            }
            (_, failure) => {
                self.ledger.lost(&record.source, Cause::Failed);
                failure.unwrap_or(Settlement::Failed {
                    sink: "dead_letters".into(),
                    reason: "not parked".into(),
                })
            }
        }
    }

    /// Counts a record of `source` that no flow takes: acknowledged and counted, by design.
    pub fn unrouted(&self, source: &str) -> Settlement {
        self.stats.unrouted.fetch_add(1, Ordering::Relaxed);
        self.ledger.lost(source, Cause::Unrouted);
        Settlement::Unrouted
    }

    /// Books the end of a run in the ledger (see [`crate::ledger`]).
    fn book(&self, source: &str, settlement: &Settlement, run: &Run, mode: Mode) {
        match settlement {
            Settlement::Retry { .. } | Settlement::Failed { .. } => match mode {
                Mode::Normal | Mode::Replay => self.ledger.refused(source),
                // The source was told 200 and the record could not even be parked.
                Mode::Accepted => self.ledger.lost(source, Cause::Failed),
            },
            _ if run.tracked => {}
            Settlement::DeadLettered { id: Some(_) } => self.ledger.dead_lettered(source),
            Settlement::DeadLettered { id: None } | Settlement::Unrouted => {}
            Settlement::Stored if run.delivered => self.ledger.delivered(source),
            Settlement::Stored if run.unconfirmed => self.ledger.lost(source, Cause::Unconfirmed),
            Settlement::Stored => self.ledger.lost(source, Cause::Suppressed),
        }
    }

    pub(super) async fn run(
        &self,
        original: Record,
        entries: &[NodeRef],
        mut admitted: Admitted,
        mode: Mode,
    ) -> Settlement {
        // `entries` are the record's in this plan (the caller took them from it).
        let routes = admitted.routes.clone();
        let plan = &*routes.plan;
        let mut run = Run::default();
        // Each work item remembers the entry node its record came in by: a dead letter is
        // replayed from there, even when the failing node sits in a subflow.
        let mut work: Vec<Item> = entries
            .iter()
            .rev()
            .map(|r| Item {
                at: *r,
                entry: *r,
                record: Cow::Borrowed(&original),
            })
            .collect();
        let mut steps = 0;
        while let Some(Item {
            at,
            entry,
            mut record,
        }) = work.pop()
        {
            steps += 1;
            if steps > MAX_STEPS {
                let reason = format!("more than {MAX_STEPS} node runs for one record");
                self.park(plan, &mut run, &original, entry, at, reason, mode)
                    .await;
                break;
            }
            if let NodeKind::Sink { sink } = plan.kind(at) {
                let track = !run.tracked && routes.sinks.get(sink).is_some_and(|s| s.is_queue());
                let reason = match self.deliver(sink, &record, &mut admitted, track).await {
                    Ok(Delivered::Stored) if track => {
                        run.tracked = true;
                        continue;
                    }
                    Ok(Delivered::Stored) => {
                        run.delivered = true;
                        continue;
                    }
                    Ok(Delivered::Unconfirmed) => {
                        run.unconfirmed = true;
                        continue;
                    }
                    // No copy, no ledger entry: without another copy the record is booked
                    // as suppressed when the run ends.
                    Ok(Delivered::Suppressed) => continue,
                    Err(Failure::Rejected(reason)) => {
                        // The record itself cannot be delivered: retrying cannot help.
                        let errors = self.node_failed(plan, at, &reason);
                        if errors.is_empty() {
                            self.park(plan, &mut run, &original, entry, at, reason, mode)
                                .await;
                        } else {
                            work.extend(fork(errors, entry, &record));
                        }
                        continue;
                    }
                    Err(Failure::Retry(reason)) => reason,
                };
                self.stats.node_error(plan.flow_id(at), plan.node_id(at));
                let errors = plan.targets(at, Port::Error);
                if !errors.is_empty() {
                    work.extend(fork(errors, entry, &record));
                    continue;
                }
                self.stats.failed.fetch_add(1, Ordering::Relaxed);
                match mode {
                    Mode::Accepted => {
                        let reason = format!("{ACCEPTED_NOT_HANDLED}{}", describe(&reason));
                        self.park(plan, &mut run, &original, entry, at, reason, mode)
                            .await;
                    }
                    Mode::Normal | Mode::Replay => {
                        run.failure.get_or_insert(reason);
                    }
                }
                continue;
            }
            let kind = plan.kind(at);
            // Only a map changes the record; the others' error wires get it as it is.
            let entered = matches!(kind, NodeKind::Map(_)).then(|| record.clone());
            let outcome = run_node(kind, &mut record);
            let entered = entered.as_ref().unwrap_or(&record);
            match outcome {
                NodeOutcome::Filtered => {
                    self.stats.filtered.fetch_add(1, Ordering::Relaxed);
                }
                NodeOutcome::Fail(reason) => {
                    let errors = self.node_failed(plan, at, &reason);
                    if errors.is_empty() {
                        self.park(plan, &mut run, &original, entry, at, reason, mode)
                            .await;
                    } else {
                        work.extend(fork(errors, entry, entered));
                    }
                }
                NodeOutcome::Emit(port) => {
                    let is_subflow = matches!(kind, NodeKind::Subflow { .. });
                    if is_subflow {
                        work.extend(fork(plan.subflow_inputs(at), entry, &record));
                    }
                    let targets = plan.targets(at, port);
                    if targets.is_empty() && !is_subflow {
                        let reason = format!("{} is not wired", port_name(port));
                        let errors = self.node_failed(plan, at, &reason);
                        if errors.is_empty() {
                            self.park(plan, &mut run, &original, entry, at, reason, mode)
                                .await;
                        } else {
                            work.extend(fork(errors, entry, entered));
                        }
                    } else if let [target] = targets {
                        // One wire: the record moves on, no copy.
                        work.push(Item {
                            at: *target,
                            entry,
                            record,
                        });
                    } else {
                        work.extend(fork(targets, entry, &record));
                    }
                }
            }
        }
        drop(admitted);
        let settlement = match (run.failure.take(), run.dead_letter) {
            (Some(failure), _) => failure,
            (None, Some(id)) => Settlement::DeadLettered { id },
            (None, None) => Settlement::Stored,
        };
        self.book(&original.source, &settlement, &run, mode);
        settlement
    }

    /// Delivers to one sink; the failure, as the settlement the source would get, or the
    /// reason the record must be parked.
    async fn deliver(
        &self,
        sink: &str,
        record: &Record,
        admitted: &mut Admitted,
        tracked: bool,
    ) -> Result<Delivered, Failure> {
        let sinks = Arc::clone(&admitted.routes.sinks);
        let (Some(index), Some(handle)) = (sinks.position(sink), sinks.get(sink)) else {
            return Err(Failure::Retry(Settlement::Failed {
                sink: sink.to_string(),
                reason: "sink not configured".into(),
            }));
        };
        let reservation = match admitted.take(index) {
            Some(r) => r,
            // A second delivery to the same sink (fan-out) needs its own room.
            None => handle.admit(handle.bytes(record)).map_err(|r| {
                Failure::Retry(Settlement::Retry {
                    sink: sink.to_string(),
                    after: r.after,
                })
            })?,
        };
        handle
            .deliver(record, reservation, tracked)
            .await
            .map_err(|e| match e {
                DeliveryError::Refused(r) => Failure::Retry(Settlement::Retry {
                    sink: sink.to_string(),
                    after: r.after,
                }),
                DeliveryError::Store(e) => Failure::Retry(Settlement::Failed {
                    sink: sink.to_string(),
                    reason: e.to_string(),
                }),
                DeliveryError::Publish(reason) => Failure::Retry(Settlement::Failed {
                    sink: sink.to_string(),
                    reason,
                }),
                DeliveryError::Rejected(reason) => {
                    Failure::Rejected(format!("sink {sink} cannot take the record: {reason}"))
                }
            })
    }

    /// A node failed (or emitted on an unwired port): counts it and returns its error wires
    /// (empty: the record goes to the dead letters).
    fn node_failed<'p>(&self, plan: &'p Plan, at: NodeRef, reason: &str) -> &'p [NodeRef] {
        let (flow, node) = (plan.flow_id(at), plan.node_id(at));
        self.stats.node_error(flow, node);
        let errors = plan.targets(at, Port::Error);
        if !errors.is_empty() {
            log::debug!(
                "node failed, record sent to its error wire: flow={flow} node={node} reason=\"{reason}\""
            );
        }
        errors
    }

    /// Parks the record as its source produced it, so that a replay from the source node
    /// runs every node once. In replay mode nothing new is parked.
    // The plan the run goes by is one more argument than clippy's bound; a struct of the
    // run's fixed parts would only rename them.
    #[allow(clippy::too_many_arguments)]
    async fn park(
        &self,
        plan: &Plan,
        run: &mut Run,
        original: &Record,
        entry: NodeRef,
        at: NodeRef,
        reason: String,
        mode: Mode,
    ) {
        let flow = plan.flow_id(entry).to_string();
        // A node of a called flow is named with its flow: `<flow>/<node>`.
        let node = if at.flow == entry.flow {
            plan.node_id(at).to_string()
        } else {
            format!("{}/{}", plan.flow_id(at), plan.node_id(at))
        };
        if mode == Mode::Replay {
            log::warn!("replayed record failed again: flow={flow} node={node} reason=\"{reason}\"");
            run.dead_letter.get_or_insert(None);
            return;
        }
        let new = NewDeadLetter {
            record: original.clone(),
            flow: flow.clone(),
            node: node.clone(),
            reason: reason.clone(),
            accepted: mode == Mode::Accepted,
        };
        let dlq = Arc::clone(&self.dlq);
        let parked = tokio::task::spawn_blocking(move || dlq.park(new)).await;
        match parked {
            Ok(Ok(id)) => {
                crate::ledger::book_trimmed_dead_letters(self);
                self.stats.dead_lettered.fetch_add(1, Ordering::Relaxed);
                log::error!(
                    "record parked in the dead-letter queue: flow={flow} node={node} dead_letter_id={id} reason=\"{reason}\""
                );
                run.dead_letter.get_or_insert(Some(id));
            }
            Ok(Err(e)) => {
                log::error!(
                    "dead-letter queue write failed: flow={flow} node={node} error=\"{e}\""
                );
                run.failure.get_or_insert(Settlement::Failed {
                    sink: "dead_letters".into(),
                    reason: e.to_string(),
                });
            }
            Err(e) => {
                run.failure.get_or_insert(Settlement::Failed {
                    sink: "dead_letters".into(),
                    reason: e.to_string(),
                });
            }
        }
    }
}

/// How a delivery failed.
enum Failure {
    /// The source is told to retry (or, after a 200, the record is parked).
    Retry(Settlement),
    /// The record itself cannot be delivered: parked with this reason.
    Rejected(String),
}

fn port_name(port: Port) -> String {
    match port {
        Port::Out(n) => format!("output port {n}"),
        Port::Error => "error port".into(),
    }
}

fn describe(s: &Settlement) -> String {
    match s {
        Settlement::Retry { sink, .. } => format!("sink {sink} refused (full)"),
        Settlement::Failed { sink, reason } => format!("sink {sink} failed: {reason}"),
        other => format!("{other:?}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An engine with a durable `push` sink, `source` wired to it.
    fn engine(dir: &std::path::Path, source: &str) -> Engine {
        super::super::test_engine(dir, Plan::direct(&[source.to_string()], "push"))
    }

    fn record(source: &str) -> Record {
        Record::from_value(source, "k", &serde_json::json!({"v": 1}))
    }

    #[tokio::test]
    async fn a_record_admitted_before_a_plan_swap_finishes_under_its_plan_and_the_next_under_the_new(
    ) {
        let dir = tempfile::tempdir().expect("tmp");
        let engine = engine(dir.path(), "ingest/a");
        let admitted = engine
            .admit(&record("ingest/a"))
            .expect("admitted")
            .expect("routed");
        // The new plan takes `ingest/a` nowhere.
        engine.set_routes(
            Plan::direct(&["ingest/b".to_string()], "push"),
            engine.sinks(),
        );
        let settlement = engine
            .run_admitted(record("ingest/a"), admitted, Mode::Normal)
            .await;
        assert_eq!(settlement, Settlement::Stored);
        assert_eq!(engine.offer(record("ingest/a")).await, Settlement::Unrouted);
        assert_eq!(engine.offer(record("ingest/b")).await, Settlement::Stored);
    }
}
