//! Keeping hostile text away from the terminal.
//!
//! Everything oomdoctor prints quotes its inputs: log lines, file names, process names, rule
//! ids and titles from `--rules` files, series labels, snapshot frames. Any of them can hold
//! control characters, and a terminal obeys those: `ESC ]0;…BEL` sets the window title,
//! `ESC [2J` clears the screen, OSC 52 writes the clipboard on some terminals, a carriage
//! return or backspaces overwrite what was shown, and the C1 forms (U+009B is a one-character
//! CSI) do the same without an ESC. Stripping known sequences once is not enough: nested
//! ones rebuild working sequences. So nothing is parsed here; every control character is
//! made *visible* instead, which cannot be undone by nesting.
//!
//! Two steps, both at the renderer boundary:
//!
//! 1. [`sanitized`] copies a diagnosis with every string in it made visible ([`visible`]).
//!    The text renderers (human, markdown, github) start from that copy, so the colour codes
//!    they add themselves are the only escape sequences in their output. Every struct is
//!    destructured field by field, so a field added to the report later does not compile
//!    until it is handled here.
//! 2. [`guard`] runs over the final text on its way out (stdout, `--output`, stderr) and
//!    makes visible whatever control character is still there, keeping only plain SGR colour
//!    codes (`ESC [ digits ; m`) where the output is coloured, and using the format's own
//!    lossless escape in JSON and XML. This is the guarantee for every format and every
//!    command (`plan`, `explain`, `rules`, errors on stderr), including any text that did
//!    not go through step 1.
//!
//! Tab stays as it is. Newline, carriage return and the other C0 characters become their
//! Unicode control pictures (`␛`, `␍`, `␊`); DEL becomes `␡`; C1 characters and the bidi
//! controls that reorder what is shown (the "Trojan source" characters) become `\u{9b}`.

use std::borrow::Cow;
use std::sync::Arc;

use crate::diagnosis::report::{
    Alternative, Diagnosis, EvidenceItem, Excerpt, FixReport, IncidentReport, InputErrorReport,
    InputReport, Location, SkippedInput,
};
use crate::diagnosis::rules::FixValue;
use crate::facts::evidence::{Fact, Facts, Provenance, Value};
use crate::render::plot::{
    CategoryBytes, LeakPlot, Segment, SeriesMark, SeriesPlot, SiteBytes, SnapshotPlot,
};

/// Whether a character must not reach a terminal as it is: the C0 controls but the tab,
/// DEL, the C1 controls, and the marks that reorder text (U+061C, U+200E-U+200F,
/// U+202A-U+202E, U+2066-U+2069). Told from its UTF-8 bytes by [`unsafe_at`], the one
/// definition, which the scan of whole texts ([`any_unsafe`]) reads byte by byte.
pub fn is_unsafe(c: char) -> bool {
    let mut utf8 = [0u8; 4];
    unsafe_at(c.encode_utf8(&mut utf8).as_bytes(), 0, false)
}

/// Whether `s` holds any character [`is_unsafe`] refuses.
fn has_unsafe(s: &str) -> bool {
    any_unsafe(s, false)
}

/// Whether `s` holds a character [`is_unsafe`] refuses (a newline let through when
/// `newline_ok`), read as bytes: 32-byte pieces of printable ASCII are passed by one test
/// that compiles to vector compares, and only other pieces are looked at byte by byte, each
/// unsafe character told by its UTF-8 bytes. (Decoding every character of a directory's
/// 40 MB JSON report cost as much as serialising it.)
fn any_unsafe(s: &str, newline_ok: bool) -> bool {
    let b = s.as_bytes();
    b.chunks(32).enumerate().any(|(k, piece)| {
        let plain = piece.iter().fold(true, |ok, &c| {
            ok & ((c.wrapping_sub(0x20) < 0x5f) | (c == b'\t') | ((c == b'\n') & newline_ok))
        });
        !plain && (k * 32..k * 32 + piece.len()).any(|j| unsafe_at(b, j, newline_ok))
    })
}

/// Whether the character that starts at `b[j]` (UTF-8) is unsafe; continuation bytes say no.
fn unsafe_at(b: &[u8], j: usize, newline_ok: bool) -> bool {
    match b[j] {
        b'\t' => false,
        b'\n' => !newline_ok,
        0..=0x1f | 0x7f => true,
        // U+0080-U+009F (C1 controls).
        0xc2 => matches!(b.get(j + 1), Some(0x80..=0x9f)),
        // U+061C (Arabic letter mark).
        0xd8 => b.get(j + 1) == Some(&0x9c),
        // U+200E-U+200F, U+202A-U+202E, U+2066-U+2069 (direction marks and overrides).
        0xe2 => matches!(
            (b.get(j + 1), b.get(j + 2)),
            (Some(0x80), Some(0x8e | 0x8f | 0xaa..=0xae)) | (Some(0x81), Some(0xa6..=0xa9))
        ),
        _ => false,
    }
}

/// Appends the visible form of an unsafe character.
fn push_visible(out: &mut String, c: char) {
    let u = c as u32;
    match u {
        0x00..=0x1f => out.push(char::from_u32(0x2400 + u).unwrap_or('\u{fffd}')),
        0x7f => out.push('\u{2421}'),
        _ => {
            use std::fmt::Write as _;
            let _ = write!(out, "\\u{{{u:x}}}");
        }
    }
}

/// `s` with every control character (tab aside) made visible; borrowed when there is none.
pub fn visible(s: &str) -> Cow<'_, str> {
    if !has_unsafe(s) {
        return Cow::Borrowed(s);
    }
    let mut out = String::with_capacity(s.len() + 8);
    for c in s.chars() {
        if is_unsafe(c) {
            push_visible(&mut out, c);
        } else {
            out.push(c);
        }
    }
    Cow::Owned(out)
}

/// Like [`visible`], and moves a byte range of `s` (a labelled number) to where the same
/// text lies in the result.
fn visible_spanned(s: &str, span: Option<(usize, usize)>) -> (String, Option<(usize, usize)>) {
    if !has_unsafe(s) {
        return (s.to_string(), span);
    }
    let mut out = String::with_capacity(s.len() + 8);
    let (mut lo, mut hi) = (None, None);
    for (i, c) in s.char_indices() {
        if let Some((a, b)) = span {
            if i == a {
                lo = Some(out.len());
            }
            if i == b {
                hi = Some(out.len());
            }
        }
        if is_unsafe(c) {
            push_visible(&mut out, c);
        } else {
            out.push(c);
        }
    }
    if let Some((a, b)) = span {
        if a == s.len() {
            lo = Some(out.len());
        }
        if b == s.len() {
            hi = Some(out.len());
        }
    }
    let span = match (lo, hi) {
        (Some(a), Some(b)) if a <= b => Some((a, b)),
        _ => None,
    };
    (out, span)
}

/// Makes every string of a value visible in place.
trait Sanitize {
    fn sanitize(&mut self);
}

impl Sanitize for String {
    fn sanitize(&mut self) {
        if let Cow::Owned(s) = visible(self) {
            *self = s;
        }
    }
}

impl Sanitize for Arc<str> {
    fn sanitize(&mut self) {
        if let Cow::Owned(s) = visible(self) {
            *self = Arc::from(s);
        }
    }
}

impl<T: Sanitize> Sanitize for Option<T> {
    fn sanitize(&mut self) {
        if let Some(v) = self {
            v.sanitize();
        }
    }
}

impl<T: Sanitize> Sanitize for Vec<T> {
    fn sanitize(&mut self) {
        self.iter_mut().for_each(Sanitize::sanitize);
    }
}

impl Sanitize for Value {
    fn sanitize(&mut self) {
        if let Value::Str(s) = self {
            s.sanitize();
        }
    }
}

impl Sanitize for Provenance {
    fn sanitize(&mut self) {
        let Provenance {
            input,
            line: _,
            text,
            span,
            locator,
        } = self;
        input.sanitize();
        locator.sanitize();
        if let Some(t) = text {
            if has_unsafe(t) {
                let (s, moved) = visible_spanned(t, *span);
                *t = Arc::from(s);
                *span = moved;
            }
        }
    }
}

impl Sanitize for Fact {
    fn sanitize(&mut self) {
        let Fact { value, sources } = self;
        value.sanitize();
        sources.sanitize();
    }
}

impl Sanitize for Facts {
    fn sanitize(&mut self) {
        // Fact names are the catalogue's, never input text.
        self.values_mut().for_each(Sanitize::sanitize);
    }
}

impl Sanitize for Location {
    fn sanitize(&mut self) {
        let Location { input, line: _ } = self;
        input.sanitize();
    }
}

impl Sanitize for EvidenceItem {
    fn sanitize(&mut self) {
        let EvidenceItem {
            text,
            weight: _,
            input,
            line: _,
            facts,
            sources,
        } = self;
        text.sanitize();
        input.sanitize();
        facts.sanitize();
        sources.sanitize();
    }
}

impl Sanitize for Alternative {
    fn sanitize(&mut self) {
        let Alternative {
            cause: _,
            confidence: _,
            rule,
            summary,
            evidence,
        } = self;
        rule.sanitize();
        summary.sanitize();
        evidence.sanitize();
    }
}

impl Sanitize for FixValue {
    fn sanitize(&mut self) {
        let FixValue {
            expr,
            value,
            display,
            from,
        } = self;
        expr.sanitize();
        value.sanitize();
        display.sanitize();
        // `FixValueFact` is not exported by the rules module, so its fields are reached
        // by name here rather than destructured.
        for f in from {
            f.fact.sanitize();
            f.value.sanitize();
            f.sources.sanitize();
        }
    }
}

impl Sanitize for FixReport {
    fn sanitize(&mut self) {
        let FixReport {
            rank: _,
            title,
            action,
            why,
            kind: _,
            cause: _,
            rule,
            knob,
            direction: _,
            values,
        } = self;
        title.sanitize();
        action.sanitize();
        why.sanitize();
        rule.sanitize();
        knob.sanitize();
        values.sanitize();
    }
}

impl Sanitize for IncidentReport {
    fn sanitize(&mut self) {
        let IncidentReport {
            id: _,
            cause: _,
            confidence: _,
            determined: _,
            settle,
            title,
            summary,
            rule,
            fingerprint,
            engine,
            phase,
            kind,
            device: _,
            devices: _,
            ranks: _,
            copies: _,
            requested_bytes: _,
            location,
            timestamp,
            evidence,
            alternatives,
            fixes,
            facts,
        } = self;
        for s in [title, summary, rule, fingerprint, engine, phase, kind] {
            s.sanitize();
        }
        location.sanitize();
        timestamp.sanitize();
        settle.sanitize();
        evidence.sanitize();
        alternatives.sanitize();
        fixes.sanitize();
        facts.sanitize();
    }
}

impl Sanitize for InputReport {
    fn sanitize(&mut self) {
        let InputReport {
            name,
            kind: _,
            bytes: _,
            lines: _,
            compressed: _,
            incidents: _,
            warnings,
        } = self;
        name.sanitize();
        warnings.sanitize();
    }
}

impl Sanitize for InputErrorReport {
    fn sanitize(&mut self) {
        let InputErrorReport { input, message } = self;
        input.sanitize();
        message.sanitize();
    }
}

impl Sanitize for Excerpt {
    fn sanitize(&mut self) {
        let Excerpt {
            input,
            line: _,
            text,
        } = self;
        input.sanitize();
        text.sanitize();
    }
}

impl Sanitize for SkippedInput {
    fn sanitize(&mut self) {
        let SkippedInput {
            input,
            kind,
            reason,
        } = self;
        input.sanitize();
        kind.sanitize();
        reason.sanitize();
    }
}

impl Sanitize for SeriesMark {
    fn sanitize(&mut self) {
        let SeriesMark {
            t: _,
            label,
            kind: _,
        } = self;
        label.sanitize();
    }
}

impl Sanitize for SeriesPlot {
    fn sanitize(&mut self) {
        let SeriesPlot {
            input,
            device: _,
            label,
            start,
            points: _,
            total_bytes: _,
            marks,
        } = self;
        input.sanitize();
        label.sanitize();
        start.sanitize();
        marks.sanitize();
    }
}

impl Sanitize for Segment {
    fn sanitize(&mut self) {
        let Segment {
            address: _,
            size: _,
            pool,
            blocks: _,
        } = self;
        pool.sanitize();
    }
}

impl Sanitize for CategoryBytes {
    fn sanitize(&mut self) {
        let CategoryBytes { name, bytes: _ } = self;
        name.sanitize();
    }
}

impl Sanitize for SiteBytes {
    fn sanitize(&mut self) {
        let SiteBytes {
            site,
            bytes: _,
            count: _,
        } = self;
        site.sanitize();
    }
}

impl Sanitize for LeakPlot {
    fn sanitize(&mut self) {
        let LeakPlot {
            steps: _,
            slope_bytes_per_step: _,
            growth_bytes: _,
            site,
        } = self;
        site.sanitize();
    }
}

impl Sanitize for SnapshotPlot {
    fn sanitize(&mut self) {
        let SnapshotPlot {
            input,
            device: _,
            total_bytes: _,
            segments,
            largest_free_block: _,
            request: _,
            categories,
            top_sites,
            generation,
            moment,
            replayed: _,
            live_bytes: _,
            peak_live_bytes: _,
            fragmented_free_bytes: _,
            releasable_cache_bytes: _,
            omitted_segments: _,
            leak,
        } = self;
        input.sanitize();
        segments.sanitize();
        categories.sanitize();
        top_sites.sanitize();
        generation.sanitize();
        moment.sanitize();
        leak.sanitize();
    }
}

/// A copy of the diagnosis in which no string holds a control character (tab aside): what
/// the text renderers print from.
pub fn sanitized(d: &Diagnosis) -> Diagnosis {
    let mut d = d.clone();
    let Diagnosis {
        schema_version: _,
        tool: _,
        inputs,
        incidents,
        errors,
        excerpts,
        skipped,
        series,
        snapshots,
        repeats,
    } = &mut d;
    inputs.sanitize();
    incidents.sanitize();
    errors.sanitize();
    excerpts.sanitize();
    skipped.sanitize();
    series.sanitize();
    snapshots.sanitize();
    for r in repeats.iter_mut() {
        r.fingerprint.sanitize();
        r.locations.sanitize();
    }
    d
}

/// What kind of text [`guard`] is looking at, which decides how a control character is
/// escaped.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Sink {
    /// Plain text (human without colour, markdown, GitHub commands, listings).
    Text,
    /// Coloured text: our own SGR colour codes stay, nothing else.
    Colored,
    /// JSON (the report, SARIF, `plan --format json`): a raw control character can only be
    /// inside a string, where `\u00XX` means the same character.
    Json,
    /// XML and HTML: CR, C1 and DEL as character references; the other C0 characters
    /// (illegal in XML 1.0, even as references) as U+FFFD.
    Xml,
}

/// Whether `s` starts with an SGR sequence (`ESC [`, digits and `;`, `m`); its length.
fn sgr_len(s: &str) -> Option<usize> {
    let rest = s.strip_prefix("\x1b[")?;
    let n = rest
        .bytes()
        .take_while(|b| b.is_ascii_digit() || *b == b';')
        .count();
    (rest.as_bytes().get(n) == Some(&b'm')).then_some(2 + n + 1)
}

/// The final text with every control character still in it escaped for `sink`; newlines
/// (and tabs) are the output's own and stay.
pub fn guard(text: &str, sink: Sink) -> Cow<'_, str> {
    let bad = |c: char| c != '\n' && is_unsafe(c);
    if !any_unsafe(text, true) {
        return Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 16);
    let mut rest = text;
    while let Some(c) = rest.chars().next() {
        if sink == Sink::Colored && c == '\x1b' {
            if let Some(n) = sgr_len(rest) {
                out.push_str(&rest[..n]);
                rest = &rest[n..];
                continue;
            }
        }
        if bad(c) {
            let u = c as u32;
            match sink {
                Sink::Text | Sink::Colored => push_visible(&mut out, c),
                Sink::Json => {
                    use std::fmt::Write as _;
                    let _ = write!(out, "\\u{u:04x}");
                }
                Sink::Xml if u < 0x20 && c != '\r' => out.push('\u{fffd}'),
                Sink::Xml => {
                    use std::fmt::Write as _;
                    let _ = write!(out, "&#x{u:x};");
                }
            }
        } else {
            out.push(c);
        }
        rest = &rest[c.len_utf8()..];
    }
    Cow::Owned(out)
}

/// A diagnostic whose message, help, labels and related diagnostics are made visible
/// before miette draws them (errors quote file names and values from inputs).
pub struct SafeDiagnostic<'a>(pub &'a dyn miette::Diagnostic);

impl SafeDiagnostic<'_> {
    /// Whether this diagnostic must be drawn without colour: it quotes source text (a rule
    /// file), which miette prints as it is, or carries related diagnostics, whose text this
    /// wrapper cannot reach. Without colour, [`guard`] lets no escape sequence through.
    pub fn needs_plain(&self) -> bool {
        self.0.source_code().is_some()
            || self.0.related().is_some()
            || self.0.diagnostic_source().is_some()
    }
}

impl std::fmt::Debug for SafeDiagnostic<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&visible(&format!("{:?}", self.0)))
    }
}

impl std::fmt::Display for SafeDiagnostic<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&visible(&self.0.to_string()))
    }
}

impl std::error::Error for SafeDiagnostic<'_> {}

/// A piece of text to show, made visible.
struct Shown(String);

impl std::fmt::Display for Shown {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl miette::Diagnostic for SafeDiagnostic<'_> {
    fn code<'b>(&'b self) -> Option<Box<dyn std::fmt::Display + 'b>> {
        self.0
            .code()
            .map(|c| Box::new(Shown(visible(&c.to_string()).into_owned())) as _)
    }
    fn severity(&self) -> Option<miette::Severity> {
        self.0.severity()
    }
    fn help<'b>(&'b self) -> Option<Box<dyn std::fmt::Display + 'b>> {
        self.0
            .help()
            .map(|c| Box::new(Shown(visible(&c.to_string()).into_owned())) as _)
    }
    fn url<'b>(&'b self) -> Option<Box<dyn std::fmt::Display + 'b>> {
        self.0
            .url()
            .map(|c| Box::new(Shown(visible(&c.to_string()).into_owned())) as _)
    }
    fn source_code(&self) -> Option<&dyn miette::SourceCode> {
        self.0.source_code()
    }
    fn labels(&self) -> Option<Box<dyn Iterator<Item = miette::LabeledSpan> + '_>> {
        self.0.labels().map(|ls| {
            Box::new(ls.map(|l| {
                let text = l.label().map(|t| visible(t).into_owned());
                if l.primary() {
                    miette::LabeledSpan::new_primary_with_span(text, *l.inner())
                } else {
                    miette::LabeledSpan::new_with_span(text, *l.inner())
                }
            })) as _
        })
    }
    fn related<'b>(&'b self) -> Option<Box<dyn Iterator<Item = &'b dyn miette::Diagnostic> + 'b>> {
        // miette needs references it can hold, so these are not wrapped; `needs_plain`
        // turns colour off for them and the guard makes their text visible.
        self.0.related()
    }
    fn diagnostic_source(&self) -> Option<&dyn miette::Diagnostic> {
        self.0.diagnostic_source()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn controls_become_visible_and_tab_stays() {
        assert_eq!(visible("a\tb"), "a\tb");
        assert_eq!(visible("\x1b[2J\x07\x08\r\n\x7f"), "␛[2J␇␈␍␊␡");
        assert_eq!(visible("x\u{9b}2Jy\u{202e}"), "x\\u{9b}2Jy\\u{202e}");
    }

    #[test]
    fn nested_sequences_cannot_rebuild_a_working_one() {
        let hostile = "\x1b\x1b[0m]0;title\x07 \x1b[\x1b]52;c;aGk=\x07 \u{9d}0;t\u{9c}";
        let v = visible(hostile);
        assert!(!v.chars().any(is_unsafe), "{v}");
        // Where colour codes are allowed, the only ESC left starts a plain SGR code (the
        // `ESC[0m` inside the nest, which only resets colours).
        let g = guard(hostile, Sink::Colored);
        for (i, _) in g.match_indices('\x1b') {
            assert!(sgr_len(&g[i..]).is_some(), "{g}");
        }
        assert!(!g.contains('\x07') && !g.contains('\u{9d}'), "{g}");
    }

    #[test]
    fn spans_follow_the_text_they_label() {
        let (s, span) = visible_spanned("\x1b[1mOOM 20.00 GiB", Some((8, 13)));
        assert_eq!(s, "␛[1mOOM 20.00 GiB");
        let (a, b) = span.unwrap();
        assert_eq!(&s[a..b], "20.00");
    }

    /// The set of unsafe characters, written by code point: what the byte tests must say.
    fn unsafe_by_code_point(c: char) -> bool {
        let u = c as u32;
        (u < 0x20 && c != '\t')
            || (0x7f..=0x9f).contains(&u)
            || matches!(u, 0x061c | 0x200e | 0x200f | 0x202a..=0x202e | 0x2066..=0x2069)
    }

    /// The byte tests say what the set written by code point says: for each code point below
    /// U+3000 and around U+10000, alone ([`is_unsafe`]) and inside text at every offset of a
    /// 32-byte piece ([`any_unsafe`]), with and without newlines let through.
    #[test]
    fn the_byte_test_agrees_with_is_unsafe() {
        for u in (0..0x3000u32).chain(0xfff0..0x10100) {
            let Some(c) = char::from_u32(u) else { continue };
            assert_eq!(is_unsafe(c), unsafe_by_code_point(c), "U+{u:04X}");
            for pad in [0usize, 1, 30, 31, 32, 33] {
                let text = format!("{}{c}tail", "x".repeat(pad));
                for newline_ok in [false, true] {
                    let want = text
                        .chars()
                        .any(|ch| unsafe_by_code_point(ch) && !(newline_ok && ch == '\n'));
                    assert_eq!(any_unsafe(&text, newline_ok), want, "U+{u:04X} at {pad}");
                }
            }
        }
        // A multi-byte character cut by a piece boundary, then an unsafe one.
        let text = format!("{}█\u{202e}", "y".repeat(31));
        assert!(any_unsafe(&text, true));
        assert!(!any_unsafe(&format!("{}█ok\n", "y".repeat(31)), true));
        assert!(any_unsafe(&format!("{}█ok\n", "y".repeat(31)), false));
    }

    #[test]
    fn guard_keeps_only_plain_colour_codes() {
        assert_eq!(
            guard("\x1b[1;31mred\x1b[0m\n", Sink::Colored),
            "\x1b[1;31mred\x1b[0m\n"
        );
        assert_eq!(guard("\x1b[1;31mred", Sink::Text), "␛[1;31mred");
        assert_eq!(guard("\x1b]0;t\x07", Sink::Colored), "␛]0;t␇");
        assert_eq!(guard("\x1b[?1049h", Sink::Colored), "␛[?1049h");
    }

    #[test]
    fn guard_escapes_losslessly_in_json_and_xml() {
        let j = guard("{\"a\":\"x\u{9b}y\u{7f}\"}", Sink::Json);
        assert_eq!(j, "{\"a\":\"x\\u009by\\u007f\"}");
        let v: serde_json::Value = serde_json::from_str(&j).unwrap();
        assert_eq!(v["a"], "x\u{9b}y\u{7f}");
        assert_eq!(guard("<a>\u{9b}</a>", Sink::Xml), "<a>&#x9b;</a>");
    }
}
