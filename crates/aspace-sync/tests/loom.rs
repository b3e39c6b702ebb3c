//! loom models of the hybrid-granular lock and the limit counter (run with `RUSTFLAGS="--cfg
//! loom"`; every test is named `loom_*` so that `cargo test --tests loom` selects them).
//!
//! The real `HybridLock` and `LimitCounter` run against loom atomics through the crate's `sync`
//! shim. Models have two threads and a few operations; CI runs them with
//! `LOOM_MAX_PREEMPTIONS=2`.
//!
//! - Lock pairs that must exclude: each thread holds its mode and touches a loom `UnsafeCell`,
//!   writing it in a write mode and reading it in a read mode. If both were inside at once, or
//!   the second entered without happening-after the first's release, loom reports the race.
//! - Lock pairs that must coexist: each thread, holding its mode, raises its flag and waits for
//!   the other's. If the lock excluded them, the waiting never ends and loom gives up on the
//!   execution (its branch limit), failing the model.
//! - The counter: with limit 1 it is a semaphore, so the same `UnsafeCell` check shows that
//!   units change hands with happens-before (its Acquire/Release pairs); near the limit, the
//!   switch to direct updates must neither pass the limit nor refuse what it can grant.
#![cfg(loom)]

use aspace_sync::{Counter, HybridLock, LimitCounter, LockGroup, UpgradableLock, UpgradableRwLock};
use loom::cell::UnsafeCell;
use loom::sync::atomic::{AtomicBool, AtomicU64};
use loom::sync::Arc;
use loom::thread;
use std::sync::atomic::Ordering::Relaxed;

// ---------------------------------------------------------------------------------------------
// HybridLock
// ---------------------------------------------------------------------------------------------

/// A mode and, for local modes, the core.
#[derive(Clone, Copy, Debug)]
enum Mode {
    Gr,
    Gw,
    Lr(usize),
    Lw(usize),
}

impl Mode {
    fn writes(self) -> bool {
        matches!(self, Mode::Gw | Mode::Lw(_))
    }
}

/// Holds `mode` on `lock` while `f` runs.
fn holding<R>(lock: &HybridLock, mode: Mode, f: impl FnOnce() -> R) -> R {
    match mode {
        Mode::Gr => {
            let _g = lock.gr();
            f()
        }
        Mode::Gw => {
            let _g = lock.gw();
            f()
        }
        Mode::Lr(core) => {
            let _g = lock.lr(core);
            f()
        }
        Mode::Lw(core) => {
            let _g = lock.lw(core);
            f()
        }
    }
}

/// Reads the cell in a read mode, increments it in a write mode.
fn touch(cell: &UnsafeCell<usize>, mode: Mode) {
    if mode.writes() {
        // SAFETY: the mode excludes every other holder that touches the cell (what the model
        // checks; loom reports the access if it does not).
        cell.with_mut(|p| unsafe { *p += 1 });
    } else {
        // SAFETY: as above, for readers against writers.
        cell.with(|p| unsafe { std::ptr::read(p) });
    }
}

/// Two per-core locks; one thread holds `a`, the other `b`, both touch one cell. Run with the
/// modes both ways round: loom's preemption bound makes the spawned thread's head start cheaper
/// to explore than the main thread's.
fn must_exclude(a: Mode, b: Mode) {
    exclude_model(a, b);
    exclude_model(b, a);
}

fn exclude_model(a: Mode, b: Mode) {
    loom::model(move || {
        let lock = Arc::new(HybridLock::new(2));
        let cell = Arc::new(UnsafeCell::new(0usize));
        let (l2, c2) = (lock.clone(), cell.clone());
        let t = thread::spawn(move || holding(&l2, a, || touch(&c2, a)));
        holding(&lock, b, || touch(&cell, b));
        t.join().unwrap();
    });
}

/// Two per-core locks; one thread holds `a`, the other `b`, and each waits inside for the other.
fn must_coexist(a: Mode, b: Mode) {
    loom::model(move || {
        let lock = Arc::new(HybridLock::new(2));
        let inside = Arc::new([AtomicBool::new(false), AtomicBool::new(false)]);
        let meet = |lock: &HybridLock, inside: &[AtomicBool; 2], me: usize, mode: Mode| {
            holding(lock, mode, || {
                // Relaxed: a rendezvous flag only; it orders no data.
                inside[me].store(true, Relaxed);
                while !inside[1 - me].load(Relaxed) {
                    thread::yield_now();
                }
            });
        };
        let (l2, i2) = (lock.clone(), inside.clone());
        let t = thread::spawn(move || meet(&l2, &i2, 0, a));
        meet(&lock, &inside, 1, b);
        t.join().unwrap();
    });
}

#[test]
fn loom_hybrid_gw_excludes_gr() {
    must_exclude(Mode::Gw, Mode::Gr);
}

#[test]
fn loom_hybrid_gw_excludes_gw() {
    must_exclude(Mode::Gw, Mode::Gw);
}

#[test]
fn loom_hybrid_gw_excludes_lr() {
    must_exclude(Mode::Gw, Mode::Lr(0));
}

#[test]
fn loom_hybrid_gw_excludes_lw() {
    must_exclude(Mode::Gw, Mode::Lw(1));
}

#[test]
fn loom_hybrid_gr_excludes_lw() {
    must_exclude(Mode::Gr, Mode::Lw(1));
}

#[test]
fn loom_hybrid_lw_excludes_lw_on_the_same_core() {
    must_exclude(Mode::Lw(1), Mode::Lw(1));
}

#[test]
fn loom_hybrid_lw_excludes_lr_on_the_same_core() {
    must_exclude(Mode::Lw(0), Mode::Lr(0));
}

#[test]
fn loom_hybrid_lw_excludes_lw_of_a_core_in_the_same_group() {
    // Two locks: cores 0 and 2 share lock 0.
    must_exclude(Mode::Lw(0), Mode::Lw(2));
}

#[test]
fn loom_hybrid_lr_and_lr_coexist_on_the_same_core() {
    must_coexist(Mode::Lr(0), Mode::Lr(0));
}

#[test]
fn loom_hybrid_lr_and_lr_coexist_on_different_cores() {
    must_coexist(Mode::Lr(0), Mode::Lr(1));
}

#[test]
fn loom_hybrid_lw_and_lw_coexist_on_different_cores() {
    must_coexist(Mode::Lw(0), Mode::Lw(1));
}

#[test]
fn loom_hybrid_lr_and_lw_coexist_on_different_cores() {
    must_coexist(Mode::Lr(0), Mode::Lw(1));
}

#[test]
fn loom_hybrid_gr_and_lr_coexist() {
    must_coexist(Mode::Gr, Mode::Lr(1));
}

#[test]
fn loom_hybrid_gr_and_gr_coexist() {
    must_coexist(Mode::Gr, Mode::Gr);
}

// ---------------------------------------------------------------------------------------------
// LimitCounter
// ---------------------------------------------------------------------------------------------

/// Limit 1: the counter is a semaphore. Each thread that gets the unit writes the cell and gives
/// the unit back; loom reports the write if the unit's hand-over lacks happens-before.
fn semaphore(core_a: usize, core_b: usize) {
    loom::model(move || {
        // Batch 1 / 2 / 16 = 0: every update goes through the global counter, and `sub` parks the
        // unit as credit for a moment before giving it back.
        let counter = Arc::new(LimitCounter::new(1, 2));
        let cell = Arc::new(UnsafeCell::new(0usize));
        let critical = |counter: &LimitCounter, cell: &UnsafeCell<usize>, core: usize| {
            if counter.try_add(core, 1).is_ok() {
                // SAFETY: the one unit is held: no other thread is here (what the model checks).
                cell.with_mut(|p| unsafe { *p += 1 });
                counter.sub(core, 1);
            }
        };
        let (k2, c2) = (counter.clone(), cell.clone());
        let t = thread::spawn(move || critical(&k2, &c2, core_a));
        critical(&counter, &cell, core_b);
        t.join().unwrap();
        assert_eq!(counter.sum(), 0);
    });
}

#[test]
fn loom_limit_counter_hands_units_over_with_happens_before() {
    semaphore(0, 1);
}

#[test]
fn loom_limit_counter_hands_units_over_with_happens_before_in_a_shared_slot() {
    semaphore(0, 2);
}

/// `held` is the true total: raised by `n` after a granted `try_add`; it must stay within the
/// limit.
fn add_tracked(counter: &LimitCounter, held: &AtomicU64, core: usize, n: u64) -> bool {
    let ok = counter.try_add(core, n).is_ok();
    if ok {
        // Relaxed: a counter only; the assertion is about its own modification order.
        let now = held.fetch_add(n, Relaxed) + n;
        assert!(now <= counter.limit(), "true total {now} passed the limit");
    }
    ok
}

#[test]
fn loom_limit_counter_switch_to_direct_near_the_limit_refuses_nothing_it_can_grant() {
    loom::model(|| {
        // Limit 8, two cores, batch 1: reservations must leave a margin of 2.
        let counter = Arc::new(LimitCounter::with_batch(8, 2, 1));
        let held = Arc::new(AtomicU64::new(0));
        // Setup: each core parks one unit of credit; 4 units held, global 6 (margin 2).
        for core in [0, 1, 0, 0] {
            assert!(add_tracked(&counter, &held, core, 1));
        }
        assert!(!counter.is_direct(0) && !counter.is_direct(1));
        // Each core now uses its credit, and its next add must switch it to direct updates.
        // Together they ask for exactly what is left (4): every call must succeed.
        let (k2, h2) = (counter.clone(), held.clone());
        let t = thread::spawn(move || {
            assert!(
                add_tracked(&k2, &h2, 0, 1),
                "core 0 refused below the limit"
            );
            assert!(
                add_tracked(&k2, &h2, 0, 1),
                "core 0 refused below the limit"
            );
        });
        assert!(
            add_tracked(&counter, &held, 1, 1),
            "core 1 refused below the limit"
        );
        assert!(
            add_tracked(&counter, &held, 1, 1),
            "core 1 refused below the limit"
        );
        t.join().unwrap();
        assert!(counter.is_direct(0) && counter.is_direct(1));
        assert_eq!(counter.sum(), 8);
        assert!(counter.try_add(0, 1).is_err());
    });
}

#[test]
fn loom_limit_counter_switch_in_a_shared_slot_never_passes_the_limit() {
    loom::model(|| {
        // Limit 4, batch 1, two slots; both threads use slot 0, which holds one unit of credit.
        let counter = Arc::new(LimitCounter::with_batch(4, 2, 1));
        let held = Arc::new(AtomicU64::new(0));
        assert!(add_tracked(&counter, &held, 0, 1));
        // One thread asks for 2: the credit (1) is too little and no reservation fits, so it
        // switches the slot to direct updates and gives the credit back, while the other thread
        // may be taking that same unit. Together they ask for 5 more; 3 are left.
        let (k2, h2) = (counter.clone(), held.clone());
        let t = thread::spawn(move || {
            add_tracked(&k2, &h2, 0, 2);
            add_tracked(&k2, &h2, 2, 1);
        });
        add_tracked(&counter, &held, 2, 1);
        add_tracked(&counter, &held, 0, 1);
        t.join().unwrap();
        assert_eq!(counter.sum(), held.load(Relaxed), "final sum is exact");
    });
}

// ---------------------------------------------------------------------------------------------
// UpgradableLock
// ---------------------------------------------------------------------------------------------

/// The upgrade (thesis §5.2.2): the group's first member locks in the light mode (no
/// read-modify-write) while a second thread joins, which upgrades the group, and then locks.
/// Both critical sections write a loom `UnsafeCell`: if they overlapped, or the second did not
/// happen after the first, loom reports the race. The real lock and the real `memb` domain
/// (its loom stand-in for `membarrier`) run.
///
/// Mutation: without the grace period in `LockGroup::join` (the `synchronize()` after setting
/// the flag), the first member may read the flag unset, the joiner take the real lock, and the
/// first member then store the word in the light mode: loom fails with "Causality violation:
/// Concurrent write accesses to `UnsafeCell`" (checked 2026-11-27).
#[test]
fn loom_upgradable_lock_excludes_across_the_upgrade() {
    loom::model(|| {
        let group = LockGroup::new();
        let lock = Arc::new(UpgradableLock::new(&group, ()));
        let cell = Arc::new(UnsafeCell::new(0u64));
        let first = group.join();
        let (g2, l2, c2) = (group.clone(), lock.clone(), cell.clone());
        let t = thread::spawn(move || {
            let second = g2.join();
            let _g = l2.lock(&second);
            // SAFETY: inside the lock's critical section.
            c2.with_mut(|v| unsafe { *v += 1 });
        });
        {
            let _g = lock.lock(&first);
            // SAFETY: inside the lock's critical section.
            cell.with_mut(|v| unsafe { *v += 1 });
        }
        t.join().unwrap();
        let _g = lock.lock(&first);
        // SAFETY: inside the lock's critical section, after both writers.
        cell.with(|v| assert_eq!(unsafe { *v }, 2));
    });
}

// ---------------------------------------------------------------------------------------------
// UpgradableRwLock
// ---------------------------------------------------------------------------------------------

/// The reader-writer flavour across the upgrade: the first member write-locks in the light
/// mode (plain stores) while a second thread joins, which upgrades the group, and then
/// read-locks; a third section (the first member reading after the join) runs thread-safe.
/// The writer writes and the reader reads a loom `UnsafeCell`: if the writer and the reader
/// overlapped, or the read did not happen after the write it may see, loom reports the race.
///
/// Mutation: without the grace period in `LockGroup::join` (the `synchronize()` after setting
/// the flag), the first member may read the flag unset and write-lock in the light mode while
/// the joiner, returned at once, read-locks for real: loom finds the overlap, caught first by
/// the lock word's own check, "panicked at crates/aspace-sync/src/upgradable_rwlock.rs:120:17:
/// UpgradableRwLock: the lock is held in the light mode by this thread (relocked during the
/// upgrade) or by a leaked guard" (checked 2026-11-27).
#[test]
fn loom_upgradable_rwlock_no_writer_overlaps_across_the_upgrade() {
    loom::model(|| {
        let group = LockGroup::new();
        let lock = Arc::new(UpgradableRwLock::new(&group, ()));
        let cell = Arc::new(UnsafeCell::new(0u64));
        let first = group.join();
        let (g2, l2, c2) = (group.clone(), lock.clone(), cell.clone());
        let t = thread::spawn(move || {
            let second = g2.join();
            let _g = l2.read(&second);
            // SAFETY: inside a read section of the lock; writers write only under its write side.
            c2.with(|v| assert!(unsafe { *v } <= 1));
        });
        {
            let _g = lock.write(&first);
            // SAFETY: inside the lock's write section.
            cell.with_mut(|v| unsafe { *v += 1 });
        }
        t.join().unwrap();
        let _g = lock.write(&first);
        // SAFETY: inside the lock's write section, after the reader.
        cell.with_mut(|v| unsafe { *v += 1 });
    });
}

/// A write section taken in the light mode needs no shootdown (`aspace_vm`'s `coarse`, issue
/// 22): every core that can access memory is a member of the group, and a second core's join
/// (its attach) returns only after the grace period that waits for every light section, so
/// while a section is light no other core can hold what it unmaps. The model: the first
/// member unmaps a page in a write section: it clears the page-table entry, then, only if the
/// section is thread-safe, waits for the other core's access window to end (the shootdown: a
/// `SeqCst` fence on each side in Dekker style, as `aspace_vm`'s `shootdown.rs`), then frees the
/// frame (writes it). A second thread joins the group (attaches), then accesses: opens its
/// window, reads the entry and, if it is present, the frame, and closes its window. If the free
/// and the frame read overlapped, loom reports the race on the frame's cell.
///
/// Mutation: skipping the wait in a thread-safe section too (`if false` for
/// `if guard.is_thread_safe()`): the joiner returns, reads the entry before the clear and the
/// frame while the writer frees it; loom fails with "Causality violation: Concurrent read and
/// write accesses to `UnsafeCell`" (checked 2026-11-27).
#[test]
fn loom_upgradable_rwlock_a_light_writer_needs_no_shootdown() {
    use loom::sync::atomic::fence;
    use std::sync::atomic::Ordering::{Acquire, Release, SeqCst};
    loom::model(|| {
        let group = LockGroup::new();
        let lock = Arc::new(UpgradableRwLock::new(&group, ()));
        let entry = Arc::new(AtomicBool::new(true));
        let window = Arc::new(AtomicBool::new(false));
        let frame = Arc::new(UnsafeCell::new(7u64));
        let first = group.join();
        let (g2, e2, w2, f2) = (group.clone(), entry.clone(), window.clone(), frame.clone());
        let t = thread::spawn(move || {
            let _second = g2.join();
            // The window's begin: a store, then a SeqCst fence before reading the entry.
            w2.store(true, Relaxed);
            fence(SeqCst);
            if e2.load(Relaxed) {
                // SAFETY: the entry was present inside the window: the frame is not freed
                // before the window ends (what the model checks).
                f2.with(|v| assert_eq!(unsafe { *v }, 7, "read a freed frame"));
            }
            // The window's end: a Release store (the free waits for it with Acquire).
            w2.store(false, Release);
        });
        {
            let guard = lock.write(&first);
            entry.store(false, Relaxed);
            if guard.is_thread_safe() {
                // The round: a SeqCst fence between the clear and the window check (Dekker
                // with the window's fence), then a wait for the window to end.
                fence(SeqCst);
                while window.load(Acquire) {
                    thread::yield_now();
                }
            }
            // SAFETY: the entry is cleared and every window that could have read it ended.
            frame.with_mut(|v| unsafe { *v = 0 });
        }
        t.join().unwrap();
    });
}
