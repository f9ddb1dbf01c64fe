//! `hccl-test --fused OPS`: the fused compute/communication ops against
//! their parts, in one run. For every op and shape it times, on operands
//! filled with data that differs per rank (every page touched before
//! timing):
//!
//! - `mm`: the rank's matmul alone (the cube GEMM, f32, the threads the
//!   fused op uses);
//! - `comm`: the collective alone on the matmul's output (MM-RS:
//!   ReduceScatterV of M×N; AG-MM: AllGatherV of the A shards; MM-AR:
//!   AllReduce of M×N);
//! - `unfused`: the fused op's unfused path (the whole matmul, then the
//!   whole collective);
//! - `fused`: the fused op as `HCCL_RS_FUSED_PATH` (default `auto`) runs
//!   it;
//!
//! and prints the median of each (an iteration's time is the slowest
//! rank's), the fused op's max, its speed-up over unfused and CATCCOS's
//! overlap `(mm + comm − fused) / min(mm, comm)`. With `-c 1` the fused
//! result is compared with the unfused one.

use crate::args::{Format, PerfArgs};
use hccl_adapter::{CommConfig, DataType, DeviceMem, HcclComm, HcclError, ReduceOp, Result};
use hccl_fused::{cube, split_rows, Fused, FusedConfig, FusedPath, Mat};
use std::io::Write;
use std::time::Instant;

/// CATCCOS's three test shapes and a tall-skinny one (M, K, N).
pub(crate) const DEFAULT_SHAPES: &str =
    "1792x768x1280,5416x6144x1408,4084x2048x4096,16384x1024x1024";

/// The fused ops by their benchmark names.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Op {
    MmRs,
    AgMm,
    MmAr,
}

impl Op {
    fn name(self) -> &'static str {
        match self {
            Op::MmRs => "mm_rs",
            Op::AgMm => "ag_mm",
            Op::MmAr => "mm_ar",
        }
    }
}

fn parse_ops(s: &str) -> Result<Vec<Op>> {
    let mut ops = Vec::new();
    for t in s.split(',').map(str::trim) {
        match t {
            "all" => ops.extend([Op::MmRs, Op::AgMm, Op::MmAr]),
            "mm_rs" => ops.push(Op::MmRs),
            "ag_mm" => ops.push(Op::AgMm),
            "mm_ar" => ops.push(Op::MmAr),
            other => {
                return Err(HcclError::para(format!(
                    "--fused {other:?}: expected mm_rs, ag_mm, mm_ar or all (comma-separated)"
                )))
            }
        }
    }
    Ok(ops)
}

fn parse_shapes(s: &str) -> Result<Vec<(usize, usize, usize)>> {
    s.split(',')
        .map(|t| {
            let v: Vec<usize> = t.trim().split('x').filter_map(|x| x.parse().ok()).collect();
            match v[..] {
                [m, k, n] if m > 0 && k > 0 && n > 0 => Ok((m, k, n)),
                _ => Err(HcclError::para(format!(
                    "--shapes {t:?}: expected MxKxN with positive numbers (e.g. 1792x768x1280)"
                ))),
            }
        })
        .collect()
}

/// Checks the arguments; runs the benchmark on thread ranks, or starts
/// process ranks (which come back through [`rank_main`]).
pub(crate) fn run(args: &PerfArgs, out: &mut dyn Write) -> Result<()> {
    let ops = parse_ops(args.fused.as_deref().unwrap_or("all"))?;
    let shapes = parse_shapes(args.shapes.as_deref().unwrap_or(DEFAULT_SHAPES))?;
    if DataType::from_name(&args.datatype)? != DataType::Fp32 {
        return Err(HcclError::para(
            "the fused benchmark times fp32 (its matmul-alone baseline is the f32 GEMM); use -d \
             fp32",
        ));
    }
    if args.npus == 0 || args.iters == 0 {
        return Err(HcclError::para("-p and -n must be at least 1"));
    }
    let io = |e: std::io::Error| HcclError::from_io("writing results", e);
    match (args.transport.as_str(), args.worker_rank) {
        ("process", Some(rank)) => {
            let comm = crate::perf::join_process(args, rank)?;
            rank_main(args, &ops, &shapes, &comm, out)
        }
        ("process", None) => {
            header(args, out).map_err(io)?;
            out.flush().map_err(io)?;
            crate::perf::launch_processes(args)
        }
        ("inproc", None) => {
            header(args, out).map_err(io)?;
            let comms = HcclComm::init_all_with(args.npus, CommConfig::from_env()?)?;
            let mut rank0 = Vec::new();
            let res: Vec<Result<()>> = std::thread::scope(|s| {
                let hs: Vec<_> = comms
                    .iter()
                    .skip(1)
                    .map(|c| {
                        let (ops, shapes) = (&ops, &shapes);
                        s.spawn(move || rank_main(args, ops, shapes, c, &mut std::io::sink()))
                    })
                    .collect();
                let mut all = vec![rank_main(args, &ops, &shapes, &comms[0], &mut rank0)];
                all.extend(hs.into_iter().map(|h| {
                    h.join()
                        .unwrap_or_else(|_| Err(HcclError::internal("a rank thread panicked")))
                }));
                all
            });
            out.write_all(&rank0).map_err(io)?;
            res.into_iter().collect()
        }
        (t, _) => Err(HcclError::para(format!(
            "--fused runs with --transport inproc or process, not {t}"
        ))),
    }
}

fn header(args: &PerfArgs, out: &mut dyn Write) -> std::io::Result<()> {
    if args.format == Format::Text {
        writeln!(
            out,
            "fused ops, {} ranks, fp32, {} timed iterations after {} warm-up; times in ms \
             (median over iterations of the slowest rank)",
            args.npus, args.iters, args.warmup_iters
        )?;
        writeln!(
            out,
            "{:>6} {:>6} {:>5} {:>5} {:>8} {:>6} {:>9} {:>9} {:>10} {:>9} {:>9} {:>8} {:>8} {:>8}",
            "op",
            "M",
            "K",
            "N",
            "path",
            "blocks",
            "mm",
            "comm",
            "unfused",
            "fused",
            "fused_max",
            "speedup",
            "overlap",
            "check"
        )?;
    }
    Ok(())
}

/// Deterministic non-zero values that differ by rank and operand.
fn fill(mem: &DeviceMem, n: usize, seed: u64) -> Result<()> {
    let v: Vec<f32> = (0..n as u64)
        .map(|i| {
            let x = (i ^ (seed << 32)).wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 40;
            ((x % 2000) as f32 + 1.0) / 1000.0 - 1.0
        })
        .collect();
    mem.copy_from_host(&v)
}

fn dense(rows: usize, cols: usize, seed: u64) -> Result<Mat> {
    let mem = DeviceMem::alloc((rows * cols).max(1) * 4)?;
    fill(&mem, rows * cols, seed)?;
    Mat::new(&mem, DataType::Fp32, rows, cols, cols)
}

/// Times `f` (after `warm` untimed runs), each iteration between
/// barriers; returns the per-iteration times of the slowest rank,
/// sorted, in ms.
fn time(
    comm: &HcclComm,
    warm: u32,
    iters: u32,
    mut f: impl FnMut() -> Result<()>,
) -> Result<Vec<f64>> {
    let s = comm.create_stream();
    for _ in 0..warm {
        f()?;
    }
    let mut t = Vec::with_capacity(iters as usize);
    for _ in 0..iters {
        comm.barrier(&s)?;
        s.synchronize()?;
        let t0 = Instant::now();
        f()?;
        t.push(t0.elapsed().as_secs_f64() * 1e3);
    }
    let buf = DeviceMem::alloc(t.len() * 8)?;
    buf.copy_from_host(&t)?;
    comm.all_reduce_raw(
        &buf,
        &buf,
        t.len() as u64,
        DataType::Fp64,
        ReduceOp::Max,
        &s,
    )?;
    s.synchronize()?;
    let mut t: Vec<f64> = buf.to_vec(t.len())?;
    t.sort_by(f64::total_cmp);
    Ok(t)
}

fn median(t: &[f64]) -> f64 {
    t[t.len() / 2]
}

/// One rank's benchmark; rank 0 prints a row per op and shape.
fn rank_main(
    args: &PerfArgs,
    ops: &[Op],
    shapes: &[(usize, usize, usize)],
    comm: &HcclComm,
    out: &mut dyn Write,
) -> Result<()> {
    let (p, r) = (comm.size() as usize, comm.rank() as usize);
    let io = |e: std::io::Error| HcclError::from_io("writing results", e);
    let env = FusedConfig::from_env()?;
    let fused = Fused::with_config(comm, env.clone());
    let unfused = Fused::with_config(
        comm,
        FusedConfig {
            path: FusedPath::Unfused,
            ..env
        },
    );
    let s = comm.create_stream();
    let (w, n) = (args.warmup_iters, args.iters);
    let mut plotted = Vec::new();
    let seed = |what: u64| what * 1000 + r as u64;
    for &(m, k, nn) in shapes {
        for &op in ops {
            let (a_rows, out_rows) = match op {
                Op::MmRs => (m, split_rows(m, p, r).1),
                Op::AgMm => (split_rows(m, p, r).1, m),
                Op::MmAr => (m, m),
            };
            let a = dense(a_rows, k, seed(1))?;
            let b = dense(k, nn, seed(2))?;
            let out_f = dense(out_rows, nn, seed(3))?;
            let out_u = dense(out_rows, nn, seed(4))?;
            // the parts: the rank's GEMM alone, the collective alone
            let mm_rows = if op == Op::AgMm { m } else { a_rows };
            let a_mm = dense(mm_rows, k, seed(5))?;
            let c_mm = dense(mm_rows, nn, seed(6))?;
            let rep = match op {
                Op::MmRs => fused.matmul_reduce_scatter(&a, &b, &out_f)?,
                Op::AgMm => fused.all_gather_matmul(&a, &b, &out_f, None)?,
                Op::MmAr => fused.matmul_all_reduce(&a, &b, &out_f)?,
            };
            let threads = rep.threads;
            let t_mm = time(comm, w, n, || cube::gemm(&c_mm, &a_mm, &b, false, threads))?;
            let t_comm = match op {
                Op::MmRs => {
                    let send = dense(m, nn, seed(7))?;
                    let recv = dense(out_rows, nn, seed(8))?;
                    let counts: Vec<u64> = (0..p)
                        .map(|q| (split_rows(m, p, q).1 * nn) as u64)
                        .collect();
                    let displs: Vec<u64> = (0..p)
                        .map(|q| (split_rows(m, p, q).0 * nn) as u64)
                        .collect();
                    time(comm, w, n, || {
                        comm.reduce_scatter_v_raw(
                            send.mem(),
                            &counts,
                            &displs,
                            recv.mem(),
                            counts[r],
                            DataType::Fp32,
                            ReduceOp::Sum,
                            &s,
                        )?;
                        s.synchronize()
                    })?
                }
                Op::AgMm => {
                    let recv = dense(m, k, seed(8))?;
                    let counts: Vec<u64> =
                        (0..p).map(|q| (split_rows(m, p, q).1 * k) as u64).collect();
                    let displs: Vec<u64> =
                        (0..p).map(|q| (split_rows(m, p, q).0 * k) as u64).collect();
                    time(comm, w, n, || {
                        comm.all_gather_v_raw(
                            a.mem(),
                            counts[r],
                            recv.mem(),
                            &counts,
                            &displs,
                            DataType::Fp32,
                            &s,
                        )?;
                        s.synchronize()
                    })?
                }
                Op::MmAr => {
                    let buf = dense(m, nn, seed(7))?;
                    time(comm, w, n, || {
                        comm.all_reduce_raw(
                            buf.mem(),
                            buf.mem(),
                            (m * nn) as u64,
                            DataType::Fp32,
                            ReduceOp::Sum,
                            &s,
                        )?;
                        s.synchronize()
                    })?
                }
            };
            let run = |f: &Fused, o: &Mat| -> Result<hccl_fused::FusedReport> {
                match op {
                    Op::MmRs => f.matmul_reduce_scatter(&a, &b, o),
                    Op::AgMm => f.all_gather_matmul(&a, &b, o, None),
                    Op::MmAr => f.matmul_all_reduce(&a, &b, o),
                }
            };
            let t_unf = time(comm, w, n, || run(&unfused, &out_u).map(drop))?;
            // `auto` tries the pipeline and unfused first (the call above
            // was one trial): those calls are untimed, as warm-up
            for _ in 1..2 * hccl_fused::AUTO_TRIALS {
                run(&fused, &out_f)?;
            }
            let mut rep = rep;
            let t_fus = time(comm, w, n, || {
                rep = run(&fused, &out_f)?;
                Ok(())
            })?;
            let check = if args.check == 1 {
                let (x, y) = (
                    out_f.mem().to_vec::<f32>(out_rows * nn)?,
                    out_u.mem().to_vec::<f32>(out_rows * nn)?,
                );
                let ok = x
                    .iter()
                    .zip(&y)
                    .all(|(a, b)| (a - b).abs() <= 1e-4 * (1.0 + b.abs()) * k as f32);
                let flag = DeviceMem::alloc(4)?;
                flag.copy_from_host(&[u32::from(!ok)])?;
                comm.all_reduce_raw(&flag, &flag, 1, DataType::Uint32, ReduceOp::Max, &s)?;
                s.synchronize()?;
                if flag.to_vec::<u32>(1)?[0] == 0 {
                    "success"
                } else {
                    "failed"
                }
            } else {
                "none"
            };
            let (mm, cm, un, fu) = (
                median(&t_mm),
                median(&t_comm),
                median(&t_unf),
                median(&t_fus),
            );
            let speedup = un / fu;
            let overlap = (mm + cm - fu) / mm.min(cm);
            let fmax = *t_fus.last().unwrap_or(&fu);
            if r == 0 {
                match args.format {
                    Format::Text => writeln!(
                        out,
                        "{:>6} {m:>6} {k:>5} {nn:>5} {:>8} {:>6} {mm:>9.2} {cm:>9.2} {un:>10.2} \
                         {fu:>9.2} {fmax:>9.2} {speedup:>8.3} {overlap:>8.3} {check:>8}",
                        op.name(),
                        rep.path.name(),
                        rep.blocks
                    ),
                    Format::Json => writeln!(
                        out,
                        "{{\"op\":\"{}\",\"ranks\":{p},\"m\":{m},\"k\":{k},\"n\":{nn},\"path\":\"{}\",\
                         \"blocks\":{},\"block_rows\":{},\"stages\":{},\"threads\":{threads},\
                         \"mm_ms\":{mm:.4},\"comm_ms\":{cm:.4},\"unfused_ms\":{un:.4},\
                         \"fused_ms\":{fu:.4},\"fused_max_ms\":{fmax:.4},\"speedup\":{speedup:.4},\
                         \"overlap\":{overlap:.4},\"waited_ms\":{:.4},\"check\":\"{check}\"}}",
                        op.name(),
                        rep.path.name(),
                        rep.blocks,
                        rep.block_rows,
                        rep.stages,
                        rep.waited.as_secs_f64() * 1e3
                    ),
                }
                .map_err(io)?;
                out.flush().map_err(io)?;
            }
            plotted.push(crate::fused_plot::FusedRow {
                op: op.name(),
                shape: format!("{m}×{k}×{nn}"),
                speedup,
                overlap,
            });
            if check == "failed" {
                return Err(HcclError::internal(format!(
                    "{} {m}x{k}x{nn}: the fused result differs from the unfused one",
                    op.name()
                )));
            }
        }
    }
    if let (Some(path), 0) = (&args.plot, r) {
        let title = format!("fused ops, {p} ranks, fp32 (hccl-test --fused)");
        crate::fused_plot::draw(&plotted, &title, path).map_err(HcclError::open_file)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ops_and_shapes_parse_and_bad_ones_are_named() {
        assert_eq!(parse_ops("all").unwrap().len(), 3);
        assert_eq!(parse_ops("mm_rs,mm_ar").unwrap(), vec![Op::MmRs, Op::MmAr]);
        assert!(parse_ops("mm").unwrap_err().to_string().contains("\"mm\""));
        assert_eq!(parse_shapes(DEFAULT_SHAPES).unwrap().len(), 4);
        assert_eq!(parse_shapes("3x4x5").unwrap(), vec![(3, 4, 5)]);
        let e = parse_shapes("3x4").unwrap_err().to_string();
        assert!(e.contains("expected MxKxN"), "{e}");
    }
}
