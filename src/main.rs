//! The `oomdoctor` binary: parse arguments, run, map the result to an exit code.

use std::io::IsTerminal;
use std::process::ExitCode;

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
        stdin: Some(Box::new(stdin.lock())),
        stdin_is_tty,
        stdout: &mut out,
        stdout_is_tty,
        stderr: &mut err,
        stderr_is_tty,
    };
    oomdoctor::cli::app::main_with_args(std::env::args_os(), &mut io).into()
}
