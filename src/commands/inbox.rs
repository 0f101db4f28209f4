//! The way a command reaches the task that owns a device's connection (a Modbus line, an
//! OPC-UA session): a small bounded channel per device or line, read **between poll cycles**,
//! so a write never interleaves with a poll's frames. The task answers each command once,
//! with one result per point.

use std::time::Instant;

use tokio::sync::{mpsc, oneshot};

use super::command::{all, Command, PointResult};

/// Commands one device (or one RTU line) holds waiting for its task; beyond it a command is
/// answered `unavailable` at once.
pub const INBOX: usize = 16;

/// One command on its way to the device's task, with the way back.
#[derive(Debug)]
pub struct Pending {
    /// The command.
    pub command: Command,
    reply: oneshot::Sender<Vec<(String, PointResult)>>,
}

impl Pending {
    /// A command and the receiver its results come back on.
    pub fn new(command: Command) -> (Self, oneshot::Receiver<Vec<(String, PointResult)>>) {
        let (reply, rx) = oneshot::channel();
        (Self { command, reply }, rx)
    }

    /// Answers with a result per point.
    pub fn answer(self, results: Vec<(String, PointResult)>) {
        let _ = self.reply.send(results);
    }

    /// Answers every point with `result`.
    pub fn answer_all(self, result: PointResult) {
        let results = all(&self.command.points, &result);
        self.answer(results);
    }

    /// When its turn comes after its deadline: answers `expired` and returns `None`; else
    /// gives it back to be run.
    pub fn unless_expired(self, now: Instant) -> Option<Self> {
        if self.command.expired(now) {
            self.answer_all(PointResult::Expired);
            return None;
        }
        Some(self)
    }
}

/// The sending side, kept by the commands service.
pub type CommandSender = mpsc::Sender<Pending>;
/// The receiving side, owned by the device's (or line's) task.
pub type CommandReceiver = mpsc::Receiver<Pending>;

/// A new inbox of [`INBOX`] commands.
pub fn channel() -> (CommandSender, CommandReceiver) {
    mpsc::channel(INBOX)
}
