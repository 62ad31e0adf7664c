//! `--format` and `-q/--quiet`: the one output convention every command that prints a result
//! flattens in (see [`crate::output`] for what they mean). Two groups because clap fixes a
//! flag's values per struct: [`OutputArgs`] (table, json) for most commands, and
//! [`OutputArgsMd`] (table, json, markdown) where a Markdown table exists.

use clap::builder::{PossibleValue, PossibleValuesParser, TypedValueParser};

use crate::output::Format;

/// The clap parser of `--format` offering `formats` only (with their help lines).
fn formats(formats: &'static [Format]) -> impl TypedValueParser<Value = Format> {
    PossibleValuesParser::new(
        formats
            .iter()
            .map(|f| PossibleValue::new(f.name()).help(crate::util::Named::help(*f))),
    )
    .map(|s| {
        s.parse::<Format>()
            .expect("clap checked the possible values")
    })
}

/// `--format table|json` and `-q/--quiet`.
#[derive(Debug, Clone, Default, clap::Args)]
pub struct OutputArgs {
    /// What stdout gets; progress, notes and warnings go to stderr whatever the format.
    #[arg(long, value_parser = formats(&[Format::Table, Format::Json]), default_value = "table")]
    pub format: Format,
    /// No progress and no notes on stderr; the result (stdout), warnings and errors are still
    /// printed.
    #[arg(short = 'q', long)]
    pub quiet: bool,
}

/// `--format table|json|markdown` and `-q/--quiet`.
#[derive(Debug, Clone, Default, clap::Args)]
pub struct OutputArgsMd {
    /// What stdout gets; progress, notes and warnings go to stderr whatever the format.
    #[arg(long, value_parser = formats(&[Format::Table, Format::Json, Format::Markdown]), default_value = "table")]
    pub format: Format,
    /// No progress and no notes on stderr; the result (stdout), warnings and errors are still
    /// printed.
    #[arg(short = 'q', long)]
    pub quiet: bool,
}
