//! Reads standard input to the end and does nothing with it, through a pipe widened to 1 MiB
//! as oomdoctor widens its own, into one reused buffer: what a pipe alone costs, the floor
//! under any reader of a piped log. `bench/scan_bench.sh`'s "pipe alone" row:
//! `cat LOG | target/release/examples/pipe_drain`. (A Python reader set that floor 10-40 %
//! too high: interpreter start-up, and an object per read.)

use std::io::Read;

fn main() -> std::io::Result<()> {
    let stdin = std::io::stdin();
    if !oomdoctor::input::widen_pipe(&stdin) {
        eprintln!("pipe_drain: standard input is not a pipe widened to 1 MiB");
    }
    let mut stdin = stdin.lock();
    let mut buf = vec![0u8; oomdoctor::input::WIDE_PIPE];
    let mut total: u64 = 0;
    loop {
        match stdin.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => total += n as u64,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    println!("{total}");
    Ok(())
}
