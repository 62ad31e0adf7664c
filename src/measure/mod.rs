//! Measuring: the statistics of timing samples ([`stats`], pure) and the inputs and expected
//! outputs of the exact-result check ([`pattern`]). How often to repeat is [`crate::request::Repeat`].

pub(crate) mod attribution;
pub(crate) mod gaps;
pub(crate) mod interval;
pub mod pattern;
pub(crate) mod repeat;
pub(crate) mod stats;

pub use stats::Summary;
