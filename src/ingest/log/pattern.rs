//! The log recognisers' static patterns, compiled with Perl classes spelled in ASCII.
//!
//! In the `regex` crate `\d`, `\w` and `\b` are Unicode-aware: `\w` compiles to some seven
//! hundred ranges of UTF-8 sequences and `\d` to dozens. Building a pattern with one `\w`
//! took about 290 µs, with `[0-9A-Za-z_]` 10 µs; one `\d` about 47 µs, `[0-9]` a few. A
//! crash log that reaches most recognisers compiled some 250 patterns on its first lines,
//! more than half of everything a 24 KB log cost (and Unicode `\b` also sends the lazy DFA
//! to a slower engine on every line with a non-ASCII byte: a progress bar's `█`).
//!
//! What the classes stand for in these patterns is ASCII: numbers (Rust's number parsing
//! reads no other digits, so a Unicode digit matched would be a number that cannot be
//! read), identifiers, units, flags, exception and function names. Where a pattern means
//! any letter it says `\p{L}` (localised messages), and `\s` stays Unicode: pasted logs hold
//! non-breaking spaces. Patterns written by users (rule files) are not rewritten.

use regex::Regex;

/// `pattern` with `\d`, `\w`, `\D`, `\W`, `\b` and `\B` spelled in ASCII (the negated
/// ones left as they are inside a class, where they cannot be spelled as a range).
pub fn ascii_classes(pattern: &str) -> String {
    let mut out = String::with_capacity(pattern.len() + 16);
    let mut chars = pattern.chars().peekable();
    // Class nesting depth, and whether the next character opens a class body (where a `]`
    // is a literal: `[]a]`, `[^]a]`).
    let mut depth = 0usize;
    let mut class_start = false;
    while let Some(c) = chars.next() {
        let at_class_start = std::mem::take(&mut class_start);
        match c {
            '\\' => {
                let Some(e) = chars.next() else {
                    out.push('\\');
                    break;
                };
                let spelled = match (e, depth > 0) {
                    ('d', false) => "[0-9]",
                    ('d', true) => "0-9",
                    ('w', false) => "[0-9A-Za-z_]",
                    ('w', true) => "0-9A-Za-z_",
                    ('D', false) => "[^0-9]",
                    ('W', false) => "[^0-9A-Za-z_]",
                    ('b', false) => r"(?-u:\b)",
                    ('B', false) => r"(?-u:\B)",
                    _ => {
                        out.push('\\');
                        out.push(e);
                        continue;
                    }
                };
                out.push_str(spelled);
            }
            '[' => {
                out.push(c);
                depth += 1;
                if chars.peek() == Some(&'^') {
                    out.push('^');
                    chars.next();
                }
                class_start = true;
            }
            ']' if depth > 0 && !at_class_start => {
                out.push(c);
                depth -= 1;
            }
            _ => out.push(c),
        }
    }
    out
}

/// Compiles a static pattern with [`ascii_classes`]. A static pattern that does not compile
/// is a bug in this crate (the tests reach every one), not bad input: it panics, naming it.
pub fn static_regex(pattern: &str) -> Regex {
    Regex::new(&ascii_classes(pattern))
        .unwrap_or_else(|e| panic!("static regex {pattern:?} does not compile: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn perl_classes_are_spelled_in_ascii_inside_and_outside_classes() {
        assert_eq!(ascii_classes(r"\d+(?:\.\d+)?"), r"[0-9]+(?:\.[0-9]+)?");
        assert_eq!(ascii_classes(r"[\w./-]+"), r"[0-9A-Za-z_./-]+");
        assert_eq!(ascii_classes(r"[^.\d]|$"), r"[^.0-9]|$");
        assert_eq!(ascii_classes(r"\bn_ctx\b"), r"(?-u:\b)n_ctx(?-u:\b)");
        assert_eq!(ascii_classes(r"^[\W_]*"), r"^[\W_]*");
        // Escapes that are not Perl classes, and a `]` that opens a class body, are kept.
        assert_eq!(ascii_classes(r"\[\d\]\\d\p{L}"), r"\[[0-9]\]\\d\p{L}");
        assert_eq!(ascii_classes(r"[]\d]\d"), r"[]0-9][0-9]");
        assert_eq!(
            ascii_classes(r"[^]\w][[:alpha:]\d]"),
            r"[^]0-9A-Za-z_][[:alpha:]0-9]"
        );
    }

    #[test]
    fn the_ascii_pattern_matches_what_the_unicode_one_does_on_ascii_text() {
        let patterns = [
            r"(?P<func>\w+): failed to allocate (?P<buft>[A-Za-z][\w-]*) buffer of size (?P<bytes>\d+)(?:[^.\d]|$)",
            r"\b(?P<k>n_ctx|n_batch)\s*=\s*'?(?P<v>[\w.]+)",
            r"(?i)^[\W_]*(?:start(?:ing|ed)? (?:the )?(?:validat|evaluat)\w*)\b[\W_]*$",
        ];
        let lines = [
            "llama_model_load: failed to allocate CUDA0 buffer of size 4096000",
            "ggml_backend_cuda_buffer_type_alloc_buffer: failed to allocate CUDA_Host buffer of size 12.",
            "llama_context: n_ctx = 32768, n_batch= 'f16'",
            "== Starting validation ==",
            "--- started evaluating epoch 3 ---",
            "nothing to see",
        ];
        for p in patterns {
            let (unicode, ascii) = (Regex::new(p).unwrap(), static_regex(p));
            for l in lines {
                let groups = |re: &Regex| {
                    re.captures(l).map(|c| {
                        c.iter()
                            .map(|m| m.map(|m| m.as_str().to_string()))
                            .collect::<Vec<_>>()
                    })
                };
                assert_eq!(groups(&ascii), groups(&unicode), "{p} on {l}");
            }
        }
    }
}
