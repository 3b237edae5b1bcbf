//! Engine recognisers: one module per producer of log lines.
//!
//! Each module owns the messages of one engine (PyTorch, vLLM, llama.cpp, ...): the literal
//! anchors that let the scanner skip every other line cheaply, the regexes that read the
//! numbers out of a matching line, and the `FACTS` table it promises to fill.

pub mod pytorch;
pub mod training;
