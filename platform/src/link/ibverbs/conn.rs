//! One queue pair to one peer and what it has received.
//!
//! Every verb is an RDMA write: data (`TxAsync`) goes straight into the
//! peer's CCL buffer, its last write carrying the immediate `Done`;
//! acks and signals are zero-byte writes-with-immediate; a descriptor or
//! an abort reason is written into a slot of the peer's mailbox first.
//! The receiver counts what arrived (as the shared-memory link counts its
//! raises), reposts the receive and reports credits ([`super::credits`]).
//!
//! The mailbox (this end's, registered): a credit word the peer writes
//! (how many receives this end's peer has posted for it in all), then
//! `depth` slots the peer writes descriptors into, then `depth` slots this
//! end stages its own descriptors in (the slot of message `n` is
//! `n % depth` on both sides; credits keep a slot from being reused before
//! the peer handled it).

use super::credits::{RecvLedger, SendCredits};
use super::verbs::{DeviceCtx, Qp, Write};
use super::wire::{imm, parse_imm, Hello, ImmKind, RemoteBuf};
use crate::error::{HcclError, Result};
use crate::link::OpDesc;
use crate::mem::{DeviceMem, MemKind};
use crate::sync::{AtomicBool, AtomicU64, Mutex, Ordering};
use std::collections::VecDeque;
use std::net::TcpStream;
use std::sync::Arc;

/// Receives posted per link (and the sender's credits).
pub(crate) const RECV_DEPTH: u32 = 64;
/// Sends in flight per link at most.
pub(crate) const SEND_DEPTH: u32 = 128;
/// Bytes of a mailbox slot (an op descriptor or an abort reason).
pub(crate) const SLOT: usize = 256;
/// The credit word's line.
const CREDIT_AT: usize = 0;
/// Where the peer's slots start.
const IN_SLOTS_AT: usize = 128;
/// Where this end's staging slots start.
const OUT_SLOTS_AT: usize = IN_SLOTS_AT + RECV_DEPTH as usize * SLOT;
/// The source of credit reports, when the device sends nothing inline.
const REPORT_AT: usize = OUT_SLOTS_AT + RECV_DEPTH as usize * SLOT;
/// Bytes of a mailbox.
pub(crate) const MAILBOX_BYTES: usize = REPORT_AT + 128;
/// Largest single write (rxe and most NICs take 2 GiB; a port may say less).
const MAX_WRITE: u64 = 1 << 30;

/// What the sender's side keeps under its lock.
#[derive(Debug)]
struct SendState {
    credits: SendCredits,
    /// Writes posted (each signaled).
    posted: u64,
    /// A credit report waiting for room in the send queue.
    report: Option<u64>,
}

/// The counters and queues filled by completions.
#[derive(Debug, Default)]
pub(crate) struct Inbox {
    pub acks: AtomicU64,
    pub signals: AtomicU64,
    pub dones: AtomicU64,
    pub desc_count: AtomicU64,
    pub descs: Mutex<VecDeque<OpDesc>>,
    /// The peer sent an abort (its reason in `reason`).
    pub aborted: AtomicBool,
    /// This end was shut down, or the connection broke.
    pub failed: AtomicBool,
    /// The peer is gone without a goodbye.
    pub lost: AtomicBool,
    /// The peer said goodbye.
    pub closed: AtomicBool,
    pub reason: Mutex<String>,
}

/// One end of a queue-pair connection.
#[derive(Debug)]
pub(crate) struct Conn {
    pub peer: u32,
    pub peer_pid: u32,
    pub peer_device: String,
    /// Where the peer is, for messages ("host, device").
    pub peer_host: String,
    // field order: the queue pair and the registration go before the
    // device they belong to
    qp: Qp,
    mailbox_mr: super::verbs::Mr,
    mailbox: DeviceMem,
    pub dev: Arc<DeviceCtx>,
    pub remote_mailbox: RemoteBuf,
    pub remote_ccl: [RemoteBuf; 2],
    send: Mutex<SendState>,
    recv: Mutex<RecvLedger>,
    /// Completed sends (in order on a reliable connection).
    pub completed: AtomicU64,
    pub inbox: Inbox,
    /// The handshake socket, kept open: its end-of-file says the peer's
    /// process is gone.
    pub socket: TcpStream,
}

/// A queue pair being set up, with its mailbox and receives posted.
#[derive(Debug)]
pub(crate) struct Pending {
    pub qp: Qp,
    pub mailbox: DeviceMem,
    pub mailbox_mr: super::verbs::Mr,
}

impl Pending {
    /// A queue pair in INIT with its receives posted and a mailbox.
    pub fn new(dev: &DeviceCtx) -> Result<Pending> {
        let qp = dev.create_qp(SEND_DEPTH, RECV_DEPTH)?;
        let mailbox = DeviceMem::alloc(MAILBOX_BYTES)?;
        // SAFETY: `mailbox` is kept in the Conn beside its registration,
        // which is dropped first (field order).
        let mailbox_mr = unsafe { dev.register(mailbox.ptr(), mailbox.len())? };
        Ok(Pending {
            qp,
            mailbox,
            mailbox_mr,
        })
    }

    /// This end's half of the handshake.
    pub fn hello(&self, dev: &DeviceCtx, base: Hello, ccl: [(u64, u32, u64); 2]) -> Hello {
        let b = |(addr, rkey, len): (u64, u32, u64)| RemoteBuf { addr, rkey, len };
        Hello {
            qpn: self.qp.qpn(),
            lid: dev.port_info.lid,
            link_layer: dev.port_info.link_layer,
            mtu: dev.port_info.active_mtu,
            gid: dev.gid,
            recv_depth: RECV_DEPTH,
            mailbox: RemoteBuf {
                addr: self.mailbox.addr(),
                rkey: self.mailbox_mr.rkey(),
                len: MAILBOX_BYTES as u64,
            },
            ccl_input: b(ccl[0]),
            ccl_output: b(ccl[1]),
            device: dev.name.clone(),
            ..base
        }
    }

    /// Moves the queue pair to RTS towards `theirs` and posts the
    /// receives: a connection. `(timeout, retry_cnt)` bound the retries of
    /// a write to a peer that does not answer.
    pub fn connect(
        self,
        dev: Arc<DeviceCtx>,
        mine: &Hello,
        theirs: &Hello,
        (timeout, retry_cnt): (u8, u8),
        socket: TcpStream,
        peer_host: String,
    ) -> Result<Conn> {
        if theirs.recv_depth != RECV_DEPTH {
            return Err(HcclError::roce_connect(format!(
                "rank {} posts {} receives per link, this rank {RECV_DEPTH}: versions differ",
                theirs.from, theirs.recv_depth
            )));
        }
        let spec = super::qp::PathSpec {
            port: dev.port,
            gid_index: dev.gid_index,
            local_link_layer: dev.port_info.link_layer,
            local_mtu: dev.port_info.active_mtu,
            local_psn: mine.psn,
            remote_qpn: theirs.qpn,
            remote_psn: theirs.psn,
            remote_lid: theirs.lid,
            remote_gid: theirs.gid,
            remote_mtu: theirs.mtu,
            timeout,
            retry_cnt,
        };
        for i in 0..RECV_DEPTH {
            // receives may be posted from INIT on; post before RTR so the
            // peer's first write finds one
            if i == 0 {
                let init = super::qp::next_step(super::qp::QpState::Reset, &spec)
                    .expect("a step from RESET");
                self.qp.modify(&init)?;
            }
            self.qp.post_recv(1)?;
        }
        for step in super::qp::plan(&spec).iter().skip(1) {
            self.qp.modify(step)?;
        }
        let credit = self.word(CREDIT_AT);
        credit.store(u64::from(RECV_DEPTH), Ordering::Release);
        Ok(Conn {
            peer: theirs.from,
            peer_pid: theirs.pid,
            peer_device: theirs.device.clone(),
            peer_host,
            qp: self.qp,
            mailbox_mr: self.mailbox_mr,
            mailbox: self.mailbox,
            dev,
            remote_mailbox: theirs.mailbox,
            remote_ccl: [theirs.ccl_input, theirs.ccl_output],
            send: Mutex::new(SendState {
                credits: SendCredits { sent: 0 },
                posted: 0,
                report: None,
            }),
            recv: Mutex::new(RecvLedger::new(RECV_DEPTH)),
            completed: AtomicU64::new(0),
            inbox: Inbox::default(),
            socket,
        })
    }

    fn word(&self, at: usize) -> &std::sync::atomic::AtomicU64 {
        mailbox_word(&self.mailbox, at)
    }
}

/// The 8-byte word at `at` of a mailbox, as an atomic.
fn mailbox_word(mailbox: &DeviceMem, at: usize) -> &std::sync::atomic::AtomicU64 {
    assert!(at + 8 <= mailbox.len() && at % 8 == 0);
    // SAFETY: in bounds and 8-aligned (asserted; the allocation is page
    // aligned); the mailbox lives as long as the returned borrow; the
    // word is written by the NIC (an aligned 8-byte write) and read here
    // atomically.
    unsafe { &*(mailbox.ptr().add(at) as *const std::sync::atomic::AtomicU64) }
}

impl Conn {
    /// The queue pair number (completions name it).
    pub fn qpn(&self) -> u32 {
        self.qp.qpn()
    }

    /// Writes posted and not yet completed.
    fn outstanding(&self, s: &SendState) -> u64 {
        s.posted - self.completed.load(Ordering::Acquire)
    }

    /// Posts a credit report if one waits and the send queue has room.
    fn flush_report(&self, s: &mut SendState) -> Result<()> {
        let Some(total) = s.report else {
            return Ok(());
        };
        if self.outstanding(s) >= u64::from(SEND_DEPTH) {
            return Ok(());
        }
        let inline = self.qp.max_inline >= 8;
        let src = mailbox_word(&self.mailbox, REPORT_AT);
        src.store(total, Ordering::Relaxed);
        let w = Write {
            wr_id: 0,
            local: if inline {
                // inline: the bytes are read at post time from here
                src as *const _ as u64
            } else {
                self.mailbox.addr() + REPORT_AT as u64
            },
            len: 8,
            lkey: self.mailbox_mr.lkey(),
            remote: self.remote_mailbox.addr + CREDIT_AT as u64,
            rkey: self.remote_mailbox.rkey,
            imm: None,
            inline,
        };
        // SAFETY: the source is this mailbox's report word (registered,
        // alive with the Conn). A later report may rewrite it before the
        // NIC read a non-inline one: it then sends the newer, larger
        // total, which is as true (totals only grow). The remote word is
        // the peer's credit word, inside its registered mailbox.
        unsafe { self.qp.post_write(&w)? };
        s.posted += 1;
        s.report = None;
        Ok(())
    }

    /// Posts a write-with-immediate of `kind` (and, for descriptors and
    /// aborts, the `slot` bytes into the peer's mailbox first, in the same
    /// write). `Ok(None)`: no credit or no room now (poll and try again);
    /// `Ok(Some(ticket))`: posted, complete when `completed >= ticket`.
    pub fn post_signal(&self, kind: ImmKind, slot: Option<&[u8]>) -> Result<Option<u64>> {
        self.check_usable()?;
        let mut s = self.send.lock().unwrap_or_else(|p| p.into_inner());
        self.flush_report(&mut s)?;
        let granted = mailbox_word(&self.mailbox, CREDIT_AT).load(Ordering::Acquire);
        if !s.credits.can_send(granted) || self.outstanding(&s) + 1 >= u64::from(SEND_DEPTH) {
            return Ok(None);
        }
        let seq = s.credits.sent;
        let index = (seq % u64::from(RECV_DEPTH)) as usize;
        let (local, len, remote, payload) = match slot {
            Some(bytes) => {
                let n = bytes.len().min(SLOT);
                let at = OUT_SLOTS_AT + index * SLOT;
                self.mailbox
                    .range(at, n)?
                    .copy_from_host_bytes(&bytes[..n])?;
                (
                    self.mailbox.addr() + at as u64,
                    n as u32,
                    self.remote_mailbox.addr + (IN_SLOTS_AT + index * SLOT) as u64,
                    n as u32,
                )
            }
            None => (0, 0, self.remote_mailbox.addr, 0),
        };
        let w = Write {
            wr_id: 0,
            local,
            len,
            lkey: self.mailbox_mr.lkey(),
            remote,
            rkey: self.remote_mailbox.rkey,
            imm: Some(imm(kind, payload)),
            inline: false,
        };
        // SAFETY: the staging slot is registered and is rewritten only by
        // message `seq + depth`, which needs a credit the peer grants only
        // after handling message `seq` (so the NIC has read it); the
        // remote slot is the peer's slot `seq % depth`.
        unsafe { self.qp.post_write(&w)? };
        s.credits.take();
        s.posted += 1;
        Ok(Some(s.posted))
    }

    /// Posts the writes of a transfer of `src` (local key `lkey`) into the
    /// peer's `kind` buffer at `offset`, the last with the immediate
    /// `Done`. Returns `Ok(None)` when it must wait for a credit or room;
    /// else the ticket and whether the source is free already (inline).
    pub fn post_data(
        &self,
        kind: MemKind,
        offset: usize,
        src: &DeviceMem,
        lkey: u32,
    ) -> Result<Option<(u64, bool)>> {
        self.check_usable()?;
        let dst = match kind {
            MemKind::CclInput => self.remote_ccl[0],
            MemKind::CclOutput => self.remote_ccl[1],
            other => {
                return Err(HcclError::not_support(format!(
                    "the ibverbs link writes only into the peer's CCL buffers, not its {other}"
                )))
            }
        };
        let len = src.len() as u64;
        if (offset as u64).checked_add(len).is_none_or(|e| e > dst.len) {
            return Err(HcclError::internal(format!(
                "transfer of {len} bytes at offset {offset} overruns rank {}'s {kind} buffer of {} bytes",
                self.peer, dst.len
            )));
        }
        let max = u64::from(self.dev.port_info.max_msg).clamp(1 << 16, MAX_WRITE);
        let chunks = len.div_ceil(max).max(1);
        let mut s = self.send.lock().unwrap_or_else(|p| p.into_inner());
        self.flush_report(&mut s)?;
        let granted = mailbox_word(&self.mailbox, CREDIT_AT).load(Ordering::Acquire);
        if !s.credits.can_send(granted)
            || self.outstanding(&s) + chunks + 1 >= u64::from(SEND_DEPTH)
        {
            return Ok(None);
        }
        let inline = len <= u64::from(self.qp.max_inline.min(SLOT as u32));
        for i in 0..chunks {
            let at = i * max;
            let n = max.min(len - at);
            let last = i + 1 == chunks;
            let w = Write {
                wr_id: 0,
                local: src.addr() + at,
                len: n as u32,
                lkey,
                remote: dst.addr + offset as u64 + at,
                rkey: dst.rkey,
                imm: last.then(|| imm(ImmKind::Done, 0)),
                inline,
            };
            // SAFETY: `src` is pinned by the verb until its ticket
            // completes (or copied at post time when inline); it lies in
            // the registration of `lkey`; the destination range was
            // checked against the peer's buffer above.
            unsafe { self.qp.post_write(&w)? };
            s.posted += 1;
        }
        s.credits.take();
        Ok(Some((s.posted, inline)))
    }

    /// Handles one completion of this queue pair.
    pub fn on_completion(&self, recv: bool, immediate: u32) -> Result<()> {
        if !recv {
            self.completed.fetch_add(1, Ordering::AcqRel);
            return Ok(());
        }
        let mut ledger = self.recv.lock().unwrap_or_else(|p| p.into_inner());
        let seq = ledger.next_seq();
        let index = (seq % u64::from(RECV_DEPTH)) as usize;
        let slot = |n: usize| -> Result<Vec<u8>> {
            let mut b = vec![0u8; n.min(SLOT)];
            self.mailbox
                .range(IN_SLOTS_AT + index * SLOT, b.len())?
                .copy_to_host_bytes(&mut b)?;
            Ok(b)
        };
        let in_ = &self.inbox;
        match parse_imm(immediate) {
            Some((ImmKind::Done, _)) => {
                in_.dones.fetch_add(1, Ordering::AcqRel);
            }
            Some((ImmKind::Ack, _)) => {
                in_.acks.fetch_add(1, Ordering::AcqRel);
            }
            Some((ImmKind::Signal, _)) => {
                in_.signals.fetch_add(1, Ordering::AcqRel);
            }
            Some((ImmKind::Desc, n)) => {
                let bytes: [u8; OpDesc::WIRE] = slot(n as usize)?.try_into().map_err(|_| {
                    HcclError::roce_transfer(format!(
                        "rank {} sent a descriptor of {n} bytes, expected {}",
                        self.peer,
                        OpDesc::WIRE
                    ))
                })?;
                let d = OpDesc::from_bytes(&bytes);
                in_.descs
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .push_back(d);
                in_.desc_count.fetch_add(1, Ordering::AcqRel);
            }
            Some((ImmKind::Abort, n)) => {
                let reason = String::from_utf8_lossy(&slot(n as usize)?).into_owned();
                *in_.reason.lock().unwrap_or_else(|p| p.into_inner()) = reason;
                in_.aborted.store(true, Ordering::Release);
            }
            Some((ImmKind::Bye, _)) => in_.closed.store(true, Ordering::Release),
            None => {
                return Err(HcclError::roce_transfer(format!(
                    "rank {} sent an unknown immediate {immediate:#x}",
                    self.peer
                )))
            }
        }
        self.qp.post_recv(1)?;
        ledger.handled();
        if let Some(total) = ledger.report_due() {
            ledger.reported(total);
            drop(ledger);
            let mut s = self.send.lock().unwrap_or_else(|p| p.into_inner());
            s.report = Some(total);
            self.flush_report(&mut s)?;
        }
        Ok(())
    }

    /// Posts a waiting credit report if there is room now (after sends
    /// completed).
    pub fn retry_report(&self) -> Result<()> {
        let mut s = self.send.lock().unwrap_or_else(|p| p.into_inner());
        self.flush_report(&mut s)
    }

    /// `Err` once this end was shut down or the connection broke.
    pub fn check_usable(&self) -> Result<()> {
        let in_ = &self.inbox;
        if in_.failed.load(Ordering::Acquire) || in_.lost.load(Ordering::Acquire) {
            let reason = in_.reason.lock().map(|r| r.clone()).unwrap_or_default();
            return Err(if in_.lost.load(Ordering::Acquire) {
                HcclError::remote(reason).peer(self.peer)
            } else {
                HcclError::roce_transfer(reason).peer(self.peer)
            });
        }
        Ok(())
    }

    /// Marks the connection broken with `reason` (`lost`: the peer is
    /// gone).
    pub fn fail(&self, reason: String, lost: bool) {
        let in_ = &self.inbox;
        if in_.failed.swap(true, Ordering::AcqRel) {
            return;
        }
        *in_.reason.lock().unwrap_or_else(|p| p.into_inner()) = reason;
        if lost {
            in_.lost.store(true, Ordering::Release);
        }
    }

    /// The error naming the peer as lost, with `what` happened.
    pub fn lost_message(&self, what: &str) -> String {
        format!(
            "rank {} (process {}, {}, device {}) {what}",
            self.peer, self.peer_pid, self.peer_host, self.peer_device
        )
    }
}
