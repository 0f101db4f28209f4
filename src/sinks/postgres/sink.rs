//! The Postgres sink's runtime: a delivered record waits in the backlog as it is; the sink's
//! thread encodes each batch as binary `COPY` rows (`encode.rs`) and copies it with one
//! `COPY ... FROM STDIN (FORMAT binary)`, a transaction of its own that the server has
//! committed when the `COPY` returns. It runs on its own single-threaded runtime, so a slow
//! database never occupies the daemon's runtime.
//!
//! The column types are read once per connection (`SELECT <columns> FROM <table> LIMIT 0`),
//! which also finds a missing table or column before any row is sent. The SQLSTATE sorts a
//! failure (`classify`):
//! - the destination's configuration, which an operator fixes (class 42, syntax error or
//!   access rule violation: 42P01 undefined table, 42703 undefined column, 42501 missing
//!   privilege; 3F000 no such schema; 3D000 no such database; class 28, credentials): the
//!   records travel as `COPY` data and never enter the statement, so none of these is about a
//!   record. The sink holds, keeps the rows and retries them; nothing is dead-lettered.
//! - the rows (class 22 data exception, 23 integrity constraint), and values that do not fit
//!   their column's type: refused, the row goes to the dead-letter queue with the message.
//! - everything else (connection refused or lost, timeout, shutdown, server starting):
//!   retried on a new connection.

use std::str::FromStr;
use std::sync::Arc;

use bytes::BytesMut;
use futures_util::SinkExt;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::CertificateDer;
use serde_json::{json, Value};
use tokio_postgres::config::SslMode;
use tokio_postgres::{Client, NoTls};
use tokio_postgres_rustls::MakeRustlsConnect;

use super::config::PostgresConfig;
use super::encode::{RowPlan, COPY_HEADER, COPY_TRAILER};
use crate::admission::Reservation;
use crate::record::Record;
use crate::sinks::backlog::{
    Backlog, InsertError, Inserter, Row, TableDestination, RETRY_INITIAL, RETRY_MAX,
};
use crate::sinks::queue::{DeliveryConfig, Destination};
use crate::sinks::report::Report;
use crate::sinks::{Delivered, DeliveryError, Running, StartContext};

/// A Postgres sink.
pub struct PostgresSink {
    name: String,
    cfg: PostgresConfig,
    /// The memory backlog; `None` with `queue: disk` (the sink's queue is in front instead).
    /// A row is the record alone: the copy thread encodes its batch.
    backlog: Option<Backlog<()>>,
}

impl PostgresSink {
    /// Sink `name`, with an empty backlog unless it has `queue: disk`; [`Self::start`] starts
    /// copying.
    pub fn new(name: &str, cfg: PostgresConfig) -> Self {
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

    /// Takes one record into the memory backlog; returns once it is there (not yet written).
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

    /// Starts the copy thread of the memory backlog. It runs until [`Self::close`], then
    /// writes what is left (bounded by the stop deadline) and ends.
    pub fn start(self: &Arc<Self>, ctx: &StartContext) -> std::io::Result<Running> {
        let mut running = Running::default();
        if self.backlog.is_none() {
            return Ok(running);
        }
        let sink = Arc::clone(self);
        let engine = Arc::clone(&ctx.engine);
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?;
        running.on_close.push(
            std::thread::Builder::new()
                .name(format!("pg-{}", self.name))
                .spawn(move || {
                    crate::priority::background_thread();
                    let mut inserter = CopyInserter::new(&sink.cfg, rt);
                    if let Some(backlog) = &sink.backlog {
                        backlog.run(&mut inserter, &engine);
                    }
                })?,
        );
        Ok(running)
    }

    /// The table as the destination of the sink's `queue: disk` (its own single-threaded
    /// runtime drives the connection on the deliverer's thread).
    pub fn destination(&self) -> std::io::Result<Box<dyn Destination>> {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?;
        Ok(Box::new(TableDestination::new(
            CopyInserter::new(&self.cfg, rt),
            |_: &Record| (),
        )))
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

    /// The last copy error in full, for the admin endpoint.
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

/// Bytes per `CopyData` message.
const COPY_CHUNK: usize = 64 * 1024;

struct CopyInserter {
    rt: tokio::runtime::Runtime,
    link: Link,
}

/// The connection side, apart from the runtime that drives it.
struct Link {
    cfg: PostgresConfig,
    pg: Result<tokio_postgres::Config, String>,
    tls: Result<Option<MakeRustlsConnect>, String>,
    client: Option<Client>,
    /// How each column is written, from its type: read once per connection.
    plan: Option<RowPlan>,
    select: String,
    copy: String,
}

impl CopyInserter {
    fn new(cfg: &PostgresConfig, rt: tokio::runtime::Runtime) -> Self {
        let table: Vec<String> = cfg.table.iter().map(|t| format!("\"{t}\"")).collect();
        let table = table.join(".");
        let cols: Vec<String> = cfg
            .columns
            .iter()
            .map(|c| format!("\"{}\"", c.name))
            .collect();
        let cols = cols.join(", ");
        let pg = tokio_postgres::Config::from_str(&cfg.url)
            .map(|mut pg| {
                if pg.get_connect_timeout().is_none() {
                    pg.connect_timeout(cfg.timeout);
                }
                if pg.get_application_name().is_none() {
                    pg.application_name("opex-connector");
                }
                pg
            })
            .map_err(|e| format!("bad url: {e}"));
        let tls = match &pg {
            Ok(pg) if pg.get_ssl_mode() == SslMode::Require => tls(cfg).map(Some),
            _ => Ok(None),
        };
        Self {
            rt,
            link: Link {
                cfg: cfg.clone(),
                pg,
                tls,
                client: None,
                plan: None,
                select: format!("SELECT {cols} FROM {table} LIMIT 0"),
                copy: format!("COPY {table} ({cols}) FROM STDIN (FORMAT binary)"),
            },
        }
    }
}

impl Inserter<()> for CopyInserter {
    fn insert(&mut self, rows: &[Row<()>]) -> Result<(), InsertError> {
        let timeout = self.link.cfg.timeout;
        let link = &mut self.link;
        let result = self
            .rt
            .block_on(async { tokio::time::timeout(timeout, link.copy(rows)).await });
        match result {
            Ok(Ok(())) => Ok(()),
            Ok(Err(e)) => {
                if e.is_retriable() {
                    link.client = None;
                }
                link.plan = None;
                Err(e)
            }
            Err(_) => {
                link.client = None;
                link.plan = None;
                Err(InsertError::Transient(format!(
                    "no answer within {}s",
                    timeout.as_secs()
                )))
            }
        }
    }
}

impl Link {
    async fn connect(&mut self) -> Result<(), InsertError> {
        if self.client.as_ref().is_some_and(|c| !c.is_closed()) {
            return Ok(());
        }
        self.plan = None;
        let pg = self
            .pg
            .as_ref()
            .map_err(|e| InsertError::Transient(e.clone()))?;
        let tls = self
            .tls
            .as_ref()
            .map_err(|e| InsertError::Transient(e.clone()))?;
        let client = match tls {
            Some(tls) => {
                let (client, conn) = pg.connect(tls.clone()).await.map_err(|e| classify(&e))?;
                tokio::spawn(async move {
                    if let Err(e) = conn.await {
                        log::debug!("postgres connection ended: error=\"{e}\"");
                    }
                });
                client
            }
            None => {
                let (client, conn) = pg.connect(NoTls).await.map_err(|e| classify(&e))?;
                tokio::spawn(async move {
                    if let Err(e) = conn.await {
                        log::debug!("postgres connection ended: error=\"{e}\"");
                    }
                });
                client
            }
        };
        self.client = Some(client);
        Ok(())
    }

    async fn copy(&mut self, rows: &[Row<()>]) -> Result<(), InsertError> {
        self.connect().await?;
        if self.plan.is_none() {
            let Some(client) = &self.client else {
                return Err(InsertError::Transient("not connected".into()));
            };
            let stmt = client
                .prepare(&self.select)
                .await
                .map_err(|e| classify(&e))?;
            let types: Vec<_> = stmt.columns().iter().map(|c| c.type_().clone()).collect();
            self.plan = Some(RowPlan::new(&self.cfg.columns, &types));
        }
        let Some(plan) = &self.plan else {
            return Err(InsertError::Transient("no column types".into()));
        };
        // The whole batch is encoded before the COPY starts: a value that does not fit its
        // column refuses the batch without sending any of it.
        let mut data = BytesMut::with_capacity(
            COPY_HEADER.len()
                + rows
                    .iter()
                    .map(|r| 64 + r.record.payload.get().len())
                    .sum::<usize>(),
        );
        data.extend_from_slice(COPY_HEADER);
        for row in rows {
            plan.write(&row.record, &mut data)
                .map_err(InsertError::Permanent)?;
        }
        data.extend_from_slice(COPY_TRAILER);
        let Some(client) = self.client.as_mut() else {
            return Err(InsertError::Transient("not connected".into()));
        };
        // One transaction per batch, confirmed by the answer to its COMMIT: a batch counts as
        // inserted only once the server has committed it. Dropped unfinished, it rolls back.
        let tx = client.transaction().await.map_err(|e| classify(&e))?;
        let mut sink = Box::pin(
            tx.copy_in::<_, bytes::Bytes>(&self.copy)
                .await
                .map_err(|e| classify(&e))?,
        );
        while !data.is_empty() {
            let chunk = data.split_to(data.len().min(COPY_CHUNK)).freeze();
            sink.feed(chunk).await.map_err(|e| classify(&e))?;
        }
        sink.as_mut().finish().await.map_err(|e| classify(&e))?;
        tx.commit().await.map_err(|e| classify(&e))?;
        Ok(())
    }
}

/// What an SQLSTATE says about a failure.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum SqlState {
    /// The destination's configuration: table, column, schema, database, privilege,
    /// credentials.
    Destination,
    /// The rows: a value or a constraint.
    Rows,
    /// Anything else: retried.
    Other,
}

impl SqlState {
    fn of(code: &str) -> Self {
        match code.get(..2) {
            Some("42" | "3F" | "3D" | "28") => Self::Destination,
            Some("22" | "23") => Self::Rows,
            _ => Self::Other,
        }
    }

    /// True for an error an operator fixes in the database or the sink's config.
    fn is_destination(self) -> bool {
        self == Self::Destination
    }
}

/// Sorts a failed statement into retried, held or refused for good, with the server's message.
fn classify(e: &tokio_postgres::Error) -> InsertError {
    let Some(db) = e.as_db_error() else {
        return InsertError::Transient(full_error(e));
    };
    let code = db.code().code();
    let mut msg = format!("{} {code}: {}", db.severity(), db.message());
    if let Some(d) = db.detail() {
        msg.push_str(&format!(" (detail: {d})"));
    }
    if let Some(w) = db.where_() {
        msg.push_str(&format!(" (where: {w})"));
    }
    let state = SqlState::of(code);
    if state.is_destination() {
        InsertError::Destination(msg)
    } else if state == SqlState::Rows {
        InsertError::Permanent(msg)
    } else {
        InsertError::Transient(msg)
    }
}

/// The error and its causes on one line (`tokio_postgres::Error` shows only its kind).
fn full_error(e: &(dyn std::error::Error + 'static)) -> String {
    let mut s = e.to_string();
    let mut cause = e.source();
    while let Some(c) = cause {
        let text = c.to_string();
        if !s.contains(&text) {
            s.push_str(": ");
            s.push_str(&text);
        }
        cause = c.source();
    }
    s
}

/// The rustls connector for `sslmode=require`: ring, and `ca_file` or the Mozilla roots.
fn tls(cfg: &PostgresConfig) -> Result<MakeRustlsConnect, String> {
    let mut roots = rustls::RootCertStore::empty();
    match &cfg.ca_file {
        Some(path) => {
            let pem = std::fs::read(path).map_err(|e| format!("{}: {e}", path.display()))?;
            for cert in CertificateDer::pem_slice_iter(&pem) {
                let cert = cert.map_err(|e| format!("{}: {e}", path.display()))?;
                roots
                    .add(cert)
                    .map_err(|e| format!("{}: {e}", path.display()))?;
            }
            if roots.is_empty() {
                return Err(format!("{}: no certificate in it", path.display()));
            }
        }
        None => roots.extend(webpki_roots::TLS_SERVER_ROOTS.iter().cloned()),
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| e.to_string())?
        .with_root_certificates(roots)
        .with_no_client_auth();
    Ok(MakeRustlsConnect::new(config))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_missing_table_column_schema_database_privilege_or_login_names_the_destination() {
        for code in [
            "42P01", "42703", "42501", "42601", "3F000", "3D000", "28P01", "28000",
        ] {
            assert_eq!(SqlState::of(code), SqlState::Destination, "{code}");
        }
        for code in ["22P02", "22003", "23502", "23505"] {
            assert_eq!(SqlState::of(code), SqlState::Rows, "{code}");
        }
        for code in ["57P01", "08006", "53300", "40001", ""] {
            assert_eq!(SqlState::of(code), SqlState::Other, "{code}");
        }
    }
}
