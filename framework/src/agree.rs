//! Agreement on the lost ranks (ULFM's `MPI_Comm_agree` / `shrink`
//! without a list): the survivors of a failure agree on one set of lost
//! ranks without being told, so each can shrink without them
//! ([`Communicator::shrink_agreed`]).
//!
//! The control plane is the failure detector: a rank process that dies
//! closes its control connections at once (its kernel does), and a host
//! that vanishes is found by TCP keep-alive; a rank that destroyed its
//! communicator said goodbye first. On that detector the survivors run
//! flooding uniform consensus (Cachin, Guerraoui, Rodrigues, *Reliable
//! and Secure Distributed Programming*, 5.2): each proposes the ranks it
//! knows lost; in each of `size` rounds every survivor sends the union it
//! knows to every rank it does not know lost and waits for each of them
//! to answer or be found lost; after the last round all decide the union.
//! With at most `size − 1` failures some round loses nobody, and from that
//! round on every survivor holds the same union, so all decide alike —
//! even if ranks die during the agreement. A rank that dies after the
//! agreement started but whose death no survivor saw in time is not in
//! the set: the shrink that follows then fails naming it, and a second
//! agreement includes it.

use crate::Communicator;
use hccl_platform::{HcclError, Result};
use std::collections::BTreeSet;
use std::time::Duration;

impl Communicator {
    /// The ranks lost, as every surviving rank agrees (each survivor
    /// calls this; it returns the same sorted list on each): see the
    /// module docs. `timeout` bounds each round's wait for a rank not
    /// known lost (a hung rank: `HCCL_E_TIMEOUT` naming it). Only for
    /// ranks that are processes with a control plane.
    pub fn agree_lost(&self, timeout: Duration) -> Result<Vec<u32>> {
        let rank = self.rank();
        let ctx = |e: HcclError| e.rank(rank).during("agreeing on the lost ranks");
        if let Some(group) = self.in_proc_group() {
            let epoch = self.next_agreement();
            return self.agree_lost_threads(&group.clone(), epoch).map_err(ctx);
        }
        let control = self.control_for("agreement").map_err(ctx)?;
        let epoch = self.next_agreement();
        let all: Vec<u32> = (0..self.size()).collect();
        let mut known: BTreeSet<u32> = control.gone().into_iter().collect();
        for round in 0..self.size() {
            known.extend(control.gone());
            let tag = control.tag(&format!("agree/{epoch}/{round}"));
            let mine = serde_json::to_vec(&known)
                .map_err(|e| ctx(HcclError::internal(format!("encoding the lost set: {e}"))))?;
            let members: Vec<u32> = all
                .iter()
                .copied()
                .filter(|r| *r == rank || !known.contains(r))
                .collect();
            let parts = control
                .gather_alive(tag, &members, mine, timeout)
                .map_err(ctx)?;
            for (p, &m) in parts.iter().zip(&members) {
                let Some(p) = p else { continue };
                let theirs: BTreeSet<u32> = serde_json::from_slice(p).map_err(|e| {
                    ctx(HcclError::para(format!(
                        "rank {m}'s lost set is malformed: {e}"
                    )))
                })?;
                known.extend(theirs);
            }
        }
        if known.contains(&rank) {
            return Err(ctx(HcclError::remote(
                "the other ranks took this rank for lost",
            )));
        }
        let lost: Vec<u32> = known.into_iter().collect();
        tracing::info!(rank, ?lost, "agreed on the lost ranks");
        Ok(lost)
    }

    /// Shrinks without the ranks the survivors agree are lost
    /// ([`agree_lost`](Self::agree_lost), each round bounded by the
    /// configuration's connect timeout), as ULFM's shrink does: no list
    /// to give. Every survivor calls it.
    pub fn shrink_agreed(&self, config: crate::CommConfig) -> Result<Communicator> {
        let lost = self.agree_lost(config.connect_timeout)?;
        self.shrink(&lost, config)
    }
}
