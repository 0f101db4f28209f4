//! `read s7 s7://HOST:PORT?rack=0&slot=1 ADDRESS... [--type T] [--length N]`: one or more
//! items of a Siemens S7 PLC read with the driver's own code (its connection, planner and
//! decoder), as a device entry would read them. Only ISO connect, setup communication and
//! ReadVar go out.

use std::io::Write;
use std::time::Duration;

use serde_json::json;

use super::{emit, number, point_line, repeat, runtime, text, Error, Flags, Outcome};
use crate::record::now_ms;
use crate::sources::s7::{Address, Connection, DataType, Endpoint, Item, Width};

/// The type read when `--type` is not given: the address's width as unsigned (a bit as a
/// bool).
fn default_type(address: &Address) -> DataType {
    match address.width {
        Width::Bit(_) => DataType::Bool,
        Width::Byte => DataType::Byte,
        Width::Word => DataType::Word,
        Width::DWord => DataType::DWord,
    }
}

/// The items of the command line, checked as a config checks them.
fn items(addresses: &[&str], flags: &Flags<'_>) -> Result<Vec<Item>, Error> {
    if addresses.is_empty() {
        return Err(Error::Usage(
            "read s7 needs at least one address (e.g. DB10.DBD4 --type real)".into(),
        ));
    }
    let length = match text(flags, "--length") {
        Some(_) => Some(number(flags, "--length", 0, 1..=254)? as u32),
        None => None,
    };
    addresses
        .iter()
        .map(|a| {
            let address = Address::parse(a).map_err(Error::Usage)?;
            let data_type = match text(flags, "--type") {
                Some(t) => {
                    DataType::parse(t, length).map_err(|e| Error::Usage(format!("--type: {e}")))?
                }
                None => default_type(&address),
            };
            Item::new(address, data_type).map_err(Error::Usage)
        })
        .collect()
}

/// `read s7 URL ADDRESS...`: reads the items `--count` times, `--interval-ms` apart, and
/// prints each value with its quality, or the PLC's reason and what to check.
pub fn read(
    url: &str,
    addresses: &[&str],
    flags: &Flags<'_>,
    out: &mut dyn Write,
) -> Result<Outcome, Error> {
    let (count, interval) = repeat(flags)?;
    let timeout = Duration::from_millis(number(flags, "--timeout-ms", 3000, 100..=60_000)?);
    let endpoint = Endpoint::parse_url(url, timeout).map_err(Error::Usage)?;
    let items = items(addresses, flags)?;
    let labels: Vec<String> = items
        .iter()
        .map(|i| format!("{} ({})", i.address, describe(i.data_type)))
        .collect();
    runtime()?.block_on(async {
        let mut outcome = Outcome::Done;
        let mut conn: Option<Connection> = None;
        for round in 0..count {
            if round > 0 {
                tokio::time::sleep(interval).await;
            }
            let at = now_ms();
            let result = match conn.take() {
                Some(c) => Ok(c),
                None => Connection::open(&endpoint).await,
            };
            let result = match result {
                Ok(mut c) => {
                    let plan = c.plan(&items);
                    let read = c.read(&items, &plan).await;
                    if read.is_ok() {
                        conn = Some(c);
                    }
                    read
                }
                Err(e) => Err(e),
            };
            let values = match result {
                Ok(values) => values,
                Err(e) if round == 0 => {
                    return Err(Error::Failed(format!("{url}: {e}: {}", e.hint())))
                }
                Err(e) => {
                    outcome = Outcome::Partial;
                    let why = format!("{e}: {}", e.hint());
                    for label in &labels {
                        let bad = json!({"value": null, "quality": "bad"});
                        emit(out, &point_line(at, label, &bad, Some(&why)))?;
                    }
                    continue;
                }
            };
            for (label, value) in labels.iter().zip(values) {
                match value {
                    Ok(v) => {
                        let good = json!({"value": v.to_json(), "quality": "good"});
                        emit(out, &point_line(at, label, &good, None))?;
                    }
                    Err(e) => {
                        outcome = Outcome::Partial;
                        let why = match e.hint() {
                            Some(hint) => format!("{e}: {hint}"),
                            None => e.to_string(),
                        };
                        let bad = json!({"value": null, "quality": "bad"});
                        emit(out, &point_line(at, label, &bad, Some(&why)))?;
                    }
                }
            }
        }
        if let Some(c) = conn {
            c.close().await;
        }
        Ok(outcome)
    })
}

/// `real`, `string[20]`.
fn describe(t: DataType) -> String {
    match t {
        DataType::String { length } => format!("string[{length}]"),
        other => other.name().to_string(),
    }
}
