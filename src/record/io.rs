//! Reading and writing records, in one place: one JSON record, a JSON array of records, or
//! JSON lines, each checked for its schema version; appending records as JSON lines
//! ([`JsonLinesFile`]); one record of a [`super::kinds`] kind, or the envelope-less form such
//! files had before ([`legacy_kind`], [`other_of`]). Whole files are written through
//! [`crate::util::write_file`] (temp-and-rename).

use std::io::Write;
use std::path::{Path, PathBuf};

use anyhow::Context;

use super::{kinds, Record, SCHEMA_VERSION};
use crate::error::usage;

/// The JSON values of a text holding one value, an array of values, or JSON lines (blank lines
/// skipped). The error is the 1-based number, counted among the non-blank lines, of the line
/// that is not JSON, and why.
pub(crate) fn json_values(
    text: &str,
) -> Result<Vec<serde_json::Value>, (usize, serde_json::Error)> {
    values_of(serde_json::from_str(text).ok(), text)
}

/// [`json_values`] given the whole text's parse (`None` when it is not one JSON document).
fn values_of(
    whole: Option<serde_json::Value>,
    text: &str,
) -> Result<Vec<serde_json::Value>, (usize, serde_json::Error)> {
    match whole {
        Some(serde_json::Value::Array(a)) => Ok(a),
        Some(v) => Ok(vec![v]),
        None => text
            .lines()
            .filter(|l| !l.trim().is_empty())
            .enumerate()
            .map(|(i, l)| serde_json::from_str(l).map_err(|e| (i + 1, e)))
            .collect(),
    }
}

/// Hands each record of a JSON-lines file, with its 0-based line number, to `each` in file
/// order (an error of `each` ends the reading), and returns the warnings. A line that is not JSON is the torn end of a write cut short by a crash (later runs append after it): it
/// is skipped with a warning. A line that is not a record of this schema version is an error
/// naming the file and line. `what` names the file in the error when it cannot be read.
pub(crate) fn read_record_lines(
    path: &Path,
    what: &str,
    mut each: impl FnMut(usize, Record) -> anyhow::Result<()>,
) -> anyhow::Result<Vec<String>> {
    let text = crate::util::read_text(
        path,
        what,
        "the results file a sweep wrote (--results)",
        crate::util::read::RESULTS,
    )?;
    let mut warnings = vec![];
    let mut torn = None;
    let mut records = 0;
    for (i, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        let value: serde_json::Value = match serde_json::from_str(line) {
            Ok(v) => v,
            // A torn line is the start of a record: anything else is not a JSON-lines file, or
            // a file cut short elsewhere than at the end of its last line.
            Err(e) if !line.trim_start().starts_with('{') => {
                return Err(not_a_record_line(path, what, &text, i + 1, line, &e))
            }
            Err(e) => {
                warnings.push(format!(
                    "'{}' line {} is truncated and was ignored (a write cut short): {}",
                    path.display(),
                    i + 1,
                    crate::util::json_problem(&e)
                ));
                torn.get_or_insert(i + 1);
                continue;
            }
        };
        let rec: Record = serde_json::from_value(value).map_err(|e| {
            usage(format!(
                "'{}' line {} is not a verifybench record ({})",
                path.display(),
                i + 1,
                crate::util::json_problem(&e)
            ))
        })?;
        if rec.schema_version != SCHEMA_VERSION {
            return Err(usage(format!(
                "'{}' line {} has schema_version {}; this verifybench reads version {}",
                path.display(),
                i + 1,
                rec.schema_version,
                SCHEMA_VERSION
            )));
        }
        each(i, rec)?;
        records += 1;
    }
    if let (0, Some(line)) = (records, torn) {
        return Err(usage(format!(
            "{what} '{}' is truncated: line {line} ends early and no line before it is a whole record; give the results file a sweep wrote (--results), or start afresh without --resume",
            path.display()
        )));
    }
    Ok(warnings)
}

/// Why line `n` of a JSON-lines file (`line`, which does not open a record) is refused: a
/// file cut short is called truncated, with where it was cut (a whole-file document ending
/// early, such as a pretty JSON array; a line holding the end of a record without its start,
/// the file cut at its beginning); anything else is no JSON record.
fn not_a_record_line(
    path: &Path,
    what: &str,
    text: &str,
    n: usize,
    line: &str,
    e: &serde_json::Error,
) -> anyhow::Error {
    let p = path.display();
    let give = "give the results file a sweep wrote (--results)";
    if e.classify() == serde_json::error::Category::Eof {
        if let Err(whole) = serde_json::from_str::<serde_json::Value>(text) {
            if whole.classify() == serde_json::error::Category::Eof {
                return usage(format!(
                    "{what} '{p}' is {}; {give}",
                    crate::util::json_problem(&whole)
                ));
            }
        }
    }
    if line.trim_end().ends_with('}') {
        return usage(format!(
            "{what} '{p}' is truncated at its start: line {n} holds the end of a record without its beginning (cut, or copied from the middle of a file); {give}"
        ));
    }
    usage(format!(
        "{what} '{p}' line {n} is not a JSON record ({e}): not a results file of verifybench"
    ))
}

/// The last byte of the regular file at `path` (`None` for an empty or absent file, or one that
/// is not a regular file).
fn last_byte(path: &Path) -> Option<u8> {
    use std::io::{Read, Seek, SeekFrom};
    let mut f = std::fs::File::open(path).ok()?;
    let meta = f.metadata().ok()?;
    if !meta.is_file() || meta.len() == 0 {
        return None;
    }
    f.seek(SeekFrom::End(-1)).ok()?;
    let mut b = [0u8; 1];
    f.read_exact(&mut b).ok()?;
    Some(b[0])
}

/// A JSON-lines file of records, open for appending: each record is written as one line, then
/// flushed and fsynced, so a crash loses at most the line being written (the sweep's results).
pub(crate) struct JsonLinesFile {
    path: PathBuf,
    file: std::fs::File,
}

impl JsonLinesFile {
    /// Opens (creating) `path` for appending; ends a torn last line first (of a regular file,
    /// by its last byte: nothing else is read, and nothing of a device).
    pub(crate) fn open(path: &Path) -> anyhow::Result<JsonLinesFile> {
        let torn = last_byte(path).is_some_and(|b| b != b'\n');
        let mut file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)
            .map_err(|e| {
                usage(format!(
                    "cannot write results file '{}': {e}",
                    path.display()
                ))
            })?;
        if torn {
            file.write_all(b"\n")?;
        }
        Ok(JsonLinesFile {
            path: path.to_path_buf(),
            file,
        })
    }

    pub(crate) fn path(&self) -> &Path {
        &self.path
    }

    /// Appends one record as a line, then flushes and fsyncs it.
    pub(crate) fn append(&mut self, r: &Record) -> anyhow::Result<()> {
        let mut line = serde_json::to_string(r)?;
        line.push('\n');
        self.file
            .write_all(line.as_bytes())
            .and_then(|_| self.file.flush())
            .and_then(|_| self.file.sync_data())
            .with_context(|| format!("appending to '{}'", self.path.display()))
    }
}

/// What a JSON value written by this tool is, in words, for messages: "a cost-model profile
/// (from `verifybench model fit`)", "a JSON array of 3 'verify' records", ...
pub(crate) fn describe(v: &serde_json::Value) -> String {
    // A record's kind: an other record's name, else its `kind`.
    fn kind(v: &serde_json::Value) -> Option<&str> {
        other_name(v).or_else(|| v.get("kind").and_then(|k| k.as_str()))
    }
    if let Some(k) = legacy_kind(v) {
        return kinds::describe(k);
    }
    match v {
        serde_json::Value::Array(a) => {
            let kinds: std::collections::BTreeSet<String> = a
                .iter()
                .map(|x| kind(x).unwrap_or("?").to_string())
                .collect();
            let kinds: Vec<String> = kinds.into_iter().collect();
            format!(
                "a JSON array of {} record(s) of kind '{}'",
                a.len(),
                kinds.join("', '")
            )
        }
        v => match kind(v) {
            Some(k) => kinds::describe(k),
            // (an old form was recognised above)
            None => "a JSON value that is not a verifybench record".into(),
        },
    }
}

/// The name of a [`super::Body::Other`] record (`"kind": "other"`, `"result": {"name": ..}`)
/// seen as raw JSON.
pub(crate) fn other_name(v: &serde_json::Value) -> Option<&str> {
    if v.get("kind").and_then(|k| k.as_str()) != Some("other") {
        return None;
    }
    v.get("result")?.get("name")?.as_str()
}

/// The kind of a JSON file that this tool wrote before every file carried the record envelope
/// (committed results keep that form), recognised by its shape: a bare bandwidth array, selftest
/// array, `env` or `compare` object, or a profile file (`"kind": "verifybench-cost-profile"`
/// beside a `"profile"` object). `None` for records and for anything else.
pub(crate) fn legacy_kind(v: &serde_json::Value) -> Option<&'static str> {
    use serde_json::Value;
    let has = |o: &Value, keys: &[&str]| keys.iter().all(|k| o.get(*k).is_some());
    if v.get("schema_version").is_some() && v.get("provenance").is_some() {
        return None;
    }
    match v {
        Value::Array(a) if !a.is_empty() => {
            if a.iter()
                .all(|x| has(x, &["device", "copy_rw_gbps", "stream_gbps"]))
            {
                Some(kinds::BANDWIDTH)
            } else if a
                .iter()
                .all(|x| has(x, &["name", "launcher", "pass", "detail"]))
            {
                Some(kinds::SELFTEST)
            } else {
                None
            }
        }
        Value::Object(_) if v.get("kind").and_then(|k| k.as_str()) == Some(kinds::PROFILE) => {
            has(v, &["profile"]).then_some(kinds::PROFILE)
        }
        Value::Object(_) if has(v, &["host", "gpus", "peer_access", "nccl_env", "problems"]) => {
            Some(kinds::ENV)
        }
        Value::Object(_) if has(v, &["workload", "entries", "rows", "uncertainty"]) => {
            Some(kinds::COMPARE)
        }
        _ => None,
    }
}

/// The JSON read from `path` as one record of kind `name` ([`kinds`]), or as such a file was
/// written before the envelope ([`legacy_kind`]): the record's provenance (`None` for the old
/// form) and its payload. Anything else is a usage error saying what the file is; `what` and
/// `path` name the file in it.
pub(crate) fn other_of(
    v: serde_json::Value,
    path: &Path,
    name: &str,
    what: &str,
) -> anyhow::Result<(Option<super::Provenance>, serde_json::Value)> {
    if legacy_kind(&v) == Some(name) {
        return Ok((None, v));
    }
    if other_name(&v) == Some(name) {
        match v.get("schema_version").and_then(|x| x.as_u64()) {
            Some(x) if x == SCHEMA_VERSION as u64 => {}
            other => {
                return Err(usage(format!(
                    "{what} '{}' has schema_version {}; this verifybench reads version {SCHEMA_VERSION}",
                    path.display(),
                    other.map_or("(none)".into(), |x| x.to_string())
                )))
            }
        }
        let rec: Record = serde_json::from_value(v).map_err(|e| {
            usage(format!(
                "{what} '{}' is not a valid record: {e}",
                path.display()
            ))
        })?;
        let super::Body::Other { data, .. } = rec.body else {
            unreachable!("other_name matched a Body::Other record")
        };
        return Ok((Some(rec.provenance), data));
    }
    Err(usage(format!(
        "{what} '{}' is {}, not {}",
        path.display(),
        describe(&v),
        kinds::describe(name)
    )))
}

/// What a JSON document given as a results file is when it is none of this tool's records but
/// a file the user has at hand: a model's config.json (`--model-config`), a schedule
/// (`--schedule`).
pub(crate) fn foreign(v: &serde_json::Value) -> Option<&'static str> {
    let has = |k: &str| v.get(k).is_some();
    if has("schema_version") {
        return None;
    }
    if has("num_hidden_layers") || has("text_config") || has("model_type") {
        return Some("a model's config.json (give it to --model-config)");
    }
    if has("ops") && (has("phase") || has("schedule")) {
        return Some("a schedule (give it to --schedule)");
    }
    None
}

/// Reads records from a file holding one JSON record, a JSON array of records, or JSON lines.
/// Refuses other schema versions with a message naming the file.
pub fn read_records(path: &Path) -> anyhow::Result<Vec<Record>> {
    let text = crate::util::read_text(
        path,
        "results file",
        "the --export-json of collective, verify or sweep",
        crate::util::read::RESULTS,
    )?;
    records_of_text(path, &text)
}

/// [`read_records`] of a file's text already read (`path` names it in messages).
pub(crate) fn records_of_text(path: &Path, text: &str) -> anyhow::Result<Vec<Record>> {
    let whole = serde_json::from_str::<serde_json::Value>(text).ok();
    if let Some(what) = whole.as_ref().and_then(foreign) {
        return Err(usage(format!(
            "'{}' is {what}, not a results file: give the --export-json of collective, verify or sweep",
            path.display()
        )));
    }
    if let Some(k) = whole
        .as_ref()
        .and_then(legacy_kind)
        .filter(|k| *k != kinds::PROFILE)
    {
        return Err(usage(format!(
            "'{}' is {}, not a results file of collective, verify or sweep",
            path.display(),
            kinds::describe(k)
        )));
    }
    let values = values_of(whole, text).map_err(|(line, e)| {
        // One document (a `[` or `{` spanning the file) that is cut short is a truncated file,
        // not a bad first line of JSON lines.
        let nonblank = text.lines().filter(|l| !l.trim().is_empty()).count();
        if let Err(whole_err) = serde_json::from_str::<serde_json::Value>(text) {
            if whole_err.classify() == serde_json::error::Category::Eof
                && (nonblank <= 1 || text.trim_start().starts_with('['))
            {
                return usage(format!(
                    "results file '{}' is {}; give the --export-json of collective, verify or sweep",
                    path.display(),
                    crate::util::json_problem(&whole_err)
                ));
            }
        }
        usage(format!(
            "results file '{}' line {line}: {}; give the --export-json of collective, verify or sweep",
            path.display(),
            crate::util::json_problem(&e)
        ))
    })?;
    values
        .into_iter()
        .map(|v| {
            if v.get("kind").and_then(|k| k.as_str()) == Some(kinds::PROFILE)
                || other_name(&v) == Some(kinds::PROFILE)
            {
                return Err(usage(format!(
                    "'{}' is a cost-model profile (from `verifybench model fit`), not a results file: give it to --profile of verify, collective or sweep (--backend model), or to --base-profile of model fit",
                    path.display()
                )));
            }
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
                    "results file '{}' is not a valid verifybench record ({}): give the --export-json of collective, verify or sweep",
                    path.display(),
                    crate::util::json_problem(&e)
                ))
            })
        })
        .collect()
}
