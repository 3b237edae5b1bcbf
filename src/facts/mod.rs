//! Facts: the typed evidence every stage after ingest reads.
//!
//! - [`evidence`]: a fact's value, unit and provenance (input, line, span);
//! - [`catalog`]: every fact name a recogniser may set, with its unit and meaning;
//! - [`engine`]: engines, defined once (ids, process names, serving or not);
//! - [`derive`]: the one derivation stage, run on an incident's fused facts before any rule
//!   or renderer reads them (defaults filled, need/usable, headroom, fits);
//! - [`units`]: sizes and their parsing/formatting.

pub mod catalog;
pub mod derive;
pub mod engine;
pub mod evidence;
pub mod phase;
pub mod units;
