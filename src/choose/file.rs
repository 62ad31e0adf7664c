//! The decision file: one record of kind `allreduce_choice` (the envelope every output uses,
//! [`crate::record`]), written whole (temporary file and rename), read back by `choose
//! --decision` and `explain --allreduce-choice`. A file of another kind is refused, never
//! overwritten.

use std::path::Path;

use super::key::Fingerprint;
use super::Decision;
use crate::record::{kinds, Body, Record};

/// What `--decision FILE` holds for a key.
#[derive(Debug)]
pub(crate) enum Stored {
    /// No such file yet.
    Absent,
    /// A decision under the same key: reuse it.
    Same(Box<(Record, Decision)>),
    /// A decision under another key: the parts that differ, each with both values.
    Changed(Vec<String>),
}

/// Reads the decision file `path` (`flag` names it in messages).
pub(crate) fn read(path: &Path, flag: &str) -> anyhow::Result<(Record, Decision)> {
    let text = crate::util::read_text(
        path,
        "decision file",
        "the --decision file `verifybench choose` writes",
        crate::util::read::RESULTS,
    )?;
    let v: serde_json::Value = serde_json::from_str(&text).map_err(|e| {
        crate::error::usage(format!(
            "{flag} '{}' is not JSON ({}): give the --decision file `verifybench choose` writes",
            path.display(),
            crate::util::json_problem(&e)
        ))
    })?;
    if let Some(what) = crate::record::io::foreign(&v) {
        crate::usage_bail!(
            "{flag} '{}' is {what}, not {}",
            path.display(),
            kinds::describe(kinds::ALLREDUCE_CHOICE)
        );
    }
    let (_, data) = crate::record::io::other_of(v.clone(), path, kinds::ALLREDUCE_CHOICE, flag)?;
    let bad = |e: serde_json::Error| {
        crate::error::usage(format!(
            "{flag} '{}' is not a decision this verifybench reads: {e}",
            path.display()
        ))
    };
    let d: Decision = serde_json::from_value(data).map_err(bad)?;
    let rec: Record = serde_json::from_value(v).map_err(bad)?;
    Ok((rec, d))
}

/// What `path` holds for `key`.
pub(crate) fn look(path: &Path, key: &Fingerprint) -> anyhow::Result<Stored> {
    if !path.exists() {
        return Ok(Stored::Absent);
    }
    let (rec, d) = read(path, "--decision")?;
    let changes = d.key.changes(key);
    Ok(if changes.is_empty() {
        Stored::Same(Box::new((rec, d)))
    } else {
        Stored::Changed(changes)
    })
}

/// Why a run measured.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Why {
    /// No `--decision` file was given.
    NoFile,
    /// The file does not exist yet.
    New,
    /// The file's key differs: the parts that changed.
    Changed(Vec<String>),
    /// `--remeasure`.
    Remeasure,
}

/// What became of a run's decision.
#[derive(Debug)]
pub(crate) enum Outcome {
    /// The file's key held: its record and decision; nothing was measured.
    Reused(Box<(Record, Decision)>),
    /// Measured, and written to the file when one was given.
    Measured(Box<(Record, Decision)>, Why),
}

/// The decision for `key`: the one `path` holds when its key is the same (unless
/// `remeasure`), else `measure`'s (told why it runs), then written to `path`.
pub(crate) fn reuse_or_measure(
    path: Option<&Path>,
    remeasure: bool,
    key: &Fingerprint,
    measure: impl FnOnce(&Why) -> anyhow::Result<(Record, Decision)>,
) -> anyhow::Result<Outcome> {
    let why = match (path, remeasure) {
        (None, _) => Why::NoFile,
        (Some(_), true) => Why::Remeasure,
        (Some(p), false) => match look(p, key)? {
            Stored::Same(b) => return Ok(Outcome::Reused(b)),
            Stored::Changed(parts) => Why::Changed(parts),
            Stored::Absent => Why::New,
        },
    };
    let (rec, d) = measure(&why)?;
    if let Some(p) = path {
        write(p, &rec)?;
    }
    Ok(Outcome::Measured(Box::new((rec, d)), why))
}

/// Writes `rec` (a decision record) to `path` whole.
pub(crate) fn write(path: &Path, rec: &Record) -> anyhow::Result<()> {
    debug_assert!(matches!(&rec.body, Body::Other { name, .. } if name == kinds::ALLREDUCE_CHOICE));
    let mut bytes = serde_json::to_vec_pretty(rec)?;
    bytes.push(b'\n');
    crate::util::write_file(path, &bytes)
}
