//! `connector.preprocess`: raw, validated without I/O.

use std::time::Duration;

use serde::Deserialize;

use crate::config::checks::known_source;
use crate::config::{Problem, Problems};
use crate::time::parse_duration;

/// `connector.preprocess[]`: one rule.
#[derive(Debug, Default, Deserialize)]
pub struct RawPreprocessRule {
    /// The source whose records the rule applies to, as flows name it (`modbus/press-1`,
    /// `ingest/meters`). Required.
    pub source: Option<String>,
    /// One point (a top-level field of the payload) of that source; without it the rule
    /// applies to every point of the source, each on its own. A rule naming the point wins
    /// over the source's rule.
    pub point: Option<String>,
    /// Suppress a value within this band of the last value sent: `{absolute: 0.5}` or
    /// `{percent: 2}` (of the last sent value), not both.
    pub deadband: Option<RawDeadband>,
    /// Send one aggregate per time window instead of every value: `{fn: avg, window: 1m}`;
    /// `fn` is `avg`, `min`, `max`, `last` or `count`.
    pub aggregate: Option<RawAggregate>,
    /// With `deadband`: a value coming after a gap longer than this since the last value
    /// sent is always sent (`5m`, `1h`), so a steady value still shows up now and then.
    pub heartbeat: Option<String>,
}

/// `connector.preprocess[].deadband`
#[derive(Debug, Default, Deserialize)]
pub struct RawDeadband {
    /// Band in the value's own unit.
    pub absolute: Option<f64>,
    /// Band in percent of the last value sent.
    pub percent: Option<f64>,
}

/// `connector.preprocess[].aggregate`
#[derive(Debug, Default, Deserialize)]
pub struct RawAggregate {
    /// `avg`, `min`, `max`, `last` or `count`.
    #[serde(rename = "fn")]
    pub function: Option<String>,
    /// The window, aligned on multiples of it since 1970 in UTC (`1m` windows start at each
    /// whole minute), by the record's timestamp.
    pub window: Option<String>,
}

/// A deadband, validated.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Deadband {
    /// `|value - last sent| <= x` is suppressed.
    Absolute(f64),
    /// `|value - last sent| <= |last sent| * p / 100` is suppressed.
    Percent(f64),
}

/// An aggregate function.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AggFn {
    /// Mean of the window's values.
    Avg,
    /// Smallest.
    Min,
    /// Largest.
    Max,
    /// The last one.
    Last,
    /// How many values came.
    Count,
}

impl AggFn {
    /// The spelling in the config.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Avg => "avg",
            Self::Min => "min",
            Self::Max => "max",
            Self::Last => "last",
            Self::Count => "count",
        }
    }
}

/// One rule, validated.
#[derive(Debug, Clone, PartialEq)]
pub struct PreprocessRule {
    /// The source.
    pub source: String,
    /// The point, or every point of the source.
    pub point: Option<String>,
    /// The deadband.
    pub deadband: Option<Deadband>,
    /// The aggregate: function and window.
    pub aggregate: Option<(AggFn, Duration)>,
    /// The heartbeat.
    pub heartbeat: Option<Duration>,
}

/// Validates `connector.preprocess`; `sources` are the configured sources' names.
pub fn validate_preprocess(
    raw: Option<&[RawPreprocessRule]>,
    path: &str,
    sources: &[String],
    p: &mut Problems,
    warnings: &mut Vec<Problem>,
) -> Vec<PreprocessRule> {
    let mut out: Vec<PreprocessRule> = Vec::new();
    for (i, r) in raw.unwrap_or_default().iter().enumerate() {
        let at = format!("{path}[{i}]");
        let source = known_source(r.source.as_deref(), &at, sources, p);
        if r.point.as_deref() == Some("") {
            p.push(format!("{at}.point"), "must not be empty");
        }
        let deadband = r.deadband.as_ref().and_then(|d| {
            let at = format!("{at}.deadband");
            match (d.absolute, d.percent) {
                (Some(_), Some(_)) => {
                    p.push(at, "give absolute or percent, not both");
                    None
                }
                (None, None) => {
                    p.push(at, "needs absolute or percent");
                    None
                }
                (Some(x), None) if x.is_finite() && x >= 0.0 => Some(Deadband::Absolute(x)),
                (None, Some(x)) if (0.0..=1000.0).contains(&x) => Some(Deadband::Percent(x)),
                (Some(x), None) => {
                    p.push(format!("{at}.absolute"), format!("{x} must be 0 or more"));
                    None
                }
                (None, Some(x)) => {
                    p.push(format!("{at}.percent"), format!("{x} is outside 0..=1000"));
                    None
                }
            }
        });
        let aggregate = r.aggregate.as_ref().and_then(|a| {
            let at = format!("{at}.aggregate");
            let function = match a.function.as_deref() {
                Some("avg") => Some(AggFn::Avg),
                Some("min") => Some(AggFn::Min),
                Some("max") => Some(AggFn::Max),
                Some("last") => Some(AggFn::Last),
                Some("count") => Some(AggFn::Count),
                Some(other) => {
                    p.push(
                        format!("{at}.fn"),
                        format!("expected avg, min, max, last or count, got {other:?}"),
                    );
                    None
                }
                None => {
                    p.push(format!("{at}.fn"), "is required");
                    None
                }
            };
            let window = match a.window.as_deref().map(parse_duration) {
                Some(Ok(w)) if w >= Duration::from_secs(1) => Some(w),
                Some(Ok(_)) => {
                    p.push(format!("{at}.window"), "must be at least 1s");
                    None
                }
                Some(Err(e)) => {
                    p.push(format!("{at}.window"), e);
                    None
                }
                None => {
                    p.push(format!("{at}.window"), "is required");
                    None
                }
            };
            Some((function?, window?))
        });
        let heartbeat = match r.heartbeat.as_deref().map(parse_duration) {
            None => None,
            Some(Ok(h)) if h >= Duration::from_secs(1) => Some(h),
            Some(Ok(_)) => {
                p.push(format!("{at}.heartbeat"), "must be at least 1s");
                None
            }
            Some(Err(e)) => {
                p.push(format!("{at}.heartbeat"), e);
                None
            }
        };
        if r.heartbeat.is_some() && r.deadband.is_none() && r.aggregate.is_some() {
            warnings.push(Problem {
                path: format!("{at}.heartbeat"),
                message: "has no effect without a deadband".into(),
            });
        }
        if r.deadband.is_none() && r.aggregate.is_none() {
            p.push(at.clone(), "needs a deadband or an aggregate");
            continue;
        }
        let Some(source) = source else { continue };
        if out.iter().any(|o| o.source == source && o.point == r.point) {
            p.push(
                at.clone(),
                format!(
                    "a second rule for {source} {}",
                    r.point.as_deref().unwrap_or("(every point)")
                ),
            );
        }
        if deadband.is_some() || aggregate.is_some() {
            out.push(PreprocessRule {
                source,
                point: r.point.clone(),
                deadband,
                aggregate,
                heartbeat,
            });
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_problem_of_every_rule_is_reported() {
        let raw: Vec<RawPreprocessRule> = serde_saphyr::from_str(
            "- { source: modbus/p1, point: temp, deadband: { absolute: 0.5 }, heartbeat: 5m }\n- { source: modbus/p2, deadband: { absolute: 1, percent: 2 } }\n- { source: modbus/p1, aggregate: { fn: median, window: 0s } }\n- { source: modbus/p1, point: temp, deadband: { percent: -1 } }\n- { source: modbus/p1, aggregate: { fn: avg, window: 1m }, heartbeat: 1m }\n- { source: modbus/p1 }\n",
        )
        .unwrap();
        let (mut p, mut w) = (Problems::default(), Vec::new());
        let out = validate_preprocess(
            Some(&raw),
            "connector.preprocess",
            &["modbus/p1".to_string()],
            &mut p,
            &mut w,
        );
        let got: Vec<String> = p.0.iter().map(|x| x.to_string()).collect();
        assert_eq!(
            got,
            vec![
                "connector.preprocess[1].source: unknown source \"modbus/p2\" (known: modbus/p1)",
                "connector.preprocess[1].deadband: give absolute or percent, not both",
                "connector.preprocess[2].aggregate.fn: expected avg, min, max, last or count, got \"median\"",
                "connector.preprocess[2].aggregate.window: must be at least 1s",
                "connector.preprocess[3].deadband.percent: -1 is outside 0..=1000",
                "connector.preprocess[3]: a second rule for modbus/p1 temp",
                "connector.preprocess[5]: needs a deadband or an aggregate",
            ]
        );
        assert_eq!(w.len(), 1, "{w:?}");
        assert_eq!(w[0].path, "connector.preprocess[4].heartbeat");
        assert_eq!(out.len(), 2);
        assert_eq!(out[0].deadband, Some(Deadband::Absolute(0.5)));
        assert_eq!(
            out[1].aggregate,
            Some((AggFn::Avg, Duration::from_secs(60)))
        );
    }
}
