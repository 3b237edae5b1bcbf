//! Opening inputs and deciding what they are from their content.
//!
//! An input is a file path or `-` (stdin). Gzip is undone transparently (several members,
//! as rotated logs have, are all read). UTF-16 logs (Windows PowerShell redirection) are
//! transcoded to UTF-8 on the fly. The kind (log, snapshot pickle, memory series, model
//! config) is sniffed from the first bytes, never from the file name: crash logs arrive as
//! `output.txt`, `job-1234.out` or on stdin.

mod mapped;
mod readahead;
pub mod walk;

pub use mapped::{MappedBlocks, MappedFile};

pub use readahead::{
    ReadAhead, WIDE_PIPE, read_pipe, widen_pipe, worthwhile as read_ahead_worthwhile,
};

use std::fs::File;
use std::io::{self, BufRead, BufReader, Cursor, Read};
use std::path::Path;
use std::sync::Arc;

use crate::facts::evidence::InputName;

/// How many bytes are peeked to decide an input's kind.
const SNIFF_BYTES: usize = 64 << 10;

/// What an input is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum InputKind {
    /// A text log (crash output, engine log, dmesg, kubectl describe...).
    Log,
    /// A PyTorch memory snapshot pickle.
    Snapshot,
    /// A memory time series (nvidia-smi CSV, Prometheus/DCGM text, CSV/JSONL).
    Series,
    /// A Hugging Face config.json or a GGUF model file.
    Model,
}

impl InputKind {
    pub fn id(self) -> &'static str {
        match self {
            InputKind::Log => "log",
            InputKind::Snapshot => "snapshot",
            InputKind::Series => "series",
            InputKind::Model => "model",
        }
    }
}

/// An input could not be opened or decoded.
#[derive(Debug, thiserror::Error, miette::Diagnostic)]
pub enum InputError {
    #[error("{input}: no such file")]
    #[diagnostic(
        code(oomdoctor::input::not_found),
        help("check the path; use `-` to read standard input")
    )]
    NotFound { input: String },
    #[error("{input}: permission denied")]
    #[diagnostic(code(oomdoctor::input::permission))]
    Permission { input: String },
    #[error("{input}: is a directory")]
    #[diagnostic(code(oomdoctor::input::directory), help("pass the files inside it"))]
    Directory { input: String },
    #[error("{input}: cannot read: {source}")]
    #[diagnostic(code(oomdoctor::input::io))]
    Io {
        input: String,
        #[source]
        source: io::Error,
    },
    #[error("{input}: corrupt gzip data after {offset} bytes of decompressed output: {message}")]
    #[diagnostic(
        code(oomdoctor::input::gzip),
        help("the file starts like gzip but does not decompress; is it truncated?")
    )]
    Gzip {
        input: String,
        offset: u64,
        message: String,
    },
    #[error("{input}: {message}")]
    #[diagnostic(code(oomdoctor::input::unsupported))]
    Unsupported {
        input: String,
        message: String,
        #[help]
        help: Option<String>,
    },
    #[error("{input}: {size} bytes is more than the {limit}-byte limit for {what}")]
    #[diagnostic(
        code(oomdoctor::input::too_large),
        help("raise the limit with {flag} if the file is trusted and the machine has the memory")
    )]
    TooLarge {
        input: String,
        size: u64,
        limit: u64,
        what: &'static str,
        flag: &'static str,
    },
    #[error(transparent)]
    #[diagnostic(transparent)]
    Snapshot(Box<crate::ingest::snapshot::SnapshotError>),
    #[error(transparent)]
    #[diagnostic(transparent)]
    Series(Box<crate::ingest::series::SeriesError>),
}

impl InputError {
    /// Maps an I/O error that happened while reading an input.
    pub fn from_io(input: &str, e: io::Error, gzip: bool, offset: u64) -> InputError {
        if gzip
            && matches!(
                e.kind(),
                io::ErrorKind::InvalidData
                    | io::ErrorKind::InvalidInput
                    | io::ErrorKind::UnexpectedEof
            )
        {
            return InputError::Gzip {
                input: input.to_string(),
                offset,
                message: e.to_string(),
            };
        }
        match e.kind() {
            io::ErrorKind::NotFound => InputError::NotFound {
                input: input.to_string(),
            },
            io::ErrorKind::PermissionDenied => InputError::Permission {
                input: input.to_string(),
            },
            _ => InputError::Io {
                input: input.to_string(),
                source: e,
            },
        }
    }
}

/// Where a gzip stream stopped decoding: the decompressed bytes before the damage, and the
/// decoder's complaint.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Cut {
    pub offset: u64,
    pub message: String,
}

/// Ends a gzip stream cleanly where it stops decoding, remembering where and why.
///
/// A job killed mid-write leaves a `.gz` log without its end; the OOM that killed it is in
/// the part that does decode. Failing the whole read would throw that away, so the decoder's
/// error becomes the end of the stream and the reader of the input decides: a log is
/// diagnosed from what was decoded (with a warning), a snapshot or series is an error.
struct StopAtCut<R> {
    inner: R,
    produced: u64,
    cut: Arc<std::sync::Mutex<Option<Cut>>>,
}

impl<R: Read> Read for StopAtCut<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        match self.inner.read(buf) {
            Ok(n) => {
                self.produced += n as u64;
                Ok(n)
            }
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::InvalidData
                        | io::ErrorKind::InvalidInput
                        | io::ErrorKind::UnexpectedEof
                ) =>
            {
                if let Ok(mut c) = self.cut.lock() {
                    c.get_or_insert(Cut {
                        offset: self.produced,
                        message: e.to_string(),
                    });
                }
                Ok(0)
            }
            Err(e) => Err(e),
        }
    }
}

/// An opened input, positioned at its start, with its kind decided.
pub struct Opened {
    pub name: InputName,
    pub kind: InputKind,
    pub compressed: bool,
    /// The first bytes (already decompressed/transcoded), which `reader` yields again.
    pub head: Vec<u8>,
    pub reader: Box<dyn Read + Send>,
    /// Bytes pulled through `reader` so far (for error offsets and reports).
    pub counter: Arc<std::sync::atomic::AtomicU64>,
    /// Set when a gzip input stopped decoding before its end (see [`StopAtCut`]); the
    /// reader then ends there.
    pub cut: Arc<std::sync::Mutex<Option<Cut>>>,
    /// A large regular file that holds the input's bytes as they are (not compressed, not
    /// UTF-16): a log scan may read it through a map instead of `reader`
    /// ([`Opened::mapped`]).
    pub mappable: Option<(File, u64)>,
    /// Whether the input was UTF-16, transcoded on the fly.
    pub transcoded: bool,
    /// The stream names every line of the log started with, read without them
    /// ([`crate::ingest::log::line_prefix`]).
    pub line_prefixes: Option<crate::ingest::log::line_prefix::LinePrefixes>,
}

/// A regular file read to its end once: the sniffing and the scan each asked the file
/// again after it said "end" (a system call per file of a directory's 10,000).
struct EndOnce<R> {
    inner: R,
    ended: bool,
}

impl<R: Read> Read for EndOnce<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        if self.ended || buf.is_empty() {
            return Ok(0);
        }
        let n = self.inner.read(buf)?;
        self.ended = n == 0;
        Ok(n)
    }
}

/// Counts bytes passing through.
struct Counting<R> {
    inner: R,
    n: Arc<std::sync::atomic::AtomicU64>,
}

impl<R: Read> Read for Counting<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let k = self.inner.read(buf)?;
        self.n
            .fetch_add(k as u64, std::sync::atomic::Ordering::Relaxed);
        Ok(k)
    }
}

/// Reads up to `n` bytes (fewer only at EOF), retrying short reads from pipes.
fn read_head(r: &mut dyn Read, n: usize) -> io::Result<Vec<u8>> {
    let mut head = Vec::with_capacity(n.min(1 << 16));
    r.take(n as u64).read_to_end(&mut head)?;
    Ok(head)
}

/// Opens `spec` (a path or `-`). `stdin_name` names standard input in reports.
pub fn open(
    spec: &str,
    stdin: Box<dyn Read + Send>,
    stdin_name: &str,
    forced: Option<InputKind>,
) -> Result<Opened, InputError> {
    if spec == "-" {
        let mappable = take_stdin_file();
        let mut opened = open_reader(stdin_name, stdin, forced)?;
        if opened.reads_as_stored() {
            opened.mappable = mappable;
        }
        return Ok(opened);
    }
    let path = Path::new(spec);
    let directory = || InputError::Directory {
        input: spec.to_string(),
    };
    // One `stat` of the open file says both "directory" and "large" (a directory's
    // 10,000 logs each paid a path lookup for the first before).
    let f = match File::open(path) {
        Ok(f) => f,
        Err(_) if path.is_dir() => return Err(directory()),
        Err(e) => return Err(InputError::from_io(spec, e, false, 0)),
    };
    let meta = f.metadata().ok();
    if meta.as_ref().is_some_and(|m| m.is_dir()) {
        return Err(directory());
    }
    // A regular file is read on the scanning thread. Reading a large one ahead on a
    // second thread paid while the scan walked every byte; with the gate, the 1 GiB
    // bench log took 0.21 s wall but 0.30-0.39 s of CPU that way (the thread's copy and
    // hand-over), 0.27 s and 0.26-0.28 s without (the kernel reads ahead on its own). A
    // FIFO (`<(kubectl logs ...)`) is a pipe: widened, and read like standard input.
    let len = meta.as_ref().map_or(0, |m| m.len());
    let is_file = meta.as_ref().is_none_or(|m| m.is_file());
    // A second handle on a large log, for a scan through a map (`Opened::mapped`).
    let mappable = (is_file && len >= MappedFile::MIN_LEN)
        .then(|| f.try_clone().ok())
        .flatten()
        .map(|dup| (dup, len));
    let wide = !is_file && readahead::widen_pipe(&f);
    let reader: Box<dyn Read + Send> = if wide || (!is_file && readahead::worthwhile()) {
        readahead::read_pipe(f, wide)
    } else {
        // Sized to the file (a pipe or device reports 0: the most): a 1 MiB buffer
        // for each of a directory's small logs was allocated and freed for nothing.
        let size = if len == 0 {
            1 << 20
        } else {
            len.clamp(8 << 10, 1 << 20)
        };
        Box::new(EndOnce {
            inner: BufReader::with_capacity(size as usize, f),
            ended: false,
        })
    };
    let mut opened = open_reader(spec, reader, forced)?;
    if opened.reads_as_stored() {
        opened.mappable = mappable;
    }
    Ok(opened)
}

/// Standard input as a large regular file read from its start, where [`stdin_is_file`]
/// found it so: `open("-")` scans it through a map, as it does a named file.
static STDIN_FILE: std::sync::Mutex<Option<(File, u64)>> = std::sync::Mutex::new(None);

/// Whether the process's standard input is a regular file not yet read from (`oomdoctor <
/// job.log`, a CI step's usual form). When it is large enough to map, a second handle on it
/// is kept for `open("-")`, which scans it as fast as the file named (a pipe cannot be
/// mapped: `cat job.log | oomdoctor` stays a read). The caller reads such a standard input
/// without a read-ahead thread, as a named file is read.
///
/// For the binary's `main` only: a test's standard input is not the process's.
pub fn stdin_is_file(stdin: &std::io::Stdin) -> bool {
    #[cfg(unix)]
    {
        use std::io::Seek;
        use std::os::fd::AsFd;
        let Ok(fd) = stdin.as_fd().try_clone_to_owned() else {
            return false;
        };
        let mut file = File::from(fd);
        let Ok(meta) = file.metadata() else {
            return false;
        };
        // Read from its start: a map from byte 0 is what the reader would have read.
        if !meta.is_file() || file.stream_position().ok() != Some(0) {
            return false;
        }
        if meta.len() < MappedFile::MIN_LEN {
            return true;
        }
        if let Ok(mut slot) = STDIN_FILE.lock() {
            *slot = Some((file, meta.len()));
        }
        true
    }
    #[cfg(not(unix))]
    {
        let _ = stdin;
        false
    }
}

/// The handle [`stdin_is_file`] kept, once.
fn take_stdin_file() -> Option<(File, u64)> {
    STDIN_FILE.lock().ok().and_then(|mut s| s.take())
}

/// Opens an already-open reader.
pub fn open_reader(
    name: &str,
    mut raw: Box<dyn Read + Send>,
    forced: Option<InputKind>,
) -> Result<Opened, InputError> {
    let first = read_head(&mut raw, 2).map_err(|e| InputError::from_io(name, e, false, 0))?;
    let compressed = first.starts_with(&[0x1f, 0x8b]);
    let joined: Box<dyn Read + Send> = Box::new(Cursor::new(first).chain(raw));
    let counter = Arc::new(std::sync::atomic::AtomicU64::new(0));
    let cut = Arc::new(std::sync::Mutex::new(None));
    let mut reader: Box<dyn Read + Send> = if compressed {
        Box::new(Counting {
            inner: StopAtCut {
                inner: flate2::read::MultiGzDecoder::new(BufReader::with_capacity(1 << 20, joined)),
                produced: 0,
                cut: cut.clone(),
            },
            n: counter.clone(),
        })
    } else {
        Box::new(Counting {
            inner: joined,
            n: counter.clone(),
        })
    };
    let mut head = read_head(&mut reader, SNIFF_BYTES)
        .map_err(|e| InputError::from_io(name, e, compressed, 0))?;
    // UTF-16 text: transcode the stream to UTF-8 before anything looks at it.
    let order = utf16_order(&head);
    let transcoded = order.is_some();
    if let Some(big_endian) = order {
        let rest = Box::new(Cursor::new(std::mem::take(&mut head)).chain(reader));
        reader = Box::new(Utf16ToUtf8::new(rest, big_endian));
        head = read_head(&mut reader, SNIFF_BYTES)
            .map_err(|e| InputError::from_io(name, e, compressed, 0))?;
    }
    let opened_cut = cut.lock().ok().and_then(|c| c.clone());
    if let (Some(c), true) = (opened_cut, head.is_empty()) {
        // Nothing decoded at all: there is nothing to keep.
        return Err(InputError::Gzip {
            input: name.to_string(),
            offset: c.offset,
            message: c.message,
        });
    }
    let kind = forced.unwrap_or_else(|| sniff(&head));
    // A log whose every line starts with a stream's name (stern, pdsh): read without it.
    let line_prefixes = (kind == InputKind::Log)
        .then(|| crate::ingest::log::line_prefix::learn(&head))
        .flatten();
    if let Some(p) = &line_prefixes {
        let rest = Box::new(Cursor::new(std::mem::take(&mut head)).chain(reader));
        reader = Box::new(crate::ingest::log::line_prefix::StripLinePrefixes::reader(
            rest,
            p.clone(),
        ));
        head = read_head(&mut reader, SNIFF_BYTES)
            .map_err(|e| InputError::from_io(name, e, compressed, 0))?;
    }
    let reader: Box<dyn Read + Send> = Box::new(Cursor::new(head.clone()).chain(reader));
    Ok(Opened {
        name: Arc::from(name),
        kind,
        compressed,
        head,
        reader,
        counter,
        cut,
        mappable: None,
        transcoded,
        line_prefixes,
    })
}

impl Opened {
    /// Whether `reader` yields the input's bytes as they are stored (not decompressed,
    /// transcoded or stripped of line prefixes): only then may a map stand in for it.
    fn reads_as_stored(&self) -> bool {
        !self.compressed && !self.transcoded && self.line_prefixes.is_none()
    }

    /// The input as a mapped file, where it is a large regular file read as it is
    /// ([`MappedFile`]); `None` otherwise, and the input is read through `reader`.
    pub fn mapped(&mut self) -> Option<MappedFile> {
        let (file, len) = self.mappable.take()?;
        MappedFile::new(file, len)
    }

    /// Where the gzip stream stopped decoding, if it did (known once it was read to its
    /// end).
    pub fn cut(&self) -> Option<Cut> {
        cut_of(&self.cut)
    }

    /// The input's display name.
    pub fn input_name(&self) -> InputName {
        Arc::clone(&self.name)
    }
}

/// What a shared cut flag holds.
pub fn cut_of(cut: &std::sync::Mutex<Option<Cut>>) -> Option<Cut> {
    cut.lock().ok().and_then(|c| c.clone())
}

impl Cut {
    /// The error for an input that cannot be used without its end (a snapshot, a series).
    pub fn error(&self, input: &str) -> InputError {
        InputError::Gzip {
            input: input.to_string(),
            offset: self.offset,
            message: self.message.clone(),
        }
    }

    /// The warning for a log diagnosed from the part that decoded.
    pub fn warning(&self) -> String {
        format!(
            "the gzip stream is cut after {} bytes of decompressed output ({}); diagnosed what was decoded, the end of the log is missing",
            self.offset, self.message
        )
    }
}

/// Decides an input's kind from its first bytes.
pub fn sniff(head: &[u8]) -> InputKind {
    if crate::ingest::snapshot::looks_like_pickle(head) {
        return InputKind::Snapshot;
    }
    if head.starts_with(b"GGUF") {
        return InputKind::Model;
    }
    // A model config is a JSON object; its keys are looked for only then (a copy and three
    // searches of 4 KiB, paid on every file of a directory otherwise).
    let opens_object = head.iter().find(|b| !b.is_ascii_whitespace()) == Some(&b'{');
    if opens_object {
        let text = String::from_utf8_lossy(&head[..head.len().min(4096)]);
        if (text.contains("\"model_type\"") || text.contains("\"architectures\""))
            && text.contains("\"num_hidden_layers\"")
        {
            return InputKind::Model;
        }
    }
    if crate::ingest::series::sniff(head).is_some() {
        return InputKind::Series;
    }
    InputKind::Log
}

/// Detects UTF-16 by its byte-order mark, or by the NUL pattern of ASCII text without one.
fn utf16_order(head: &[u8]) -> Option<bool> {
    if head.starts_with(&[0xFF, 0xFE]) {
        return Some(false);
    }
    if head.starts_with(&[0xFE, 0xFF]) {
        return Some(true);
    }
    let sample = &head[..head.len().min(512) & !1];
    if sample.len() < 16 {
        return None;
    }
    let pairs = sample.len() / 2;
    let odd_nuls = sample.chunks(2).filter(|c| c[1] == 0 && c[0] != 0).count();
    let even_nuls = sample.chunks(2).filter(|c| c[0] == 0 && c[1] != 0).count();
    if odd_nuls * 10 >= pairs * 9 {
        Some(false)
    } else if even_nuls * 10 >= pairs * 9 {
        Some(true)
    } else {
        None
    }
}

/// A stream rewritten a piece at a time on its way to the scan (UTF-16 to UTF-8, a log's
/// learned line prefixes dropped): [`Rewritten`] turns one into a reader.
pub trait Rewrite {
    /// Appends the next rewritten bytes to `out` (possibly none, when more input is needed
    /// first); `false` once the input is used up and everything has been written.
    fn rewrite(&mut self, out: &mut Vec<u8>) -> io::Result<bool>;
}

/// The reader of a [`Rewrite`].
pub struct Rewritten<W> {
    inner: W,
    out: Vec<u8>,
    out_pos: usize,
    done: bool,
}

impl<W> Rewritten<W> {
    pub fn new(inner: W) -> Self {
        Rewritten {
            inner,
            out: Vec::new(),
            out_pos: 0,
            done: false,
        }
    }
}

impl<W: Rewrite> Read for Rewritten<W> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        while self.out_pos >= self.out.len() {
            if self.done {
                return Ok(0);
            }
            self.out.clear();
            self.out_pos = 0;
            self.done = !self.inner.rewrite(&mut self.out)?;
        }
        let n = (self.out.len() - self.out_pos).min(buf.len());
        buf[..n].copy_from_slice(&self.out[self.out_pos..self.out_pos + n]);
        self.out_pos += n;
        Ok(n)
    }
}

/// Streams UTF-16 (either byte order) as UTF-8. Unpaired surrogates become U+FFFD.
struct Utf16ToUtf8 {
    inner: Box<dyn Read + Send>,
    big_endian: bool,
    pending: Vec<u8>,
    started: bool,
    eof: bool,
}

impl Utf16ToUtf8 {
    fn new(inner: Box<dyn Read + Send>, big_endian: bool) -> Rewritten<Self> {
        Rewritten::new(Utf16ToUtf8 {
            inner,
            big_endian,
            pending: Vec::new(),
            started: false,
            eof: false,
        })
    }
}

impl Rewrite for Utf16ToUtf8 {
    /// Reads straight onto the bytes kept from the last round and decodes into `out`: no
    /// buffer, unit list or string of its own per round.
    fn rewrite(&mut self, out: &mut Vec<u8>) -> io::Result<bool> {
        let kept = self.pending.len();
        self.pending.resize(kept + (64 << 10), 0);
        let read = self.inner.read(&mut self.pending[kept..]);
        self.pending.truncate(kept + *read.as_ref().unwrap_or(&0));
        if read? == 0 {
            self.eof = true;
        }
        let big_endian = self.big_endian;
        let unit = |c: &[u8]| {
            if big_endian {
                u16::from_be_bytes([c[0], c[1]])
            } else {
                u16::from_le_bytes([c[0], c[1]])
            }
        };
        let usable = self.pending.len() & !1;
        // Keep a trailing high surrogate for the next round, so a pair split across reads survives.
        let keep_last = !self.eof
            && usable >= 2
            && (0xD800..0xDC00).contains(&unit(&self.pending[usable - 2..usable]));
        let take = usable / 2 - usize::from(keep_last);
        let units = self.pending[..take * 2].chunks_exact(2).map(unit);
        let mut char_buf = [0u8; 4];
        for c in char::decode_utf16(units).map(|r| r.unwrap_or('\u{FFFD}')) {
            // A byte-order mark (or several) before the text is not text.
            if !self.started && c == '\u{FEFF}' {
                continue;
            }
            self.started = true;
            out.extend_from_slice(c.encode_utf8(&mut char_buf).as_bytes());
        }
        self.started |= self.eof;
        self.pending.drain(..take * 2);
        if self.eof {
            self.pending.clear();
        }
        Ok(!self.eof)
    }
}

/// A reader that is also buffered, for parsers that want lines.
pub fn buffered(r: Box<dyn Read + Send>) -> Box<dyn BufRead> {
    Box::new(BufReader::with_capacity(1 << 20, r))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Once the file said "end" it is not asked again (a log still being written past that
    /// point is not half-read into the scan), and the bytes before the end are all there.
    #[test]
    fn a_file_is_read_to_its_end_once() {
        struct Growing {
            calls: usize,
        }
        impl Read for Growing {
            fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
                self.calls += 1;
                // "abc", then end, then more bytes as if the file grew.
                let chunk: &[u8] = match self.calls {
                    1 => b"abc",
                    2 => b"",
                    _ => b"later",
                };
                buf[..chunk.len()].copy_from_slice(chunk);
                Ok(chunk.len())
            }
        }
        let mut r = EndOnce {
            inner: Growing { calls: 0 },
            ended: false,
        };
        let mut out = Vec::new();
        r.read_to_end(&mut out).unwrap();
        assert_eq!(out, b"abc");
        assert_eq!(r.read(&mut [0u8; 16]).unwrap(), 0);
        assert_eq!(r.inner.calls, 2);
    }

    fn read_all(o: Opened) -> Vec<u8> {
        let mut v = Vec::new();
        let mut r = o.reader;
        r.read_to_end(&mut v).unwrap();
        v
    }

    #[test]
    fn plain_and_gzip_read_the_same() {
        let text = b"hello\nCUDA out of memory\n".to_vec();
        let o = open_reader("a", Box::new(Cursor::new(text.clone())), None).unwrap();
        assert!(!o.compressed);
        assert_eq!(o.kind, InputKind::Log);
        assert_eq!(read_all(o), text);

        let mut gz = Vec::new();
        {
            use std::io::Write;
            let mut e = flate2::write::GzEncoder::new(&mut gz, flate2::Compression::fast());
            e.write_all(&text).unwrap();
            e.finish().unwrap();
        }
        // Two members, as rotated logs are concatenated.
        let mut two = gz.clone();
        two.extend_from_slice(&gz);
        let o = open_reader("a.gz", Box::new(Cursor::new(two)), None).unwrap();
        assert!(o.compressed);
        assert_eq!(read_all(o), [text.clone(), text].concat());
    }

    #[test]
    fn corrupt_gzip_is_an_error() {
        let mut bad = vec![0x1f, 0x8b, 8, 0, 0, 0, 0, 0, 0, 3];
        bad.extend_from_slice(b"not deflate at all, just junk");
        match open_reader("bad.gz", Box::new(Cursor::new(bad)), None) {
            Err(InputError::Gzip { .. }) => {}
            Ok(o) => {
                let mut v = Vec::new();
                let mut r = o.reader;
                assert!(r.read_to_end(&mut v).is_err());
            }
            Err(e) => panic!("{e:?}"),
        }
    }

    #[test]
    fn utf16_is_transcoded() {
        let text = "CUDA out of memory. Tried to allocate 2.00 GiB\r\nline two ✓\r\n";
        let mut le = vec![0xFF, 0xFE];
        le.extend(text.encode_utf16().flat_map(|u| u.to_le_bytes()));
        let o = open_reader("w.log", Box::new(Cursor::new(le)), None).unwrap();
        assert_eq!(String::from_utf8(read_all(o)).unwrap(), text);
        let be: Vec<u8> = text.encode_utf16().flat_map(|u| u.to_be_bytes()).collect();
        let o = open_reader("w.log", Box::new(Cursor::new(be)), None).unwrap();
        assert_eq!(String::from_utf8(read_all(o)).unwrap(), text);
    }

    /// Reads handing out a few bytes at a time split code units and surrogate pairs across
    /// rounds; a lone surrogate at the end is U+FFFD.
    #[test]
    fn utf16_split_anywhere_reads_the_same() {
        struct Trickle(Vec<u8>, usize);
        impl Read for Trickle {
            fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
                let n = 3.min(buf.len()).min(self.0.len() - self.1);
                buf[..n].copy_from_slice(&self.0[self.1..self.1 + n]);
                self.1 += n;
                Ok(n)
            }
        }
        let text = "OOM 🚀 at step 12 ✓ 🧠\n";
        let mut le = vec![0xFF, 0xFE, 0xFF, 0xFE];
        le.extend(text.encode_utf16().flat_map(|u| u.to_le_bytes()));
        le.extend(0xD83Du16.to_le_bytes());
        let mut out = String::new();
        Utf16ToUtf8::new(Box::new(Trickle(le, 0)), false)
            .read_to_string(&mut out)
            .unwrap();
        assert_eq!(out, format!("{text}\u{FFFD}"));
    }

    #[test]
    fn kinds_are_sniffed_from_content() {
        assert_eq!(
            sniff(b"Traceback (most recent call last):\n"),
            InputKind::Log
        );
        assert_eq!(sniff(b"GGUF\x03\x00\x00\x00"), InputKind::Model);
        assert_eq!(sniff(br#"{"architectures": ["LlamaForCausalLM"], "model_type": "llama", "num_hidden_layers": 32}"#), InputKind::Model);
        assert_eq!(sniff(b""), InputKind::Log);
    }

    #[test]
    fn missing_file() {
        let e = open(
            "/definitely/not/here.log",
            Box::new(io::empty()),
            "<stdin>",
            None,
        )
        .err()
        .unwrap();
        assert!(matches!(e, InputError::NotFound { .. }));
    }
}
