//! What a webhook or ingest request carries (path segment, headers, body) never panics the
//! code that reads it: the bearer check, the key's percent-decoding, the webhook's signature
//! check (over timestamp, key and body) with its replay window, and turning the body into a record. A body that becomes a
//! record keeps its JSON value and its one-line form.
#![no_main]

use std::sync::OnceLock;
use std::time::Duration;

use hyper::header::{HeaderMap, HeaderValue, AUTHORIZATION};
use libfuzzer_sys::arbitrary::{Arbitrary, Unstructured};
use libfuzzer_sys::fuzz_target;
use opex_connector::http::{bearer_ok, percent_decode};
use opex_connector::record::Record;
use opex_connector::sources::webhook::config::{Respond, Secret, WebhookConfig};
use opex_connector::sources::webhook::signature::sign;
use opex_connector::sources::webhook::WebhookSource;

const SECRET: &str = "whsec-fuzz-secret";

fn hook() -> &'static WebhookSource {
    static HOOK: OnceLock<WebhookSource> = OnceLock::new();
    HOOK.get_or_init(|| {
        WebhookSource::new(
            WebhookConfig {
                name: "fuzz".into(),
                secret: Secret::Inline(SECRET.into()),
                respond: Respond::OnDone,
                tolerance: Duration::from_secs(300),
            },
            SECRET.as_bytes().to_vec(),
        )
    })
}

fuzz_target!(|data: &[u8]| {
    let mut u = Unstructured::new(data);
    let key = <&str>::arbitrary(&mut u).unwrap_or("");
    let auth = <&[u8]>::arbitrary(&mut u).unwrap_or(b"");
    let sig = <&[u8]>::arbitrary(&mut u).unwrap_or(b"");
    let now = i64::arbitrary(&mut u).unwrap_or(0);
    let signed = bool::arbitrary(&mut u).unwrap_or(false);
    let body = u.take_rest();

    // Headers: any bytes hyper accepts as a header value.
    let mut headers = HeaderMap::new();
    if let Ok(v) = HeaderValue::from_bytes(auth) {
        headers.insert(AUTHORIZATION, v);
    }
    let _ = bearer_ok(&headers, "s3cret-t0ken");

    let key = percent_decode(key);

    // The webhook's check, as the route calls it: the header as text when it is text.
    let header = HeaderValue::from_bytes(sig)
        .ok()
        .and_then(|v| v.to_str().ok().map(str::to_string));
    let _ = hook().verify(header.as_deref(), Some(key.as_str()), body, now);
    if signed {
        // A correctly signed request passes once, then is a replay.
        let made = sign(SECRET.as_bytes(), now, Some(key.as_str()), body);
        if hook()
            .verify(Some(made.as_str()), Some(key.as_str()), body, now)
            .is_ok()
        {
            assert!(hook()
                .verify(Some(made.as_str()), Some(key.as_str()), body, now)
                .is_err());
        }
    }

    // The body, as the ingest API and the webhook turn it into a record.
    if let Ok(record) = Record::from_json("ingest/fuzz", key.as_str(), body) {
        // A number beyond f64 (`1e400`) passes the raw check but not a tree parse: such a
        // payload is kept byte for byte and only nodes that look inside see `null`.
        if let Ok(original) = serde_json::from_slice::<serde_json::Value>(body) {
            assert_eq!(record.payload_value(), original);
        }
        let line = record.to_line();
        assert!(!line.contains(&b'\n'));
        assert_eq!(
            Record::from_line(&line).expect("own line reads back"),
            record
        );
    }
});
