//! Measuring: the statistics of timing samples ([`stats`], pure) and the inputs and expected
//! outputs of the exact-result check ([`pattern`]). How often to repeat is [`crate::request::Repeat`].

pub mod attribution;
pub mod gaps;
pub mod interval;
pub mod pattern;
pub mod repeat;
pub mod stats;

pub use stats::Summary;
