//! The `IntervalMap` conformance suite run against `BTreeIntervalMap` (the locked baseline).

#![cfg(not(loom))]

#[macro_use]
mod conformance;

use aspace_map::BTreeIntervalMap;

impl<V> conformance::Checked for BTreeIntervalMap<V> {
    /// The B-tree has no structure of its own to check beyond what the suite compares.
    fn check(&self) {}
}

interval_map_conformance!(BTreeIntervalMap);
