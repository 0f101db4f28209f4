//! The configs the README shows validate with the real binary, so the documentation cannot
//! drift from the product.

mod common;

use common::run_cli;

fn yaml_blocks() -> Vec<String> {
    let readme = include_str!("../README.md");
    let mut blocks = Vec::new();
    let mut current: Option<String> = None;
    for line in readme.lines() {
        match (&mut current, line.trim_start()) {
            (None, l) if l.starts_with("```yaml") => current = Some(String::new()),
            (Some(_), l) if l.starts_with("```") => blocks.extend(current.take()),
            (Some(block), _) => {
                block.push_str(line);
                block.push('\n');
            }
            (None, _) => {}
        }
    }
    blocks
}

fn validate(name: &str, yaml: &str) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join(name);
    std::fs::write(&path, yaml).unwrap();
    let out = run_cli(&["validate", path.to_str().unwrap()]);
    assert!(
        out.status.success(),
        "README example {name} does not validate:\n{yaml}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn every_yaml_example_in_the_readme_validates() {
    let blocks = yaml_blocks();
    assert!(
        blocks.len() >= 2,
        "expected the README's config and flow examples"
    );
    for (i, block) in blocks.iter().enumerate() {
        // A fragment (flows only) gets the sections it refers to.
        let yaml = if block.contains("connector:") {
            block.clone()
        } else {
            format!(
                "connector:\n  data_dir: /tmp/readme\nwebhooks:\n  - name: stripe\n    secret: whsec_test\nstorage:\n  max_quota_mb: 16\n{block}"
            )
        };
        validate(&format!("example-{i}.yaml"), &yaml);
    }
}

#[test]
fn every_shipped_example_config_validates() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("config");
    let mut files = Vec::new();
    for dir in [root.clone(), root.join("examples")] {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            if path.extension().is_some_and(|e| e == "yaml") {
                files.push(path);
            }
        }
    }
    assert!(files.len() >= 3, "{files:?}");
    for path in files {
        let out = run_cli(&["validate", path.to_str().unwrap()]);
        assert!(
            out.status.success(),
            "{} does not validate:\n{}",
            path.display(),
            String::from_utf8_lossy(&out.stderr)
        );
    }
}
