//! Build script:
//!
//! - the status page's three files (`src/http/page/`) and the OpenAPI document of the HTTP
//!   API (`docs/src/reference/openapi.json`, the book's copy) gzip-compressed into `OUT_DIR`. The binary carries only the
//!   compressed bytes (about a third of the text) and serves them as they are to every
//!   browser (`src/http/page.rs`); a client that does not take gzip gets them inflated;
//! - the config file's JSON Schema and its reference page, read from the config types
//!   (`build/schema.rs`): `config.schema.json.gz`, what `opex-connector schema` inflates and
//!   prints, and `config.schema.json` and `configuration.md`, which the tests compare with
//!   the committed `config/opex-connector.schema.json` and
//!   `docs/src/reference/configuration.md`.

use std::io::Write;
use std::path::{Path, PathBuf};

#[path = "build/schema.rs"]
mod schema;

/// The files the HTTP server hands out: the page's three and the OpenAPI document. Each is
/// written to `OUT_DIR` as its file name and `.gz`.
const SERVED: [&str; 4] = [
    "src/http/page/index.html",
    "src/http/page/page.js",
    "src/http/page/page.css",
    "docs/src/reference/openapi.json",
];

/// `bytes` as one gzip member with no file name and a zero time in the header: the same
/// text gives the same bytes, so the build is reproducible and the page's ETag changes only
/// with the page.
fn gzip(bytes: &[u8], what: &Path) -> Vec<u8> {
    let mut gz = flate2::GzBuilder::new()
        .mtime(0)
        .write(Vec::new(), flate2::Compression::best());
    gz.write_all(bytes)
        .and_then(|()| gz.finish())
        .unwrap_or_else(|e| panic!("cannot compress {}: {e}", what.display()))
}

fn write(path: &Path, bytes: &[u8]) {
    std::fs::write(path, bytes).unwrap_or_else(|e| panic!("cannot write {}: {e}", path.display()));
}

fn main() {
    let out = PathBuf::from(std::env::var_os("OUT_DIR").expect("cargo sets OUT_DIR"));
    for file in SERVED {
        let source = Path::new(file);
        println!("cargo::rerun-if-changed={}", source.display());
        let text = std::fs::read(source)
            .unwrap_or_else(|e| panic!("cannot read {}: {e}", source.display()));
        let name = source.file_name().unwrap_or_default().to_string_lossy();
        write(&out.join(format!("{name}.gz")), &gzip(&text, source));
    }
    // A new file with config types is named by an existing one, which changes with it.
    println!("cargo::rerun-if-changed=build/schema.rs");
    let generated = schema::generate(Path::new("src"));
    for source in &generated.sources {
        println!("cargo::rerun-if-changed={}", source.display());
    }
    let json = out.join("config.schema.json");
    write(&json, generated.schema.as_bytes());
    write(
        &out.join("config.schema.json.gz"),
        &gzip(generated.schema.as_bytes(), &json),
    );
    write(&out.join("configuration.md"), generated.page.as_bytes());
}
