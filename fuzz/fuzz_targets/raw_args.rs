//! Fuzz target: every call of an `AddressSpace` with raw arguments; no panic, Linux's errnos,
//! results that `maps()` confirms, invariants after every call
//! (`conformance::fuzz::raw_args_input`, tests/conformance/fuzz.rs).

#![no_main]

#[allow(unused_macros)]
#[path = "../../crates/aspace-vm/tests/conformance/mod.rs"]
mod conformance;

libfuzzer_sys::fuzz_target!(|data: &[u8]| conformance::fuzz::raw_args_input(data));
