//! The `AddressSpace` conformance suite (tests/conformance/) run against `Design::PerVma`
//! (Linux 6.4+ per-VMA locks over the Bonsai tree): the random sequences compared with the
//! sequential model, the edge cases, and the stress tests.

#![cfg(not(loom))]

#[macro_use]
mod conformance;

address_space_conformance!(aspace_vm::Design::PerVma);
