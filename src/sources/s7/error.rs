//! What can go wrong: [`Error`] ends a connection (reopen it, with the breaker's backoff);
//! [`ItemError`] is one item's bad quality, with the reason in words, while the others of
//! its request keep their values.

use std::fmt;

use super::address::{Address, Area};

/// Hint for S7-1200/1500 CPUs, whose protection refuses PUT/GET by default.
pub const PUT_GET_HINT: &str = "on an S7-1200/1500, allow PUT/GET communication in the CPU's protection settings and turn \"optimized block access\" off in the attributes of every DB read this way";

/// A connection failure: the connection is done; open a new one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Error {
    /// The TCP connection could not be made or broke.
    Io(String),
    /// No answer within the timeout (`what`: the step).
    Timeout {
        /// `connect`, `setup communication`, `read`, `write`.
        what: &'static str,
    },
    /// The CPU refused the ISO connection (COTP): wrong rack/slot or TSAP.
    Refused(String),
    /// The PLC answered something this client cannot read.
    Protocol(String),
}

impl Error {
    /// Whether trying again later can help (every failure but a refused connection, which
    /// needs its rack/slot or TSAPs corrected, is worth retrying with backoff).
    pub fn is_retriable(&self) -> bool {
        !matches!(self, Self::Refused(_))
    }

    /// What the technician should check.
    pub fn hint(&self) -> &'static str {
        match self {
            Self::Io(_) => "check the host and port (ISO-on-TCP is port 102), the cable, and that the CPU is powered",
            Self::Timeout { .. } => "the PLC did not answer in time: check the network, the CPU's load, and that the port is an S7 CPU or CP",
            Self::Refused(_) => "check rack and slot (S7-300: 0 and 2; S7-400: see the hardware config; S7-1200/1500: 0 and 1) or local_tsap/remote_tsap as TIA Portal shows them (\"01.00\", \"03.01\")",
            Self::Protocol(_) => "the device does not speak S7comm as expected: check that it is an S7 CPU or CP",
        }
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Io(e) => write!(f, "connection failed: {e}"),
            Self::Timeout { what } => write!(f, "no answer to {what} within the timeout"),
            Self::Refused(e) => write!(f, "the PLC refused the connection: {e}"),
            Self::Protocol(e) => write!(f, "unexpected answer: {e}"),
        }
    }
}

impl std::error::Error for Error {}

/// Why one item has no value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ItemError {
    /// The PLC refused the item with a return code (0xFF is success).
    Refused {
        /// The item.
        address: Address,
        /// The return code.
        code: u8,
    },
    /// The PLC refused the whole request (S7 header error class and code).
    Request {
        /// Error class and code, as one number (e.g. 0x8104).
        code: u16,
    },
    /// The value cannot be written in one request of the negotiated PDU.
    TooLarge {
        /// The item.
        address: Address,
        /// Its bytes.
        bytes: usize,
        /// The most one item can carry.
        max: usize,
    },
    /// The bytes came back but do not make a value of the type (e.g. not a date).
    Decode(String),
    /// A value to write that does not fit the point's type; nothing was sent.
    Invalid(String),
}

impl ItemError {
    /// What to do about it, when there is something to do.
    pub fn hint(&self) -> Option<&'static str> {
        match self {
            Self::Refused { code: 0x03, .. } | Self::Request { code: 0x8104 | 0x8500 | 0xD602 } => {
                Some(PUT_GET_HINT)
            }
            Self::Refused { code: 0x0A, address } if matches!(address.area, Area::Db(_)) => {
                Some("check the DB number in the PLC program, and on an S7-1200/1500 that the DB is not \"optimized\"")
            }
            Self::Refused { code: 0x05, .. } => {
                Some("check the offset against the DB's length in the PLC program")
            }
            Self::TooLarge { .. } => Some("raise pdu_size if the CPU allows, or write a shorter value"),
            _ => None,
        }
    }
}

impl fmt::Display for ItemError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Refused { address, code } => {
                let what = match code {
                    0x01 => format!("{address}: hardware fault in the PLC"),
                    0x03 => format!("access to {} is denied", address.area),
                    0x05 => format!("{address} is outside {}", address.area),
                    0x06 => format!("{address}: the PLC does not support this transport size"),
                    0x07 => format!("{address}: the data type is inconsistent"),
                    0x0A => format!("{} does not exist in the PLC", address.area),
                    _ => format!("{address} refused"),
                };
                write!(f, "{what} (S7 item error {code:#04X})")
            }
            Self::Request { code } => {
                let what = match code {
                    0x8104 => "the CPU refused the request: function not allowed in its protection level",
                    0x8500 => "the request does not fit the PDU the CPU accepts",
                    0xD602 => "the CPU refused the request: password or protection level",
                    _ => "the CPU refused the request",
                };
                write!(f, "{what} (S7 error {code:#06X})")
            }
            Self::TooLarge {
                address,
                bytes,
                max,
            } => write!(
                f,
                "{address}: {bytes} bytes do not fit one write request of the negotiated PDU ({max} at most)"
            ),
            Self::Decode(e) | Self::Invalid(e) => f.write_str(e),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn item_errors_read_as_words_with_their_code() {
        let at = |t: &str| Address::parse(t).unwrap_or_else(|e| panic!("{e}"));
        let missing = ItemError::Refused {
            address: at("DB99.DBW0"),
            code: 0x0A,
        };
        assert_eq!(
            missing.to_string(),
            "DB99 does not exist in the PLC (S7 item error 0x0A)"
        );
        let outside = ItemError::Refused {
            address: at("DB1.DBD400"),
            code: 0x05,
        };
        assert_eq!(
            outside.to_string(),
            "DB1.DBD400 is outside DB1 (S7 item error 0x05)"
        );
        let denied = ItemError::Refused {
            address: at("MW2"),
            code: 0x03,
        };
        assert_eq!(
            denied.to_string(),
            "access to the bit memory (M) is denied (S7 item error 0x03)"
        );
        assert_eq!(denied.hint(), Some(PUT_GET_HINT));
        assert_eq!(
            ItemError::Request { code: 0x8104 }.to_string(),
            "the CPU refused the request: function not allowed in its protection level (S7 error 0x8104)"
        );
    }
}

/// Why one write of a set did not land.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WriteError {
    /// Not written: the value did not fit, or the PLC refused the item or the request.
    Refused(ItemError),
    /// Sent, but no answer came: it may or may not have been written (at most once: it is
    /// not sent again). The connection is done.
    Unanswered(Error),
    /// Not sent: the connection failed on an earlier item of the set.
    NotSent(Error),
}

impl fmt::Display for WriteError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Refused(e) => write!(f, "refused: {e}"),
            Self::Unanswered(e) => write!(f, "sent, no answer (it may have been written): {e}"),
            Self::NotSent(e) => write!(f, "not sent: {e}"),
        }
    }
}
