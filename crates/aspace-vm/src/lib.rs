//! The address space: a software MMU with Linux `mmap` semantics over real memory.
//!
//! What will live here (DESIGN §6): the frame allocator over one `MAP_NORESERVE` reservation,
//! software 4-level page tables, per-core soft TLBs with broadcast and targeted shootdown,
//! region semantics (`mmap`/`munmap`/`mprotect`/`madvise`/`fork`), and the seven concurrency
//! designs (`coarse`, `faultlock`, `hybrid`, `bonsai`, `pervma`, `radix`, `interval`).
//!
//! Not for: interval-map algorithms (in `aspace-map`) or benchmarking (in `aspace-bench`).

#![deny(unsafe_op_in_unsafe_fn)]

pub mod config;
pub mod error;
mod handle;
mod space;
pub mod stats;
pub mod types;

pub use config::{Builder, Config, Design};
pub use error::{Fault, Limit, VmError};
pub use handle::CoreHandle;
pub use space::AddressSpace;
pub use stats::Stats;
pub use types::{Access, Advice, MapFlags, Prot, RegionInfo, Sharing, PAGE_SIZE};

/// The README's "use it as a library" example, compiled and run as a doctest.
#[cfg(doctest)]
#[doc = include_str!("../../../README.md")]
pub struct ReadmeDoctests;
