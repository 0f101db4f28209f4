//! Each device's recent command ids, per path: what answers a repeated command with its
//! first outcome and refuses an id reused with other content.
//!
//! **A repeated command is answered, not run again; a reused id is refused.** Each device
//! remembers the ids of its recent commands with their content (the points and values, as a
//! SHA-256 of them in name order), per path: the last [`RECENT_IDS`] of each path, for at
//! most [`RECENT_FOR`], and at most [`RECENT_POINTS`] point results in all. A command whose
//! `id` and content are among them (an MQTT redelivery, an HTTP or NATS retry) gets the first
//! command's outcome (waiting for it while the first still runs), writes nothing, leaves no
//! second record and is counted in `duplicates`, not in `received`. This holds whatever the
//! first outcome was: to try again a command that was not written, send it with a new id. A
//! command whose `id` is there with **other content** is refused whole: every point
//! `refused` ([`ID_REUSED`]), nothing sent, answered at once (HTTP `409`), counted in
//! `received`, `refused` and `id_reused`, and on record like every command. Ids made up for
//! commands that gave none are never repeated, so they are not remembered.
//!
//! **Ids are kept per path** (`http`, `nats`, `mqtt`, `sparkplug`), each within its own
//! bounds, because the paths do not share a trust level: the HTTP path takes a command only
//! with the commands token, while the NATS and MQTT paths take whatever anyone the broker
//! lets publish on their subject or topic sends (the broker's accounts and ACLs decide who
//! that is, not the connector), and a Sparkplug DCMD whatever a publisher on the node's
//! topics sends (it has no id). So a publisher on a broker can neither pre-claim the ids an
//! HTTP caller will use nor push them out of memory by sending many.

use std::collections::{HashMap, VecDeque};
use std::time::{Duration, Instant};

use serde_json::Value;
use sha2::{Digest, Sha256};
use tokio::sync::watch;

use super::service::Outcome;

/// Most command ids a device remembers per path, to answer a repeated one with its first
/// outcome.
pub const RECENT_IDS: usize = 1000;
/// Longest a command id is remembered.
pub const RECENT_FOR: Duration = Duration::from_secs(600);
/// Most point results a device remembers per path (the outcomes of its remembered ids); the
/// oldest ids are forgotten first. Bounds the memory of large commands.
pub const RECENT_POINTS: usize = 10_000;
/// What every point of a command is refused with when its id is a recent command's of the
/// same path, with other content.
pub const ID_REUSED: &str = "id reused with other content";

/// The outcome of a remembered command: `None` while it runs.
pub(super) type Shared = watch::Receiver<Option<Outcome>>;

/// A command's content: the SHA-256 of its points and values in name order.
pub(super) type Content = [u8; 32];

/// The content of a command of `points`: equal for the same points and values in any order,
/// and for a number however it is written (`50`, `50.0`).
pub(super) fn content(points: &[(String, Value)]) -> Content {
    let mut sorted: Vec<&(String, Value)> = points.iter().collect();
    sorted.sort_by(|a, b| a.0.cmp(&b.0));
    let mut h = Sha256::new();
    for (name, value) in sorted {
        let value = match value {
            Value::Number(n) => match n.as_f64() {
                Some(f) if n.is_f64() && f.fract() == 0.0 && f.abs() < 9e15 => {
                    format!("{}", f as i64)
                }
                _ => n.to_string(),
            },
            other => other.to_string(),
        };
        // Lengths first, so no two lists of pieces hash the same bytes.
        for piece in [name.as_bytes(), value.as_bytes()] {
            h.update((piece.len() as u64).to_be_bytes());
            h.update(piece);
        }
    }
    h.finalize().into()
}

/// A device's recent command ids of one path and their outcomes (module doc).
#[derive(Default)]
pub(super) struct Recent {
    /// Oldest first: the id and when it was taken.
    order: VecDeque<(String, Instant)>,
    /// Each remembered id's outcome, its content and its number of points.
    outcomes: HashMap<String, (Shared, Content, usize)>,
    /// Points of every remembered outcome.
    points: usize,
}

/// What [`Recent::claim`] found.
pub(super) enum Seen {
    /// A new id: send its outcome here once known.
    New(watch::Sender<Option<Outcome>>),
    /// A repeated command (its id and content): its first outcome comes here.
    Repeat(Shared),
    /// A recent command's id, with other content.
    Reused,
}

impl Recent {
    /// Remembers `id` (a command of `points` points and `content`) taken at `now`, unless it
    /// is remembered already.
    pub(super) fn claim(
        &mut self,
        id: &str,
        content: Content,
        points: usize,
        now: Instant,
    ) -> Seen {
        while self
            .order
            .front()
            .is_some_and(|(_, at)| now.duration_since(*at) > RECENT_FOR)
        {
            self.forget_oldest();
        }
        if let Some((first, known, _)) = self.outcomes.get(id) {
            if *known != content {
                return Seen::Reused;
            }
            return Seen::Repeat(first.clone());
        }
        let (tx, rx) = watch::channel(None);
        self.order.push_back((id.to_string(), now));
        self.outcomes.insert(id.to_string(), (rx, content, points));
        self.points += points;
        // The newest is always kept, however large.
        while self.order.len() > 1 && (self.order.len() > RECENT_IDS || self.points > RECENT_POINTS)
        {
            self.forget_oldest();
        }
        Seen::New(tx)
    }

    fn forget_oldest(&mut self) {
        if let Some((id, _)) = self.order.pop_front() {
            if let Some((_, _, n)) = self.outcomes.remove(&id) {
                self.points -= n;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn recent_ids_are_forgotten_by_count_by_age_and_by_points() {
        let now = Instant::now();
        let c = [0; 32];
        let mut r = Recent::default();
        for i in 0..RECENT_IDS + 5 {
            assert!(matches!(r.claim(&format!("c{i}"), c, 1, now), Seen::New(_)));
        }
        assert_eq!(r.order.len(), RECENT_IDS);
        assert!(
            matches!(r.claim("c4", c, 1, now), Seen::New(_)),
            "forgotten"
        );
        assert!(matches!(r.claim("c6", c, 1, now), Seen::Repeat(_)));
        // Past RECENT_FOR every old id is forgotten.
        let later = now + RECENT_FOR + Duration::from_secs(1);
        assert!(matches!(r.claim("c6", c, 1, later), Seen::New(_)));
        assert_eq!(r.order.len(), 1);
        // A command as large as the whole budget pushes the others out, and is kept itself.
        assert!(matches!(
            r.claim("big", c, RECENT_POINTS + 1, later),
            Seen::New(_)
        ));
        assert_eq!(r.order.len(), 1);
        assert_eq!(r.points, RECENT_POINTS + 1);
        assert!(matches!(r.claim("big", c, 1, later), Seen::Repeat(_)));
    }

    #[test]
    fn a_commands_content_is_its_points_and_values_in_any_order_and_any_number_spelling() {
        let p = |v: Value| -> Vec<(String, Value)> {
            let Value::Object(m) = v else {
                panic!("an object")
            };
            m.into_iter().collect()
        };
        let a = content(&p(json!({"setpoint": 50, "pump": true})));
        assert_eq!(a, content(&p(json!({"pump": true, "setpoint": 50.0}))));
        assert_ne!(a, content(&p(json!({"setpoint": 60, "pump": true}))));
        assert_ne!(a, content(&p(json!({"setpoint": 50}))));
        assert_ne!(a, content(&p(json!({"setpoint": "50", "pump": true}))));
        assert_ne!(
            content(&p(json!({"ab": 1, "c": 2}))),
            content(&p(json!({"a": 1, "bc": 2})))
        );
    }
}
