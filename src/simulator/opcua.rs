//! The simulator's OPC-UA server (`async-opcua`'s server): a small plant in namespace
//! [`NAMESPACE`], endpoint path `/`, security None, anonymous.
//!
//! | node id (`ns` is the namespace's index, see [`Simulator::namespace`]) | type | behaviour |
//! | --- | --- | --- |
//! | `s=Plant.Boiler.Temperature` | Double | °C, 80 ± 5 over a 2-minute sine |
//! | `s=Plant.Boiler.Pressure` | Double | bar, 4.0 ± 0.3, a faster sine |
//! | `s=Plant.Line.Counter` | UInt32 | parts made: +1 every second |
//! | `s=Plant.Pump.Running` | Boolean | on for 40 s, off for 20 s |
//! | `s=Plant.Pump.Speed` | Double | rpm: about 1450 while running, 0 when off |
//!
//! Values are updated every [`UPDATE_EVERY`] through the node manager, so subscriptions see
//! them change.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use opcua::server::address_space::Variable;
use opcua::server::diagnostics::NamespaceMetadata;
use opcua::server::node_manager::memory::{simple_node_manager, SimpleNodeManager};
use opcua::server::{ServerBuilder, ServerEndpoint, ANONYMOUS_USER_TOKEN_ID};
use opcua::types::{DataValue, NodeId, ObjectId, Variant};

use crate::shutdown::Shutdown;

/// The namespace URI of the plant's nodes.
pub const NAMESPACE: &str = "urn:opex-connector:simulator:plant";
/// The index of [`NAMESPACE`] on this server: fixed, so that configs (the demo's) can name
/// the nodes; checked at start.
pub const PLANT_NAMESPACE: u16 = 2;
/// How often the values change.
pub const UPDATE_EVERY: Duration = Duration::from_millis(500);

/// The variables, by string node id.
pub const VARIABLES: [&str; 5] = [
    "Plant.Boiler.Temperature",
    "Plant.Boiler.Pressure",
    "Plant.Line.Counter",
    "Plant.Pump.Running",
    "Plant.Pump.Speed",
];

/// The plant's values `secs` after the start, in [`VARIABLES`] order.
pub fn plant_values(secs: f64) -> [Variant; 5] {
    use std::f64::consts::TAU;
    let running = secs % 60.0 < 40.0;
    let speed = if running {
        1450.0 + 10.0 * (secs * TAU / 7.0).sin()
    } else {
        0.0
    };
    [
        Variant::Double(80.0 + 5.0 * (secs * TAU / 120.0).sin()),
        Variant::Double(4.0 + 0.3 * (secs * TAU / 17.0).sin()),
        Variant::UInt32(secs as u32),
        Variant::Boolean(running),
        Variant::Double(speed),
    ]
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
    let ids: Vec<NodeId> = VARIABLES
        .iter()
        .map(|v| NodeId::new(namespace, *v))
        .collect();
    {
        let mut space = manager.address_space().write();
        let plant = NodeId::new(namespace, "Plant");
        space.add_folder(&plant, "Plant", "Plant", &ObjectId::ObjectsFolder.into());
        let variables = ids
            .iter()
            .zip(VARIABLES)
            .zip(plant_values(0.0))
            .map(|((id, name), value)| Variable::new(id, name, name, value))
            .collect();
        space.add_variables(variables, &plant);
    }
    let subscriptions = handle.subscriptions().clone();
    let started = Instant::now();
    let run = async move {
        let ticker = async {
            let mut tick = tokio::time::interval(UPDATE_EVERY);
            loop {
                tick.tick().await;
                let values = plant_values(started.elapsed().as_secs_f64());
                let updates = ids
                    .iter()
                    .zip(values)
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
