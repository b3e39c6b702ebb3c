//! Fuzz target: operation sequences on an `AddressSpace`, compared with the sequential model after
//! every step (`conformance::fuzz::ops_input`, tests/conformance/fuzz.rs).

#![no_main]

#[allow(unused_macros)]
#[path = "../../crates/aspace-vm/tests/conformance/mod.rs"]
mod conformance;

libfuzzer_sys::fuzz_target!(|data: &[u8]| conformance::fuzz::ops_input(data));
