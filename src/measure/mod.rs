//! Timing statistics (pure) and measurement settings.

pub mod bandwidth;
pub mod pattern;
pub mod stats;

pub use stats::Summary;
