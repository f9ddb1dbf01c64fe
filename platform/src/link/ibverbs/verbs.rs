//! The verbs this transport uses, over `ibverbs-sys` (the raw bindings
//! under the `ibverbs` crate, which wraps devices but posts only
//! SEND/RECV): a device context with its protection domain, completion
//! queue and completion channel; memory regions; reliable-connected
//! queue pairs. Every `unsafe` of the transport is here.
//!
//! `ibv_post_send`, `ibv_post_recv`, `ibv_poll_cq` and
//! `ibv_req_notify_cq` are static inlines in `verbs.h`, so they are
//! called through the context's ops table as the header does.

use super::qp::{QpState, Step};
use crate::error::{HcclError, Result};
use ibverbs_sys as ffi;
use std::ffi::CStr;
use std::os::fd::RawFd;
use std::ptr;

/// A completion, reduced to what the transport reads.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Completion {
    pub ok: bool,
    /// `ibv_wc_status_str` of a failed one.
    pub status: &'static str,
    /// A receive (a write-with-immediate arrived) rather than a send.
    pub recv: bool,
    pub imm: u32,
    pub qpn: u32,
}

/// The names of the RDMA devices of this machine (through the `ibverbs`
/// crate). An error when the verbs library or kernel support is missing.
pub(crate) fn device_names() -> std::io::Result<Vec<String>> {
    let list = ibverbs::devices()?;
    Ok(list
        .iter()
        .filter_map(|d| d.name().map(|n| n.to_string_lossy().into_owned()))
        .collect())
}

/// Whether `name` is a software device (Soft-RoCE `rxe`, soft iWARP
/// `siw`): its "NIC" work runs in the kernel on this host's own cores.
pub(crate) fn is_software(name: &str) -> bool {
    name.starts_with("rxe")
        || name.starts_with("siw")
        || !std::path::Path::new(&format!("/sys/class/infiniband/{name}/device")).exists()
}

/// A port's properties the transport needs.
#[derive(Clone, Copy, Debug)]
pub(crate) struct PortInfo {
    pub lid: u16,
    pub link_layer: u8,
    pub active_mtu: u8,
    pub max_msg: u32,
    pub active: bool,
}

/// An opened device: context, protection domain, one completion queue for
/// every queue pair of this rank (so whoever polls drains them all) and
/// its completion channel.
#[derive(Debug)]
pub(crate) struct DeviceCtx {
    ctx: *mut ffi::ibv_context,
    pd: *mut ffi::ibv_pd,
    channel: *mut ffi::ibv_comp_channel,
    cq: *mut ffi::ibv_cq,
    pub name: String,
    pub port: u8,
    pub port_info: PortInfo,
    pub gid_index: u8,
    pub gid: [u8; 16],
}

// SAFETY: libibverbs objects may be used from any thread (the providers
// lock what they share); the pointers are owned by this struct and freed
// only in Drop, after every user (queue pairs and regions hold an Arc of
// the DeviceCtx) is gone.
unsafe impl Send for DeviceCtx {}
// SAFETY: as above; the methods taking &self call thread-safe verbs.
unsafe impl Sync for DeviceCtx {}

fn err(what: &str, name: &str) -> HcclError {
    HcclError::roce_connect(format!(
        "{what} on RDMA device {name}: {}",
        std::io::Error::last_os_error()
    ))
}

/// The GID type of `index` as sysfs names it ("RoCE v2", "IB/RoCE v1").
fn gid_type(dev: &str, port: u8, index: u32) -> String {
    std::fs::read_to_string(format!(
        "/sys/class/infiniband/{dev}/ports/{port}/gid_attrs/types/{index}"
    ))
    .map(|s| s.trim().to_owned())
    .unwrap_or_default()
}

impl DeviceCtx {
    /// Opens device `name` at `port`, with GID `gid_index` or, when
    /// `None`, the first RoCE v2 GID holding an IPv4 address (else the
    /// first non-zero one; index 0 on InfiniBand). `cq_depth` sizes the
    /// shared completion queue.
    pub fn open(name: &str, port: u8, gid_index: Option<u8>, cq_depth: i32) -> Result<DeviceCtx> {
        // SAFETY: the list is freed below after the device was opened
        // (an opened context stays valid after ibv_free_device_list).
        let ctx = unsafe {
            let mut n = 0;
            let list = ffi::ibv_get_device_list(&mut n);
            if list.is_null() {
                return Err(err("listing devices", name));
            }
            let mut found = ptr::null_mut();
            for i in 0..n.max(0) as usize {
                let d = *list.add(i);
                if CStr::from_ptr(ffi::ibv_get_device_name(d)).to_bytes() == name.as_bytes() {
                    found = ffi::ibv_open_device(d);
                    break;
                }
            }
            ffi::ibv_free_device_list(list);
            found
        };
        if ctx.is_null() {
            return Err(HcclError::roce_connect(format!(
                "RDMA device {name} not found or could not be opened"
            )));
        }
        let mut me = DeviceCtx {
            ctx,
            pd: ptr::null_mut(),
            channel: ptr::null_mut(),
            cq: ptr::null_mut(),
            name: name.to_owned(),
            port,
            port_info: PortInfo {
                lid: 0,
                link_layer: 0,
                active_mtu: 0,
                max_msg: 0,
                active: false,
            },
            gid_index: 0,
            gid: [0; 16],
        };
        // SAFETY: `ctx` is an open context; the attribute structs are
        // plain C data written by the calls; every object created is
        // stored in `me`, whose Drop frees it (also on the error returns).
        unsafe {
            let mut attr: ffi::ibv_port_attr = std::mem::zeroed();
            if ffi::ibv_query_port(ctx, port, (&mut attr as *mut ffi::ibv_port_attr).cast()) != 0 {
                return Err(err(&format!("querying port {port}"), name));
            }
            me.port_info = PortInfo {
                lid: attr.lid,
                link_layer: attr.link_layer,
                active_mtu: attr.active_mtu as u8,
                max_msg: attr.max_msg_sz,
                active: attr.state == ffi::ibv_port_state::IBV_PORT_ACTIVE,
            };
            let index = match gid_index {
                Some(i) => i,
                None => me.discover_gid(attr.gid_tbl_len.max(0) as u32),
            };
            let mut gid: ffi::ibv_gid = std::mem::zeroed();
            if ffi::ibv_query_gid(ctx, port, i32::from(index), &mut gid) != 0 {
                return Err(err(&format!("reading GID index {index}"), name));
            }
            me.gid_index = index;
            me.gid = gid.raw;
            me.pd = ffi::ibv_alloc_pd(ctx);
            if me.pd.is_null() {
                return Err(err("allocating a protection domain", name));
            }
            me.channel = ffi::ibv_create_comp_channel(ctx);
            if me.channel.is_null() {
                return Err(err("creating a completion channel", name));
            }
            set_nonblocking((*me.channel).fd);
            me.cq = ffi::ibv_create_cq(ctx, cq_depth, ptr::null_mut(), me.channel, 0);
            if me.cq.is_null() {
                return Err(err(
                    &format!("creating a completion queue of {cq_depth}"),
                    name,
                ));
            }
        }
        Ok(me)
    }

    /// The first RoCE v2 GID with an IPv4 address, else the first
    /// non-zero one, else 0.
    fn discover_gid(&self, len: u32) -> u8 {
        let mut first_nonzero = None;
        for i in 0..len.min(256) {
            // SAFETY: an open context; `gid` is written by the call.
            let raw = unsafe {
                let mut gid: ffi::ibv_gid = std::mem::zeroed();
                if ffi::ibv_query_gid(self.ctx, self.port, i as i32, &mut gid) != 0 {
                    continue;
                }
                gid.raw
            };
            if raw == [0; 16] {
                continue;
            }
            let v4 = raw[..10] == [0; 10] && raw[10..12] == [0xff, 0xff];
            if v4 && gid_type(&self.name, self.port, i).contains("v2") {
                return i as u8;
            }
            first_nonzero.get_or_insert(i as u8);
        }
        first_nonzero.unwrap_or(0)
    }

    /// The completion channel's file descriptor (non-blocking): readable
    /// when an armed completion queue has a completion.
    pub fn channel_fd(&self) -> RawFd {
        // SAFETY: the channel lives as long as self.
        unsafe { (*self.channel).fd }
    }

    /// Asks for an event on the channel at the next completion.
    pub fn arm(&self) {
        // SAFETY: an open CQ; the ops table entry is set by every provider.
        unsafe {
            if let Some(f) = (*(*self.cq).context).ops.req_notify_cq {
                f(self.cq, 0);
            }
        }
    }

    /// Consumes the channel's pending events (non-blocking).
    pub fn take_events(&self) {
        loop {
            let mut cq = ptr::null_mut();
            let mut cq_ctx = ptr::null_mut();
            // SAFETY: the channel fd is non-blocking, so this returns -1
            // at once when nothing is pending; the event is acknowledged
            // (CQ destruction waits for every event to be acked).
            let r = unsafe { ffi::ibv_get_cq_event(self.channel, &mut cq, &mut cq_ctx) };
            if r != 0 {
                break;
            }
            // SAFETY: `cq` is the queue the event was for (ours).
            unsafe { ffi::ibv_ack_cq_events(cq, 1) };
        }
    }

    /// Polls up to `out.len()` completions.
    pub fn poll(&self, out: &mut Vec<Completion>, max: usize) -> Result<()> {
        let mut wcs = [ffi::ibv_wc::default(); 16];
        let n = max.min(wcs.len()) as i32;
        // SAFETY: an open CQ; `wcs` has room for `n` entries.
        let got = unsafe {
            match (*(*self.cq).context).ops.poll_cq {
                Some(f) => f(self.cq, n, wcs.as_mut_ptr()),
                None => -1,
            }
        };
        if got < 0 {
            return Err(HcclError::roce_transfer(format!(
                "polling the completion queue of {} failed",
                self.name
            )));
        }
        for wc in &wcs[..got as usize] {
            let status = match wc.error() {
                None => "success",
                // SAFETY: returns a static string for any status value.
                Some((s, _)) => unsafe {
                    CStr::from_ptr(ffi::ibv_wc_status_str(s))
                        .to_str()
                        .unwrap_or("unknown status")
                },
            };
            out.push(Completion {
                ok: wc.is_valid(),
                status,
                recv: wc.opcode() == ffi::ibv_wc_opcode::IBV_WC_RECV_RDMA_WITH_IMM,
                imm: u32::from_be(wc.imm_data),
                qpn: wc.qp_num,
            });
        }
        Ok(())
    }

    /// Registers `[addr, addr + len)` for local and remote writes.
    ///
    /// # Safety
    /// The range must stay mapped until the returned region is dropped.
    pub unsafe fn register(&self, addr: *mut u8, len: usize) -> Result<Mr> {
        let access = ffi::ibv_access_flags::IBV_ACCESS_LOCAL_WRITE
            | ffi::ibv_access_flags::IBV_ACCESS_REMOTE_WRITE
            | ffi::ibv_access_flags::IBV_ACCESS_REMOTE_READ;
        // SAFETY: the caller keeps the range mapped while registered.
        let mr = unsafe { ffi::ibv_reg_mr(self.pd, addr.cast(), len.max(1), access.0 as i32) };
        if mr.is_null() {
            return Err(HcclError::memory(format!(
                "registering {len} bytes with RDMA device {}: {}",
                self.name,
                std::io::Error::last_os_error()
            )));
        }
        Ok(Mr(mr))
    }

    /// A reliable-connected queue pair on the shared completion queue.
    pub fn create_qp(&self, send_depth: u32, recv_depth: u32) -> Result<Qp> {
        for inline in [256u32, 64, 0] {
            let mut init = ffi::ibv_qp_init_attr {
                send_cq: self.cq,
                recv_cq: self.cq,
                qp_type: ffi::ibv_qp_type::IBV_QPT_RC,
                ..Default::default()
            };
            init.cap = ffi::ibv_qp_cap {
                max_send_wr: send_depth,
                max_recv_wr: recv_depth,
                max_send_sge: 1,
                max_recv_sge: 1,
                max_inline_data: inline,
            };
            // SAFETY: an open PD; `init` is plain C data the call reads
            // and updates with the granted capabilities.
            let qp = unsafe { ffi::ibv_create_qp(self.pd, &mut init) };
            if !qp.is_null() {
                return Ok(Qp {
                    qp,
                    max_inline: init.cap.max_inline_data,
                });
            }
        }
        Err(err("creating a queue pair", &self.name))
    }
}

/// Makes the completion channel's descriptor non-blocking (the progress
/// thread polls it; `take_events` must not block).
fn set_nonblocking(fd: RawFd) {
    // SAFETY: `fd` is the completion channel's descriptor, alive while the
    // channel is; borrowed only for these calls.
    let bfd = unsafe { std::os::fd::BorrowedFd::borrow_raw(fd) };
    if let Ok(flags) = rustix::fs::fcntl_getfl(bfd) {
        let _ = rustix::fs::fcntl_setfl(bfd, flags | rustix::fs::OFlags::NONBLOCK);
    }
}

impl Drop for DeviceCtx {
    fn drop(&mut self) {
        // SAFETY: each object was created by this struct and is destroyed
        // once, children before parents; queue pairs and regions (which
        // hold an Arc of this struct) are already gone.
        unsafe {
            if !self.cq.is_null() {
                ffi::ibv_destroy_cq(self.cq);
            }
            if !self.channel.is_null() {
                ffi::ibv_destroy_comp_channel(self.channel);
            }
            if !self.pd.is_null() {
                ffi::ibv_dealloc_pd(self.pd);
            }
            ffi::ibv_close_device(self.ctx);
        }
    }
}

/// A registered memory region.
#[derive(Debug)]
pub(crate) struct Mr(*mut ffi::ibv_mr);

// SAFETY: an ibv_mr is immutable after registration; deregistered once.
unsafe impl Send for Mr {}
// SAFETY: as above.
unsafe impl Sync for Mr {}

impl Mr {
    /// The local key.
    pub fn lkey(&self) -> u32 {
        // SAFETY: registered and alive.
        unsafe { (*self.0).lkey }
    }
    /// The remote key.
    pub fn rkey(&self) -> u32 {
        // SAFETY: registered and alive.
        unsafe { (*self.0).rkey }
    }
}

impl Drop for Mr {
    fn drop(&mut self) {
        // SAFETY: registered by DeviceCtx::register, deregistered once.
        unsafe { ffi::ibv_dereg_mr(self.0) };
    }
}

/// A reliable-connected queue pair.
#[derive(Debug)]
pub(crate) struct Qp {
    qp: *mut ffi::ibv_qp,
    /// Bytes a send may carry inline.
    pub max_inline: u32,
}

// SAFETY: posting to one QP from several threads is allowed by verbs (the
// provider locks the queue); the transport also serializes its posts.
unsafe impl Send for Qp {}
// SAFETY: as above.
unsafe impl Sync for Qp {}

/// One RDMA write to post.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Write {
    pub wr_id: u64,
    pub local: u64,
    pub len: u32,
    pub lkey: u32,
    pub remote: u64,
    pub rkey: u32,
    /// Write-with-immediate carrying this value.
    pub imm: Option<u32>,
    /// Copy the bytes into the work request (the source is free at once).
    pub inline: bool,
}

impl Qp {
    /// The queue pair number.
    pub fn qpn(&self) -> u32 {
        // SAFETY: alive.
        unsafe { (*self.qp).qp_num }
    }

    /// Performs one step of set-up (see `qp.rs`).
    pub fn modify(&self, s: &Step) -> Result<()> {
        let state = match s.to {
            QpState::Reset => ffi::ibv_qp_state::IBV_QPS_RESET,
            QpState::Init => ffi::ibv_qp_state::IBV_QPS_INIT,
            QpState::Rtr => ffi::ibv_qp_state::IBV_QPS_RTR,
            QpState::Rts => ffi::ibv_qp_state::IBV_QPS_RTS,
        };
        let access = ffi::ibv_access_flags::IBV_ACCESS_LOCAL_WRITE
            | ffi::ibv_access_flags::IBV_ACCESS_REMOTE_WRITE
            | ffi::ibv_access_flags::IBV_ACCESS_REMOTE_READ;
        let mut a = ffi::ibv_qp_attr {
            qp_state: state,
            port_num: s.port,
            qp_access_flags: access.0,
            path_mtu: u32::from(s.path_mtu),
            dest_qp_num: s.dest_qpn,
            rq_psn: s.rq_psn,
            sq_psn: s.sq_psn,
            timeout: s.timeout,
            retry_cnt: s.retry_cnt,
            rnr_retry: s.rnr_retry,
            min_rnr_timer: s.min_rnr_timer,
            max_rd_atomic: s.max_rd_atomic,
            max_dest_rd_atomic: s.max_rd_atomic,
            ..Default::default()
        };
        a.ah_attr.port_num = s.port;
        a.ah_attr.dlid = s.dlid;
        a.ah_attr.is_global = u8::from(s.global);
        a.ah_attr.grh.dgid.raw = s.dgid;
        a.ah_attr.grh.sgid_index = s.sgid_index;
        a.ah_attr.grh.hop_limit = 64;
        // SAFETY: `a` is plain C data; the mask names the fields set.
        let r = unsafe { ffi::ibv_modify_qp(self.qp, &mut a, s.mask as i32) };
        if r != 0 {
            return Err(HcclError::roce_connect(format!(
                "moving queue pair {} to {:?}: {}",
                self.qpn(),
                s.to,
                std::io::Error::from_raw_os_error(r.abs())
            )));
        }
        Ok(())
    }

    /// Posts one receive with no buffer (a write-with-immediate carries
    /// its data to the address it names; the receive only takes the
    /// immediate).
    pub fn post_recv(&self, wr_id: u64) -> Result<()> {
        let mut wr = ffi::ibv_recv_wr {
            wr_id,
            next: ptr::null_mut(),
            sg_list: ptr::null_mut(),
            num_sge: 0,
        };
        let mut bad = ptr::null_mut();
        // SAFETY: an alive QP; `wr` lives across the call (the provider
        // copies it).
        let r = unsafe {
            match (*(*self.qp).context).ops.post_recv {
                Some(f) => f(self.qp, &mut wr, &mut bad),
                None => -1,
            }
        };
        if r != 0 {
            return Err(HcclError::roce_transfer(format!(
                "posting a receive on queue pair {}: error {r}",
                self.qpn()
            )));
        }
        Ok(())
    }

    /// Posts one signaled RDMA write.
    ///
    /// # Safety
    /// Unless `w.inline`, the local range must stay valid and unmodified
    /// until the write's completion is polled; it must lie in the region
    /// of `w.lkey`, and the remote range in the peer's region of `w.rkey`.
    pub unsafe fn post_write(&self, w: &Write) -> Result<()> {
        let mut sge = ffi::ibv_sge {
            addr: w.local,
            length: w.len,
            lkey: w.lkey,
        };
        // SAFETY: ibv_send_wr is plain C data (unions of integers).
        let mut wr: ffi::ibv_send_wr = unsafe { std::mem::zeroed() };
        wr.wr_id = w.wr_id;
        wr.sg_list = &mut sge;
        wr.num_sge = i32::from(w.len > 0);
        let mut flags = ffi::ibv_send_flags::IBV_SEND_SIGNALED.0;
        if w.inline {
            flags |= ffi::ibv_send_flags::IBV_SEND_INLINE.0;
        }
        wr.send_flags = flags;
        match w.imm {
            Some(v) => {
                wr.opcode = ffi::ibv_wr_opcode::IBV_WR_RDMA_WRITE_WITH_IMM;
                wr.__bindgen_anon_1.imm_data = v.to_be();
            }
            None => wr.opcode = ffi::ibv_wr_opcode::IBV_WR_RDMA_WRITE,
        }
        wr.wr.rdma = ffi::ibv_send_wr__bindgen_ty_2__bindgen_ty_1 {
            remote_addr: w.remote,
            rkey: w.rkey,
        };
        let mut bad = ptr::null_mut();
        // SAFETY: an alive QP; `wr` and `sge` live across the call; the
        // caller guarantees the ranges (see the function's contract).
        let r = unsafe {
            match (*(*self.qp).context).ops.post_send {
                Some(f) => f(self.qp, &mut wr, &mut bad),
                None => -1,
            }
        };
        if r != 0 {
            return Err(HcclError::roce_transfer(format!(
                "posting a write of {} bytes on queue pair {}: error {r}",
                w.len,
                self.qpn()
            )));
        }
        Ok(())
    }
}

impl Drop for Qp {
    fn drop(&mut self) {
        // SAFETY: created by DeviceCtx::create_qp, destroyed once.
        unsafe { ffi::ibv_destroy_qp(self.qp) };
    }
}
