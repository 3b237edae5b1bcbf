//! The rule-file loader (TOML, expressions, templates) and evaluation against empty facts.
#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else { return };
    if let Ok(rule) = oomdoctor::diagnosis::rules::parse_rule("fuzz.toml", "fuzz", text, "fuzz") {
        let facts = oomdoctor::facts::evidence::Facts::new();
        let _ = oomdoctor::diagnosis::rules::evaluate(&rule, &facts);
        let _ = oomdoctor::diagnosis::rules::evaluate_fixes(&rule, &facts);
    }
    if let Ok(e) = oomdoctor::diagnosis::expr::Expr::parse(text) {
        struct Empty;
        impl oomdoctor::diagnosis::expr::Scope for Empty {
            fn lookup(&self, _: &str) -> oomdoctor::diagnosis::expr::Val {
                oomdoctor::diagnosis::expr::Val::Num(1.0)
            }
        }
        let _ = e.eval(&Empty);
    }
});
