//! Per-line prefixes learned from a log's first lines, and a reader that drops them.
//!
//! Tools that merge several streams put a name before every line: stern (`trainer-7d9f8
//! main ...`), pdsh under DeepSpeed's multi-node launcher (`worker-1: ...`), a log shipper's
//! host tag. No one pattern tells such a name from a line's first word, so [`clean`]'s table
//! of known prefixes cannot strip it; but a log whose lines nearly all start with the same
//! few names shows it. Left in place, the name broke every reading that spans lines: a
//! message hard-wrapped over three lines had the name inside it once joined, a traceback's
//! `File "..."` lines did not start with `File`. So the scan reads such a log without them
//! ([`StripLinePrefixes`]); line numbers stay those of the file.
//!
//! [`clean`]: crate::ingest::log::clean

use std::io::{self, Read};

use crate::input::{Rewrite, Rewritten};

use crate::ingest::log::clean::{LineMeta, strip_prefixes};

/// The fewest lines a prefix is learned from, and the share of lines that must carry one
/// of the names (the rest: blank lines, a line the tool wrote itself, a wrapped piece).
const MIN_LINES: usize = 8;
const MIN_SHARE_PERCENT: usize = 90;
/// The most distinct names (the hosts of a multi-node job, the pods of a deployment).
const MAX_NAMES: usize = 16;
/// The lines looked at.
const MAX_LINES: usize = 400;
/// Half of the first lines must have a name's shape, or the log is not looked at further
/// (a directory's 10,000 logs each paid for counting their lines otherwise).
const FIRST_LINES: usize = 16;

/// The names (each with its separator) that start a log's lines.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LinePrefixes {
    names: Vec<Vec<u8>>,
}

impl LinePrefixes {
    /// The prefixes, as text, for a report.
    pub fn describe(&self) -> String {
        self.names
            .iter()
            .map(|n| format!("`{}`", String::from_utf8_lossy(n).trim_end()))
            .collect::<Vec<_>>()
            .join(", ")
    }

    /// Whether the names start enough of `lines` (non-blank): every line they start counts,
    /// whatever follows (a table row after the name reads like a compose service's
    /// `name | `; an empty line is the name alone).
    fn cover(&self, lines: &[&[u8]]) -> bool {
        let covered = lines.iter().filter(|l| self.len_at(l) > 0).count();
        !self.names.is_empty()
            && self.names.len() <= MAX_NAMES
            && lines.len() >= MIN_LINES
            && covered * 100 >= lines.len() * MIN_SHARE_PERCENT
    }

    /// How many bytes of prefix `line` starts with.
    fn len_at(&self, line: &[u8]) -> usize {
        self.names
            .iter()
            .find(|n| line.starts_with(n))
            .map_or(0, Vec::len)
    }
}

/// The prefixes that start nearly every line of `head` (a log's first bytes), if some do.
pub fn learn(head: &[u8]) -> Option<LinePrefixes> {
    // The last piece may be a line cut off by the end of the head: only whole lines.
    let whole = &head[..memchr::memrchr(b'\n', head)? + 1];
    let mut lines: Vec<&[u8]> = Vec::new();
    let mut misses = 0;
    // Most logs start their lines with words of every kind: given up on after the first
    // lines, or a tenth of the lines looked at (blank ones counted: never too early).
    let mut most = None;
    let mut start = 0;
    for end in memchr::memchr_iter(b'\n', whole) {
        let line = &whole[start..end];
        start = end + 1;
        let line = line.strip_suffix(b"\r").unwrap_or(line);
        if line.iter().all(u8::is_ascii_whitespace) {
            continue;
        }
        if lines.len() == MAX_LINES {
            break;
        }
        lines.push(line);
        if name_and_separator(line).is_some() {
            continue;
        }
        misses += 1;
        if lines.len() <= FIRST_LINES {
            if misses * 2 > FIRST_LINES {
                return None;
            }
            continue;
        }
        let most =
            *most.get_or_insert_with(|| memchr::memchr_iter(b'\n', whole).take(MAX_LINES).count());
        if misses * 100 > most * (100 - MIN_SHARE_PERCENT) {
            return None;
        }
    }
    // The names: the shape alone first (most logs fail the count below, and the known
    // prefixes' automaton costs microseconds a line on a directory's 10,000 logs).
    let mut names: Vec<(&[u8], usize)> = Vec::new();
    for name in lines.iter().filter_map(|l| candidate(l)) {
        if let Some((_, count)) = names.iter_mut().find(|(n, _)| *n == name) {
            *count += 1;
        } else if names.len() < 4 * MAX_NAMES {
            names.push((name, 1));
        } else {
            return None;
        }
    }
    // A name met once is a line's first word, not a stream's tag.
    names.retain(|&(_, count)| count >= 2);
    let mut prefixes = LinePrefixes {
        names: names.into_iter().map(|(n, _)| n.to_vec()).collect(),
    };
    if !prefixes.cover(&lines) {
        return None;
    }
    // Then no name that starts a known prefix (a glog header's `W0623`): those lines are
    // read by the clean-up, timestamps and all.
    prefixes.names.retain(|name| {
        !lines.iter().any(|l| {
            candidate(l) == Some(name.as_slice())
                && std::str::from_utf8(l).is_ok_and(|text| {
                    strip_prefixes(text, &mut LineMeta::default()).len() != text.len()
                })
        })
    });
    prefixes.cover(&lines).then_some(prefixes)
}

/// The name and separator `line` may start with: a host, pod or container name (letters,
/// digits, `-`, `_`, `.`, with at least one digit, as generated names and numbered hosts
/// have) and `: ` or a space. Not a timestamp or a date, and not a compose service's
/// `name  | ` (see `learn` for the other known prefixes).
fn candidate(line: &[u8]) -> Option<&[u8]> {
    let prefix = name_and_separator(line)?;
    let rest = &line[prefix.len()..];
    // `name  | ` is docker compose's prefix (read by the clean-up), even where the clean-up
    // leaves it on a table row; and a name alone on its line tells nothing.
    if rest.is_empty() || (prefix.ends_with(b" ") && rest.trim_ascii_start().starts_with(b"|")) {
        return None;
    }
    Some(prefix)
}

/// The name and separator at the start of `line`, by their shape alone.
fn name_and_separator(line: &[u8]) -> Option<&[u8]> {
    let n = line
        .iter()
        .take_while(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
        .count();
    if !(2..=63).contains(&n) {
        return None;
    }
    let name = &line[..n];
    if !name.iter().any(u8::is_ascii_digit) || (name[0].is_ascii_digit() && !is_ipv4(name)) {
        return None;
    }
    // One separator, as the tool wrote it: the line's own indentation (a traceback's
    // `  File "..."`) stays with the line.
    let rest = &line[n..];
    let sep = if rest.starts_with(b": ") {
        2
    } else if rest.starts_with(b" ") {
        1
    } else {
        return None;
    };
    Some(&line[..n + sep])
}

fn is_ipv4(name: &[u8]) -> bool {
    let parts: Vec<&[u8]> = name.split(|&b| b == b'.').collect();
    parts.len() == 4
        && parts
            .iter()
            .all(|p| (1..=3).contains(&p.len()) && p.iter().all(u8::is_ascii_digit))
}

/// A log read without its learned prefixes: each line that starts with one of them loses
/// it; every other byte, newlines included, passes as it is.
pub struct StripLinePrefixes<R> {
    inner: R,
    prefixes: LinePrefixes,
    /// Read and not yet passed on: from the start of a line not yet complete.
    pending: Vec<u8>,
    /// Whether `pending` starts at the start of a line.
    at_line_start: bool,
    eof: bool,
}

/// A line longer than this is passed on in pieces (its start is the only part that
/// matters), so that memory stays bounded whatever the input.
const MAX_PENDING: usize = 1 << 20;

impl<R: Read> StripLinePrefixes<R> {
    /// `inner` read without `prefixes`.
    pub fn reader(inner: R, prefixes: LinePrefixes) -> Rewritten<Self> {
        Rewritten::new(StripLinePrefixes {
            inner,
            prefixes,
            pending: Vec::new(),
            at_line_start: true,
            eof: false,
        })
    }
}

impl<R: Read> Rewrite for StripLinePrefixes<R> {
    fn rewrite(&mut self, out: &mut Vec<u8>) -> io::Result<bool> {
        let mut buf = [0u8; 64 << 10];
        let n = self.inner.read(&mut buf)?;
        if n == 0 {
            self.eof = true;
        }
        self.pending.extend_from_slice(&buf[..n]);
        let upto = match memchr::memrchr(b'\n', &self.pending) {
            _ if self.eof => self.pending.len(),
            Some(i) => i + 1,
            None if self.pending.len() >= MAX_PENDING => self.pending.len(),
            None => return Ok(true),
        };
        let mut rest = &self.pending[..upto];
        while !rest.is_empty() {
            let end = memchr::memchr(b'\n', rest).map_or(rest.len(), |i| i + 1);
            let line = &rest[..end];
            let skip = if self.at_line_start {
                self.prefixes.len_at(line)
            } else {
                0
            };
            out.extend_from_slice(&line[skip..]);
            self.at_line_start = line.ends_with(b"\n");
            rest = &rest[end..];
        }
        self.pending.drain(..upto);
        Ok(!self.eof)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lines(prefix: &str, n: usize) -> String {
        (0..n)
            .map(|i| format!("{prefix}step {i} loss 0.{i}\n"))
            .collect()
    }

    fn stripped(text: &str) -> String {
        let p = learn(text.as_bytes()).expect("a prefix");
        // Small reads, so that lines and prefixes fall across them.
        let mut r = StripLinePrefixes::reader(OneByteAtATime(text.as_bytes()), p);
        let mut out = Vec::new();
        r.read_to_end(&mut out).unwrap();
        String::from_utf8(out).unwrap()
    }

    struct OneByteAtATime<'a>(&'a [u8]);

    impl Read for OneByteAtATime<'_> {
        fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
            let n = self.0.len().min(buf.len()).min(3);
            buf[..n].copy_from_slice(&self.0[..n]);
            self.0 = &self.0[n..];
            Ok(n)
        }
    }

    #[test]
    fn learns_a_pod_name_and_pdsh_hosts() {
        let stern = lines("trainer-7d9f8 ", 20);
        assert_eq!(
            learn(stern.as_bytes()).unwrap().describe(),
            "`trainer-7d9f8`"
        );
        assert_eq!(stripped(&stern), lines("", 20));
        // pdsh under DeepSpeed: two hosts interleaved, a blank line and an unprefixed
        // line of the launcher's own.
        let mut pdsh = String::from("[launch.py] running on 2 nodes\n\n");
        for i in 0..15 {
            pdsh.push_str(&format!("worker-{}: [rank{i}]: step {i}\n", i % 2));
        }
        let p = learn(pdsh.as_bytes()).unwrap();
        assert_eq!(p.describe(), "`worker-0:`, `worker-1:`");
        let out = stripped(&pdsh);
        assert!(out.starts_with("[launch.py] running on 2 nodes\n\n[rank0]: step 0\n"));
        assert_eq!(out.lines().count(), pdsh.lines().count());
        // A hard-wrapped message: each piece loses its prefix, the line count stays.
        let wrapped = format!(
            "{}trainer-7d9f8 RuntimeError: CUDA out of memory. Tried to allocate 18\ntrainer-7d9f8 6.00 MiB (GPU 0; 10.76 GiB total capacity)\n",
            lines("trainer-7d9f8 ", 10)
        );
        assert!(
            stripped(&wrapped)
                .ends_with("Tried to allocate 18\n6.00 MiB (GPU 0; 10.76 GiB total capacity)\n")
        );
        // An IP address as the host.
        assert!(learn(lines("10.0.0.5: ", 10).as_bytes()).is_some());
    }

    #[test]
    fn the_reader_drops_exactly_the_prefixes_whatever_the_reads() {
        // Random lines (some prefixed, some not, some long, CRs and empty lines) read in
        // random sizes, against the plain line-by-line strip.
        let prefixes = LinePrefixes {
            names: vec![b"pod-1 ".to_vec(), b"host-2: ".to_vec()],
        };
        struct XorShift(u64);
        impl XorShift {
            fn below(&mut self, n: u64) -> u64 {
                self.0 ^= self.0 << 13;
                self.0 ^= self.0 >> 7;
                self.0 ^= self.0 << 17;
                self.0 % n
            }
        }
        struct Uneven<'a, 'r>(&'a [u8], &'r mut XorShift);
        impl Read for Uneven<'_, '_> {
            fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
                let n = self
                    .0
                    .len()
                    .min(buf.len())
                    .min(1 + self.1.below(200) as usize);
                buf[..n].copy_from_slice(&self.0[..n]);
                self.0 = &self.0[n..];
                Ok(n)
            }
        }
        let mut rng = XorShift(0x9e37_79b9_7f4a_7c15);
        let alphabet = b"ab 1-:\r\x1bpod-1 host";
        for _ in 0..200 {
            let mut text = Vec::new();
            let mut expected = Vec::new();
            for _ in 0..rng.below(40) {
                let long = rng.below(10) == 0;
                let len = rng.below(if long { 3000 } else { 30 });
                let body: Vec<u8> = (0..len)
                    .map(|_| alphabet[rng.below(alphabet.len() as u64) as usize])
                    .collect();
                let prefix: &[u8] =
                    [&b"pod-1 "[..], b"host-2: ", b"", b"pod-"][rng.below(4) as usize];
                text.extend_from_slice(prefix);
                text.extend_from_slice(&body);
                // Some pieces run on into the next: its prefix is not at a line start.
                if rng.below(8) != 0 {
                    text.push(b'\n');
                }
            }
            for (k, line) in text.split(|&b| b == b'\n').enumerate() {
                if k > 0 {
                    expected.push(b'\n');
                }
                expected.extend_from_slice(&line[prefixes.len_at(line)..]);
            }
            let mut out = Vec::new();
            StripLinePrefixes::reader(Uneven(&text, &mut rng), prefixes.clone())
                .read_to_end(&mut out)
                .unwrap();
            assert!(
                out == expected,
                "{} bytes read, {} expected",
                out.len(),
                expected.len()
            );
        }
    }

    #[test]
    fn leaves_known_prefixes_and_ordinary_logs_alone() {
        // Known prefixes: their timestamps, levels and ranks are read by the clean-up.
        for prefix in [
            "2025-03-02 11:20:41 ",
            "W0623 18:20:12.602631 2860192 bfc_allocator.cc:514] ",
            "vllm-1  | ",
            "[rank0]: ",
            "3: ",
            "ollama-1  | ",
            "INFO 04-28 04:07:49 worker.py:232] ",
            "12:00:01 ",
        ] {
            assert_eq!(learn(lines(prefix, 20).as_bytes()), None, "{prefix}");
        }
        // A compose log whose rows hold bars of their own (the clean-up leaves those
        // rows' `name | ` in place): still compose's.
        let compose = format!(
            "{}{}",
            lines("ollama-1  | ", 10),
            "ollama-1  | [GIN] 2025/03/02 - 08:15:20 | 200 |  44.81µs | HEAD \"/\"\n".repeat(3)
        );
        assert_eq!(learn(compose.as_bytes()), None);
        // Words, not names: no digit.
        assert_eq!(learn(lines("llama_model_loader: ", 20).as_bytes()), None);
        assert_eq!(learn(lines("Traceback ", 20).as_bytes()), None);
        // Too few lines, or too few of them prefixed.
        assert_eq!(learn(lines("trainer-7d9f8 ", 6).as_bytes()), None);
        let mixed = format!("{}{}", lines("trainer-7d9f8 ", 10), lines("", 5));
        assert_eq!(learn(mixed.as_bytes()), None);
        // A first word that changes from line to line (a counter) is no prefix.
        let counters: String = (0..20).map(|i| format!("step{i} loss 1.0\n")).collect();
        assert_eq!(learn(counters.as_bytes()), None);
    }
}
