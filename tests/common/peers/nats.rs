//! `nats-server` with JetStream, and [`Js`], the small client the tests talk to it with.
//!
//! The store is in the server's temp dir with every write synced ([`JsSync::EveryWrite`]),
//! so a SIGKILL loses nothing the server acknowledged. Readiness is the monitoring port's
//! `/healthz` (JetStream up and its streams recovered), polled with a deadline; a restart
//! keeps the client port, the monitoring port and the store.

use std::fs;
use std::path::Path;
use std::process::Command;
use std::thread;
use std::time::{Duration, Instant};

use serde_json::Value;
use tempfile::TempDir;

use super::process::{binary, PeerProcess, PEER_START_DEADLINE};
use crate::common::free_ports;

/// How a server's JetStream store reaches the disk.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum JsSync {
    /// Every write synced before the server answers (`sync_interval: always`): the tests'.
    EveryWrite,
    /// JetStream's default: written at once, synced every two minutes; in a cluster the other
    /// replicas are what keeps an answered write. For benchmarks that want a cluster's rate.
    Default,
}

/// A `nats-server -js` of its own: one node, or one node of a [`super::NatsCluster`].
pub struct NatsServer {
    dir: TempDir,
    name: String,
    port: u16,
    monitor_port: u16,
    /// What readiness asks the monitoring port: a lone server must be healthy; a cluster
    /// node only needs JetStream on, the cluster waits for the meta leader.
    health: &'static str,
    http: ureq::Agent,
    process: PeerProcess,
}

impl NatsServer {
    /// Starts a server on a free loopback port (and a free monitoring port) with its store in
    /// a new temp dir; returns once `/healthz` answers ok.
    pub fn start() -> NatsServer {
        NatsServer::start_with("")
    }

    /// Like [`NatsServer::start`], with `extra` lines in its config (`max_payload: 4096`).
    pub fn start_with(extra: &str) -> NatsServer {
        let ports = free_ports(2);
        let mut server = NatsServer::configure(
            "nats",
            ports[0],
            ports[1],
            JsSync::EveryWrite,
            extra,
            "/healthz",
        );
        server.spawn();
        server.wait_ready();
        server
    }

    /// Writes the config of server `name` (client `port`, `monitor_port`, its store's `sync`,
    /// `extra` config lines) in a new temp dir; nothing runs yet.
    pub(super) fn configure(
        name: &str,
        port: u16,
        monitor_port: u16,
        sync: JsSync,
        extra: &str,
        health: &'static str,
    ) -> NatsServer {
        let dir = tempfile::Builder::new()
            .prefix(&format!("opex-{name}-"))
            .tempdir()
            .expect("temp dir");
        fs::write(
            dir.path().join("nats.conf"),
            format!(
                "server_name: {name}\nlisten: 127.0.0.1:{port}\nhttp: 127.0.0.1:{monitor_port}\n\
                 jetstream {{ store_dir: {:?}{} }}\n{extra}",
                dir.path().join("js"),
                match sync {
                    JsSync::EveryWrite => ", sync_interval: always",
                    JsSync::Default => "",
                }
            ),
        )
        .expect("write nats.conf");
        let process = PeerProcess::new(name, dir.path().join("nats.log"));
        let http = ureq::Agent::config_builder()
            .timeout_global(Some(Duration::from_secs(5)))
            .http_status_as_error(false)
            .build()
            .into();
        NatsServer {
            dir,
            name: name.to_string(),
            port,
            monitor_port,
            health,
            http,
            process,
        }
    }

    /// Spawns the server on its config; readiness is [`NatsServer::wait_ready`].
    pub(super) fn spawn(&mut self) {
        let conf = self.dir.path().join("nats.conf");
        self.process
            .spawn(Command::new(binary("nats-server")).arg("-c").arg(conf));
    }

    /// Polls the monitoring port until its health check answers ok.
    pub(super) fn wait_ready(&mut self) {
        let url = format!("http://127.0.0.1:{}{}", self.monitor_port, self.health);
        let http = self.http.clone();
        self.process.wait_ready(&format!("healthy ({url})"), || {
            http.get(&url).call().is_ok_and(|r| r.status() == 200)
        });
    }

    /// `nats://127.0.0.1:<port>`.
    pub fn url(&self) -> String {
        format!("nats://127.0.0.1:{}", self.port)
    }

    /// The client port.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// The `server_name` in its config.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The temp dir (config, log, and the JetStream store under `js/`).
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// A monitoring endpoint's JSON (`/jsz`, `/varz`...); `None` while it does not answer.
    pub fn monitor(&self, path: &str) -> Option<Value> {
        let mut reply = self
            .http
            .get(format!("http://127.0.0.1:{}{path}", self.monitor_port))
            .call()
            .ok()?;
        if reply.status() != 200 {
            return None;
        }
        serde_json::from_str(&reply.body_mut().read_to_string().ok()?).ok()
    }

    /// Whether it was started and not stopped or killed since.
    pub fn is_started(&self) -> bool {
        self.process.is_started()
    }

    /// SIGTERM: the server shuts down cleanly.
    pub fn stop(&mut self) {
        self.process.stop();
    }

    /// SIGKILL: no chance to flush anything.
    pub fn kill9(&mut self) {
        self.process.kill9();
    }

    /// SIGSTOP: the server keeps its connections open and answers nothing (no ack), until
    /// [`NatsServer::thaw`].
    pub fn freeze(&self) {
        self.process.signal("STOP");
    }

    /// SIGCONT after [`NatsServer::freeze`]: the server answers what it was sent meanwhile.
    pub fn thaw(&self) {
        self.process.signal("CONT");
    }

    /// Starts again on the same ports and store (after [`NatsServer::stop`] or
    /// [`NatsServer::kill9`]); returns once it is ready again.
    pub fn restart(&mut self) {
        self.spawn();
        self.wait_ready();
    }
}

/// A small NATS / JetStream client for the tests (async-nats on its own runtime).
pub struct Js {
    pub rt: tokio::runtime::Runtime,
    pub client: async_nats::Client,
    pub js: async_nats::jetstream::Context,
}

impl Js {
    /// Connects to the server at `url`, reconnecting forever (it may be restarted).
    pub fn connect(url: &str) -> Js {
        Js::connect_to(url)
    }

    /// Connects to any of a cluster's `urls` (see [`super::NatsCluster::urls`]), reconnecting
    /// forever.
    pub fn connect_cluster(urls: &[String]) -> Js {
        Js::connect_to(urls)
    }

    fn connect_to(servers: impl async_nats::ToServerAddrs) -> Js {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .expect("runtime");
        let client = rt
            .block_on(
                async_nats::ConnectOptions::new()
                    .max_reconnects(None)
                    .reconnect_delay_callback(|_| Duration::from_millis(100))
                    .connect(servers),
            )
            .expect("connect to nats-server");
        let js = {
            let _in_runtime = rt.enter();
            async_nats::jetstream::new(client.clone())
        };
        Js { rt, client, js }
    }

    /// Creates stream `name` on `subjects` (one replica).
    pub fn create_stream(&self, name: &str, subjects: &[&str]) {
        self.create_replicated_stream(name, subjects, 1);
    }

    /// Creates stream `name` on `subjects` with `replicas` copies (a cluster's). A cluster
    /// whose nodes agree on a meta leader may not yet have told it that every peer is online
    /// ("no suitable peers for placement"): that answer is asked again until the peers'
    /// start deadline.
    pub fn create_replicated_stream(&self, name: &str, subjects: &[&str], replicas: usize) {
        let config = async_nats::jetstream::stream::Config {
            name: name.to_string(),
            subjects: subjects.iter().map(|s| s.to_string()).collect(),
            num_replicas: replicas,
            ..Default::default()
        };
        let deadline = Instant::now() + PEER_START_DEADLINE;
        loop {
            match self.rt.block_on(self.js.create_stream(config.clone())) {
                Ok(_) => return,
                Err(e)
                    if Instant::now() < deadline && e.to_string().contains("no suitable peers") =>
                {
                    thread::sleep(Duration::from_millis(50));
                }
                Err(e) => panic!("create stream {name}: {e}"),
            }
        }
    }

    /// Publishes and waits for the stream's ack, retrying (the server may be restarting).
    pub fn publish(&self, subject: &str, payload: Vec<u8>) {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let result = self.rt.block_on(async {
                let ack = self
                    .js
                    .publish(subject.to_string(), payload.clone().into())
                    .await?;
                ack.await.map(|_| ()).map_err(async_nats::Error::from)
            });
            match result {
                Ok(()) => return,
                Err(e) if Instant::now() < deadline => {
                    eprintln!("publish {subject}: {e}; retrying");
                    thread::sleep(Duration::from_millis(50));
                }
                Err(e) => panic!("publish {subject}: {e}"),
            }
        }
    }

    /// (num_pending, num_ack_pending, ack_floor stream sequence) of a consumer.
    pub fn consumer(&self, stream: &str, durable: &str) -> (u64, u64, u64) {
        self.rt.block_on(async {
            let s = self.js.get_stream(stream).await.expect("stream");
            let mut c: async_nats::jetstream::consumer::Consumer<
                async_nats::jetstream::consumer::pull::Config,
            > = s.get_consumer(durable).await.expect("consumer");
            let info = c.info().await.expect("consumer info");
            (
                info.num_pending,
                info.num_ack_pending as u64,
                info.ack_floor.stream_sequence,
            )
        })
    }

    /// Messages in a stream and its last sequence.
    pub fn stream_state(&self, stream: &str) -> (u64, u64) {
        self.try_stream_state(stream)
            .unwrap_or_else(|e| panic!("stream {stream}: {e}"))
    }

    /// The server name of a replicated stream's leader; `None` while it has none (or the
    /// request fails: a cluster may be electing one).
    pub fn stream_leader(&self, stream: &str) -> Option<String> {
        self.rt.block_on(async {
            let mut s = self.js.get_stream(stream).await.ok()?;
            s.info().await.ok()?.cluster.clone()?.leader
        })
    }

    /// Every message of `stream`, in order: its sequence, its `Nats-Msg-Id` header and its
    /// payload. Read through an ephemeral consumer that acks nothing; panics unless it gets
    /// them all within the poll deadline.
    pub fn stream_messages(&self, stream: &str) -> Vec<StoredMessage> {
        use async_nats::jetstream::consumer::{pull, AckPolicy, DeliverPolicy};
        use futures_util::StreamExt;
        let (count, _) = self.stream_state(stream);
        self.rt.block_on(async {
            let s = self.js.get_stream(stream).await.expect("stream");
            let consumer = s
                .create_consumer(pull::Config {
                    ack_policy: AckPolicy::None,
                    deliver_policy: DeliverPolicy::All,
                    inactive_threshold: Duration::from_secs(60),
                    ..Default::default()
                })
                .await
                .expect("ephemeral consumer");
            let mut messages = consumer.messages().await.expect("pull");
            let mut out = Vec::with_capacity(count as usize);
            let read = async {
                while (out.len() as u64) < count {
                    let msg = messages
                        .next()
                        .await
                        .expect("the message stream ended")
                        .expect("message");
                    let info = msg.info().expect("a JetStream message");
                    out.push(StoredMessage {
                        seq: info.stream_sequence,
                        msg_id: msg
                            .headers
                            .as_ref()
                            .and_then(|h| h.get("Nats-Msg-Id"))
                            .map(|v| v.as_str().to_string()),
                        payload: msg.payload.to_vec(),
                    });
                }
            };
            tokio::time::timeout(Duration::from_secs(60), read)
                .await
                .unwrap_or_else(|_| panic!("read fewer than {count} messages of {stream}"));
            out
        })
    }

    /// Like [`Js::stream_state`], or the error (a cluster may be electing a leader).
    pub fn try_stream_state(&self, stream: &str) -> Result<(u64, u64), async_nats::Error> {
        self.rt.block_on(async {
            let mut s = self.js.get_stream(stream).await?;
            let info = s.info().await?;
            Ok((info.state.messages, info.state.last_sequence))
        })
    }
}

/// One message as a stream stores it.
#[derive(Debug, Clone)]
pub struct StoredMessage {
    /// Its stream sequence.
    pub seq: u64,
    /// Its `Nats-Msg-Id` header, the key of the stream's duplicate window.
    pub msg_id: Option<String>,
    /// Its payload.
    pub payload: Vec<u8>,
}
