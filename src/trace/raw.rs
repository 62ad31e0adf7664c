//! The raw form of one trace event: the fields the analysis reads, as serde gives them.
//!
//! Both parsers fill it: serde (the reference, in [`super::reader`]) and the direct parser of
//! [`super::event`]. It lives here, below both, so that each imports it and neither the other.

use std::borrow::Cow;
use std::fmt;

use serde::de::{Deserializer, Visitor};
use serde::Deserialize;

/// A number that some writers spell as a string (`"ts": "123.5"`, `"pid": "Spans"`).
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Lenient {
    Num(f64),
    Str(String),
}

impl Lenient {
    pub(crate) fn as_f64(&self) -> Option<f64> {
        match self {
            Lenient::Num(x) => Some(*x),
            Lenient::Str(s) => s.trim().parse().ok(),
        }
    }
    pub(crate) fn as_i64(&self) -> Option<i64> {
        self.as_f64().map(|x| x as i64)
    }
    pub(crate) fn as_string(&self) -> String {
        match self {
            Lenient::Num(x) if x.fract() == 0.0 => format!("{}", *x as i64),
            Lenient::Num(x) => x.to_string(),
            Lenient::Str(s) => s.clone(),
        }
    }
}

impl<'de> Deserialize<'de> for Lenient {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Lenient;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a number or a string")
            }
            fn visit_i64<E>(self, v: i64) -> Result<Lenient, E> {
                Ok(Lenient::Num(v as f64))
            }
            fn visit_u64<E>(self, v: u64) -> Result<Lenient, E> {
                Ok(Lenient::Num(v as f64))
            }
            fn visit_f64<E>(self, v: f64) -> Result<Lenient, E> {
                Ok(Lenient::Num(v))
            }
            fn visit_str<E>(self, v: &str) -> Result<Lenient, E> {
                Ok(Lenient::Str(v.to_string()))
            }
            fn visit_bool<E>(self, v: bool) -> Result<Lenient, E> {
                Ok(Lenient::Num(v as u8 as f64))
            }
            fn visit_unit<E>(self) -> Result<Lenient, E> {
                Ok(Lenient::Str(String::new()))
            }
        }
        d.deserialize_any(V)
    }
}

/// A string field, borrowed from the input where it can be (read from a slice, no escape in it).
#[derive(Debug, Default, Clone, PartialEq)]
pub(crate) struct Text<'a>(pub(crate) Cow<'a, str>);

impl Text<'_> {
    pub(crate) fn as_str(&self) -> &str {
        &self.0
    }
}

impl<'de: 'a, 'a> Deserialize<'de> for Text<'a> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Text<'de>;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a string")
            }
            fn visit_borrowed_str<E>(self, v: &'de str) -> Result<Text<'de>, E> {
                Ok(Text(Cow::Borrowed(v)))
            }
            fn visit_str<E>(self, v: &str) -> Result<Text<'de>, E> {
                Ok(Text(Cow::Owned(v.to_string())))
            }
            fn visit_string<E>(self, v: String) -> Result<Text<'de>, E> {
                Ok(Text(Cow::Owned(v)))
            }
        }
        d.deserialize_str(V)
    }
}

/// The arguments of an event the analysis reads; all others are skipped.
#[derive(Debug, Default, Deserialize)]
pub(crate) struct RawArgs {
    #[serde(rename = "Collective name")]
    pub(crate) collective_name: Option<String>,
    #[serde(rename = "In msg nelems")]
    pub(crate) in_nelems: Option<Lenient>,
    #[serde(rename = "Out msg nelems")]
    pub(crate) out_nelems: Option<Lenient>,
    #[serde(rename = "Group size")]
    pub(crate) group_size: Option<Lenient>,
    pub(crate) dtype: Option<Lenient>,
    #[serde(rename = "Process Group Name")]
    pub(crate) pg_name: Option<Lenient>,
    #[serde(rename = "Seq")]
    pub(crate) seq: Option<Lenient>,
    #[serde(rename = "External id")]
    pub(crate) external_id: Option<Lenient>,
    pub(crate) correlation: Option<Lenient>,
    pub(crate) stream: Option<Lenient>,
    /// The rank of a multi-rank trace written by verifybench (one pid per rank).
    pub(crate) rank: Option<Lenient>,
    /// A CPU op's input shapes (`record_shapes`): read only from the ops that launch custom
    /// collectives, whose first input is the tensor they reduce.
    #[serde(rename = "Input Dims")]
    pub(crate) input_dims: Option<serde_json::Value>,
    #[serde(rename = "Input type")]
    pub(crate) input_type: Option<serde_json::Value>,
}

/// One trace event, as far as the analysis reads it.
#[derive(Debug, Default, Deserialize)]
pub(crate) struct RawEvent<'a> {
    #[serde(borrow)]
    pub(crate) ph: Option<Text<'a>>,
    #[serde(borrow)]
    pub(crate) name: Option<Text<'a>>,
    #[serde(borrow)]
    pub(crate) cat: Option<Text<'a>>,
    pub(crate) ts: Option<Lenient>,
    pub(crate) dur: Option<Lenient>,
    pub(crate) pid: Option<Lenient>,
    pub(crate) tid: Option<Lenient>,
    pub(crate) id: Option<Lenient>,
    pub(crate) args: Option<RawArgs>,
}
