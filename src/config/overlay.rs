//! Board overlays: `boards/<board>.yaml` carries a `config:` subtree that is merged over the
//! site config when installing on that board (e.g. a smaller push queue quota on a Pi 3's SD
//! card). Maps merge key by key, recursively; anything else in the overlay replaces the site's
//! value.

use serde_json::Value;

/// Merges the `config:` subtree of `board_yaml` over `site_yaml`; returns the merged YAML.
pub fn overlay(site_yaml: &str, board_yaml: &str) -> Result<String, String> {
    let mut site: Value =
        serde_saphyr::from_str(site_yaml).map_err(|e| format!("site config: {e}"))?;
    let board: Value =
        serde_saphyr::from_str(board_yaml).map_err(|e| format!("board profile: {e}"))?;
    if let Some(over) = board.get("config") {
        merge(&mut site, over);
    }
    serde_saphyr::to_string(&site).map_err(|e| format!("cannot write the merged config: {e}"))
}

fn merge(base: &mut Value, over: &Value) {
    match (base, over) {
        (Value::Object(b), Value::Object(o)) => {
            for (k, v) in o {
                merge(b.entry(k.clone()).or_insert(Value::Null), v);
            }
        }
        (b, o) => *b = o.clone(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_board_overlay_replaces_leaves_and_keeps_the_rest_of_the_site_config() {
        let site = "connector:\n  data_dir: /d\n  push_queue:\n    max_quota_mb: 2000\n    on_full: block\n";
        let board = "name: rpi3\nconfig:\n  connector:\n    push_queue:\n      max_quota_mb: 384\n";
        let merged: Value = serde_saphyr::from_str(&overlay(site, board).unwrap()).unwrap();
        assert_eq!(merged["connector"]["push_queue"]["max_quota_mb"], 384);
        assert_eq!(merged["connector"]["push_queue"]["on_full"], "block");
        assert_eq!(merged["connector"]["data_dir"], "/d");
    }
}
