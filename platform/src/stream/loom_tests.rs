//! Loom model of the hand-off between a stream's enqueuer and a device's
//! worker driver: the production [`Stream`] (queue lock, `enqueued` /
//! `completed` counts, the wake in `Stream::push`) on a
//! [`ExecMode::Worker`] device whose worker is the production
//! [`worker_turn`] (look, register, look again, drive or park) run in a
//! loom thread, parking on the device's [`EventCount`](crate::sync::EventCount)
//! with no deadline (loom has no clock, and a lost wake-up must hang the
//! model rather than be rescued by the worker's 200 ms safety net).
//!
//! The enqueuer pushes host callbacks while the worker drains the queue
//! and parks whenever it finds nothing: every callback must run, once, in
//! order, and the worker must never park with a task queued — loom
//! reports a deadlock if the worker sleeps through an enqueue.
//!
//! A second model checks the device's set of busy streams that
//! [`Device::poll_once`] walks instead of every stream: a poller takes the
//! set while tasks are enqueued; once the enqueuer and the poller are
//! done, one more poll must find every queued task.

use super::device::worker_turn;
use super::{Device, DeviceConfig, ExecMode, Stream};
use crate::error::Result;
use crate::sync::mutation::{self, Mutation};
use crate::sync::{Arc, AtomicUsize, Ordering};
use loom::thread;
use std::mem::ManuallyDrop;
use std::time::Duration;

/// Tasks the enqueuer pushes: with two, the worker may drain the first
/// and park before the second arrives.
const TASKS: usize = 2;

fn model() {
    let mut builder = loom::model::Builder::new();
    // Every interleaving takes minutes (the worker's turn takes the
    // device's locks many times); five preemptions, about 18,000
    // interleavings, take under a second and reach every window of the
    // handshake (an enqueue between the worker's looks and its
    // registration, or between its registration and its park): the
    // mutation tests below show both are reached.
    builder.preemption_bound = Some(5);
    builder.check(|| {
        let config = DeviceConfig {
            exec_timeout: None,
            spin: Duration::ZERO,
            yields: 64,
            mode: ExecMode::Worker,
        };
        let dev = Device::new(0, config);
        let stream = Stream::new(&dev);
        let ran = Arc::new(AtomicUsize::new(0));
        let worker = {
            let (inner, ran) = (dev.0.clone(), ran.clone());
            thread::spawn(move || {
                let events = inner.events.clone();
                // the real worker loops until its device is dropped; the
                // model's stops once every task ran
                while ran.load(Ordering::Acquire) < TASKS {
                    if let Some(waiter) = worker_turn(inner.clone(), &events) {
                        waiter.wait();
                    }
                }
            })
        };
        for i in 0..TASKS {
            let ran = ran.clone();
            stream
                .host_callback(move || {
                    let before = ran.fetch_add(1, Ordering::Release);
                    assert_eq!(before, i, "every task runs once, in order");
                    Ok(())
                })
                .unwrap();
        }
        // loom reports a deadlock from inside this join; unwinding from
        // there must not drop loom objects (it would panic again, and
        // abort), so the main thread's handles are only dropped after it
        let (stream, dev, ran) = (
            ManuallyDrop::new(stream),
            ManuallyDrop::new(dev),
            ManuallyDrop::new(ran),
        );
        worker.join().unwrap();
        assert!(stream.query(), "every enqueued task completed");
        drop(ManuallyDrop::into_inner(stream));
        drop(ManuallyDrop::into_inner(dev));
        drop(ManuallyDrop::into_inner(ran));
    });
}

/// The hand-off as written: no task is lost and the worker never sleeps
/// with a task queued.
#[test]
fn stream_enqueue_worker_handoff() {
    model();
}

/// An enqueue that does not wake the worker: a worker that parked on an
/// empty queue sleeps through the task.
#[test]
#[should_panic(expected = "deadlock")]
fn stream_catches_skipped_wake() {
    mutation::with(Mutation::StreamSkipWake, model);
}

/// A worker that parks right after registering, without looking again:
/// an enqueue between its look and its registration is slept through.
#[test]
#[should_panic(expected = "deadlock")]
fn stream_catches_missing_recheck() {
    mutation::with(Mutation::StreamNoRecheck, model);
}

/// Enqueues on two streams of an inline device while another thread
/// polls it twice; then one more poll must run every task (each a host
/// callback: always runnable), whatever bits the concurrent polls took.
fn busy_set_model() {
    let mut builder = loom::model::Builder::new();
    builder.preemption_bound = Some(3);
    builder.check(|| {
        let config = DeviceConfig {
            exec_timeout: None,
            spin: Duration::ZERO,
            yields: 0,
            mode: ExecMode::Inline,
        };
        let dev = Device::new(0, config);
        let streams = [Stream::new(&dev), Stream::new(&dev)];
        let ran = Arc::new(AtomicUsize::new(0));
        let poller = {
            let dev = dev.clone();
            thread::spawn(move || {
                for _ in 0..2 {
                    dev.poll_once();
                }
            })
        };
        let count = |ran: &Arc<AtomicUsize>| {
            let ran = ran.clone();
            move || -> Result<()> {
                ran.fetch_add(1, Ordering::Release);
                Ok(())
            }
        };
        for s in &streams {
            s.host_callback(count(&ran)).unwrap();
        }
        poller.join().unwrap();
        dev.poll_once();
        assert_eq!(
            ran.load(Ordering::Acquire),
            2,
            "a poll after the enqueues ran every queued task"
        );
    });
}

/// The busy set as written: no stream with a task is left out of it.
#[test]
fn stream_busy_set_keeps_every_queued_task() {
    busy_set_model();
}

/// A bit set before the count: a poll between the two drops the stream
/// with its task queued.
#[test]
#[should_panic(expected = "a poll after the enqueues ran every queued task")]
fn stream_catches_bit_before_count() {
    mutation::with(Mutation::StreamBitEarly, busy_set_model);
}
