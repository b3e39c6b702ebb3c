//! The `IntervalMap` conformance suite run against `BonsaiMap`, whose structural check (BST
//! order, disjointness, subtree sizes recomputed, Adams' weight balance at every node) runs after
//! every step of the property test and at the end of the concurrent tests.

#![cfg(not(loom))]

#[macro_use]
mod conformance;

use aspace_map::BonsaiMap;

impl<V: Clone + Send + Sync + 'static> conformance::Checked for BonsaiMap<V> {
    fn check(&self) {
        self.check_invariants();
    }
}

interval_map_conformance!(BonsaiMap);
