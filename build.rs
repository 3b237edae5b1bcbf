//! Finds the built-in rules: every `rules/<id>/rule.toml`. Adding a rule is adding a folder;
//! no Rust changes. Generates the list the binary embeds (`builtin_rules.rs`) and one test
//! per rule (`rule_tests.rs`, included by `tests/rules.rs`), so `cargo test <rule_id>` runs
//! that rule's fixtures and snapshots alone.

use std::fmt::Write as _;
use std::path::Path;

fn main() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("rules");
    println!("cargo:rerun-if-changed={}", root.display());
    let mut ids: Vec<String> = std::fs::read_dir(&root)
        .expect("rules/ is part of the source tree")
        .filter_map(|e| e.ok())
        .filter(|e| e.path().join("rule.toml").is_file())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    ids.sort();
    let mut files =
        String::from("/// `(rule id, rule.toml text)` of every built-in rule, by id.\n");
    files.push_str("pub const FILES: &[(&str, &str)] = &[\n");
    let mut tests = String::new();
    for id in &ids {
        let path = root.join(id).join("rule.toml");
        println!("cargo:rerun-if-changed={}", path.display());
        writeln!(
            files,
            "    ({id:?}, include_str!({:?})),",
            path.display().to_string()
        )
        .unwrap();
        let name = id.replace(['-', '.'], "_");
        writeln!(
            tests,
            "#[test]\nfn {name}() {{\n    check_rule({id:?});\n}}\n"
        )
        .unwrap();
    }
    files.push_str("];\n");
    let out = std::env::var("OUT_DIR").expect("cargo sets OUT_DIR");
    std::fs::write(Path::new(&out).join("builtin_rules.rs"), files).unwrap();
    std::fs::write(Path::new(&out).join("rule_tests.rs"), tests).unwrap();
}
