//! Siemens S7 against a PLC nobody here wrote: python-snap7's server
//! (`tests/common/peers/s7.rs`), its memory filled by the test byte by byte. The driver's
//! library API reads and writes it; the `read s7` tool is run as the real binary. And the
//! other way round: the simulator's S7 CPU (`opex-connector simulate --s7`) answers
//! python-snap7's client, the `read s7` tool and the driver's library.
#![cfg(feature = "s7")]

mod common;

use std::future::Future;
use std::time::Duration;

use common::*;
use opex_connector::sources::s7::{
    minimum_requests, Connection, Endpoint, Item, ItemError, Values, WriteError,
};
use serde_json::{json, Value};

fn block_on<F: Future>(f: F) -> F::Output {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime")
        .block_on(f)
}

fn endpoint(plc: &S7Plc, pdu: u16) -> Endpoint {
    let url = format!("{}&pdu_size={pdu}", plc.url());
    Endpoint::parse_url(&url, Duration::from_secs(5)).expect("endpoint")
}

fn item(address: &str, t: &str) -> Item {
    let (t, length) = match t.strip_prefix("string") {
        Some(n) => ("string", n.parse().ok()),
        None => (t, None),
    };
    Item::parse(address, t, length).unwrap_or_else(|e| panic!("{e}"))
}

/// Opens a connection, reads `items` as planned for the negotiated PDU, closes.
fn read(plc: &S7Plc, items: &[Item]) -> Values {
    block_on(async {
        let mut conn = Connection::open(&endpoint(plc, 480)).await.expect("open");
        let plan = conn.plan(items);
        let values = conn.read(items, &plan).await.expect("read");
        conn.close().await;
        values
    })
}

fn json_of(values: &Values) -> Vec<Value> {
    values
        .iter()
        .map(|v| match v {
            Ok(v) => v.to_json(),
            Err(e) => json!({ "error": e.to_string() }),
        })
        .collect()
}

#[test]
fn every_type_decodes_to_the_value_written_into_the_plc_memory() {
    let plc = S7Plc::start(&[
        ("DB", 10, typed_db()),
        ("M", 0, vec![0x02, 0x00, 0x12, 0x34]),
        ("I", 0, vec![0x01, 0x02]),
        ("Q", 0, vec![0x00, 0x00, 0x80, 0x00, 0x01]),
    ]);
    let items = [
        item("DB10.DBX0.3", "bool"),
        item("DB10.DBX0.4", "bool"),
        item("DB10.DBX0.5", "bool"),
        item("DB10.DBB1", "byte"),
        item("DB10.DBB2", "char"),
        item("DB10.DBW4", "word"),
        item("DB10.DBW6", "int"),
        item("DB10.DBD8", "dword"),
        item("DB10.DBD12", "dint"),
        item("DB10.DBD16", "real"),
        item("DB10.DBB20", "lreal"),
        item("DB10.DBB28", "string10"),
        item("DB10.DBB40", "date_and_time"),
        item("DB10.DBB48", "dtl"),
        item("DB10.DBW60", "s5time"),
        item("DB10.DBD62", "time"),
        item("M0.1", "bool"),
        item("MW2", "word"),
        item("IW0", "word"),
        item("I0.0", "bool"),
        item("QW2", "int"),
        item("Q4.0", "bool"),
    ];
    let values = read(&plc, &items);
    assert_eq!(
        json_of(&values),
        vec![
            json!(true),
            json!(false),
            json!(true),
            json!(200),
            json!("Z"),
            json!(65534),
            json!(-2),
            json!(3_735_928_559u64),
            json!(-100_000),
            json!(-3.5),
            json!(12345.678),
            json!("Ofen 3"),
            json!("2026-12-04T18:03:49.123Z"),
            json!("2026-12-04T18:03:49.250Z"),
            json!(12300),
            json!(-5000),
            json!(true),
            json!(0x1234),
            json!(0x0102),
            json!(true),
            json!(-32768),
            json!(true),
        ]
    );
    // 22 items fit one request of the negotiated 480 bytes.
    assert_eq!(plc.read_requests(), vec![22], "{}", plc.log());
}

#[test]
fn writes_land_in_the_plc_memory_and_a_bit_write_leaves_its_neighbours_alone() {
    let mut db = vec![0u8; 40];
    db[0] = 0b1010_1010;
    let plc = S7Plc::start(&[("DB", 1, db), ("M", 0, vec![0xF0, 0x00])]);
    let writes = [
        (item("DB1.DBX0.0", "bool"), json!(true)),
        (item("DB1.DBX0.7", "bool"), json!(false)),
        (item("DB1.DBW2", "int"), json!(-2)),
        (item("DB1.DBD4", "real"), json!(21.5)),
        (item("DB1.DBB8", "string10"), json!("Hallo")),
        (
            item("DB1.DBB24", "date_and_time"),
            json!("2026-12-04T18:03:49.123Z"),
        ),
        (item("M0.1", "bool"), json!(true)),
        (item("DB1.DBW20", "int"), json!(40000)),
        (item("DB99.DBW0", "word"), json!(1)),
        (item("DB1.DBW22", "word"), json!(7)),
    ];
    let results = block_on(async {
        let mut conn = Connection::open(&endpoint(&plc, 480)).await.expect("open");
        conn.write(&writes).await
    });
    assert!(results[..7].iter().all(Result::is_ok), "{results:?}");
    assert!(
        matches!(&results[7], Err(WriteError::Refused(ItemError::Invalid(e))) if e.contains("40000 is not a whole number in -32768..=32767")),
        "{results:?}"
    );
    assert!(
        matches!(&results[8], Err(WriteError::Refused(_))),
        "{results:?}"
    );
    assert!(
        results[9].is_ok(),
        "a refused item stops nothing: {results:?}"
    );
    let memory = plc.memory("DB", 1);
    assert_eq!(memory[0], 0b0010_1011, "only bits 0 and 7 changed");
    assert_eq!(&memory[2..4], &(-2i16).to_be_bytes());
    assert_eq!(&memory[4..8], &21.5f32.to_be_bytes());
    assert_eq!(&memory[8..15], &[10, 5, b'H', b'a', b'l', b'l', b'o']);
    assert_eq!(
        &memory[20..24],
        &[0, 0, 0, 7],
        "the refused value was not sent"
    );
    assert_eq!(
        &memory[24..32],
        &[0x26, 0x12, 0x04, 0x18, 0x03, 0x49, 0x12, 0x36]
    );
    assert_eq!(plc.memory("M", 0), vec![0xF2, 0x00]);
    // Bits went as BIT items at their own address; nothing was read to write them.
    let log = plc.log();
    assert!(
        log.contains("write area=DB index=1 start=0 bit=7 data=00"),
        "{log}"
    );
    assert!(plc.read_requests().is_empty(), "{log}");
}

#[test]
fn an_item_in_a_missing_db_is_bad_with_its_reason_while_the_others_read() {
    let plc = S7Plc::start(&[("DB", 10, typed_db()), ("M", 0, vec![0x02])]);
    let items = [
        item("DB10.DBW4", "word"),
        item("DB99.DBW0", "word"),
        item("DB10.DBD400", "real"),
        item("M0.1", "bool"),
    ];
    let values = read(&plc, &items);
    assert_eq!(
        json_of(&values),
        vec![
            json!(65534),
            json!({"error": "DB99 does not exist in the PLC (S7 item error 0x0A)"}),
            json!({"error": "DB10.DBD400 is outside DB10 (S7 item error 0x05)"}),
            json!(true),
        ]
    );
}

#[test]
fn a_few_hundred_items_are_read_in_the_fewest_requests_the_negotiated_pdu_allows() {
    // 200 reals over three DBs (800 bytes) and 100 bits.
    let dbs: Vec<(&str, u16, Vec<u8>)> = (1..=3u16)
        .map(|n| {
            let bytes = (0..100u16)
                .flat_map(|i| f32::from(n * 1000 + i).to_be_bytes())
                .collect();
            ("DB", n, bytes)
        })
        .collect();
    let plc = S7Plc::start(&dbs);
    let mut items: Vec<Item> = (0..200u16)
        .map(|i| item(&format!("DB{}.DBD{}", i % 3 + 1, (i / 3) * 4), "real"))
        .collect();
    items.extend((0..100u16).map(|i| item(&format!("DB1.DBX{}.{}", i / 8, i % 8), "bool")));
    for (asked, granted) in [(960u16, 480u16), (240, 240)] {
        let before = plc.read_requests().len();
        let values = block_on(async {
            let mut conn = Connection::open(&endpoint(&plc, asked))
                .await
                .expect("open");
            assert_eq!(conn.pdu_size(), granted, "the granted PDU is the one used");
            let plan = conn.plan(&items);
            conn.read(&items, &plan).await.expect("read")
        });
        for (i, v) in values.iter().take(200).enumerate() {
            let i = i as u16;
            let expected = f64::from(((i % 3 + 1) * 1000 + i / 3) as f32);
            assert_eq!(
                v.as_ref().map(|v| v.to_json()),
                Ok(json!(expected)),
                "item {i}"
            );
        }
        assert!(values.iter().all(Result::is_ok));
        let requests = plc.read_requests().len() - before;
        assert_eq!(requests, minimum_requests(&items, granted), "PDU {granted}");
    }
    // 480: 39 items a request → 8; 240: 19 → 16.
    let per_pdu: Vec<usize> = [480, 240].map(|p| minimum_requests(&items, p)).to_vec();
    assert_eq!(per_pdu, vec![8, 16]);
}

#[test]
fn a_string_larger_than_one_answer_of_the_pdu_is_read_in_parts() {
    let mut db = vec![254u8, 250];
    db.extend((0..254u32).map(|i| b'a' + (i % 26) as u8));
    db.extend([0x12, 0x34]);
    let plc = S7Plc::start(&[("DB", 5, db)]);
    let items = [item("DB5.DBB0", "string254"), item("DB5.DBW256", "word")];
    let values = block_on(async {
        let mut conn = Connection::open(&endpoint(&plc, 240)).await.expect("open");
        let plan = conn.plan(&items);
        conn.read(&items, &plan).await.expect("read")
    });
    let expected: String = (0..250u32)
        .map(|i| char::from(b'a' + (i % 26) as u8))
        .collect();
    assert_eq!(json_of(&values), vec![json!(expected), json!(0x1234)]);
    // 256 bytes in parts of 222 and 34, and the word in a request of its own.
    assert_eq!(plc.read_requests(), vec![1, 1, 1], "{}", plc.log());
    assert_eq!(minimum_requests(&items, 240), 3);
}

#[test]
fn a_plc_that_accepts_and_never_answers_is_a_timeout_within_the_endpoint_timeout() {
    // A port that takes the TCP connection and then says nothing, as a hung CP does.
    let silent = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = silent.local_addr().expect("addr").port();
    let url = format!("s7://127.0.0.1:{port}?rack=0&slot=1");
    let ep = Endpoint::parse_url(&url, Duration::from_millis(300)).expect("endpoint");
    let started = std::time::Instant::now();
    let result = block_on(Connection::open(&ep));
    let took = started.elapsed();
    assert!(
        matches!(
            result,
            Err(opex_connector::sources::s7::Error::Timeout { what: "connect" })
        ),
        "{result:?}"
    );
    assert!(took < Duration::from_secs(3), "{took:?}");
    drop(silent);
}

#[test]
fn a_write_larger_than_the_negotiated_pdu_is_refused_before_sending() {
    let plc = S7Plc::start(&[("DB", 1, vec![0u8; 300])]);
    let long = "x".repeat(250);
    let results = block_on(async {
        let mut conn = Connection::open(&endpoint(&plc, 240)).await.expect("open");
        conn.write(&[(item("DB1.DBB0", "string254"), json!(long))])
            .await
    });
    assert!(
        matches!(
            &results[0],
            Err(WriteError::Refused(ItemError::TooLarge {
                bytes: 252,
                max: 212,
                ..
            }))
        ),
        "{results:?}"
    );
    assert!(!plc.log().contains("write "), "{}", plc.log());
}

/// Runs the binary; returns (exit status, stdout, stderr).
fn tool(args: &[&str]) -> (i32, String, String) {
    let out = run_cli(args);
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn read_s7_prints_each_value_names_a_missing_db_and_never_writes() {
    let plc = S7Plc::start(&[("DB", 10, typed_db())]);
    let url = plc.url();
    let (code, out, err) = tool(&["read", "s7", &url, "DB10.DBD16", "--type", "real"]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(
        out.trim_end().ends_with("DB10.DBD16 (real)  -3.5  good"),
        "{out}"
    );
    let (code, out, _) = tool(&[
        "read",
        "s7",
        &url,
        "DB10.DBB28",
        "DB99.DBB0",
        "--type",
        "string",
        "--length",
        "10",
        "--count",
        "2",
        "--interval-ms",
        "20",
    ]);
    assert_eq!(code, 3, "a refused item exits 3: {out}");
    assert_eq!(
        out.lines()
            .filter(|l| l.ends_with("DB10.DBB28 (string[10])  \"Ofen 3\"  good"))
            .count(),
        2,
        "{out}"
    );
    assert!(
        out.contains("DB99.DBB0 (string[10])  -  bad  DB99 does not exist in the PLC (S7 item error 0x0A): check the DB number"),
        "{out}"
    );
    // The config's words for a type that does not fit its address.
    let (code, _, err) = tool(&["read", "s7", &url, "DB10.DBW4", "--type", "real"]);
    assert_eq!(code, 2);
    assert!(
        err.contains("DB10.DBW4 does not fit the type real: it needs a double word address"),
        "{err}"
    );
    // Nobody listening: one line with what to check.
    let closed = format!("s7://127.0.0.1:{}", free_port());
    let (code, _, err) = tool(&["read", "s7", &closed, "MW0", "--timeout-ms", "2000"]);
    assert_eq!(code, 1, "{err}");
    let lines: Vec<&str> = err.lines().filter(|l| !l.trim().is_empty()).collect();
    assert_eq!(lines.len(), 1, "{err}");
    assert!(lines[0].contains("ISO-on-TCP is port 102"), "{err}");
    assert!(!plc.log().contains("write "), "{}", plc.log());
}

#[test]
fn the_simulators_s7_cpu_answers_python_snap7s_client_read_s7_and_our_driver() {
    let mut cpu = SimulatedCpu::start();
    // A client nobody here wrote: python-snap7's.
    const CLIENT: &str = r#"
import sys
import snap7
from snap7.util import get_real, set_real
c = snap7.client.Client()
c.connect("127.0.0.1", 0, 1, int(sys.argv[1]))
print("pdu", c.get_pdu_length())
print("setpoint", get_real(c.db_read(1, 16, 4), 0))
buf = bytearray(4)
set_real(buf, 0, 72.5)
c.db_write(1, 16, buf)
print("after", get_real(c.db_read(1, 16, 4), 0))
print("name", bytes(c.db_read(1, 22, 8)).decode())
c.db_write(2, 10, bytearray(b"\x01\x02\x03"))
print("db2", list(c.db_read(2, 9, 5)))
try:
    c.db_read(99, 0, 1)
    print("db99 read")
except Exception as e:
    print("db99 refused:", e)
c.disconnect()
"#;
    let out = std::process::Command::new("python3")
        .args(["-c", CLIENT, &cpu.port().to_string()])
        .output()
        .expect("run python3");
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    assert!(
        out.status.success(),
        "{text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    for line in [
        "pdu 480",
        "setpoint 180.0",
        "after 72.5",
        "name OPEX-SIM",
        "db2 [0, 1, 2, 3, 0]",
    ] {
        assert!(text.lines().any(|l| l == line), "{line:?} in:\n{text}");
    }
    assert!(text.contains("db99 refused:"), "{text}");

    // The commissioning tool: what python-snap7 wrote, the name, the pump's bit.
    let url = cpu.url();
    let (code, out, err) = tool(&["read", "s7", &url, "DB1.DBD16", "--type", "real"]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(
        out.trim_end().ends_with("DB1.DBD16 (real)  72.5  good"),
        "{out}"
    );
    let (code, out, _) = tool(&[
        "read",
        "s7",
        &url,
        "DB1.DBB20",
        "--type",
        "string",
        "--length",
        "8",
    ]);
    assert_eq!(code, 0, "{out}");
    assert!(out.contains("\"OPEX-SIM\"  good"), "{out}");

    // The driver's library: the setpoint and the pump written, each read back.
    let ep = Endpoint::parse_url(&url, Duration::from_secs(5)).expect("endpoint");
    let (setpoint, pump) = (item("DB1.DBD16", "real"), item("DB1.DBX12.0", "bool"));
    let values = block_on(async {
        let mut conn = Connection::open(&ep).await.expect("connect");
        let written = conn
            .write(&[(setpoint, json!(95.5)), (pump, json!(false))])
            .await;
        assert!(written.iter().all(Result::is_ok), "{written:?}");
        let items = vec![setpoint, pump];
        let plan = conn.plan(&items);
        let values = conn.read(&items, &plan).await.expect("read");
        conn.close().await;
        values
    });
    assert_eq!(json_of(&values), [json!(95.5), json!(false)]);
    cpu.stop();
}
