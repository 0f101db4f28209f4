//! A fleet's configs from a JetStream key-value bucket: each gateway watches key
//! `config.<id>` of the bucket its `fleet:` section names, applies each new value as a reload
//! (origin `fleet`), and writes its state to `state.<id>`.
//!
//! A value is a signed envelope, `{"config":"<YAML>","key":"<public key, hex>","signature":
//! "<base64 ed25519 over the YAML bytes>"}` (`opex-connector sign-config KEY FILE` makes it):
//! one not signed by a key of `fleet.trusted_keys` is refused. The `fleet:` section is local:
//! a config that carries another one is refused (a bad push must never cut a box off its
//! fleet); one without it keeps this gateway's.
//!
//! The bucket is the operator's (`nats kv add`): a bucket `B` is the stream `KV_B`, key `K`
//! its subject `$KV.B.K`. The watch hears each put of `$KV.B.config.<id>` and reads the
//! value stored under it; while NATS is away the gateway runs its last applied config, and
//! it reads the key again when it is back.
//!
//! `watch.rs` is the task; this file the section and the envelope.

mod watch;

use std::path::{Path, PathBuf};

use base64::Engine as _;
use serde::Deserialize;
use serde_json::{json, Value};

use crate::brokers::nats::NatsConnectionConfig;
use crate::config::Problems;

pub use watch::start;

/// `fleet:`, as written.
#[derive(Debug, Default, Deserialize)]
pub struct RawFleet {
    /// The `nats.connections` entry of the JetStream cluster that holds the bucket (default:
    /// the only one).
    pub connection: Option<String>,
    /// The key-value bucket (`nats kv add <bucket>`): letters, digits, `-` and `_`.
    pub bucket: Option<String>,
    /// This gateway's id: it watches key `config.<id>` and writes `state.<id>`. Letters,
    /// digits, `-` and `_`.
    pub id: Option<String>,
    /// The public keys (files as `opex-connector keygen` writes them) whose signatures this
    /// gateway takes; at least one. Read at each value: a key file replaced holds from the
    /// next one.
    pub trusted_keys: Option<Vec<String>>,
}

/// `fleet:`, validated.
#[derive(Debug, Clone)]
pub struct FleetConfig {
    /// The connection to the bucket's cluster.
    pub connection: NatsConnectionConfig,
    /// The bucket.
    pub bucket: String,
    /// This gateway's id.
    pub id: String,
    /// The files of the trusted public keys.
    pub trusted_keys: Vec<PathBuf>,
}

/// Whether `s` is a bucket name or a key token: letters, digits, `-`, `_`, at most 64.
fn is_token(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 64
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
}

impl FleetConfig {
    /// Validates `fleet:` at `path` against the NATS connections (the key files are read
    /// when a value comes, as other files are read at start, not here).
    pub fn validate(
        raw: Option<&RawFleet>,
        path: &str,
        connections: &[NatsConnectionConfig],
        p: &mut Problems,
    ) -> Option<Self> {
        let raw = raw?;
        let connection = crate::config::pick_connection(
            connections,
            |c| c.name.as_str(),
            raw.connection.as_deref(),
            "nats.connections",
            path,
            p,
        );
        let token = |key: &str, value: &Option<String>, p: &mut Problems| match value {
            Some(v) if is_token(v) => Some(v.clone()),
            Some(v) => {
                p.push(
                    format!("{path}.{key}"),
                    format!("{v:?}: use 1 to 64 letters, digits, - and _"),
                );
                None
            }
            None => {
                p.push(format!("{path}.{key}"), "is required");
                None
            }
        };
        let bucket = token("bucket", &raw.bucket, p);
        let id = token("id", &raw.id, p);
        let mut trusted_keys = Vec::new();
        match raw.trusted_keys.as_deref() {
            None | Some([]) => p.push(
                format!("{path}.trusted_keys"),
                "is required: at least one public key file (opex-connector keygen)",
            ),
            Some(files) => {
                for (i, file) in files.iter().enumerate() {
                    if file.trim().is_empty() {
                        p.push(format!("{path}.trusted_keys[{i}]"), "must not be empty");
                    }
                    trusted_keys.push(PathBuf::from(file));
                }
            }
        }
        Some(Self {
            connection: connection?,
            bucket: bucket?,
            id: id?,
            trusted_keys,
        })
    }
}

/// The value to put in the bucket for config `text`, signed with the key pair in the file
/// `key` (`opex-connector sign-config`).
pub fn sign(text: &str, key: &Path) -> Result<String, String> {
    use ring::signature::KeyPair as _;
    let pair = crate::release::key_pair(key).map_err(|e| e.to_string())?;
    let signature = pair.sign(text.as_bytes());
    Ok(json!({
        "config": text,
        "key": crate::release::to_hex(pair.public_key().as_ref()),
        "signature": base64::engine::general_purpose::STANDARD.encode(signature.as_ref()),
    })
    .to_string())
}

/// The public keys of `files` that can be read; each that cannot is logged.
pub fn read_keys(files: &[PathBuf]) -> Vec<Vec<u8>> {
    files
        .iter()
        .filter_map(|f| {
            crate::release::public_key(f)
                .map_err(|e| log::error!("fleet: a trusted key cannot be read: {e}"))
                .ok()
        })
        .collect()
}

/// A value of the bucket opened: the config text it carries, signed by one of `trusted`, and
/// the key that signed it (hex); why not.
pub fn open(value: &[u8], trusted: &[Vec<u8>]) -> Result<(String, String), String> {
    let envelope: Value = serde_json::from_slice(value)
        .map_err(|e| format!("not a signed config (opex-connector sign-config): {e}"))?;
    let field = |name: &str| {
        envelope[name]
            .as_str()
            .ok_or_else(|| format!("not a signed config: no \"{name}\" text"))
    };
    let (config, key, signature) = (field("config")?, field("key")?, field("signature")?);
    let Some(public) = trusted
        .iter()
        .find(|k| crate::release::to_hex(k).eq_ignore_ascii_case(key))
    else {
        return Err(format!(
            "signed with key {key}, which is not among fleet.trusted_keys"
        ));
    };
    let signature = base64::engine::general_purpose::STANDARD
        .decode(signature)
        .map_err(|e| format!("the signature is not base64: {e}"))?;
    ring::signature::UnparsedPublicKey::new(&ring::signature::ED25519, public)
        .verify(config.as_bytes(), &signature)
        .map_err(|_| "the signature does not match the config: refused".to_string())?;
    Ok((config.to_string(), key.to_ascii_lowercase()))
}

/// `text` with this gateway's `fleet:` section (`local`, the running config's, as a tree):
/// the text as it is when it carries the same section (or none: the local one is added);
/// `Err` when it carries another one.
pub fn with_local_section(text: &str, local: &Value) -> Result<String, String> {
    let tree = crate::config::expanded_tree(text).map_err(|problems| {
        format!(
            "the config has {} problem(s): {}",
            problems.0.len(),
            problems.to_string().replace('\n', "; ")
        )
    })?;
    match &tree["fleet"] {
        Value::Null => Ok(format!("{text}\nfleet: {local}\n")),
        same if same == local => Ok(text.to_string()),
        _ => Err("its fleet: section differs from this gateway's: the section is local, a config from the fleet keeps it as it is".into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_signed_config_opens_with_its_key_and_any_change_or_another_key_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        crate::release::keygen(dir.path()).unwrap();
        let key = dir.path().join("release.key");
        let public = crate::release::public_key(&dir.path().join("release.pub")).unwrap();
        let value = sign("connector:\n  name: a\n", &key).unwrap();
        let (text, by) = open(value.as_bytes(), std::slice::from_ref(&public)).unwrap();
        assert_eq!(text, "connector:\n  name: a\n");
        assert_eq!(by, crate::release::to_hex(&public));

        let mut forged: Value = serde_json::from_str(&value).unwrap();
        forged["config"] = json!("connector:\n  name: b\n");
        let e = open(forged.to_string().as_bytes(), std::slice::from_ref(&public)).unwrap_err();
        assert!(e.contains("does not match"), "{e}");
        let e = open(value.as_bytes(), &[vec![7; 32]]).unwrap_err();
        assert!(e.contains("not among fleet.trusted_keys"), "{e}");
        let e = open(b"connector: {}", &[public]).unwrap_err();
        assert!(e.contains("not a signed config"), "{e}");
    }

    #[test]
    fn a_bad_fleet_section_is_every_problem_with_its_path() {
        let text = "connector: {data_dir: /tmp/fleet-test}\n\
                    nats: {connections: [{name: a, servers: [nats://127.0.0.1:4222]},\
                    {name: b, servers: [nats://127.0.0.1:4223]}]}\n\
                    fleet: {bucket: bad.name, trusted_keys: []}\n";
        let problems = crate::config::from_yaml(text).unwrap_err();
        let paths: Vec<&str> = problems.0.iter().map(|p| p.path.as_str()).collect();
        assert_eq!(
            paths,
            [
                "fleet.connection",
                "fleet.bucket",
                "fleet.id",
                "fleet.trusted_keys"
            ],
            "{problems}"
        );
        let named = text.replace("bucket: bad.name", "connection: c, bucket: gw, id: line-1");
        let problems = crate::config::from_yaml(&named).unwrap_err();
        assert!(
            problems
                .to_string()
                .contains("no connection named \"c\" in nats.connections"),
            "{problems}"
        );
    }

    #[test]
    fn the_local_fleet_section_is_kept_added_or_its_change_refused() {
        let local = json!({"connection": "js", "bucket": "gw", "id": "a", "trusted_keys": ["/k"]});
        let without = "connector:\n  name: a\n";
        let added = with_local_section(without, &local).unwrap();
        assert_eq!(
            crate::config::expanded_tree(&added).unwrap()["fleet"],
            local
        );
        assert_eq!(with_local_section(&added, &local).unwrap(), added);
        let other = added.replace("\"gw\"", "\"other\"");
        assert!(with_local_section(&other, &local)
            .unwrap_err()
            .contains("differs"));
    }
}
