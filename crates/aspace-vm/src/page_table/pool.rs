//! Page-table memory: the [`Table`] type (512 atomic entries and a bitmap of the non-zero ones),
//! owned table pointers, the per-level pools of zeroed tables, and the hand-over of retired
//! tables to RCU in batches.
//!
//! **Type-stable memory**: a table is allocated for one level and, while its `PageTables`
//! lives, is only ever linked, retired, pending in an RCU callback, or in the pool of its level;
//! it goes back to the allocator only when the `PageTables` drops (or when the last RCU callback
//! holding the pool runs after the drop). `mod.rs` relies on it: every pointer a walker can load
//! from an entry points to live memory of a table of the expected level.
//!
//! **Reuse waits for a grace period**: unlinked tables are retired (zeroed at once by the tree,
//! while their lines are in the freeing core's cache) and, once [`RETIRE_BATCH`] accumulated,
//! handed to the RCU domain in ONE callback ([`TablePool::retire`]), which after a grace period
//! moves the pointers into the per-level pools without touching the tables' memory. A table
//! that was never published (the loser of an install race) goes straight back
//! ([`TablePool::put`]).
//!
//! Not for: what an entry means (`entry.rs`) or walking the tree (`mod.rs`).

use super::entry::{ENTRIES, LEVELS};
use super::users::LeafUsers;
use crate::sync::stat::AtomicU64 as StatCounter;
use crate::sync::{AtomicU64, Mutex, Ordering};
use std::ptr::NonNull;
use std::sync::atomic::Ordering as StatOrdering;
use std::sync::Arc;

/// Retired tables handed to RCU in one callback (shrunk under test so batching runs; 1 under
/// loom, so that one `free_tables` of a model hands its tables over).
pub(super) const RETIRE_BATCH: usize = if cfg!(loom) {
    1
} else if cfg!(test) {
    4
} else {
    64
};

/// One table: 512 entries and the bitmap of the non-zero ones.
#[repr(C, align(64))]
pub(super) struct Table {
    pub(super) entries: [AtomicU64; ENTRIES],
    /// Bit `i` set iff `entries[i]` is non-zero (exact for leaves under their lock; for
    /// intermediate tables set right after the installing CAS, so exact whenever no fill is in
    /// flight in the table's range).
    pub(super) present: [AtomicU64; ENTRIES / 64],
    /// Leaves only: the cores that may hold translations read from this table (`users.rs`), on
    /// a cache line of its own (the table is 64-byte aligned), so that walkers reading it do not
    /// share a line with the bitmap that fills write.
    pub(super) users: LeafUsers,
}

impl Table {
    /// A fresh, all-zero table on the heap; `None` when the allocator has no memory (or a
    /// test armed `fault_inject::TABLE_ALLOC`), so that a fault reports out-of-memory
    /// instead of aborting the process.
    pub(super) fn alloc() -> Option<NonNull<Table>> {
        #[cfg(all(test, not(loom)))]
        if crate::fault_inject::TABLE_ALLOC.fails() {
            return None;
        }
        #[cfg(not(loom))]
        {
            let layout = std::alloc::Layout::new::<Table>();
            // SAFETY: `Table` has a non-zero size. All-zero bytes are a valid `Table` (atomics
            // of value 0), and memory from the global allocator with `Table`'s layout may be
            // owned by a `Box<Table>` (`dealloc` frees it that way).
            NonNull::new(unsafe { std::alloc::alloc_zeroed(layout) }.cast::<Table>())
        }
        // Loom atomics are neither zero-initializable nor `const`-constructible.
        #[cfg(loom)]
        {
            let table = Box::new(Table {
                entries: std::array::from_fn(|_| AtomicU64::new(0)),
                present: std::array::from_fn(|_| AtomicU64::new(0)),
                users: LeafUsers::new(),
            });
            Some(NonNull::from(Box::leak(table)))
        }
    }

    /// Calls `f(i)` for every `i` in `first..=last` whose bitmap bit is set (a snapshot).
    #[inline]
    pub(super) fn for_each_present(&self, first: usize, last: usize, mut f: impl FnMut(usize)) {
        for w in first / 64..=last / 64 {
            // Relaxed: the bitmap is exact under the conditions documented on the field
            // (the leaf lock, or the caller's exclusion of fills), which order it for us.
            let mut bits = self.present[w].load(Ordering::Relaxed);
            if w == first / 64 {
                bits &= !0u64 << (first % 64);
            }
            if w == last / 64 {
                bits &= !0u64 >> (63 - last % 64);
            }
            while bits != 0 {
                let b = bits.trailing_zeros() as usize;
                bits &= bits - 1;
                f(w * 64 + b);
            }
        }
    }

    /// Zeroes the entries named by the bitmap, then the bitmap and the users record. Only for an
    /// unlinked table in which no fill can run (see `mod.rs`'s module doc for why walkers do not
    /// mind, and `users.rs` for a walker that records itself after this).
    pub(super) fn scrub(&self) {
        self.users.reset();
        self.for_each_present(0, ENTRIES - 1, |i| {
            self.entries[i].store(0, Ordering::Relaxed);
        });
        for w in &self.present {
            // Only dirty the line when needed.
            if w.load(Ordering::Relaxed) != 0 {
                w.store(0, Ordering::Relaxed);
            }
        }
        debug_assert!(self.entries.iter().all(|e| e.load(Ordering::Relaxed) == 0));
    }
}

/// An owned table pointer that may cross threads (a table is atomics only).
pub(super) struct TablePtr(pub(super) NonNull<Table>);

// SAFETY: a `TablePtr` is an owning pointer to a `Table`, which contains only atomics; moving
// or sharing it between threads is as safe as moving a `Box<Table>`.
unsafe impl Send for TablePtr {}
// SAFETY: as for `Send`: `&TablePtr` gives access to atomics only.
unsafe impl Sync for TablePtr {}

impl TablePtr {
    /// Returns the table's memory to the allocator.
    ///
    /// # Safety
    /// The table is unreachable by every walker (no entry points to it and any grace period
    /// needed has passed), and this is its only owner.
    pub(super) unsafe fn dealloc(self) {
        // SAFETY: the table came from `Table::alloc` (a leaked `Box<Table>`); the caller
        // guarantees exclusive ownership and no remaining readers.
        drop(unsafe { Box::from_raw(self.0.as_ptr()) });
    }
}

/// Unlinked tables not yet handed to RCU, each with its level.
pub(super) type Retired = Vec<(TablePtr, u32)>;

/// Zeroed tables ready for reuse, one list per level below the root (index `level - 1`).
/// Shared (`Arc`) between the `PageTables` and its pending RCU callbacks.
pub(super) struct TablePool {
    free: [Mutex<Vec<TablePtr>>; LEVELS as usize - 1],
    /// Tables ever taken from the allocator (diagnostics and tests).
    allocated: StatCounter,
}

impl TablePool {
    pub(super) fn new() -> TablePool {
        TablePool {
            free: std::array::from_fn(|_| Mutex::new(Vec::new())),
            allocated: StatCounter::new(0),
        }
    }

    /// A zeroed table for `level` (recycled when possible); `None` when a fresh one cannot be
    /// allocated.
    #[inline]
    pub(super) fn get(&self, level: u32) -> Option<NonNull<Table>> {
        if let Some(t) = self.free[level as usize - 1].lock().pop() {
            return Some(t.0);
        }
        let t = Table::alloc()?;
        self.allocated.fetch_add(1, StatOrdering::Relaxed);
        Some(t)
    }

    /// Puts back a zeroed table of `level` that was never published.
    pub(super) fn put(&self, level: u32, table: NonNull<Table>) {
        self.free[level as usize - 1].lock().push(TablePtr(table));
    }

    /// Hands `batch` (unlinked, zeroed tables) to `domain`: after a grace period, every walker
    /// that could still be inside one of them has finished, and the callback moves them into
    /// the pools (`recycle`). This grace period is what the page-table loom model checks.
    pub(super) fn retire<F: aspace_rcu::Flavor>(
        pool: &Arc<TablePool>,
        batch: Retired,
        domain: &aspace_rcu::Domain<F>,
    ) {
        let pool = Arc::clone(pool);
        domain.call(move || pool.recycle(batch));
    }

    /// The RCU callback: moves retired (already zeroed) tables, whose grace period passed,
    /// into the pools, one lock per level. It does not touch the tables' memory, so their
    /// cache lines stay where the freeing core left them.
    fn recycle(&self, mut batch: Retired) {
        for level in 1..LEVELS {
            let mut free = self.free[level as usize - 1].lock();
            batch.retain(|(t, l)| {
                if *l == level {
                    free.push(TablePtr(t.0));
                }
                *l != level
            });
        }
        debug_assert!(batch.is_empty());
    }

    /// Tables taken from the allocator so far (recycled ones are not counted again).
    #[cfg_attr(not(test), allow(dead_code))]
    pub(super) fn allocated(&self) -> u64 {
        self.allocated.load(StatOrdering::Relaxed)
    }
}

impl Drop for TablePool {
    fn drop(&mut self) {
        for list in &mut self.free {
            for t in list.get_mut().drain(..) {
                // SAFETY: pooled tables are unlinked and past their grace period; the pool is
                // being dropped, so it is their only owner.
                unsafe { t.dealloc() };
            }
        }
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn for_each_present_visits_exactly_the_set_bits_in_range() {
        let t = Table::alloc().unwrap();
        // SAFETY: freshly allocated, freed at the end of the test, not shared.
        let table = unsafe { t.as_ref() };
        for i in [0usize, 63, 64, 130, 511] {
            table.entries[i].store(1, Ordering::Relaxed);
            table.present[i / 64].fetch_or(1 << (i % 64), Ordering::Relaxed);
        }
        let mut seen = Vec::new();
        table.for_each_present(0, ENTRIES - 1, |i| seen.push(i));
        assert_eq!(seen, [0, 63, 64, 130, 511]);
        seen.clear();
        table.for_each_present(63, 130, |i| seen.push(i));
        assert_eq!(seen, [63, 64, 130]);
        seen.clear();
        table.for_each_present(1, 62, |i| seen.push(i));
        assert!(seen.is_empty());
        table.scrub();
        assert!(table.entries.iter().all(|e| e.load(Ordering::Relaxed) == 0));
        assert!(table.present.iter().all(|w| w.load(Ordering::Relaxed) == 0));
        // SAFETY: the only owner, never published.
        unsafe { TablePtr(t).dealloc() };
    }

    #[test]
    fn pool_reuses_put_tables_per_level_and_counts_allocations() {
        let pool = TablePool::new();
        let a = pool.get(1).unwrap();
        assert_eq!(pool.allocated(), 1);
        pool.put(1, a);
        assert_eq!(pool.get(1), Some(a), "a put table is reused for its level");
        let b = pool.get(2).unwrap();
        assert_ne!(b, a);
        assert_eq!(pool.allocated(), 2);
        pool.put(1, a);
        pool.put(2, b);
        // Dropping the pool frees both (checked by the allocator under Miri/ASan; here: no
        // double free).
    }
}
