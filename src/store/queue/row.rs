//! A row's bytes: the tag header in front of the uplink line, and the logical bytes a row
//! counts for the quota.
//!
//! A row's value is a small header, then the uplink line: byte `0x00` (a JSON line never starts
//! with it; rows written before the header existed start with `{` and are read as untagged),
//! a flags byte (bit 0: the row is the copy the ledger tracks for its record), the source name's
//! length (`u16`, big-endian) and the source name. So an eviction or a delivery knows the
//! source of every row without parsing its JSON.
//!
//! Accounting is in logical bytes: key (8) + line + [`ENTRY_OVERHEAD`] per row (the header is
//! not counted, so admission can reserve a record's bytes from its line alone).

use crate::record::Record;

/// Fixed logical overhead counted for every row, on top of its key and value.
pub const ENTRY_OVERHEAD: u64 = 64;

/// Logical bytes of a row whose value is `value_len` bytes.
pub fn row_bytes(value_len: usize) -> u64 {
    8 + value_len as u64 + ENTRY_OVERHEAD
}

/// The source of a row, and whether it is the copy of its record that the ledger tracks.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Tag {
    /// The record's source (`ingest/orders`).
    pub source: String,
    /// Counted in the ledger's per-source figures (one copy per record).
    pub tracked: bool,
}

/// First byte of a row with a header.
const HEADER_MARK: u8 = 0;
/// Longest source name kept in a header; longer names are cut.
const MAX_TAG: usize = 1024;

/// A row's value: the header for `tag`, then `line`.
pub fn encode_row(tag: &Tag, line: &[u8]) -> Vec<u8> {
    let name = tag_name(&tag.source);
    let mut v = Vec::with_capacity(4 + name.len() + line.len());
    push_header(&mut v, name, tag.tracked);
    v.extend_from_slice(line);
    v
}

/// The row [`encode_row`] makes of `record`'s line for `source`, written in one buffer: the
/// line is not made first and copied. `line_len`: [`Record::line_len`], which the caller has
/// counted already for admission.
pub fn record_row(source: &str, tracked: bool, record: &Record, line_len: usize) -> Vec<u8> {
    let name = tag_name(source);
    let mut v = Vec::with_capacity(4 + name.len() + line_len);
    push_header(&mut v, name, tracked);
    record.write_line(&mut v);
    v
}

/// The source name a header keeps: at most [`MAX_TAG`] bytes.
fn tag_name(source: &str) -> &[u8] {
    let name = source.as_bytes();
    &name[..name.len().min(MAX_TAG)]
}

fn push_header(v: &mut Vec<u8>, name: &[u8], tracked: bool) {
    v.push(HEADER_MARK);
    v.push(u8::from(tracked));
    v.extend_from_slice(&(name.len() as u16).to_be_bytes());
    v.extend_from_slice(name);
}

/// Splits a row's value into its tag (`None` for rows without a header, or a damaged one)
/// and its uplink line.
pub fn decode_row(value: &[u8]) -> (Option<(&str, bool)>, &[u8]) {
    if value.first() != Some(&HEADER_MARK) || value.len() < 4 {
        return (None, value);
    }
    let len = u16::from_be_bytes([value[2], value[3]]) as usize;
    let Some(name) = value.get(4..4 + len) else {
        return (None, &value[value.len()..]);
    };
    let line = &value[4 + len..];
    match std::str::from_utf8(name) {
        Ok(name) => (Some((name, value[1] & 1 == 1)), line),
        Err(_) => (None, line),
    }
}

/// The tracked source of a row, when it has one.
pub(super) fn tracked_source(value: &[u8]) -> Option<&str> {
    match decode_row(value).0 {
        Some((source, true)) => Some(source),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_record_row_is_the_row_of_its_line_and_reads_back_as_the_record() {
        let long = "s".repeat(MAX_TAG + 10);
        for (source, tracked) in [
            ("ingest/orders", true),
            ("nats/o\"dd", false),
            (&long[..], true),
        ] {
            let record = Record::from_json(source, "k\n1", br#"{"a":[1,"\n"]}"#).unwrap();
            let tag = Tag {
                source: source.to_string(),
                tracked,
            };
            let row = record_row(source, tracked, &record, record.line_len());
            assert_eq!(row, encode_row(&tag, &record.to_line()));
            let name = &source[..source.len().min(MAX_TAG)];
            assert_eq!(row.len(), 4 + name.len() + record.line_len());
            let (header, line) = decode_row(&row);
            assert_eq!(header, Some((name, tracked)));
            assert_eq!(Record::from_line(line).unwrap(), record);
        }
    }
}
