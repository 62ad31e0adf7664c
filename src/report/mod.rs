//! Renderers of records: text tables, CSV, Markdown, SVG plots and the `report` page.
//!
//! Only rendering lives here. The record types and their reading live in [`crate::record`]
//! (below every other module), OS helpers such as `write_file` in [`crate::util`].

pub mod breakeven;
pub mod env;
pub mod export;
pub mod fit;
pub mod plan;
pub mod plots;

pub mod render;
pub mod text;

use crate::record::Record;

use std::path::PathBuf;

/// The export files of a measuring command (`--export-json/--export-csv/--export-markdown`).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Exports {
    /// The results as JSON records (the source of truth).
    pub export_json: Option<PathBuf>,
    /// The results as CSV.
    pub export_csv: Option<PathBuf>,
    /// The results as a Markdown table.
    pub export_markdown: Option<PathBuf>,
}

impl Exports {
    /// The requested export files with the flag naming each.
    pub fn outputs(&self) -> Vec<(&'static str, &std::path::Path)> {
        [
            ("--export-json", &self.export_json),
            ("--export-csv", &self.export_csv),
            ("--export-markdown", &self.export_markdown),
        ]
        .into_iter()
        .filter_map(|(f, p)| p.as_deref().map(|p| (f, p)))
        .collect()
    }

    /// Checks before any work that every export can be written and none is an input or another
    /// export ([`crate::util::check_outputs`]).
    pub fn check(&self, inputs: &[&std::path::Path]) -> anyhow::Result<()> {
        crate::util::check_outputs(&self.outputs(), inputs)
    }

    /// Writes every requested export of `records`. Called after each result so that a later
    /// failure loses nothing already measured.
    pub fn write(&self, records: &[Record]) -> anyhow::Result<()> {
        if let Some(p) = &self.export_json {
            crate::util::write_file(p, &export::to_json(records)?)?;
        }
        if let Some(p) = &self.export_csv {
            crate::util::write_file(p, &export::to_csv(records)?)?;
        }
        if let Some(p) = &self.export_markdown {
            crate::util::write_file(p, &export::to_markdown(records)?)?;
        }
        Ok(())
    }
}
