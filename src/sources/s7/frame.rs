//! The bytes on the wire: TPKT (RFC 1006) around COTP (ISO 8073 class 0) around S7comm.
//! Requests are built here; answers are parsed here, and every parser takes any bytes: a
//! short, long or lying answer is an [`Error::Protocol`], never a panic (see the property
//! test below).

use super::address::{Address, Area, Width};
use super::error::Error;

/// TPKT header: version 3, reserved, length (2 bytes, the whole frame).
pub const TPKT_LEN: usize = 4;
/// COTP data header: length 2, type DT (0xF0), last-unit flag.
const COTP_DT: [u8; 3] = [0x02, 0xF0, 0x80];
/// S7 header of a job: 10 bytes; of an answer: 12 (with error class and code).
const JOB_HEADER: usize = 10;
const ACK_HEADER: usize = 12;
/// S7 functions.
const SETUP: u8 = 0xF0;
const READ_VAR: u8 = 0x04;
const WRITE_VAR: u8 = 0x05;
/// Bytes of one item in a ReadVar/WriteVar request (an S7 ANY pointer).
pub const REQUEST_ITEM_LEN: usize = 12;
/// Bytes of a ReadVar request's header and parameter head (function, count).
pub const REQUEST_OVERHEAD: usize = JOB_HEADER + 2;
/// Bytes of a ReadVar answer's header and parameter head.
pub const RESPONSE_OVERHEAD: usize = ACK_HEADER + 2;
/// Bytes of a one-item WriteVar request besides its data: header, function and count, the
/// item, the data head.
pub const WRITE_OVERHEAD: usize = REQUEST_OVERHEAD + REQUEST_ITEM_LEN + 4;
/// Bytes in front of each item's data in a ReadVar answer.
pub const RESPONSE_ITEM_HEAD: usize = 4;

/// A frame: TPKT + `cotp`.
fn tpkt(cotp: &[u8]) -> Vec<u8> {
    let len = (TPKT_LEN + cotp.len()) as u16;
    let mut out = vec![3, 0];
    out.extend(len.to_be_bytes());
    out.extend(cotp);
    out
}

/// COTP connection request with the TSAPs and a TPDU size of 1024 bytes.
pub fn connect_request(local_tsap: u16, remote_tsap: u16) -> Vec<u8> {
    let mut cotp = vec![0x11, 0xE0, 0x00, 0x00, 0x00, 0x01, 0x00, 0xC0, 0x01, 0x0A];
    cotp.extend([0xC1, 0x02]);
    cotp.extend(local_tsap.to_be_bytes());
    cotp.extend([0xC2, 0x02]);
    cotp.extend(remote_tsap.to_be_bytes());
    tpkt(&cotp)
}

/// Checks a COTP answer to the connection request (`cotp`: the frame after TPKT).
pub fn check_connect_confirm(cotp: &[u8]) -> Result<(), Error> {
    match cotp.get(1) {
        Some(0xD0) => Ok(()),
        Some(0x80) => Err(Error::Refused(
            "it answered the ISO connection request with a disconnect".into(),
        )),
        Some(t) => Err(Error::Protocol(format!(
            "COTP type {t:#04x} instead of a connection confirm"
        ))),
        None => Err(Error::Protocol("an empty COTP frame".into())),
    }
}

/// The S7 payload of a COTP data frame (`cotp`: the frame after TPKT), and whether it is
/// the last unit of its message.
pub fn data_unit(cotp: &[u8]) -> Result<(&[u8], bool), Error> {
    let li = usize::from(
        *cotp
            .first()
            .ok_or(Error::Protocol("an empty COTP frame".into()))?,
    );
    match (cotp.get(1), cotp.get(2)) {
        (Some(0xF0), Some(flags)) if li >= 2 => {
            let payload = cotp.get(1 + li..).ok_or(Error::Protocol(
                "a COTP header longer than its frame".into(),
            ))?;
            Ok((payload, flags & 0x80 != 0))
        }
        (Some(0x80), _) => Err(Error::Io("the PLC closed the ISO connection".into())),
        _ => Err(Error::Protocol("a COTP frame that is not data".into())),
    }
}

/// A job: TPKT + COTP DT + S7 header (`seq`) + `params` + `data`.
fn job(seq: u16, params: &[u8], data: &[u8]) -> Vec<u8> {
    let mut s7 = vec![0x32, 0x01, 0x00, 0x00];
    s7.extend(seq.to_be_bytes());
    s7.extend((params.len() as u16).to_be_bytes());
    s7.extend((data.len() as u16).to_be_bytes());
    s7.extend(params);
    s7.extend(data);
    let mut cotp = COTP_DT.to_vec();
    cotp.extend(s7);
    tpkt(&cotp)
}

/// Setup communication asking for `pdu` bytes (one job in flight each way).
pub fn setup_request(seq: u16, pdu: u16) -> Vec<u8> {
    let mut params = vec![SETUP, 0x00, 0x00, 0x01, 0x00, 0x01];
    params.extend(pdu.to_be_bytes());
    job(seq, &params, &[])
}

/// Each item of a ReadVar answer: its bytes, or its return code.
pub type ReadItems = Vec<Result<Vec<u8>, u8>>;

/// An answer's parameters and data, or the request's error code.
type Answer<'a> = Result<(&'a [u8], &'a [u8]), u16>;

/// Checks an answer's header against `seq` and `function`.
fn answer(s7: &[u8], seq: u16, function: u8) -> Result<Answer<'_>, Error> {
    let bad = |why: &str| Error::Protocol(why.to_string());
    let head = s7
        .get(..ACK_HEADER)
        .ok_or(bad("an S7 answer shorter than its header"))?;
    if head[0] != 0x32 {
        return Err(bad("not an S7comm answer (protocol id)"));
    }
    if !matches!(head[1], 2 | 3) {
        return Err(Error::Protocol(format!(
            "S7 message type {} instead of an answer",
            head[1]
        )));
    }
    let got = u16::from_be_bytes([head[4], head[5]]);
    if got != seq {
        return Err(Error::Protocol(format!("answer {got} to request {seq}")));
    }
    let code = u16::from_be_bytes([head[10], head[11]]);
    if code != 0 {
        return Ok(Err(code));
    }
    let plen = usize::from(u16::from_be_bytes([head[6], head[7]]));
    let dlen = usize::from(u16::from_be_bytes([head[8], head[9]]));
    let params = s7
        .get(ACK_HEADER..ACK_HEADER + plen)
        .ok_or(bad("S7 parameters beyond the answer"))?;
    let data = s7
        .get(ACK_HEADER + plen..ACK_HEADER + plen + dlen)
        .ok_or(bad("S7 data beyond the answer"))?;
    if params.first() != Some(&function) {
        return Err(bad("an answer to another function"));
    }
    Ok(Ok((params, data)))
}

/// The PDU size the PLC granted.
pub fn parse_setup(s7: &[u8], seq: u16) -> Result<Result<u16, u16>, Error> {
    Ok(match answer(s7, seq, SETUP)? {
        Err(code) => Err(code),
        Ok((params, _)) => {
            let b = params
                .get(6..8)
                .ok_or(Error::Protocol("a short setup communication answer".into()))?;
            Ok(u16::from_be_bytes([b[0], b[1]]))
        }
    })
}

/// One item of a ReadVar: `len` bytes from `start` in `area`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Span {
    /// Where.
    pub area: Area,
    /// First byte.
    pub start: u32,
    /// How many bytes.
    pub len: u16,
}

/// An S7 ANY pointer: transport size, count, DB, area, bit address.
fn any_pointer(out: &mut Vec<u8>, transport: u8, count: u16, area: Area, bit_address: u32) {
    out.extend([0x12, 0x0A, 0x10, transport]);
    out.extend(count.to_be_bytes());
    out.extend(area.db().to_be_bytes());
    out.push(area.code());
    out.extend(&bit_address.to_be_bytes()[1..]);
}

/// A ReadVar of `spans`, each read as bytes.
pub fn read_request(seq: u16, spans: &[Span]) -> Vec<u8> {
    let mut params = vec![READ_VAR, spans.len() as u8];
    for s in spans {
        any_pointer(&mut params, 0x02, s.len, s.area, s.start * 8);
    }
    job(seq, &params, &[])
}

/// A ReadVar answer of `n` items: each item's bytes or its return code; or the request's
/// error code.
pub fn parse_read(s7: &[u8], seq: u16, n: usize) -> Result<Result<ReadItems, u16>, Error> {
    let (params, data) = match answer(s7, seq, READ_VAR)? {
        Err(code) => return Ok(Err(code)),
        Ok(pd) => pd,
    };
    if params.get(1).map(|c| usize::from(*c)) != Some(n) {
        return Err(Error::Protocol(format!(
            "an answer with another item count than {n}"
        )));
    }
    let mut items = Vec::with_capacity(n);
    let mut at = 0usize;
    for i in 0..n {
        let head = data
            .get(at..at + RESPONSE_ITEM_HEAD)
            .ok_or(Error::Protocol(
                "fewer items in the answer than asked".into(),
            ))?;
        let (code, transport) = (head[0], head[1]);
        let len = usize::from(u16::from_be_bytes([head[2], head[3]]));
        at += RESPONSE_ITEM_HEAD;
        if code != 0xFF {
            items.push(Err(code));
            continue;
        }
        // BIT, BYTE/WORD/DWORD and INTEGER give their length in bits; the others in bytes.
        let bytes = if matches!(transport, 3..=5) {
            len.div_ceil(8)
        } else {
            len
        };
        let value = data
            .get(at..at + bytes)
            .ok_or(Error::Protocol("an item's data beyond the answer".into()))?;
        items.push(Ok(value.to_vec()));
        at += bytes;
        if bytes % 2 == 1 && i + 1 < n {
            at += 1;
        }
    }
    Ok(Ok(items))
}

/// A WriteVar of one item: a bit as transport size BIT at its own bit address, anything
/// else as bytes from its byte.
pub fn write_request(seq: u16, address: &Address, bytes: &[u8]) -> Vec<u8> {
    let mut params = vec![WRITE_VAR, 1];
    let mut data = vec![0x00];
    if let Width::Bit(_) = address.width {
        any_pointer(&mut params, 0x01, 1, address.area, address.bit_address());
        data.extend([0x03, 0x00, 0x01, bytes.first().copied().unwrap_or(0) & 1]);
    } else {
        any_pointer(
            &mut params,
            0x02,
            bytes.len() as u16,
            address.area,
            address.byte * 8,
        );
        data.push(0x04);
        data.extend(((bytes.len() * 8) as u16).to_be_bytes());
        data.extend(bytes);
    }
    job(seq, &params, &data)
}

/// A WriteVar answer of one item: its return code (0xFF: written); or the request's error.
pub fn parse_write(s7: &[u8], seq: u16) -> Result<Result<u8, u16>, Error> {
    Ok(match answer(s7, seq, WRITE_VAR)? {
        Err(code) => Err(code),
        Ok((params, data)) => {
            if params.get(1) != Some(&1) {
                return Err(Error::Protocol(
                    "a write answer with another item count than 1".into(),
                ));
            }
            Ok(*data.first().ok_or(Error::Protocol(
                "a write answer without its return code".into(),
            ))?)
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn a_bit_is_written_as_transport_size_bit_at_byte_times_eight_plus_bit() {
        let at = Address::parse("DB1.DBX2.3").unwrap_or_else(|e| panic!("{e}"));
        let frame = write_request(7, &at, &[1]);
        let s7 = &frame[7..];
        // ANY pointer: 12 0A 10, transport BIT, count 1, DB 1, area 84, bit address 19.
        assert_eq!(
            &s7[12..24],
            &[0x12, 0x0A, 0x10, 0x01, 0, 1, 0, 1, 0x84, 0, 0, 19]
        );
        // Data: return code 0, transport BIT, length 1 (bit), the bit.
        assert_eq!(&s7[24..], &[0x00, 0x03, 0x00, 0x01, 0x01]);
    }

    #[test]
    fn a_read_answer_with_fill_bytes_and_a_refused_item_parses_item_by_item() {
        let mut s7 = vec![0x32, 3, 0, 0, 0, 9, 0, 2, 0, 0, 0, 0, READ_VAR, 3];
        let data = [
            0xFF, 4, 0, 8, 0xAB, 0x00, // one byte and its fill
            0x0A, 0, 0, 0, // refused: no such DB
            0xFF, 4, 0, 16, 0x12, 0x34,
        ];
        s7[8..10].copy_from_slice(&(data.len() as u16).to_be_bytes());
        s7.extend(data);
        let items = parse_read(&s7, 9, 3);
        assert_eq!(
            items,
            Ok(Ok(vec![Ok(vec![0xAB]), Err(0x0A), Ok(vec![0x12, 0x34])]))
        );
        assert!(parse_read(&s7, 10, 3).is_err(), "another sequence number");
        assert!(parse_read(&s7, 9, 4).is_err(), "another item count");
    }

    proptest! {
        #[test]
        fn the_answer_parsers_never_panic_on_any_bytes(
            bytes in proptest::collection::vec(any::<u8>(), 0..300),
            n in 0usize..30,
        ) {
            let _ = parse_read(&bytes, 1, n);
            let _ = parse_write(&bytes, 1);
            let _ = parse_setup(&bytes, 1);
            let _ = data_unit(&bytes);
            let _ = check_connect_confirm(&bytes);
        }

        #[test]
        fn the_read_parser_never_panics_on_a_well_headed_answer_with_random_items(
            tail in proptest::collection::vec(any::<u8>(), 0..300),
            n in 0u8..30,
        ) {
            // A valid header makes the parser walk the items, where lengths can lie.
            let mut s7 = vec![0x32, 3, 0, 0, 0, 1, 0, 2];
            s7.extend((tail.len() as u16).to_be_bytes());
            s7.extend([0, 0, READ_VAR, n]);
            s7.extend(&tail);
            let _ = parse_read(&s7, 1, usize::from(n));
        }
    }
}
