//! The server study's results file, `http-results.json`.

use super::StudyResults;
use anyhow::Context;
use std::path::Path;

/// An HTTP server study's `http-results.json`, or `None` when `path` holds something else
/// (a results.json is read by [`load`]).
pub fn load_http(path: &Path) -> anyhow::Result<Option<StudyResults>> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("cannot read {}", path.display()))?;
    let v: serde_json::Value = match serde_json::from_str(&text) {
        Ok(v) => v,
        Err(_) => return Ok(None),
    };
    if v.get("schema_version").is_some() || v.get("measurements").is_none() {
        return Ok(None);
    }
    serde_json::from_value(v).map(Some).with_context(|| {
        format!(
            "{} does not have the layout of an http-results.json",
            path.display()
        )
    })
}
