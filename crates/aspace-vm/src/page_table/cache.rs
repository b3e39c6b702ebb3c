//! One core's page-table cache ([`PtCache`]): the tables a core installs come from it, the
//! tables it unlinks go back into it, so that in steady state a table's cache lines stay with
//! one core (the frames' per-core caches, `frames.rs`, for page-table memory).
//!
//! # Algorithm
//!
//! A cache keeps, per level, a LIFO list of zeroed tables ready for reuse (`free`) and the
//! tables it unlinked and scrubbed that still wait for a grace period (`retired`). `get` pops
//! its own list; when empty it drains its slot's **returned** list (filled by its RCU
//! callbacks), then takes a batch from the pool's shared lists, then allocates. `retire` pushes
//! onto `retired`; once [`RETIRE_BATCH`] accumulated, the batch goes to the RCU domain in one
//! callback, which after the grace period pushes it onto the returned list of the retiring
//! core's slot (`TablePool::recycle`): the callback runs on the reclaimer thread and cannot
//! reach the owner's `&mut` lists, so the owner drains the returned list itself, one lock per
//! batch. A level's list (own or returned) that grows past `2 * RETIRE_BATCH` spills its oldest
//! tables down to `RETIRE_BATCH` to the shared lists, in `put`, after draining the returned list
//! and in the RCU callback itself, so that a core that frees more than it installs (one core
//! faults, another unmaps) does not hoard tables the other cores would allocate afresh.
//!
//! # Invariants (those of `pool.rs`, kept per core)
//!
//! - A table in `free` (or a returned or shared list) is zeroed and unreachable by every
//!   walker: it was never published, or its grace period passed.
//! - A table in `retired` is zeroed and unlinked, and is reused only through the RCU callback:
//!   `retire` never puts a table into `free`.
//! - Every table here belongs to the pool of the `PageTables` that made the cache
//!   (`PageTables::cache`); the tree checks it on every use (`PtCache::check`), so a cache of
//!   another space cannot link foreign memory.
//! - `drain` (a detaching core) gives `free` and its slot's returned list to the shared lists and
//!   hands `retired` to RCU bound for the shared lists; a cache dropped undrained gives `free` to the shared lists and
//!   orphans `retired` (kept until the pool drops, never reused: no grace period is owed).
//!
//! `Send` (it travels with its core), `!Sync`. Not for: the table type or the shared pool
//! (`pool.rs`), walking the tree (`mod.rs`).

use super::entry::LEVELS;
use super::pool::{Lists, Retired, Table, TablePool, TablePtr, RETIRE_BATCH};
use std::cell::Cell;
use std::marker::PhantomData;
use std::ptr::NonNull;
use std::sync::Arc;

/// One core's page-table cache (module doc).
pub(crate) struct PtCache {
    pool: Arc<TablePool>,
    /// This core's slot in the pool.
    slot: usize,
    /// Zeroed tables ready for reuse, per level (index `level - 1`).
    free: Lists,
    /// Unlinked, zeroed tables waiting to be handed to RCU.
    retired: Retired,
    _not_sync: PhantomData<Cell<()>>,
}

impl std::fmt::Debug for PtCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PtCache")
            .field("slot", &self.slot)
            .field("free", &self.free.iter().map(Vec::len).sum::<usize>())
            .field("retired", &self.retired.len())
            .finish()
    }
}

impl PtCache {
    pub(super) fn new(pool: &Arc<TablePool>, core: usize) -> PtCache {
        PtCache {
            slot: pool.slot_of(core),
            pool: Arc::clone(pool),
            free: std::array::from_fn(|_| Vec::new()),
            retired: Vec::new(),
            _not_sync: PhantomData,
        }
    }

    /// Panics unless this cache was made by the `PageTables` owning `pool` (using another
    /// space's cache would link tables that space may free).
    #[inline]
    pub(super) fn check(&self, pool: &Arc<TablePool>) {
        assert!(
            Arc::ptr_eq(&self.pool, pool),
            "a page-table cache used with the page tables of another space"
        );
    }

    /// This cache's slot in the pool (its statistics).
    #[inline]
    pub(super) fn slot(&self) -> usize {
        self.slot
    }

    /// A zeroed table for `level`: own list, then the returned list, then the shared lists,
    /// then the allocator; `None` when a fresh one cannot be allocated.
    #[inline]
    pub(super) fn get(&mut self, level: u32) -> Option<NonNull<Table>> {
        let l = level as usize - 1;
        if let Some(t) = self.free[l].pop() {
            return Some(t.0);
        }
        self.get_slow(level)
    }

    #[cold]
    fn get_slow(&mut self, level: u32) -> Option<NonNull<Table>> {
        let l = level as usize - 1;
        // The returned list may hold other levels only: the shared lists are tried whenever
        // this level's list is still empty.
        if self.pool.take_returned(self.slot, &mut self.free) {
            self.spill_over_bound();
        }
        if self.free[l].is_empty() {
            self.pool
                .take_shared(level, RETIRE_BATCH, &mut self.free[l]);
        }
        match self.free[l].pop() {
            Some(t) => Some(t.0),
            None => self.pool.alloc(self.slot),
        }
    }

    /// Gives the oldest tables of every level past `2 * RETIRE_BATCH` to the shared lists.
    fn spill_over_bound(&mut self) {
        for level in 1..LEVELS {
            let l = level as usize - 1;
            if self.free[l].len() > 2 * RETIRE_BATCH {
                let excess = self.free[l].len() - RETIRE_BATCH;
                self.pool.give_shared(level, self.free[l].drain(..excess));
            }
        }
    }

    /// Takes back a zeroed table of `level` that was never published.
    pub(super) fn put(&mut self, level: u32, table: NonNull<Table>) {
        let l = level as usize - 1;
        self.free[l].push(TablePtr(table));
        // The oldest (least likely still in this core's CPU cache) go to the shared lists.
        self.spill_over_bound();
    }

    /// Keeps an unlinked, zeroed table of `level` until a grace period passed; hands the
    /// retired tables to `domain` once [`RETIRE_BATCH`] accumulated.
    pub(super) fn retire<F: aspace_rcu::Flavor>(
        &mut self,
        table: TablePtr,
        level: u32,
        domain: &aspace_rcu::Domain<F>,
    ) {
        self.retired.push((table, level));
        if self.retired.len() >= RETIRE_BATCH {
            self.flush(Some(self.slot), domain);
        }
    }

    /// Hands the retired tables to `domain`, bound for `slot`'s returned list (or the shared
    /// lists).
    fn flush<F: aspace_rcu::Flavor>(
        &mut self,
        slot: Option<usize>,
        domain: &aspace_rcu::Domain<F>,
    ) {
        if !self.retired.is_empty() {
            let batch = std::mem::take(&mut self.retired);
            TablePool::retire(&self.pool, batch, slot, domain);
        }
    }

    /// A detaching core: its free tables go to the shared lists, its retired ones to `domain`
    /// bound for the shared lists (the slot may be reused by another core, or by none).
    pub(crate) fn drain<F: aspace_rcu::Flavor>(&mut self, domain: &aspace_rcu::Domain<F>) {
        self.flush(None, domain);
        // What came back to the slot (past its grace period) leaves with the free tables; a
        // batch still in flight lands there later, bounded by `recycle`, and is taken by the
        // next core on this slot.
        self.pool.take_returned(self.slot, &mut self.free);
        for level in 1..LEVELS {
            let l = level as usize - 1;
            self.pool.give_shared(level, self.free[l].drain(..));
        }
    }

    /// Tables waiting for a grace period in this cache (tests).
    #[cfg(all(test, not(loom)))]
    pub(super) fn retired_len(&self) -> usize {
        self.retired.len()
    }
}

impl Drop for PtCache {
    fn drop(&mut self) {
        for level in 1..LEVELS {
            let l = level as usize - 1;
            self.pool.give_shared(level, self.free[l].drain(..));
        }
        // No domain here to wait for a grace period: never reuse them.
        self.pool.orphan(self.retired.drain(..).map(|(t, _)| t));
    }
}
