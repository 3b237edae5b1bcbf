//! `--format json`: the diagnosis as the versioned JSON contract (`schema_version` 1),
//! documented in `schema/diagnosis-v1.json` and the README.

use crate::diagnosis::report::Diagnosis;

/// Serialises a diagnosis, pretty-printed, with a trailing newline.
pub fn render(d: &Diagnosis) -> String {
    let mut s =
        serde_json::to_string_pretty(d).unwrap_or_else(|e| format!("{{\"error\": \"{e}\"}}"));
    s.push('\n');
    s
}
