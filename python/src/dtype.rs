//! Element types and reduction operators from their Python spellings.
//!
//! A buffer's element type comes from its buffer-protocol format (`f`,
//! `<i8`, ...); memory given by address ([`RawBuffer`](crate::buffer::RawBuffer))
//! names its type (`"float32"`, `"bfloat16"`, ...). `bool` travels as
//! `uint8` and its reductions become the logical ones (SUM is OR, PRODUCT
//! is AND), as NCCL does for torch's bool tensors.

use hccl_adapter::{DataType, ReduceOp};

/// An element type as Python gave it: HCCL's type, and whether the
/// elements are bools (carried as bytes).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Elem {
    /// The type HCCL moves and reduces.
    pub dtype: DataType,
    /// Bools, carried as `uint8`.
    pub boolean: bool,
}

impl Elem {
    const fn of(dtype: DataType) -> Elem {
        Elem {
            dtype,
            boolean: false,
        }
    }

    /// Bytes per element.
    pub fn size(self) -> usize {
        self.dtype.size()
    }

    /// The operator HCCL runs for `op` on these elements.
    pub fn reduce_op(self, op: ReduceOp) -> ReduceOp {
        match (self.boolean, op) {
            (true, ReduceOp::Sum) => ReduceOp::Max,
            (true, ReduceOp::Prod) => ReduceOp::Min,
            _ => op,
        }
    }

    /// The name users know it by (numpy's / torch's).
    pub fn name(self) -> &'static str {
        if self.boolean {
            return "bool";
        }
        match self.dtype {
            DataType::Int8 => "int8",
            DataType::Int16 => "int16",
            DataType::Int32 => "int32",
            DataType::Int64 => "int64",
            DataType::Uint8 => "uint8",
            DataType::Uint16 => "uint16",
            DataType::Uint32 => "uint32",
            DataType::Uint64 => "uint64",
            DataType::Fp16 => "float16",
            DataType::Fp32 => "float32",
            DataType::Fp64 => "float64",
            DataType::Bf16 => "bfloat16",
            _ => "fp8",
        }
    }
}

/// The element type of a buffer-protocol `format` with `itemsize`-byte
/// items (struct-module codes, native or little-endian byte order).
pub(crate) fn from_format(format: &[u8], itemsize: usize) -> Option<Elem> {
    let code = match format {
        [c] => *c,
        [b'@' | b'=' | b'<', c] => *c,
        [b'>' | b'!', c] if itemsize == 1 => *c,
        _ => return None,
    };
    let signed = |n: usize| match n {
        1 => Some(DataType::Int8),
        2 => Some(DataType::Int16),
        4 => Some(DataType::Int32),
        8 => Some(DataType::Int64),
        _ => None,
    };
    let unsigned = |n: usize| match n {
        1 => Some(DataType::Uint8),
        2 => Some(DataType::Uint16),
        4 => Some(DataType::Uint32),
        8 => Some(DataType::Uint64),
        _ => None,
    };
    let dtype = match code {
        b'b' | b'h' | b'i' | b'l' | b'q' | b'n' => signed(itemsize)?,
        b'B' | b'H' | b'I' | b'L' | b'Q' | b'N' | b'c' => unsigned(itemsize)?,
        b'e' if itemsize == 2 => DataType::Fp16,
        b'f' if itemsize == 4 => DataType::Fp32,
        b'd' if itemsize == 8 => DataType::Fp64,
        b'?' if itemsize == 1 => {
            return Some(Elem {
                dtype: DataType::Uint8,
                boolean: true,
            })
        }
        _ => return None,
    };
    (dtype.size() == itemsize).then_some(Elem::of(dtype))
}

/// The element type called `name` (numpy's and torch's names, with or
/// without a `torch.` prefix).
pub(crate) fn from_name(name: &str) -> Option<Elem> {
    let name = name.strip_prefix("torch.").unwrap_or(name);
    Some(Elem::of(match name {
        "int8" => DataType::Int8,
        "int16" | "short" => DataType::Int16,
        "int32" | "int" => DataType::Int32,
        "int64" | "long" => DataType::Int64,
        "uint8" => DataType::Uint8,
        "uint16" => DataType::Uint16,
        "uint32" => DataType::Uint32,
        "uint64" => DataType::Uint64,
        "float16" | "half" => DataType::Fp16,
        "float32" | "float" => DataType::Fp32,
        "float64" | "double" => DataType::Fp64,
        "bfloat16" => DataType::Bf16,
        "bool" => {
            return Some(Elem {
                dtype: DataType::Uint8,
                boolean: true,
            })
        }
        _ => return None,
    }))
}

/// A reduction operator from its name (`"sum"`, `"prod"`/`"product"`,
/// `"max"`, `"min"`, any case).
pub(crate) fn reduce_op(name: &str) -> Option<ReduceOp> {
    Some(match name.to_ascii_lowercase().as_str() {
        "sum" => ReduceOp::Sum,
        "prod" | "product" => ReduceOp::Prod,
        "max" => ReduceOp::Max,
        "min" => ReduceOp::Min,
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats() {
        assert_eq!(from_format(b"f", 4).unwrap().dtype, DataType::Fp32);
        assert_eq!(from_format(b"<d", 8).unwrap().dtype, DataType::Fp64);
        assert_eq!(from_format(b"l", 8).unwrap().dtype, DataType::Int64);
        assert_eq!(from_format(b"B", 1).unwrap().dtype, DataType::Uint8);
        assert!(from_format(b"?", 1).unwrap().boolean);
        assert_eq!(from_format(b">f", 4), None);
        assert_eq!(from_format(b"Zf", 8), None);
        assert_eq!(from_name("torch.bfloat16").unwrap().dtype, DataType::Bf16);
        assert_eq!(reduce_op("PRODUCT"), Some(ReduceOp::Prod));
    }
}
