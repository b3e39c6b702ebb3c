//! Tests of the region edit (plan + store): splitting, Linux's merging, anon identity
//! adoption, `max_map_count`, `EEXIST`, gaps and holes, and random edits against a page model.
//! Every test runs against both stores (`store_tests!`: modules `btree` and `skiplist`), with
//! the same assertions; the skiplist store's allocation failure has a test of its own.

use super::plan::{adopted_anon, EditBuffers, EditOutcome, OnOverlap};
#[cfg(not(loom))]
use super::skiplist_store::SkipListStore;
use super::store::{BTreeStore, RegionStore};
use super::{AnonId, Attrs, Region};
use crate::error::{Limit, VmError};
use crate::semantics::vm_flags;
use crate::semantics::Bounds;
use crate::types::Prot;
use crate::types::Sharing;
use std::ops::Range;

const P: u64 = 4096;
const VA: u64 = 1 << crate::page_table::VA_BITS;
const B: Bounds = Bounds {
    min_addr: 0x1_0000,
    max_addr: 0x100_0000,
};

/// A store the tests run against: made empty, checked after edits.
trait TestStore: RegionStore {
    fn empty() -> Self;
    fn check(&self);
}

impl TestStore for BTreeStore {
    fn empty() -> Self {
        BTreeStore::default()
    }
    fn check(&self) {
        BTreeStore::check(self);
    }
}

#[cfg(not(loom))]
impl TestStore for SkipListStore {
    fn empty() -> Self {
        SkipListStore::new()
    }
    fn check(&self) {
        SkipListStore::check(self);
    }
}

/// A store with its edit buffers and an identity counter: the edits of one core. The tests
/// name it `RegionSet`, which `store_tests!` makes an alias of `Set<TheStore>`.
struct Set<S> {
    store: S,
    bufs: EditBuffers,
    next_anon: u64,
}

impl<S: TestStore> Set<S> {
    fn new() -> Set<S> {
        Set {
            store: S::empty(),
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

impl<S> std::ops::Deref for Set<S> {
    type Target = S;
    fn deref(&self) -> &S {
        &self.store
    }
}

fn rw() -> Attrs {
    Attrs {
        prot: Prot::READ_WRITE,
        sharing: Sharing::Private,
        flags: 0,
        anon: None,
        shm_base: 0,
    }
}

fn with_prot(p: Prot) -> Attrs {
    Attrs { prot: p, ..rw() }
}

fn map<S: TestStore>(set: &mut Set<S>, start: u64, end: u64, a: Attrs) {
    set.edit(start..end, |_| Some(a), usize::MAX, false)
        .unwrap();
    set.check();
}

/// `mprotect`'s edit: the regions in `range` get `prot`, holes stay holes.
fn protect<S: TestStore>(set: &mut Set<S>, range: Range<u64>, prot: Prot) {
    set.edit(range, |o| o.map(|o| Attrs { prot, ..o }), 10, false)
        .unwrap();
}

/// A first write fault's identity choice at `addr`.
fn assign<S: TestStore>(s: &mut Set<S>, addr: u64) -> AnonId {
    let r = s.store.lookup(addr).unwrap();
    if let Some(id) = r.attrs().anon {
        return id;
    }
    let next = s
        .store
        .lookup_with_next(addr)
        .unwrap()
        .1
        .map(|n| n.region());
    let id = adopted_anon(&r.region(), next, || s.store.adjacent_prev(&r));
    let id = id.unwrap_or_else(|| AnonId::decode(s.next_anon).unwrap());
    let won = s.store.lookup(addr).unwrap().adopt_anon(id);
    if won.0.get() == s.next_anon {
        s.next_anon += 1;
    }
    won
}

fn lines<S: TestStore>(set: &Set<S>) -> Vec<(u64, u64, u32)> {
    set.iter()
        .map(|r| (r.start, r.end, r.attrs.prot.bits()))
        .collect()
}

/// Defines every test once per store: in module `btree` and (not under loom, where the
/// skiplist's atomics need a model) in module `skiplist`, with `RegionSet` naming that store's
/// `Set`.
macro_rules! store_tests {
    ($(fn $name:ident() $body:block)*) => {
        mod btree {
            use super::*;
            type RegionSet = Set<BTreeStore>;
            $(#[test] fn $name() $body)*
        }
        #[cfg(not(loom))]
        mod skiplist {
            use super::*;
            type RegionSet = Set<SkipListStore>;
            $(#[test] fn $name() $body)*
        }
    };
}

store_tests! {
    fn adjacent_compatible_mappings_merge() {
        let mut s = RegionSet::new();
        map(&mut s, 0x20000, 0x21000, rw());
        map(&mut s, 0x21000, 0x23000, rw());
        map(&mut s, 0x1f000, 0x20000, rw());
        assert_eq!(lines(&s), vec![(0x1f000, 0x23000, 3)]);
    }

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

    fn a_written_neighbour_shares_its_anon_identity() {
        let mut s = RegionSet::new();
        map(&mut s, 0x20000, 0x21000, rw());
        map(&mut s, 0x21000, 0x22000, with_prot(Prot::KNOWN));
        let a = assign(&mut s, 0x20000);
        assert_eq!(assign(&mut s, 0x21000), a);
        protect(&mut s, 0x21000..0x22000, Prot::READ_WRITE);
        assert_eq!(lines(&s), vec![(0x20000, 0x22000, 3)]);
    }

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
        // Nothing below: the gap reaches address 0 (below min_addr); above: the next region's
        // start.
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

/// The skiplist store cannot reserve: its `swap` allocates the new nodes and, when one
/// allocation fails, changes nothing. Every allocation of a split (three new nodes) is failed
/// in turn: the edit reports `ENOMEM`, the regions are as before, and the same edit succeeds
/// once allocations work again.
#[cfg(not(loom))]
#[test]
fn skiplist_store_edit_fails_cleanly_when_a_node_cannot_be_allocated() {
    let mut s = Set::<SkipListStore>::new();
    map(&mut s, 0x20000, 0x24000, rw());
    let before = lines(&s);
    for k in 0..3 {
        s.fail_allocations_after(Some(k));
        assert_eq!(
            s.edit(
                0x21000..0x22000,
                |o| o.map(|o| Attrs {
                    prot: Prot::READ,
                    ..o
                }),
                10,
                false
            ),
            Err(VmError::OutOfMemory(Limit::Memory)),
            "allocation {k} failed"
        );
        s.fail_allocations_after(None);
        s.check();
        assert_eq!(lines(&s), before);
    }
    s.fail_allocations_after(Some(3));
    protect(&mut s, 0x21000..0x22000, Prot::READ);
    s.fail_allocations_after(None);
    s.check();
    assert_eq!(
        lines(&s),
        vec![
            (0x20000, 0x21000, 3),
            (0x21000, 0x22000, 1),
            (0x22000, 0x24000, 3)
        ]
    );
}
