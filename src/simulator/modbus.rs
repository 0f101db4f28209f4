//! The simulator's Modbus TCP device: a small plant whose values change with time, with two
//! points a command can write.
//!
//! Every value is a function of the time since the simulator started, of the unit id (each
//! unit is the same plant, phase-shifted) and of what was written to that unit (its
//! [`Controls`]: kept per unit id, so at most 256), so the server answers any number of units.
//! The map (holding and input registers hold the same values; only holding registers and
//! coils take writes):
//!
//! | address | type | what |
//! | --- | --- | --- |
//! | 0-1 | f32 | oven temperature, °C: follows the setpoint (first order, 4 s time constant), ± 5 over a 60 s period |
//! | 2-3 | f32 | coolant temperature, °C (22 ± 2, 120 s period) |
//! | 4-5 | u32 | parts counter (2 parts per second) |
//! | 6 | u16 | pump state: 1 running, 0 stopped (20 s on, 10 s off, unless coil 0 was written) |
//! | 7 | i16 | line pressure, 0.1 bar (45 ± 5) |
//! | 8-11 | string | `"OPEX-SIM"` |
//! | 12-13 | f32 | oven setpoint, °C (default 180). **Writable** with FC 16 (both registers); a value that is not finite or outside 0..=400 draws exception 3 |
//! | 14-999 | u16 | the address itself (filler, for load tests) |
//! | 1000+ | - | exception 2, illegal data address |
//!
//! Coils and discrete inputs: 0 the pump state, 1 an alarm (oven more than 4 °C above its
//! setpoint), 2-999 false. Coil 0 is **writable** (FC 5, or FC 15 for that one coil): the pump
//! then stays as written, out of its cycle, until written again.
//!
//! Any other write (another address, FC 6 to half the setpoint, a range that covers a
//! read-only address) draws exception 2.

use std::collections::HashMap;
use std::future::{ready, Ready};
use std::io;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use tokio::net::TcpListener;
use tokio_modbus::prelude::{ExceptionCode, Request, Response, SlaveRequest};
use tokio_modbus::server::tcp::{accept_tcp_connection, Server};
use tokio_modbus::server::Service;

use crate::shutdown::Shutdown;

/// Addresses below this answer; the rest draw exception 2.
pub const SIZE: u16 = 1000;
/// The oven setpoint's first register (an f32 in two).
pub const SETPOINT: u16 = 12;
/// The setpoint at start, °C.
pub const DEFAULT_SETPOINT_C: f32 = 180.0;
/// The highest setpoint taken, °C (the lowest is 0); beyond, exception 3.
pub const MAX_SETPOINT_C: f32 = 400.0;
/// How fast the oven follows its setpoint: its time constant, in seconds.
pub const OVEN_TAU_SECS: f64 = 4.0;

/// What commands set on one unit.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Controls {
    /// The oven setpoint, °C.
    pub setpoint_c: f32,
    /// The pump as coil 0 was last written; `None`: its 30 s cycle.
    pub pump: Option<bool>,
    /// The oven's baseline when the setpoint last changed, and when (seconds after start):
    /// the baseline goes from there to the setpoint.
    from_c: f64,
    since: f64,
}

impl Default for Controls {
    fn default() -> Self {
        Self {
            setpoint_c: DEFAULT_SETPOINT_C,
            pump: None,
            from_c: f64::from(DEFAULT_SETPOINT_C),
            since: 0.0,
        }
    }
}

impl Controls {
    /// The oven's temperature without its wobble, `secs` after start.
    fn baseline(&self, secs: f64) -> f64 {
        let sp = f64::from(self.setpoint_c);
        let elapsed = (secs - self.since).max(0.0);
        sp + (self.from_c - sp) * (-elapsed / OVEN_TAU_SECS).exp()
    }

    /// A new setpoint at `secs`: the oven moves on from where it is.
    pub fn set_setpoint(&mut self, secs: f64, setpoint_c: f32) {
        self.from_c = self.baseline(secs);
        self.since = secs;
        self.setpoint_c = setpoint_c;
    }
}

/// The plant's state at one instant.
#[derive(Debug, Clone, Copy)]
pub struct Plant {
    /// Oven temperature, °C.
    pub oven_c: f32,
    /// Oven setpoint, °C.
    pub setpoint_c: f32,
    /// Coolant temperature, °C.
    pub coolant_c: f32,
    /// Parts made.
    pub parts: u32,
    /// Pump running.
    pub pump_on: bool,
    /// Line pressure, 0.1 bar.
    pub pressure_dbar: i16,
}

impl Plant {
    /// The plant `secs` after start, as seen by unit `unit`, with what was written to it.
    pub fn at(secs: f64, unit: u8, controls: &Controls) -> Self {
        let t = secs + f64::from(unit) * 7.0;
        let tau = std::f64::consts::TAU;
        Self {
            oven_c: (controls.baseline(secs) + 5.0 * (t * tau / 60.0).sin()) as f32,
            setpoint_c: controls.setpoint_c,
            coolant_c: (22.0 + 2.0 * (t * tau / 120.0).sin()) as f32,
            parts: (secs * 2.0) as u32,
            pump_on: controls.pump.unwrap_or(t % 30.0 < 20.0),
            pressure_dbar: (45.0 + 5.0 * (t * tau / 17.0).sin()).round() as i16,
        }
    }

    /// Register `addr`, or `None` past the map.
    pub fn register(&self, addr: u16) -> Option<u16> {
        let oven = self.oven_c.to_bits();
        let coolant = self.coolant_c.to_bits();
        let setpoint = self.setpoint_c.to_bits();
        let name = b"OPEX-SIM";
        Some(match addr {
            0 => (oven >> 16) as u16,
            1 => oven as u16,
            2 => (coolant >> 16) as u16,
            3 => coolant as u16,
            4 => (self.parts >> 16) as u16,
            5 => self.parts as u16,
            6 => u16::from(self.pump_on),
            7 => self.pressure_dbar as u16,
            8..=11 => {
                let i = usize::from(addr - 8) * 2;
                u16::from_be_bytes([name[i], name[i + 1]])
            }
            12 => (setpoint >> 16) as u16,
            13 => setpoint as u16,
            a if a < SIZE => a,
            _ => return None,
        })
    }

    /// Coil or discrete input `addr`, or `None` past the map.
    pub fn bit(&self, addr: u16) -> Option<bool> {
        match addr {
            0 => Some(self.pump_on),
            1 => Some(self.oven_c > self.setpoint_c + 4.0),
            a if a < SIZE => Some(false),
            _ => None,
        }
    }
}

/// The Modbus service: answers reads from the plant, takes the writes of its two writable
/// points. Clones share the plant (one per server, whatever the connections).
#[derive(Debug, Clone)]
pub struct PlantService {
    started: Instant,
    /// Per unit id (so at most 256 entries): what was written to it.
    controls: Arc<Mutex<HashMap<u8, Controls>>>,
}

impl PlantService {
    /// A plant starting now.
    pub fn new() -> Self {
        Self {
            started: Instant::now(),
            controls: Arc::default(),
        }
    }

    /// Runs `f` on what was written to `unit`.
    fn with_controls<T>(&self, unit: u8, f: impl FnOnce(&mut Controls) -> T) -> T {
        let mut all = self.controls.lock().unwrap_or_else(|e| e.into_inner());
        f(all.entry(unit).or_default())
    }

    /// A write, or the exception it draws.
    fn write(&self, unit: u8, secs: f64, req: Request<'_>) -> Result<Response, ExceptionCode> {
        match req {
            Request::WriteMultipleRegisters(SETPOINT, words) if words.len() == 2 => {
                let sp = f32::from_bits((u32::from(words[0]) << 16) | u32::from(words[1]));
                if !(0.0..=MAX_SETPOINT_C).contains(&sp) {
                    return Err(ExceptionCode::IllegalDataValue);
                }
                self.with_controls(unit, |c| c.set_setpoint(secs, sp));
                Ok(Response::WriteMultipleRegisters(SETPOINT, 2))
            }
            Request::WriteSingleCoil(0, on) => {
                self.with_controls(unit, |c| c.pump = Some(on));
                Ok(Response::WriteSingleCoil(0, on))
            }
            Request::WriteMultipleCoils(0, bits) if bits.len() == 1 => {
                let on = bits[0];
                self.with_controls(unit, |c| c.pump = Some(on));
                Ok(Response::WriteMultipleCoils(0, 1))
            }
            _ => Err(ExceptionCode::IllegalDataAddress),
        }
    }

    fn answer(&self, req: SlaveRequest<'static>) -> Result<Response, ExceptionCode> {
        let secs = self.started.elapsed().as_secs_f64();
        let controls = self.with_controls(req.slave, |c| *c);
        let plant = Plant::at(secs, req.slave, &controls);
        let range = |start: u16, count: u16, max: u16| {
            if count == 0 || count > max {
                return Err(ExceptionCode::IllegalDataValue);
            }
            let end = u32::from(start) + u32::from(count);
            if end > u32::from(SIZE) {
                return Err(ExceptionCode::IllegalDataAddress);
            }
            Ok(start..start + count)
        };
        match req.request {
            Request::ReadHoldingRegisters(start, count) => {
                let words = range(start, count, 125)?
                    .map(|a| plant.register(a).unwrap_or(0))
                    .collect();
                Ok(Response::ReadHoldingRegisters(words))
            }
            Request::ReadInputRegisters(start, count) => {
                let words = range(start, count, 125)?
                    .map(|a| plant.register(a).unwrap_or(0))
                    .collect();
                Ok(Response::ReadInputRegisters(words))
            }
            Request::ReadCoils(start, count) => {
                let bits = range(start, count, 2000)?
                    .map(|a| plant.bit(a).unwrap_or(false))
                    .collect();
                Ok(Response::ReadCoils(bits))
            }
            Request::ReadDiscreteInputs(start, count) => {
                let bits = range(start, count, 2000)?
                    .map(|a| plant.bit(a).unwrap_or(false))
                    .collect();
                Ok(Response::ReadDiscreteInputs(bits))
            }
            Request::WriteSingleCoil(..)
            | Request::WriteMultipleCoils(..)
            | Request::WriteSingleRegister(..)
            | Request::WriteMultipleRegisters(..) => self.write(req.slave, secs, req.request),
            _ => Err(ExceptionCode::IllegalFunction),
        }
    }
}

impl Default for PlantService {
    fn default() -> Self {
        Self::new()
    }
}

impl Service for PlantService {
    type Request = SlaveRequest<'static>;
    type Response = Response;
    type Exception = ExceptionCode;
    type Future = Ready<Result<Response, ExceptionCode>>;

    fn call(&self, req: Self::Request) -> Self::Future {
        ready(self.answer(req))
    }
}

/// Serves the plant on `listener` until `shutdown`. Connections are not capped: the simulator
/// is a test and demo tool meant for loopback.
pub async fn serve(listener: TcpListener, shutdown: Shutdown) -> io::Result<()> {
    let service = PlantService::new();
    let on_connected = |stream: tokio::net::TcpStream, addr: SocketAddr| {
        let service = service.clone();
        async move {
            let _ = stream.set_nodelay(true);
            accept_tcp_connection(stream, addr, |_| Ok(Some(service.clone())))
        }
    };
    let on_error = |e: io::Error| log::debug!("simulator connection ended: {e}");
    let stop = async move { shutdown.wait().await };
    Server::new(listener)
        .serve_until(&on_connected, on_error, stop)
        .await
        .map(|_| ())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_plant_changes_over_time_and_stays_in_its_ranges() {
        let c = Controls::default();
        let a = Plant::at(0.0, 1, &c);
        let b = Plant::at(15.0, 1, &c);
        assert_ne!(a.oven_c, b.oven_c);
        assert!(b.parts > a.parts);
        for s in 0..200 {
            let p = Plant::at(f64::from(s), 3, &c);
            assert!((175.0..=185.0).contains(&p.oven_c));
            assert!((40..=50).contains(&p.pressure_dbar));
        }
        assert_eq!(a.register(SIZE), None);
        assert_eq!(a.register(500), Some(500));
        // Each unit is the same plant, phase-shifted.
        assert_ne!(Plant::at(10.0, 1, &c).oven_c, Plant::at(10.0, 2, &c).oven_c);
    }

    #[test]
    fn the_oven_follows_its_setpoint_within_a_few_time_constants() {
        let mut c = Controls::default();
        c.set_setpoint(100.0, 220.0);
        let just_after = Plant::at(100.0, 1, &c).oven_c;
        assert!((175.0..=185.0).contains(&just_after), "{just_after}");
        let later = Plant::at(100.0 + 5.0 * OVEN_TAU_SECS, 1, &c).oven_c;
        assert!((214.0..=226.0).contains(&later), "{later}");
        // A second change starts from where the oven is, not from the old setpoint.
        c.set_setpoint(101.0, 180.0);
        let b = c.baseline(101.0);
        assert!(b > 180.0 && b < 220.0, "{b}");
        assert_eq!(
            Plant::at(0.0, 1, &c).register(SETPOINT + 1),
            Some(180f32.to_bits() as u16)
        );
    }

    fn call(s: &PlantService, request: Request<'static>) -> Result<Response, ExceptionCode> {
        s.answer(SlaveRequest { slave: 1, request })
    }

    #[test]
    fn only_the_setpoint_and_the_pump_coil_take_writes() {
        let s = PlantService::new();
        let sp = 200f32.to_bits();
        let words = vec![(sp >> 16) as u16, sp as u16];
        assert_eq!(
            call(
                &s,
                Request::WriteMultipleRegisters(SETPOINT, words.clone().into())
            ),
            Ok(Response::WriteMultipleRegisters(SETPOINT, 2))
        );
        assert_eq!(
            call(&s, Request::ReadHoldingRegisters(SETPOINT, 2)),
            Ok(Response::ReadHoldingRegisters(words))
        );
        let hot = 500f32.to_bits();
        assert_eq!(
            call(
                &s,
                Request::WriteMultipleRegisters(
                    SETPOINT,
                    vec![(hot >> 16) as u16, hot as u16].into()
                )
            ),
            Err(ExceptionCode::IllegalDataValue)
        );
        assert_eq!(
            call(&s, Request::WriteSingleCoil(0, false)),
            Ok(Response::WriteSingleCoil(0, false))
        );
        // The pump stays off, whatever its cycle says.
        assert_eq!(
            call(&s, Request::ReadCoils(0, 1)),
            Ok(Response::ReadCoils(vec![false]))
        );
        assert_eq!(
            call(&s, Request::WriteMultipleCoils(0, vec![true].into())),
            Ok(Response::WriteMultipleCoils(0, 1))
        );
        assert_eq!(s.with_controls(1, |c| c.pump), Some(true));
        // Another unit is another plant.
        assert_eq!(s.with_controls(2, |c| c.pump), None);
        for bad in [
            Request::WriteSingleRegister(SETPOINT, 1),
            Request::WriteSingleRegister(0, 1),
            Request::WriteMultipleRegisters(0, vec![1, 2].into()),
            Request::WriteSingleCoil(1, true),
            Request::WriteMultipleCoils(0, vec![true, true].into()),
        ] {
            assert_eq!(call(&s, bad), Err(ExceptionCode::IllegalDataAddress));
        }
    }
}
