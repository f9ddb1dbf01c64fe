//! [`Comm`]: one rank's communicator as Python sees it — creation,
//! splitting, abort and destroy here; the ops' argument handling is in
//! `ops`.

use crate::errors;
use crate::ops::{self, Op};
use crate::shared::Shared;
use crate::work::Work;
use hccl_adapter::{CommConfig, HcclComm, HcclError, RootInfo, HCCL_ROOT_INFO_BYTES};
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyTuple};
use std::net::ToSocketAddrs;
use std::sync::mpsc::{self, RecvTimeoutError};
use std::sync::{Arc, RwLock};
use std::time::Duration;

/// How often a communicator's set-up looks for Python signals (Ctrl-C).
const SET_UP_POLL: Duration = Duration::from_millis(50);

/// The configuration communicators made from Python use: the
/// environment's, without pinning the creating thread (the thread that
/// drives ops is pinned at its first op, see `Shared::pin_driver`), with
/// the caller's timeouts where given (torch passes its group's `timeout`).
fn config(
    py: Python<'_>,
    connect_timeout: Option<&Bound<'_, PyAny>>,
    exec_timeout: Option<&Bound<'_, PyAny>>,
) -> PyResult<CommConfig> {
    let mut c = CommConfig::from_env().map_err(|e| errors::to_py(py, e))?;
    c.pin_creating_thread = false;
    if let Some(t) = connect_timeout.filter(|t| !t.is_none()) {
        c.connect_timeout = duration(t, "connect_timeout")?
            .ok_or_else(|| errors::para(py, "connect_timeout must be finite"))?;
    }
    if let Some(t) = exec_timeout.filter(|t| !t.is_none()) {
        c.exec_timeout = duration(t, "exec_timeout")?;
    }
    Ok(c)
}

/// A timeout argument: seconds (int or float) or a `datetime.timedelta`,
/// kept to the millisecond (rounded up, so a positive value never becomes
/// 0); `None` for infinity. Zero, negative and NaN values are refused.
pub(crate) fn duration(t: &Bound<'_, PyAny>, what: &str) -> PyResult<Option<Duration>> {
    let py = t.py();
    let secs: f64 = if t.hasattr("total_seconds")? {
        t.call_method0("total_seconds")?.extract()?
    } else {
        t.extract().map_err(|_| {
            errors::para(
                py,
                format!(
                    "{what} must be seconds or a timedelta, not {}",
                    type_name(t)
                ),
            )
        })?
    };
    if secs == f64::INFINITY {
        return Ok(None);
    }
    if secs.is_nan() || secs <= 0.0 {
        return Err(errors::para(
            py,
            format!("{what} must be positive, got {secs} s"),
        ));
    }
    // (whole milliseconds; beyond u64 milliseconds is forever anyway)
    let ms = (secs * 1000.0).ceil().min(u64::MAX as f64) as u64;
    Ok(Some(Duration::from_millis(ms)))
}

fn type_name(t: &Bound<'_, PyAny>) -> String {
    t.get_type()
        .name()
        .map_or_else(|_| "?".to_owned(), |n| n.to_string())
}

/// Runs a communicator's blocking set-up `f` (the bootstrap waits for
/// every peer, up to `HCCL_CONNECT_TIMEOUT`) on a helper thread, with the
/// GIL released, looking for Python signals every [`SET_UP_POLL`]: Ctrl-C
/// raises `KeyboardInterrupt` at once instead of after the timeout.
///
/// The bootstrap has no cancellation hook, so an interrupted set-up's
/// helper thread is left to end by itself: within `HCCL_CONNECT_TIMEOUT`
/// at worst (its error is then dropped), or sooner if the peers do come
/// (the communicator it formed is then destroyed on that thread, which
/// its peers see as this rank leaving).
fn set_up<F>(py: Python<'_>, what: &str, f: F) -> PyResult<HcclComm>
where
    F: FnOnce() -> hccl_adapter::Result<HcclComm> + Send + 'static,
{
    let (tx, mut rx) = mpsc::sync_channel(1);
    std::thread::Builder::new()
        .name("hccl_rs-set-up".to_owned())
        .spawn(move || {
            // a receiver gone (interrupted) drops the outcome here
            let _ = tx.send(f());
        })
        .map_err(|e| {
            errors::to_py(
                py,
                HcclError::internal(format!("{what}: cannot start the set-up thread: {e}")),
            )
        })?;
    loop {
        // (the receiver moves in and out: it is Send, not Sync)
        let (back, got) = py.detach(move || {
            let got = rx.recv_timeout(SET_UP_POLL);
            (rx, got)
        });
        rx = back;
        match got {
            Ok(r) => return r.map_err(|e| errors::to_py(py, e)),
            Err(RecvTimeoutError::Timeout) => {
                if let Err(sig) = py.check_signals() {
                    tracing::warn!(
                        "{what} interrupted: {sig}; its set-up thread ends by itself (HCCL_CONNECT_TIMEOUT at worst)"
                    );
                    return Err(sig);
                }
            }
            Err(RecvTimeoutError::Disconnected) => {
                return Err(errors::to_py(
                    py,
                    HcclError::internal(format!(
                        "{what}: the set-up thread ended without an outcome (it panicked)"
                    )),
                ))
            }
        }
    }
}

/// One rank's communicator (HCCL's `HcclComm`).
///
/// Create it with `Comm(n_ranks, root_info, rank)` (root info from
/// `get_root_info()` on one rank, handed to all), or `Comm.from_env()`
/// under torchrun, mpirun or srun. Every op takes buffer-protocol objects
/// (NumPy arrays, `bytearray`, `memoryview`) or torch CPU tensors, with
/// the element type taken from the buffer; blocking calls return when the
/// op completed, `*_async` calls return a `Work`. The GIL is released
/// while an op runs and Ctrl-C interrupts a wait (aborting the
/// communicator). Errors are `hccl_rs.HcclError` subclasses.
#[pyclass(frozen, module = "hccl_rs._native")]
pub struct Comm {
    live: RwLock<Option<Arc<Shared>>>,
    rank: u32,
    size: u32,
    name: String,
    /// The bound of its set-up, kept for what it makes later (`agree_lost`
    /// without a timeout bounds each round by it; the adapter does not
    /// hand a communicator's configuration back).
    connect_timeout: Duration,
}

impl Comm {
    fn wrap(comm: HcclComm, connect_timeout: Duration) -> Comm {
        Comm {
            rank: comm.rank(),
            size: comm.size(),
            name: comm.name().to_owned(),
            live: RwLock::new(Some(Arc::new(Shared::new(comm)))),
            connect_timeout,
        }
    }

    /// The live communicator, or the error of a destroyed one.
    pub(crate) fn shared(&self, py: Python<'_>) -> PyResult<Arc<Shared>> {
        match &*self.live.read().unwrap_or_else(|p| p.into_inner()) {
            Some(s) => Ok(s.clone()),
            None => Err(errors::to_py(
                py,
                HcclError::para(format!("communicator {} was destroyed", self.name))
                    .rank(self.rank),
            )),
        }
    }
}

/// Runs an op's argument handling: `Ok(None)` for a blocking call, the
/// handle for an async one.
type OpResult = PyResult<Option<Work>>;

#[pymethods]
impl Comm {
    /// `Comm(n_ranks, root_info, rank, connect_timeout=None,
    /// exec_timeout=None)`: this process is `rank` of `n_ranks`, meeting at
    /// `root_info` (the bytes `get_root_info()` returned on the root).
    /// Blocks until every rank has joined, at most `connect_timeout`
    /// (seconds or a timedelta; default `HCCL_CONNECT_TIMEOUT`); Ctrl-C
    /// interrupts the wait at once. `exec_timeout` bounds every wait of
    /// its ops (default `HCCL_EXEC_TIMEOUT`; see `set_exec_timeout`).
    #[new]
    #[pyo3(signature = (n_ranks, root_info, rank, connect_timeout = None, exec_timeout = None))]
    fn new(
        py: Python<'_>,
        n_ranks: u32,
        root_info: &[u8],
        rank: u32,
        connect_timeout: Option<&Bound<'_, PyAny>>,
        exec_timeout: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Comm> {
        let root = self::root_info(py, root_info, "root_info")?;
        let config = config(py, connect_timeout, exec_timeout)?;
        let within = config.connect_timeout;
        let comm = set_up(py, "creating the communicator", move || {
            HcclComm::init_root_info_with(n_ranks, &root, rank, config)
        })?;
        Ok(Comm::wrap(comm, within))
    }

    /// A communicator from the launcher's environment: torchrun (`RANK`,
    /// `WORLD_SIZE`, `MASTER_ADDR`), Open MPI's mpirun, MPICH, Slurm's
    /// srun. Ranks meet at `HCCL_ROOT_ADDR`, else `MASTER_ADDR` and
    /// `MASTER_PORT` — under torchrun and MPI/Slurm launchers (where
    /// `MASTER_PORT` is torch's store) at `MASTER_PORT + 1` — else through
    /// the file `HCCL_RS_ROOT_FILE`. Under an MPI or Slurm launcher with
    /// none of these set, `hccl_rs._launch.fill_env` derives `MASTER_ADDR`
    /// (one host: 127.0.0.1) and `MASTER_PORT` (from the job id) first.
    /// The timeouts as for `Comm(...)`.
    #[staticmethod]
    #[pyo3(signature = (connect_timeout = None, exec_timeout = None))]
    fn from_env(
        py: Python<'_>,
        connect_timeout: Option<&Bound<'_, PyAny>>,
        exec_timeout: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Comm> {
        meet_beside_torchrun(py)?;
        let config = config(py, connect_timeout, exec_timeout)?;
        let within = config.connect_timeout;
        let comm = set_up(py, "creating the communicator", move || {
            HcclComm::init_from_env_with(config)
        })?;
        Ok(Comm::wrap(comm, within))
    }

    /// This rank.
    #[getter]
    fn rank(&self) -> u32 {
        self.rank
    }

    /// Number of ranks.
    #[getter]
    fn size(&self) -> u32 {
        self.size
    }

    /// The communicator's name (its op tags end with it).
    #[getter]
    fn name(&self) -> &str {
        &self.name
    }

    /// Whether `destroy()` has been called.
    #[getter]
    fn destroyed(&self) -> bool {
        self.live
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .is_none()
    }

    /// A communicator of the listed ranks of this one (in that order: the
    /// i-th listed rank is rank i of the new one), or None on a rank not
    /// listed. Every listed rank must call it with the same list; ranks
    /// not listed may skip the call.
    fn split(&self, py: Python<'_>, ranks: Vec<u32>) -> PyResult<Option<Comm>> {
        let sh = self.shared(py)?;
        let Some(sub_rank) = ranks.iter().position(|&r| r == self.rank) else {
            return Ok(None);
        };
        let id = {
            let n = sh.next_split(&ranks);
            split_id(&self.name, &ranks, n)
        };
        // (the parent's configuration: its creating thread is not pinned)
        let sub = set_up(py, "splitting the communicator", move || {
            sh.comm.create_sub_comm(&ranks, id, sub_rank as u32)
        })?;
        Ok(Some(Comm::wrap(sub, self.connect_timeout)))
    }

    /// NCCL's `ncclCommShrink` / ULFM's shrink: a new communicator of the
    /// ranks not in `exclude`, renumbered in their order (rank 0, 2, 3
    /// without 1 become 0, 1, 2). Every survivor calls it with the same
    /// list; the excluded never do (they may be dead). With `exclude`
    /// None the survivors first agree who is lost (`agree_lost`, each
    /// round bounded by the connect timeout) and exclude those. No root
    /// info: the survivors meet over this communicator's control plane,
    /// which outlives a revocation. This communicator stays as it is:
    /// `revoke` it first to end ops still in flight, `destroy` it after.
    /// Survivors told different lists raise `ParameterError` ("the
    /// survivors disagree on who is excluded"), a survivor lost meanwhile
    /// `RemoteError` naming it; threads-as-ranks `NotSupportedError`.
    /// Ctrl-C interrupts the wait.
    #[pyo3(signature = (exclude = None))]
    fn shrink(&self, py: Python<'_>, exclude: Option<Vec<u32>>) -> PyResult<Comm> {
        let sh = self.shared(py)?;
        let comm = set_up(py, "shrinking the communicator", move || match exclude {
            Some(ex) => sh.comm.shrink(&ex),
            None => sh.comm.shrink_agreed(),
        })?;
        Ok(Comm::wrap(comm, self.connect_timeout))
    }

    /// Makes the communicator usable again after a failed op (a timeout, a
    /// mismatch between ranks, a peer's failure): every rank calls it, and
    /// the communicator is rebuilt for the same ranks over its control
    /// plane (fresh links, buffers and streams, ~10 ms); this object runs
    /// its later ops there, with the same rank, size, name, exec timeout
    /// and registered memory. Works in flight on the old one end. What to
    /// run again is the application's choice (a rank whose part of the
    /// failed op completed did not fail). A peer lost meanwhile raises
    /// `RemoteError` naming it (shrink instead). Ctrl-C interrupts the
    /// wait.
    fn recover(&self, py: Python<'_>) -> PyResult<()> {
        let sh = self.shared(py)?;
        let comm = sh.comm.clone();
        set_up(py, "recovering the communicator", move || {
            comm.recover().map(|_| comm)
        })?;
        let fresh = Arc::new(Shared::renewed(&sh));
        let mut live = self.live.write().unwrap_or_else(|p| p.into_inner());
        if live.is_some() {
            *live = Some(fresh);
        }
        Ok(())
    }

    /// How many times `recover` rebuilt this communicator.
    fn recoveries(&self, py: Python<'_>) -> PyResult<u64> {
        Ok(self.shared(py)?.comm.recoveries())
    }

    /// The ranks lost (dead processes, destroyed communicators), as every
    /// surviving rank agrees: each survivor calls it and gets the same
    /// sorted list, even when ranks die during the agreement. `timeout`
    /// (seconds or a timedelta; default the connect timeout) bounds each
    /// round's wait for a rank not known lost: a hung rank raises
    /// `HcclTimeoutError` naming it.
    #[pyo3(signature = (timeout = None))]
    fn agree_lost(&self, py: Python<'_>, timeout: Option<&Bound<'_, PyAny>>) -> PyResult<Vec<u32>> {
        let sh = self.shared(py)?;
        let t = match timeout.filter(|t| !t.is_none()) {
            Some(t) => duration(t, "timeout")?
                .ok_or_else(|| errors::para(py, "agree_lost's timeout must be finite"))?,
            None => self.connect_timeout,
        };
        // (rounds over the control plane: not with the GIL)
        py.detach(move || sh.comm.agree_lost(t))
            .map_err(|e| errors::to_py(py, e))
    }

    /// NCCL's `ncclCommGrow`, the id: single-use bytes (picklable, send
    /// them anywhere) for growing this communicator. One member makes it
    /// and passes it to `grow`; the new processes pass it to
    /// `Comm.join_grown`. Its rendezvous listens on this host for the
    /// connect timeout.
    fn grow_id<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyBytes>> {
        let sh = self.shared(py)?;
        let id = py
            .detach(move || sh.comm.grow_id())
            .map_err(|e| errors::to_py(py, e))?;
        Ok(PyBytes::new(py, &id.0))
    }

    /// NCCL's `ncclCommGrow`, the members' side: every member of this
    /// communicator calls it, the one that made the id (`grow_id`) passing
    /// it and the others None (they learn it over the control plane);
    /// with the new processes (`Comm.join_grown`) they form a communicator
    /// of `n_ranks` in which every member keeps its rank and the new ones
    /// take `size .. n_ranks`. This communicator stays as it is. No id, or
    /// several, among the members: `ParameterError` on every member; a
    /// member lost meanwhile: `RemoteError` naming it.
    #[pyo3(signature = (n_ranks, id = None))]
    fn grow(&self, py: Python<'_>, n_ranks: u32, id: Option<&[u8]>) -> PyResult<Comm> {
        let sh = self.shared(py)?;
        let id = id.map(|b| root_info(py, b, "id")).transpose()?;
        let comm = set_up(py, "growing the communicator", move || {
            sh.comm.grow(n_ranks, id.as_ref())
        })?;
        Ok(Comm::wrap(comm, self.connect_timeout))
    }

    /// NCCL's `ncclCommGrow`, a new process's side: joins the communicator
    /// being grown to `n_ranks` as `rank` (one of the new ranks: the
    /// members keep `0 .. size`), with the `id` a member made
    /// (`grow_id`). Timeouts as for `Comm(...)`.
    #[staticmethod]
    #[pyo3(signature = (n_ranks, id, rank, connect_timeout = None, exec_timeout = None))]
    fn join_grown(
        py: Python<'_>,
        n_ranks: u32,
        id: &[u8],
        rank: u32,
        connect_timeout: Option<&Bound<'_, PyAny>>,
        exec_timeout: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Comm> {
        let id = root_info(py, id, "id")?;
        let config = config(py, connect_timeout, exec_timeout)?;
        let within = config.connect_timeout;
        // the adapter's join_grown reads its configuration from the
        // environment; this one keeps the caller's timeouts and leaves the
        // creating thread unpinned, as every communicator made from Python.
        // Joining is the id's rendezvous, as in the framework's join_grown.
        let comm = set_up(py, "joining a grown communicator", move || {
            HcclComm::init_root_info_with(n_ranks, &id, rank, config)
                .map_err(|e| e.during("joining a grown communicator"))
        })?;
        Ok(Comm::wrap(comm, within))
    }

    /// Aborts the communicator: ops in flight end with an error here and on
    /// the peers, later ops are refused.
    #[pyo3(signature = (reason = None))]
    fn abort(&self, py: Python<'_>, reason: Option<&str>) -> PyResult<()> {
        let sh = self.shared(py)?;
        sh.comm.abort(reason.unwrap_or("aborted from Python"));
        Ok(())
    }

    /// Revokes the communicator on every rank (NCCL's `ncclCommRevoke`):
    /// their in-flight ops end at once with a `SuspendedError` "revoked by
    /// rank R: reason", later ops are refused the same way. Status calls
    /// (`revoked`, `async_error`) and `destroy` remain. Revoking twice, or
    /// after a peer did, does nothing.
    #[pyo3(signature = (reason = None))]
    fn revoke(&self, py: Python<'_>, reason: Option<&str>) -> PyResult<()> {
        let sh = self.shared(py)?;
        let reason = reason.unwrap_or("revoked from Python").to_owned();
        // (it tells the peers over the control plane: not with the GIL)
        py.detach(move || sh.comm.revoke(&reason));
        Ok(())
    }

    /// `(rank, reason)` of the revocation if the communicator was revoked
    /// (by this rank or a peer), else None.
    fn revoked(&self, py: Python<'_>) -> PyResult<Option<(u32, String)>> {
        Ok(self.shared(py)?.comm.revoked())
    }

    /// Bounds every wait of this communicator's ops from now on — a wait
    /// that outlasts it fails the op with `HcclTimeoutError` — in seconds
    /// or a timedelta, kept to the millisecond; None (or infinity): no
    /// bound. A wait under way counts from when it began.
    fn set_exec_timeout(&self, py: Python<'_>, timeout: &Bound<'_, PyAny>) -> PyResult<()> {
        let sh = self.shared(py)?;
        let t = if timeout.is_none() {
            None
        } else {
            duration(timeout, "exec_timeout")?
        };
        sh.comm.set_exec_timeout(t);
        Ok(())
    }

    /// The bound on waits in force, in seconds (None: no bound).
    #[getter]
    fn exec_timeout(&self, py: Python<'_>) -> PyResult<Option<f64>> {
        Ok(self
            .shared(py)?
            .comm
            .exec_timeout()
            .map(|d| d.as_secs_f64()))
    }

    /// What broke the communicator in the background (a revocation, an
    /// abort, a lost peer or broken link: HCCL's `HcclGetCommAsyncError`),
    /// as an exception object, or None.
    fn async_error(&self, py: Python<'_>) -> PyResult<Option<Py<PyAny>>> {
        let sh = self.shared(py)?;
        Ok(sh
            .comm
            .async_error()
            .map(|e| errors::to_py(py, e).into_value(py).into_any()))
    }

    /// Releases the communicator (buffers, links, threads) once the ops
    /// still referenced by `Work` handles are done; later calls raise.
    /// Idempotent.
    fn destroy(&self, py: Python<'_>) {
        let sh = self.live.write().unwrap_or_else(|p| p.into_inner()).take();
        // the last handle's drop joins threads: not with the GIL held
        py.detach(move || drop(sh));
    }

    fn __enter__(slf: Py<Self>) -> Py<Self> {
        slf
    }

    #[pyo3(signature = (*_exc))]
    fn __exit__(&self, py: Python<'_>, _exc: &Bound<'_, PyTuple>) -> bool {
        self.destroy(py);
        false
    }

    fn __repr__(&self) -> String {
        format!(
            "<hccl_rs.Comm '{}' rank {} of {}{}>",
            self.name,
            self.rank,
            self.size,
            if self.destroyed() { ", destroyed" } else { "" }
        )
    }

    // ---- collectives (argument handling in `ops`) ----

    /// AllReduce: every rank's `sendbuf` reduced with `op` (`"sum"`,
    /// `"prod"`, `"max"`, `"min"`) into every rank's `recvbuf` (same type,
    /// at least as long), or in place into `sendbuf` when `recvbuf` is None.
    #[pyo3(signature = (sendbuf, recvbuf = None, op = None))]
    fn all_reduce(
        &self,
        py: Python<'_>,
        sendbuf: &Bound<'_, PyAny>,
        recvbuf: Option<&Bound<'_, PyAny>>,
        op: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<()> {
        ops::run(
            py,
            &self.shared(py)?,
            Op::all_reduce(sendbuf, recvbuf, op)?,
            false,
        )
        .map(drop)
    }

    /// `all_reduce`, returning a `Work` at once.
    #[pyo3(signature = (sendbuf, recvbuf = None, op = None))]
    fn all_reduce_async(
        &self,
        py: Python<'_>,
        sendbuf: &Bound<'_, PyAny>,
        recvbuf: Option<&Bound<'_, PyAny>>,
        op: Option<&Bound<'_, PyAny>>,
    ) -> OpResult {
        ops::run(
            py,
            &self.shared(py)?,
            Op::all_reduce(sendbuf, recvbuf, op)?,
            true,
        )
    }

    /// AllGather: every rank's `sendbuf`, in rank order, into every rank's
    /// `recvbuf` (`size` times as long).
    fn all_gather(
        &self,
        py: Python<'_>,
        sendbuf: &Bound<'_, PyAny>,
        recvbuf: &Bound<'_, PyAny>,
    ) -> PyResult<()> {
        ops::run(
            py,
            &self.shared(py)?,
            Op::all_gather(sendbuf, recvbuf)?,
            false,
        )
        .map(drop)
    }

    /// `all_gather`, returning a `Work` at once.
    fn all_gather_async(
        &self,
        py: Python<'_>,
        sendbuf: &Bound<'_, PyAny>,
        recvbuf: &Bound<'_, PyAny>,
    ) -> OpResult {
        ops::run(
            py,
            &self.shared(py)?,
            Op::all_gather(sendbuf, recvbuf)?,
            true,
        )
    }

    /// AllGatherV: rank q's `sendbuf` (`recv_counts[q]` elements) lands at
    /// element `recv_displs[q]` of every `recvbuf` (displacements packed in
    /// rank order when None).
    #[pyo3(signature = (sendbuf, recvbuf, recv_counts, recv_displs = None))]
    fn all_gather_v(
        &self,
        py: Python<'_>,
        sendbuf: &Bound<'_, PyAny>,
        recvbuf: &Bound<'_, PyAny>,
        recv_counts: Vec<u64>,
        recv_displs: Option<Vec<u64>>,
    ) -> PyResult<()> {
        let op = Op::all_gather_v(sendbuf, recvbuf, recv_counts, recv_displs)?;
        ops::run(py, &self.shared(py)?, op, false).map(drop)
    }

    /// `all_gather_v`, returning a `Work` at once.
    #[pyo3(signature = (sendbuf, recvbuf, recv_counts, recv_displs = None))]
    fn all_gather_v_async(
        &self,
        py: Python<'_>,
        sendbuf: &Bound<'_, PyAny>,
        recvbuf: &Bound<'_, PyAny>,
        recv_counts: Vec<u64>,
        recv_displs: Option<Vec<u64>>,
    ) -> OpResult {
        let op = Op::all_gather_v(sendbuf, recvbuf, recv_counts, recv_displs)?;
        ops::run(py, &self.shared(py)?, op, true)
    }

    /// ReduceScatter: block r (`len(recvbuf)` elements) of the reduction of
    /// every rank's `sendbuf` (`size` blocks) into rank r's `recvbuf`.
    #[pyo3(signature = (sendbuf, recvbuf, op = None))]
    fn reduce_scatter(
        &self,
        py: Python<'_>,
        sendbuf: &Bound<'_, PyAny>,
        recvbuf: &Bound<'_, PyAny>,
        op: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<()> {
        let o = Op::reduce_scatter(sendbuf, recvbuf, op)?;
        ops::run(py, &self.shared(py)?, o, false).map(drop)
    }

    /// `reduce_scatter`, returning a `Work` at once.
    #[pyo3(signature = (sendbuf, recvbuf, op = None))]
    fn reduce_scatter_async(
        &self,
        py: Python<'_>,
        sendbuf: &Bound<'_, PyAny>,
        recvbuf: &Bound<'_, PyAny>,
        op: Option<&Bound<'_, PyAny>>,
    ) -> OpResult {
        let o = Op::reduce_scatter(sendbuf, recvbuf, op)?;
        ops::run(py, &self.shared(py)?, o, true)
    }

    /// ReduceScatterV: rank q receives in `recvbuf` the reduction of every
    /// rank's `send_counts[q]` elements at `send_displs[q]` (packed when
    /// None); `len(recvbuf)` must be `send_counts[rank]`.
    #[pyo3(signature = (sendbuf, recvbuf, send_counts, send_displs = None, op = None))]
    fn reduce_scatter_v(
        &self,
        py: Python<'_>,
        sendbuf: &Bound<'_, PyAny>,
        recvbuf: &Bound<'_, PyAny>,
        send_counts: Vec<u64>,
        send_displs: Option<Vec<u64>>,
        op: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<()> {
        let o = Op::reduce_scatter_v(sendbuf, recvbuf, send_counts, send_displs, op)?;
        ops::run(py, &self.shared(py)?, o, false).map(drop)
    }

    /// `reduce_scatter_v`, returning a `Work` at once.
    #[pyo3(signature = (sendbuf, recvbuf, send_counts, send_displs = None, op = None))]
    fn reduce_scatter_v_async(
        &self,
        py: Python<'_>,
        sendbuf: &Bound<'_, PyAny>,
        recvbuf: &Bound<'_, PyAny>,
        send_counts: Vec<u64>,
        send_displs: Option<Vec<u64>>,
        op: Option<&Bound<'_, PyAny>>,
    ) -> OpResult {
        let o = Op::reduce_scatter_v(sendbuf, recvbuf, send_counts, send_displs, op)?;
        ops::run(py, &self.shared(py)?, o, true)
    }

    /// Broadcast of `buf` from `root` into every rank's `buf`.
    #[pyo3(signature = (buf, root = 0))]
    fn broadcast(&self, py: Python<'_>, buf: &Bound<'_, PyAny>, root: u32) -> PyResult<()> {
        ops::run(py, &self.shared(py)?, Op::broadcast(buf, root)?, false).map(drop)
    }

    /// `broadcast`, returning a `Work` at once.
    #[pyo3(signature = (buf, root = 0))]
    fn broadcast_async(&self, py: Python<'_>, buf: &Bound<'_, PyAny>, root: u32) -> OpResult {
        ops::run(py, &self.shared(py)?, Op::broadcast(buf, root)?, true)
    }

    /// Reduce: every rank's `sendbuf` reduced with `op` into `root`'s
    /// `recvbuf` (in place into `sendbuf` when None; unused off root).
    #[pyo3(signature = (sendbuf, recvbuf = None, op = None, root = 0))]
    fn reduce(
        &self,
        py: Python<'_>,
        sendbuf: &Bound<'_, PyAny>,
        recvbuf: Option<&Bound<'_, PyAny>>,
        op: Option<&Bound<'_, PyAny>>,
        root: u32,
    ) -> PyResult<()> {
        let o = Op::reduce(sendbuf, recvbuf, op, root, self.rank)?;
        ops::run(py, &self.shared(py)?, o, false).map(drop)
    }

    /// `reduce`, returning a `Work` at once.
    #[pyo3(signature = (sendbuf, recvbuf = None, op = None, root = 0))]
    fn reduce_async(
        &self,
        py: Python<'_>,
        sendbuf: &Bound<'_, PyAny>,
        recvbuf: Option<&Bound<'_, PyAny>>,
        op: Option<&Bound<'_, PyAny>>,
        root: u32,
    ) -> OpResult {
        let o = Op::reduce(sendbuf, recvbuf, op, root, self.rank)?;
        ops::run(py, &self.shared(py)?, o, true)
    }

    /// Scatter: block r of `root`'s `sendbuf` (`size` blocks of
    /// `len(recvbuf)`) into rank r's `recvbuf`; `sendbuf` may be None off
    /// root.
    #[pyo3(signature = (sendbuf, recvbuf, root = 0))]
    fn scatter(
        &self,
        py: Python<'_>,
        sendbuf: Option<&Bound<'_, PyAny>>,
        recvbuf: &Bound<'_, PyAny>,
        root: u32,
    ) -> PyResult<()> {
        let o = Op::scatter(sendbuf, recvbuf, root, self.rank)?;
        ops::run(py, &self.shared(py)?, o, false).map(drop)
    }

    /// `scatter`, returning a `Work` at once.
    #[pyo3(signature = (sendbuf, recvbuf, root = 0))]
    fn scatter_async(
        &self,
        py: Python<'_>,
        sendbuf: Option<&Bound<'_, PyAny>>,
        recvbuf: &Bound<'_, PyAny>,
        root: u32,
    ) -> OpResult {
        let o = Op::scatter(sendbuf, recvbuf, root, self.rank)?;
        ops::run(py, &self.shared(py)?, o, true)
    }

    /// Gather: every rank's `sendbuf`, in rank order, into `root`'s
    /// `recvbuf` (`size` times as long; may be None off root).
    #[pyo3(signature = (sendbuf, recvbuf, root = 0))]
    fn gather(
        &self,
        py: Python<'_>,
        sendbuf: &Bound<'_, PyAny>,
        recvbuf: Option<&Bound<'_, PyAny>>,
        root: u32,
    ) -> PyResult<()> {
        let o = Op::gather(sendbuf, recvbuf, root, self.rank)?;
        ops::run(py, &self.shared(py)?, o, false).map(drop)
    }

    /// `gather`, returning a `Work` at once.
    #[pyo3(signature = (sendbuf, recvbuf, root = 0))]
    fn gather_async(
        &self,
        py: Python<'_>,
        sendbuf: &Bound<'_, PyAny>,
        recvbuf: Option<&Bound<'_, PyAny>>,
        root: u32,
    ) -> OpResult {
        let o = Op::gather(sendbuf, recvbuf, root, self.rank)?;
        ops::run(py, &self.shared(py)?, o, true)
    }

    /// AllToAll: block q of `sendbuf` (`size` equal blocks) goes to rank q;
    /// rank q's block lands at block q of `recvbuf`.
    fn all_to_all(
        &self,
        py: Python<'_>,
        sendbuf: &Bound<'_, PyAny>,
        recvbuf: &Bound<'_, PyAny>,
    ) -> PyResult<()> {
        let o = Op::all_to_all(sendbuf, recvbuf, self.size)?;
        ops::run(py, &self.shared(py)?, o, false).map(drop)
    }

    /// `all_to_all`, returning a `Work` at once.
    fn all_to_all_async(
        &self,
        py: Python<'_>,
        sendbuf: &Bound<'_, PyAny>,
        recvbuf: &Bound<'_, PyAny>,
    ) -> OpResult {
        let o = Op::all_to_all(sendbuf, recvbuf, self.size)?;
        ops::run(py, &self.shared(py)?, o, true)
    }

    /// AllToAllV: `send_counts[q]` elements at `send_displs[q]` go to rank
    /// q; rank q's `recv_counts[q]` land at `recv_displs[q]` (displacements
    /// packed in rank order when None).
    #[pyo3(signature = (sendbuf, recvbuf, send_counts, recv_counts, send_displs = None, recv_displs = None))]
    #[allow(clippy::too_many_arguments)]
    fn all_to_all_v(
        &self,
        py: Python<'_>,
        sendbuf: &Bound<'_, PyAny>,
        recvbuf: &Bound<'_, PyAny>,
        send_counts: Vec<u64>,
        recv_counts: Vec<u64>,
        send_displs: Option<Vec<u64>>,
        recv_displs: Option<Vec<u64>>,
    ) -> PyResult<()> {
        let o = Op::all_to_all_v(
            sendbuf,
            recvbuf,
            send_counts,
            recv_counts,
            send_displs,
            recv_displs,
        )?;
        ops::run(py, &self.shared(py)?, o, false).map(drop)
    }

    /// `all_to_all_v`, returning a `Work` at once.
    #[pyo3(signature = (sendbuf, recvbuf, send_counts, recv_counts, send_displs = None, recv_displs = None))]
    #[allow(clippy::too_many_arguments)]
    fn all_to_all_v_async(
        &self,
        py: Python<'_>,
        sendbuf: &Bound<'_, PyAny>,
        recvbuf: &Bound<'_, PyAny>,
        send_counts: Vec<u64>,
        recv_counts: Vec<u64>,
        send_displs: Option<Vec<u64>>,
        recv_displs: Option<Vec<u64>>,
    ) -> OpResult {
        let o = Op::all_to_all_v(
            sendbuf,
            recvbuf,
            send_counts,
            recv_counts,
            send_displs,
            recv_displs,
        )?;
        ops::run(py, &self.shared(py)?, o, true)
    }

    /// Send: all of `buf` to rank `dest`, which must post a matching
    /// `recv`.
    fn send(&self, py: Python<'_>, buf: &Bound<'_, PyAny>, dest: u32) -> PyResult<()> {
        ops::run(py, &self.shared(py)?, Op::send(buf, dest)?, false).map(drop)
    }

    /// `send`, returning a `Work` at once.
    fn send_async(&self, py: Python<'_>, buf: &Bound<'_, PyAny>, dest: u32) -> OpResult {
        ops::run(py, &self.shared(py)?, Op::send(buf, dest)?, true)
    }

    /// Receive: `len(buf)` elements from rank `source` into `buf`.
    /// Receives run beside sends, so a rank's `send_async` and
    /// `recv_async` may be in flight together.
    fn recv(&self, py: Python<'_>, buf: &Bound<'_, PyAny>, source: u32) -> PyResult<()> {
        ops::run(py, &self.shared(py)?, Op::recv(buf, source)?, false).map(drop)
    }

    /// `recv`, returning a `Work` at once.
    fn recv_async(&self, py: Python<'_>, buf: &Bound<'_, PyAny>, source: u32) -> OpResult {
        ops::run(py, &self.shared(py)?, Op::recv(buf, source)?, true)
    }

    /// Batched point-to-point transfers (HCCL's `HcclBatchSendRecv`):
    /// `items` is a sequence of `("send", buf, peer)` and
    /// `("recv", buf, peer)`; the batch completes when all have. Items to
    /// one peer in one direction keep their order, which must match the
    /// peer's.
    fn batch_send_recv(&self, py: Python<'_>, items: &Bound<'_, PyAny>) -> PyResult<()> {
        let o = Op::batch_send_recv(items)?;
        ops::run(py, &self.shared(py)?, o, false).map(drop)
    }

    /// `batch_send_recv`, returning a `Work` at once.
    fn batch_send_recv_async(&self, py: Python<'_>, items: &Bound<'_, PyAny>) -> OpResult {
        let o = Op::batch_send_recv(items)?;
        ops::run(py, &self.shared(py)?, o, true)
    }

    /// Barrier: returns once every rank has reached it.
    fn barrier(&self, py: Python<'_>) -> PyResult<()> {
        ops::run(py, &self.shared(py)?, Op::barrier(), false).map(drop)
    }

    /// `barrier`, returning a `Work` at once.
    fn barrier_async(&self, py: Python<'_>) -> OpResult {
        ops::run(py, &self.shared(py)?, Op::barrier(), true)
    }
}

/// Root info (or a grow id, which is root info) from the bytes Python
/// passed.
fn root_info(py: Python<'_>, b: &[u8], what: &str) -> PyResult<RootInfo> {
    let bytes: [u8; HCCL_ROOT_INFO_BYTES] = b.try_into().map_err(|_| {
        let from = if what == "id" {
            "grow_id()"
        } else {
            "get_root_info()"
        };
        errors::para(
            py,
            format!(
                "{what} must be the {HCCL_ROOT_INFO_BYTES} bytes {from} returned, got {}",
                b.len()
            ),
        )
    })?;
    Ok(RootInfo(bytes))
}

/// Under torchrun (whose agent serves its store at `MASTER_PORT`), and
/// under an MPI or Slurm launcher (`hccl_rs._launch.fill_env` fills torch's
/// variables, the store then taking `MASTER_PORT`), points the rendezvous
/// at `MASTER_PORT + 1` unless `HCCL_ROOT_ADDR` says where.
fn meet_beside_torchrun(py: Python<'_>) -> PyResult<()> {
    let environ = py.import("os")?.getattr("environ")?;
    let get =
        |k: &str| -> PyResult<Option<String>> { environ.call_method1("get", (k,))?.extract() };
    if get("HCCL_ROOT_ADDR")?.is_some() {
        return Ok(());
    }
    if get("HCCL_RS_ROOT_FILE")?.is_none() {
        py.import("hccl_rs._launch")?.call_method0("fill_env")?;
    }
    if get("TORCHELASTIC_RUN_ID")?.is_none() && get("HCCL_RS_LAUNCHER")?.is_none() {
        return Ok(());
    }
    let (Some(addr), Some(port)) = (get("MASTER_ADDR")?, get("MASTER_PORT")?) else {
        return Ok(());
    };
    let port: u16 = port.trim().parse().map_err(|_| {
        errors::para(
            py,
            format!("environment variable MASTER_PORT='{port}' is invalid: not a port"),
        )
    })?;
    let port = port
        .checked_add(1)
        .ok_or_else(|| errors::para(py, "MASTER_PORT is 65535: no port above it to meet at"))?;
    let at = (addr.trim(), port)
        .to_socket_addrs()
        .ok()
        .and_then(|mut a| a.next())
        .ok_or_else(|| {
            errors::para(
                py,
                format!("environment variable MASTER_ADDR='{addr}' does not resolve to an address"),
            )
        })?
        .to_string();
    tracing::debug!(at, "torchrun: meeting beside its store");
    environ.set_item("HCCL_ROOT_ADDR", at)?;
    Ok(())
}

/// The id every member of a split computes alike: from the parent's name,
/// the member list and how many times this list has split the parent.
fn split_id(parent: &str, ranks: &[u32], nth: u64) -> u64 {
    // FNV-1a: stable across processes (std's hasher is seeded)
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    let mut eat = |bytes: &[u8]| {
        for b in bytes {
            h ^= u64::from(*b);
            h = h.wrapping_mul(0x0100_0000_01b3);
        }
    };
    eat(parent.as_bytes());
    for r in ranks {
        eat(&r.to_le_bytes());
    }
    eat(&nth.to_le_bytes());
    h
}
