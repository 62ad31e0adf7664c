//! The raw form of one trace event: the fields the analysis reads, as serde gives them.
//!
//! Both parsers fill it: serde (the reference, in [`super::reader`]) and the direct parser of
//! [`super::event`]. It lives here, below both, so that each imports it and neither the other.

use std::borrow::Cow;
use std::fmt;

use serde::de::{DeserializeSeed, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};
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
    /// A CPU op's input shapes (`record_shapes`): used only from the ops that launch custom
    /// collectives, whose first input is the tensor they reduce.
    #[serde(rename = "Input Dims")]
    pub(crate) input_dims: Option<FirstShape>,
    #[serde(rename = "Input type")]
    pub(crate) input_type: Option<FirstType>,
}

/// The elements of the first shape of `Input Dims` (`[[4096, 7168], [7168]]` gives 4096 x
/// 7168): `None` unless the value is an array whose first element is an array of non-negative
/// integers whose product fits in 64 bits. Nothing else of the value is kept, however long.
#[derive(Debug, Default, Clone, Copy, PartialEq)]
pub(crate) struct FirstShape(pub(crate) Option<u64>);

/// The first element of `Input type` (`["c10::BFloat16", ...]`) when it is a string.
#[derive(Debug, Default, Clone, PartialEq)]
pub(crate) struct FirstType(pub(crate) Option<String>);

impl<'de> Deserialize<'de> for FirstShape {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        Ok(FirstShape(
            match d.deserialize_any(Part(Level::Shapes))? {
                Got::Elements(n) => n,
                _ => None,
            },
        ))
    }
}

impl<'de> Deserialize<'de> for FirstType {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        Ok(FirstType(match d.deserialize_any(Part(Level::Types))? {
            Got::Text(t) => Some(t),
            _ => None,
        }))
    }
}

/// Where in `Input Dims` or `Input type` a value stands.
#[derive(Clone, Copy, PartialEq)]
enum Level {
    /// `Input Dims`: an array of shapes.
    Shapes,
    /// One shape: an array of dimensions.
    Shape,
    Dim,
    /// `Input type`: an array of type names.
    Types,
    Type,
}

/// What one value gives at its level.
enum Got {
    Nothing,
    Dim(u64),
    /// The product of a shape's dimensions (`None`: not all integers, or too large).
    Elements(Option<u64>),
    Text(String),
}

/// Reads one value of [`Level`] without keeping anything the level does not use: any JSON
/// value is accepted, as `serde_json::Value` would, and a nested one is skipped unread.
struct Part(Level);

impl<'de> DeserializeSeed<'de> for Part {
    type Value = Got;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Got, D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Part {
    type Value = Got;
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("any JSON value")
    }
    fn visit_bool<E>(self, _: bool) -> Result<Got, E> {
        Ok(Got::Nothing)
    }
    fn visit_i64<E>(self, _: i64) -> Result<Got, E> {
        Ok(Got::Nothing)
    }
    fn visit_u64<E>(self, v: u64) -> Result<Got, E> {
        Ok(if self.0 == Level::Dim {
            Got::Dim(v)
        } else {
            Got::Nothing
        })
    }
    fn visit_f64<E>(self, _: f64) -> Result<Got, E> {
        Ok(Got::Nothing)
    }
    fn visit_str<E>(self, v: &str) -> Result<Got, E> {
        Ok(if self.0 == Level::Type {
            Got::Text(v.to_string())
        } else {
            Got::Nothing
        })
    }
    fn visit_unit<E>(self) -> Result<Got, E> {
        Ok(Got::Nothing)
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Got, A::Error> {
        let got = match self.0 {
            Level::Shapes | Level::Types => {
                let inner = if self.0 == Level::Shapes {
                    Level::Shape
                } else {
                    Level::Type
                };
                seq.next_element_seed(Part(inner))?.unwrap_or(Got::Nothing)
            }
            Level::Shape => {
                let mut product = Some(1u64);
                while let Some(g) = seq.next_element_seed(Part(Level::Dim))? {
                    product = match (product, g) {
                        (Some(p), Got::Dim(d)) => p.checked_mul(d),
                        _ => None,
                    };
                }
                Got::Elements(product)
            }
            Level::Dim | Level::Type => Got::Nothing,
        };
        while seq.next_element::<IgnoredAny>()?.is_some() {}
        Ok(got)
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Got, A::Error> {
        while map.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {}
        Ok(Got::Nothing)
    }
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

#[cfg(test)]
mod tests {
    use super::*;

    /// What `serde_json::Value` gave before: the product of the first shape's dimensions when
    /// each is a non-negative integer (an overflow left out: it panicked with overflow checks
    /// on, and wrapped without), and the first type when it is a string.
    fn by_value(v: &str) -> (Option<u64>, Option<String>) {
        let v: serde_json::Value = serde_json::from_str(v).unwrap();
        let dims = v["Input Dims"]
            .as_array()
            .and_then(|a| a.first()?.as_array().cloned())
            .and_then(|d| {
                d.iter()
                    .map(|x| x.as_u64())
                    .try_fold(1u64, |p, x| p.checked_mul(x?))
            });
        let ty = v["Input type"]
            .as_array()
            .and_then(|a| a.first()?.as_str().map(str::to_string));
        (dims, ty)
    }

    #[test]
    fn the_first_shape_and_type_are_what_the_whole_value_gave() {
        let cases = [
            r#"{"Input Dims":[[4096,7168],[7168]],"Input type":["c10::BFloat16","float"]}"#,
            r#"{"Input Dims":[[]],"Input type":[]}"#,
            r#"{"Input Dims":[],"Input type":"c10::Half"}"#,
            r#"{"Input Dims":[[2,-1]],"Input type":[7,"x"]}"#,
            r#"{"Input Dims":[[2,1.5]],"Input type":[["x"]]}"#,
            r#"{"Input Dims":[[2,[3]],{"a":[1]}],"Input type":[null]}"#,
            r#"{"Input Dims":[5,[1,2]],"Input type":{"a":"b"}}"#,
            r#"{"Input Dims":{"a":[[1]]},"Input type":true}"#,
            r#"{"Input Dims":[[4294967296,4294967296,2]],"Input type":["c10::Float"]}"#,
            r#"{"Input Dims":[[3,"4"]],"Input type":[]}"#,
        ];
        for c in cases {
            let a: RawArgs = serde_json::from_str(c).unwrap();
            let got = (
                a.input_dims.and_then(|d| d.0),
                a.input_type.and_then(|t| t.0),
            );
            assert_eq!(got, by_value(c), "{c}");
        }
        // the same from a reader, with a long list after the first shape (nothing kept of it)
        let long = format!(
            r#"{{"Input Dims":[[8,2],{}[1]]}}"#,
            "[1,2,3],".repeat(10_000)
        );
        let a: RawArgs = serde_json::from_reader(long.as_bytes()).unwrap();
        assert_eq!(a.input_dims, Some(FirstShape(Some(16))));
        let null: RawArgs = serde_json::from_str(r#"{"Input Dims":null}"#).unwrap();
        assert_eq!(null.input_dims, None);
    }
}
