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

/// Which files of a directory input to read: `--glob` (include) and `--exclude` patterns.
///
/// A pattern without `/` matches a file's (or directory's) name, like a `.gitignore` line;
/// one with `/` matches the path relative to the directory input. `*` matches within a
/// path segment, `**` across segments, `?` one character.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Filter {
    pub include: Vec<String>,
    pub exclude: Vec<String>,
}

impl Filter {
    fn matches_any(patterns: &[String], rel: &str) -> bool {
        let name = rel.rsplit('/').next().unwrap_or(rel);
        patterns.iter().any(|p| {
            let p = p.trim_start_matches("./");
            if p.contains('/') {
                glob_match(p.trim_start_matches('/').as_bytes(), rel.as_bytes())
            } else {
                glob_match(p.as_bytes(), name.as_bytes())
            }
        })
    }

    /// Whether a file at `rel` (relative to the directory input, `/`-separated) is read.
    pub fn takes_file(&self, rel: &str) -> bool {
        (self.include.is_empty() || Self::matches_any(&self.include, rel))
            && !Self::matches_any(&self.exclude, rel)
    }

    /// Whether the walk enters the directory at `rel`.
    pub fn enters_dir(&self, rel: &str) -> bool {
        !Self::matches_any(&self.exclude, rel)
    }
}

/// Glob matching over bytes: `*` (not across `/`), `**` (across `/`), `?`, literals.
/// Iterative with backtracking points, so no pattern makes it recurse.
pub fn glob_match(pat: &[u8], text: &[u8]) -> bool {
    let (mut p, mut t) = (0usize, 0usize);
    // Where to resume when the last `*` (within a segment) or `**` (across segments) must
    // eat one more byte: (pattern index after it, text index it started eating at).
    let mut star: Option<(usize, usize)> = None;
    let mut double: Option<(usize, usize)> = None;
    while t < text.len() {
        if pat.get(p) == Some(&b'*') {
            if pat.get(p + 1) == Some(&b'*') {
                let mut next = p + 2;
                // `**/` also matches no directory at all.
                if pat.get(next) == Some(&b'/') {
                    next += 1;
                }
                double = Some((next, t));
                star = None;
                p = next;
            } else {
                star = Some((p + 1, t));
                p += 1;
            }
            continue;
        }
        if p < pat.len() && (pat[p] == b'?' && text[t] != b'/' || pat[p] == text[t]) {
            p += 1;
            t += 1;
            continue;
        }
        match (star, double) {
            (Some((sp, st)), _) if text[st] != b'/' => {
                star = Some((sp, st + 1));
                p = sp;
                t = st + 1;
            }
            (_, Some((dp, dt))) => {
                double = Some((dp, dt + 1));
                star = None;
                p = dp;
                t = dt + 1;
            }
            _ => return false,
        }
    }
    while pat.get(p) == Some(&b'*') {
        p += 1;
    }
    p == pat.len()
}

/// Lists the files under `dir`. An unreadable subdirectory is skipped with a note; an
/// unreadable `dir` itself is an error.
pub fn walk(dir: &Path) -> std::io::Result<Walk> {
    walk_filtered(dir, &Filter::default())
}

/// [`walk`], keeping only what `filter` takes.
pub fn walk_filtered(dir: &Path, filter: &Filter) -> std::io::Result<Walk> {
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
        // The entry's own type (`d_type` on Linux): a `stat` per file only where the file
        // system leaves it out, not 10,000 of them for a directory of logs.
        let mut paths: Vec<(PathBuf, std::fs::FileType)> = entries
            .filter_map(|e| {
                let e = e.ok()?;
                Some((e.path(), e.file_type().ok()?))
            })
            .collect();
        paths.sort_by(|a, b| a.0.cmp(&b.0));
        let mut subdirs = Vec::new();
        for (p, ft) in paths {
            if hidden(&p) {
                continue;
            }
            let rel = p
                .strip_prefix(dir)
                .unwrap_or(&p)
                .to_string_lossy()
                .replace('\\', "/");
            if ft.is_dir() && !filter.enters_dir(&rel) {
                continue;
            }
            if !ft.is_dir() && !filter.takes_file(&rel) {
                continue;
            }
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
    // Control bytes that are not text: all below 0x20 less the five text ones. Counted with
    // comparisons only, in 255-byte pieces with a byte-sized sum, so the loop compiles to
    // vector compares (this runs on every file of a directory; a per-byte table lookup or
    // shift made it cost more than a small file's scan).
    let control: usize = sample
        .chunks(255)
        .map(|piece| {
            let n = piece.iter().fold(0u8, |n, &b| {
                let text = (b == b'\n') | (b == b'\r') | (b == b'\t') | (b == 0x0c) | (b == 0x1b);
                n + u8::from((b < 0x20) & !text)
            });
            usize::from(n)
        })
        .sum();
    control * 10 > sample.len()
}

/// Whether a file's first bytes are a report oomdoctor wrote (any `--format`, or a
/// bundle). A report saved into the directory it diagnosed quotes the log lines it found;
/// read again on the next run, it would add each incident once more (1, 2, 4, ...).
pub fn is_own_report(head: &[u8]) -> bool {
    // Every report starts with one of these bytes (`✓` is E2 in UTF-8). Checked first
    // because this runs on every file of a directory, nearly all of them logs.
    if !matches!(head.first(), Some(b'o' | 0xE2 | b'#' | b':' | b'{' | b'<')) {
        return false;
    }
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

/// Runs `a` and `b` side by side when `side_by_side` and the process may use a second core
/// (`a` on a thread of its own, `b` on this one), else one after the other here; returns
/// both results. A thread that cannot be started (a process limit) is not an error: `a`
/// then runs here. A panic in `a` is raised again on this thread.
pub fn join<A: Send, B>(
    side_by_side: bool,
    a: impl FnOnce() -> A + Send,
    b: impl FnOnce() -> B,
) -> (A, B) {
    if !side_by_side || threads() < 2 {
        return (a(), b());
    }
    // Where the thread is refused, `a` is still here to run.
    let a = Mutex::new(Some(a));
    std::thread::scope(|s| {
        let spawned = std::thread::Builder::new().spawn_scoped(s, || {
            let a = a.lock().ok().and_then(|mut a| a.take());
            a.map(|a| a())
        });
        let rb = b();
        let ra = spawned
            .ok()
            .and_then(|h| h.join().unwrap_or_else(|p| std::panic::resume_unwind(p)));
        let ra = match ra {
            Some(ra) => ra,
            None => {
                let a = a.lock().unwrap_or_else(|e| e.into_inner()).take();
                a.expect("`a` runs either on the thread or here")()
            }
        };
        (ra, rb)
    })
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

    /// The files a walk of `root` finds, relative to it.
    fn names_under(root: &Path) -> Vec<String> {
        walk(root)
            .unwrap()
            .files
            .iter()
            .map(|p| p.strip_prefix(root).unwrap().display().to_string())
            .collect()
    }

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
        let names = names_under(&root);
        assert_eq!(names, vec!["a.log", "b/deeper/c.log", "z.log"]);
        assert!(walk(&root.join("missing")).is_err());
        let _ = std::fs::remove_dir_all(&root);
    }

    /// The entry's own type decides, as `lstat` did: a link to a file is read, a link to a
    /// directory is not entered (no loops), a dangling link is left out.
    #[cfg(unix)]
    #[test]
    fn links_are_typed_by_what_they_point_to() {
        let root =
            std::env::temp_dir().join(format!("oomdoctor-walk-links-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&root);
        std::fs::create_dir_all(root.join("d")).unwrap();
        std::fs::write(root.join("d/inner.log"), "i").unwrap();
        std::fs::write(root.join("plain.log"), "p").unwrap();
        std::os::unix::fs::symlink(root.join("plain.log"), root.join("to-file.log")).unwrap();
        std::os::unix::fs::symlink(root.join("d"), root.join("to-dir")).unwrap();
        std::os::unix::fs::symlink(root.join("gone.log"), root.join("dangling.log")).unwrap();
        let names = names_under(&root);
        assert_eq!(names, vec!["d/inner.log", "plain.log", "to-file.log"]);
        let _ = std::fs::remove_dir_all(&root);
    }

    #[test]
    fn globs() {
        assert!(glob_match(b"*.log", b"rank0.log"));
        assert!(!glob_match(b"*.log", b"a/rank0.log"));
        assert!(glob_match(b"**/*.log", b"a/b/rank0.log"));
        assert!(glob_match(b"**/*.log", b"rank0.log"));
        assert!(glob_match(b"rank?.log", b"rank7.log"));
        assert!(!glob_match(b"rank?.log", b"rank10.log"));
        assert!(glob_match(b"runs/**", b"runs/a/b"));
        assert!(!glob_match(b"*.log", b"x.log.gz"));
        assert!(glob_match(b"*a*b*c*", b"xaybzc"));
        let f = Filter {
            include: vec!["*.log".into()],
            exclude: vec!["checkpoints".into(), "old/*.log".into()],
        };
        assert!(f.takes_file("rank0.log"));
        assert!(f.takes_file("a/rank0.log"));
        assert!(!f.takes_file("gpu.csv"));
        assert!(!f.takes_file("old/rank0.log"));
        assert!(!f.enters_dir("checkpoints"));
        assert!(f.enters_dir("old"));
    }

    #[test]
    fn binary_is_told_from_text() {
        assert!(!looks_binary(b"step 1\r\n\x1b[31mred\x1b[0m\tok\n"));
        assert!(looks_binary(b"PK\x03\x04\x00\x00binary"));
        assert!(looks_binary(&[1, 2, 3, 4, 5, 6, 7, 8, 65, 66]));
        assert!(!looks_binary(b""));
    }

    #[test]
    fn join_returns_both_results_and_raises_a_panic_of_the_thread() {
        let data: Vec<u64> = (0..100_000).collect();
        for side_by_side in [false, true] {
            let (a, b) = join(
                side_by_side,
                || data.iter().sum::<u64>(),
                || data.iter().rev().take(3).copied().collect::<Vec<_>>(),
            );
            assert_eq!(a, 4_999_950_000);
            assert_eq!(b, vec![99_999, 99_998, 99_997]);
        }
        // `b` may borrow mutably: it runs on this thread.
        let mut here = 0;
        let (_, ()) = join(true, || 1, || here += 1);
        assert_eq!(here, 1);
        let raised = std::panic::catch_unwind(|| join(true, || panic!("in a"), || 2));
        let message = raised.unwrap_err();
        assert_eq!(message.downcast_ref::<&str>(), Some(&"in a"));
    }

    #[test]
    fn parallel_map_keeps_order() {
        let items: Vec<u64> = (0..100).collect();
        let out = parallel_map(&items, 4, |x| x * 2);
        assert_eq!(out, (0..100).map(|x| x * 2).collect::<Vec<_>>());
    }
}
