//! Every primitive as a captured case (issue 17): each case owns its
//! buffers, writes launch `k`'s inputs from the host, issues its op on a
//! stream (recorded while the stream captures) and checks launch `k`'s
//! outputs against a reference computed here. The ranks-as-threads test
//! (`tests/graph_capture.rs`) and the multi-process worker's `capture`
//! scenario run the same cases.

use hccl_adapter::{
    CaptureMode, DataType, DeviceMem, HcclComm, HcclError, ReduceOp, Result, SendRecvItem,
    SendRecvKind, Stream,
};

/// Rank `q`'s element `i` at launch `k`: small (sums of a few ranks fit
/// an i32), different per rank, element and launch.
pub fn value(q: u32, i: usize, k: u32) -> i32 {
    ((q as i64 * 7919 + i as i64 * 31 + k as i64 * 101) % 2001 - 1000) as i32
}

type Write = Box<dyn Fn(u32) -> Result<()> + Send + Sync>;
type Issue = Box<dyn Fn(&HcclComm, &Stream) -> Result<()> + Send + Sync>;
type Check = Box<dyn Fn(u32) -> Result<()> + Send + Sync>;

/// One primitive on its own buffers (see the module docs).
pub struct Case {
    /// The primitive, for messages.
    pub name: &'static str,
    write: Write,
    issue: Issue,
    check: Check,
}

fn mem(elems: usize) -> Result<DeviceMem> {
    DeviceMem::alloc_shareable(elems.max(1) * 4)
}

fn write(m: &DeviceMem, data: impl Iterator<Item = i32>) -> Result<()> {
    m.copy_from_host(&data.collect::<Vec<_>>())
}

fn expect(name: &str, k: u32, got: &DeviceMem, want: Vec<i32>) -> Result<()> {
    let got = got.to_vec::<i32>(want.len())?;
    match got.iter().zip(&want).position(|(g, w)| g != w) {
        None => Ok(()),
        Some(i) => Err(HcclError::internal(format!(
            "{name}, launch {k}: element {i} is {}, want {}",
            got[i], want[i]
        ))),
    }
}

/// Element counts of the V ops: rank `q`'s share, around `c`.
fn vcount(c: usize, q: u32) -> usize {
    c / 2 + q as usize % 3 + 1
}

fn displs(counts: &[u64]) -> Vec<u64> {
    counts
        .iter()
        .scan(0, |at, &n| {
            let d = *at;
            *at += n;
            Some(d)
        })
        .collect()
}

/// Every primitive of `comm` over `c` elements per rank block (Int32, sum
/// for the reductions; roots chosen off rank 0).
pub fn cases(comm: &HcclComm, c: usize) -> Result<Vec<Case>> {
    let (r, p) = (comm.rank(), comm.size());
    let (ru, pu) = (r as usize, p as usize);
    let t = DataType::Int32;
    let root = (c as u32 + 1) % p;
    let mut v: Vec<Case> = Vec::new();

    let (s, o) = (mem(c)?, mem(c)?);
    let (s2, o2) = (s.clone(), o.clone());
    v.push(Case {
        name: "AllReduce",
        write: Box::new(move |k| write(&s, (0..c).map(|i| value(r, i, k)))),
        issue: Box::new(move |cm, st| cm.all_reduce_raw(&s2, &o2, c as u64, t, ReduceOp::Sum, st)),
        check: Box::new(move |k| {
            let want = (0..c)
                .map(|i| (0..p).map(|q| value(q, i, k)).sum())
                .collect();
            expect("AllReduce", k, &o, want)
        }),
    });

    let (s, o) = (mem(c)?, mem(pu * c)?);
    let (s2, o2) = (s.clone(), o.clone());
    v.push(Case {
        name: "AllGather",
        write: Box::new(move |k| write(&s, (0..c).map(|i| value(r, i, k)))),
        issue: Box::new(move |cm, st| cm.all_gather_raw(&s2, &o2, c as u64, t, st)),
        check: Box::new(move |k| {
            let want = (0..p).flat_map(|q| (0..c).map(move |i| value(q, i, k)));
            expect("AllGather", k, &o, want.collect())
        }),
    });

    let (s, o) = (mem(pu * c)?, mem(c)?);
    let (s2, o2) = (s.clone(), o.clone());
    v.push(Case {
        name: "ReduceScatter",
        write: Box::new(move |k| write(&s, (0..pu * c).map(|i| value(r, i, k)))),
        issue: Box::new(move |cm, st| {
            cm.reduce_scatter_raw(&s2, &o2, c as u64, t, ReduceOp::Sum, st)
        }),
        check: Box::new(move |k| {
            let want = (0..c).map(|i| (0..p).map(|q| value(q, ru * c + i, k)).sum());
            expect("ReduceScatter", k, &o, want.collect())
        }),
    });

    let b = mem(c)?;
    let (b2, b3) = (b.clone(), b.clone());
    v.push(Case {
        name: "Broadcast",
        write: Box::new(move |k| {
            write(
                &b,
                (0..c).map(|i| if r == root { value(r, i, k) } else { -7 }),
            )
        }),
        issue: Box::new(move |cm, st| cm.broadcast_raw(&b2, c as u64, t, root, st)),
        check: Box::new(move |k| {
            expect(
                "Broadcast",
                k,
                &b3,
                (0..c).map(|i| value(root, i, k)).collect(),
            )
        }),
    });

    let (s, o) = (mem(c)?, mem(c)?);
    let (s2, o2) = (s.clone(), o.clone());
    v.push(Case {
        name: "Reduce",
        write: Box::new(move |k| write(&s, (0..c).map(|i| value(r, i, k)))),
        issue: Box::new(move |cm, st| {
            cm.reduce_raw(&s2, &o2, c as u64, t, ReduceOp::Sum, root, st)
        }),
        check: Box::new(move |k| {
            if r != root {
                return Ok(());
            }
            let want = (0..c)
                .map(|i| (0..p).map(|q| value(q, i, k)).sum())
                .collect();
            expect("Reduce", k, &o, want)
        }),
    });

    let (s, o) = (mem(pu * c)?, mem(c)?);
    let (s2, o2) = (s.clone(), o.clone());
    v.push(Case {
        name: "Scatter",
        write: Box::new(move |k| write(&s, (0..pu * c).map(|i| value(r, i, k)))),
        issue: Box::new(move |cm, st| cm.scatter_raw(&s2, &o2, c as u64, t, root, st)),
        check: Box::new(move |k| {
            let want = (0..c).map(|i| value(root, ru * c + i, k)).collect();
            expect("Scatter", k, &o, want)
        }),
    });

    let (s, o) = (mem(c)?, mem(pu * c)?);
    let (s2, o2) = (s.clone(), o.clone());
    v.push(Case {
        name: "Gather",
        write: Box::new(move |k| write(&s, (0..c).map(|i| value(r, i, k)))),
        issue: Box::new(move |cm, st| cm.gather_raw(&s2, &o2, c as u64, t, root, st)),
        check: Box::new(move |k| {
            if r != root {
                return Ok(());
            }
            let want = (0..p).flat_map(|q| (0..c).map(move |i| value(q, i, k)));
            expect("Gather", k, &o, want.collect())
        }),
    });

    let (s, o) = (mem(pu * c)?, mem(pu * c)?);
    let (s2, o2) = (s.clone(), o.clone());
    v.push(Case {
        name: "AllToAll",
        write: Box::new(move |k| write(&s, (0..pu * c).map(|i| value(r, i, k)))),
        issue: Box::new(move |cm, st| cm.all_to_all_raw(&s2, c as u64, t, &o2, c as u64, t, st)),
        check: Box::new(move |k| {
            let want = (0..p).flat_map(|q| (0..c).map(move |i| value(q, ru * c + i, k)));
            expect("AllToAll", k, &o, want.collect())
        }),
    });

    // AllToAllV: rank a sends vcount(c, a + 2b) elements to rank b
    let n = move |a: u32, b: u32| vcount(c, a + 2 * b) as u64;
    let sc: Vec<u64> = (0..p).map(|q| n(r, q)).collect();
    let rc: Vec<u64> = (0..p).map(|q| n(q, r)).collect();
    let (sd, rd) = (displs(&sc), displs(&rc));
    let (stotal, rtotal) = (
        sc.iter().sum::<u64>() as usize,
        rc.iter().sum::<u64>() as usize,
    );
    let (s, o) = (mem(stotal)?, mem(rtotal)?);
    let (s2, o2) = (s.clone(), o.clone());
    let rc2 = rc.clone();
    v.push(Case {
        name: "AllToAllV",
        write: Box::new(move |k| write(&s, (0..stotal).map(|i| value(r, i, k)))),
        issue: Box::new(move |cm, st| cm.all_to_all_v_raw(&s2, &sc, &sd, t, &o2, &rc, &rd, t, st)),
        check: Box::new(move |k| {
            // from rank q: its block for this rank, at q's displacement of it
            let want = (0..p).flat_map(|q| {
                let at: u64 = (0..r).map(|b| n(q, b)).sum();
                (0..rc2[q as usize]).map(move |i| value(q, (at + i) as usize, k))
            });
            expect("AllToAllV", k, &o, want.collect())
        }),
    });

    // AllGatherV: rank q contributes vcount(c, q) elements
    let counts: Vec<u64> = (0..p).map(|q| vcount(c, q) as u64).collect();
    let ds = displs(&counts);
    let total = counts.iter().sum::<u64>() as usize;
    let mine = counts[ru] as usize;
    let (s, o) = (mem(mine)?, mem(total)?);
    let (s2, o2) = (s.clone(), o.clone());
    let counts2 = counts.clone();
    v.push(Case {
        name: "AllGatherV",
        write: Box::new(move |k| write(&s, (0..mine).map(|i| value(r, i, k)))),
        issue: Box::new(move |cm, st| {
            cm.all_gather_v_raw(&s2, mine as u64, &o2, &counts, &ds, t, st)
        }),
        check: Box::new(move |k| {
            let want =
                (0..p).flat_map(|q| (0..counts2[q as usize] as usize).map(move |i| value(q, i, k)));
            expect("AllGatherV", k, &o, want.collect())
        }),
    });

    // ReduceScatterV: block q (vcount(c, q) elements) of every rank's
    // input is reduced into rank q
    let counts: Vec<u64> = (0..p).map(|q| vcount(c, q) as u64).collect();
    let ds = displs(&counts);
    let total = counts.iter().sum::<u64>() as usize;
    let (mine, at) = (counts[ru] as usize, ds[ru] as usize);
    let (s, o) = (mem(total)?, mem(mine)?);
    let (s2, o2) = (s.clone(), o.clone());
    v.push(Case {
        name: "ReduceScatterV",
        write: Box::new(move |k| write(&s, (0..total).map(|i| value(r, i, k)))),
        issue: Box::new(move |cm, st| {
            cm.reduce_scatter_v_raw(&s2, &counts, &ds, &o2, mine as u64, t, ReduceOp::Sum, st)
        }),
        check: Box::new(move |k| {
            let want = (0..mine).map(|i| (0..p).map(|q| value(q, at + i, k)).sum());
            expect("ReduceScatterV", k, &o, want.collect())
        }),
    });

    // Send / Recv: rank r with its partner r ^ 1 (the lower sends first)
    let partner = r ^ 1;
    if partner < p {
        let (s, o) = (mem(c)?, mem(c)?);
        let (s2, o2) = (s.clone(), o.clone());
        v.push(Case {
            name: "Send/Recv",
            write: Box::new(move |k| write(&s, (0..c).map(|i| value(r, i, k)))),
            issue: Box::new(move |cm, st| {
                if r < partner {
                    cm.send_raw(&s2, c as u64, t, partner, st)?;
                    cm.recv_raw(&o2, c as u64, t, partner, st)
                } else {
                    cm.recv_raw(&o2, c as u64, t, partner, st)?;
                    cm.send_raw(&s2, c as u64, t, partner, st)
                }
            }),
            check: Box::new(move |k| {
                expect(
                    "Send/Recv",
                    k,
                    &o,
                    (0..c).map(|i| value(partner, i, k)).collect(),
                )
            }),
        });
    }

    // BatchSendRecv: a ring shift (its receives run on a side stream)
    if p > 1 {
        let (to, from) = ((r + 1) % p, (r + p - 1) % p);
        let (s, o) = (mem(c)?, mem(c)?);
        let items = vec![
            SendRecvItem {
                kind: SendRecvKind::Send,
                buf: s.clone(),
                count: c as u64,
                dtype: t,
                peer: to,
            },
            SendRecvItem {
                kind: SendRecvKind::Recv,
                buf: o.clone(),
                count: c as u64,
                dtype: t,
                peer: from,
            },
        ];
        v.push(Case {
            name: "BatchSendRecv",
            write: Box::new(move |k| write(&s, (0..c).map(|i| value(r, i, k)))),
            issue: Box::new(move |cm, st| cm.batch_send_recv(&items, st)),
            check: Box::new(move |k| {
                expect(
                    "BatchSendRecv",
                    k,
                    &o,
                    (0..c).map(|i| value(from, i, k)).collect(),
                )
            }),
        });
    }

    v.push(Case {
        name: "Barrier",
        write: Box::new(|_| Ok(())),
        issue: Box::new(|cm, st| cm.barrier(st)),
        check: Box::new(|_| Ok(())),
    });
    Ok(v)
}

/// Captures `cases` on a new stream of `comm` (all of them into one graph
/// when `together`, else one graph each) and launches each graph
/// `launches` times, writing the inputs before and checking the outputs
/// after every launch. Every rank must call it alike.
pub fn capture_and_replay(
    comm: &HcclComm,
    cases: &[Case],
    together: bool,
    launches: u32,
) -> Result<()> {
    let s = comm.create_stream();
    let groups: Vec<&[Case]> = if together {
        vec![cases]
    } else {
        cases.chunks(1).collect()
    };
    for group in groups {
        let names: Vec<&str> = group.iter().map(|c| c.name).collect();
        let ctx = |e: HcclError| e.during(format!("captured {names:?}"));
        s.begin_capture(CaptureMode::Global).map_err(ctx)?;
        for case in group {
            (case.issue)(comm, &s).map_err(ctx)?;
        }
        let g = s.end_capture().map_err(ctx)?;
        if g.op_count() < group.len() {
            return Err(ctx(HcclError::internal(format!(
                "the graph notes {} ops for {} cases",
                g.op_count(),
                group.len()
            ))));
        }
        for k in 0..launches {
            for case in group {
                (case.write)(k).map_err(ctx)?;
            }
            g.launch(&s).map_err(ctx)?;
            s.synchronize().map_err(ctx)?;
            for case in group {
                (case.check)(k).map_err(ctx)?;
            }
        }
    }
    Ok(())
}
