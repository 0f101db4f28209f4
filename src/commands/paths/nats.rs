//! Commands over NATS request-reply: a request on `commands.nats.subject` (default
//! `opex.cmd.{device}`, subscribed as `opex.cmd.*`) is a command for the device its subject
//! names; the reply is the outcome (`Outcome::to_json`), or `{"ok":false,"error":..}`.
//!
//! Core NATS, not JetStream: a command is not kept for later, it is answered now or never
//! (a request sent while the connector is away gets no responder, and the caller's own
//! timeout tells it so). A request without a reply subject (a plain publish) is still run;
//! its outcome is logged and recorded only, and it is counted in `no_reply`. A caller that
//! sends again after a lost reply keeps the command's `id`: the repeat is answered with the
//! first outcome and not written again.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use async_nats::connection::State;
use futures_util::StreamExt;
use serde_json::Value;
use tokio::task::JoinSet;

use super::{busy, take, PathStats, Template, FLUSH_AT_SHUTDOWN, MAX_IN_FLIGHT};
use crate::brokers::nats::{connect, reconnect_delay, NatsConnectionConfig};
use crate::commands::{Commands, Origin};
use crate::engine::Engine;
use crate::shutdown::Shutdown;

/// The NATS path.
pub struct NatsCommands {
    connection: NatsConnectionConfig,
    template: Template,
    /// Its counters.
    pub stats: PathStats,
}

impl NatsCommands {
    /// The path on `connection`, for the subject template `subject`.
    pub fn new(connection: NatsConnectionConfig, subject: &str) -> Self {
        Self {
            connection,
            template: Template::new(subject, '.', "*"),
            stats: PathStats::default(),
        }
    }

    /// `commands.nats` of `/api/status`.
    pub fn status(&self) -> Value {
        self.stats
            .to_json(&self.connection.name, &self.template.filter)
    }

    /// Takes commands until shutdown, then lets the running ones finish and sends their
    /// replies.
    pub async fn run(
        self: Arc<Self>,
        commands: Arc<Commands>,
        engine: Arc<Engine>,
        shutdown: Shutdown,
    ) {
        let Some(client) = connect(&self.connection, "opex-connector commands", &shutdown).await
        else {
            return;
        };
        let mut attempt = 0usize;
        let mut subscriber = loop {
            match client.subscribe(self.template.filter.clone()).await {
                Ok(s) => break s,
                Err(e) => {
                    attempt += 1;
                    let wait = reconnect_delay(attempt, self.connection.reconnect_max);
                    log::warn!(
                        "nats commands cannot subscribe, retrying: subject={} retry_in_ms={} error=\"{e}\"",
                        self.template.filter,
                        wait.as_millis()
                    );
                    self.stats.set_error(Some(e.to_string()));
                    tokio::select! {
                        _ = tokio::time::sleep(wait) => {},
                        _ = shutdown.wait() => return,
                    }
                }
            }
        };
        log::info!(
            "nats commands subscribed: subject={} connection={}",
            self.template.filter,
            self.connection.name
        );
        self.stats.set_error(None);
        let mut running = JoinSet::new();
        let mut tick = tokio::time::interval(std::time::Duration::from_secs(1));
        loop {
            while running.try_join_next().is_some() {}
            tokio::select! {
                m = subscriber.next() => match m {
                    Some(m) => self.receive(&client, &commands, &engine, m, &mut running),
                    None => break,
                },
                _ = tick.tick() => {
                    let up = client.connection_state() == State::Connected;
                    self.stats.connected.store(up, Ordering::Relaxed);
                },
                _ = shutdown.wait() => break,
            }
        }
        self.stats.connected.store(false, Ordering::Relaxed);
        // Stop taking commands: what is already on its way is answered, not run.
        let _ = subscriber.drain().await;
        let stop = async {
            while let Some(m) = subscriber.next().await {
                self.stats.received.fetch_add(1, Ordering::Relaxed);
                let answer = busy(&self.stats, &m.subject, "the connector is stopping");
                reply(&client, &self.stats, m.reply.as_deref(), &answer).await;
            }
        };
        let _ = tokio::time::timeout(FLUSH_AT_SHUTDOWN, stop).await;
        while running.join_next().await.is_some() {}
        let _ = tokio::time::timeout(FLUSH_AT_SHUTDOWN, client.flush()).await;
    }

    fn receive(
        self: &Arc<Self>,
        client: &async_nats::Client,
        commands: &Arc<Commands>,
        engine: &Arc<Engine>,
        m: async_nats::Message,
        running: &mut JoinSet<()>,
    ) {
        self.stats.received.fetch_add(1, Ordering::Relaxed);
        let client = client.clone();
        if running.len() >= MAX_IN_FLIGHT {
            let answer = busy(
                &self.stats,
                &m.subject,
                &format!("busy: {MAX_IN_FLIGHT} commands are running, try again"),
            );
            let stats = Arc::clone(self);
            running.spawn(async move {
                reply(&client, &stats.stats, m.reply.as_deref(), &answer).await;
            });
            return;
        }
        let (path, commands, engine) = (Arc::clone(self), Arc::clone(commands), Arc::clone(engine));
        running.spawn(async move {
            let subject = m.subject.to_string();
            let answer = match take(&commands, &path.template, &subject, &m.payload, &path.stats) {
                Err(not) => not.to_json(),
                Ok((device, request)) => {
                    let origin = Origin::Nats {
                        subject: subject.clone(),
                    };
                    match commands.execute(&engine, &device, request, origin).await {
                        Ok(outcome) => outcome.to_json(),
                        Err(e) => super::error(&e.to_string()),
                    }
                }
            };
            if m.reply.is_none() {
                let total = path.stats.no_reply.fetch_add(1, Ordering::Relaxed) + 1;
                log::info!(
                    "nats command without a reply subject, its outcome is only logged: subject={subject} ok={} no_reply_total={total}",
                    answer["ok"]
                );
            }
            reply(&client, &path.stats, m.reply.as_deref(), &answer).await;
        });
    }
}

/// Publishes `answer` to `to`, when the request has a reply subject.
async fn reply(client: &async_nats::Client, stats: &PathStats, to: Option<&str>, answer: &Value) {
    let Some(to) = to else {
        return;
    };
    match client
        .publish(to.to_string(), answer.to_string().into())
        .await
    {
        Ok(()) => {
            stats.answered.fetch_add(1, Ordering::Relaxed);
        }
        Err(e) => {
            let total = stats.answer_errors.fetch_add(1, Ordering::Relaxed) + 1;
            log::warn!(
                "nats command reply not sent: reply={to} error=\"{e}\" answer_errors_total={total}"
            );
        }
    }
}
