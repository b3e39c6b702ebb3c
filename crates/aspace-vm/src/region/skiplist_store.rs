//! The second region store, over `aspace_map`'s concurrent interval skiplist: the proof that the
//! seam between the edit plan (`plan.rs`) and a store (`store.rs`) holds for a store that is not
//! a `BTreeMap`. The store is exercised by the region tests (`tests.rs` runs every test against
//! both stores); the interval design (issue 11) will use it for real, which is why it is
//! test-only code for now and `aspace-map` stays a dev-dependency.
//!
//! # Shape
//! Regions are the skiplist's intervals, valued by [`StoredRegion`]. Lookups are RCU traversals
//! (`query`/`visit`) under a read section of the store's own reader. An edit reads its window
//! like the `BTreeStore` ([`RegionStore::read_window`]), and [`RegionStore::replace_window`]
//! commits the plan's regions with ONE `lock(span)` + `swap(locked, new)`, `span` covering the
//! old window and the new regions: the locked nodes are exactly the old window's regions, so the
//! swap never trims a region (never clones a value), and a reader sees the window either before
//! or after the edit, never half of it (the skiplist's linearization: one level-0 store).
//!
//! # Why the lock is taken in `replace_window`, not `read_window`
//! The trait reads with `&self` and replaces with `&mut self`. A `SkipLocked` borrows the map,
//! so one taken in `read_window` cannot be held across the `&mut self` call (and storing it in
//! the store would make it self-referential). Here it need not be: `&mut self` already excludes
//! every other edit, so the window `read_window` saw is unchanged when `replace_window` locks
//! it. A design whose edits run concurrently through `&self` (the interval design) needs the
//! lock to flow from the read to the commit: a `Window` handle returned by `read_window` and
//! consumed by `replace_window` (an associated type, `()` for the `BTreeStore`).
//!
//! # Allocation failure
//! The skiplist has no separate reservation: `swap` allocates its nodes before it publishes
//! anything and, when an allocation fails, changes nothing and releases the range
//! (`MapError::OutOfMemory`). So [`RegionStore::reserve`] is a no-op here and `replace_window`
//! reports the failure as `ENOMEM` (`Limit::Memory`); the edit then changed nothing, as the
//! trait requires.
//!
//! Not for: locking between designs' callers (`&mut self` is the edit lock here), placement.

use super::gap::highest_gap;
use super::store::{check_regions, region_skiplist, RegionRef, RegionStore, StoredRegion};
use super::{AnonId, Region};
use crate::error::{Limit, VmError};
use crate::semantics::Bounds;
use aspace_map::{
    Interval, IntervalLocking, IntervalMap, MapError, SkipListMap, KEY_SPACE_END, PAGE_SIZE,
};
use aspace_rcu::{Domain, Reader};
use std::ops::{ControlFlow, Range};

/// The skiplist store (module doc). Owns its map: every change of it goes through
/// [`RegionStore::replace_window`], which borrows the store mutably; that is what makes the
/// references its lookups hand out valid for the store's borrow (see [`SkipListStore::find`]).
pub(crate) struct SkipListStore {
    /// The regions, keyed by their intervals.
    map: SkipListMap<StoredRegion>,
    /// The read sections of this store's lookups (one registration, reused).
    reader: Reader,
    /// Shared mappings created so far (the last shmem object number handed out).
    shmem_count: u64,
}

impl SkipListStore {
    /// An empty store with a domain of its own.
    pub(crate) fn new() -> SkipListStore {
        let domain = Domain::new();
        SkipListStore {
            reader: domain.register(),
            map: region_skiplist(domain, None),
            shmem_count: 0,
        }
    }

    /// Checks the invariants of every store (`store::check_regions`) and the skiplist's own.
    pub(crate) fn check(&self) {
        check_regions(self.iter());
        self.map.check_invariants();
    }

    /// The map's allocation-failure hook (`SkipListMap::fail_allocations_after`), for tests.
    pub(crate) fn fail_allocations_after(&self, n: Option<usize>) {
        self.map.fail_allocations_after(n);
    }

    /// The region containing `addr`, borrowed for as long as the store is.
    fn find(&self, addr: u64) -> Option<RegionRef<'_>> {
        let guard = self.reader.read();
        let (iv, stored) = self.map.query(addr, &guard)?;
        let stored: *const StoredRegion = stored;
        drop(guard);
        // SAFETY: the node holding `stored` was reachable under the guard, so it was not
        // retired then. Nodes are retired only by a `swap`, and this store's only `swap` is in
        // `replace_window`, which takes `&mut self`; the map is private to the store. So while
        // `&self` is borrowed (the returned lifetime) the node stays linked, hence is never
        // freed, whether or not a read section is open.
        Some(RegionRef::new(iv.start, iv.end, unsafe { &*stored }))
    }

    /// Calls `f` on every region overlapping `range` (any bytes, not only whole pages), in
    /// order, until it breaks.
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
        let guard = self.reader.read();
        self.map
            .visit(lo..hi, &guard, &mut |iv, stored| {
                let r = RegionRef::new(iv.start, iv.end, stored).region();
                if r.start < range.end && r.end > range.start {
                    f(r)
                } else {
                    ControlFlow::Continue(())
                }
            })
            .expect("a page-aligned, non-empty range inside the key space");
    }

    /// Every region overlapping `range`, in order.
    fn collect(&self, range: Range<u64>) -> Vec<Region> {
        let mut out = Vec::new();
        self.visit(range, |r| {
            out.push(r);
            ControlFlow::Continue(())
        });
        out
    }
}

impl RegionStore for SkipListStore {
    fn len(&self) -> usize {
        self.map.len()
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

    fn end_at_or_below(&self, addr: u64) -> u64 {
        self.collect(0..addr)
            .iter()
            .rev()
            .find(|r| r.end <= addr)
            .map_or(0, |r| r.end)
    }

    /// Cost: every region (collected, then scanned from the top as the `BTreeStore` does).
    fn find_gap_topdown(&self, len: u64, bounds: Bounds) -> Option<u64> {
        let regions = self.collect(0..KEY_SPACE_END);
        highest_gap(regions.iter().rev().map(|r| r.start..r.end), len, bounds)
    }

    fn read_window(&self, range: Range<u64>, old: &mut Vec<Region>) -> u64 {
        old.clear();
        let mut next_start = u64::MAX;
        // From the region ending exactly at range.start (it overlaps the byte below), through
        // the regions overlapping the range, to the first one at or after its end.
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
        AnonId::decode(self.shmem_count + 1).expect("not zero")
    }

    fn shmem_created(&mut self) {
        self.shmem_count += 1;
    }

    /// Nothing to reserve: the skiplist allocates inside `swap`, before publishing (module doc).
    fn reserve(&mut self, _new: &[Region]) -> Result<(), VmError> {
        Ok(())
    }

    fn replace_window(&mut self, old: &[Region], new: &[Region]) -> Result<(), VmError> {
        // The span of the old window and the new regions (the new ones lie inside the window's
        // span, but may reach past the old regions into holes).
        let lo = old.iter().chain(new).map(|r| r.start).min();
        let hi = old.iter().chain(new).map(|r| r.end).max();
        let (Some(lo), Some(hi)) = (lo, hi) else {
            return Ok(()); // A hole stays a hole.
        };
        let locked = self
            .map
            .lock(lo..hi)
            .expect("regions are page-aligned and inside the key space");
        let new = new
            .iter()
            .map(|r| {
                let iv = Interval::new(r.start, r.end).expect("regions are page-aligned");
                (iv, StoredRegion::new(r))
            })
            .collect();
        match self.map.swap(locked, new) {
            Ok(()) => Ok(()),
            Err(MapError::OutOfMemory) => Err(VmError::OutOfMemory(Limit::Memory)),
            Err(e) => unreachable!("the plan's regions are sorted, disjoint, in the span: {e}"),
        }
    }
}
