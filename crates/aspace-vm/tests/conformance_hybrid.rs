//! The `AddressSpace` conformance suite (tests/conformance/) run against `Design::Hybrid`
//! (ASPLOS'12 §5.2 hybrid locking/RCU): the random sequences compared with the sequential model,
//! the edge cases, and the stress tests, with faults that take no space lock.

#![cfg(not(loom))]

#[macro_use]
mod conformance;

address_space_conformance!(aspace_vm::Design::Hybrid);
