//! Event counts on shared memory: the memory half of a process-shared
//! [`EventCount`]. The event count (in `sync`, at the bottom of the crate)
//! knows only two mapped words; this module finds them in a [`DeviceMem`]
//! and keeps that mapping alive for as long as the event count lives.

use super::DeviceMem;
use crate::error::{HcclError, Result};
use crate::sync::{EventCount, MappedWords};

/// The 8 bytes of a shared [`DeviceMem`] an event count lives on.
#[derive(Debug)]
struct EventWords {
    /// Exactly the 8 bytes, 4-aligned (checked in `on_shared_memory`);
    /// holding it keeps the region mapped.
    #[cfg_attr(loom, allow(dead_code))]
    mem: DeviceMem,
}

// SAFETY: `mem` is an 8-byte, 4-aligned range (checked before construction)
// whose region stays mapped while `mem` lives; its pointer never changes;
// the words are only accessed atomically, through the event count.
unsafe impl MappedWords for EventWords {
    fn base(&self) -> *const u8 {
        self.mem.ptr()
    }
}

impl EventCount {
    /// An event count whose words live at `offset` of shared memory `mem`
    /// (8 bytes, 4-aligned): every process mapping `mem` and building an
    /// event count on the same offset shares it.
    pub fn on_shared_memory(mem: &DeviceMem, offset: usize) -> Result<EventCount> {
        let mem = mem.range(offset, 8)?;
        if (mem.ptr() as usize) % 4 != 0 {
            return Err(HcclError::internal(
                "event count words must be 4-byte aligned",
            ));
        }
        Ok(EventCount::on_words(Box::new(EventWords { mem })))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sync::Arc;
    use std::time::{Duration, Instant};

    #[test]
    fn shared_memory_event_counts_wake_each_other() {
        let name = crate::mem::shm_segment_name("ec");
        let a = DeviceMem::create_shared(&name, 4096).unwrap();
        let b = DeviceMem::open_shared(&name).unwrap();
        let ea = Arc::new(EventCount::on_shared_memory(&a, 128).unwrap());
        let eb = EventCount::on_shared_memory(&b, 128).unwrap();
        let key = ea.key();
        let ea2 = ea.clone();
        let (tx, rx) = std::sync::mpsc::channel();
        let t = std::thread::spawn(move || {
            let w = ea2.prepare_wait();
            tx.send(()).unwrap();
            w.wait_until(Instant::now() + Duration::from_secs(10))
        });
        rx.recv().unwrap();
        std::thread::sleep(Duration::from_millis(10));
        eb.notify(); // through the other mapping
        assert!(t.join().unwrap(), "woken through the shared word");
        assert_ne!(
            ea.key(),
            key,
            "a notify with a registered waiter moves the epoch"
        );
        let k = eb.key();
        eb.notify();
        assert_eq!(
            eb.key(),
            k,
            "a notify with nobody registered writes nothing"
        );
        assert!(!eb
            .prepare_wait()
            .wait_until(Instant::now() + Duration::from_millis(20)));
    }
}
