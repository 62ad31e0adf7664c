//! Renderers of records: text tables, CSV, Markdown, SVG plots and the `report` page.
//!
//! Only rendering lives here. The record types and their reading live in [`crate::record`]
//! (below every other module), OS helpers such as `write_file` in [`crate::util`].

pub mod export;
pub mod plots;

pub mod render;
pub mod text;

use crate::record::Record;

use std::path::PathBuf;

/// `--export-json/--export-csv/--export-markdown`, shared by every measuring command.
#[derive(Debug, Clone, Default, clap::Args)]
pub struct ExportArgs {
    /// Write the results (JSON records, the source of truth) to FILE.
    #[arg(long, value_name = "FILE")]
    pub export_json: Option<PathBuf>,
    /// Write the results as CSV to FILE.
    #[arg(long, value_name = "FILE")]
    pub export_csv: Option<PathBuf>,
    /// Write the results as a Markdown table to FILE.
    #[arg(long, value_name = "FILE")]
    pub export_markdown: Option<PathBuf>,
}

impl ExportArgs {
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
