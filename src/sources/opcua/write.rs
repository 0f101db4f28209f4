//! Commands to an OPC-UA device, run by its driver ([`super::driver`]) on the one poll loop,
//! which takes them between polls and answers `expired` or `unavailable` (no session:
//! connecting, or waiting out the breaker) before the driver sees them: never queued for
//! later.
//!
//! A command is taken like this, and every point of it is answered exactly once:
//!
//! 1. Every point is checked before anything is sent ([`check`]): an unknown name or a node
//!    without `writable: true` is `refused`.
//! 2. The data type of each node is its DataType attribute, read from the server once per
//!    session (one Read request for the nodes not yet known; the cache is emptied whenever
//!    the session is made anew or the connection was lost). Each value is converted to
//!    exactly that type ([`to_variant`]) and checked against `min` / `max`: a value that does
//!    not fit is `out_of_range`, one of the wrong kind `refused`.
//! 3. **All or nothing before sending**: when any point is refused or out of range, no point
//!    of the command is written; the others are `refused` ("another point of the command was
//!    refused").
//! 4. One Write request with every node of the command, in its order. Each node's status
//!    code is its result: good → `written`, anything else → `exception` with the status name
//!    (`BadUserAccessDenied`, `BadTypeMismatch`, ...). No answer within `request_timeout_ms`
//!    or a failed request (the connection lost after sending) → `unknown`, never retried.
//! 5. With `verify`, the written nodes are read back: `written` only when each holds the
//!    value sent, else `unknown`.

use std::collections::HashMap;
use std::str::FromStr;
use std::time::{Duration, Instant};

use opcua::client::Session;
use opcua::types::{
    AttributeId, DataValue, NodeId, NumericRange, ReadValueId, StatusCode, TimestampsToReturn,
    Variant, WriteValue,
};
use serde_json::Value;

use super::config::{NodeType, OpcuaDeviceConfig, OpcuaNodeConfig};
use super::values::{a_node, to_variant, variant_json, Unfit};
use crate::commands::command::{all, OTHER_REFUSED};
use crate::commands::{Command, DeviceError, PointResult};
use crate::sources::driver::Results;

/// The data types learnt in one session, by node id text: read from the server once per
/// session, before the first write of each node.
#[derive(Debug, Default)]
pub struct Types(HashMap<String, NodeType>);

/// One point of a command, as far as it got before the Write request.
enum Step<'a> {
    /// Ready to send.
    Send(&'a OpcuaNodeConfig, Variant),
    /// Answered without sending.
    Done(PointResult),
}

/// Checks that every point of `c` is a writable node of `config`, before anything is sent:
/// the nodes, in the command's order, or every point's result (nothing may be sent).
pub fn check(config: &OpcuaDeviceConfig, c: &Command) -> Result<Vec<OpcuaNodeConfig>, Results> {
    let mut nodes = Vec::with_capacity(c.points.len());
    let mut refusals = Vec::with_capacity(c.points.len());
    for (name, _) in &c.points {
        match config.node_named(name) {
            Some(n) if n.writable => {
                nodes.push(n.clone());
                refusals.push(None);
            }
            Some(_) => refusals.push(Some(PointResult::Refused(format!(
                "{name:?} is not writable (its node has no writable: true)"
            )))),
            None => refusals.push(Some(PointResult::Refused(format!(
                "the device has no node named {name:?}"
            )))),
        }
    }
    if refusals.iter().any(Option::is_some) {
        return Err(all_or_nothing(c, refusals));
    }
    Ok(nodes)
}

impl Types {
    /// Writes command `c` (its points' `nodes`, checked by [`check`]) on `session`: the data
    /// types read when not known yet, every value converted and in range (else nothing is
    /// sent), the deadline checked again, then one Write request. Every point's result.
    pub async fn write(
        &mut self,
        config: &OpcuaDeviceConfig,
        session: &Session,
        c: &Command,
        nodes: &[OpcuaNodeConfig],
    ) -> Results {
        let timeout = config.request_timeout;
        let nodes: Vec<&OpcuaNodeConfig> = nodes.iter().collect();
        // Their data types, from the server.
        let types = match self.learn_types(session, &nodes, timeout).await {
            Ok(types) => types,
            Err(why) => return all(&c.points, &PointResult::Unavailable(why)),
        };
        // Every value converted and in range.
        let steps: Vec<Step> = c
            .points
            .iter()
            .zip(&nodes)
            .map(|((_, value), node)| match types.get(&node.node_id) {
                Some(Ok(t)) => match convert(node, *t, value) {
                    Ok(v) => Step::Send(node, v),
                    Err(r) => Step::Done(r),
                },
                Some(Err(why)) => Step::Done(PointResult::Refused(why.clone())),
                None => Step::Done(PointResult::Refused(format!(
                    "the data type of {} is not known",
                    node.node_id
                ))),
            })
            .collect();
        if steps.iter().any(|s| matches!(s, Step::Done(_))) {
            let refusals = steps
                .into_iter()
                .map(|s| match s {
                    Step::Done(r) => Some(r),
                    Step::Send(..) => None,
                })
                .collect();
            return all_or_nothing(c, refusals);
        }
        // Reading the types took a request: still in time?
        if c.expired(Instant::now()) {
            return all(&c.points, &PointResult::Expired);
        }
        let sent: Vec<(&OpcuaNodeConfig, Variant)> = steps
            .into_iter()
            .filter_map(|s| match s {
                Step::Send(n, v) => Some((n, v)),
                Step::Done(_) => None,
            })
            .collect();
        let mut results = write(session, &sent, timeout).await;
        if c.verify {
            verify(session, &sent, &mut results, timeout).await;
        }
        c.points
            .iter()
            .map(|(name, _)| name.clone())
            .zip(results)
            .collect()
    }

    /// The data type of each node (by node id text): from the cache, else from one Read
    /// request of the DataType attributes of the others. `Err` when that request failed
    /// (nothing was written); an unusable type is an `Err` for its node only.
    async fn learn_types(
        &mut self,
        session: &Session,
        nodes: &[&OpcuaNodeConfig],
        timeout: Duration,
    ) -> Result<HashMap<String, Result<NodeType, String>>, String> {
        let mut out: HashMap<String, Result<NodeType, String>> = HashMap::new();
        let mut unknown: Vec<&str> = Vec::new();
        for n in nodes {
            match self.0.get(&n.node_id) {
                Some(t) => {
                    out.insert(n.node_id.clone(), Ok(*t));
                }
                None if !unknown.contains(&n.node_id.as_str()) => unknown.push(&n.node_id),
                None => {}
            }
        }
        if unknown.is_empty() {
            return Ok(out);
        }
        let ids: Vec<ReadValueId> = unknown
            .iter()
            .map(|id| read_id(id, AttributeId::DataType))
            .collect();
        let values = match tokio::time::timeout(
            timeout,
            session.read(&ids, TimestampsToReturn::Neither, 0.0),
        )
        .await
        {
            Ok(Ok(values)) => values,
            Ok(Err(e)) => {
                return Err(format!(
                    "nothing written: the nodes' data types could not be read: {}",
                    e.status()
                ))
            }
            Err(_) => {
                return Err(format!(
                    "nothing written: the server did not answer the read of the nodes' data types within {} ms",
                    timeout.as_millis()
                ))
            }
        };
        for (i, id) in unknown.iter().enumerate() {
            let t = node_type(id, values.get(i));
            if let Ok(t) = t {
                self.0.insert(id.to_string(), t);
            }
            out.insert(id.to_string(), t);
        }
        Ok(out)
    }
}

/// The results of a command with refusals: each refused point its own, the others
/// [`OTHER_REFUSED`].
fn all_or_nothing(c: &Command, refusals: Vec<Option<PointResult>>) -> Results {
    c.points
        .iter()
        .zip(refusals)
        .map(|((name, _), r)| {
            (
                name.clone(),
                r.unwrap_or_else(|| PointResult::Refused(OTHER_REFUSED.into())),
            )
        })
        .collect()
}

/// A node id as the config holds it (checked to parse by validation).
fn node_id(text: &str) -> NodeId {
    NodeId::from_str(text).unwrap_or_else(|_| NodeId::null())
}

fn read_id(text: &str, attribute: AttributeId) -> ReadValueId {
    ReadValueId {
        node_id: node_id(text),
        attribute_id: attribute as u32,
        ..Default::default()
    }
}

/// The type the server's DataType attribute of `id` names.
fn node_type(id: &str, value: Option<&DataValue>) -> Result<NodeType, String> {
    let Some(dv) = value else {
        return Err(format!("the server gave no data type for {id}"));
    };
    if let Some(s) = dv.status.filter(|s| !s.is_good()) {
        return Err(format!("the server gave no data type for {id}: {s}"));
    }
    let Some(Variant::NodeId(t)) = &dv.value else {
        return Err(format!("the server gave no data type for {id}"));
    };
    let known = if t.namespace == 0 { t.as_u32() } else { None };
    known.and_then(NodeType::from_ns0).ok_or_else(|| {
        format!(
            "{id} has data type {t}, which commands do not write (they write Boolean, String, SByte to UInt64, Float, Double)"
        )
    })
}

/// `value` as node `n` of server type `t` takes it, checked against the node's config.
fn convert(n: &OpcuaNodeConfig, t: NodeType, value: &Value) -> Result<Variant, PointResult> {
    if let Some(want) = n.data_type.filter(|want| *want != t) {
        return Err(PointResult::Refused(format!(
            "the server says {} is {}, its config says {want}",
            n.node_id,
            a_node(t)
        )));
    }
    if !t.is_numeric() && (n.min.is_some() || n.max.is_some()) {
        return Err(PointResult::Refused(format!(
            "its config has min/max, but the server says {} is {}",
            n.node_id,
            a_node(t)
        )));
    }
    let v = to_variant(value, t).map_err(|e| match e {
        Unfit::Refused(why) => PointResult::Refused(why),
        Unfit::OutOfRange(why) => PointResult::OutOfRange(why),
    })?;
    if let Some(x) = value.as_f64() {
        if let Some(min) = n.min.filter(|min| x < *min) {
            return Err(PointResult::OutOfRange(format!(
                "{value} is below min {min}"
            )));
        }
        if let Some(max) = n.max.filter(|max| x > *max) {
            return Err(PointResult::OutOfRange(format!(
                "{value} is above max {max}"
            )));
        }
    }
    Ok(v)
}

/// One Write request with every node of `sent`, in order; a result per node.
async fn write(
    session: &Session,
    sent: &[(&OpcuaNodeConfig, Variant)],
    timeout: Duration,
) -> Vec<PointResult> {
    let values: Vec<WriteValue> = sent
        .iter()
        .map(|(n, v)| WriteValue {
            node_id: node_id(&n.node_id),
            attribute_id: AttributeId::Value as u32,
            index_range: NumericRange::None,
            // The value only: some servers refuse a write that carries timestamps.
            value: DataValue::value_only(v.clone()),
        })
        .collect();
    let each = |r: PointResult| vec![r; sent.len()];
    match tokio::time::timeout(timeout, session.write(&values)).await {
        Err(_) => each(PointResult::Unknown(format!(
            "sent, but the server did not answer within {} ms: not retried",
            timeout.as_millis()
        ))),
        // Refused by the client before it sent anything.
        Ok(Err(e)) if e.status() == StatusCode::BadNotConnected => each(PointResult::Unavailable(
            "the device's session is not connected".into(),
        )),
        Ok(Err(e)) => each(PointResult::Unknown(format!(
            "the Write request failed after it was sent ({}): not retried",
            e.status()
        ))),
        Ok(Ok(codes)) => (0..sent.len())
            .map(|i| match codes.get(i) {
                Some(s) if s.is_good() => PointResult::Written,
                Some(s) => PointResult::Exception(DeviceError::Opcua(s.to_string())),
                None => PointResult::Unknown("the server answered no status for this node".into()),
            })
            .collect(),
    }
}

/// Reads the written nodes back: each stays `written` only when it holds the value sent.
async fn verify(
    session: &Session,
    sent: &[(&OpcuaNodeConfig, Variant)],
    results: &mut [PointResult],
    timeout: Duration,
) {
    let written: Vec<usize> = (0..sent.len())
        .filter(|i| results.get(*i) == Some(&PointResult::Written))
        .collect();
    if written.is_empty() {
        return;
    }
    let ids: Vec<ReadValueId> = written
        .iter()
        .map(|i| read_id(&sent[*i].0.node_id, AttributeId::Value))
        .collect();
    let read = tokio::time::timeout(
        timeout,
        session.read(&ids, TimestampsToReturn::Neither, 0.0),
    )
    .await;
    let values = match read {
        Ok(Ok(values)) => values,
        Ok(Err(e)) => {
            let why = format!("written, but the read back failed: {}", e.status());
            for i in written {
                results[i] = PointResult::Unknown(why.clone());
            }
            return;
        }
        Err(_) => {
            let why = format!(
                "written, but the read back had no answer within {} ms",
                timeout.as_millis()
            );
            for i in written {
                results[i] = PointResult::Unknown(why.clone());
            }
            return;
        }
    };
    for (k, i) in written.into_iter().enumerate() {
        let want = &sent[i].1;
        let got = values.get(k);
        let same = got.is_some_and(|dv| {
            dv.status.is_none_or(|s| s.is_good()) && dv.value.as_ref() == Some(want)
        });
        if !same {
            let shown = match got {
                Some(dv) if dv.status.is_none_or(|s| s.is_good()) => dv
                    .value
                    .as_ref()
                    .map_or(Value::Null, variant_json)
                    .to_string(),
                Some(dv) => dv.status.unwrap_or(StatusCode::Good).to_string(),
                None => "nothing".into(),
            };
            results[i] = PointResult::Unknown(format!(
                "written, but the node reads back {shown}, not {}",
                variant_json(want)
            ));
        }
    }
}
