//! The memory model of a workload: model geometry (from a Hugging Face `config.json`, a
//! GGUF header, or an engine's log), exact memory arithmetic, a table of GPUs, and the
//! pre-flight `oomdoctor plan`.

pub mod config;
pub mod geometry;
pub mod gguf;
pub mod gpus;
pub mod memory;
