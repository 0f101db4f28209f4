//! The simulator's Modbus TCP device: a small plant whose values change with time.
//!
//! Every value is a pure function of the time since the simulator started and of the unit id
//! (each unit is the same plant, phase-shifted), so the server keeps no state and answers any
//! number of units. The map (holding and input registers hold the same values):
//!
//! | address | type | what |
//! | --- | --- | --- |
//! | 0-1 | f32 | oven temperature, °C (180 ± 5, 60 s period) |
//! | 2-3 | f32 | coolant temperature, °C (22 ± 2, 120 s period) |
//! | 4-5 | u32 | parts counter (2 parts per second) |
//! | 6 | u16 | pump state: 1 running, 0 stopped (20 s on, 10 s off) |
//! | 7 | i16 | line pressure, 0.1 bar (45 ± 5) |
//! | 8-11 | string | `"OPEX-SIM"` |
//! | 12-999 | u16 | the address itself (filler, for load tests) |
//! | 1000+ | - | exception 2, illegal data address |
//!
//! Coils and discrete inputs: 0 the pump state, 1 an alarm (oven above 184 °C), 2-999 false.

use std::future::{ready, Ready};
use std::io;
use std::net::SocketAddr;
use std::time::Instant;

use tokio::net::TcpListener;
use tokio_modbus::prelude::{ExceptionCode, Request, Response, SlaveRequest};
use tokio_modbus::server::tcp::{accept_tcp_connection, Server};
use tokio_modbus::server::Service;

use crate::shutdown::Shutdown;

/// Addresses below this answer; the rest draw exception 2.
pub const SIZE: u16 = 1000;

/// The plant's state at one instant.
#[derive(Debug, Clone, Copy)]
pub struct Plant {
    /// Oven temperature, °C.
    pub oven_c: f32,
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
    /// The plant `secs` after start, as seen by unit `unit`.
    pub fn at(secs: f64, unit: u8) -> Self {
        let t = secs + f64::from(unit) * 7.0;
        let tau = std::f64::consts::TAU;
        Self {
            oven_c: (180.0 + 5.0 * (t * tau / 60.0).sin()) as f32,
            coolant_c: (22.0 + 2.0 * (t * tau / 120.0).sin()) as f32,
            parts: (secs * 2.0) as u32,
            pump_on: t % 30.0 < 20.0,
            pressure_dbar: (45.0 + 5.0 * (t * tau / 17.0).sin()).round() as i16,
        }
    }

    /// Register `addr`, or `None` past the map.
    pub fn register(&self, addr: u16) -> Option<u16> {
        let oven = self.oven_c.to_bits();
        let coolant = self.coolant_c.to_bits();
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
            a if a < SIZE => a,
            _ => return None,
        })
    }

    /// Coil or discrete input `addr`, or `None` past the map.
    pub fn bit(&self, addr: u16) -> Option<bool> {
        match addr {
            0 => Some(self.pump_on),
            1 => Some(self.oven_c > 184.0),
            a if a < SIZE => Some(false),
            _ => None,
        }
    }
}

/// The Modbus service: answers reads from the plant, refuses writes.
#[derive(Debug, Clone)]
pub struct PlantService {
    started: Instant,
}

impl PlantService {
    /// A plant starting now.
    pub fn new() -> Self {
        Self {
            started: Instant::now(),
        }
    }

    fn answer(&self, req: SlaveRequest<'static>) -> Result<Response, ExceptionCode> {
        let plant = Plant::at(self.started.elapsed().as_secs_f64(), req.slave);
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
        let a = Plant::at(0.0, 1);
        let b = Plant::at(15.0, 1);
        assert_ne!(a.oven_c, b.oven_c);
        assert!(b.parts > a.parts);
        for s in 0..200 {
            let p = Plant::at(f64::from(s), 3);
            assert!((175.0..=185.0).contains(&p.oven_c));
            assert!((40..=50).contains(&p.pressure_dbar));
        }
        assert_eq!(a.register(SIZE), None);
        assert_eq!(a.register(500), Some(500));
    }
}
