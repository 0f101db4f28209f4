//! The status page: three static files built into the binary (`page/`), so it works offline
//! and with no assets to install; and the OpenAPI document of the HTTP API, served the same
//! way. The page itself draws `/api/status`, the live view and the trends (`/api/trends`, as
//! inline SVG); the server only hands out these bytes.
//!
//! The files are gzip-compressed at build time (`build.rs`) and only the compressed bytes are
//! in the binary, so they leave as they are, with `Content-Encoding: gzip`. Every browser
//! takes gzip; a client that names the codings it takes without gzip (or with `gzip;q=0`) gets
//! `406` with the reason, and one that names none gets the gzip (RFC 9110: any coding is then
//! acceptable; `curl --compressed` shows the text).
//!
//! Only these exact paths exist (anything else is 404 from the router): there is no file
//! system behind them, so no path can reach outside. Every answer carries an `ETag` (a hash
//! of the bytes) with `Cache-Control: no-cache`, so a browser revalidates cheaply and sees a
//! new version right after an update, and a content security policy that allows nothing but
//! this origin.

use bytes::Bytes;
use http_body_util::Full;
use hyper::header::{
    HeaderMap, HeaderValue, ACCEPT_ENCODING, CACHE_CONTROL, CONTENT_ENCODING,
    CONTENT_SECURITY_POLICY, CONTENT_TYPE, ETAG, IF_NONE_MATCH, REFERRER_POLICY, VARY,
    X_CONTENT_TYPE_OPTIONS,
};
use hyper::{Response, StatusCode};

use super::respond::{error, Resp};

/// One embedded file.
pub struct Asset {
    /// Its bytes, gzip-compressed.
    pub gzip: &'static [u8],
    /// Its `Content-Type`.
    pub content_type: &'static str,
    /// The hash its `ETag` carries, computed when the binary is built.
    etag: u64,
}

impl Asset {
    const fn new(gzip: &'static [u8], content_type: &'static str) -> Self {
        Self {
            gzip,
            content_type,
            etag: fnv1a(gzip),
        }
    }
}

/// `GET /`.
pub const INDEX: Asset = Asset::new(
    include_bytes!(concat!(env!("OUT_DIR"), "/index.html.gz")),
    "text/html; charset=utf-8",
);
/// `GET /page.js`.
pub const SCRIPT: Asset = Asset::new(
    include_bytes!(concat!(env!("OUT_DIR"), "/page.js.gz")),
    "text/javascript; charset=utf-8",
);
/// `GET /page.css`.
pub const STYLE: Asset = Asset::new(
    include_bytes!(concat!(env!("OUT_DIR"), "/page.css.gz")),
    "text/css; charset=utf-8",
);

/// `GET /api/openapi.json`: the OpenAPI 3.1 description of the HTTP API, the same file as
/// the book's `reference/openapi.json`.
pub const OPENAPI: Asset = Asset::new(
    include_bytes!(concat!(env!("OUT_DIR"), "/openapi.json.gz")),
    "application/json",
);

/// Same origin only, no inline script, no frames around the page.
const CSP: &str = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'";

/// What a client that refuses gzip is told.
const GZIP_ONLY: &str = "the status page is sent gzip-compressed only, and this request's Accept-Encoding refuses gzip (every browser takes it; curl: --compressed)";

/// FNV-1a, 64 bits: enough to tell two versions of a file apart.
const fn fnv1a(bytes: &[u8]) -> u64 {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    let mut i = 0;
    while i < bytes.len() {
        hash = (hash ^ bytes[i] as u64).wrapping_mul(0x0100_0000_01b3);
        i += 1;
    }
    hash
}

/// Whether the request's `Accept-Encoding` lets gzip through (RFC 9110, 12.5.3): no header
/// at all allows any coding; otherwise `gzip` (or `x-gzip`), else `*`, must be listed with a
/// weight above zero. An element whose weight does not parse is passed over.
fn accepts_gzip(request: &HeaderMap) -> bool {
    let mut lines = request.get_all(ACCEPT_ENCODING).iter().peekable();
    if lines.peek().is_none() {
        return true;
    }
    let (mut gzip, mut any) = (None, None);
    for element in lines
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
    {
        let mut parts = element.split(';');
        let coding = parts.next().unwrap_or("").trim();
        let weight = parts.find_map(|p| {
            let (name, value) = p.split_once('=')?;
            name.trim()
                .eq_ignore_ascii_case("q")
                .then(|| value.trim().parse::<f32>().ok())
        });
        let Some(q) = weight.unwrap_or(Some(1.0)) else {
            continue;
        };
        if coding.eq_ignore_ascii_case("gzip") || coding.eq_ignore_ascii_case("x-gzip") {
            gzip = Some(q);
        } else if coding == "*" {
            any = Some(q);
        }
    }
    gzip.or(any).is_some_and(|q| q > 0.0)
}

/// The file, or 304 when the browser holds this version already, or 406 when the client
/// refuses gzip.
pub fn serve(asset: &Asset, request: &HeaderMap) -> Resp {
    if !accepts_gzip(request) {
        let mut r = error(StatusCode::NOT_ACCEPTABLE, GZIP_ONLY);
        r.headers_mut()
            .insert(VARY, HeaderValue::from_static("Accept-Encoding"));
        return r;
    }
    let etag = format!("\"{:016x}\"", asset.etag);
    let fresh = request
        .get(IF_NONE_MATCH)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.split(',').any(|t| t.trim() == etag || t.trim() == "*"));
    let (status, body) = if fresh {
        (StatusCode::NOT_MODIFIED, Bytes::new())
    } else {
        (StatusCode::OK, Bytes::from_static(asset.gzip))
    };
    let mut r = Response::new(Full::new(body));
    *r.status_mut() = status;
    let h = r.headers_mut();
    h.insert(CONTENT_TYPE, HeaderValue::from_static(asset.content_type));
    h.insert(CONTENT_ENCODING, HeaderValue::from_static("gzip"));
    h.insert(VARY, HeaderValue::from_static("Accept-Encoding"));
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
    use std::io::Read;

    use super::*;

    /// The file's text, inflated from what is served.
    fn text(asset: &Asset) -> String {
        let mut out = String::new();
        flate2::read::GzDecoder::new(asset.gzip)
            .read_to_string(&mut out)
            .expect("a gzip stream of UTF-8 text");
        out
    }

    fn asking(accept_encoding: &[&str]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for v in accept_encoding {
            h.append(ACCEPT_ENCODING, HeaderValue::from_str(v).expect("a header"));
        }
        h
    }

    #[test]
    fn each_file_is_served_gzip_compressed_and_inflates_to_its_source() {
        for (asset, source) in [
            (&INDEX, include_str!("page/index.html")),
            (&SCRIPT, include_str!("page/page.js")),
            (&STYLE, include_str!("page/page.css")),
        ] {
            assert_eq!(text(asset), source);
            assert!(asset.gzip.len() * 2 < source.len(), "compressed well");
            let r = serve(asset, &asking(&["gzip, deflate, br"]));
            assert_eq!(r.status(), StatusCode::OK);
            assert_eq!(r.headers()[CONTENT_ENCODING], "gzip");
            assert_eq!(r.headers()[VARY], "Accept-Encoding");
        }
    }

    #[test]
    fn a_client_that_refuses_gzip_gets_406_and_one_that_names_no_coding_gets_the_gzip() {
        for (asked, served) in [
            (&[][..], true),
            (&["gzip"][..], true),
            (&["GZIP"][..], true),
            (&["x-gzip"][..], true),
            (&["br;q=1.0, gzip;q=0.5"][..], true),
            (&["*"][..], true),
            (&["br", "gzip"][..], true),
            (&["*;q=0, gzip"][..], true),
            (&["gzip;q=nonsense, *"][..], true),
            (&[""][..], false),
            (&["identity"][..], false),
            (&["br, deflate"][..], false),
            (&["gzip;q=0"][..], false),
            (&["gzip; q=0.000"][..], false),
            (&["*;q=0"][..], false),
            (&["*, gzip;q=0"][..], false),
        ] {
            let r = serve(&SCRIPT, &asking(asked));
            let want = if served {
                StatusCode::OK
            } else {
                StatusCode::NOT_ACCEPTABLE
            };
            assert_eq!(r.status(), want, "Accept-Encoding: {asked:?}");
            assert_eq!(r.headers()[VARY], "Accept-Encoding");
        }
    }

    #[test]
    fn each_file_carries_the_fnv1a_hash_of_its_bytes_made_at_build_time() {
        // The published FNV-1a 64 test vectors.
        assert_eq!(fnv1a(b""), 0xcbf2_9ce4_8422_2325);
        assert_eq!(fnv1a(b"a"), 0xaf63_dc4c_8601_ec8c);
        assert_eq!(fnv1a(b"foobar"), 0x8594_4171_f739_67e8);
        for asset in [&INDEX, &SCRIPT, &STYLE] {
            let sent = serve(asset, &HeaderMap::new());
            let want = format!("\"{:016x}\"", fnv1a(asset.gzip));
            assert_eq!(sent.headers()[ETAG], want.as_str());
        }
        assert_ne!(INDEX.etag, SCRIPT.etag);
        assert_ne!(SCRIPT.etag, STYLE.etag);
    }

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
        let assets = [&INDEX, &SCRIPT, &STYLE];
        let sent: usize = assets.iter().map(|a| a.gzip.len()).sum();
        let total: usize = assets.iter().map(|a| text(a).len()).sum();
        assert!(total < 56 * 1024, "the page is {total} bytes");
        assert!(sent < 20 * 1024, "the page is {sent} bytes compressed");
        for asset in assets {
            let body = text(asset);
            assert!(!body.contains("http://"), "an absolute URL");
            assert!(!body.contains("https://"), "an absolute URL");
            assert!(!body.contains("innerHTML"), "data must go in as text");
        }
    }
}
