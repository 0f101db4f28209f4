//! Schedules: ticks at a fixed interval (`every`) or on a cron expression (UTC), each offered
//! as a record `source: schedule/<name>`. Missed ticks are not replayed, by design.

pub mod config;
pub mod cron;
mod source;

pub use config::{validate_schedules, RawSchedule, ScheduleConfig, When};
pub use source::{next_after, next_tick, on_time, ScheduleSource, ScheduleStats};
