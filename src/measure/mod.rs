//! Timing statistics (pure) and measurement settings.

pub mod attribution;
pub mod pattern;
pub mod stats;

pub use stats::Summary;
