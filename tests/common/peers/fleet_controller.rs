//! nats-py as a fleet's controller: creates the bucket, puts each gateway's config, reads
//! each gateway's state, each a run of `fleet_controller.py` against the test's server or
//! cluster.

use std::process::Command;

use super::process::{require_python, run};

/// The controller's script.
const SCRIPT: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/tests/common/peers/fleet_controller.py"
);

/// A fleet's controller for the servers at some URLs.
pub struct FleetController {
    urls: String,
}

impl FleetController {
    /// A controller of the servers at `urls`.
    pub fn new(urls: &[String]) -> FleetController {
        require_python(
            "nats",
            "run scripts/test.sh (it installs the pinned nats-py) or `python3 -m pip install nats-py==2.11.0`",
        );
        FleetController {
            urls: urls.join(","),
        }
    }

    fn run(&self, args: &[&str]) -> String {
        let mut cmd = Command::new("python3");
        cmd.arg(SCRIPT).arg(&self.urls).args(args);
        let out = run(&mut cmd, "the fleet controller");
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// Creates key-value bucket `bucket`, its values on `replicas` servers.
    pub fn create(&self, bucket: &str, replicas: usize) {
        self.run(&["create", bucket, &replicas.to_string()]);
    }

    /// Puts `value` under `key` of `bucket`.
    pub fn put(&self, bucket: &str, key: &str, value: &str) {
        if let Err(e) = self.try_put(bucket, key, value) {
            panic!("the fleet controller failed: {e}");
        }
    }

    /// Puts `value` under `key` of `bucket`; why not (a cluster still electing the bucket's
    /// leader after a restart refuses writes for a moment).
    pub fn try_put(&self, bucket: &str, key: &str, value: &str) -> Result<(), String> {
        let file = tempfile::NamedTempFile::new().expect("a temp file");
        std::fs::write(file.path(), value).expect("write the value");
        let path = file.path().to_str().expect("a UTF-8 path");
        let out = Command::new("python3")
            .arg(SCRIPT)
            .arg(&self.urls)
            .args(["put", bucket, key, path])
            .output()
            .map_err(|e| e.to_string())?;
        if out.status.success() {
            Ok(())
        } else {
            Err(String::from_utf8_lossy(&out.stderr).into_owned())
        }
    }

    /// The value of `key` of `bucket`, if it has one.
    pub fn get(&self, bucket: &str, key: &str) -> Option<String> {
        let value = self.run(&["get", bucket, key]);
        (!value.is_empty()).then_some(value)
    }
}
