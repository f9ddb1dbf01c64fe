//! The one error type of hccl-rs, mapping 1:1 onto HCCL's `HcclResult` codes.
//!
//! Every error carries an [`ErrorContext`]: what failed and why (a message),
//! and where (rank, op tag, peer) when known. Context is added where it is
//! known, with the builder methods on [`HcclError`].

use std::fmt;

/// HCCL's result codes, with HCCL's numeric values.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u32)]
pub enum HcclResult {
    /// `HCCL_SUCCESS`
    Success = 0,
    /// `HCCL_E_PARA`
    EPara = 1,
    /// `HCCL_E_PTR`
    EPtr = 2,
    /// `HCCL_E_MEMORY`
    EMemory = 3,
    /// `HCCL_E_INTERNAL`
    EInternal = 4,
    /// `HCCL_E_NOT_SUPPORT`
    ENotSupport = 5,
    /// `HCCL_E_NOT_FOUND`
    ENotFound = 6,
    /// `HCCL_E_UNAVAIL`
    EUnavail = 7,
    /// `HCCL_E_SYSCALL`
    ESyscall = 8,
    /// `HCCL_E_TIMEOUT`
    ETimeout = 9,
    /// `HCCL_E_OPEN_FILE_FAILURE`
    EOpenFileFailure = 10,
    /// `HCCL_E_TCP_CONNECT`
    ETcpConnect = 11,
    /// `HCCL_E_ROCE_CONNECT`
    ERoceConnect = 12,
    /// `HCCL_E_TCP_TRANSFER`
    ETcpTransfer = 13,
    /// `HCCL_E_ROCE_TRANSFER`
    ERoceTransfer = 14,
    /// `HCCL_E_RUNTIME`
    ERuntime = 15,
    /// `HCCL_E_DRV`
    EDrv = 16,
    /// `HCCL_E_PROFILING`
    EProfiling = 17,
    /// `HCCL_E_CCE`
    ECce = 18,
    /// `HCCL_E_NETWORK`
    ENetwork = 19,
    /// `HCCL_E_AGAIN`
    EAgain = 20,
    /// `HCCL_E_REMOTE`
    ERemote = 21,
    /// `HCCL_E_SUSPENDING`
    ESuspending = 22,
    /// `HCCL_E_OPRETRY_FAIL` (an op retry was not possible)
    EOpretryFail = 23,
    /// `HCCL_E_OOM`
    EOom = 24,
    /// `HCCL_E_IN_STATUS` (the errors are in the request statuses)
    EInStatus = 1041,
}

impl HcclResult {
    /// HCCL's numeric value.
    pub const fn code(self) -> u32 {
        self as u32
    }

    /// The string `HcclGetErrorString` returns for this code.
    pub fn as_str(self) -> &'static str {
        self.as_cstr().to_str().expect("ASCII literals")
    }

    /// The same string, NUL-terminated (for the C ABI).
    pub const fn as_cstr(self) -> &'static std::ffi::CStr {
        match self {
            HcclResult::Success => c"no error",
            HcclResult::EPara => c"parameter error",
            HcclResult::EPtr => c"empty pointer",
            HcclResult::EMemory => c"memory error",
            HcclResult::EInternal => c"internal error",
            HcclResult::ENotSupport => c"not support feature",
            HcclResult::ENotFound => c"not found specific resource",
            HcclResult::EUnavail => c"resource unavailable",
            HcclResult::ESyscall => c"call system interface error",
            HcclResult::ETimeout => c"timeout",
            HcclResult::EOpenFileFailure => c"open file fail",
            HcclResult::ETcpConnect => c"tcp connect fail",
            HcclResult::ERoceConnect => c"roce connect fail",
            HcclResult::ETcpTransfer => c"tcp transfer fail",
            HcclResult::ERoceTransfer => c"roce transfer fail",
            HcclResult::ERuntime => c"call runtime api fail",
            HcclResult::EDrv => c"call driver api fail",
            HcclResult::EProfiling => c"call profiling api fail",
            HcclResult::ECce => c"call cce api fail",
            HcclResult::ENetwork => c"call network api fail",
            HcclResult::EAgain => c"try again",
            HcclResult::ERemote => c"error cqe",
            HcclResult::ESuspending => c"error communication suspending",
            HcclResult::EOpretryFail => c"retry constraint",
            HcclResult::EOom => c"out of memory",
            HcclResult::EInStatus => c"the error information is in the status",
        }
    }

    /// The result with HCCL's numeric value `code`, if there is one.
    pub const fn from_code(code: u32) -> Option<HcclResult> {
        Some(match code {
            0 => HcclResult::Success,
            1 => HcclResult::EPara,
            2 => HcclResult::EPtr,
            3 => HcclResult::EMemory,
            4 => HcclResult::EInternal,
            5 => HcclResult::ENotSupport,
            6 => HcclResult::ENotFound,
            7 => HcclResult::EUnavail,
            8 => HcclResult::ESyscall,
            9 => HcclResult::ETimeout,
            10 => HcclResult::EOpenFileFailure,
            11 => HcclResult::ETcpConnect,
            12 => HcclResult::ERoceConnect,
            13 => HcclResult::ETcpTransfer,
            14 => HcclResult::ERoceTransfer,
            15 => HcclResult::ERuntime,
            16 => HcclResult::EDrv,
            17 => HcclResult::EProfiling,
            18 => HcclResult::ECce,
            19 => HcclResult::ENetwork,
            20 => HcclResult::EAgain,
            21 => HcclResult::ERemote,
            22 => HcclResult::ESuspending,
            23 => HcclResult::EOpretryFail,
            24 => HcclResult::EOom,
            1041 => HcclResult::EInStatus,
            _ => return None,
        })
    }
}

/// What failed, why, and where.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ErrorContext {
    /// What failed and why, in words.
    pub message: String,
    /// The rank that observed the failure.
    pub rank: Option<u32>,
    /// The op tag being executed.
    pub tag: Option<String>,
    /// The peer rank involved (the one waited for, or sent to).
    pub peer: Option<u32>,
}

impl fmt::Display for ErrorContext {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)?;
        let mut parts: Vec<String> = Vec::new();
        if let Some(r) = self.rank {
            parts.push(format!("rank {r}"));
        }
        if let Some(t) = &self.tag {
            parts.push(format!("op tag '{t}'"));
        }
        if let Some(p) = self.peer {
            parts.push(format!("peer rank {p}"));
        }
        if !parts.is_empty() {
            write!(f, " [{}]", parts.join(", "))?;
        }
        Ok(())
    }
}

macro_rules! hccl_error {
    ($( $variant:ident => $code:ident, $ctor:ident, $text:literal; )*) => {
        /// An hccl-rs error. Each variant is one `HcclResult` code.
        #[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
        #[non_exhaustive]
        pub enum HcclError {
            $(
                #[doc = concat!("`", stringify!($code), "`: ", $text, ".")]
                #[error("{}: {}", $text, .0)]
                $variant(Box<ErrorContext>),
            )*
        }

        impl HcclError {
            /// The HCCL result code of this error.
            pub fn code(&self) -> HcclResult {
                match self { $( HcclError::$variant(_) => HcclResult::$code, )* }
            }

            /// The error's context.
            pub fn context(&self) -> &ErrorContext {
                match self { $( HcclError::$variant(c) => c, )* }
            }

            fn context_mut(&mut self) -> &mut ErrorContext {
                match self { $( HcclError::$variant(c) => c, )* }
            }

            /// An error of result code `code` (not `Success`) with `message`.
            pub fn from_code(code: HcclResult, message: impl Into<String>) -> HcclError {
                let ctx = Box::new(ErrorContext { message: message.into(), ..Default::default() });
                match code {
                    $( HcclResult::$code => HcclError::$variant(ctx), )*
                    HcclResult::Success => HcclError::Internal(Box::new(ErrorContext {
                        message: format!("success is not an error ({})", ctx.message),
                        ..Default::default()
                    })),
                }
            }

            $(
                #[doc = concat!("A `", stringify!($code), "` error (", $text, ") saying `message`.")]
                pub fn $ctor(message: impl Into<String>) -> HcclError {
                    HcclError::from_code(HcclResult::$code, message)
                }
            )*
        }
    };
}

hccl_error! {
    Para => EPara, para, "parameter error";
    Ptr => EPtr, ptr, "empty pointer";
    Memory => EMemory, memory, "memory error";
    Internal => EInternal, internal, "internal error";
    NotSupport => ENotSupport, not_support, "not support feature";
    NotFound => ENotFound, not_found, "not found specific resource";
    Unavail => EUnavail, unavail, "resource unavailable";
    Syscall => ESyscall, syscall, "call system interface error";
    Timeout => ETimeout, timeout, "timeout";
    OpenFileFailure => EOpenFileFailure, open_file, "open file fail";
    TcpConnect => ETcpConnect, tcp_connect, "tcp connect fail";
    RoceConnect => ERoceConnect, roce_connect, "roce connect fail";
    TcpTransfer => ETcpTransfer, tcp_transfer, "tcp transfer fail";
    RoceTransfer => ERoceTransfer, roce_transfer, "roce transfer fail";
    Runtime => ERuntime, runtime, "call runtime api fail";
    Drv => EDrv, drv, "call driver api fail";
    Profiling => EProfiling, profiling, "call profiling api fail";
    Cce => ECce, cce, "call cce api fail";
    Network => ENetwork, network, "call network api fail";
    Again => EAgain, again, "try again";
    Remote => ERemote, remote, "remote error";
    Suspending => ESuspending, suspending, "communication suspending";
    OpretryFail => EOpretryFail, opretry_fail, "retry constraint";
    Oom => EOom, oom, "out of memory";
    InStatus => EInStatus, in_status, "the error information is in the status";
}

impl HcclError {
    /// Sets the rank that observed the error (keeps an existing one).
    pub fn rank(mut self, rank: u32) -> Self {
        self.context_mut().rank.get_or_insert(rank);
        self
    }

    /// Sets the op tag (keeps an existing one).
    pub fn tag(mut self, tag: impl Into<String>) -> Self {
        let ctx = self.context_mut();
        if ctx.tag.is_none() {
            ctx.tag = Some(tag.into());
        }
        self
    }

    /// Sets the peer rank (keeps an existing one).
    pub fn peer(mut self, peer: u32) -> Self {
        self.context_mut().peer.get_or_insert(peer);
        self
    }

    /// Prefixes the message with what was being done, e.g. `"ring allreduce"`.
    pub fn during(mut self, what: impl fmt::Display) -> Self {
        let ctx = self.context_mut();
        ctx.message = format!("{what}: {}", ctx.message);
        self
    }

    /// The bare message, without location.
    pub fn message(&self) -> &str {
        &self.context().message
    }

    /// A system-call error from an `std::io::Error`, saying what was attempted.
    pub fn from_io(what: impl fmt::Display, err: std::io::Error) -> HcclError {
        HcclError::syscall(format!("{what}: {err}"))
    }
}

/// Result alias used across hccl-rs.
pub type Result<T, E = HcclError> = std::result::Result<T, E>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_and_strings() {
        assert_eq!(HcclError::timeout("x").code().code(), 9);
        assert_eq!(HcclError::remote("x").code().code(), 21);
        assert_eq!(HcclResult::ERemote.as_str(), "error cqe");
        assert_eq!(HcclResult::EPara.as_str(), "parameter error");
        for code in all_codes().into_iter().skip(1) {
            // every code round-trips through from_code, and HCCL's number
            // through HcclResult::from_code
            assert_eq!(HcclError::from_code(code, "m").code(), code);
            assert_eq!(HcclResult::from_code(code.code()), Some(code));
        }
        // HCCL's newer codes, with HCCL's numbers (HCCL_E_RESERVED is 1042)
        assert_eq!(HcclResult::EOpretryFail.code(), 23);
        assert_eq!(HcclResult::EOom.code(), 24);
        assert_eq!(HcclResult::EInStatus.code(), 1041);
        assert_eq!(HcclResult::from_code(25), None);
        assert_eq!(HcclResult::from_code(1042), None);
        assert_eq!(HcclError::oom("m").to_string(), "out of memory: m");
    }

    fn all_codes() -> Vec<HcclResult> {
        use HcclResult::*;
        vec![
            Success,
            EPara,
            EPtr,
            EMemory,
            EInternal,
            ENotSupport,
            ENotFound,
            EUnavail,
            ESyscall,
            ETimeout,
            EOpenFileFailure,
            ETcpConnect,
            ERoceConnect,
            ETcpTransfer,
            ERoceTransfer,
            ERuntime,
            EDrv,
            EProfiling,
            ECce,
            ENetwork,
            EAgain,
            ERemote,
            ESuspending,
            EOpretryFail,
            EOom,
            EInStatus,
        ]
    }

    #[test]
    fn context_is_rendered() {
        let e = HcclError::timeout("waited 3s for data")
            .rank(2)
            .tag("allreduce_1")
            .peer(1);
        assert_eq!(
            e.to_string(),
            "timeout: waited 3s for data [rank 2, op tag 'allreduce_1', peer rank 1]"
        );
        // the first rank set wins: it is where the error was observed
        assert_eq!(e.clone().rank(7).context().rank, Some(2));
    }
}
