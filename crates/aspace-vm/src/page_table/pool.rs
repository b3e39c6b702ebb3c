//! Page-table memory: the [`Table`] type (512 atomic entries and a bitmap of the non-zero ones),
//! owned table pointers, and the [`TablePool`] that owns every table not linked in the tree:
//! per-level shared lists, one slot per core (its counters and its **returned** list), and the
//! hand-over of retired batches to RCU. The per-core caches that sit in front of it are in
//! `cache.rs`.
//!
//! **Type-stable memory**: a table is allocated for one level and, while its `PageTables`
//! lives, is only ever linked, retired (in a core's cache), pending in an RCU callback, or free
//! (in a core's cache, a slot's returned list or the shared list of its level); it goes back to
//! the allocator only when the pool drops, that is when the `PageTables`, every core's cache
//! and every pending RCU callback holding the pool are gone. `mod.rs` relies on it: every
//! pointer a walker can load from an entry points to live memory of a table of the expected
//! level. A cache dropped without a domain to wait on orphans its retired tables here: kept,
//! never reused, freed with the pool.
//!
//! **Reuse waits for a grace period**: unlinked tables are retired into the freeing core's
//! cache (zeroed at once by the tree, while their lines are in that core's CPU cache) and, once
//! [`RETIRE_BATCH`] accumulated, handed to the RCU domain in ONE callback
//! ([`TablePool::retire`]), which after a grace period pushes the pointers onto the retiring
//! core's slot's returned list (one lock per batch) without touching the tables' memory; that
//! core drains the list into its cache when its own lists run dry. So in steady state a core
//! reuses the tables it freed, and their lines never move to another core. A table that was
//! never published (the loser of an install race) goes straight back to the core's cache. The
//! shared lists take what a detaching core or an over-full cache gives up (never a table still
//! waiting for its grace period) and serve a core with nothing of its own before the allocator.
//!
//! **Statistics without shared writes**: the count of linked tables and of allocations are
//! per slot (signed for the former: a table installed on one core may be freed on another),
//! summed on read. The shared tree counts a table in the slot of the core that links or unlinks
//! it; a per-core tree (`per_core.rs`) in its owner's slot, so that a slot's count is that
//! core's tree (an editor freeing another core's tables writes the owner's line, rarely).
//!
//! Not for: what an entry means (`entry.rs`), walking the tree (`mod.rs`), a core's own lists
//! (`cache.rs`).

use super::entry::{ENTRIES, LEVELS};
use super::users::LeafUsers;
use crate::sync::stat::{AtomicI64 as StatI64, AtomicU64 as StatCounter};
use crate::sync::{AtomicU64, Mutex, Ordering};
use crossbeam_utils::CachePadded;
use std::ptr::NonNull;
use std::sync::atomic::Ordering as StatOrdering;
use std::sync::Arc;

/// Retired tables a core hands to RCU in one callback, and the size of the batches its cache
/// moves to and from the shared lists (shrunk under test so batching runs; 1 under loom, so
/// that one `free_tables` of a model hands its tables over).
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
    /// Levels 1 and 2 only (leaves and the tables of leaves; always 0 above, see
    /// [`bitmap_kept`]): bit `i` set iff `entries[i]` is non-zero (exact for leaves under their
    /// lock; for level-2 tables set right after the installing CAS, so exact whenever no fill
    /// is in flight in the table's range).
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

    /// Calls `f(i)` for every `i` in `first..=last` whose entry is non-zero, for a table of
    /// `level`: from the bitmap where it is kept, else by loading the entries (a snapshot,
    /// exact under the same conditions as the bitmap).
    #[inline]
    pub(super) fn for_each_child(
        &self,
        level: u32,
        first: usize,
        last: usize,
        mut f: impl FnMut(usize),
    ) {
        if bitmap_kept(level) {
            self.for_each_present(first, last, f);
        } else {
            for i in first..=last {
                // Relaxed: as the bitmap's loads; the caller's exclusion of fills orders them.
                if self.entries[i].load(Ordering::Relaxed) != 0 {
                    f(i);
                }
            }
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

    /// Zeroes the non-zero entries named by the bitmap, then the bitmap and the users record,
    /// of a table of `level` (above level 2, where no bitmap is kept, the caller zeroed the
    /// entries: `PageTables::collect`). Only for an unlinked table in which no fill can
    /// run (see `mod.rs`'s module doc for why walkers do not mind, and `users.rs` for a walker
    /// that records itself after this).
    pub(super) fn scrub(&self, level: u32) {
        self.users.reset();
        if !bitmap_kept(level) {
            // `collect` zeroed the entries as it visited them.
            debug_assert!(self.entries.iter().all(|e| e.load(Ordering::Relaxed) == 0));
            return;
        }
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

/// Whether tables of `level` keep the `present` bitmap: leaves (cleared, protected and freed by
/// it) and level-2 tables (their leaves are freed by it). Above, the bitmap is not kept: one
/// bit per GiB (level 3) puts the children of 512 GiB on one cache line, so cores whose
/// regions lie in different GiBs (the `interval` design's per-core arenas) would write the
/// same line each time one of them installs or frees a level-2 table; the few entries of
/// those tables that a free walks are loaded instead.
#[inline]
pub(super) fn bitmap_kept(level: u32) -> bool {
    level <= 2
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

/// Tables per level below the root (index `level - 1`).
pub(super) type Lists = [Vec<TablePtr>; LEVELS as usize - 1];

/// One core slot's share of the pool: its statistics and the list its RCU callbacks return
/// tables to, each on its own cache line.
struct Slot {
    /// Tables linked into the shared tree minus tables unlinked, by the cores of this slot
    /// (signed: a table installed by one core may be freed by another); under the per-core
    /// organisation, the tables linked in this slot's own tree.
    linked: CachePadded<StatI64>,
    /// Tables this slot's cores took from the allocator.
    allocated: CachePadded<StatCounter>,
    /// Tables retired by this slot's cores whose grace period passed (pushed by the RCU
    /// callback, drained by the slot's core: `PtCache::get`).
    returned: CachePadded<Mutex<Lists>>,
}

/// The table memory of one `PageTables`, shared (`Arc`) by the tree, the per-core caches
/// (`cache.rs`) and the pending RCU callbacks: the shared per-level free lists (fed by
/// detaching caches and by caches over their bound), the per-slot `returned` lists, and the
/// orphans (retired tables of a cache dropped without a domain: never reused, freed with the
/// pool).
pub(super) struct TablePool {
    shared: [Mutex<Vec<TablePtr>>; LEVELS as usize - 1],
    /// The lengths of `shared`, written under their locks and read without (a hint: a core
    /// whose cache runs dry does not write the shared lock's line when the list is empty).
    shared_len: CachePadded<[StatCounter; LEVELS as usize - 1]>,
    slots: Box<[Slot]>,
    orphans: Mutex<Vec<TablePtr>>,
}

impl TablePool {
    /// A pool with `slots` core slots (at least 1).
    pub(super) fn new(slots: usize) -> TablePool {
        TablePool {
            shared: std::array::from_fn(|_| Mutex::new(Vec::new())),
            shared_len: CachePadded::new(std::array::from_fn(|_| StatCounter::new(0))),
            slots: (0..slots.max(1))
                .map(|_| Slot {
                    linked: CachePadded::new(StatI64::new(0)),
                    allocated: CachePadded::new(StatCounter::new(0)),
                    returned: CachePadded::new(Mutex::new(std::array::from_fn(|_| Vec::new()))),
                })
                .collect(),
            orphans: Mutex::new(Vec::new()),
        }
    }

    /// The slot index of core `core`.
    pub(super) fn slot_of(&self, core: usize) -> usize {
        core % self.slots.len()
    }

    /// A fresh table from the allocator, counted against `slot`.
    pub(super) fn alloc(&self, slot: usize) -> Option<NonNull<Table>> {
        let t = Table::alloc()?;
        self.slots[slot]
            .allocated
            .fetch_add(1, StatOrdering::Relaxed);
        Some(t)
    }

    /// Counts `delta` tables linked (negative: unlinked) by a core of `slot`.
    #[inline]
    pub(super) fn count_linked(&self, slot: usize, delta: i64) {
        // Relaxed: a statistic; the slot's line is written only by its core (or by the cores
        // sharing the slot when there are more cores than slots: hence the RMW).
        self.slots[slot]
            .linked
            .fetch_add(delta, StatOrdering::Relaxed);
    }

    /// Tables linked by `slot` (a per-core tree's own count: `PageTables::per_core`).
    pub(super) fn linked_of(&self, slot: usize) -> i64 {
        self.slots[slot].linked.load(StatOrdering::Relaxed)
    }

    /// Tables linked by all slots (the root not included).
    pub(super) fn linked(&self) -> i64 {
        self.slots
            .iter()
            .map(|s| s.linked.load(StatOrdering::Relaxed))
            .sum()
    }

    /// Moves `slot`'s returned tables (past their grace period) into `into`; whether any came.
    pub(super) fn take_returned(&self, slot: usize, into: &mut Lists) -> bool {
        let mut returned = self.slots[slot].returned.lock();
        let mut any = false;
        for (to, from) in into.iter_mut().zip(returned.iter_mut()) {
            any |= !from.is_empty();
            to.append(from);
        }
        any
    }

    /// Takes up to `n` tables of `level` from the shared lists into `into`; whether any came.
    pub(super) fn take_shared(&self, level: u32, n: usize, into: &mut Vec<TablePtr>) -> bool {
        let l = level as usize - 1;
        // Relaxed: a hint (field doc); a stale 0 only makes the caller allocate a fresh table.
        if self.shared_len[l].load(StatOrdering::Relaxed) == 0 {
            return false;
        }
        let mut shared = self.shared[l].lock();
        let at = shared.len().saturating_sub(n);
        into.extend(shared.drain(at..));
        self.shared_len[l].store(shared.len() as u64, StatOrdering::Relaxed);
        !into.is_empty()
    }

    /// Gives tables past their grace period (or never published) to the shared lists.
    pub(super) fn give_shared(&self, level: u32, tables: impl Iterator<Item = TablePtr>) {
        let l = level as usize - 1;
        let mut shared = self.shared[l].lock();
        let before = shared.len();
        shared.extend(tables);
        if shared.len() != before {
            // Relaxed: a hint, written under the lock (field doc).
            self.shared_len[l].store(shared.len() as u64, StatOrdering::Relaxed);
        }
    }

    /// Keeps retired tables that can no longer be handed to RCU (a cache dropped without
    /// `drain`) until the pool drops: never reused, so no grace period is needed.
    pub(super) fn orphan(&self, tables: impl Iterator<Item = TablePtr>) {
        self.orphans.lock().extend(tables);
    }

    /// Hands `batch` (unlinked, zeroed tables) to `domain`: after a grace period, every walker
    /// that could still be inside one of them has finished, and the callback moves them into
    /// `slot`'s returned list (`Some`), or the shared lists (`None`), without touching the
    /// tables' memory, so their lines stay where the freeing core left them. This grace period
    /// is what the page-table loom models check.
    pub(super) fn retire<F: aspace_rcu::Flavor>(
        pool: &Arc<TablePool>,
        batch: Retired,
        slot: Option<usize>,
        domain: &aspace_rcu::Domain<F>,
    ) {
        let pool = Arc::clone(pool);
        domain.call(move || pool.recycle(batch, slot));
    }

    /// The RCU callback: one lock for the whole batch. A returned list is bounded: a level's
    /// list past `2 * RETIRE_BATCH` gives its oldest tables to the shared lists, so that a core
    /// that frees what other cores installed (one core faults, another unmaps) does not hoard
    /// tables the installing cores then allocate afresh (memory is type-stable: it would grow
    /// until the space drops).
    fn recycle(&self, batch: Retired, slot: Option<usize>) {
        match slot {
            Some(slot) => {
                let mut spill: Lists = std::array::from_fn(|_| Vec::new());
                {
                    let mut returned = self.slots[slot].returned.lock();
                    for (t, level) in batch {
                        returned[level as usize - 1].push(t);
                    }
                    for (list, out) in returned.iter_mut().zip(spill.iter_mut()) {
                        if list.len() > 2 * RETIRE_BATCH {
                            let excess = list.len() - RETIRE_BATCH;
                            out.extend(list.drain(..excess));
                        }
                    }
                }
                // Past their grace period: any core may reuse them. Outside the slot's lock
                // (no lock is taken while holding another here).
                for (l, tables) in spill.into_iter().enumerate() {
                    if !tables.is_empty() {
                        self.give_shared(l as u32 + 1, tables.into_iter());
                    }
                }
            }
            // A detached core's last batch (cold): one lock per table.
            None => {
                for (t, level) in batch {
                    self.give_shared(level, std::iter::once(t));
                }
            }
        }
    }

    /// Runs `f` while this thread holds every lock of the pool (the shared lists, every slot's
    /// returned list, the orphans), for the fork test (`AddressSpace::hold_pool_locks_for_testing`).
    /// No path of the pool takes one of these locks while holding another, so the order here
    /// cannot deadlock with them.
    #[cfg(not(loom))]
    pub(super) fn with_locks_held<R>(&self, f: impl FnOnce() -> R) -> R {
        let _shared: Vec<_> = self.shared.iter().map(|l| l.lock()).collect();
        let _returned: Vec<_> = self.slots.iter().map(|s| s.returned.lock()).collect();
        let _orphans = self.orphans.lock();
        f()
    }

    /// Tables taken from the allocator so far by all slots (recycled ones are not counted
    /// again; the root is not counted).
    #[cfg_attr(not(test), allow(dead_code))]
    pub(super) fn allocated(&self) -> u64 {
        self.slots
            .iter()
            .map(|s| s.allocated.load(StatOrdering::Relaxed))
            .sum()
    }
}

impl Drop for TablePool {
    fn drop(&mut self) {
        let returned = self
            .slots
            .iter_mut()
            .flat_map(|s| s.returned.get_mut().iter_mut());
        let lists = self.shared.iter_mut().map(|l| l.get_mut()).chain(returned);
        for t in lists
            .flat_map(|l| l.drain(..))
            .chain(self.orphans.get_mut().drain(..))
            .collect::<Vec<_>>()
        {
            // SAFETY: pooled, returned and orphaned tables are unlinked and past their grace
            // period (orphans are never reused); the pool is being dropped, so it is their
            // only owner.
            unsafe { t.dealloc() };
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
        table.scrub(1);
        assert!(table.entries.iter().all(|e| e.load(Ordering::Relaxed) == 0));
        assert!(table.present.iter().all(|w| w.load(Ordering::Relaxed) == 0));
        // SAFETY: the only owner, never published.
        unsafe { TablePtr(t).dealloc() };
    }

    #[test]
    fn pool_counts_per_slot_and_hands_tables_between_lists() {
        let pool = TablePool::new(2);
        assert_eq!(
            (pool.slot_of(1), pool.slot_of(3)),
            (1, 1),
            "cores share slots modulo"
        );
        let a = pool.alloc(0).unwrap();
        let b = pool.alloc(1).unwrap();
        assert_eq!(pool.allocated(), 2);
        pool.count_linked(0, 2);
        pool.count_linked(1, -1);
        assert_eq!(pool.linked(), 1, "signed per-slot counts sum");
        pool.give_shared(1, std::iter::once(TablePtr(a)));
        let mut got = Vec::new();
        assert!(
            !pool.take_shared(2, 8, &mut got),
            "shared lists are per level"
        );
        assert!(pool.take_shared(1, 8, &mut got));
        assert_eq!(got.iter().map(|t| t.0).collect::<Vec<_>>(), [a]);
        // A batch bound for slot 1 lands in its returned list only.
        pool.recycle(vec![(TablePtr(b), 2)], Some(1));
        let mut lists: Lists = std::array::from_fn(|_| Vec::new());
        assert!(!pool.take_returned(0, &mut lists));
        assert!(pool.take_returned(1, &mut lists));
        assert_eq!(lists[1].iter().map(|t| t.0).collect::<Vec<_>>(), [b]);
        // Dropping the pool frees what it holds; hand the taken ones back for that.
        pool.give_shared(1, got.into_iter());
        pool.give_shared(2, lists[1].drain(..));
    }
}
