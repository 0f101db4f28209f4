//! The S7 data types a point can have, decoded from and encoded to the PLC's big-endian bytes.
//!
//! Text types (`char`, `string`) are single bytes per character as the CPU stores them; they
//! are read as Latin-1 and a write refuses a character beyond U+00FF. `date_and_time` (BCD)
//! and `dtl` are shown as RFC 3339 text with `Z`: the PLC stores no offset, and S7-1500
//! system time is UTC. `s5time` and `time` are milliseconds.

use std::fmt;

use super::address::{Address, Width};

/// A point's data type.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum DataType {
    /// BOOL: one bit.
    Bool,
    /// BYTE: 0..=255.
    Byte,
    /// CHAR: one character.
    Char,
    /// WORD: 0..=65535.
    Word,
    /// INT: -32768..=32767.
    Int,
    /// DWORD: 0..=4294967295.
    DWord,
    /// DINT: 32-bit signed.
    DInt,
    /// REAL: 32-bit float.
    Real,
    /// LREAL: 64-bit float.
    LReal,
    /// STRING[length]: `length` is the declared maximum in characters; two header bytes
    /// (maximum, actual) come first.
    String {
        /// The declared maximum, 1..=254.
        length: u8,
    },
    /// DATE_AND_TIME: 8 BCD bytes.
    DateAndTime,
    /// DTL: 12 bytes (year, month, day, weekday, hour, minute, second, nanoseconds).
    Dtl,
    /// S5TIME: a BCD count of a time base, in milliseconds.
    S5Time,
    /// TIME: signed milliseconds.
    Time,
}

/// A decoded value.
#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    /// BOOL.
    Bool(bool),
    /// BYTE, WORD, DWORD.
    Unsigned(u64),
    /// INT, DINT, TIME, S5TIME (milliseconds).
    Signed(i64),
    /// REAL, LREAL.
    Float(f64),
    /// CHAR, STRING, DATE_AND_TIME and DTL (RFC 3339).
    Text(String),
}

impl Value {
    /// The value as JSON: booleans as `true`/`false`, numbers as numbers, text as text (a
    /// float that is not finite is `null`).
    pub fn to_json(&self) -> serde_json::Value {
        match self {
            Self::Bool(b) => (*b).into(),
            Self::Unsigned(n) => (*n).into(),
            Self::Signed(n) => (*n).into(),
            Self::Float(x) => serde_json::Number::from_f64(*x)
                .map(serde_json::Value::Number)
                .unwrap_or(serde_json::Value::Null),
            Self::Text(t) => t.clone().into(),
        }
    }
}

impl fmt::Display for Value {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.to_json())
    }
}

impl DataType {
    /// Parses a config's or a flag's type name; `length` is a string's declared maximum.
    pub fn parse(name: &str, length: Option<u32>) -> Result<DataType, String> {
        let t = match name {
            "bool" => Self::Bool,
            "byte" => Self::Byte,
            "char" => Self::Char,
            "word" => Self::Word,
            "int" => Self::Int,
            "dword" => Self::DWord,
            "dint" => Self::DInt,
            "real" => Self::Real,
            "lreal" => Self::LReal,
            "date_and_time" => Self::DateAndTime,
            "dtl" => Self::Dtl,
            "s5time" => Self::S5Time,
            "time" => Self::Time,
            "string" => {
                let length = length.ok_or("a string needs its length (its declared maximum in characters, 1 to 254)")?;
                let length = u8::try_from(length)
                    .ok()
                    .filter(|l| (1..=254).contains(l))
                    .ok_or(format!("a string's length is 1 to 254 characters, not {length}"))?;
                return Ok(Self::String { length });
            }
            other => {
                return Err(format!(
                    "unknown S7 type {other:?} (bool, byte, char, word, int, dword, dint, real, lreal, string, date_and_time, dtl, s5time, time)"
                ))
            }
        };
        if length.is_some() {
            return Err("only a string takes a length".into());
        }
        Ok(t)
    }

    /// The type's name as a config writes it.
    pub fn name(self) -> &'static str {
        match self {
            Self::Bool => "bool",
            Self::Byte => "byte",
            Self::Char => "char",
            Self::Word => "word",
            Self::Int => "int",
            Self::DWord => "dword",
            Self::DInt => "dint",
            Self::Real => "real",
            Self::LReal => "lreal",
            Self::String { .. } => "string",
            Self::DateAndTime => "date_and_time",
            Self::Dtl => "dtl",
            Self::S5Time => "s5time",
            Self::Time => "time",
        }
    }

    /// How many bytes the value takes in the PLC (a bool is read as its byte).
    pub fn size(self) -> usize {
        match self {
            Self::Bool | Self::Byte | Self::Char => 1,
            Self::Word | Self::Int | Self::S5Time => 2,
            Self::DWord | Self::DInt | Self::Real | Self::Time => 4,
            Self::LReal | Self::DateAndTime => 8,
            Self::Dtl => 12,
            Self::String { length } => 2 + usize::from(length),
        }
    }

    /// The address width the type is written with in TIA Portal.
    fn width_name(self) -> &'static str {
        match self {
            Self::Bool => "a bit address (DBX, M0.1, I0.1, Q4.0)",
            Self::Word | Self::Int | Self::S5Time => "a word address (DBW, MW, IW, QW)",
            Self::DWord | Self::DInt | Self::Real | Self::Time => {
                "a double word address (DBD, MD, ID, QD)"
            }
            _ => "a byte address (DBB, MB, IB, QB)",
        }
    }

    /// Whether the type fits `address`'s width; the error says which width it needs.
    pub fn check_width(self, address: &Address) -> Result<(), String> {
        let fits = matches!(
            (self, address.width),
            (Self::Bool, Width::Bit(_))
                | (Self::Word | Self::Int | Self::S5Time, Width::Word)
                | (
                    Self::DWord | Self::DInt | Self::Real | Self::Time,
                    Width::DWord
                )
                | (
                    Self::Byte
                        | Self::Char
                        | Self::LReal
                        | Self::String { .. }
                        | Self::DateAndTime
                        | Self::Dtl,
                    Width::Byte
                )
        );
        if fits {
            Ok(())
        } else {
            Err(format!(
                "{address} does not fit the type {}: it needs {}",
                self.name(),
                self.width_name()
            ))
        }
    }

    /// Decodes the type from `bytes` as read from the PLC (`bit` for a bool); an error says
    /// what is wrong with the bytes.
    pub fn decode(self, bytes: &[u8], bit: u8) -> Result<Value, String> {
        let need = self.size();
        let b = bytes.get(..need).ok_or_else(|| {
            format!(
                "the PLC sent {} bytes for a {} of {need}",
                bytes.len(),
                self.name()
            )
        })?;
        let be = |n: usize| {
            b.iter()
                .take(n)
                .fold(0u64, |acc, x| (acc << 8) | u64::from(*x))
        };
        Ok(match self {
            Self::Bool => Value::Bool((b[0] >> (bit & 7)) & 1 == 1),
            Self::Byte | Self::Word | Self::DWord => Value::Unsigned(be(need)),
            Self::Char => Value::Text(char::from(b[0]).to_string()),
            Self::Int => Value::Signed(i64::from(be(2) as u16 as i16)),
            Self::DInt | Self::Time => Value::Signed(i64::from(be(4) as u32 as i32)),
            Self::Real => Value::Float(widen(f32::from_bits(be(4) as u32))),
            Self::LReal => Value::Float(f64::from_bits(be(8))),
            Self::String { length } => {
                let actual = usize::from(b[1].min(b[0]).min(length));
                Value::Text(b[2..2 + actual].iter().map(|c| char::from(*c)).collect())
            }
            Self::DateAndTime => Value::Text(super::clock::date_and_time(b)?),
            Self::Dtl => Value::Text(super::clock::dtl(b)?),
            Self::S5Time => Value::Signed(super::clock::s5time_ms(be(2) as u16)?),
        })
    }

    /// Encodes `value` (JSON, as the commands path carries it) into the bytes written to the
    /// PLC (a bool: one byte, 0 or 1, written as a BIT item).
    pub fn encode(self, value: &serde_json::Value) -> Result<Vec<u8>, String> {
        let whole = |min: i64, max: i64| -> Result<i64, String> {
            let x = value
                .as_f64()
                .ok_or_else(|| format!("a {} takes a number, not {value}", self.name()))?;
            let r = x.round();
            if (r - x).abs() > 1e-9 || r < min as f64 || r > max as f64 {
                return Err(format!(
                    "{value} is not a whole number in {min}..={max} for a {}",
                    self.name()
                ));
            }
            Ok(r as i64)
        };
        let text = || {
            value
                .as_str()
                .ok_or_else(|| format!("a {} takes text, not {value}", self.name()))
        };
        Ok(match self {
            Self::Bool => match value {
                serde_json::Value::Bool(b) => vec![u8::from(*b)],
                _ => vec![whole(0, 1)? as u8],
            },
            Self::Byte => vec![whole(0, 255)? as u8],
            Self::Word => (whole(0, 65535)? as u16).to_be_bytes().to_vec(),
            Self::Int => (whole(-32768, 32767)? as i16).to_be_bytes().to_vec(),
            Self::DWord => (whole(0, u32::MAX.into())? as u32).to_be_bytes().to_vec(),
            Self::DInt | Self::Time => (whole(i32::MIN.into(), i32::MAX.into())? as i32)
                .to_be_bytes()
                .to_vec(),
            Self::Real => {
                let x = value.as_f64().ok_or("a real takes a number")?;
                let f = x as f32;
                if !f.is_finite() {
                    return Err(format!("{value} is outside a real's range"));
                }
                f.to_be_bytes().to_vec()
            }
            Self::LReal => value
                .as_f64()
                .ok_or("an lreal takes a number")?
                .to_be_bytes()
                .to_vec(),
            Self::Char => {
                let t = text()?;
                let mut chars = t.chars();
                match (chars.next(), chars.next()) {
                    (Some(c), None) => vec![latin1(c)?],
                    _ => return Err(format!("a char takes one character, not {t:?}")),
                }
            }
            Self::String { length } => {
                let t = text()?;
                let chars = t.chars().map(latin1).collect::<Result<Vec<u8>, _>>()?;
                if chars.len() > usize::from(length) {
                    return Err(format!(
                        "{} characters do not fit a string of {length}",
                        chars.len()
                    ));
                }
                let mut out = vec![length, chars.len() as u8];
                out.extend(chars);
                out
            }
            Self::DateAndTime => super::clock::encode_date_and_time(text()?)?,
            Self::Dtl => super::clock::encode_dtl(text()?)?,
            Self::S5Time => super::clock::encode_s5time(whole(0, 9_990_000)?)?.to_vec(),
        })
    }
}

/// A REAL as the f64 of its shortest decimal text: 3.14 stays 3.14 (not 3.140000104904175).
fn widen(x: f32) -> f64 {
    x.to_string().parse().unwrap_or(f64::from(x))
}

/// One character as the PLC stores it.
fn latin1(c: char) -> Result<u8, String> {
    u8::try_from(u32::from(c))
        .map_err(|_| format!("{c:?} is not a character an S7 string holds (Latin-1)"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn round_trip(t: DataType, v: serde_json::Value) -> serde_json::Value {
        let mut bytes = t.encode(&v).unwrap_or_else(|e| panic!("{e}"));
        // A string is written up to its actual length and read to its maximum.
        bytes.resize(t.size(), 0);
        t.decode(&bytes, 0)
            .unwrap_or_else(|e| panic!("{e}"))
            .to_json()
    }

    #[test]
    fn numbers_are_big_endian_and_signed_where_the_type_is() {
        assert_eq!(
            DataType::Int.decode(&[0xFF, 0xFE], 0),
            Ok(Value::Signed(-2))
        );
        assert_eq!(
            DataType::Word.decode(&[0xFF, 0xFE], 0),
            Ok(Value::Unsigned(65534))
        );
        assert_eq!(
            DataType::DInt.encode(&json!(-100000)),
            Ok(vec![0xFF, 0xFE, 0x79, 0x60])
        );
        assert_eq!(
            DataType::Real.encode(&json!(1.5)),
            Ok(vec![0x3F, 0xC0, 0, 0])
        );
        assert_eq!(
            DataType::Bool.decode(&[0b0000_1000], 3),
            Ok(Value::Bool(true))
        );
        assert_eq!(
            DataType::Bool.decode(&[0b1111_0111], 3),
            Ok(Value::Bool(false))
        );
        for (t, v) in [
            (DataType::LReal, json!(-2.25)),
            (DataType::DWord, json!(4_000_000_000u64)),
            (DataType::Time, json!(-5000)),
            (DataType::S5Time, json!(12300)),
            (DataType::String { length: 10 }, json!("Ofen 3")),
            (DataType::Char, json!("é")),
        ] {
            assert_eq!(round_trip(t, v.clone()), v, "{t:?}");
        }
    }

    #[test]
    fn writes_out_of_range_or_of_the_wrong_kind_are_refused_before_sending() {
        assert!(DataType::Int.encode(&json!(40000)).is_err());
        assert!(DataType::Word.encode(&json!(-1)).is_err());
        assert!(DataType::Byte.encode(&json!(1.5)).is_err());
        assert!(DataType::String { length: 3 }
            .encode(&json!("four"))
            .is_err());
        assert!(DataType::String { length: 9 }.encode(&json!("€")).is_err());
        assert!(DataType::Real.encode(&json!(1e40)).is_err());
    }

    #[test]
    fn a_type_must_fit_its_address_width() {
        let at = |t: &str| Address::parse(t).unwrap_or_else(|e| panic!("{e}"));
        assert!(DataType::Real.check_width(&at("DB10.DBD4")).is_ok());
        assert!(DataType::Bool.check_width(&at("DB1.DBX0.3")).is_ok());
        assert!(DataType::String { length: 8 }
            .check_width(&at("DB1.DBB10"))
            .is_ok());
        let e = DataType::Real
            .check_width(&at("DB10.DBW4"))
            .err()
            .unwrap_or_default();
        assert_eq!(e, "DB10.DBW4 does not fit the type real: it needs a double word address (DBD, MD, ID, QD)");
        assert!(DataType::Int.check_width(&at("M0.1")).is_err());
        assert!(DataType::parse("string", None).is_err());
        assert!(DataType::parse("string", Some(255)).is_err());
        assert!(DataType::parse("real", Some(4)).is_err());
    }

    #[test]
    fn a_string_longer_than_its_header_allows_is_cut_at_its_maximum() {
        let t = DataType::String { length: 4 };
        assert_eq!(
            t.decode(&[4, 200, b'a', b'b', b'c', b'd'], 0),
            Ok(Value::Text("abcd".into()))
        );
        assert!(t.decode(&[4, 2, b'a'], 0).is_err());
    }
}
