//! A three-node `nats-server` JetStream cluster on loopback, for tests of a connection that
//! must survive losing a node.
//!
//! Nine free ports: a client port, a cluster-route port and a monitoring port per node. Every
//! node lists all three routes. Ready once every node reports the same JetStream meta leader
//! (`/jsz`) and is healthy; each node is a [`NatsServer`], so a test can stop, kill9 and
//! restart one on its ports and store.

use super::process::PEER_START_DEADLINE;
use super::{JsSync, NatsServer};
use crate::common::{free_ports, poll_until};

/// The cluster's name in every node's config.
const CLUSTER: &str = "opex-test";
/// Nodes in the cluster.
const NODES: usize = 3;

/// Three JetStream nodes `n0`, `n1`, `n2`, stopped on drop.
pub struct NatsCluster {
    nodes: Vec<NatsServer>,
}

impl NatsCluster {
    /// Starts the three nodes, every write synced; returns once they agree on a meta leader.
    pub fn start() -> NatsCluster {
        NatsCluster::start_with(JsSync::EveryWrite)
    }

    /// Like [`NatsCluster::start`], the stores syncing as `sync` says.
    pub fn start_with(sync: JsSync) -> NatsCluster {
        let ports = free_ports(3 * NODES);
        let (clients, rest) = ports.split_at(NODES);
        let (routes, monitors) = rest.split_at(NODES);
        let route_list = routes
            .iter()
            .map(|p| format!("\"nats://127.0.0.1:{p}\""))
            .collect::<Vec<_>>()
            .join(", ");
        let mut nodes: Vec<NatsServer> = (0..NODES)
            .map(|i| {
                let cluster = format!(
                    "cluster {{\n  name: {CLUSTER}\n  listen: 127.0.0.1:{}\n  routes: [ {route_list} ]\n}}\n",
                    routes[i]
                );
                NatsServer::configure(
                    &format!("n{i}"),
                    clients[i],
                    monitors[i],
                    sync,
                    &cluster,
                    "/healthz?js-enabled-only=true",
                )
            })
            .collect();
        // All three first: none can elect a leader alone.
        for node in &mut nodes {
            node.spawn();
        }
        for node in &mut nodes {
            node.wait_ready();
        }
        let cluster = NatsCluster { nodes };
        cluster.wait_for_meta_leader();
        cluster
    }

    /// The client URLs of the nodes, `n0` first.
    pub fn urls(&self) -> Vec<String> {
        self.nodes.iter().map(NatsServer::url).collect()
    }

    /// Node `i` (0, 1 or 2).
    pub fn node(&self, i: usize) -> &NatsServer {
        &self.nodes[i]
    }

    /// Node `i`, to stop, kill9 or restart it.
    pub fn node_mut(&mut self, i: usize) -> &mut NatsServer {
        &mut self.nodes[i]
    }

    /// The nodes the test has not stopped or killed.
    fn started(&self) -> impl Iterator<Item = &NatsServer> {
        self.nodes.iter().filter(|n| n.is_started())
    }

    /// The meta leader's name when every started node names the same one.
    pub fn meta_leader(&self) -> Option<String> {
        let mut leaders = self
            .started()
            .map(|n| n.monitor("/jsz").unwrap_or_default())
            .map(|jsz| {
                jsz["meta_cluster"]["leader"]
                    .as_str()
                    .unwrap_or("")
                    .to_string()
            });
        let first = leaders.next().filter(|l| !l.is_empty())?;
        leaders.all(|l| l == first).then_some(first)
    }

    /// Polls until the started nodes agree on a meta leader and every one is healthy;
    /// returns the leader's name. Panics after the start deadline.
    pub fn wait_for_meta_leader(&self) -> String {
        let mut leader = None;
        let agreed = poll_until(PEER_START_DEADLINE, || {
            leader = self.meta_leader();
            leader.is_some() && self.started().all(|n| n.monitor("/healthz").is_some())
        });
        match leader {
            Some(name) if agreed => name,
            _ => panic!(
                "the nats cluster had no meta leader within {PEER_START_DEADLINE:?}: {:?}",
                self.nodes
                    .iter()
                    .map(|n| n.monitor("/jsz").map(|j| j["meta_cluster"].clone()))
                    .collect::<Vec<_>>()
            ),
        }
    }

    /// Stops every node (SIGTERM).
    pub fn stop(&mut self) {
        for node in &mut self.nodes {
            node.stop();
        }
    }

    /// Starts every node again on its ports and store (after [`NatsCluster::stop`]); returns
    /// once they agree on a meta leader.
    pub fn restart(&mut self) {
        for node in &mut self.nodes {
            node.spawn();
        }
        for node in &mut self.nodes {
            node.wait_ready();
        }
        self.wait_for_meta_leader();
    }
}
