use serde_json::json;

use super::*;
use crate::sources::catalogue::{DeviceDef, GroupDef, PointDef};

fn device() -> DeviceStatus {
    DeviceStatus::new(DeviceDef {
        name: "d".into(),
        source: "opcua/d".into(),
        protocol: "opcua",
        address: "opc.tcp://h:1".into(),
        template: None,
        groups: vec![
            GroupDef::new("fast", Duration::from_millis(100)),
            GroupDef::new("slow", Duration::from_secs(5)),
        ],
        points: Vec::<PointDef>::new(),
        details: vec![("endpoint", json!("opc.tcp://h:1"))],
    })
}

#[test]
fn the_jitter_ring_keeps_only_the_last_samples() {
    let s = device();
    for _ in 0..JITTER_WINDOW {
        s.record_jitter(Duration::from_millis(50));
    }
    for i in 0..JITTER_WINDOW as u64 {
        s.record_jitter(Duration::from_micros(i));
    }
    let (p50, p99) = s.jitter();
    assert!(p50 < Duration::from_millis(1), "{p50:?}");
    assert!(p99 < Duration::from_millis(2), "{p99:?}");
}

#[test]
fn a_poll_keeps_the_last_values_per_group_and_counts_bad_points() {
    let s = device();
    let mut points = Map::new();
    points.insert(
        "t".into(),
        json!({"value": 1, "quality": "good", "status": "Good"}),
    );
    points.insert(
        "x".into(),
        json!({"value": null, "quality": "bad", "status": "BadNodeIdUnknown"}),
    );
    s.values_in(0, &points, 5);
    s.polled(Duration::from_millis(3));
    let j = s.to_json();
    assert_eq!(j["values"]["fast"]["t"]["value"], json!(1));
    assert_eq!(j["values"]["slow"], Value::Null);
    assert_eq!(j["bad_points_total"], json!(1));
    assert_eq!(j["polls_total"], json!(1));
    assert_eq!(j["state"], json!("connecting"));
    assert_eq!(j["endpoint"], json!("opc.tcp://h:1"));
}

#[test]
fn an_error_is_counted_and_kept_with_its_hint_until_the_next_one() {
    let s = device();
    s.error("timeout".into(), Some("check the cable".into()));
    s.note_error("refused".into(), None);
    let j = s.to_json();
    assert_eq!(j["errors_total"], json!(1));
    assert_eq!(j["last_error"], json!("refused"));
    assert_eq!(j["last_error_hint"], Value::Null);
    s.set_state(ConnState::Connected);
    assert_eq!(s.to_json()["connected"], json!(true));
}

#[tokio::test]
async fn a_counted_poll_and_a_change_of_state_wake_the_catalogue_and_the_same_state_does_not() {
    let d = Arc::new(device());
    let catalogue = crate::sources::catalogue::Catalogue::new(vec![Arc::clone(&d)]);
    let woken = || async {
        tokio::time::timeout(Duration::from_millis(50), catalogue.changed().notified())
            .await
            .is_ok()
    };
    assert!(!woken().await, "nothing happened yet");
    d.count_poll();
    assert!(woken().await, "a poll");
    assert_eq!(d.polls_total.load(Ordering::Relaxed), 1);
    d.set_state(ConnState::Connected);
    assert!(woken().await, "a new state");
    d.set_state(ConnState::Connected);
    assert!(!woken().await, "the same state again");
}
