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
