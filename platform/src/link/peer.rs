//! Watching a peer rank's process: is it still there?
//!
//! A peer process that dies cannot say so. On one host its death is seen
//! through a pidfd (`pidfd_open(2)`): the descriptor becomes readable when
//! the process has exited — a zombie included, which `kill(pid, 0)` still
//! reports alive (a launcher that waits for its children in order reaps a
//! killed rank only later) — and it names that very process, so a reused
//! pid cannot fool it. Asking costs one `poll(2)` with a zero timeout; the
//! callers ask only after a wait has lasted a while (see the device's
//! driver), never per poll of a healthy op.
//!
//! Where pidfds are unavailable (old kernels, seccomp), `/proc/<pid>/stat`
//! says whether the process is gone or a zombie.

use crate::error::HcclError;
use rustix::event::{poll, PollFd, PollFlags, Timespec};
use std::os::fd::OwnedFd;
use std::time::Duration;

/// One peer rank's process on this host, watched for exit.
#[derive(Debug)]
pub struct PeerProcess {
    rank: u32,
    pid: u32,
    host: String,
    /// `None` when the kernel gave no pidfd (then `/proc` is read).
    pidfd: Option<OwnedFd>,
}

impl PeerProcess {
    /// Watches process `pid`, which is rank `rank` on host `host` (a name
    /// for messages). Opening the pidfd is the only system call until the
    /// first [`is_gone`](Self::is_gone).
    pub fn new(rank: u32, pid: u32, host: impl Into<String>) -> PeerProcess {
        let pidfd = rustix::process::Pid::from_raw(pid as i32).and_then(|p| {
            rustix::process::pidfd_open(p, rustix::process::PidfdFlags::empty()).ok()
        });
        PeerProcess {
            rank,
            pid,
            host: host.into(),
            pidfd,
        }
    }

    /// The peer's rank.
    pub fn rank(&self) -> u32 {
        self.rank
    }

    /// The peer's process id.
    pub fn pid(&self) -> u32 {
        self.pid
    }

    /// The peer's host, as given at creation.
    pub fn host(&self) -> &str {
        &self.host
    }

    /// "rank 3 (process 1234 on host node-a)", for messages.
    pub fn describe(&self) -> String {
        describe_peer(self.rank, Some(self.pid), &self.host)
    }

    /// Whether the process has exited (or was killed). One `poll` of the
    /// pidfd, or a read of `/proc/<pid>/stat`.
    pub fn is_gone(&self) -> bool {
        self.wait_gone(Duration::ZERO)
    }

    /// Whether the process exits within `within` (at once if it is gone):
    /// a failed read of a dying process's memory can come a moment before
    /// its exit is complete.
    pub fn wait_gone(&self, within: Duration) -> bool {
        match &self.pidfd {
            Some(fd) => {
                let mut fds = [PollFd::new(fd, PollFlags::IN)];
                let t = Timespec {
                    tv_sec: within.as_secs() as i64,
                    tv_nsec: within.subsec_nanos() as i64,
                };
                loop {
                    match poll(&mut fds, Some(&t)) {
                        Ok(n) => return n > 0,
                        Err(rustix::io::Errno::INTR) => continue,
                        Err(_) => return false,
                    }
                }
            }
            None => {
                let deadline = std::time::Instant::now() + within;
                loop {
                    if proc_gone(self.pid) {
                        return true;
                    }
                    if std::time::Instant::now() >= deadline {
                        return false;
                    }
                    std::thread::sleep(Duration::from_millis(5));
                }
            }
        }
    }

    /// The error a rank that finds this peer gone reports: the lost rank,
    /// its process and host (the caller adds what it was waiting for).
    pub fn lost_error(&self) -> HcclError {
        self.lost_error_how("exited or was killed")
    }

    /// As [`lost_error`](Self::lost_error), saying how it was found ("exited
    /// or was killed while ...").
    pub(crate) fn lost_error_how(&self, how: &str) -> HcclError {
        lost_peer_error(self.rank, Some(self.pid), &self.host, how)
    }
}

/// Whether `/proc` says process `pid` is gone (absent or a zombie).
fn proc_gone(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Err(_) => true,
        // "pid (comm) S ...": the state follows the last ')'
        Ok(s) => s
            .rsplit_once(')')
            .and_then(|(_, rest)| rest.trim_start().chars().next())
            .is_some_and(|state| state == 'Z' || state == 'X'),
    }
}

/// "rank 3 (process 1234 on host node-a)"; parts that are unknown are left out.
pub(crate) fn describe_peer(rank: u32, pid: Option<u32>, host: &str) -> String {
    match (pid, host.is_empty()) {
        (Some(p), false) => format!("rank {rank} (process {p} on host {host})"),
        (Some(p), true) => format!("rank {rank} (process {p})"),
        (None, false) => format!("rank {rank} (on host {host})"),
        (None, true) => format!("rank {rank}"),
    }
}

/// How a lost peer's error begins ([`lost_peer_error`]).
const LOST_PEER: &str = "lost peer ";
/// How a dropped or reset TCP link is named in its error.
pub(crate) const TCP_LINK: &str = "the TCP link between rank";

/// The reason a rank whose op failed hands its peers over their links
/// (`abort`): "peer rank R failed: <its reason>".
pub(crate) fn relayed_failure(rank: u32, reason: &str) -> String {
    format!("peer rank {rank} failed: {reason}")
}

/// Whether `message` is a failure `peer` relayed ([`relayed_failure`])
/// rather than one of this rank's own links.
pub fn is_relayed_by(message: &str, peer: u32) -> bool {
    message.contains(&relayed_failure(peer, ""))
}

/// Whether `message` (an op's error, perhaps relayed by a peer) says a
/// link failed or a peer was lost — as opposed to a mismatch or a
/// timeout a rank found.
pub fn names_link_failure(message: &str) -> bool {
    message.contains(LOST_PEER) || message.contains(TCP_LINK)
}

/// The error for a peer found gone: `ERemote`, the message starting with
/// the lost rank, its process and host (so that it survives truncation
/// when forwarded to other ranks), and the peer set to the lost rank.
pub(crate) fn lost_peer_error(rank: u32, pid: Option<u32>, host: &str, how: &str) -> HcclError {
    HcclError::remote(format!(
        "{LOST_PEER}{}: it {how}",
        describe_peer(rank, pid, host)
    ))
    .peer(rank)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_live_process_is_not_gone_and_a_dead_one_is() {
        let me = PeerProcess::new(3, std::process::id(), "here");
        assert!(!me.is_gone());
        assert_eq!(
            me.describe(),
            format!("rank 3 (process {} on host here)", std::process::id())
        );
        let mut child = std::process::Command::new("true").spawn().unwrap();
        let p = PeerProcess::new(1, child.id(), "here");
        // a zombie (exited, not yet reaped) is gone already
        assert!(p.wait_gone(Duration::from_secs(5)), "child never seen gone");
        child.wait().unwrap();
        assert!(p.is_gone());
        let e = p.lost_error();
        assert_eq!(e.code(), crate::error::HcclResult::ERemote);
        assert!(
            e.to_string()
                .contains(&format!("lost peer rank 1 (process {}", child.id())),
            "{e}"
        );
        assert_eq!(e.context().peer, Some(1));
    }

    #[test]
    fn proc_fallback_sees_zombies() {
        let mut child = std::process::Command::new("true").spawn().unwrap();
        let pid = child.id();
        let deadline = std::time::Instant::now() + Duration::from_secs(5);
        while !proc_gone(pid) {
            assert!(std::time::Instant::now() < deadline, "zombie not seen");
            std::thread::sleep(Duration::from_millis(5));
        }
        child.wait().unwrap();
        assert!(!proc_gone(std::process::id()));
    }
}
