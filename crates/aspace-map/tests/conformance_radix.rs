//! The `IntervalMap` conformance suite run against `RadixMap`, whose structural check (no lock
//! or descriptor left at rest, used-slot counts and back references, no empty node but the
//! root, every record covered exactly by the slots that point to it, `len`) runs after every
//! step of the property test and at the end of the concurrent tests.

#![cfg(not(loom))]

#[macro_use]
mod conformance;

use aspace_map::RadixMap;

impl<V: Clone + Send + Sync + 'static> conformance::Checked for RadixMap<V> {
    fn check(&self) {
        self.check_invariants();
    }
}

interval_map_conformance!(RadixMap);
