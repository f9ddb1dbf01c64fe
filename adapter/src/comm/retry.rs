//! Op retry (HCCL's `HCCL_OP_RETRY_ENABLE`): a collective whose link
//! failed while every process lived on runs again, whole, on rebuilt
//! links, and the caller sees it complete.
//!
//! With retry on (framework `op_retry.rs`), each collective runs to its
//! end inside its call: the call enqueues it, drives its stream, and on
//! a link failure (a TCP link dropped or reset, or a revocation by a peer
//! retrying) it
//!
//! 1. revokes the communicator with a `[OpRetry]` reason, so every rank's
//!    op ends — also those waiting on healthy links for a rank that
//!    failed — and each joins the retry;
//! 2. waits `HoldTime` (later attempts: `IntervalTime`);
//! 3. agrees with every rank over the control plane that all stopped in
//!    the same op and none refuses (`Communicator::agree_retry`) — the
//!    control connections ride out a short outage, so the votes arrive
//!    once the network is back;
//! 4. rebuilds the communicator (`HcclComm::recover`: fresh links and
//!    buffers for the same ranks), and runs the op again from its
//!    untouched input, up to `MaxCnt` times.
//!
//! A rank may complete an op whose link then fails for a peer (its last
//! bytes were in flight): it stops in the next op while the others are
//! still in that one. So each rank keeps a copy of its last completed
//! op's input (a copy per op with retry on), and such a rank first runs
//! that op again from the copy — into a scratch buffer, its own result
//! stands — so the others get their part; then all go on (`RetryPlan::CatchUp`).
//!
//! HCCL's conditions hold: an op in place (its input is overwritten as it
//! runs) is not run again, nor one captured in a graph (those never take
//! this path), and nor an op when the ranks stopped more than one op
//! apart; each ends with
//! `HCCL_E_OPRETRY_FAIL` saying why, on every rank, and the communicator
//! stays revoked until `recover`. Collectives are numbered per handle,
//! so the ranks can tell whether they stopped in the same one. Point to
//! point ops, batches and ops in a group run as without retry.

use super::{Call, HcclComm};
use hccl_algorithm::OpType;
use hccl_algorithm::VCounts;
use hccl_framework::{Communicator, LinkLevel, OpRetry, RetryPlan, RetryVote, RETRY_MARK};
use hccl_platform::{DataType, DeviceMem, HcclError, HcclResult, ReduceOp, Result, Stream};
use std::borrow::Cow;
use std::time::Instant;

/// The last collective a handle completed under op retry, with a copy of
/// its input, so that it can run again for ranks still stopped in it.
#[derive(Debug)]
pub(super) struct Kept {
    seq: u64,
    api: &'static str,
    op_type: OpType,
    /// The input's copy (for a broadcast, its one buffer).
    send: DeviceMem,
    /// Where the run again writes (its result is dropped).
    recv: DeviceMem,
    send_elems: u64,
    recv_elems: u64,
    count: u64,
    dtype: DataType,
    op: ReduceOp,
    root: u32,
    send_v: Option<VCounts>,
    recv_v: Option<VCounts>,
    participate: bool,
}

impl Kept {
    fn call(&self) -> Call<'_> {
        let mut c = Call::new(
            self.api,
            self.op_type,
            &self.send,
            self.send_elems,
            &self.recv,
            self.recv_elems,
            self.count,
            self.dtype,
        )
        .reduce(self.op);
        c.root = self.root;
        c.send_v = self.send_v.clone();
        c.recv_v = self.recv_v.clone();
        c.participate = self.participate;
        c.in_place = self.op_type == OpType::Broadcast;
        c
    }
}

/// `len` bytes of `old` if it has room, else a fresh allocation.
fn room(old: Option<DeviceMem>, len: usize) -> Result<DeviceMem> {
    match old {
        Some(m) if m.len() >= len => m.range(0, len),
        _ => DeviceMem::alloc(len.max(1))?.range(0, len),
    }
}

/// How long a failed op waits for the control plane to report a dead
/// process before it takes the failure for a link's.
const GONE_GRACE: std::time::Duration = std::time::Duration::from_millis(50);

impl HcclComm {
    /// Keeps `call`'s input (op `seq`, completed on `s`) for a run again.
    fn keep(&self, seq: u64, call: &Call<'_>, s: &Stream) -> Result<()> {
        let size = call.dtype.size() as u64;
        let send_bytes = (call.send_elems * size) as usize;
        let recv_bytes = (call.recv_elems * size) as usize;
        let mut slot = self.retry_kept.lock().unwrap_or_else(|p| p.into_inner());
        let old = slot.take();
        if call.send_elems > 0
            && call.recv_elems > 0
            && call.op_type != OpType::Broadcast
            && call.send.overlaps(call.recv)
        {
            // in place: the input is gone, nothing to keep
            return Ok(());
        }
        let (old_send, old_recv) = match old {
            Some(k) => (Some(k.send), Some(k.recv)),
            None => (None, None),
        };
        let send = room(old_send, send_bytes)?;
        if send_bytes > 0 {
            s.memcpy_async(&send, &call.send.range(0, send_bytes)?)?;
            s.synchronize()?;
        }
        let recv = if call.op_type == OpType::Broadcast {
            send.clone()
        } else {
            room(old_recv, recv_bytes)?
        };
        *slot = Some(Kept {
            seq,
            api: call.api,
            op_type: call.op_type,
            send,
            recv,
            send_elems: call.send_elems,
            recv_elems: call.recv_elems,
            count: call.count,
            dtype: call.dtype,
            op: call.op,
            root: call.root,
            send_v: call.send_v.clone(),
            recv_v: call.recv_v.clone(),
            participate: call.participate,
        });
        Ok(())
    }

    /// The op whose input this handle kept, if any.
    fn kept_seq(&self) -> Option<u64> {
        self.retry_kept
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .as_ref()
            .map(|k| k.seq)
    }

    /// Runs the kept op `seq` again on the current generation (for the
    /// ranks still stopped in it).
    fn run_kept_again(&self, seq: u64) -> Result<()> {
        let slot = self.retry_kept.lock().unwrap_or_else(|p| p.into_inner());
        let k = slot
            .as_ref()
            .filter(|k| k.seq == seq)
            .ok_or_else(|| HcclError::internal(format!("op {seq}'s input was not kept")))?;
        let g = self.g();
        let s = g.stand_in();
        self.submit_once(k.call(), s).and_then(|()| s.synchronize())
    }

    /// The retry settings `call` on `stream` runs under, if it runs under
    /// op retry (see the module docs).
    pub(super) fn retry_for(&self, call: &Call<'_>, stream: &Stream) -> Option<OpRetry> {
        // every generation has the root's configuration and control
        // plane kind: asked of the root, no generation lookup per call
        let r = *self.root.comm.op_retry()?;
        let eligible = !matches!(call.op_type, OpType::Send | OpType::Receive)
            && !super::group::active()
            && !stream.is_capturing();
        eligible.then_some(r)
    }

    /// Runs `call` to its end under op retry `policy`.
    pub(super) fn submit_retrying(
        &self,
        call: Call<'_>,
        stream: &Stream,
        policy: OpRetry,
    ) -> Result<()> {
        let seq = self
            .retry_seq
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed)
            + 1;
        let started = Instant::now();
        let mut attempt = 0u32;
        loop {
            let g = self.g();
            if let Some(e) = g.retry_spent.get() {
                // this communicator's one agreement failed: it stays
                // revoked until recover
                return Err(e.clone());
            }
            // a stream of an earlier generation's device (the caller's,
            // after a retry rebuilt the communicator): the generation's
            // own stream stands in, as every op here ends in its call
            let own = stream.device().uid() == g.comm.device().uid();
            let s: Cow<'_, Stream> = if own {
                Cow::Borrowed(stream)
            } else {
                Cow::Owned(g.stand_in().clone())
            };
            // earlier work on the stream first: its error is not this op's
            s.synchronize()?;
            let e = match self
                .submit_once(call.clone(), &s)
                .and_then(|()| s.synchronize())
            {
                Ok(()) => {
                    // its input, for the ranks that may still need this op
                    // run again (when a link fails at the very end)
                    if policy.keep_input {
                        if let Err(ke) = self.keep(seq, &call, &s) {
                            // the op succeeded: without a copy, a failure
                            // in its last bytes is just not retried
                            tracing::warn!(rank = self.rank(), seq, error = %ke,
                                "{RETRY_MARK} the op's input could not be kept");
                            *self.retry_kept.lock().unwrap_or_else(|p| p.into_inner()) = None;
                        }
                    }
                    if attempt > 0 {
                        tracing::warn!(
                            rank = self.rank(),
                            op = call.api,
                            seq,
                            attempt,
                            ms = started.elapsed().as_millis() as u64,
                            "{RETRY_MARK} op completed after a retry"
                        );
                    }
                    return Ok(());
                }
                Err(e) => e,
            };
            let Some(peer) = Communicator::retry_cause(&e) else {
                return Err(e);
            };
            // a process gone (killed, crashed) is no link failure: nothing
            // to wait for or agree on, the error stands as without retry
            // (a reset link looks alike until the control plane, whose
            // connection a dead process's kernel closes too, says)
            if g.comm.a_rank_is_gone(GONE_GRACE) {
                return Err(e);
            }
            attempt += 1;
            // a peer's failure relayed over a healthy link ("peer rank 0
            // failed: <its link error>") says nothing of this link's level
            let peer = peer.filter(|&p| !hccl_platform::is_relayed_by(e.message(), p));
            let refusal = self.refusal(&call, &g.comm, peer, &policy, attempt);
            tracing::warn!(
                rank = self.rank(),
                op = call.api,
                seq,
                attempt,
                error = %e,
                refusal = refusal.as_deref().unwrap_or("none"),
                "{RETRY_MARK} op failed on a link"
            );
            // every rank's op ends and each joins the agreement; the first
            // revocation wins, later ones change nothing
            g.comm.revoke(&format!(
                "{RETRY_MARK} op {seq} {} failed on rank {}: {}",
                call.api,
                self.rank(),
                e.message()
            ));
            std::thread::sleep(if attempt == 1 {
                policy.hold_time
            } else {
                policy.interval_time
            });
            let vote = RetryVote {
                seq,
                op: call.api.to_owned(),
                attempt,
                refusal,
                kept: self.kept_seq(),
            };
            let plan = g.comm.agree_retry(&vote);
            if let Err(why) = plan {
                let out = if why.code() == HcclResult::EOpretryFail {
                    HcclError::opretry_fail(format!("{}; the op's first error: {e}", why.message()))
                        .rank(self.rank())
                } else {
                    // a rank lost meanwhile: the op cannot run again
                    // without it (its error names it)
                    why
                };
                let _ = g.retry_spent.set(out.clone());
                tracing::error!(rank = self.rank(), op = call.api, seq, error = %out,
                    "{RETRY_MARK} the op is not retried");
                return Err(out);
            }
            tracing::warn!(
                rank = self.rank(),
                op = call.api,
                seq,
                attempt,
                "{RETRY_MARK} every rank stopped in this op: rebuilding the links and running it again"
            );
            let again = self.recover().and_then(|()| match plan {
                Ok(RetryPlan::CatchUp { behind }) if behind < seq => {
                    tracing::warn!(rank = self.rank(), seq, behind,
                        "{RETRY_MARK} this rank had completed op {behind}: running it again from its kept input for the ranks stopped in it");
                    self.run_kept_again(behind)
                }
                _ => Ok(()),
            });
            if let Err(re) = again {
                let out = HcclError::opretry_fail(format!(
                    "{RETRY_MARK} op {seq} {} was not run again: rebuilding the communicator failed: {re}",
                    call.api
                ))
                .rank(self.rank());
                let _ = g.retry_spent.set(out.clone());
                return Err(out);
            }
        }
    }

    /// Why this rank cannot run `call` again after a failure on its own
    /// link to `peer` (`None`: a failure relayed by a peer, or a
    /// revocation), or `None` if it can.
    fn refusal(
        &self,
        call: &Call<'_>,
        comm: &Communicator,
        peer: Option<u32>,
        policy: &OpRetry,
        attempt: u32,
    ) -> Option<String> {
        if attempt > policy.max_cnt {
            return Some(format!(
                "it was run again {} times already (HCCL_OP_RETRY_PARAMS MaxCnt:{})",
                policy.max_cnt, policy.max_cnt
            ));
        }
        if let Some(p) = peer {
            let level = comm.link_level(p);
            if !policy.covers(level) {
                let (l, what) = match level {
                    LinkLevel::L0 => ("L0", "within a host"),
                    LinkLevel::L1 => ("L1", "between hosts"),
                };
                return Some(format!(
                    "its link to rank {p} failed, and op retry is off for links {what} \
                     (HCCL_OP_RETRY_ENABLE {l}:0)"
                ));
            }
        }
        let overlap = call.send_elems > 0
            && call.recv_elems > 0
            && call.op_type != OpType::Broadcast
            && call.send.overlaps(call.recv);
        if overlap {
            return Some(
                "the op runs in place: its input was overwritten as it ran \
                 (HCCL runs again only ops whose input is untouched)"
                    .to_owned(),
            );
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use hccl_platform::{DataType, DeviceMem};

    #[test]
    fn in_place_ops_and_levels_off_are_refused_with_the_reason() {
        let comms = HcclComm::init_all(2).unwrap();
        let c = &comms[0];
        let comm = c.communicator();
        let buf = DeviceMem::alloc(64).unwrap();
        let other = DeviceMem::alloc(64).unwrap();
        let call = |send, recv| {
            Call::new(
                "HcclAllReduce",
                OpType::AllReduce,
                send,
                16,
                recv,
                16,
                16,
                DataType::Fp32,
            )
        };
        let mut on = OpRetry::default();
        on.set_enable("L0:1,L1:1", "t").unwrap();
        assert_eq!(c.refusal(&call(&buf, &other), &comm, Some(1), &on, 1), None);
        let why = c
            .refusal(&call(&buf, &buf), &comm, Some(1), &on, 1)
            .unwrap();
        assert!(why.contains("in place"), "{why}");
        // a broadcast's one buffer is input on the root, output elsewhere
        let bc = Call::new(
            "HcclBroadcast",
            OpType::Broadcast,
            &buf,
            16,
            &buf,
            16,
            16,
            DataType::Fp32,
        );
        assert_eq!(c.refusal(&bc, &comm, Some(1), &on, 1), None);
        let why = c
            .refusal(&call(&buf, &other), &comm, Some(1), &on, 2)
            .unwrap();
        assert!(why.contains("MaxCnt:1"), "{why}");
        let mut l1 = OpRetry::default();
        l1.set_enable("L1:1", "t").unwrap();
        // threads of one process share a host: their links are L0
        let why = c
            .refusal(&call(&buf, &other), &comm, Some(1), &l1, 1)
            .unwrap();
        assert!(why.contains("HCCL_OP_RETRY_ENABLE L0:0"), "{why}");
    }
}
