//! Open dead letters trimmed at the pipeline dead-letter queue's cap: each is a record lost,
//! booked under [`Cause::Trimmed`](super::Cause::Trimmed).
//!
//! A dead letter is counted `dead_lettered` by the part that parked it: the engine's (a node
//! failed, a sink failed after the source was answered) or a database sink's backlog (the
//! database refused the row). The queue keeps the sources of the open entries it trims
//! ([`DeadLetterQueue::take_trimmed_open`]); whoever parked the entry that made the trim takes
//! them right after and moves each from `dead_lettered` to `trimmed` in the part that holds
//! it, so every part keeps balancing. An entry parked before this start is in no part (the
//! parts are memory, the queue is on disk): it is counted and alerted by the queue
//! (`trimmed_open_total`), and logged here.
//!
//! [`DeadLetterQueue::take_trimmed_open`]: crate::store::dead_letters::DeadLetterQueue::take_trimmed_open

use crate::engine::Engine;

/// Books the open dead letters trimmed since the last call. Cheap when there are none.
pub fn book_trimmed_dead_letters(engine: &Engine) {
    for (source, n) in engine.dead_letters().take_trimmed_open() {
        let mut unbooked = 0u64;
        for _ in 0..n {
            let booked = engine.ledger.dead_letter_trimmed(&source)
                || engine
                    .sinks()
                    .iter()
                    .filter_map(|s| s.backlog_ledger())
                    .any(|b| b.dead_letter_trimmed(&source));
            if !booked {
                unbooked += 1;
            }
        }
        if unbooked > 0 {
            log::info!(
                "trimmed dead letters parked before this start, counted in trimmed_open_total only: source={source} entries={unbooked}"
            );
        }
    }
}
