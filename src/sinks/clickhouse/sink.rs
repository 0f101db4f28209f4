//! The ClickHouse sink's runtime: a delivered record waits in the backlog as it is; the sink's
//! thread encodes each batch and inserts it in one request. A batch goes as `RowBinary` (see
//! `binary.rs`: the server reads it without parsing text) when every value of it fits its
//! column's type exactly, else as `JSONEachRow` lines, which the server judges as before.
//!
//! Errors: ClickHouse answers a failed query with a non-200 status and a body starting with
//! `Code: N. DB::Exception: ...` (18.16 and current; current ones also send the code in
//! `X-ClickHouse-Exception-Code`). The code sorts a failure (`classify`):
//! - the destination's configuration (`DESTINATION_CODES`: unknown table, database or
//!   column, access denied, authentication): the sink holds, keeps the rows and retries them,
//!   and nothing is dead-lettered; HTTP 401 and 403 without a code are the same.
//! - the rows (`ROW_CODES`: a value that does not parse as its column's type): refused, the
//!   row goes to the dead-letter queue with the message.
//! - everything else (connection refused, timeout, too many parts, memory limit, server
//!   starting): retried.

use std::sync::Arc;
use std::time::Duration;

use serde_json::{json, Value};

use super::binary::Layout;
use super::config::ClickHouseConfig;
use crate::admission::Reservation;
use crate::http::client::{Client, Request};
use crate::record::Record;
use crate::sinks::backlog::columns::{extract, text};
use crate::sinks::backlog::{
    Backlog, Column, InsertError, Inserter, Row, TableDestination, RETRY_INITIAL, RETRY_MAX,
};
use crate::sinks::queue::{DeliveryConfig, Destination};
use crate::sinks::report::Report;
use crate::sinks::{Delivered, DeliveryError, Running, StartContext};

/// Most bytes of an error body read.
const MAX_ERROR_BODY: usize = 16 * 1024;
/// Most bytes of a `DESCRIBE TABLE` answer read.
const MAX_DESCRIBE_BODY: usize = 256 * 1024;
/// Longest a `DESCRIBE TABLE` may take; without an answer the batch goes as `JSONEachRow`.
const DESCRIBE_TIMEOUT: Duration = Duration::from_secs(5);

/// ClickHouse error codes that name the destination's configuration, which an operator fixes:
/// the sink holds instead of dead-lettering rows that are not at fault.
const DESTINATION_CODES: &[u32] = &[
    8,   // THERE_IS_NO_COLUMN
    16,  // NO_SUCH_COLUMN_IN_TABLE
    47,  // UNKNOWN_IDENTIFIER
    60,  // UNKNOWN_TABLE
    62,  // SYNTAX_ERROR (the statement is ours; the rows travel as data)
    81,  // UNKNOWN_DATABASE
    192, // UNKNOWN_USER (older servers)
    193, // WRONG_PASSWORD (older servers)
    194, // REQUIRED_PASSWORD (older servers)
    497, // ACCESS_DENIED
    516, // AUTHENTICATION_FAILED
];

/// ClickHouse error codes that mean the rows themselves are wrong, so that the same insert can
/// never succeed: refused, and a row refused alone goes to the dead-letter queue.
const ROW_CODES: &[u32] = &[
    6,   // CANNOT_PARSE_TEXT
    25,  // CANNOT_PARSE_ESCAPE_SEQUENCE
    26,  // CANNOT_PARSE_QUOTED_STRING
    27,  // CANNOT_PARSE_INPUT_ASSERTION_FAILED
    32,  // ATTEMPT_TO_READ_AFTER_EOF
    38,  // CANNOT_PARSE_DATE
    41,  // CANNOT_PARSE_DATETIME
    53,  // TYPE_MISMATCH
    69,  // ARGUMENT_OUT_OF_BOUND
    70,  // CANNOT_CONVERT_TYPE
    72,  // CANNOT_PARSE_NUMBER
    117, // INCORRECT_DATA
    131, // TOO_LARGE_STRING_SIZE
    349, // CANNOT_INSERT_NULL_IN_ORDINARY_COLUMN
    467, // CANNOT_PARSE_BOOL
];

/// A ClickHouse sink.
pub struct ClickHouseSink {
    name: String,
    cfg: ClickHouseConfig,
    /// The memory backlog; `None` with `queue: disk` (the sink's queue is in front instead).
    /// A row is the record alone: the insert thread encodes its batch.
    backlog: Option<Backlog<()>>,
}

impl ClickHouseSink {
    /// Sink `name`, with an empty backlog unless it has `queue: disk`; [`Self::start`] starts
    /// inserting.
    pub fn new(name: &str, cfg: ClickHouseConfig) -> Self {
        let backlog = (!cfg.queue.is_disk())
            .then(|| Backlog::new(name, cfg.table.join("."), cfg.batch.clone()));
        Self {
            name: name.to_string(),
            cfg,
            backlog,
        }
    }

    /// The memory backlog (`None` with `queue: disk`).
    pub fn backlog(&self) -> Option<&Backlog<()>> {
        self.backlog.as_ref()
    }

    /// Takes one record into the memory backlog; returns once it is there (not yet inserted).
    pub fn deliver(
        &self,
        record: &Record,
        tracked: bool,
        reservation: Reservation,
    ) -> Result<Delivered, DeliveryError> {
        let Some(backlog) = &self.backlog else {
            return Err(DeliveryError::Publish("the sink has no backlog".into()));
        };
        backlog.push(
            Row {
                record: record.clone(),
                tracked,
                data: (),
            },
            reservation,
        )?;
        Ok(Delivered::Stored)
    }

    /// Starts the insert thread of the memory backlog. It runs until [`Self::close`], then
    /// inserts what is left (bounded by the stop deadline) and ends.
    pub fn start(self: &Arc<Self>, ctx: &StartContext) -> std::io::Result<Running> {
        let mut running = Running::default();
        if self.backlog.is_none() {
            return Ok(running);
        }
        let sink = Arc::clone(self);
        let engine = Arc::clone(&ctx.engine);
        running.on_close.push(
            std::thread::Builder::new()
                .name(format!("ch-{}", self.name))
                .spawn(move || {
                    crate::priority::background_thread();
                    let mut inserter = HttpInserter::new(&sink.cfg);
                    if let Some(backlog) = &sink.backlog {
                        backlog.run(&mut inserter, &engine);
                    }
                })?,
        );
        Ok(running)
    }

    /// The table as the destination of the sink's `queue: disk`.
    pub fn destination(&self) -> Box<dyn Destination> {
        Box::new(TableDestination::new(
            HttpInserter::new(&self.cfg),
            |_: &Record| (),
        ))
    }

    /// Batch size, back-off and linger of the deliverer of its `queue: disk`: the backlog's
    /// (a short batch waits up to `flush_interval` for more rows, and a queue that built up
    /// goes up to `max_insert_rows` an insert, as in the backlog).
    pub fn delivery(&self) -> DeliveryConfig {
        DeliveryConfig {
            batch_rows: self.cfg.batch.batch_rows,
            max_rows: self.cfg.batch.max_insert_rows,
            retry_initial: RETRY_INITIAL,
            retry_max: RETRY_MAX,
            linger: self.cfg.batch.flush_interval,
        }
    }

    /// Everything the rest of the program reads of it (the queue's part comes from the queue).
    pub fn report(&self) -> Report {
        match &self.backlog {
            Some(b) => b.report(),
            None => Report {
                status: json!({"table": self.cfg.table.join(".")}),
                accepting: true,
                ..Report::default()
            },
        }
    }

    /// The last insert error in full, for the admin endpoint.
    pub fn error_detail(&self) -> Value {
        self.backlog
            .as_ref()
            .map_or(Value::Null, |b| b.error_detail())
    }

    /// Stops taking rows and lets the thread finish. Idempotent.
    pub fn close(&self) {
        if let Some(b) = &self.backlog {
            b.close();
        }
    }
}

/// One `JSONEachRow` line (without the newline): `{"col":value,...}`. Objects and arrays
/// become JSON text (the whole payload keeps its original text); a pointer that finds
/// nothing leaves the column out, so ClickHouse writes its default.
pub fn encode_row(record: &Record, columns: &[Column]) -> String {
    let values = extract(record, columns);
    let mut line = String::with_capacity(64 + record.payload.get().len());
    line.push('{');
    let mut first = true;
    for (c, v) in columns.iter().zip(values) {
        let Some(v) = v else { continue };
        if !first {
            line.push(',');
        }
        first = false;
        // Column names are plain identifiers (validated): no escaping needed.
        line.push('"');
        line.push_str(&c.name);
        line.push_str("\":");
        match &v {
            Value::Object(_) | Value::Array(_) => {
                line.push_str(&Value::String(text(record, c, &v)).to_string());
            }
            other => line.push_str(&other.to_string()),
        }
    }
    line.push('}');
    line
}

struct HttpInserter {
    client: Client,
    columns: Vec<Column>,
    /// `INSERT ... FORMAT RowBinary`.
    binary_url: String,
    /// `INSERT ... FORMAT JSONEachRow`.
    json_url: String,
    /// `DESCRIBE TABLE ...`.
    describe_url: String,
    auth: String,
    /// The column types, read before the first insert and again after a failed one: `None`
    /// until read, `Some(None)` when a column is missing or not written in binary.
    layout: Option<Option<Layout>>,
    /// The batch's body, kept between inserts so its allocation is reused.
    body: Vec<u8>,
}

impl HttpInserter {
    fn new(cfg: &ClickHouseConfig) -> Self {
        let table: Vec<String> = cfg.table.iter().map(|t| format!("`{t}`")).collect();
        let table = table.join(".");
        let cols: Vec<String> = cfg
            .columns
            .iter()
            .map(|c| format!("`{}`", c.name))
            .collect();
        let insert = format!("INSERT INTO {table} ({})", cols.join(","));
        let url = |query: &str| format!("{}/?query={}", cfg.url, percent_encode(query));
        Self {
            client: Client::new(cfg.timeout),
            columns: cfg.columns.clone(),
            binary_url: url(&format!("{insert} FORMAT RowBinary")),
            json_url: url(&format!("{insert} FORMAT JSONEachRow")),
            describe_url: url(&format!("DESCRIBE TABLE {table} FORMAT TabSeparated")),
            auth: format!(
                "Basic {}",
                base64(format!("{}:{}", cfg.user, cfg.password).as_bytes())
            ),
            layout: None,
            body: Vec::new(),
        }
    }

    fn describe(&mut self) -> Option<Option<Layout>> {
        let request = Request::get(&self.describe_url)
            .header("Authorization", &self.auth)
            .timeout(DESCRIBE_TIMEOUT)
            .max_body(MAX_DESCRIBE_BODY);
        let reply = self.client.send(request).ok()?;
        if reply.status() != 200 {
            return None;
        }
        let text = std::str::from_utf8(reply.body()).ok()?;
        Some(Layout::read(text, &self.columns))
    }

    /// The batch as `RowBinary` into `body`; false when a value of it cannot be written so.
    /// The column types are read first when not known; a failed read leaves them unknown
    /// (read again at the next batch) and this batch to `JSONEachRow`, whose insert then
    /// says what is wrong.
    fn encode_binary(&mut self, rows: &[Row<()>]) -> bool {
        if self.layout.is_none() {
            self.layout = self.describe();
        }
        let Some(Some(layout)) = &self.layout else {
            return false;
        };
        self.body.clear();
        rows.iter()
            .all(|r| layout.encode(&r.record, &mut self.body))
    }

    fn post(&mut self, binary: bool) -> Result<(), InsertError> {
        let (url, content_type) = if binary {
            (&self.binary_url, "application/octet-stream")
        } else {
            (&self.json_url, "application/x-ndjson")
        };
        let request = Request::post(url, &self.body)
            .header("Authorization", &self.auth)
            .header("Content-Type", content_type)
            .max_body(MAX_ERROR_BODY);
        let reply = match self.client.send(request) {
            Ok(r) => r,
            Err(e) => return Err(InsertError::Transient(format!("request failed: {e}"))),
        };
        let status = reply.status();
        let header_code = reply
            .header("X-ClickHouse-Exception-Code")
            .and_then(|v| v.trim().parse::<u32>().ok());
        if status == 200 && header_code.is_none() {
            return Ok(());
        }
        Err(classify(status, header_code, reply.text().trim()))
    }
}

impl Inserter<()> for HttpInserter {
    fn insert(&mut self, rows: &[Row<()>]) -> Result<(), InsertError> {
        let binary = self.encode_binary(rows);
        if !binary {
            self.body.clear();
            for r in rows {
                self.body
                    .extend_from_slice(encode_row(&r.record, &self.columns).as_bytes());
                self.body.push(b'\n');
            }
        }
        let result = self.post(binary);
        if result.is_err() {
            // The table may have changed: read its types again before the next batch.
            self.layout = None;
        }
        // Keep a large batch's buffer only while it is in use.
        if self.body.capacity() > 16 << 20 {
            self.body = Vec::new();
        }
        result
    }
}

/// Sorts a failed insert into retried, held or refused for good.
fn classify(status: u16, header_code: Option<u32>, body: &str) -> InsertError {
    let code = header_code.or_else(|| body_code(body));
    let msg = if body.is_empty() {
        format!("HTTP {status}")
    } else {
        format!("HTTP {status}: {body}")
    };
    match code {
        Some(c) if DESTINATION_CODES.contains(&c) => InsertError::Destination(msg),
        Some(c) if ROW_CODES.contains(&c) => InsertError::Permanent(msg),
        None if matches!(status, 401 | 403) => InsertError::Destination(msg),
        _ => InsertError::Transient(msg),
    }
}

/// The `N` of a body starting `Code: N.`.
fn body_code(body: &str) -> Option<u32> {
    let rest = body.strip_prefix("Code: ")?;
    let end = rest.find(|c: char| !c.is_ascii_digit())?;
    rest[..end].parse().ok()
}

fn percent_encode(s: &str) -> String {
    let mut out = String::with_capacity(s.len() * 3);
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b'~') {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

fn base64(data: &[u8]) -> String {
    const ABC: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::with_capacity(data.len().div_ceil(3) * 4);
    for chunk in data.chunks(3) {
        let b = [
            chunk[0],
            chunk.get(1).copied().unwrap_or(0),
            chunk.get(2).copied().unwrap_or(0),
        ];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        for (i, shift) in [18, 12, 6, 0].iter().enumerate() {
            if i <= chunk.len() {
                out.push(ABC[((n >> shift) & 63) as usize] as char);
            } else {
                out.push('=');
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::sinks::backlog::config::default_columns;

    #[test]
    fn a_row_is_one_json_object_with_the_payload_as_its_original_text() {
        let mut r = Record::from_json("ingest/line", "p1", br#"{"z":1,"a":[true]}"#).unwrap();
        r.ts_ms = 42;
        let line = encode_row(&r, &default_columns());
        let v: Value = serde_json::from_str(&line).unwrap();
        assert_eq!(
            v,
            json!({"ts": 42, "source": "ingest/line", "key": "p1", "payload": r#"{"z":1,"a":[true]}"#})
        );
    }

    #[test]
    fn a_missing_field_leaves_its_column_to_the_default() {
        let r = Record::from_value("s", "k", &json!({"a": 1}));
        let cols = vec![
            Column {
                name: "a".into(),
                field: "/payload/a".into(),
            },
            Column {
                name: "b".into(),
                field: "/payload/b".into(),
            },
        ];
        assert_eq!(encode_row(&r, &cols), r#"{"a":1}"#);
    }

    #[test]
    fn a_missing_table_column_or_database_or_a_refused_login_holds_and_bad_rows_are_refused() {
        let bad = "Code: 16. DB::Exception: No such column nope in table default.events.";
        assert!(
            matches!(classify(500, None, bad), InsertError::Destination(m) if m.contains("No such column"))
        );
        for code in [60, 81, 47, 497, 516] {
            assert!(classify(404, Some(code), "x").is_destination(), "{code}");
        }
        assert!(
            classify(516, None, "Code: 516. DB::Exception: Authentication failed").is_destination()
        );
        assert!(classify(401, None, "").is_destination());
        assert!(matches!(
            classify(400, Some(117), "x"),
            InsertError::Permanent(_)
        ));
        assert!(matches!(
            classify(400, None, "Code: 27. DB::Exception: Cannot parse input"),
            InsertError::Permanent(_)
        ));
        assert!(classify(500, None, "Code: 241. DB::Exception: Memory limit").is_retriable());
        assert!(classify(503, None, "").is_retriable());
    }

    #[test]
    fn basic_auth_and_the_query_are_encoded() {
        assert_eq!(base64(b"default:"), "ZGVmYXVsdDo=");
        assert_eq!(base64(b"ab"), "YWI=");
        assert_eq!(base64(b"abc"), "YWJj");
        assert_eq!(percent_encode("INSERT INTO `t`"), "INSERT%20INTO%20%60t%60");
    }
}
