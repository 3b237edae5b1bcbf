//! The text renderers fed hostile log text: whatever the log holds, no control character
//! (tab and newline aside) may come out of the human, markdown or GitHub renderer, and the
//! only escape sequences in coloured human output are plain SGR colour codes (issue 14).
#![no_main]
use libfuzzer_sys::fuzz_target;
use oomdoctor::render::terminal::is_unsafe;
use std::sync::LazyLock;

static RULES: LazyLock<oomdoctor::diagnosis::rules::RuleSet> =
    LazyLock::new(|| oomdoctor::diagnosis::rules::RuleSet::builtin().expect("built-in rules load"));

/// Every control character in `text` is a newline, or (when `sgr`) starts `ESC [ digits ; m`.
fn check(text: &str, sgr: bool) {
    let b = text.as_bytes();
    for (i, c) in text.char_indices() {
        if c == '\n' || !is_unsafe(c) {
            continue;
        }
        if sgr && c == '\x1b' && b.get(i + 1) == Some(&b'[') {
            let n = b[i + 2..].iter().take_while(|x| x.is_ascii_digit() || **x == b';').count();
            if b.get(i + 2 + n) == Some(&b'm') {
                continue;
            }
        }
        panic!("U+{:04X} reached the output at byte {i}", c as u32);
    }
}

fuzz_target!(|data: &[u8]| {
    // The input's name is hostile too: the first line of the data.
    let name = String::from_utf8_lossy(data.split(|b| *b == b'\n').next().unwrap_or(b""));
    let input: oomdoctor::facts::evidence::InputName = std::sync::Arc::from(&*name);
    let Ok((evidence, _)) = oomdoctor::ingest::log::grouping::analyze_log(&mut &data[..], &input) else {
        return;
    };
    let rules = &*RULES;
    let mut d = oomdoctor::diagnosis::report::Diagnosis::new();
    d.incidents = oomdoctor::diagnosis::verdict::finish(
        evidence.incidents.iter().map(|i| oomdoctor::diagnosis::verdict::diagnose(i, rules)).collect(),
    );
    d.collect_excerpts();
    for color in [false, true] {
        let style = oomdoctor::render::human::Style { color, width: 80 };
        check(&oomdoctor::render::human::render(&d, &style, true), color);
    }
    check(&oomdoctor::render::markdown::render(&d, &oomdoctor::render::markdown::Options::new()), false);
    check(&oomdoctor::render::github::render(&d, &oomdoctor::render::Policy::default()), false);
});
