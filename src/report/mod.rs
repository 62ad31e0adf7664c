//! Results: the record type (JSON, the source of truth) and pure exporters (CSV, Markdown).

pub mod export;
pub mod plots;
pub mod record;
pub mod render;
pub mod text;

pub use record::{Body, Provenance, Record, Source};

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
            record::write_file(p, &export::to_json(records)?)?;
        }
        if let Some(p) = &self.export_csv {
            record::write_file(p, &export::to_csv(records)?)?;
        }
        if let Some(p) = &self.export_markdown {
            record::write_file(p, &export::to_markdown(records)?)?;
        }
        Ok(())
    }
}
