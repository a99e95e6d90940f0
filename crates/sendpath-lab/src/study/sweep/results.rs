//! The sweep's results file: the rows of [`crate::results`] (the schema every study's windows
//! share), loaded and checked here.

use crate::results::{Results, SCHEMA_VERSION};
use anyhow::{bail, Context};
use std::path::Path;

/// Reads and checks a results file; says what is wrong with a foreign or damaged one.
pub fn load(path: &Path) -> anyhow::Result<Results> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("cannot read {}", path.display()))?;
    let v: serde_json::Value = serde_json::from_str(&text).with_context(|| {
        format!(
            "{} is not valid JSON (truncated or damaged?)",
            path.display()
        )
    })?;
    match v.get("schema_version").and_then(|s| s.as_u64()) {
        None => bail!(
            "{} is not a sendpath results file (no schema_version); give the results.json that `sendpath sweep` or `sendpath stream --json` wrote",
            path.display()
        ),
        Some(n) if n != SCHEMA_VERSION as u64 => bail!(
            "{} has schema_version {n}; this sendpath reads version {SCHEMA_VERSION}",
            path.display()
        ),
        _ => {}
    }
    serde_json::from_value(v).with_context(|| {
        format!(
            "{} does not have the layout of a sendpath results file",
            path.display()
        )
    })
}
