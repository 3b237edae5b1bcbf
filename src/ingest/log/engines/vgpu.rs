//! GPU virtualisation layers that enforce a per-container memory quota: HAMi-core
//! (`libvgpu.so`, Kubernetes `nvidia.com/gpumem`).
//!
//! Sources: `ENGINE-MESSAGES.md` §1.6. HAMi-core refuses an allocation that would take the
//! container past its quota with `[HAMI-core ERROR (pid:25 thread=… allocator.c:53)]: Device 0
//! OOM 27147995136 / 25757220864` (what the container would then hold / its quota, in bytes)
//! or, from the allocation call, `cuMemoryAllocate failed res=2` (CUDA_ERROR_OUT_OF_MEMORY).
//! The framework then reports its own OOM (`CUDA error: out of memory`, PyTorch's
//! `OutOfMemoryError` with the quota as the device's capacity): the HAMi line is a wrapper
//! that adds the quota to that incident. `Msg` lines at start-up print the physical device
//! next to the quota (`orig free=… total=15642329088 limit=5368709120 usage=0`).

use std::sync::LazyLock;

use regex::Regex;

use super::local::span;
use super::{Domain, Emit, Failure, Line, Recognizer, id};
use crate::ingest::log::pattern::static_regex;

static HAMI_OOM: LazyLock<Regex> = LazyLock::new(|| {
    static_regex(
        r"\[HAMI-core ERROR[^\]]*\]: Device (?P<dev>\d+) OOM (?P<need>\d+) / (?P<limit>\d+)",
    )
});
static HAMI_ALLOC_FAILED: LazyLock<Regex> =
    LazyLock::new(|| static_regex(r"\[HAMI-core ERROR[^\]]*\]: cuMemoryAllocate failed res=2\b"));
static HAMI_DEVICE: LazyLock<Regex> = LazyLock::new(|| {
    static_regex(r"\[HAMI-core [^\]]*\]: orig free=\d+ total=(?P<total>\d+) limit=(?P<limit>\d+)")
});

/// No container holds more than this; a larger figure is HAMi-core's own accounting
/// underflowing (`18446744073604695040 / 5368709120`), not memory.
const IMPLAUSIBLE_BYTES: u64 = 1 << 50;

/// The vGPU-layer recogniser.
pub struct Vgpu;

impl Recognizer for Vgpu {
    fn engine(&self) -> &'static str {
        id::UNKNOWN
    }

    fn anchors(&self) -> &'static [&'static str] {
        &["HAMI-core"]
    }

    fn recognize(&self, line: &Line<'_>, out: &mut Emit) {
        let text = line.text;
        if let Some(c) = HAMI_DEVICE.captures(text) {
            let (total, limit) = (&c["total"], &c["limit"]);
            if let (Ok(t), Ok(l)) = (total.parse::<u64>(), limit.parse::<u64>()) {
                if l > 0 && t < IMPLAUSIBLE_BYTES {
                    let m = c.name("total").expect("group total");
                    out.fact("vgpu.device_total_bytes", t, span(&m));
                    let m = c.name("limit").expect("group limit");
                    out.fact("vgpu.quota_bytes", l, span(&m));
                }
            }
            return;
        }
        if let Some(c) = HAMI_OOM.captures(text) {
            let mut f = quota_failure();
            f.device = c["dev"].parse().ok();
            let need = c["need"].parse::<u64>().ok();
            let limit = c["limit"].parse::<u64>().ok();
            if let (Some(need), Some(limit)) = (need, limit) {
                if limit > 0 && limit < IMPLAUSIBLE_BYTES {
                    let m = c.name("limit").expect("group limit");
                    f.fact("vgpu.quota_bytes", limit, span(&m));
                    if need < IMPLAUSIBLE_BYTES {
                        let m = c.name("need").expect("group need");
                        f.fact("vgpu.needed_bytes", need, span(&m));
                    }
                }
            }
            out.failure(f);
            return;
        }
        if HAMI_ALLOC_FAILED.is_match(text) {
            out.failure(quota_failure());
        }
    }
}

fn quota_failure() -> Failure {
    let mut f = Failure::new("device-oom", id::UNKNOWN, Domain::Device);
    // The framework's own error follows and carries the request and the stack.
    f.wrapper = true;
    f.fact("vgpu.layer", "hami-core", None);
    f
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::facts::evidence::Value;
    use crate::ingest::log::engines::Observation;

    /// Facts on their own and inside the failure a line reports.
    fn facts(text: &str) -> Vec<(&'static str, Value)> {
        let out = crate::ingest::log::engines::run_line(&Vgpu, text);
        out.records
            .into_iter()
            .flat_map(|r| match r.obs {
                Observation::Fact { name, value } => vec![(name, value)],
                Observation::Failure(f) => f.facts.into_iter().map(|(n, v, _)| (n, v)).collect(),
                _ => vec![],
            })
            .collect()
    }

    #[test]
    fn quota_refusals_and_the_device_behind_them() {
        let f = facts(
            "[HAMI-core ERROR (pid:25 thread=139892685178688 allocator.c:53)]: Device 0 OOM 27147995136 / 25757220864",
        );
        assert!(f.contains(&("vgpu.quota_bytes", Value::Num(25757220864.0))));
        assert!(f.contains(&("vgpu.needed_bytes", Value::Num(27147995136.0))));
        assert!(f.contains(&("vgpu.layer", Value::str("hami-core"))));
        // HAMi-core's accounting underflowed: the quota is real, the "need" is not.
        let f = facts(
            "[HAMI-core ERROR (pid:38 thread=140412686483456 allocator.c:53)]: Device 0 OOM 18446744073604695040 / 5368709120",
        );
        assert!(f.contains(&("vgpu.quota_bytes", Value::Num(5368709120.0))));
        assert!(!f.iter().any(|(n, _)| *n == "vgpu.needed_bytes"));
        let f = facts(
            "[HAMI-core Msg(38:140412686483456:memory.c:511)]: orig free=15521808384 total=15642329088 limit=5368709120 usage=0",
        );
        assert!(f.contains(&("vgpu.device_total_bytes", Value::Num(15642329088.0))));
        // Start-up chatter and other errors are not refusals.
        assert!(
            facts("[HAMI-core Msg(35:140231866029888:libvgpu.c:836)]: Initializing.....")
                .is_empty()
        );
        assert!(facts("[HAMI-core ERROR (pid:362 thread=140045668926464 context.c:114)]: cuCtxSetCurrent failed res=4").is_empty());
    }
}
