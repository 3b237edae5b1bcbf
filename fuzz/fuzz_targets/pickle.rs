//! The restricted pickle reader on arbitrary bytes, with small limits so the fuzzer explores
//! limit errors too; and its two streamed forms, read through a buffer in pieces and taken
//! in blocks with headroom (`BlockFeed`, how the app reads a snapshot), which must end the
//! same way, down to the error and its offset.
#![no_main]
use libfuzzer_sys::fuzz_target;
use oomdoctor::ingest::snapshot::pickle::{BlockFeed, Pickle, PickleLimits};

/// Hands out the input in reads of cycling sizes.
struct Pieces<'a> {
    data: &'a [u8],
    sizes: [usize; 3],
    i: usize,
}

impl std::io::Read for Pieces<'_> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = self.sizes[self.i % 3].min(buf.len()).min(self.data.len());
        self.i += 1;
        buf[..n].copy_from_slice(&self.data[..n]);
        self.data = &self.data[n..];
        Ok(n)
    }
}

/// Hands out the input in blocks of cycling sizes after `headroom` bytes of junk.
struct Blocks<'a> {
    data: &'a [u8],
    sizes: [usize; 3],
    headroom: usize,
    i: usize,
}

impl BlockFeed for Blocks<'_> {
    fn headroom(&self) -> usize {
        self.headroom
    }
    fn next_block(&mut self, _spent: Option<Vec<u8>>) -> std::io::Result<Option<Vec<u8>>> {
        if self.data.is_empty() {
            return Ok(None);
        }
        let n = self.sizes[self.i % 3].min(self.data.len());
        self.i += 1;
        let mut block = vec![0x95; self.headroom];
        block.extend_from_slice(&self.data[..n]);
        self.data = &self.data[n..];
        Ok(Some(block))
    }
}

fuzz_target!(|data: &[u8]| {
    let mut limits = PickleLimits::default();
    limits.max_objects = 100_000;
    limits.max_stack_depth = 10_000;
    let _ = Pickle::parse(data, &limits);
    let sizes = [1 + data.len() % 7, 4096, 3];
    let read = Pickle::from_reader(Pieces { data, sizes, i: 0 }, &limits);
    let mut feed = Blocks {
        data,
        sizes,
        headroom: data.len() % 5,
        i: 0,
    };
    let blocks = Pickle::from_blocks(&mut feed, &limits);
    match (&read, &blocks) {
        (Ok(a), Ok(b)) => assert_eq!(
            (a.end(), a.leftover(), a.input_len(), a.input_len_is_lower_bound()),
            (b.end(), b.leftover(), b.input_len(), b.input_len_is_lower_bound())
        ),
        (Err(a), Err(b)) => assert_eq!(format!("{a:?}"), format!("{b:?}")),
        _ => panic!("read in pieces: {:?}; taken in blocks: {:?}", read.err(), blocks.err()),
    }
});
