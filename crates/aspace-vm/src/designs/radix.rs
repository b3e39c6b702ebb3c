//! The `radix` design: RadixVM (Clements, Kaashoek, Zeldovich, EuroSys'13 §3), the regions in
//! RadixVM's radix tree and **per-core page tables** filled from per-page metadata, under the
//! range-locking policy IntervalVM introduced (`windowed.rs`), so that operations on
//! non-overlapping ranges write no shared cache line.
//!
//! # What comes from where
//!
//! - **The radix tree** (§3.2, `aspace_map::RadixMap`): four levels of 512 slots over the
//!   36-bit page number (two more above for the map's `u64` key space), a lock bit per slot,
//!   a uniform range folded into one interior slot, lazy expansion, nodes freed through
//!   Refcache. Its values are the regions ([`StoredRegion`]): a record per region, referenced
//!   by every slot the region covers, so the region's attributes are the paper's per-page
//!   "mapping metadata" stored once per folded range. Range locks are its slot lock bits: a
//!   window (`window.rs`) locks the range a call reads or changes, widened to the regions it
//!   overlaps and a page on each side, slot by slot from left to right (§3.2, "locking a range
//!   of slots").
//! - **Per-page metadata that owns the frames** and records which cores hold a translation
//!   (§3.3, "the radix tree records ... the set of cores that may have the page in their page
//!   tables"): the *owner tree* of the per-core organisation (`page_table/per_core.rs`), a
//!   4-level radix tree of 512-entry tables over the page number holding each page's frame,
//!   with a per-leaf record of the cores that copied a translation from it.
//! - **Per-core page tables** (§3.3): a fault fills the faulting core's own tree from the
//!   owner tree (the first fault of a page anywhere takes the frame, every later core copies
//!   it); each core walks only its own tree. A core may discard its tree (detach, memory
//!   pressure) and refill it by faults.
//! - **Targeted shootdown** (§3.4): `munmap`, `mprotect` and `DONTNEED` clear the owner entries
//!   of their range, then the copies in the trees of exactly the cores the owner leaves record,
//!   and shoot down only the cores whose copy they cleared; frames return to the pool after the
//!   shootdown (`syscalls::zap_locked`). A page only its own core touched sends no shootdown to
//!   any other core.
//! - **Refcache** (§3.1, `aspace_sync::Refcache`): counts the radix tree's nodes (`RadixMap`,
//!   `radix/reclaim.rs`). Frames have exactly one owner here (the owner tree's entry: private
//!   and shared anonymous memory, no file pages or fork yet), so they need no reference count:
//!   the zap frees them after the shootdown.
//!
//! # Linux's rules over the radix tree
//!
//! The Linux bodies (`syscalls.rs`) run unchanged on the window as their region store: region
//! splitting and merging, `max_map_count`, errnos. Because a region is one record of the tree
//! (not per-page state to be merged afterwards), `maps()` is a lock-free walk of the records
//! (one per region, in order) under the global read mode, identical to `/proc/self/maps` by
//! the same rules the other designs follow (the differential test checks it).
//!
//! # Faults
//!
//! Two stages, as `interval`'s: `syscalls::fault_rcu` over the tree's lock-free `query` (no
//! lock; the fill is checked under the owner leaf's lock against the region's replaced mark,
//! and the copy into the core's own tree is written before that lock is released:
//! `page_table/organisation.rs`), then, on `Retry` (no owner leaf yet, an edit in flight), LR
//! and a window around the region (its slots locked) and `syscalls::fault_locked`. The leave
//! rule holds because the tree is built by `region_radix` (its commits mark every record they
//! take out) and a window marks what it drops.
//!
//! # Departures from the paper
//!
//! - Faults do not lock the page's slot (RadixVM's fault locks it, expanding a folded range
//!   down to the page): the lock-free first stage is IntervalVM's, and it serves the common
//!   case without writing any line of the tree; the second stage locks the region's slots.
//! - The per-core record of who holds a translation is per leaf table (512 pages), not per
//!   page: a core that copied one page of a leaf is a target of every edit in that leaf. Exact
//!   for the workloads that map per-core ranges (`local`, `pipeline`); more targets (never
//!   fewer) where cores share a leaf.
//! - `mmap(NULL)` claims a gap in the calling core's arena (`RadixMap::alloc_padded`, a page
//!   of free space kept on both sides so no merge applies), where RadixVM's allocator hands out
//!   4 GiB-spaced ranges per core; freed space is reused.
//! - Page tables (the owner tree's and the per-core trees') are freed by `munmap` only where a
//!   whole table lies inside the window's held slots (`syscalls::munmap_locked` frees the
//!   tables of the gap it holds): the radix tree's range lock holds the range and a page on
//!   each side, not the gaps up to the next regions as the skiplist's does, so the empty tables
//!   of a small unmapped range stay linked until the range is mapped again (the arenas reuse
//!   it first), a larger `munmap` covers them, or their core discards its tree
//!   ([`CoreHandle::discard_page_tables`](crate::CoreHandle::discard_page_tables); RadixVM
//!   frees page-table pages the same way, "when memory is low", §3.3). Widening the lock to
//!   the leaf around the range would lock up to 512 slots per call.
//! - The hybrid lock's local modes (one uncontended per-core lock word) are kept: GR gives
//!   `maps()` a consistent view and GW the placement fallback.
//!
//! Not for: the Linux rules (`syscalls.rs`), the lock policy (`windowed.rs`), the radix tree
//! (`aspace_map::radix`), the per-core trees (`page_table/`).

use super::ops::REGION_ENTRY_BYTES;
use super::window::WindowMap;
use super::windowed::{ClaimError, RangeMap, Windowed};
use crate::region::store::{region_radix, StoredRegion};
use aspace_map::{
    ArenaLayout, Interval, IntervalLocking, IntervalMap, MapError, RadixLocked, RadixMap, PAGE_SIZE,
};
use aspace_rcu::Domain;
use std::ops::Range;

/// Bytes of one radix node: 512 slots of 8 bytes, a Refcache reference, the parent link, its
/// index, level and first page.
const NODE_BYTES: u64 = 512 * 8 + 48;

/// The `radix` design: the range-locking policy over the radix tree of regions, with per-core
/// page tables (`config::Design::page_tables`).
pub(crate) type RadixDesign = Windowed<RadixMap<StoredRegion>>;

/// The radix tree's range lock: the dynamic interval of the range (widened to the regions it
/// overlaps), its slots locked left to right.
impl WindowMap for RadixMap<StoredRegion> {
    fn hold(&self, range: Range<u64>) -> RadixLocked<'_, StoredRegion> {
        self.lock(range)
            .expect("page-aligned ranges inside the key space")
    }

    /// The held slots: nothing else is locked.
    fn stable_span(locked: &RadixLocked<'_, StoredRegion>) -> Range<u64> {
        let held = locked.held();
        held.start..held.end
    }

    fn held<'a>(
        locked: &'a RadixLocked<'_, StoredRegion>,
        f: impl FnMut((Interval, &'a StoredRegion)),
    ) {
        locked.intervals().for_each(f);
    }

    /// None: the window holds a page on each side of its range, so an adjacent region is held.
    fn borders<'a>(
        _locked: &'a RadixLocked<'_, StoredRegion>,
    ) -> [Option<(Interval, &'a StoredRegion)>; 2] {
        [None, None]
    }

    /// The whole held span: its slots are republished with their regions (unchanged ones as
    /// copies, marked by the commit), so no trimmed remainder is ever made.
    fn commit_span(locked: &mut RadixLocked<'_, StoredRegion>, _changed: Range<u64>) -> Range<u64> {
        locked.widen_to_held();
        let held = locked.held();
        held.start..held.end
    }
}

impl RangeMap for RadixMap<StoredRegion> {
    const DESIGN: &'static str = "RadixDesign";

    fn build(domain: Domain, _layout: Option<ArenaLayout>) -> Self {
        region_radix(domain)
    }

    /// First fit in the arena's range from the core's hint, a free page kept on both sides.
    fn alloc_in_arena(
        &self,
        layout: &ArenaLayout,
        idx: usize,
        len: u64,
        value: StoredRegion,
    ) -> Result<Interval, ClaimError> {
        let start = layout.base + (idx % layout.count) as u64 * layout.size;
        self.alloc_padded(start..start + layout.size, len, PAGE_SIZE, value)
            .map_err(|e| match e {
                MapError::OutOfMemory => ClaimError::OutOfMemory,
                _ => ClaimError::Elsewhere,
            })
    }

    /// The tree's nodes (the root and the live Refcache objects: 512 slots of 8 bytes and a
    /// header each) and a record per region (its bounds, value and key).
    fn metadata_bytes(&self) -> u64 {
        // Refcache's counters do not exist in loom builds (no node is counted there).
        #[cfg(not(loom))]
        let nodes = 1 + self.node_stats().live_objects.max(0) as u64;
        #[cfg(loom)]
        let nodes = 1;
        nodes * NODE_BYTES + self.len() as u64 * (REGION_ENTRY_BYTES + 16)
    }

    #[cfg(all(test, not(loom)))]
    fn check_map(&self) {
        self.check_invariants();
    }
}

#[cfg(all(test, not(loom)))]
mod tests;

#[cfg(all(test, not(loom)))]
mod review_tests;
