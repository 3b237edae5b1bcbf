//! The whole log path: learned line prefixes, scanner, clean-up, every recogniser, incidents,
//! rules, both renderers.
#![no_main]
use libfuzzer_sys::fuzz_target;
use std::sync::LazyLock;

/// Parsed once: rebuilding the rule set per input was most of each run's time.
static RULES: LazyLock<oomdoctor::diagnosis::rules::RuleSet> =
    LazyLock::new(|| oomdoctor::diagnosis::rules::RuleSet::builtin().expect("built-in rules load"));

fuzz_target!(|data: &[u8]| {
    let input: oomdoctor::facts::evidence::InputName = std::sync::Arc::from("fuzz.log");
    // A log with a stream's name on every line is read without it, as `input::open` does.
    let Ok((evidence, _)) = (match oomdoctor::ingest::log::line_prefix::learn(data) {
        Some(p) => oomdoctor::ingest::log::grouping::analyze_log(
            &mut oomdoctor::ingest::log::line_prefix::StripLinePrefixes::reader(data, p),
            &input,
        ),
        None => oomdoctor::ingest::log::grouping::analyze_log(&mut &data[..], &input),
    }) else {
        return;
    };
    let rules = &*RULES;
    let mut d = oomdoctor::diagnosis::report::Diagnosis::new();
    d.incidents = oomdoctor::diagnosis::verdict::finish(evidence.incidents.iter().map(|i| oomdoctor::diagnosis::verdict::diagnose(i, rules)).collect());
    d.collect_excerpts();
    let _ = oomdoctor::render::json::render(&d);
    let _ = oomdoctor::render::human::render(&d, &oomdoctor::render::human::Style { color: true, width: 80 }, true);
});
