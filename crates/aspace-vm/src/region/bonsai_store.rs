//! The Bonsai region store (issue 19; ASPLOS'12 §5.3): the region set in `aspace_map`'s
//! [`BonsaiMap`], searched by lock-free faults under RCU, edited by one writer at a time.
//!
//! Two halves:
//! - [`BonsaiRegions`], the shared part a design keeps: the tree, whose values are
//!   `Arc<TreeRegion>` (a [`StoredRegion`] and its per-region lock word, [`VmaLock`]), and the
//!   shmem numbers. Its lock-free lookup is [`RcuRegions`], what `syscalls::fault_rcu` searches.
//! - [`BonsaiStore`], the [`RegionStore`] the Linux bodies run on, a borrow of the regions
//!   made only under the design's space lock (`BonsaiStore::new` is `unsafe` and says so): every
//!   edit holds that lock exclusively, so a store's own lookups need no read guard
//!   (`BonsaiMap::query_excluding_writers`): nothing is unlinked while the store lives.
//!
//! # How region values survive path copies (the leave rule)
//!
//! Bonsai copies every node on the path of an update (and the rotated ones): a copy clones its
//! value. Values are `Arc`s of region objects, so a copy of an untouched ancestor shares the
//! *same* region object, unmarked: a fault on it never retries because of an unrelated edit. A
//! lock-free fault reads the region through the node it found (a plain `&Arc` deref under its
//! read guard: no reference count is touched, so a soft fault writes no shared line but its PTE
//! and frame). The object is freed when the last node holding it is freed, i.e. after a grace
//! period following the update that unlinked the last such node: no reader still holds it.
//!
//! Only regions that actually leave the set are marked. [`RegionStore::replace_window`] compares
//! the old window with the plan's new regions: a region that appears unchanged in both (same
//! bounds, same attributes) keeps its node and its object; every other old region is
//! write-locked ([`VmaLock::write_lock_detach`], which waits out per-region readers of the
//! `pervma` design) and marked ([`StoredRegion::mark_replaced`], with its `SeqCst` fence), and
//! then the removals and the new regions are published by one `BonsaiMap::replace` (one update,
//! one commit readers see whole). So a lock-free fault sees the set before or after an edit,
//! never between, and a lookup that finds no region is `Unmapped`
//! ([`RcuRegions::MISS_IS_UNMAPPED`]). The mark comes before the publish and before the Linux
//! body touches any entry of the region's range (the bodies edit first, then zap or protect).
//!
//! If the publish fails (an injected node-allocation failure; the allocator aborts otherwise)
//! nothing changed in the set but the marks and detach bits stay: faults on those regions then
//! go to the designs' locked paths (which ignore both) and still answer correctly. They stay
//! so until an edit replaces those regions (issue 19's review: every fault on such a region
//! then spends `bonsai`'s lock-free tries or `pervma`'s trylock before the lock); allocating
//! the publish's nodes before marking would close it.
//!
//! Not for: locking (the designs `bonsai` and `pervma` hold their space lock around a store).

#[cfg(all(test, loom))]
mod loom_tests;

use super::gap::highest_gap;
use super::shmem::ShmemNumbers;
use super::store::{RcuRegions, RegionRef, RegionStore, StoredRegion};
use super::{AnonId, Region};
use crate::error::{Limit, VmError};
use crate::semantics::Bounds;
use crate::sync::{AtomicU64, Ordering};
use aspace_map::{BonsaiMap, Interval, IntervalMap, MapError, KEY_SPACE_END, PAGE_SIZE};
use aspace_rcu::{Domain, Guard};
use std::ops::{ControlFlow, Range};
use std::sync::Arc;

/// A per-region reader-writer lock word (`pervma`'s per-VMA lock): readers in the low bits,
/// [`VmaLock::DETACHED`] set once by the editor that takes the region out of the set.
///
/// The write side is never released: an edit that write-locks a region always replaces it (the
/// store publishes a new object for whatever it changes), so the old object is detached for
/// good, like a Linux VMA that `vma_start_write` locked and the edit then detached. That is why
/// no unlock pass (Linux's `mm_lock_seq` increment) is needed at the end of a write section.
#[derive(Debug, Default)]
pub(crate) struct VmaLock {
    word: AtomicU64,
}

impl VmaLock {
    /// The write bit: set once, never cleared.
    const DETACHED: u64 = 1 << 63;

    /// Takes a read lock unless the region is detached (write-locked). Linux's
    /// `vma_start_read`: a failure sends the fault to the space lock.
    #[inline]
    pub(crate) fn try_read(&self) -> bool {
        // Acquire: pairs with nothing the editor publishes through the word (the region's
        // contents are immutable); the RMW's single order is what excludes the writer: either
        // this add comes first and the editor waits for it, or it sees DETACHED.
        let old = self.word.fetch_add(1, Ordering::Acquire);
        if old & Self::DETACHED != 0 {
            self.word.fetch_sub(1, Ordering::Release);
            return false;
        }
        true
    }

    /// The number of read locks held now (tests).
    #[cfg(all(test, not(loom)))]
    pub(crate) fn readers(&self) -> u64 {
        self.word.load(Ordering::Relaxed) & !Self::DETACHED
    }

    /// Releases a read lock taken by [`VmaLock::try_read`].
    #[inline]
    pub(crate) fn read_unlock(&self) {
        // Release: the fault's fill happens before the editor's wait ends (its Acquire load).
        self.word.fetch_sub(1, Ordering::Release);
    }

    /// Write-locks the region for good and waits until no reader holds it (Linux's
    /// `vma_start_write` then detach). Called only under the space lock, by the one editor.
    pub(crate) fn write_lock_detach(&self) {
        // AcqRel: the single modification order of the word decides against every try_read.
        let old = self.word.fetch_or(Self::DETACHED, Ordering::AcqRel);
        if old & !Self::DETACHED == 0 {
            return;
        }
        #[cfg(all(test, not(loom)))]
        crate::fault_inject::VMA_WRITER_WAITS.reached();
        // Acquire: a reader's fill happens before our edit of its entries.
        let backoff = crossbeam_utils::Backoff::new();
        while self.word.load(Ordering::Acquire) & !Self::DETACHED != 0 {
            crate::sync::spin_wait(&backoff);
        }
    }
}

/// One region of the tree: its value and its per-region lock (used by `pervma`'s faults only;
/// `bonsai`'s faults never touch it, its editors set the detach bit uncontended).
#[derive(Debug)]
pub(crate) struct TreeRegion {
    pub(crate) stored: StoredRegion,
    pub(crate) lock: VmaLock,
}

impl TreeRegion {
    fn new(r: &Region) -> Arc<TreeRegion> {
        Arc::new(TreeRegion {
            stored: StoredRegion::new(r),
            lock: VmaLock::default(),
        })
    }
}

/// The shared half (module doc): the tree and the shmem numbers.
pub(crate) struct BonsaiRegions {
    map: BonsaiMap<Arc<TreeRegion>>,
    shmem: ShmemNumbers,
}

impl std::fmt::Debug for BonsaiRegions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BonsaiRegions")
            .field("regions", &self.map.len())
            .finish()
    }
}

impl BonsaiRegions {
    /// An empty set whose tree is reclaimed through `domain` (the space's: one read section
    /// covers a fault's lookup and its page-table walk).
    pub(crate) fn new(domain: Domain) -> BonsaiRegions {
        BonsaiRegions {
            map: BonsaiMap::new(domain),
            shmem: ShmemNumbers::default(),
        }
    }

    /// The region containing `va` and its tree object, under `guard` (lock-free).
    #[inline]
    pub(crate) fn lookup_tree<'g>(
        &'g self,
        va: u64,
        guard: &'g Guard<'_>,
    ) -> Option<(Range<u64>, &'g TreeRegion)> {
        self.map
            .query(va, guard)
            .map(|(iv, v)| (iv.start..iv.end, &**v))
    }

    /// The tree's allocation-failure hook (tests).
    #[cfg(all(test, not(loom)))]
    pub(crate) fn fail_allocations_after(&self, n: Option<usize>) {
        self.map.fail_allocations_after(n);
    }

    /// Checks the tree (tests).
    #[cfg(all(test, not(loom)))]
    pub(crate) fn check(&self) {
        self.map.check_invariants();
    }
}

/// The tree, whose store marks before it publishes (module doc).
impl RcuRegions for BonsaiRegions {
    const MISS_IS_UNMAPPED: bool = true;

    #[inline]
    fn lookup_rcu<'g>(
        &'g self,
        va: u64,
        guard: &'g Guard<'_>,
    ) -> Option<(Range<u64>, &'g StoredRegion)> {
        self.lookup_tree(va, guard).map(|(r, t)| (r, &t.stored))
    }
}

/// The [`RegionStore`] over [`BonsaiRegions`] (module doc), made under the space lock.
pub(crate) struct BonsaiStore<'a> {
    regions: &'a BonsaiRegions,
}

impl<'a> BonsaiStore<'a> {
    /// The store of `regions`.
    ///
    /// # Safety
    /// For the store's lifetime no other store of `regions` edits it: the caller holds a lock
    /// that every edit holds exclusively (the design's space lock; shared is enough for a
    /// store only read through `&`). Its lookups read the tree without a read guard.
    pub(crate) unsafe fn new(regions: &'a BonsaiRegions) -> BonsaiStore<'a> {
        BonsaiStore { regions }
    }

    fn map(&self) -> &'a BonsaiMap<Arc<TreeRegion>> {
        &self.regions.map
    }

    /// The region containing `addr`.
    fn find(&self, addr: u64) -> Option<RegionRef<'a>> {
        // SAFETY: no edit runs while this store lives (`BonsaiStore::new`'s contract).
        let (iv, t) = unsafe { self.map().query_excluding_writers(addr) }?;
        Some(RegionRef::new(iv.start, iv.end, &t.stored))
    }

    /// Calls `f` on every region overlapping `range` (any bytes), in order, until it breaks.
    fn visit(&self, range: Range<u64>, mut f: impl FnMut(Region) -> ControlFlow<()>) {
        let lo = range.start - range.start % PAGE_SIZE;
        let hi = range
            .end
            .min(KEY_SPACE_END)
            .next_multiple_of(PAGE_SIZE)
            .min(KEY_SPACE_END);
        if lo >= hi || range.start >= range.end {
            return;
        }
        // SAFETY: as in `find`.
        unsafe {
            self.map()
                .visit_excluding_writers(lo..hi, &mut |iv, t| {
                    let r = RegionRef::new(iv.start, iv.end, &t.stored).region();
                    if r.start < range.end && r.end > range.start {
                        f(r)
                    } else {
                        ControlFlow::Continue(())
                    }
                })
                .expect("a page-aligned, non-empty range inside the key space");
        }
    }

    fn collect(&self, range: Range<u64>) -> Vec<Region> {
        let mut out = Vec::new();
        self.visit(range, |r| {
            out.push(r);
            ControlFlow::Continue(())
        });
        out
    }

    /// Checks the invariants of every store and the tree's own (tests).
    #[cfg(all(test, not(loom)))]
    pub(crate) fn check(&self) {
        super::store::check_regions(self.iter());
        self.regions.check();
    }
}

impl RegionStore for BonsaiStore<'_> {
    fn len(&self) -> usize {
        self.map().len()
    }

    fn lookup(&self, addr: u64) -> Option<RegionRef<'_>> {
        self.find(addr)
    }

    fn lookup_with_next(&self, addr: u64) -> Option<(RegionRef<'_>, Option<RegionRef<'_>>)> {
        let r = self.find(addr)?;
        let mut next_start = None;
        self.visit(r.end()..KEY_SPACE_END, |n| {
            next_start = Some(n.start);
            ControlFlow::Break(())
        });
        Some((r, next_start.and_then(|s| self.find(s))))
    }

    fn adjacent_prev(&self, r: &RegionRef<'_>) -> Option<Region> {
        let p = self.find(r.start().checked_sub(1)?)?;
        (p.end() == r.start()).then(|| p.region())
    }

    fn overlapping(&self, range: Range<u64>) -> impl Iterator<Item = Region> + '_ {
        self.collect(range.clone()).into_iter().map(move |mut r| {
            r.start = r.start.max(range.start);
            r.end = r.end.min(range.end);
            r
        })
    }

    fn iter(&self) -> impl Iterator<Item = Region> + '_ {
        self.collect(0..KEY_SPACE_END).into_iter()
    }

    /// Cost: at most two descents (the last region starting below `addr`, else the one before).
    fn end_at_or_below(&self, addr: u64) -> u64 {
        // SAFETY: no edit runs while this store lives (`BonsaiStore::new`).
        let Some((last, _)) = (unsafe { self.map().below_excluding_writers(addr) }) else {
            return 0;
        };
        if last.end <= addr {
            return last.end;
        }
        // `last` contains `addr`: the region before it ends at or below its start.
        // SAFETY: as above.
        unsafe { self.map().below_excluding_writers(last.start) }.map_or(0, |(iv, _)| iv.end)
    }

    /// Cost: O(log n), the tree's gap augmentation searched right to left (Linux's
    /// `unmapped_area_topdown`); bounds the tree cannot take (beyond its key space) fall back
    /// to a scan of every region.
    fn find_gap_topdown(&self, len: u64, bounds: Bounds) -> Option<u64> {
        if bounds.min_addr < bounds.max_addr && bounds.max_addr <= KEY_SPACE_END && len > 0 {
            let within = bounds.min_addr..bounds.max_addr;
            // SAFETY: no edit runs while this store lives (`BonsaiStore::new`).
            if let Ok(found) = unsafe { self.map().last_fit_excluding_writers(within, len) } {
                return found;
            }
        }
        let regions = self.collect(0..KEY_SPACE_END);
        highest_gap(regions.iter().rev().map(|r| r.start..r.end), len, bounds)
    }

    fn read_window(&self, range: Range<u64>, old: &mut Vec<Region>) -> u64 {
        old.clear();
        let mut next_start = u64::MAX;
        self.visit(range.start.saturating_sub(1)..KEY_SPACE_END, |r| {
            if r.end < range.start {
                return ControlFlow::Continue(());
            }
            if r.start >= range.end {
                if r.start == range.end {
                    old.push(r);
                }
                next_start = r.start;
                return ControlFlow::Break(());
            }
            old.push(r);
            if r.end > range.end {
                return ControlFlow::Break(());
            }
            ControlFlow::Continue(())
        });
        next_start
    }

    fn next_shmem(&self) -> AnonId {
        // Taken now and given back if the mapping is not made (`shmem_created` keeps it): the
        // store is held exclusively, so the number is the next one in sequence.
        let n = self.regions.shmem.take();
        self.regions.shmem.give_back(n);
        n
    }

    fn shmem_created(&mut self) {
        let _ = self.regions.shmem.take();
    }

    /// Nothing to reserve: the tree allocates its nodes inside `replace`, before it publishes.
    /// Nothing to reserve: the Bonsai tree allocates its nodes in the publish
    /// (`replace_window`), whose failure the bonsai tests cover. The test hook stands for the
    /// reservation a store makes before the body runs (`fault_inject::REGION_RESERVE`), so the
    /// shared fault-injection tests reach this store's callers too.
    fn reserve(&mut self, _new: &[Region]) -> Result<(), VmError> {
        #[cfg(all(test, not(loom)))]
        if crate::fault_inject::REGION_RESERVE.fails() {
            return Err(VmError::OutOfMemory(crate::error::Limit::Memory));
        }
        Ok(())
    }

    fn replace_window(&mut self, old: &[Region], new: &[Region]) -> Result<(), VmError> {
        let mut remove = Vec::with_capacity(old.len());
        for o in old.iter().filter(|o| !new.contains(o)) {
            // SAFETY: as in `find`; the reference is not kept past this loop.
            let (iv, t) = unsafe { self.map().query_excluding_writers(o.start) }
                .expect("a window's region is in the tree");
            debug_assert_eq!((iv.start, iv.end), (o.start, o.end));
            // The region leaves: detach it (waiting out `pervma`'s readers), then mark it, both
            // before the publish below and before the body touches its entries (module doc).
            t.lock.write_lock_detach();
            t.stored.mark_replaced();
            remove.push(o.start);
        }
        let insert = new
            .iter()
            .filter(|n| !old.contains(n))
            .map(|r| {
                let iv = Interval::new(r.start, r.end).expect("regions are page-aligned");
                (iv, TreeRegion::new(r))
            })
            .collect();
        match self.map().replace(&remove, insert) {
            Ok(()) => Ok(()),
            Err(MapError::OutOfMemory) => Err(VmError::OutOfMemory(Limit::Memory)),
            Err(e) => unreachable!("the plan's regions are disjoint and in the window: {e}"),
        }
    }
}
