//! Facts the `ingest::log::engines::vgpu` stage may set.

use super::{FactDef, fact};
use crate::facts::evidence::Unit;

/// Facts read from a GPU virtualisation layer's own lines (HAMi-core).
pub const FACTS: &[FactDef] = &[
    fact(
        "vgpu.layer",
        Unit::Text,
        "The virtualisation layer that enforces a per-container memory quota: hami-core.",
    ),
    fact(
        "vgpu.quota_bytes",
        Unit::Bytes,
        "The container's device-memory quota (HAMi-core's `limit`, Kubernetes `nvidia.com/gpumem`).",
    ),
    fact(
        "vgpu.needed_bytes",
        Unit::Bytes,
        "What the container would have held had the refused allocation succeeded (HAMi-core's `Device N OOM <this> / <quota>`).",
    ),
    fact(
        "vgpu.device_total_bytes",
        Unit::Bytes,
        "The physical device's memory, as HAMi-core prints it at start-up (`orig ... total=`).",
    ),
];
