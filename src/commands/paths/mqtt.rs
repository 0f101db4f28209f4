//! Commands over MQTT: a message on `commands.mqtt.topic` (default `opex/cmd/{device}`,
//! subscribed as `opex/cmd/+`, QoS 1) is a command for the device its topic names. The
//! result (`Outcome::to_json`, or `{"ok":false,"error":..}`) is published with QoS 1 to the
//! request's MQTT 5 response topic with its correlation data when it has one, else to
//! `<topic>/result`.
//!
//! The shared MQTT connections speak 3.1.1 (rumqttc's v4 client); response topics and
//! correlation data are MQTT 5, so this path opens its own MQTT 5 client on the configured
//! connection (`<client_id>-commands`, `brokers::mqtt::options_v5`). Its choices, all for
//! "at most once, never late":
//! - **Clean start, no session kept.** A broker holds a persistent session's QoS 1
//!   messages while the client is away and delivers them when it is back, however old. A
//!   command must not run late, so the connector takes only commands published while it
//!   is connected; one sent while it is away gets no result, and its sender tries again.
//! - **Acked on receipt**, before it runs: the broker never sends it again because the run
//!   took long.
//! - **A repeated id is not written again**: a redelivery (`DUP`) or a sender's retry with
//!   the same `id` gets the first outcome (the commands service remembers recent ids).
//! - **Never a retained command**: the subscription asks for no retained messages, and one
//!   delivered as retained anyway is ignored (counted in `retained`).
//! - A message expiry interval shorter than the command's `expires_ms` shortens it.
//! - No-local subscription: the connector never takes its own results as commands.
//!
//! MQTT does not tell a subscriber who published, so a command's origin names the topic and
//! the connector's own client id that took it.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use rumqttc::v5::mqttbytes::v5::{Filter, Packet, Publish, PublishProperties, RetainForwardRule};
use rumqttc::v5::mqttbytes::QoS;
use rumqttc::v5::{AsyncClient, Event, EventLoop};
use serde_json::Value;
use tokio::task::JoinSet;

use super::{busy, take, PathStats, Template, FLUSH_AT_SHUTDOWN, MAX_IN_FLIGHT};
use crate::brokers::mqtt::{options_v5, reconnect_delay, MqttConnectionConfig, CLIENT_QUEUE};
use crate::commands::{Commands, Origin};
use crate::engine::Engine;
use crate::shutdown::Shutdown;

/// Longest a result waits for room in the client's queue.
const SEND_TIMEOUT: Duration = Duration::from_secs(5);

/// The MQTT path.
pub struct MqttCommands {
    connection: MqttConnectionConfig,
    template: Template,
    /// Its counters.
    pub stats: PathStats,
    /// Results handed to the client, and those the broker acknowledged (for the flush at
    /// shutdown).
    sent: AtomicU64,
    acked: AtomicU64,
}

/// Where a message's result goes.
struct ReplyTo {
    topic: String,
    correlation: Option<Bytes>,
}

impl MqttCommands {
    /// The path on `connection`, for the topic template `topic`.
    pub fn new(connection: MqttConnectionConfig, topic: &str) -> Self {
        Self {
            connection,
            template: Template::new(topic, '/', "+"),
            stats: PathStats::default(),
            sent: AtomicU64::new(0),
            acked: AtomicU64::new(0),
        }
    }

    /// `commands.mqtt` of `/api/status`.
    pub fn status(&self) -> Value {
        self.stats
            .to_json(&self.connection.name, &self.template.filter)
    }

    fn filter(&self) -> Filter {
        let mut f = Filter::new(self.template.filter.clone(), QoS::AtLeastOnce);
        f.nolocal = true;
        f.retain_forward_rule = RetainForwardRule::Never;
        f
    }

    /// Takes commands until shutdown, then lets the running ones finish and sends their
    /// results.
    pub async fn run(
        self: Arc<Self>,
        commands: Arc<Commands>,
        engine: Arc<Engine>,
        shutdown: Shutdown,
    ) {
        let opts = match options_v5(&self.connection, "commands") {
            Ok(o) => o,
            Err(e) => {
                log::error!(
                    "mqtt commands cannot start: connection={} error=\"{e}\"",
                    self.connection.name
                );
                self.stats.set_error(Some(e));
                return;
            }
        };
        let client_id = opts.client_id();
        let (client, mut eventloop) = AsyncClient::new(opts, CLIENT_QUEUE);
        let mut running = JoinSet::new();
        let mut failures = 0u32;
        loop {
            while running.try_join_next().is_some() {}
            let event = tokio::select! {
                e = eventloop.poll() => e,
                _ = shutdown.wait() => break,
            };
            match event {
                Ok(Event::Incoming(Packet::ConnAck(_))) => {
                    failures = 0;
                    self.stats.set_error(None);
                    if let Err(e) = client.try_subscribe_many(vec![self.filter()]) {
                        log::error!(
                            "mqtt commands cannot subscribe: topic={} error=\"{e}\"",
                            self.template.filter
                        );
                        self.stats.set_error(Some(e.to_string()));
                    }
                }
                Ok(Event::Incoming(Packet::SubAck(_))) => {
                    self.stats.connected.store(true, Ordering::Relaxed);
                    log::info!(
                        "mqtt commands subscribed: topic={} client={client_id}",
                        self.template.filter
                    );
                }
                Ok(Event::Incoming(Packet::Publish(p))) => {
                    self.receive(
                        &client,
                        &client_id,
                        &commands,
                        &engine,
                        p,
                        &mut running,
                        None,
                    );
                }
                Ok(Event::Incoming(Packet::PubAck(_))) => {
                    self.acked.fetch_add(1, Ordering::Relaxed);
                }
                Ok(_) => {}
                Err(e) => {
                    failures += 1;
                    self.stats.connected.store(false, Ordering::Relaxed);
                    let wait = reconnect_delay(failures, self.connection.reconnect_max);
                    if failures == 1 || failures.is_power_of_two() {
                        log::warn!(
                            "mqtt commands disconnected, reconnecting: connection={} attempt={failures} retry_in_ms={} error=\"{e}\"",
                            self.connection.name,
                            wait.as_millis()
                        );
                    }
                    self.stats.set_error(Some(e.to_string()));
                    tokio::select! {
                        _ = tokio::time::sleep(wait) => {},
                        _ = shutdown.wait() => break,
                    }
                }
            }
        }
        self.stats.connected.store(false, Ordering::Relaxed);
        let _ = client.try_unsubscribe(self.template.filter.clone());
        // The running commands finish while the client keeps talking to the broker; a
        // command still arriving is answered that the connector is stopping.
        loop {
            tokio::select! {
                done = running.join_next() => if done.is_none() { break },
                e = eventloop.poll() => match e {
                    Ok(Event::Incoming(Packet::Publish(p))) => {
                        self.receive(&client, &client_id, &commands, &engine, p, &mut running, Some("the connector is stopping"));
                    }
                    Ok(Event::Incoming(Packet::PubAck(_))) => {
                        self.acked.fetch_add(1, Ordering::Relaxed);
                    }
                    Ok(_) => {}
                    Err(_) => tokio::time::sleep(Duration::from_millis(100)).await,
                },
            }
        }
        self.flush(&mut eventloop).await;
        let _ = client.try_disconnect();
        let _ = tokio::time::timeout(Duration::from_secs(1), eventloop.poll()).await;
    }

    /// Drives the client until the broker acknowledged every result sent, for at most
    /// [`FLUSH_AT_SHUTDOWN`].
    async fn flush(&self, eventloop: &mut EventLoop) {
        let all_acked = async {
            while self.acked.load(Ordering::Relaxed) < self.sent.load(Ordering::Relaxed) {
                match eventloop.poll().await {
                    Ok(Event::Incoming(Packet::PubAck(_))) => {
                        self.acked.fetch_add(1, Ordering::Relaxed);
                    }
                    Ok(_) => {}
                    Err(_) => return,
                }
            }
        };
        let _ = tokio::time::timeout(FLUSH_AT_SHUTDOWN, all_acked).await;
    }

    /// Acks a message and runs it in a task of its own; `refuse` answers it with that reason
    /// instead.
    #[allow(clippy::too_many_arguments)] // One call site each in the loop and the drain.
    fn receive(
        self: &Arc<Self>,
        client: &AsyncClient,
        client_id: &str,
        commands: &Arc<Commands>,
        engine: &Arc<Engine>,
        p: Publish,
        running: &mut JoinSet<()>,
        refuse: Option<&str>,
    ) {
        self.stats.received.fetch_add(1, Ordering::Relaxed);
        if let Err(e) = client.try_ack(&p) {
            log::warn!("mqtt command ack not queued: error=\"{e}\"");
        }
        let topic = String::from_utf8_lossy(&p.topic).into_owned();
        if p.retain {
            let total = self.stats.retained.fetch_add(1, Ordering::Relaxed) + 1;
            log::warn!("mqtt retained command ignored, a retained command is never run: topic={topic} retained_total={total}");
            return;
        }
        let props = p.properties.unwrap_or_default();
        let to = ReplyTo {
            topic: props
                .response_topic
                .filter(|t| !t.is_empty())
                .unwrap_or_else(|| format!("{topic}/result")),
            correlation: props.correlation_data,
        };
        let client = client.clone();
        let path = Arc::clone(self);
        let refused = match refuse {
            Some(why) => Some(why.to_string()),
            None if running.len() >= MAX_IN_FLIGHT => Some(format!(
                "busy: {MAX_IN_FLIGHT} commands are running, try again"
            )),
            None => None,
        };
        if let Some(why) = refused {
            let answer = busy(&self.stats, &topic, &why);
            running.spawn(async move { path.send(&client, to, &answer).await });
            return;
        }
        let (commands, engine) = (Arc::clone(commands), Arc::clone(engine));
        let client_id = client_id.to_string();
        let expiry = props.message_expiry_interval;
        running.spawn(async move {
            let answer = match take(&commands, &path.template, &topic, &p.payload, &path.stats) {
                Err(not) => not.to_json(),
                Ok((device, mut request)) => {
                    if let Some(secs) = expiry {
                        let left = Duration::from_secs(u64::from(secs));
                        let asked = request.expires.unwrap_or(commands.config().expires);
                        request.expires = Some(asked.min(left).max(Duration::from_millis(1)));
                    }
                    let origin = Origin::Mqtt { topic, client_id };
                    match commands.execute(&engine, &device, request, origin).await {
                        Ok(outcome) => outcome.to_json(),
                        Err(e) => super::error(&e.to_string()),
                    }
                }
            };
            path.send(&client, to, &answer).await;
        });
    }

    /// Publishes a result with QoS 1.
    async fn send(&self, client: &AsyncClient, to: ReplyTo, answer: &Value) {
        let props = PublishProperties {
            correlation_data: to.correlation,
            content_type: Some("application/json".into()),
            payload_format_indicator: Some(1),
            ..Default::default()
        };
        let publish = client.publish_with_properties(
            to.topic.clone(),
            QoS::AtLeastOnce,
            false,
            answer.to_string(),
            props,
        );
        match tokio::time::timeout(SEND_TIMEOUT, publish).await {
            Ok(Ok(())) => {
                self.sent.fetch_add(1, Ordering::Relaxed);
                self.stats.answered.fetch_add(1, Ordering::Relaxed);
            }
            Ok(Err(e)) => self.send_failed(&to.topic, &e.to_string()),
            Err(_) => self.send_failed(&to.topic, "the client's queue stayed full"),
        }
    }

    fn send_failed(&self, topic: &str, e: &str) {
        let total = self.stats.answer_errors.fetch_add(1, Ordering::Relaxed) + 1;
        log::warn!(
            "mqtt command result not sent: topic={topic} error=\"{e}\" answer_errors_total={total}"
        );
    }
}
