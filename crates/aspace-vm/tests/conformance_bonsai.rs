//! The `AddressSpace` conformance suite (tests/conformance/) run against `Design::Bonsai`
//! (ASPLOS'12 §5.3 pure RCU): the random sequences compared with the sequential model, the edge
//! cases, and the stress tests (lock-free faults beside the space lock's edits).

#![cfg(not(loom))]

#[macro_use]
mod conformance;

address_space_conformance!(aspace_vm::Design::Bonsai);
