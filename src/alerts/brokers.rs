//! The MQTT and NATS alert channels: each alert published as its JSON.
//!
//! MQTT: QoS 1 on `<client_id>-alerts` with `clean_session: false`, so an alert queued while
//! the broker is away is sent once it is back; `sent_total` counts the broker's acks. The
//! client queue holds [`MQTT_QUEUE`] publishes: beyond it an alert is counted `failed`.
//!
//! NATS: a core publish followed by a flush (the server's answer), within [`NATS_TIMEOUT`].
//! Until the first connection alerts wait in the channel's queue.

use std::sync::Arc;
use std::time::Duration;

use rumqttc::{AsyncClient, Event, Incoming, QoS};
use tokio::sync::mpsc;

use super::alert::Alert;
use super::channels::ChannelStats;
use crate::brokers::mqtt::MqttConnectionConfig;
use crate::brokers::mqtt::{options, reconnect_delay};
use crate::brokers::nats::NatsConnectionConfig;
use crate::shutdown::Shutdown;

/// Publishes the MQTT client holds while it is not connected.
pub const MQTT_QUEUE: usize = 64;
/// Most time one NATS publish and its flush may take.
pub const NATS_TIMEOUT: Duration = Duration::from_secs(10);

/// Takes the next alert, or `None` on shutdown or when the hub is gone.
async fn next(rx: &mut mpsc::Receiver<Alert>, shutdown: &Shutdown) -> Option<Alert> {
    tokio::select! {
        a = rx.recv() => a,
        _ = shutdown.wait() => None,
    }
}

/// The MQTT channel's worker.
pub async fn mqtt(
    conn: MqttConnectionConfig,
    topic: String,
    mut rx: mpsc::Receiver<Alert>,
    stats: Arc<ChannelStats>,
    shutdown: Shutdown,
) {
    let opts = match options(&conn, "alerts") {
        Ok(o) => o,
        Err(e) => {
            // A TLS file that cannot be read: every alert fails with the reason.
            while next(&mut rx, &shutdown).await.is_some() {
                stats.failed("mqtt", &e);
            }
            return;
        }
    };
    let (client, mut eventloop) = AsyncClient::new(opts, MQTT_QUEUE);
    let driver = {
        let stats = Arc::clone(&stats);
        let shutdown = shutdown.clone();
        tokio::spawn(async move {
            let mut failures = 0u32;
            loop {
                let event = tokio::select! {
                    e = eventloop.poll() => e,
                    _ = shutdown.wait() => return,
                };
                match event {
                    Ok(Event::Incoming(Incoming::PubAck(_))) => stats.sent(),
                    Ok(Event::Incoming(Incoming::ConnAck(_))) => {
                        if failures > 0 {
                            log::info!("alert channel connected: channel=mqtt");
                        }
                        failures = 0;
                    }
                    Ok(_) => {}
                    Err(e) => {
                        failures += 1;
                        let wait = reconnect_delay(failures, conn.reconnect_max);
                        stats.set_error(&e.to_string());
                        if failures == 1 || failures.is_power_of_two() {
                            log::warn!(
                                "alert channel cannot reach its broker: channel=mqtt attempt={failures} retry_in_ms={} error=\"{e}\"",
                                wait.as_millis()
                            );
                        }
                        tokio::select! {
                            _ = tokio::time::sleep(wait) => {},
                            _ = shutdown.wait() => return,
                        }
                    }
                }
            }
        })
    };
    while let Some(alert) = next(&mut rx, &shutdown).await {
        if let Err(e) = client.try_publish(topic.clone(), QoS::AtLeastOnce, false, alert.to_json())
        {
            stats.failed("mqtt", &format!("client queue full: {e}"));
        }
    }
    let _ = driver.await;
}

/// The NATS channel's worker.
pub async fn nats(
    conn: NatsConnectionConfig,
    subject: String,
    mut rx: mpsc::Receiver<Alert>,
    stats: Arc<ChannelStats>,
    shutdown: Shutdown,
) {
    let Some(client) =
        crate::brokers::nats::connect(&conn, "opex-connector alerts", &shutdown).await
    else {
        return;
    };
    while let Some(alert) = next(&mut rx, &shutdown).await {
        let publish = async {
            client
                .publish(subject.clone(), alert.to_json().into())
                .await
                .map_err(|e| e.to_string())?;
            client.flush().await.map_err(|e| e.to_string())
        };
        match tokio::time::timeout(NATS_TIMEOUT, publish).await {
            Ok(Ok(())) => stats.sent(),
            Ok(Err(e)) => stats.failed("nats", &e),
            Err(_) => stats.failed("nats", "publish timed out"),
        }
    }
}
