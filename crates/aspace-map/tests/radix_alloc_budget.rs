//! Review finding F2 (`REVIEW-radix.md` on branch `review-radixmap`): every heap allocation a
//! `RadixMap` operation makes before its commit is fallible and budgeted, so real memory
//! exhaustion returns `OutOfMemory` and changes nothing, and `fail_allocations_after` reaches
//! every such allocation.
//!
//! A counting (and, armed, failing) global allocator watches the test's own thread between the
//! start of an operation and its commit; the commit is seen through the leave mark, which the
//! map calls after the operation's last fallible step and before its first publishing store
//! (`RadixMap::with_leave_mark`). The operation is the review's: a two-page `map` deep inside
//! a folded gigabyte, which expands a level-2 slot down to a leaf (two nodes, three records, a
//! descriptor, and about a thousand held slots).
//!
//! Before the fix: `an expanding map made 39 heap allocations before its commit but only 6 are
//! budgeted` (Refcache's object and weak cell per node, `expand`'s children `Vec`, `refine`'s
//! work list and `held` growth, `pins`), and the failing allocator aborted the process at the
//! first of them (`memory allocation of 32 bytes failed`, SIGABRT). After: 22 allocations, 22
//! units.

#![cfg(not(loom))]

use aspace_map::{IntervalMap, MapError, RadixMap, KEY_SPACE_END, PAGE_SIZE as P};
use aspace_rcu::Domain;
use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::ops::ControlFlow;

thread_local! {
    /// Count this thread's allocations.
    static COUNTING: Cell<bool> = const { Cell::new(false) };
    static COUNTED: Cell<usize> = const { Cell::new(0) };
    /// Fail this thread's allocation number `n` (counted from arming), once.
    static FAIL_AT: Cell<Option<usize>> = const { Cell::new(None) };
    static FAILED: Cell<bool> = const { Cell::new(false) };
}

struct Watching;

impl Watching {
    /// Whether this allocation must fail.
    fn step() -> bool {
        let on = COUNTING.try_with(|c| c.get()).unwrap_or(false);
        if !on {
            return false;
        }
        let n = COUNTED.with(|c| {
            let n = c.get();
            c.set(n + 1);
            n
        });
        let fail = FAIL_AT.with(|f| f.get() == Some(n));
        if fail {
            FAILED.with(|f| f.set(true));
        }
        fail
    }
}

// SAFETY: forwards to `System`, or returns null (a failed allocation) when armed.
unsafe impl GlobalAlloc for Watching {
    unsafe fn alloc(&self, l: Layout) -> *mut u8 {
        if Self::step() {
            return std::ptr::null_mut();
        }
        // SAFETY: forwarded.
        unsafe { System.alloc(l) }
    }
    unsafe fn dealloc(&self, p: *mut u8, l: Layout) {
        // SAFETY: forwarded.
        unsafe { System.dealloc(p, l) }
    }
    unsafe fn realloc(&self, p: *mut u8, l: Layout, n: usize) -> *mut u8 {
        if Self::step() {
            return std::ptr::null_mut();
        }
        // SAFETY: forwarded.
        unsafe { System.realloc(p, l, n) }
    }
}

#[global_allocator]
static GLOBAL: Watching = Watching;

/// The leave mark: the commit is reached; stop watching.
fn committed(_: &u64) {
    COUNTING.with(|c| c.set(false));
}

fn watch(fail_at: Option<usize>) {
    COUNTED.with(|c| c.set(0));
    FAIL_AT.with(|f| f.set(fail_at));
    FAILED.with(|f| f.set(false));
    COUNTING.with(|c| c.set(true));
}

fn unwatch() -> usize {
    COUNTING.with(|c| c.set(false));
    COUNTED.with(|c| c.get())
}

/// A folded gigabyte (one level-2 slot) at 2^52 bytes, and this thread's reader slot, core
/// and scratch warmed up by two small maps.
fn setup() -> RadixMap<u64> {
    let m = RadixMap::new(Domain::new()).with_leave_mark(committed);
    m.map(0..P, Some(1)).unwrap();
    m.map(P..2 * P, Some(1)).unwrap();
    m.map(BASE..BASE + (1 << 30), Some(2)).unwrap();
    m
}

const BASE: u64 = 1 << 52;

/// The review's expanding map.
fn deep(m: &RadixMap<u64>) -> Result<(), MapError> {
    m.map(BASE + 7 * P..BASE + 9 * P, Some(3))
}

fn contents(m: &RadixMap<u64>) -> Vec<(u64, u64, u64)> {
    let r = m.domain().register();
    let g = r.read();
    let mut out = Vec::new();
    m.visit(0..KEY_SPACE_END, &g, &mut |iv, v| {
        out.push((iv.start, iv.end, *v));
        ControlFlow::Continue(())
    })
    .unwrap();
    out
}

#[test]
fn every_allocation_before_the_commit_is_budgeted() {
    // Budget units the operation needs: the least n for which it succeeds.
    let mut units = 0;
    loop {
        let m = setup();
        m.fail_allocations_after(Some(units));
        let r = deep(&m);
        m.fail_allocations_after(None);
        match r {
            Ok(()) => break,
            Err(e) => assert_eq!(e, MapError::OutOfMemory),
        }
        units += 1;
    }
    let m = setup();
    watch(None);
    deep(&m).unwrap();
    let heap = unwatch();
    assert!(
        heap <= units,
        "an expanding map made {heap} heap allocations before its commit but only {units} are \
         budgeted"
    );
}

#[test]
fn a_real_allocation_failure_before_the_commit_returns_out_of_memory_and_changes_nothing() {
    let mut failed = 0;
    for k in 0.. {
        let m = setup();
        let before = contents(&m);
        watch(Some(k));
        let r = deep(&m);
        unwatch();
        let hit = FAILED.with(|f| f.get());
        if !hit {
            // The k-th allocation comes after the commit: every earlier one was tried.
            r.unwrap();
            break;
        }
        failed += 1;
        assert_eq!(r, Err(MapError::OutOfMemory), "allocation {k}");
        assert_eq!(contents(&m), before, "allocation {k}");
        m.check_invariants();
        // Nothing left held; the retry succeeds.
        deep(&m).unwrap();
        m.check_invariants();
    }
    // Three records, two nodes with their Refcache objects, buffers, the descriptor.
    assert!(failed >= 20, "{failed}");
}
