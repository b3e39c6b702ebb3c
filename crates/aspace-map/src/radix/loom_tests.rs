//! Loom models of the radix tree's slot lock protocol (`--cfg loom`), on the raw tree.
//!
//! Under loom the tree is three levels of four slots (`geom.rs`: 64 pages; a root slot covers
//! 16 pages, a level-1 slot 4, a leaf slot 1), so that an expansion is a node of four loom
//! atomics. Models:
//! - `overlapping_range_locks_exclude_each_other`: two range operations on overlapping ranges
//!   (`[1, 3)` and `[2, 5)` pages) of an empty tree: both start at the same folded root slot, and
//!   whichever holds it first expands it (twice) while the other waits on it, then descends into
//!   the new nodes. The critical sections (a loom-tracked cell written under the locks) never
//!   overlap, and every interleaving terminates. Caught mutations: `NoPropagate` (the new node's
//!   slots are published unlocked: the waiter descends and takes a slot the expander thinks it
//!   holds), `IgnoreLock` (the lock CAS does not wait).
//! - `overlapping_range_locks_on_leaves_never_deadlock`: the same on expanded leaves
//!   (`[1, 4)` and `[2, 5)`: two shared leaf slots). Locking left to right, the operations
//!   serialize at the leftmost shared slot; every interleaving terminates. Caught mutation:
//!   `MixedOrder` (the range starting at an odd page is locked right to left: each operation
//!   can hold one shared slot and spin on the other for ever; loom reports the livelock as an
//!   exhausted branch budget), `IgnoreLock`.
//! - `expansion_vs_lookup`: a lookup races the expansion of a folded slot (`[0, 16)` mapped to
//!   one record, then `[1, 2)` locked: the root slot is expanded, then its first child): it
//!   always finds the record at both the page being expanded and another one. Every node is
//!   filled before its Release publication and lookups load with Acquire: loom would flag a
//!   lookup that reads a slot whose initialisation does not happen before it. Caught mutation:
//!   `PublishEarly` (the child pointer is stored before the node's slots are filled: the lookup
//!   sees a free slot in a half-built node).
//! - `publication_is_atomic_for_two_point_queries`: a `map([0, 3), new)` over a one-page
//!   interval at page 1 with free pages around it publishes through a descriptor: a reader that
//!   queries page 0 then page 1 never sees the new interval at 0 and then the old one at 1.
//!   Caught mutation: `NoDescriptor` (every slot published by its own store): the reader sees
//!   the map half applied.
//!
//! - `fold_vs_lookup`: `map([0, 4), 200)` over a whole leaf folds it into its parent's slot
//!   while a reader queries pages 0 and 3: both are always mapped, never new then old. Caught
//!   mutation: `FoldClears` (the folded leaf's slots are left empty: a lookup that entered the
//!   leaf before the parent's store reads a mapped page as free).
//! - `fold_vs_locker`: a locker of page 2 waits on the leaf while it is folded; the folder
//!   then locks `[0, 4)` again (the parent's slot). The critical sections never overlap: the
//!   waiter sees the leaf's `folded` flag and goes back to the root. Caught mutation:
//!   `FoldUnlocks` (the folded leaf's slots are released unlocked: the waiter takes a slot of
//!   the unlinked leaf while the folder holds the parent's slot, a data race on the cell).
//!
//! What is not modelled: Refcache (`aspace-sync` has its own models; under loom the tree counts
//! nothing, `reclaim.rs`) and RCU grace periods (nothing is freed before the threads join).
//!
//! Run: `CARGO_TARGET_DIR=target/loom RUSTFLAGS="--cfg loom" cargo test --release -p aspace-map
//! --lib radix::loom_tests` (preemption bound 3 unless `LOOM_MAX_PREEMPTIONS` is set). The
//! mutation checks are the `*_fails_under_*` tests: each runs a model with its mutant and
//! expects loom to fail.

use super::geom::TREE_PAGES;
use super::node::{untag, Record, LOCK};
use super::reclaim::{Counter, Pins};
use super::tree::{Held, Mutant, RawRadix};
use crate::contract::PAGE_SIZE as P;
use loom::cell::UnsafeCell;
use loom::thread;
use std::sync::Arc;

/// Runs `f` under loom with a small default preemption bound.
fn model(f: impl Fn() + Sync + Send + 'static) {
    let mut b = loom::model::Builder::new();
    if b.preemption_bound.is_none() {
        b.preemption_bound = Some(3);
    }
    b.check(f);
}

/// Runs `f` under loom expecting the model to fail (a panic inside it).
fn model_fails(f: impl Fn() + Sync + Send + 'static) {
    let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        let mut b = loom::model::Builder::new();
        b.preemption_bound = Some(3);
        b.max_branches = 20_000;
        b.check(f);
    }));
    assert!(r.is_err(), "the mutant passed the model");
}

/// A tree with `mutant`.
fn tree(mutant: Mutant) -> RawRadix<u64> {
    let mut t = RawRadix::new();
    t.mutant = mutant;
    t
}

/// Locks `[lo, hi)` pages exactly (expanding folded slots at its bounds).
fn lock(t: &RawRadix<u64>, lo: u64, hi: u64) -> Vec<Held> {
    assert!(hi <= TREE_PAGES);
    let counts = Counter::stand_in();
    let mut held = Vec::new();
    // SAFETY: nothing is freed while the model's threads run.
    unsafe {
        t.lock_range(lo, hi, &mut held, &counts, &mut Pins::default(), None)
            .unwrap();
        t.refine(
            &mut held,
            &mut Vec::new(),
            lo,
            hi,
            &[lo, hi],
            None,
            &counts,
            &mut Pins::default(),
        )
        .unwrap();
    }
    held
}

fn release(held: Vec<Held>) {
    for h in held {
        // SAFETY: held by the caller.
        unsafe { h.release() };
    }
}

/// Maps `[lo, hi)` pages to a new record of `value` (single-threaded setup or a writer):
/// lock, publish, release. Returns the record.
fn map(t: &RawRadix<u64>, lo: u64, hi: u64, value: u64) -> *const Record<u64> {
    let held = lock(t, lo, hi);
    let mut old: Vec<*const Record<u64>> = Vec::new();
    for h in &held {
        let r = untag(h.word) as *const Record<u64>;
        if !r.is_null() && old.last() != Some(&r) {
            old.push(r);
        }
    }
    let r = Record::try_alloc(lo * P, hi * P, value, None).unwrap() as *const Record<u64>;
    let counts = Counter::stand_in();
    // SAFETY: the slots are held; the record is fresh; nothing is freed while models run.
    unsafe {
        t.publish(
            &held,
            &|_| r as usize,
            &old,
            &[r],
            None,
            None,
            &counts,
            &Pins::default(),
        )
        .unwrap()
    };
    r
}

/// Every slot word of the tree is free of lock bits (after the threads joined).
fn no_lock_left(t: &RawRadix<u64>) {
    // SAFETY: quiescent.
    unsafe { t.check() };
}

/// The value of the record covering `page`, by a lock-free lookup.
fn find(t: &RawRadix<u64>, page: u64) -> Option<u64> {
    // SAFETY: nothing is freed while the model's threads run.
    unsafe { t.find(page) }.map(|r| r.value)
}

/// Two operations lock overlapping ranges; each writes a shared cell while it holds them (and,
/// with `bits`, checks that every slot it holds has its lock bit).
fn two_lockers(
    mutant: Mutant,
    bits: bool,
    setup: fn(&RawRadix<u64>),
    a: (u64, u64),
    b: (u64, u64),
) {
    let t = Arc::new(tree(mutant));
    setup(&t);
    #[allow(clippy::arc_with_non_send_sync)] // loom's cell: shared on purpose, checked by loom
    let cell = Arc::new(UnsafeCell::new(0u64));
    let spawn = |(lo, hi): (u64, u64), who: u64| {
        let (t, cell) = (t.clone(), cell.clone());
        thread::spawn(move || {
            let held = lock(&t, lo, hi);
            // Every held slot has its lock bit (the propagation into expanded nodes).
            for h in held.iter().filter(|_| bits) {
                // SAFETY: held, alive.
                let w = unsafe { (*h.slot).load(loom::sync::atomic::Ordering::Relaxed) };
                assert!(w & LOCK != 0, "a held slot without its lock bit");
            }
            // The critical section: loom reports a data race if another holder overlaps it.
            cell.with_mut(|c| {
                // SAFETY: the cell is only touched under the overlapping range's locks.
                unsafe { *c = who };
            });
            release(held);
        })
    };
    let t1 = spawn(a, 1);
    let t2 = spawn(b, 2);
    t1.join().unwrap();
    t2.join().unwrap();
    no_lock_left(&t);
}

fn empty(_: &RawRadix<u64>) {}

/// Leaves expanded under pages `[0, 8)` (single pages mapped at 0 and 7).
fn leaves(t: &RawRadix<u64>) {
    map(t, 0, 1, 100);
    map(t, 7, 8, 107);
}

#[test]
fn overlapping_range_locks_exclude_each_other() {
    model(|| two_lockers(Mutant::None, true, empty, (1, 3), (2, 5)));
}

#[test]
fn overlapping_range_locks_fail_under_no_propagate() {
    // The direct check: a held slot of the expanded node has no lock bit.
    model_fails(|| two_lockers(Mutant::NoPropagate, true, empty, (1, 3), (2, 5)));
    // Its consequence: without that check, two holders write the cell concurrently.
    model_fails(|| two_lockers(Mutant::NoPropagate, false, empty, (1, 3), (2, 5)));
}

#[test]
fn overlapping_range_locks_fail_under_ignore_lock() {
    model_fails(|| two_lockers(Mutant::IgnoreLock, false, empty, (1, 3), (2, 5)));
}

#[test]
fn overlapping_range_locks_on_leaves_never_deadlock() {
    model(|| two_lockers(Mutant::None, true, leaves, (1, 4), (2, 5)));
}

#[test]
fn overlapping_range_locks_on_leaves_fail_under_mixed_order() {
    model_fails(|| two_lockers(Mutant::MixedOrder, true, leaves, (1, 4), (2, 5)));
}

/// A lookup races the expansion of a folded slot.
fn expansion_vs_lookup_with(mutant: Mutant) {
    let t = Arc::new(tree(mutant));
    // One record over a whole root slot: folded, no node below the root.
    map(&t, 0, 16, 7);
    let t2 = t.clone();
    let reader = thread::spawn(move || {
        assert_eq!(find(&t2, 1), Some(7), "the page being expanded");
        assert_eq!(find(&t2, 9), Some(7), "a page of the expanded node");
    });
    // Expands the root slot and its first child; the lock bits are inherited.
    let held = lock(&t, 1, 2);
    release(held);
    reader.join().unwrap();
    no_lock_left(&t);
}

#[test]
fn expansion_vs_lookup() {
    model(|| expansion_vs_lookup_with(Mutant::None));
}

#[test]
fn expansion_vs_lookup_fails_under_publish_early() {
    model_fails(|| expansion_vs_lookup_with(Mutant::PublishEarly));
}

/// A reader queries two pages while `map([0, 3), 2)` replaces the one-page interval at page 1.
fn two_point_queries(mutant: Mutant) {
    {
        let t = Arc::new(tree(mutant));
        map(&t, 1, 2, 1);
        let t2 = t.clone();
        let reader = thread::spawn(move || {
            let at_free = find(&t2, 0);
            let at_x = find(&t2, 1);
            assert!(
                !(at_free == Some(2) && at_x == Some(1)),
                "the new interval at page 0, then the old one at page 1"
            );
        });
        // map([0, 3), 2): three leaf slots change; published through a descriptor.
        map(&t, 0, 3, 2);
        reader.join().unwrap();
        assert_eq!(find(&t, 1), Some(2));
        no_lock_left(&t);
    }
}

#[test]
fn publication_is_atomic_for_two_point_queries() {
    model(|| two_point_queries(Mutant::None));
}

#[test]
fn publication_fails_under_no_descriptor() {
    model_fails(|| two_point_queries(Mutant::NoDescriptor));
}

/// A leaf under pages `[0, 4)` (one whole node: page 0 and pages `[1, 4)` mapped), which
/// `map([0, 4), 200)` folds into its parent's slot.
fn one_leaf(t: &RawRadix<u64>) {
    map(t, 0, 1, 100);
    map(t, 1, 4, 101);
}

/// The nodes linked: the root, the level-1 node and, unless folded, the leaf.
fn nodes(t: &RawRadix<u64>) -> usize {
    // SAFETY: quiescent.
    unsafe { t.nodes() }
}

/// A lookup races the fold of a leaf: it always finds a record (old or new) and never the new
/// one and then an old one.
fn fold_vs_lookup_with(mutant: Mutant) {
    let t = Arc::new(tree(mutant));
    one_leaf(&t);
    assert_eq!(nodes(&t), 3);
    let t2 = t.clone();
    let reader = thread::spawn(move || {
        let first = find(&t2, 0);
        let second = find(&t2, 3);
        assert!(
            first.is_some() && second.is_some(),
            "a mapped page read as free"
        );
        assert!(
            !(first == Some(200) && second == Some(101)),
            "the new record at page 0, then the old one at page 3"
        );
    });
    map(&t, 0, 4, 200);
    reader.join().unwrap();
    assert_eq!(nodes(&t), 2, "the leaf is folded");
    for p in 0..4 {
        assert_eq!(find(&t, p), Some(200));
    }
    no_lock_left(&t);
}

/// Lookup vs fold. Caught mutation: `FoldClears` (the folded node's slots are left empty):
/// loom fails with `a mapped page read as free` (a lookup that read the parent's child pointer
/// before the fold reads the leaf after it).
#[test]
fn fold_vs_lookup() {
    model(|| fold_vs_lookup_with(Mutant::None));
}

#[test]
fn fold_vs_lookup_fails_under_fold_clears() {
    model_fails(|| fold_vs_lookup_with(Mutant::FoldClears));
}

/// A locker waits on a leaf slot while the leaf's holder folds it; the folder then locks the
/// folded range again. The two critical sections (a loom-tracked cell) never overlap.
fn fold_vs_locker_with(mutant: Mutant) {
    let t = Arc::new(tree(mutant));
    one_leaf(&t);
    #[allow(clippy::arc_with_non_send_sync)] // loom's cell: shared on purpose, checked by loom
    let cell = Arc::new(UnsafeCell::new(0u64));
    let (t2, cell2) = (t.clone(), cell.clone());
    let locker = thread::spawn(move || {
        let held = lock(&t2, 2, 3);
        cell2.with_mut(|c| {
            // SAFETY: only touched under locks covering page 2.
            unsafe { *c = 1 };
        });
        release(held);
    });
    map(&t, 0, 4, 200);
    let held = lock(&t, 0, 4);
    cell.with_mut(|c| {
        // SAFETY: as above.
        unsafe { *c = 2 };
    });
    release(held);
    locker.join().unwrap();
    no_lock_left(&t);
}

/// Locker vs fold. Caught mutation: `FoldUnlocks` (the folded node's slots are released with
/// the record, unlocked): the waiter takes a slot of the unlinked leaf while the folder holds
/// the parent's slot, and loom fails with `Causality violation: Concurrent write accesses to
/// `UnsafeCell`.`
#[test]
fn fold_vs_locker() {
    model(|| fold_vs_locker_with(Mutant::None));
}

#[test]
fn fold_vs_locker_fails_under_fold_unlocks() {
    model_fails(|| fold_vs_locker_with(Mutant::FoldUnlocks));
}
