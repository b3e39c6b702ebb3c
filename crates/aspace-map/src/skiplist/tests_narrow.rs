//! Tests of `SkipListMap::lock_covering` and `SkipLocked::narrow`: the covering lock's range
//! is the whole overlapped intervals; a narrowed lock releases the nodes outside the swap
//! (other operations on them go through while it is held) and its swap replaces only what is
//! inside, leaving the released nodes (and their values) as they were.

use super::SkipListMap;
use crate::contract::{
    Interval, IntervalLocking, IntervalMap, MapError, KEY_SPACE_END, PAGE_SIZE as P,
};
use aspace_rcu::Domain;
use std::ops::ControlFlow;

fn iv(s: u64, e: u64) -> Interval {
    Interval::new(s * P, e * P).unwrap()
}

fn all(m: &SkipListMap<u64>) -> Vec<(Interval, u64)> {
    let r = m.domain().register();
    let g = r.read();
    let mut out = Vec::new();
    m.visit(0..KEY_SPACE_END, &g, &mut |iv, v| {
        out.push((iv, *v));
        ControlFlow::Continue(())
    })
    .unwrap();
    out
}

#[test]
fn lock_covering_widens_to_whole_intervals_and_swaps_clone_nothing() {
    let m = SkipListMap::new(Domain::new());
    for (s, e, v) in [(2, 4, 1), (5, 8, 2), (10, 12, 3)] {
        m.map(s * P..e * P, Some(v)).unwrap();
    }
    let l = m.lock_covering(3 * P..6 * P).unwrap();
    assert_eq!(l.range(), iv(2, 8), "widened to [2, 4) and [5, 8)");
    m.swap(l, vec![(iv(2, 8), 9)]).unwrap();
    assert_eq!(all(&m), vec![(iv(2, 8), 9), (iv(10, 12), 3)]);
    m.check_invariants();
}

#[test]
fn narrow_releases_the_nodes_outside_and_swaps_only_inside() {
    let m = SkipListMap::new(Domain::new());
    for (s, e, v) in [(2, 4, 1), (5, 8, 2), (10, 12, 3), (14, 15, 4)] {
        m.map(s * P..e * P, Some(v)).unwrap();
    }
    let mut l = m.lock_covering(P..13 * P).unwrap();
    assert_eq!(l.range(), iv(1, 13));
    assert_eq!(l.intervals().count(), 3);
    // Out of the held range: refused, nothing released.
    assert!(matches!(
        l.narrow(0..4 * P),
        Err(MapError::OutOfRange { .. })
    ));
    // The swap will change [6, 7) only: keeps [5, 8) (widened) and its predecessor [2, 4).
    l.narrow(6 * P..7 * P).unwrap();
    assert_eq!(l.range(), iv(5, 8));
    assert_eq!(l.stable_span(), 4 * P..10 * P);
    assert_eq!(
        l.intervals().map(|(i, v)| (i, *v)).collect::<Vec<_>>(),
        vec![(iv(5, 8), 2)]
    );
    // Released nodes (and the gaps after them) are free for others while `l` is held: this
    // map locks [10, 12) as its predecessor, and would wait for ever if it were still held.
    m.map(13 * P..15 * P, Some(7)).unwrap();
    m.swap(l, vec![(iv(5, 6), 2), (iv(7, 8), 2)]).unwrap();
    assert_eq!(
        all(&m),
        vec![
            (iv(2, 4), 1),
            (iv(5, 6), 2),
            (iv(7, 8), 2),
            (iv(10, 12), 3),
            (iv(13, 15), 7)
        ]
    );
    m.check_invariants();
}

/// Review of issue 21 (one traversal per edit): after `narrow`, the swap's fused path used the
/// lock's recorded level-`i` successors as `link_upper`'s guess at the levels where no old node
/// reaches. At lock time that successor may be a node inside the originally held range that
/// `narrow` released, i.e. a node *before* the new chain: the guess CAS
/// `preds[i]: released -> new chain -> released` succeeds (the predecessor still links to it)
/// and level `i` goes out of order (the released node behind the new one). Heights are random,
/// so this repeats the shape until a taller new node meets a tall released node.
#[test]
fn narrowed_swap_keeps_upper_levels_ordered() {
    for _ in 0..300 {
        let m = SkipListMap::new(Domain::new());
        for k in 0..20u64 {
            m.map(2 * k * P..(2 * k + 1) * P, Some(k)).unwrap();
        }
        let mut l = m.lock_covering(P..40 * P).unwrap();
        l.narrow(36 * P..37 * P).unwrap();
        m.swap(l, vec![(iv(36, 37), 99)]).unwrap();
        m.check_invariants();
    }
}
