//! Credits: a sender never posts a write-with-immediate the receiver has
//! no receive posted for.
//!
//! Every write-with-immediate consumes one receive at the peer. The
//! receiver posts `depth` receives per link at the start and reposts one
//! each time it handles a completion; it tells the sender how many it has
//! posted in all by an RDMA write (no immediate, so it consumes nothing)
//! of that total into the sender's credit word, once at least half the
//! depth has been reposted since the last such write. The sender may post
//! while it has sent fewer than the last total it read.
//!
//! No deadlock: a sender out of credits has `depth` messages the receiver
//! has not handled or not yet reported; handling them all reposts `depth`
//! receives, which crosses the half-depth threshold, so a report follows
//! as soon as the receiver polls (its driver, or its progress thread while
//! the driver sleeps).

/// The sender's side of one link.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct SendCredits {
    /// Writes-with-immediate posted so far.
    pub sent: u64,
}

impl SendCredits {
    /// Whether one more may be posted, given the receiver's last reported
    /// total of posted receives.
    pub fn can_send(&self, granted_total: u64) -> bool {
        self.sent < granted_total
    }

    /// Records one posted; its sequence number (0-based), which also
    /// names the mailbox slot (`seq % depth`) it may use.
    pub fn take(&mut self) -> u64 {
        self.sent += 1;
        self.sent - 1
    }
}

/// The receiver's side of one link.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct RecvLedger {
    depth: u64,
    /// Completions handled (each reposted at once).
    handled: u64,
    /// The total last reported to the sender.
    reported: u64,
}

impl RecvLedger {
    /// A link with `depth` receives posted.
    pub fn new(depth: u32) -> RecvLedger {
        RecvLedger {
            depth: u64::from(depth),
            handled: 0,
            reported: u64::from(depth),
        }
    }

    /// The sequence number (0-based) of the next message to handle: in
    /// order on a reliable connection, so it names its mailbox slot.
    pub fn next_seq(&self) -> u64 {
        self.handled
    }

    /// Records one completion handled and its receive reposted.
    pub fn handled(&mut self) {
        self.handled += 1;
    }

    /// The total of posted receives to report now, if it is time.
    pub fn report_due(&self) -> Option<u64> {
        let posted = self.depth + self.handled;
        (posted - self.reported >= (self.depth / 2).max(1)).then_some(posted)
    }

    /// Records that `total` was reported.
    pub fn reported(&mut self, total: u64) {
        self.reported = self.reported.max(total);
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn reports_every_half_depth() {
        let mut r = RecvLedger::new(8);
        let mut s = SendCredits { sent: 0 };
        let mut granted = 8;
        for _ in 0..8 {
            assert!(s.can_send(granted));
            s.take();
        }
        assert!(!s.can_send(granted));
        for i in 0..3 {
            assert_eq!(r.next_seq(), i);
            r.handled();
            assert_eq!(r.report_due(), None);
        }
        r.handled();
        assert_eq!(r.report_due(), Some(12));
        r.reported(12);
        granted = 12;
        assert!(s.can_send(granted));
        assert_eq!(r.report_due(), None);
    }

    proptest! {
        /// Any interleaving of sends and handling: the sender never has
        /// more unhandled messages than receives posted, and a sender out
        /// of credits is always unblocked once the receiver catches up.
        #[test]
        fn never_overruns_never_stalls(depth in 1u32..32, steps in proptest::collection::vec(any::<bool>(), 1..400)) {
            let mut r = RecvLedger::new(depth);
            let mut s = SendCredits { sent: 0 };
            let mut granted = u64::from(depth);
            for send in steps {
                if send && s.can_send(granted) {
                    s.take();
                } else if r.next_seq() < s.sent {
                    r.handled();
                    if let Some(t) = r.report_due() {
                        r.reported(t);
                        granted = t;
                    }
                }
                // unhandled messages never exceed the receives posted
                prop_assert!(s.sent - r.next_seq() <= u64::from(depth));
            }
            // catch up: everything handled, then the sender may go on
            while r.next_seq() < s.sent {
                r.handled();
                if let Some(t) = r.report_due() {
                    r.reported(t);
                    granted = t;
                }
            }
            prop_assert!(s.can_send(granted));
        }
    }
}
