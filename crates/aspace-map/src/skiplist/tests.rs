//! Unit tests of what the shared conformance suite does not reach: arenas (separators, hints,
//! fallback to the shared region, allocation across a separator), interval locking (`lock`,
//! `swap`, release on drop) and reclamation (every removed value dropped after the map's `barrier()`, batching).

use super::{ArenaLayout, SkipListMap};
use crate::contract::{Interval, IntervalLocking, IntervalMap, MapError, PAGE_SIZE as P};
use aspace_rcu::Domain;
use std::ops::ControlFlow;
use std::sync::atomic::{AtomicIsize, Ordering};
use std::sync::Arc;

const LAYOUT: ArenaLayout = ArenaLayout {
    count: 4,
    size: 16 * P,
    base: 64 * P,
};

fn all(m: &SkipListMap<u64>) -> Vec<(u64, u64, u64)> {
    let r = m.domain().register();
    let g = r.read();
    let mut out = Vec::new();
    m.visit(0..crate::KEY_SPACE_END, &g, &mut |iv, v| {
        out.push((iv.start / P, iv.end / P, *v));
        ControlFlow::Continue(())
    })
    .unwrap();
    out
}

#[test]
fn arena_allocs_fill_the_arena_then_fall_back_to_the_shared_region() {
    let m = SkipListMap::with_arenas(Domain::new(), LAYOUT);
    m.check_invariants();
    let arena = LAYOUT.arena(1);
    for i in 0..16 {
        let iv = m.alloc_in_arena(5, P, i).unwrap();
        assert_eq!(
            iv.start,
            arena.start + i * P,
            "contiguous first fit from the hint"
        );
    }
    let iv = m.alloc_in_arena(1, P, 99).unwrap();
    assert!(
        iv.start >= LAYOUT.end() || iv.end <= LAYOUT.base,
        "fallback outside arenas: {iv}"
    );
    m.check_invariants();
}

#[test]
fn the_hint_moves_back_after_a_free() {
    let m = SkipListMap::with_arenas(Domain::new(), LAYOUT);
    let a: Vec<Interval> = (0..4).map(|i| m.alloc_in_arena(0, P, i).unwrap()).collect();
    m.map(a[1].start..a[1].end, None).unwrap();
    assert_eq!(
        m.alloc_in_arena(0, P, 7).unwrap(),
        a[1],
        "the freed page is reused first"
    );
    // The contract's alloc in an arena stays exact first fit with the hint.
    m.map(a[0].start..a[0].end, None).unwrap();
    let arena = LAYOUT.arena(0);
    assert_eq!(m.alloc(arena.start..arena.end, P, 8).unwrap(), a[0]);
    m.check_invariants();
}

#[test]
fn a_mapping_across_an_arena_boundary_drops_and_restores_the_separator() {
    let m = SkipListMap::with_arenas(Domain::new(), LAYOUT);
    let b = LAYOUT.arena(1).start;
    m.map(b - 2 * P..b + 2 * P, Some(1)).unwrap();
    m.check_invariants();
    let r = m.domain().register();
    {
        let g = r.read();
        assert_eq!(
            m.query(b, &g).map(|(iv, v)| (iv, *v)),
            Some((Interval::new(b - 2 * P, b + 2 * P).unwrap(), 1))
        );
    }
    // Trimming the interval so it ends at the boundary brings the separator back.
    m.map(b..b + 2 * P, None).unwrap();
    m.check_invariants();
    m.map(b - P..b + P, Some(2)).unwrap();
    m.map(0..crate::KEY_SPACE_END, None).unwrap();
    m.check_invariants();
    assert!(m.is_empty());
}

#[test]
fn an_alloc_that_fits_only_across_a_separator_covers_it() {
    let m = SkipListMap::with_arenas(Domain::new(), LAYOUT);
    let b = LAYOUT.arena(2).start;
    m.map(b - 8 * P..b - P, Some(1)).unwrap();
    m.map(b + P..b + 8 * P, Some(2)).unwrap();
    let iv = m.alloc(b - 8 * P..b + 8 * P, 2 * P, 3).unwrap();
    assert_eq!(iv, Interval::new(b - P, b + P).unwrap());
    m.check_invariants();
    assert_eq!(m.len(), 3);
}

#[test]
fn swap_replaces_the_held_range_and_keeps_what_lies_outside() {
    let m = SkipListMap::new(Domain::new());
    m.map(0..10 * P, Some(1)).unwrap();
    m.map(12 * P..14 * P, Some(2)).unwrap();
    let l = m.lock(5 * P..13 * P).unwrap();
    assert_eq!(l.range(), Interval::new(5 * P, 13 * P).unwrap());
    let new = vec![
        (Interval::new(6 * P, 7 * P).unwrap(), 3),
        (Interval::new(8 * P, 9 * P).unwrap(), 4),
    ];
    m.swap(l, new).unwrap();
    assert_eq!(all(&m), vec![(0, 5, 1), (6, 7, 3), (8, 9, 4), (13, 14, 2)]);
    m.check_invariants();
}

#[test]
fn swap_refuses_intervals_outside_the_held_range_and_releases_it() {
    let m = SkipListMap::new(Domain::new());
    m.map(0..4 * P, Some(1)).unwrap();
    let l = m.lock(P..2 * P).unwrap();
    let bad = vec![(Interval::new(0, 3 * P).unwrap(), 9)];
    assert_eq!(
        m.swap(l, bad),
        Err(MapError::OutOfRange {
            start: 0,
            end: 3 * P
        })
    );
    // Released: a new lock and a map go through, nothing changed.
    drop(m.lock(0..4 * P).unwrap());
    assert_eq!(all(&m), vec![(0, 4, 1)]);
    m.check_invariants();
}

#[test]
fn held_ranges_on_disjoint_intervals_coexist() {
    let m = SkipListMap::new(Domain::new());
    m.map(0..P, Some(1)).unwrap();
    m.map(4 * P..5 * P, Some(2)).unwrap();
    m.map(8 * P..9 * P, Some(3)).unwrap();
    let a = m.lock(0..P).unwrap();
    let b = m.lock(8 * P..9 * P).unwrap();
    // `a` holds node 0 (and the gap after it), `b` holds node 4 (the predecessor) and node 8.
    // A map of 8..9 needs nodes 4 and 8: it waits in another thread until `b` is dropped.
    std::thread::scope(|s| {
        let h = s.spawn(|| m.map(8 * P..9 * P, None).unwrap());
        drop(a);
        drop(b);
        h.join().unwrap();
    });
    assert_eq!(all(&m), vec![(0, 1, 1), (4, 5, 2)]);
}

/// A value that counts its live copies.
struct Counted(Arc<AtomicIsize>);

impl Clone for Counted {
    fn clone(&self) -> Self {
        self.0.fetch_add(1, Ordering::Relaxed);
        Self(Arc::clone(&self.0))
    }
}

impl Drop for Counted {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

#[test]
fn every_removed_node_is_reclaimed_after_barrier() {
    let live = Arc::new(AtomicIsize::new(0));
    let new = || {
        live.fetch_add(1, Ordering::Relaxed);
        Counted(Arc::clone(&live))
    };
    let domain = Domain::new();
    let m = SkipListMap::with_arenas(domain.clone(), LAYOUT);
    for i in 0..200u64 {
        let s = (i * 7) % 120;
        m.map(s * P..(s + 1 + i % 5) * P, Some(new())).unwrap();
        if i % 3 == 0 {
            let _ = m.alloc_in_arena(i as usize, P, new());
        }
        if i % 4 == 0 {
            m.map(s * P..(s + 2) * P, None).unwrap();
        }
    }
    m.check_invariants();
    m.barrier();
    assert_eq!(
        live.load(Ordering::Relaxed),
        m.len() as isize,
        "values of removed intervals dropped"
    );
    drop(m);
    domain.barrier();
    assert_eq!(live.load(Ordering::Relaxed), 0, "every value dropped");
}

/// Removed nodes are batched per reader slot: `Domain::barrier()` alone leaves a partial batch
/// pending, the map's `barrier()` frees it; full batches are freed by the retiring thread's next
/// operation once their grace period has ended, so the backlog stays bounded without any map
/// barrier; dropping the map frees what is still pending.
#[test]
fn retired_nodes_are_batched_freed_by_later_operations_and_by_the_map_barrier() {
    use super::retire::BATCH;
    let live = Arc::new(AtomicIsize::new(0));
    let new = || {
        live.fetch_add(1, Ordering::Relaxed);
        Counted(Arc::clone(&live))
    };
    let pending = |m: &SkipListMap<Counted>| live.load(Ordering::Relaxed) - m.len() as isize;
    let domain = Domain::new();
    let m = SkipListMap::new(domain.clone());
    // Fewer removals than a batch: nothing handed to the domain yet.
    for i in 0..(BATCH as u64 / 2) {
        m.map(i * P..(i + 1) * P, Some(new())).unwrap();
        m.map(i * P..(i + 1) * P, None).unwrap();
    }
    domain.barrier();
    assert_eq!(pending(&m), BATCH as isize / 2, "a partial batch waits");
    m.barrier();
    assert_eq!(pending(&m), 0, "the map's barrier frees partial batches");
    // Many batches: each operation frees the batches whose grace period has ended.
    for round in 0..20u64 {
        for i in 0..BATCH as u64 {
            let a = (round * BATCH as u64 + i) * P;
            m.map(a..a + P, Some(new())).unwrap();
            m.map(a..a + P, None).unwrap();
        }
        // Let the grace period of what was handed off so far end (no frees happen here).
        domain.barrier();
    }
    assert!(
        pending(&m) <= 2 * BATCH as isize,
        "backlog bounded by later operations: {} pending",
        pending(&m)
    );
    // The last batch's grace period has ended: the next operation (an insert) frees it.
    m.map(0..P, Some(new())).unwrap();
    m.map(0..P, None).unwrap();
    assert_eq!(pending(&m), 1, "only the node just removed waits");
    drop(m);
    domain.barrier();
    assert_eq!(
        live.load(Ordering::Relaxed),
        0,
        "the map's drop frees pending nodes"
    );
}

/// Regression (hint version wrap): an alloc reads the hint, walks a fully covered arena and
/// claims its last page; before it advances the hint, a page below is freed and enough further
/// frees wrap the version (2 bits under test) back to the word it read, so its advance succeeds
/// and leaves the hint above the free page. The next alloc must still find that page.
#[test]
fn a_wrapped_hint_version_cannot_hide_a_free_gap() {
    use super::hint::VERSION_MASK;
    let m = SkipListMap::with_arenas(Domain::new(), LAYOUT);
    let arena = LAYOUT.arena(0);
    let page = |i: u64| arena.start + i * P..arena.start + (i + 1) * P;
    for i in 0..16 {
        m.alloc_in_arena(0, P, i).unwrap();
    }
    m.map(page(0), None).unwrap();
    m.map(page(15), None).unwrap();
    m.map(page(0), Some(100)).unwrap();
    let hint = &m.arenas.as_ref().unwrap().1[0].free;
    // The stalled alloc: reads the hint (arena start), sees pages 0..15 covered, claims 15.
    let (seen, from) = hint.read();
    assert_eq!(from, arena.start);
    m.map(page(15), Some(115)).unwrap();
    // Meanwhile: page 2 is freed, then frees and re-maps of page 5 wrap the version.
    m.map(page(2), None).unwrap();
    for _ in 0..VERSION_MASK {
        m.map(page(5), None).unwrap();
        m.map(page(5), Some(5)).unwrap();
    }
    assert_eq!(
        hint.read().0,
        seen,
        "the version wrapped to the word the alloc read"
    );
    hint.advance(seen, arena.end);
    assert_eq!(
        hint.read().1,
        arena.end,
        "the stale advance moved the hint over page 2"
    );
    let iv = m.alloc_in_arena(0, P, 7).unwrap();
    assert_eq!(
        iv.start..iv.end,
        page(2),
        "the free page below the hint is found"
    );
    m.check_invariants();
}

/// A value that records whether the map's leave mark was called on it; a clone starts unmarked
/// (a copy is a new value).
#[derive(Debug, Default)]
struct Marked {
    id: u64,
    left: std::sync::atomic::AtomicBool,
}

impl Clone for Marked {
    fn clone(&self) -> Marked {
        Marked {
            id: self.id,
            left: Default::default(),
        }
    }
}

fn mark_left(v: &Marked) {
    v.left.store(true, Ordering::Relaxed);
}

fn marked(id: u64) -> Marked {
    Marked {
        id,
        left: Default::default(),
    }
}

#[test]
fn every_commit_marks_the_nodes_it_takes_out_and_only_those() {
    let m = SkipListMap::new(Domain::new()).with_leave_mark(mark_left);
    for (i, s) in [0u64, 4, 8, 12].into_iter().enumerate() {
        m.map(s * P..(s + 4) * P, Some(marked(i as u64))).unwrap();
    }
    let reader = m.domain().register();
    let guard = reader.read(); // Keeps the old nodes alive to look at their marks.
    let old: Vec<&Marked> = (0..4)
        .map(|k| m.query(k * 4 * P, &guard).unwrap().1)
        .collect();
    // Trims [0, 4P) and [4P, 8P) (their outer parts become clones), leaves the rest.
    m.map(2 * P..6 * P, Some(marked(9))).unwrap();
    // A swap of a held range re-stating an unchanged node: that node is copied, so it left.
    let locked = m.lock_covering(8 * P..12 * P).unwrap();
    let same: Vec<_> = locked.intervals().map(|(iv, v)| (iv, v.clone())).collect();
    m.swap(locked, same).unwrap();
    let left: Vec<bool> = old.iter().map(|v| v.left.load(Ordering::Relaxed)).collect();
    assert_eq!(left, [true, true, true, false]);
    for a in [0, 5, 8] {
        let (_, v) = m.query(a * P, &guard).unwrap();
        assert!(
            !v.left.load(Ordering::Relaxed),
            "a new node starts unmarked"
        );
    }
    // A commit that fails to allocate marks nothing (and changes nothing).
    let last = m.query(12 * P, &guard).unwrap().1;
    m.fail_allocations_after(Some(0));
    assert_eq!(
        m.map(12 * P..14 * P, Some(marked(10))),
        Err(MapError::OutOfMemory)
    );
    m.fail_allocations_after(None);
    assert!(
        !last.left.load(Ordering::Relaxed),
        "a failed commit marked a node"
    );
    // Removal marks too.
    m.map(12 * P..16 * P, None).unwrap();
    assert!(
        last.left.load(Ordering::Relaxed),
        "a removed node left unmarked"
    );
    drop(guard);
}

/// One traversal per edit (module doc): a held range's swap starts from the predecessors its
/// lock recorded. Here, between each lock and its swap, the nodes just before the held range
/// (what the lock recorded at the upper levels, when they are tall) are replaced by nodes of
/// other heights, so the swap finds recorded predecessors DELETED and must skip them
/// (`find_hinted`'s validation); the structure must stay intact and every value must be the
/// last one written.
#[test]
fn a_held_swap_skips_recorded_predecessors_replaced_since_its_lock() {
    let m = SkipListMap::new(Domain::new());
    let n = 256u64;
    let page = |k: u64| 2 * k * P..(2 * k + 1) * P;
    for k in 0..n {
        m.map(page(k), Some(k)).unwrap();
    }
    for round in 1..=4u64 {
        for k in 4..n {
            let held = m.lock(page(k)).unwrap();
            // The held lock owns node `k - 1` (its level-0 predecessor): replace the ones
            // before it.
            for j in k - 4..k - 1 {
                m.map(page(j), Some(j + 1000 * round)).unwrap();
            }
            let iv = Interval::try_from(page(k)).unwrap();
            m.swap(held, vec![(iv, k + 1000 * round)]).unwrap();
            m.check_invariants();
        }
    }
    let want: Vec<_> = (0..n).map(|k| (2 * k, 2 * k + 1, k + 4000)).collect();
    assert_eq!(all(&m), want);
}
