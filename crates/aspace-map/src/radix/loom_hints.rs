//! Loom models of the radix map's per-core allocation hints (`radix/alloc.rs`: install, advance,
//! retreat), on the real [`Hints`] with a loom atomic standing for the free's commit.
//!
//! - `a_free_racing_an_install_never_leaves_the_hint_above_it`: core 1 installs a new range and
//!   searches it (a load of the commit word stands for its walk of the tree), then advances its
//!   hint past the freed page if its search did not see the free; core 0 commits the free of a
//!   page inside that range and retreats the hints. Whatever the interleaving, the hint must
//!   end at or below the freed page (first fit stays exact): either the retreat reads the
//!   installed range and bumps the version (the advance fails, or the retreat moves the hint
//!   back after it), or the search sees the free. Caught mutations: `NoRetreatFence` (the
//!   retreat reads the ranges without its `SeqCst` fence: it reads the old range while the
//!   search misses the free, a store-buffering outcome) and `RangeAfterFence` (the install
//!   stores its range after its fence): loom reports "the hint ended above the freed page".
//!
//! Run: `CARGO_TARGET_DIR=target/loom RUSTFLAGS="--cfg loom" cargo test --release -p aspace-map
//! --lib radix::loom_hints`.

use super::alloc::{HintMutant, Hints};
use crate::contract::{Interval, PAGE_SIZE as P};
use crate::sync::{AtomicU64, Ordering};
use loom::thread;
use std::sync::Arc;

/// The freed page's address.
const FREED: u64 = 4 * P;

/// The model (see the module doc) with `mutant`.
fn free_racing_an_install(mutant: HintMutant) {
    let mut hints = Hints::new(2);
    hints.mutant = mutant;
    // Core 1 allocated elsewhere before: the install below is of a new range.
    let _ = hints.read(1, Interval::new(64 * P, 128 * P).unwrap());
    let hints = Arc::new(hints);
    let committed = Arc::new(AtomicU64::new(0));
    let searcher = {
        let (hints, committed) = (Arc::clone(&hints), Arc::clone(&committed));
        thread::spawn(move || {
            let within = Interval::new(0, 16 * P).unwrap();
            let (seen, _) = hints.read(1, within);
            // The walk: it finds the freed page if it sees the commit, else the first fit is
            // past it.
            let to = if committed.load(Ordering::Acquire) == 1 {
                FREED
            } else {
                8 * P
            };
            hints.advance(1, seen, to);
        })
    };
    // The free: its commit (a Release store in the tree), then the retreat.
    committed.store(1, Ordering::Release);
    hints.retreat(FREED, FREED + P);
    searcher.join().unwrap();
    assert!(
        hints.address(1) <= FREED,
        "the hint ended above the freed page: {:#x}",
        hints.address(1)
    );
}

fn model(f: impl Fn() + Sync + Send + 'static) {
    let mut b = loom::model::Builder::new();
    if b.preemption_bound.is_none() {
        b.preemption_bound = Some(3);
    }
    b.check(f);
}

fn model_fails(f: impl Fn() + Sync + Send + 'static) {
    let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        let mut b = loom::model::Builder::new();
        b.preemption_bound = Some(3);
        b.check(f);
    }));
    let payload = r.expect_err("the mutant passed the model");
    let text = payload
        .downcast_ref::<String>()
        .map(String::as_str)
        .or_else(|| payload.downcast_ref::<&str>().copied())
        .unwrap_or("");
    assert!(
        text.contains("the hint ended above the freed page"),
        "the mutant failed for another reason: {text}"
    );
}

#[test]
fn a_free_racing_an_install_never_leaves_the_hint_above_it() {
    model(|| free_racing_an_install(HintMutant::None));
}

#[test]
fn a_free_racing_an_install_fails_without_the_retreat_fence() {
    model_fails(|| free_racing_an_install(HintMutant::NoRetreatFence));
}

#[test]
fn a_free_racing_an_install_fails_when_the_range_is_stored_after_the_fence() {
    model_fails(|| free_racing_an_install(HintMutant::RangeAfterFence));
}
