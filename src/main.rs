//! The `oomdoctor` binary: parse arguments, run, map the result to an exit code.

use std::alloc::{GlobalAlloc, Layout, System};
use std::io::IsTerminal;
use std::process::ExitCode;

/// The system allocator, except that running out of memory (a `ulimit -v` or cgroup cap
/// met while reading a large snapshot) ends the process with exit code 2 and a message
/// naming the input and how far it was read, like any other input error, instead of the
/// default abort (SIGABRT, exit 134, and a core dump).
struct ExitOnOom;

unsafe impl GlobalAlloc for ExitOnOom {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let p = unsafe { System.alloc(layout) };
        if p.is_null() {
            out_of_memory(layout.size());
        }
        p
    }
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        let p = unsafe { System.alloc_zeroed(layout) };
        if p.is_null() {
            out_of_memory(layout.size());
        }
        p
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        let p = unsafe { System.realloc(ptr, layout, new_size) };
        if p.is_null() {
            out_of_memory(new_size);
        }
        p
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        unsafe { System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static ALLOCATOR: ExitOnOom = ExitOnOom;

/// Writes the error without allocating (straight to fd 2: the main thread may hold the
/// stderr lock) and exits 2.
#[cold]
fn out_of_memory(size: usize) -> ! {
    use std::io::Write;
    let mut buf = [0u8; 1024];
    let mut w = &mut buf[..];
    let (name, at) = oomdoctor::cli::diagnose::reading_now();
    let _ = match name {
        Some(name) => writeln!(
            w,
            "error: {name}: out of memory (an allocation of {size} bytes failed) at byte {at} of the input; the machine (or its memory limit) has too little memory for this snapshot"
        ),
        None => writeln!(
            w,
            "error: out of memory (an allocation of {size} bytes failed); the machine (or its memory limit) has too little memory for this input"
        ),
    };
    let len = 1024 - w.len();
    #[cfg(unix)]
    {
        use std::os::fd::FromRawFd;
        // SAFETY: fd 2 is open for the life of the process; ManuallyDrop never closes it.
        let mut f = std::mem::ManuallyDrop::new(unsafe { std::fs::File::from_raw_fd(2) });
        let _ = f.write_all(&buf[..len]);
    }
    #[cfg(not(unix))]
    let _ = std::io::stderr().write_all(&buf[..len]);
    std::process::exit(2)
}

fn main() -> ExitCode {
    let stdin = std::io::stdin();
    let stdin_is_tty = stdin.is_terminal();
    let stdout = std::io::stdout();
    let stdout_is_tty = stdout.is_terminal();
    let stderr = std::io::stderr();
    let stderr_is_tty = stderr.is_terminal();
    let mut out = std::io::BufWriter::new(stdout.lock());
    let mut err = stderr.lock();
    let mut io = oomdoctor::cli::app::Io {
        // A pipe is widened, and drained on a thread of its own where it cannot be
        // (`input::read_pipe`); a regular file is read as a named one is (and a large one
        // mapped, `input::stdin_is_file`). Unlocked (a lock per read): a snapshot's reader
        // may move it to a thread.
        stdin: Some(if stdin_is_tty || oomdoctor::input::stdin_is_file(&stdin) {
            Box::new(stdin)
        } else {
            let wide = oomdoctor::input::widen_pipe(&stdin);
            oomdoctor::input::read_pipe(stdin, wide)
        }),
        stdin_is_tty,
        stdout: &mut out,
        stdout_is_tty,
        stderr: &mut err,
        stderr_is_tty,
    };
    oomdoctor::cli::app::main_with_args(std::env::args_os(), &mut io).into()
}
