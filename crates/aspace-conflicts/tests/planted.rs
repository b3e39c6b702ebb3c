//! The audit finds what it must: a planted shared counter conflicts on every operation and is
//! named by its site; per-core counters, shared read-only data and accesses two rounds apart do
//! not conflict; RCU-scoped and background accesses are counted apart.

use aspace_conflicts::atomic::{AtomicU64, Ordering};
use aspace_conflicts::lock::{Mutex, RwLock};
use aspace_conflicts::record::{self, rcu_scope};
use aspace_conflicts::{analyze, run_rounds};
use crossbeam_utils::CachePadded;

const CORES: usize = 4;
const ROUNDS: u64 = 20;
const WARMUP: u64 = 2;

#[test]
fn planted_shared_counter_conflicts_once_per_op_and_is_named() {
    let shared = AtomicU64::new(0);
    let r = run_rounds(
        CORES,
        ROUNDS,
        |_| (),
        |_, _, _| {
            shared.fetch_add(1, Ordering::Relaxed);
        },
        |_, _| {},
    );
    let a = analyze(&r.ops, &r.background, WARMUP);
    assert_eq!(a.ops, CORES as u64 * (ROUNDS - WARMUP));
    assert_eq!(a.conflicts_per_op, 1.0, "{a:?}");
    assert_eq!(a.max_conflicts_per_op, 1);
    assert_eq!(a.lines.len(), 1);
    assert!(a.lines[0].site.contains("planted.rs"), "{:?}", a.lines);
    assert_eq!(a.lines[0].per_op, 1.0);
    assert_eq!(shared.load(Ordering::Relaxed), CORES as u64 * ROUNDS);
}

#[test]
fn per_core_counters_do_not_conflict() {
    let counters: Vec<CachePadded<AtomicU64>> = (0..CORES)
        .map(|_| CachePadded::new(AtomicU64::new(0)))
        .collect();
    let r = run_rounds(
        CORES,
        ROUNDS,
        |_| (),
        |_, core, _| {
            counters[core].fetch_add(1, Ordering::Relaxed);
        },
        |_, _| {},
    );
    let a = analyze(&r.ops, &r.background, WARMUP);
    assert_eq!(a.conflicts_per_op, 0.0, "{a:?}");
    assert_eq!(a.max_conflicts_per_op, 0);
    assert!(a.lines.is_empty());
}

#[test]
fn unpadded_per_core_counters_false_share_one_line() {
    // Four u64 counters side by side in one 64-byte-aligned line: false sharing is a conflict.
    #[repr(align(64))]
    struct Line([AtomicU64; CORES]);
    let line = Line(std::array::from_fn(|_| AtomicU64::new(0)));
    let r = run_rounds(
        CORES,
        ROUNDS,
        |_| (),
        |_, core, _| {
            line.0[core].fetch_add(1, Ordering::Relaxed);
        },
        |_, _| {},
    );
    let a = analyze(&r.ops, &r.background, WARMUP);
    assert_eq!(a.conflicts_per_op, 1.0, "{a:?}");
}

#[test]
fn shared_read_only_data_does_not_conflict() {
    let shared = AtomicU64::new(7);
    let r = run_rounds(
        CORES,
        ROUNDS,
        |_| (),
        |_, _, _| {
            assert_eq!(shared.load(Ordering::Acquire), 7);
        },
        |_, _| {},
    );
    let a = analyze(&r.ops, &r.background, WARMUP);
    assert_eq!(a.conflicts_per_op, 0.0, "{a:?}");
}

#[test]
fn next_round_conflicts_count_and_two_rounds_apart_do_not() {
    // Core 0 writes in even rounds, core 1 reads in odd rounds: next-round conflicts.
    let shared = AtomicU64::new(0);
    let r = run_rounds(
        2,
        ROUNDS,
        |_| (),
        |_, core, round| match (core, round % 2) {
            (0, 0) => shared.store(round, Ordering::Relaxed),
            (1, 1) => {
                shared.load(Ordering::Relaxed);
            }
            _ => {}
        },
        |_, _| {},
    );
    let a = analyze(&r.ops, &r.background, 0);
    // Core 0's write in round r meets core 1's read in r + 1 (all ROUNDS / 2 writes conflict);
    // core 1's read in round r meets core 0's write in r + 1, except in the last round.
    assert_eq!(a.max_conflicts_per_op, 1);
    let expected = (ROUNDS / 2 + ROUNDS / 2 - 1) as f64 / (2 * ROUNDS) as f64;
    assert_eq!(a.conflicts_per_op, expected, "{a:?}");

    // Core 0 writes in rounds 0, 4, 8, ...; core 1 reads in rounds 2, 6, ...: two apart.
    let r = run_rounds(
        2,
        ROUNDS,
        |_| (),
        |_, core, round| match (core, round % 4) {
            (0, 0) => shared.store(round, Ordering::Relaxed),
            (1, 2) => {
                shared.load(Ordering::Relaxed);
            }
            _ => {}
        },
        |_, _| {},
    );
    let a = analyze(&r.ops, &r.background, 0);
    assert_eq!(a.conflicts_per_op, 0.0, "{a:?}");
}

#[test]
fn a_shared_lock_word_conflicts_read_locked_or_not() {
    let m = Mutex::new(0u64);
    let rw = RwLock::new(0u64);
    let r = run_rounds(
        CORES,
        ROUNDS,
        |_| (),
        |_, _, _| {
            *m.lock() += 1;
        },
        |_, _| {},
    );
    let a = analyze(&r.ops, &r.background, WARMUP);
    assert_eq!(a.conflicts_per_op, 1.0, "{a:?}");
    assert!(a.lines[0].site.contains("planted.rs"));
    let r = run_rounds(
        CORES,
        ROUNDS,
        |_| (),
        |_, _, _| {
            assert_eq!(*rw.read(), 0);
        },
        |_, _| {},
    );
    let a = analyze(&r.ops, &r.background, WARMUP);
    assert_eq!(a.conflicts_per_op, 1.0, "read locks write the word: {a:?}");
    assert_eq!(m.into_inner(), CORES as u64 * ROUNDS);
}

#[test]
fn rcu_scoped_and_background_accesses_are_counted_apart() {
    let shared = AtomicU64::new(0);
    let bg_word = AtomicU64::new(0);
    let stop = std::sync::atomic::AtomicBool::new(false);
    std::thread::scope(|s| {
        // A background thread bumping a word that the operations read: RCU machinery conflicts.
        let bg = s.spawn(|| {
            let mut n = 0u64;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                bg_word.fetch_add(1, Ordering::Relaxed);
                n += 1;
                std::thread::yield_now();
            }
            n
        });
        let r = run_rounds(
            CORES,
            ROUNDS,
            |_| (),
            |_, _, _| {
                let _rcu = rcu_scope();
                shared.fetch_add(1, Ordering::Relaxed);
                // Keep the background thread in the run's rounds: wait until it moved.
                let seen = bg_word.load(Ordering::Relaxed);
                while bg_word.load(Ordering::Relaxed) == seen {
                    std::thread::yield_now();
                }
            },
            |_, _| {},
        );
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        assert!(bg.join().unwrap() > 0);
        let a = analyze(&r.ops, &r.background, WARMUP);
        assert_eq!(a.conflicts_per_op, 0.0, "all in an RCU scope: {a:?}");
        assert!(a.rcu_conflicts_per_op >= 1.0, "{a:?}");
        assert!(!r.background.is_empty());
        assert!(a.rcu_lines.iter().any(|l| l.site.contains("planted.rs")));
    });
    assert!(!record::is_recording());
}

#[test]
fn a_core_touching_its_own_line_inside_and_outside_rcu_scopes_does_not_conflict() {
    let counters: Vec<CachePadded<AtomicU64>> = (0..CORES)
        .map(|_| CachePadded::new(AtomicU64::new(0)))
        .collect();
    let r = run_rounds(
        CORES,
        ROUNDS,
        |_| (),
        |_, core, _| {
            counters[core].fetch_add(1, Ordering::Relaxed);
            let _rcu = rcu_scope();
            counters[core].fetch_add(1, Ordering::Relaxed);
        },
        |_, _| {},
    );
    let a = analyze(&r.ops, &r.background, WARMUP);
    assert_eq!(a.conflicts_per_op, 0.0, "{a:?}");
    assert_eq!(a.rcu_conflicts_per_op, 0.0, "{a:?}");
}

/// `analyze_pairs` names both sides of a conflict: a writer's site against a reader's site of
/// the same line on another core, and nothing for lines no other core touched.
#[test]
fn pairs_name_the_writer_and_the_reader_of_a_shared_line() {
    let shared = CachePadded::new(AtomicU64::new(0));
    let own: Vec<CachePadded<AtomicU64>> = (0..CORES)
        .map(|_| CachePadded::new(AtomicU64::new(0)))
        .collect();
    let r = run_rounds(
        CORES,
        ROUNDS,
        |_| (),
        |_, core, _| {
            own[core].fetch_add(1, Ordering::Relaxed);
            if core == 0 {
                shared.store(1, Ordering::Relaxed); // The writer.
            } else {
                let _ = shared.load(Ordering::Relaxed); // The readers.
            }
        },
        |_, _| {},
    );
    let pairs = aspace_conflicts::analyze_pairs(&r.ops, WARMUP);
    assert_eq!(pairs.len(), 2, "{pairs:#?}");
    // Each reader's load meets core 0's store: 3 of 4 operations.
    let read = pairs.iter().find(|p| !p.mine_write).unwrap();
    assert!(read.other_write && read.mine != read.other, "{read:?}");
    assert!((read.per_op - 0.75).abs() < 1e-9, "{read:?}");
    // Core 0's store meets the readers' loads (one distinct other site): 1 of 4.
    let write = pairs.iter().find(|p| p.mine_write).unwrap();
    assert!(!write.other_write && write.other == read.mine, "{write:?}");
    assert!((write.per_op - 0.25).abs() < 1e-9, "{write:?}");
}
