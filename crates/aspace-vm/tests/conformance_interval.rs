//! The `AddressSpace` conformance suite (tests/conformance/) run against `Design::Interval`
//! with its defaults (arenas `Auto`: on in the suite's large layout, off where the space is too
//! small for them; the per-core region counter): the random sequences compared with the
//! sequential model, the edge cases, and the stress tests.

#![cfg(not(loom))]

#[macro_use]
mod conformance;

address_space_conformance!(aspace_vm::Design::Interval);
