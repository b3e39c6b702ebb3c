//! The `IntervalMap` conformance suite run against `BTreeIntervalMap` (the locked baseline),
//! whose structural check (the free-gap index equals the complement of the intervals,
//! recomputed from scratch) runs after every step of the property test.

#![cfg(not(loom))]

#[macro_use]
mod conformance;

use aspace_map::BTreeIntervalMap;

impl<V> conformance::Checked for BTreeIntervalMap<V> {
    fn check(&self) {
        self.check_invariants();
    }
}

interval_map_conformance!(BTreeIntervalMap);
