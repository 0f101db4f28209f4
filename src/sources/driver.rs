//! The device contract: what a protocol must do so that [`super::poll_loop`] can poll its
//! devices, run their commands and keep their status, the same way for every protocol.
//!
//! A **driver** owns one connection (a TCP connection, a serial line, a session) and the
//! devices behind it: one for most protocols, several for a Modbus RTU line, whose units share
//! the port. The loop calls it for one thing at a time, so a request never interleaves with
//! another on the wire, and tells it which device (`member`, the device's index in the driver's
//! list) each call is for.
//!
//! - [`Driver::plan`]: the planner, once per group at start: the group's points as the fewest
//!   requests the protocol allows. The loop keeps the plans and hands each back to
//!   [`Driver::read`], which may refine it (a coalesced request a device refuses is split,
//!   once, into requests of its own).
//! - [`Driver::open`]: opens the connection with the protocol's own security. The loop calls it
//!   when the connection is not open, before a read or a write.
//! - [`Driver::read`]: reads one planned group: every point's value or its own bad quality with
//!   the device's reason (a refusal is data, not a failure); `Err` only for a failure of the
//!   link, after which the loop closes it (unless [`LinkError::closes_link`] says the link
//!   outlives the request).
//! - [`Driver::check`] then [`Driver::write`]: a command's points, all checked before anything
//!   is sent, then written with each point's result, the command's deadline checked before
//!   every request frame, at most once.
//! - [`Driver::close`]: drops the connection (after a failure, and at the end).
//! - [`Driver::pushes`] and [`Driver::pushed`], for protocols that can push (OPC-UA
//!   subscriptions): a pushed group is not polled; the loop keeps its device's link open
//!   (opening it on the group's schedule while it is closed, after the breaker's wait) and
//!   takes the changes the device sends as they come, as it takes commands, between polls.
//!   The push side also reports a link that died without a request failing (a session whose
//!   server went away, a subscription that delivers nothing for the watchdog's time).
//!
//! Counters a protocol alone knows (requests sent, refusals) are counted by the driver on the
//! device's [`DeviceStatus`]; everything else (state, breaker, jitter, polls, values, records,
//! errors with their hints) by the loop.

use std::fmt;
use std::future::Future;

use serde_json::{Map, Value};

use crate::commands::{Command, PointResult};
use crate::sources::status::DeviceStatus;

/// Why a request (or opening the link) failed; every variant but [`LinkError::Request`]
/// closes the connection.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LinkError {
    /// No answer within the device's timeout.
    Timeout,
    /// The connection could not be opened.
    Open(String),
    /// An I/O error on the connection.
    Transport(String),
    /// An answer that does not match the request (framing, header or function mismatch).
    Framing(String),
    /// A request failed (no answer in time) on a link that stays up: where each request
    /// carries its own handle (OPC-UA), a late answer cannot be taken for the next one's, and
    /// the link has its own keep-alive.
    Request(String),
}

impl LinkError {
    /// Every link error is retried, after the breaker's wait: the device may come back.
    pub fn is_retriable(&self) -> bool {
        true
    }

    /// True when the loop must close the link (and open it again at the next request).
    pub fn closes_link(&self) -> bool {
        !matches!(self, Self::Request(_))
    }
}

impl fmt::Display for LinkError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Timeout => write!(f, "timeout"),
            Self::Open(e) => write!(f, "cannot connect: {e}"),
            Self::Transport(e) => write!(f, "transport: {e}"),
            Self::Framing(e) => write!(f, "framing: {e}"),
            Self::Request(e) => write!(f, "{e}"),
        }
    }
}

/// One read of a planned group.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct GroupRead {
    /// Every point of the group by name: `{"value":..,"quality":"good"}`, or its bad quality
    /// with the device's reason.
    pub points: Map<String, Value>,
    /// Requests the read sent.
    pub requests: u64,
    /// The device's own timestamp of the values (Unix ms), when it gives one; else the
    /// record carries the poll's start.
    pub ts_ms: Option<u64>,
}

/// Points a device pushed for one of its groups.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Pushed {
    /// The device, by its index in the driver's list.
    pub member: usize,
    /// The group, by its index in the device's groups.
    pub group: usize,
    /// The points that changed, as [`GroupRead::points`].
    pub points: Map<String, Value>,
    /// The device's own timestamp of the change (Unix ms), when it gives one.
    pub ts_ms: Option<u64>,
}

/// A command's points, each with its result, in the command's order.
pub type Results = Vec<(String, PointResult)>;

/// A protocol, behind one connection. See the module's doc.
pub trait Driver: Send + 'static {
    /// The requests of one group.
    type Plan: Send;
    /// A command's requests, checked.
    type Writes: Send;

    /// How a command is answered while the device's link is down, before the state and last
    /// error: "the device is not connected", or the protocol's own words.
    const DOWN: &'static str = "the device is not connected";

    /// The planner: group `group` of device `member` as the fewest requests.
    fn plan(&self, member: usize, group: usize) -> Self::Plan;

    /// True while the connection is open.
    fn is_open(&self) -> bool;

    /// Opens the connection, for device `member` (its timeout, its address on a shared line).
    fn open(&mut self, member: usize) -> impl Future<Output = Result<(), LinkError>> + Send;

    /// Reads `plan` of device `member`; `Err` when the link failed (the loop then closes it).
    fn read(
        &mut self,
        member: usize,
        plan: &mut Self::Plan,
        status: &DeviceStatus,
    ) -> impl Future<Output = Result<GroupRead, LinkError>> + Send;

    /// Checks every point of `command` for device `member` before anything is sent: the
    /// requests, or a result for every point (nothing may be sent).
    fn check(&self, member: usize, command: &Command) -> Result<Self::Writes, Results>;

    /// Writes checked `writes` of `command` to device `member`, checking the command's
    /// deadline before every request frame: every point's result, and the link error that
    /// ended the run early, if one did (the loop then closes the link).
    fn write(
        &mut self,
        member: usize,
        command: &Command,
        writes: Self::Writes,
        status: &DeviceStatus,
    ) -> impl Future<Output = (Results, Option<LinkError>)> + Send;

    /// What link error `e` of device `member` means and what to try, in a technician's words.
    fn hint(&self, member: usize, e: &LinkError) -> Option<String>;

    /// Closes the connection.
    fn close(&mut self);

    /// True when group `group` of device `member` is pushed by the device (a subscription)
    /// instead of polled.
    fn pushes(&self, _member: usize, _group: usize) -> bool {
        false
    }

    /// The next points the device pushed, or the link error that ended its push side (the
    /// loop then closes the link). Pending while the link is closed, and forever for a
    /// protocol that is only polled. Cancel safe: the loop waits on it beside its schedule.
    fn pushed(&mut self) -> impl Future<Output = Result<Pushed, LinkError>> + Send {
        std::future::pending()
    }
}
