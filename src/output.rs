//! How every command prints: the one output convention, free of any command-line parser.
//!
//! stdout holds the result only: a table for people (the default), or with JSON one document,
//! exactly what the command's `--export-json` writes (a Markdown table where a command offers
//! it). Progress, notes and warnings go to stderr; quiet drops progress and notes there (errors
//! and warnings stay). The CLI sets the process-wide quiet switch once, before the command runs,
//! so that a note printed deep in a library (a size rounded down, a skipped file) obeys it
//! without every request carrying the flag there; [`crate::note!`] is the one way to print one.

use std::sync::atomic::{AtomicBool, Ordering};

/// What a command prints on stdout.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Format {
    /// A readable table (the default).
    #[default]
    Table,
    /// One JSON document: what the command's `--export-json` writes.
    Json,
    /// A Markdown table (only the commands whose `--format` lists it).
    Markdown,
}

crate::named_enum!(Format {
    Table => "table": "A table for reading (the default)",
    Json => "json": "One JSON document and nothing else: what --export-json writes, where the command has it",
    Markdown => "markdown": "A Markdown table: what --export-markdown writes, where the command has it",
});

impl Format {
    /// Whether stdout gets JSON.
    pub(crate) fn is_json(self) -> bool {
        self == Format::Json
    }
}

static QUIET: AtomicBool = AtomicBool::new(false);

/// Sets the process-wide quiet switch (`-q/--quiet`): no progress and no notes on stderr.
pub(crate) fn set_quiet(quiet: bool) {
    QUIET.store(quiet, Ordering::Relaxed);
}

/// Whether `-q/--quiet` was given.
pub(crate) fn quiet() -> bool {
    QUIET.load(Ordering::Relaxed)
}

/// Prints a note (not a result, warning or error) on stderr unless `-q/--quiet` was given.
#[macro_export]
macro_rules! note {
    ($($arg:tt)*) => {
        if !$crate::output::quiet() {
            eprintln!($($arg)*);
        }
    };
}

/// Prints `doc` (a JSON document or a Markdown table, as an export file holds it) on stdout,
/// ending it with a newline.
pub(crate) fn print_document(doc: &[u8]) -> std::io::Result<()> {
    use std::io::Write;
    let mut out = std::io::stdout().lock();
    out.write_all(doc)?;
    if !doc.ends_with(b"\n") {
        out.write_all(b"\n")?;
    }
    out.flush()
}

/// A result document written to its file (`--export-json`, when given) and, with `print`
/// (`--format json`), printed on stdout: the same bytes both times.
pub(crate) fn write_and_print(
    doc: &str,
    export: Option<&std::path::Path>,
    print: bool,
) -> anyhow::Result<()> {
    if let Some(p) = export {
        crate::util::write_file(p, doc.as_bytes())?;
    }
    if print {
        print_document(doc.as_bytes())?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn format_names_round_trip() {
        for f in <Format as crate::util::Named>::ALL {
            assert_eq!(f.name().parse::<Format>().unwrap(), *f);
        }
        assert!("yaml".parse::<Format>().is_err());
        assert!(Format::Json.is_json() && !Format::default().is_json());
    }
}
