//! The simulator's Siemens S7 CPU: the same small plant as the Modbus device (its own
//! instance), served over S7comm on ISO-on-TCP (RFC 1006), so `read s7`, an S7 device and any
//! S7 client (python-snap7's among them) have a PLC to talk to without one.
//!
//! It answers what a gateway sends: the ISO connection request (any TSAPs, so any rack and
//! slot), setup communication (the PDU asked for, at most [`MAX_PDU`]), ReadVar and WriteVar
//! with several items. Every value is big-endian, as in a real CPU. The memory:
//!
//! | address | type | what |
//! | --- | --- | --- |
//! | `DB1.DBD0` | REAL | oven temperature, °C (follows the setpoint, as the Modbus plant's) |
//! | `DB1.DBD4` | REAL | coolant temperature, °C |
//! | `DB1.DBD8` | DINT | parts counter (2 per second) |
//! | `DB1.DBX12.0` | BOOL | pump running (20 s on, 10 s off). **Writable**: then it stays as written |
//! | `DB1.DBX12.1` | BOOL | oven alarm (more than 4 °C above the setpoint) |
//! | `DB1.DBW14` | INT | line pressure, 0.1 bar |
//! | `DB1.DBD16` | REAL | oven setpoint, °C (180 at start). **Writable**: a value that is not finite or outside 0..=400 is refused with item error 0x07 |
//! | `DB1.DBB20` | STRING\[8\] | `'OPEX-SIM'` (its two header bytes, then the text) |
//! | `DB1.DBB30`..`DBB63` | | zero |
//! | `DB2.DBB0`..`DBB1023` | | **scratch**: zero until written; keeps what is written |
//! | `MB0`..`MB255`, `QB0`..`QB63` | | scratch, as DB2 |
//! | `IB0`..`IB63` | | inputs: `I0.0` the pump, `I0.1` the alarm, the rest zero; read only (item error 0x03) |
//!
//! Another DB is item error 0x0A (the object does not exist), a byte past an area's end 0x05,
//! any other write to DB1 0x03 (access denied), as a PLC answers them.

use std::io;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

use super::modbus::{Controls, Plant, MAX_SETPOINT_C};
use crate::shutdown::Shutdown;

/// The largest PDU granted (an S7-400's; an S7-1500 grants 960).
pub const MAX_PDU: u16 = 480;
/// Bytes of DB1, the plant's values.
const DB1_LEN: usize = 64;
/// Bytes of DB2, the flags (M), the outputs (Q) and the inputs (I).
const DB2_LEN: usize = 1024;
const FLAGS_LEN: usize = 256;
const IO_LEN: usize = 64;
/// The longest frame taken: a PDU and its TPKT and COTP headers, with room.
const MAX_FRAME: usize = 4096;

/// Item return codes of S7comm.
const OK: u8 = 0xFF;
const ACCESS_DENIED: u8 = 0x03;
const OUT_OF_RANGE: u8 = 0x05;
const TYPE_NOT_SUPPORTED: u8 = 0x06;
const DATA_INCONSISTENT: u8 = 0x07;
const NO_SUCH_OBJECT: u8 = 0x0A;

/// The CPU: the plant and the writable memory, shared by every connection.
#[derive(Debug)]
pub struct Cpu {
    started: Instant,
    state: Mutex<Memory>,
}

#[derive(Debug)]
struct Memory {
    controls: Controls,
    db2: Vec<u8>,
    flags: Vec<u8>,
    outputs: Vec<u8>,
}

impl Default for Cpu {
    fn default() -> Self {
        Self {
            started: Instant::now(),
            state: Mutex::new(Memory {
                controls: Controls::default(),
                db2: vec![0; DB2_LEN],
                flags: vec![0; FLAGS_LEN],
                outputs: vec![0; IO_LEN],
            }),
        }
    }
}

/// An item's area, as its ANY pointer names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Area {
    Inputs,
    Outputs,
    Flags,
    Db(u16),
    Other,
}

impl Area {
    fn of(code: u8, db: u16) -> Self {
        match code {
            0x81 => Self::Inputs,
            0x82 => Self::Outputs,
            0x83 => Self::Flags,
            0x84 => Self::Db(db),
            _ => Self::Other,
        }
    }
}

impl Cpu {
    fn secs(&self) -> f64 {
        self.started.elapsed().as_secs_f64()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Memory> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// DB1 now.
    fn db1(&self, m: &Memory) -> [u8; DB1_LEN] {
        let p = Plant::at(self.secs(), 0, &m.controls);
        let mut db = [0u8; DB1_LEN];
        db[0..4].copy_from_slice(&p.oven_c.to_be_bytes());
        db[4..8].copy_from_slice(&p.coolant_c.to_be_bytes());
        db[8..12].copy_from_slice(&p.parts.to_be_bytes());
        db[12] = u8::from(p.pump_on) | (u8::from(p.oven_c > p.setpoint_c + 4.0) << 1);
        db[14..16].copy_from_slice(&p.pressure_dbar.to_be_bytes());
        db[16..20].copy_from_slice(&p.setpoint_c.to_be_bytes());
        db[20] = 8;
        db[21] = 8;
        db[22..30].copy_from_slice(b"OPEX-SIM");
        db
    }

    /// `len` bytes from byte `start` of `area`, or the item's return code.
    pub fn read(&self, code: u8, db: u16, start: usize, len: usize) -> Result<Vec<u8>, u8> {
        let m = self.lock();
        let db1;
        let inputs;
        let bytes: &[u8] = match Area::of(code, db) {
            Area::Db(1) => {
                db1 = self.db1(&m);
                &db1
            }
            Area::Db(2) => &m.db2,
            Area::Db(_) => return Err(NO_SUCH_OBJECT),
            Area::Flags => &m.flags,
            Area::Outputs => &m.outputs,
            Area::Inputs => {
                let mut i = vec![0u8; IO_LEN];
                i[0] = self.db1(&m)[12];
                inputs = i;
                &inputs
            }
            Area::Other => return Err(TYPE_NOT_SUPPORTED),
        };
        bytes
            .get(start..start + len)
            .map(<[u8]>::to_vec)
            .ok_or(OUT_OF_RANGE)
    }

    /// Writes `data` at byte `start` of `area` (a bit when `bit` names one); the item's return
    /// code.
    pub fn write(&self, code: u8, db: u16, start: usize, bit: Option<u8>, data: &[u8]) -> u8 {
        let secs = self.secs();
        let mut m = self.lock();
        let scratch = match Area::of(code, db) {
            Area::Db(1) => return write_db1(&mut m.controls, secs, start, bit, data),
            Area::Db(2) => &mut m.db2,
            Area::Db(_) => return NO_SUCH_OBJECT,
            Area::Flags => &mut m.flags,
            Area::Outputs => &mut m.outputs,
            Area::Inputs => return ACCESS_DENIED,
            Area::Other => return TYPE_NOT_SUPPORTED,
        };
        match bit {
            Some(b) => match (scratch.get_mut(start), data.first()) {
                (Some(byte), Some(v)) => {
                    *byte = (*byte & !(1 << b)) | ((v & 1) << b);
                    OK
                }
                (None, _) => OUT_OF_RANGE,
                (_, None) => DATA_INCONSISTENT,
            },
            None => match scratch.get_mut(start..start + data.len()) {
                Some(to) => {
                    to.copy_from_slice(data);
                    OK
                }
                None => OUT_OF_RANGE,
            },
        }
    }
}

/// A write to DB1: the pump bit, or the setpoint's four bytes; anything else is refused.
fn write_db1(c: &mut Controls, secs: f64, start: usize, bit: Option<u8>, data: &[u8]) -> u8 {
    match (start, bit, data) {
        (12, Some(0), [v, ..]) => {
            c.pump = Some(v & 1 == 1);
            OK
        }
        (16, None, [a, b, x, y]) => {
            let v = f32::from_be_bytes([*a, *b, *x, *y]);
            if v.is_finite() && (0.0..=MAX_SETPOINT_C).contains(&v) {
                c.set_setpoint(secs, v);
                OK
            } else {
                DATA_INCONSISTENT
            }
        }
        _ if start >= DB1_LEN => OUT_OF_RANGE,
        _ => ACCESS_DENIED,
    }
}

/// Serves S7 connections on `listener` until `shutdown`.
pub async fn serve(listener: TcpListener, shutdown: Shutdown) -> io::Result<()> {
    let cpu = Arc::new(Cpu::default());
    loop {
        let (stream, _) = tokio::select! {
            accepted = listener.accept() => accepted?,
            () = shutdown.wait() => return Ok(()),
        };
        let _ = stream.set_nodelay(true);
        let (cpu, shutdown) = (Arc::clone(&cpu), shutdown.clone());
        tokio::spawn(async move {
            tokio::select! {
                _ = connection(stream, &cpu) => {}
                () = shutdown.wait() => {}
            }
        });
    }
}

/// One client: frames in, answers out, until it closes or sends what no PLC would take.
async fn connection(mut stream: TcpStream, cpu: &Cpu) -> io::Result<()> {
    let mut pdu = MAX_PDU;
    loop {
        let mut head = [0u8; 4];
        stream.read_exact(&mut head).await?;
        let len = usize::from(u16::from_be_bytes([head[2], head[3]]));
        if head[0] != 3 || !(7..=MAX_FRAME).contains(&len) {
            return Ok(());
        }
        let mut cotp = vec![0u8; len - 4];
        stream.read_exact(&mut cotp).await?;
        let answer = match cotp.get(1) {
            Some(0xE0) => Some(connect_confirm(&cotp)),
            Some(0xF0) => answer(cpu, &cotp, &mut pdu),
            _ => None,
        };
        match answer {
            Some(bytes) => stream.write_all(&bytes).await?,
            None => return Ok(()),
        }
    }
}

/// A frame: TPKT around `cotp`.
fn tpkt(cotp: &[u8]) -> Vec<u8> {
    let mut out = vec![3, 0];
    out.extend(((cotp.len() + 4) as u16).to_be_bytes());
    out.extend(cotp);
    out
}

/// The connection confirm, with the request's parameters (TSAPs, TPDU size) echoed.
fn connect_confirm(request: &[u8]) -> Vec<u8> {
    let params = request.get(7..).unwrap_or(&[]);
    let mut cotp = vec![(6 + params.len()) as u8, 0xD0, 0x00, 0x00, 0x00, 0x01, 0x00];
    cotp.extend(params);
    tpkt(&cotp)
}

/// The answer to one S7 job (`cotp`: a COTP data frame), or `None` for a frame to drop the
/// connection on.
fn answer(cpu: &Cpu, cotp: &[u8], pdu: &mut u16) -> Option<Vec<u8>> {
    let s7 = cotp.get(3..)?;
    if s7.len() < 10 || s7[0] != 0x32 || s7[1] != 0x01 {
        return None;
    }
    let seq = [s7[4], s7[5]];
    let plen = usize::from(u16::from_be_bytes([s7[6], s7[7]]));
    let dlen = usize::from(u16::from_be_bytes([s7[8], s7[9]]));
    let params = s7.get(10..10 + plen)?;
    let data = s7.get(10 + plen..10 + plen + dlen)?;
    let function = *params.first()?;
    let (params, data, error): (Vec<u8>, Vec<u8>, u16) = match function {
        0xF0 => {
            let asked = u16::from_be_bytes([*params.get(6)?, *params.get(7)?]);
            *pdu = asked.clamp(240, MAX_PDU);
            let mut p = params[..6].to_vec();
            p.extend(pdu.to_be_bytes());
            (p, Vec::new(), 0)
        }
        // A job larger than the PDU, or whose answer would be: refused whole (PDU size error).
        _ if s7.len() > usize::from(*pdu) => (vec![function], Vec::new(), 0x8500),
        0x04 => match read(cpu, params, *pdu) {
            Some((p, d)) => (p, d, 0),
            None => (vec![function], Vec::new(), 0x8500),
        },
        0x05 => {
            let (p, d) = write(cpu, params, data)?;
            (p, d, 0)
        }
        // Any other function: not supported.
        _ => (vec![function], Vec::new(), 0x8104),
    };
    let mut out = vec![0x02, 0xF0, 0x80, 0x32, 0x03, 0x00, 0x00, seq[0], seq[1]];
    out.extend((params.len() as u16).to_be_bytes());
    out.extend((data.len() as u16).to_be_bytes());
    out.extend(error.to_be_bytes());
    out.extend(params);
    out.extend(data);
    Some(tpkt(&out))
}

/// One item's ANY pointer: transport size, count, DB, area code, bit address.
fn item(p: &[u8]) -> Option<(u8, usize, u16, u8, u32)> {
    if p.len() < 12 || p[0] != 0x12 || p[1] != 0x0A || p[2] != 0x10 {
        return None;
    }
    let count = usize::from(u16::from_be_bytes([p[4], p[5]]));
    let db = u16::from_be_bytes([p[6], p[7]]);
    let addr = u32::from_be_bytes([0, p[9], p[10], p[11]]);
    Some((p[3], count, db, p[8], addr))
}

/// Bytes of one element of a transport size (BIT is read through its byte).
fn element(transport: u8) -> Option<usize> {
    match transport {
        0x01..=0x03 => Some(1),
        0x04 | 0x05 => Some(2),
        0x06..=0x08 => Some(4),
        _ => None,
    }
}

/// A ReadVar: each item's data or return code; `None` when the answer would not fit `pdu`.
fn read(cpu: &Cpu, params: &[u8], pdu: u16) -> Option<(Vec<u8>, Vec<u8>)> {
    let n = usize::from(*params.get(1)?);
    let mut data = Vec::new();
    for i in 0..n {
        let at = 2 + i * 12;
        let Some((transport, count, db, area, addr)) = params.get(at..at + 12).and_then(item)
        else {
            data.extend([TYPE_NOT_SUPPORTED, 0, 0, 0]);
            continue;
        };
        let bit = (transport == 0x01).then_some((addr % 8) as u8);
        let found = match element(transport) {
            None => Err(TYPE_NOT_SUPPORTED),
            // An item of no element is no read a PLC takes.
            Some(_) if count == 0 => Err(DATA_INCONSISTENT),
            Some(size) => cpu.read(area, db, (addr / 8) as usize, count * size),
        };
        match found {
            Ok(bytes) => {
                let value = match bit {
                    Some(b) => vec![(bytes.first().copied().unwrap_or(0) >> b) & 1],
                    None => bytes,
                };
                let (code, bits) = if bit.is_some() {
                    (0x03, value.len())
                } else {
                    (0x04, value.len() * 8)
                };
                data.extend([OK, code]);
                data.extend((bits as u16).to_be_bytes());
                data.extend(&value);
                if value.len() % 2 == 1 && i + 1 < n {
                    data.push(0);
                }
            }
            Err(code) => data.extend([code, 0, 0, 0]),
        }
    }
    (14 + data.len() <= usize::from(pdu)).then(|| (vec![0x04, n as u8], data))
}

/// A WriteVar: each item's return code; `None` for a request whose data does not match its
/// items.
fn write(cpu: &Cpu, params: &[u8], data: &[u8]) -> Option<(Vec<u8>, Vec<u8>)> {
    let n = usize::from(*params.get(1)?);
    let mut codes = Vec::with_capacity(n);
    let mut at = 0usize;
    for i in 0..n {
        let (transport, _, db, area, addr) = item(params.get(2 + i * 12..14 + i * 12)?)?;
        let head = data.get(at..at + 4)?;
        let len = usize::from(u16::from_be_bytes([head[2], head[3]]));
        // BIT, BYTE/WORD/DWORD and INTEGER give their length in bits.
        let bytes = if matches!(head[1], 3..=5) {
            len.div_ceil(8)
        } else {
            len
        };
        let value = data.get(at + 4..at + 4 + bytes)?;
        at += 4 + bytes + usize::from(bytes % 2 == 1 && i + 1 < n);
        let bit = (transport == 0x01).then_some((addr % 8) as u8);
        codes.push(cpu.write(area, db, (addr / 8) as usize, bit, value));
    }
    Some((vec![0x05, n as u8], codes))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn db1_holds_the_plant_big_endian_and_takes_the_setpoint_and_the_pump() {
        let cpu = Cpu::default();
        let sp = cpu.read(0x84, 1, 16, 4).expect("the setpoint");
        assert_eq!(f32::from_be_bytes([sp[0], sp[1], sp[2], sp[3]]), 180.0);
        assert_eq!(
            &cpu.read(0x84, 1, 20, 10).expect("the name")[2..],
            b"OPEX-SIM"
        );
        assert_eq!(cpu.write(0x84, 1, 16, None, &120f32.to_be_bytes()), OK);
        let sp = cpu.read(0x84, 1, 16, 4).expect("the setpoint");
        assert_eq!(f32::from_be_bytes([sp[0], sp[1], sp[2], sp[3]]), 120.0);
        assert_eq!(
            cpu.write(0x84, 1, 16, None, &500f32.to_be_bytes()),
            DATA_INCONSISTENT
        );
        assert_eq!(cpu.write(0x84, 1, 12, Some(0), &[0]), OK);
        assert_eq!(cpu.read(0x84, 1, 12, 1).expect("the bits")[0] & 1, 0);
        assert_eq!(cpu.write(0x84, 1, 0, None, &[0; 4]), ACCESS_DENIED);
        assert_eq!(cpu.read(0x84, 99, 0, 1), Err(NO_SUCH_OBJECT));
        assert_eq!(cpu.read(0x84, 1, 62, 4), Err(OUT_OF_RANGE));
        assert_eq!(cpu.write(0x81, 0, 0, None, &[1]), ACCESS_DENIED);
    }

    #[test]
    fn a_bit_written_leaves_its_neighbours_alone() {
        let cpu = Cpu::default();
        assert_eq!(cpu.write(0x83, 0, 5, None, &[0b1010_0101]), OK);
        assert_eq!(cpu.write(0x83, 0, 5, Some(1), &[1]), OK);
        assert_eq!(cpu.write(0x83, 0, 5, Some(0), &[0]), OK);
        assert_eq!(cpu.read(0x83, 0, 5, 1), Ok(vec![0b1010_0110]));
    }

    #[test]
    fn an_item_of_no_element_is_refused_not_a_panic() {
        let cpu = Cpu::default();
        // ReadVar of one item: BIT, count 0, DB1, bit 0.
        let params = [0x04, 1, 0x12, 0x0A, 0x10, 0x01, 0, 0, 0, 1, 0x84, 0, 0, 0];
        let (_, data) = read(&cpu, &params, MAX_PDU).expect("an answer");
        assert_eq!(data, [DATA_INCONSISTENT, 0, 0, 0]);
    }

    proptest! {
        #[test]
        fn a_read_of_well_formed_items_with_any_fields_never_panics(
            items in proptest::collection::vec(
                (any::<u8>(), any::<u16>(), any::<u16>(), any::<u8>(), 0u32..0x0100_0000),
                0..30,
            ),
        ) {
            let cpu = Cpu::default();
            let mut params = vec![0x04, items.len() as u8];
            for (transport, count, db, area, addr) in &items {
                params.extend([0x12, 0x0A, 0x10, *transport]);
                params.extend(count.to_be_bytes());
                params.extend(db.to_be_bytes());
                params.push(*area);
                params.extend(&addr.to_be_bytes()[1..]);
            }
            let _ = read(&cpu, &params, MAX_PDU);
            let _ = write(&cpu, &params, &[0x00, 0x03, 0x00, 0x01, 0x01]);
        }

        #[test]
        fn any_job_is_answered_or_dropped_never_a_panic(
            bytes in proptest::collection::vec(any::<u8>(), 0..400),
        ) {
            let cpu = Cpu::default();
            let mut pdu = MAX_PDU;
            let _ = answer(&cpu, &bytes, &mut pdu);
            let mut frame = vec![0x02, 0xF0, 0x80, 0x32, 0x01, 0, 0, 0, 1];
            frame.extend(&bytes);
            let _ = answer(&cpu, &frame, &mut pdu);
            let _ = connect_confirm(&bytes);
        }
    }
}
