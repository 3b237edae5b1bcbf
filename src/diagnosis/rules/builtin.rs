//! The built-in rules, compiled into the binary: every `rules/<id>/rule.toml`, found by
//! `build.rs`, so adding a rule is adding a folder.

include!(concat!(env!("OUT_DIR"), "/builtin_rules.rs"));
