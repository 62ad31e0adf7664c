//! Timing statistics (pure) and measurement settings.

pub mod stats;

pub use stats::Summary;
