//! The `pervma` design: Linux 6.4+ per-VMA locks. A lock-free region lookup (the Bonsai store of
//! `region/bonsai_store.rs`, standing in for the maple tree), then the region's own read lock
//! for the fault; system calls take the space lock for writing plus the write lock of every
//! region they change; faults the per-region path cannot serve fall back to the space lock's
//! read side, where Linux's `lock_vma_under_rcu` fails.
//!
//! # Locks
//!
//! - **Page fault, stage 0** (`lock_vma_under_rcu` + `handle_mm_fault` under the VMA lock):
//!   under the core's RCU read section, the region containing the address (lock-free lookup),
//!   then its read lock ((`VmaLock::try_read`, `region/bonsai_store.rs`)). With the lock held the region cannot leave the
//!   set (an editor detaches it first, waiting for readers), so the fault runs
//!   `syscalls::fault_rcu` on that one region ([`Held`]): rights check, then a fill that installs
//!   no table, under the leaf's lock. Then the region's read unlock.
//! - **Stage 1, the space lock for reading** (Linux's `mmap_read_lock` fallback), then
//!   `fault_locked`, when the per-region path fails, as in Linux:
//!   - no region at the address (Linux falls back and finds none: `Unmapped`, answered there);
//!   - the trylock fails: an editor has write-locked the region, i.e. it is being replaced or
//!     removed (Linux: `vma_start_read` fails or the VMA is detached);
//!   - the fault needs something the per-region path does not do: a first write of a private
//!     region without an anon identity (Linux: `!vma->anon_vma` of an anonymous VMA, since the
//!     identity may be adopted from a neighbour), or a page table to install (a departure:
//!     Linux allocates page tables under the VMA lock; here a lock-free fill never installs one,
//!     `fault_rcu`'s `NoLeaf`).
//! - **System calls** (`mmap`, `munmap`, `mprotect`, `madvise`): the space lock for **writing**
//!   for the whole call, and the write lock of every region their edit changes: the store's
//!   `replace_window` write-locks each region that leaves the set (`VmaLock::write_lock_detach`,
//!   waiting for that region's readers) and marks it, before the one Bonsai update that
//!   publishes the edit and before the body zaps or downgrades any of its entries. Regions the
//!   edit does not change are not locked (a fault on them goes on).
//! - `maps()` and the region count: the space lock for reading.
//!
//! Lock order: space lock, then a region's lock (editors only: faults never hold a region lock
//! while waiting for the space lock: the read unlock comes before the fallback), then a leaf's
//! fill lock, then the frame pool's locks. An editor waiting for a region's readers holds the
//! space lock; the readers hold only the region lock and, briefly, a leaf lock, and never wait
//! for the space lock while holding the region's, so the wait ends.
//!
//! # Per-region lock word, not Linux's sequence numbers
//!
//! Linux marks a VMA write-locked by setting `vm_lock_seq = mm_lock_seq` under `mmap_lock`,
//! so that `mmap_write_unlock` unlocks every VMA it locked at once by incrementing
//! `mm_lock_seq`, with no pass over them: a VMA survives its write section (its bounds or flags
//! are changed in place). Here an edit never changes a region in place: the store publishes a
//! new object for every region it changes (the old one is marked for the lock-free readers of
//! `bonsai` anyway). So a write-locked region is detached for good and is never unlocked: one
//! lock word per region (readers count, and a detach bit set once) gives the same "no unlock
//! pass" without a space-wide sequence number that every fault would have to read (one more
//! shared line) and without Linux's re-check of `vm_lock_seq` after the read lock.
//!
//! # Why stage 0 is sound
//!
//! The region read lock keeps the region in the set from the trylock to the unlock: an edit that
//! removes, replaces or trims it waits in `write_lock_detach` until the fault unlocked, before
//! it publishes anything or touches an entry; so the fill (under the leaf lock) happens before
//! the edit's zap or protect of that entry, which then clears or downgrades it. The mark check
//! inside `fault_rcu` is therefore always false here (kept: it is the same body). A trylock that
//! comes after the detach fails. Edits of other regions are not excluded and need not be: they
//! change no entry of this region, and free only tables wholly inside a gap, which a table on
//! the walk to a page of a live region is not.
//!
//! # Shootdown
//!
//! Broadcast, as `bonsai` (its module doc says why targeted would also be sound: every table
//! free and every shooter hold the space lock's write side).
//!
//! Not for: parallel system calls (the space lock serializes them, as `mmap_lock` does).

#[cfg(all(test, not(loom)))]
mod tests;

use super::staged::Staged;
use super::syscalls::{fault_locked, fault_rcu};
use crate::core_state::Core;
use crate::error::Fault;
use crate::region::bonsai_store::{BonsaiRegions, BonsaiStore, TreeRegion, VmaLock};
use crate::region::store::{RcuRegions, RegionStore, StoredRegion};
use crate::shared::Shared;
use crate::sync::stat::RwLock;
use crate::types::{Access, RegionInfo};
use aspace_rcu::Guard;
use std::ops::Range;

/// The `pervma` design's state.
#[derive(Debug)]
pub(crate) struct PerVma {
    /// `mmap_lock`: system calls write it, faults that fall back read it.
    space: RwLock<()>,
    /// The regions (lock-free lookups; each with its own lock).
    regions: BonsaiRegions,
}

/// One region whose read lock the fault holds, as the region set `fault_rcu` searches: it
/// contains exactly the held region.
struct Held<'a> {
    range: Range<u64>,
    region: &'a StoredRegion,
}

impl RcuRegions for Held<'_> {
    /// The fault's address is in the held region (it was found there), so a miss cannot happen.
    const MISS_IS_UNMAPPED: bool = true;

    fn lookup_rcu<'g>(
        &'g self,
        va: u64,
        _guard: &'g Guard<'_>,
    ) -> Option<(Range<u64>, &'g StoredRegion)> {
        self.range
            .contains(&va)
            .then(|| (self.range.clone(), self.region))
    }
}

impl PerVma {
    /// An empty design for the space `sh` (the tree is reclaimed through the space's domain).
    pub(crate) fn new(sh: &Shared) -> PerVma {
        PerVma {
            space: RwLock::new(()),
            regions: BonsaiRegions::new(sh.domain.clone()),
        }
    }

    /// Runs `body` on the store under the space lock for writing.
    #[inline]
    fn write<R>(&self, body: impl FnOnce(&mut BonsaiStore<'_>) -> R) -> R {
        let _space = self.space.write();
        // SAFETY: every edit of `regions` goes through a store made here, under the write side.
        let mut store = unsafe { BonsaiStore::new(&self.regions) };
        body(&mut store)
    }

    /// Runs `body` on the store under the space lock for reading.
    #[inline]
    fn read<R>(&self, body: impl FnOnce(&BonsaiStore<'_>) -> R) -> R {
        let _space = self.space.read();
        // SAFETY: edits hold the write side, which the read guard excludes.
        let store = unsafe { BonsaiStore::new(&self.regions) };
        body(&store)
    }

    /// The region containing `va`, read-locked; `None` when the per-region path fails (module
    /// doc).
    #[inline]
    fn lock_region(&self, core: &Core, va: u64) -> Option<(Range<u64>, *const TreeRegion)> {
        let guard = core.reader.read();
        let (range, t) = self.regions.lookup_tree(va, &guard)?;
        if !t.lock.try_read() {
            return None;
        }
        Some((range, t as *const TreeRegion))
    }

    /// The store, for tests that check it between calls.
    #[cfg(all(test, not(loom)))]
    pub(crate) fn check(&self) {
        self.read(|s| s.check());
    }
}

impl Staged for PerVma {
    type Store<'s> = BonsaiStore<'s>;

    #[inline]
    fn edit<R>(&self, body: impl FnOnce(&mut BonsaiStore<'_>) -> R) -> R {
        self.write(body)
    }

    /// A fault through its stages (module doc); with the stage that resolved it.
    #[inline]
    fn resolve(
        &self,
        sh: &Shared,
        core: &mut Core,
        va: u64,
        access: Access,
    ) -> (Result<(), Fault>, usize) {
        if let Some((range, t)) = self.lock_region(core, va) {
            // SAFETY: the region is read-locked: no edit takes it out of the set before
            // `read_unlock` (an editor detaches it first and waits for readers), so a node
            // holding its `Arc` stays linked, hence allocated, until then.
            let t: &TreeRegion = unsafe { &*t };
            // Unlocks when dropped, also when the fault unwinds: a read lock left behind would
            // make the region's next editor wait forever under the space write lock.
            let locked = ReadLocked(&t.lock);
            let held = Held {
                range,
                region: &t.stored,
            };
            let r = fault_rcu(sh, core, &held, va, access);
            drop(locked);
            if let Ok(r) = r {
                return (r, 0);
            }
        }
        #[cfg(all(test, not(loom)))]
        crate::fault_inject::STAGE2_BEFORE_WINDOW.reached();
        let r = self.read(|store| fault_locked(sh, core, store, va, access));
        (r, 1)
    }

    fn region_infos(&self) -> Vec<RegionInfo> {
        self.read(|s| s.iter().map(|r| r.info()).collect())
    }

    fn regions_len(&self) -> u64 {
        self.read(|s| s.len() as u64)
    }
}

/// A region read lock taken by `VmaLock::try_read`, released on drop (unwinding included).
struct ReadLocked<'a>(&'a VmaLock);

impl Drop for ReadLocked<'_> {
    fn drop(&mut self) {
        self.0.read_unlock();
    }
}
