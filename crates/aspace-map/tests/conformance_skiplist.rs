//! The `IntervalMap` conformance suite run against `SkipListMap` (no arenas), whose structural
//! check (level 0 sorted and disjoint, every upper level a subsequence of level 0 with heights
//! that fit, no tag left at rest, `len` recomputed) runs after every step of the property test
//! and at the end of the concurrent tests.

#![cfg(not(loom))]

#[macro_use]
mod conformance;

use aspace_map::SkipListMap;

impl<V: Clone + Send + Sync + 'static> conformance::Checked for SkipListMap<V> {
    fn check(&self) {
        self.check_invariants();
    }
}

interval_map_conformance!(SkipListMap);
