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
//! Each slot also holds per-slot state `L` (the skiplist's retire list, `retire.rs`) that the
//! operation gets mutably while it holds the slot: thread-local-like state without a shared
//! write. A temporary reader gets a fresh `L`, which [`SlotLocal::release`] empties after use.
//!
//! [`ReaderPool::enter`] opens the same kind of read section as an owned [`Section`] that
//! outlives the call: a held range of the skiplist (`SkipLocked`) keeps the section its lock
//! began in until its swap, so that the swap may reuse the nodes the lock's traversal found
//! (see the skiplist's module doc, "One traversal per edit").
//!
//! Not for: queries (they take the caller's guard).

use crate::sync::stat::AtomicUsize;
use crate::sync::Mutex;
use aspace_rcu::{Domain, Guard, Reader};
use crossbeam_utils::CachePadded;
use parking_lot::MutexGuard;
use std::mem::ManuallyDrop;
use std::sync::atomic::Ordering;

/// Number of slots (and `len` stripes). 256, so that up to 256 threads with consecutive thread
/// numbers each have a home slot of their own: with 64, the conflict audit (`aspace conflicts`)
/// showed every operation at 128 cores sharing three lines with another core (the slot's mutex,
/// its `len` stripe and its RCU reader's word). Costs 256 padded slots per map.
pub(crate) const SLOTS: usize = 256;

static NEXT_THREAD: AtomicUsize = AtomicUsize::new(0);

thread_local! {
    static THREAD_NO: usize = NEXT_THREAD.fetch_add(1, Ordering::Relaxed);
}

/// The calling thread's home slot.
pub(crate) fn home_slot() -> usize {
    THREAD_NO.with(|n| *n % SLOTS)
}

/// Per-slot state kept by the pool.
pub(crate) trait SlotLocal: Default {
    /// Empties a temporary slot's state after its one use (nothing of it stays in the pool).
    fn release(&mut self, domain: &Domain);
}

/// One slot: its reader (registered on first use) and its state.
pub(crate) struct Slot<L> {
    reader: Option<Reader>,
    pub(crate) local: L,
}

/// Lazily registered readers of one domain, with per-slot state `L`.
pub(crate) struct ReaderPool<L> {
    domain: Domain,
    slots: Box<[CachePadded<Mutex<Slot<L>>>]>,
}

impl<L: SlotLocal> ReaderPool<L> {
    pub(crate) fn new(domain: Domain) -> Self {
        Self {
            domain,
            slots: (0..SLOTS)
                .map(|_| {
                    CachePadded::new(Mutex::new(Slot {
                        reader: None,
                        local: L::default(),
                    }))
                })
                .collect(),
        }
    }

    pub(crate) fn domain(&self) -> &Domain {
        &self.domain
    }

    /// Runs `f` inside a read section; `f` gets the guard, a stripe index and the slot's state.
    #[inline]
    pub(crate) fn with<R>(&self, f: impl FnOnce(&Guard<'_>, usize, &mut L) -> R) -> R {
        let home = home_slot();
        for k in 0..SLOTS {
            let idx = (home + k) % SLOTS;
            if let Some(mut slot) = self.slots[idx].try_lock() {
                let slot = &mut *slot;
                let reader = slot.reader.get_or_insert_with(|| self.domain.register());
                let guard = reader.read();
                return f(&guard, idx, &mut slot.local);
            }
        }
        let reader = self.domain.register();
        let mut local = L::default();
        let r = {
            let guard = reader.read();
            f(&guard, home, &mut local)
        };
        local.release(&self.domain);
        r
    }

    /// Opens a read section that the caller keeps (see [`Section`]): takes a slot as
    /// [`with`](Self::with) does (the home slot first, a temporary reader if all are busy).
    #[inline]
    pub(crate) fn enter(&self) -> Section<'_, L> {
        let home = home_slot();
        for k in 0..SLOTS {
            let idx = (home + k) % SLOTS;
            if let Some(mut slot) = self.slots[idx].try_lock() {
                if slot.reader.is_none() {
                    slot.reader = Some(self.domain.register());
                }
                let reader: *const Reader = slot.reader.as_ref().expect("registered above");
                // SAFETY: the reader lives in the slot, which the returned section keeps
                // locked (so nobody replaces or drops it) and which does not move (the slots
                // are a boxed slice owned by `self`, borrowed for the section's lifetime); the
                // guard is dropped before the slot's lock (`Section`'s drop).
                let guard = unsafe { &*reader }.read();
                return Section {
                    guard: ManuallyDrop::new(guard),
                    stripe: idx,
                    home: Home::Pooled(ManuallyDrop::new(slot)),
                    domain: &self.domain,
                };
            }
        }
        let temp = Box::new((self.domain.register(), L::default()));
        let r: *const Reader = &temp.0;
        // SAFETY: the reader is boxed (it does not move) and owned by the section, which drops
        // the guard before it (`Section`'s drop).
        let guard = unsafe { &*r }.read();
        Section {
            guard: ManuallyDrop::new(guard),
            stripe: home,
            home: Home::Temporary(ManuallyDrop::new(temp)),
            domain: &self.domain,
        }
    }

    /// Runs `f` on every slot's state in turn, outside any read section (waits for a slot that
    /// an operation holds).
    pub(crate) fn for_each_local(&self, mut f: impl FnMut(&mut L)) {
        for slot in self.slots.iter() {
            f(&mut slot.lock().local);
        }
    }
}

/// Where a [`Section`]'s reader and state live.
enum Home<'a, L> {
    /// A pool slot, locked for the section's lifetime.
    Pooled(ManuallyDrop<MutexGuard<'a, Slot<L>>>),
    /// A temporary reader (every slot was busy) and its fresh state, boxed: a `Section` is
    /// moved by value (inside a held range), and an inline state would make every move copy
    /// it whatever the variant.
    Temporary(ManuallyDrop<Box<(Reader, L)>>),
}

/// An open read section of a pooled (or temporary) reader, with the slot's stripe and state:
/// what [`ReaderPool::with`] hands its closure, kept by the caller until dropped. `!Send` (a
/// read section ends on the thread that began it). While it lives, no grace period of the
/// domain can end: its holder must not wait for one (`synchronize`, `barrier`), nor for a
/// thread that does.
pub(crate) struct Section<'a, L: SlotLocal> {
    /// Borrows the reader in `home` (lifetime extended to `'a`): dropped first.
    guard: ManuallyDrop<Guard<'a>>,
    stripe: usize,
    home: Home<'a, L>,
    domain: &'a Domain,
}

impl<L: SlotLocal> Section<'_, L> {
    /// The stripe index (the slot's) and the slot's state, for use inside the section.
    #[inline]
    pub(crate) fn parts(&mut self) -> (usize, &mut L) {
        let local = match &mut self.home {
            Home::Pooled(slot) => &mut slot.local,
            Home::Temporary(t) => &mut t.1,
        };
        (self.stripe, local)
    }

    /// The section's guard.
    #[allow(dead_code)]
    pub(crate) fn guard(&self) -> &Guard<'_> {
        &self.guard
    }
}

impl<L: SlotLocal> Drop for Section<'_, L> {
    fn drop(&mut self) {
        // SAFETY: dropped once, here, before the reader it borrows (below).
        unsafe { ManuallyDrop::drop(&mut self.guard) };
        match &mut self.home {
            // SAFETY: dropped once, here; the guard that borrowed the slot's reader is gone.
            Home::Pooled(slot) => unsafe { ManuallyDrop::drop(slot) },
            Home::Temporary(t) => {
                t.1.release(self.domain);
                // SAFETY: dropped once, here; the guard that borrowed the reader is gone.
                unsafe { ManuallyDrop::drop(t) };
            }
        }
    }
}
