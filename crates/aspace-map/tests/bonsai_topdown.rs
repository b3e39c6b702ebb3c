//! `BonsaiMap`'s top-down gap search (`last_fit_excluding_writers`, the gap augmentation walked
//! right to left) and its predecessor query (`below_excluding_writers`) against a brute-force
//! model, over random sets of intervals and random `within` windows.

#![cfg(not(loom))]

use aspace_map::{BonsaiMap, IntervalMap, KEY_SPACE_END, PAGE_SIZE};
use aspace_rcu::Domain;
use proptest::prelude::*;

const P: u64 = PAGE_SIZE;

/// The highest page-aligned `a` with `[a, a + len)` inside `within` and overlapping nothing.
fn model_last_fit(set: &[(u64, u64)], within: (u64, u64), len: u64) -> Option<u64> {
    let free = |a: u64| set.iter().all(|&(s, e)| a + len <= s || e <= a);
    let top = within.1.checked_sub(len)?;
    (within.0..=top)
        .rev()
        .step_by(P as usize)
        .find(|&a| free(a))
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(300))]

    #[test]
    fn last_fit_and_below_agree_with_a_brute_force_model(
        pieces in prop::collection::vec((0u64..96, 1u64..6), 0..24),
        lo in 0u64..100,
        span in 1u64..110,
        len in 1u64..12,
        probe in 0u64..110,
    ) {
        let domain = Domain::new();
        let map = BonsaiMap::new(domain.clone());
        for &(at, n) in &pieces {
            map.map(at * P..(at + n) * P, Some(at)).unwrap();
        }
        let reader = domain.register();
        let guard = reader.read();
        let mut set = Vec::new();
        map.visit(0..KEY_SPACE_END, &guard, &mut |iv, _| {
            set.push((iv.start, iv.end));
            std::ops::ControlFlow::Continue(())
        })
        .unwrap();
        drop(guard);
        let within = (lo * P, (lo + span) * P);
        // SAFETY: no update of `map` runs during the calls (this thread is its only user).
        let got = unsafe { map.last_fit_excluding_writers(within.0..within.1, len * P) }.unwrap();
        prop_assert_eq!(got, model_last_fit(&set, within, len * P), "{:?} {:?}", set, within);
        // SAFETY: as above.
        let below = unsafe { map.below_excluding_writers(probe * P) }.map(|(iv, _)| iv.start);
        let want = set.iter().rev().map(|&(s, _)| s).find(|&s| s < probe * P);
        prop_assert_eq!(below, want);
    }
}

#[test]
fn last_fit_refuses_a_bad_length_like_alloc() {
    let map: BonsaiMap<u64> = BonsaiMap::new(Domain::new());
    // SAFETY: no update runs.
    assert!(unsafe { map.last_fit_excluding_writers(0..16 * P, 0) }.is_err());
    // SAFETY: no update runs.
    assert!(unsafe { map.last_fit_excluding_writers(0..16 * P, P + 1) }.is_err());
    // SAFETY: no update runs.
    let top = unsafe { map.last_fit_excluding_writers(0..16 * P, 4 * P) };
    assert_eq!(top.unwrap(), Some(12 * P));
}
