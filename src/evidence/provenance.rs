//! A figure with where it came from: its [`Source`] (the one provenance vocabulary, defined at
//! the bottom in [`crate::record`]) and, beside it, the flag, file or inputs it came from.

use std::fmt;

use serde::ser::{Serialize, SerializeMap, Serializer};

pub use crate::record::Source;

/// Where one number came from: its source, and the flag (given), the file and what in it
/// (measured, modeled) or the inputs (derived) it came from.
#[derive(Debug, Clone, PartialEq)]
pub struct Origin {
    pub source: Source,
    /// A part of the forward only (collectives only, or compute only), measured or modeled: a
    /// lower bound of the forward's time, never the time itself.
    pub bound: bool,
    /// The flag, the file, or what it was derived from; empty for a default.
    pub from: String,
    /// What was read from the file (the record, the lines); empty otherwise.
    pub detail: String,
}

impl Origin {
    fn new(source: Source, bound: bool, from: impl Into<String>, detail: String) -> Origin {
        Origin {
            source,
            bound,
            from: from.into(),
            detail,
        }
    }

    /// A command-line flag.
    pub fn given(flag: &str) -> Origin {
        Origin::new(Source::Given, false, flag, String::new())
    }

    /// Not given: the documented default.
    pub fn by_default() -> Origin {
        Origin::new(Source::Default, false, "", String::new())
    }

    /// Read from a file (`source` measured or modeled).
    pub fn read(source: Source, file: String, detail: String) -> Origin {
        Origin::new(source, false, file, detail)
    }

    /// A part of the forward only, read from a file: a lower bound.
    pub fn lower_bound(modeled: bool, file: String, detail: String) -> Origin {
        let source = if modeled {
            Source::Modeled
        } else {
            Source::Measured
        };
        Origin::new(source, true, file, detail)
    }

    /// Computed from other inputs (an accept length from acceptance rates).
    pub fn derived(from: impl Into<String>) -> Origin {
        Origin::new(Source::Derived, false, from, String::new())
    }

    /// True for numbers that came from the cost model.
    pub fn is_modeled(&self) -> bool {
        self.source == Source::Modeled
    }

    /// True for a lower bound (a part of the forward only).
    pub fn is_bound(&self) -> bool {
        self.bound
    }

    /// A short label: `given`, `default`, `measured`, `modeled`, `bound`, `derived`.
    pub fn kind(&self) -> &'static str {
        if self.bound {
            "bound"
        } else {
            self.source.label()
        }
    }
}

impl fmt::Display for Origin {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (from, detail) = (&self.from, &self.detail);
        match self.source {
            Source::Default => f.write_str("default"),
            _ if self.bound => write!(f, "lower bound, {} ({from}: {detail})", self.source.label()),
            Source::Measured | Source::Modeled => {
                write!(f, "{} ({from}: {detail})", self.source.label())
            }
            s => write!(f, "{} ({from})", s.label()),
        }
    }
}

/// `{"origin": "given", "flag": ..}`, `{"origin": "default"}`, `{"origin": "measured", "file":
/// .., "detail": ..}`, `{"origin": "lower_bound", "modeled": .., "file": .., "detail": ..}`,
/// `{"origin": "derived", "from": ..}`.
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
pub struct Labelled {
    pub value: f64,
    #[serde(flatten)]
    pub origin: Origin,
}

impl Labelled {
    pub fn given(value: f64, flag: &str) -> Labelled {
        Labelled {
            value,
            origin: Origin::given(flag),
        }
    }

    pub fn default(value: f64) -> Labelled {
        Labelled {
            value,
            origin: Origin::by_default(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_origin_serializes_as_its_tagged_form() {
        let json = |o: Origin| {
            serde_json::to_string(&Labelled {
                value: 1.5,
                origin: o,
            })
            .unwrap()
        };
        assert_eq!(
            json(Origin::given("--decode-ms")),
            r#"{"value":1.5,"origin":"given","flag":"--decode-ms"}"#
        );
        assert_eq!(
            json(Origin::by_default()),
            r#"{"value":1.5,"origin":"default"}"#
        );
        assert_eq!(
            json(Origin::read(Source::Modeled, "r.json".into(), "x".into())),
            r#"{"value":1.5,"origin":"modeled","file":"r.json","detail":"x"}"#
        );
        assert_eq!(
            json(Origin::lower_bound(false, "c.json".into(), "y".into())),
            r#"{"value":1.5,"origin":"lower_bound","modeled":false,"file":"c.json","detail":"y"}"#
        );
        assert_eq!(
            json(Origin::derived("T=4 of the verify record")),
            r#"{"value":1.5,"origin":"derived","from":"T=4 of the verify record"}"#
        );
        assert_eq!(
            serde_json::to_string(&Origin::given("--draft-steps")).unwrap(),
            r#"{"origin":"given","flag":"--draft-steps"}"#
        );
    }
}
