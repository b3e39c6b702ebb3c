//! Allocation-failure injection (issue 10): every node allocation of a `map`, `alloc`,
//! `alloc_in_arena` or `swap` is made to fail in turn through the maps' testing hook
//! (`fail_allocations_after`), and each failure must be clean: the call returns
//! `MapError::OutOfMemory`, the map's contents and invariants are unchanged, no value leaks
//! (a live-value counter, after the map's grace periods), no lock is left held (the same call,
//! with the hook off, completes within a deadline) and that call then succeeds with the result
//! of an unfaulted run.
//!
//! Each case runs the operation on a fresh populated map with the hook armed for `k` successful
//! allocations, for `k = 0, 1, ...` until the call succeeds: so every allocation index of the
//! operation fails once. Cases with several node allocations assert that there were several.

#![cfg(not(loom))]

use aspace_map::{
    ArenaLayout, BTreeIntervalMap, BonsaiMap, Interval, IntervalLocking, IntervalMap, MapError,
    RadixMap, SkipListMap, PAGE_SIZE as P,
};
use aspace_rcu::Domain;
use std::ops::ControlFlow;
use std::sync::atomic::{AtomicIsize, Ordering};
use std::sync::{mpsc, Arc};
use std::time::Duration;

/// A value that counts its live copies.
struct Val {
    id: u64,
    live: Arc<AtomicIsize>,
}

impl Val {
    fn new(id: u64, live: &Arc<AtomicIsize>) -> Self {
        live.fetch_add(1, Ordering::Relaxed);
        Self {
            id,
            live: Arc::clone(live),
        }
    }
}

impl Clone for Val {
    fn clone(&self) -> Self {
        Self::new(self.id, &self.live)
    }
}

impl Drop for Val {
    fn drop(&mut self) {
        self.live.fetch_sub(1, Ordering::Relaxed);
    }
}

/// What the tests need of each map beyond the contract.
trait Faulty: IntervalMap<Val> + 'static {
    fn fail_after(&self, n: Option<usize>);
    fn check(&self);
    /// Waits until every removed value has been dropped.
    fn quiesce(&self);
}

impl Faulty for BTreeIntervalMap<Val> {
    fn fail_after(&self, n: Option<usize>) {
        self.fail_allocations_after(n);
    }
    fn check(&self) {
        self.check_invariants();
    }
    fn quiesce(&self) {}
}

impl Faulty for BonsaiMap<Val> {
    fn fail_after(&self, n: Option<usize>) {
        self.fail_allocations_after(n);
    }
    fn check(&self) {
        self.check_invariants();
    }
    fn quiesce(&self) {
        self.domain().barrier();
    }
}

impl Faulty for SkipListMap<Val> {
    fn fail_after(&self, n: Option<usize>) {
        self.fail_allocations_after(n);
    }
    fn check(&self) {
        self.check_invariants();
    }
    fn quiesce(&self) {
        self.barrier();
    }
}

impl Faulty for RadixMap<Val> {
    fn fail_after(&self, n: Option<usize>) {
        self.fail_allocations_after(n);
    }
    fn check(&self) {
        self.check_invariants();
    }
    fn quiesce(&self) {
        self.barrier();
    }
}

fn contents<M: Faulty>(m: &M) -> Vec<(u64, u64, u64)> {
    let r = m.domain().register();
    let g = r.read();
    let mut out = Vec::new();
    m.visit(0..aspace_map::KEY_SPACE_END, &g, &mut |iv, v| {
        out.push((iv.start / P, iv.end / P, v.id));
        ControlFlow::Continue(())
    })
    .unwrap();
    out
}

/// An operation under test: gets the map and the live counter (to make its values).
type Op<M> = fn(&M, &Arc<AtomicIsize>) -> Result<(), MapError>;

/// Fails every allocation index of `op` in turn (see the module doc); returns how many
/// allocation points the operation has.
fn fail_each_allocation<M: Faulty>(
    make: fn() -> M,
    setup: &[(u64, u64)],
    op: impl Fn(&M, &Arc<AtomicIsize>) -> Result<(), MapError> + Copy + Send + 'static,
) -> usize {
    let build = |live: &Arc<AtomicIsize>| {
        let m = Arc::new(make());
        for (i, &(s, e)) in setup.iter().enumerate() {
            m.map(s * P..e * P, Some(Val::new(1000 + i as u64, live)))
                .unwrap();
        }
        m
    };
    // The unfaulted result.
    let want = {
        let live = Arc::new(AtomicIsize::new(0));
        let m = build(&live);
        op(&m, &live).unwrap();
        contents(&*m)
    };
    for k in 0.. {
        let live = Arc::new(AtomicIsize::new(0));
        let m = build(&live);
        m.quiesce();
        let before = contents(&*m);
        let live_before = live.load(Ordering::Relaxed);
        m.fail_after(Some(k));
        let r = op(&m, &live);
        m.fail_after(None);
        match r {
            Ok(()) => {
                assert_eq!(contents(&*m), want, "{}: success with budget {k}", m.name());
                m.check();
                return k;
            }
            Err(MapError::OutOfMemory) => {}
            Err(e) => panic!("{}: allocation {k} failed with {e:?}", m.name()),
        }
        assert_eq!(
            contents(&*m),
            before,
            "{}: allocation {k} failed: contents changed",
            m.name()
        );
        m.check();
        m.quiesce();
        assert_eq!(
            live.load(Ordering::Relaxed),
            live_before,
            "{}: allocation {k} failed: values leaked or dropped",
            m.name()
        );
        // No lock is left held: the same call completes (within a generous deadline) and
        // succeeds with the unfaulted result.
        let (tx, rx) = mpsc::channel();
        let (m2, live2) = (Arc::clone(&m), Arc::clone(&live));
        std::thread::spawn(move || tx.send(op(&m2, &live2)).unwrap());
        let r = rx
            .recv_timeout(Duration::from_secs(30))
            .unwrap_or_else(|_| {
                panic!("allocation {k} failed: the retry waits (a lock left held)")
            });
        r.unwrap();
        assert_eq!(contents(&*m), want, "{}: retry after failure {k}", m.name());
        m.check();
        assert!(k < 10_000, "the operation never succeeds");
    }
    unreachable!()
}

/// Twenty intervals `[4i, 4i + 3)` (bonsai: a tree with rotations on the update paths).
fn populated() -> Vec<(u64, u64)> {
    (0..20).map(|i| (4 * i, 4 * i + 3)).collect()
}

/// A split of `[40, 43)`: head and tail remainders plus the new interval.
fn split<M: Faulty>(m: &M, live: &Arc<AtomicIsize>) -> Result<(), MapError> {
    m.map(41 * P..42 * P, Some(Val::new(1, live)))
}

/// A map over several intervals, trimming the first (`[8, 11)`) and last (`[20, 23)`).
fn overwrite_many<M: Faulty>(m: &M, live: &Arc<AtomicIsize>) -> Result<(), MapError> {
    m.map(9 * P..21 * P, Some(Val::new(2, live)))
}

/// An unmap over several intervals, trimming the first and last.
fn unmap_many<M: Faulty>(m: &M, _: &Arc<AtomicIsize>) -> Result<(), MapError> {
    m.map(9 * P..21 * P, None)
}

/// First fit of two pages (the gaps between the intervals hold one page).
fn alloc_two<M: Faulty>(m: &M, live: &Arc<AtomicIsize>) -> Result<(), MapError> {
    let iv = m.alloc(0..200 * P, 2 * P, Val::new(3, live))?;
    assert_eq!(iv, Interval::new(79 * P, 81 * P).unwrap());
    Ok(())
}

fn cases<M: Faulty>(make: fn() -> M, min_points: [usize; 4]) {
    let got = [
        fail_each_allocation(make, &populated(), split::<M>),
        fail_each_allocation(make, &populated(), overwrite_many::<M>),
        fail_each_allocation(make, &populated(), unmap_many::<M>),
        fail_each_allocation(make, &populated(), alloc_two::<M>),
    ];
    for (g, m) in got.iter().zip(min_points) {
        assert!(
            *g >= m,
            "allocation points {got:?}, expected at least {min_points:?}"
        );
    }
}

#[test]
fn btree_allocation_failures_change_nothing_leak_nothing_and_the_retry_succeeds() {
    // Split: the new interval and the tail; overwrite: new + trimmed tail; unmap: tail; alloc.
    cases(|| BTreeIntervalMap::new(Domain::new()), [2, 2, 1, 1]);
}

#[test]
fn bonsai_allocation_failures_change_nothing_leak_nothing_and_the_retry_succeeds() {
    // Multi-step updates copy their paths (atomic mode): several nodes each; the alloc's leaf
    // is stored in place into its parent.
    cases(|| BonsaiMap::new(Domain::new()), [3, 3, 3, 1]);
}

#[test]
fn skiplist_allocation_failures_change_nothing_leak_nothing_and_the_retry_succeeds() {
    // Split: head, new, tail; overwrite: head, new, tail; unmap: head, tail; alloc: its node.
    cases(|| SkipListMap::new(Domain::new()), [3, 3, 2, 1]);
}

/// Issue 17's shapes: `map(s..e, Some(v))` over one whole interval `X = [4i, 4i + 3)` of
/// `populated()` and free pages beside it (a free head, a free tail, both), for every `i`, so
/// that `X` is a leaf in some cases and an inner node (whose removal moves its successor, a
/// node allocation) in others. Bonsai published these as two commits (insert the new interval,
/// then delete `X`): an allocation failure in the second aborted the process. Returns the
/// largest number of allocation points of one case.
fn free_ends_around_one_interval<M: Faulty>(make: fn() -> M) -> usize {
    let mut most = 0;
    for i in 0..20u64 {
        let (s, e) = (4 * i, 4 * i + 3);
        let mut ranges = vec![(s, e + 1)];
        if s > 0 {
            // Every interval but `[0, 3)` has a free page before it.
            ranges.extend([(s - 1, e), (s - 1, e + 1)]);
        }
        for (a, b) in ranges {
            let op =
                move |m: &M, live: &Arc<AtomicIsize>| m.map(a * P..b * P, Some(Val::new(8, live)));
            most = most.max(fail_each_allocation(make, &populated(), op));
        }
    }
    most
}

#[test]
fn btree_allocation_failures_in_a_map_over_free_pages_and_one_whole_interval_change_nothing() {
    // The new interval's node (the btree reuses none of X's).
    assert!(free_ends_around_one_interval(|| BTreeIntervalMap::new(Domain::new())) >= 1);
}

#[test]
fn bonsai_allocation_failures_in_a_map_over_free_pages_and_one_whole_interval_change_nothing() {
    // Where X is an inner node its successor is copied, and paths are copied: several nodes.
    assert!(free_ends_around_one_interval(|| BonsaiMap::new(Domain::new())) >= 3);
}

#[test]
fn skiplist_allocation_failures_in_a_map_over_free_pages_and_one_whole_interval_change_nothing() {
    assert!(free_ends_around_one_interval(|| SkipListMap::new(Domain::new())) >= 1);
}

#[test]
fn radix_allocation_failures_change_nothing_leak_nothing_and_the_retry_succeeds() {
    // Split: head, new and tail records, the leaf's expansion... (nodes, records and the
    // descriptor are all fallible allocations); overwrite: head, new, tail, descriptor; unmap:
    // head, tail, descriptor; alloc: its record and descriptor.
    cases(|| RadixMap::new(Domain::new()), [4, 4, 3, 2]);
}

#[test]
fn radix_allocation_failures_in_a_map_over_free_pages_and_one_whole_interval_change_nothing() {
    // The new record and the descriptor.
    assert!(free_ends_around_one_interval(|| RadixMap::new(Domain::new())) >= 2);
}

#[test]
fn radix_lock_and_swap_allocation_failures_are_clean() {
    // A swap of a held range by two intervals, trimming the one it overlaps, and an alloc
    // that must expand a folded slot (a node) before its record and descriptor.
    let swap: Op<RadixMap<Val>> = |m, live| {
        let l = m.lock(41 * P..43 * P)?;
        let new = vec![(Interval::new(41 * P, 42 * P).unwrap(), Val::new(6, live))];
        m.swap(l, new)
    };
    assert!(fail_each_allocation(|| RadixMap::new(Domain::new()), &populated(), swap) >= 3);
    let expand: Op<RadixMap<Val>> = |m, live| {
        let iv = m.alloc((1 << 30)..(2 << 30), 3 * P, Val::new(9, live))?;
        assert_eq!(iv, Interval::new(1 << 30, (1 << 30) + 3 * P).unwrap());
        Ok(())
    };
    assert!(fail_each_allocation(|| RadixMap::new(Domain::new()), &populated(), expand) >= 3);
}

const LAYOUT: ArenaLayout = ArenaLayout {
    count: 2,
    size: 8 * P,
    base: 64 * P,
};

fn arenas() -> SkipListMap<Val> {
    SkipListMap::with_arenas(Domain::new(), LAYOUT)
}

#[test]
fn skiplist_arena_and_straddle_allocation_failures_are_clean() {
    // Arena 0 = pages [64, 72), arena 1 = [72, 80). Pages 64..70 taken: the first fit of 4
    // pages in [64, 80) straddles the separator at 72 (lock + swap path).
    let setup = [(64, 70)];
    let straddle: Op<SkipListMap<Val>> = |m, live| {
        let iv = m.alloc(64 * P..80 * P, 4 * P, Val::new(4, live))?;
        assert_eq!(iv, Interval::new(70 * P, 74 * P).unwrap());
        Ok(())
    };
    // The node of the alloc, then the swap's new node.
    assert!(fail_each_allocation(arenas, &setup, straddle) >= 2);
    // A map across the boundary, then its unmap: the unmap re-creates the separator (a node).
    let across = [(64, 70), (71, 74)];
    let unmap: Op<SkipListMap<Val>> = |m, _| m.map(71 * P..74 * P, None);
    assert!(fail_each_allocation(arenas, &across, unmap) >= 1);
    // alloc_in_arena: an allocation failure is returned, not a fallback to the shared region.
    let in_arena: Op<SkipListMap<Val>> = |m, live| {
        let iv = m.alloc_in_arena(0, P, Val::new(5, live))?;
        assert_eq!(iv, Interval::new(70 * P, 71 * P).unwrap());
        Ok(())
    };
    assert!(fail_each_allocation(arenas, &setup, in_arena) >= 1);
    // swap of a held range by two intervals (trimming the one it overlaps).
    let swap: Op<SkipListMap<Val>> = |m, live| {
        let l = m.lock(66 * P..69 * P)?;
        let new = vec![
            (Interval::new(66 * P, 67 * P).unwrap(), Val::new(6, live)),
            (Interval::new(68 * P, 69 * P).unwrap(), Val::new(7, live)),
        ];
        m.swap(l, new)
    };
    assert!(fail_each_allocation(arenas, &setup, swap) >= 4);
}
