//! `HybridLock` under real threads, oversubscribed: every mode on every core at random, with each
//! holder checking on entry that nobody incompatible is inside, and the run ending (no deadlock
//! between global acquirers, local holders and waiting writers).
//!
//! `inside[i]` mirrors per-core lock `i`: a reader adds 1 (and must find no writer, -1), a writer
//! swaps 0 for -1 (and must find it 0). Global modes do this for every lock, local modes for
//! their core's group. The loom models check the same pairs exhaustively on two threads; this
//! checks many threads, groups (more cores than locks) and writer preference at once.
#![cfg(not(loom))]

use aspace_sync::HybridLock;
use std::sync::atomic::{AtomicBool, AtomicIsize, Ordering::SeqCst};

const LOCKS: usize = 3;
const CORES: usize = 5; // cores 3 and 4 share locks 0 and 1 with cores 0 and 1
const THREADS: usize = 6;
const ROUNDS: usize = 20_000;

fn enter(inside: &[AtomicIsize], locks: std::ops::Range<usize>, write: bool) {
    for i in locks {
        if write {
            let was = inside[i].swap(-1, SeqCst);
            assert_eq!(
                was, 0,
                "writer entered lock {i} with holders inside ({was})"
            );
        } else {
            let was = inside[i].fetch_add(1, SeqCst);
            assert!(
                was >= 0,
                "reader entered lock {i} while a writer was inside"
            );
        }
    }
}

/// Stays inside a while; now and then yields, so that holders are preempted inside (the
/// oversubscribed case, where protocols break).
fn linger(x: u64) {
    if x % 64 == 0 {
        std::thread::yield_now();
    }
    for _ in 0..(x % 32) {
        std::hint::spin_loop();
    }
}

fn leave(inside: &[AtomicIsize], locks: std::ops::Range<usize>, write: bool) {
    for i in locks {
        if write {
            inside[i].store(0, SeqCst);
        } else {
            inside[i].fetch_sub(1, SeqCst);
        }
    }
}

#[test]
fn every_mode_from_many_threads_respects_fig9_and_terminates() {
    let lock = HybridLock::new(LOCKS);
    let inside: Vec<AtomicIsize> = (0..LOCKS).map(|_| AtomicIsize::new(0)).collect();
    let go = AtomicBool::new(false);
    std::thread::scope(|s| {
        for t in 0..THREADS {
            let (lock, inside, go) = (&lock, &inside[..], &go);
            s.spawn(move || {
                while !go.load(SeqCst) {
                    std::hint::spin_loop();
                }
                let mut x = 0x2545_F491_4F6C_DD1Du64.wrapping_mul(t as u64 + 1);
                for _ in 0..ROUNDS {
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    let core = (x >> 8) as usize % CORES;
                    let i = lock.lock_index(core);
                    // Mostly local modes, as in an address space; globals one time in 16.
                    match (x >> 16) % 16 {
                        0 => {
                            let _g = lock.gw();
                            enter(inside, 0..LOCKS, true);
                            linger(x);
                            leave(inside, 0..LOCKS, true);
                        }
                        1 => {
                            let _g = lock.gr();
                            enter(inside, 0..LOCKS, false);
                            linger(x);
                            leave(inside, 0..LOCKS, false);
                        }
                        2..=8 => {
                            let _g = lock.lr(core);
                            enter(inside, i..i + 1, false);
                            linger(x);
                            leave(inside, i..i + 1, false);
                        }
                        _ => {
                            let _g = lock.lw(core);
                            enter(inside, i..i + 1, true);
                            linger(x);
                            leave(inside, i..i + 1, true);
                        }
                    }
                }
            });
        }
        go.store(true, SeqCst);
    });
    assert!(inside.iter().all(|v| v.load(SeqCst) == 0));
    assert!(lock.try_gw().is_some(), "every mode was released");
}
