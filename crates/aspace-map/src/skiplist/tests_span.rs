//! Tests of a held range's stable span and intervals (`SkipLocked::stable_span`,
//! `SkipLocked::intervals`): the span's bounds, that the held intervals are listed exactly, and
//! that maps and allocs into the span's gaps wait until the lock is released while operations
//! outside it go through.

use super::{ArenaLayout, SkipListMap, SkipLocked};
use crate::contract::{Interval, IntervalLocking, IntervalMap, KEY_SPACE_END, PAGE_SIZE as P};
use aspace_rcu::Domain;
use std::ops::ControlFlow;
use std::sync::atomic::{AtomicBool, Ordering};

fn iv(s: u64, e: u64) -> Interval {
    Interval::new(s * P, e * P).unwrap()
}

fn held(l: &SkipLocked<'_, u64>) -> Vec<(Interval, u64)> {
    l.intervals().map(|(iv, v)| (iv, *v)).collect()
}

/// What `visit` sees overlapping `range` (what `intervals()` must list).
fn visible(m: &SkipListMap<u64>, range: Interval) -> Vec<(Interval, u64)> {
    let r = m.domain().register();
    let g = r.read();
    let mut out = Vec::new();
    m.visit(range.start..range.end, &g, &mut |iv, v| {
        out.push((iv, *v));
        ControlFlow::Continue(())
    })
    .unwrap();
    out
}

#[test]
fn stable_span_runs_from_the_predecessor_end_to_the_successor_start() {
    let m = SkipListMap::new(Domain::new());
    for (s, e, v) in [(2, 3, 1), (4, 6, 2), (8, 9, 3), (12, 13, 4)] {
        m.map(s * P..e * P, Some(v)).unwrap();
    }
    // Predecessor [2, 3), held [4, 6) (partly in the range) and [8, 9), successor [12, 13).
    let l = m.lock(5 * P..9 * P).unwrap();
    assert_eq!(l.stable_span(), 3 * P..12 * P);
    assert_eq!(held(&l), vec![(iv(4, 6), 2), (iv(8, 9), 3)]);
    assert_eq!(held(&l), visible(&m, l.range()));
    drop(l);
    // The head as predecessor, nothing held, successor [2, 3).
    let l = m.lock(0..P).unwrap();
    assert_eq!(l.stable_span(), 0..2 * P);
    assert!(held(&l).is_empty());
    drop(l);
    // A range in a gap: the span is the whole gap.
    let l = m.lock(10 * P..11 * P).unwrap();
    assert_eq!(l.stable_span(), 9 * P..12 * P);
    drop(l);
    // No successor.
    let l = m.lock(20 * P..21 * P).unwrap();
    assert_eq!(l.stable_span(), 13 * P..KEY_SPACE_END);
    // The span does not change while the lock is held, and the lock can still be swapped.
    assert_eq!(l.stable_span(), 13 * P..KEY_SPACE_END);
    m.swap(l, vec![(iv(20, 21), 5)]).unwrap();
    m.check_invariants();
}

#[test]
fn separators_bound_the_span_and_are_not_listed() {
    // Separators at pages 8, 16 and 24.
    let layout = ArenaLayout {
        count: 2,
        size: 8 * P,
        base: 8 * P,
    };
    let m = SkipListMap::with_arenas(Domain::new(), layout);
    m.map(10 * P..11 * P, Some(1)).unwrap();
    // Predecessor [10, 11), held the separator at 16, successor the separator at 24.
    let l = m.lock(15 * P..17 * P).unwrap();
    assert_eq!(l.stable_span(), 11 * P..24 * P);
    assert!(held(&l).is_empty(), "separators are not intervals");
    drop(l);
    // Predecessor the separator at 8 (its end is 8), held [10, 11) and the separator at 16.
    let l = m.lock(10 * P..17 * P).unwrap();
    assert_eq!(l.stable_span(), 8 * P..24 * P);
    assert_eq!(held(&l), vec![(iv(10, 11), 1)]);
    drop(l);
    // An interval across a boundary (its separator dropped) is listed whole.
    m.map(14 * P..18 * P, Some(2)).unwrap();
    let l = m.lock(17 * P..18 * P).unwrap();
    assert_eq!(l.stable_span(), 11 * P..24 * P);
    assert_eq!(held(&l), vec![(iv(14, 18), 2)]);
    drop(l);
    m.check_invariants();
}

/// Holds `range` of `m`, runs `op` in another thread, and checks that `op` returns only after
/// the lock is dropped: the main thread sets `released` just before dropping it, and the other
/// thread reads it right after `op` returns (the unlock's Release and the waiting operation's
/// Acquire lock order the two). While holding, the main thread runs `outside`, which must not
/// wait. Yields for a while before releasing, so that a broken lock lets `op` finish first.
fn blocks_until_release<R: Send>(
    m: &SkipListMap<u64>,
    range: std::ops::Range<u64>,
    expect_span: std::ops::Range<u64>,
    op: impl FnOnce() -> R + Send,
    outside: impl FnOnce(),
) -> R {
    let started = AtomicBool::new(false);
    let released = AtomicBool::new(false);
    let l = m.lock(range).unwrap();
    assert_eq!(l.stable_span(), expect_span);
    std::thread::scope(|s| {
        let h = s.spawn(|| {
            // Relaxed: only a progress signal, no data.
            started.store(true, Ordering::Relaxed);
            let r = op();
            // Relaxed: ordered after the main thread's store by the lock (see the doc).
            let was = released.load(Ordering::Relaxed);
            (r, was)
        });
        while !started.load(Ordering::Relaxed) {
            std::thread::yield_now();
        }
        for _ in 0..200 {
            std::thread::yield_now();
        }
        outside();
        released.store(true, Ordering::Relaxed);
        drop(l);
        let (r, was) = h.join().unwrap();
        assert!(was, "the operation completed while the span was held");
        r
    })
}

#[test]
fn maps_and_allocs_into_the_stable_span_wait_for_the_release() {
    // Arena 0 is pages [16, 32), arena 1 [32, 48); separators at 16, 32 and 48.
    let layout = ArenaLayout {
        count: 2,
        size: 16 * P,
        base: 16 * P,
    };
    let m = SkipListMap::with_arenas(Domain::new(), layout);
    for (s, e, v) in [(18, 19, 1), (22, 23, 2), (28, 29, 3)] {
        m.map(s * P..e * P, Some(v)).unwrap();
    }
    let outside = || {
        // Another arena, and an alloc after [28, 29), which no case holds.
        m.map(40 * P..41 * P, Some(9)).unwrap();
        m.map(40 * P..41 * P, None).unwrap();
        assert_eq!(m.alloc(29 * P..32 * P, P, 8).unwrap(), iv(29, 30));
        m.map(29 * P..30 * P, None).unwrap();
    };
    // Held: the separator at 16 (predecessor) and [18, 19); span [16, 22). The first padded
    // fit of arena 0 is page 20 in the gap [19, 22), whose link is held.
    let got = blocks_until_release(
        &m,
        18 * P..19 * P,
        16 * P..22 * P,
        || m.alloc_in_arena_padded(0, P, P, 4).unwrap(),
        outside,
    );
    assert_eq!(got, iv(20, 21));
    // Held: [18, 19) and [20, 21); span [16, 22). A map of the gap [16, 18), in front of
    // the held range, waits for the predecessor.
    blocks_until_release(
        &m,
        18 * P..21 * P,
        16 * P..22 * P,
        || m.map(16 * P..18 * P, Some(5)).unwrap(),
        outside,
    );
    // Held: [18, 19) (predecessor) and [20, 21); span [19, 22). An alloc whose first fit is
    // page 19, right after the predecessor.
    let got = blocks_until_release(
        &m,
        20 * P..21 * P,
        19 * P..22 * P,
        || m.alloc(16 * P..32 * P, P, 6).unwrap(),
        outside,
    );
    assert_eq!(got, iv(19, 20));
    // Held: [22, 23) and its predecessor [20, 21); span [21, 28). A map of the gap after the
    // held interval (outside the held range, inside the span) waits too.
    blocks_until_release(
        &m,
        22 * P..23 * P,
        21 * P..28 * P,
        || m.map(25 * P..26 * P, Some(7)).unwrap(),
        outside,
    );
    let all = visible(&m, iv(0, 64));
    assert_eq!(
        all,
        vec![
            (iv(16, 18), 5),
            (iv(18, 19), 1),
            (iv(19, 20), 6),
            (iv(20, 21), 4),
            (iv(22, 23), 2),
            (iv(25, 26), 7),
            (iv(28, 29), 3),
        ]
    );
    m.check_invariants();
}
