//! The `AddressSpace` conformance suite (tests/conformance/) run against `Design::FaultLock`
//! (ASPLOS'12 §5.1 fault locking): the random sequences compared with the sequential model, the
//! edge cases, and the stress tests (`tests/faultlock.rs` has the test of its own step).

#![cfg(not(loom))]

#[macro_use]
mod conformance;

address_space_conformance!(aspace_vm::Design::FaultLock);
