//! The hub's run loop with paused time: checks on their interval, the 10-minute repeat of a
//! lasting `full`, recovery, and a growing loss counter; alerts read from an in-test channel.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::mpsc;
use tokio::time::{timeout, Instant};

use super::*;
use crate::admission::level::REPEAT_FULL;
use crate::shutdown::Shutdown;

/// The next alert within `within` of paused time, if any.
async fn next(rx: &mut mpsc::Receiver<Alert>, within: Duration) -> Option<Alert> {
    timeout(within, rx.recv()).await.ok().flatten()
}

#[tokio::test(start_paused = true)]
async fn a_queue_goes_ok_high_full_repeats_after_ten_minutes_then_recovers() {
    let used = Arc::new(AtomicU64::new(10));
    let blocked = Arc::new(AtomicU64::new(0));
    let (collector, mut rx) = ChannelHandle::new("collector");
    let mut hub = Hub::new("hall-2", Duration::from_secs(5), vec![collector]);
    let (u, b) = (Arc::clone(&used), Arc::clone(&blocked));
    hub.add_queue(Queue::new("push_queue", Arc::default(), move || {
        QueueReading {
            kind: QueueKind::Disk,
            on_full: "block",
            quota: 100,
            quota_unit: "bytes",
            used: u.load(Ordering::Relaxed),
            blocked_total: b.load(Ordering::Relaxed),
            evicted_total: 0,
            dropped_total: 0,
        }
    }));
    let lost = Arc::new(AtomicU64::new(3));
    let l = Arc::clone(&lost);
    hub.add_component(Component::new(
        "engine.backpressure_lost",
        "samples lost",
        move || vec![("backpressure_lost", l.load(Ordering::Relaxed))],
    ));
    let hub = Arc::new(hub);
    let shutdown = Shutdown::new();
    let task = tokio::spawn(Arc::clone(&hub).run(shutdown.clone()));

    // Below 80 %, and the component's start value is its baseline: nothing to say.
    assert_eq!(next(&mut rx, Duration::from_secs(30)).await, None);

    used.store(85, Ordering::Relaxed);
    let high = next(&mut rx, Duration::from_secs(6)).await.expect("high");
    assert_eq!((high.level, high.severity), ("high", "warning"));
    assert_eq!(high.message, "the destination is slow or down");
    assert_eq!(high.queue.as_deref(), Some("push_queue"));
    assert_eq!(high.connector, "hall-2");
    assert_eq!(high.fill_pct, Some(85.0));

    used.store(100, Ordering::Relaxed);
    blocked.store(4, Ordering::Relaxed);
    let full = next(&mut rx, Duration::from_secs(6)).await.expect("full");
    let full_at = Instant::now();
    assert_eq!((full.level, full.severity), ("full", "critical"));
    assert_eq!(full.message, "refusing new records");
    assert_eq!(full.counters["blocked_total"], 4);
    assert!(!full.repeat);
    assert_eq!(hub.open_alerts(), vec![full.clone()]);
    let json: serde_json::Value = serde_json::from_slice(&full.to_json()).unwrap();
    for key in [
        "connector",
        "queue",
        "level",
        "message",
        "fill_pct",
        "counters",
        "time",
        "repeat",
    ] {
        assert!(json.get(key).is_some(), "{key} missing in {json}");
    }

    // Still at the quota: quiet until ten minutes after the first full, then once again.
    assert_eq!(next(&mut rx, Duration::from_secs(590)).await, None);
    let again = next(&mut rx, Duration::from_secs(20))
        .await
        .expect("repeat");
    assert_eq!(again.level, "full");
    assert!(again.repeat);
    let waited = Instant::now() - full_at;
    assert!(
        waited >= REPEAT_FULL && waited < REPEAT_FULL + Duration::from_secs(6),
        "{waited:?}"
    );

    used.store(40, Ordering::Relaxed);
    let ok = next(&mut rx, Duration::from_secs(6)).await.expect("ok");
    assert_eq!((ok.level, ok.severity), ("ok", "info"));
    assert_eq!(ok.message, "back below 80 %");
    assert!(hub.open_alerts().is_empty());

    // A loss counter that grows is critical, then ok after a quiet minute.
    lost.fetch_add(2, Ordering::Relaxed);
    let critical = next(&mut rx, Duration::from_secs(6))
        .await
        .expect("critical");
    assert_eq!(
        critical.component.as_deref(),
        Some("engine.backpressure_lost")
    );
    assert_eq!((critical.level, critical.fill_pct), ("critical", None));
    assert_eq!(critical.counters["backpressure_lost"], 5);
    assert_eq!(hub.open_alerts().len(), 1);
    assert_eq!(next(&mut rx, Duration::from_secs(50)).await, None);
    let recovered = next(&mut rx, Duration::from_secs(20)).await.expect("ok");
    assert_eq!(recovered.level, "ok");
    assert!(hub.open_alerts().is_empty());

    let channels = hub.channels_json();
    assert_eq!(channels[0]["name"], "log");
    assert_eq!(channels[0]["sent_total"], 6);
    assert_eq!(channels[1]["dropped_total"], 0);
    shutdown.trigger();
    task.await.unwrap();
}

#[test]
fn a_full_channel_queue_drops_and_counts_instead_of_blocking() {
    let (handle, _rx) = ChannelHandle::new("slow");
    let mut hub = Hub::new("c", Duration::from_secs(5), vec![handle]);
    hub.add_queue(Queue::new("q", Arc::default(), || QueueReading {
        kind: QueueKind::Channel,
        on_full: "evict_oldest",
        quota: 10,
        quota_unit: "messages",
        used: 10,
        blocked_total: 0,
        evicted_total: 0,
        dropped_total: 0,
    }));
    let t0 = std::time::Instant::now();
    let n = channels::CHANNEL_QUEUE as u64 + 5;
    for i in 0..n {
        // Each check ten minutes after the last: one repeat each.
        let alerts = hub.check(t0 + REPEAT_FULL * i as u32);
        assert_eq!(alerts.len(), 1);
        assert_eq!(alerts[0].message, "evicting the oldest records, data gap");
    }
    let slow = &hub.channels_json()[1];
    assert_eq!(slow["dropped_total"], 5);
    assert_eq!(hub.channels_json()[0]["sent_total"], n);
}

#[tokio::test(start_paused = true)]
async fn the_beat_follows_a_changed_check_interval_from_the_change_on() {
    let start = tokio::time::Instant::now();
    let mut beat = Beat::new(Duration::from_secs(5));
    beat.tick(Duration::from_secs(5)).await;
    assert_eq!(start.elapsed(), Duration::ZERO, "the first tick at once");
    beat.tick(Duration::from_secs(5)).await;
    assert_eq!(start.elapsed(), Duration::from_secs(5));
    beat.tick(Duration::from_secs(2)).await;
    assert_eq!(
        start.elapsed(),
        Duration::from_secs(7),
        "one new interval from now"
    );
    beat.tick(Duration::from_secs(2)).await;
    assert_eq!(start.elapsed(), Duration::from_secs(9));
}
