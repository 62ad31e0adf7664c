//! Timing statistics (pure) and measurement settings.

pub mod gaps;
pub mod interval;
pub mod pattern;
pub mod repeat;
pub mod stats;

pub use stats::Summary;
