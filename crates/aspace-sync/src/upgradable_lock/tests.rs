//! Unit and property tests of the upgradable lock: modes, refusals, and mutual exclusion with
//! members joining mid-run.

use super::*;
use proptest::prelude::*;
use std::sync::atomic::{AtomicBool as StdBool, AtomicU64, Ordering::SeqCst};

#[test]
fn one_member_runs_light_and_a_second_join_upgrades() {
    let group = LockGroup::new();
    let lock = UpgradableLock::new(&group, 0u64);
    let a = group.join();
    {
        let mut g = lock.lock(&a);
        assert!(!g.is_thread_safe());
        *g += 1;
    }
    assert!(!group.is_thread_safe());
    let b = group.join();
    assert!(group.is_thread_safe());
    assert_eq!(group.members(), 2);
    {
        let mut g = lock.lock(&b);
        assert!(g.is_thread_safe());
        *g += 1;
    }
    drop(b);
    assert_eq!(group.members(), 1);
    // No downgrade: the group stays thread-safe.
    assert!(lock.lock(&a).is_thread_safe());
    assert_eq!(*lock.lock(&a), 2);
}

#[test]
#[should_panic(expected = "belongs to another group")]
fn a_member_of_another_group_is_refused() {
    let (g1, g2) = (LockGroup::new(), LockGroup::new());
    let lock = UpgradableLock::new(&g1, ());
    let stranger = g2.join();
    let _g = lock.lock(&stranger);
}

#[test]
#[should_panic(expected = "already held by this thread")]
fn relocking_in_the_light_mode_panics_instead_of_aliasing() {
    let group = LockGroup::new();
    let lock = UpgradableLock::new(&group, 0u8);
    let m = group.join();
    let _first = lock.lock(&m);
    let _second = lock.lock(&m);
}

#[test]
fn nested_sections_of_different_locks_unlock_in_either_mode() {
    let group = LockGroup::new();
    let (x, y) = (
        UpgradableLock::new(&group, 1u32),
        UpgradableLock::new(&group, 2u32),
    );
    let m = group.join();
    {
        let gx = lock_both(&x, &y, &m);
        assert_eq!(gx, 3);
    }
    let _other = group.join();
    assert_eq!(lock_both(&x, &y, &m), 3);
}

fn lock_both(x: &UpgradableLock<u32>, y: &UpgradableLock<u32>, m: &Member) -> u32 {
    let gx = x.lock(m);
    let gy = y.lock(m);
    *gx + *gy
}

/// Runs `threads` threads that each increment one shared lock's counter `iters` times, thread
/// `t` joining the group only after thread 0 did `joins[t]` increments (0: at once), checking
/// on every critical section that no other is inside (a flag swapped in and out).
fn run(threads: usize, iters: u64, joins: &[u64]) {
    let group = LockGroup::new();
    let lock = UpgradableLock::new(&group, 0u64);
    let inside = StdBool::new(false);
    let progress = AtomicU64::new(0);
    std::thread::scope(|s| {
        for t in 0..threads {
            let (group, lock, inside, progress) = (&group, &lock, &inside, &progress);
            let wait_for = if t == 0 { 0 } else { joins[t - 1] };
            s.spawn(move || {
                // Thread 0 is the first member; the others join once it made progress (a
                // spin on its counter, not a sleep), so joins land mid-run.
                while t != 0 && progress.load(SeqCst) < wait_for {
                    std::hint::spin_loop();
                }
                let m = group.join();
                for _ in 0..iters {
                    let mut g = lock.lock(&m);
                    assert!(!inside.swap(true, SeqCst), "two critical sections overlap");
                    *g += 1;
                    inside.store(false, SeqCst);
                    drop(g);
                    if t == 0 {
                        progress.fetch_add(1, SeqCst);
                    }
                }
            });
        }
    });
    assert_eq!(*lock.lock(&group.join()), threads as u64 * iters);
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(24))]

    #[test]
    fn critical_sections_never_overlap_while_members_join_mid_run(
        threads in 2usize..4,
        joins in prop::collection::vec(0u64..3000, 3),
    ) {
        run(threads, 3000, &joins);
    }
}
/// Regression (review finding 1, UB through the safe API in debug builds, fixed): before the fix `join` stores `thread_safe = true`
/// *before* `synchronize()`, and `synchronize()` panics in debug builds when the joiner is inside
/// a read section of the group's domain (the documented misuse "join while holding a guard").
/// Caught with `catch_unwind`, the half-done upgrade stays: the flag is set, the member count
/// keeps the phantom member (2), and the grace period never ran. Every later `join` sees the flag
/// already set and returns at once, without waiting for the light-mode critical section that is
/// still running. A member from that join, on another thread, then takes the real lock after the
/// light section's *Relaxed* unlock store: nothing orders the light section's writes before the
/// thread-safe section's accesses (a data race on `T`; UPGRADE-ALL-FUTEXES-AND-WAIT's postcondition
/// is broken). The test checks the postcondition: a join that returns while a light-mode guard
/// lives is the bug (Miri showed the data race itself on the review branch `review-upgradable`).
/// The fix: `upgraded` under the join mutex, set only after the grace period; the count
/// stored only then (the test runs in builds with debug assertions, e.g. CI's `ci` profile).
#[test]
#[cfg(debug_assertions)]
fn a_join_after_a_panicked_upgrade_still_waits_for_light_sections() {
    use std::panic::{catch_unwind, AssertUnwindSafe};
    use std::sync::mpsc;
    use std::time::Duration;
    let group = LockGroup::new();
    let lock = UpgradableLock::new(&group, 0u64);
    let a = group.join();
    let mut light = lock.lock(&a);
    assert!(!light.is_thread_safe());
    // The misuse the doc names; debug builds panic inside synchronize(), after the flag store.
    let panicked = catch_unwind(AssertUnwindSafe(|| group.join()));
    assert!(
        panicked.is_err(),
        "join inside a read section must panic in debug builds"
    );
    assert!(
        group.is_thread_safe(),
        "the flag stayed set by the panicked join"
    );
    assert_eq!(
        group.members(),
        1,
        "the panicked join left no phantom member"
    );
    let (tx, rx) = mpsc::channel();
    std::thread::scope(|s| {
        let (group, lock) = (&group, &lock);
        s.spawn(move || {
            let m = group.join();
            tx.send(()).unwrap();
            let mut g = lock.lock(&m);
            assert!(g.is_thread_safe());
            // Reads what the light section wrote with no happens-before edge (Relaxed unlock).
            *g += 1;
        });
        let returned = rx.recv_timeout(Duration::from_millis(500)).is_ok();
        *light += 1; // still inside the light-mode critical section
        drop(light); // Relaxed store of `false`: the other thread's CAS reads it
        assert!(
            !returned,
            "join() returned while a light-mode critical section was still running: no grace \
             period separates it from the thread-safe sections that follow"
        );
    });
}

/// Regression (review finding 2, liveness, fixed): before the fix the light mode's re-entrance check turns
/// into a self-deadlock of the whole group when the re-entrant `lock` runs *during* an upgrade.
/// Thread A holds a light guard of `lock`; thread B's `join` sets the flag and waits (holding
/// the join mutex) for A's read section; A locks `lock` again, now sees the flag, takes the
/// thread-safe path and spins on the word its own light guard set. A waits for itself, B waits
/// for A, and every later `join` or `members()` waits for B: no panic ("already held by this
/// thread", as the doc promises for the light mode), a hang. Before the flag flips the same
/// re-lock panics; after the upgrade completes it cannot happen (the first guard would be
/// thread-safe). The test fails when the re-lock neither panics nor returns within 2 s.
#[test]
fn relocking_during_an_upgrade_panics_rather_than_deadlocking_the_group() {
    use std::sync::mpsc;
    use std::time::Duration;
    let group = LockGroup::new();
    let lock = Arc::new(UpgradableLock::new(&group, 0u8));
    let (tx, rx) = mpsc::channel();
    let (g, l) = (group.clone(), lock.clone());
    // Detached on purpose: in the buggy outcome both threads stay stuck until the process exits.
    std::thread::spawn(move || {
        let a = g.join();
        let first = l.lock(&a);
        assert!(!first.is_thread_safe());
        let g2 = g.clone();
        std::thread::spawn(move || drop(g2.join())); // blocks in synchronize() for `first`
        while !g.is_thread_safe() {
            std::thread::yield_now();
        }
        let relock = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            drop(l.lock(&a));
        }));
        let _ = tx.send(relock.is_err());
        drop(first);
    });
    match rx.recv_timeout(Duration::from_secs(2)) {
        Ok(panicked) => assert!(panicked, "the re-lock returned: two guards of one lock"),
        Err(_) => panic!(
            "the re-entrant lock during the upgrade hung (the joiner waits for it, it waits for \
             itself); group.members() would hang too"
        ),
    }
}
