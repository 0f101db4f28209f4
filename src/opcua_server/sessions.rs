//! The sessions the status page lists: each noted by the node manager at its first request
//! on the devices' variables (a read, a monitored item, a write), with its user, its client
//! application and its security, and left out again once the stack has closed it.
//!
//! The stack keeps its sessions to itself; what a request carries is the session, so a
//! client that only browses is counted in `sessions` but not listed until it reads.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use serde_json::{json, Value};
use ua_server::node_manager::RequestContext;

/// One session as the status page shows it.
struct Seen {
    /// Whether the stack's session is still open (it holds the session weakly: the stack
    /// does not export the session's type).
    open: Box<dyn Fn() -> bool + Send>,
    /// Its row: `{id, user, application, application_uri, security, since}`.
    row: Value,
}

/// The sessions seen, by the stack's numeric session id.
#[derive(Default)]
pub struct Sessions {
    seen: Mutex<HashMap<u32, Seen>>,
}

impl Sessions {
    /// Notes the session of a request, once.
    pub fn note(&self, context: &RequestContext) {
        let Ok(mut seen) = self.seen.lock() else {
            return;
        };
        if seen.contains_key(&context.session_id) {
            return;
        }
        let row = {
            let session = context.session.read();
            let app = session.application_description();
            let user = if context.token.is_anonymous() {
                "anonymous"
            } else {
                context.token.0.as_str()
            };
            json!({
                "id": context.session_id,
                "user": user,
                "application": app.application_name.text.as_ref(),
                "application_uri": app.application_uri.as_ref(),
                "security": format!("{} {}", policy_name(session.security_policy_uri()), session.message_security_mode()),
                "since": crate::time::rfc3339(crate::record::now_ms()),
            })
        };
        let session = Arc::downgrade(&context.session);
        let open = Box::new(move || session.upgrade().is_some_and(|s| s.read().is_activated()));
        seen.insert(context.session_id, Seen { open, row });
    }

    /// The sessions still open, oldest first (those the stack closed are forgotten).
    pub fn rows(&self) -> Vec<Value> {
        let Ok(mut seen) = self.seen.lock() else {
            return Vec::new();
        };
        seen.retain(|_, s| (s.open)());
        let mut rows: Vec<(u32, Value)> = seen.iter().map(|(id, s)| (*id, s.row.clone())).collect();
        rows.sort_by_key(|(id, _)| *id);
        rows.into_iter().map(|(_, row)| row).collect()
    }
}

/// The short name of a security policy URI (`...#Basic256Sha256` is `Basic256Sha256`).
fn policy_name(uri: &str) -> &str {
    uri.rsplit('#').next().unwrap_or(uri)
}
