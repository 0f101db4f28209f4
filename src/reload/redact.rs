//! Secrets out of a config shown: `GET /api/config` answers the running config with every
//! secret replaced.

use serde_json::Value;

/// What replaces a secret in a config shown.
pub const REDACTED: &str = "<redacted>";

/// The keys whose values are secrets, wherever they are in a config.
const SECRET_KEYS: [&str; 5] = [
    "token",
    "admin_token",
    "password",
    "password_hash",
    "secret",
];

/// `text` (a config) as YAML with every secret replaced by [`REDACTED`]: the values of the
/// keys of [`SECRET_KEYS`] and the password of a URL's `user:password@`. Written from the
/// parsed tree: the text's comments and key order are not kept.
pub fn redacted_yaml(text: &str) -> String {
    let mut tree: Value = match serde_saphyr::from_str(text) {
        Ok(v) => v,
        Err(_) => return String::new(),
    };
    redact(&mut tree);
    serde_saphyr::to_string(&tree).unwrap_or_default()
}

/// Replaces the secrets in `value`, as [`redacted_yaml`] says.
pub fn redact(value: &mut Value) {
    match value {
        Value::Object(map) => {
            for (key, v) in map.iter_mut() {
                if SECRET_KEYS.contains(&key.as_str()) && !v.is_null() {
                    *v = Value::String(REDACTED.into());
                } else {
                    redact(v);
                }
            }
        }
        Value::Array(list) => list.iter_mut().for_each(redact),
        Value::String(s) => {
            if let Some(hidden) = url_without_password(s) {
                *s = hidden;
            }
        }
        _ => {}
    }
}

/// `url` with the password of its `user:password@` replaced, when it has one.
fn url_without_password(url: &str) -> Option<String> {
    let (scheme, rest) = url.split_once("://")?;
    let authority_end = rest.find('/').unwrap_or(rest.len());
    let (authority, path) = rest.split_at(authority_end);
    let (userinfo, host) = authority.rsplit_once('@')?;
    let (user, _password) = userinfo.split_once(':')?;
    Some(format!("{scheme}://{user}:{REDACTED}@{host}{path}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn secrets_are_redacted_wherever_they_are() {
        let text = "connector:\n  data_dir: /d\n  http: {admin_token: admin-token-0123}\ningest:\n  sources: [{name: line, token: tok-0123456789ab}]\nwebhooks:\n  - {name: pay, secret: s3cret}\npostgres:\n  url: 'postgres://opex:hunter2@127.0.0.1:5432/plant'\n  table: events\nopcua_server:\n  users: [{name: scada, password_hash: '$argon2id$v=19$x', role: read}]\n";
        let shown = redacted_yaml(text);
        for secret in [
            "admin-token-0123",
            "tok-0123456789ab",
            "s3cret",
            "hunter2",
            "argon2id",
        ] {
            assert!(!shown.contains(secret), "{secret} in {shown}");
        }
        assert!(
            shown.contains("postgres://opex:<redacted>@127.0.0.1:5432/plant"),
            "{shown}"
        );
        assert!(shown.contains("name: line"), "{shown}");
        let tree: Value = serde_saphyr::from_str(&shown).expect("YAML");
        assert_eq!(tree["ingest"]["sources"][0]["token"], REDACTED);
    }

    #[test]
    fn a_url_without_a_password_is_left_as_it_is() {
        assert_eq!(url_without_password("nats://127.0.0.1:4222"), None);
        assert_eq!(url_without_password("http://user@host/x"), None);
        assert_eq!(
            url_without_password("mqtt://u:p@h:1883").as_deref(),
            Some("mqtt://u:<redacted>@h:1883")
        );
    }
}
