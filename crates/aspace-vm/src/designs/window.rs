//! A held range of a region map, seen by the Linux bodies (`syscalls.rs`) as a
//! [`RegionStore`]: the region store of one call of the designs that lock ranges (`interval`
//! over the interval skiplist, `radix` over the radix tree; `windowed.rs`).
//!
//! A [`Window`] locks the range an operation needs, widened to the whole regions it overlaps
//! ([`WindowMap::hold`]: `SkipListMap::lock_covering`, `RadixMap`'s dynamic interval), so every
//! region the call can read or rewrite is held, and the gaps around them that the map holds
//! too (the lock's *stable span*: no other operation can insert into it; the skiplist's reaches
//! the next nodes on both sides, the radix tree's is the held slots). Lookups answer from the
//! held regions; an edit (the plan's `replace_window`) changes only the window's own list,
//! after marking every region it replaces or removes as replaced
//! (`StoredRegion::mark_replaced`, the signal a lock-free fault checks under the leaf lock).
//! [`Window::commit`] publishes what changed with one `swap` of the span
//! [`WindowMap::commit_span`] names (the skiplist first releases the held regions that come
//! back unchanged, `SkipLocked::narrow`; the radix tree republishes its held slots) at the end
//! of the call, so the body's later steps (clearing page tables, freeing the tables of the
//! widened gap, the shootdown) all run while the range is still held: no Alloc can put a region
//! into a gap whose tables are being freed.
//!
//! Regions of the window that an edit did not touch stay the map's own values (a first write
//! fault under the window sets the anon identity in the real node); new ones are values of the
//! window until the commit moves them into the map. The regions just outside the held ones
//! (the skiplist's lock predecessor and the successor of its last node:
//! `SkipLocked::neighbours`, unchangeable while held) are read-only *borders*: adjacency lookups
//! see them, so a first write adopts a neighbour's anon identity as Linux does even when the
//! neighbour lies outside the locked range; edits never reach them. The radix tree has none:
//! its window holds a page on each side of the range, so an adjacent neighbour is held.
//!
//! Counting: `reserve` takes the regions an edit adds from the design's limit counter before
//! anything changes (refused: `ENOMEM`, nothing changed); regions an edit removes are given
//! back at the commit.
//!
//! # Where a region node leaves, and where it is marked (the leave rule, `region/store.rs`)
//!
//! A lock-free fault may hold any region node it got from `query` until it checks the node's
//! mark under the leaf lock, so every way a node can leave the region map is listed here
//! with the point at which it is marked (the skiplist's words; the radix tree's records leave
//! the same ways, and `RadixMap::with_leave_mark`, set by `region_radix`, marks every record
//! its commit takes out, after the operation's allocations succeeded):
//! - *an edit drops a held region* (removed, or replaced by different regions):
//!   `replace_window` marks it when it drops it from the window, before the body returns to
//!   clear or downgrade its entries; the commit marks it again (idempotent);
//! - *the commit copies an unchanged held region*: a window narrowed to the changed span
//!   (`SkipLocked::narrow`; the radix tree's whole held span) swaps out every node inside it, so a region an edit kept between two
//!   it changed (an `mprotect` over three regions whose middle already had the protection) is
//!   copied into a new node. The skiplist's commit marks the old node before the store that
//!   publishes the copy (`SkipListMap::with_leave_mark`, set by `region_skiplist`); nothing of
//!   its range is touched by this call, so a fault that filled for it before the mark filled
//!   for an unchanged region, and any later edit marks the copy first;
//! - *a trimmed node* (a swap whose range cuts a node, leaving clones of its outer parts):
//!   marked by the same commit (windows lock whole nodes, so their commits never trim);
//! - *an arena region freed* (`munmap` in an arena: the swap puts a separator back): a swap
//!   like any other, marked by its commit and, being removed, by `replace_window` first;
//! - *`narrow`* releases held nodes unchanged, and *dropping a window* without a commit (a body
//!   that unwound) releases every node: nothing leaves then. A region that an unwound edit had
//!   marked stays in the list marked; faults on it take stage 2 (the window), which does not
//!   look at the mark, so it costs speed, not correctness;
//! - *the commit failing* (out of memory for the new nodes): the skiplist allocates every node
//!   before it marks or publishes anything, so a failed commit marks nothing (and panics, see
//!   `designs/interval.rs`, departures).
//!
//! Not for: the lock modes (the design takes LR/LW/GR/GW around a window) or lock-free faults.

use crate::error::{Limit, VmError};
use crate::region::count::RegionCount;
use crate::region::gap::highest_gap;
use crate::region::shmem::ShmemNumbers;
use crate::region::store::{RegionRef, RegionStore, StoredRegion};
use crate::region::{AnonId, Region};
use crate::semantics::Bounds;
use aspace_map::{Interval, IntervalLocking, KEY_SPACE_END, PAGE_SIZE};
use smallvec::SmallVec;
use std::cell::Cell;
use std::ops::Range;

/// A region map whose ranges a [`Window`] can hold (module doc): its `Locked` proof holds
/// regions that no other operation can replace or free while it lives.
pub(crate) trait WindowMap: IntervalLocking<StoredRegion> {
    /// Holds the regions overlapping `range` (page aligned, inside the key space) and
    /// everything they cover, waiting for concurrent holders.
    fn hold(&self, range: Range<u64>) -> Self::Locked<'_>;
    /// The span in which no region but the held ones can appear while `locked` lives.
    fn stable_span(locked: &Self::Locked<'_>) -> Range<u64>;
    /// Calls `f` on the held regions, in address order, each once.
    fn held<'a>(locked: &'a Self::Locked<'_>, f: impl FnMut((Interval, &'a StoredRegion)));
    /// The unchangeable regions just outside the held ones that the lock guarantees (module
    /// doc), before and after.
    fn borders<'a>(locked: &'a Self::Locked<'_>) -> [Option<(Interval, &'a StoredRegion)>; 2];
    /// Prepares `locked` for a `swap` that publishes what changed in `changed` (inside the
    /// held range) and returns the span that swap replaces: every region of the window
    /// overlapping it is passed to the swap, and lies inside it.
    fn commit_span(locked: &mut Self::Locked<'_>, changed: Range<u64>) -> Range<u64>;

    /// Whether the map keeps separator nodes at the arena boundaries (so that windows stop
    /// there and [`WindowMap::separator_ends`] may say so).
    const HAS_SEPARATORS: bool = false;

    /// Whether the lock's stable span ends, below and above, at a node of the map that is no
    /// region (an arena separator of the skiplist): the free span there goes on past what the
    /// window holds ([`Window::free_span_cut`]). None by default: a map without such nodes
    /// (the radix tree, whose window is its held slots, frees the tables past them at
    /// `reclaim_tables`).
    fn separator_ends(locked: &Self::Locked<'_>) -> [bool; 2] {
        let _ = locked;
        [false, false]
    }
}

/// Where a piece of the window's region list lives.
enum Value {
    /// A region of the map, held by the window's lock (pinned while it is held).
    Held(*const StoredRegion),
    /// A region an edit made; it becomes a node at the commit.
    New(Box<StoredRegion>),
}

/// Regions a window keeps inline before its lists spill to the heap: an edit's region, its two
/// neighbours and a split part.
const INLINE_PIECES: usize = 4;

/// A list of a window's regions.
type Pieces = SmallVec<[Piece; INLINE_PIECES]>;

/// One region of the window.
struct Piece {
    start: u64,
    end: u64,
    value: Value,
}

/// A held range of a region map as a [`RegionStore`] (module doc).
pub(crate) struct Window<'m, M: WindowMap + 'm> {
    map: &'m M,
    /// `None` only after `commit` took it.
    locked: Option<M::Locked<'m>>,
    /// The lock's stable span: no region but the held ones can appear in it.
    span: Range<u64>,
    /// The regions of the window, sorted (inline up to [`INLINE_PIECES`]: a call of the common
    /// paths allocates no list).
    pieces: Pieces,
    /// The regions just outside the held ones (the lock's predecessor and the successor of
    /// its last node), read-only: only adjacency lookups see them (a first write adopts a
    /// neighbour's anon identity), edits never reach them.
    borders: [Option<Piece>; 2],
    /// The span of what edits changed (`None`: nothing changed).
    changed: Option<Range<u64>>,
    /// `old.len()` of the last `read_window` (what the next `reserve` compares with).
    old_len: Cell<usize>,
    /// Regions taken from the counter by `reserve` (given back if the window is dropped
    /// without a commit: the edits never took effect).
    reserved: u64,
    /// Regions edits removed, given back to the counter at the commit.
    released: u64,
    count: &'m RegionCount,
    shmem: &'m ShmemNumbers,
    /// A shmem number taken by `next_shmem`, and whether a mapping used it.
    shmem_taken: Cell<Option<(AnonId, bool)>>,
    core: usize,
}

// SAFETY: the raw pointers in `pieces` point into regions held by `locked`, which the window
// owns; the values are `Sync` (`StoredRegion` is atomics and plain data). A `Window` is used by
// one thread at a time like any `&mut` store.
unsafe impl<M: WindowMap> Send for Window<'_, M> where for<'a> M::Locked<'a>: Send {}

impl<'m, M: WindowMap> Window<'m, M> {
    /// Holds the regions overlapping `range` widened by one page on each side (so the
    /// neighbours an edit of `range` may merge with are held), and everything they cover.
    pub(crate) fn lock(
        map: &'m M,
        range: Range<u64>,
        count: &'m RegionCount,
        shmem: &'m ShmemNumbers,
        core: usize,
    ) -> Window<'m, M> {
        let lo = range.start.saturating_sub(PAGE_SIZE);
        let hi = range.end.saturating_add(PAGE_SIZE).min(KEY_SPACE_END);
        let locked = map.hold(lo..hi);
        let span = M::stable_span(&locked);
        let piece = |(iv, v): (Interval, &StoredRegion)| Piece {
            start: iv.start,
            end: iv.end,
            value: Value::Held(v),
        };
        let mut pieces = Pieces::new();
        M::held(&locked, |h| pieces.push(piece(h)));
        let borders = M::borders(&locked).map(|b| b.map(piece));
        Window {
            map,
            locked: Some(locked),
            span,
            pieces,
            borders,
            changed: None,
            old_len: Cell::new(0),
            reserved: 0,
            released: 0,
            count,
            shmem,
            shmem_taken: Cell::new(None),
            core,
        }
    }

    /// The value of `p`.
    #[inline]
    fn value<'a>(&'a self, p: &'a Piece) -> &'a StoredRegion {
        match &p.value {
            // SAFETY: held nodes are pinned while `self.locked` is held; it is held for as long
            // as `self` is borrowed (only `commit`, which consumes `self`, releases it).
            Value::Held(v) => unsafe { &**v },
            Value::New(b) => b,
        }
    }

    #[inline]
    fn region_ref<'a>(&'a self, p: &'a Piece) -> RegionRef<'a> {
        RegionRef::new(p.start, p.end, self.value(p))
    }

    #[inline]
    fn region(&self, p: &Piece) -> Region {
        self.region_ref(p).region()
    }

    /// Index of the piece containing `addr`.
    fn index_of(&self, addr: u64) -> Option<usize> {
        let i = self.pieces.partition_point(|p| p.end <= addr);
        (i < self.pieces.len() && self.pieces[i].start <= addr).then_some(i)
    }

    /// The free span around `range` (free in the window): from the end of the last held
    /// region below it (or the stable span's start) to the start of the first above it (or the
    /// stable span's end).
    pub(crate) fn free_span_around(&self, range: Range<u64>) -> Range<u64> {
        let lo = self.end_at_or_below(range.start);
        let i = self.pieces.partition_point(|p| p.end <= range.start);
        let hi = self.pieces.get(i).map_or(self.span.end, |p| p.start);
        lo.min(range.start)..hi.max(range.end)
    }

    /// [`Window::free_span_around`] `range` when it ends at a separator on some side
    /// ([`WindowMap::separator_ends`]), so that the true free span, and page tables wholly
    /// inside it, may reach past what the window holds; `None` when it ends at regions or at
    /// the ends of the key space (it is then the true free span).
    pub(crate) fn free_span_cut(&self, range: Range<u64>) -> Option<Range<u64>> {
        let [sep_lo, sep_hi] = M::separator_ends(self.locked.as_ref()?);
        let free = self.free_span_around(range);
        let cut =
            (sep_lo && free.start == self.span.start) || (sep_hi && free.end == self.span.end);
        cut.then_some(free)
    }

    /// Publishes what edits changed (one `swap` of [`WindowMap::commit_span`] of the changed
    /// span; held regions outside it stay as they are) or, if nothing changed, releases the
    /// range; then gives back the regions edits removed.
    pub(crate) fn commit(mut self) {
        #[cfg(all(test, not(loom)))]
        crate::fault_inject::WINDOW_BEFORE_COMMIT.reached();
        let mut locked = self.locked.take().expect("committed once");
        if let Some(changed) = self.changed.take() {
            let span = M::commit_span(&mut locked, changed);
            let pieces = std::mem::take(&mut self.pieces);
            let new = pieces
                .into_iter()
                .filter(|p| p.start < span.end && p.end > span.start)
                .map(|p| {
                    let iv = Interval::new(p.start, p.end).expect("regions are page aligned");
                    let v = match p.value {
                        // SAFETY: as in `value`: `locked` is still held.
                        Value::Held(v) => unsafe { (*v).clone() },
                        Value::New(b) => *b,
                    };
                    (iv, v)
                })
                .collect();
            // The new regions lie inside the commit span (edits stay inside the span they
            // changed, and `commit_span` widened it to whole regions). Allocation failure here
            // would leave the page tables already edited: out of memory for a few nodes panics
            // (see `designs/windowed.rs`, departures); the swap changed nothing and released
            // the range, and the drop gives back what the edits reserved.
            if let Err(e) = self.map.swap(locked, new) {
                panic!("committing a region edit: {e} (out of memory for region map nodes)");
            }
        } else {
            drop(locked);
        }
        self.reserved = 0; // Taken for good: the edits are in the list.
        if self.released > 0 {
            self.count.sub(self.core, self.released);
        }
    }
}

/// Settles the counts whether or not the window committed: a window dropped without a
/// successful commit (a body that unwound, or a commit that ran out of memory) changed no
/// region of the list, so it gives back the regions its edits reserved; a shmem number that no
/// mapping used is given back either way.
impl<M: WindowMap> Drop for Window<'_, M> {
    fn drop(&mut self) {
        if self.reserved > 0 {
            self.count.sub(self.core, self.reserved);
        }
        if let Some((n, false)) = self.shmem_taken.get() {
            self.shmem.give_back(n);
        }
    }
}

impl<M: WindowMap> RegionStore for Window<'_, M> {
    fn len(&self) -> usize {
        self.pieces.len()
    }

    fn lookup(&self, addr: u64) -> Option<RegionRef<'_>> {
        self.index_of(addr)
            .map(|i| self.region_ref(&self.pieces[i]))
    }

    /// The next region may be the border after the held ones.
    fn lookup_with_next(&self, addr: u64) -> Option<(RegionRef<'_>, Option<RegionRef<'_>>)> {
        let i = self.index_of(addr)?;
        let next = self
            .pieces
            .get(i + 1)
            .or(self.borders[1].as_ref())
            .map(|p| self.region_ref(p));
        Some((self.region_ref(&self.pieces[i]), next))
    }

    /// The previous region may be the border before the held ones.
    fn adjacent_prev(&self, r: &RegionRef<'_>) -> Option<Region> {
        let i = self.pieces.partition_point(|p| p.end < r.start());
        let p = self
            .pieces
            .get(i)
            .filter(|p| p.end == r.start())
            .or(self.borders[0].as_ref())?;
        (p.end == r.start()).then(|| self.region(p))
    }

    fn overlapping(&self, range: Range<u64>) -> impl Iterator<Item = Region> + '_ {
        let first = self.pieces.partition_point(|p| p.end <= range.start);
        self.pieces[first..]
            .iter()
            .take_while(move |p| p.start < range.end)
            .map(move |p| {
                let mut r = self.region(p);
                r.start = r.start.max(range.start);
                r.end = r.end.min(range.end);
                r
            })
    }

    fn iter(&self) -> impl Iterator<Item = Region> + '_ {
        self.pieces.iter().map(|p| self.region(p))
    }

    /// Below the held regions: the start of the stable span (the end of the node before it,
    /// which may be a separator: a lower bound of the true answer, so a gap computed from it
    /// never reaches beyond what the window holds).
    fn end_at_or_below(&self, addr: u64) -> u64 {
        let i = self.pieces.partition_point(|p| p.end <= addr);
        match i.checked_sub(1) {
            Some(j) => self.pieces[j].end,
            None => self.span.start.min(addr),
        }
    }

    /// The highest gap inside the window's stable span (the design places mappings before it
    /// takes a window and never asks; answered exactly for what the window holds).
    fn find_gap_topdown(&self, len: u64, bounds: Bounds) -> Option<u64> {
        let held = Bounds {
            min_addr: bounds.min_addr.max(self.span.start),
            max_addr: bounds.max_addr.min(self.span.end),
        };
        let regions = self.pieces.iter().rev().map(|p| p.start..p.end);
        highest_gap(regions, len, held)
    }

    /// As the `BTreeStore`'s; past the held regions the answer is the end of the stable span
    /// (a lower bound of the next region's start).
    fn read_window(&self, range: Range<u64>, old: &mut Vec<Region>) -> u64 {
        old.clear();
        let first = self.pieces.partition_point(|p| p.end < range.start);
        let mut next_start = self.span.end;
        for p in &self.pieces[first..] {
            if p.start >= range.end {
                if p.start == range.end {
                    old.push(self.region(p));
                }
                next_start = p.start;
                break;
            }
            old.push(self.region(p));
            if p.end > range.end {
                break;
            }
        }
        self.old_len.set(old.len());
        next_start
    }

    /// Takes the number now (concurrent `mmap`s must not get the same one); a number the call
    /// does not use is given back at the commit if no later one was taken (so a sequential
    /// history numbers its shared mappings 1, 2, ... like Linux's inodes).
    fn next_shmem(&self) -> AnonId {
        match self.shmem_taken.get() {
            Some((n, _)) => n,
            None => {
                let n = self.shmem.take();
                self.shmem_taken.set(Some((n, false)));
                n
            }
        }
    }

    fn shmem_created(&mut self) {
        let n = self.next_shmem();
        self.shmem_taken.set(Some((n, true)));
    }

    fn reserve(&mut self, new: &[Region]) -> Result<(), VmError> {
        #[cfg(all(test, not(loom)))]
        if crate::fault_inject::REGION_RESERVE.fails() {
            return Err(VmError::OutOfMemory(Limit::Memory));
        }
        let added = new.len().saturating_sub(self.old_len.get()) as u64;
        if added > 0 {
            self.count
                .try_add(self.core, added)
                .map_err(|_| VmError::OutOfMemory(Limit::MapCount))?;
            self.reserved += added;
        }
        Ok(())
    }

    fn replace_window(&mut self, old: &[Region], new: &[Region]) -> Result<(), VmError> {
        let lo = old.iter().chain(new).map(|r| r.start).min();
        let hi = old.iter().chain(new).map(|r| r.end).max();
        let (Some(lo), Some(hi)) = (lo, hi) else {
            return Ok(());
        };
        // What the commit must replace: the regions removed or added, not the neighbours that
        // come back unchanged (they keep their nodes).
        let gone = old.iter().filter(|o| !new.contains(o));
        let added = new.iter().filter(|n| !old.contains(n));
        let moved = || gone.clone().chain(added.clone());
        let (Some(c_lo), Some(c_hi)) =
            (moved().map(|r| r.start).min(), moved().map(|r| r.end).max())
        else {
            return Ok(()); // Nothing changed.
        };
        let first = self.pieces.partition_point(|p| p.end <= lo);
        let last = self.pieces.partition_point(|p| p.start < hi);
        let removed: Pieces = self.pieces.drain(first..last).collect();
        let replacement: Pieces = new
            .iter()
            .map(|r| {
                // A region the edit left as it was keeps its node's value.
                if old.contains(r) {
                    let held = removed.iter().find_map(|p| match p.value {
                        Value::Held(v) if p.start == r.start && p.end == r.end => Some(v),
                        _ => None,
                    });
                    if let Some(v) = held {
                        return Piece {
                            start: r.start,
                            end: r.end,
                            value: Value::Held(v),
                        };
                    }
                }
                Piece {
                    start: r.start,
                    end: r.end,
                    value: Value::New(Box::new(StoredRegion::new(r))),
                }
            })
            .collect();
        // The leave rule (`region/store.rs`): every held region this edit drops from the window
        // is marked now, before the body goes on to clear or downgrade its page-table entries
        // (lock-free faults check the mark under the leaf lock). The regions kept unchanged
        // are marked by the commit if it copies them (`region_skiplist`).
        for p in &removed {
            if let Value::Held(v) = p.value {
                let kept = replacement
                    .iter()
                    .any(|q| matches!(q.value, Value::Held(w) if std::ptr::eq(v, w)));
                if !kept {
                    // SAFETY: as in `value`.
                    unsafe { (*v).mark_replaced() };
                }
            }
        }
        let old_count = old.len() as u64;
        let new_count = new.len() as u64;
        if new_count < old_count {
            self.released += old_count - new_count;
        }
        self.pieces.insert_many(first, replacement);
        self.changed = Some(match self.changed.take() {
            Some(c) => c.start.min(c_lo)..c.end.max(c_hi),
            None => c_lo..c_hi,
        });
        Ok(())
    }
}
