//! The queue pair's way from RESET to RTS, as pure data: which state
//! comes next, which attributes each step sets and which mask bits say
//! so. `verbs.rs` turns a [`Step`] into `ibv_modify_qp`; the rules live
//! here so they are tested without a device.

/// A reliable-connected queue pair's states, in the order set-up visits
/// them.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum QpState {
    Reset,
    Init,
    /// Ready to receive.
    Rtr,
    /// Ready to send.
    Rts,
}

/// `ibv_qp_attr_mask` bits (verbs.h), kept here so the plan is plain data.
pub(crate) mod mask {
    pub const STATE: u32 = 1;
    pub const ACCESS_FLAGS: u32 = 1 << 3;
    pub const PKEY_INDEX: u32 = 1 << 4;
    pub const PORT: u32 = 1 << 5;
    pub const AV: u32 = 1 << 7;
    pub const PATH_MTU: u32 = 1 << 8;
    pub const TIMEOUT: u32 = 1 << 9;
    pub const RETRY_CNT: u32 = 1 << 10;
    pub const RNR_RETRY: u32 = 1 << 11;
    pub const RQ_PSN: u32 = 1 << 12;
    pub const MAX_QP_RD_ATOMIC: u32 = 1 << 13;
    pub const MIN_RNR_TIMER: u32 = 1 << 15;
    pub const SQ_PSN: u32 = 1 << 16;
    pub const MAX_DEST_RD_ATOMIC: u32 = 1 << 17;
    pub const DEST_QPN: u32 = 1 << 20;
}

/// `IBV_LINK_LAYER_ETHERNET`: RoCE, where every packet needs a GRH.
pub(crate) const LINK_LAYER_ETHERNET: u8 = 2;

/// What the plan needs to know of both ends.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct PathSpec {
    pub port: u8,
    pub gid_index: u8,
    pub local_link_layer: u8,
    pub local_mtu: u8,
    pub local_psn: u32,
    pub remote_qpn: u32,
    pub remote_psn: u32,
    pub remote_lid: u16,
    pub remote_gid: [u8; 16],
    pub remote_mtu: u8,
    /// Local ACK timeout exponent (4.096 µs × 2^timeout per try).
    pub timeout: u8,
    /// Tries before a send fails with a retry error.
    pub retry_cnt: u8,
}

/// One `ibv_modify_qp` call.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Step {
    pub to: QpState,
    pub mask: u32,
    pub port: u8,
    pub path_mtu: u8,
    pub dest_qpn: u32,
    pub rq_psn: u32,
    pub sq_psn: u32,
    pub dlid: u16,
    /// Address with a global route header (RoCE, or a GID given on IB).
    pub global: bool,
    pub dgid: [u8; 16],
    pub sgid_index: u8,
    pub timeout: u8,
    pub retry_cnt: u8,
    /// RNR retries: 7 = forever (credits mean a receive is always there;
    /// this is only a safety net).
    pub rnr_retry: u8,
    pub min_rnr_timer: u8,
    pub max_rd_atomic: u8,
}

/// The path MTU both ends support.
pub(crate) fn path_mtu(a: u8, b: u8) -> u8 {
    a.min(b)
}

/// The step that takes a queue pair from `from` one state on, or `None`
/// at RTS.
pub(crate) fn next_step(from: QpState, s: &PathSpec) -> Option<Step> {
    let base = Step {
        to: QpState::Init,
        mask: mask::STATE,
        port: s.port,
        path_mtu: 0,
        dest_qpn: 0,
        rq_psn: 0,
        sq_psn: 0,
        dlid: 0,
        global: false,
        dgid: [0; 16],
        sgid_index: 0,
        timeout: 0,
        retry_cnt: 0,
        rnr_retry: 0,
        min_rnr_timer: 0,
        max_rd_atomic: 0,
    };
    match from {
        QpState::Reset => Some(Step {
            to: QpState::Init,
            mask: mask::STATE | mask::PKEY_INDEX | mask::PORT | mask::ACCESS_FLAGS,
            ..base
        }),
        QpState::Init => {
            let global = s.local_link_layer == LINK_LAYER_ETHERNET || s.remote_gid != [0; 16];
            Some(Step {
                to: QpState::Rtr,
                mask: mask::STATE
                    | mask::AV
                    | mask::PATH_MTU
                    | mask::DEST_QPN
                    | mask::RQ_PSN
                    | mask::MAX_DEST_RD_ATOMIC
                    | mask::MIN_RNR_TIMER,
                path_mtu: path_mtu(s.local_mtu, s.remote_mtu),
                dest_qpn: s.remote_qpn,
                rq_psn: s.remote_psn,
                dlid: s.remote_lid,
                global,
                dgid: s.remote_gid,
                sgid_index: s.gid_index,
                min_rnr_timer: 12,
                max_rd_atomic: 1,
                ..base
            })
        }
        QpState::Rtr => Some(Step {
            to: QpState::Rts,
            mask: mask::STATE
                | mask::TIMEOUT
                | mask::RETRY_CNT
                | mask::RNR_RETRY
                | mask::SQ_PSN
                | mask::MAX_QP_RD_ATOMIC,
            sq_psn: s.local_psn,
            timeout: s.timeout,
            retry_cnt: s.retry_cnt,
            rnr_retry: 7,
            max_rd_atomic: 1,
            ..base
        }),
        QpState::Rts => None,
    }
}

/// Every step from RESET to RTS.
pub(crate) fn plan(s: &PathSpec) -> Vec<Step> {
    let mut steps = Vec::new();
    let mut at = QpState::Reset;
    while let Some(step) = next_step(at, s) {
        at = step.to;
        steps.push(step);
    }
    steps
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    fn spec(link_layer: u8) -> PathSpec {
        PathSpec {
            port: 1,
            gid_index: 1,
            local_link_layer: link_layer,
            local_mtu: 5,
            local_psn: 0x42,
            remote_qpn: 17,
            remote_psn: 0x99,
            remote_lid: 3,
            remote_gid: if link_layer == LINK_LAYER_ETHERNET {
                [1; 16]
            } else {
                [0; 16]
            },
            remote_mtu: 3,
            timeout: 14,
            retry_cnt: 7,
        }
    }

    #[test]
    fn reset_init_rtr_rts_in_order() {
        let steps = plan(&spec(LINK_LAYER_ETHERNET));
        let states: Vec<QpState> = steps.iter().map(|s| s.to).collect();
        assert_eq!(states, [QpState::Init, QpState::Rtr, QpState::Rts]);
        for s in &steps {
            assert_ne!(s.mask & mask::STATE, 0);
        }
        let rtr = steps[1];
        assert_eq!(rtr.path_mtu, 3, "the smaller MTU of the two ends");
        assert_eq!((rtr.dest_qpn, rtr.rq_psn), (17, 0x99));
        assert!(rtr.global, "RoCE needs a global route header");
        assert_eq!(rtr.sgid_index, 1);
        for bit in [mask::AV, mask::PATH_MTU, mask::DEST_QPN, mask::RQ_PSN] {
            assert_ne!(rtr.mask & bit, 0);
        }
        let rts = steps[2];
        assert_eq!(rts.sq_psn, 0x42);
        assert_eq!((rts.timeout, rts.retry_cnt, rts.rnr_retry), (14, 7, 7));
        assert_eq!(rts.mask & mask::AV, 0, "RTS does not touch the path");
        assert_eq!(next_step(QpState::Rts, &spec(1)), None);
    }

    #[test]
    fn infiniband_without_gid_routes_by_lid() {
        let rtr = plan(&spec(1))[1];
        assert!(!rtr.global);
        assert_eq!(rtr.dlid, 3);
    }
}
