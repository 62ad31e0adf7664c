//! The evidence every view reads, read once and labelled with where it came from: the one
//! provenance vocabulary ([`Source`], with the flag, file or inputs beside it in [`Origin`]).

pub mod provenance;

pub use provenance::{Labelled, Origin, Source};
