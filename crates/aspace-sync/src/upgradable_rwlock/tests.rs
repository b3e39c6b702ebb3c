//! Unit and property tests of the reader-writer upgradable lock: modes, refusals, and that no
//! writer overlaps any other section while members join mid-run.

use super::*;
use proptest::prelude::*;
use std::sync::atomic::{AtomicU64, AtomicUsize as StdUsize, Ordering::SeqCst};

#[test]
fn one_member_runs_light_and_a_second_join_upgrades() {
    let group = LockGroup::new();
    let lock = UpgradableRwLock::new(&group, 0u64);
    let a = group.join();
    {
        let mut w = lock.write(&a);
        assert!(!w.is_thread_safe());
        *w += 1;
    }
    {
        // Nested light reads are fine (one thread, shared access).
        let r1 = lock.read(&a);
        let r2 = lock.read(&a);
        assert!(!r1.is_thread_safe());
        assert_eq!(*r1 + *r2, 2);
    }
    assert_eq!(
        lock.state.load(SeqCst),
        0,
        "the last light reader clears the word"
    );
    let b = group.join();
    {
        let mut w = lock.write(&b);
        assert!(w.is_thread_safe());
        *w += 1;
    }
    {
        let (ra, rb) = (lock.read(&a), lock.read(&b));
        assert!(ra.is_thread_safe() && rb.is_thread_safe());
        assert_eq!(*ra, 2);
        drop(rb);
    }
    drop(b);
    // No downgrade.
    assert!(lock.write(&a).is_thread_safe());
    assert_eq!(lock.state.load(SeqCst), 0);
}

#[test]
#[should_panic(expected = "belongs to another group")]
fn a_member_of_another_group_is_refused() {
    let (g1, g2) = (LockGroup::new(), LockGroup::new());
    let lock = UpgradableRwLock::new(&g1, ());
    let stranger = g2.join();
    let _g = lock.read(&stranger);
}

#[test]
#[should_panic(expected = "holds the lock for writing")]
fn reading_under_a_light_write_panics_instead_of_aliasing() {
    let group = LockGroup::new();
    let lock = UpgradableRwLock::new(&group, 0u8);
    let m = group.join();
    let _w = lock.write(&m);
    let _r = lock.read(&m);
}

#[test]
#[should_panic(expected = "this thread holds the lock")]
fn writing_under_a_light_read_panics_instead_of_aliasing() {
    let group = LockGroup::new();
    let lock = UpgradableRwLock::new(&group, 0u8);
    let m = group.join();
    let _r = lock.read(&m);
    let _w = lock.write(&m);
}

#[test]
#[should_panic(expected = "held in the light mode")]
fn a_leaked_light_guard_is_refused_after_the_upgrade() {
    let group = LockGroup::new();
    let lock = UpgradableRwLock::new(&group, 0u8);
    let m = group.join();
    // Leaking the guard leaks its read section too: leak a second member's instead, after
    // setting the word the way a light holder does (the same state a leak leaves).
    lock.state.store(WRITER | LIGHT, SeqCst);
    let _other = group.join();
    let _w = lock.write(&m);
}

/// Runs `threads` threads, thread `t > 0` joining once thread 0 did `joins[t - 1]` sections;
/// each section is a write with probability 1/2 (by a counter), and checks that a writer is
/// alone and readers see no writer (a count swapped in and out).
fn run(threads: usize, iters: u64, joins: &[u64]) {
    let group = LockGroup::new();
    let lock = UpgradableRwLock::new(&group, 0u64);
    let writers = StdUsize::new(0);
    let readers = StdUsize::new(0);
    let progress = AtomicU64::new(0);
    let writes = AtomicU64::new(0);
    std::thread::scope(|s| {
        for t in 0..threads {
            let (group, lock, writers, readers, progress, writes) =
                (&group, &lock, &writers, &readers, &progress, &writes);
            let wait_for = if t == 0 { 0 } else { joins[t - 1] };
            s.spawn(move || {
                while t != 0 && progress.load(SeqCst) < wait_for {
                    std::hint::spin_loop();
                }
                let m = group.join();
                for i in 0..iters {
                    if (i + t as u64) % 2 == 0 {
                        let mut g = lock.write(&m);
                        assert_eq!(writers.fetch_add(1, SeqCst), 0, "two writers overlap");
                        assert_eq!(readers.load(SeqCst), 0, "a writer overlaps a reader");
                        *g += 1;
                        writes.fetch_add(1, SeqCst);
                        writers.fetch_sub(1, SeqCst);
                    } else {
                        let g = lock.read(&m);
                        readers.fetch_add(1, SeqCst);
                        assert_eq!(writers.load(SeqCst), 0, "a reader overlaps a writer");
                        let _ = *g;
                        readers.fetch_sub(1, SeqCst);
                    }
                    if t == 0 {
                        progress.fetch_add(1, SeqCst);
                    }
                }
            });
        }
    });
    assert_eq!(*lock.read(&group.join()), writes.load(SeqCst));
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(24))]

    #[test]
    fn no_writer_overlaps_another_section_while_members_join_mid_run(
        threads in 2usize..4,
        joins in prop::collection::vec(0u64..3000, 3),
    ) {
        run(threads, 3000, &joins);
    }
}

/// Review (issue 22): `LockGroup::members()` from inside a light section while a second member's
/// join waits for that section (the upgrade's grace period, under the group's join mutex):
/// `members()` takes the same mutex, so the section never ends and the join never returns.
/// `join()` documents that it must not be called inside a section; `members()` does not.
/// Fails (reports the hang) while `members()` waits on the join mutex.
#[test]
fn members_inside_a_light_section_during_an_upgrade_does_not_hang() {
    use std::sync::mpsc::channel;
    use std::time::Duration;
    let group = LockGroup::new();
    let lock = std::sync::Arc::new(UpgradableRwLock::new(&group, 0u8));
    let (started_tx, started_rx) = channel();
    let (done_tx, done_rx) = channel();
    let (g1, l1) = (group.clone(), lock.clone());
    // Detached: if it hangs, the test reports it and the process exits anyway.
    std::thread::spawn(move || {
        let m = g1.join();
        let _r = l1.read(&m);
        started_tx.send(()).unwrap();
        // Let the joiner below take the join mutex and start its grace period.
        std::thread::sleep(Duration::from_millis(200));
        let n = g1.members();
        done_tx.send(n).unwrap();
    });
    started_rx.recv().unwrap();
    let g2 = group.clone();
    std::thread::spawn(move || {
        let _m = g2.join();
        std::thread::sleep(Duration::from_secs(3600));
    });
    assert!(
        done_rx.recv_timeout(Duration::from_secs(5)).is_ok(),
        "members() inside a light section hangs while a join waits for that section"
    );
}
