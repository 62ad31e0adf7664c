//! Renderers of records: text tables, CSV, Markdown, SVG plots and the `report` page.
//!
//! Only rendering lives here. The record types and their reading live in [`crate::record`]
//! (below every other module), OS helpers such as `write_file` in [`crate::util`].

pub(crate) mod breakeven;
pub(crate) mod env;
pub(crate) mod export;
pub(crate) mod fit;
pub(crate) mod plan;
pub(crate) mod plots;

pub mod text;

use crate::record::Record;

pub(crate) use crate::request::Exports;

/// Writing the exports is rendering: it lives here, beside the renderers.
impl Exports {
    /// Writes every requested export of `records`. Called after each result so that a later
    /// failure loses nothing already measured.
    pub(crate) fn write(&self, records: &[Record]) -> anyhow::Result<()> {
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
