//! Reading ahead on a second thread, for standard input and named pipes, and for snapshots.
//!
//! A pipe holds 64 KiB unless widened ([`widen_pipe`]; see [`read_pipe`] for what a wide
//! one is read with). Read in turn with the scan, the writer (`cat`, `kubectl logs`, a
//! CI runner) stalls whenever the pipe is full, which is most of the time the scan runs:
//! the two processes take turns instead of running side by side, and each 64 KiB costs a
//! pair of wake-ups. [`ReadAhead`] drains the source on its own thread into a few blocks
//! ahead of the reader, so the writer keeps writing while the scan runs. (A regular log is
//! not read ahead: the kernel already does, and the thread's copy cost more CPU than the
//! overlap saved once the scan ran at memory speed; see `input::open`.)
//!
//! A snapshot's pickle reader runs far slower than memory, so there the overlap pays, and
//! it takes the blocks whole ([`crate::ingest::snapshot::pickle::BlockFeed`]) instead of
//! copying them out: every block's data starts after `HEADROOM` bytes, where that reader
//! puts the unread end of the block before. Read as a stream ([`Read`]) the headroom is
//! skipped.
//!
//! Memory: at most `DEPTH + 2` blocks of `HEADROOM + BLOCK` bytes exist at once (the ones
//! queued, the one being filled, the one being read); blocks go back to the reading thread
//! when read. The thread starts on the first read, so a standard input never read is never
//! touched.

use std::io::{self, Read};
use std::sync::mpsc::{Receiver, SyncSender, sync_channel};
use std::sync::{Arc, Mutex};

/// Bytes a block holds.
pub(super) const BLOCK: usize = 1 << 20;
/// Bytes left free in front of each block's data, for a [`BlockFeed`] reader to put the
/// unread end of the block before (see `pickle::BlockFeed`).
pub(super) const HEADROOM: usize = 64 << 10;
/// Blocks filled ahead of the reader.
const DEPTH: usize = 6;

/// A reader that reads its source ahead on a thread of its own.
pub struct ReadAhead<R> {
    /// The source, until the thread takes it (shared so that it comes back if no thread can
    /// be started).
    source: Arc<Mutex<Option<R>>>,
    /// Filled blocks, in order; an empty block is the end, and an error ends the stream too.
    filled: Option<Receiver<io::Result<Vec<u8>>>>,
    /// Read blocks, back to the thread for reuse.
    spent: Option<SyncSender<Vec<u8>>>,
    /// Whether the thread was asked for (it may have failed to start).
    started: bool,
    block: Vec<u8>,
    at: usize,
    done: bool,
    /// An error met after the bytes of the block just handed out (no thread: blocks read
    /// here), raised on the next request.
    pending_error: Option<io::Error>,
}

/// Whether reading ahead can pay: the process may run on a second core (affinity and
/// cgroup limits included). On one core the thread only adds a copy of every byte.
pub fn worthwhile() -> bool {
    static TWO: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *TWO.get_or_init(|| std::thread::available_parallelism().is_ok_and(|n| n.get() > 1))
}

/// Bytes a widened pipe holds: Linux's limit for a process without privileges.
pub const WIDE_PIPE: usize = 1 << 20;

/// Widens the pipe `fd` reads from (standard input, a FIFO, `<(command)`) to 1 MiB, and
/// says whether it now holds that much. With the default 64 KiB, a scan faster than the
/// writer (`cat`, `kubectl logs`) drains the pipe at every write: the two sides wake each
/// other 16,000 times a GiB, across cores, and the pipe, not the scan, sets the pace (the
/// 1 GiB bench log took 1.0-1.5 s piped, against 0.2 s named). Anything that is not a pipe
/// is left as it is (`false`); elsewhere than Linux, everything is.
#[cfg(target_os = "linux")]
pub fn widen_pipe(fd: impl std::os::fd::AsFd) -> bool {
    // Not a pipe, or over the limit: the pipe keeps its size, which only costs speed.
    rustix::pipe::fcntl_setpipe_size(fd, WIDE_PIPE).is_ok_and(|n| n >= WIDE_PIPE)
}

/// [`widen_pipe`]: Linux only.
#[cfg(not(target_os = "linux"))]
pub fn widen_pipe<F>(_: F) -> bool {
    false
}

/// How to read a pipe or a terminal (standard input, a FIFO): `wide` says whether
/// [`widen_pipe`] made it 1 MiB wide.
///
/// A wide pipe is read on the scanning thread: the scan takes what the pipe holds (up to
/// 1 MiB a read) and walks it while the writer fills the pipe again, two cores' worth of
/// work on two cores. Read ahead instead, the process had a third thread doing a second
/// copy of every byte, and on two cores the three took turns: the 1 GiB bench log piped
/// through `cat` took 0.42-0.52 s that way, 0.36-0.42 s read here (the file path: 0.26 s;
/// `cat` into a reader that does nothing: 0.24-0.35 s). A narrow pipe (not Linux, a
/// lowered `pipe-max-size`) is still read ahead where a second core is there, so that its
/// writer does not stall at every 64 KiB.
pub fn read_pipe<R: Read + Send + 'static>(source: R, wide: bool) -> Box<dyn Read + Send> {
    if wide || !worthwhile() {
        Box::new(source)
    } else {
        Box::new(ReadAhead::new(source))
    }
}

impl<R: Read + Send + 'static> ReadAhead<R> {
    pub fn new(source: R) -> ReadAhead<R> {
        ReadAhead {
            source: Arc::new(Mutex::new(Some(source))),
            filled: None,
            spent: None,
            started: false,
            block: Vec::new(),
            at: 0,
            done: false,
            pending_error: None,
        }
    }

    /// Starts the reading thread on the first request (where one can be had: a process
    /// limit may refuse it, and then blocks are read on the requesting thread).
    fn start_once(&mut self) {
        if !self.started {
            self.started = true;
            self.start();
        }
    }

    /// Starts the reading thread, where one can be had (a process limit may refuse it).
    fn start(&mut self) {
        let (to_reader, filled) = sync_channel::<io::Result<Vec<u8>>>(DEPTH);
        let (spent, from_reader) = sync_channel::<Vec<u8>>(DEPTH + 2);
        let shared = Arc::clone(&self.source);
        let spawned = std::thread::Builder::new()
            .name("read-ahead".into())
            .spawn(move || {
                let Some(mut source) = shared.lock().ok().and_then(|mut s| s.take()) else {
                    return;
                };
                loop {
                    // A block handed back after holding a long value is not kept.
                    let reuse = from_reader
                        .try_recv()
                        .ok()
                        .filter(|b| b.capacity() <= 2 * (HEADROOM + BLOCK))
                        .unwrap_or_default();
                    let (block, n, error) = read_block(&mut source, reuse);
                    // A send fails when the reader is gone (it stopped early): so is the need
                    // for more.
                    if n > 0 && to_reader.send(Ok(block)).is_err() {
                        return;
                    }
                    if let Some(e) = error {
                        let _ = to_reader.send(Err(e));
                        return;
                    }
                    // Short of a full block: the source said "end", and is not asked again
                    // (a terminal would wait for a second Ctrl-D).
                    if n < BLOCK {
                        let _ = to_reader.send(Ok(Vec::new()));
                        return;
                    }
                }
            });
        if spawned.is_ok() {
            self.filled = Some(filled);
            self.spent = Some(spent);
        }
    }
}

impl<R: Read + Send + 'static> ReadAhead<R> {
    /// The next filled block (data after `HEADROOM`), `None` at the end.
    fn next_filled(&mut self) -> io::Result<Option<Vec<u8>>> {
        let Some(rx) = &self.filled else {
            return Ok(None);
        };
        match rx.recv() {
            Ok(Ok(block)) if block.len() > HEADROOM => Ok(Some(block)),
            Ok(Ok(_)) | Err(_) => Ok(None),
            Ok(Err(e)) => Err(e),
        }
    }
}

impl<R: Read + Send + 'static> crate::ingest::snapshot::pickle::BlockFeed for ReadAhead<R> {
    fn headroom(&self) -> usize {
        HEADROOM
    }

    fn next_block(&mut self, spent: Option<Vec<u8>>) -> io::Result<Option<Vec<u8>>> {
        if let Some(e) = self.pending_error.take() {
            return Err(e);
        }
        if self.done {
            return Ok(None);
        }
        self.start_once();
        if let (Some(tx), Some(block)) = (&self.spent, spent) {
            let _ = tx.try_send(block);
        }
        if self.filled.is_none() {
            // No thread: a block is read here.
            let mut source = self
                .source
                .lock()
                .map_err(|_| io::Error::other("poisoned"))?;
            let Some(source) = source.as_mut() else {
                return Ok(None);
            };
            let (block, n, error) = read_block(source, Vec::new());
            if n == 0 {
                self.done = true;
                return error.map_or(Ok(None), Err);
            }
            // An error after some bytes is raised on the next call.
            if let Some(e) = error {
                self.done = true;
                self.pending_error = Some(e);
            }
            return Ok(Some(block));
        }
        let next = self.next_filled();
        if !matches!(next, Ok(Some(_))) {
            self.done = true;
        }
        next
    }
}

/// A block read from `source` into `reuse`'s memory: `HEADROOM` free bytes, then up to
/// `BLOCK` of input; the bytes read, and the error that stopped it (raised after them).
fn read_block<R: Read>(source: &mut R, reuse: Vec<u8>) -> (Vec<u8>, usize, Option<io::Error>) {
    let mut block = reuse;
    block.resize(HEADROOM + BLOCK, 0);
    let (n, error) = fill(source, &mut block[HEADROOM..]);
    block.truncate(HEADROOM + n);
    (block, n, error)
}

/// Reads until `block` is full or the source ends: the bytes read, and the error that
/// stopped it (raised after those bytes).
fn fill<R: Read>(source: &mut R, block: &mut [u8]) -> (usize, Option<io::Error>) {
    let mut n = 0;
    while n < block.len() {
        match source.read(&mut block[n..]) {
            Ok(0) => break,
            Ok(k) => n += k,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return (n, Some(e)),
        }
    }
    (n, None)
}

impl<R: Read + Send + 'static> Read for ReadAhead<R> {
    fn read(&mut self, out: &mut [u8]) -> io::Result<usize> {
        if self.done || out.is_empty() {
            return Ok(0);
        }
        self.start_once();
        if self.filled.is_none() {
            // No thread: read the source here.
            let mut source = self
                .source
                .lock()
                .map_err(|_| io::Error::other("poisoned"))?;
            return match source.as_mut() {
                Some(s) => s.read(out),
                None => Ok(0),
            };
        }
        if self.at >= self.block.len() {
            let Some(next) = self.next_filled()? else {
                self.done = true;
                return Ok(0);
            };
            let spent = std::mem::replace(&mut self.block, next);
            self.at = HEADROOM;
            if let Some(tx) = &self.spent {
                let _ = tx.try_send(spent);
            }
        }
        let n = out.len().min(self.block.len() - self.at);
        out[..n].copy_from_slice(&self.block[self.at..self.at + n]);
        self.at += n;
        Ok(n)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `widen_pipe` answers for the pipe, not for the call: a pipe ends 1 MiB wide (where
    /// the system allows that much), a regular file is left alone and said not to be one, and
    /// what is written through the widened pipe is read back whole through `read_pipe`.
    #[cfg(target_os = "linux")]
    #[test]
    fn a_pipe_is_widened_and_read_whole_and_a_file_is_not_a_pipe() {
        let file = std::fs::File::open(file!()).unwrap();
        assert!(!widen_pipe(&file));
        let limit = std::fs::read_to_string("/proc/sys/fs/pipe-max-size")
            .ok()
            .and_then(|s| s.trim().parse::<usize>().ok());
        let (r, w) = rustix::pipe::pipe().unwrap();
        let wide = widen_pipe(&r);
        match limit {
            Some(l) if l >= WIDE_PIPE => assert!(wide, "pipe-max-size {l}"),
            _ => eprintln!("note: pipe-max-size under 1 MiB here, widening not asserted"),
        }
        let data: Vec<u8> = (0..3 * WIDE_PIPE + 17).map(|i| (i % 251) as u8).collect();
        let sent = data.clone();
        let writer = std::thread::spawn(move || {
            let mut w = std::fs::File::from(w);
            std::io::Write::write_all(&mut w, &sent).unwrap();
        });
        let mut got = Vec::new();
        read_pipe(std::fs::File::from(r), wide)
            .read_to_end(&mut got)
            .unwrap();
        writer.join().unwrap();
        assert!(got == data, "{} bytes read of {}", got.len(), data.len());
    }

    /// Hands out its bytes in uneven reads, then an error or the end; counts reads after
    /// the end.
    struct Source {
        data: Vec<u8>,
        at: usize,
        fail: bool,
        after_end: Arc<Mutex<u32>>,
    }

    impl Read for Source {
        fn read(&mut self, out: &mut [u8]) -> io::Result<usize> {
            if self.at == self.data.len() {
                if self.fail {
                    return Err(io::Error::other("disk gone"));
                }
                *self.after_end.lock().unwrap() += 1;
                return Ok(0);
            }
            let n = out.len().min(7919).min(self.data.len() - self.at);
            out[..n].copy_from_slice(&self.data[self.at..self.at + n]);
            self.at += n;
            Ok(n)
        }
    }

    fn source(len: usize, fail: bool) -> (Source, Arc<Mutex<u32>>) {
        let data: Vec<u8> = (0..len).map(|i| (i * 31 % 251) as u8).collect();
        let after_end = Arc::new(Mutex::new(0));
        let s = Source {
            data,
            at: 0,
            fail,
            after_end: after_end.clone(),
        };
        (s, after_end)
    }

    /// Drains `r` as a stream ([`Read`], in pieces of 65,537 bytes) or block by block
    /// ([`BlockFeed`], each block handed back, as the snapshot reader does): the bytes, and
    /// the error that stopped it (`Ok(0)` before an error would lose it: that panics).
    fn drain<R: Read + Send + 'static>(
        r: &mut ReadAhead<R>,
        by_blocks: bool,
    ) -> (Vec<u8>, Option<io::Error>) {
        use crate::ingest::snapshot::pickle::BlockFeed;
        let mut got = Vec::new();
        let mut piece = vec![0u8; 65_537];
        let mut spent = None;
        loop {
            if by_blocks {
                match r.next_block(spent.take()) {
                    Ok(Some(block)) => {
                        assert!(block.len() > r.headroom());
                        got.extend_from_slice(&block[r.headroom()..]);
                        spent = Some(block);
                    }
                    Ok(None) => return (got, None),
                    Err(e) => return (got, Some(e)),
                }
            } else {
                match r.read(&mut piece) {
                    Ok(0) => return (got, None),
                    Ok(n) => got.extend_from_slice(&piece[..n]),
                    Err(e) => return (got, Some(e)),
                }
            }
        }
    }

    #[test]
    fn delivers_every_byte_in_order_and_asks_the_source_for_the_end_once() {
        use crate::ingest::snapshot::pickle::BlockFeed;
        for by_blocks in [false, true] {
            for len in [0, 1, BLOCK - 1, BLOCK, 3 * BLOCK + 12_345] {
                let (src, after_end) = source(len, false);
                let want = src.data.clone();
                let mut r = ReadAhead::new(src);
                let (got, error) = drain(&mut r, by_blocks);
                assert!(error.is_none());
                assert_eq!(got.len(), want.len());
                assert!(
                    got == want,
                    "bytes differ at length {len} (blocks: {by_blocks})"
                );
                // Asked again after the end: still the end, and the source is not asked again.
                if by_blocks {
                    assert!(
                        r.next_block(None).unwrap().is_none(),
                        "the end stays the end"
                    );
                } else {
                    assert_eq!(r.read(&mut [0u8; 16]).unwrap(), 0);
                }
                assert_eq!(*after_end.lock().unwrap(), 1, "length {len}");
            }
        }
    }

    #[test]
    fn an_error_comes_after_the_bytes_read_before_it() {
        for by_blocks in [false, true] {
            let (src, _) = source(BLOCK + 100, true);
            let (got, error) = drain(&mut ReadAhead::new(src), by_blocks);
            assert_eq!(got.len(), BLOCK + 100);
            let err = error.expect("the error was lost");
            assert_eq!(err.to_string(), "disk gone");
        }
    }

    #[test]
    fn a_reader_that_stops_early_lets_the_thread_go() {
        let (src, _) = source(20 * BLOCK, false);
        let mut r = ReadAhead::new(src);
        let mut piece = [0u8; 10];
        assert_eq!(r.read(&mut piece).unwrap(), 10);
        drop(r); // the thread's next send fails and it ends; nothing waits for it
    }
}
