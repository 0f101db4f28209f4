//! The config file's JSON Schema (2020-12) and its reference page, written at build time
//! from the config types themselves (`build.rs`, `build/schema.rs`: the `Raw*` structs, their
//! keys, types and doc comments), so neither can drift from what [`super::load`] reads.
//! The binary carries the schema gzip-compressed and inflates it for `opex-connector schema`;
//! the page is only read by the tests, which compare both with the committed files.

/// The schema, gzip-compressed.
const SCHEMA_GZ: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/config.schema.json.gz"));

/// The most the schema may inflate to.
const MAX_SCHEMA: usize = 1 << 20;

/// The schema's text (pretty JSON); `None` when the embedded bytes do not inflate (a broken
/// build, caught by the tests).
pub fn schema() -> Option<String> {
    crate::gzip::inflate(SCHEMA_GZ, MAX_SCHEMA).and_then(|t| String::from_utf8(t).ok())
}

/// The reference page, `docs/src/reference/configuration.md`.
pub const REFERENCE_PAGE: &str = include_str!(concat!(env!("OUT_DIR"), "/configuration.md"));

#[cfg(test)]
mod tests {
    #[test]
    fn the_embedded_schema_inflates_to_the_schema_the_build_wrote() {
        let text = super::schema().expect("inflates");
        assert_eq!(
            text,
            include_str!(concat!(env!("OUT_DIR"), "/config.schema.json"))
        );
        let v: serde_json::Value = serde_json::from_str(&text).expect("JSON");
        assert_eq!(v["$schema"], "https://json-schema.org/draft/2020-12/schema");
        assert_eq!(v["additionalProperties"], false);
    }
}
