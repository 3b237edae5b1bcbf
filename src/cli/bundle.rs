//! `oomdoctor bundle`: the diagnosis plus excerpts and the environment, redacted, as one
//! report to attach to an issue.

use super::app::*;
use super::diagnose::{DiagnoseOptions, analyze};
use crate::cli::{BundleArgs, BundleFormat};
use crate::input::{self, InputKind};
use crate::render::terminal::Sink;
use crate::render::{self};
use std::io;
use std::path::Path;

pub(crate) fn bundle_command(args: &BundleArgs, io: &mut Io<'_>) -> Exit {
    let Some(rules) = load_rules(&args.rules, io) else {
        return Exit::Error;
    };
    let mut redact = Vec::new();
    for p in &args.redact {
        match regex::Regex::new(p) {
            Ok(r) => redact.push(r),
            Err(e) => {
                let _ = writeln!(
                    io.stderr,
                    "error: --redact {p:?} is not a regular expression: {e}"
                );
                return Exit::Error;
            }
        }
    }
    let Some(inputs) = inputs_or_stdin(
        &args.inputs,
        io,
        "oomdoctor bundle: no input. Name the crash log (`oomdoctor bundle crash.log -o report.md`) or pipe it in.",
    ) else {
        return Exit::Error;
    };
    if let Err(e) = check_output(args.output.as_deref(), &inputs, None) {
        report_error(io, &e);
        return Exit::Error;
    }
    // A bundle is for a bug report: an input this build cannot analyse (a snapshot, say) is
    // mentioned, not fatal.
    let opts = DiagnoseOptions {
        stdin_name: args.stdin_name.clone(),
        input_kind: args.input_kind,
        skip_unsupported: true,
        filter: crate::input::walk::Filter {
            include: args.glob.clone(),
            exclude: args.exclude.clone(),
        },
        ..DiagnoseOptions::default()
    };
    let stdin = io.stdin.take();
    let a = analyze(&inputs, &rules, &opts, stdin);
    for e in &a.errors {
        report_error(io, e);
    }
    let d = &a.diagnosis;
    let sources: Vec<crate::bundle::Source<'_>> = a
        .files
        .iter()
        .filter(|(_, k)| *k == InputKind::Log)
        .map(|(name, _)| {
            let path = name.clone();
            crate::bundle::Source {
                name: name.clone(),
                open: Box::new(move || {
                    input::open(&path, Box::new(io::empty()), "", Some(InputKind::Log))
                        .map(|o| -> Box<dyn io::Read> { o.reader })
                        .map_err(|e| io::Error::other(e.to_string()))
                }),
            }
        })
        .collect();
    let snapshots: Vec<String> = a
        .files
        .iter()
        .filter(|(_, k)| *k == InputKind::Snapshot)
        .map(|(n, _)| n.clone())
        .collect();
    let extras = crate::bundle::gather(d, &sources, &snapshots);
    let text = match args.format {
        BundleFormat::Markdown => crate::bundle::markdown_with(d, &extras, &redact),
        BundleFormat::Json => crate::bundle::json_with(d, &extras, &redact),
    };
    let status = if d.errors.is_empty() {
        Exit::Clean
    } else {
        Exit::Error
    };
    let sink = match args.format {
        BundleFormat::Markdown => Sink::Text,
        BundleFormat::Json => Sink::Json,
    };
    let status = deliver(io, args.output.as_deref(), &text, sink, status);
    if let Some(p) = args.output.as_deref().filter(|p| *p != Path::new("-")) {
        if p.exists() {
            let _ = writeln!(
                io.stderr,
                "oomdoctor: wrote {} ({}); read it before you post it",
                render::terminal::visible(&p.display().to_string()),
                crate::render::text::count(d.incidents.len(), "incident")
            );
        }
    }
    status
}
