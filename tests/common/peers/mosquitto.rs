//! `mosquitto`, and [`MqttClient`], the small client the tests talk to it with.
//!
//! Persistence is in the broker's temp dir, so sessions and QoS 1 messages survive a restart
//! (after [`Mosquitto::stop`]: SIGTERM makes mosquitto save its file). Readiness is the port
//! accepting connections, polled with a deadline.

use std::fs;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

use tempfile::TempDir;

use super::process::{binary, user_name, PeerProcess};
use crate::common::free_port;

/// A `mosquitto` of its own, anonymous, on loopback.
pub struct Mosquitto {
    dir: TempDir,
    port: u16,
    process: PeerProcess,
}

impl Mosquitto {
    /// Starts a broker on a free loopback port with its persistence in a new temp dir.
    pub fn start() -> Mosquitto {
        let dir = tempfile::Builder::new()
            .prefix("opex-mqtt-")
            .tempdir()
            .expect("temp dir");
        let port = free_port();
        // Started as root, mosquitto drops to the user `mosquitto`, which cannot write the
        // persistence file into our temp dir: keep the user that runs the test.
        fs::write(
            dir.path().join("mosquitto.conf"),
            format!(
                "user {}\nlistener {port} 127.0.0.1\nallow_anonymous true\npersistence true\npersistence_location {}/\nautosave_interval 1\nmax_queued_messages 100000\nlog_dest stderr\n",
                user_name(),
                dir.path().display()
            ),
        )
        .expect("write mosquitto.conf");
        let process = PeerProcess::new("mosquitto", dir.path().join("mosquitto.log"));
        let mut broker = Mosquitto { dir, port, process };
        broker.launch();
        broker
    }

    /// `mqtt://127.0.0.1:<port>`.
    pub fn url(&self) -> String {
        format!("mqtt://127.0.0.1:{}", self.port)
    }

    /// The port.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// The temp dir (config, log, persistence file).
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// SIGTERM: mosquitto saves its persistence file and exits.
    pub fn stop(&mut self) {
        self.process.stop();
    }

    /// SIGKILL: what was not autosaved is gone.
    pub fn kill9(&mut self) {
        self.process.kill9();
    }

    /// Starts again on the same port and persistence (after [`Mosquitto::stop`] or
    /// [`Mosquitto::kill9`]); returns once it listens.
    pub fn restart(&mut self) {
        self.launch();
    }

    fn launch(&mut self) {
        let conf = self.dir.path().join("mosquitto.conf");
        self.process
            .spawn(Command::new(binary("mosquitto")).arg("-c").arg(conf));
        self.process.wait_for_port(self.port);
    }
}

/// Topic and payload of each message a test client received.
type Inbox = std::sync::Arc<std::sync::Mutex<Vec<(String, Vec<u8>)>>>;

/// An MQTT test client (rumqttc on its own runtime) that keeps what it receives and
/// reconnects after a broker restart.
pub struct MqttClient {
    pub rt: tokio::runtime::Runtime,
    pub client: rumqttc::AsyncClient,
    received: Inbox,
}

impl MqttClient {
    /// Connects as `id` (`clean_session: false`), subscribing to `filter` at QoS 1 if given.
    pub fn connect(port: u16, id: &str, filter: Option<&str>) -> MqttClient {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .expect("runtime");
        let mut opts = rumqttc::MqttOptions::new(id, "127.0.0.1", port);
        opts.set_clean_session(false)
            .set_keep_alive(Duration::from_secs(5))
            .set_inflight(1000);
        let (client, mut eventloop) = rumqttc::AsyncClient::new(opts, 100_000);
        let received: Inbox = Default::default();
        let (ready_tx, ready_rx) = std::sync::mpsc::channel();
        {
            let received = received.clone();
            let client = client.clone();
            let filter = filter.map(str::to_string);
            rt.spawn(async move {
                loop {
                    match eventloop.poll().await {
                        Ok(rumqttc::Event::Incoming(rumqttc::Packet::ConnAck(_))) => {
                            if let Some(f) = &filter {
                                let _ =
                                    client.subscribe(f.clone(), rumqttc::QoS::AtLeastOnce).await;
                            } else {
                                let _ = ready_tx.send(());
                            }
                        }
                        Ok(rumqttc::Event::Incoming(rumqttc::Packet::SubAck(_))) => {
                            let _ = ready_tx.send(());
                        }
                        Ok(rumqttc::Event::Incoming(rumqttc::Packet::Publish(p))) => {
                            received
                                .lock()
                                .unwrap()
                                .push((p.topic.clone(), p.payload.to_vec()));
                        }
                        Ok(_) => {}
                        Err(_) => tokio::time::sleep(Duration::from_millis(100)).await,
                    }
                }
            });
        }
        ready_rx
            .recv_timeout(Duration::from_secs(20))
            .expect("mqtt test client connected");
        MqttClient {
            rt,
            client,
            received,
        }
    }

    /// Publishes at QoS 1 (queued in the client; it reconnects on its own).
    pub fn publish(&self, topic: &str, payload: &[u8]) {
        self.rt
            .block_on(self.client.publish(
                topic,
                rumqttc::QoS::AtLeastOnce,
                false,
                payload.to_vec(),
            ))
            .expect("queue publish");
    }

    /// Everything received so far, in order.
    pub fn received(&self) -> Vec<(String, Vec<u8>)> {
        self.received.lock().unwrap().clone()
    }
}
