//! The health check of an update: the `GET /api/status` document of the restarted service
//! must say, in `connector`, that it is healthy and that it is the version just installed.
//!
//! Only those two fields count. The document has other `healthy` fields (the uplink's, for
//! one), so looking for `"healthy":true` anywhere in its text passes a service whose uplink
//! is fine while it refuses every record; and a service that is healthy but still the old
//! binary (the restart did not take, `current` points elsewhere) is not the update.

use std::io::Read;

use serde_json::Value;

use super::ReleaseError;

/// The largest status document read (a box with hundreds of devices stays far below).
pub const MAX_STATUS_BYTES: u64 = 16 * 1024 * 1024;

/// Reads a status document of at most [`MAX_STATUS_BYTES`] from `reader` and checks it
/// ([`check_status`]).
pub fn check_status_of(reader: impl Read, expected_version: &str) -> Result<(), ReleaseError> {
    let mut doc = Vec::new();
    reader
        .take(MAX_STATUS_BYTES + 1)
        .read_to_end(&mut doc)
        .map_err(|e| {
            ReleaseError::Unhealthy(vec![format!("cannot read the status document: {e}")])
        })?;
    if doc.len() as u64 > MAX_STATUS_BYTES {
        return Err(ReleaseError::Unhealthy(vec![
            "the status document is larger than 16 MiB".into(),
        ]));
    }
    check_status(&doc, expected_version)
}

/// Checks a `/api/status` document: `connector.healthy` is `true` and `connector.version`
/// is `expected_version`. Every reason it fails is returned.
pub fn check_status(doc: &[u8], expected_version: &str) -> Result<(), ReleaseError> {
    let doc: Value = serde_json::from_slice(doc)
        .map_err(|e| ReleaseError::Unhealthy(vec![format!("not a status document: {e}")]))?;
    let mut reasons = Vec::new();
    let connector = doc.get("connector");
    match connector.and_then(|c| c.get("healthy")) {
        Some(Value::Bool(true)) => {}
        Some(other) => reasons.push(format!("connector.healthy is {other}")),
        None => reasons.push("connector.healthy is missing".into()),
    }
    match connector.and_then(|c| c.get("version")) {
        Some(Value::String(v)) if v == expected_version => {}
        Some(other) => reasons.push(format!(
            "connector.version is {other}, expected \"{expected_version}\""
        )),
        None => reasons.push("connector.version is missing".into()),
    }
    if reasons.is_empty() {
        Ok(())
    } else {
        Err(ReleaseError::Unhealthy(reasons))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reasons(doc: &str, version: &str) -> Vec<String> {
        match check_status(doc.as_bytes(), version) {
            Ok(()) => vec![],
            Err(ReleaseError::Unhealthy(r)) => r,
            Err(e) => panic!("{e}"),
        }
    }

    #[test]
    fn a_healthy_connector_of_the_expected_version_passes() {
        let doc = r#"{"connector":{"name":"box","version":"0.2.0","healthy":true},"uplink":{"healthy":false}}"#;
        assert_eq!(reasons(doc, "0.2.0"), Vec::<String>::new());
    }

    #[test]
    fn regression_healthy_true_elsewhere_in_the_document_does_not_pass_an_unhealthy_connector() {
        let doc = r#"{"connector":{"version":"0.2.0","healthy":false},"uplink":{"enabled":true,"healthy":true}}"#;
        assert_eq!(reasons(doc, "0.2.0"), ["connector.healthy is false"]);
        // Nor a document that has no connector at all.
        let doc = r#"{"uplink":{"healthy":true},"version":"0.2.0"}"#;
        assert_eq!(
            reasons(doc, "0.2.0"),
            [
                "connector.healthy is missing",
                "connector.version is missing"
            ]
        );
        // `"true"` is not `true`.
        let doc = r#"{"connector":{"version":"0.2.0","healthy":"true"}}"#;
        assert_eq!(reasons(doc, "0.2.0"), ["connector.healthy is \"true\""]);
    }

    #[test]
    fn regression_a_healthy_connector_of_another_version_fails() {
        let doc = r#"{"connector":{"version":"0.1.0","healthy":true}}"#;
        assert_eq!(
            reasons(doc, "0.2.0"),
            ["connector.version is \"0.1.0\", expected \"0.2.0\""]
        );
    }

    #[test]
    fn a_document_larger_than_the_bound_is_refused_unread() {
        let big = std::io::repeat(b' ').take(MAX_STATUS_BYTES + 10);
        let Err(ReleaseError::Unhealthy(r)) = check_status_of(big, "0.2.0") else {
            panic!("accepted");
        };
        assert!(r[0].contains("larger than 16 MiB"), "{r:?}");
    }

    #[test]
    fn a_document_that_is_not_json_fails_with_a_reason() {
        let r = reasons("<html>502 Bad Gateway</html>", "0.2.0");
        assert!(r[0].starts_with("not a status document"), "{r:?}");
    }
}
