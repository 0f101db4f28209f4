//! The addresses technicians copy from TIA Portal and STEP 7: `DB10.DBD4`, `DB10.DBW2`,
//! `DB10.DBB0`, `DB1.DBX0.3`, `MW20`, `MD24`, `MB3`, `M0.1`, `IW0`, `I0.1`, `QW2`, `Q4.0`
//! (and the German mnemonics `E` for inputs and `A` for outputs: `EW0`, `A4.0`). Letters may
//! be written in either case; the address is shown back in the English form.

use std::fmt;

/// The memory area of an address, with its S7 area code.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Area {
    /// Inputs (process image), `I` / `E`, code 0x81.
    Inputs,
    /// Outputs (process image), `Q` / `A`, code 0x82.
    Outputs,
    /// Bit memory (flags, merkers), `M`, code 0x83.
    Flags,
    /// A data block, `DBn`, code 0x84.
    Db(u16),
}

impl Area {
    /// The area code of an S7 ANY pointer.
    pub fn code(self) -> u8 {
        match self {
            Self::Inputs => 0x81,
            Self::Outputs => 0x82,
            Self::Flags => 0x83,
            Self::Db(_) => 0x84,
        }
    }

    /// The DB number (0 outside data blocks).
    pub fn db(self) -> u16 {
        match self {
            Self::Db(n) => n,
            _ => 0,
        }
    }
}

impl fmt::Display for Area {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Inputs => f.write_str("the inputs (I)"),
            Self::Outputs => f.write_str("the outputs (Q)"),
            Self::Flags => f.write_str("the bit memory (M)"),
            Self::Db(n) => write!(f, "DB{n}"),
        }
    }
}

/// How wide the address is: the letter after the area (`X`, `B`, `W`, `D`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Width {
    /// One bit: `DBX0.3`, `M0.1`.
    Bit(u8),
    /// One byte: `DBB0`, `MB3`; also the start of longer values (LREAL, STRING, DTL).
    Byte,
    /// Two bytes: `DBW2`, `MW20`.
    Word,
    /// Four bytes: `DBD4`, `MD24`.
    DWord,
}

/// The highest byte offset an S7 ANY pointer can carry (its bit address has 24 bits).
pub const MAX_BYTE: u32 = (1 << 21) - 1;

/// A parsed address: area, byte offset and width (with the bit of a bit address).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Address {
    /// Where.
    pub area: Area,
    /// The byte offset in the area.
    pub byte: u32,
    /// How wide.
    pub width: Width,
}

impl Address {
    /// Parses `text`; the error says what is wrong in a technician's words.
    pub fn parse(text: &str) -> Result<Address, String> {
        let upper = text.trim().to_ascii_uppercase();
        let bad = |why: &str| {
            format!("{text:?} is not an S7 address ({why}; e.g. DB10.DBD4, DB1.DBX0.3, MW20, I0.1, Q4.0)")
        };
        let (area, rest) = if let Some(rest) = upper.strip_prefix("DB") {
            let (number, rest) = rest
                .split_once('.')
                .ok_or_else(|| bad("a DB address is DBn.DBX, DBB, DBW or DBD and an offset"))?;
            let db: u16 = number
                .parse()
                .ok()
                .filter(|n| *n > 0)
                .ok_or_else(|| bad("the DB number is a whole number from 1 to 65535"))?;
            let rest = rest
                .strip_prefix("DB")
                .ok_or_else(|| bad("after DBn. comes DBX, DBB, DBW or DBD"))?;
            if !rest.starts_with(['X', 'B', 'W', 'D']) {
                return Err(bad("after DBn. comes DBX, DBB, DBW or DBD"));
            }
            (Area::Db(db), rest)
        } else {
            let mut chars = upper.chars();
            let area = match chars.next() {
                Some('I' | 'E') => Area::Inputs,
                Some('Q' | 'A') => Area::Outputs,
                Some('M') => Area::Flags,
                _ => return Err(bad("it starts with DB, M, I or Q")),
            };
            (area, chars.as_str())
        };
        let (letter, offset) = match rest.chars().next() {
            Some(c @ ('X' | 'B' | 'W' | 'D')) => (Some(c), &rest[1..]),
            _ => (None, rest),
        };
        let (byte, bit) = match offset.split_once('.') {
            Some((b, bit)) => (b, Some(bit)),
            None => (offset, None),
        };
        let byte: u32 = byte
            .parse()
            .ok()
            .filter(|b| *b <= MAX_BYTE)
            .ok_or_else(|| {
                bad(&format!(
                    "the byte offset is a whole number up to {MAX_BYTE}"
                ))
            })?;
        let width = match (letter, bit) {
            (Some('X') | None, Some(bit)) => {
                let bit = bit
                    .parse::<u8>()
                    .ok()
                    .filter(|b| *b < 8)
                    .ok_or_else(|| bad("the bit is 0 to 7"))?;
                Width::Bit(bit)
            }
            (Some('X') | None, None) => return Err(bad("a bit address needs its bit, as in .3")),
            (Some(_), Some(_)) => return Err(bad("only a bit address (X) takes a bit")),
            (Some('B'), None) => Width::Byte,
            (Some('W'), None) => Width::Word,
            (Some(_), None) => Width::DWord,
        };
        Ok(Address { area, byte, width })
    }

    /// The bit address of an ANY pointer: byte × 8 + bit.
    pub fn bit_address(&self) -> u32 {
        let bit = match self.width {
            Width::Bit(b) => u32::from(b),
            _ => 0,
        };
        self.byte * 8 + bit
    }
}

impl fmt::Display for Address {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (prefix, letter) = match self.area {
            Area::Db(n) => (format!("DB{n}.DB"), "X"),
            Area::Inputs => ("I".to_string(), ""),
            Area::Outputs => ("Q".to_string(), ""),
            Area::Flags => ("M".to_string(), ""),
        };
        match self.width {
            Width::Bit(bit) => write!(f, "{prefix}{letter}{}.{bit}", self.byte),
            Width::Byte => write!(f, "{prefix}B{}", self.byte),
            Width::Word => write!(f, "{prefix}W{}", self.byte),
            Width::DWord => write!(f, "{prefix}D{}", self.byte),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parsed(text: &str) -> (Area, u32, Width) {
        let a = Address::parse(text).unwrap_or_else(|e| panic!("{e}"));
        (a.area, a.byte, a.width)
    }

    #[test]
    fn the_tia_portal_forms_parse_to_area_byte_and_bit() {
        assert_eq!(parsed("DB10.DBD4"), (Area::Db(10), 4, Width::DWord));
        assert_eq!(parsed("DB10.DBW2"), (Area::Db(10), 2, Width::Word));
        assert_eq!(parsed("DB10.DBB0"), (Area::Db(10), 0, Width::Byte));
        assert_eq!(parsed("DB1.DBX0.3"), (Area::Db(1), 0, Width::Bit(3)));
        assert_eq!(parsed("MW20"), (Area::Flags, 20, Width::Word));
        assert_eq!(parsed("MD24"), (Area::Flags, 24, Width::DWord));
        assert_eq!(parsed("M0.1"), (Area::Flags, 0, Width::Bit(1)));
        assert_eq!(parsed("IW0"), (Area::Inputs, 0, Width::Word));
        assert_eq!(parsed("I0.1"), (Area::Inputs, 0, Width::Bit(1)));
        assert_eq!(parsed("QW2"), (Area::Outputs, 2, Width::Word));
        assert_eq!(parsed("Q4.0"), (Area::Outputs, 4, Width::Bit(0)));
        assert_eq!(parsed(" db1.dbx2.7 "), (Area::Db(1), 2, Width::Bit(7)));
        assert_eq!(parsed("EW4"), (Area::Inputs, 4, Width::Word));
        assert_eq!(parsed("A1.2"), (Area::Outputs, 1, Width::Bit(2)));
        assert_eq!(Address::parse("DB1.DBX0.3").map(|a| a.bit_address()), Ok(3));
        assert_eq!(Address::parse("Q4.1").map(|a| a.bit_address()), Ok(33));
    }

    #[test]
    fn addresses_show_back_in_the_english_form() {
        for text in [
            "DB10.DBD4",
            "DB1.DBX0.3",
            "DB7.DBB9",
            "MW20",
            "M0.1",
            "I0.1",
            "QW2",
        ] {
            assert_eq!(Address::parse(text).map(|a| a.to_string()), Ok(text.into()));
        }
        assert_eq!(
            Address::parse("EW4").map(|a| a.to_string()),
            Ok("IW4".into())
        );
    }

    #[test]
    fn malformed_addresses_say_what_is_wrong() {
        let why = |t: &str| Address::parse(t).err().unwrap_or_default();
        assert!(why("DB1.DBX0.8").contains("the bit is 0 to 7"));
        assert!(why("DB1.DBX0").contains("needs its bit"));
        assert!(why("DB0.DBW2").contains("DB number"));
        assert!(why("DB10.DBW2.1").contains("only a bit address"));
        assert!(why("DB10.W2").contains("DBX, DBB, DBW or DBD"));
        assert!(why("DB10").contains("DBn.DBX"));
        assert!(why("T5").contains("starts with DB, M, I or Q"));
        assert!(why("MW").contains("byte offset"));
        assert!(why("MW99999999").contains("byte offset"));
        assert!(why("").contains("starts with"));
    }
}
