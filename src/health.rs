//! The one health model: what is not working now, since when, and the connector's state.
//!
//! Every place that says whether the connector is well reads it: `problems` and `state` of
//! `/api/status` (and the status page's header drawn from them), the outage alerts of
//! [`crate::alerts`], and Sparkplug's `Connector/Healthy`. The findings themselves come from
//! the parts' own reports (`http/problems.rs` reads them); this room only remembers since
//! when each finding lasts and derives the state, so no two places can disagree.
//!
//! `connector.healthy` (the over-the-air health check) is a different question: does the
//! process work (its HTTP server answers, its sinks' writers run). A device being down makes
//! the state `degraded` but must never roll back an update.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::Mutex;

use serde_json::{json, Value};

use crate::alerts::alert::rfc3339;

/// The connector's state.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum State {
    /// No problem.
    Ok = 0,
    /// Some parts are down; records are still kept.
    Degraded = 1,
    /// Records are being lost or refused now.
    Failing = 2,
}

impl State {
    /// `ok`, `degraded` or `failing`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Ok => "ok",
            Self::Degraded => "degraded",
            Self::Failing => "failing",
        }
    }

    fn from_u8(v: u8) -> Self {
        match v {
            0 => Self::Ok,
            1 => Self::Degraded,
            _ => Self::Failing,
        }
    }
}

/// One part that is not working, as found now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Finding {
    /// The part, in words: `device press-1`, `sink uns`, `queue push_queue`.
    pub component: String,
    /// What kind of problem: `device_offline`, `point_bad`, `sink_disconnected`, `sink_failing`,
    /// `uplink_failing`, `sink_held`, `sink_stopped`, `queue_high`, `queue_full`,
    /// `alert_channel_failing`, `disk_nearly_full`, `schedule_failing`, `config_not_saved`.
    pub kind: &'static str,
    /// What is wrong, in words.
    pub message: String,
    /// What to do about it, when the words cover it.
    pub hint: Option<String>,
    /// True when records are lost or refused because of it (the state is then `failing`).
    pub losing: bool,
}

impl Finding {
    /// The key the model remembers it by: its part and kind.
    pub fn key(&self) -> String {
        format!("{}/{}", self.component, self.kind)
    }
}

/// A finding with since when it lasts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Problem {
    /// What was found.
    pub finding: Finding,
    /// Unix seconds of the first check that found it (in a row).
    pub since: u64,
}

impl Problem {
    /// Its entry in `problems` of `/api/status`.
    pub fn to_json(&self, now: u64) -> Value {
        let f = &self.finding;
        json!({
            "component": f.component,
            "kind": f.kind,
            "since": rfc3339(self.since),
            "for_secs": now.saturating_sub(self.since),
            "message": f.message,
            "hint": f.hint,
        })
    }
}

/// The health at one moment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Health {
    /// The state the problems make.
    pub state: State,
    /// Every problem, in the order found.
    pub problems: Vec<Problem>,
    /// When it was assessed, Unix seconds.
    pub at: u64,
}

impl Health {
    /// `problems` of `/api/status`.
    pub fn problems_json(&self) -> Vec<Value> {
        self.problems.iter().map(|p| p.to_json(self.at)).collect()
    }
}

/// The state a set of findings makes.
pub fn state_of(findings: &[Finding]) -> State {
    if findings.iter().any(|f| f.losing) {
        State::Failing
    } else if findings.is_empty() {
        State::Ok
    } else {
        State::Degraded
    }
}

/// The model's memory: since when each finding lasts, and the last state (read by the
/// parts that publish it, such as Sparkplug's `Connector/Healthy`).
#[derive(Debug, Default)]
pub struct Board {
    since: Mutex<BTreeMap<String, u64>>,
    state: AtomicU8,
    /// Points seen bad at the last check: the poll count of their device when first seen.
    bad_points: Mutex<BTreeMap<String, u64>>,
    /// Each part's last trouble, by its component: kept a day after it cleared.
    episodes: Mutex<BTreeMap<String, Episode>>,
}

/// A part's last trouble: since when, and when it cleared (`None` while it lasts).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Episode {
    /// Unix seconds of the first check that found a problem of the part.
    pub since: u64,
    /// Unix seconds of the first check that found none again.
    pub recovered_at: Option<u64>,
}

impl Episode {
    /// `last_error_at` and `recovered_at` of the part's entry in `/api/status`.
    pub fn fields(episode: Option<Self>) -> (Value, Value) {
        match episode {
            None => (Value::Null, Value::Null),
            Some(e) => (
                rfc3339(e.since).into(),
                e.recovered_at.map_or(Value::Null, |t| rfc3339(t).into()),
            ),
        }
    }
}

/// How long a cleared trouble is remembered (and shown as recovered).
pub const EPISODE_KEPT_SECS: u64 = 24 * 3600;

impl Board {
    /// Takes the findings of a check at `now` (Unix seconds): a finding seen before keeps its
    /// `since`, one no longer found is forgotten.
    pub fn assess(&self, findings: Vec<Finding>, now: u64) -> Health {
        let state = state_of(&findings);
        let mut since = self.since.lock().unwrap_or_else(|e| e.into_inner());
        let mut kept = BTreeMap::new();
        let problems: Vec<Problem> = findings
            .into_iter()
            .map(|f| {
                let key = f.key();
                let at = since.get(&key).copied().unwrap_or(now);
                kept.insert(key, at);
                Problem {
                    finding: f,
                    since: at,
                }
            })
            .collect();
        *since = kept;
        drop(since);
        self.remember_episodes(&problems, now);
        self.state.store(state as u8, Ordering::Relaxed);
        Health {
            state,
            problems,
            at: now,
        }
    }

    /// Opens an episode for each part with a problem now (its earliest `since`), and closes
    /// the open ones of parts that have none.
    fn remember_episodes(&self, problems: &[Problem], now: u64) {
        let mut open: BTreeMap<&str, u64> = BTreeMap::new();
        for p in problems {
            let since = open.entry(p.finding.component.as_str()).or_insert(p.since);
            *since = (*since).min(p.since);
        }
        let mut episodes = self.episodes.lock().unwrap_or_else(|e| e.into_inner());
        for (component, since) in &open {
            let e = episodes.entry((*component).to_string()).or_insert(Episode {
                since: *since,
                recovered_at: None,
            });
            if e.recovered_at.is_some() {
                *e = Episode {
                    since: *since,
                    recovered_at: None,
                };
            }
        }
        episodes.retain(|component, e| {
            if e.recovered_at.is_none() && !open.contains_key(component.as_str()) {
                e.recovered_at = Some(now);
            }
            e.recovered_at
                .is_none_or(|t| now.saturating_sub(t) < EPISODE_KEPT_SECS)
        });
    }

    /// The last trouble of a part (`device press-1`, `sink uns`), open or cleared.
    pub fn episode(&self, component: &str) -> Option<Episode> {
        let episodes = self.episodes.lock().unwrap_or_else(|e| e.into_inner());
        episodes.get(component).copied()
    }

    /// Takes the points bad now (key, their device's poll count now) and returns, for each,
    /// how many polls it has been bad in a row (the poll that found it counts); points no
    /// longer bad are forgotten.
    pub fn bad_points(&self, bad: &[(String, u64)]) -> Vec<u64> {
        let mut first = self.bad_points.lock().unwrap_or_else(|e| e.into_inner());
        let mut kept = BTreeMap::new();
        let out = bad
            .iter()
            .map(|(key, polls)| {
                let at = first.get(key).copied().unwrap_or(*polls);
                kept.insert(key.clone(), at);
                polls.saturating_sub(at) + 1
            })
            .collect();
        *first = kept;
        out
    }

    /// The state of the last assessment (`ok` before the first).
    pub fn state(&self) -> State {
        State::from_u8(self.state.load(Ordering::Relaxed))
    }

    /// True while the last assessment found no problem: Sparkplug's `Connector/Healthy`.
    pub fn healthy(&self) -> bool {
        self.state() == State::Ok
    }
}

/// Now in Unix seconds.
pub fn now_secs() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn finding(component: &str, kind: &'static str, losing: bool) -> Finding {
        Finding {
            component: component.to_string(),
            kind,
            message: "down".to_string(),
            hint: None,
            losing,
        }
    }

    #[test]
    fn a_lasting_problem_keeps_its_since_and_a_cleared_one_starts_again() {
        let board = Board::default();
        let h = board.assess(vec![finding("device a", "device_offline", false)], 100);
        assert_eq!(h.state, State::Degraded);
        assert_eq!(h.problems[0].since, 100);
        let h = board.assess(vec![finding("device a", "device_offline", false)], 130);
        assert_eq!(h.problems[0].since, 100);
        assert_eq!(h.problems_json()[0]["for_secs"], 30);
        assert_eq!(board.assess(Vec::new(), 140).state, State::Ok);
        assert!(board.healthy());
        let h = board.assess(vec![finding("device a", "device_offline", false)], 150);
        assert_eq!(h.problems[0].since, 150);
    }

    #[test]
    fn a_part_keeps_since_when_it_was_down_and_when_it_recovered_for_a_day() {
        let board = Board::default();
        assert_eq!(board.episode("device a"), None);
        board.assess(vec![finding("device a", "device_offline", false)], 100);
        board.assess(vec![finding("device a", "device_offline", false)], 130);
        let open = Episode {
            since: 100,
            recovered_at: None,
        };
        assert_eq!(board.episode("device a"), Some(open));
        board.assess(Vec::new(), 140);
        let closed = Episode {
            since: 100,
            recovered_at: Some(140),
        };
        assert_eq!(board.episode("device a"), Some(closed));
        assert_eq!(
            Episode::fields(Some(closed)),
            (
                Value::from("1970-01-01T00:01:40Z"),
                Value::from("1970-01-01T00:02:20Z")
            )
        );
        board.assess(vec![finding("device a", "device_offline", false)], 200);
        assert_eq!(board.episode("device a").map(|e| e.since), Some(200));
        board.assess(Vec::new(), 210);
        board.assess(Vec::new(), 210 + EPISODE_KEPT_SECS);
        assert_eq!(board.episode("device a"), None, "forgotten a day later");
    }

    #[test]
    fn a_bad_point_counts_the_polls_it_stays_bad_and_starts_again_once_good() {
        let board = Board::default();
        assert_eq!(board.bad_points(&[("d/p".into(), 10)]), [1]);
        assert_eq!(board.bad_points(&[("d/p".into(), 13)]), [4]);
        assert!(board.bad_points(&[]).is_empty());
        assert_eq!(board.bad_points(&[("d/p".into(), 20)]), [1]);
    }

    #[test]
    fn a_problem_that_loses_records_makes_the_state_failing() {
        let found = [
            finding("device a", "device_offline", false),
            finding("queue push_queue", "queue_full", true),
        ];
        assert_eq!(state_of(&found), State::Failing);
        assert_eq!(state_of(&found[..1]), State::Degraded);
        assert_eq!(state_of(&[]), State::Ok);
    }
}
