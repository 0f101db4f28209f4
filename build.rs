//! Build script: the status page's three files (`src/http/page/`) gzip-compressed into
//! `OUT_DIR`. The binary carries only the compressed bytes (about a third of the text) and
//! serves them as they are to every browser (`src/http/page.rs`); a client that does not take
//! gzip gets them inflated.

use std::io::Write;
use std::path::{Path, PathBuf};

/// The page's files, as named under `src/http/page/`.
const PAGE: [&str; 3] = ["index.html", "page.js", "page.css"];

fn main() {
    let out = PathBuf::from(std::env::var_os("OUT_DIR").expect("cargo sets OUT_DIR"));
    for name in PAGE {
        let source = Path::new("src/http/page").join(name);
        println!("cargo::rerun-if-changed={}", source.display());
        let text = std::fs::read(&source)
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
