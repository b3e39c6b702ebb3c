//! Where regions live: the [`RegionStore`] interface the Linux rules (`designs/syscalls.rs`)
//! are written against, and its first implementation, [`BTreeStore`], a `BTreeMap` keyed by
//! region **end**.
//!
//! A store answers lookups and the searches placement needs, and performs an edit in two steps
//! around the pure plan (`plan.rs`): [`RegionStore::read_window`] reads the regions an edit of a
//! range can touch (its neighbours included), and [`RegionStore::replace_window`] swaps them for
//! the plan's result. The Bonsai tree (one writer, published by one root pointer) and the
//! interval skiplist (`lock` the window's nodes, then `swap` them: `interval`'s window,
//! `designs/window.rs`, and the test-only `skiplist_store.rs`) fit the same two steps,
//! so a later design supplies a store and reuses the plan and the Linux bodies unchanged.
//!
//! Each region's value is a [`StoredRegion`]: its attributes, with the anon identity kept in an
//! atomic word so that a fault holding the store *shared* can set it once (none -> id, the
//! first write fault); every other change goes through an edit with the store borrowed
//! mutably. [`RegionRef`] is a borrowed region of a store.
//!
//! # Why the `BTreeMap` is keyed by end
//!
//! `lookup(addr)` is the first entry with `end > addr`; and the `alloc` pattern (top-down
//! placement directly below the previous mapping, which then merges) extends an existing region
//! downwards, which keeps its key: the replacement is one `get_mut`, no remove and insert.
//!
//! # Invariants
//! Regions are disjoint, non-empty, page aligned, and no two adjacent regions are mergeable;
//! in the `BTreeMap`, `map[end].start < end`.
//!
//! # The leave rule (for every design with lock-free faults)
//!
//! A lock-free fault looks a region up without any lock, may be preempted, and then fills a
//! page-table entry under that leaf's lock for the region it found. So every region value that
//! leaves the store while such faults run (removed, replaced, *or copied unchanged into a new
//! node* by a commit that rewrites a span around it) is marked ([`StoredRegion::mark_replaced`])
//! before its successor is published and before any entry of its range is touched, and a fault
//! checks the mark under the leaf lock
//! ([`PageTables::fill_checked`](crate::page_table::PageTables::fill_checked); the checks and the
//! races they close are `designs/syscalls.rs`'s `fault_rcu`, which every lock-free fault uses).
//! The mark is set by the store, never left to a design or a body to remember:
//! - [`region_skiplist`] builds the skiplist of regions with the mark as its leave hook, so the
//!   skiplist's one commit marks every node it takes out of the list, copies included
//!   (`SkipListMap::with_leave_mark`);
//! - an edit that drops a held region from an open window (`designs/window.rs`) marks
//!   it when it drops it, before the body clears or downgrades its entries.
//! - the `hybrid` design's tree (`region/rcu_store.rs`): `replace_window` marks every region of
//!   the window that does not stay exactly as it was before it publishes the new ones (and the
//!   body touches entries only after it returned); an unchanged region keeps its object, which
//!   is neither marked nor copied.
//!
//! An unmarked copy once let a fault install a translation after `munmap` returned (the
//! regression tests `stage1_fault_never_fills_after_*` in `designs/lock_free_tests.rs`, run on every
//! design with lock-free faults).
//!
//! Not for: locking (the design wraps the store in its lock) or the rules of an edit (`plan.rs`).

use super::gap::highest_gap;
use super::plan::{plan_edit, EditBuffers, EditOutcome, OnOverlap};
use super::{AnonId, Attrs, Region};
use crate::error::VmError;
use crate::semantics::Bounds;
use crate::sync::stat::AtomicU64;
use crate::sync::AtomicBool;
use crate::types::{Prot, Sharing};
use aspace_map::{ArenaLayout, IntervalMap, RadixMap, SkipListMap};
use aspace_rcu::{Domain, Guard};
use std::collections::BTreeMap;
use std::ops::Range;
use std::sync::atomic::Ordering;

/// What a store keeps for one region (besides the key it is found by).
#[derive(Debug)]
pub(crate) struct StoredRegion {
    start: u64,
    prot: Prot,
    sharing: Sharing,
    flags: u8,
    shm_base: u64,
    /// [`AnonId::encode`]d. Set none -> id at most once under a shared borrow (first write
    /// fault, [`RegionRef::adopt_anon`]); otherwise written only through `&mut`. Relaxed
    /// everywhere: it is a value, not a publication; the design's lock orders it against the
    /// edits that read it.
    anon: AtomicU64,
    /// Set once (false -> true) when an edit replaces or removes the region while lock-free
    /// faults may still hold it (`interval`, `hybrid`: `syscalls::fault_rcu` checks it under
    /// the leaf's fill lock and gives up if set). Never cleared. Ordered by `SeqCst` fences on both
    /// sides: see [`StoredRegion::mark_replaced`].
    replaced: AtomicBool,
}

/// A copy with the anon identity as it is now (loaded Relaxed, like [`StoredRegion::attrs`]).
/// A map that clones values needs it (`aspace_map::SkipListMap` clones the value of a region it
/// trims, which `SkipListStore` never asks it to do).
impl Clone for StoredRegion {
    fn clone(&self) -> StoredRegion {
        StoredRegion {
            anon: AtomicU64::new(self.anon.load(Ordering::Relaxed)),
            // A copy is a new region value, not yet seen by any fault.
            replaced: AtomicBool::new(false),
            ..*self
        }
    }
}

impl StoredRegion {
    /// The stored form of `r`.
    #[inline]
    pub(crate) fn new(r: &Region) -> StoredRegion {
        StoredRegion {
            start: r.start,
            prot: r.attrs.prot,
            sharing: r.attrs.sharing,
            flags: r.attrs.flags,
            shm_base: r.attrs.shm_base,
            anon: AtomicU64::new(AnonId::encode(r.attrs.anon)),
            replaced: AtomicBool::new(false),
        }
    }

    /// Records that this region value left the store (replaced, removed, or copied into a new
    /// node). Called by the store (module doc, "The leave rule"): by the skiplist's commit
    /// before it publishes the successor, and by a window's edit before the body clears or
    /// downgrades the region's page-table entries.
    ///
    /// The store is followed by a `SeqCst` fence, which pairs with the fence that
    /// `PageTables::fill_checked` executes under the leaf lock before it asks whether the
    /// region was replaced (the argument is in `fill_checked`'s doc): when the editor's walk
    /// found no leaf table that a lock-free fault then found installed, the fences order the
    /// mark before the fault's check.
    #[inline]
    pub(crate) fn mark_replaced(&self) {
        // Only the holder of the region's lock (`interval`: its window; `hybrid`: the tree's
        // edit token) marks it, so a mark already set was set (and fenced) earlier by this same
        // editor (`replace_window`, then the commit): done.
        // Relaxed: our own earlier store, or none.
        if self.replaced.load(crate::sync::Ordering::Relaxed) {
            return;
        }
        // Relaxed: ordered by the fence below (and, for a fault under the same leaf lock, by
        // that lock).
        self.replaced.store(true, crate::sync::Ordering::Relaxed);
        crate::sync::fence(crate::sync::Ordering::SeqCst);
    }

    /// Whether an edit replaced or removed the region (see [`StoredRegion::mark_replaced`]).
    #[inline]
    pub(crate) fn is_replaced(&self) -> bool {
        // Relaxed: `fill_checked` executes a SeqCst fence before calling this (the pairing is in
        // `mark_replaced`'s doc); other callers hold the locks that exclude the editor.
        self.replaced.load(crate::sync::Ordering::Relaxed)
    }

    /// The attributes (anon loaded Relaxed).
    #[inline]
    pub(crate) fn attrs(&self) -> Attrs {
        Attrs {
            prot: self.prot,
            sharing: self.sharing,
            flags: self.flags,
            anon: AnonId::decode(self.anon.load(Ordering::Relaxed)),
            shm_base: self.shm_base,
        }
    }
}

/// The skiplist of regions, marking every node its commits take out of the list (module doc,
/// "The leave rule"). Every store over `aspace_map`'s skiplist is built here.
pub(crate) fn region_skiplist(
    domain: Domain,
    arenas: Option<ArenaLayout>,
) -> SkipListMap<StoredRegion> {
    let map = match arenas {
        Some(layout) => SkipListMap::with_arenas(domain, layout),
        None => SkipListMap::new(domain),
    };
    map.with_leave_mark(StoredRegion::mark_replaced)
}

/// The radix tree of regions (the `radix` design's), marking every record its commits take out
/// of the tree (module doc, "The leave rule"; `RadixMap::with_leave_mark`). Every store over
/// `aspace_map`'s radix tree is built here.
pub(crate) fn region_radix(domain: Domain) -> RadixMap<StoredRegion> {
    RadixMap::new(domain).with_leave_mark(StoredRegion::mark_replaced)
}

/// A region set that a fault can search without locks, under a read guard of the space's RCU
/// domain: the one thing a lock-free fault design supplies to `designs/syscalls.rs`'s
/// `fault_rcu`. Its values must obey the leave rule (module doc): a value that leaves the set is
/// marked before its successor is published and before any entry of its range changes.
pub(crate) trait RcuRegions {
    /// Whether a lookup that finds no region answers the fault (`Unmapped`): true when every
    /// edit replaces a range's regions in one step that readers see whole (the skiplist's
    /// `swap`); false for a set whose edits unlink before they link, where a miss may be a
    /// split in flight and the fault retries under the design's locks.
    const MISS_IS_UNMAPPED: bool;

    /// The region containing `va`: its range and its value, valid while `guard` lives.
    fn lookup_rcu<'g>(
        &'g self,
        va: u64,
        guard: &'g Guard<'_>,
    ) -> Option<(Range<u64>, &'g StoredRegion)>;
}

/// The region skiplist, built by [`region_skiplist`] (whose commits mark what leaves).
impl RcuRegions for SkipListMap<StoredRegion> {
    const MISS_IS_UNMAPPED: bool = true;

    #[inline]
    fn lookup_rcu<'g>(
        &'g self,
        va: u64,
        guard: &'g Guard<'_>,
    ) -> Option<(Range<u64>, &'g StoredRegion)> {
        self.query(va, guard).map(|(iv, v)| (iv.start..iv.end, v))
    }
}

/// The radix tree of regions, built by [`region_radix`] (whose commits mark what leaves); its
/// updates publish a range's new records in one step (a descriptor and one commit store), so
/// a lookup that finds nothing is a true miss.
impl RcuRegions for RadixMap<StoredRegion> {
    const MISS_IS_UNMAPPED: bool = true;

    #[inline]
    fn lookup_rcu<'g>(
        &'g self,
        va: u64,
        guard: &'g Guard<'_>,
    ) -> Option<(Range<u64>, &'g StoredRegion)> {
        self.query(va, guard).map(|(iv, v)| (iv.start..iv.end, v))
    }
}

/// A region of a store, borrowed.
#[derive(Clone, Copy, Debug)]
pub(crate) struct RegionRef<'a> {
    start: u64,
    end: u64,
    stored: &'a StoredRegion,
}

impl<'a> RegionRef<'a> {
    /// The region `[start, end)` with the attributes of `stored` (a store keyed by interval,
    /// whose values' own `start` is not kept).
    #[inline]
    pub(crate) fn new(start: u64, end: u64, stored: &'a StoredRegion) -> RegionRef<'a> {
        RegionRef { start, end, stored }
    }

    /// The region `[stored.start, end)` (a store keyed by end, like the `BTreeStore`).
    #[inline]
    pub(crate) fn keyed(end: u64, stored: &'a StoredRegion) -> RegionRef<'a> {
        RegionRef {
            start: stored.start,
            end,
            stored,
        }
    }

    /// First byte.
    #[inline]
    pub(crate) fn start(&self) -> u64 {
        self.start
    }

    /// One past the last byte.
    #[inline]
    pub(crate) fn end(&self) -> u64 {
        self.end
    }

    /// Its protection.
    #[inline]
    pub(crate) fn prot(&self) -> Prot {
        self.stored.prot
    }

    /// Its attributes now.
    #[inline]
    pub(crate) fn attrs(&self) -> Attrs {
        self.stored.attrs()
    }

    /// The region by value.
    #[inline]
    pub(crate) fn region(&self) -> Region {
        Region {
            start: self.start,
            end: self.end,
            attrs: self.attrs(),
        }
    }

    /// Gives the region the identity `id` unless it already has one; returns the identity now in
    /// place (a concurrent fault may have won). Callable with the store borrowed shared.
    #[inline]
    pub(crate) fn adopt_anon(&self, id: AnonId) -> AnonId {
        match self.stored.anon.compare_exchange(
            0,
            AnonId::encode(Some(id)),
            Ordering::Relaxed,
            Ordering::Relaxed,
        ) {
            Ok(_) => id,
            Err(won) => AnonId::decode(won).expect("an identity once set is never cleared"),
        }
    }
}

/// Where a design keeps its regions (module doc). Lookups take `&self`; the two edit steps
/// `&mut self`, so a caller that edits holds the store exclusively (its design's write lock).
pub(crate) trait RegionStore {
    /// Number of regions.
    fn len(&self) -> usize;

    /// The region containing `addr`.
    fn lookup(&self, addr: u64) -> Option<RegionRef<'_>>;

    /// The region containing `addr`, and the region after it (adjacent or not): one search for
    /// both (a first write fault may adopt the next region's anon identity).
    #[allow(clippy::type_complexity)]
    fn lookup_with_next(&self, addr: u64) -> Option<(RegionRef<'_>, Option<RegionRef<'_>>)>;

    /// The region ending exactly where `r` starts, if any.
    fn adjacent_prev(&self, r: &RegionRef<'_>) -> Option<Region>;

    /// Regions overlapping `range`, in order, clipped to it.
    fn overlapping(&self, range: Range<u64>) -> impl Iterator<Item = Region> + '_;

    /// Every region in address order.
    fn iter(&self) -> impl Iterator<Item = Region> + '_;

    /// The end of the last region that ends at or below `addr`, 0 if none.
    fn end_at_or_below(&self, addr: u64) -> u64;

    /// The highest `len`-byte gap inside `bounds` (top-down search), its start.
    fn find_gap_topdown(&self, len: u64, bounds: Bounds) -> Option<u64>;

    /// Reads the window of an edit of `range` into `old` (cleared first): the region ending
    /// exactly at `range.start`, the regions overlapping `range`, the region starting exactly at
    /// `range.end`. Returns the start of the first region at or after `range.end` when the read
    /// reached one, else `u64::MAX` (`plan_edit`'s `next_start`).
    fn read_window(&self, range: Range<u64>, old: &mut Vec<Region>) -> u64;

    /// The number the next shared mapping's shmem object gets: 1, 2, ... in creation order, like
    /// the inode numbers Linux hands out, one counter per space, so a sequential history always
    /// numbers its shared mappings the same. Call [`RegionStore::shmem_created`] once mapped.
    fn next_shmem(&self) -> AnonId;

    /// Records that the shared mapping numbered [`RegionStore::next_shmem`] was created.
    fn shmem_created(&mut self);

    /// Allocates what replacing a window with `new` needs, before anything changes (a store
    /// whose nodes come from a fallible allocator fails here, and the edit changes nothing).
    ///
    /// # Errors
    /// `ENOMEM` (`Limit::Memory`) when the memory cannot be had.
    fn reserve(&mut self, new: &[Region]) -> Result<(), VmError>;

    /// Replaces the window `old` (as the last `read_window` returned it, unchanged since) with
    /// `new` (disjoint, sorted, covering no address outside the window's span); `reserve(new)`
    /// succeeded before.
    ///
    /// # Errors
    /// `ENOMEM` (`Limit::Memory`) from a store that can only allocate inside its commit (the
    /// skiplist's `swap` makes its nodes there); such a store changes nothing when it fails.
    /// A store that reserves everything beforehand never fails here.
    fn replace_window(&mut self, old: &[Region], new: &[Region]) -> Result<(), VmError>;

    /// Whether no region overlaps `[start, end)`.
    fn is_free(&self, start: u64, end: u64) -> bool {
        self.overlapping(start..end).next().is_none()
    }

    /// The first address of `range` that no region covers, if any.
    fn first_hole(&self, range: Range<u64>) -> Option<u64> {
        let mut cursor = range.start;
        for r in self.overlapping(range.clone()) {
            if r.start > cursor {
                return Some(cursor);
            }
            cursor = r.end;
        }
        (cursor < range.end).then_some(cursor)
    }

    /// The largest range around `range` that holds no region, within `[0, va_end)` (the unmapped
    /// range widened to its neighbouring gaps, for page-table freeing). Not clipped to the
    /// space's bounds: no region can exist below `min_addr` or above `max_addr`, so tables
    /// covering those addresses are freeable too (clipping kept the tables that cover the low
    /// 2 MiB alive forever; found by the conformance suite). `range` must be free now;
    /// `outcome` is what the edit that freed it saw.
    fn gap_around(&self, range: Range<u64>, outcome: EditOutcome, va_end: u64) -> Range<u64> {
        let lo = match outcome.prev_end {
            Some(e) => e,
            None => self.end_at_or_below(range.start),
        };
        let hi = outcome.next_start.min(va_end.max(range.end));
        lo.min(range.start)..hi.max(range.end)
    }

    /// Rewrites `range` through `f` ([`plan_edit`]): reads the window, plans, reserves, and
    /// replaces the window only if all of that succeeded (a refused edit changes nothing).
    ///
    /// # Errors
    /// Those of [`plan_edit`], [`RegionStore::reserve`] and [`RegionStore::replace_window`].
    #[inline]
    fn edit(
        &mut self,
        bufs: &mut EditBuffers,
        range: Range<u64>,
        f: impl FnMut(Option<Attrs>) -> Option<Attrs>,
        on_overlap: OnOverlap,
        max_count: usize,
    ) -> Result<EditOutcome, VmError> {
        let next_start = self.read_window(range.clone(), &mut bufs.old);
        let outcome = plan_edit(
            range,
            &bufs.old,
            next_start,
            f,
            on_overlap,
            self.len(),
            max_count,
            &mut bufs.new,
        )?;
        self.reserve(&bufs.new)?;
        self.replace_window(&bufs.old, &bufs.new)?;
        Ok(outcome)
    }
}

/// The `BTreeMap` store (module doc).
#[derive(Debug, Default)]
pub(crate) struct BTreeStore {
    map: BTreeMap<u64, StoredRegion>,
    /// Shared mappings created so far (the last shmem object number handed out).
    shmem_count: u64,
}

impl BTreeStore {
    /// Checks the store's invariants (tests): disjoint, sorted, non-empty, aligned, and no two
    /// adjacent regions that Linux would have merged.
    #[cfg(all(test, not(loom)))]
    pub(crate) fn check(&self) {
        check_regions(self.iter());
    }
}

/// The invariants of every store, checked over its regions in address order (tests): disjoint,
/// sorted, non-empty, aligned, and no two adjacent regions that Linux would have merged.
#[cfg(all(test, not(loom)))]
pub(crate) fn check_regions(regions: impl Iterator<Item = Region>) {
    let mut prev: Option<Region> = None;
    for r in regions {
        assert!(r.start < r.end, "empty region {r:?}");
        assert!(r.start % 4096 == 0 && r.end % 4096 == 0, "unaligned {r:?}");
        if let Some(p) = prev {
            assert!(p.end <= r.start, "overlap {p:?} {r:?}");
            assert!(
                !(p.end == r.start && p.attrs.mergeable(&r.attrs)),
                "unmerged neighbours {p:?} {r:?}"
            );
        }
        prev = Some(r);
    }
}

impl RegionStore for BTreeStore {
    #[inline]
    fn len(&self) -> usize {
        self.map.len()
    }

    #[inline]
    fn lookup(&self, addr: u64) -> Option<RegionRef<'_>> {
        let (&end, stored) = self.map.range(addr.checked_add(1)?..).next()?;
        (stored.start <= addr).then_some(RegionRef::keyed(end, stored))
    }

    #[inline]
    fn lookup_with_next(&self, addr: u64) -> Option<(RegionRef<'_>, Option<RegionRef<'_>>)> {
        let mut it = self.map.range(addr.checked_add(1)?..);
        let (&end, stored) = it.next()?;
        if stored.start > addr {
            return None;
        }
        let next = it.next().map(|(&e, s)| RegionRef::keyed(e, s));
        Some((RegionRef::keyed(end, stored), next))
    }

    #[inline]
    fn adjacent_prev(&self, r: &RegionRef<'_>) -> Option<Region> {
        // Keyed by end: one exact lookup.
        let s = self.map.get(&r.start())?;
        Some(RegionRef::keyed(r.start(), s).region())
    }

    fn overlapping(&self, range: Range<u64>) -> impl Iterator<Item = Region> + '_ {
        self.map
            .range(range.start.saturating_add(1)..)
            .take_while(move |(_, s)| s.start < range.end)
            .map(move |(&end, s)| {
                let mut r = RegionRef::keyed(end, s).region();
                r.start = r.start.max(range.start);
                r.end = r.end.min(range.end);
                r
            })
    }

    fn iter(&self) -> impl Iterator<Item = Region> + '_ {
        self.map
            .iter()
            .map(|(&end, s)| RegionRef::keyed(end, s).region())
    }

    #[inline]
    fn end_at_or_below(&self, addr: u64) -> u64 {
        self.map
            .range(..=addr)
            .next_back()
            .map_or(0, |(&end, _)| end)
    }

    /// Cost: one step per region above the gap found (a linear scan, like Linux before its gap
    /// augmentation; the benchmark patterns find their gap at the first step).
    #[inline]
    fn find_gap_topdown(&self, len: u64, bounds: Bounds) -> Option<u64> {
        let regions = self.map.iter().rev().map(|(&end, s)| s.start..end);
        highest_gap(regions, len, bounds)
    }

    #[inline]
    fn read_window(&self, range: Range<u64>, old: &mut Vec<Region>) -> u64 {
        old.clear();
        // Keys >= range.start: the left neighbour ending exactly at range.start, then the
        // regions overlapping the range, then the first one after it.
        for (&end, s) in self.map.range(range.start..) {
            let r = RegionRef::keyed(end, s).region();
            if r.start >= range.end {
                if r.start == range.end {
                    old.push(r);
                }
                return r.start;
            }
            old.push(r);
            if r.end > range.end {
                break;
            }
        }
        u64::MAX
    }

    fn next_shmem(&self) -> AnonId {
        AnonId::decode(self.shmem_count + 1).expect("not zero")
    }

    fn shmem_created(&mut self) {
        self.shmem_count += 1;
    }

    /// `BTreeMap` has no fallible insert (its node allocation aborts the process on failure,
    /// Rust's default), so there is nothing to reserve; tests inject the failure a fallible
    /// store would report here (`fault_inject::REGION_RESERVE`).
    #[inline]
    fn reserve(&mut self, _new: &[Region]) -> Result<(), VmError> {
        #[cfg(all(test, not(loom)))]
        if crate::fault_inject::REGION_RESERVE.fails() {
            return Err(VmError::OutOfMemory(crate::error::Limit::Memory));
        }
        Ok(())
    }

    /// Never fails: `BTreeMap` aborts instead (see [`BTreeStore::reserve`]).
    #[inline]
    fn replace_window(&mut self, old: &[Region], new: &[Region]) -> Result<(), VmError> {
        for o in old {
            if new.binary_search_by_key(&o.end, |p| p.end).is_err() {
                self.map.remove(&o.end);
            }
        }
        for p in new {
            // A key that was in the window is overwritten in place; others are new.
            let reused = old.binary_search_by_key(&p.end, |o| o.end).is_ok();
            match reused.then(|| self.map.get_mut(&p.end)).flatten() {
                Some(slot) => *slot = StoredRegion::new(p),
                None => {
                    self.map.insert(p.end, StoredRegion::new(p));
                }
            }
        }
        Ok(())
    }
}
