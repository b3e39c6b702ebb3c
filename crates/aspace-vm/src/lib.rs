//! The address space: a software MMU with Linux `mmap` semantics over real memory.
//!
//! What will live here (DESIGN §6): the frame allocator over one `MAP_NORESERVE` reservation,
//! software 4-level page tables, per-core soft TLBs with broadcast and targeted shootdown,
//! region semantics (`mmap`/`munmap`/`mprotect`/`madvise`/`fork`), and the seven concurrency
//! designs (`coarse`, `faultlock`, `hybrid`, `bonsai`, `pervma`, `radix`, `interval`). It is built
//! on the interval maps of `aspace-map`; nothing is implemented yet (the address-space issue).
//!
//! Not for: interval-map algorithms (in `aspace-map`) or benchmarking (in `aspace-bench`).

/// The README's "use it as a library" example, compiled and run as a doctest.
#[cfg(doctest)]
#[doc = include_str!("../../../README.md")]
pub struct ReadmeDoctests;
