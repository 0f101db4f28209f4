//! Trends: the last hour of every device point, every queue's fill and the records per second
//! in per source and out per sink, for the status page's sparklines and charts
//! (`GET /api/trends`). Memory only: a restart starts them empty.
//!
//! Each series is [`BUCKETS`] buckets of [`BUCKET_MS`] (10 s) on the wall clock's grid, each
//! with its min, max, mean and last sample ([`series`]). The table holds at most
//! [`MAX_SERIES`] series, each in a ring allocated once (5.8 KiB): about 12 MiB at the bound.
//! Beyond it a new series takes the place of one silent for ten minutes, or is refused; the
//! connector's own series always find a place ([`table`]); both are counted ([`feed`]).
//!
//! Who feeds them:
//!
//! | series | fed by |
//! | --- | --- |
//! | `point/<device>/<group>.<point>` | each device's poll result, as its status keeps it (Modbus and OPC-UA): good numbers, and booleans as 0 or 1 |
//! | `queue/<name>`, `in/<source>`, `out/<sink>` | the [`sampler`], once per bucket |

pub mod feed;
pub mod sampler;
pub mod series;
pub mod table;

pub use feed::{Clock, Read, TrendStats, Trends, MAX_SERIES};
pub use series::{Bucket, BUCKETS, BUCKET_MS};
pub use table::{Copied, EVICT_AFTER_MS};
