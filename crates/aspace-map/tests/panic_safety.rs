//! Panic safety of every `IntervalMap` implementation: the caller's code that runs inside an
//! operation (a value's `Clone` and `Drop`, the closure passed to `visit`) panics, and
//! afterwards
//! - nothing was freed early: values a reader holds under its guard are intact (their canary
//!   is checked), and every value the map still reaches is intact;
//! - no lock is held: a later operation on the same range completes (watched by a bounded
//!   wait, so a leaked lock fails the test instead of hanging it);
//! - the structure passes its invariant check, `len` matches what `visit` reports, and a
//!   panic before the commit left the map exactly as it was;
//! - nothing leaked and nothing was dropped twice: once the map is gone, every value ever made
//!   was dropped exactly once (a live counter, and a canary that a second drop would trip).
//!
//! Regressions: `map([0, 3), v)` over `[0, 1)` and `[2, 4)` whose remainder clone panics freed
//! `[0, 1)`'s node under a reader's guard (bonsai), and left the skiplist's nodes LOCKED.
#![cfg(not(loom))]

use aspace_map::{
    BTreeIntervalMap, BonsaiMap, Interval, IntervalLocking, IntervalMap, RadixMap, SkipListMap,
    KEY_SPACE_END, PAGE_SIZE as P,
};
use aspace_rcu::Domain;
use std::ops::{ControlFlow, Range};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering::Relaxed};
use std::sync::{mpsc, Arc};
use std::time::Duration;

const ALIVE: u64 = 0x5AFE_5AFE_5AFE_5AFE;
const DEAD: u64 = 0xDEAD_DEAD_DEAD_DEAD;

/// What the values of one test share: countdowns that arm a panic, and the live count.
#[derive(Default)]
struct Ctl {
    /// `n > 0`: the `n`-th clone from now panics.
    clone_panic_in: AtomicI64,
    /// `n > 0`: the `n`-th drop from now panics (after counting itself dead).
    drop_panic_in: AtomicI64,
    /// Values made (including clones) minus values dropped.
    live: AtomicI64,
}

impl Ctl {
    fn countdown(c: &AtomicI64) -> bool {
        c.load(Relaxed) > 0 && c.fetch_sub(1, Relaxed) == 1
    }
}

/// A value whose drop poisons it; `Clone` and `Drop` panic on demand.
struct Val {
    id: u64,
    canary: AtomicU64,
    ctl: Arc<Ctl>,
}

impl Val {
    fn new(id: u64, ctl: &Arc<Ctl>) -> Self {
        ctl.live.fetch_add(1, Relaxed);
        Self {
            id,
            canary: AtomicU64::new(ALIVE),
            ctl: ctl.clone(),
        }
    }

    fn assert_alive(&self) {
        assert_eq!(
            self.canary.load(Relaxed),
            ALIVE,
            "value {} was dropped while reachable (freed early)",
            self.id
        );
    }
}

impl Clone for Val {
    fn clone(&self) -> Self {
        self.assert_alive();
        if Ctl::countdown(&self.ctl.clone_panic_in) {
            panic!("Val::clone panics (expected by the test)");
        }
        Val::new(self.id, &self.ctl)
    }
}

impl Drop for Val {
    fn drop(&mut self) {
        let was = self.canary.swap(DEAD, Relaxed);
        assert_eq!(was, ALIVE, "value {} dropped twice", self.id);
        self.ctl.live.fetch_sub(1, Relaxed);
        if Ctl::countdown(&self.ctl.drop_panic_in) && !std::thread::panicking() {
            panic!("Val::drop panics (expected by the test)");
        }
    }
}

/// One implementation under test.
trait Harness: IntervalMap<Val> + Sized + 'static {
    /// Whether `query` results are plain guard-bound references (RCU maps), which a test may
    /// hold across an update; the btree's are read-lock guards (holding one across an update
    /// of the same map deadlocks, a documented hazard).
    const RCU: bool;
    fn make() -> Self;
    fn check(&self);
    /// Drops every value removed so far (after the grace periods that protect them).
    fn quiesce(&self);
}

impl Harness for BTreeIntervalMap<Val> {
    const RCU: bool = false;
    fn make() -> Self {
        Self::new(Domain::new())
    }
    fn check(&self) {
        self.check_invariants();
    }
    fn quiesce(&self) {}
}

impl Harness for BonsaiMap<Val> {
    const RCU: bool = true;
    fn make() -> Self {
        Self::new(Domain::new())
    }
    fn check(&self) {
        self.check_invariants();
    }
    fn quiesce(&self) {
        self.domain().barrier();
    }
}

impl Harness for SkipListMap<Val> {
    const RCU: bool = true;
    fn make() -> Self {
        Self::new(Domain::new())
    }
    fn check(&self) {
        self.check_invariants();
    }
    fn quiesce(&self) {
        self.barrier();
    }
}

impl Harness for RadixMap<Val> {
    const RCU: bool = true;
    fn make() -> Self {
        Self::new(Domain::new())
    }
    fn check(&self) {
        self.check_invariants();
    }
    fn quiesce(&self) {
        self.barrier();
    }
}

/// `(start page, end page, id)` of every interval, each value checked intact, and `len`
/// checked against it.
fn contents<M: Harness>(m: &M) -> Vec<(u64, u64, u64)> {
    let reader = m.domain().register();
    let g = reader.read();
    let mut out = Vec::new();
    m.visit(0..KEY_SPACE_END, &g, &mut |iv, v| {
        v.assert_alive();
        out.push((iv.start / P, iv.end / P, v.id));
        ControlFlow::Continue(())
    })
    .unwrap();
    assert_eq!(out.len(), m.len(), "len");
    out
}

/// Runs `op` on another thread and fails if it does not finish within a generous bound (a
/// leaked node lock makes it spin for ever).
fn completes<M: Harness>(m: &Arc<M>, what: &str, op: impl FnOnce(&M) + Send + 'static) {
    let (tx, rx) = mpsc::channel();
    let m2 = Arc::clone(m);
    let t = std::thread::spawn(move || {
        op(&m2);
        tx.send(()).unwrap();
    });
    match rx.recv_timeout(Duration::from_secs(20)) {
        Ok(()) => t.join().unwrap(),
        Err(_) => panic!("{what} did not complete: a lock was left held"),
    }
}

/// The initial map: `[0, 1)`, `[2, 4)`, `[5, 9)` and `[10, 11)` (ids 1-4) plus a dozen
/// intervals above, so that updates below rebuild paths and rotate.
const INITIAL: [(u64, u64); 4] = [(0, 1), (2, 4), (5, 9), (10, 11)];

fn populate<M: Harness>(m: &M, ctl: &Arc<Ctl>) -> Vec<(u64, u64, u64)> {
    for (i, &(s, e)) in INITIAL.iter().enumerate() {
        m.map(s * P..e * P, Some(Val::new(i as u64 + 1, ctl)))
            .unwrap();
    }
    for k in 0..12u64 {
        m.map(
            (20 + 2 * k) * P..(21 + 2 * k) * P,
            Some(Val::new(10 + k, ctl)),
        )
        .unwrap();
    }
    contents(m)
}

/// Every shape of `map` that clones a remainder or rotates: (range in pages, new id or unmap).
const SHAPES: [(Range<u64>, Option<u64>); 7] = [
    (0..3, Some(100)),  // the regression: replaces [0, 1), trims [2, 4) to [3, 4)
    (6..7, Some(101)),  // split of [5, 9)
    (6..7, None),       // unmap hole in [5, 9)
    (1..6, Some(102)),  // overwrite [2, 4), trim the head of [5, 9)
    (3..10, None),      // trim [2, 4), remove [5, 9)
    (0..40, Some(103)), // overwrite many, tail of one above
    (7..30, None),      // unmap many
];

/// Issue 17's shapes: a `map` over one whole interval `X` and free pages beside it (a free
/// head, a free tail, both), with `X` each of the intervals that `populate` makes, so that the
/// removal of `X` clones a successor or rotates somewhere in the tree. Bonsai published these
/// as two commits (insert the new interval, then delete `X`): a clone panic in the second
/// aborted the process.
fn free_ends_around_one_interval() -> Vec<(Range<u64>, Option<u64>)> {
    let xs = INITIAL
        .iter()
        .copied()
        .chain((0..12u64).map(|k| (20 + 2 * k, 21 + 2 * k)));
    let mut out = Vec::new();
    for (s, e) in xs {
        // Every interval has a free page after it; all but `[0, 1)` one before it.
        if s > 0 {
            out.push((s - 1..e, Some(104)));
            out.push((s - 1..e + 1, Some(105)));
        }
        out.push((s..e + 1, Some(106)));
    }
    out
}

/// For each shape, a `Clone` panic at the 1st, 2nd, ... clone of the update (until the update
/// needs fewer clones): under a reader's guard nothing is freed, the map is left as it was, no
/// lock is held, and the map works on.
fn clone_panics_leave_the_map_as_it_was<M: Harness>() {
    clone_panics_in_shapes_leave_the_map_as_it_was::<M>(&SHAPES);
}

/// [`clone_panics_leave_the_map_as_it_was`] for `shapes`.
fn clone_panics_in_shapes_leave_the_map_as_it_was<M: Harness>(
    shapes: &[(Range<u64>, Option<u64>)],
) {
    for (range, id) in shapes.iter().cloned() {
        for k in 1.. {
            let ctl = Arc::new(Ctl::default());
            let m = Arc::new(M::make());
            let before = populate(&*m, &ctl);
            let panicked = {
                let reader = m.domain().register();
                let g = reader.read();
                let held: Vec<_> = if M::RCU {
                    INITIAL
                        .iter()
                        .map(|&(s, _)| m.query(s * P, &g).expect("mapped").1)
                        .collect()
                } else {
                    Vec::new()
                };
                let value = id.map(|id| Val::new(id, &ctl));
                ctl.clone_panic_in.store(k, Relaxed);
                let r = catch_unwind(AssertUnwindSafe(|| {
                    m.map(range.start * P..range.end * P, value)
                }));
                ctl.clone_panic_in.store(0, Relaxed);
                for v in &held {
                    v.assert_alive();
                }
                match r {
                    Ok(r) => {
                        r.unwrap();
                        false
                    }
                    Err(_) => true,
                }
            };
            m.quiesce();
            m.check();
            let after = contents(&*m);
            if panicked {
                assert_eq!(
                    after,
                    before,
                    "{}: map({range:?}) panicking at clone {k} changed the map",
                    m.name()
                );
            }
            let (c2, r2) = (ctl.clone(), range.clone());
            completes(&m, "a map of the same range", move |m| {
                m.map(r2.start * P..r2.end * P, Some(Val::new(7, &c2)))
                    .unwrap();
                m.map(0..64 * P, None).unwrap();
            });
            m.quiesce();
            m.check();
            assert!(contents(&*m).is_empty());
            drop(m);
            assert_eq!(
                ctl.live.load(Relaxed),
                0,
                "every value dropped exactly once"
            );
            if !panicked {
                break;
            }
        }
    }
}

/// One operation of a sequence.
type Op<'a, M> = Box<dyn Fn(&M) + 'a>;

/// A `Drop` panic at the 1st, 2nd, ... drop of a sequence of overwrites, unmaps and a failing
/// alloc (whose value is dropped): the map stays consistent, holds no lock, and in the end
/// every value is dropped exactly once.
fn drop_panics_leave_the_map_consistent<M: Harness>() {
    for k in 1..=12 {
        let ctl = Arc::new(Ctl::default());
        let m = Arc::new(M::make());
        populate(&*m, &ctl);
        ctl.drop_panic_in.store(k, Relaxed);
        let ops: Vec<Op<'_, M>> = vec![
            Box::new(|m| m.map(0..3 * P, Some(Val::new(200, &ctl))).unwrap()),
            Box::new(|m| m.map(6 * P..7 * P, None).unwrap()),
            Box::new(|m| {
                let full = m.alloc(0..P, P, Val::new(201, &ctl));
                assert!(full.is_err());
            }),
            Box::new(|m| m.map(0..40 * P, None).unwrap()),
            Box::new(|m| {
                m.alloc(0..64 * P, 2 * P, Val::new(202, &ctl)).unwrap();
            }),
            Box::new(|m| m.map(0..64 * P, Some(Val::new(203, &ctl))).unwrap()),
        ];
        for op in &ops {
            let _ = catch_unwind(AssertUnwindSafe(|| {
                op(&m);
                // Values removed by this op may be dropped by the next operation or here.
                m.quiesce();
            }));
            m.check();
            contents(&*m);
        }
        ctl.drop_panic_in.store(0, Relaxed);
        completes(&m, "an unmap of everything", |m| {
            m.map(0..64 * P, None).unwrap()
        });
        m.quiesce();
        m.check();
        assert!(contents(&*m).is_empty());
        drop(m);
        assert_eq!(
            ctl.live.load(Relaxed),
            0,
            "every value dropped exactly once"
        );
    }
}

/// A panic in the closure passed to `visit` leaves nothing held.
fn visit_closure_panics_hold_nothing<M: Harness>() {
    let ctl = Arc::new(Ctl::default());
    let m = Arc::new(M::make());
    populate(&*m, &ctl);
    {
        let reader = m.domain().register();
        let g = reader.read();
        let r = catch_unwind(AssertUnwindSafe(|| {
            m.visit(0..KEY_SPACE_END, &g, &mut |iv: Interval, _v: &Val| {
                if iv.start >= 5 * P {
                    panic!("visit closure panics (expected by the test)");
                }
                ControlFlow::Continue(())
            })
        }));
        assert!(r.is_err());
    }
    completes(&m, "a map after a panicking visit", |m| {
        m.map(0..64 * P, None).unwrap()
    });
    m.quiesce();
    m.check();
    drop(m);
    assert_eq!(ctl.live.load(Relaxed), 0);
}

macro_rules! panic_safety {
    ($m:ident, $ty:ty) => {
        mod $m {
            use super::*;

            #[test]
            fn clone_panics_leave_the_map_as_it_was_and_free_nothing_early() {
                clone_panics_leave_the_map_as_it_was::<$ty>();
            }

            #[test]
            fn clone_panics_in_a_map_over_free_pages_and_one_whole_interval_change_nothing() {
                clone_panics_in_shapes_leave_the_map_as_it_was::<$ty>(
                    &free_ends_around_one_interval(),
                );
            }

            #[test]
            fn drop_panics_leave_the_map_consistent_and_leak_nothing() {
                drop_panics_leave_the_map_consistent::<$ty>();
            }

            #[test]
            fn visit_closure_panics_hold_nothing() {
                super::visit_closure_panics_hold_nothing::<$ty>();
            }
        }
    };
}

panic_safety!(btree, BTreeIntervalMap<Val>);
panic_safety!(bonsai, BonsaiMap<Val>);
panic_safety!(skiplist, SkipListMap<Val>);
panic_safety!(radix, RadixMap<Val>);

/// Skiplist interval locking: a `swap` whose remainder clone panics releases the held range.
#[test]
fn skiplist_swap_with_a_panicking_clone_releases_the_range() {
    let ctl = Arc::new(Ctl::default());
    let m = Arc::new(SkipListMap::<Val>::make());
    let before = populate(&*m, &ctl);
    let locked = m.lock(3 * P..6 * P).unwrap();
    ctl.clone_panic_in.store(1, Relaxed);
    let new = vec![(Interval::new(3 * P, 4 * P).unwrap(), Val::new(300, &ctl))];
    let r = catch_unwind(AssertUnwindSafe(|| m.swap(locked, new)));
    ctl.clone_panic_in.store(0, Relaxed);
    assert!(r.is_err(), "the head remainder [2, 3) is cloned");
    m.check();
    assert_eq!(contents(&*m), before);
    completes(&m, "a lock of the same range", |m| {
        let l = m.lock(0..10 * P).unwrap();
        m.swap(l, Vec::new()).unwrap();
    });
    m.quiesce();
    m.check();
    drop(m);
    assert_eq!(ctl.live.load(Relaxed), 0);
}

/// A `map` whose remainder clone panics leaves no node locked: an alloc that must walk past
/// the range, and a map of it, complete.
#[test]
fn skiplist_map_with_a_panicking_clone_leaves_no_node_locked() {
    let ctl = Arc::new(Ctl::default());
    let m = Arc::new(SkipListMap::<Val>::make());
    populate(&*m, &ctl);
    ctl.clone_panic_in.store(1, Relaxed);
    let v = Val::new(400, &ctl);
    let r = catch_unwind(AssertUnwindSafe(|| m.map(0..3 * P, Some(v))));
    ctl.clone_panic_in.store(0, Relaxed);
    assert!(r.is_err(), "the tail remainder [3, 4) is cloned");
    let c2 = ctl.clone();
    completes(&m, "an alloc past the range and a map of it", move |m| {
        let iv = m.alloc(0..64 * P, 4 * P, Val::new(401, &c2)).unwrap();
        assert_eq!(iv.start, 11 * P, "first fit above [10, 11)");
        m.map(0..3 * P, Some(Val::new(402, &c2))).unwrap();
    });
    m.quiesce();
    m.check();
    drop(m);
    assert_eq!(ctl.live.load(Relaxed), 0);
}

/// Radix interval locking: a `swap` whose remainder clone panics releases the held range, and
/// nothing changed.
#[test]
fn radix_swap_with_a_panicking_clone_releases_the_range() {
    let ctl = Arc::new(Ctl::default());
    let m = Arc::new(RadixMap::<Val>::make());
    let before = populate(&*m, &ctl);
    let locked = m.lock(3 * P..6 * P).unwrap();
    assert_eq!(
        locked.held(),
        Interval::new(2 * P, 9 * P).unwrap(),
        "the dynamic interval"
    );
    ctl.clone_panic_in.store(1, Relaxed);
    let new = vec![(Interval::new(3 * P, 4 * P).unwrap(), Val::new(300, &ctl))];
    let r = catch_unwind(AssertUnwindSafe(|| m.swap(locked, new)));
    ctl.clone_panic_in.store(0, Relaxed);
    assert!(r.is_err(), "the head remainder [2, 3) is cloned");
    m.check();
    assert_eq!(contents(&*m), before);
    completes(&m, "a lock of the same range", |m| {
        let l = m.lock(0..10 * P).unwrap();
        m.swap(l, Vec::new()).unwrap();
    });
    m.quiesce();
    m.check();
    drop(m);
    assert_eq!(ctl.live.load(Relaxed), 0);
}
