//! The simulator's OPC-UA server (`async-opcua`'s server): a small plant in namespace
//! [`NAMESPACE`], endpoint path `/`, security None, anonymous, with two nodes a command can
//! write, like the Modbus plant's oven setpoint and pump coil (`super::modbus`).
//!
//! | node id (`ns` is the namespace's index, see [`Simulator::namespace`]) | type | behaviour |
//! | --- | --- | --- |
//! | `s=Plant.Boiler.Temperature` | Double | °C: follows the setpoint (first order, [`BOILER_TAU_SECS`] time constant), ± 5 over a 2-minute sine |
//! | `s=Plant.Boiler.Pressure` | Double | bar, 4.0 ± 0.3, a faster sine |
//! | `s=Plant.Line.Counter` | UInt32 | parts made: +1 every second |
//! | `s=Plant.Pump.Running` | Boolean | on for 40 s, off for 20 s, unless written. **Writable**: the pump then stays as written, out of its cycle, until written again |
//! | `s=Plant.Pump.Speed` | Double | rpm: about 1450 while running, 0 when off |
//! | `s=Plant.Boiler.Setpoint` | Double | °C, [`SETPOINT_START`] at start. **Writable**: 0 to [`MAX_SETPOINT_C`]; a value outside (or not finite) is answered `BadOutOfRange` and not kept |
//!
//! The other nodes have no write access: a write is answered `BadUserAccessDenied`. A value
//! of another type than the node's is answered `BadTypeMismatch`.
//!
//! What commands set lives in [`Controls`], shared by the node manager's write and read
//! callbacks of the two writable nodes: a write is read back at once (a command's `verify`
//! sees it). Every [`UPDATE_EVERY`] the values of all the nodes are set in the address space
//! through the node manager, so subscriptions see them change.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use opcua::server::address_space::Variable;
use opcua::server::diagnostics::NamespaceMetadata;
use opcua::server::node_manager::memory::{simple_node_manager, SimpleNodeManager};
use opcua::server::{ServerBuilder, ServerEndpoint, ANONYMOUS_USER_TOKEN_ID};
use opcua::types::{DataValue, DateTime, NodeId, ObjectId, StatusCode, Variant};

use crate::shutdown::Shutdown;

/// The namespace URI of the plant's nodes.
pub const NAMESPACE: &str = "urn:opex-connector:simulator:plant";
/// The index of [`NAMESPACE`] on this server: fixed, so that configs (the demo's) can name
/// the nodes; checked at start.
pub const PLANT_NAMESPACE: u16 = 2;
/// How often the values change.
pub const UPDATE_EVERY: Duration = Duration::from_millis(500);

/// The variables, by string node id, in the order of [`Plant::values`].
pub const VARIABLES: [&str; 6] = [
    "Plant.Boiler.Temperature",
    "Plant.Boiler.Pressure",
    "Plant.Line.Counter",
    "Plant.Pump.Running",
    "Plant.Pump.Speed",
    "Plant.Boiler.Setpoint",
];

/// The writable variable that sets the boiler's temperature.
pub const SETPOINT: &str = "Plant.Boiler.Setpoint";
/// The writable variable that holds the pump on or off.
pub const PUMP: &str = "Plant.Pump.Running";
/// The setpoint at start, °C.
pub const SETPOINT_START: f64 = 80.0;
/// The highest setpoint taken, °C (the lowest is 0); beyond, `BadOutOfRange`.
pub const MAX_SETPOINT_C: f64 = 400.0;
/// How fast the boiler follows its setpoint: its time constant, in seconds (the Modbus
/// oven's too).
pub const BOILER_TAU_SECS: f64 = 4.0;

/// What commands set.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Controls {
    /// The boiler's setpoint, °C.
    pub setpoint_c: f64,
    /// The pump as it was last written; `None`: its 60 s cycle.
    pub pump: Option<bool>,
    /// The boiler's baseline when the setpoint last changed, and when (seconds after start):
    /// the baseline goes from there to the setpoint.
    from_c: f64,
    since: f64,
}

impl Default for Controls {
    fn default() -> Self {
        Self {
            setpoint_c: SETPOINT_START,
            pump: None,
            from_c: SETPOINT_START,
            since: 0.0,
        }
    }
}

impl Controls {
    /// The boiler's temperature without its wobble, `secs` after start.
    fn baseline(&self, secs: f64) -> f64 {
        let elapsed = (secs - self.since).max(0.0);
        self.setpoint_c + (self.from_c - self.setpoint_c) * (-elapsed / BOILER_TAU_SECS).exp()
    }

    /// A new setpoint at `secs`: the boiler moves on from where it is.
    pub fn set_setpoint(&mut self, secs: f64, setpoint_c: f64) {
        self.from_c = self.baseline(secs);
        self.since = secs;
        self.setpoint_c = setpoint_c;
    }

    /// A write of `value` to the writable variable `variable` at `secs`: the status the
    /// server answers; only a good one changes anything.
    pub fn write(&mut self, variable: &str, secs: f64, value: Option<&Variant>) -> StatusCode {
        match (variable, value) {
            (SETPOINT, Some(Variant::Double(sp))) => {
                // A NaN is outside too.
                if !(0.0..=MAX_SETPOINT_C).contains(sp) {
                    return StatusCode::BadOutOfRange;
                }
                self.set_setpoint(secs, *sp);
                StatusCode::Good
            }
            (PUMP, Some(Variant::Boolean(on))) => {
                self.pump = Some(*on);
                StatusCode::Good
            }
            (SETPOINT | PUMP, _) => StatusCode::BadTypeMismatch,
            _ => StatusCode::BadNotWritable,
        }
    }
}

/// The plant's state at one instant.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Plant {
    /// Boiler temperature, °C.
    pub boiler_c: f64,
    /// Boiler setpoint, °C.
    pub setpoint_c: f64,
    /// Boiler pressure, bar.
    pub pressure_bar: f64,
    /// Parts made.
    pub parts: u32,
    /// Whether the pump runs.
    pub pump_on: bool,
    /// Pump speed, rpm.
    pub speed_rpm: f64,
}

impl Plant {
    /// The plant `secs` after start, with what commands set.
    pub fn at(secs: f64, controls: &Controls) -> Self {
        use std::f64::consts::TAU;
        let pump_on = controls.pump.unwrap_or(secs % 60.0 < 40.0);
        Self {
            boiler_c: controls.baseline(secs) + 5.0 * (secs * TAU / 120.0).sin(),
            setpoint_c: controls.setpoint_c,
            pressure_bar: 4.0 + 0.3 * (secs * TAU / 17.0).sin(),
            parts: secs as u32,
            pump_on,
            speed_rpm: if pump_on {
                1450.0 + 10.0 * (secs * TAU / 7.0).sin()
            } else {
                0.0
            },
        }
    }

    /// The values of the variables, in [`VARIABLES`] order.
    pub fn values(&self) -> [Variant; 6] {
        [
            Variant::Double(self.boiler_c),
            Variant::Double(self.pressure_bar),
            Variant::UInt32(self.parts),
            Variant::Boolean(self.pump_on),
            Variant::Double(self.speed_rpm),
            Variant::Double(self.setpoint_c),
        ]
    }

    /// The value of the writable variable `variable`.
    fn writable_value(&self, variable: &str) -> Variant {
        if variable == SETPOINT {
            Variant::Double(self.setpoint_c)
        } else {
            Variant::Boolean(self.pump_on)
        }
    }
}

/// The plant's clock and what commands set on it, shared by the server's callbacks and the
/// updating loop.
#[derive(Debug, Clone)]
struct Shared {
    started: Instant,
    controls: Arc<Mutex<Controls>>,
}

impl Shared {
    /// Runs `f` on the controls and the seconds since start.
    fn with<T>(&self, f: impl FnOnce(&mut Controls, f64) -> T) -> T {
        let secs = self.started.elapsed().as_secs_f64();
        // A panic elsewhere cannot leave the controls half changed: every change is one
        // assignment of plain values.
        let mut c = self.controls.lock().unwrap_or_else(|e| e.into_inner());
        f(&mut c, secs)
    }

    /// The plant now.
    fn plant(&self) -> Plant {
        self.with(|c, secs| Plant::at(secs, c))
    }
}

/// A running simulator's address.
#[derive(Debug, Clone)]
pub struct Simulator {
    /// Where it listens.
    pub addr: SocketAddr,
    /// The index of [`NAMESPACE`]: node ids are `ns=<this>;s=Plant...`.
    pub namespace: u16,
}

impl Simulator {
    /// The endpoint URL clients use.
    pub fn endpoint(&self) -> String {
        format!("opc.tcp://{}/", self.addr)
    }

    /// The text node id of a variable, e.g. `ns=1;s=Plant.Line.Counter`.
    pub fn node_id(&self, variable: &str) -> String {
        format!("ns={};s={variable}", self.namespace)
    }
}

/// Serves the plant on an already bound listener (the daemon binds before its pollers start).
pub async fn serve_on(listener: std::net::TcpListener, shutdown: Shutdown) -> Result<(), String> {
    let listener = tokio::net::TcpListener::from_std(listener)
        .map_err(|e| format!("cannot use the listener: {e}"))?;
    let pki = std::env::temp_dir().join("opex-connector-simulator-pki");
    let (sim, run) = start(listener, &pki, shutdown)?;
    log::info!(
        "simulator: OPC-UA plant on {} (node ids ns={};s=Plant...)",
        sim.endpoint(),
        sim.namespace
    );
    run.await
}

/// Builds the server on a bound listener (port 0 works) and returns its address and the
/// future that runs it until `shutdown`.
pub fn start(
    listener: tokio::net::TcpListener,
    pki_dir: &Path,
    shutdown: Shutdown,
) -> Result<
    (
        Simulator,
        impl std::future::Future<Output = Result<(), String>> + Send,
    ),
    String,
> {
    let addr = listener
        .local_addr()
        .map_err(|e| format!("listener address: {e}"))?;
    let (server, handle) = ServerBuilder::new()
        .application_name("opex-connector simulator")
        .application_uri("urn:opex-connector:simulator")
        .product_uri("urn:opex-connector")
        .host(addr.ip().to_string())
        .port(addr.port())
        .pki_dir(PathBuf::from(pki_dir))
        // Made once into the PKI folder: the stack logs an error at every start without one,
        // although the plant's only endpoint has security None.
        .create_sample_keypair(true)
        .add_endpoint(
            "none",
            ServerEndpoint::new_none("/", &[ANONYMOUS_USER_TOKEN_ID.to_string()]),
        )
        .discovery_urls(vec!["/".to_owned()])
        .with_node_manager(simple_node_manager(
            NamespaceMetadata {
                namespace_uri: NAMESPACE.to_owned(),
                ..Default::default()
            },
            "plant",
        ))
        .build()?;
    let namespace = handle
        .get_namespace_index(NAMESPACE)
        .ok_or("the plant namespace was not registered")?;
    if namespace != PLANT_NAMESPACE {
        return Err(format!(
            "the plant namespace has index {namespace}, expected {PLANT_NAMESPACE}"
        ));
    }
    let manager = handle
        .node_managers()
        .get_of_type::<SimpleNodeManager>()
        .ok_or("the plant node manager is missing")?;
    let shared = Shared {
        started: Instant::now(),
        controls: Arc::default(),
    };
    let ids: Vec<NodeId> = VARIABLES
        .iter()
        .map(|v| NodeId::new(namespace, *v))
        .collect();
    {
        let mut space = manager.address_space().write();
        let folder = NodeId::new(namespace, "Plant");
        space.add_folder(&folder, "Plant", "Plant", &ObjectId::ObjectsFolder.into());
        let variables = ids
            .iter()
            .zip(VARIABLES)
            .zip(shared.plant().values())
            .map(|((id, name), value)| {
                let mut v = Variable::new(id, name, name, value);
                if [SETPOINT, PUMP].contains(&name) {
                    // CurrentWrite in the access level, and in the user access level too.
                    v.set_writable(true);
                    v.set_user_access_level(v.user_access_level() | v.access_level());
                }
                v
            })
            .collect();
        space.add_variables(variables, &folder);
    }
    // The writable nodes are read and written through the controls, so that a write is read
    // back at once (the address space's copy is set at the next update).
    for name in [SETPOINT, PUMP] {
        let id = NodeId::new(namespace, name);
        let s = shared.clone();
        manager
            .inner()
            .add_write_callback(id.clone(), move |value, range| {
                if range.has_range() {
                    // A scalar has no elements to write.
                    return StatusCode::BadIndexRangeInvalid;
                }
                s.with(|c, secs| c.write(name, secs, value.value.as_ref()))
            });
        let s = shared.clone();
        manager
            .inner()
            .add_read_callback(id, move |range, timestamps, _max_age| {
                if range.has_range() {
                    return Err(StatusCode::BadIndexRangeNoData);
                }
                let mut v = DataValue::new_now(s.plant().writable_value(name));
                let now = DateTime::now();
                v.set_timestamps(timestamps, now, now);
                Ok(v)
            });
    }
    let subscriptions = handle.subscriptions().clone();
    let run = async move {
        let ticker = async {
            let mut tick = tokio::time::interval(UPDATE_EVERY);
            loop {
                tick.tick().await;
                let updates = ids
                    .iter()
                    .zip(shared.plant().values())
                    .map(|(id, v)| (id, None, DataValue::new_now(v)));
                if let Err(e) = manager.set_values(&subscriptions, updates) {
                    log::warn!("opcua simulator: cannot update values: {e}");
                }
            }
        };
        tokio::select! {
            r = server.run_with(listener) => r,
            _ = ticker => Ok(()),
            _ = shutdown.wait() => {
                handle.cancel();
                Ok(())
            }
        }
    };
    Ok((Simulator { addr, namespace }, run))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_boiler_follows_its_setpoint_within_a_few_time_constants() {
        let mut c = Controls::default();
        for s in 0..200 {
            let p = Plant::at(f64::from(s), &c);
            assert!((75.0..=85.0).contains(&p.boiler_c), "{p:?}");
        }
        assert_eq!(
            c.write(SETPOINT, 100.0, Some(&Variant::Double(150.0))),
            StatusCode::Good
        );
        let just_after = Plant::at(100.0, &c);
        assert!(
            (75.0..=85.0).contains(&just_after.boiler_c),
            "{just_after:?}"
        );
        assert_eq!(just_after.values()[5], Variant::Double(150.0));
        let later = Plant::at(100.0 + 5.0 * BOILER_TAU_SECS, &c).boiler_c;
        assert!((144.0..=156.0).contains(&later), "{later}");
        // A second change starts from where the boiler is, not from the old setpoint.
        c.set_setpoint(101.0, 80.0);
        let b = c.baseline(101.0);
        assert!(b > 80.0 && b < 150.0, "{b}");
    }

    #[test]
    fn a_written_pump_stays_as_written_until_written_again() {
        let mut c = Controls::default();
        // 10 s after start the cycle runs the pump, 50 s after it stops it.
        assert!(Plant::at(10.0, &c).pump_on);
        assert!(!Plant::at(50.0, &c).pump_on);
        assert_eq!(
            c.write(PUMP, 10.0, Some(&Variant::Boolean(false))),
            StatusCode::Good
        );
        for s in [10.0, 20.0, 70.0, 130.0] {
            let p = Plant::at(s, &c);
            assert!(!p.pump_on && p.speed_rpm == 0.0, "{p:?}");
        }
        c.write(PUMP, 130.0, Some(&Variant::Boolean(true)));
        assert!(Plant::at(170.0, &c).pump_on);
        assert!(Plant::at(170.0, &c).speed_rpm > 1400.0);
    }

    #[test]
    fn a_setpoint_outside_its_range_or_of_another_type_is_refused_and_not_kept() {
        let mut c = Controls::default();
        for bad in [-0.5, MAX_SETPOINT_C + 0.5, f64::NAN, f64::INFINITY] {
            assert_eq!(
                c.write(SETPOINT, 1.0, Some(&Variant::Double(bad))),
                StatusCode::BadOutOfRange,
                "{bad}"
            );
        }
        assert_eq!(
            c.write(SETPOINT, 1.0, Some(&Variant::Float(90.0))),
            StatusCode::BadTypeMismatch
        );
        assert_eq!(c.write(PUMP, 1.0, None), StatusCode::BadTypeMismatch);
        assert_eq!(
            c.write(VARIABLES[0], 1.0, Some(&Variant::Double(1.0))),
            StatusCode::BadNotWritable
        );
        assert_eq!(c, Controls::default());
        assert_eq!(
            c.write(SETPOINT, 1.0, Some(&Variant::Double(MAX_SETPOINT_C))),
            StatusCode::Good
        );
        assert_eq!(c.setpoint_c, MAX_SETPOINT_C);
    }
}
