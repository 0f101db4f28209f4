//! The `clickhouse` and `postgres` sinks against real servers, each started by the test on a
//! free loopback port in a temp dir: rows arrive with the right columns and types; rows are
//! kept while the server is down and arrive after it is back; a small `block` backlog refuses
//! sources and drops nothing; an `evict_oldest` backlog counts its drops exactly; a row the
//! server refuses goes to the dead-letter queue alone with the server's message; a missing
//! table or column holds the sink, keeps every row and parks none; rows that piled up behind
//! a slow insert go in one catch-up insert.

mod common;

use std::collections::BTreeSet;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::*;
use serde_json::{json, Value};

/// One database under test.
trait Db: Sized {
    /// The sink's name.
    const SINK: &'static str;
    fn start() -> Self;
    /// Creates `table` with the default columns `ts, source, key, payload`.
    fn create_default(&self, table: &str);
    /// The sink's config section (without `sink_batch`/`columns`).
    fn section(&self, table: &str) -> Value;
    /// The `key` column of every row, sorted.
    fn keys(&self, table: &str) -> Vec<String>;
    /// Takes the server down.
    fn down(&mut self);
    /// Brings it back on the same port and data dir.
    fn up(&mut self);
}

impl Db for ClickHouse {
    const SINK: &'static str = "clickhouse";
    fn start() -> Self {
        ClickHouse::start()
    }
    fn create_default(&self, table: &str) {
        self.sql(&format!(
            "CREATE TABLE {table} (ts UInt64, source String, key String, payload String) ENGINE = MergeTree ORDER BY ts"
        ));
    }
    fn section(&self, table: &str) -> Value {
        json!({ "url": self.url(), "user": "default", "password": CH_PASSWORD, "sink_table": table })
    }
    fn keys(&self, table: &str) -> Vec<String> {
        lines(&self.sql(&format!(
            "SELECT key FROM {table} ORDER BY key FORMAT TabSeparated"
        )))
    }
    /// Killed, as a crash or a pulled cable would.
    fn down(&mut self) {
        self.kill9();
    }
    fn up(&mut self) {
        self.restart();
    }
}

impl Db for Postgres {
    const SINK: &'static str = "postgres";
    fn start() -> Self {
        Postgres::start()
    }
    fn create_default(&self, table: &str) {
        self.sql(&format!(
            "CREATE TABLE {table} (ts timestamptz, source text, key text, payload jsonb)"
        ));
    }
    fn section(&self, table: &str) -> Value {
        json!({ "url": self.url(), "sink_table": table })
    }
    fn keys(&self, table: &str) -> Vec<String> {
        lines(&self.sql(&format!("SELECT key FROM {table} ORDER BY key")))
    }
    /// A fast shutdown: open connections are cut.
    fn down(&mut self) {
        self.stop();
    }
    fn up(&mut self) {
        self.restart();
    }
}

fn lines(s: &str) -> Vec<String> {
    s.lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .map(str::to_string)
        .collect()
}

/// A connector whose ingest source `orders` flows into `sink` (flow `to-db`, node `db`).
fn config(sink: &str, section: Value) -> Value {
    let mut c = queue_config(64, "evict_oldest");
    c["connector"]["http"]["admin_token"] = json!(ADMIN_TOKEN);
    c[sink] = section;
    c["flows"] = json!([{
        "id": "to-db",
        "nodes": [
            { "id": "in", "kind": "source", "source": format!("ingest/{SOURCE}") },
            { "id": "db", "kind": "sink", "sink": sink },
        ],
        "wires": [ { "from": "in", "to": "db" } ],
    }]);
    c
}

/// The sink's object in `/api/status` (`clickhouse` or `postgres`).
fn sink_status(d: &Daemon, sink: &str) -> Value {
    let st = d.status();
    let v = st[sink].clone();
    assert!(v.is_object(), "no {sink} object in /api/status: {st:#}");
    v
}

fn sorted(keys: &[String]) -> Vec<String> {
    let mut k = keys.to_vec();
    k.sort();
    k
}

// ------------------------------------------------------------------ rows and types

#[test]
fn clickhouse_rows_arrive_with_the_right_columns_and_types() {
    let ch = ClickHouse::start();
    ch.sql(
        "CREATE TABLE typed (id String, ts UInt64, source String, key String, payload String, \
         temp Float64, n UInt32, line String) ENGINE = MergeTree ORDER BY n",
    );
    let mut section = ch.section("typed");
    section["sink_batch"] = json!({ "sink_batch_rows": 3, "flush_interval_ms": 100 });
    section["columns"] = json!([
        { "column": "id", "field": "/id" },
        { "column": "ts", "field": "/ts" },
        { "column": "source", "field": "/source" },
        { "column": "key", "field": "/key" },
        { "column": "payload", "field": "/payload" },
        { "column": "temp", "field": "/payload/temp" },
        { "column": "n", "field": "/payload/n" },
        { "column": "line", "field": "/payload/meta/line" },
    ]);
    let d = Daemon::start(config("clickhouse", section));
    let before = unix_ms();
    let mut sent = Vec::new();
    for n in 1..=3 {
        let body = format!(r#"{{"temp":21.{n},"n":{n},"meta":{{"line":"L{n}"}}}}"#);
        let id = assert_stored(&d.ingest(&format!("press-{n}"), &body), "ingest");
        sent.push((id, body));
    }
    let after = unix_ms();
    wait_until(POLL_DEADLINE, "3 rows in clickhouse", || {
        ch.keys("typed").len() == 3
    });
    let rows = lines(&ch.sql(
        "SELECT id, ts, source, key, payload, temp, n, line, toTypeName(temp) FROM typed ORDER BY n FORMAT TabSeparated",
    ));
    for (i, row) in rows.iter().enumerate() {
        let f: Vec<&str> = row.split('\t').collect();
        let n = i + 1;
        assert_eq!(f[0], sent[i].0, "id of row {n}");
        let ts: u64 = f[1].parse().expect("ts is a number");
        assert!(
            (before..=after).contains(&ts),
            "ts {ts} is the ingest time in ms"
        );
        assert_eq!(f[2], format!("ingest/{SOURCE}"));
        assert_eq!(f[3], format!("press-{n}"));
        // TabSeparated escapes nothing in this JSON: it is the original text.
        assert_eq!(f[4], sent[i].1, "payload keeps its original JSON text");
        assert_eq!(f[5], format!("21.{n}"));
        assert_eq!(f[6], n.to_string());
        assert_eq!(f[7], format!("L{n}"));
        assert_eq!(f[8], "Float64");
    }
    let st = sink_status(&d, "clickhouse");
    assert_eq!(st["inserted_total"], 3);
    assert_eq!(st["backlog"], "memory");
    assert!(
        st["note"]
            .as_str()
            .unwrap_or("")
            .contains("lost if the process crashes"),
        "{st:#}"
    );
    let sink = named(&d.status(), "/sinks", "clickhouse").clone();
    assert_eq!(sink["durable"], false);
    assert_eq!(sink["dropped"], 0);
}

#[test]
fn postgres_rows_arrive_with_the_right_columns_and_types() {
    let pg = Postgres::start();
    pg.sql(
        "CREATE TABLE typed (id text, ts timestamptz, source text, key text, payload jsonb, \
         temp float8, n int4, ok bool, line varchar(20), raw text)",
    );
    let mut section = pg.section("typed");
    section["sink_batch"] = json!({ "sink_batch_rows": 3, "flush_interval_ms": 100 });
    section["columns"] = json!([
        { "column": "id", "field": "/id" },
        { "column": "ts", "field": "/ts" },
        { "column": "source", "field": "/source" },
        { "column": "key", "field": "/key" },
        { "column": "payload", "field": "/payload" },
        { "column": "temp", "field": "/payload/temp" },
        { "column": "n", "field": "/payload/n" },
        { "column": "ok", "field": "/payload/ok" },
        { "column": "line", "field": "/payload/meta/line" },
        { "column": "raw", "field": "/payload/meta" },
    ]);
    let d = Daemon::start(config("postgres", section));
    let before = unix_ms();
    let mut ids = Vec::new();
    for n in 1..=3 {
        let body = format!(r#"{{"temp":21.{n},"n":{n},"ok":true,"meta":{{"line":"L{n}"}}}}"#);
        ids.push(assert_stored(
            &d.ingest(&format!("press-{n}"), &body),
            "ingest",
        ));
    }
    let after = unix_ms();
    wait_until(POLL_DEADLINE, "3 rows in postgres", || {
        pg.keys("typed").len() == 3
    });
    let rows = lines(&pg.sql(
        "SELECT id, (extract(epoch from ts) * 1000)::bigint, source, key, payload->'meta'->>'line', \
         temp, n, ok, line, raw, pg_typeof(ts) FROM typed ORDER BY n",
    ));
    for (i, row) in rows.iter().enumerate() {
        let f: Vec<&str> = row.split('|').collect();
        let n = i + 1;
        assert_eq!(f[0], ids[i], "id of row {n}");
        let ts: u64 = f[1].parse().expect("ts in ms");
        assert!((before..=after).contains(&ts), "ts {ts} is the ingest time");
        assert_eq!(f[2], format!("ingest/{SOURCE}"));
        assert_eq!(f[3], format!("press-{n}"));
        assert_eq!(f[4], format!("L{n}"), "payload is jsonb");
        assert_eq!(f[5], format!("21.{n}"));
        assert_eq!(f[6], n.to_string());
        assert_eq!(f[7], "t");
        assert_eq!(f[8], format!("L{n}"));
        assert_eq!(
            f[9],
            format!(r#"{{"line":"L{n}"}}"#),
            "an object into text is JSON"
        );
        assert_eq!(f[10], "timestamp with time zone");
    }
    assert_eq!(sink_status(&d, "postgres")["inserted_total"], 3);
}

// ------------------------------------------------------------------ batches

/// Records ingested one by one into `D` with `sink_batch_rows: 100` and a flush interval no
/// test waits for: only full batches leave, so 300 records are 3 inserts.
fn many_records_go_in_batches_of_many_rows_and_each_arrives_once<D: Db>() -> (D, Daemon) {
    let db = D::start();
    db.create_default("events");
    let mut section = db.section("events");
    // No catch-up (`max_insert_rows` is the batch): each insert is exactly one batch.
    section["sink_batch"] = json!({ "sink_batch_rows": 100, "max_insert_rows": 100,
                                    "flush_interval_ms": 3_600_000 });
    let d = Daemon::start(config(D::SINK, section));
    let mut sent = Vec::new();
    for i in 0..300 {
        let key = format!("k{i:04}");
        let body = format!(r#"{{"n":{i},"text":"a \"quoted\" line\nand é","list":[1,2.5,null]}}"#);
        assert_stored(&d.ingest(&key, &body), "ingest");
        sent.push(key);
    }
    wait_until(POLL_DEADLINE, "300 rows", || db.keys("events").len() >= 300);
    assert_eq!(db.keys("events"), sent, "every record exactly once");
    let st = sink_status(&d, D::SINK);
    assert_eq!(st["inserted_total"], 300, "{st:#}");
    assert_eq!(st["batches_total"], 3, "100 rows per insert: {st:#}");
    (db, d)
}

#[test]
fn clickhouse_many_records_go_in_batches_of_many_rows_and_each_arrives_once() {
    let (ch, _d) = many_records_go_in_batches_of_many_rows_and_each_arrives_once::<ClickHouse>();
    let rows = lines(
        &ch.sql("SELECT key, source, payload FROM events ORDER BY key FORMAT TabSeparatedRaw"),
    );
    assert_eq!(rows.len(), 300);
    for (i, row) in rows.iter().enumerate() {
        let f: Vec<&str> = row.split('\t').collect();
        assert_eq!(f[0], format!("k{i:04}"));
        assert_eq!(f[1], format!("ingest/{SOURCE}"));
        let payload: Value = serde_json::from_str(f[2]).expect("payload is JSON text");
        assert_eq!(
            payload,
            json!({"n": i, "text": "a \"quoted\" line\nand é", "list": [1, 2.5, null]}),
            "row {i}"
        );
    }
}

#[test]
fn postgres_many_records_go_in_batches_of_many_rows_and_each_arrives_once() {
    let (pg, _d) = many_records_go_in_batches_of_many_rows_and_each_arrives_once::<Postgres>();
    let same = pg.sql(
        "SELECT count(*) FROM events WHERE payload = jsonb_build_object('n', \
         substr(key, 2)::int, 'text', E'a \"quoted\" line\\nand é', 'list', '[1, 2.5, null]'::jsonb) \
         AND source = 'ingest/orders'",
    );
    assert_eq!(same, "300", "every payload as it was sent");
}

#[test]
fn clickhouse_with_queue_disk_records_arriving_one_by_one_go_many_to_an_insert() {
    let ch = ClickHouse::start();
    ch.create_default("events");
    let mut section = ch.section("events");
    section["queue"] = json!("disk");
    section["sink_batch"] = json!({ "sink_batch_rows": 100, "max_insert_rows": 100,
                                    "flush_interval_ms": 3_600_000 });
    let d = Daemon::start(config("clickhouse", section));
    let mut sent = Vec::new();
    for i in 0..300 {
        let key = format!("k{i:04}");
        assert_stored(&d.ingest(&key, &format!(r#"{{"n":{i}}}"#)), "ingest");
        sent.push(key);
    }
    wait_until(POLL_DEADLINE, "300 rows", || ch.keys("events").len() >= 300);
    assert_eq!(ch.keys("events"), sent, "every record exactly once");
    // The server's own count: the deliverer waited for full batches instead of sending
    // what each commit had just added.
    let inserts = ch.sql("SELECT value FROM system.events WHERE event = 'InsertQuery'");
    assert_eq!(inserts.trim(), "3", "100 rows per insert");
}

#[test]
fn clickhouse_a_batch_with_a_field_missing_arrives_with_the_column_default() {
    let ch = ClickHouse::start();
    ch.sql("CREATE TABLE sparse (key String, n UInt32, t Nullable(Float64)) ENGINE = MergeTree ORDER BY key");
    let mut section = ch.section("sparse");
    section["sink_batch"] = json!({ "sink_batch_rows": 3, "max_insert_rows": 3,
                                    "flush_interval_ms": 3_600_000 });
    section["columns"] = json!([
        { "column": "key", "field": "/key" },
        { "column": "n", "field": "/payload/n" },
        { "column": "t", "field": "/payload/t" },
    ]);
    let d = Daemon::start(config("clickhouse", section));
    // The first batch can go in binary; the second has a row without `n`.
    for (key, body) in [
        ("a1", r#"{"n":1,"t":0.5}"#),
        ("a2", r#"{"n":2,"t":null}"#),
        ("a3", r#"{"n":3,"t":-2}"#),
        ("b1", r#"{"n":4,"t":1.25}"#),
        ("b2", r#"{"t":2}"#),
        ("b3", r#"{"n":6,"t":null}"#),
    ] {
        assert_stored(&d.ingest(key, body), "ingest");
    }
    wait_until(POLL_DEADLINE, "6 rows", || ch.keys("sparse").len() == 6);
    let rows = lines(&ch.sql("SELECT key, n, t FROM sparse ORDER BY key FORMAT TabSeparated"));
    assert_eq!(
        rows,
        vec![
            "a1\t1\t0.5",
            "a2\t2\t\\N",
            "a3\t3\t-2",
            "b1\t4\t1.25",
            "b2\t0\t2",
            "b3\t6\t\\N",
        ]
    );
    let st = sink_status(&d, "clickhouse");
    assert_eq!(st["batches_total"], 2, "{st:#}");
    assert_eq!(st["dead_lettered_total"], 0, "{st:#}");
}

// ------------------------------------------------------------------ outage

fn rows_are_kept_while_the_server_is_down_and_arrive_after_restart<D: Db>() {
    let mut db = D::start();
    db.create_default("events");
    let mut section = db.section("events");
    section["sink_batch"] = json!({ "sink_batch_rows": 5, "flush_interval_ms": 50 });
    let d = Daemon::start(config(D::SINK, section));
    let mut sent = Vec::new();
    for i in 0..10 {
        let key = format!("a{i:03}");
        assert_stored(&d.ingest(&key, r#"{"v":1}"#), "before the outage");
        sent.push(key);
    }
    wait_until(POLL_DEADLINE, "the first 10 rows", || {
        db.keys("events").len() == 10
    });
    db.down();
    for i in 0..20 {
        let key = format!("b{i:03}");
        assert_stored(&d.ingest(&key, r#"{"v":2}"#), "during the outage");
        sent.push(key);
    }
    wait_until(
        POLL_DEADLINE,
        "a failed insert while the server is down",
        || {
            let st = sink_status(&d, D::SINK);
            st["insert_failures_total"].as_u64().unwrap_or(0) >= 1 && st["backlog_rows"] == 20
        },
    );
    let st = sink_status(&d, D::SINK);
    assert_eq!(st["healthy"], false, "{st:#}");
    assert!(st["last_error"].is_string(), "{st:#}");
    db.up();
    measure_recovery(D::SINK, Instant::now(), RECOVERY_BOUND, || {
        db.keys("events").len() > 10
    });
    wait_until(POLL_DEADLINE, "every row after the restart", || {
        db.keys("events").len() >= 30
    });
    assert_eq!(db.keys("events"), sorted(&sent), "each row exactly once");
    let st = sink_status(&d, D::SINK);
    assert_eq!(st["dropped_total"], 0);
    assert_eq!(st["backlog_rows"], 0);
    assert_eq!(st["healthy"], true);
    // The ledger balances: all 30 acked rows delivered (inserted), none pending or lost.
    let l = assert_balanced(&ledger(&d, true), "after the database outage");
    let source = format!("ingest/{SOURCE}");
    assert_eq!(source_figure(&l, &source, "/acked"), 30, "{l:#}");
    assert_eq!(source_figure(&l, &source, "/delivered"), 30, "{l:#}");
    assert_eq!(source_figure(&l, &source, "/pending"), 0, "{l:#}");
    assert_eq!(source_figure(&l, &source, "/lost"), 0, "{l:#}");
}

#[test]
fn clickhouse_keeps_rows_while_the_server_is_down_and_inserts_them_after_restart() {
    rows_are_kept_while_the_server_is_down_and_arrive_after_restart::<ClickHouse>();
}

#[test]
fn postgres_keeps_rows_while_the_server_is_down_and_copies_them_after_restart() {
    rows_are_kept_while_the_server_is_down_and_arrive_after_restart::<Postgres>();
}

// ------------------------------------------------------------------ block

fn a_small_block_backlog_refuses_sources_and_drops_nothing<D: Db>() {
    let mut db = D::start();
    db.create_default("events");
    db.down();
    let mut section = db.section("events");
    section["sink_batch"] = json!({
        "sink_batch_rows": 2, "flush_interval_ms": 50, "max_backlog_rows": 6, "on_full": "block",
    });
    let d = Daemon::start(config(D::SINK, section));
    let mut stored = Vec::new();
    for i in 0..6 {
        let key = format!("k{i:03}");
        assert_stored(&d.ingest(&key, r#"{"v":1}"#), "below the bound");
        stored.push(key);
    }
    for i in 0..3 {
        let reply = d.ingest(&format!("refused{i}"), r#"{"v":1}"#);
        assert_retry(&reply, D::SINK, "at the bound");
    }
    let st = sink_status(&d, D::SINK);
    assert_eq!(st["backlog_rows"], 6, "{st:#}");
    assert_eq!(st["blocked_total"], 3, "{st:#}");
    assert_eq!(st["blocking"], true, "{st:#}");
    assert_eq!(st["dropped_total"], 0, "{st:#}");
    let sink = named(&d.status(), "/sinks", D::SINK).clone();
    assert_eq!(sink["blocked"], 3);
    assert_eq!(sink["dropped"], 0);
    let metrics = d.metrics();
    assert!(
        metrics.contains(&format!(
            r#"opex_connector_sink_blocked_total{{sink="{}"}} 3"#,
            D::SINK
        )),
        "{metrics}"
    );

    db.up();
    wait_until(POLL_DEADLINE, "the 6 kept rows", || {
        db.keys("events").len() >= 6
    });
    // Room again: the source is taken once the backlog has drained.
    wait_until(POLL_DEADLINE, "a new record accepted", || {
        d.ingest("after", r#"{"v":2}"#).status == 200
    });
    stored.push("after".into());
    wait_until(POLL_DEADLINE, "the record after the outage", || {
        db.keys("events").len() >= 7
    });
    assert_eq!(
        db.keys("events"),
        sorted(&stored),
        "nothing dropped, nothing twice"
    );
    assert_eq!(sink_status(&d, D::SINK)["dropped_total"], 0);
}

#[test]
fn clickhouse_block_refuses_at_a_small_backlog_and_drops_nothing() {
    a_small_block_backlog_refuses_sources_and_drops_nothing::<ClickHouse>();
}

#[test]
fn postgres_block_refuses_at_a_small_backlog_and_drops_nothing() {
    a_small_block_backlog_refuses_sources_and_drops_nothing::<Postgres>();
}

// ------------------------------------------------------------------ evict_oldest

fn evict_oldest_counts_its_drops_exactly<D: Db>() {
    let mut db = D::start();
    db.create_default("events");
    db.down();
    let mut section = db.section("events");
    section["sink_batch"] = json!({
        "sink_batch_rows": 5, "flush_interval_ms": 50, "max_backlog_rows": 5, "on_full": "evict_oldest",
    });
    let d = Daemon::start(config(D::SINK, section));
    let mut sent = BTreeSet::new();
    for i in 0..12 {
        let key = format!("k{i:03}");
        assert_stored(&d.ingest(&key, r#"{"v":1}"#), "evict_oldest never refuses");
        sent.insert(key);
    }
    let st = sink_status(&d, D::SINK);
    assert_eq!(st["dropped_total"], 7, "12 rows into a bound of 5: {st:#}");
    assert_eq!(st["backlog_rows"], 5, "{st:#}");
    assert_eq!(st["blocked_total"], 0, "{st:#}");
    assert_eq!(named(&d.status(), "/sinks", D::SINK)["dropped"], 7);
    let source = format!("ingest/{SOURCE}");
    let l = assert_balanced(&ledger(&d, false), "the backlog evicted");
    assert_eq!(source_figure(&l, &source, "/acked"), 12, "{l:#}");
    assert_eq!(source_figure(&l, &source, "/pending"), 5, "{l:#}");
    assert_eq!(source_figure(&l, &source, "/losses/evicted"), 7, "{l:#}");
    let metrics = d.metrics();
    assert!(
        metrics.contains(&format!(
            r#"opex_connector_sink_dropped_total{{sink="{}"}} 7"#,
            D::SINK
        )),
        "{metrics}"
    );

    db.up();
    wait_until(POLL_DEADLINE, "the 5 kept rows", || {
        sink_status(&d, D::SINK)["inserted_total"] == 5
    });
    let arrived = db.keys("events");
    assert_eq!(arrived.len(), 5, "{arrived:?}");
    assert!(arrived.iter().all(|k| sent.contains(k)), "{arrived:?}");
    assert_eq!(
        arrived.iter().collect::<BTreeSet<_>>().len(),
        5,
        "no row twice: {arrived:?}"
    );
    let st = sink_status(&d, D::SINK);
    assert_eq!(st["dropped_total"], 7);
    assert_eq!(st["backlog_rows"], 0);
    let l = assert_balanced(&ledger(&d, false), "the backlog drained");
    assert_eq!(source_figure(&l, &source, "/delivered"), 5, "{l:#}");
    assert_eq!(source_figure(&l, &source, "/pending"), 0, "{l:#}");
    assert_eq!(l["sinks"][D::SINK]["imbalance"], 0, "{l:#}");
    assert!(
        d.stderr().contains("backlog full, dropped the oldest row"),
        "the drop is logged"
    );
}

#[test]
fn clickhouse_evict_oldest_counts_every_dropped_row() {
    evict_oldest_counts_its_drops_exactly::<ClickHouse>();
}

#[test]
fn postgres_evict_oldest_counts_every_dropped_row() {
    evict_oldest_counts_its_drops_exactly::<Postgres>();
}

// ------------------------------------------------------------------ refused rows

fn a_refused_value_parks_each_row_with_the_servers_message<D: Db>(
    columns: Value,
    body: &str,
    message: &str,
) {
    let db = D::start();
    db.create_default("events");
    let mut section = db.section("events");
    section["sink_batch"] = json!({ "sink_batch_rows": 3, "flush_interval_ms": 50 });
    section["columns"] = columns;
    let d = Daemon::start(config(D::SINK, section));
    let mut keys = Vec::new();
    for i in 0..3 {
        let key = format!("bad{i}");
        assert_stored(&d.ingest(&key, body), "taken into the backlog");
        keys.push(key);
    }
    let started = Instant::now();
    wait_until(POLL_DEADLINE, "3 dead letters", || {
        dead_letters(&d, "state=open")["counts"]["open"] == 3
    });
    let rows = dead_letter_rows(&d, "state=open");
    let mut parked: Vec<String> = rows
        .iter()
        .map(|r| r["record"]["key"].as_str().unwrap_or("").to_string())
        .collect();
    parked.sort();
    assert_eq!(parked, keys);
    for r in &rows {
        assert_eq!(r["flow"], "to-db", "{r:#}");
        assert_eq!(r["node"], "db", "{r:#}");
        let reason = r["reason"].as_str().unwrap_or("");
        assert!(
            reason.starts_with(&format!("{} refused the batch: ", D::SINK)),
            "{reason}"
        );
        assert!(
            reason.contains(message),
            "the server's message {message:?} in {reason:?}"
        );
    }
    let st = sink_status(&d, D::SINK);
    assert_eq!(st["dead_lettered_total"], 3, "{st:#}");
    assert_eq!(st["backlog_rows"], 0, "{st:#}");
    assert_eq!(st["insert_failures_total"], 0, "not retried: {st:#}");
    assert!(db.keys("events").is_empty());
    assert!(started.elapsed() < Duration::from_secs(30));
}

#[test]
fn clickhouse_wrong_type_parks_the_batch_in_the_dead_letter_queue() {
    a_refused_value_parks_each_row_with_the_servers_message::<ClickHouse>(
        json!([{ "column": "key", "field": "/key" }, { "column": "ts", "field": "/payload/v" }]),
        r#"{"v":"not a number"}"#,
        "Cannot parse input",
    );
}

#[test]
fn postgres_not_null_violation_parks_only_the_row_refused_alone_with_the_servers_message() {
    let pg = Postgres::start();
    pg.sql("CREATE TABLE strict (key text, v int4 NOT NULL)");
    let mut section = pg.section("strict");
    section["sink_batch"] = json!({ "sink_batch_rows": 2, "flush_interval_ms": 50 });
    section["columns"] = json!([
        { "column": "key", "field": "/key" },
        { "column": "v", "field": "/payload/v" },
    ]);
    let d = Daemon::start(config("postgres", section));
    // The batch is refused, then sent again row by row: only the row without `v` is parked.
    assert_stored(&d.ingest("ok", r#"{"v":1}"#), "good row");
    assert_stored(&d.ingest("missing", r#"{"w":1}"#), "row without v");
    wait_until(POLL_DEADLINE, "1 dead letter", || {
        dead_letters(&d, "state=open")["counts"]["open"] == 1
    });
    let row = dead_letter_rows(&d, "state=open")[0].clone();
    assert_eq!(row["record"]["key"], "missing", "{row:#}");
    let reason = row["reason"].as_str().unwrap_or("").to_string();
    assert!(reason.contains("ERROR 23502"), "{reason}");
    assert!(reason.contains("violates not-null constraint"), "{reason}");
    // A value that cannot be written into its column's type is refused before sending.
    assert_stored(&d.ingest("text", r#"{"v":"abc"}"#), "row with a text v");
    assert_stored(&d.ingest("fine", r#"{"v":2}"#), "good row");
    wait_until(POLL_DEADLINE, "2 dead letters", || {
        dead_letters(&d, "state=open")["counts"]["open"] == 2
    });
    let rows = dead_letter_rows(&d, "state=open");
    assert_eq!(rows[1]["record"]["key"], "text", "{:#}", rows[1]);
    let last = rows[1]["reason"].as_str().unwrap_or("");
    assert!(
        last.contains(r#"column "v" (int4) cannot take "abc""#),
        "{last}"
    );
    wait_until(POLL_DEADLINE, "the good rows", || {
        pg.keys("strict").len() == 2
    });
    assert_eq!(pg.keys("strict"), ["fine", "ok"]);
    assert_eq!(sink_status(&d, "postgres")["held"], false);
}

// ------------------------------------------------------------------ the destination's configuration

/// 50 records into a sink whose table does not exist; the table is created 5 s later. A
/// missing table is the destination's configuration, not the records': the sink holds (shown
/// in its `sinks[]` entry and alerted as `<sink>.held`), keeps every row and retries, and
/// all 50 arrive once the table exists; none is a dead letter.
fn a_missing_table_holds_the_sink_until_it_is_created<D: Db>(queue: &str) {
    let db = D::start();
    let mut section = db.section("late");
    section["queue"] = json!(queue);
    section["sink_batch"] = json!({ "sink_batch_rows": 10, "flush_interval_ms": 50 });
    let mut c = config(D::SINK, section);
    c["telemetry"] = json!({ "alerts": { "check_interval_secs": 1 } });
    let d = Daemon::start(c);
    let started = Instant::now();
    let mut sent = Vec::new();
    for i in 0..50 {
        let key = format!("k{i:03}");
        assert_stored(&d.ingest(&key, &format!(r#"{{"n":{i}}}"#)), "ingest");
        sent.push(key);
    }
    // Until the table is created: the sink shows it holds, and the hold is alerted.
    let create_at = started + Duration::from_secs(5);
    let held = format!("{}.held", D::SINK);
    let (mut shown, mut alerted) = (false, false);
    poll_until(create_at.saturating_duration_since(Instant::now()), || {
        let st = d.status();
        shown |= named(&st, "/sinks", D::SINK)["held"] == true;
        alerted |= st["alerts"]
            .as_array()
            .is_some_and(|a| a.iter().any(|x| x["component"] == held.as_str()));
        shown && alerted
    });
    std::thread::sleep(create_at.saturating_duration_since(Instant::now()));
    let parked = dead_letters(&d, "")["counts"].clone();
    db.create_default("late");
    let arrived = poll_until(Duration::from_secs(20), || db.keys("late").len() >= 50);
    assert!(
        arrived,
        "all 50 rows after the table was created: {} arrived; dead letters {parked}; {:#}",
        db.keys("late").len(),
        named(&d.status(), "/sinks", D::SINK)
    );
    assert_eq!(db.keys("late"), sent, "every record exactly once");
    assert!(
        shown,
        "the sink's entry showed held: true while the table was missing"
    );
    assert!(alerted, "the hold was alerted as {held}");
    let counts = dead_letters(&d, "")["counts"].clone();
    assert_eq!(counts["parked_total"], 0, "no dead letter: {counts}");
    let entry = named(&d.status(), "/sinks", D::SINK).clone();
    assert_eq!(
        entry["held"], false,
        "released once the rows went in: {entry:#}"
    );
    let source = format!("ingest/{SOURCE}");
    let l = assert_balanced(&ledger(&d, true), "after the table was created");
    assert_eq!(source_figure(&l, &source, "/acked"), 50, "{l:#}");
    assert_eq!(source_figure(&l, &source, "/dead_lettered"), 0, "{l:#}");
    assert_eq!(source_figure(&l, &source, "/lost"), 0, "{l:#}");
    assert!(
        d.stderr().contains("queue held, rows kept"),
        "the hold is logged"
    );
}

#[test]
fn clickhouse_a_missing_table_holds_the_sink_and_every_row_arrives_once_it_is_created() {
    a_missing_table_holds_the_sink_until_it_is_created::<ClickHouse>("memory");
}

#[test]
fn postgres_a_missing_table_holds_the_sink_and_every_row_arrives_once_it_is_created() {
    a_missing_table_holds_the_sink_until_it_is_created::<Postgres>("memory");
}

#[test]
fn postgres_with_queue_disk_a_missing_table_holds_the_queue_and_dead_letters_nothing() {
    a_missing_table_holds_the_sink_until_it_is_created::<Postgres>("disk");
}

/// A column the table does not have is the destination's configuration too: held, not parked.
fn an_unknown_column_holds_the_sink_and_parks_nothing<D: Db>() {
    let db = D::start();
    db.create_default("events");
    let mut section = db.section("events");
    section["sink_batch"] = json!({ "sink_batch_rows": 3, "flush_interval_ms": 50 });
    section["columns"] =
        json!([{ "column": "key", "field": "/key" }, { "column": "nope", "field": "/payload/v" }]);
    let d = Daemon::start(config(D::SINK, section));
    for i in 0..3 {
        assert_stored(&d.ingest(&format!("k{i}"), r#"{"v":1}"#), "ingest");
    }
    wait_until(POLL_DEADLINE, "the sink holds or parks the rows", || {
        named(&d.status(), "/sinks", D::SINK)["held"] == true
            || dead_letters(&d, "")["counts"]["parked_total"] != 0
    });
    let st = sink_status(&d, D::SINK);
    assert_eq!(st["held"], true, "{st:#}");
    assert_eq!(st["backlog_rows"], 3, "every row kept: {st:#}");
    assert_eq!(st["dead_lettered_total"], 0, "{st:#}");
    assert_eq!(dead_letters(&d, "")["counts"]["parked_total"], 0);
}

#[test]
fn clickhouse_an_unknown_column_holds_the_sink_instead_of_parking_the_batch() {
    an_unknown_column_holds_the_sink_and_parks_nothing::<ClickHouse>();
}

#[test]
fn postgres_an_unknown_column_holds_the_sink_instead_of_parking_the_batch() {
    an_unknown_column_holds_the_sink_and_parks_nothing::<Postgres>();
}

/// A row the database refused, parked in the pipeline dead-letter queue, then trimmed there at
/// the cap while still open: a loss, moved from `dead_lettered` to `trimmed` in the sink's own
/// part of the ledger, which keeps balancing.
#[test]
fn postgres_a_refused_row_trimmed_open_from_the_dead_letters_is_booked_as_trimmed() {
    let pg = Postgres::start();
    pg.sql("CREATE TABLE strict (key text, v int4 NOT NULL)");
    let mut section = pg.section("strict");
    section["sink_batch"] = json!({ "sink_batch_rows": 1, "flush_interval_ms": 50 });
    section["columns"] = json!([
        { "column": "key", "field": "/key" },
        { "column": "v", "field": "/payload/v" },
    ]);
    let mut c = config("postgres", section);
    c["dead_letters"] = json!({ "max_rows": 1 });
    let d = Daemon::start(c);
    for key in ["m1", "m2"] {
        assert_stored(&d.ingest(key, r#"{"w":1}"#), "row without v");
        wait_until(POLL_DEADLINE, "the row parked", || {
            dead_letters(&d, "")["counts"]["parked_total"] == if key == "m1" { 1 } else { 2 }
        });
    }
    let counts = dead_letters(&d, "")["counts"].clone();
    assert_eq!(counts["trimmed_open_total"], 1, "{counts}");
    let source = format!("ingest/{SOURCE}");
    let l = assert_balanced(&ledger(&d, false), "a parked row trimmed");
    assert_eq!(source_figure(&l, &source, "/dead_lettered"), 1, "{l:#}");
    assert_eq!(source_figure(&l, &source, "/losses/trimmed"), 1, "{l:#}");
    let part = &l["parts"]["postgres"][&source];
    assert_eq!(
        part["losses"]["trimmed"], 1,
        "booked in the sink's part: {l:#}"
    );
    assert_eq!(part["imbalance"], 0, "{l:#}");
}

// ------------------------------------------------------------------ TLS

#[test]
fn postgres_with_sslmode_require_copies_over_tls_checked_against_the_ca_file() {
    let (pg, ca) = Postgres::start_tls();
    pg.create_default("events");
    let mut section = json!({
        "url": format!("{}?sslmode=require", pg.url()),
        "ca_file": ca.display().to_string(),
        "sink_table": "events",
    });
    section["sink_batch"] = json!({ "sink_batch_rows": 2, "flush_interval_ms": 50 });
    let d = Daemon::start(config("postgres", section));
    assert_stored(&d.ingest("tls-1", r#"{"v":1}"#), "ingest");
    assert_stored(&d.ingest("tls-2", r#"{"v":2}"#), "ingest");
    wait_until(POLL_DEADLINE, "2 rows over TLS", || {
        pg.keys("events").len() == 2
    });
    let tls = pg.sql(
        "SELECT count(*) FROM pg_stat_ssl s JOIN pg_stat_activity a USING (pid) \
         WHERE a.application_name = 'opex-connector' AND s.ssl",
    );
    assert_eq!(tls, "1", "the connector's connection uses TLS");

    // Without the CA the server's certificate is refused: nothing is sent, the rows are kept.
    let mut section =
        json!({ "url": format!("{}?sslmode=require", pg.url()), "sink_table": "events" });
    section["sink_batch"] = json!({ "sink_batch_rows": 1, "flush_interval_ms": 50 });
    let d2 = Daemon::start(config("postgres", section));
    assert_stored(&d2.ingest("untrusted", r#"{"v":3}"#), "ingest");
    wait_until(POLL_DEADLINE, "a failed TLS handshake", || {
        sink_status(&d2, "postgres")["insert_failures_total"]
            .as_u64()
            .unwrap_or(0)
            >= 1
    });
    let st = sink_status(&d2, "postgres");
    assert_eq!(st["backlog_rows"], 1, "{st:#}");
    assert_eq!(st["dead_lettered_total"], 0, "{st:#}");
    assert_eq!(pg.keys("events").len(), 2);
}

// ------------------------------------------------------------------ catch-up

#[test]
fn postgres_rows_piled_up_behind_a_slow_insert_go_in_one_catch_up_insert() {
    let pg = Postgres::start();
    pg.create_default("events");
    let mut section = pg.section("events");
    section["timeout_secs"] = json!(120);
    section["sink_batch"] = json!({ "sink_batch_rows": 10, "max_insert_rows": 1000,
                                    "flush_interval_ms": 3_600_000 });
    let d = Daemon::start(config("postgres", section));
    // Another session holds the table until the test ends it: the first insert waits for it.
    let mut holder = Command::new(pg.psql())
        .args(["-X", "-q", "-h", "127.0.0.1", "-p", &pg.port().to_string()])
        .args(["-U", "postgres", "-d", "postgres", "-c"])
        .arg("BEGIN; LOCK TABLE events IN ACCESS EXCLUSIVE MODE; SELECT pg_sleep(600);")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("psql starts");
    wait_until(POLL_DEADLINE, "the table locked", || {
        pg.sql(
            "SELECT count(*) FROM pg_locks l JOIN pg_class c ON c.oid = l.relation \
             WHERE c.relname = 'events' AND l.mode = 'AccessExclusiveLock' AND l.granted",
        ) == "1"
    });
    let mut sent = Vec::new();
    for i in 0..300 {
        let key = format!("k{i:04}");
        assert_stored(&d.ingest(&key, &format!(r#"{{"n":{i}}}"#)), "ingest");
        sent.push(key);
    }
    // The first batch is the rows waiting when the sink's thread woke: 10, or more on a
    // busy box where it woke late. It waits on the lock; every other row waits behind it.
    wait_until(
        POLL_DEADLINE,
        "one batch in flight, the rest waiting",
        || {
            let st = sink_status(&d, "postgres");
            st["in_flight_rows"].as_u64().is_some_and(|n| n >= 10) && st["backlog_rows"] == 300
        },
    );
    pg.sql(
        "SELECT pg_terminate_backend(pid) FROM pg_stat_activity \
         WHERE query LIKE '%pg_sleep(600)%' AND pid <> pg_backend_pid()",
    );
    wait_until(POLL_DEADLINE, "300 rows", || pg.keys("events").len() >= 300);
    assert_eq!(pg.keys("events"), sent, "every record exactly once");
    let st = sink_status(&d, "postgres");
    assert_eq!(st["inserted_total"], 300, "{st:#}");
    assert_eq!(
        st["batches_total"], 2,
        "the first batch, then every row behind it in one insert: {st:#}"
    );
    let _ = holder.kill();
    let _ = holder.wait();
}
