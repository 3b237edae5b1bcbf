//! Facts the `ingest::log::engines::xla` stage may set.

use super::{FactDef, fact};
use crate::facts::evidence::Unit;

/// Facts read from XLA / TensorFlow logs.
pub const FACTS: &[FactDef] = &[
    fact(
        "xla.allocator",
        Unit::Text,
        "The BFC allocator that ran out (`GPU_0_bfc`).",
    ),
    fact(
        "xla.pool_limit_bytes",
        Unit::Bytes,
        "The allocator's memory limit: BFC `Limit:`, `memory_limit_`, `pool limit`, or `XLA backend allocating N bytes`.",
    ),
    fact(
        "xla.in_use_bytes",
        Unit::Bytes,
        "Memory in use in the pool at the failure (`InUse:`, `Sum Total of in-use chunks`).",
    ),
    fact(
        "xla.peak_in_use_bytes",
        Unit::Bytes,
        "Peak memory in use in the pool (`MaxInUse:`).",
    ),
    fact(
        "xla.largest_free_block_bytes",
        Unit::Bytes,
        "Largest free chunk in the pool (`LargestFreeBlock:`, `largest free chunk`).",
    ),
    fact(
        "xla.free_in_pool_bytes",
        Unit::Bytes,
        "Free memory inside the pool (`total free in pool`, `available bytes`, or limit - in use).",
    ),
    fact(
        "xla.mem_fraction",
        Unit::Ratio,
        "XLA_PYTHON_CLIENT_MEM_FRACTION as the user set it (default 0.75 when preallocating).",
    ),
    fact(
        "xla.preallocate",
        Unit::Flag,
        "XLA_PYTHON_CLIENT_PREALLOCATE as the user set it (JAX preallocates by default).",
    ),
    fact(
        "xla.client_allocator",
        Unit::Text,
        "XLA_PYTHON_CLIENT_ALLOCATOR (platform = no caching).",
    ),
    fact(
        "xla.device_memory_bytes",
        Unit::Bytes,
        "Device memory TensorFlow created its GPU device with (`Created device ... with N MB memory`).",
    ),
    fact(
        "xla.reservable_bytes",
        Unit::Bytes,
        "The largest buffer the TPU runtime could still place (`... and 10.52G reservable`, `The largest contiguous region of free memory is 314.55M due to fragmentation`); below the request while the free memory is above it, the free memory is in pieces.",
    ),
    fact(
        "xla.program_bytes",
        Unit::Bytes,
        "Memory the compiled program needs (`BufferAssignment ... total allocation`, TPU `Used X of Y hbm`).",
    ),
    fact(
        "xla.temp_bytes",
        Unit::Bytes,
        "Temporary buffers of the compiled program (`preallocated temp allocation`).",
    ),
    fact(
        "xla.device_alloc_grew",
        Unit::Flag,
        "A failed device allocation asked for more than one that failed just before it: the allocator was growing on demand while the program ran, so the failures are not the pool reserved at start.",
    ),
    fact(
        "xla.startup_alloc_failed",
        Unit::Flag,
        "The runtime could not reserve its pool at start (`failed to allocate ... from device: CUDA_ERROR_OUT_OF_MEMORY`): the GPU was already in use.",
    ),
    fact(
        "xla.library_handle_failed",
        Unit::Flag,
        "TensorFlow's / XLA's stream executor could not create a cuBLAS or cuDNN handle (`failed to create cublas handle: CUBLAS_STATUS_NOT_INITIALIZED`, `Could not create cudnn handle: CUDNN_STATUS_ALLOC_FAILED`): the memory a library takes outside the runtime's pool was not there.",
    ),
    fact(
        "xla.context_create_failed",
        Unit::Flag,
        "Creating the CUDA context failed for memory (`failed call to cuDevicePrimaryCtxRetain: CUDA_ERROR_OUT_OF_MEMORY`): the device was full before the process allocated anything.",
    ),
    fact(
        "tf.tensor_shape",
        Unit::Text,
        "Shape of the tensor TensorFlow failed to allocate (`[32,1024,1024]`).",
    ),
    fact(
        "tf.tensor_dtype",
        Unit::Text,
        "Its dtype (`float`, `half`, `bfloat16`, ...).",
    ),
    fact(
        "tf.node",
        Unit::Text,
        "The graph node TensorFlow was running when the allocation failed (`[[Node: embeddings/Adam/Initializer/zeros = ...]]`, `[[{{node gradients/conv1/Conv2D_grad/Conv2DBackpropInput}}]]`).",
    ),
    fact(
        "tf.batch_dim",
        Unit::Count,
        "The first dimension of that shape, usually the batch size.",
    ),
    fact(
        "tf.memory_growth",
        Unit::Flag,
        "Whether GPU memory growth is on (`set_memory_growth(gpu, True)`, `TF_FORCE_GPU_ALLOW_GROWTH=true`).",
    ),
    fact(
        "tf.gpu_allocator",
        Unit::Text,
        "TF_GPU_ALLOCATOR as the user set it (`cuda_malloc_async`).",
    ),
    fact(
        "tf.memory_limit_bytes",
        Unit::Bytes,
        "A logical-device memory limit the user set (`LogicalDeviceConfiguration(memory_limit=N)`, MiB).",
    ),
    fact(
        "tf.memory_fraction",
        Unit::Ratio,
        "`per_process_gpu_memory_fraction` as the user set it (TensorFlow 1.x `GPUOptions`): the pool is that share of the card on purpose.",
    ),
    fact(
        "tf.device_total_bytes",
        Unit::Bytes,
        "The first GPU's size as TensorFlow found it (`totalMemory: 10.92GiB`, 2.0-2.3 `deviceMemorySize: 10.92GiB`).",
    ),
    fact(
        "tf.device_free_at_start_bytes",
        Unit::Bytes,
        "What was free on the first GPU when TensorFlow 1.x started (`freeMemory: 355.44MiB`): memory missing here was held before the process allocated anything.",
    ),
    fact(
        "xla.device_total_bytes",
        Unit::Bytes,
        "Derived: device capacity implied by the pool limit and the memory fraction (limit / fraction).",
    ),
    fact(
        "xla.mem_fraction_fit",
        Unit::Ratio,
        "Derived: the XLA_PYTHON_CLIENT_MEM_FRACTION that holds what the program had in use plus the failed request (at most 0.95).",
    ),
];
