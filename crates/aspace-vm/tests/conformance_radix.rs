//! The `AddressSpace` conformance suite (tests/conformance/) run against `Design::Radix`
//! (RadixVM: the regions in the radix tree, per-core page tables): the random sequences
//! compared with the sequential model, the edge cases, and the stress tests.

#![cfg(not(loom))]

#[macro_use]
mod conformance;

address_space_conformance!(aspace_vm::Design::Radix);
