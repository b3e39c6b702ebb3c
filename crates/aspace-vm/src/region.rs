//! Regions (the papers' VMAs) and the region set: a `BTreeMap` keyed by region **end**, with
//! Linux's splitting and merging.
//!
//! # What
//!
//! A region is `[start, end)` with [`Attrs`]: protection, private/shared, the `vm_flags` bits
//! that only matter for merging (`semantics::vm_flags`), and an *anon identity* standing for
//! Linux's `anon_vma`. [`RegionSet::edit`] is the one mutation: it rewrites `[start, end)` piece
//! by piece through a function of the old attributes (`None` for a hole), which expresses `mmap`
//! (everything becomes the new attributes), `munmap` (everything becomes `None`), `mprotect`
//! and `madvise` hints (mapped pieces change one attribute, holes stay holes). It computes the
//! new pieces of the window `[left neighbour, right neighbour]` first, merges adjacent compatible
//! pieces left to right, checks `max_map_count` on the result, and only then changes the map:
//! a refused edit changes nothing.
//!
//! # Merging like `/proc/self/maps`
//!
//! Linux merges two adjacent anonymous regions when their `vm_flags` are equal and their
//! `anon_vma`s are compatible (one of them has none, or both the same). A private region gets its
//! `anon_vma` at its first **write** fault (a read fault maps the zero page), reusing the
//! `anon_vma` of an adjacent region whose flags differ at most in the access bits (next
//! neighbour first, then previous: `find_mergeable_anon_vma`). Split pieces keep their
//! `anon_vma`, so they merge back. A shared anonymous mapping is a shmem file of its own, so it
//! only merges with pieces of itself: it gets a fresh identity at `mmap`. When a new piece could
//! merge with both neighbours but the neighbours are incompatible with each other, Linux merges
//! with the previous one (`vma_merge_new_range`); the left-to-right merge here does the same.
//! Verified against the kernel (see `semantics.rs`): two separately written regions separated by
//! a hole stay two lines when the hole is mapped; a region written next to a written neighbour
//! shares its `anon_vma` and merges after `mprotect` makes them equal.
//!
//! # Why keyed by end
//!
//! `lookup(addr)` is the first entry with `end > addr`; and the `alloc` pattern (top-down
//! placement directly below the previous mapping, which then merges) extends an existing region
//! downwards, which keeps its key: the edit is one `get_mut`, no remove and insert.
//!
//! # Invariants
//! Regions are disjoint, non-empty, page aligned; `map[end].start < end`. Anon identities are only
//! written with the set borrowed mutably, except the 0 -> id transition of a fault
//! ([`RegionSet::assign_anon`]), an atomic compare-exchange under a shared borrow.
//!
//! Not for: locking (the design wraps the set in its lock) or page tables.

use crate::error::{Limit, VmError};
use crate::semantics::Bounds;
use crate::types::{Prot, RegionInfo, Sharing};
use std::collections::BTreeMap;
use std::ops::Range;
use std::sync::atomic::{AtomicU64, Ordering};

/// Anon identities a core takes from the shared counter at once.
pub(crate) const ANON_BLOCK: u64 = 1 << 16;

/// The attributes of a region.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Attrs {
    /// Protection (known bits only).
    pub(crate) prot: Prot,
    /// Private or shared.
    pub(crate) sharing: Sharing,
    /// `vm_flags` bits besides the access bits (`semantics::vm_flags`).
    pub(crate) flags: u8,
    /// The anon identity (`anon_vma`); 0 = none yet. For a shared region, the number of its
    /// shmem object (from [`RegionSet::next_shmem`]; `maps()` shows it as the inode).
    pub(crate) anon: u64,
    /// For a shared region, the address of offset 0 of its shmem object (where it was mapped;
    /// `maps()` shows `start - shm_base` as the offset); 0 for a private one. Equal in every
    /// piece of one object, so it never decides a merge.
    pub(crate) shm_base: u64,
}

impl Attrs {
    /// Whether a region with `self` directly followed by one with `next` is one region for Linux.
    fn mergeable(&self, next: &Attrs) -> bool {
        self.prot == next.prot
            && self.sharing == next.sharing
            && self.flags == next.flags
            && (self.anon == 0 || next.anon == 0 || self.anon == next.anon)
    }

    /// Whether a private region may adopt the `anon_vma` of a neighbour with `other`
    /// (`anon_vma_compatible`: equal flags except the access bits).
    fn anon_compatible(&self, other: &Attrs) -> bool {
        self.sharing == Sharing::Private
            && other.sharing == Sharing::Private
            && self.flags == other.flags
    }
}

/// One region, by value.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Region {
    /// First byte.
    pub(crate) start: u64,
    /// One past the last byte.
    pub(crate) end: u64,
    /// Its attributes.
    pub(crate) attrs: Attrs,
}

impl Region {
    /// The `maps()` line of the region.
    pub(crate) fn info(&self) -> RegionInfo {
        let shared = self.attrs.sharing == Sharing::Shared;
        RegionInfo {
            start: self.start,
            end: self.end,
            prot: self.attrs.prot,
            sharing: self.attrs.sharing,
            offset: if shared {
                self.start - self.attrs.shm_base
            } else {
                0
            },
            inode: if shared { self.attrs.anon } else { 0 },
        }
    }
}

/// What an [`RegionSet::edit`] saw of the old set.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct EditOutcome {
    /// Whether any region overlapped the range.
    pub(crate) overlapped: bool,
    /// `Some(range.start)` when a region (or its remnant) ends exactly at the range's start;
    /// `None` when unknown without a search.
    pub(crate) prev_end: Option<u64>,
    /// The start of the first region at or after the range's end, `u64::MAX` if none.
    pub(crate) next_start: u64,
}

/// A map entry (the key is the region's end).
#[derive(Debug)]
pub(crate) struct Slot {
    start: u64,
    prot: Prot,
    sharing: Sharing,
    flags: u8,
    shm_base: u64,
    /// Set 0 -> id at most once under a shared borrow (first write fault); otherwise written only
    /// through `&mut`. Relaxed everywhere: it is a value, not a publication; the design's lock
    /// orders it against the edits that read it.
    anon: AtomicU64,
}

impl Slot {
    fn new(r: &Region) -> Slot {
        Slot {
            start: r.start,
            prot: r.attrs.prot,
            sharing: r.attrs.sharing,
            flags: r.attrs.flags,
            shm_base: r.attrs.shm_base,
            anon: AtomicU64::new(r.attrs.anon),
        }
    }

    fn region(&self, end: u64) -> Region {
        Region {
            start: self.start,
            end,
            attrs: self.attrs(),
        }
    }

    /// The slot's attributes (anon loaded Relaxed).
    pub(crate) fn attrs(&self) -> Attrs {
        Attrs {
            prot: self.prot,
            sharing: self.sharing,
            flags: self.flags,
            anon: self.anon.load(Ordering::Relaxed),
            shm_base: self.shm_base,
        }
    }

    /// First byte of the region.
    pub(crate) fn start(&self) -> u64 {
        self.start
    }

    /// Its protection.
    pub(crate) fn prot(&self) -> Prot {
        self.prot
    }

    /// Its anon identity (0 = none yet).
    pub(crate) fn anon(&self) -> u64 {
        self.anon.load(Ordering::Relaxed)
    }
}

/// The set of regions, with the scratch buffers its edits reuse (no allocation per call once
/// warm).
#[derive(Debug, Default)]
pub(crate) struct RegionSet {
    map: BTreeMap<u64, Slot>,
    removed: Vec<u64>,
    pieces: Vec<Region>,
    next_anon: AtomicU64,
    /// Shared mappings created so far (the last shmem object number handed out).
    shmem_count: u64,
}

impl RegionSet {
    /// An empty set.
    pub(crate) fn new() -> RegionSet {
        RegionSet {
            next_anon: AtomicU64::new(1),
            ..RegionSet::default()
        }
    }

    /// Number of regions.
    pub(crate) fn len(&self) -> usize {
        self.map.len()
    }

    /// A fresh anon identity.
    #[cfg(test)]
    pub(crate) fn fresh_anon(&self) -> u64 {
        self.next_anon.fetch_add(1, Ordering::Relaxed)
    }

    /// The number the next shared mapping's shmem object gets (1, 2, ... in creation order, like
    /// the inode numbers Linux hands out; one counter per space, so a sequential history always
    /// numbers its shared mappings the same). Call [`RegionSet::shmem_created`] once it is mapped.
    pub(crate) fn next_shmem(&self) -> u64 {
        self.shmem_count + 1
    }

    /// Records that the shared mapping numbered [`RegionSet::next_shmem`] was created.
    pub(crate) fn shmem_created(&mut self) {
        self.shmem_count += 1;
    }

    /// [`ANON_BLOCK`] fresh anon identities starting at the returned one (a core takes a block
    /// and hands them out without touching the shared counter).
    pub(crate) fn fresh_anon_block(&self) -> u64 {
        self.next_anon.fetch_add(ANON_BLOCK, Ordering::Relaxed)
    }

    /// The region containing `addr`: `(end, slot)`.
    #[inline]
    pub(crate) fn lookup(&self, addr: u64) -> Option<(u64, &Slot)> {
        let (&end, slot) = self.map.range(addr.checked_add(1)?..).next()?;
        (slot.start <= addr).then_some((end, slot))
    }

    /// The region containing `addr`, by value.
    #[cfg(test)]
    pub(crate) fn get(&self, addr: u64) -> Option<Region> {
        self.lookup(addr).map(|(end, s)| s.region(end))
    }

    /// Every region in address order.
    pub(crate) fn iter(&self) -> impl Iterator<Item = Region> + '_ {
        self.map.iter().map(|(&end, s)| s.region(end))
    }

    /// Regions overlapping `range`, in order, clipped to it.
    pub(crate) fn overlapping(&self, range: Range<u64>) -> impl Iterator<Item = Region> + '_ {
        self.map
            .range(range.start.saturating_add(1)..)
            .take_while(move |(_, s)| s.start < range.end)
            .map(move |(&end, s)| {
                let mut r = s.region(end);
                r.start = r.start.max(range.start);
                r.end = r.end.min(range.end);
                r
            })
    }

    /// Whether no region overlaps `[start, end)`.
    pub(crate) fn is_free(&self, start: u64, end: u64) -> bool {
        match self.map.range(start + 1..).next() {
            None => true,
            Some((_, s)) => s.start >= end,
        }
    }

    /// The first address of `range` that no region covers, if any.
    pub(crate) fn first_hole(&self, range: Range<u64>) -> Option<u64> {
        let mut cursor = range.start;
        for r in self.overlapping(range.clone()) {
            if r.start > cursor {
                return Some(cursor);
            }
            cursor = r.end;
        }
        (cursor < range.end).then_some(cursor)
    }

    /// The highest `len`-byte gap inside `bounds` (top-down search), its start.
    ///
    /// Cost: one step per region above the gap found (a linear scan, like Linux before its gap
    /// augmentation; the benchmark patterns find their gap at the first step).
    pub(crate) fn find_gap_topdown(&self, len: u64, bounds: Bounds) -> Option<u64> {
        let mut hi = bounds.max_addr;
        for (&end, s) in self.map.iter().rev() {
            if hi >= end && hi - end >= len {
                return Some(hi - len);
            }
            hi = s.start;
            if hi < bounds.min_addr.saturating_add(len) {
                return None;
            }
        }
        (hi >= bounds.min_addr && hi - bounds.min_addr >= len).then_some(hi - len)
    }

    /// The largest range around `range` that holds no region, within `[0, va_end)` (the unmapped
    /// range widened to its neighbouring gaps, for page-table freeing). Not clipped to the
    /// space's bounds: no region can exist below `min_addr` or above `max_addr`, so tables
    /// covering those addresses are freeable too (clipping kept the tables that cover the low
    /// 2 MiB alive forever; found by the conformance suite). `range` must be free now;
    /// `outcome` is what the edit that freed it saw.
    pub(crate) fn gap_around(
        &self,
        range: Range<u64>,
        outcome: EditOutcome,
        va_end: u64,
    ) -> Range<u64> {
        let lo = match outcome.prev_end {
            Some(e) => e,
            None => self
                .map
                .range(..=range.start)
                .next_back()
                .map_or(0, |(&end, _)| end),
        };
        let hi = outcome.next_start.min(va_end.max(range.end));
        lo.min(range.start)..hi.max(range.end)
    }

    /// The region containing `addr` and the region after it.
    #[inline]
    #[allow(clippy::type_complexity)]
    pub(crate) fn lookup_with_next(
        &self,
        addr: u64,
    ) -> Option<((u64, &Slot), Option<(u64, &Slot)>)> {
        let mut it = self.map.range(addr.checked_add(1)?..);
        let (&end, slot) = it.next()?;
        if slot.start > addr {
            return None;
        }
        Some(((end, slot), it.next().map(|(&e, s)| (e, s))))
    }

    /// Gives the region `(end, slot)` (containing the faulting page; `next` is the region after
    /// it) an anon identity if it has none: a compatible adjacent neighbour's (next first, then previous), else a fresh one.
    /// Returns the identity now in place. Callable under a shared borrow (concurrent faults).
    pub(crate) fn assign_anon(
        &self,
        end: u64,
        slot: &Slot,
        next: Option<(u64, &Slot)>,
        fresh: impl FnOnce() -> u64,
    ) -> u64 {
        let cur = slot.anon();
        if cur != 0 || slot.sharing != Sharing::Private {
            return cur;
        }
        let me = slot.attrs();
        let mut id = 0;
        if let Some((_, next)) = next {
            if next.start == end && me.anon_compatible(&next.attrs()) {
                id = next.anon();
            }
        }
        if id == 0 {
            if let Some(prev) = self.map.get(&slot.start) {
                if me.anon_compatible(&prev.attrs()) {
                    id = prev.anon();
                }
            }
        }
        if id == 0 {
            id = fresh();
        }
        match slot
            .anon
            .compare_exchange(0, id, Ordering::Relaxed, Ordering::Relaxed)
        {
            Ok(_) => id,
            Err(won) => won,
        }
    }

    fn push_piece(pieces: &mut Vec<Region>, p: Region) {
        if let Some(last) = pieces.last_mut() {
            if last.end == p.start && last.attrs.mergeable(&p.attrs) {
                last.end = p.end;
                if last.attrs.anon == 0 {
                    last.attrs.anon = p.attrs.anon;
                }
                return;
            }
        }
        pieces.push(p);
    }

    /// Rewrites `range` through `f` (old attributes, `None` for a hole -> new attributes, `None`
    /// for a hole), splitting at the edges and merging like Linux; refuses with `ENOMEM`
    /// (`Limit::MapCount`) and changes nothing when the result would hold more than `max_count`
    /// regions. With `exclusive`, refuses with `EEXIST` and changes nothing when any region
    /// overlaps the range (`MAP_FIXED_NOREPLACE`, and a hint tried before a search). One tree
    /// search for the window, then one per changed key.
    pub(crate) fn edit(
        &mut self,
        range: Range<u64>,
        mut f: impl FnMut(Option<Attrs>) -> Option<Attrs>,
        max_count: usize,
        exclusive: bool,
    ) -> Result<EditOutcome, VmError> {
        debug_assert!(range.start < range.end);
        let mut removed = std::mem::take(&mut self.removed);
        let mut pieces = std::mem::take(&mut self.pieces);
        removed.clear();
        pieces.clear();
        let mut outcome = EditOutcome {
            overlapped: false,
            prev_end: None,
            next_start: u64::MAX,
        };
        let mut cursor = range.start;
        let mut tail = None;
        let mut right = None;
        // Keys >= range.start: the left neighbour ending exactly at range.start, then the
        // regions overlapping the range, then the first one after it.
        for (&end, slot) in self.map.range(range.start..) {
            if end == range.start {
                removed.push(end);
                pieces.push(slot.region(end));
                outcome.prev_end = Some(end);
                continue;
            }
            if slot.start >= range.end {
                outcome.next_start = slot.start;
                if slot.start == range.end {
                    right = Some(slot.region(end));
                    removed.push(end);
                }
                break;
            }
            outcome.overlapped = true;
            removed.push(end);
            let old = slot.attrs();
            if slot.start < range.start {
                outcome.prev_end = Some(range.start);
                let left = Region {
                    start: slot.start,
                    end: range.start,
                    attrs: old,
                };
                Self::push_piece(&mut pieces, left);
            } else if slot.start > cursor {
                if let Some(a) = f(None) {
                    let hole = Region {
                        start: cursor,
                        end: slot.start,
                        attrs: a,
                    };
                    Self::push_piece(&mut pieces, hole);
                }
            }
            let s = slot.start.max(range.start);
            let e = end.min(range.end);
            if let Some(a) = f(Some(old)) {
                Self::push_piece(
                    &mut pieces,
                    Region {
                        start: s,
                        end: e,
                        attrs: a,
                    },
                );
            }
            cursor = e;
            if end > range.end {
                outcome.next_start = range.end;
                tail = Some(Region {
                    start: range.end,
                    end,
                    attrs: old,
                });
                break;
            }
        }
        if cursor < range.end {
            if let Some(a) = f(None) {
                let hole = Region {
                    start: cursor,
                    end: range.end,
                    attrs: a,
                };
                Self::push_piece(&mut pieces, hole);
            }
        }
        if let Some(t) = tail {
            Self::push_piece(&mut pieces, t);
        }
        if let Some(r) = right {
            Self::push_piece(&mut pieces, r);
        }
        let result = if exclusive && outcome.overlapped {
            Err(VmError::Exists)
        } else if self.map.len() - removed.len() + pieces.len() > max_count {
            Err(VmError::OutOfMemory(Limit::MapCount))
        } else {
            for k in &removed {
                if pieces.binary_search_by_key(k, |p| p.end).is_err() {
                    self.map.remove(k);
                }
            }
            for p in &pieces {
                // A key that was in the window is overwritten in place; others are new.
                let reused = removed.binary_search(&p.end).is_ok();
                match reused.then(|| self.map.get_mut(&p.end)).flatten() {
                    Some(slot) => *slot = Slot::new(p),
                    None => {
                        self.map.insert(p.end, Slot::new(p));
                    }
                }
            }
            Ok(outcome)
        };
        self.removed = removed;
        self.pieces = pieces;
        result
    }

    /// Checks the set's invariants (tests): disjoint, sorted, non-empty, aligned, and no two
    /// adjacent regions that Linux would have merged.
    #[cfg(test)]
    pub(crate) fn check(&self) {
        let mut prev: Option<Region> = None;
        for r in self.iter() {
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
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::semantics::vm_flags;

    const P: u64 = 4096;
    const VA: u64 = 1 << crate::page_table::VA_BITS;
    const B: Bounds = Bounds {
        min_addr: 0x1_0000,
        max_addr: 0x100_0000,
    };

    fn rw() -> Attrs {
        Attrs {
            prot: Prot::READ_WRITE,
            sharing: Sharing::Private,
            flags: 0,
            anon: 0,
            shm_base: 0,
        }
    }

    fn with_prot(p: Prot) -> Attrs {
        Attrs { prot: p, ..rw() }
    }

    fn map(set: &mut RegionSet, start: u64, end: u64, a: Attrs) {
        set.edit(start..end, |_| Some(a), usize::MAX, false)
            .unwrap();
        set.check();
    }

    /// `mprotect`'s edit: the regions in `range` get `prot`, holes stay holes.
    fn protect(set: &mut RegionSet, range: Range<u64>, prot: Prot) {
        set.edit(range, |o| o.map(|o| Attrs { prot, ..o }), 10, false)
            .unwrap();
    }

    fn assign(s: &RegionSet, addr: u64) -> u64 {
        let ((e, slot), next) = s.lookup_with_next(addr).unwrap();
        s.assign_anon(e, slot, next, || s.fresh_anon())
    }

    fn lines(set: &RegionSet) -> Vec<(u64, u64, u32)> {
        set.iter()
            .map(|r| (r.start, r.end, r.attrs.prot.bits()))
            .collect()
    }

    #[test]
    fn adjacent_compatible_mappings_merge() {
        let mut s = RegionSet::new();
        map(&mut s, 0x20000, 0x21000, rw());
        map(&mut s, 0x21000, 0x23000, rw());
        map(&mut s, 0x1f000, 0x20000, rw());
        assert_eq!(lines(&s), vec![(0x1f000, 0x23000, 3)]);
    }

    #[test]
    fn different_prot_or_flags_do_not_merge() {
        let mut s = RegionSet::new();
        map(&mut s, 0x20000, 0x21000, rw());
        map(&mut s, 0x21000, 0x22000, with_prot(Prot::READ));
        map(
            &mut s,
            0x22000,
            0x23000,
            Attrs {
                flags: vm_flags::NORESERVE,
                ..rw()
            },
        );
        assert_eq!(s.len(), 3);
    }

    #[test]
    fn munmap_in_the_middle_splits_in_two() {
        let mut s = RegionSet::new();
        map(&mut s, 0x20000, 0x24000, rw());
        s.edit(0x21000..0x22000, |_| None, usize::MAX, false)
            .unwrap();
        s.check();
        assert_eq!(
            lines(&s),
            vec![(0x20000, 0x21000, 3), (0x22000, 0x24000, 3)]
        );
        assert!(s.lookup(0x21000).is_none());
        assert_eq!(s.lookup(0x23fff).unwrap().0, 0x24000);
    }

    #[test]
    fn protect_middle_splits_in_three_and_merges_back() {
        let mut s = RegionSet::new();
        map(&mut s, 0x20000, 0x24000, rw());
        let p = |prot| move |a: Option<Attrs>| a.map(|a| Attrs { prot, ..a });
        s.edit(0x21000..0x22000, p(Prot::READ), usize::MAX, false)
            .unwrap();
        s.check();
        assert_eq!(s.len(), 3);
        s.edit(0x21000..0x22000, p(Prot::READ_WRITE), usize::MAX, false)
            .unwrap();
        s.check();
        assert_eq!(lines(&s), vec![(0x20000, 0x24000, 3)]);
    }

    #[test]
    fn map_count_limit_refuses_and_changes_nothing() {
        let mut s = RegionSet::new();
        map(&mut s, 0x20000, 0x24000, rw());
        let before = lines(&s);
        assert_eq!(
            s.edit(0x21000..0x22000, |_| None, 1, false),
            Err(VmError::OutOfMemory(Limit::MapCount))
        );
        assert_eq!(lines(&s), before);
        // Unmapping a whole region at the limit is fine; so is a split that stays within it.
        s.edit(0x21000..0x22000, |_| None, 2, false).unwrap();
        assert_eq!(s.len(), 2);
    }

    #[test]
    fn exclusive_edit_refuses_overlap_with_eexist() {
        let mut s = RegionSet::new();
        map(&mut s, 0x20000, 0x22000, rw());
        let before = lines(&s);
        assert_eq!(
            s.edit(0x21000..0x23000, |_| Some(rw()), usize::MAX, true),
            Err(VmError::Exists)
        );
        assert_eq!(lines(&s), before);
        s.edit(0x22000..0x23000, |_| Some(rw()), usize::MAX, true)
            .unwrap();
        assert_eq!(lines(&s), vec![(0x20000, 0x23000, 3)]);
    }

    #[test]
    fn fixed_map_over_several_regions_replaces_them() {
        let mut s = RegionSet::new();
        map(&mut s, 0x20000, 0x22000, rw());
        map(&mut s, 0x23000, 0x25000, with_prot(Prot::READ));
        map(&mut s, 0x21000, 0x24000, with_prot(Prot::NONE));
        assert_eq!(
            lines(&s),
            vec![
                (0x20000, 0x21000, 3),
                (0x21000, 0x24000, 0),
                (0x24000, 0x25000, 1)
            ]
        );
    }

    #[test]
    fn separately_written_regions_do_not_merge_when_the_hole_is_filled() {
        let mut s = RegionSet::new();
        map(&mut s, 0x20000, 0x21000, rw());
        map(&mut s, 0x22000, 0x23000, rw());
        let a = assign(&s, 0x20000);
        let b = assign(&s, 0x22000);
        assert_ne!(a, b);
        map(&mut s, 0x21000, 0x22000, rw());
        // Merged with the left one only (vma_merge_new_range prefers prev).
        assert_eq!(
            lines(&s),
            vec![(0x20000, 0x22000, 3), (0x22000, 0x23000, 3)]
        );
    }

    #[test]
    fn a_written_neighbour_shares_its_anon_identity() {
        let mut s = RegionSet::new();
        map(&mut s, 0x20000, 0x21000, rw());
        map(&mut s, 0x21000, 0x22000, with_prot(Prot::KNOWN));
        let a = assign(&s, 0x20000);
        assert_eq!(assign(&s, 0x21000), a);
        protect(&mut s, 0x21000..0x22000, Prot::READ_WRITE);
        assert_eq!(lines(&s), vec![(0x20000, 0x22000, 3)]);
    }

    #[test]
    fn shared_mappings_merge_only_with_themselves() {
        let mut s = RegionSet::new();
        let sh = |anon| Attrs {
            sharing: Sharing::Shared,
            anon,
            ..rw()
        };
        let (x, y) = (s.fresh_anon(), s.fresh_anon());
        map(&mut s, 0x20000, 0x21000, sh(x));
        map(&mut s, 0x21000, 0x23000, sh(y));
        assert_eq!(s.len(), 2);
        protect(&mut s, 0x21000..0x22000, Prot::READ);
        protect(&mut s, 0x21000..0x22000, Prot::READ_WRITE);
        s.check();
        assert_eq!(s.len(), 2);
    }

    #[test]
    fn holes_gaps_and_top_down_search() {
        let mut s = RegionSet::new();
        assert_eq!(s.find_gap_topdown(P, B), Some(B.max_addr - P));
        map(&mut s, B.max_addr - 2 * P, B.max_addr, rw());
        assert_eq!(s.find_gap_topdown(P, B), Some(B.max_addr - 3 * P));
        map(&mut s, 0x20000, 0x21000, rw());
        map(&mut s, 0x22000, 0x23000, rw());
        assert_eq!(s.first_hole(0x20000..0x23000), Some(0x21000));
        assert_eq!(s.first_hole(0x20000..0x21000), None);
        assert_eq!(s.first_hole(0x1f000..0x21000), Some(0x1f000));
        assert!(s.is_free(0x21000, 0x22000));
        assert!(!s.is_free(0x21000, 0x22001));
        // Unmapping next to a neighbour on each side: the gap is the range itself.
        map(&mut s, 0x21000, 0x22000, with_prot(Prot::READ));
        let o = s
            .edit(0x21000..0x22000, |_| None, usize::MAX, false)
            .unwrap();
        assert!(o.overlapped);
        assert_eq!(s.gap_around(0x21000..0x22000, o, VA), 0x21000..0x22000);
        // Nothing below: the gap reaches address 0 (below min_addr); above: the next region's start.
        let o = s
            .edit(0x20000..0x21000, |_| None, usize::MAX, false)
            .unwrap();
        assert_eq!(o.prev_end, None);
        assert_eq!(s.gap_around(0x20000..0x21000, o, VA), 0..0x22000);
        // The tail of a split region bounds the gap.
        let top = B.max_addr - 2 * P;
        let o = s.edit(top..top + P, |_| None, usize::MAX, false).unwrap();
        assert_eq!(o.next_start, top + P);
        assert_eq!(s.gap_around(top..top + P, o, VA), 0x23000..top + P);
        // A space that is full has no gap.
        let mut full = RegionSet::new();
        map(&mut full, B.min_addr, B.max_addr, rw());
        assert_eq!(full.find_gap_topdown(P, B), None);
    }

    #[test]
    fn random_edits_match_a_page_model() {
        use rand::{Rng, SeedableRng};
        let mut rng = rand::rngs::StdRng::seed_from_u64(7);
        let pages = 64u64;
        let base = 0x20000u64;
        let mut model: Vec<Option<u32>> = vec![None; pages as usize];
        let mut s = RegionSet::new();
        for _ in 0..2000 {
            let a = rng.gen_range(0..pages);
            let n = rng.gen_range(1..=(pages - a).min(8));
            let r = base + a * P..base + (a + n) * P;
            match rng.gen_range(0..3) {
                0 => {
                    let p = rng.gen_range(0..4u32);
                    s.edit(
                        r,
                        |_| Some(with_prot(Prot::from_bits_retain(p))),
                        usize::MAX,
                        false,
                    )
                    .unwrap();
                    for i in a..a + n {
                        model[i as usize] = Some(p);
                    }
                }
                1 => {
                    s.edit(r, |_| None, usize::MAX, false).unwrap();
                    for i in a..a + n {
                        model[i as usize] = None;
                    }
                }
                _ => {
                    let p = rng.gen_range(0..4u32);
                    s.edit(
                        r,
                        |o| {
                            o.map(|o| Attrs {
                                prot: Prot::from_bits_retain(p),
                                ..o
                            })
                        },
                        usize::MAX,
                        false,
                    )
                    .unwrap();
                    for i in a..a + n {
                        if model[i as usize].is_some() {
                            model[i as usize] = Some(p);
                        }
                    }
                }
            }
            s.check();
            for i in 0..pages {
                let got = s.get(base + i * P).map(|r| r.attrs.prot.bits());
                assert_eq!(got, model[i as usize], "page {i}");
            }
            // Maximal merging: the number of regions equals the number of runs in the model.
            let runs = (0..pages as usize)
                .filter(|&i| model[i].is_some() && (i == 0 || model[i - 1] != model[i]))
                .count();
            assert_eq!(s.len(), runs);
        }
    }
}
