//! A database table as the destination of a `queue: disk`: the deliverer's rows are decoded
//! back into records, encoded for the table, and inserted with the kind's own [`Inserter`].
//! A transient error keeps the rows; an error that names the destination's configuration (no
//! table, column or database, a privilege, credentials) holds the queue, rows kept and none
//! dead-lettered; an error about the rows (a type, a constraint) refuses the content, so the
//! deliverer sends the batch row by row and the row refused alone goes to the queue's dead
//! letters (after [`crate::sinks::queue::HOLD_AFTER_REFUSALS`] in a row it holds instead).

use super::queue::{InsertError, Inserter, Row};
use crate::record::Record;
use crate::sinks::queue::{records_of, Destination, Failure, Verdict};
use crate::store;

/// Inserts batches from a disk queue into one table.
pub struct TableDestination<T, I> {
    inserter: I,
    encode: Box<dyn Fn(&Record) -> T + Send>,
}

impl<T, I: Inserter<T>> TableDestination<T, I> {
    /// A destination inserting with `inserter` the rows `encode` makes of each record.
    pub fn new(inserter: I, encode: impl Fn(&Record) -> T + Send + 'static) -> Self {
        Self {
            inserter,
            encode: Box::new(encode),
        }
    }
}

impl<T: Send, I: Inserter<T>> Destination for TableDestination<T, I> {
    fn send(&mut self, rows: &[store::Row]) -> Verdict {
        let batch: Vec<Row<T>> = match records_of(rows) {
            Ok(records) => records
                .into_iter()
                .map(|record| Row {
                    data: (self.encode)(&record),
                    record,
                    tracked: false,
                })
                .collect(),
            Err(verdict) => return verdict,
        };
        match self.inserter.insert(&batch) {
            Ok(()) => Verdict::Delivered,
            Err(InsertError::Transient(m)) => Verdict::Retry {
                error: Failure::from_detail(m),
                after: None,
            },
            Err(InsertError::Destination(m)) => Verdict::Held {
                error: Failure::from_detail(m),
            },
            Err(InsertError::Permanent(m)) => Verdict::Refused {
                error: Failure::from_detail(m),
            },
        }
    }
}
