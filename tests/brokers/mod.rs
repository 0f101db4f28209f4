//! Real brokers for the messaging tests: `nats-server -js` and `mosquitto`, each in its own
//! temp dir on a free loopback port, stopped on drop. A missing binary fails the test with a
//! clear message (`scripts/test.sh` installs both).
#![allow(dead_code)]

use std::fs;
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::thread;
use std::time::{Duration, Instant};

use tempfile::TempDir;

/// Finds `name` on PATH or in the usual sbin folders; panics with what to do.
pub fn binary(name: &str) -> PathBuf {
    let path = std::env::var("PATH").unwrap_or_default();
    let dirs = path
        .split(':')
        .map(PathBuf::from)
        .chain(["/usr/sbin", "/usr/local/sbin", "/usr/local/bin", "/usr/bin"].map(PathBuf::from));
    for dir in dirs {
        let candidate = dir.join(name);
        if candidate.is_file() {
            return candidate;
        }
    }
    panic!("{name} is not installed: run scripts/test.sh, which installs the test peers (NEEDED_PEERS)");
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .expect("bind a free port")
        .local_addr()
        .expect("local addr")
        .port()
}

fn wait_for_port(port: u16, child: &mut Child, log: &Path, what: &str) {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        if TcpStream::connect(("127.0.0.1", port)).is_ok() {
            return;
        }
        if let Ok(Some(status)) = child.try_wait() {
            panic!(
                "{what} exited ({status}) before listening:\n{}",
                fs::read_to_string(log).unwrap_or_default()
            );
        }
        assert!(
            Instant::now() < deadline,
            "{what} did not listen on {port} within 20 s:\n{}",
            fs::read_to_string(log).unwrap_or_default()
        );
        thread::sleep(Duration::from_millis(20));
    }
}

fn stop(child: &mut Option<Child>, graceful: bool) {
    if let Some(mut c) = child.take() {
        if graceful {
            let _ = Command::new("kill")
                .arg("-TERM")
                .arg(c.id().to_string())
                .status();
            let deadline = Instant::now() + Duration::from_secs(10);
            while Instant::now() < deadline {
                if let Ok(Some(_)) = c.try_wait() {
                    return;
                }
                thread::sleep(Duration::from_millis(20));
            }
        }
        let _ = c.kill();
        let _ = c.wait();
    }
}

/// `nats-server -js` with its store in a temp dir; every write synced, so a SIGKILL loses
/// nothing the server acknowledged.
pub struct NatsServer {
    dir: TempDir,
    port: u16,
    child: Option<Child>,
}

impl NatsServer {
    pub fn start() -> NatsServer {
        let dir = tempfile::Builder::new()
            .prefix("opex-nats-")
            .tempdir()
            .expect("temp dir");
        let mut server = NatsServer {
            dir,
            port: free_port(),
            child: None,
        };
        server.spawn();
        server
    }

    fn spawn(&mut self) {
        let conf = self.dir.path().join("nats.conf");
        fs::write(
            &conf,
            format!(
                "listen: 127.0.0.1:{}\njetstream {{ store_dir: {:?}, sync_interval: always }}\n",
                self.port,
                self.dir.path().join("js")
            ),
        )
        .expect("write nats.conf");
        let log = self.dir.path().join("nats.log");
        let out = fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&log)
            .expect("log");
        let mut child = Command::new(binary("nats-server"))
            .arg("-c")
            .arg(&conf)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(out)
            .spawn()
            .expect("spawn nats-server");
        wait_for_port(self.port, &mut child, &log, "nats-server");
        self.child = Some(child);
    }

    pub fn url(&self) -> String {
        format!("nats://127.0.0.1:{}", self.port)
    }

    /// SIGKILL: no chance to flush anything.
    pub fn kill9(&mut self) {
        stop(&mut self.child, false);
    }

    /// Starts again on the same port and store.
    pub fn restart(&mut self) {
        assert!(self.child.is_none(), "nats-server is running");
        self.spawn();
    }
}

impl Drop for NatsServer {
    fn drop(&mut self) {
        stop(&mut self.child, false);
        if thread::panicking() {
            let log = fs::read_to_string(self.dir.path().join("nats.log")).unwrap_or_default();
            let tail: Vec<&str> = log.lines().rev().take(40).collect();
            eprintln!(
                "nats-server log (last lines):\n{}",
                tail.into_iter().rev().collect::<Vec<_>>().join("\n")
            );
        }
    }
}

/// `mosquitto` with persistence in a temp dir, so sessions and QoS 1 messages survive a
/// restart.
pub struct Mosquitto {
    dir: TempDir,
    port: u16,
    child: Option<Child>,
}

impl Mosquitto {
    pub fn start() -> Mosquitto {
        let dir = tempfile::Builder::new()
            .prefix("opex-mqtt-")
            .tempdir()
            .expect("temp dir");
        let mut broker = Mosquitto {
            dir,
            port: free_port(),
            child: None,
        };
        broker.spawn();
        broker
    }

    fn spawn(&mut self) {
        let conf = self.dir.path().join("mosquitto.conf");
        // Started as root, mosquitto drops to the user `mosquitto`, which cannot write the
        // persistence file into our temp dir: keep the user that runs the test.
        let user = Command::new("id")
            .arg("-un")
            .output()
            .ok()
            .and_then(|o| String::from_utf8(o.stdout).ok())
            .map(|u| u.trim().to_string())
            .filter(|u| !u.is_empty())
            .unwrap_or_else(|| "root".into());
        fs::write(
            &conf,
            format!(
                "user {}\nlistener {} 127.0.0.1\nallow_anonymous true\npersistence true\npersistence_location {}/\nautosave_interval 1\nmax_queued_messages 100000\nlog_dest stderr\n",
                user,
                self.port,
                self.dir.path().display()
            ),
        )
        .expect("write mosquitto.conf");
        let log = self.dir.path().join("mosquitto.log");
        let out = fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&log)
            .expect("log");
        let mut child = Command::new(binary("mosquitto"))
            .arg("-c")
            .arg(&conf)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(out)
            .spawn()
            .expect("spawn mosquitto");
        wait_for_port(self.port, &mut child, &log, "mosquitto");
        self.child = Some(child);
    }

    pub fn url(&self) -> String {
        format!("mqtt://127.0.0.1:{}", self.port)
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    /// SIGTERM: mosquitto saves its persistence file and exits.
    pub fn stop(&mut self) {
        stop(&mut self.child, true);
    }

    /// Starts again on the same port and persistence.
    pub fn restart(&mut self) {
        assert!(self.child.is_none(), "mosquitto is running");
        self.spawn();
    }
}

impl Drop for Mosquitto {
    fn drop(&mut self) {
        stop(&mut self.child, false);
        if thread::panicking() {
            let log = fs::read_to_string(self.dir.path().join("mosquitto.log")).unwrap_or_default();
            let tail: Vec<&str> = log.lines().rev().take(60).collect();
            eprintln!(
                "mosquitto log (last lines):\n{}",
                tail.into_iter().rev().collect::<Vec<_>>().join("\n")
            );
        }
    }
}

/// A small NATS / JetStream client for the tests (async-nats on its own runtime).
pub struct Js {
    pub rt: tokio::runtime::Runtime,
    pub client: async_nats::Client,
    pub js: async_nats::jetstream::Context,
}

impl Js {
    pub fn connect(url: &str) -> Js {
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
                    .connect(url),
            )
            .expect("connect to nats-server");
        let js = {
            let _in_runtime = rt.enter();
            async_nats::jetstream::new(client.clone())
        };
        Js { rt, client, js }
    }

    pub fn create_stream(&self, name: &str, subjects: &[&str]) {
        self.rt
            .block_on(
                self.js
                    .create_stream(async_nats::jetstream::stream::Config {
                        name: name.to_string(),
                        subjects: subjects.iter().map(|s| s.to_string()).collect(),
                        ..Default::default()
                    }),
            )
            .expect("create stream");
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
        self.rt.block_on(async {
            let mut s = self.js.get_stream(stream).await.expect("stream");
            let info = s.info().await.expect("stream info");
            (info.state.messages, info.state.last_sequence)
        })
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

    pub fn received(&self) -> Vec<(String, Vec<u8>)> {
        self.received.lock().unwrap().clone()
    }
}
