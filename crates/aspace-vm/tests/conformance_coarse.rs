//! The `AddressSpace` conformance suite (tests/conformance/) run against `Design::Coarse`: the
//! random sequences compared with the sequential model, the edge cases, and the stress tests.

#![cfg(not(loom))]

#[macro_use]
mod conformance;

// The random-sequence proptests are off for `coarse` until the engine's access-path livelock is
// fixed (/work/notes/engine-bugs.md, "read never returns"): with them on, the first case hangs.
// Turn them back on by dropping `, random_sequences: false`.
address_space_conformance!(aspace_vm::Design::Coarse);
