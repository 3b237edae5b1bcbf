//! GGUF headers, metadata only: the model's geometry and the exact bytes of its tensors,
//! without reading a byte of tensor data.
//!
//! Layout (little-endian; versions 2 and 3, which differ only in that v3 may be
//! big-endian, which we reject with a clear error):
//!
//! ```text
//! "GGUF" u32:version u64:tensor_count u64:kv_count
//! kv_count × { string:key u32:value_type value }
//! tensor_count × { string:name u32:n_dims n_dims × u64:ne u32:ggml_type u64:offset }
//! (padding to general.alignment, then tensor data — never read)
//! string = u64:len + bytes;  array = u32:elem_type u64:len + len × elem
//! ```
//!
//! Hostile headers cannot make this reader panic or allocate by a count it was given:
//! nothing is pre-allocated from a header field, counts and lengths are checked against
//! fixed limits and against a byte budget for the whole header ([`DEFAULT_HEADER_LIMIT`]),
//! big arrays (the tokenizer vocabulary) are skipped element by element without being kept,
//! nested arrays stop at a fixed depth, and every error carries the byte offset where the
//! header stopped making sense, with `code(oomdoctor::gguf::...)`.
//!
//! Tensor sizes follow ggml's block layouts ([`ggml_type`]): `bytes = ne0 / block × type
//! size × ne1 × ne2 × ne3`. Types this build does not know are listed, not fatal.

use std::collections::BTreeMap;
use std::io::{self, Read};
use std::path::Path;

use super::config::{MAX_CONTEXT, MAX_DIM, MAX_EXPERTS, MAX_HEADS, MAX_LAYERS, MAX_VOCAB};
use super::geometry::{Attention, Geometry, GgufTensors, Layer, Mla, ModelFormat, Moe, TypeTotal};

/// Bytes of header read at most (metadata + tensor infos). Real headers are a few MiB,
/// most of it the tokenizer.
pub const DEFAULT_HEADER_LIMIT: u64 = 64 << 20;
/// Most metadata entries accepted (real files have 20–60).
const MAX_KV: u64 = 1 << 16;
/// Most tensors accepted (the largest MoE files have a few thousand).
const MAX_TENSORS: u64 = 1 << 20;
/// Longest key or tensor name accepted.
const MAX_NAME: u64 = 1 << 16;
/// Strings longer than this are skipped rather than kept.
const MAX_KEPT_STRING: u64 = 1 << 20;
/// Array elements kept in total across the header (per-layer arrays); the rest are skipped.
const MAX_KEPT_ELEMS: u64 = 1 << 16;
/// Arrays of arrays nest at most this deep.
const MAX_NESTING: u32 = 4;
/// `GGML_MAX_DIMS`.
const MAX_DIMS: u32 = 4;

/// Why a GGUF header could not be read.
#[derive(Debug, thiserror::Error, miette::Diagnostic)]
pub enum GgufError {
    #[error("{input}: not a GGUF file (it starts with {found}; GGUF files start with \"GGUF\")")]
    #[diagnostic(code(oomdoctor::gguf::magic))]
    Magic { input: String, found: String },

    #[error("{input}: GGUF version {version} at byte 4 is not supported (versions 2 and 3 are)")]
    #[diagnostic(code(oomdoctor::gguf::version), help("{hint}"))]
    Version {
        input: String,
        version: u32,
        hint: String,
    },

    #[error("{input}: the header ends at byte {offset}, in the middle of {what}")]
    #[diagnostic(
        code(oomdoctor::gguf::truncated),
        help("the file is cut short: an interrupted download?")
    )]
    Truncated {
        input: String,
        offset: u64,
        what: String,
    },

    #[error(
        "{input}: {what} at byte {offset} is {value}, more than the {limit} this reader accepts"
    )]
    #[diagnostic(code(oomdoctor::gguf::limit))]
    Limit {
        input: String,
        offset: u64,
        what: String,
        value: u64,
        limit: u64,
    },

    #[error("{input}: unknown metadata value type {value_type} at byte {offset} (key `{key}`)")]
    #[diagnostic(code(oomdoctor::gguf::value_type))]
    ValueType {
        input: String,
        offset: u64,
        value_type: u32,
        key: String,
    },

    #[error("{input}: tensor `{name}` (info at byte {offset}): {problem}")]
    #[diagnostic(code(oomdoctor::gguf::tensor))]
    Tensor {
        input: String,
        offset: u64,
        name: String,
        problem: String,
    },

    #[error("{input}: `{key}` is {value}, more than the {limit} a model can have")]
    #[diagnostic(code(oomdoctor::gguf::value))]
    BadValue {
        input: String,
        key: String,
        value: u64,
        limit: u64,
    },

    #[error("{input}: the metadata has no `{key}`")]
    #[diagnostic(
        code(oomdoctor::gguf::missing),
        help("is this a model file? LoRA adapters and vocab-only files have no geometry")
    )]
    Missing { input: String, key: String },

    #[error("{input}: read error at byte {offset}: {source}")]
    #[diagnostic(code(oomdoctor::gguf::io))]
    Io {
        input: String,
        offset: u64,
        #[source]
        source: io::Error,
    },
}

/// Metadata value types (`gguf_type`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ValueType {
    U8,
    I8,
    U16,
    I16,
    U32,
    I32,
    F32,
    Bool,
    String,
    Array,
    U64,
    I64,
    F64,
}

impl ValueType {
    fn from_u32(v: u32) -> Option<ValueType> {
        Some(match v {
            0 => ValueType::U8,
            1 => ValueType::I8,
            2 => ValueType::U16,
            3 => ValueType::I16,
            4 => ValueType::U32,
            5 => ValueType::I32,
            6 => ValueType::F32,
            7 => ValueType::Bool,
            8 => ValueType::String,
            9 => ValueType::Array,
            10 => ValueType::U64,
            11 => ValueType::I64,
            12 => ValueType::F64,
            _ => return None,
        })
    }

    /// Encoded size of a fixed-size value.
    fn fixed_size(self) -> Option<u64> {
        Some(match self {
            ValueType::U8 | ValueType::I8 | ValueType::Bool => 1,
            ValueType::U16 | ValueType::I16 => 2,
            ValueType::U32 | ValueType::I32 | ValueType::F32 => 4,
            ValueType::U64 | ValueType::I64 | ValueType::F64 => 8,
            ValueType::String | ValueType::Array => return None,
        })
    }
}

/// A metadata value.
#[derive(Clone, Debug, PartialEq)]
pub enum GgufValue {
    Uint(u64),
    Int(i64),
    Float(f64),
    Bool(bool),
    Str(String),
    /// A string too long to keep (its length).
    LongStr(u64),
    /// An array: its element type and length, and its items when small enough to keep
    /// (per-layer arrays are; the tokenizer's vocabulary is not).
    Array {
        elem: ValueType,
        len: u64,
        items: Option<Vec<GgufValue>>,
    },
}

impl GgufValue {
    /// An unsigned integer (also from a non-negative signed one).
    pub fn as_u64(&self) -> Option<u64> {
        match self {
            GgufValue::Uint(u) => Some(*u),
            GgufValue::Int(i) => u64::try_from(*i).ok(),
            _ => None,
        }
    }
    pub fn as_f64(&self) -> Option<f64> {
        match self {
            GgufValue::Float(f) => Some(*f),
            GgufValue::Uint(u) => Some(*u as f64),
            GgufValue::Int(i) => Some(*i as f64),
            _ => None,
        }
    }
    pub fn as_str(&self) -> Option<&str> {
        match self {
            GgufValue::Str(s) => Some(s),
            _ => None,
        }
    }
    pub fn as_bool(&self) -> Option<bool> {
        match self {
            GgufValue::Bool(b) => Some(*b),
            _ => None,
        }
    }
    /// Kept items of an array.
    pub fn items(&self) -> Option<&[GgufValue]> {
        match self {
            GgufValue::Array { items: Some(v), .. } => Some(v),
            _ => None,
        }
    }
    /// Array length (kept or not).
    pub fn array_len(&self) -> Option<u64> {
        match self {
            GgufValue::Array { len, .. } => Some(*len),
            _ => None,
        }
    }
}

/// A ggml tensor type: name, elements per block, bytes per block.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GgmlType {
    pub name: &'static str,
    pub block: u64,
    pub bytes: u64,
}

/// The block layout of a ggml type id (`enum ggml_type` in `ggml.h`; block structs in
/// `ggml-common.h`). Ids 4 and 5 were removed long ago; 31–33 and 36–38 are the removed
/// repacked Q4_0/IQ4_NL variants, which kept their base type's size.
pub fn ggml_type(id: u32) -> Option<GgmlType> {
    let t = |name, block, bytes| Some(GgmlType { name, block, bytes });
    match id {
        0 => t("F32", 1, 4),
        1 => t("F16", 1, 2),
        2 => t("Q4_0", 32, 18),
        3 => t("Q4_1", 32, 20),
        6 => t("Q5_0", 32, 22),
        7 => t("Q5_1", 32, 24),
        8 => t("Q8_0", 32, 34),
        9 => t("Q8_1", 32, 36),
        10 => t("Q2_K", 256, 84),
        11 => t("Q3_K", 256, 110),
        12 => t("Q4_K", 256, 144),
        13 => t("Q5_K", 256, 176),
        14 => t("Q6_K", 256, 210),
        15 => t("Q8_K", 256, 292),
        16 => t("IQ2_XXS", 256, 66),
        17 => t("IQ2_XS", 256, 74),
        18 => t("IQ3_XXS", 256, 98),
        19 => t("IQ1_S", 256, 50),
        20 => t("IQ4_NL", 32, 18),
        21 => t("IQ3_S", 256, 110),
        22 => t("IQ2_S", 256, 82),
        23 => t("IQ4_XS", 256, 136),
        24 => t("I8", 1, 1),
        25 => t("I16", 1, 2),
        26 => t("I32", 1, 4),
        27 => t("I64", 1, 8),
        28 => t("F64", 1, 8),
        29 => t("IQ1_M", 256, 56),
        30 => t("BF16", 1, 2),
        31 => t("Q4_0_4_4", 32, 18),
        32 => t("Q4_0_4_8", 32, 18),
        33 => t("Q4_0_8_8", 32, 18),
        34 => t("TQ1_0", 256, 54),
        35 => t("TQ2_0", 256, 66),
        36 => t("IQ4_NL_4_4", 32, 18),
        37 => t("IQ4_NL_4_8", 32, 18),
        38 => t("IQ4_NL_8_8", 32, 18),
        39 => t("MXFP4", 32, 17),
        _ => None,
    }
}

/// `general.file_type` (`enum llama_ftype`) as llama.cpp names it.
pub fn file_type_name(id: u64) -> Option<&'static str> {
    Some(match id {
        0 => "F32",
        1 => "F16",
        2 => "Q4_0",
        3 => "Q4_1",
        4 => "Q4_1_SOME_F16",
        7 => "Q8_0",
        8 => "Q5_0",
        9 => "Q5_1",
        10 => "Q2_K",
        11 => "Q3_K_S",
        12 => "Q3_K_M",
        13 => "Q3_K_L",
        14 => "Q4_K_S",
        15 => "Q4_K_M",
        16 => "Q5_K_S",
        17 => "Q5_K_M",
        18 => "Q6_K",
        19 => "IQ2_XXS",
        20 => "IQ2_XS",
        21 => "Q2_K_S",
        22 => "IQ3_XS",
        23 => "IQ3_XXS",
        24 => "IQ1_S",
        25 => "IQ4_NL",
        26 => "IQ3_S",
        27 => "IQ3_M",
        28 => "IQ2_S",
        29 => "IQ2_M",
        30 => "IQ4_XS",
        31 => "IQ1_M",
        32 => "BF16",
        36 => "TQ1_0",
        37 => "TQ2_0",
        38 => "MXFP4_MOE",
        _ => return None,
    })
}

/// Whether bytes look like the start of a GGUF file.
pub fn is_gguf(prefix: &[u8]) -> bool {
    prefix.starts_with(b"GGUF")
}

/// What a GGUF header says.
#[derive(Clone, Debug, PartialEq)]
pub struct GgufHeader {
    pub version: u32,
    pub tensor_count: u64,
    /// Metadata in file order.
    pub metadata: Vec<(String, GgufValue)>,
    /// Tensor sizes, totalled.
    pub tensors: GgufTensors,
    /// `general.alignment` (32 by default).
    pub alignment: u64,
    /// Where tensor data starts (end of the header, aligned).
    pub data_offset: u64,
    /// End of the last tensor's data relative to `data_offset`.
    pub data_bytes: u64,
    /// Things worth telling the user (unknown tensor types, truncated data).
    pub notes: Vec<String>,
}

impl GgufHeader {
    /// The last value stored under `key`.
    pub fn get(&self, key: &str) -> Option<&GgufValue> {
        self.metadata
            .iter()
            .rev()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v)
    }

    /// `general.architecture`.
    pub fn architecture(&self) -> Option<&str> {
        self.get("general.architecture").and_then(GgufValue::as_str)
    }
}

/// A reader that knows its byte offset and enforces the header budget.
struct Reader<'a, R> {
    inner: R,
    pos: u64,
    limit: u64,
    input: &'a str,
    kept_elems: u64,
}

impl<R: Read> Reader<'_, R> {
    fn budget(&self, n: u64, what: &str) -> Result<(), GgufError> {
        if self.pos.saturating_add(n) > self.limit {
            return Err(GgufError::Limit {
                input: self.input.to_string(),
                offset: self.pos,
                what: format!("the header (reading {what})"),
                value: self.pos.saturating_add(n),
                limit: self.limit,
            });
        }
        Ok(())
    }

    fn exact(&mut self, buf: &mut [u8], what: &str) -> Result<(), GgufError> {
        self.budget(buf.len() as u64, what)?;
        match self.inner.read_exact(buf) {
            Ok(()) => {
                self.pos += buf.len() as u64;
                Ok(())
            }
            Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => Err(GgufError::Truncated {
                input: self.input.to_string(),
                offset: self.pos,
                what: what.to_string(),
            }),
            Err(e) => Err(GgufError::Io {
                input: self.input.to_string(),
                offset: self.pos,
                source: e,
            }),
        }
    }

    /// Skips `n` bytes without keeping them.
    fn skip(&mut self, n: u64, what: &str) -> Result<(), GgufError> {
        self.budget(n, what)?;
        let copied = io::copy(&mut (&mut self.inner).take(n), &mut io::sink()).map_err(|e| {
            GgufError::Io {
                input: self.input.to_string(),
                offset: self.pos,
                source: e,
            }
        })?;
        self.pos += copied;
        if copied < n {
            return Err(GgufError::Truncated {
                input: self.input.to_string(),
                offset: self.pos,
                what: what.to_string(),
            });
        }
        Ok(())
    }

    fn u8(&mut self, what: &str) -> Result<u8, GgufError> {
        let mut b = [0u8; 1];
        self.exact(&mut b, what)?;
        Ok(b[0])
    }
    fn u16(&mut self, what: &str) -> Result<u16, GgufError> {
        let mut b = [0u8; 2];
        self.exact(&mut b, what)?;
        Ok(u16::from_le_bytes(b))
    }
    fn u32(&mut self, what: &str) -> Result<u32, GgufError> {
        let mut b = [0u8; 4];
        self.exact(&mut b, what)?;
        Ok(u32::from_le_bytes(b))
    }
    fn u64(&mut self, what: &str) -> Result<u64, GgufError> {
        let mut b = [0u8; 8];
        self.exact(&mut b, what)?;
        Ok(u64::from_le_bytes(b))
    }

    fn limit_err(&self, offset: u64, what: &str, value: u64, limit: u64) -> GgufError {
        GgufError::Limit {
            input: self.input.to_string(),
            offset,
            what: what.to_string(),
            value,
            limit,
        }
    }

    /// A string of at most `max` bytes; longer is an error (keys, tensor names).
    fn name(&mut self, what: &str, max: u64) -> Result<String, GgufError> {
        let at = self.pos;
        let len = self.u64(what)?;
        if len > max {
            return Err(self.limit_err(at, &format!("the length of {what}"), len, max));
        }
        self.budget(len, what)?;
        // Bounded by `max` and by the header budget: safe to allocate.
        let mut buf = vec![0u8; len as usize];
        self.exact(&mut buf, what)?;
        Ok(String::from_utf8_lossy(&buf).into_owned())
    }

    /// A string value: kept when at most `max` bytes, else skipped (`Err(length)`).
    fn string(&mut self, what: &str, max: u64) -> Result<Result<String, u64>, GgufError> {
        let len = self.u64(what)?;
        if len > max {
            self.skip(len, what)?;
            return Ok(Err(len));
        }
        self.budget(len, what)?;
        let mut buf = vec![0u8; len as usize];
        self.exact(&mut buf, what)?;
        Ok(Ok(String::from_utf8_lossy(&buf).into_owned()))
    }

    /// One value of type `ty`. `depth` counts array nesting.
    fn value(&mut self, ty: ValueType, key: &str, depth: u32) -> Result<GgufValue, GgufError> {
        let what = format!("the value of `{key}`");
        Ok(match ty {
            ValueType::U8 => GgufValue::Uint(u64::from(self.u8(&what)?)),
            ValueType::I8 => GgufValue::Int(i64::from(self.u8(&what)? as i8)),
            ValueType::U16 => GgufValue::Uint(u64::from(self.u16(&what)?)),
            ValueType::I16 => GgufValue::Int(i64::from(self.u16(&what)? as i16)),
            ValueType::U32 => GgufValue::Uint(u64::from(self.u32(&what)?)),
            ValueType::I32 => GgufValue::Int(i64::from(self.u32(&what)? as i32)),
            ValueType::F32 => GgufValue::Float(f64::from(f32::from_bits(self.u32(&what)?))),
            ValueType::Bool => GgufValue::Bool(self.u8(&what)? != 0),
            ValueType::U64 => GgufValue::Uint(self.u64(&what)?),
            ValueType::I64 => GgufValue::Int(self.u64(&what)? as i64),
            ValueType::F64 => GgufValue::Float(f64::from_bits(self.u64(&what)?)),
            ValueType::String => match self.string(&what, MAX_KEPT_STRING)? {
                Ok(s) => GgufValue::Str(s),
                Err(len) => GgufValue::LongStr(len),
            },
            ValueType::Array => self.array(key, depth + 1)?,
        })
    }

    fn array(&mut self, key: &str, depth: u32) -> Result<GgufValue, GgufError> {
        let at = self.pos;
        if depth > MAX_NESTING {
            return Err(self.limit_err(
                at,
                &format!("the array nesting of `{key}`"),
                u64::from(depth),
                u64::from(MAX_NESTING),
            ));
        }
        let raw = self.u32(&format!("the element type of `{key}`"))?;
        let elem = ValueType::from_u32(raw).ok_or_else(|| GgufError::ValueType {
            input: self.input.to_string(),
            offset: at,
            value_type: raw,
            key: key.to_string(),
        })?;
        let len = self.u64(&format!("the length of `{key}`"))?;
        let keep = elem != ValueType::Array
            && len <= MAX_LAYERS.max(256)
            && self.kept_elems.saturating_add(len) <= MAX_KEPT_ELEMS
            && (elem != ValueType::String || len <= 256);
        if !keep {
            // Skip: fixed-size elements in one go, others one by one.
            if let Some(size) = elem.fixed_size() {
                let total = len.checked_mul(size).ok_or_else(|| {
                    self.limit_err(at, &format!("the size of `{key}`"), len, u64::MAX / size)
                })?;
                self.skip(total, &format!("the array `{key}`"))?;
            } else {
                for _ in 0..len {
                    match elem {
                        ValueType::String => {
                            let n = self.u64(&format!("a string in `{key}`"))?;
                            self.skip(n, &format!("a string in `{key}`"))?;
                        }
                        _ => {
                            self.array(key, depth + 1)?;
                        }
                    }
                }
            }
            return Ok(GgufValue::Array {
                elem,
                len,
                items: None,
            });
        }
        self.kept_elems += len;
        let mut items = Vec::new();
        for _ in 0..len {
            items.push(self.value(elem, key, depth)?);
        }
        Ok(GgufValue::Array {
            elem,
            len,
            items: Some(items),
        })
    }
}

/// Reads a GGUF header from `r`, at most `limit` bytes of it. `input` names the file in
/// errors.
pub fn read_header<R: Read>(r: R, input: &str, limit: u64) -> Result<GgufHeader, GgufError> {
    read_header_part(r, input, limit, None)
}

/// [`read_header`] for a part of a split model: parts after the first carry no
/// architecture, so the layer count to group `blk.N` tensors by comes from the first.
fn read_header_part<R: Read>(
    r: R,
    input: &str,
    limit: u64,
    blocks_hint: Option<u64>,
) -> Result<GgufHeader, GgufError> {
    let mut rd = Reader {
        inner: r,
        pos: 0,
        limit,
        input,
        kept_elems: 0,
    };
    let mut magic = [0u8; 4];
    rd.exact(&mut magic, "the magic number")
        .map_err(|e| match e {
            GgufError::Truncated { .. } => GgufError::Magic {
                input: input.to_string(),
                found: "fewer than 4 bytes".to_string(),
            },
            other => other,
        })?;
    if &magic != b"GGUF" {
        return Err(GgufError::Magic {
            input: input.to_string(),
            found: format!("{:?}", String::from_utf8_lossy(&magic)),
        });
    }
    let version = rd.u32("the version")?;
    if version != 2 && version != 3 {
        let hint = if version.swap_bytes() == 2 || version.swap_bytes() == 3 {
            "this is a big-endian GGUF; only little-endian files are read".to_string()
        } else if version == 1 {
            "GGUF v1 (August 2023) used 32-bit counts; re-convert the model with a current llama.cpp".to_string()
        } else {
            "the file may be damaged or from a newer GGUF revision".to_string()
        };
        return Err(GgufError::Version {
            input: input.to_string(),
            version,
            hint,
        });
    }
    let at = rd.pos;
    let tensor_count = rd.u64("the tensor count")?;
    if tensor_count > MAX_TENSORS {
        return Err(rd.limit_err(at, "the tensor count", tensor_count, MAX_TENSORS));
    }
    let at = rd.pos;
    let kv_count = rd.u64("the metadata count")?;
    if kv_count > MAX_KV {
        return Err(rd.limit_err(at, "the metadata count", kv_count, MAX_KV));
    }

    let mut metadata: Vec<(String, GgufValue)> = Vec::new();
    for i in 0..kv_count {
        let key = rd.name(&format!("metadata key #{i}"), MAX_NAME)?;
        let at = rd.pos;
        let raw = rd.u32(&format!("the type of `{key}`"))?;
        let ty = ValueType::from_u32(raw).ok_or_else(|| GgufError::ValueType {
            input: input.to_string(),
            offset: at,
            value_type: raw,
            key: key.clone(),
        })?;
        let v = rd.value(ty, &key, 0)?;
        metadata.push((key, v));
    }
    let mut header = GgufHeader {
        version,
        tensor_count,
        metadata,
        tensors: GgufTensors::default(),
        alignment: 32,
        data_offset: 0,
        data_bytes: 0,
        notes: Vec::new(),
    };
    if let Some(a) = header.get("general.alignment").and_then(GgufValue::as_u64) {
        if a.is_power_of_two() && a <= 1 << 20 {
            header.alignment = a;
        } else {
            header.notes.push(format!(
                "general.alignment {a} is not a power of two: using 32"
            ));
        }
    }
    let blocks = header
        .architecture()
        .and_then(|arch| header.get(&format!("{arch}.block_count")))
        .and_then(GgufValue::as_u64)
        .or(blocks_hint)
        .unwrap_or(0)
        .min(MAX_LAYERS);
    read_tensors(&mut rd, &mut header, blocks)?;
    header.data_offset = rd.pos.div_ceil(header.alignment) * header.alignment;
    Ok(header)
}

/// Reads the tensor infos and totals their sizes by type and by layer.
fn read_tensors<R: Read>(
    rd: &mut Reader<'_, R>,
    h: &mut GgufHeader,
    blocks: u64,
) -> Result<(), GgufError> {
    let input = rd.input.to_string();
    let mut by_type: BTreeMap<u32, (u64, u64, u64)> = BTreeMap::new();
    let mut t = GgufTensors {
        layer_bytes: vec![0; blocks as usize],
        ..GgufTensors::default()
    };
    let mut data_end: u64 = 0;
    for i in 0..h.tensor_count {
        let at = rd.pos;
        let name = rd.name(&format!("tensor name #{i}"), MAX_NAME)?;
        let n_dims = rd.u32(&format!("the dimensions of `{name}`"))?;
        if n_dims == 0 || n_dims > MAX_DIMS {
            return Err(GgufError::Tensor {
                input,
                offset: at,
                name,
                problem: format!("{n_dims} dimensions (1 to {MAX_DIMS} allowed)"),
            });
        }
        let mut ne = [1u64; MAX_DIMS as usize];
        for d in ne.iter_mut().take(n_dims as usize) {
            *d = rd.u64(&format!("the shape of `{name}`"))?;
        }
        let ty = rd.u32(&format!("the type of `{name}`"))?;
        let offset = rd.u64(&format!("the data offset of `{name}`"))?;
        let elems = ne
            .iter()
            .try_fold(1u64, |a, d| a.checked_mul(*d))
            .ok_or_else(|| GgufError::Tensor {
                input: input.clone(),
                offset: at,
                name: name.clone(),
                problem: format!("shape {:?} overflows 64 bits", &ne[..n_dims as usize]),
            })?;
        let bytes = match ggml_type(ty) {
            Some(gt) => {
                if ne[0] % gt.block != 0 {
                    return Err(GgufError::Tensor {
                        input,
                        offset: at,
                        name,
                        problem: format!(
                            "row of {} elements is not a whole number of {} blocks of {}",
                            ne[0], gt.name, gt.block
                        ),
                    });
                }
                (ne[0] / gt.block)
                    .checked_mul(gt.bytes)
                    .and_then(|r| r.checked_mul(ne[1]))
                    .and_then(|r| r.checked_mul(ne[2]))
                    .and_then(|r| r.checked_mul(ne[3]))
                    .ok_or_else(|| GgufError::Tensor {
                        input: input.clone(),
                        offset: at,
                        name: name.clone(),
                        problem: "size overflows 64 bits".to_string(),
                    })?
            }
            None => {
                if !t.unknown_types.contains(&ty) {
                    t.unknown_types.push(ty);
                }
                0
            }
        };
        data_end = data_end.max(offset.saturating_add(bytes));
        let e = by_type.entry(ty).or_default();
        e.0 += 1;
        e.1 = e.1.saturating_add(elems);
        e.2 = e.2.saturating_add(bytes);
        t.total_params = t.total_params.saturating_add(elems);
        t.total_bytes = t.total_bytes.saturating_add(bytes);
        // Group by what llama.cpp offloads together.
        let layer = name
            .strip_prefix("blk.")
            .and_then(|rest| rest.split('.').next())
            .and_then(|n| n.parse::<u64>().ok())
            .filter(|n| *n < blocks);
        match (layer, name.as_str()) {
            (Some(n), _) => {
                if let Some(slot) = t.layer_bytes.get_mut(n as usize) {
                    *slot = slot.saturating_add(bytes);
                }
            }
            (None, "output.weight") => t.output_bytes = t.output_bytes.saturating_add(bytes),
            (None, "token_embd.weight") => {
                t.token_embd_bytes = t.token_embd_bytes.saturating_add(bytes)
            }
            _ => t.other_bytes = t.other_bytes.saturating_add(bytes),
        }
    }
    let mut totals: Vec<TypeTotal> = by_type
        .into_iter()
        .map(|(id, (tensors, params, bytes))| TypeTotal {
            ggml_type: ggml_type(id)
                .map(|g| g.name.to_string())
                .unwrap_or_else(|| format!("type {id}")),
            tensors,
            params,
            bytes,
        })
        .collect();
    totals.sort_by(|a, b| b.bytes.cmp(&a.bytes).then(a.ggml_type.cmp(&b.ggml_type)));
    t.by_type = totals;
    if !t.unknown_types.is_empty() {
        h.notes.push(format!(
            "tensor types {:?} are unknown to this build: their bytes are not counted (weights underestimated)",
            t.unknown_types
        ));
    }
    h.tensors = t;
    h.data_bytes = data_end;
    Ok(())
}

/// Reads the header of a GGUF file and checks that the file is long enough to hold the
/// tensors it lists (a partial download is reported as a note).
pub fn read_gguf_file(path: &Path) -> Result<GgufHeader, GgufError> {
    let input = path.display().to_string();
    let file = std::fs::File::open(path).map_err(|e| GgufError::Io {
        input: input.clone(),
        offset: 0,
        source: e,
    })?;
    let len = file.metadata().map(|m| m.len()).ok();
    let mut h = read_header(io::BufReader::new(file), &input, DEFAULT_HEADER_LIMIT)?;
    if let Some(len) = len {
        let needed = h.data_offset.saturating_add(h.data_bytes);
        if needed > len {
            h.notes.push(format!(
                "the file is {len} bytes but its tensors end at byte {needed}: incomplete download? (sizes are taken from the header)"
            ));
        }
    }
    Ok(h)
}

/// Reads a model that may be split (`name-00001-of-00003.gguf`, written by
/// `llama-gguf-split`): the first part holds the metadata, every part holds some tensors,
/// and the weights are their sum. Missing parts are noted, not fatal (the weights are then
/// undercounted, and the note says by which part).
pub fn read_gguf_model(path: &Path) -> Result<GgufHeader, GgufError> {
    let mut h = read_gguf_file(path)?;
    let parts = h
        .get("split.count")
        .and_then(GgufValue::as_u64)
        .unwrap_or(1);
    if parts <= 1 {
        return Ok(h);
    }
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let suffix = format!("-of-{parts:05}.gguf");
    let prefix = name
        .strip_suffix(&suffix)
        .and_then(|p| p.get(..p.len().checked_sub(6)?))
        .filter(|_| parts <= 9999);
    let Some(prefix) = prefix.map(str::to_string) else {
        h.notes.push(format!(
            "split GGUF ({parts} parts) whose name is not NAME-00001-of-{parts:05}.gguf: only this part's tensors are counted"
        ));
        return Ok(h);
    };
    let blocks = h.tensors.layer_bytes.len() as u64;
    let dir = path.parent().unwrap_or(Path::new("."));
    for i in 2..=parts {
        let part = dir.join(format!("{prefix}-{i:05}-of-{parts:05}.gguf"));
        if !part.is_file() {
            h.notes.push(format!(
                "split part {} is missing: its tensors are not counted (weights underestimated)",
                part.display()
            ));
            continue;
        }
        let input = part.display().to_string();
        let file = std::fs::File::open(&part).map_err(|e| GgufError::Io {
            input: input.clone(),
            offset: 0,
            source: e,
        })?;
        let p = read_header_part(
            io::BufReader::new(file),
            &input,
            DEFAULT_HEADER_LIMIT,
            Some(blocks),
        )?;
        merge_tensors(&mut h.tensors, &p.tensors);
        h.notes.extend(p.notes);
        h.tensor_count = h.tensor_count.saturating_add(p.tensor_count);
    }
    Ok(h)
}

/// Adds the tensors of another part of a split model.
fn merge_tensors(into: &mut GgufTensors, from: &GgufTensors) {
    into.total_bytes = into.total_bytes.saturating_add(from.total_bytes);
    into.total_params = into.total_params.saturating_add(from.total_params);
    for (a, b) in into.layer_bytes.iter_mut().zip(&from.layer_bytes) {
        *a = a.saturating_add(*b);
    }
    into.output_bytes = into.output_bytes.saturating_add(from.output_bytes);
    into.token_embd_bytes = into.token_embd_bytes.saturating_add(from.token_embd_bytes);
    into.other_bytes = into.other_bytes.saturating_add(from.other_bytes);
    for t in &from.by_type {
        match into.by_type.iter_mut().find(|x| x.ggml_type == t.ggml_type) {
            Some(x) => {
                x.tensors += t.tensors;
                x.params = x.params.saturating_add(t.params);
                x.bytes = x.bytes.saturating_add(t.bytes);
            }
            None => into.by_type.push(t.clone()),
        }
    }
    into.by_type
        .sort_by(|a, b| b.bytes.cmp(&a.bytes).then(a.ggml_type.cmp(&b.ggml_type)));
    for u in &from.unknown_types {
        if !into.unknown_types.contains(u) {
            into.unknown_types.push(*u);
        }
    }
}

/// A per-layer array (`head_count_kv` may be one) or a scalar for every layer.
fn per_layer(v: Option<&GgufValue>, layers: usize) -> Option<Vec<u64>> {
    let v = v?;
    if let Some(x) = v.as_u64() {
        return Some(vec![x; layers]);
    }
    let items = v.items()?;
    let vals: Vec<u64> = items.iter().map(|i| i.as_u64().unwrap_or(0)).collect();
    (vals.len() == layers).then_some(vals)
}

/// The geometry a GGUF header describes. llama.cpp's per-architecture conventions that the
/// file does not spell out (which layers slide in Gemma 2/3, Cohere 2, gpt-oss) are applied
/// here, as llama.cpp applies them when it loads the file.
pub fn geometry_from_gguf(h: &GgufHeader, input: &str) -> Result<Geometry, GgufError> {
    let missing = |key: &str| GgufError::Missing {
        input: input.to_string(),
        key: key.to_string(),
    };
    let arch = h
        .architecture()
        .ok_or_else(|| missing("general.architecture"))?
        .to_string();
    let key = |k: &str| format!("{arch}.{k}");
    let get = |k: &str| h.get(&key(k));
    let num = |k: &str| get(k).and_then(GgufValue::as_u64);
    let layers = num("block_count").ok_or_else(|| missing(&key("block_count")))?;
    if layers > MAX_LAYERS {
        return Err(GgufError::Limit {
            input: input.to_string(),
            offset: 0,
            what: key("block_count"),
            value: layers,
            limit: MAX_LAYERS,
        });
    }
    let n = layers as usize;
    let hidden = num("embedding_length").ok_or_else(|| missing(&key("embedding_length")))?;
    let heads_l = per_layer(get("attention.head_count"), n)
        .ok_or_else(|| missing(&key("attention.head_count")))?;
    let heads = heads_l.iter().copied().max().unwrap_or(0);
    let recurrent = matches!(
        arch.as_str(),
        "mamba" | "mamba2" | "rwkv6" | "rwkv7" | "rwkv6qwen2" | "rwkv7qwen"
    );
    let kv_l = per_layer(get("attention.head_count_kv"), n).unwrap_or_else(|| heads_l.clone());
    let head_dim = num("attention.key_length").unwrap_or(hidden.checked_div(heads).unwrap_or(0));
    let v_dim = num("attention.value_length").unwrap_or(head_dim);
    // Sizes beyond any real model are refused here, so the arithmetic never overflows.
    let bounded = [
        ("embedding_length", Some(hidden), MAX_DIM),
        ("attention.head_count", Some(heads), MAX_HEADS),
        (
            "attention.head_count_kv",
            kv_l.iter().copied().max(),
            MAX_HEADS,
        ),
        ("attention.key_length", Some(head_dim), MAX_DIM),
        ("attention.value_length", Some(v_dim), MAX_DIM),
        (
            "feed_forward_length",
            per_layer(get("feed_forward_length"), n).and_then(|v| v.into_iter().max()),
            MAX_DIM,
        ),
        ("vocab_size", num("vocab_size"), MAX_VOCAB),
        ("context_length", num("context_length"), MAX_CONTEXT),
        (
            "attention.sliding_window",
            num("attention.sliding_window"),
            MAX_CONTEXT,
        ),
        ("expert_count", num("expert_count"), MAX_EXPERTS),
        ("expert_used_count", num("expert_used_count"), MAX_EXPERTS),
        (
            "expert_feed_forward_length",
            num("expert_feed_forward_length"),
            MAX_DIM,
        ),
        (
            "expert_shared_feed_forward_length",
            num("expert_shared_feed_forward_length"),
            MAX_DIM,
        ),
        (
            "expert_shared_count",
            num("expert_shared_count"),
            MAX_EXPERTS,
        ),
        (
            "attention.kv_lora_rank",
            num("attention.kv_lora_rank"),
            MAX_DIM,
        ),
        (
            "attention.key_length_mla",
            num("attention.key_length_mla"),
            MAX_DIM,
        ),
        (
            "attention.value_length_mla",
            num("attention.value_length_mla"),
            MAX_DIM,
        ),
        ("rope.dimension_count", num("rope.dimension_count"), MAX_DIM),
    ];
    for (k, v, limit) in bounded {
        if let Some(v) = v.filter(|v| *v > limit) {
            return Err(GgufError::BadValue {
                input: input.to_string(),
                key: key(k),
                value: v,
                limit,
            });
        }
    }

    let mut g = Geometry::uniform(0, 0, 0, 0);
    g.format = ModelFormat::Gguf;
    g.architecture = arch.clone();
    g.model_type = arch.clone();
    g.name = h
        .get("general.name")
        .and_then(GgufValue::as_str)
        .map(str::to_string);
    g.hidden_size = hidden;
    g.num_layers = layers;
    g.num_attention_heads = heads;
    g.num_kv_heads = kv_l.iter().copied().filter(|k| *k > 0).max().unwrap_or(0);
    g.head_dim = head_dim;
    g.v_head_dim = v_dim;
    g.intermediate_size = per_layer(get("feed_forward_length"), n)
        .and_then(|v| v.into_iter().max())
        .unwrap_or(0);
    g.vocab_size = num("vocab_size")
        .or_else(|| {
            h.get("tokenizer.ggml.tokens")
                .and_then(GgufValue::array_len)
        })
        .unwrap_or(0);
    g.max_position_embeddings = num("context_length");
    for (field, k) in [
        ("layers", "block_count"),
        ("hidden_size", "embedding_length"),
        ("attention_heads", "attention.head_count"),
        ("kv_heads", "attention.head_count_kv"),
        ("head_dim", "attention.key_length"),
        ("max_position_embeddings", "context_length"),
        ("sliding_window", "attention.sliding_window"),
        ("experts", "expert_count"),
        ("kv_lora_rank", "attention.kv_lora_rank"),
    ] {
        if get(k).is_some() {
            g.locate(field, key(k));
        }
    }
    g.locate("name", "general.name");
    g.locate("dtype", "general.file_type");
    g.gguf_file_type = h
        .get("general.file_type")
        .and_then(GgufValue::as_u64)
        .map(|f| {
            file_type_name(f)
                .map(str::to_string)
                .unwrap_or_else(|| format!("file type {f}"))
        });
    g.tie_word_embeddings = h.tensors.output_bytes == 0 && h.tensors.token_embd_bytes > 0;

    // MLA (deepseek2 and relatives). Files converted for llama.cpp's latent cache (2025+)
    // carry `key_length_mla`; older files make llama.cpp cache decompressed K and V.
    if let Some(rank) = num("attention.kv_lora_rank") {
        let rope = num("rope.dimension_count").unwrap_or(64);
        let k_mla = num("attention.key_length_mla");
        let qk = k_mla.unwrap_or(head_dim);
        let v = num("attention.value_length_mla").unwrap_or(v_dim);
        g.mla = Some(Mla {
            kv_lora_rank: rank,
            qk_rope_head_dim: rope,
            qk_nope_head_dim: qk.saturating_sub(rope),
            v_head_dim: v,
            q_lora_rank: num("attention.q_lora_rank").filter(|r| *r > 0),
        });
        g.head_dim = qk;
        g.v_head_dim = v;
        if k_mla.is_none() {
            g.notes.push(
                "this MLA GGUF predates llama.cpp's latent KV cache (no key_length_mla): llama.cpp caches full K and V for it".to_string(),
            );
        }
    }

    // Sliding windows: an explicit pattern, else llama.cpp's per-architecture pattern.
    let window = num("attention.sliding_window").filter(|w| *w > 0);
    let swa: Vec<bool> = match (window, get("attention.sliding_window_pattern")) {
        (None, _) => vec![false; n],
        (Some(_), Some(p)) if p.items().is_some() => {
            let v: Vec<bool> = p
                .items()
                .unwrap_or(&[])
                .iter()
                .map(|x| x.as_bool().unwrap_or(false))
                .collect();
            if v.len() == n { v } else { vec![false; n] }
        }
        (Some(_), p) => {
            let pattern = p.and_then(GgufValue::as_u64).or(match arch.as_str() {
                "gemma2" | "gpt-oss" => Some(2),
                "gemma3" => Some(6),
                "cohere2" | "llama4" => Some(4),
                _ => None,
            });
            match pattern {
                // llama.cpp's set_swa_pattern: layer il slides iff il % n < n - 1.
                Some(p) if p > 0 => (0..n as u64).map(|il| il % p < p - 1).collect(),
                Some(_) => vec![true; n],
                None => {
                    g.notes.push(format!(
                        "{arch} has a sliding window but no layer pattern this reader knows: every layer counted at full length (an upper bound)"
                    ));
                    vec![false; n]
                }
            }
        }
    };
    // Qwen3-Next: full attention every `full_attention_interval` layers, linear between.
    let interval = num("full_attention_interval").filter(|i| *i > 0);

    let expert_count = num("expert_count").unwrap_or(0);
    let leading_dense = num("leading_dense_block_count").unwrap_or(0);
    if expert_count > 1 {
        let ff_exp = num("expert_feed_forward_length").unwrap_or(g.intermediate_size);
        g.moe = Some(Moe {
            experts: expert_count,
            experts_per_token: num("expert_used_count").unwrap_or(2),
            expert_intermediate_size: ff_exp,
            shared_intermediate_size: num("expert_shared_feed_forward_length").unwrap_or_else(
                || {
                    num("expert_shared_count")
                        .unwrap_or(0)
                        .saturating_mul(ff_exp)
                },
            ),
            shared_expert_gate: false,
            router_bias: false,
        });
    }
    g.layers = (0..n)
        .map(|i| {
            let kv = kv_l.get(i).copied().unwrap_or(0);
            let no_cache =
                recurrent || kv == 0 || interval.is_some_and(|iv| (i as u64 + 1) % iv != 0);
            let attention = if no_cache {
                Attention::NoCache
            } else if swa.get(i).copied().unwrap_or(false) {
                Attention::Sliding {
                    window: window.unwrap_or(0),
                }
            } else {
                Attention::Full
            };
            Layer {
                attention,
                kv_heads: if no_cache { 0 } else { kv },
                moe: expert_count > 1 && i as u64 >= leading_dense,
            }
        })
        .collect();
    g.sliding_window = g.layers.iter().find_map(|l| match l.attention {
        Attention::Sliding { window } => Some(window),
        _ => None,
    });
    g.gguf = Some(h.tensors.clone());
    g.notes.extend(h.notes.iter().cloned());
    Ok(g)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(b: &mut Vec<u8>, v: &str) {
        b.extend_from_slice(&(v.len() as u64).to_le_bytes());
        b.extend_from_slice(v.as_bytes());
    }

    fn minimal(version: u32, tensors: u64, kvs: u64) -> Vec<u8> {
        let mut b = b"GGUF".to_vec();
        b.extend_from_slice(&version.to_le_bytes());
        b.extend_from_slice(&tensors.to_le_bytes());
        b.extend_from_slice(&kvs.to_le_bytes());
        b
    }

    #[test]
    fn block_sizes_match_ggml() {
        assert_eq!(ggml_type(8).map(|t| (t.block, t.bytes)), Some((32, 34)));
        assert_eq!(ggml_type(12).map(|t| (t.block, t.bytes)), Some((256, 144)));
        assert_eq!(ggml_type(14).map(|t| t.name), Some("Q6_K"));
        assert_eq!(ggml_type(39).map(|t| (t.block, t.bytes)), Some((32, 17)));
        assert!(ggml_type(4).is_none() && ggml_type(999).is_none());
        assert_eq!(file_type_name(15), Some("Q4_K_M"));
    }

    #[test]
    fn rejects_bad_magic_and_versions() {
        let e = read_header(&b"GGML\x01\0\0\0"[..], "m", 1 << 20).unwrap_err();
        assert!(matches!(e, GgufError::Magic { .. }), "{e}");
        let e = read_header(&b"GG"[..], "m", 1 << 20).unwrap_err();
        assert!(matches!(e, GgufError::Magic { .. }));
        let e = read_header(&minimal(1, 0, 0)[..], "m", 1 << 20).unwrap_err();
        assert!(matches!(e, GgufError::Version { version: 1, .. }));
        let e = read_header(&minimal(3u32.swap_bytes(), 0, 0)[..], "m", 1 << 20).unwrap_err();
        let msg = format!("{:?}", e);
        assert!(msg.contains("big-endian"), "{msg}");
    }

    #[test]
    fn hostile_counts_are_errors_not_allocations() {
        let e = read_header(&minimal(3, u64::MAX, 0)[..], "m", 1 << 20).unwrap_err();
        assert!(matches!(e, GgufError::Limit { offset: 8, .. }), "{e}");
        let e = read_header(&minimal(3, 0, 1 << 40)[..], "m", 1 << 20).unwrap_err();
        assert!(matches!(e, GgufError::Limit { offset: 16, .. }), "{e}");
        // A key claiming 2^60 bytes.
        let mut b = minimal(3, 0, 1);
        b.extend_from_slice(&(1u64 << 60).to_le_bytes());
        let e = read_header(&b[..], "m", 1 << 20).unwrap_err();
        assert!(matches!(e, GgufError::Limit { offset: 24, .. }), "{e}");
        // An array claiming 2^62 u64 elements: skipping would overflow or run past the end.
        let mut b = minimal(3, 0, 1);
        s(&mut b, "tokenizer.ggml.scores");
        b.extend_from_slice(&9u32.to_le_bytes());
        b.extend_from_slice(&10u32.to_le_bytes());
        b.extend_from_slice(&(1u64 << 62).to_le_bytes());
        let e = read_header(&b[..], "m", 1 << 20).unwrap_err();
        assert!(matches!(e, GgufError::Limit { .. }), "{e}");
        // A string array claiming 2^40 strings in a short file.
        let mut b = minimal(3, 0, 1);
        s(&mut b, "tokenizer.ggml.tokens");
        b.extend_from_slice(&9u32.to_le_bytes());
        b.extend_from_slice(&8u32.to_le_bytes());
        b.extend_from_slice(&(1u64 << 40).to_le_bytes());
        s(&mut b, "a");
        let e = read_header(&b[..], "m", 1 << 20).unwrap_err();
        assert!(matches!(e, GgufError::Truncated { .. }), "{e}");
    }

    #[test]
    fn deep_array_nesting_is_bounded() {
        let mut b = minimal(3, 0, 1);
        s(&mut b, "x");
        b.extend_from_slice(&9u32.to_le_bytes());
        for _ in 0..10 {
            b.extend_from_slice(&9u32.to_le_bytes()); // element type: array
            b.extend_from_slice(&1u64.to_le_bytes()); // one element
        }
        let e = read_header(&b[..], "m", 1 << 20).unwrap_err();
        assert!(matches!(e, GgufError::Limit { .. }), "{e}");
    }

    #[test]
    fn unknown_value_type_names_key_and_offset() {
        let mut b = minimal(3, 0, 1);
        s(&mut b, "general.mystery");
        b.extend_from_slice(&77u32.to_le_bytes());
        let e = read_header(&b[..], "m", 1 << 20).unwrap_err();
        match e {
            GgufError::ValueType {
                offset,
                value_type,
                key,
                ..
            } => {
                assert_eq!(
                    (offset, value_type, key.as_str()),
                    (47, 77, "general.mystery")
                );
            }
            other => panic!("{other}"),
        }
    }
}
