//! Diagnosis: from an incident's derived facts to a cause and a ranked fix list.
//!
//! - [`expr`]: the expression language rules are written in;
//! - [`rules`]: rules as data (`rules/`), their loading and evaluation, and the decision
//!   model (`rules/decision/findings.toml`);
//! - [`verdict`]: weighs the findings into a posterior per cause, decides or says
//!   "undetermined", and builds the fix list;
//! - [`cause`]: the causes; [`report`]: the diagnosis as rendered and as `--format json`.

pub mod cause;
pub mod expr;
pub mod report;
pub mod rules;
pub mod verdict;
