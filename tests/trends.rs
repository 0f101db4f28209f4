//! `GET /api/trends` against the real binary polling its built-in Modbus simulator: the
//! device points (numbers, and booleans as 0/1), the queues' fill and the rates in and out,
//! on one 10 s grid, and a clear `400` for a bad query.

mod common;

use std::time::Duration;

use common::*;
use serde_json::{json, Value};

const OVEN: &str = "point/plant-1/process.oven_temp";
const PUMP: &str = "point/plant-1/process.pump_running";

fn names(daemon: &Daemon) -> Vec<String> {
    let r = daemon.get("/api/trends", None);
    assert_eq!(r.status, 200, "{}", r.body);
    r.json()["names"]
        .as_array()
        .map(|a| {
            a.iter()
                .filter_map(|n| n.as_str().map(str::to_string))
                .collect()
        })
        .unwrap_or_default()
}

fn series<'a>(answer: &'a Value, name: &str) -> &'a Value {
    answer["series"]
        .as_array()
        .and_then(|a| a.iter().find(|s| s["name"] == name))
        .unwrap_or_else(|| panic!("no series {name} in {answer}"))
}

/// The last bucket of `column` that has samples.
fn newest(series: &Value, column: &str) -> Option<f64> {
    series[column]
        .as_array()?
        .iter()
        .rev()
        .find_map(Value::as_f64)
}

#[test]
fn trends_keep_the_polled_points_the_queue_fill_and_the_rates_on_one_ten_second_grid() {
    let port = free_port();
    let daemon = Daemon::start(plant_config(port));
    wait_until(Duration::from_secs(20), "the simulator polled", || {
        u64_at(&daemon.status(), "/devices/0/polls_total") >= 4
    });
    let kept = names(&daemon);
    for want in [
        OVEN,
        PUMP,
        "point/plant-1/counters.parts",
        "queue/push_queue",
    ] {
        assert!(kept.iter().any(|n| n == want), "{want} not in {kept:?}");
    }
    assert!(
        !kept.iter().any(|n| n.ends_with(".model")),
        "a string point has no trend: {kept:?}"
    );

    let r = daemon.get(
        &format!("/api/trends?series={OVEN},{PUMP},queue%2Fpush_queue,point/nope"),
        None,
    );
    assert_eq!(r.status, 200, "{}", r.body);
    assert!(r
        .header("content-type")
        .is_some_and(|c| c.starts_with("application/json")));
    let a = r.json();
    let times: Vec<u64> = a["times_ms"]
        .as_array()
        .expect("times_ms")
        .iter()
        .filter_map(Value::as_u64)
        .collect();
    assert_eq!(times.len(), 360, "an hour of 10 s buckets");
    assert!(times.windows(2).all(|w| w[1] - w[0] == 10_000));
    assert_eq!(times[0] % 10_000, 0, "on the wall clock's 10 s grid");
    assert_eq!(a["start_ms"], times[0]);
    assert_eq!(a["bucket_ms"], 10_000);
    let now_ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("clock")
        .as_millis() as u64;
    assert!(
        times[359] <= now_ms && now_ms - times[359] < 20_000,
        "{times:?}"
    );
    assert_eq!(a["unknown"], json!(["point/nope"]));

    let oven = series(&a, OVEN);
    assert_eq!(oven["unit"], "°C");
    for column in ["min", "max", "mean", "last"] {
        assert_eq!(oven[column].as_array().map(Vec::len), Some(360), "{column}");
    }
    let (min, mean, max) = (
        newest(oven, "min").expect("a min"),
        newest(oven, "mean").expect("a mean"),
        newest(oven, "max").expect("a max"),
    );
    assert!(min <= mean && mean <= max, "{min} {mean} {max}");
    assert!((0.0..500.0).contains(&mean), "an oven temperature: {mean}");
    // Buckets with no sample are null: the hour before the daemon started is empty.
    assert_eq!(oven["mean"][0], Value::Null);
    let pump = series(&a, PUMP);
    let pump_last = newest(pump, "last").expect("the pump's state");
    assert!(pump_last == 0.0 || pump_last == 1.0, "{pump_last}");
    let fill = newest(series(&a, "queue/push_queue"), "last").expect("a fill");
    assert!((0.0..=100.0).contains(&fill), "{fill}");
    assert_eq!(series(&a, "queue/push_queue")["unit"], "%");

    // The rates need a second look of the sampler, in the middle of the next bucket.
    for i in 0..5 {
        assert_eq!(
            daemon.ingest(&format!("k{i}"), "{\"n\":1}").status,
            200,
            "ingest {i}"
        );
    }
    let rate_series = format!("in/ingest/{SOURCE}");
    let mut rates = Value::Null;
    wait_until(Duration::from_secs(40), "the rates sampled", || {
        let r = daemon.get(
            &format!("/api/trends?series=in/modbus/plant-1,{rate_series},out/push"),
            None,
        );
        rates = r.json();
        rates["unknown"] == json!([])
    });
    let polls = newest(series(&rates, "in/modbus/plant-1"), "mean").expect("a poll rate");
    assert!(
        polls > 1.0 && polls < 10.0,
        "five records/s from the plant: {polls}"
    );
    assert_eq!(series(&rates, "in/modbus/plant-1")["unit"], "records/s");
    let ingested = newest(series(&rates, &rate_series), "max").expect("an ingest rate");
    assert!(ingested > 0.0, "{rates}");
    assert!(newest(series(&rates, "out/push"), "last").is_some());

    // `since` answers only the buckets from the one holding it.
    let last = times[359];
    let r = daemon.get(&format!("/api/trends?series={OVEN}&since={last}"), None);
    let newer = r.json();
    assert_eq!(newer["start_ms"], last);
    let n = newer["times_ms"].as_array().map_or(0, Vec::len);
    assert!((1..=5).contains(&n), "{newer}");

    // Bad queries say what is wrong.
    let many: Vec<String> = (0..33).map(|i| format!("s{i}")).collect();
    for (query, says) in [
        ("series=", "series: a name is empty"),
        ("serie=x", "unknown parameter \"serie\""),
        ("series=a&since=soon", "since: expected unix milliseconds"),
        (
            &format!("series={}", many.join(",")),
            "at most 32 per request",
        ),
    ] {
        let r = daemon.get(&format!("/api/trends?{query}"), None);
        assert_eq!(r.status, 400, "{query}: {}", r.body);
        let error = r.json()["error"].as_str().unwrap_or("").to_string();
        assert!(error.contains(says), "{query}: {error}");
    }
    assert_eq!(daemon.post("/api/trends", None, b"").status, 405);

    // The status and the metrics show the bound and what is kept.
    let status = daemon.status();
    let t = &status["trends"];
    assert_eq!(t["max_series"], 2000, "{t}");
    assert!(u64_at(t, "/series") >= 7, "{t}");
    assert_eq!(t["bucket_secs"], 10);
    assert_eq!(t["buckets"], 360);
    assert_eq!(u64_at(t, "/dropped_series_total"), 0);
    assert_eq!(u64_at(t, "/refused_samples_total"), 0);
    let metrics = daemon.metrics();
    assert!(metric(&metrics, "opex_connector_trends_series").unwrap_or(0.0) >= 7.0);
    assert!(metric(&metrics, "opex_connector_trends_bytes").unwrap_or(0.0) > 7.0 * 5760.0);
}
