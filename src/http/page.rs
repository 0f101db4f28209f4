//! The status page: three static files built into the binary (`page/`), so it works offline
//! and with no assets to install. The page itself draws `/api/status`, the live view and the
//! trends (`/api/trends`, as inline SVG); the server only hands out these bytes.
//!
//! The files are gzip-compressed at build time (`build.rs`) and only the compressed bytes are
//! in the binary, so to a browser (every one sends `Accept-Encoding: gzip`) they leave as they
//! are, with `Content-Encoding: gzip`. A client that does not take gzip gets the text: one
//! that sends no `Accept-Encoding` at all (`curl` without `--compressed`, a shell script), an
//! empty one, or one that lists `identity` and not gzip. The file is inflated the first time
//! such a client asks for it and the text is kept (about 40 KiB for the three files), so each
//! later request costs nothing more. Only a client that refuses both gzip and the text
//! (`identity;q=0`, or `*;q=0` without gzip) gets `406` with the reason.
//!
//! The OpenAPI document (`GET /api/openapi.json`) is one more such file, served the same way.
//!
//! Only these exact paths exist (anything else is 404 from the router): there is no file
//! system behind them, so no path can reach outside. Every answer carries an `ETag` (a hash
//! of the bytes) with `Cache-Control: no-cache`, so a browser revalidates cheaply and sees a
//! new version right after an update, and a content security policy that allows nothing but
//! this origin.

use std::sync::OnceLock;

use bytes::Bytes;
use http_body_util::Full;
use hyper::header::{
    HeaderMap, HeaderValue, ACCEPT_ENCODING, CACHE_CONTROL, CONTENT_ENCODING,
    CONTENT_SECURITY_POLICY, CONTENT_TYPE, ETAG, IF_NONE_MATCH, REFERRER_POLICY, VARY,
    X_CONTENT_TYPE_OPTIONS,
};
use hyper::{Response, StatusCode};

use super::respond::{error, Resp};
use crate::gzip::inflate;

/// One embedded file.
pub struct Asset {
    /// Its bytes, gzip-compressed.
    pub gzip: &'static [u8],
    /// Its `Content-Type`.
    pub content_type: &'static str,
    /// The hash its `ETag` carries, computed when the binary is built.
    etag: u64,
    /// Its text, inflated the first time a client that does not take gzip asks for it; `None`
    /// when the embedded bytes do not inflate (a broken build, caught by the tests).
    text: OnceLock<Option<Bytes>>,
}

impl Asset {
    const fn new(gzip: &'static [u8], content_type: &'static str) -> Self {
        Self {
            gzip,
            content_type,
            etag: fnv1a(gzip),
            text: OnceLock::new(),
        }
    }

    /// The file's text, inflated once and kept.
    fn text(&self) -> Option<Bytes> {
        self.text
            .get_or_init(|| inflate(self.gzip, MAX_TEXT).map(Bytes::from))
            .clone()
    }
}

/// The most a file may inflate to: well above the page's files (the tests hold them under
/// 48 KiB in all), so a broken build cannot make a large allocation.
const MAX_TEXT: usize = 256 * 1024;

/// `GET /`.
pub static INDEX: Asset = Asset::new(
    include_bytes!(concat!(env!("OUT_DIR"), "/index.html.gz")),
    "text/html; charset=utf-8",
);
/// `GET /page.js`.
pub static SCRIPT: Asset = Asset::new(
    include_bytes!(concat!(env!("OUT_DIR"), "/page.js.gz")),
    "text/javascript; charset=utf-8",
);
/// `GET /page.css`.
pub static STYLE: Asset = Asset::new(
    include_bytes!(concat!(env!("OUT_DIR"), "/page.css.gz")),
    "text/css; charset=utf-8",
);

/// `GET /api/openapi.json`: the OpenAPI 3.1 description of every route (the book's
/// `docs/src/reference/openapi.json`, checked against the routes by `tests/openapi.rs`),
/// served like the page's files.
pub static OPENAPI: Asset = Asset::new(
    include_bytes!(concat!(env!("OUT_DIR"), "/openapi.json.gz")),
    "application/json",
);

/// Same origin only, no inline script, no frames around the page.
const CSP: &str = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'";

/// What a client that refuses both codings is told.
const NO_CODING: &str = "the status page is sent gzip-compressed or as it is, and this request's Accept-Encoding refuses both (leave the header out, or name gzip or identity)";

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

/// How a file leaves.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Coding {
    /// The embedded bytes, `Content-Encoding: gzip`.
    Gzip,
    /// The text, inflated.
    Identity,
}

/// The coding the request's `Accept-Encoding` lets through (RFC 9110, 12.5.3), gzip first:
/// `gzip` (or `x-gzip`), else `*`, listed with a weight above zero. Otherwise the text,
/// unless `identity` (else `*`) is listed with weight zero. No header at all, or an empty
/// one, means the text: a client that names no coding is one that cannot inflate (`curl`
/// without `--compressed`). An element whose weight does not parse is passed over.
fn choose(request: &HeaderMap) -> Option<Coding> {
    let (mut gzip, mut identity, mut any) = (None, None, None);
    for element in request
        .get_all(ACCEPT_ENCODING)
        .iter()
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
        } else if coding.eq_ignore_ascii_case("identity") {
            identity = Some(q);
        } else if coding == "*" {
            any = Some(q);
        }
    }
    if gzip.or(any).is_some_and(|q| q > 0.0) {
        Some(Coding::Gzip)
    } else if identity.or(any).is_none_or(|q| q > 0.0) {
        Some(Coding::Identity)
    } else {
        None
    }
}

/// The file, gzip-compressed or as text, or 304 when the client holds this version already,
/// or 406 when the client refuses both.
pub fn serve(asset: &Asset, request: &HeaderMap) -> Resp {
    let Some(coding) = choose(request) else {
        let mut r = error(StatusCode::NOT_ACCEPTABLE, NO_CODING);
        r.headers_mut()
            .insert(VARY, HeaderValue::from_static("Accept-Encoding"));
        return r;
    };
    let (etag, bytes) = match coding {
        Coding::Gzip => (
            format!("\"{:016x}\"", asset.etag),
            Bytes::from_static(asset.gzip),
        ),
        // Another representation, so another tag: a cache must not answer one with the other.
        Coding::Identity => match asset.text() {
            Some(text) => (format!("\"{:016x}-text\"", asset.etag), text),
            None => return error(
                StatusCode::INTERNAL_SERVER_ERROR,
                "this build's status page does not inflate; ask for it with Accept-Encoding: gzip",
            ),
        },
    };
    let fresh = request
        .get(IF_NONE_MATCH)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.split(',').any(|t| t.trim() == etag || t.trim() == "*"));
    let (status, body) = if fresh {
        (StatusCode::NOT_MODIFIED, Bytes::new())
    } else {
        (StatusCode::OK, bytes)
    };
    let mut r = Response::new(Full::new(body));
    *r.status_mut() = status;
    let h = r.headers_mut();
    h.insert(CONTENT_TYPE, HeaderValue::from_static(asset.content_type));
    if coding == Coding::Gzip {
        h.insert(CONTENT_ENCODING, HeaderValue::from_static("gzip"));
    }
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
    fn a_client_that_does_not_take_gzip_gets_the_text_and_one_that_refuses_both_gets_406() {
        use Coding::{Gzip, Identity};
        for (asked, served) in [
            (&["gzip"][..], Some(Gzip)),
            (&["GZIP"][..], Some(Gzip)),
            (&["x-gzip"][..], Some(Gzip)),
            (&["br;q=1.0, gzip;q=0.5"][..], Some(Gzip)),
            (&["*"][..], Some(Gzip)),
            (&["br", "gzip"][..], Some(Gzip)),
            (&["*;q=0, gzip"][..], Some(Gzip)),
            (&["gzip;q=nonsense, *"][..], Some(Gzip)),
            (&["identity;q=0, gzip"][..], Some(Gzip)),
            (&[][..], Some(Identity)),
            (&[""][..], Some(Identity)),
            (&["identity"][..], Some(Identity)),
            (&["IDENTITY;q=0.5"][..], Some(Identity)),
            (&["br, deflate"][..], Some(Identity)),
            (&["gzip;q=0"][..], Some(Identity)),
            (&["gzip; q=0.000"][..], Some(Identity)),
            (&["*, gzip;q=0"][..], Some(Identity)),
            (&["*;q=0, identity"][..], Some(Identity)),
            (&["*;q=0"][..], None),
            (&["identity;q=0"][..], None),
            (&["br, identity;q=0"][..], None),
            (&["gzip;q=0, identity;q=0"][..], None),
        ] {
            let r = serve(&SCRIPT, &asking(asked));
            assert_eq!(r.headers()[VARY], "Accept-Encoding", "{asked:?}");
            let encoding = r.headers().get(CONTENT_ENCODING);
            match served {
                Some(Gzip) => {
                    assert_eq!(r.status(), StatusCode::OK, "{asked:?}");
                    assert_eq!(encoding.map(|v| v.as_bytes()), Some(&b"gzip"[..]));
                }
                Some(Identity) => {
                    assert_eq!(r.status(), StatusCode::OK, "{asked:?}");
                    assert_eq!(encoding, None, "{asked:?}");
                }
                None => assert_eq!(r.status(), StatusCode::NOT_ACCEPTABLE, "{asked:?}"),
            }
        }
    }

    #[test]
    fn each_file_inflates_once_to_its_source_and_its_text_has_its_own_etag() {
        for (asset, source) in [
            (&INDEX, include_str!("page/index.html")),
            (&SCRIPT, include_str!("page/page.js")),
            (&STYLE, include_str!("page/page.css")),
        ] {
            let first = asset.text().expect("the embedded file inflates");
            assert_eq!(first, source.as_bytes());
            let again = asset.text().expect("kept");
            assert_eq!(first.as_ptr(), again.as_ptr(), "inflated once, then kept");
            let plain = serve(asset, &asking(&["identity"]));
            let gzip = serve(asset, &asking(&["gzip"]));
            assert_ne!(plain.headers()[ETAG], gzip.headers()[ETAG]);
            let mut h = asking(&["identity"]);
            h.insert(IF_NONE_MATCH, plain.headers()[ETAG].clone());
            assert_eq!(serve(asset, &h).status(), StatusCode::NOT_MODIFIED);
            h.insert(IF_NONE_MATCH, gzip.headers()[ETAG].clone());
            assert_eq!(serve(asset, &h).status(), StatusCode::OK);
        }
    }

    #[test]
    fn each_file_carries_the_fnv1a_hash_of_its_bytes_made_at_build_time() {
        // The published FNV-1a 64 test vectors.
        assert_eq!(fnv1a(b""), 0xcbf2_9ce4_8422_2325);
        assert_eq!(fnv1a(b"a"), 0xaf63_dc4c_8601_ec8c);
        assert_eq!(fnv1a(b"foobar"), 0x8594_4171_f739_67e8);
        for asset in [&INDEX, &SCRIPT, &STYLE] {
            let sent = serve(asset, &asking(&["gzip"]));
            let want = format!("\"{:016x}\"", fnv1a(asset.gzip));
            assert_eq!(sent.headers()[ETAG], want.as_str());
        }
        assert_ne!(INDEX.etag, SCRIPT.etag);
        assert_ne!(SCRIPT.etag, STYLE.etag);
    }

    #[test]
    fn a_known_etag_gets_304_and_another_gets_the_file() {
        let first = serve(&SCRIPT, &asking(&["gzip"]));
        assert_eq!(first.status(), StatusCode::OK);
        let etag = first.headers()[ETAG].clone();
        assert_eq!(first.headers()[CONTENT_TYPE], SCRIPT.content_type);
        let mut h = asking(&["gzip"]);
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
