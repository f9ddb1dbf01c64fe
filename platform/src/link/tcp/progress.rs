//! The node's progress thread: accepts connections and reads their
//! introductions ([`super::lobby`]), and, while the rank's driver sleeps
//! (or has stopped driving with frames still to write), reads the links'
//! sockets for it, writes the frames it gathered as full sockets take
//! them, and wakes it when a frame arrived or a full socket has room
//! again.

use super::lobby::Lobby;
use super::Shared;
use crate::sync::{Arc, Ordering};
use rustix::event::{poll, PollFd, PollFlags, Timespec};
use std::net::TcpListener;
use std::os::fd::{AsFd, OwnedFd};
use std::time::{Duration, Instant};

/// Longest the thread sleeps when nothing is due: a safety net, and how
/// soon it notices a stop it was not woken for.
const NAP: Duration = Duration::from_secs(1);

pub(super) fn run(sh: Arc<Shared>, listener: TcpListener, wake_rx: OwnedFd) {
    let mut lobby = Lobby::default();
    loop {
        if sh.stop.load(Ordering::Acquire) {
            return;
        }
        let reading = sh.thread_reads.load(Ordering::Acquire);
        let conns = if reading {
            sh.live()
        } else {
            Arc::new(Vec::new())
        };
        let mut fds = vec![
            PollFd::new(&wake_rx, PollFlags::IN),
            PollFd::new(&listener, PollFlags::IN),
        ];
        fds.extend(
            lobby
                .fds()
                .map(|fd| PollFd::from_borrowed_fd(fd, PollFlags::IN)),
        );
        let first_conn = fds.len();
        // (connection, wants room) per watched socket
        let mut owners = Vec::new();
        for (i, c) in conns.iter().enumerate() {
            let out = c.want_write.load(Ordering::Acquire);
            for s in &c.socks {
                let mut flags = PollFlags::IN;
                if out {
                    flags |= PollFlags::OUT;
                }
                fds.push(PollFd::from_borrowed_fd(s.as_fd(), flags));
                owners.push(i);
            }
        }
        let now = Instant::now();
        let wait = lobby
            .next_deadline()
            .map_or(NAP, |d| d.saturating_duration_since(now).min(NAP));
        let t = Timespec {
            tv_sec: wait.as_secs() as i64,
            tv_nsec: wait.subsec_nanos() as i64,
        };
        if poll(&mut fds, Some(&t)).is_err() {
            continue;
        }
        let revents: Vec<PollFlags> = fds.iter().map(|f| f.revents()).collect();
        drop(fds);
        if !revents[0].is_empty() {
            let mut buf = [0u8; 64];
            let _ = rustix::io::read(&wake_rx, &mut buf);
        }
        let in_lobby: Vec<bool> = revents[2..first_conn]
            .iter()
            .map(|r| !r.is_empty())
            .collect();
        if !revents[1].is_empty() {
            lobby.accept_all(&listener, sh.rank);
        }
        if !in_lobby.is_empty() || lobby.waiting() > 0 {
            for (peer, socks) in lobby.read_ready(&in_lobby, &sh.unique_id, sh.rank) {
                match super::new_conn(peer, socks, &sh.options) {
                    Ok(c) => sh.add_conn(c),
                    Err(e) => {
                        tracing::warn!(rank = sh.rank, peer, error = %e, "could not set up an accepted link")
                    }
                }
            }
        }
        if !reading || !sh.thread_reads.load(Ordering::Acquire) {
            // the driver woke and reads its sockets itself again
            continue;
        }
        let mut woke = false;
        let mut busy = false;
        let mut last = usize::MAX;
        for (slot, &i) in owners.iter().enumerate() {
            let r = revents[first_conn + slot];
            if r.is_empty() || i == last {
                continue;
            }
            last = i;
            let c = &conns[i];
            if r.contains(PollFlags::OUT) && c.want_write.swap(false, Ordering::AcqRel) {
                // write the gathered frames now: the driver that gathered
                // them may have finished its op and drive no more
                // (`ParkHook::released`); what the socket still refuses
                // asks for room again
                if let Err(e) = c.flush() {
                    sh.fail_conn(c, &e);
                }
                woke = true;
            }
            if r.intersects(PollFlags::IN | PollFlags::HUP | PollFlags::ERR) {
                if sh.pump(c) {
                    woke = true;
                } else {
                    busy = true;
                }
            }
        }
        if woke {
            sh.waker.notify();
        } else if busy {
            // readable but nothing applied: the driver holds the socket
            // for a moment, or a frame is still partly in flight
            std::thread::yield_now();
        }
    }
}
