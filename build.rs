//! Build script: the status page's three files (`src/http/page/`) and the OpenAPI document of
//! the HTTP API (`docs/src/reference/openapi.json`) gzip-compressed into `OUT_DIR`. The binary
//! carries only the compressed bytes (about a third of the text, a sixth for the document) and
//! serves them as they are (`src/http/page.rs`); every browser takes gzip.

use std::io::Write;
use std::path::{Path, PathBuf};

/// The files served as they are: the page's, and the API's description.
const SERVED: [&str; 4] = [
    "src/http/page/index.html",
    "src/http/page/page.js",
    "src/http/page/page.css",
    "docs/src/reference/openapi.json",
];

fn main() {
    let out = PathBuf::from(std::env::var_os("OUT_DIR").expect("cargo sets OUT_DIR"));
    for source in SERVED {
        let source = Path::new(source);
        let name = source
            .file_name()
            .and_then(|n| n.to_str())
            .expect("a file name");
        println!("cargo::rerun-if-changed={}", source.display());
        let text = std::fs::read(source)
            .unwrap_or_else(|e| panic!("cannot read {}: {e}", source.display()));
        // No file name and a zero time in the header: the same text gives the same bytes,
        // so the build is reproducible and the page's ETag changes only with the page.
        let mut gz = flate2::GzBuilder::new()
            .mtime(0)
            .write(Vec::new(), flate2::Compression::best());
        let compressed = gz
            .write_all(&text)
            .and_then(|()| gz.finish())
            .unwrap_or_else(|e| panic!("cannot compress {}: {e}", source.display()));
        let target = out.join(format!("{name}.gz"));
        std::fs::write(&target, compressed)
            .unwrap_or_else(|e| panic!("cannot write {}: {e}", target.display()));
    }
}
