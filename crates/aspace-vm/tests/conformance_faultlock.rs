//! The `AddressSpace` conformance suite (tests/conformance/) run against `Design::FaultLock`
//! (ASPLOS'12 §5.1 fault locking): the random sequences compared with the sequential model, the
//! edge cases, and the stress tests (`concurrent_anywhere_mmaps_never_overlap` checks that a
//! placement chosen under the fault lock's read side stays valid until its edit).

#![cfg(not(loom))]

#[macro_use]
mod conformance;

address_space_conformance!(aspace_vm::Design::FaultLock);
