//! Directory inputs: every file under a directory, in a stable order, and reading many
//! inputs at once.
//!
//! A CI job leaves a directory of logs (one per rank, per restart, per service), maybe a
//! snapshot and a memory series beside them. `oomdoctor runs/` reads them all. The walk
//! skips hidden entries (`.git`, `.cache`) and does not follow symbolic links to
//! directories (no loops); what each file is, is decided later from its content, like any
//! other input. [`parallel_map`] runs the per-file work on a few threads and returns the
//! results in input order, so output does not depend on scheduling.

use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};

/// Deepest directory level the walk enters.
pub const MAX_DEPTH: usize = 32;
/// Most files taken from one directory input; the rest are reported as skipped.
pub const MAX_FILES: usize = 100_000;

/// What a directory walk found.
#[derive(Debug, Default, PartialEq)]
pub struct Walk {
    /// Files, sorted by path.
    pub files: Vec<PathBuf>,
    /// Entries left out, with why.
    pub skipped: Vec<(PathBuf, String)>,
}

fn hidden(p: &Path) -> bool {
    p.file_name()
        .and_then(|n| n.to_str())
        .is_some_and(|n| n.starts_with('.'))
}

/// Lists the files under `dir`. An unreadable subdirectory is skipped with a note; an
/// unreadable `dir` itself is an error.
pub fn walk(dir: &Path) -> std::io::Result<Walk> {
    let mut out = Walk::default();
    // Explicit stack: depth is bounded and no recursion depends on the tree.
    let mut stack: Vec<(PathBuf, usize)> = vec![(dir.to_path_buf(), 0)];
    let mut first = true;
    while let Some((d, depth)) = stack.pop() {
        let entries = match std::fs::read_dir(&d) {
            Ok(e) => e,
            Err(e) if first => return Err(e),
            Err(e) => {
                out.skipped.push((d, format!("cannot read directory: {e}")));
                continue;
            }
        };
        first = false;
        let mut paths: Vec<PathBuf> = entries.filter_map(|e| e.ok().map(|e| e.path())).collect();
        paths.sort();
        let mut subdirs = Vec::new();
        for p in paths {
            if hidden(&p) {
                continue;
            }
            let Ok(meta) = std::fs::symlink_metadata(&p) else {
                continue;
            };
            let ft = meta.file_type();
            if ft.is_dir() {
                if depth + 1 >= MAX_DEPTH {
                    out.skipped.push((p, "too deep".into()));
                } else {
                    subdirs.push(p);
                }
            } else if ft.is_file() || (ft.is_symlink() && p.is_file()) {
                if out.files.len() >= MAX_FILES {
                    out.skipped
                        .push((p, format!("more than {MAX_FILES} files")));
                } else {
                    out.files.push(p);
                }
            }
        }
        // Reverse so the stack pops them in name order.
        for s in subdirs.into_iter().rev() {
            stack.push((s, depth + 1));
        }
    }
    out.files.sort();
    Ok(out)
}

/// Whether the first bytes of an input (after gzip and UTF-16 decoding) are binary data
/// rather than text: a NUL byte, or mostly control characters. Escape (colour codes),
/// tabs, CR and form feeds are text.
pub fn looks_binary(head: &[u8]) -> bool {
    let sample = &head[..head.len().min(8192)];
    if sample.is_empty() {
        return false;
    }
    if memchr::memchr(0, sample).is_some() {
        return true;
    }
    let control = sample
        .iter()
        .filter(|b| **b < 0x20 && !matches!(**b, b'\n' | b'\r' | b'\t' | 0x0c | 0x1b))
        .count();
    control * 10 > sample.len()
}

/// Whether a file's first bytes are a report oomdoctor wrote (any `--format`, or a
/// bundle). A report saved into the directory it diagnosed quotes the log lines it found;
/// read again on the next run, it would add each incident once more (1, 2, 4, ...).
pub fn is_own_report(head: &[u8]) -> bool {
    let text = String::from_utf8_lossy(&head[..head.len().min(4096)]);
    let first = text.lines().next().unwrap_or("");
    let heading = first.trim_start_matches('#').trim_start();
    (first.starts_with("oomdoctor: ") && first.contains(" incident"))
        || first.starts_with("✓ no out-of-memory incident found in ")
        || (first.starts_with('#') && heading.starts_with("oomdoctor"))
        || (first.starts_with("::") && text.contains("title=oomdoctor"))
        || (first.starts_with('{')
            && (text.contains("\"name\": \"oomdoctor\"") || text.contains("sarif-schema")))
        || text.contains("<testsuites name=\"oomdoctor\"")
        || text.contains("<meta name=\"generator\" content=\"oomdoctor")
}

/// Threads used for reading inputs: the machine's parallelism, at most 8.
pub fn threads() -> usize {
    std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(2)
        .clamp(1, 8)
}

/// Applies `f` to every item on up to `threads` threads; results come back in item order.
pub fn parallel_map<T: Sync, R: Send>(
    items: &[T],
    threads: usize,
    f: impl Fn(&T) -> R + Sync,
) -> Vec<R> {
    if items.len() <= 1 || threads <= 1 {
        return items.iter().map(f).collect();
    }
    let next = AtomicUsize::new(0);
    let results: Mutex<Vec<(usize, R)>> = Mutex::new(Vec::with_capacity(items.len()));
    std::thread::scope(|s| {
        for _ in 0..threads.min(items.len()) {
            s.spawn(|| {
                loop {
                    let i = next.fetch_add(1, Ordering::Relaxed);
                    let Some(item) = items.get(i) else { break };
                    let r = f(item);
                    if let Ok(mut v) = results.lock() {
                        v.push((i, r));
                    }
                }
            });
        }
    });
    let mut v = results.into_inner().unwrap_or_else(|e| e.into_inner());
    v.sort_by_key(|(i, _)| *i);
    v.into_iter().map(|(_, r)| r).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn walks_in_order_and_skips_hidden() {
        let root = std::env::temp_dir().join(format!("oomdoctor-walk-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&root);
        std::fs::create_dir_all(root.join("b/deeper")).unwrap();
        std::fs::create_dir_all(root.join(".git")).unwrap();
        std::fs::write(root.join("z.log"), "z").unwrap();
        std::fs::write(root.join("a.log"), "a").unwrap();
        std::fs::write(root.join(".hidden.log"), "h").unwrap();
        std::fs::write(root.join(".git/HEAD"), "ref").unwrap();
        std::fs::write(root.join("b/deeper/c.log"), "c").unwrap();
        let w = walk(&root).unwrap();
        let names: Vec<String> = w
            .files
            .iter()
            .map(|p| p.strip_prefix(&root).unwrap().display().to_string())
            .collect();
        assert_eq!(names, vec!["a.log", "b/deeper/c.log", "z.log"]);
        assert!(walk(&root.join("missing")).is_err());
        let _ = std::fs::remove_dir_all(&root);
    }

    #[test]
    fn binary_is_told_from_text() {
        assert!(!looks_binary(b"step 1\r\n\x1b[31mred\x1b[0m\tok\n"));
        assert!(looks_binary(b"PK\x03\x04\x00\x00binary"));
        assert!(looks_binary(&[1, 2, 3, 4, 5, 6, 7, 8, 65, 66]));
        assert!(!looks_binary(b""));
    }

    #[test]
    fn parallel_map_keeps_order() {
        let items: Vec<u64> = (0..100).collect();
        let out = parallel_map(&items, 4, |x| x * 2);
        assert_eq!(out, (0..100).map(|x| x * 2).collect::<Vec<_>>());
    }
}
