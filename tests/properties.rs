//! Property tests of everything that reads untrusted bytes, the quick CI twins of the
//! `cargo fuzz` targets in `fuzz/` (`scripts/fuzz.sh` runs those for minutes): the config
//! parser, the webhook signature header, the bearer check and path decoding, record parsing,
//! Modbus decoding and dead-letter edits. Each property says "never panics" and, where there
//! is one, what round-trips.

use std::time::Duration;

use hyper::header::{HeaderMap, HeaderValue, AUTHORIZATION};
use opex_connector::config;
use opex_connector::http::{bearer_ok, percent_decode};
use opex_connector::record::Record;
use opex_connector::sources::modbus::config::{DataType, Order, PointConfig, RegisterKind};
use opex_connector::sources::modbus::decode::{decode_answer, decode_registers, Answer};
use opex_connector::sources::modbus::plan::coalesce;
use opex_connector::sources::webhook::config::{Respond, Secret, WebhookConfig};
use opex_connector::sources::webhook::signature::{parse, sign, verify, SigError};
use opex_connector::sources::webhook::WebhookSource;
use opex_connector::store::{DeadLetterQueue, DlqFilter, NewDeadLetter};
use proptest::prelude::*;
use serde_json::{json, Value};

fn config_cases() -> ProptestConfig {
    ProptestConfig {
        cases: 256,
        failure_persistence: None,
        ..ProptestConfig::default()
    }
}

/// JSON values of bounded size, the shapes a body or a config can take.
fn json_value() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::from),
        any::<i64>().prop_map(Value::from),
        any::<u64>().prop_map(Value::from),
        any::<f64>()
            .prop_filter("finite", |f| f.is_finite())
            .prop_map(Value::from),
        ".{0,12}".prop_map(Value::from),
    ];
    leaf.prop_recursive(3, 32, 6, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..6).prop_map(Value::Array),
            prop::collection::btree_map("[a-z_]{1,8}", inner, 0..6)
                .prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}

/// The demo config with a few bytes changed: mostly-valid YAML reaches the validator.
fn mutated_demo() -> impl Strategy<Value = String> {
    let demo = config::DEMO_YAML.as_bytes().to_vec();
    let len = demo.len();
    prop::collection::vec((0..len, any::<u8>()), 1..8).prop_map(move |edits| {
        let mut b = demo.clone();
        for (at, byte) in edits {
            b[at] = byte;
        }
        String::from_utf8_lossy(&b).into_owned()
    })
}

proptest! {
    #![proptest_config(config_cases())]

    #[test]
    fn no_text_panics_the_config_parser(text in ".{0,400}") {
        if let Err(problems) = config::from_yaml(&text) {
            prop_assert!(!problems.is_empty());
        }
    }

    #[test]
    fn no_edit_of_the_demo_config_panics_the_parser_or_the_validator(text in mutated_demo()) {
        if let Err(problems) = config::from_yaml(&text) {
            prop_assert!(!problems.is_empty());
            let _ = problems.to_string();
        }
    }

    #[test]
    fn no_json_shaped_config_panics_the_validator(sections in json_value()) {
        let mut doc = json!({"connector": {"data_dir": "/tmp/x"}});
        if let Value::Object(m) = sections {
            for (k, v) in m {
                doc[k] = v;
            }
        }
        let text = serde_json::to_string(&doc).unwrap_or_default();
        if let Err(problems) = config::from_yaml(&text) {
            prop_assert!(!problems.is_empty());
        }
    }

    #[test]
    fn the_signature_parser_never_panics(header in ".{0,200}", now in any::<i64>(), tol in any::<i64>()) {
        if let Ok(sig) = parse(&header) {
            prop_assert!(!sig.v1.is_empty());
            let _ = verify(&sig, b"whsec", None, b"{}", now, tol);
        }
    }

    #[test]
    fn the_signature_parser_never_panics_on_near_miss_headers(
        t in prop_oneof![any::<i64>().prop_map(|t| t.to_string()), ".{0,24}"],
        v1 in prop::collection::vec("[0-9a-fA-F]{60,68}|.{0,70}", 0..6),
        junk in "[ ,=;tv1]{0,6}",
    ) {
        let mut h = format!("t={t}");
        for v in &v1 {
            h.push_str(",v1=");
            h.push_str(v);
        }
        h.push_str(&junk);
        if let Ok(sig) = parse(&h) {
            let _ = verify(&sig, b"k", Some("key"), b"body", 0, 300);
        }
    }

    #[test]
    fn a_signed_header_always_verifies_and_a_changed_body_or_key_never_does(
        secret in prop::collection::vec(any::<u8>(), 0..80),
        body in prop::collection::vec(any::<u8>(), 0..200),
        key in prop::option::of(".{0,20}"),
        t in any::<i64>(),
    ) {
        let key = key.as_deref();
        let sig = parse(&sign(&secret, t, key, &body)).expect("own header parses");
        prop_assert!(verify(&sig, &secret, key, &body, t, 300).is_ok());
        let mut other = body.clone();
        other.push(b'x');
        prop_assert_eq!(verify(&sig, &secret, key, &other, t, 300), Err(SigError::Mismatch));
        let other_key = format!("{}x", key.unwrap_or(""));
        prop_assert_eq!(
            verify(&sig, &secret, Some(&other_key), &body, t, 300),
            Err(SigError::Mismatch)
        );
    }

    #[test]
    fn request_headers_and_path_segments_never_panic_their_readers(
        auth in prop::collection::vec(any::<u8>(), 0..80),
        segment in ".{0,40}",
        sig in prop::collection::vec(any::<u8>(), 0..120),
        body in prop::collection::vec(any::<u8>(), 0..200),
        now in any::<i64>(),
    ) {
        let mut headers = HeaderMap::new();
        if let Ok(v) = HeaderValue::from_bytes(&auth) {
            headers.insert(AUTHORIZATION, v);
        }
        prop_assert!(!bearer_ok(&headers, "s3cret-t0ken") || auth.ends_with(b"s3cret-t0ken"));
        let _ = percent_decode(&segment);
        let header = String::from_utf8(sig).ok();
        let hook = webhook();
        prop_assert!(hook.verify(header.as_deref(), None, &body, now).is_err());
    }

    #[test]
    fn any_json_body_becomes_a_record_whose_line_reads_back_the_same(
        value in json_value(),
        pretty in any::<bool>(),
        key in ".{0,20}",
    ) {
        let body = if pretty {
            serde_json::to_vec_pretty(&value)
        } else {
            serde_json::to_vec(&value)
        }
        .expect("serializes");
        let r = Record::from_json("ingest/orders", key.as_str(), &body).expect("valid JSON");
        // The payload is kept as the sender's text (only line breaks between tokens folded),
        // so it reads as the body reads. (Compared through the same parser: serde_json's
        // default float parsing may differ from the generated f64 in the last bit.)
        let parsed: Value = serde_json::from_slice(&body).expect("valid JSON");
        prop_assert_eq!(r.payload_value(), parsed);
        if !pretty {
            prop_assert_eq!(r.payload.get().as_bytes(), &body[..]);
        }
        let line = r.to_line();
        prop_assert!(!line.contains(&b'\n'));
        prop_assert_eq!(Record::from_line(&line).expect("reads back"), r);
    }

    #[test]
    fn no_bytes_panic_record_parsing(bytes in prop::collection::vec(any::<u8>(), 0..300)) {
        let _ = Record::from_line(&bytes);
        if let Ok(r) = Record::from_json("ingest/orders", "k", &bytes) {
            prop_assert_eq!(Record::from_line(&r.to_line()).ok(), Some(r));
        }
    }

    #[test]
    fn the_modbus_decoder_round_trips_every_type_and_order(
        v in any::<u64>(),
        ty in 0..9u8,
        little_words in any::<bool>(),
        little_bytes in any::<bool>(),
    ) {
        let (data_type, width) = [
            (DataType::U16, 1), (DataType::I16, 1), (DataType::U32, 2), (DataType::I32, 2),
            (DataType::U64, 4), (DataType::I64, 4), (DataType::F32, 2), (DataType::F64, 4),
            (DataType::Bool, 1),
        ][usize::from(ty)];
        let p = point(data_type, order(little_words), order(little_bytes));
        let big: Vec<u16> = (0..width).rev().map(|i| (v >> (16 * i)) as u16).collect();
        let words = encode(&big, &p);
        let got = decode_registers(&p, &words).expect("full width");
        let expected = match data_type {
            DataType::U16 => json!(v as u16),
            DataType::I16 => json!(v as u16 as i16),
            DataType::U32 => json!(v as u32),
            DataType::I32 => json!(v as u32 as i32),
            DataType::U64 => json!(v),
            DataType::I64 => json!(v as i64),
            DataType::F32 => serde_json::Number::from_f64(f64::from(f32::from_bits(v as u32)))
                .map_or(Value::Null, Value::Number),
            DataType::F64 => serde_json::Number::from_f64(f64::from_bits(v))
                .map_or(Value::Null, Value::Number),
            _ => json!(v as u16 != 0),
        };
        prop_assert_eq!(got, expected);
    }

    #[test]
    fn the_modbus_decoder_never_panics_on_any_answer_to_any_points(
        specs in prop::collection::vec((any::<u16>(), 0..14u8, any::<bool>(), any::<bool>(), any::<Option<f64>>()), 1..10),
        max_gap in 0..130u16,
        words in prop::collection::vec(any::<u16>(), 0..300),
        bits in prop::collection::vec(any::<bool>(), 0..300),
    ) {
        let points: Vec<PointConfig> = specs
            .iter()
            .enumerate()
            .map(|(i, &(register, ty, lw, lb, scale))| {
                let (kind, data_type) = match ty {
                    0 => (RegisterKind::Coil, DataType::Bool),
                    1 => (RegisterKind::Discrete, DataType::Bool),
                    2 => (RegisterKind::Input, DataType::F32),
                    3 => (RegisterKind::Holding, DataType::U16),
                    4 => (RegisterKind::Holding, DataType::I16),
                    5 => (RegisterKind::Holding, DataType::U32),
                    6 => (RegisterKind::Holding, DataType::I32),
                    7 => (RegisterKind::Holding, DataType::U64),
                    8 => (RegisterKind::Holding, DataType::I64),
                    9 => (RegisterKind::Holding, DataType::F64),
                    10 => (RegisterKind::Holding, DataType::Bool),
                    11 => (RegisterKind::Holding, DataType::String(register % 251 + 1)),
                    _ => (RegisterKind::Input, DataType::String(1)),
                };
                PointConfig {
                    name: format!("p{i}"),
                    register,
                    kind,
                    data_type,
                    scale,
                    ..point(DataType::U16, order(lw), order(lb))
                }
            })
            .collect();
        let members: Vec<usize> = (0..points.len()).collect();
        let mut seen = 0;
        for req in coalesce(&points, &members, max_gap) {
            let answer = if req.kind.is_bits() {
                Answer::Bits(bits.clone())
            } else {
                Answer::Words(words.clone())
            };
            let mut payload = serde_json::Map::new();
            decode_answer(&points, &req, &answer, &mut payload);
            for &i in &req.points {
                seen += 1;
                let q = &payload[&points[i].name]["quality"];
                prop_assert!(q == "good" || q == "bad");
            }
        }
        prop_assert_eq!(seen, points.len());
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn any_dead_letter_correction_the_api_accepts_is_what_a_replay_reads(
        ops in prop::collection::vec((0..4u8, any::<u8>(), prop::collection::vec(any::<u8>(), 0..60), json_value()), 1..24),
    ) {
        let dir = tempfile::tempdir().expect("temp dir");
        let q = DeadLetterQueue::open(dir.path(), 8).expect("open");
        let mut ids = vec![u64::MAX];
        for (op, pick, bytes, value) in ops {
            let id = ids[usize::from(pick) % ids.len()];
            match op {
                0 => {
                    let record = Record::from_value("webhook/w", "k", &value);
                    let entry = NewDeadLetter {
                        record,
                        flow: "f".into(),
                        node: String::from_utf8_lossy(&bytes).into_owned(),
                        reason: "r".into(),
                        accepted: pick % 2 == 0,
                    };
                    ids.push(q.park(entry).expect("park"));
                }
                1 => {
                    // The body of `PUT /api/dead-letters/{id}`: raw bytes, or a JSON value.
                    let body = if pick % 2 == 0 { bytes } else { serde_json::to_vec(&value).expect("json") };
                    if let Ok(payload) = serde_json::from_slice::<Box<serde_json::value::RawValue>>(&body) {
                        let text = payload.get().to_string();
                        if q.update_payload(id, payload).expect("update") {
                            let (record, _) = q.record(id).expect("read").expect("present");
                            prop_assert_eq!(record.payload.get(), text);
                        }
                    }
                }
                2 => {
                    let _ = q.resolve(id, &String::from_utf8_lossy(&bytes)).expect("resolve");
                }
                _ => {
                    let rows = q.list(&DlqFilter { limit: usize::from(pick), ..DlqFilter::default() }).expect("list");
                    prop_assert!(rows.len() <= usize::from(pick));
                    prop_assert!(rows.windows(2).all(|w| w[0].id < w[1].id));
                }
            }
        }
    }
}

fn order(little: bool) -> Order {
    if little {
        Order::Little
    } else {
        Order::Big
    }
}

fn point(data_type: DataType, word_order: Order, byte_order: Order) -> PointConfig {
    PointConfig {
        name: "p".into(),
        group: 0,
        register: 0,
        kind: RegisterKind::Holding,
        data_type,
        word_order,
        byte_order,
        scale: None,
        offset: None,
        unit: None,
        writable: false,
        min: None,
        max: None,
    }
}

/// The registers a device with `p`'s orders sends for the big-endian words `big`.
fn encode(big: &[u16], p: &PointConfig) -> Vec<u16> {
    let mut words: Vec<u16> = big
        .iter()
        .map(|w| match p.byte_order {
            Order::Big => *w,
            Order::Little => w.swap_bytes(),
        })
        .collect();
    if p.word_order == Order::Little {
        words.reverse();
    }
    words
}

fn webhook() -> WebhookSource {
    WebhookSource::new(
        WebhookConfig {
            name: "w".into(),
            secret: Secret::Inline("whsec-property".into()),
            respond: Respond::OnDone,
            tolerance: Duration::from_secs(300),
        },
        b"whsec-property".to_vec(),
    )
}
