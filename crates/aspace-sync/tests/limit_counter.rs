//! `LimitCounter` against a model (proptest) and under many threads hammering at the limit.
//!
//! Sequentially, the counter must behave exactly like a plain number with a limit: `try_add`
//! succeeds iff `model + n <= limit`, and `sum()` is the model after every step, whatever the
//! cores, batch and order. Concurrently, the true total (tracked beside the counter) must never
//! pass the limit and the final sum must be exact. The exact counters are checked alike through
//! the `Counter` trait; `PercpuCounter`, which is not exact, is checked only for its final sum.
#![cfg(not(loom))]

use aspace_sync::{AtomicCounter, Counter, LimitCounter, PercpuCounter};
use proptest::prelude::*;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering::SeqCst};

#[derive(Clone, Debug)]
enum Op {
    Add { core: usize, n: u64 },
    Sub { core: usize, n: u64 },
}

fn op(cores: usize, limit: u64) -> impl Strategy<Value = Op> {
    prop_oneof![
        3 => (0..cores * 2, 0..=limit / 4 + 2).prop_map(|(core, n)| Op::Add { core, n }),
        2 => (0..cores * 2, 0..=limit / 4 + 2).prop_map(|(core, n)| Op::Sub { core, n }),
    ]
}

/// Runs `ops` on `counter` against the model; subs never give back more than the model holds.
fn check_against_model(counter: &dyn Counter, ops: &[Op]) -> Result<(), TestCaseError> {
    let limit = counter.limit();
    let mut model = 0u64;
    for op in ops {
        match *op {
            Op::Add { core, n } => {
                let ok = counter.try_add(core, n).is_ok();
                prop_assert_eq!(ok, model + n <= limit, "{:?} with model {}", op, model);
                if ok {
                    model += n;
                }
            }
            Op::Sub { core, n } => {
                let n = n.min(model);
                counter.sub(core, n);
                model -= n;
            }
        }
        prop_assert_eq!(counter.sum(), model, "after {:?}", op);
        prop_assert!(counter.sum() <= limit);
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn limit_counter_is_exact_when_quiescent(
        (cores, limit, batch, ops) in (1usize..5, 1u64..200).prop_flat_map(|(cores, limit)| (
            Just(cores),
            Just(limit),
            0..=limit / 2 + 1,
            proptest::collection::vec(op(cores, limit), 1..120),
        ))
    ) {
        check_against_model(&LimitCounter::with_batch(limit, cores, batch), &ops)?;
    }

    #[test]
    fn limit_counter_with_the_default_batch_is_exact_when_quiescent(
        (cores, limit, ops) in (1usize..5, 1u64..5_000).prop_flat_map(|(cores, limit)| (
            Just(cores),
            Just(limit),
            proptest::collection::vec(op(cores, limit), 1..120),
        ))
    ) {
        check_against_model(&LimitCounter::new(limit, cores), &ops)?;
    }

    #[test]
    fn atomic_counter_is_exact(
        (limit, ops) in (1u64..200).prop_flat_map(|limit| (
            Just(limit),
            proptest::collection::vec(op(2, limit), 1..120),
        ))
    ) {
        check_against_model(&AtomicCounter::new(limit), &ops)?;
    }
}

const THREADS: usize = 8;
const ROUNDS: usize = 20_000;

/// `THREADS` threads each take and give back units at random, each wanting up to a third of the
/// limit, so together they sit at the limit. `held` is the true total: incremented only after a
/// successful `try_add`, decremented before the `sub`, so it never runs ahead of the counter;
/// it must never pass the limit. Returns (refusals, highest `held` seen).
fn hammer(counter: &dyn Counter, exact: bool) -> (usize, u64) {
    let limit = counter.limit();
    let held = AtomicU64::new(0);
    let peak = AtomicU64::new(0);
    let refusals = AtomicUsize::new(0);
    let go = AtomicBool::new(false);
    std::thread::scope(|s| {
        for t in 0..THREADS {
            let (held, peak, refusals, go) = (&held, &peak, &refusals, &go);
            s.spawn(move || {
                let mut mine: Vec<u64> = Vec::new();
                let mut mine_total = 0u64;
                let mut x = 0x9E37_79B9_7F4A_7C15u64 ^ t as u64; // xorshift
                while !go.load(SeqCst) {
                    std::hint::spin_loop();
                }
                for _ in 0..ROUNDS {
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    let give_back = mine_total > limit / 3 || (!mine.is_empty() && x % 3 == 0);
                    if give_back {
                        let n = mine.swap_remove((x >> 8) as usize % mine.len());
                        mine_total -= n;
                        held.fetch_sub(n, SeqCst);
                        counter.sub(t, n);
                    } else {
                        let n = 1 + (x >> 8) % 4;
                        if counter.try_add(t, n).is_ok() {
                            let now = held.fetch_add(n, SeqCst) + n;
                            peak.fetch_max(now, SeqCst);
                            if exact {
                                assert!(now <= limit, "true total {now} passed the limit {limit}");
                            }
                            mine.push(n);
                            mine_total += n;
                        } else {
                            refusals.fetch_add(1, SeqCst);
                        }
                    }
                }
                // Keep what is held: the final sum must equal it.
            });
        }
        go.store(true, SeqCst);
    });
    let held = held.load(SeqCst);
    assert_eq!(counter.sum(), held, "final sum is exact");
    (refusals.load(SeqCst), peak.load(SeqCst))
}

#[test]
fn limit_counter_never_passes_the_limit_under_eight_threads() {
    // Default batch: 2_000 / 8 / 16 = 15; the switch to direct updates is at margin 120.
    let counter = LimitCounter::new(2_000, THREADS);
    assert_eq!(counter.batch(), 15);
    let (refusals, peak) = hammer(&counter, true);
    assert!(refusals > 0, "the test never reached the limit");
    assert!(
        peak > 2_000 - 120,
        "peak {peak} never entered the direct-update zone"
    );
}

#[test]
fn limit_counter_with_shared_slots_never_passes_the_limit() {
    // Three slots for eight threads: threads share credit and switch each other's mode.
    let counter = LimitCounter::with_batch(600, 3, 8);
    let (refusals, _) = hammer(&counter, true);
    assert!(refusals > 0, "the test never reached the limit");
}

#[test]
fn atomic_counter_never_passes_the_limit_under_eight_threads() {
    let (refusals, _) = hammer(&AtomicCounter::new(2_000), true);
    assert!(refusals > 0, "the test never reached the limit");
}

#[test]
fn percpu_counter_final_sum_is_exact() {
    // Not exact at the limit (that is its documented weakness): only the sum is checked.
    hammer(&PercpuCounter::new(2_000, THREADS), false);
}
