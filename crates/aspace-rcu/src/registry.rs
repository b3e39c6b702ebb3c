//! The registry of reader slots of one domain.
//!
//! A reader slot is the per-thread word (memb: nesting count + reader group; qsbr: the last
//! grace-period counter announced, or 0 when offline) that writers read during
//! WAIT-FOR-READERS. Each slot is heap-allocated, `CachePadded` so that a reader's stores never
//! share a cache line with another reader's, and shared by `Arc` between the `Reader` handle
//! (which reaches it directly: no thread-local lookup on the read path) and this registry.
//!
//! Writers do not hold the registry lock while they wait: under the lock they copy the slot
//! pointers into a buffer owned by the grace-period mutex (no allocation in steady state) and
//! release it, so registering and unregistering threads never wait for a grace period.
//!
//! Why a snapshot is enough: a reader whose read section began before `synchronize()` started
//! registered before it, and registration (`lock`/`unlock` of this mutex) happens-before the
//! writer's later `lock` in [`Registry::snapshot_into`]; so every pre-existing reader is in the
//! snapshot. A reader registering after the snapshot happens-after the writer's fences that
//! precede the snapshot, so its read sections see every write that preceded `synchronize()`. A
//! slot unregistered while a writer holds it in its snapshot stays alive (the `Arc`) and reads
//! as "not in a read section" (the `Reader` drop left it so).
//!
//! Not for: per-thread lookup (readers never search it).

use crate::sync::Mutex;
use crossbeam_utils::CachePadded;
use std::sync::Arc;

/// A shared, cache-padded reader slot.
pub type SlotRef<S> = Arc<CachePadded<S>>;

/// All registered slots of a domain.
pub struct Registry<S> {
    slots: Mutex<Vec<SlotRef<S>>>,
}

impl<S> Registry<S> {
    pub(crate) fn new() -> Self {
        Self {
            slots: Mutex::new(Vec::new()),
        }
    }

    /// Adds `slot`. Called by `Domain::register` after the slot is initialised.
    pub(crate) fn insert(&self, slot: SlotRef<S>) {
        self.slots.lock().push(slot);
    }

    /// Removes `slot` (by identity). Called by `Reader::drop` after the slot was left idle.
    pub(crate) fn remove(&self, slot: &SlotRef<S>) {
        let mut slots = self.slots.lock();
        if let Some(i) = slots.iter().position(|s| Arc::ptr_eq(s, slot)) {
            slots.swap_remove(i);
        }
    }

    /// Replaces the contents of `out` with the currently registered slots.
    pub(crate) fn snapshot_into(&self, out: &mut Vec<SlotRef<S>>) {
        out.clear();
        out.extend(self.slots.lock().iter().cloned());
    }

    /// Number of registered readers.
    pub(crate) fn len(&self) -> usize {
        self.slots.lock().len()
    }
}
