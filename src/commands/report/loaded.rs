//! A results file as the report reads it: its records, in the record envelope or in the older
//! envelope-less form, and what in it this version does not render.

use std::path::{Path, PathBuf};

use crate::record::{self, Record};

/// The records of one results file, and what in it this version does not render.
#[derive(Debug, Clone, Default)]
pub(crate) struct LoadedFile {
    pub(crate) path: PathBuf,
    pub(crate) records: Vec<Record>,
    /// Kinds of records that were not understood, in file order.
    pub(crate) unknown_kinds: Vec<String>,
    /// A file written before every file carried the record envelope (bandwidth, selftest, env,
    /// compare or a profile, [`record::io::legacy_kind`]): its kind and JSON, no provenance.
    pub(crate) bare: Option<(&'static str, serde_json::Value)>,
    /// A file that holds nothing, and what it is (an empty file, `[]`).
    pub(crate) empty: Option<String>,
}

impl LoadedFile {
    /// Reads a results file (one record, an array, or JSON lines). A record of another
    /// schema version is refused; a record of a kind this version does not know is kept aside;
    /// an empty file, `[]` and the old envelope-less files are kept to be named in the report.
    pub(crate) fn read(path: &Path) -> anyhow::Result<LoadedFile> {
        // an empty file is named in the report; one that is not text is refused
        let text = match std::fs::metadata(path) {
            Ok(m) if m.len() == 0 && m.is_file() => String::new(),
            _ => crate::util::read_text(
                path,
                "results file",
                "the --export-json of collective, verify or sweep",
                crate::util::read::RESULTS,
            )?,
        };
        let mut f = LoadedFile {
            path: path.to_path_buf(),
            ..Default::default()
        };
        if text.trim().is_empty() {
            f.empty = Some("an empty file".into());
            return Ok(f);
        }
        if let Ok(v) = serde_json::from_str::<serde_json::Value>(&text) {
            if v.as_array().is_some_and(|a| a.is_empty()) {
                f.empty = Some("an empty JSON array (`[]`): no records".into());
                return Ok(f);
            }
            if let Some(k) = record::io::legacy_kind(&v) {
                f.bare = Some((k, v));
                return Ok(f);
            }
            if record::io::other_name(&v) == Some(record::kinds::PROFILE) {
                // read_records refuses profiles; the report names them instead.
                let (_, data) = record::io::other_of(v, path, record::kinds::PROFILE, "profile")?;
                f.bare = Some((record::kinds::PROFILE, data));
                return Ok(f);
            }
        }
        match record::io::records_of_text(path, &text) {
            Ok(records) => {
                f.records = records;
                Ok(f)
            }
            Err(e) => Self::read_lenient(path, &text).map_err(|_| e),
        }
    }

    /// Record by record: records that do not parse but carry a `kind` no variant knows are
    /// set aside. Any other failure is an error.
    fn read_lenient(path: &Path, text: &str) -> anyhow::Result<LoadedFile> {
        let values = record::io::json_values(text).map_err(|(_, e)| e)?;
        let mut records = vec![];
        let mut unknown_kinds = vec![];
        for v in values {
            if v.get("schema_version").and_then(|x| x.as_u64())
                != Some(record::SCHEMA_VERSION as u64)
            {
                anyhow::bail!("schema");
            }
            match serde_json::from_value::<Record>(v.clone()) {
                Ok(r) => records.push(r),
                Err(e) => match v.get("kind").and_then(|k| k.as_str()) {
                    Some(k) if !["collective", "verify", "other"].contains(&k) => {
                        unknown_kinds.push(k.to_string())
                    }
                    _ => return Err(e.into()),
                },
            }
        }
        Ok(LoadedFile {
            path: path.to_path_buf(),
            records,
            unknown_kinds,
            bare: None,
            empty: None,
        })
    }

    /// The payloads of kind `name` in this file: each record's, or the old-form file's.
    pub(super) fn payloads(&self, name: &str) -> Vec<(Option<&Record>, &serde_json::Value)> {
        let mut out: Vec<(Option<&Record>, &serde_json::Value)> = self
            .records
            .iter()
            .filter_map(|r| r.other_data(name).map(|d| (Some(r), d)))
            .collect();
        if let Some((k, v)) = &self.bare {
            if *k == name {
                out.push((None, v));
            }
        }
        out
    }
}
