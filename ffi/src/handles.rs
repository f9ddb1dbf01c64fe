//! Registries of the objects C callers hold handles to.
//!
//! A handle is a number shaped like a pointer (a per-registry id in the
//! high bits, a kind tag in the low byte); it is never dereferenced. Calls
//! look it up, so a destroyed, foreign or corrupted handle is an error.

use std::collections::HashMap;
use std::ffi::c_void;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, RwLock};

/// Objects of one kind, by handle.
pub(crate) struct Registry<T> {
    map: RwLock<Option<HashMap<usize, Arc<T>>>>,
    next: AtomicUsize,
    tag: usize,
}

impl<T> Registry<T> {
    /// A registry whose handles carry `tag` in their low byte.
    pub(crate) const fn new(tag: u8) -> Self {
        Registry {
            map: RwLock::new(None),
            next: AtomicUsize::new(1),
            tag: tag as usize,
        }
    }

    /// Registers `obj` and returns its new handle (never reused).
    pub(crate) fn insert(&self, obj: Arc<T>) -> *mut c_void {
        let id = self.next.fetch_add(1, Ordering::Relaxed);
        let h = (id << 8) | self.tag;
        self.map
            .write()
            .unwrap_or_else(|p| p.into_inner())
            .get_or_insert_with(HashMap::new)
            .insert(h, obj);
        h as *mut c_void
    }

    /// The object behind `h`, if it is a live handle of this registry.
    pub(crate) fn get(&self, h: *mut c_void) -> Option<Arc<T>> {
        let h = h as usize;
        if h & 0xff != self.tag {
            return None;
        }
        self.map
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .as_ref()?
            .get(&h)
            .cloned()
    }

    /// Unregisters `h`, returning its object.
    pub(crate) fn remove(&self, h: *mut c_void) -> Option<Arc<T>> {
        let h = h as usize;
        if h & 0xff != self.tag {
            return None;
        }
        self.map
            .write()
            .unwrap_or_else(|p| p.into_inner())
            .as_mut()?
            .remove(&h)
    }

    /// Unregisters every object `keep` says no to (entries whose owner is
    /// gone).
    pub(crate) fn retain(&self, keep: impl Fn(&T) -> bool) {
        if let Some(m) = self.map.write().unwrap_or_else(|p| p.into_inner()).as_mut() {
            m.retain(|_, v| keep(v));
        }
    }

    /// Every live object with its handle.
    pub(crate) fn entries(&self) -> Vec<(*mut c_void, Arc<T>)> {
        self.map
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .as_ref()
            .map(|m| {
                m.iter()
                    .map(|(&h, v)| (h as *mut c_void, v.clone()))
                    .collect()
            })
            .unwrap_or_default()
    }

    /// Every live object.
    pub(crate) fn all(&self) -> Vec<Arc<T>> {
        self.map
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .as_ref()
            .map(|m| m.values().cloned().collect())
            .unwrap_or_default()
    }
}
