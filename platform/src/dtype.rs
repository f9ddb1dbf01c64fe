//! Element types and reduction operators, with HCCL's numeric codes.

use crate::error::{HcclError, Result};
use half::{bf16, f16};

/// An HCCL data type. The discriminants are HCCL's `HcclDataType` codes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[repr(u32)]
pub enum DataType {
    /// `HCCL_DATA_TYPE_INT8`
    Int8 = 0,
    /// `HCCL_DATA_TYPE_INT16`
    Int16 = 1,
    /// `HCCL_DATA_TYPE_INT32`
    Int32 = 2,
    /// `HCCL_DATA_TYPE_FP16` (IEEE binary16)
    Fp16 = 3,
    /// `HCCL_DATA_TYPE_FP32`
    Fp32 = 4,
    /// `HCCL_DATA_TYPE_INT64`
    Int64 = 5,
    /// `HCCL_DATA_TYPE_UINT64`
    Uint64 = 6,
    /// `HCCL_DATA_TYPE_UINT8`
    Uint8 = 7,
    /// `HCCL_DATA_TYPE_UINT16`
    Uint16 = 8,
    /// `HCCL_DATA_TYPE_UINT32`
    Uint32 = 9,
    /// `HCCL_DATA_TYPE_FP64`
    Fp64 = 10,
    /// `HCCL_DATA_TYPE_BFP16` (bfloat16)
    Bf16 = 11,
    /// `HCCL_DATA_TYPE_HIF8` (HiFloat8, 1 byte). Moved as bytes only: not
    /// reducible (see [`is_reducible`](Self::is_reducible)).
    Hif8 = 14,
    /// `HCCL_DATA_TYPE_FP8E4M3` (OCP FP8 E4M3, 1 byte). Not reducible.
    Fp8E4M3 = 15,
    /// `HCCL_DATA_TYPE_FP8E5M2` (OCP FP8 E5M2, 1 byte). Not reducible.
    Fp8E5M2 = 16,
    /// `HCCL_DATA_TYPE_FP8E8M0` (OCP E8M0 scale, 1 byte). Not reducible.
    Fp8E8M0 = 17,
}

impl DataType {
    /// Every supported data type, in code order (HCCL's codes skip 12,
    /// INT128, and 13).
    pub const ALL: [DataType; 16] = [
        DataType::Int8,
        DataType::Int16,
        DataType::Int32,
        DataType::Fp16,
        DataType::Fp32,
        DataType::Int64,
        DataType::Uint64,
        DataType::Uint8,
        DataType::Uint16,
        DataType::Uint32,
        DataType::Fp64,
        DataType::Bf16,
        DataType::Hif8,
        DataType::Fp8E4M3,
        DataType::Fp8E5M2,
        DataType::Fp8E8M0,
    ];

    /// The 1-byte floating-point formats HCCL moves but never reduces
    /// (HIF8, FP8E4M3, FP8E5M2, FP8E8M0), in code order.
    pub const FP8: [DataType; 4] = [
        DataType::Hif8,
        DataType::Fp8E4M3,
        DataType::Fp8E5M2,
        DataType::Fp8E8M0,
    ];

    /// Size of one element in bytes.
    pub const fn size(self) -> usize {
        match self {
            DataType::Int8
            | DataType::Uint8
            | DataType::Hif8
            | DataType::Fp8E4M3
            | DataType::Fp8E5M2
            | DataType::Fp8E8M0 => 1,
            DataType::Int16 | DataType::Uint16 | DataType::Fp16 | DataType::Bf16 => 2,
            DataType::Int32 | DataType::Uint32 | DataType::Fp32 => 4,
            DataType::Int64 | DataType::Uint64 | DataType::Fp64 => 8,
        }
    }

    /// Bytes of `count` elements, or a parameter error when that overflows
    /// the address space (the check every entry point makes first).
    pub fn bytes_of(self, count: u64) -> Result<usize> {
        count
            .checked_mul(self.size() as u64)
            .and_then(|b| usize::try_from(b).ok())
            .filter(|b| *b <= isize::MAX as usize)
            .ok_or_else(|| {
                HcclError::para(format!(
                    "count {count} of {self} ({} bytes each) overflows the address space",
                    self.size()
                ))
            })
    }

    /// HCCL's numeric code for this type.
    pub const fn code(self) -> u32 {
        self as u32
    }

    /// The type whose [`code`](Self::code) is `code`, as a compact task
    /// stores it in a byte (always a code this crate wrote).
    pub(crate) fn of_byte(code: u8) -> DataType {
        match DataType::of_code(code as u32) {
            Some(d) => d,
            None => panic!("a task stored data type code {code}, which no DataType has"),
        }
    }

    /// The type with HCCL code `code`, if this crate supports it.
    pub const fn of_code(code: u32) -> Option<DataType> {
        Some(match code {
            0 => DataType::Int8,
            1 => DataType::Int16,
            2 => DataType::Int32,
            3 => DataType::Fp16,
            4 => DataType::Fp32,
            5 => DataType::Int64,
            6 => DataType::Uint64,
            7 => DataType::Uint8,
            8 => DataType::Uint16,
            9 => DataType::Uint32,
            10 => DataType::Fp64,
            11 => DataType::Bf16,
            14 => DataType::Hif8,
            15 => DataType::Fp8E4M3,
            16 => DataType::Fp8E5M2,
            17 => DataType::Fp8E8M0,
            _ => return None,
        })
    }

    /// The type with HCCL code `code`; unknown codes (including INT128 = 12,
    /// which HCCL declares but refuses for every op, and 13, which HCCL
    /// leaves unassigned) are a parameter error.
    pub fn from_code(code: u32) -> Result<DataType> {
        DataType::of_code(code).ok_or_else(|| {
            HcclError::para(format!(
                "unknown data type code {code} (valid: 0..=11 and 14..=17, see HcclDataType)"
            ))
        })
    }

    /// The short name hccl_test uses (`fp32`, `int8`, ...).
    pub const fn name(self) -> &'static str {
        match self {
            DataType::Int8 => "int8",
            DataType::Int16 => "int16",
            DataType::Int32 => "int32",
            DataType::Fp16 => "fp16",
            DataType::Fp32 => "fp32",
            DataType::Int64 => "int64",
            DataType::Uint64 => "uint64",
            DataType::Uint8 => "uint8",
            DataType::Uint16 => "uint16",
            DataType::Uint32 => "uint32",
            DataType::Fp64 => "fp64",
            DataType::Bf16 => "bf16",
            DataType::Hif8 => "hif8",
            DataType::Fp8E4M3 => "fp8e4m3",
            DataType::Fp8E5M2 => "fp8e5m2",
            DataType::Fp8E8M0 => "fp8e8m0",
        }
    }

    /// Parses hccl_test's names (`fp32`, `bfp16`/`bf16`, `int8`, ...).
    pub fn from_name(name: &str) -> Result<DataType> {
        let lower = name.to_ascii_lowercase();
        let canonical = match lower.as_str() {
            "bfp16" | "bfloat16" => "bf16",
            "float16" | "half" => "fp16",
            "float32" | "float" => "fp32",
            "float64" | "double" => "fp64",
            "hifloat8" => "hif8",
            "fp8_e4m3" | "float8_e4m3" | "float8_e4m3fn" => "fp8e4m3",
            "fp8_e5m2" | "float8_e5m2" => "fp8e5m2",
            "fp8_e8m0" | "float8_e8m0" | "float8_e8m0fnu" => "fp8e8m0",
            other => other,
        };
        DataType::ALL
            .iter()
            .copied()
            .find(|d| d.name() == canonical)
            .ok_or_else(|| HcclError::para(format!("unknown data type name '{name}'")))
    }

    /// Whether this is a floating-point type (the 1-byte FP8 formats
    /// included).
    pub const fn is_float(self) -> bool {
        matches!(
            self,
            DataType::Fp16
                | DataType::Fp32
                | DataType::Fp64
                | DataType::Bf16
                | DataType::Hif8
                | DataType::Fp8E4M3
                | DataType::Fp8E5M2
                | DataType::Fp8E8M0
        )
    }

    /// Whether reducing ops (AllReduce, Reduce, ReduceScatter(V)) accept
    /// this type. HCCL's 1-byte FP8 formats are moved as bytes only
    /// (AllGather, Broadcast, AllToAll, Scatter, Gather, Send/Recv, ...);
    /// HCCL's own check refuses them for reductions with
    /// `HCCL_E_NOT_SUPPORT`, and so does this crate.
    pub const fn is_reducible(self) -> bool {
        !matches!(
            self,
            DataType::Hif8 | DataType::Fp8E4M3 | DataType::Fp8E5M2 | DataType::Fp8E8M0
        )
    }

    /// HCCL's enumerator name (`HCCL_DATA_TYPE_FP8E4M3`, ...), for errors.
    pub const fn hccl_name(self) -> &'static str {
        match self {
            DataType::Int8 => "HCCL_DATA_TYPE_INT8",
            DataType::Int16 => "HCCL_DATA_TYPE_INT16",
            DataType::Int32 => "HCCL_DATA_TYPE_INT32",
            DataType::Fp16 => "HCCL_DATA_TYPE_FP16",
            DataType::Fp32 => "HCCL_DATA_TYPE_FP32",
            DataType::Int64 => "HCCL_DATA_TYPE_INT64",
            DataType::Uint64 => "HCCL_DATA_TYPE_UINT64",
            DataType::Uint8 => "HCCL_DATA_TYPE_UINT8",
            DataType::Uint16 => "HCCL_DATA_TYPE_UINT16",
            DataType::Uint32 => "HCCL_DATA_TYPE_UINT32",
            DataType::Fp64 => "HCCL_DATA_TYPE_FP64",
            DataType::Bf16 => "HCCL_DATA_TYPE_BFP16",
            DataType::Hif8 => "HCCL_DATA_TYPE_HIF8",
            DataType::Fp8E4M3 => "HCCL_DATA_TYPE_FP8E4M3",
            DataType::Fp8E5M2 => "HCCL_DATA_TYPE_FP8E5M2",
            DataType::Fp8E8M0 => "HCCL_DATA_TYPE_FP8E8M0",
        }
    }

    /// The types reducing ops accept, in code order.
    pub fn reducible() -> impl Iterator<Item = DataType> {
        DataType::ALL.into_iter().filter(|d| d.is_reducible())
    }
}

impl std::fmt::Display for DataType {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// A reduction operator. The discriminants are HCCL's `HcclReduceOp` codes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u32)]
pub enum ReduceOp {
    /// `HCCL_REDUCE_SUM`
    Sum = 0,
    /// `HCCL_REDUCE_PROD`
    Prod = 1,
    /// `HCCL_REDUCE_MAX`
    Max = 2,
    /// `HCCL_REDUCE_MIN`
    Min = 3,
}

impl ReduceOp {
    /// Every operator, in code order.
    pub const ALL: [ReduceOp; 4] = [ReduceOp::Sum, ReduceOp::Prod, ReduceOp::Max, ReduceOp::Min];

    /// HCCL's numeric code.
    pub const fn code(self) -> u32 {
        self as u32
    }

    /// The operator whose [`code`](Self::code) is `code`, as a compact
    /// task stores it in a byte (always a code this crate wrote).
    pub(crate) fn of_byte(code: u8) -> ReduceOp {
        ReduceOp::ALL[code as usize]
    }

    /// The operator with HCCL code `code`, or a parameter error.
    pub fn from_code(code: u32) -> Result<ReduceOp> {
        ReduceOp::ALL
            .iter()
            .copied()
            .find(|o| o.code() == code)
            .ok_or_else(|| {
                HcclError::para(format!(
                    "unknown reduce op code {code} (valid: 0=sum, 1=prod, 2=max, 3=min)"
                ))
            })
    }

    /// hccl_test's name (`sum`, `prod`, `max`, `min`).
    pub const fn name(self) -> &'static str {
        match self {
            ReduceOp::Sum => "sum",
            ReduceOp::Prod => "prod",
            ReduceOp::Max => "max",
            ReduceOp::Min => "min",
        }
    }

    /// Parses hccl_test's names.
    pub fn from_name(name: &str) -> Result<ReduceOp> {
        ReduceOp::ALL
            .iter()
            .copied()
            .find(|o| o.name().eq_ignore_ascii_case(name))
            .ok_or_else(|| HcclError::para(format!("unknown reduce op name '{name}'")))
    }
}

impl std::fmt::Display for ReduceOp {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

mod sealed {
    pub trait Sealed {}
}

/// A Rust element type that maps onto an HCCL [`DataType`].
///
/// Sealed: the set of element types is HCCL's, not open-ended.
pub trait Element:
    Copy + Send + Sync + PartialEq + std::fmt::Debug + 'static + sealed::Sealed
{
    /// The HCCL data type of `Self`.
    const DTYPE: DataType;
}

macro_rules! element {
    ($($t:ty => $d:ident),* $(,)?) => {$(
        impl sealed::Sealed for $t {}
        impl Element for $t { const DTYPE: DataType = DataType::$d; }
    )*};
}

element!(i8 => Int8, i16 => Int16, i32 => Int32, i64 => Int64,
         u8 => Uint8, u16 => Uint16, u32 => Uint32, u64 => Uint64,
         f16 => Fp16, bf16 => Bf16, f32 => Fp32, f64 => Fp64);

macro_rules! fp8 {
    ($($(#[$doc:meta])* $t:ident),* $(,)?) => {$(
        $(#[$doc])*
        ///
        /// A 1-byte element carried as its bit pattern: HCCL moves it
        /// (AllGather, Broadcast, AllToAll, Scatter, Gather, Send/Recv, ...)
        /// and refuses it for reductions; this crate does no arithmetic on it.
        #[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
        #[repr(transparent)]
        pub struct $t(pub u8);

        impl $t {
            /// The element with bit pattern `bits`.
            pub const fn from_bits(bits: u8) -> Self {
                $t(bits)
            }

            /// The element's bit pattern.
            pub const fn to_bits(self) -> u8 {
                self.0
            }
        }

        impl sealed::Sealed for $t {}
        impl Element for $t { const DTYPE: DataType = DataType::$t; }
    )*};
}

fp8!(
    /// An `HCCL_DATA_TYPE_HIF8` element (HiFloat8).
    Hif8,
    /// An `HCCL_DATA_TYPE_FP8E4M3` element (OCP FP8, 4 exponent and 3 mantissa bits).
    Fp8E4M3,
    /// An `HCCL_DATA_TYPE_FP8E5M2` element (OCP FP8, 5 exponent and 2 mantissa bits).
    Fp8E5M2,
    /// An `HCCL_DATA_TYPE_FP8E8M0` element (OCP E8M0, an 8-bit power-of-two scale).
    Fp8E8M0,
);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_match_hccl() {
        let expected = [
            (DataType::Int8, 0),
            (DataType::Int16, 1),
            (DataType::Int32, 2),
            (DataType::Fp16, 3),
            (DataType::Fp32, 4),
            (DataType::Int64, 5),
            (DataType::Uint64, 6),
            (DataType::Uint8, 7),
            (DataType::Uint16, 8),
            (DataType::Uint32, 9),
            (DataType::Fp64, 10),
            (DataType::Bf16, 11),
            (DataType::Hif8, 14),
            (DataType::Fp8E4M3, 15),
            (DataType::Fp8E5M2, 16),
            (DataType::Fp8E8M0, 17),
        ];
        for (d, c) in expected {
            assert_eq!(d.code(), c);
            assert_eq!(DataType::from_code(c).unwrap(), d);
            assert_eq!(DataType::from_name(d.name()).unwrap(), d);
        }
        assert_eq!(ReduceOp::from_code(2).unwrap(), ReduceOp::Max);
    }

    #[test]
    fn unknown_codes_are_parameter_errors() {
        let e = DataType::from_code(12).unwrap_err();
        assert_eq!(e.code(), crate::HcclResult::EPara);
        assert!(e.to_string().contains("unknown data type code 12"), "{e}");
        let e = ReduceOp::from_code(4).unwrap_err();
        assert_eq!(e.code(), crate::HcclResult::EPara);
        assert!(e.to_string().contains("unknown reduce op code 4"), "{e}");
        assert!(DataType::from_name("fp8").is_err());
        for code in [12, 13, 18, 255] {
            let e = DataType::from_code(code).unwrap_err();
            assert_eq!(e.code(), crate::HcclResult::EPara);
            assert!(e.to_string().contains("14..=17"), "{e}");
        }
    }

    #[test]
    fn fp8_types_move_but_do_not_reduce() {
        for d in DataType::FP8 {
            assert_eq!(d.size(), 1);
            assert!(!d.is_reducible());
            assert_eq!(DataType::of_byte(d.code() as u8), d);
            assert!(d.hccl_name().ends_with(&d.name().to_ascii_uppercase()));
        }
        assert_eq!(DataType::reducible().count(), 12);
        assert_eq!(DataType::from_name("FP8E4M3").unwrap(), DataType::Fp8E4M3);
        assert_eq!(DataType::from_name("hifloat8").unwrap(), DataType::Hif8);
        for d in DataType::ALL {
            assert_eq!(DataType::of_code(d.code()), Some(d));
        }
    }

    #[test]
    fn sizes() {
        assert_eq!(DataType::Bf16.size(), 2);
        assert_eq!(DataType::Fp64.size(), 8);
        assert_eq!(<half::f16 as Element>::DTYPE, DataType::Fp16);
        assert_eq!(<Fp8E5M2 as Element>::DTYPE, DataType::Fp8E5M2);
        assert_eq!(std::mem::size_of::<Hif8>(), DataType::Hif8.size());
    }
}
