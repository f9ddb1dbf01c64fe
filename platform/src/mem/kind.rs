//! Which of a rank's buffers a transfer targets (HCCL's `TransportMemType`).

/// A rank's buffer, as named by a peer that addresses it through a link.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum MemKind {
    /// The communicator's CCL input buffer (`HCCL_BUFFSIZE` bytes).
    CclInput,
    /// The communicator's CCL output buffer.
    CclOutput,
    /// Per-op scratch memory requested by the executor.
    Scratch,
    /// The user's input buffer of the current op (graph mode).
    ParamInput,
    /// The user's output buffer of the current op (graph mode).
    ParamOutput,
}

impl MemKind {
    /// Every kind, in index order.
    pub const ALL: [MemKind; 5] = [
        MemKind::CclInput,
        MemKind::CclOutput,
        MemKind::Scratch,
        MemKind::ParamInput,
        MemKind::ParamOutput,
    ];

    /// A dense index (0..5) for tables keyed by kind.
    pub const fn index(self) -> usize {
        self as usize
    }

    /// HCCL's name for the kind (`CCL_INPUT`, ...).
    pub const fn hccl_name(self) -> &'static str {
        match self {
            MemKind::CclInput => "CCL_INPUT",
            MemKind::CclOutput => "CCL_OUTPUT",
            MemKind::Scratch => "SCRATCH",
            MemKind::ParamInput => "PARAM_INPUT",
            MemKind::ParamOutput => "PARAM_OUTPUT",
        }
    }
}

impl std::fmt::Display for MemKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.hccl_name())
    }
}
