//! A pool of RCU readers for the skiplist's updaters.
//!
//! `map`, `alloc`, `lock` and `swap` take no guard from the caller, but they traverse nodes that
//! concurrent swaps retire, so they must run inside a read section. Registering a reader per
//! operation would cost an allocation and a registry insertion; keeping one per thread in a
//! thread-local would pin every map's domain for the thread's lifetime. Instead each map keeps a
//! small array of lazily registered readers, each behind an uncontended mutex; a thread starts at
//! the slot given by its thread number and takes the first free one (a new temporary reader if
//! all are busy, e.g. on re-entry). The slot index doubles as the stripe of the `len` counter.
//!
//! Not for: queries (they take the caller's guard).

use aspace_rcu::{Domain, Guard, Reader};
use crossbeam_utils::CachePadded;
use parking_lot::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};

/// Number of slots (and `len` stripes).
pub(crate) const SLOTS: usize = 64;

static NEXT_THREAD: AtomicUsize = AtomicUsize::new(0);

thread_local! {
    static THREAD_NO: usize = NEXT_THREAD.fetch_add(1, Ordering::Relaxed);
}

/// The calling thread's home slot.
pub(crate) fn home_slot() -> usize {
    THREAD_NO.with(|n| *n % SLOTS)
}

/// Lazily registered readers of one domain.
pub(crate) struct ReaderPool {
    domain: Domain,
    slots: Box<[CachePadded<Mutex<Option<Reader>>>]>,
}

impl ReaderPool {
    pub(crate) fn new(domain: Domain) -> Self {
        Self {
            domain,
            slots: (0..SLOTS)
                .map(|_| CachePadded::new(Mutex::new(None)))
                .collect(),
        }
    }

    pub(crate) fn domain(&self) -> &Domain {
        &self.domain
    }

    /// Runs `f` inside a read section; `f` gets the guard and a stripe index.
    #[inline]
    pub(crate) fn with<R>(&self, f: impl FnOnce(&Guard<'_>, usize) -> R) -> R {
        let home = home_slot();
        for k in 0..SLOTS {
            let idx = (home + k) % SLOTS;
            if let Some(mut slot) = self.slots[idx].try_lock() {
                let reader = slot.get_or_insert_with(|| self.domain.register());
                let guard = reader.read();
                return f(&guard, idx);
            }
        }
        let reader = self.domain.register();
        let guard = reader.read();
        f(&guard, home)
    }
}
