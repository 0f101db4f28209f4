//! The status page: three static files built into the binary (`page/`), so it works offline
//! and with no assets to install. The page itself draws `/api/status`, the live view and the
//! trends (`/api/trends`, as inline SVG); the server only hands out these bytes.
//!
//! Only the three exact paths exist (anything else is 404 from the router): there is no file
//! system behind them, so no path can reach outside. Every answer carries an `ETag` (a hash
//! of the bytes) with `Cache-Control: no-cache`, so a browser revalidates cheaply and sees a
//! new version right after an update, and a content security policy that allows nothing but
//! this origin.

use bytes::Bytes;
use http_body_util::Full;
use hyper::header::{
    HeaderMap, HeaderValue, CACHE_CONTROL, CONTENT_SECURITY_POLICY, CONTENT_TYPE, ETAG,
    IF_NONE_MATCH, REFERRER_POLICY, X_CONTENT_TYPE_OPTIONS,
};
use hyper::{Response, StatusCode};

use super::respond::Resp;

/// One embedded file.
pub struct Asset {
    /// Its bytes.
    pub body: &'static str,
    /// Its `Content-Type`.
    pub content_type: &'static str,
}

/// `GET /`.
pub const INDEX: Asset = Asset {
    body: include_str!("page/index.html"),
    content_type: "text/html; charset=utf-8",
};
/// `GET /page.js`.
pub const SCRIPT: Asset = Asset {
    body: include_str!("page/page.js"),
    content_type: "text/javascript; charset=utf-8",
};
/// `GET /page.css`.
pub const STYLE: Asset = Asset {
    body: include_str!("page/page.css"),
    content_type: "text/css; charset=utf-8",
};

/// Same origin only, no inline script, no frames around the page.
const CSP: &str = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'";

/// FNV-1a, 64 bits: enough to tell two versions of a file apart.
fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ u64::from(*b)).wrapping_mul(0x0100_0000_01b3)
    })
}

/// The file, or 304 when the browser holds this version already.
pub fn serve(asset: &Asset, request: &HeaderMap) -> Resp {
    let etag = format!("\"{:016x}\"", fnv1a(asset.body.as_bytes()));
    let fresh = request
        .get(IF_NONE_MATCH)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.split(',').any(|t| t.trim() == etag || t.trim() == "*"));
    let (status, body) = if fresh {
        (StatusCode::NOT_MODIFIED, Bytes::new())
    } else {
        (StatusCode::OK, Bytes::from_static(asset.body.as_bytes()))
    };
    let mut r = Response::new(Full::new(body));
    *r.status_mut() = status;
    let h = r.headers_mut();
    h.insert(CONTENT_TYPE, HeaderValue::from_static(asset.content_type));
    h.insert(CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    if let Ok(v) = HeaderValue::from_str(&etag) {
        h.insert(ETAG, v);
    }
    h.insert(CONTENT_SECURITY_POLICY, HeaderValue::from_static(CSP));
    h.insert(X_CONTENT_TYPE_OPTIONS, HeaderValue::from_static("nosniff"));
    h.insert(REFERRER_POLICY, HeaderValue::from_static("no-referrer"));
    r
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_known_etag_gets_304_and_another_gets_the_file() {
        let first = serve(&SCRIPT, &HeaderMap::new());
        assert_eq!(first.status(), StatusCode::OK);
        let etag = first.headers()[ETAG].clone();
        assert_eq!(first.headers()[CONTENT_TYPE], SCRIPT.content_type);
        let mut h = HeaderMap::new();
        h.insert(IF_NONE_MATCH, etag);
        assert_eq!(serve(&SCRIPT, &h).status(), StatusCode::NOT_MODIFIED);
        h.insert(IF_NONE_MATCH, HeaderValue::from_static("\"0\""));
        assert_eq!(serve(&SCRIPT, &h).status(), StatusCode::OK);
    }

    #[test]
    fn the_page_is_small_and_loads_nothing_from_elsewhere() {
        let total = INDEX.body.len() + SCRIPT.body.len() + STYLE.body.len();
        assert!(total < 48 * 1024, "the page is {total} bytes");
        for asset in [&INDEX, &SCRIPT, &STYLE] {
            assert!(!asset.body.contains("http://"), "an absolute URL");
            assert!(!asset.body.contains("https://"), "an absolute URL");
            assert!(!asset.body.contains("innerHTML"), "data must go in as text");
        }
    }
}
