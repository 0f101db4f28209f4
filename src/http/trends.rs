//! `GET /api/trends`: the trends' series names, or the last hour of some of them.
//!
//! `?series=a,b` (each name percent-encoded, a literal `,` between them; at most
//! [`MAX_SERIES_PER_REQUEST`]) answers their buckets on one grid: `start_ms`, `bucket_ms`,
//! `times_ms` (each bucket's start), and per series `min`, `max`, `mean`, `last` (`null` for
//! a bucket without samples); names not kept are listed in `unknown`. `&since=<unix ms>`
//! starts at the bucket holding that time (the page asks for what is new since its last
//! look). Without `series`, the names kept. Anything else is `400` with the reason. So an
//! answer holds at most 32 series of 360 buckets: well under a megabyte.

use std::fmt;

use hyper::StatusCode;
use serde::Serialize;

use super::respond::{error, text, Resp};
use super::routes::percent_decode;
use super::AppState;
use crate::trends::{Bucket, Read, BUCKETS, BUCKET_MS};

/// The most series one request may ask for.
pub const MAX_SERIES_PER_REQUEST: usize = 32;
/// The longest series name a request may hold, in bytes.
pub const MAX_NAME_BYTES: usize = 256;

/// What is wrong with a query.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum QueryError {
    /// A parameter other than `series` and `since`.
    Unknown(String),
    /// A parameter given twice.
    Repeated(&'static str),
    /// An empty name in `series`.
    EmptyName,
    /// A name longer than [`MAX_NAME_BYTES`].
    LongName(usize),
    /// More names than [`MAX_SERIES_PER_REQUEST`].
    TooMany(usize),
    /// `since` is not a whole number of milliseconds.
    Since(String),
    /// `since` without `series`.
    SinceAlone,
}

impl fmt::Display for QueryError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Unknown(p) => write!(f, "unknown parameter {p:?}: expected series or since"),
            Self::Repeated(p) => write!(f, "{p} is given twice"),
            Self::EmptyName => write!(f, "series: a name is empty"),
            Self::LongName(n) => write!(
                f,
                "series: a name of {n} bytes is longer than {MAX_NAME_BYTES}"
            ),
            Self::TooMany(n) => write!(
                f,
                "series: {n} names, at most {MAX_SERIES_PER_REQUEST} per request"
            ),
            Self::Since(v) => write!(f, "since: expected unix milliseconds, got {v:?}"),
            Self::SinceAlone => write!(f, "since: only with series"),
        }
    }
}

impl std::error::Error for QueryError {}

/// A query, checked.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Query {
    /// The names asked for, each once, in the order asked; `None`: the listing.
    pub series: Option<Vec<String>>,
    /// Where the buckets start.
    pub since_ms: Option<u64>,
}

/// Checks a query string (pure).
pub fn parse(query: Option<&str>) -> Result<Query, QueryError> {
    let mut q = Query::default();
    for pair in query.unwrap_or("").split('&').filter(|p| !p.is_empty()) {
        let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
        match percent_decode(key).as_str() {
            "series" => {
                if q.series.is_some() {
                    return Err(QueryError::Repeated("series"));
                }
                let mut names: Vec<String> = Vec::new();
                for raw in value.split(',') {
                    let name = percent_decode(raw);
                    if name.is_empty() {
                        return Err(QueryError::EmptyName);
                    }
                    if name.len() > MAX_NAME_BYTES {
                        return Err(QueryError::LongName(name.len()));
                    }
                    if !names.contains(&name) {
                        names.push(name);
                    }
                    if names.len() > MAX_SERIES_PER_REQUEST {
                        return Err(QueryError::TooMany(value.split(',').count()));
                    }
                }
                q.series = Some(names);
            }
            "since" => {
                if q.since_ms.is_some() {
                    return Err(QueryError::Repeated("since"));
                }
                let v = percent_decode(value);
                q.since_ms = Some(v.parse().map_err(|_| QueryError::Since(v))?);
            }
            other => return Err(QueryError::Unknown(other.to_string())),
        }
    }
    if q.series.is_none() && q.since_ms.is_some() {
        return Err(QueryError::SinceAlone);
    }
    Ok(q)
}

#[derive(Serialize)]
struct Listing {
    bucket_ms: u64,
    buckets: usize,
    max_series: usize,
    names: Vec<String>,
}

#[derive(Serialize)]
struct SeriesOut {
    name: String,
    unit: Option<Box<str>>,
    min: Vec<Option<f32>>,
    max: Vec<Option<f32>>,
    mean: Vec<Option<f32>>,
    last: Vec<Option<f32>>,
}

#[derive(Serialize)]
struct Answer {
    bucket_ms: u64,
    start_ms: u64,
    times_ms: Vec<u64>,
    series: Vec<SeriesOut>,
    unknown: Vec<String>,
}

fn column(buckets: &[Bucket], pick: fn(&Bucket) -> f32) -> Vec<Option<f32>> {
    buckets
        .iter()
        .map(|b| (!b.is_empty()).then(|| pick(b)).filter(|v| v.is_finite()))
        .collect()
}

/// The answer's document. The numbers are written as 32-bit floats, so `21.3` stays `21.3`.
fn answer(read: Read) -> Answer {
    let mut series = Vec::new();
    let mut unknown = Vec::new();
    for (name, copied) in read.series {
        match copied {
            None => unknown.push(name),
            Some(c) => series.push(SeriesOut {
                name,
                unit: c.unit,
                min: column(&c.buckets, |b| b.min),
                max: column(&c.buckets, |b| b.max),
                mean: column(&c.buckets, |b| b.mean),
                last: column(&c.buckets, |b| b.last),
            }),
        }
    }
    Answer {
        bucket_ms: BUCKET_MS,
        start_ms: read.start_ms,
        times_ms: (0..read.buckets as u64)
            .map(|i| read.start_ms + i * BUCKET_MS)
            .collect(),
        series,
        unknown,
    }
}

fn json<T: Serialize>(value: &T) -> Resp {
    match serde_json::to_string(value) {
        Ok(body) => text(StatusCode::OK, "application/json", body),
        Err(e) => error(StatusCode::INTERNAL_SERVER_ERROR, &e.to_string()),
    }
}

/// Serves `GET /api/trends` for `query`.
pub fn handle(state: &AppState, query: Option<&str>) -> Resp {
    let q = match parse(query) {
        Ok(q) => q,
        Err(e) => return error(StatusCode::BAD_REQUEST, &e.to_string()),
    };
    match q.series {
        None => json(&Listing {
            bucket_ms: BUCKET_MS,
            buckets: BUCKETS,
            max_series: crate::trends::MAX_SERIES,
            names: state.trends.names(),
        }),
        Some(names) => json(&answer(state.trends.read(&names, q.since_ms))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::trends::{Copied, Trends};

    fn names(q: &str) -> Vec<String> {
        parse(Some(q)).expect("valid").series.expect("series")
    }

    #[test]
    fn names_are_split_on_commas_then_decoded_and_kept_once_in_order() {
        assert_eq!(
            names("series=point%2Fp-1%2Fg.a,queue/push_queue,point%2Fp-1%2Fg.a,in/x%2Cy"),
            ["point/p-1/g.a", "queue/push_queue", "in/x,y"]
        );
        let q = parse(Some("series=a&since=1700000000000")).expect("valid");
        assert_eq!(q.since_ms, Some(1_700_000_000_000));
        assert_eq!(parse(None), Ok(Query::default()));
        assert_eq!(parse(Some("")), Ok(Query::default()));
    }

    #[test]
    fn a_bad_query_says_what_is_wrong() {
        let long = "x".repeat(MAX_NAME_BYTES + 1);
        let many = (0..40)
            .map(|i| format!("s{i}"))
            .collect::<Vec<_>>()
            .join(",");
        for (q, want) in [
            (
                "serie=a",
                "unknown parameter \"serie\": expected series or since",
            ),
            ("series=a&series=b", "series is given twice"),
            ("series=", "series: a name is empty"),
            ("series=a,,b", "series: a name is empty"),
            (
                &format!("series={long}"),
                "series: a name of 257 bytes is longer than 256",
            ),
            (
                &format!("series={many}"),
                "series: 40 names, at most 32 per request",
            ),
            (
                "series=a&since=yesterday",
                "since: expected unix milliseconds, got \"yesterday\"",
            ),
            ("series=a&since=1&since=2", "since is given twice"),
            ("since=1", "since: only with series"),
        ] {
            let e = parse(Some(q)).expect_err(q);
            assert_eq!(e.to_string(), want, "{q}");
        }
    }

    #[test]
    fn the_answer_puts_empty_buckets_as_null_and_unknown_names_apart() {
        let t = Trends::new(4, Box::new(|| 1_700_000_005_000));
        t.record("queue/q", "%", 21.3);
        let a = answer(t.read(&["queue/q".into(), "queue/none".into()], None));
        let body = serde_json::to_value(&a).expect("json");
        assert_eq!(body["unknown"], serde_json::json!(["queue/none"]));
        let s = &body["series"][0];
        assert_eq!(s["unit"], "%");
        assert_eq!(s["mean"][0], serde_json::Value::Null);
        assert_eq!(body["times_ms"].as_array().map(Vec::len), Some(BUCKETS));
        assert_eq!(body["times_ms"][359], 1_700_000_000_000u64);
        let text = serde_json::to_string(&a).expect("json");
        assert!(text.contains("[21.3]") || text.contains(",21.3]"), "{text}");
        let empty = answer(Read {
            start_ms: 0,
            buckets: 0,
            series: vec![(
                "x".into(),
                Some(Copied {
                    unit: None,
                    buckets: vec![],
                }),
            )],
        });
        assert!(empty.times_ms.is_empty() && empty.series[0].mean.is_empty());
    }
}
