//! Pickle reader + snapshot decoder + analysis + facts + plot data; and the decoder read
//! pipelined (on a second thread, `Pickle::from_blocks_with`, as the app reads a file), which
//! must come to the same decoded snapshot or the same error as on one thread.
#![no_main]
use libfuzzer_sys::fuzz_target;
use oomdoctor::ingest::snapshot::pickle::{BlockFeed, Pickle, PickleError, PickleLimits};
use oomdoctor::ingest::snapshot::schema::StreamDecoder;

/// Hands out the input in blocks of cycling sizes.
struct Blocks<'a> {
    data: &'a [u8],
    i: usize,
}

impl BlockFeed for Blocks<'_> {
    fn headroom(&self) -> usize {
        2
    }
    fn next_block(&mut self, _spent: Option<Vec<u8>>) -> std::io::Result<Option<Vec<u8>>> {
        if self.data.is_empty() {
            return Ok(None);
        }
        let n = [4093, 1, 300][self.i % 3].min(self.data.len());
        self.i += 1;
        let mut block = vec![0x95; 2];
        block.extend_from_slice(&self.data[..n]);
        self.data = &self.data[n..];
        Ok(Some(block))
    }
}

/// The decoded snapshot, or the error, as text.
fn decoded(data: &[u8], limits: &PickleLimits, pipelined: bool) -> String {
    let mut decoder = StreamDecoder::new(limits);
    let pickle = if pipelined {
        Pickle::from_blocks_with(&mut Blocks { data, i: 0 }, limits, &mut decoder)
    } else {
        Pickle::parse_with(data, limits, Some(&mut decoder))
    };
    match pickle {
        Ok(p) => format!("{:?}", decoder.finish(&p)),
        Err(PickleError::Stopped { .. }) => format!("stopped: {:?}", decoder.error()),
        Err(e) => format!("{e:?}"),
    }
}

fuzz_target!(|data: &[u8]| {
    let input: oomdoctor::facts::evidence::InputName = std::sync::Arc::from("fuzz.pickle");
    let limits = oomdoctor::ingest::snapshot::pickle::PickleLimits::default();
    if let Ok(a) = oomdoctor::ingest::snapshot::read_snapshot(data, &input, &limits) {
        let _ = a.facts();
        let _ = oomdoctor::render::plot::SnapshotPlot::from_analysis(&a);
    }
    let one = decoded(data, &limits, false);
    let two = decoded(data, &limits, true);
    assert!(one == two, "one thread:\n{one:.3000}\npipelined:\n{two:.3000}");
});
