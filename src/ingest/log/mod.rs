//! Log scanning: the streaming scanner and line clean-up.
//!
//! [`scanner`] finds candidate lines fast and in constant memory, with [`anchors`] as its
//! multi-literal search; [`clean`] turns each
//! candidate into message text plus prefix metadata for the recognisers in [`crate::ingest::log::engines`].

pub mod engines;
pub mod grouping;
pub mod phase;

pub mod anchors;
pub mod clean;
pub mod gate;
pub mod line_prefix;
pub mod pattern;
pub mod scanner;
pub mod seams;

pub use anchors::Anchors;
pub use clean::{CleanLine, LineMeta, clean_line};
pub use scanner::{Hit, LineSink, ScanPlan, ScanStats, scan};
