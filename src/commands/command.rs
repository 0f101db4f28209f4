//! A command, what each of its points came to, and the request body every path in shares:
//! `{"id":"cmd-17","points":{"setpoint":72.5,"pump_on":true},"expires_ms":3000,"verify":true}`.

use std::time::{Duration, Instant};

use serde_json::{json, Map, Value};

/// Most points one command may write.
pub const MAX_POINTS: usize = 1000;
/// Longest `expires_ms` a command may ask for.
pub const MAX_EXPIRES: Duration = Duration::from_secs(60);
/// Longest command id kept.
const MAX_ID: usize = 128;

/// Where a command came from, for its record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Origin {
    /// `POST /api/devices/{device}/write` with the commands token.
    Http {
        /// The name of the token that was presented (`commands`: `commands.token`).
        token: String,
    },
    /// NATS request-reply on this subject.
    Nats {
        /// The request's subject.
        subject: String,
    },
    /// An MQTT command topic.
    Mqtt {
        /// The request's topic.
        topic: String,
        /// The connector's client id that took it (MQTT does not tell a subscriber who
        /// published).
        client_id: String,
    },
    /// A Sparkplug DCMD to a device of a `sparkplug` sink's edge node.
    Sparkplug {
        /// The DCMD's topic.
        topic: String,
    },
    /// A Write to a variable of the northbound OPC-UA server.
    Opcua {
        /// The session's user name (`anonymous` never writes).
        user: String,
    },
}

impl Origin {
    /// `http`, `nats`, `mqtt`, `sparkplug` or `opcua`: the path, which is also the scope of the ids a
    /// device remembers (the paths do not share a trust level: see `service`).
    pub fn path(&self) -> &'static str {
        match self {
            Self::Http { .. } => "http",
            Self::Nats { .. } => "nats",
            Self::Mqtt { .. } => "mqtt",
            Self::Sparkplug { .. } => "sparkplug",
            Self::Opcua { .. } => "opcua",
        }
    }

    /// The origin as the command's record shows it.
    pub fn to_json(&self) -> Value {
        match self {
            Self::Http { token } => json!({"path": "http", "token": token}),
            Self::Nats { subject } => json!({"path": "nats", "subject": subject}),
            Self::Mqtt { topic, client_id } => {
                json!({"path": "mqtt", "topic": topic, "client_id": client_id})
            }
            Self::Sparkplug { topic } => json!({"path": "sparkplug", "topic": topic}),
            Self::Opcua { user } => json!({"path": "opcua", "user": user}),
        }
    }
}

/// A command to one device: values for some of its points.
#[derive(Debug, Clone)]
pub struct Command {
    /// The caller's id (or one made up), echoed in the answer and the record.
    pub id: String,
    /// The device.
    pub device: String,
    /// Point name and the value to write, in the request's order.
    pub points: Vec<(String, Value)>,
    /// Read the points back after the write, and report `written` only when they match.
    pub verify: bool,
    /// When it was received.
    pub received: Instant,
    /// A command whose turn comes after this is refused `expired`, never run late.
    pub deadline: Instant,
    /// Where it came from.
    pub origin: Origin,
}

impl Command {
    /// True once its deadline passed.
    pub fn expired(&self, now: Instant) -> bool {
        now >= self.deadline
    }
}

/// What one point of a command came to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PointResult {
    /// Written (and read back equal, with `verify`).
    Written,
    /// Not allowed: the point is not writable or unknown, or the token is wrong.
    Refused(String),
    /// The value does not fit the point's type, scale or `min`/`max`; nothing was sent.
    OutOfRange(String),
    /// Its turn came after its `expires_ms`; nothing was sent.
    Expired,
    /// The device is down or in its breaker's backoff; nothing was sent, nothing queued.
    Unavailable(String),
    /// More commands for the device than `max_per_second`; nothing was sent.
    RateLimited,
    /// The device answered with an error: a Modbus exception code, an OPC-UA status or
    /// another protocol's return code.
    Exception(DeviceError),
    /// Sent, but whether it took effect is not known (a timeout, a lost connection, a read
    /// back that differs). Never retried by the connector.
    Unknown(String),
}

/// What a device answered when it refused a write.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DeviceError {
    /// A Modbus exception code (2 is "illegal data address"), a number in JSON as in polls.
    Modbus(u8),
    /// An OPC-UA status name (`BadUserAccessDenied`).
    Opcua(String),
    /// A protocol's return code (an S7 item's 0x0A, or its request's 0x8104), a number in
    /// JSON, with what it means in words.
    Coded {
        /// The code.
        code: u16,
        /// What it means.
        reason: String,
    },
}

impl PointResult {
    /// `written`, `refused`, `out_of_range`, `expired`, `unavailable`, `rate_limited`,
    /// `exception` or `unknown`.
    pub fn name(&self) -> &'static str {
        match self {
            Self::Written => "written",
            Self::Refused(_) => "refused",
            Self::OutOfRange(_) => "out_of_range",
            Self::Expired => "expired",
            Self::Unavailable(_) => "unavailable",
            Self::RateLimited => "rate_limited",
            Self::Exception(_) => "exception",
            Self::Unknown(_) => "unknown",
        }
    }

    /// `{"result":..}` with the reason, exception code or status where there is one.
    pub fn to_json(&self) -> Value {
        match self {
            Self::Written | Self::Expired | Self::RateLimited => json!({"result": self.name()}),
            Self::Exception(DeviceError::Modbus(code)) => {
                json!({"result": "exception", "exception": code})
            }
            Self::Exception(DeviceError::Opcua(status)) => {
                json!({"result": "exception", "exception": status})
            }
            Self::Exception(DeviceError::Coded { code, reason }) => {
                json!({"result": "exception", "exception": code, "reason": reason})
            }
            Self::Refused(why)
            | Self::OutOfRange(why)
            | Self::Unavailable(why)
            | Self::Unknown(why) => json!({"result": self.name(), "reason": why}),
        }
    }
}

/// What a command's points that were fine are answered when another point was refused:
/// nothing of the command is sent.
pub const OTHER_REFUSED: &str = "another point of the command was refused";
/// What the points after a write of unknown outcome are answered: nothing more is sent.
pub const NOT_SENT: &str = "not sent after an unknown write";

/// Every point of a command: the same result for each.
pub fn all(points: &[(String, Value)], result: &PointResult) -> Vec<(String, PointResult)> {
    points
        .iter()
        .map(|(name, _)| (name.clone(), result.clone()))
        .collect()
}

/// A command as a caller sends it, before it is given a device and a deadline.
#[derive(Debug, Clone, PartialEq)]
pub struct Request {
    /// `id`, when given.
    pub id: Option<String>,
    /// `points`, in the body's order.
    pub points: Vec<(String, Value)>,
    /// `expires_ms`, when given.
    pub expires: Option<Duration>,
    /// `verify`.
    pub verify: bool,
}

/// Reads a request body; the error says what is wrong with it.
pub fn parse_request(body: &[u8]) -> Result<Request, String> {
    let v: Value = serde_json::from_slice(body).map_err(|e| format!("malformed JSON: {e}"))?;
    let Value::Object(mut o) = v else {
        return Err("expected an object with points".into());
    };
    let id = match o.remove("id") {
        None | Some(Value::Null) => None,
        Some(Value::String(s)) if !s.is_empty() && s.len() <= MAX_ID => Some(s),
        Some(other) => {
            return Err(format!(
                "id: expected a string of 1 to {MAX_ID} characters, got {other}"
            ))
        }
    };
    let points: Map<String, Value> = match o.remove("points") {
        Some(Value::Object(p)) if !p.is_empty() => p,
        Some(Value::Object(_)) => return Err("points: empty".into()),
        Some(other) => {
            return Err(format!(
                "points: expected an object of point names and values, got {other}"
            ))
        }
        None => return Err("points: missing".into()),
    };
    if points.len() > MAX_POINTS {
        return Err(format!(
            "points: {} points, at most {MAX_POINTS}",
            points.len()
        ));
    }
    let expires = match o.remove("expires_ms") {
        None | Some(Value::Null) => None,
        Some(Value::Number(n)) => match n.as_u64() {
            Some(ms) if ms >= 1 && Duration::from_millis(ms) <= MAX_EXPIRES => {
                Some(Duration::from_millis(ms))
            }
            _ => {
                return Err(format!(
                    "expires_ms: {n} is outside 1..={}",
                    MAX_EXPIRES.as_millis()
                ))
            }
        },
        Some(other) => return Err(format!("expires_ms: expected a number, got {other}")),
    };
    let verify = match o.remove("verify") {
        None | Some(Value::Null) => false,
        Some(Value::Bool(b)) => b,
        Some(other) => return Err(format!("verify: expected true or false, got {other}")),
    };
    if let Some(key) = o.keys().next() {
        return Err(format!(
            "{key}: unknown key (id, points, expires_ms, verify)"
        ));
    }
    Ok(Request {
        id,
        points: points.into_iter().collect(),
        expires,
        verify,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_request_keeps_its_points_in_order_and_its_options() {
        let r = parse_request(
            br#"{"id":"cmd-17","points":{"setpoint":72.5,"pump_on":true},"expires_ms":3000,"verify":true}"#,
        )
        .unwrap();
        assert_eq!(r.id.as_deref(), Some("cmd-17"));
        assert_eq!(r.points[0], ("setpoint".to_string(), json!(72.5)));
        assert_eq!(r.points[1], ("pump_on".to_string(), json!(true)));
        assert_eq!(r.expires, Some(Duration::from_secs(3)));
        assert!(r.verify);
    }

    #[test]
    fn every_malformed_request_says_what_is_wrong() {
        for (body, want) in [
            (&b"{"[..], "malformed JSON"),
            (br#"[1]"#, "expected an object"),
            (br#"{"points":{}}"#, "points: empty"),
            (br#"{"points":[1]}"#, "points: expected an object"),
            (br#"{"id":7,"points":{"a":1}}"#, "id: expected a string"),
            (
                br#"{"points":{"a":1},"expires_ms":0}"#,
                "expires_ms: 0 is outside",
            ),
            (
                br#"{"points":{"a":1},"expires_ms":600000}"#,
                "expires_ms: 600000 is outside",
            ),
            (
                br#"{"points":{"a":1},"verify":"yes"}"#,
                "verify: expected true or false",
            ),
            (br#"{"points":{"a":1},"when":"now"}"#, "when: unknown key"),
        ] {
            let e = parse_request(body).unwrap_err();
            assert!(
                e.starts_with(want),
                "{}: {e}",
                String::from_utf8_lossy(body)
            );
        }
    }

    #[test]
    fn results_name_themselves_and_carry_their_reason() {
        assert_eq!(PointResult::Written.to_json(), json!({"result": "written"}));
        assert_eq!(
            PointResult::Exception(DeviceError::Modbus(2)).to_json(),
            json!({"result": "exception", "exception": 2})
        );
        assert_eq!(
            PointResult::OutOfRange("70000 does not fit u16".into()).to_json()["reason"],
            "70000 does not fit u16"
        );
    }
}
