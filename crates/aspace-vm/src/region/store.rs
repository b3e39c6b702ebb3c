//! Where regions live: the [`RegionStore`] interface the Linux rules (`designs/syscalls.rs`)
//! are written against, and its first implementation, [`BTreeStore`], a `BTreeMap` keyed by
//! region **end**.
//!
//! A store answers lookups and the searches placement needs, and performs an edit in two steps
//! around the pure plan (`plan.rs`): [`RegionStore::read_window`] reads the regions an edit of a
//! range can touch (its neighbours included), and [`RegionStore::replace_window`] swaps them for
//! the plan's result. The Bonsai tree (one writer, published by one root pointer) and the
//! interval skiplist (`lock` the window's nodes, then `swap` them) fit the same two steps, so a
//! later design supplies a store and reuses the plan and the Linux bodies unchanged.
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
//! Not for: locking (the design wraps the store in its lock) or the rules of an edit (`plan.rs`).

use super::plan::{plan_edit, EditBuffers, EditOutcome, OnOverlap};
use super::{AnonId, Attrs, Region};
use crate::error::VmError;
use crate::semantics::Bounds;
use crate::types::{Prot, Sharing};
use std::collections::BTreeMap;
use std::ops::Range;
use std::sync::atomic::{AtomicU64, Ordering};

/// What a store keeps for one region (besides the key it is found by).
#[derive(Debug)]
pub(crate) struct StoredRegion {
    start: u64,
    prot: Prot,
    sharing: Sharing,
    flags: u8,
    /// [`AnonId::encode`]d. Set none -> id at most once under a shared borrow (first write
    /// fault, [`RegionRef::adopt_anon`]); otherwise written only through `&mut`. Relaxed
    /// everywhere: it is a value, not a publication; the design's lock orders it against the
    /// edits that read it.
    anon: AtomicU64,
}

impl StoredRegion {
    /// The stored form of `r`.
    pub(crate) fn new(r: &Region) -> StoredRegion {
        StoredRegion {
            start: r.start,
            prot: r.attrs.prot,
            sharing: r.attrs.sharing,
            flags: r.attrs.flags,
            anon: AtomicU64::new(AnonId::encode(r.attrs.anon)),
        }
    }

    /// The attributes (anon loaded Relaxed).
    fn attrs(&self) -> Attrs {
        Attrs {
            prot: self.prot,
            sharing: self.sharing,
            flags: self.flags,
            anon: AnonId::decode(self.anon.load(Ordering::Relaxed)),
        }
    }
}

/// A region of a store, borrowed.
#[derive(Clone, Copy, Debug)]
pub(crate) struct RegionRef<'a> {
    end: u64,
    stored: &'a StoredRegion,
}

impl<'a> RegionRef<'a> {
    /// The region `[stored.start, end)`.
    pub(crate) fn new(end: u64, stored: &'a StoredRegion) -> RegionRef<'a> {
        RegionRef { end, stored }
    }

    /// First byte.
    pub(crate) fn start(&self) -> u64 {
        self.stored.start
    }

    /// One past the last byte.
    pub(crate) fn end(&self) -> u64 {
        self.end
    }

    /// Its protection.
    pub(crate) fn prot(&self) -> Prot {
        self.stored.prot
    }

    /// Its attributes now.
    pub(crate) fn attrs(&self) -> Attrs {
        self.stored.attrs()
    }

    /// The region by value.
    pub(crate) fn region(&self) -> Region {
        Region {
            start: self.stored.start,
            end: self.end,
            attrs: self.attrs(),
        }
    }

    /// Gives the region the identity `id` unless it already has one; returns the identity now in
    /// place (a concurrent fault may have won). Callable with the store borrowed shared.
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

    /// The regions just before and just after `r` (adjacent or not).
    fn neighbours(&self, r: &RegionRef<'_>) -> (Option<Region>, Option<Region>);

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

    /// Replaces the window `old` (as the last `read_window` returned it, unchanged since) with
    /// `new` (disjoint, sorted, covering no address outside the window's span).
    fn replace_window(&mut self, old: &[Region], new: &[Region]);

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

    /// Rewrites `range` through `f` ([`plan_edit`]): reads the window, plans, and replaces the
    /// window only if the plan succeeded (a refused edit changes nothing).
    ///
    /// # Errors
    /// Those of [`plan_edit`].
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
        self.replace_window(&bufs.old, &bufs.new);
        Ok(outcome)
    }
}

/// The `BTreeMap` store (module doc).
#[derive(Debug, Default)]
pub(crate) struct BTreeStore {
    map: BTreeMap<u64, StoredRegion>,
}

impl BTreeStore {
    /// Checks the store's invariants (tests): disjoint, sorted, non-empty, aligned, and no two
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

impl RegionStore for BTreeStore {
    fn len(&self) -> usize {
        self.map.len()
    }

    #[inline]
    fn lookup(&self, addr: u64) -> Option<RegionRef<'_>> {
        let (&end, stored) = self.map.range(addr.checked_add(1)?..).next()?;
        (stored.start <= addr).then_some(RegionRef { end, stored })
    }

    fn neighbours(&self, r: &RegionRef<'_>) -> (Option<Region>, Option<Region>) {
        let prev = self
            .map
            .range(..=r.start())
            .next_back()
            .map(|(&end, s)| RegionRef::new(end, s).region());
        let next = self
            .map
            .range(r.end() + 1..)
            .next()
            .map(|(&end, s)| RegionRef::new(end, s).region());
        (prev, next)
    }

    fn overlapping(&self, range: Range<u64>) -> impl Iterator<Item = Region> + '_ {
        self.map
            .range(range.start.saturating_add(1)..)
            .take_while(move |(_, s)| s.start < range.end)
            .map(move |(&end, s)| {
                let mut r = RegionRef::new(end, s).region();
                r.start = r.start.max(range.start);
                r.end = r.end.min(range.end);
                r
            })
    }

    fn iter(&self) -> impl Iterator<Item = Region> + '_ {
        self.map
            .iter()
            .map(|(&end, s)| RegionRef::new(end, s).region())
    }

    fn end_at_or_below(&self, addr: u64) -> u64 {
        self.map
            .range(..=addr)
            .next_back()
            .map_or(0, |(&end, _)| end)
    }

    /// Cost: one step per region above the gap found (a linear scan, like Linux before its gap
    /// augmentation; the benchmark patterns find their gap at the first step).
    fn find_gap_topdown(&self, len: u64, bounds: Bounds) -> Option<u64> {
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

    fn read_window(&self, range: Range<u64>, old: &mut Vec<Region>) -> u64 {
        old.clear();
        // Keys >= range.start: the left neighbour ending exactly at range.start, then the
        // regions overlapping the range, then the first one after it.
        for (&end, s) in self.map.range(range.start..) {
            let r = RegionRef::new(end, s).region();
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

    fn replace_window(&mut self, old: &[Region], new: &[Region]) {
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
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::Limit;
    use crate::region::plan::adopted_anon;
    use crate::semantics::vm_flags;
    use crate::types::Prot;

    const P: u64 = 4096;
    const VA: u64 = 1 << crate::page_table::VA_BITS;
    const B: Bounds = Bounds {
        min_addr: 0x1_0000,
        max_addr: 0x100_0000,
    };

    /// A store with its edit buffers and an identity counter: the edits of one core.
    struct RegionSet {
        store: BTreeStore,
        bufs: EditBuffers,
        next_anon: u64,
    }

    impl RegionSet {
        fn new() -> RegionSet {
            RegionSet {
                store: BTreeStore::default(),
                bufs: EditBuffers::default(),
                next_anon: 1,
            }
        }

        fn edit(
            &mut self,
            range: Range<u64>,
            f: impl FnMut(Option<Attrs>) -> Option<Attrs>,
            max_count: usize,
            exclusive: bool,
        ) -> Result<EditOutcome, VmError> {
            let mode = if exclusive {
                OnOverlap::Refuse
            } else {
                OnOverlap::Rewrite
            };
            self.store.edit(&mut self.bufs, range, f, mode, max_count)
        }

        fn fresh_anon(&mut self) -> Option<AnonId> {
            self.next_anon += 1;
            AnonId::decode(self.next_anon - 1)
        }

        fn get(&self, addr: u64) -> Option<Region> {
            self.store.lookup(addr).map(|r| r.region())
        }
    }

    impl std::ops::Deref for RegionSet {
        type Target = BTreeStore;
        fn deref(&self) -> &BTreeStore {
            &self.store
        }
    }

    fn rw() -> Attrs {
        Attrs {
            prot: Prot::READ_WRITE,
            sharing: Sharing::Private,
            flags: 0,
            anon: None,
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

    /// A first write fault's identity choice at `addr`.
    fn assign(s: &mut RegionSet, addr: u64) -> AnonId {
        let r = s.store.lookup(addr).unwrap();
        if let Some(id) = r.attrs().anon {
            return id;
        }
        let (prev, next) = s.store.neighbours(&r);
        let id = adopted_anon(&r.region(), prev.as_ref(), next.as_ref());
        let id = id.unwrap_or_else(|| AnonId::decode(s.next_anon).unwrap());
        let won = s.store.lookup(addr).unwrap().adopt_anon(id);
        if won.0.get() == s.next_anon {
            s.next_anon += 1;
        }
        won
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
        assert_eq!(s.lookup(0x23fff).unwrap().end(), 0x24000);
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
        let a = assign(&mut s, 0x20000);
        let b = assign(&mut s, 0x22000);
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
        let a = assign(&mut s, 0x20000);
        assert_eq!(assign(&mut s, 0x21000), a);
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
