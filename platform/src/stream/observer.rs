//! Task observers: told of every task a device's driver completes, with
//! the stream it ran on and what it did. The plan simulator keeps its
//! logical clocks per stream with one (a record hands its stream's time
//! to the wait it satisfies, a reduce adds its γ cost); real runs have
//! none.

/// What a completed task did, as a [`TaskObserver`] sees it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum TaskDone {
    /// A local copy of `bytes`.
    Copy {
        /// Bytes copied.
        bytes: u64,
    },
    /// A local reduce into `bytes` of destination.
    Reduce {
        /// Destination bytes.
        bytes: u64,
    },
    /// A record of the notify with this [`Notify::id`](crate::Notify::id).
    /// Records of one notify satisfy its waits one each, in order.
    Record {
        /// The notify.
        notify: usize,
    },
    /// A wait on the notify with this id, satisfied by its next record
    /// not yet taken by an earlier wait.
    Wait {
        /// The notify.
        notify: usize,
    },
    /// A link verb (the link itself sees the verb and the stream, in
    /// [`LinkOpState::stream`](crate::LinkOpState::stream)).
    Link,
    /// A host callback or a kernel.
    Other,
}

/// Told of every completed task of a device ([`Device::set_task_observer`](crate::Device::set_task_observer)).
///
/// Called on the driving thread with the stream's queue locked: an
/// observer must not enqueue on, wait for or synchronize the device's
/// streams.
pub trait TaskObserver: Send + Sync {
    /// The task `done` of stream `stream` ([`Stream::id`](crate::Stream::id))
    /// completed.
    fn task_done(&self, stream: u64, done: TaskDone);
}
