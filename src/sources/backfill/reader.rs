//! The reader thread of one backfill: opens the file, checks it is the checkpointed one,
//! counts its records, then reads from the checkpoint on and hands each record to the async
//! side through a bounded channel (it blocks when the engine is slower than the disk).
//!
//! File reading never runs on the runtime's threads.

use std::fs::File;
use std::io::{BufReader, Seek, SeekFrom};
use std::thread::JoinHandle;

use tokio::sync::mpsc;

use super::checkpoint::{fingerprint, Checkpoint, FINGERPRINT_BYTES};
use super::config::{BackfillConfig, Format};
use super::parse::{
    count_records, csv_header, is_blank, read_csv_record, read_line, Line, Maker, MAX_LINE,
};
use crate::record::Record;

/// Records read ahead of the engine.
pub const READ_AHEAD: usize = 256;

/// What the reader tells the async side.
#[derive(Debug)]
pub enum Item {
    /// The file is open and counted.
    Opened {
        /// Data records in the whole file.
        total: u64,
        /// Its fingerprint (the checkpoint's, when resuming).
        fingerprint: String,
        /// Bytes the fingerprint covers.
        fingerprint_len: u64,
    },
    /// One data record (number `n`, 1-based), ending at byte `end_offset`.
    Record {
        /// Its number among the data records.
        n: u64,
        /// The byte just after it.
        end_offset: u64,
        /// The record, or why it is malformed.
        result: Result<Record, String>,
    },
    /// The file cannot be read; nothing more comes.
    Failed(String),
}

/// Starts the reader thread. The channel closes after the last record.
pub fn spawn(
    cfg: BackfillConfig,
    from: Option<Checkpoint>,
    tx: mpsc::Sender<Item>,
) -> std::io::Result<JoinHandle<()>> {
    std::thread::Builder::new()
        .name(format!("opex-backfill-{}", cfg.name))
        .spawn(move || {
            if let Err(e) = read(&cfg, from.as_ref(), &tx) {
                let _ = tx.blocking_send(Item::Failed(e));
            }
        })
}

fn read(
    cfg: &BackfillConfig,
    from: Option<&Checkpoint>,
    tx: &mpsc::Sender<Item>,
) -> Result<(), String> {
    let file_name = cfg.file.display();
    let io = |what: &str, e: std::io::Error| format!("{what} {file_name}: {e}");
    let mut file = File::open(&cfg.file).map_err(|e| io("cannot open", e))?;
    let len = file.metadata().map_err(|e| io("cannot stat", e))?.len();
    let (fp, fp_len) = match from {
        Some(cp) => {
            let (fp, n) =
                fingerprint(&mut file, cp.fingerprint_len).map_err(|e| io("cannot read", e))?;
            if fp != cp.fingerprint || n != cp.fingerprint_len || len < cp.offset {
                return Err(format!(
                    "{file_name} is not the file this backfill checkpointed (its start changed or it shrank); delete its checkpoint to start over"
                ));
            }
            (fp, n)
        }
        None => fingerprint(&mut file, FINGERPRINT_BYTES).map_err(|e| io("cannot read", e))?,
    };
    file.rewind().map_err(|e| io("cannot seek", e))?;
    let total = count_records(&mut BufReader::new(&mut file), cfg.format)
        .map_err(|e| io("cannot read", e))?;
    if tx
        .blocking_send(Item::Opened {
            total,
            fingerprint: fp.clone(),
            fingerprint_len: fp_len,
        })
        .is_err()
    {
        return Ok(());
    }
    file.rewind().map_err(|e| io("cannot seek", e))?;
    let mut reader = BufReader::new(file);
    let mut line = Line::default();
    let mut offset = 0u64;
    let mut header = Vec::new();
    if cfg.format == Format::Csv {
        loop {
            if !read_csv_record(&mut reader, &mut line, MAX_LINE)
                .map_err(|e| io("cannot read", e))?
            {
                break;
            }
            offset += line.consumed;
            if line.too_long {
                return Err(format!("{file_name}: the header is longer than 1 MiB"));
            }
            if !is_blank(&line.bytes) {
                header = csv_header(&line.bytes).map_err(|e| format!("{file_name}: {e}"))?;
                break;
            }
        }
    }
    let (mut n, start) = match from {
        Some(cp) => (cp.records, cp.offset.max(offset)),
        None => (0, offset),
    };
    if start != offset {
        reader
            .seek(SeekFrom::Start(start))
            .map_err(|e| io("cannot seek", e))?;
        offset = start;
    }
    let maker = Maker {
        source: format!("backfill/{}", cfg.name),
        name: cfg.name.clone(),
        fingerprint: fp,
        format: cfg.format,
        header,
        key_field: cfg.key_field.clone(),
        timestamp_field: cfg.timestamp_field.clone(),
    };
    loop {
        let more = match cfg.format {
            Format::Jsonl => read_line(&mut reader, &mut line, MAX_LINE),
            Format::Csv => read_csv_record(&mut reader, &mut line, MAX_LINE),
        }
        .map_err(|e| io("cannot read", e))?;
        if !more {
            return Ok(());
        }
        offset += line.consumed;
        if !line.too_long && is_blank(&line.bytes) {
            continue;
        }
        n += 1;
        let result = if line.too_long {
            Err(format!("longer than {MAX_LINE} bytes"))
        } else {
            maker.make(n, &line.bytes)
        };
        let item = Item::Record {
            n,
            end_offset: offset,
            result,
        };
        if tx.blocking_send(item).is_err() {
            // The backfill stopped; its checkpoint says where to go on.
            return Ok(());
        }
    }
}
