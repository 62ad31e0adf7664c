//! A figure with where it came from: its [`Source`] (the one provenance vocabulary, defined at
//! the bottom in [`crate::record`]) and, beside it, the flag, file or inputs it came from.

use std::fmt;

use serde::ser::{Serialize, SerializeMap, Serializer};

pub(crate) use crate::record::Source;

/// Where one number came from: its source, and the flag (given), the file and what in it
/// (measured, modeled) or the inputs (derived) it came from.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Origin {
    pub(crate) source: Source,
    /// A part of the forward only (collectives only, or compute only), measured or modeled: a
    /// lower bound of the forward's time, never the time itself.
    pub(crate) bound: bool,
    /// The flag, the file, or what it was derived from; empty for a default.
    pub(crate) from: String,
    /// What was read from the file (the record, the lines); empty otherwise.
    pub(crate) detail: String,
}

impl Origin {
    /// Read from a file, measured or modeled (`Origin { bound: true, ..read }` for a part of
    /// the forward).
    pub(crate) fn read(source: Source, file: String, detail: String) -> Origin {
        Origin {
            source,
            bound: false,
            from: file,
            detail,
        }
    }

    /// A command-line flag.
    pub(crate) fn given(flag: &str) -> Origin {
        Origin::read(Source::Given, flag.into(), String::new())
    }

    /// Computed from other inputs (an accept length from acceptance rates).
    pub(crate) fn derived(from: impl Into<String>) -> Origin {
        Origin::read(Source::Derived, from.into(), String::new())
    }

    /// True for numbers that came from the cost model.
    pub(crate) fn is_modeled(&self) -> bool {
        self.source == Source::Modeled
    }

    /// A short label: `given`, `default`, `measured`, `modeled`, `bound`, `derived`.
    pub(crate) fn kind(&self) -> &'static str {
        if self.bound {
            "bound"
        } else {
            self.source.label()
        }
    }
}

impl fmt::Display for Origin {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (s, from, detail) = (self.source.label(), &self.from, &self.detail);
        match self.source {
            Source::Default => f.write_str(s),
            _ if self.bound => write!(f, "lower bound, {s} ({from}: {detail})"),
            Source::Measured | Source::Modeled => write!(f, "{s} ({from}: {detail})"),
            _ => write!(f, "{s} ({from})"),
        }
    }
}

/// Tagged by `origin` (`given`, `default`, `measured`, `modeled`, `lower_bound`, `derived`),
/// with what each has beside it: `flag`; nothing; `file` and `detail` (`modeled` first for a
/// lower bound); `from`.
impl Serialize for Origin {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut m = s.serialize_map(None)?;
        if self.bound {
            m.serialize_entry("origin", "lower_bound")?;
            m.serialize_entry("modeled", &self.is_modeled())?;
        } else {
            m.serialize_entry("origin", &self.source)?;
        }
        match self.source {
            Source::Default => {}
            Source::Given => m.serialize_entry("flag", &self.from)?,
            Source::Measured | Source::Modeled => {
                m.serialize_entry("file", &self.from)?;
                m.serialize_entry("detail", &self.detail)?;
            }
            Source::Inferred | Source::Derived => m.serialize_entry("from", &self.from)?,
        }
        m.end()
    }
}

/// A number with its origin.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub(crate) struct Labelled {
    pub(crate) value: f64,
    #[serde(flatten)]
    pub(crate) origin: Origin,
}

impl Labelled {
    pub(crate) fn given(value: f64, flag: &str) -> Labelled {
        let origin = Origin::given(flag);
        Labelled { value, origin }
    }

    /// Not given: the documented default.
    pub(crate) fn default(value: f64) -> Labelled {
        let origin = Origin::read(Source::Default, String::new(), String::new());
        Labelled { value, origin }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_origin_serializes_in_its_tagged_form() {
        let bound = Origin {
            bound: true,
            ..Origin::read(Source::Measured, "c.json".into(), "y".into())
        };
        for (o, json) in [
            (Origin::given("--x"), r#""origin":"given","flag":"--x""#),
            (Labelled::default(1.5).origin, r#""origin":"default""#),
            (
                Origin::read(Source::Modeled, "r.json".into(), "x".into()),
                r#""origin":"modeled","file":"r.json","detail":"x""#,
            ),
            (
                bound,
                r#""origin":"lower_bound","modeled":false,"file":"c.json","detail":"y""#,
            ),
            (Origin::derived("T=4"), r#""origin":"derived","from":"T=4""#),
        ] {
            let (value, origin) = (1.5, o.clone());
            let l = serde_json::to_string(&Labelled { value, origin });
            assert_eq!(l.unwrap(), format!(r#"{{"value":1.5,{json}}}"#));
            assert_eq!(serde_json::to_string(&o).unwrap(), format!("{{{json}}}"));
        }
    }
}
