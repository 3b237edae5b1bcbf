//! Restricted pickle reader: data only, never executes, bounded, iterative.
//!
//! This module owns turning the bytes of a pickle (protocols 0–5) into an arena of plain
//! values: `None`, bools, integers, floats, strings, bytes, lists, tuples, dicts and sets.
//! It is written for PyTorch memory snapshots (see `snapshot-format.md` §1.10 and
//! `crates.md` §1) but knows nothing about them.
//!
//! Why not `serde-pickle`: it deep-clones memoised values on every back-reference and fails
//! on shared containers (exactly what PyTorch writes: one frame dict referenced by thousands
//! of tracebacks), and its conversion recurses, so a deeply nested file overflows the stack.
//!
//! Design (crates.md §1.5):
//! - Values are 4-byte [`Handle`]s: a 4-bit tag and a 28-bit payload, either an inline
//!   integer (below 2^27 in magnitude: line numbers, small sizes) or an index into an arena
//!   (strings, containers, wider numbers). Small handles halve the memory of the element
//!   arena, which is most of what a snapshot's pickle holds. The memo is a
//!   table of handles, so `BINGET` copies a handle and **sharing is preserved**, as in
//!   CPython. Whether a frame dict is referenced once or a million times costs the same.
//! - Container elements live in one flat `items` arena. A container is a chain of chunks
//!   into it; Python writes each container's elements in one `APPENDS`/`SETITEMS` batch of
//!   up to 1,000 items, so nearly every container is a single chunk, and appends that land
//!   right after the container's last chunk extend it in place.
//! - The input is a stream ([`Pickle::from_reader`]: a file, a gzip decoder) read through a
//!   bounded buffer, or a slice ([`Pickle::parse`]) read the same way, or blocks filled on
//!   another thread ([`Pickle::from_blocks`], [`BlockFeed`]) that become the buffer in
//!   turn, the unread end of one put in the headroom in front of the next, so no byte is
//!   copied after the read. Each opcode's length is checked against the limits before its
//!   payload is buffered, and the bytes read are counted against
//!   [`PickleLimits::max_input_bytes`] as they arrive.
//! - A consumer may take over chosen lists while the pickle is read ([`ListSink`],
//!   [`Pickle::from_reader_with`]): the elements appended to a taken list are handed to it,
//!   complete, instead of being stored, and when an `APPENDS` batch into it ends, the
//!   containers created since the batch's MARK that the consumer says it has consumed are
//!   released (items and chunks freed; the container keeps its index and a two-number note
//!   from the consumer, [`Pickle::released`]); the items of the others are compacted down.
//!   The snapshot decoder takes the lists of `device_traces` this way, so the arena holds at
//!   most one batch (1,000 entries) of the trace. Sharing survives release: the memo still
//!   hands out the released container's handle, and the consumer recognises it by identity
//!   (it has already decoded it). A released container reads as empty, and adding to one
//!   is refused (`pickle.dump` never does that). Numbers the batch made are dropped too,
//!   unless something kept or memoised still refers to them.
//! - Read from blocks ([`Pickle::from_blocks_with`]), a consumer that supports it
//!   ([`ListSink::pipelining`]) decodes on a second thread: each closed batch goes to it
//!   with what the arenas gained since, applied to its replica of them, while the next
//!   batches are parsed; a batch is released when its verdict comes back (module
//!   `pipeline`). The consumer sees the same calls on the same contents either way.
//! - Strings are interned into one `String` arena (snapshots repeat the same file and
//!   function names endlessly, each is stored once); bytes values are copied.
//! - The virtual machine is a loop over opcodes with an explicit value stack and mark
//!   stack. Nothing recurses, so nesting depth costs memory, never call stack. A run of
//!   `BINGET`/`LONG_BINGET`s (a traceback's memoised frame dicts) is executed in one inner
//!   loop that hands anything that could fail back to the main loop; so are the gets behind
//!   a number (a dict's next key), and the `MEMOIZE` and `MARK` behind a new dict or list
//!   (protocol 4 writes every trace entry so): one dispatch where there were several.
//! - Chunk starts are 32-bit: the element arena is refused past 2^32 handles (16 GiB,
//!   unreachable within the default input limit).
//! - Opcodes that import or call code (`GLOBAL`, `REDUCE`, `BUILD`, ...) are refused with an
//!   error naming the opcode and its byte offset. A memory snapshot never contains them.
//! - Every read is bounds-checked and every size is checked against [`PickleLimits`]
//!   before anything is allocated for it; every error carries the byte offset.
//!
//! Integers: values that fit in `i64` are plain [`Value::Int`]s. Wider ones (a 9-byte
//! `LONG1` such as 2^64-1, pytorch issue #115234) are kept exactly as `i128` when they fit
//! in 128 bits; anything wider saturates to `i128::MIN`/`i128::MAX` and is marked
//! [`BigInt::saturated`]. Nothing panics on any width.
//!
//! Strings that are not valid UTF-8 (Python writes lone surrogates with `surrogatepass`)
//! are decoded lossily (U+FFFD). Python-2 `STRING`/`BINSTRING` values become `Str` when
//! they are valid UTF-8 and `Bytes` otherwise. Dicts keep their pairs in written order,
//! duplicates included; [`Pickle::dict_get`] returns the last one, as Python would. Set
//! elements are kept as written (not deduplicated).

use std::collections::HashMap;
use std::fmt;

mod pipeline;

/// Limits that keep a hostile or corrupt pickle from exhausting memory or time.
///
/// The defaults read every real snapshot we know of (the largest seen in the wild are a few
/// GB) on a laptop, while refusing files that would need more memory than that to hold.
/// Callers can raise any of them, e.g. from a command-line flag.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PickleLimits {
    /// Largest input accepted, in bytes.
    pub max_input_bytes: u64,
    /// Most objects (strings, bytes, containers, wide numbers) the file may create. At
    /// most 2^28 - 1, whatever is set: arena indices live in 28-bit handle payloads.
    pub max_objects: u64,
    /// Most memo entries, and the largest memo index accepted.
    pub max_memo_entries: u64,
    /// Most values on the unpickler stack plus open MARKs: bounds nesting depth. Nesting
    /// itself never recurses, so this is only a memory bound.
    pub max_stack_depth: u64,
    /// Most elements in one list, tuple, set or dict (pairs for a dict).
    pub max_container_len: u64,
    /// Longest single string or bytes value, in bytes.
    pub max_string_bytes: u64,
    /// Consumers that walk the value graph (the snapshot decoder) may visit at most this
    /// many elements per input byte (plus a fixed allowance of one million). Shared
    /// structures are cheap to *hold* by handle, but walking a list that references a huge
    /// shared list a million times is not: this turns such a memo bomb into an error.
    pub max_expansion_ratio: u64,
}

impl Default for PickleLimits {
    fn default() -> Self {
        PickleLimits {
            max_input_bytes: 4 << 30,
            max_objects: 200_000_000,
            max_memo_entries: 200_000_000,
            max_stack_depth: 1_000_000,
            max_container_len: 100_000_000,
            max_string_bytes: 64 << 20,
            max_expansion_ratio: 64,
        }
    }
}

impl PickleLimits {
    /// The most elements a walk over a pickle of `input_len` bytes may visit.
    pub fn walk_budget(&self, input_len: usize) -> u64 {
        self.max_expansion_ratio
            .saturating_mul(input_len as u64)
            .saturating_add(1_000_000)
    }
}

/// Why a pickle could not be read. Every variant carries the byte offset it refers to.
#[derive(Debug, thiserror::Error, miette::Diagnostic)]
pub enum PickleError {
    #[error("truncated at byte {offset} while reading {what}")]
    #[diagnostic(
        code(oomdoctor::pickle::truncated),
        help(
            "the file ends early: it was probably cut off while being written or copied. Dump the snapshot again and check that the copy completed."
        )
    )]
    Truncated { offset: u64, what: &'static str },

    #[error(
        "byte {offset}: opcode {name} ({opcode:#04x}) {detail}; the file tries to import or call code, which a memory snapshot never does, so it was not read"
    )]
    #[diagnostic(
        code(oomdoctor::pickle::refused_code),
        help(
            "oomdoctor only reads plain data (dicts, lists, strings, numbers). A real `torch.cuda.memory._dump_snapshot()` file never contains this opcode; this file is something else, or has been tampered with. Nothing in it was executed."
        )
    )]
    RefusedCode {
        offset: u64,
        opcode: u8,
        name: &'static str,
        detail: String,
    },

    #[error("byte {offset}: unknown pickle opcode {opcode:#04x}")]
    #[diagnostic(
        code(oomdoctor::pickle::unknown_opcode),
        help(
            "this is not a pickle, or it is corrupt. PyTorch snapshots are pickles written by `torch.cuda.memory._dump_snapshot()`."
        )
    )]
    UnknownOpcode { offset: u64, opcode: u8 },

    #[error("byte {offset}: pickle protocol {version} is not supported (0 to 5 are)")]
    #[diagnostic(
        code(oomdoctor::pickle::protocol),
        help(
            "a newer Python may have written this file; re-dump it with `pickle.dump(snapshot, f, protocol=4)`."
        )
    )]
    UnsupportedProtocol { offset: u64, version: u8 },

    #[error("byte {offset}: {message}")]
    #[diagnostic(
        code(oomdoctor::pickle::malformed),
        help(
            "the pickle is internally inconsistent: it is corrupt or was not written by Python's pickle module."
        )
    )]
    Malformed { offset: u64, message: String },

    #[error("byte {offset}: {what} exceeds the limit of {limit}")]
    #[diagnostic(
        code(oomdoctor::pickle::limit),
        help(
            "the file needs more than oomdoctor allows by default. If it is a genuine (very large) snapshot, raise the limit; if not, it may be built to exhaust memory."
        )
    )]
    LimitExceeded {
        offset: u64,
        what: &'static str,
        limit: u64,
    },

    #[error("byte {offset}: reading the input failed: {message}")]
    #[diagnostic(
        code(oomdoctor::pickle::read),
        help("the file could not be read to its end; check the disk or the pipe it comes from.")
    )]
    Read { offset: u64, message: String },

    #[error("byte {offset}: the consumer of the streamed lists stopped the reader")]
    #[diagnostic(
        code(oomdoctor::pickle::stopped),
        help("the decoder reading this file as it streams found a problem and holds the reason.")
    )]
    Stopped { offset: u64 },
}

impl PickleError {
    /// The byte offset the error refers to.
    pub fn offset(&self) -> u64 {
        match self {
            PickleError::Truncated { offset, .. }
            | PickleError::RefusedCode { offset, .. }
            | PickleError::UnknownOpcode { offset, .. }
            | PickleError::UnsupportedProtocol { offset, .. }
            | PickleError::Malformed { offset, .. }
            | PickleError::LimitExceeded { offset, .. }
            | PickleError::Read { offset, .. }
            | PickleError::Stopped { offset } => *offset,
        }
    }
}

/// A value in a [`Pickle`]: a 4-byte `Copy` handle. Compare handles to test identity
/// (the same memoised object), [`Pickle::value`] to look inside.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct Handle(u32);

const TAG_BITS: u32 = 4;
const TAG_MASK: u32 = (1 << TAG_BITS) - 1;
const TAG_NONE: u32 = 0;
const TAG_BOOL: u32 = 1;
const TAG_INT: u32 = 2;
const TAG_BIGINT: u32 = 3;
const TAG_FLOAT: u32 = 4;
const TAG_STR: u32 = 5;
const TAG_BYTES: u32 = 6;
const TAG_LIST: u32 = 7;
const TAG_TUPLE: u32 = 8;
const TAG_DICT: u32 = 9;
const TAG_SET: u32 = 10;
const TAG_FROZENSET: u32 = 11;

/// An `i64` that does not fit inline, in `Pickle::ints`.
const TAG_INT64: u32 = 12;
/// The same, in `Pickle::lane_ints[0]` and `[1]`: where a pipelined read (see
/// [`Pickle::from_blocks_with`]) puts the numbers of its batches in turn with `ints`, so
/// that a batch's numbers can be dropped while those of the batches after it are kept.
const TAG_INT64_LANE1: u32 = 13;
const TAG_INT64_LANE2: u32 = 14;

/// The tag of a wide integer in lane `lane` (0: `ints`).
fn int_tag(lane: u8) -> u32 {
    match lane {
        1 => TAG_INT64_LANE1,
        2 => TAG_INT64_LANE2,
        _ => TAG_INT64,
    }
}

/// Integers in this range are stored inside the handle; others go to a side table.
const INLINE_INT_MIN: i64 = -(1 << 27);
const INLINE_INT_MAX: i64 = (1 << 27) - 1;
/// Every arena index must fit the 28-bit payload.
const MAX_INDEX: u64 = (1 << (32 - TAG_BITS)) - 1;

impl Handle {
    const NONE: Handle = Handle(TAG_NONE);

    /// The handle's 32 bits: equal bits, same object (for hashing a run of handles).
    #[inline]
    pub fn bits(self) -> u32 {
        self.0
    }

    /// Whether the handle is a dict (cheaper than [`Pickle::as_dict`] when only the kind
    /// matters).
    #[inline]
    pub fn is_dict(self) -> bool {
        self.tag() == TAG_DICT
    }

    /// `payload` is an arena index below [`MAX_INDEX`] or an inline integer (two's
    /// complement, in range); only its low 28 bits are kept.
    #[inline]
    fn new(tag: u32, payload: u64) -> Handle {
        Handle(((payload as u32) << TAG_BITS) | tag)
    }
    #[inline]
    fn tag(self) -> u32 {
        self.0 & TAG_MASK
    }
    #[inline]
    fn index(self) -> usize {
        (self.0 >> TAG_BITS) as usize
    }
    #[inline]
    fn inline_int(self) -> i64 {
        ((self.0 as i32) >> TAG_BITS) as i64
    }
}

impl fmt::Debug for Handle {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let kind = match self.tag() {
            TAG_NONE => "None",
            TAG_BOOL => "Bool",
            TAG_INT => return write!(f, "Int({})", self.inline_int()),
            TAG_INT64 | TAG_INT64_LANE1 | TAG_INT64_LANE2 => "Int64",
            TAG_BIGINT => "BigInt",
            TAG_FLOAT => "Float",
            TAG_STR => "Str",
            TAG_BYTES => "Bytes",
            TAG_LIST => "List",
            TAG_TUPLE => "Tuple",
            TAG_DICT => "Dict",
            TAG_SET => "Set",
            TAG_FROZENSET => "FrozenSet",
            _ => "?",
        };
        write!(f, "{kind}#{}", self.index())
    }
}

/// A container (list, tuple, dict or set) inside a [`Pickle`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct ContainerId(u32);

impl ContainerId {
    /// Dense index of this container (0..[`Pickle::container_count`]): lets consumers keep
    /// identity maps in a `Vec` instead of a hash map.
    pub fn index(self) -> usize {
        self.0 as usize
    }
}

/// An integer wider than 64 bits.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BigInt {
    /// The value, exact unless `saturated`.
    pub value: i128,
    /// The integer did not fit in 128 bits; `value` is `i128::MAX` or `i128::MIN`.
    pub saturated: bool,
}

impl BigInt {
    /// The value as `u64` if it is in range (e.g. 2^64-1 written as a 9-byte `LONG1`).
    pub fn to_u64(self) -> Option<u64> {
        if self.saturated {
            None
        } else {
            u64::try_from(self.value).ok()
        }
    }
}

/// What a handle holds.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Value<'p> {
    None,
    Bool(bool),
    Int(i64),
    BigInt(BigInt),
    Float(f64),
    Str(&'p str),
    Bytes(&'p [u8]),
    List(ContainerId),
    Tuple(ContainerId),
    Dict(ContainerId),
    Set(ContainerId),
    FrozenSet(ContainerId),
}

impl Value<'_> {
    /// A short type name for messages ("dict", "list", "int", ...).
    pub fn type_name(&self) -> &'static str {
        match self {
            Value::None => "None",
            Value::Bool(_) => "bool",
            Value::Int(_) | Value::BigInt(_) => "int",
            Value::Float(_) => "float",
            Value::Str(_) => "str",
            Value::Bytes(_) => "bytes",
            Value::List(_) => "list",
            Value::Tuple(_) => "tuple",
            Value::Dict(_) => "dict",
            Value::Set(_) => "set",
            Value::FrozenSet(_) => "frozenset",
        }
    }
}

/// A string or bytes value: a span of [`Pickle`]'s byte arena.
#[derive(Clone, Copy, Debug)]
struct Blob {
    start: usize,
    len: usize,
}

const NO_CHUNK: u32 = u32::MAX;
/// `Container::head` of a released container (see [`Pickle::released`]).
const RELEASED: u32 = u32::MAX - 1;

#[derive(Clone, Copy, Debug)]
struct Container {
    head: u32,
    tail: u32,
    /// Elements (for a dict: pairs).
    len: u32,
}

#[derive(Clone, Copy, Debug)]
struct Chunk {
    /// Where the chunk starts in `items`: a u32 (the arena is kept below 2^32 handles, see
    /// `append_from_stack`), so that a chunk is 12 bytes; a snapshot's segments make a few
    /// hundred thousand of them, held until the end of the read.
    start: u32,
    /// Handles in this chunk (for a dict: twice the pairs).
    len: u32,
    next: u32,
}

/// A parsed pickle: the arenas and the root value. It owns everything it holds (strings
/// are copied, interned, into one byte arena), so the input need not outlive it; the
/// lifetime parameter is kept so that existing signatures (`Pickle<'_>`) stay valid.
#[derive(Clone)]
pub struct Pickle<'a> {
    protocol: Option<u8>,
    root: Handle,
    blobs: Vec<Blob>,
    /// The text of every string, each distinct string once (a `String`, so reading one
    /// back is a slice, not a UTF-8 validation of its whole length).
    text: String,
    /// The bytes of every bytes value.
    data: Vec<u8>,
    /// `i64`s too wide to be inline (addresses, timestamps, large sizes).
    ints: Vec<i64>,
    /// The same, made by the batches of a pipelined read in lanes 1 and 2.
    lane_ints: [Vec<i64>; 2],
    /// Integers wider than 64 bits.
    bigs: Vec<BigInt>,
    floats: Vec<f64>,
    containers: Vec<Container>,
    chunks: Vec<Chunk>,
    items: Vec<Handle>,
    /// Bytes read through `STOP`.
    end: usize,
    /// Values and MARKs still on the unpickler stack after `STOP` popped the root.
    leftover: usize,
    /// Length of the input: `end` plus the bytes seen after `STOP`.
    input_len: usize,
    /// The input may hold more than `input_len` bytes (a stream whose tail after `STOP`
    /// was not read to its end).
    input_len_lower_bound: bool,
    _input: std::marker::PhantomData<&'a [u8]>,
}

impl fmt::Debug for Pickle<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Pickle")
            .field("protocol", &self.protocol)
            .field("root", &self.root)
            .field("objects", &self.object_count())
            .field("items", &self.items.len())
            .finish()
    }
}

impl<'a> Pickle<'a> {
    /// How many wide integers lane `lane` (0: `ints`) holds.
    fn ints_len(&self, lane: u8) -> usize {
        match lane {
            1 => self.lane_ints[0].len(),
            2 => self.lane_ints[1].len(),
            _ => self.ints.len(),
        }
    }

    /// The wide integers of lane `lane` (0: `ints`).
    fn ints_of(&mut self, lane: u8) -> &mut Vec<i64> {
        match lane {
            1 => &mut self.lane_ints[0],
            2 => &mut self.lane_ints[1],
            _ => &mut self.ints,
        }
    }

    fn empty() -> Pickle<'a> {
        Pickle {
            protocol: None,
            root: Handle::NONE,
            blobs: Vec::new(),
            text: String::new(),
            data: Vec::new(),
            ints: Vec::new(),
            lane_ints: [Vec::new(), Vec::new()],
            bigs: Vec::new(),
            floats: Vec::new(),
            containers: Vec::new(),
            chunks: Vec::new(),
            items: Vec::new(),
            end: 0,
            leftover: 0,
            input_len: 0,
            input_len_lower_bound: false,
            _input: std::marker::PhantomData,
        }
    }

    /// Reads a whole pickle held in memory. Stops at `STOP`; bytes after it are ignored, as
    /// Python does (see [`Pickle::end`] and [`Pickle::input_len`]).
    pub fn parse(input: &'a [u8], limits: &PickleLimits) -> Result<Pickle<'a>, PickleError> {
        Pickle::parse_with(input, limits, None)
    }

    /// [`Pickle::parse`], handing the elements of the lists `sink` takes to it as they are
    /// appended (see [`ListSink`]).
    pub fn parse_with(
        input: &'a [u8],
        limits: &PickleLimits,
        sink: Option<&mut dyn ListSink>,
    ) -> Result<Pickle<'a>, PickleError> {
        if input.len() as u64 > limits.max_input_bytes {
            return Err(PickleError::LimitExceeded {
                offset: 0,
                what: "the input size",
                limit: limits.max_input_bytes,
            });
        }
        let mut reader = input;
        let mut pickle = Pickle::run_machine(
            Feed::Read(&mut reader),
            limits,
            Some(input.len()),
            sink,
            false,
        )?;
        pickle.input_len = input.len();
        pickle.input_len_lower_bound = false;
        Ok(pickle)
    }

    /// Reads a pickle from a stream (a file, a gzip decoder) through a bounded buffer: the
    /// input is never held whole. Every opcode's length is checked against `limits` before
    /// its payload is buffered, and the bytes read are counted against
    /// [`PickleLimits::max_input_bytes`] as they arrive, so a decompression bomb stops at
    /// the limit (or, far sooner, at its first byte that is not a pickle).
    ///
    /// After `STOP`, at most [`TRAILING_PEEK_BYTES`] more are read to count what follows
    /// the pickle ([`Pickle::input_len`]; [`Pickle::input_len_is_lower_bound`] says
    /// whether there may be more).
    pub fn from_reader<R: std::io::Read>(
        mut reader: R,
        limits: &PickleLimits,
    ) -> Result<Pickle<'static>, PickleError> {
        Pickle::run_machine(Feed::Read(&mut reader), limits, None, None, false)
    }

    /// [`Pickle::from_reader`], handing the elements of the lists `sink` takes to it as they
    /// are appended (see [`ListSink`]).
    pub fn from_reader_with<R: std::io::Read>(
        mut reader: R,
        limits: &PickleLimits,
        sink: &mut dyn ListSink,
    ) -> Result<Pickle<'static>, PickleError> {
        Pickle::run_machine(Feed::Read(&mut reader), limits, None, Some(sink), false)
    }

    /// [`Pickle::from_reader`], the input taken in whole blocks from `feed` (filled on
    /// another thread) instead of read into the reader's own buffer.
    pub fn from_blocks(
        feed: &mut dyn BlockFeed,
        limits: &PickleLimits,
    ) -> Result<Pickle<'static>, PickleError> {
        Pickle::run_machine(Feed::Blocks(feed), limits, None, None, false)
    }

    /// [`Pickle::from_reader_with`], the input taken in whole blocks from `feed` (filled
    /// on another thread) instead of read into the reader's own buffer; and, if the sink
    /// supports it ([`ListSink::pipelining`]), pipelined: the sink decodes each batch of a
    /// taken list on a worker thread while the next batch is parsed (module `pipeline`).
    /// The sink sees the same calls on the same contents either way.
    pub fn from_blocks_with(
        feed: &mut dyn BlockFeed,
        limits: &PickleLimits,
        sink: &mut dyn ListSink,
    ) -> Result<Pickle<'static>, PickleError> {
        Pickle::run_machine(Feed::Blocks(feed), limits, None, Some(sink), true)
    }

    fn run_machine<'x>(
        feed: Feed<'_>,
        limits: &PickleLimits,
        size_hint: Option<usize>,
        sink: Option<&mut dyn ListSink>,
        pipelined: bool,
    ) -> Result<Pickle<'x>, PickleError> {
        let might_take = sink
            .as_deref()
            .filter(|_| pipelined)
            .and_then(|s| s.pipelining());
        pipeline::with_worker(might_take, |pipe| {
            Pickle::run_vm(feed, limits, size_hint, sink, pipe)
        })
    }

    fn run_vm<'x, 's>(
        feed: Feed<'_>,
        limits: &PickleLimits,
        size_hint: Option<usize>,
        sink: Option<&'s mut dyn ListSink>,
        pipe: Option<pipeline::Pipeline<'s>>,
    ) -> Result<Pickle<'x>, PickleError> {
        let streaming = sink.is_some();
        let mut vm = Machine::new(feed, limits, sink);
        vm.pipe = pipe;
        if let Some(n) = size_hint.filter(|_| !streaming) {
            // Snapshots hold about one element handle per 6 input bytes and one memoised
            // object per 70: reserving that much up front saves the copies of repeated
            // doubling. Reserved but untouched memory costs address space, not RAM.
            vm.pickle.items.reserve(n / 6);
            vm.memo.reserve(n / 70);
            vm.pickle.containers.reserve(n / 100);
            vm.pickle.chunks.reserve(n / 100);
        }
        // A pipelined session ends with the read; the sink's stop outranks a later error of
        // the parser's, as it would have stopped the read first.
        let root = match vm.run() {
            Ok(root) => vm.end_session().map(|()| root),
            Err(e) => vm.end_session().and(Err(e)),
        }?;
        let end = vm.src.offset();
        let leftover = vm.stack.len() + vm.marks.len();
        let (trailing, more) = vm.src.count_rest(TRAILING_PEEK_BYTES);
        let Machine { pickle, .. } = vm;
        let mut pickle = pickle;
        pickle.root = root;
        pickle.end = end as usize;
        pickle.leftover = leftover;
        pickle.input_len = (end + trailing) as usize;
        pickle.input_len_lower_bound = more;
        // The arenas grew by doubling; give back what was reserved and never used.
        pickle.items.shrink_to_fit();
        pickle.text.shrink_to_fit();
        pickle.data.shrink_to_fit();
        Ok(pickle)
    }

    /// The value `STOP` returned.
    pub fn root(&self) -> Handle {
        self.root
    }

    /// The protocol from the `PROTO` opcode (2–5); `None` for protocols 0 and 1.
    pub fn protocol(&self) -> Option<u8> {
        self.protocol
    }

    /// Bytes read through `STOP`; anything after it is not part of this pickle (Python
    /// ignores it, a consumer that expects one pickle per file need not).
    pub fn end(&self) -> usize {
        self.end
    }

    /// Values (and open MARKs) left on the stack under the root at `STOP`: none in a
    /// pickle that `pickle.dump` wrote.
    pub fn leftover(&self) -> usize {
        self.leftover
    }

    /// Length of the input this pickle was read from (for a stream: through `STOP`, plus
    /// the bytes after it that were read, see [`Pickle::input_len_is_lower_bound`]).
    pub fn input_len(&self) -> usize {
        self.input_len
    }

    /// The input may be longer than [`Pickle::input_len`]: it was a stream, and more than
    /// [`TRAILING_PEEK_BYTES`] followed `STOP`, which were not read.
    pub fn input_len_is_lower_bound(&self) -> bool {
        self.input_len_lower_bound
    }

    /// Strings, bytes, containers and wide numbers created.
    pub fn object_count(&self) -> usize {
        self.blobs.len()
            + self.ints.len()
            + self.lane_ints[0].len()
            + self.lane_ints[1].len()
            + self.bigs.len()
            + self.floats.len()
            + self.containers.len()
    }

    /// Element handles held in the arena (lists, tuples, sets; two per dict pair).
    pub fn item_count(&self) -> usize {
        self.items.len()
    }

    /// Containers created; every [`ContainerId::index`] is below this.
    pub fn container_count(&self) -> usize {
        self.containers.len()
    }

    /// Strings and bytes values created; every [`Pickle::str_index`] is below this.
    pub fn blob_count(&self) -> usize {
        self.blobs.len()
    }

    /// What a handle holds.
    pub fn value(&self, h: Handle) -> Value<'_> {
        let i = h.index();
        match h.tag() {
            TAG_NONE => Value::None,
            TAG_BOOL => Value::Bool(i != 0),
            TAG_INT => Value::Int(h.inline_int()),
            TAG_INT64 => self.ints.get(i).map_or(Value::None, |&v| Value::Int(v)),
            TAG_INT64_LANE1 => self.lane_ints[0]
                .get(i)
                .map_or(Value::None, |&v| Value::Int(v)),
            TAG_INT64_LANE2 => self.lane_ints[1]
                .get(i)
                .map_or(Value::None, |&v| Value::Int(v)),
            TAG_BIGINT => self.bigs.get(i).map_or(Value::None, |&b| Value::BigInt(b)),
            TAG_FLOAT => self.floats.get(i).map_or(Value::None, |&f| Value::Float(f)),
            TAG_STR => Value::Str(self.blob_str(i)),
            TAG_BYTES => Value::Bytes(self.blob_bytes(i)),
            TAG_LIST => Value::List(ContainerId(i as u32)),
            TAG_TUPLE => Value::Tuple(ContainerId(i as u32)),
            TAG_DICT => Value::Dict(ContainerId(i as u32)),
            TAG_SET => Value::Set(ContainerId(i as u32)),
            TAG_FROZENSET => Value::FrozenSet(ContainerId(i as u32)),
            _ => Value::None,
        }
    }

    fn blob_bytes(&self, i: usize) -> &[u8] {
        match self.blobs.get(i) {
            Some(b) => self
                .data
                .get(b.start..b.start.saturating_add(b.len))
                .unwrap_or(&[]),
            None => &[],
        }
    }

    fn blob_str(&self, i: usize) -> &str {
        // Str blobs live in `text`, validated (or decoded to UTF-8) when they were created.
        match self.blobs.get(i) {
            Some(b) => self
                .text
                .get(b.start..b.start.saturating_add(b.len))
                .unwrap_or(""),
            None => "",
        }
    }

    /// The string a handle holds, if it is a `str`.
    pub fn as_str(&self, h: Handle) -> Option<&str> {
        (h.tag() == TAG_STR).then(|| self.blob_str(h.index()))
    }

    /// Index of the string a handle holds (dense, below [`Pickle::blob_count`]): strings are
    /// interned, so two handles with the same index hold equal strings (and the same
    /// memoised object always has one index).
    pub fn str_index(&self, h: Handle) -> Option<usize> {
        (h.tag() == TAG_STR).then(|| h.index())
    }

    /// The value as `i64`: ints that fit, and bools (Python bools are ints).
    pub fn as_i64(&self, h: Handle) -> Option<i64> {
        match self.value(h) {
            Value::Int(v) => Some(v),
            Value::Bool(b) => Some(b as i64),
            _ => None,
        }
    }

    /// The value as a number of bytes or an address: non-negative ints, wide ints up to
    /// 2^64-1. Negative and wider values give `None`.
    pub fn as_u64(&self, h: Handle) -> Option<u64> {
        match self.value(h) {
            Value::Int(v) => u64::try_from(v).ok(),
            Value::BigInt(b) => b.to_u64(),
            Value::Bool(b) => Some(b as u64),
            _ => None,
        }
    }

    /// The value as `f64` (floats and ints).
    pub fn as_f64(&self, h: Handle) -> Option<f64> {
        match self.value(h) {
            Value::Float(f) => Some(f),
            Value::Int(v) => Some(v as f64),
            Value::BigInt(b) => Some(b.value as f64),
            Value::Bool(b) => Some(b as u8 as f64),
            _ => None,
        }
    }

    /// The value as a bool (bools, and ints as Python's truthiness).
    pub fn as_bool(&self, h: Handle) -> Option<bool> {
        match self.value(h) {
            Value::Bool(b) => Some(b),
            Value::Int(v) => Some(v != 0),
            _ => None,
        }
    }

    /// The container a handle refers to, with its kind, if it is one.
    pub fn as_container(&self, h: Handle) -> Option<ContainerId> {
        matches!(
            h.tag(),
            TAG_LIST | TAG_TUPLE | TAG_DICT | TAG_SET | TAG_FROZENSET
        )
        .then_some(ContainerId(h.index() as u32))
    }

    /// The dict a handle refers to.
    pub fn as_dict(&self, h: Handle) -> Option<ContainerId> {
        (h.tag() == TAG_DICT).then_some(ContainerId(h.index() as u32))
    }

    /// The list or tuple a handle refers to.
    pub fn as_sequence(&self, h: Handle) -> Option<ContainerId> {
        matches!(h.tag(), TAG_LIST | TAG_TUPLE).then_some(ContainerId(h.index() as u32))
    }

    /// Number of elements (pairs, for a dict). A released container is empty; a list taken
    /// by a [`ListSink`] counts the elements handed to the sink but holds none of them.
    pub fn len(&self, c: ContainerId) -> usize {
        self.containers.get(c.index()).map_or(0, |k| {
            if k.head == RELEASED {
                0
            } else {
                k.len as usize
            }
        })
    }

    /// The note a [`ListSink`] left on a container whose arena space was released after the
    /// sink consumed it (see [`ListSink::release`]); `None` for every other container.
    /// A released container reads as empty.
    pub fn released(&self, c: ContainerId) -> Option<(u32, u32)> {
        match self.containers.get(c.index()) {
            Some(k) if k.head == RELEASED => Some((k.tail, k.len)),
            _ => None,
        }
    }

    /// Whether the container is empty.
    pub fn is_empty(&self, c: ContainerId) -> bool {
        self.len(c) == 0
    }

    /// The elements of a list, tuple or set in order. For a dict: keys and values
    /// alternating (use [`Pickle::pairs`]).
    pub fn items(&self, c: ContainerId) -> Items<'_> {
        let head = self.containers.get(c.index()).map_or(NO_CHUNK, |k| k.head);
        match Items::chunk_slice(self, head) {
            Some((slice, next)) => Items {
                pickle: self,
                current: slice.iter(),
                next_chunk: next,
            },
            None => Items {
                pickle: self,
                current: [].iter(),
                next_chunk: NO_CHUNK,
            },
        }
    }

    /// The elements of a container held in one piece of the arena (nearly all are: Python
    /// writes each container in one batch), as a slice; `None` when they are not (or the
    /// container does not exist). Cheaper to walk than [`Pickle::items`].
    #[inline]
    pub fn items_slice(&self, c: ContainerId) -> Option<&[Handle]> {
        let k = self.containers.get(c.index())?;
        if k.head == NO_CHUNK || k.head == RELEASED {
            // A released container reads as empty, as in `items`.
            return Some(&[]);
        }
        if k.head != k.tail {
            return None;
        }
        let chunk = self.chunks.get(k.head as usize)?;
        let start = chunk.start as usize;
        self.items.get(start..start + chunk.len as usize)
    }

    /// The key/value pairs of a dict in written order (duplicates included).
    pub fn pairs(&self, c: ContainerId) -> Pairs<'_> {
        Pairs {
            items: self.items(c),
        }
    }

    /// The value of the last pair whose key is the string `key`.
    pub fn dict_get(&self, c: ContainerId, key: &str) -> Option<Handle> {
        let mut found = None;
        for (k, v) in self.pairs(c) {
            if self.as_str(k) == Some(key) {
                found = Some(v);
            }
        }
        found
    }

    /// The `index`-th element of a list or tuple.
    pub fn get(&self, c: ContainerId, index: usize) -> Option<Handle> {
        self.items(c).nth(index)
    }
}

/// Iterator over a container's handles, chunk by chunk.
pub struct Items<'p> {
    pickle: &'p Pickle<'p>,
    /// The handles of the current chunk not yet returned.
    current: std::slice::Iter<'p, Handle>,
    /// The chunk after the current one.
    next_chunk: u32,
}

impl<'p> Items<'p> {
    fn chunk_slice(pickle: &'p Pickle<'p>, chunk: u32) -> Option<(&'p [Handle], u32)> {
        let c = pickle.chunks.get(chunk as usize)?;
        let start = c.start as usize;
        let slice = pickle
            .items
            .get(start..start + c.len as usize)
            .unwrap_or(&[]);
        Some((slice, c.next))
    }
}

impl Iterator for Items<'_> {
    type Item = Handle;

    #[inline]
    fn next(&mut self) -> Option<Handle> {
        loop {
            if let Some(h) = self.current.next() {
                return Some(*h);
            }
            let (slice, next) = Items::chunk_slice(self.pickle, self.next_chunk)?;
            self.current = slice.iter();
            self.next_chunk = next;
        }
    }
}

/// Iterator over a dict's `(key, value)` pairs.
pub struct Pairs<'p> {
    items: Items<'p>,
}

impl Iterator for Pairs<'_> {
    type Item = (Handle, Handle);

    #[inline]
    fn next(&mut self) -> Option<(Handle, Handle)> {
        let k = self.items.next()?;
        let v = self.items.next()?;
        Some((k, v))
    }
}

/// Takes over chosen lists while a pickle is read: their elements are handed to the sink
/// as they are appended instead of being stored in the arena, and the arena space of what
/// the sink consumed is then given back.
///
/// The reader asks [`ListSink::takes`] whenever elements are about to be appended to a list
/// (and when a MARK is pushed with a list on top, the start of an `APPENDS` batch). A list
/// taken once stays taken. Each `APPEND`/`APPENDS` into it calls [`ListSink::take`] with
/// the elements, which are complete by then (the pickler writes an element whole before
/// appending it); the list itself stays empty in the arena. When an `APPENDS` batch into a
/// taken list ends, every container created since its MARK is offered to
/// [`ListSink::release`]: the sink says which it has consumed and holds in decoded form
/// (and will recognise again by identity if the memo hands it back later); those are
/// released (their items and chunks are freed; the container keeps its index and the
/// sink's note, see [`Pickle::released`]) and the items of the others are compacted, so
/// the arena holds at most one batch of taken elements at a time.
pub trait ListSink: Send {
    /// Whether the list at `stack[target]` is one the sink takes; `offset`: input bytes
    /// read. `Err` stops the reader ([`PickleError::Stopped`]); the sink keeps the reason.
    #[allow(clippy::result_unit_err)]
    fn takes(
        &mut self,
        p: &Pickle<'_>,
        stack: &[Handle],
        target: usize,
        offset: u64,
    ) -> Result<bool, ()>;
    /// Elements appended to the taken list `list`, in order; `offset`: input bytes read.
    #[allow(clippy::result_unit_err)]
    fn take(
        &mut self,
        p: &Pickle<'_>,
        list: ContainerId,
        elements: &[Handle],
        offset: u64,
    ) -> Result<(), ()>;
    /// After a batch: `Some(note)` if the sink consumed container `c` (created during the
    /// batch) and will never need its contents again; the note is kept for
    /// [`Pickle::released`]. `None` keeps the container.
    fn release(&mut self, p: &Pickle<'_>, c: ContainerId) -> Option<(u32, u32)>;
    /// For a pipelined read ([`Pickle::from_blocks_with`]): a check, on the pickle alone,
    /// of whether [`ListSink::takes`] could answer `true` for the list at `stack[target]`
    /// when it has not taken it (`false` must mean it would not; `true` ends the pipelined
    /// session and asks `takes`). `None` (the default): the sink is not moved to another
    /// thread and the read is not pipelined.
    #[allow(clippy::type_complexity)]
    fn pipelining(&self) -> Option<fn(&Pickle<'_>, &[Handle], usize) -> bool> {
        None
    }
}

/// An `APPENDS` batch into a taken list: the arena lengths at its MARK.
#[derive(Clone, Copy, Debug, Default)]
struct Batch {
    /// Index of the batch's MARK in `Machine::marks`.
    depth: usize,
    list: u32,
    items: usize,
    chunks: usize,
    containers: usize,
    /// The lane its wide integers go to (a pipelined read takes them in turn).
    lane: u8,
    /// The length of its lane's integer arena.
    ints: usize,
    bigs: usize,
    floats: usize,
    /// A number made during the batch was memoised (Python never does this).
    keep_numbers: bool,
    /// Length of the last chunk at the MARK (it may only grow if an older container was
    /// appended to, which keeps the batch).
    last_chunk_len: Option<u32>,
    /// Lowest container index appended to during the batch.
    min_target: usize,
}

/// The names of opcodes, for messages.
fn opcode_name(op: u8) -> &'static str {
    match op {
        b'(' => "MARK",
        b'.' => "STOP",
        b'0' => "POP",
        b'1' => "POP_MARK",
        b'2' => "DUP",
        b'F' => "FLOAT",
        b'I' => "INT",
        b'J' => "BININT",
        b'K' => "BININT1",
        b'L' => "LONG",
        b'M' => "BININT2",
        b'N' => "NONE",
        b'P' => "PERSID",
        b'Q' => "BINPERSID",
        b'R' => "REDUCE",
        b'S' => "STRING",
        b'T' => "BINSTRING",
        b'U' => "SHORT_BINSTRING",
        b'V' => "UNICODE",
        b'X' => "BINUNICODE",
        b'a' => "APPEND",
        b'b' => "BUILD",
        b'c' => "GLOBAL",
        b'd' => "DICT",
        b'}' => "EMPTY_DICT",
        b'e' => "APPENDS",
        b'g' => "GET",
        b'h' => "BINGET",
        b'i' => "INST",
        b'j' => "LONG_BINGET",
        b'l' => "LIST",
        b']' => "EMPTY_LIST",
        b'o' => "OBJ",
        b'p' => "PUT",
        b'q' => "BINPUT",
        b'r' => "LONG_BINPUT",
        b's' => "SETITEM",
        b't' => "TUPLE",
        b')' => "EMPTY_TUPLE",
        b'u' => "SETITEMS",
        b'G' => "BINFLOAT",
        0x80 => "PROTO",
        0x81 => "NEWOBJ",
        0x82 => "EXT1",
        0x83 => "EXT2",
        0x84 => "EXT4",
        0x85 => "TUPLE1",
        0x86 => "TUPLE2",
        0x87 => "TUPLE3",
        0x88 => "NEWTRUE",
        0x89 => "NEWFALSE",
        0x8a => "LONG1",
        0x8b => "LONG4",
        b'B' => "BINBYTES",
        b'C' => "SHORT_BINBYTES",
        0x8c => "SHORT_BINUNICODE",
        0x8d => "BINUNICODE8",
        0x8e => "BINBYTES8",
        0x8f => "EMPTY_SET",
        0x90 => "ADDITEMS",
        0x91 => "FROZENSET",
        0x92 => "NEWOBJ_EX",
        0x93 => "STACK_GLOBAL",
        0x94 => "MEMOIZE",
        0x95 => "FRAME",
        0x96 => "BYTEARRAY8",
        0x97 => "NEXT_BUFFER",
        0x98 => "READONLY_BUFFER",
        _ => "UNKNOWN",
    }
}

/// How many bytes after `STOP` a stream is read to count them ([`Pickle::input_len`]).
pub const TRAILING_PEEK_BYTES: u64 = 1 << 20;

/// Bytes asked of the reader at a time (more only for one longer value).
const READ_CHUNK: usize = 256 << 10;

/// Why the source could not supply bytes.
enum SourceError {
    /// The input ended.
    Eof,
    /// More than `max_input_bytes` arrived.
    TooLong,
    /// The reader failed.
    Io(String),
}

/// Input in whole blocks filled on another thread (`input::ReadAhead`): the reader takes
/// each block as its buffer instead of copying it out, so reading the input costs the
/// parsing thread a hand-over per block, not a copy of every byte.
pub trait BlockFeed {
    /// Bytes left free at the front of every block, where the reader puts the unread end
    /// of the block before (an opcode or a string cut by the block's edge).
    fn headroom(&self) -> usize;
    /// The next block, its input at `[headroom..]`; `None` once the input ended. `spent`
    /// is a block the reader is done with, for reuse.
    fn next_block(&mut self, spent: Option<Vec<u8>>) -> std::io::Result<Option<Vec<u8>>>;
    /// The input's whole length where it is known before it is read (a regular file), for
    /// the pipeline's choice of whether a replica is worth its memory.
    fn len_hint(&self) -> Option<u64> {
        None
    }
}

/// Where a [`Source`] gets its bytes.
enum Feed<'r> {
    /// Read into the source's own buffer.
    Read(&'r mut dyn std::io::Read),
    /// Taken block by block (see [`BlockFeed`]).
    Blocks(&'r mut dyn BlockFeed),
}

/// The input as a stream through a bounded buffer: `buf[pos..filled]` are read but not
/// yet consumed, `base` is the input offset of `buf[0]` (modulo 2^64: a block's headroom
/// may put `buf[0]` before the input's first byte). The buffer holds one chunk (or one
/// block), or one value's payload when that is longer (bounded by the string limit,
/// checked first).
struct Source<'r> {
    feed: Feed<'r>,
    /// A block done with, to hand back to a [`BlockFeed`].
    spare: Option<Vec<u8>>,
    buf: Vec<u8>,
    pos: usize,
    filled: usize,
    base: u64,
    eof: bool,
    max_input: u64,
}

impl Source<'_> {
    /// The input's whole length, where the feed knows it ([`BlockFeed::len_hint`]).
    fn len_hint(&self) -> Option<u64> {
        match &self.feed {
            Feed::Blocks(f) => f.len_hint(),
            Feed::Read(_) => None,
        }
    }

    /// Input offset of the next unread byte.
    #[inline]
    fn offset(&self) -> u64 {
        self.base.wrapping_add(self.pos as u64)
    }

    /// Input bytes read so far (where a truncated input ended).
    fn read_so_far(&self) -> u64 {
        self.base.wrapping_add(self.filled as u64)
    }

    #[inline]
    fn available(&self) -> usize {
        self.filled - self.pos
    }

    /// Makes at least `need` unread bytes available.
    fn fill(&mut self, need: usize) -> Result<(), SourceError> {
        if self.available() >= need {
            return Ok(());
        }
        if matches!(self.feed, Feed::Blocks(_)) {
            return self.fill_from_blocks(need);
        }
        self.compact();
        let want = need.max(READ_CHUNK);
        if self.buf.len() < want {
            self.buf.resize(want, 0);
        } else if self.buf.len() > 4 * want && self.filled <= want {
            // A long value passed; do not keep its buffer.
            self.buf.truncate(want);
            self.buf.shrink_to_fit();
        }
        while self.filled < need {
            if self.eof {
                return Err(SourceError::Eof);
            }
            // One byte more than the limit allows tells "at the limit" from "past it".
            let allowed = self
                .max_input
                .saturating_add(1)
                .saturating_sub(self.read_so_far());
            let end = self.buf.len().min(
                self.filled
                    .saturating_add(usize::try_from(allowed).unwrap_or(usize::MAX)),
            );
            if end <= self.filled {
                return Err(SourceError::TooLong);
            }
            let read = match &mut self.feed {
                Feed::Read(reader) => reader.read(&mut self.buf[self.filled..end]),
                Feed::Blocks(_) => Ok(0),
            };
            match read {
                Ok(0) => self.eof = true,
                Ok(n) => {
                    self.filled += n.min(end - self.filled);
                    if self.read_so_far() > self.max_input {
                        return Err(SourceError::TooLong);
                    }
                }
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => return Err(SourceError::Io(e.to_string())),
            }
        }
        Ok(())
    }

    /// Moves the unread tail to the front of the buffer.
    fn compact(&mut self) {
        if self.pos > 0 {
            self.buf.copy_within(self.pos..self.filled, 0);
            self.base = self.base.wrapping_add(self.pos as u64);
            self.filled -= self.pos;
            self.pos = 0;
        }
    }

    /// [`Source::fill`] from a [`BlockFeed`]: each block becomes the buffer, the unread
    /// tail of the one before put in its headroom; a tail longer than the headroom (a long
    /// string across the edge) is kept, and the block's bytes appended to it.
    fn fill_from_blocks(&mut self, need: usize) -> Result<(), SourceError> {
        while self.available() < need {
            if self.eof {
                return Err(SourceError::Eof);
            }
            let (headroom, block) = match &mut self.feed {
                Feed::Blocks(feed) => (feed.headroom(), feed.next_block(self.spare.take())),
                Feed::Read(_) => return Err(SourceError::Eof),
            };
            let block = match block {
                Ok(b) => b,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(SourceError::Io(e.to_string())),
            };
            let Some(mut block) = block.filter(|b| b.len() > headroom) else {
                self.eof = true;
                continue;
            };
            let tail = self.available();
            let spent = if tail <= headroom {
                let start = headroom - tail;
                block[start..headroom].copy_from_slice(&self.buf[self.pos..self.filled]);
                // `block[start]` is the input byte at `offset()`.
                self.base = self.offset().wrapping_sub(start as u64);
                self.pos = start;
                self.filled = block.len();
                std::mem::replace(&mut self.buf, block)
            } else {
                self.compact();
                self.buf.truncate(self.filled);
                self.buf.extend_from_slice(&block[headroom..]);
                self.filled = self.buf.len();
                block
            };
            // Handed back with the next request: it saves the feed an allocation.
            self.spare = Some(spent);
            if self.read_so_far() > self.max_input {
                return Err(SourceError::TooLong);
            }
        }
        Ok(())
    }

    /// Consumes `n` bytes, returning where they are in `buf` (valid until the next fill).
    #[inline]
    fn take(&mut self, n: usize) -> Result<std::ops::Range<usize>, SourceError> {
        if self.available() < n {
            self.fill(n)?;
        }
        let start = self.pos;
        self.pos += n;
        Ok(start..start + n)
    }

    /// Consumes a line (up to `max` bytes, newline excluded); returns its range in `buf`.
    /// `Ok(None)`: the line is longer than `max`.
    fn line(&mut self, max: u64) -> Result<Option<std::ops::Range<usize>>, SourceError> {
        let mut searched = 0;
        loop {
            if let Some(nl) = memchr::memchr(b'\n', &self.buf[self.pos + searched..self.filled]) {
                let len = searched + nl;
                if len as u64 > max {
                    return Ok(None);
                }
                let start = self.pos;
                self.pos += len + 1;
                return Ok(Some(start..start + len));
            }
            searched = self.available();
            if searched as u64 > max {
                return Ok(None);
            }
            self.fill(searched + 1)?;
        }
    }

    /// Counts the bytes that remain, reading at most `cap` more; `true` if there may be more.
    fn count_rest(&mut self, cap: u64) -> (u64, bool) {
        let mut n = self.available() as u64;
        self.pos = self.filled;
        let mut scratch = [0u8; 8192];
        while n < cap && !self.eof {
            let read = match &mut self.feed {
                Feed::Read(reader) => reader.read(&mut scratch),
                Feed::Blocks(feed) => {
                    let headroom = feed.headroom();
                    feed.next_block(self.spare.take())
                        .map(|b| b.map_or(0, |b| b.len().saturating_sub(headroom)))
                }
            };
            match read {
                Ok(0) => self.eof = true,
                Ok(k) => n += k as u64,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(_) => self.eof = true,
            }
        }
        (n, !self.eof)
    }
}

/// The unpickling virtual machine. Owns the arenas while they are built.
struct Machine<'r, 'l, 's> {
    pickle: Pickle<'static>,
    sink: Option<&'s mut dyn ListSink>,
    /// A pipelined read's parser side (see `pipeline`).
    pipe: Option<pipeline::Pipeline<'s>>,
    /// The container indices of the lists the sink took.
    taken: Vec<u32>,
    /// The lane wide integers go to (see `TAG_INT64_LANE1`; 0 but in a pipelined batch).
    lane: u8,
    /// The open batch into a taken list, if any.
    batch: Option<Batch>,
    /// The batch whose MARK the last `pop_mark` popped.
    closed: Option<Batch>,
    limits: &'l PickleLimits,
    src: Source<'r>,
    /// Offset of the opcode being executed, for messages.
    op_at: u64,
    stack: Vec<Handle>,
    marks: Vec<usize>,
    /// Dense memo: index i is `memo[i]`. PyTorch's (and Python's) pickler numbers memo
    /// entries 0, 1, 2, ... so everything lands here.
    memo: Vec<Handle>,
    /// Memo entries written out of order (only hand-made pickles do this).
    sparse_memo: HashMap<u64, Handle>,
    /// String interner: content hash → the newest blob with that hash; `str_next` chains
    /// earlier blobs with the same hash (indexed by blob, `NO_BLOB` ends a chain).
    str_by_hash: HashMap<u64, u32, std::hash::BuildHasherDefault<IdHasher>>,
    str_next: Vec<u32>,
}

const NO_BLOB: u32 = u32::MAX;

/// A hasher for keys that are already hashes.
#[derive(Default)]
struct IdHasher(u64);

impl std::hash::Hasher for IdHasher {
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0 << 8) | b as u64;
        }
    }
    fn write_u64(&mut self, i: u64) {
        self.0 = i;
    }
    fn finish(&self) -> u64 {
        self.0
    }
}

/// A fast content hash of a string (multiply-rotate per 8-byte word, as `fxhash`).
#[inline]
fn hash_bytes(bytes: &[u8]) -> u64 {
    use super::fxhash::mix;
    let mut h = bytes.len() as u64;
    let mut chunks = bytes.chunks_exact(8);
    for c in &mut chunks {
        let mut w = [0u8; 8];
        w.copy_from_slice(c);
        h = mix(h, u64::from_le_bytes(w));
    }
    let rest = chunks.remainder();
    if !rest.is_empty() {
        let mut w = [0u8; 8];
        w[..rest.len()].copy_from_slice(rest);
        h = mix(h, u64::from_le_bytes(w));
    }
    // Spread the high bits down: the map uses the low bits.
    h ^ (h >> 29)
}

impl<'r, 'l, 's> Machine<'r, 'l, 's> {
    fn new(feed: Feed<'r>, limits: &'l PickleLimits, sink: Option<&'s mut dyn ListSink>) -> Self {
        Machine {
            sink,
            pipe: None,
            taken: Vec::new(),
            lane: 0,
            batch: None,
            closed: None,
            pickle: Pickle::empty(),
            limits,
            src: Source {
                feed,
                spare: None,
                buf: Vec::new(),
                pos: 0,
                filled: 0,
                base: 0,
                eof: false,
                max_input: limits.max_input_bytes,
            },
            op_at: 0,
            stack: Vec::new(),
            marks: Vec::new(),
            memo: Vec::new(),
            sparse_memo: HashMap::new(),
            str_by_hash: HashMap::default(),
            str_next: Vec::new(),
        }
    }

    // ---- errors -------------------------------------------------------------------------

    fn malformed(&self, message: impl Into<String>) -> PickleError {
        PickleError::Malformed {
            offset: self.op_at,
            message: message.into(),
        }
    }

    fn limit(&self, what: &'static str, limit: u64) -> PickleError {
        PickleError::LimitExceeded {
            offset: self.op_at,
            what,
            limit,
        }
    }

    /// The error for a source that could not supply what `what` needed.
    #[cold]
    fn source_error(&self, e: SourceError, what: &'static str) -> PickleError {
        match e {
            SourceError::Eof => PickleError::Truncated {
                offset: self.src.read_so_far(),
                what,
            },
            SourceError::TooLong => PickleError::LimitExceeded {
                offset: self.src.read_so_far().min(self.limits.max_input_bytes),
                what: "the input size",
                limit: self.limits.max_input_bytes,
            },
            SourceError::Io(message) => PickleError::Read {
                offset: self.src.read_so_far(),
                message,
            },
        }
    }

    // ---- reading the input ---------------------------------------------------------------

    /// Consumes `n` bytes; their range in `self.src.buf`.
    #[inline]
    fn take(
        &mut self,
        n: usize,
        what: &'static str,
    ) -> Result<std::ops::Range<usize>, PickleError> {
        match self.src.take(n) {
            Ok(r) => Ok(r),
            Err(e) => Err(self.source_error(e, what)),
        }
    }

    #[inline]
    fn take_array<const N: usize>(&mut self, what: &'static str) -> Result<[u8; N], PickleError> {
        let r = self.take(N, what)?;
        let mut out = [0u8; N];
        out.copy_from_slice(&self.src.buf[r]);
        Ok(out)
    }

    #[inline]
    fn u8(&mut self, what: &'static str) -> Result<u8, PickleError> {
        if self.src.pos < self.src.filled {
            let b = self.src.buf[self.src.pos];
            self.src.pos += 1;
            return Ok(b);
        }
        let r = self.take(1, what)?;
        Ok(self.src.buf[r.start])
    }

    /// A text-protocol argument: the bytes up to the next newline (newline consumed),
    /// copied out of the buffer.
    fn line(&mut self, what: &'static str) -> Result<Vec<u8>, PickleError> {
        match self.src.line(self.limits.max_string_bytes) {
            Ok(Some(r)) => Ok(self.src.buf[r].to_vec()),
            Ok(None) => Err(self.limit("a text argument's length", self.limits.max_string_bytes)),
            Err(e) => Err(self.source_error(e, what)),
        }
    }

    /// A length prefix, checked against the string limit before anything is read.
    fn length(&self, n: u64) -> Result<usize, PickleError> {
        if n > self.limits.max_string_bytes {
            return Err(self.limit("a string or bytes length", self.limits.max_string_bytes));
        }
        usize::try_from(n)
            .map_err(|_| self.limit("a string or bytes length", self.limits.max_string_bytes))
    }

    // ---- the stack -----------------------------------------------------------------------

    #[inline]
    fn push(&mut self, h: Handle) -> Result<(), PickleError> {
        if (self.stack.len() + self.marks.len()) as u64 >= self.limits.max_stack_depth {
            return Err(self.limit(
                "the unpickler stack depth (nesting)",
                self.limits.max_stack_depth,
            ));
        }
        self.stack.push(h);
        Ok(())
    }

    #[inline]
    fn pop(&mut self, what: &'static str) -> Result<Handle, PickleError> {
        let floor = self.marks.last().copied().unwrap_or(0);
        if self.stack.len() <= floor {
            return Err(self.malformed(format!("{what} needs a value but the stack is empty")));
        }
        self.stack
            .pop()
            .ok_or_else(|| self.malformed(format!("{what} needs a value but the stack is empty")))
    }

    #[inline]
    fn top(&self, what: &'static str) -> Result<Handle, PickleError> {
        let floor = self.marks.last().copied().unwrap_or(0);
        if self.stack.len() <= floor {
            return Err(self.malformed(format!("{what} needs a value but the stack is empty")));
        }
        self.stack
            .last()
            .copied()
            .ok_or_else(|| self.malformed(format!("{what} needs a value but the stack is empty")))
    }

    /// The value just below a popped MARK at `from`: the container APPENDS, SETITEMS and
    /// ADDITEMS add the marked items to.
    fn target_below_mark(&self, from: usize, what: &'static str) -> Result<Handle, PickleError> {
        let floor = self.marks.last().copied().unwrap_or(0);
        match from.checked_sub(1) {
            Some(i) if i >= floor => {
                self.stack.get(i).copied().ok_or_else(|| {
                    self.malformed(format!("{what} has no container below its MARK"))
                })
            }
            _ => Err(self.malformed(format!("{what} has no container below its MARK"))),
        }
    }

    /// Pops the topmost MARK, returning where the marked items start.
    fn pop_mark(&mut self, what: &'static str) -> Result<usize, PickleError> {
        let from = self
            .marks
            .pop()
            .ok_or_else(|| self.malformed(format!("{what} without a preceding MARK")))?;
        self.closed = None;
        if self.batch.is_some_and(|b| self.marks.len() <= b.depth) {
            self.closed = self.batch.take();
            self.lane = 0;
        }
        Ok(from)
    }

    // ---- arenas --------------------------------------------------------------------------

    fn check_objects(&self) -> Result<(), PickleError> {
        // Arena indices are stored in 28-bit handle payloads and u32 chunk links; the
        // limit is clamped so they never overflow whatever the caller sets.
        let limit = self.limits.max_objects.min(MAX_INDEX);
        if self.pickle.object_count() as u64 >= limit {
            return Err(self.limit("the number of objects", limit));
        }
        Ok(())
    }

    fn new_container(&mut self, tag: u32) -> Result<Handle, PickleError> {
        self.check_objects()?;
        let idx = self.pickle.containers.len();
        self.pickle.containers.push(Container {
            head: NO_CHUNK,
            tail: NO_CHUNK,
            len: 0,
        });
        Ok(Handle::new(tag, idx as u64))
    }

    /// Appends `stack[from..]` to container `c` as `elements` elements, then truncates the stack.
    fn append_from_stack(
        &mut self,
        c: usize,
        from: usize,
        elements: usize,
    ) -> Result<(), PickleError> {
        let handles = self.stack.len().saturating_sub(from);
        if handles == 0 {
            return Ok(());
        }
        // A pipelined session's replica holds the container already: end the session.
        self.before_change(c)?;
        let Some(container) = self.pickle.containers.get(c).copied() else {
            return Err(self.malformed("reference to a container that does not exist"));
        };
        if container.head == RELEASED {
            return Err(self.malformed(
                "adds to a container after it was read as a finished element of a list",
            ));
        }
        if let Some(b) = &mut self.batch {
            b.min_target = b.min_target.min(c);
        }
        let new_len = container.len as u64 + elements as u64;
        if new_len > self.limits.max_container_len.min(u32::MAX as u64) {
            return Err(self.limit("a container's length", self.limits.max_container_len));
        }
        let start = self.pickle.items.len() as u64;
        // Chunk starts are u32. Reaching this needs at least 4 GiB of input (each element
        // costs an opcode byte) and 16 GiB of arena: a limit, never a wrap.
        if start + handles as u64 > u32::MAX as u64 {
            return Err(self.limit("the container elements held at once", u32::MAX as u64));
        }
        self.pickle.items.extend_from_slice(&self.stack[from..]);
        self.stack.truncate(from);
        let extended = match self.pickle.chunks.get_mut(container.tail as usize) {
            Some(tail)
                if tail.start as u64 + tail.len as u64 == start
                    && tail.len as u64 + handles as u64 <= u32::MAX as u64 =>
            {
                tail.len += handles as u32;
                true
            }
            _ => false,
        };
        let mut updated = container;
        if !extended {
            let chunk_idx = self.pickle.chunks.len();
            if chunk_idx as u64 >= NO_CHUNK as u64 {
                return Err(self.limit("the number of container chunks", NO_CHUNK as u64));
            }
            self.pickle.chunks.push(Chunk {
                start: start as u32,
                len: handles as u32,
                next: NO_CHUNK,
            });
            if let Some(prev) = self.pickle.chunks.get_mut(container.tail as usize) {
                prev.next = chunk_idx as u32;
            } else {
                updated.head = chunk_idx as u32;
            }
            updated.tail = chunk_idx as u32;
        }
        updated.len = new_len as u32;
        self.pickle.containers[c] = updated;
        Ok(())
    }

    /// Builds a new container from the marked items (LIST, TUPLE, DICT, FROZENSET).
    fn container_from_mark(&mut self, tag: u32, what: &'static str) -> Result<(), PickleError> {
        let from = self.pop_mark(what)?;
        let n = self.stack.len().saturating_sub(from);
        let elements = if tag == TAG_DICT {
            if n % 2 != 0 {
                return Err(self.malformed(format!(
                    "{what} needs key/value pairs but has an odd number of items ({n})"
                )));
            }
            n / 2
        } else {
            n
        };
        let h = self.new_container(tag)?;
        self.append_from_stack(h.index(), from, elements)?;
        self.push(h)
    }

    /// Builds a tuple from the top `n` stack items (TUPLE1/2/3).
    fn tuple_of(&mut self, n: usize, what: &'static str) -> Result<(), PickleError> {
        let floor = self.marks.last().copied().unwrap_or(0);
        if self.stack.len() < floor + n {
            return Err(self.malformed(format!("{what} needs {n} values on the stack")));
        }
        let from = self.stack.len() - n;
        let h = self.new_container(TAG_TUPLE)?;
        self.append_from_stack(h.index(), from, n)?;
        self.push(h)
    }

    /// A string from `src.buf[r]` (UTF-8, or repaired), interned.
    fn str_at(&mut self, r: std::ops::Range<usize>) -> Result<Handle, PickleError> {
        self.check_objects()?;
        let bytes = &self.src.buf[r];
        let idx = match std::str::from_utf8(bytes) {
            Ok(text) => intern(
                &mut self.pickle,
                &mut self.str_by_hash,
                &mut self.str_next,
                text,
            ),
            Err(_) => {
                // Python writes lone surrogates with 'surrogatepass'; they are not UTF-8.
                let repaired = String::from_utf8_lossy(bytes).into_owned();
                intern(
                    &mut self.pickle,
                    &mut self.str_by_hash,
                    &mut self.str_next,
                    &repaired,
                )
            }
        };
        Ok(Handle::new(TAG_STR, idx as u64))
    }

    /// A decoded text-protocol string, interned.
    fn owned_str(&mut self, s: &str) -> Result<Handle, PickleError> {
        self.check_objects()?;
        let idx = intern(
            &mut self.pickle,
            &mut self.str_by_hash,
            &mut self.str_next,
            s,
        );
        Ok(Handle::new(TAG_STR, idx as u64))
    }

    /// A bytes value (copied, not interned: snapshots hold none).
    fn owned_bytes(&mut self, b: &[u8]) -> Result<Handle, PickleError> {
        self.check_objects()?;
        let idx = push_blob(&mut self.pickle, &mut self.str_next, b);
        Ok(Handle::new(TAG_BYTES, idx as u64))
    }

    /// A bytes value from `src.buf[r]`.
    fn bytes_at(&mut self, r: std::ops::Range<usize>) -> Result<Handle, PickleError> {
        self.check_objects()?;
        let idx = push_blob(&mut self.pickle, &mut self.str_next, &self.src.buf[r]);
        Ok(Handle::new(TAG_BYTES, idx as u64))
    }

    /// Python-2 `str` bytes: a `Str` when they are UTF-8, `Bytes` otherwise.
    fn py2_string(&mut self, r: std::ops::Range<usize>) -> Result<Handle, PickleError> {
        if std::str::from_utf8(&self.src.buf[r.clone()]).is_ok() {
            self.str_at(r)
        } else {
            self.bytes_at(r)
        }
    }

    #[inline]
    fn int(&mut self, v: i64) -> Result<Handle, PickleError> {
        if (INLINE_INT_MIN..=INLINE_INT_MAX).contains(&v) {
            Ok(Handle::new(TAG_INT, v as u64))
        } else {
            self.check_objects()?;
            let arena = self.pickle.ints_of(self.lane);
            let idx = arena.len();
            arena.push(v);
            Ok(Handle::new(int_tag(self.lane), idx as u64))
        }
    }

    #[inline]
    fn big(&mut self, b: BigInt) -> Result<Handle, PickleError> {
        if !b.saturated {
            if let Ok(v) = i64::try_from(b.value) {
                return self.int(v);
            }
        }
        self.check_objects()?;
        let idx = self.pickle.bigs.len();
        self.pickle.bigs.push(b);
        Ok(Handle::new(TAG_BIGINT, idx as u64))
    }

    fn float(&mut self, f: f64) -> Result<Handle, PickleError> {
        self.check_objects()?;
        let idx = self.pickle.floats.len();
        self.pickle.floats.push(f);
        Ok(Handle::new(TAG_FLOAT, idx as u64))
    }

    // ---- memo ----------------------------------------------------------------------------

    fn memo_len(&self) -> u64 {
        self.memo.len() as u64 + self.sparse_memo.len() as u64
    }

    fn memo_put(&mut self, idx: u64, h: Handle) -> Result<(), PickleError> {
        if let Some(b) = &mut self.batch {
            // A number the batch made stays reachable: keep the number arenas.
            b.keep_numbers |= matches!(
                h.tag(),
                TAG_INT64 | TAG_INT64_LANE1 | TAG_INT64_LANE2 | TAG_BIGINT | TAG_FLOAT
            );
        }
        if idx >= self.limits.max_memo_entries {
            return Err(self.limit("a memo index", self.limits.max_memo_entries));
        }
        let dense = self.memo.len() as u64;
        if idx < dense {
            self.memo[idx as usize] = h;
        } else if idx == dense {
            if self.memo_len() >= self.limits.max_memo_entries {
                return Err(self.limit("the number of memo entries", self.limits.max_memo_entries));
            }
            // Only hand-made pickles fill the sparse memo; skipping the hash of every
            // dense index when it is empty is a measurable share of a large trace.
            if !self.sparse_memo.is_empty() {
                self.sparse_memo.remove(&idx);
            }
            self.memo.push(h);
        } else {
            if self.memo_len() >= self.limits.max_memo_entries {
                return Err(self.limit("the number of memo entries", self.limits.max_memo_entries));
            }
            self.sparse_memo.insert(idx, h);
        }
        Ok(())
    }

    #[inline]
    fn memo_get(&self, idx: u64) -> Result<Handle, PickleError> {
        if let Some(h) = usize::try_from(idx).ok().and_then(|i| self.memo.get(i)) {
            return Ok(*h);
        }
        self.sparse_memo
            .get(&idx)
            .copied()
            .ok_or_else(|| self.malformed(format!("memo entry {idx} is read before it was stored")))
    }

    /// Executes the `BINGET`/`LONG_BINGET`s that follow in the buffer (a traceback's frame
    /// dicts are a run of them) in a tight loop instead of one dispatch each. It stops,
    /// leaving the opcode to the main loop, at anything else and wherever that opcode
    /// could fail (short buffer, an index not in the dense memo, a full stack), so every
    /// error is still raised, with its offset, by the main loop.
    #[inline]
    fn get_run(&mut self) {
        let depth_left = self
            .limits
            .max_stack_depth
            .saturating_sub((self.stack.len() + self.marks.len()) as u64);
        let mut room = usize::try_from(depth_left).unwrap_or(usize::MAX);
        let mut pos = self.src.pos;
        while room > 0 {
            let (idx, len) = match &self.src.buf[pos..self.src.filled] {
                [b'j', a, b, c, d, ..] => (u32::from_le_bytes([*a, *b, *c, *d]) as usize, 5),
                [b'h', a, ..] => (*a as usize, 2),
                _ => break,
            };
            let Some(&h) = self.memo.get(idx) else {
                break;
            };
            self.stack.push(h);
            pos += len;
            room -= 1;
        }
        self.src.pos = pos;
    }

    // ---- text arguments --------------------------------------------------------------------

    fn text<'t>(&self, line: &'t [u8], what: &str) -> Result<&'t str, PickleError> {
        std::str::from_utf8(line)
            .map_err(|_| self.malformed(format!("{what} argument is not text")))
    }

    fn decimal_index(&self, line: &[u8], what: &str) -> Result<u64, PickleError> {
        let t = self.text(line, what)?.trim();
        t.parse::<u64>()
            .map_err(|_| self.malformed(format!("{what} argument {t:?} is not a memo index")))
    }

    /// MARK.
    fn mark(&mut self) -> Result<(), PickleError> {
        if (self.stack.len() + self.marks.len()) as u64 >= self.limits.max_stack_depth {
            return Err(self.limit(
                "the unpickler stack depth (nesting)",
                self.limits.max_stack_depth,
            ));
        }
        self.marks.push(self.stack.len());
        if self.batch.is_none()
            && self.stack.last().is_some_and(|h| h.tag() == TAG_LIST)
            && self.sink_takes(self.stack.len() - 1)?
        {
            self.open_batch();
        }
        Ok(())
    }

    /// MEMOIZE.
    fn memoize(&mut self) -> Result<(), PickleError> {
        let h = self.top("MEMOIZE")?;
        let idx = self.memo_len();
        self.memo_put(idx, h)
    }

    /// Executes the `MEMOIZE`, then the `MARK` and the memo gets that follow a new empty
    /// container in the buffer, if they do (protocol 4 writes every entry dict and frame
    /// list so), without a dispatch each. Each runs with its own offset, as from the main
    /// loop; anything else is left to the main loop.
    #[inline]
    fn memoize_mark_run(&mut self) -> Result<(), PickleError> {
        let next_is = |src: &Source<'_>, op: u8| src.pos < src.filled && src.buf[src.pos] == op;
        if next_is(&self.src, 0x94) {
            self.op_at = self.src.offset();
            self.src.pos += 1;
            self.memoize()?;
            if next_is(&self.src, b'(') {
                self.op_at = self.src.offset();
                self.src.pos += 1;
                self.mark()?;
                // The keys of an entry dict, the frame dicts of a list: memo gets.
                self.get_run();
            }
        }
        Ok(())
    }

    // ---- the loop ------------------------------------------------------------------------

    fn run(&mut self) -> Result<Handle, PickleError> {
        loop {
            self.op_at = self.src.offset();
            let op = self.u8("an opcode")?;
            match op {
                // -- framing and control --
                0x80 => {
                    let v = self.u8("the PROTO version")?;
                    if v > 5 {
                        return Err(PickleError::UnsupportedProtocol {
                            offset: self.op_at,
                            version: v,
                        });
                    }
                    self.pickle.protocol = Some(v);
                }
                0x95 => {
                    // FRAME: an 8-byte length that only helps readers that load a frame at
                    // a time; our buffer refills by itself, so the boundaries carry nothing.
                    self.take(8, "a FRAME length")?;
                }
                b'.' => {
                    let h = self.pop("STOP")?;
                    return Ok(h);
                }
                b'(' => self.mark()?,
                b'0' => {
                    // POP: like CPython, an empty stack above a MARK pops the MARK instead.
                    let floor = self.marks.last().copied().unwrap_or(0);
                    if self.stack.len() > floor {
                        self.stack.pop();
                    } else if !self.marks.is_empty() {
                        let m = self.pop_mark("POP")?;
                        self.stack.truncate(m);
                    } else {
                        return Err(self.malformed("POP on an empty stack"));
                    }
                }
                b'1' => {
                    let from = self.pop_mark("POP_MARK")?;
                    self.stack.truncate(from);
                }
                b'2' => {
                    let h = self.top("DUP")?;
                    self.push(h)?;
                }

                // -- memo --
                b'p' => {
                    let line = &self.line("a PUT index")?[..];
                    let idx = self.decimal_index(line, "PUT")?;
                    let h = self.top("PUT")?;
                    self.memo_put(idx, h)?;
                }
                b'q' => {
                    let idx = self.u8("a BINPUT index")? as u64;
                    let h = self.top("BINPUT")?;
                    self.memo_put(idx, h)?;
                }
                b'r' => {
                    let idx = u32::from_le_bytes(self.take_array("a LONG_BINPUT index")?) as u64;
                    let h = self.top("LONG_BINPUT")?;
                    self.memo_put(idx, h)?;
                }
                0x94 => self.memoize()?,
                b'g' => {
                    let line = &self.line("a GET index")?[..];
                    let idx = self.decimal_index(line, "GET")?;
                    let h = self.memo_get(idx)?;
                    self.push(h)?;
                }
                b'h' => {
                    let idx = self.u8("a BINGET index")? as u64;
                    let h = self.memo_get(idx)?;
                    self.push(h)?;
                    self.get_run();
                }
                b'j' => {
                    let idx = u32::from_le_bytes(self.take_array("a LONG_BINGET index")?) as u64;
                    let h = self.memo_get(idx)?;
                    self.push(h)?;
                    self.get_run();
                }

                // -- constants and numbers --
                b'N' => self.push(Handle::NONE)?,
                0x88 => self.push(Handle::new(TAG_BOOL, 1))?,
                0x89 => self.push(Handle::new(TAG_BOOL, 0))?,
                // A number in a dict is mostly followed by the next key, a memo get (a trace
                // entry's fields): see `get_run`.
                b'J' => {
                    let v = i32::from_le_bytes(self.take_array("a BININT value")?);
                    let h = self.int(v as i64)?;
                    self.push(h)?;
                    self.get_run();
                }
                b'K' => {
                    let v = self.u8("a BININT1 value")?;
                    self.push(Handle::new(TAG_INT, v as u64))?;
                    self.get_run();
                }
                b'M' => {
                    let v = u16::from_le_bytes(self.take_array("a BININT2 value")?);
                    self.push(Handle::new(TAG_INT, v as u64))?;
                    self.get_run();
                }
                0x8a => {
                    let n = self.u8("a LONG1 length")? as usize;
                    let r = self.take(n, "LONG1 digits")?;
                    let h = self.big(twos_complement_le(&self.src.buf[r]))?;
                    self.push(h)?;
                    self.get_run();
                }
                0x8b => {
                    let n = i32::from_le_bytes(self.take_array("a LONG4 length")?);
                    if n < 0 {
                        return Err(self.malformed(format!("LONG4 has a negative length ({n})")));
                    }
                    let n = self.length(n as u64)?;
                    let r = self.take(n, "LONG4 digits")?;
                    let h = self.big(twos_complement_le(&self.src.buf[r]))?;
                    self.push(h)?;
                }
                b'I' => {
                    let line = &self.line("an INT value")?[..];
                    let h = match line {
                        // Protocol 0 writes True and False as INT 01 / 00.
                        b"01" => Handle::new(TAG_BOOL, 1),
                        b"00" => Handle::new(TAG_BOOL, 0),
                        _ => {
                            let t = self.text(line, "INT")?;
                            let b = parse_decimal(t.trim()).ok_or_else(|| {
                                self.malformed(format!("INT argument {t:?} is not an integer"))
                            })?;
                            self.big(b)?
                        }
                    };
                    self.push(h)?;
                }
                b'L' => {
                    let line = &self.line("a LONG value")?[..];
                    let t = self.text(line, "LONG")?.trim();
                    let t = t.strip_suffix('L').unwrap_or(t);
                    let b = parse_decimal(t).ok_or_else(|| {
                        self.malformed(format!("LONG argument {t:?} is not an integer"))
                    })?;
                    let h = self.big(b)?;
                    self.push(h)?;
                }
                b'G' => {
                    let v = f64::from_be_bytes(self.take_array("a BINFLOAT value")?);
                    let h = self.float(v)?;
                    self.push(h)?;
                }
                b'F' => {
                    let line = &self.line("a FLOAT value")?[..];
                    let t = self.text(line, "FLOAT")?.trim();
                    let v: f64 = t.parse().map_err(|_| {
                        self.malformed(format!("FLOAT argument {t:?} is not a number"))
                    })?;
                    let h = self.float(v)?;
                    self.push(h)?;
                }

                // -- strings and bytes --
                0x8c => {
                    let n = self.u8("a SHORT_BINUNICODE length")? as usize;
                    let r = self.take(n, "SHORT_BINUNICODE text")?;
                    let h = self.str_at(r)?;
                    self.push(h)?;
                }
                b'X' => {
                    let n = u32::from_le_bytes(self.take_array("a BINUNICODE length")?);
                    let n = self.length(n as u64)?;
                    let r = self.take(n, "BINUNICODE text")?;
                    let h = self.str_at(r)?;
                    self.push(h)?;
                }
                0x8d => {
                    let n = u64::from_le_bytes(self.take_array("a BINUNICODE8 length")?);
                    let n = self.length(n)?;
                    let r = self.take(n, "BINUNICODE8 text")?;
                    let h = self.str_at(r)?;
                    self.push(h)?;
                }
                b'V' => {
                    let line = &self.line("UNICODE text")?[..];
                    let s = decode_raw_unicode_escape(line);
                    let h = self.owned_str(&s)?;
                    self.push(h)?;
                }
                b'U' => {
                    let n = self.u8("a SHORT_BINSTRING length")? as usize;
                    let r = self.take(n, "SHORT_BINSTRING bytes")?;
                    let h = self.py2_string(r)?;
                    self.push(h)?;
                }
                b'T' => {
                    let n = i32::from_le_bytes(self.take_array("a BINSTRING length")?);
                    if n < 0 {
                        return Err(
                            self.malformed(format!("BINSTRING has a negative length ({n})"))
                        );
                    }
                    let n = self.length(n as u64)?;
                    let r = self.take(n, "BINSTRING bytes")?;
                    let h = self.py2_string(r)?;
                    self.push(h)?;
                }
                b'S' => {
                    let line = &self.line("STRING text")?[..];
                    let bytes = decode_python_string_literal(line)
                        .ok_or_else(|| self.malformed("STRING argument is not a quoted string"))?;
                    let h = match String::from_utf8(bytes) {
                        Ok(s) => self.owned_str(&s)?,
                        Err(e) => self.owned_bytes(e.as_bytes())?,
                    };
                    self.push(h)?;
                }
                b'C' => {
                    let n = self.u8("a SHORT_BINBYTES length")? as usize;
                    let r = self.take(n, "SHORT_BINBYTES bytes")?;
                    let h = self.bytes_at(r)?;
                    self.push(h)?;
                }
                b'B' => {
                    let n = u32::from_le_bytes(self.take_array("a BINBYTES length")?);
                    let n = self.length(n as u64)?;
                    let r = self.take(n, "BINBYTES bytes")?;
                    let h = self.bytes_at(r)?;
                    self.push(h)?;
                }
                0x8e | 0x96 => {
                    let what = if op == 0x8e {
                        "a BINBYTES8 length"
                    } else {
                        "a BYTEARRAY8 length"
                    };
                    let n = u64::from_le_bytes(self.take_array(what)?);
                    let n = self.length(n)?;
                    let r = self.take(n, "BINBYTES8/BYTEARRAY8 bytes")?;
                    let h = self.bytes_at(r)?;
                    self.push(h)?;
                }

                // -- containers --
                b')' => {
                    let h = self.new_container(TAG_TUPLE)?;
                    self.push(h)?;
                }
                b't' => self.container_from_mark(TAG_TUPLE, "TUPLE")?,
                0x85 => self.tuple_of(1, "TUPLE1")?,
                0x86 => self.tuple_of(2, "TUPLE2")?,
                0x87 => self.tuple_of(3, "TUPLE3")?,
                b']' => {
                    let h = self.new_container(TAG_LIST)?;
                    self.push(h)?;
                    self.memoize_mark_run()?;
                }
                b'l' => self.container_from_mark(TAG_LIST, "LIST")?,
                b'a' => {
                    let floor = self.marks.last().copied().unwrap_or(0);
                    if self.stack.len() < floor + 2 {
                        return Err(self.malformed("APPEND needs a list and a value on the stack"));
                    }
                    let target = self.stack[self.stack.len() - 2];
                    if target.tag() != TAG_LIST {
                        return Err(self.malformed(format!(
                            "APPEND target is a {}, not a list",
                            self.pickle.value(target).type_name()
                        )));
                    }
                    let from = self.stack.len() - 1;
                    if self.sink_takes(from - 1)? {
                        self.hand_over(target, from)?;
                    } else {
                        self.append_from_stack(target.index(), from, 1)?;
                    }
                }
                b'e' => {
                    let from = self.pop_mark("APPENDS")?;
                    let closed = self.closed.take();
                    let target = self.target_below_mark(from, "APPENDS")?;
                    if target.tag() != TAG_LIST {
                        return Err(self.malformed(format!(
                            "APPENDS target is a {}, not a list",
                            self.pickle.value(target).type_name()
                        )));
                    }
                    if self.sink_takes(from - 1)? {
                        self.hand_over(target, from)?;
                        if let Some(b) = closed.filter(|b| b.list as usize == target.index()) {
                            if self.session().is_some() {
                                self.session_close(b)?;
                            } else {
                                self.release_batch(&b);
                            }
                        }
                    } else {
                        let n = self.stack.len() - from;
                        self.append_from_stack(target.index(), from, n)?;
                    }
                }
                b'}' => {
                    let h = self.new_container(TAG_DICT)?;
                    self.push(h)?;
                    self.memoize_mark_run()?;
                }
                b'd' => self.container_from_mark(TAG_DICT, "DICT")?,
                b's' => {
                    let floor = self.marks.last().copied().unwrap_or(0);
                    if self.stack.len() < floor + 3 {
                        return Err(
                            self.malformed("SETITEM needs a dict, a key and a value on the stack")
                        );
                    }
                    let target = self.stack[self.stack.len() - 3];
                    if target.tag() != TAG_DICT {
                        return Err(self.malformed(format!(
                            "SETITEM target is a {}, not a dict",
                            self.pickle.value(target).type_name()
                        )));
                    }
                    let from = self.stack.len() - 2;
                    self.append_from_stack(target.index(), from, 1)?;
                }
                b'u' => {
                    let from = self.pop_mark("SETITEMS")?;
                    let target = self.target_below_mark(from, "SETITEMS")?;
                    if target.tag() != TAG_DICT {
                        return Err(self.malformed(format!(
                            "SETITEMS target is a {}, not a dict",
                            self.pickle.value(target).type_name()
                        )));
                    }
                    let n = self.stack.len() - from;
                    if n % 2 != 0 {
                        return Err(self.malformed(format!(
                            "SETITEMS needs key/value pairs but has an odd number of items ({n})"
                        )));
                    }
                    self.append_from_stack(target.index(), from, n / 2)?;
                }
                0x8f => {
                    let h = self.new_container(TAG_SET)?;
                    self.push(h)?;
                }
                0x90 => {
                    let from = self.pop_mark("ADDITEMS")?;
                    let target = self.target_below_mark(from, "ADDITEMS")?;
                    if target.tag() != TAG_SET {
                        return Err(self.malformed(format!(
                            "ADDITEMS target is a {}, not a set",
                            self.pickle.value(target).type_name()
                        )));
                    }
                    let n = self.stack.len() - from;
                    self.append_from_stack(target.index(), from, n)?;
                }
                0x91 => self.container_from_mark(TAG_FROZENSET, "FROZENSET")?,

                // -- code: refused, never executed --
                b'c' | b'i' => {
                    // GLOBAL / INST name a module and attribute on two text lines. Read them
                    // (bounded) only to say what the file wanted to import.
                    let module = self
                        .line("a GLOBAL module name")
                        .map(|l| String::from_utf8_lossy(&l).into_owned());
                    let name = self
                        .line("a GLOBAL attribute name")
                        .map(|l| String::from_utf8_lossy(&l).into_owned());
                    let detail = match (module, name) {
                        (Ok(m), Ok(n)) => format!(
                            "imports `{}.{}`",
                            truncate_for_message(&m),
                            truncate_for_message(&n)
                        ),
                        _ => "imports a Python object".to_string(),
                    };
                    return Err(self.refused(op, detail));
                }
                0x93 => {
                    let floor = self.marks.last().copied().unwrap_or(0);
                    let detail = if self.stack.len() >= floor + 2 {
                        let m = self.pickle.as_str(self.stack[self.stack.len() - 2]);
                        let n = self.pickle.as_str(self.stack[self.stack.len() - 1]);
                        match (m, n) {
                            (Some(m), Some(n)) => format!(
                                "imports `{}.{}`",
                                truncate_for_message(m),
                                truncate_for_message(n)
                            ),
                            _ => "imports a Python object".to_string(),
                        }
                    } else {
                        "imports a Python object".to_string()
                    };
                    return Err(self.refused(op, detail));
                }
                b'R' | b'o' | 0x81 | 0x92 => {
                    return Err(self.refused(op, "calls a Python object".to_string()));
                }
                b'b' => {
                    return Err(self.refused(
                        op,
                        "sets an object's state (calls __setstate__)".to_string(),
                    ));
                }
                b'P' | b'Q' => {
                    return Err(self.refused(
                        op,
                        "asks for a persistent object from the loading program".to_string(),
                    ));
                }
                0x82..=0x84 => {
                    return Err(
                        self.refused(op, "looks up a registered extension object".to_string())
                    );
                }
                0x97 | 0x98 => {
                    return Err(self.refused(
                        op,
                        "uses an out-of-band buffer supplied by the loading program".to_string(),
                    ));
                }

                _ => {
                    return Err(PickleError::UnknownOpcode {
                        offset: self.op_at,
                        opcode: op,
                    });
                }
            }
        }
    }

    // ---- taken lists (see `ListSink`) -------------------------------------------------------

    /// Whether the sink takes the list at `stack[target]`.
    #[inline]
    fn sink_takes(&mut self, target: usize) -> Result<bool, PickleError> {
        if let Some(answer) = self.session_takes(target) {
            return answer;
        }
        let Some(sink) = self.sink.as_deref_mut() else {
            return Ok(false);
        };
        let takes = sink
            .takes(&self.pickle, &self.stack, target, self.src.offset())
            .map_err(|()| PickleError::Stopped { offset: self.op_at })?;
        if let Some(list) = self.stack.get(target).map(|h| h.index() as u32)
            && takes
            && !self.taken.contains(&list)
        {
            self.taken.push(list);
        }
        Ok(takes)
    }

    /// Hands `stack[from..]` to the sink as elements of the taken list `list`.
    fn hand_over(&mut self, list: Handle, from: usize) -> Result<(), PickleError> {
        let offset = self.src.offset();
        // The list stays empty in the arena but counts its elements, against the limit.
        let Some(container) = self.pickle.containers.get(list.index()).copied() else {
            return Err(self.malformed("reference to a container that does not exist"));
        };
        let new_len = container.len as u64 + (self.stack.len() - from) as u64;
        if new_len > self.limits.max_container_len.min(u32::MAX as u64) {
            return Err(self.limit("a container's length", self.limits.max_container_len));
        }
        if container.head == RELEASED {
            return Err(self.malformed(
                "adds to a container after it was read as a finished element of a list",
            ));
        }
        self.pickle.containers[list.index()].len = new_len as u32;
        if self.hold_hand_over(list.index() as u32, new_len as u32, from, offset) {
            self.stack.truncate(from);
            return Ok(());
        }
        // Outside a pipelined session: a replica's copy of the list is no longer level.
        self.before_change(list.index())?;
        if let Some(sink) = self.sink.as_deref_mut() {
            sink.take(
                &self.pickle,
                ContainerId(list.index() as u32),
                &self.stack[from..],
                offset,
            )
            .map_err(|()| PickleError::Stopped { offset: self.op_at })?;
        }
        self.stack.truncate(from);
        Ok(())
    }

    /// Records the arena lengths at the MARK just pushed: an `APPENDS` batch into the taken
    /// list below it begins.
    fn open_batch(&mut self) {
        self.batch_opens();
        let p = &self.pickle;
        self.batch = Some(Batch {
            depth: self.marks.len() - 1,
            list: self.stack.last().map_or(0, |h| h.index() as u32),
            items: p.items.len(),
            chunks: p.chunks.len(),
            containers: p.containers.len(),
            lane: self.lane,
            ints: p.ints_len(self.lane),
            bigs: p.bigs.len(),
            floats: p.floats.len(),
            keep_numbers: false,
            last_chunk_len: p.chunks.last().map(|c| c.len),
            min_target: usize::MAX,
        });
    }

    /// After an `APPENDS` batch into a taken list: releases the containers created during it
    /// that the sink consumed, compacts the items of the others, and truncates the number
    /// arenas when nothing kept refers into what the batch added to them.
    fn release_batch(&mut self, b: &Batch) {
        let Some(sink) = self.sink.as_deref_mut() else {
            return;
        };
        if let Some(pipe) = self.pipe.as_mut() {
            // Outside a session: the worker's replica is no longer level.
            pipe.level = false;
        }
        let end = ArenaLens::of(&self.pickle, b.lane);
        release_batch_in(&mut self.pickle, b, &end, |p, c| sink.release(p, c));
    }

    fn refused(&self, op: u8, detail: String) -> PickleError {
        PickleError::RefusedCode {
            offset: self.op_at,
            opcode: op,
            name: opcode_name(op),
            detail,
        }
    }
}

/// The arena lengths when a batch closed (a pipelined read releases it later, with the
/// next batch above it in the arenas).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct ArenaLens {
    containers: usize,
    chunks: usize,
    items: usize,
    /// Of the batch's integer arena.
    ints: usize,
    bigs: usize,
    floats: usize,
}

impl ArenaLens {
    fn of(p: &Pickle<'_>, lane: u8) -> ArenaLens {
        ArenaLens {
            containers: p.containers.len(),
            chunks: p.chunks.len(),
            items: p.items.len(),
            ints: p.ints_len(lane),
            bigs: p.bigs.len(),
            floats: p.floats.len(),
        }
    }
}

/// How far a release moved what lay above the batch it released, down the item and chunk
/// arenas: marks at or above the batch's end move down by these.
#[derive(Clone, Copy, Debug, Default)]
struct Shift {
    items: usize,
    chunks: usize,
}

/// Releases batch `b`, which closed at `end`: every container it created (below
/// `end.containers`) that `decide` says was consumed is released with `decide`'s note; the
/// items of the others, and of every container made since `end` (a pipelined read
/// releases a batch when the next one has closed), are moved down in arena order. The
/// batch's numbers are dropped when nothing kept refers to them and nothing was added to
/// their arena since `end`. The parser and a pipelined read's replica both call this, with
/// the same arguments, so that their arenas stay equal.
fn release_batch_in(
    p: &mut Pickle<'_>,
    b: &Batch,
    end: &ArenaLens,
    mut decide: impl FnMut(&Pickle<'_>, ContainerId) -> Option<(u32, u32)>,
) -> Shift {
    // A container older than the batch got items during it (only a hand-made pickle
    // does that): keep everything. Memo entries need no check: a container the sink
    // consumed is recognised by it when the memo hands it back, the others are kept,
    // and memoised numbers set `keep_numbers`.
    if b.min_target < b.containers
        || p.chunks.len() < b.chunks
        || (b.chunks > 0 && Some(p.chunks[b.chunks - 1].len) != b.last_chunk_len)
    {
        return Shift::default();
    }
    // Which containers the sink consumed; the chunks of the others, to move down.
    let mut moved: Vec<(u32, u32, u32)> = Vec::new();
    for c in b.containers..end.containers {
        match decide(p, ContainerId(c as u32)) {
            Some((note_a, note_b)) => {
                p.containers[c] = Container {
                    head: RELEASED,
                    tail: note_a,
                    len: note_b,
                };
            }
            None => {
                let mut chunk = p.containers[c].head;
                while let Some(k) = p.chunks.get(chunk as usize) {
                    moved.push((k.start, k.len, c as u32));
                    chunk = k.next;
                }
                p.containers[c].head = NO_CHUNK;
                p.containers[c].tail = NO_CHUNK;
            }
        }
    }
    // Move the kept items down, in arena order, so that no copy overwrites a source not
    // yet copied; each container's chunks come in chain order. What lies above the
    // batch's end moves after them, as one block.
    moved.sort_unstable_by_key(|m| m.0);
    let above_chunks: Vec<Chunk> = p
        .chunks
        .get(end.chunks..)
        .map_or_else(Vec::new, <[Chunk]>::to_vec);
    p.chunks.truncate(b.chunks);
    let mut write = b.items;
    let keep = b.keep_numbers;
    let (mut keep_ints, mut keep_bigs, mut keep_floats) = (keep, keep, keep);
    let int_tag = int_tag(b.lane);
    let mut note_scalar = |h: Handle| {
        let i = h.index();
        match h.tag() {
            t if t == int_tag => keep_ints |= i >= b.ints,
            TAG_BIGINT => keep_bigs |= i >= b.bigs,
            TAG_FLOAT => keep_floats |= i >= b.floats,
            _ => {}
        }
    };
    for &(start, len, c) in &moved {
        let start = start as usize;
        for &h in &p.items[start..start + len as usize] {
            note_scalar(h);
        }
        p.items.copy_within(start..start + len as usize, write);
        let idx = p.chunks.len() as u32;
        p.chunks.push(Chunk {
            start: write as u32,
            len,
            next: NO_CHUNK,
        });
        let container = &mut p.containers[c as usize];
        if let Some(prev) = p.chunks.get_mut(container.tail as usize) {
            prev.next = idx;
        } else {
            container.head = idx;
        }
        container.tail = idx;
        write += len as usize;
    }
    // Everything made since the batch closed (a pipelined read's next batch) belongs to
    // containers made since, whose chunks are all above `end.chunks` in order: it moves
    // down by one distance, links and all.
    let shift = Shift {
        items: end.items - write,
        chunks: end.chunks - p.chunks.len(),
    };
    if end.items < p.items.len() {
        p.items.copy_within(end.items.., write);
        write += p.items.len() - end.items;
    }
    p.items.truncate(write);
    if shift.chunks > 0 || shift.items > 0 {
        let down = |link: u32| {
            if link == NO_CHUNK || link == RELEASED {
                link
            } else {
                link - shift.chunks as u32
            }
        };
        p.chunks.extend(above_chunks.iter().map(|k| Chunk {
            start: k.start - shift.items as u32,
            len: k.len,
            next: down(k.next),
        }));
        for c in &mut p.containers[end.containers..] {
            if c.head != RELEASED {
                c.head = down(c.head);
                c.tail = down(c.tail);
            }
        }
    } else {
        p.chunks.extend_from_slice(&above_chunks);
    }
    let ints = p.ints_of(b.lane);
    if !keep_ints && ints.len() == end.ints {
        ints.truncate(b.ints);
    }
    if !keep_bigs && p.bigs.len() == end.bigs {
        p.bigs.truncate(b.bigs);
    }
    if !keep_floats && p.floats.len() == end.floats {
        p.floats.truncate(b.floats);
    }
    shift
}

/// Appends a bytes blob (not interned); its index.
fn push_blob(pickle: &mut Pickle<'_>, str_next: &mut Vec<u32>, bytes: &[u8]) -> u32 {
    let idx = pickle.blobs.len() as u32;
    let start = pickle.data.len();
    pickle.data.extend_from_slice(bytes);
    pickle.blobs.push(Blob {
        start,
        len: bytes.len(),
    });
    str_next.push(NO_BLOB);
    idx
}

/// The index of the string blob equal to `text`, created if it is new. Snapshots repeat
/// the same file and function names endlessly; each is stored once.
fn intern(
    pickle: &mut Pickle<'_>,
    by_hash: &mut HashMap<u64, u32, std::hash::BuildHasherDefault<IdHasher>>,
    str_next: &mut Vec<u32>,
    text: &str,
) -> u32 {
    let hash = hash_bytes(text.as_bytes());
    let head = by_hash.get(&hash).copied().unwrap_or(NO_BLOB);
    let mut candidate = head;
    while candidate != NO_BLOB {
        if pickle.blob_str(candidate as usize) == text {
            return candidate;
        }
        candidate = str_next.get(candidate as usize).copied().unwrap_or(NO_BLOB);
    }
    let idx = pickle.blobs.len() as u32;
    let start = pickle.text.len();
    pickle.text.push_str(text);
    pickle.blobs.push(Blob {
        start,
        len: text.len(),
    });
    str_next.push(head);
    by_hash.insert(hash, idx);
    idx
}

fn truncate_for_message(s: &str) -> String {
    const MAX: usize = 80;
    if s.len() <= MAX {
        return s.to_string();
    }
    let mut end = MAX;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &s[..end])
}

/// Little-endian two's-complement bytes (LONG1/LONG4) as an integer, exact up to 128 bits.
fn twos_complement_le(bytes: &[u8]) -> BigInt {
    // The common case (addresses, timestamps: `LONG1` of 1-8 bytes) folds into an i64
    // byte by byte: no padded buffer, whose store and 16-byte reload stalled the VM.
    if let Some(&last) = bytes.last()
        && bytes.len() <= 8
    {
        let mut v: u64 = if last & 0x80 != 0 { u64::MAX } else { 0 };
        for &b in bytes.iter().rev() {
            v = (v << 8) | b as u64;
        }
        return BigInt {
            value: v as i64 as i128,
            saturated: false,
        };
    }
    let Some(&last) = bytes.last() else {
        return BigInt {
            value: 0,
            saturated: false,
        };
    };
    let negative = last & 0x80 != 0;
    let ext = if negative { 0xFF } else { 0x00 };
    // Python writes the minimal length, but a hand-made file may pad with sign bytes:
    // drop them before deciding whether the value fits.
    let mut len = bytes.len();
    while len > 1 && bytes[len - 1] == ext && (bytes[len - 2] & 0x80 != 0) == negative {
        len -= 1;
    }
    if len > 16 {
        return BigInt {
            value: if negative { i128::MIN } else { i128::MAX },
            saturated: true,
        };
    }
    let mut buf = [ext; 16];
    buf[..len].copy_from_slice(&bytes[..len]);
    BigInt {
        value: i128::from_le_bytes(buf),
        saturated: false,
    }
}

/// A decimal integer of any length (INT/LONG text), exact up to 128 bits, else saturated.
fn parse_decimal(t: &str) -> Option<BigInt> {
    let (negative, digits) = match t.as_bytes().first()? {
        b'-' => (true, &t[1..]),
        b'+' => (false, &t[1..]),
        _ => (false, t),
    };
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let mut v: i128 = 0;
    for b in digits.bytes() {
        let d = (b - b'0') as i128;
        let next = v.checked_mul(10).and_then(|x| {
            if negative {
                x.checked_sub(d)
            } else {
                x.checked_add(d)
            }
        });
        match next {
            Some(n) => v = n,
            None => {
                return Some(BigInt {
                    value: if negative { i128::MIN } else { i128::MAX },
                    saturated: true,
                });
            }
        }
    }
    Some(BigInt {
        value: v,
        saturated: false,
    })
}

/// Python's `raw-unicode-escape` (protocol-0 UNICODE): `\uXXXX` and `\UXXXXXXXX` escapes,
/// every other byte is a Latin-1 character.
fn decode_raw_unicode_escape(line: &[u8]) -> String {
    let mut out = String::with_capacity(line.len());
    let mut i = 0;
    while i < line.len() {
        let b = line[i];
        if b == b'\\' && i + 1 < line.len() && (line[i + 1] == b'u' || line[i + 1] == b'U') {
            let width = if line[i + 1] == b'u' { 4 } else { 8 };
            let hex = line
                .get(i + 2..i + 2 + width)
                .and_then(|h| std::str::from_utf8(h).ok());
            if let Some(code) = hex.and_then(|h| u32::from_str_radix(h, 16).ok()) {
                out.push(char::from_u32(code).unwrap_or('\u{FFFD}'));
                i += 2 + width;
                continue;
            }
        }
        out.push(b as char);
        i += 1;
    }
    out
}

/// A protocol-0 STRING argument: a Python 2 `repr()` of a byte string, quoted with `'` or `"`.
fn decode_python_string_literal(line: &[u8]) -> Option<Vec<u8>> {
    let line = line.strip_suffix(b"\r").unwrap_or(line);
    let (&q, rest) = line.split_first()?;
    if q != b'\'' && q != b'"' {
        return None;
    }
    let body = rest.strip_suffix(&[q])?;
    let mut out = Vec::with_capacity(body.len());
    let mut i = 0;
    while i < body.len() {
        let b = body[i];
        if b != b'\\' {
            out.push(b);
            i += 1;
            continue;
        }
        let Some(&e) = body.get(i + 1) else {
            out.push(b'\\');
            break;
        };
        i += 2;
        match e {
            b'n' => out.push(b'\n'),
            b't' => out.push(b'\t'),
            b'r' => out.push(b'\r'),
            b'a' => out.push(0x07),
            b'b' => out.push(0x08),
            b'f' => out.push(0x0c),
            b'v' => out.push(0x0b),
            b'\\' | b'\'' | b'"' => out.push(e),
            b'\n' => {}
            b'x' => {
                let hex = body.get(i..i + 2).and_then(|h| std::str::from_utf8(h).ok());
                match hex.and_then(|h| u8::from_str_radix(h, 16).ok()) {
                    Some(v) => {
                        out.push(v);
                        i += 2;
                    }
                    None => out.extend_from_slice(b"\\x"),
                }
            }
            b'0'..=b'7' => {
                let mut v: u32 = (e - b'0') as u32;
                let mut n = 1;
                while n < 3 {
                    match body.get(i) {
                        Some(&d @ b'0'..=b'7') => {
                            v = v * 8 + (d - b'0') as u32;
                            i += 1;
                            n += 1;
                        }
                        _ => break,
                    }
                }
                out.push((v & 0xFF) as u8);
            }
            other => {
                out.push(b'\\');
                out.push(other);
            }
        }
    }
    Some(out)
}

/// Whether the first bytes of an input look like a pickle, for content sniffing.
///
/// Protocol 2+ starts with `PROTO` (0x80) and a version 2–5. Protocols 0 and 1 have no
/// header; we accept the openings Python writes for a top-level dict or list, which are
/// what a snapshot (or a pickled `memory_snapshot()` list) starts with.
pub fn looks_like_pickle(head: &[u8]) -> bool {
    match head {
        [0x80, v, ..] => (2..=5).contains(v),
        // Protocol 0: MARK, DICT/LIST, PUT 0.
        [b'(', b'd' | b'l', b'p', b'0', ..] => true,
        // Protocol 1: EMPTY_DICT/EMPTY_LIST, then BINPUT 0 or MARK.
        [b'}' | b']', b'q', 0, ..] => true,
        [b'}' | b']', b'(', ..] => true,
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(bytes: &[u8]) -> Result<Pickle<'_>, PickleError> {
        Pickle::parse(bytes, &PickleLimits::default())
    }

    #[test]
    fn handles_are_four_bytes() {
        assert_eq!(std::mem::size_of::<Handle>(), 4);
    }

    #[test]
    fn inline_ints_round_trip_at_the_edges() {
        let mut buf = vec![0x80, 4, 0x8a, 8];
        buf.extend_from_slice(&INLINE_INT_MAX.to_le_bytes());
        buf.push(b'.');
        let p = parse(&buf).unwrap();
        assert_eq!(p.value(p.root()), Value::Int(INLINE_INT_MAX));
        for v in [
            INLINE_INT_MIN,
            INLINE_INT_MIN - 1,
            i64::MIN,
            i64::MAX,
            -1,
            0,
        ] {
            let mut buf = vec![0x80, 4, 0x8a, 8];
            buf.extend_from_slice(&v.to_le_bytes());
            buf.push(b'.');
            let p = parse(&buf).unwrap();
            assert_eq!(p.value(p.root()), Value::Int(v), "{v}");
        }
    }

    #[test]
    fn nine_byte_long1_is_u64_max() {
        // pickle.dumps(2**64 - 1, protocol=4)
        let buf = b"\x80\x04\x95\x0e\x00\x00\x00\x00\x00\x00\x00\x8a\x09\xff\xff\xff\xff\xff\xff\xff\xff\x00.";
        let p = parse(buf).unwrap();
        match p.value(p.root()) {
            Value::BigInt(b) => {
                assert_eq!(b.to_u64(), Some(u64::MAX));
                assert!(!b.saturated);
            }
            other => panic!("expected a big int, got {other:?}"),
        }
        assert_eq!(p.as_u64(p.root()), Some(u64::MAX));
    }

    #[test]
    fn long4_with_thousands_of_digits_saturates() {
        let mut buf = vec![0x80, 4, 0x8b];
        buf.extend_from_slice(&3000i32.to_le_bytes());
        buf.extend(std::iter::repeat_n(0x11, 2999));
        buf.push(0x01);
        buf.push(b'.');
        let p = parse(&buf).unwrap();
        assert_eq!(
            p.value(p.root()),
            Value::BigInt(BigInt {
                value: i128::MAX,
                saturated: true
            })
        );
        // Negative, and sign-padded (still small).
        let mut buf = vec![0x80, 4, 0x8b];
        buf.extend_from_slice(&40i32.to_le_bytes());
        buf.push(0xFE);
        buf.extend(std::iter::repeat_n(0xFF, 39));
        buf.push(b'.');
        let p = parse(&buf).unwrap();
        assert_eq!(p.value(p.root()), Value::Int(-2));
    }

    #[test]
    fn text_longs_and_ints() {
        let p = parse(b"L340282366920938463463374607431768211456L\n.").unwrap();
        assert_eq!(
            p.value(p.root()),
            Value::BigInt(BigInt {
                value: i128::MAX,
                saturated: true
            })
        );
        let p = parse(b"L18446744073709551615L\n.").unwrap();
        assert_eq!(p.as_u64(p.root()), Some(u64::MAX));
        let p = parse(b"I-42\n.").unwrap();
        assert_eq!(p.value(p.root()), Value::Int(-42));
        let p = parse(b"I01\n.").unwrap();
        assert_eq!(p.value(p.root()), Value::Bool(true));
    }

    #[test]
    fn text_strings_decode_escapes() {
        let p = parse(b"S'a\\'b\\x41\\n\\101'\np0\n.").unwrap();
        assert_eq!(p.value(p.root()), Value::Str("a'bA\nA"));
        let p = parse(b"V\xe9\\u20ac\\U0001f600\np0\n.").unwrap();
        assert_eq!(p.value(p.root()), Value::Str("é€😀"));
    }

    #[test]
    fn sharing_is_kept_by_handle() {
        // [f, f] where f = {"a": 1}, protocol 4 with MEMOIZE.
        let buf = b"\x80\x04]\x94(}\x94\x8c\x01a\x94K\x01sh\x01e.";
        let p = parse(buf).unwrap();
        let list = p.as_sequence(p.root()).unwrap();
        let items: Vec<Handle> = p.items(list).collect();
        assert_eq!(items.len(), 2);
        assert_eq!(
            items[0], items[1],
            "the same dict object must come back as the same handle"
        );
        let d = p.as_dict(items[0]).unwrap();
        assert_eq!(p.dict_get(d, "a").and_then(|h| p.as_i64(h)), Some(1));
    }

    #[test]
    fn self_referencing_list_does_not_loop() {
        // l = []; l.append(l)
        let p = parse(b"\x80\x02]q\x00h\x00a.").unwrap();
        let list = p.as_sequence(p.root()).unwrap();
        assert_eq!(p.items(list).collect::<Vec<_>>(), vec![p.root()]);
    }

    #[test]
    fn appends_after_other_containers_chain_chunks() {
        // Protocol 1 style: a list filled by single APPENDs, with a nested list built in
        // between, so the outer list's elements are not contiguous in the arena.
        let p = parse(b"]q\x00K\x01a](K\x02K\x03eaK\x04a.").unwrap();
        let outer = p.as_sequence(p.root()).unwrap();
        let items: Vec<Value> = p.items(outer).map(|h| p.value(h)).collect();
        assert_eq!(items.len(), 3);
        assert_eq!(items[0], Value::Int(1));
        assert!(matches!(items[1], Value::List(_)));
        assert_eq!(items[2], Value::Int(4));
        assert_eq!(p.len(outer), 3);
    }

    #[test]
    fn pop_on_empty_marked_stack_pops_the_mark() {
        let p = parse(b"K\x07(0.").unwrap();
        assert_eq!(p.value(p.root()), Value::Int(7));
    }

    #[test]
    fn refuses_code_with_offset_and_name() {
        let err = parse(b"\x80\x02cos\nsystem\nq\x00X\x04\x00\x00\x00trueq\x01\x85q\x02Rq\x03.")
            .unwrap_err();
        match &err {
            PickleError::RefusedCode {
                offset,
                name,
                detail,
                ..
            } => {
                assert_eq!(*offset, 2);
                assert_eq!(*name, "GLOBAL");
                assert!(detail.contains("os.system"), "{detail}");
            }
            other => panic!("{other:?}"),
        }
        assert!(err.to_string().contains("import or call code"), "{err}");
    }

    #[test]
    fn truncation_reports_what_was_being_read() {
        let err = parse(b"\x80\x04X\x10\x00").unwrap_err();
        assert_eq!(
            err.to_string(),
            "truncated at byte 5 while reading a BINUNICODE length"
        );
    }

    #[test]
    fn unknown_memo_reference_is_an_error() {
        let err = parse(b"\x80\x04h\x05.").unwrap_err();
        assert!(
            matches!(err, PickleError::Malformed { offset: 2, .. }),
            "{err:?}"
        );
    }

    #[test]
    fn memo_read_runs_stop_where_an_opcode_would_fail() {
        // A run of BINGET/LONG_BINGET: the bad one is reported at its own offset.
        let err = parse(b"\x80\x04K\x07\x94(h\x00j\x00\x00\x00\x00h\x00h\x09l.").unwrap_err();
        assert!(
            matches!(err, PickleError::Malformed { offset: 15, .. }),
            "{err:?}"
        );
        // A run that fills the stack is stopped by the depth limit, at the opcode past it.
        let limits = PickleLimits {
            max_stack_depth: 4,
            ..PickleLimits::default()
        };
        let err = Pickle::parse(b"K\x07\x94(h\x00h\x00h\x00h\x00.", &limits).unwrap_err();
        assert!(
            matches!(err, PickleError::LimitExceeded { offset: 8, .. }),
            "{err:?}"
        );
        // A sparse memo index inside a run is still found (by the main loop).
        let p = parse(b"K\x09r\x40\x42\x0f\x00\x94(h\x01j\x40\x42\x0f\x00h\x01l.").unwrap();
        let items: Vec<Value> = p
            .items(p.as_container(p.root()).unwrap())
            .map(|h| p.value(h))
            .collect();
        assert_eq!(items, vec![Value::Int(9); 3]);
    }

    #[test]
    fn sparse_memo_indices_work_without_huge_allocation() {
        // LONG_BINPUT 1,000,000 then LONG_BINGET 1,000,000.
        let p = parse(b"K\x09r\x40\x42\x0f\x000j\x40\x42\x0f\x00.").unwrap();
        assert_eq!(p.value(p.root()), Value::Int(9));
    }

    #[test]
    fn limits_are_enforced() {
        let limits = PickleLimits {
            max_container_len: 2,
            ..PickleLimits::default()
        };
        let err = Pickle::parse(b"](K\x01K\x02K\x03e.", &limits).unwrap_err();
        assert!(
            matches!(
                err,
                PickleError::LimitExceeded {
                    what: "a container's length",
                    ..
                }
            ),
            "{err:?}"
        );
        let limits = PickleLimits {
            max_string_bytes: 3,
            ..PickleLimits::default()
        };
        let err = Pickle::parse(b"X\x04\x00\x00\x00abcd.", &limits).unwrap_err();
        assert!(matches!(err, PickleError::LimitExceeded { .. }), "{err:?}");
        let limits = PickleLimits {
            max_input_bytes: 2,
            ..PickleLimits::default()
        };
        assert!(Pickle::parse(b"K\x01.", &limits).is_err());
    }

    #[test]
    fn sniffing() {
        assert!(looks_like_pickle(b"\x80\x04\x95"));
        assert!(looks_like_pickle(b"\x80\x05"));
        assert!(looks_like_pickle(b"(dp0\nS'segments'"));
        assert!(looks_like_pickle(b"}q\x00(X"));
        assert!(looks_like_pickle(b"]q\x00(}"));
        assert!(!looks_like_pickle(b"\x80\x09"));
        assert!(!looks_like_pickle(
            b"torch.OutOfMemoryError: CUDA out of memory"
        ));
        assert!(!looks_like_pickle(b""));
        assert!(!looks_like_pickle(b"{\"segments\": []}"));
    }
}
