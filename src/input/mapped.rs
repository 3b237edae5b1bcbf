//! Reading a large regular file (a log, a snapshot: [`MappedBlocks`]) through a memory map,
//! a window at a time, with a guard that turns a file cut short under the map into zeros
//! instead of a crash.
//!
//! Read into the scanner's buffer, a log costs the kernel a copy of every byte out of the
//! page cache: a third of the CPU time of a 1 GiB scan (README "Speed and memory"). Mapped,
//! the scanner reads the page cache itself, as ripgrep does. ripgrep maps the whole file;
//! here a window of [`WINDOW`] bytes is mapped at a time and moved along, so the pages a scan
//! holds mapped (and its resident size) stay flat whatever the log's size.
//!
//! The hazard of a map is a file that shrinks while it is mapped: logrotate's
//! `copytruncate`, a CI runner rewriting its log, a job restarted into the same file. The
//! pages past the new end are gone, and touching one raises SIGBUS, whose default action
//! kills the process; the same happens when the disk cannot deliver a page (EIO). A read
//! would only have ended early. So a mapping is guarded: a SIGBUS handler, installed with
//! the first map, looks up the faulting address among the windows mapped now ([`SLOTS`]);
//! inside one, it maps zero pages over the rest of that window and returns, the access is
//! retried and reads zeros, and the window records where that happened. The scan then
//! stops there and says the file shrank ([`MappedFile::shrunk_at`]). A fault anywhere else
//! is not ours: the handler puts back the disposition it found and returns, the access
//! faults again, and whatever the process had before (a crash, Python's faulthandler) sees
//! it as if we had never been there.
//!
//! The bytes past a cut read as zeros for as long as the scan is inside the window it
//! happened in: no anchor or gate literal holds a NUL, so they add nothing to the
//! diagnosis. Before handing new bytes to the scan, the window's pages are touched once
//! ([`MappedFile::advance`]), so a file cut before the scan reaches the cut never shows
//! its zeros at all.
//!
//! Linux only (the guard's `sigaction` and `siginfo` reading are written against it); on
//! other systems [`MappedFile::new`] declines and the log is read as before. Small files are
//! read too: a map costs two system calls and a page-table setup that a 30 KiB log of a
//! directory of 10,000 does not repay ([`MappedFile::MIN_LEN`]).

// The crate denies `unsafe`; mapping and the SIGBUS guard are the second exception (see
// `lib.rs`).
#![allow(unsafe_code)]

use std::fs::File;
use std::io;

/// Bytes mapped at a time. Large enough that moving the window (an `munmap` and an `mmap`)
/// is rare, small enough that the resident size stays near the read path's buffer.
pub const WINDOW: usize = 16 << 20;

/// Bytes handed to the reader at a time: the scan makes several passes over what it is
/// handed (the gate, the newline count, the lines it finds), and a piece this size is still
/// in the core's cache for the passes after the first.
const STEP: usize = 2 << 20;

/// A regular file read through a moving mapped window.
pub struct MappedFile {
    #[cfg(target_os = "linux")]
    file: File,
    len: u64,
    /// The window: its file offset (page-aligned), start address and length; a null
    /// address before the first map.
    offset: u64,
    ptr: *mut u8,
    mapped: usize,
    /// Bytes of the window handed to the reader so far ([`MappedFile::advance`]).
    handed: usize,
    /// This map's entry in the guard's table.
    #[cfg(target_os = "linux")]
    slot: &'static guard::Slot,
    /// File offset at which a page could not be read (the file shrank, or the disk
    /// failed), once known.
    shrunk_at: Option<u64>,
}

// The window is owned by the `MappedFile` alone: nothing else holds its address.
unsafe impl Send for MappedFile {}

impl MappedFile {
    /// Files smaller than this are read, not mapped.
    pub const MIN_LEN: u64 = 8 << 20;

    /// Maps `file` (a regular file of `len` bytes) for reading, or `None` where that is not
    /// worth it or not possible: a small file, a system other than Linux, every guard slot
    /// taken by other maps of this process.
    pub fn new(file: File, len: u64) -> Option<MappedFile> {
        if len < MappedFile::MIN_LEN {
            return None;
        }
        #[cfg(target_os = "linux")]
        {
            let slot = guard::claim()?;
            Some(MappedFile {
                file,
                len,
                offset: 0,
                ptr: std::ptr::null_mut(),
                mapped: 0,
                handed: 0,
                slot,
                shrunk_at: None,
            })
        }
        #[cfg(not(target_os = "linux"))]
        {
            let _ = file;
            None
        }
    }

    /// The file's size when it was opened: what the map reads up to. (A log that grows while
    /// it is read is read to that size, as ripgrep does.)
    pub fn len(&self) -> u64 {
        self.len
    }

    /// Whether the file was empty (never: [`MappedFile::new`] takes only large files).
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// File offset of the window's first byte.
    pub fn window_offset(&self) -> u64 {
        self.offset
    }

    /// The bytes of the window handed out so far.
    pub fn bytes(&self) -> &[u8] {
        if self.ptr.is_null() {
            return &[];
        }
        // SAFETY: `ptr..ptr + mapped` is a live read-only mapping owned by `self` (unmapped
        // only by `&mut self` methods and drop), and `handed <= mapped`. Its pages are the
        // file's or, past a cut, zero pages the guard mapped in their place: always readable.
        unsafe { std::slice::from_raw_parts(self.ptr, self.handed) }
    }

    /// Where a page could not be read (the file shrank under the map, or the disk failed),
    /// if that happened.
    pub fn shrunk_at(&self) -> Option<u64> {
        #[cfg(target_os = "linux")]
        if let Some(at) = self.fault_offset() {
            return Some(self.shrunk_at.map_or(at, |s| s.min(at)));
        }
        self.shrunk_at
    }

    /// Whether the reader has been handed every byte there is (the file's size at opening,
    /// or up to where it shrank).
    pub fn at_end(&self) -> bool {
        let handed_to = self.offset + self.handed as u64;
        handed_to >= self.len || self.shrunk_at().is_some_and(|s| handed_to >= s)
    }

    /// Hands out more of the file. The bytes before `keep_from` (an index into
    /// [`MappedFile::bytes`]) may be dropped when the window moves. Returns how many bytes
    /// the window's start moved forward (indices into `bytes` shift down by that much) and
    /// how many new bytes follow the ones handed out before.
    pub fn advance(&mut self, keep_from: usize) -> io::Result<(usize, usize)> {
        if self.at_end() {
            return Ok((0, 0));
        }
        let mut dropped = 0;
        if self.ptr.is_null() || self.handed == self.mapped {
            // Move the window: it starts at the page holding `keep_from`.
            let page = page_size();
            let start = if self.ptr.is_null() {
                0
            } else {
                (self.offset + keep_from.min(self.handed) as u64) / page as u64 * page as u64
            };
            let len = usize::try_from(self.len - start)
                .unwrap_or(usize::MAX)
                .min(WINDOW);
            let keep = self.offset + self.handed as u64 - start;
            dropped = (start - self.offset) as usize;
            self.remap(start, len)?;
            self.handed = keep as usize;
        }
        // Hand out the rest of the window, touching each new page first: a page the file no
        // longer has is replaced by zeros here, before the reader sees it, and the bytes
        // handed out stop at it.
        let from = self.handed;
        let to = self.touch(from, self.mapped.min(from + STEP));
        self.handed = to;
        Ok((dropped, to - from))
    }

    /// Reads one byte of each page of the window's `from..to`, and returns where the bytes
    /// the file still holds end (`to` unless a page was cut).
    fn touch(&mut self, from: usize, to: usize) -> usize {
        let page = page_size();
        let mut i = from;
        while i < to {
            // SAFETY: `i < mapped`, inside the live mapping (see `bytes`).
            unsafe { std::ptr::read_volatile(self.ptr.add(i)) };
            i = (i / page + 1) * page;
        }
        match self.shrunk_at() {
            Some(at) if at < self.offset + to as u64 => {
                (at.saturating_sub(self.offset) as usize).clamp(from, to)
            }
            _ => to,
        }
    }

    #[cfg(target_os = "linux")]
    fn fault_offset(&self) -> Option<u64> {
        let addr = self.slot.fault.load(std::sync::atomic::Ordering::Acquire);
        (addr != 0 && !self.ptr.is_null()).then(|| {
            let page = page_size();
            let at = (addr - self.ptr as usize) / page * page;
            self.offset + at as u64
        })
    }

    /// Replaces the window with `len` bytes of the file from `start` (page-aligned).
    #[cfg(target_os = "linux")]
    fn remap(&mut self, start: u64, len: usize) -> io::Result<()> {
        use std::os::fd::AsRawFd;
        self.shrunk_at = self.shrunk_at();
        self.unmap();
        let offset = libc::off_t::try_from(start)
            .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "offset out of range"))?;
        // SAFETY: a fresh shared read-only mapping of our own open file, at an address the
        // kernel picks; nothing else refers to it. Not MAP_POPULATE: its page-by-page walk
        // cost more system time than the faults `touch` takes (each maps 64 KiB of the page
        // cache at once): 0.14 s against 0.18 s for the 1 GiB bench log, 0.03 s of wall.
        let ptr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ,
                libc::MAP_SHARED,
                self.file.as_raw_fd(),
                offset,
            )
        };
        if ptr == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        self.ptr = ptr.cast();
        self.mapped = len;
        self.offset = start;
        self.slot.arm(self.ptr as usize, len);
        Ok(())
    }

    #[cfg(not(target_os = "linux"))]
    fn remap(&mut self, _: u64, _: usize) -> io::Result<()> {
        Err(io::Error::from(io::ErrorKind::Unsupported))
    }

    fn unmap(&mut self) {
        if self.ptr.is_null() {
            return;
        }
        #[cfg(target_os = "linux")]
        {
            // The guard forgets the window first: no fault can come from it once we stop
            // reading it, and an address the kernel reuses is not taken for ours.
            self.slot.disarm();
            // SAFETY: `ptr..ptr + mapped` is our mapping, and no slice of it outlives this
            // `&mut self` call.
            unsafe { libc::munmap(self.ptr.cast(), self.mapped) };
        }
        self.ptr = std::ptr::null_mut();
        self.mapped = 0;
        self.handed = 0;
    }
}

impl Drop for MappedFile {
    fn drop(&mut self) {
        self.unmap();
        #[cfg(target_os = "linux")]
        self.slot.release();
    }
}

fn page_size() -> usize {
    #[cfg(target_os = "linux")]
    {
        static PAGE: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
        // SAFETY: sysconf reads a constant of the system.
        *PAGE.get_or_init(|| {
            usize::try_from(unsafe { libc::sysconf(libc::_SC_PAGESIZE) })
                .unwrap_or(4096)
                .max(4096)
        })
    }
    #[cfg(not(target_os = "linux"))]
    4096
}

/// The SIGBUS guard: a table of the windows mapped now, and the handler that reads it.
#[cfg(target_os = "linux")]
mod guard {
    use std::sync::OnceLock;
    use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

    /// One mapped window, as the handler sees it. Plain atomics: the handler may run on any
    /// thread at any instruction, and may take no lock.
    pub struct Slot {
        taken: AtomicBool,
        start: AtomicUsize,
        end: AtomicUsize,
        /// The first faulting address inside the window, 0 for none.
        pub fault: AtomicUsize,
    }

    /// Maps open at once (a directory is scanned on a few threads; a file past this many
    /// is read instead).
    const SLOTS_N: usize = 32;

    #[allow(clippy::declare_interior_mutable_const)]
    const EMPTY: Slot = Slot {
        taken: AtomicBool::new(false),
        start: AtomicUsize::new(0),
        end: AtomicUsize::new(0),
        fault: AtomicUsize::new(0),
    };
    static SLOTS: [Slot; SLOTS_N] = [EMPTY; SLOTS_N];

    /// The disposition SIGBUS had before ours, put back for a fault that is not ours.
    static PREVIOUS: OnceLock<libc::sigaction> = OnceLock::new();
    /// Whether our handler is installed.
    static INSTALLED: OnceLock<bool> = OnceLock::new();

    impl Slot {
        pub fn arm(&self, start: usize, len: usize) {
            self.fault.store(0, Ordering::Release);
            self.end.store(start + len, Ordering::Release);
            self.start.store(start, Ordering::Release);
        }

        pub fn disarm(&self) {
            self.start.store(0, Ordering::Release);
            self.end.store(0, Ordering::Release);
            self.fault.store(0, Ordering::Release);
        }

        pub fn release(&self) {
            self.disarm();
            self.taken.store(false, Ordering::Release);
        }
    }

    /// A free slot, with the handler installed; `None` if the handler cannot be installed
    /// or every slot is taken.
    pub fn claim() -> Option<&'static Slot> {
        if !*INSTALLED.get_or_init(install) {
            return None;
        }
        SLOTS.iter().find(|s| {
            s.taken
                .compare_exchange(false, true, Ordering::AcqRel, Ordering::Acquire)
                .is_ok()
        })
    }

    fn install() -> bool {
        // SAFETY: sigaction with valid pointers; the previous disposition is kept before
        // ours goes in, so the handler always has something to put back.
        unsafe {
            let mut previous: libc::sigaction = std::mem::zeroed();
            if libc::sigaction(libc::SIGBUS, std::ptr::null(), &mut previous) != 0 {
                return false;
            }
            let _ = PREVIOUS.set(previous);
            let mut ours: libc::sigaction = std::mem::zeroed();
            ours.sa_sigaction = on_sigbus as *const () as usize;
            ours.sa_flags = libc::SA_SIGINFO;
            libc::sigemptyset(&mut ours.sa_mask);
            libc::sigaction(libc::SIGBUS, &ours, std::ptr::null_mut()) == 0
        }
    }

    /// Runs on the faulting thread. Only async-signal-safe work: atomic loads and stores,
    /// `mmap`, `sigaction`, `raise`.
    extern "C" fn on_sigbus(signal: libc::c_int, info: *mut libc::siginfo_t, _: *mut libc::c_void) {
        // SAFETY: the kernel passes a valid siginfo to an SA_SIGINFO handler.
        let (addr, code) = unsafe { ((*info).si_addr() as usize, (*info).si_code) };
        // A fault has a positive code; a SIGBUS sent by `kill` (code <= 0) is not a fault.
        if code > 0 {
            for slot in &SLOTS {
                let start = slot.start.load(Ordering::Acquire);
                let end = slot.end.load(Ordering::Acquire);
                if start == 0 || addr < start || addr >= end {
                    continue;
                }
                let page = addr & !(super::page_size() - 1);
                // SAFETY: `page..end` lies inside one window of ours; MAP_FIXED puts
                // anonymous zero pages over exactly that part of it.
                let zeros = unsafe {
                    libc::mmap(
                        page as *mut libc::c_void,
                        end - page,
                        libc::PROT_READ,
                        libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_FIXED,
                        -1,
                        0,
                    )
                };
                if zeros != libc::MAP_FAILED {
                    let _ =
                        slot.fault
                            .compare_exchange(0, addr, Ordering::AcqRel, Ordering::Acquire);
                    return; // the access is retried, and reads a zero
                }
            }
        }
        // Not ours: the disposition from before goes back, and the signal is delivered to
        // it (a fault by the retried access, a sent signal raised again).
        // SAFETY: sigaction and raise are async-signal-safe; PREVIOUS was set before the
        // handler was installed.
        unsafe {
            if let Some(previous) = PREVIOUS.get() {
                libc::sigaction(signal, previous, std::ptr::null_mut());
            } else {
                let mut default: libc::sigaction = std::mem::zeroed();
                default.sa_sigaction = libc::SIG_DFL;
                libc::sigaction(signal, &default, std::ptr::null_mut());
            }
            if code <= 0 {
                libc::raise(signal);
            }
        }
    }
}

/// A large snapshot file handed to the pickle reader in blocks copied out of the map
/// ([`crate::ingest::snapshot::pickle::BlockFeed`]), on the reading thread.
///
/// Read ahead on a second thread ([`crate::input::ReadAhead`]), a 167 MB snapshot cost
/// that thread about 0.1 s of CPU in the kernel's copy out of the page cache, on a core the
/// parser and the trace decoder share with it. Copied out of the map, the same bytes cost
/// the parsing thread about 0.02 s: 0.08 s less wall time and 0.1 s less CPU for the 1 M
/// entry bench snapshot (bench/RESULTS-snapshot.md). The reader still gets owned blocks
/// with headroom (strings cut by a block's edge are put back there), so it reads a map as it
/// reads anything else, and a file cut under the map ends the blocks where the cut is (see
/// [`MappedFile::advance`]): the pickle is then truncated there, as a read would find it.
pub struct MappedBlocks {
    map: MappedFile,
    /// Bytes of `map.bytes()` already copied into blocks.
    copied: usize,
}

impl MappedBlocks {
    pub fn new(map: MappedFile) -> MappedBlocks {
        MappedBlocks { map, copied: 0 }
    }
}

impl crate::ingest::snapshot::pickle::BlockFeed for MappedBlocks {
    fn headroom(&self) -> usize {
        super::readahead::HEADROOM
    }

    fn next_block(&mut self, spent: Option<Vec<u8>>) -> io::Result<Option<Vec<u8>>> {
        if self.copied == self.map.bytes().len() {
            let (dropped, _) = self.map.advance(self.copied)?;
            self.copied -= dropped;
        }
        let bytes = self.map.bytes();
        let n = (bytes.len() - self.copied).min(super::readahead::BLOCK);
        if n == 0 {
            return Ok(None);
        }
        let headroom = super::readahead::HEADROOM;
        let mut block = spent.unwrap_or_default();
        block.clear();
        block.reserve(headroom + n);
        block.resize(headroom, 0);
        block.extend_from_slice(&bytes[self.copied..self.copied + n]);
        self.copied += n;
        Ok(Some(block))
    }

    fn len_hint(&self) -> Option<u64> {
        Some(self.map.len())
    }
}

#[cfg(all(test, target_os = "linux"))]
mod tests {
    use super::*;
    use std::io::Write;

    fn temp_file(name: &str, bytes: &[u8]) -> (std::path::PathBuf, File) {
        let path =
            std::env::temp_dir().join(format!("oomdoctor-mapped-{}-{name}", std::process::id()));
        let mut f = File::create(&path).unwrap();
        f.write_all(bytes).unwrap();
        f.sync_all().unwrap();
        (path.clone(), File::open(&path).unwrap())
    }

    /// Maps a file of `byte`s longer than a window, hands out its first window, then cuts
    /// the file to `cut` bytes.
    fn first_window_then_cut(name: &str, byte: u8, cut: u64) -> (std::path::PathBuf, MappedFile) {
        let len = WINDOW + (4 << 20);
        let (path, f) = temp_file(name, &vec![byte; len]);
        let mut m = MappedFile::new(f, len as u64).unwrap();
        assert_eq!(fill_window(&mut m), WINDOW);
        std::fs::OpenOptions::new()
            .write(true)
            .open(&path)
            .unwrap()
            .set_len(cut)
            .unwrap();
        (path, m)
    }

    /// Hands out the rest of the current window (the first one, at the start).
    fn fill_window(m: &mut MappedFile) -> usize {
        let mut added = 0;
        loop {
            let (_, n) = m.advance(0).unwrap();
            added += n;
            if n == 0 || m.bytes().len() == WINDOW {
                return added;
            }
        }
    }

    fn read_all(m: &mut MappedFile) -> Vec<u8> {
        let mut out = Vec::new();
        loop {
            let (dropped, added) = m.advance(usize::MAX).unwrap();
            assert!(dropped <= m.bytes().len() + added + dropped);
            if added == 0 {
                break;
            }
            let b = m.bytes();
            out.extend_from_slice(&b[b.len() - added..]);
        }
        out
    }

    #[test]
    fn small_files_are_not_mapped() {
        let (path, f) = temp_file("small", b"hello\n");
        assert!(MappedFile::new(f, 6).is_none());
        std::fs::remove_file(path).unwrap();
    }

    #[test]
    fn a_file_reads_whole_through_moving_windows() {
        let len = WINDOW * 2 + 12_345;
        let bytes: Vec<u8> = (0..len).map(|i| (i % 251) as u8).collect();
        let (path, f) = temp_file("whole", &bytes);
        let mut m = MappedFile::new(f, len as u64).unwrap();
        assert_eq!(read_all(&mut m), bytes);
        assert!(m.at_end());
        assert_eq!(m.shrunk_at(), None);
        std::fs::remove_file(path).unwrap();
    }

    #[test]
    fn kept_bytes_survive_a_move() {
        let len = WINDOW + (1 << 20);
        let bytes: Vec<u8> = (0..len).map(|i| (i % 241) as u8).collect();
        let (path, f) = temp_file("keep", &bytes);
        let mut m = MappedFile::new(f, len as u64).unwrap();
        assert_eq!(fill_window(&mut m), WINDOW);
        // Keep the last 100,000 bytes of the first window.
        let keep_from = WINDOW - 100_000;
        let (dropped, added) = m.advance(keep_from).unwrap();
        assert!(dropped <= keep_from && keep_from - dropped < page_size());
        assert_eq!(added, len - WINDOW);
        let at = m.window_offset() as usize;
        assert_eq!(m.bytes(), &bytes[at..]);
        std::fs::remove_file(path).unwrap();
    }

    #[test]
    fn a_file_cut_short_under_the_map_reads_to_the_cut_and_no_further() {
        // Cut the file inside the first window, after the map handed those bytes out:
        // touching them now would be SIGBUS without the guard.
        let (path, mut m) = first_window_then_cut("cut", b'x', 3 * page_size() as u64 + 17);
        let seen = m.bytes();
        assert!(seen[..page_size()].iter().all(|&b| b == b'x'));
        // The page holding the cut is kept partly by the kernel (the rest of it reads 0);
        // the pages after it are the guard's zeros.
        assert!(seen[4 * page_size()..].iter().all(|&b| b == 0));
        assert_eq!(m.shrunk_at(), Some(4 * page_size() as u64));
        // Nothing more is handed out.
        assert_eq!(m.advance(0).unwrap(), (0, 0));
        assert!(m.at_end());
        std::fs::remove_file(path).unwrap();
    }

    #[test]
    fn a_cut_before_the_reader_gets_there_ends_the_bytes_at_it() {
        let cut = (WINDOW + 2 * page_size()) as u64;
        let (path, mut m) = first_window_then_cut("cut-ahead", b'y', cut);
        let (dropped, added) = m.advance(WINDOW - 10).unwrap();
        assert_eq!(m.window_offset() + (m.bytes().len()) as u64, cut);
        assert!(added <= 2 * page_size() && dropped > 0);
        assert!(m.bytes().iter().all(|&b| b == b'y'));
        assert_eq!(m.shrunk_at(), Some(cut));
        assert_eq!(m.advance(0).unwrap(), (0, 0));
        std::fs::remove_file(path).unwrap();
    }
}
