//! An emulator-shaped example of embedding aspace: a small interpreter whose guest memory is an
//! address space.
//!
//! - **Guest threads are cores**: each guest thread is an OS thread with its own
//!   [`aspace_vm::CoreHandle`] of one shared space ([`memory::AspaceMemory`]).
//! - **Guest memory system calls are served by the space**: `mmap`, `munmap`, `mprotect`,
//!   `madvise` with Linux's numbers and return conventions ([`machine`]).
//! - **Guest faults are guest signals**: a load or store that faults runs the guest's SIGSEGV
//!   handler with the address and `si_code`, or stops the thread with a clean
//!   [`machine::Exit::Signal`].
//!
//! The instruction set ([`isa`]) is a compact register machine rather than RV64I: the example
//! is about the memory, and its programs are written with a small assembler in [`guest`]. The
//! interpreter is generic over [`memory::Memory`], with a plain-`Vec` backend beside the aspace
//! one, so the cost of the MMU can be measured: `aspace` workload `interp` (designs `aspace`,
//! `vec`). `cargo run --release -p aspace-emu --example threads` runs the checked demo.
//!
//! Not for: a real emulator (no instruction fetch from guest memory, no decoding, one signal).

pub mod guest;
pub mod isa;
pub mod machine;
pub mod memory;
