//! Reading records: one JSON record, a JSON array of records, or JSON lines, each checked for
//! its schema version. Writing goes through [`crate::util::write_file`] (temp-and-rename).

use std::path::Path;

use super::{Record, SCHEMA_VERSION};
use crate::error::usage;

/// Reads records from a file holding one JSON record, a JSON array of records, or JSON lines.
/// Refuses other schema versions with a message naming the file.
pub fn read_records(path: &Path) -> anyhow::Result<Vec<Record>> {
    let text = std::fs::read_to_string(path).map_err(|e| {
        usage(format!(
            "cannot read results file '{}': {e}",
            path.display()
        ))
    })?;
    let values: Vec<serde_json::Value> = match serde_json::from_str::<serde_json::Value>(&text) {
        Ok(serde_json::Value::Array(a)) => a,
        Ok(v) => vec![v],
        Err(_) => text
            .lines()
            .filter(|l| !l.trim().is_empty())
            .enumerate()
            .map(|(i, l)| {
                serde_json::from_str(l).map_err(|e| {
                    usage(format!(
                        "results file '{}' line {}: not JSON: {e}",
                        path.display(),
                        i + 1
                    ))
                })
            })
            .collect::<anyhow::Result<_>>()?,
    };
    values
        .into_iter()
        .map(|v| {
            let ver = v.get("schema_version").and_then(|x| x.as_u64());
            match ver {
                Some(x) if x == SCHEMA_VERSION as u64 => {}
                Some(x) => {
                    return Err(usage(format!(
                        "results file '{}' has schema_version {x}; this verifybench reads version {SCHEMA_VERSION}",
                        path.display()
                    )))
                }
                None => {
                    return Err(usage(format!(
                        "results file '{}' is not a verifybench result (no schema_version)",
                        path.display()
                    )))
                }
            }
            serde_json::from_value(v).map_err(|e| {
                usage(format!(
                    "results file '{}' is not a valid verifybench record: {e}",
                    path.display()
                ))
            })
        })
        .collect()
}
