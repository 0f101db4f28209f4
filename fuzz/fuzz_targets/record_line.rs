//! Stored record lines (dead letters, stores) read back without panicking whatever the bytes,
//! and a line that reads back writes out to the same record.
#![no_main]

use libfuzzer_sys::fuzz_target;
use opex_connector::record::Record;

fuzz_target!(|data: &[u8]| {
    if let Ok(record) = Record::from_line(data) {
        let line = record.to_line();
        let again = Record::from_line(&line).expect("a written line reads back");
        assert_eq!(again, record);
        let _ = record.payload_value();
    }
    if let Ok(record) = Record::from_json("webhook/fuzz", "k", data) {
        assert_eq!(Record::from_line(&record.to_line()).ok(), Some(record));
    }
});
