//! `--format` and `-q/--quiet`: the one output convention every command that prints a result
//! flattens in (see [`crate::output`] for what they mean). One struct, generic over the formats
//! because clap fixes a flag's values per type: [`OutputArgs`] (table, json) for most commands,
//! and [`OutputArgsMd`] (table, json, markdown) where a Markdown table exists. And
//! [`ExportArgs`]: the files a measuring command writes its results to.

use clap::builder::TypedValueParser;

use crate::output::Format;
use crate::report::Exports;

/// The clap parser of `--format` offering table and json, and markdown with `markdown` (with
/// their help lines).
fn formats(markdown: bool) -> impl TypedValueParser<Value = Format> {
    crate::cli::values::named_of(if markdown {
        &[Format::Table, Format::Json, Format::Markdown]
    } else {
        &[Format::Table, Format::Json]
    })
}

/// `--format table|json` and `-q/--quiet`; `--format table|json|markdown` with `MARKDOWN`
/// ([`OutputArgsMd`]).
#[derive(Debug, Clone, Default, clap::Args)]
pub(crate) struct OutputArgs<const MARKDOWN: bool = false> {
    /// What stdout gets; progress, notes and warnings go to stderr whatever the format.
    #[arg(long, value_parser = formats(MARKDOWN), default_value = "table")]
    pub(crate) format: Format,
    /// No progress and no notes on stderr; the result (stdout), warnings and errors are still
    /// printed.
    #[arg(short = 'q', long)]
    pub(crate) quiet: bool,
}

/// `--format table|json|markdown` and `-q/--quiet`, where a Markdown table exists.
pub(crate) type OutputArgsMd = OutputArgs<true>;

/// `--export-json/--export-csv/--export-markdown`, shared by every measuring command.
#[derive(Debug, Clone, Default, clap::Args)]
pub(crate) struct ExportArgs {
    /// Write the results (JSON records, the source of truth) to FILE.
    #[arg(long, value_name = "FILE")]
    pub(crate) export_json: Option<std::path::PathBuf>,
    /// Write the results as CSV to FILE.
    #[arg(long, value_name = "FILE")]
    pub(crate) export_csv: Option<std::path::PathBuf>,
    /// Write the results as a Markdown table to FILE.
    #[arg(long, value_name = "FILE")]
    pub(crate) export_markdown: Option<std::path::PathBuf>,
}

request_from!(|a: &ExportArgs| -> Exports {
    export_json,
    export_csv,
    export_markdown,
});
