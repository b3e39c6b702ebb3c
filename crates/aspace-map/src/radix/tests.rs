//! Unit tests of the radix map's shapes: folding, expansion, reclamation of emptied nodes.

use super::*;
use crate::contract::KEY_SPACE_END;

const P: u64 = PAGE_SIZE;

fn intervals(m: &RadixMap<u64>) -> Vec<(u64, u64, u64)> {
    let r = m.domain().register();
    let g = r.read();
    let mut out = Vec::new();
    m.visit(0..KEY_SPACE_END, &g, &mut |iv, v| {
        out.push((iv.start / P, iv.end / P, *v));
        ControlFlow::Continue(())
    })
    .unwrap();
    out
}

#[test]
fn map_query_unmap() {
    let m = RadixMap::new(Domain::new());
    m.map(3 * P..7 * P, Some(1)).unwrap();
    m.check_invariants();
    assert_eq!(intervals(&m), vec![(3, 7, 1)]);
    m.map(4 * P..5 * P, None).unwrap();
    m.check_invariants();
    assert_eq!(intervals(&m), vec![(3, 4, 1), (5, 7, 1)]);
    m.map(0..KEY_SPACE_END, None).unwrap();
    m.check_invariants();
    assert!(intervals(&m).is_empty());
}

#[test]
fn emptied_nodes_are_freed_through_refcache() {
    let m = RadixMap::new(Domain::new());
    assert_eq!(m.node_count(), 1);
    for i in 0..64u64 {
        m.map((i * 1000) * P..(i * 1000 + 3) * P, Some(i)).unwrap();
    }
    m.check_invariants();
    let grown = m.node_count();
    assert!(grown > 5, "{grown}");
    m.map(0..KEY_SPACE_END, None).unwrap();
    m.check_invariants();
    m.collect();
    m.check_invariants();
    assert_eq!(m.node_count(), 1, "every node but the root freed");
    // The tree works on after the frees.
    m.map(5 * P..9 * P, Some(1)).unwrap();
    assert_eq!(intervals(&m), vec![(5, 9, 1)]);
    m.check_invariants();
}

#[test]
fn a_node_that_refills_is_revived_not_recreated() {
    let m = RadixMap::new(Domain::new());
    m.map(3 * P..4 * P, Some(1)).unwrap();
    m.map(3 * P..4 * P, None).unwrap();
    m.map(3 * P..4 * P, Some(2)).unwrap();
    m.collect();
    assert_eq!(intervals(&m), vec![(3, 4, 2)]);
    assert!(m.node_count() > 1);
    m.check_invariants();
}

#[test]
fn folded_slots_hold_aligned_ranges() {
    let m = RadixMap::new(Domain::new());
    // A 1 GiB-aligned gigabyte is one level-2 slot: nodes at levels 4, 3 and 2 only.
    m.map(1 << 30..2 << 30, Some(7)).unwrap();
    assert_eq!(m.node_count(), 1 + 3);
    let r = m.domain().register();
    let g = r.read();
    assert_eq!(
        m.query((1 << 30) + 12345 * P, &g).map(|(iv, v)| (iv, *v)),
        Some((Interval::new(1 << 30, 2 << 30).unwrap(), 7))
    );
    drop(g);
    // Unmapping one page in it expands the folded slot down to a leaf: remainders cloned.
    m.map((1 << 30) + P..(1 << 30) + 2 * P, None).unwrap();
    assert_eq!(
        intervals(&m),
        vec![
            ((1 << 30) / P, (1 << 30) / P + 1, 7),
            ((1 << 30) / P + 2, (2 << 30) / P, 7)
        ]
    );
    m.check_invariants();
}

#[test]
fn a_free_by_another_thread_moves_the_allocating_threads_hint_back() {
    let m = RadixMap::new(Domain::new());
    let arena = 1 << 30..2 << 30;
    // This thread allocates contiguously: its hint moves past each claim.
    for i in 0..8u64 {
        let iv = m.alloc(arena.clone(), 2 * P, i).unwrap();
        assert_eq!(iv.start, (1 << 30) + i * 2 * P);
    }
    // Another thread (another pooled slot, so another core's hint) frees a page below it.
    std::thread::scope(|s| {
        s.spawn(|| m.map((1 << 30) + 2 * P..(1 << 30) + 3 * P, None).unwrap());
    });
    // First fit again finds the freed page, then continues after the claims.
    assert_eq!(
        m.alloc(arena.clone(), P, 100).unwrap().start,
        (1 << 30) + 2 * P
    );
    assert_eq!(
        m.alloc(arena.clone(), P, 101).unwrap().start,
        (1 << 30) + 16 * P
    );
    // A free in another range does not concern this range's hint, and an alloc in a new range
    // installs it.
    m.map(0..P, Some(5)).unwrap();
    m.map(0..P, None).unwrap();
    assert_eq!(m.alloc(0..P, P, 6).unwrap().start, 0);
    assert_eq!(m.alloc(arena, P, 102).unwrap().start, (1 << 30) + 17 * P);
    m.check_invariants();
}

/// Review finding F1 (`REVIEW-radix.md`): a node all of whose slots one operation gives one
/// record is folded into its parent's slot. Before: `same contents, but the history's leaf
/// nodes stay linked` (69 nodes, 5 for the same contents mapped directly).
#[test]
fn uniform_nodes_are_folded_back() {
    let m = RadixMap::new(Domain::new());
    let fresh = RadixMap::new(Domain::new());
    // One page per leaf across 64 leaves (2 MiB apart): 64 leaf nodes.
    for i in 0..64u64 {
        m.map(i * 512 * P..(i * 512 + 1) * P, Some(1u64)).unwrap();
    }
    assert_eq!(m.node_count(), 5 + 64);
    // One interval over the whole 128 MiB (64 level-1 slots, each a 2 MiB leaf's span).
    m.map(0..64 * 512 * P, Some(2u64)).unwrap();
    fresh.map(0..64 * 512 * P, Some(2u64)).unwrap();
    // Folded at the publication, before any Refcache epoch.
    assert_eq!(m.node_count(), fresh.node_count());
    m.check_invariants();
    m.collect();
    fresh.collect();
    m.check_invariants();
    assert_eq!(intervals(&m), intervals(&fresh));
    assert_eq!(m.node_count(), fresh.node_count());
    assert_eq!(
        m.node_stats().live_objects,
        fresh.node_stats().live_objects,
        "folded leaves freed"
    );
    // The folded slots work on: split one again, then unmap everything.
    m.map(5 * 512 * P + 3 * P..5 * 512 * P + 4 * P, None)
        .unwrap();
    m.check_invariants();
    assert_eq!(intervals(&m).len(), 2);
    m.map(0..KEY_SPACE_END, None).unwrap();
    m.collect();
    assert_eq!(m.node_count(), 1);
    m.check_invariants();
}

/// A lock held over a whole node and swapped with one interval folds it too; lockers waiting
/// on the folded node's slots go back to the root and find the parent's slot.
#[test]
fn lockers_waiting_on_a_folded_node_find_the_parent_slot() {
    let m = RadixMap::with_eager_reclaim(Domain::new());
    m.map(3 * P..4 * P, Some(1u64)).unwrap();
    m.map(100 * P..101 * P, Some(1)).unwrap();
    let before = m.node_count();
    std::thread::scope(|s| {
        let l = m.lock(0..512 * P).unwrap();
        let waiter = s.spawn(|| {
            for i in 0..200u64 {
                m.map((i % 512) * P..(i % 512 + 1) * P, Some(10 + i))
                    .unwrap();
            }
        });
        m.swap(l, vec![(Interval::new(0, 512 * P).unwrap(), 2)])
            .unwrap();
        waiter.join().unwrap();
    });
    m.check_invariants();
    assert!(m.node_count() <= before + 1);
    let r = m.domain().register();
    let g = r.read();
    for i in 0..200u64 {
        let (iv, v) = m.query((i % 512) * P, &g).unwrap();
        // The waiter's maps all come after the swap (it waited for the lock).
        assert_eq!(
            (iv.start, iv.end, *v),
            ((i % 512) * P, (i % 512 + 1) * P, 10 + i)
        );
    }
}
