//! `browse opc.tcp://...`: walks a server's address space from the Objects folder (or
//! `--from`) along its hierarchical references, and prints the tree: browse name, node id,
//! node class, and for each variable its data type, what this user may do with it (read,
//! write) and its current value. With `--yaml GROUP` it prints the variables as a `nodes:`
//! list ready for a device entry, writable ones with `writable: true` commented out.
//!
//! Bounded: the walk opens nodes level by level down to `--depth` and stops at
//! `--max-nodes`; either cut is said at the end, with what to do. A node reached a second
//! time (address spaces are graphs) is listed but not opened again. The server's own
//! `Server` object (diagnostics, hundreds of nodes) is listed but opened only when it is
//! `--from`.

use std::collections::HashSet;
use std::io::Write;
use std::str::FromStr;

use opcua::client::Session;
use opcua::types::{
    AttributeId, BrowseDescription, BrowseDirection, BrowseResult, ByteString, DataTypeId,
    DataValue, NodeClass, NodeId, ObjectId, ReadValueId, ReferenceTypeId, TimestampsToReturn,
    Variant,
};
use serde_json::Value;

use super::opcua::{connect, device};
use super::{emit, number, text, Error, Flags, Outcome};
use crate::config::checks::valid_name;
use crate::sources::hints;
use crate::sources::opcua::values::point_json;

/// How deep the walk goes unless `--depth` says otherwise (the start node is depth 0).
pub const DEFAULT_DEPTH: u64 = 6;
/// The deepest `--depth`.
pub const MAX_DEPTH: u64 = 32;
/// How many nodes the walk lists unless `--max-nodes` says otherwise.
pub const DEFAULT_MAX_NODES: u64 = 2000;
/// The most `--max-nodes`.
pub const MAX_NODES: u64 = 100_000;
/// Nodes per Browse request, and variables per Read request (three attributes each).
const BATCH: usize = 50;
/// Characters of a value shown in the tree.
const VALUE_CHARS: usize = 60;

/// One node found.
#[derive(Debug)]
struct Node {
    id: NodeId,
    name: String,
    class: NodeClass,
    depth: usize,
    children: Vec<usize>,
    /// Listed where it was first found; not opened here.
    seen_above: bool,
    /// Listed, not opened, and why.
    not_opened: Option<&'static str>,
    data_type: Option<String>,
    /// The user access level: bit 0 read, bit 1 write.
    access: Option<u8>,
    value: Option<Value>,
}

/// The walk's result.
struct Walk {
    nodes: Vec<Node>,
    /// The walk stopped at the node limit.
    full: bool,
    /// Nodes at the depth limit that have children not opened.
    deeper: usize,
}

/// `browse ENDPOINT [--from NODE] [--depth N] [--max-nodes N] [--match GLOB] [--yaml GROUP]`.
pub fn browse(endpoint: &str, flags: &Flags<'_>, out: &mut dyn Write) -> Result<Outcome, Error> {
    let from = text(flags, "--from").unwrap_or("i=85");
    let depth = number(flags, "--depth", DEFAULT_DEPTH, 0..=MAX_DEPTH)? as usize;
    let max_nodes = number(flags, "--max-nodes", DEFAULT_MAX_NODES, 1..=MAX_NODES)? as usize;
    let pattern = text(flags, "--match").map(str::to_lowercase);
    let group = text(flags, "--yaml");
    if let Some(g) = group {
        if !valid_name(g) {
            return Err(Error::Usage(format!(
                "--yaml {g:?}: a group name is 1 to 64 letters, digits, '-' or '_'"
            )));
        }
    }
    let c = device(endpoint, &[from], flags)?;
    // Checked by the validation: the node id parses.
    let start = NodeId::from_str(from).unwrap_or_else(|_| NodeId::null());
    let walk = super::runtime()?.block_on(async {
        let connected = connect(&c).await?;
        let result = walk(&connected.session, start, from, depth, max_nodes).await;
        connected.close().await;
        result
    })?;
    let keep = kept(&walk.nodes, pattern.as_deref());
    match group {
        Some(g) => print_yaml(&walk, &keep, g, endpoint, from, out)?,
        None => print_tree(&walk, &keep, out)?,
    }
    let mut cut = Vec::new();
    if walk.full {
        cut.push(format!(
            "cut: the walk stopped at --max-nodes {max_nodes}; narrow it with --from NODE or --match, or raise --max-nodes"
        ));
    }
    if walk.deeper > 0 {
        cut.push(format!(
            "cut: {} node{} at depth {depth} {} children that were not opened; --depth {} goes further, or --from one of them",
            walk.deeper,
            if walk.deeper == 1 { "" } else { "s" },
            if walk.deeper == 1 { "has" } else { "have" },
            depth + 1
        ));
    }
    for line in &cut {
        let line = if group.is_some() {
            format!("# {line}")
        } else {
            line.clone()
        };
        emit(out, &line)?;
    }
    Ok(if cut.is_empty() {
        Outcome::Done
    } else {
        Outcome::Partial
    })
}

/// Walks from `start` level by level.
async fn walk(
    session: &Session,
    start: NodeId,
    from: &str,
    max_depth: usize,
    max_nodes: usize,
) -> Result<Walk, Error> {
    let root = describe_start(session, &start, from).await?;
    let mut nodes = vec![root];
    let mut seen: HashSet<NodeId> = HashSet::from([start]);
    let mut frontier = vec![0usize];
    let mut full = false;
    let mut deeper = 0;
    for level in 0..=max_depth {
        let open: Vec<usize> = frontier
            .iter()
            .copied()
            .filter(|&i| {
                let n = &nodes[i];
                !n.seen_above
                    && n.not_opened.is_none()
                    && matches!(n.class, NodeClass::Object | NodeClass::Variable)
            })
            .collect();
        if open.is_empty() {
            break;
        }
        let ids: Vec<NodeId> = open.iter().map(|&i| nodes[i].id.clone()).collect();
        let found = browse_children(session, &ids).await?;
        if level == max_depth {
            deeper = found.iter().filter(|refs| !refs.is_empty()).count();
            break;
        }
        let mut next = Vec::new();
        'parents: for (&parent, refs) in open.iter().zip(found) {
            for (id, name, class) in refs {
                if nodes.len() >= max_nodes {
                    full = true;
                    break 'parents;
                }
                let again = !seen.insert(id.clone());
                let not_opened = (id == ObjectId::Server)
                    .then_some("the server's own diagnostics; --from i=2253 to see them");
                let child = nodes.len();
                nodes.push(Node {
                    id,
                    name,
                    class,
                    depth: level + 1,
                    children: Vec::new(),
                    seen_above: again,
                    not_opened,
                    data_type: None,
                    access: None,
                    value: None,
                });
                nodes[parent].children.push(child);
                next.push(child);
            }
        }
        if full {
            break;
        }
        frontier = next;
    }
    read_variables(session, &mut nodes).await?;
    Ok(Walk {
        nodes,
        full,
        deeper,
    })
}

/// The start node with its browse name and class; a node the server does not know is a
/// failure.
async fn describe_start(session: &Session, start: &NodeId, from: &str) -> Result<Node, Error> {
    let wanted = [AttributeId::BrowseName, AttributeId::NodeClass].map(|a| (start.clone(), a));
    let values = read_attributes(session, wanted.into_iter()).await?;
    let status = values
        .first()
        .and_then(|v| v.status)
        .unwrap_or(opcua::types::StatusCode::Good);
    if !status.is_good() {
        return Err(failed(format!("--from {from}: {status}")));
    }
    let name = match values.first().and_then(|v| v.value.as_ref()) {
        Some(Variant::QualifiedName(q)) => q.name.as_ref().to_string(),
        _ => from.to_string(),
    };
    let class = match values.get(1).and_then(|v| v.value.as_ref()) {
        Some(Variant::Int32(n)) => class_of(*n),
        _ => NodeClass::Unspecified,
    };
    Ok(Node {
        id: start.clone(),
        name,
        class,
        depth: 0,
        children: Vec::new(),
        seen_above: false,
        not_opened: None,
        data_type: None,
        access: None,
        value: None,
    })
}

fn class_of(n: i32) -> NodeClass {
    match n {
        1 => NodeClass::Object,
        2 => NodeClass::Variable,
        4 => NodeClass::Method,
        8 => NodeClass::ObjectType,
        16 => NodeClass::VariableType,
        32 => NodeClass::ReferenceType,
        64 => NodeClass::DataType,
        128 => NodeClass::View,
        _ => NodeClass::Unspecified,
    }
}

/// The children (objects and variables, along hierarchical references, on this server) of
/// each of `ids`, following continuation points.
async fn browse_children(
    session: &Session,
    ids: &[NodeId],
) -> Result<Vec<Vec<(NodeId, String, NodeClass)>>, Error> {
    let mut out: Vec<Vec<(NodeId, String, NodeClass)>> = Vec::with_capacity(ids.len());
    for chunk in ids.chunks(BATCH) {
        let asked: Vec<BrowseDescription> = chunk
            .iter()
            .map(|id| BrowseDescription {
                node_id: id.clone(),
                browse_direction: BrowseDirection::Forward,
                reference_type_id: ReferenceTypeId::HierarchicalReferences.into(),
                include_subtypes: true,
                node_class_mask: (NodeClass::Object as u32) | (NodeClass::Variable as u32),
                // All fields of the references.
                result_mask: 0x3F,
            })
            .collect();
        let results = session
            .browse(&asked, 0, None)
            .await
            .map_err(|e| failed(format!("browse: {e}")))?;
        for result in results {
            let mut refs = Vec::new();
            let mut result: BrowseResult = result;
            // Bounded: a server hands out each reference once; stop if it keeps pointing on.
            for _ in 0..10_000 {
                for r in result.references.take().unwrap_or_default() {
                    if r.node_id.server_index != 0 {
                        continue;
                    }
                    refs.push((
                        r.node_id.node_id,
                        r.browse_name.name.as_ref().to_string(),
                        r.node_class,
                    ));
                }
                if result.continuation_point.is_null_or_empty() {
                    break;
                }
                let point: ByteString = result.continuation_point.clone();
                let more = session
                    .browse_next(false, &[point])
                    .await
                    .map_err(|e| failed(format!("browse: {e}")))?;
                match more.into_iter().next() {
                    Some(next) => result = next,
                    None => break,
                }
            }
            out.push(refs);
        }
    }
    Ok(out)
}

/// Reads the data type, the user's access level and the value of every variable found.
async fn read_variables(session: &Session, nodes: &mut [Node]) -> Result<(), Error> {
    let variables: Vec<usize> = (0..nodes.len())
        .filter(|&i| nodes[i].class == NodeClass::Variable && !nodes[i].seen_above)
        .collect();
    for chunk in variables.chunks(BATCH) {
        let wanted = chunk.iter().flat_map(|&i| {
            [
                AttributeId::DataType,
                AttributeId::UserAccessLevel,
                AttributeId::Value,
            ]
            .map(|a| (nodes[i].id.clone(), a))
        });
        let values = read_attributes(session, wanted).await?;
        for (k, &i) in chunk.iter().enumerate() {
            let at = |j: usize| values.get(k * 3 + j);
            nodes[i].data_type = at(0).and_then(|v| v.value.as_ref()).map(type_name);
            nodes[i].access = match at(1).and_then(|v| v.value.as_ref()) {
                Some(Variant::Byte(b)) => Some(*b),
                _ => None,
            };
            nodes[i].value = at(2).map(|dv: &DataValue| point_json(dv));
        }
    }
    Ok(())
}

/// One Read request for these attributes, the values in the same order.
async fn read_attributes(
    session: &Session,
    wanted: impl Iterator<Item = (NodeId, AttributeId)>,
) -> Result<Vec<DataValue>, Error> {
    let ids: Vec<ReadValueId> = wanted
        .map(|(node_id, a)| ReadValueId {
            node_id,
            attribute_id: a as u32,
            ..Default::default()
        })
        .collect();
    session
        .read(&ids, TimestampsToReturn::Neither, 0.0)
        .await
        .map_err(|e| failed(format!("read: {e}")))
}

/// A data type's name: the standard ones by name (`Double`), others by node id.
fn type_name(v: &Variant) -> String {
    match v {
        Variant::NodeId(id) => match (&id.identifier, id.namespace) {
            (opcua::types::Identifier::Numeric(n), 0) => DataTypeId::try_from(*n)
                .map(|t| format!("{t:?}"))
                .unwrap_or_else(|_| id.to_string()),
            _ => id.to_string(),
        },
        other => format!("{other:?}"),
    }
}

fn failed(text: String) -> Error {
    let hint = hints::opcua_hint(&text)
        .map(|h| format!(": {h}"))
        .unwrap_or_default();
    Error::Failed(format!("{text}{hint}"))
}

/// Which nodes to print: all without a pattern; with one, the variables whose browse name or
/// node id matches it, and their ancestors.
fn kept(nodes: &[Node], pattern: Option<&str>) -> Vec<bool> {
    let Some(pattern) = pattern else {
        return vec![true; nodes.len()];
    };
    let mut keep = vec![false; nodes.len()];
    // Children come after their parents: walk backwards.
    for i in (0..nodes.len()).rev() {
        let n = &nodes[i];
        let hit = n.class == NodeClass::Variable
            && (glob(pattern, &n.name.to_lowercase())
                || glob(pattern, &n.id.to_string().to_lowercase()));
        keep[i] = i == 0 || hit || n.children.iter().any(|&c| keep[c]);
    }
    keep
}

/// `*` any run of characters, `?` one character; everything else itself.
fn glob(pattern: &str, text: &str) -> bool {
    let p: Vec<char> = pattern.chars().collect();
    let t: Vec<char> = text.chars().collect();
    // The classic greedy match with one backtrack point: linear in practice, bounded by
    // |p| * |t| at worst.
    let (mut pi, mut ti) = (0, 0);
    let mut star: Option<(usize, usize)> = None;
    while ti < t.len() {
        match p.get(pi) {
            Some('*') => {
                star = Some((pi, ti));
                pi += 1;
            }
            Some(&c) if c == '?' || c == t[ti] => {
                pi += 1;
                ti += 1;
            }
            _ => match star {
                Some((sp, st)) => {
                    pi = sp + 1;
                    ti = st + 1;
                    star = Some((sp, st + 1));
                }
                None => return false,
            },
        }
    }
    p[pi..].iter().all(|&c| c == '*')
}

fn access_words(access: Option<u8>) -> &'static str {
    match access.map(|a| (a & 1 != 0, a & 2 != 0)) {
        Some((true, true)) => "read/write",
        Some((true, false)) => "read",
        Some((false, true)) => "write only",
        Some((false, false)) => "no access",
        None => "",
    }
}

fn class_word(c: NodeClass) -> &'static str {
    match c {
        NodeClass::Object => "Object",
        NodeClass::Variable => "Variable",
        NodeClass::Method => "Method",
        NodeClass::View => "View",
        _ => "Node",
    }
}

fn shown_value(n: &Node) -> String {
    let Some(v) = &n.value else {
        return String::new();
    };
    let text = if v["quality"] == "good" {
        v["value"].to_string()
    } else {
        format!("({})", v["status"].as_str().unwrap_or("bad"))
    };
    if text.chars().count() > VALUE_CHARS {
        let cut: String = text.chars().take(VALUE_CHARS).collect();
        format!("{cut}...")
    } else {
        text
    }
}

fn print_tree(walk: &Walk, keep: &[bool], out: &mut dyn Write) -> Result<(), Error> {
    let mut rows: Vec<[String; 6]> = Vec::new();
    let mut stack = vec![0usize];
    while let Some(i) = stack.pop() {
        let Some(n) = walk.nodes.get(i) else { continue };
        if !keep[i] {
            continue;
        }
        let label = format!("{}{}", "  ".repeat(n.depth), n.name);
        let tail = if n.seen_above {
            "(listed above)".to_string()
        } else if let Some(why) = n.not_opened {
            format!("(not opened: {why})")
        } else {
            shown_value(n)
        };
        rows.push([
            label,
            n.id.to_string(),
            class_word(n.class).to_string(),
            n.data_type.clone().unwrap_or_default(),
            access_words(n.access).to_string(),
            tail,
        ]);
        stack.extend(n.children.iter().rev());
    }
    let mut widths = [0usize; 5];
    for row in &rows {
        for (w, cell) in widths.iter_mut().zip(row.iter()) {
            *w = (*w).max(cell.chars().count()).min(48);
        }
    }
    for row in &rows {
        let mut line = String::new();
        for (k, cell) in row.iter().enumerate() {
            if cell.is_empty() && k > 0 {
                if let Some(w) = widths.get(k) {
                    line.push_str(&" ".repeat(w + 2));
                }
                continue;
            }
            line.push_str(cell);
            if let Some(w) = widths.get(k) {
                let pad = w.saturating_sub(cell.chars().count()) + 2;
                line.push_str(&" ".repeat(pad));
            }
        }
        emit(out, line.trim_end())?;
    }
    let variables: Vec<&Node> = walk
        .nodes
        .iter()
        .enumerate()
        .filter(|(i, n)| keep[*i] && n.class == NodeClass::Variable && !n.seen_above)
        .map(|(_, n)| n)
        .collect();
    let writable = variables
        .iter()
        .filter(|n| n.access.is_some_and(|a| a & 2 != 0))
        .count();
    emit(
        out,
        &format!(
            "{} nodes, {} variables ({writable} writable)",
            rows.len(),
            variables.len()
        ),
    )
}

/// The variables as a `nodes:` list: names made from browse names (unique, prefixed with the
/// parent's name on a clash), writable ones with `writable: true` commented out.
fn print_yaml(
    walk: &Walk,
    keep: &[bool],
    group: &str,
    endpoint: &str,
    from: &str,
    out: &mut dyn Write,
) -> Result<(), Error> {
    let mut parent = vec![0usize; walk.nodes.len()];
    for (i, n) in walk.nodes.iter().enumerate() {
        for &c in &n.children {
            parent[c] = i;
        }
    }
    let mut order = Vec::new();
    let mut stack = vec![0usize];
    while let Some(i) = stack.pop() {
        let Some(n) = walk.nodes.get(i) else { continue };
        if n.class == NodeClass::Variable && !n.seen_above && keep[i] {
            order.push(i);
        }
        stack.extend(n.children.iter().rev());
    }
    let unreadable = order
        .iter()
        .filter(|&&i| walk.nodes[i].access.is_some_and(|a| a & 1 == 0))
        .count();
    let readable: Vec<usize> = order
        .into_iter()
        .filter(|&i| walk.nodes[i].access.is_none_or(|a| a & 1 != 0))
        .collect();
    emit(
        out,
        &format!(
            "# opex-connector browse {endpoint} --from {from}: {} variables{}",
            readable.len(),
            if unreadable > 0 {
                format!(" ({unreadable} not readable, left out)")
            } else {
                String::new()
            }
        ),
    )?;
    emit(
        out,
        &format!("# for a device entry with groups: [{{name: {group}, interval_ms: 1000}}]"),
    )?;
    emit(out, "nodes:")?;
    let mut names: Vec<String> = Vec::new();
    for i in readable {
        let n = &walk.nodes[i];
        let mut name = sanitize(&n.name);
        if names.contains(&name) {
            name = sanitize(&format!("{}_{}", walk.nodes[parent[i]].name, n.name));
        }
        let base = name.clone();
        let mut k = 2;
        while names.contains(&name) {
            let suffix = format!("_{k}");
            let keep_chars = 64usize.saturating_sub(suffix.len());
            name = format!(
                "{}{suffix}",
                base.chars().take(keep_chars).collect::<String>()
            );
            k += 1;
        }
        names.push(name.clone());
        // A JSON string is a valid YAML double-quoted scalar.
        let id = Value::String(n.id.to_string()).to_string();
        let comment = match (&n.data_type, &n.value) {
            (Some(t), Some(v)) if v["quality"] == "good" => {
                format!("  # {t}, now {}", shown_value(n))
            }
            (Some(t), _) => format!("  # {t}"),
            _ => String::new(),
        };
        emit(out, &format!("  - name: {name}{comment}"))?;
        emit(out, &format!("    node_id: {id}"))?;
        emit(out, &format!("    group: {group}"))?;
        if n.access.is_some_and(|a| a & 2 != 0) {
            emit(out, "    # writable: true")?;
        }
    }
    Ok(())
}

/// A valid point name from a browse name: other characters become `_`, at most 64.
fn sanitize(name: &str) -> String {
    let s: String = name
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '_' {
                c
            } else {
                '_'
            }
        })
        .take(64)
        .collect();
    if s.is_empty() {
        "node".to_string()
    } else {
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn globs_match_stars_and_single_characters() {
        assert!(glob("*temp*", "boilertemperature"));
        assert!(glob("ns=2;s=plant.*", "ns=2;s=plant.boiler.temperature"));
        assert!(glob("pump?", "pump1"));
        assert!(!glob("pump?", "pump"));
        assert!(!glob("*speed", "speedometer"));
        assert!(glob("*", ""));
    }

    #[test]
    fn browse_names_become_valid_point_names() {
        assert_eq!(
            sanitize("Boiler Temperature (°C)"),
            "Boiler_Temperature___C_"
        );
        assert_eq!(sanitize(""), "node");
        assert!(valid_name(&sanitize(&"x".repeat(100))));
    }
}
