//! The address space: a software MMU with Linux `mmap` semantics over real memory.
//!
//! An [`AddressSpace`] (built with [`AddressSpace::builder`]) manages a virtual address range
//! `[min_addr, max_addr)` over a pool of real 4 KiB frames. Threads attach as *cores*
//! ([`AddressSpace::attach`]) and call `mmap`, `munmap`, `mprotect`, `madvise`, `read`, `write`
//! and `touch` through their [`CoreHandle`]; the space answers `maps()` (like
//! `/proc/self/maps`) and `stats()`. DESIGN §6 is the blueprint; the components are:
//!
//! | file | what |
//! |---|---|
//! | `semantics.rs` | argument checks and Linux's rules per call (verified against the kernel) |
//! | `region.rs` | regions and the region set: splitting, Linux's merging, `max_map_count` |
//! | `designs/` | the concurrency designs (`coarse` so far) behind one internal interface |
//! | `handle.rs` | a core's state and the access path (TLB, walk, fault, retry) |
//! | `space.rs` | the shared state, attach/detach, statistics |
//! | `frames.rs`, `reservation.rs` | frames: one `MAP_NORESERVE` reservation, per-core caches |
//! | `page_table.rs` | software 4-level page tables, lock-free walks, RCU-reclaimed tables |
//! | `tlb.rs`, `shootdown.rs` | per-core soft TLB; the shootdown protocol (loom-modelled) |
//!
//! ```
//! use aspace_vm::{Access, AddressSpace, Advice, MapFlags, Prot};
//!
//! let space = AddressSpace::builder().memory(16 << 20).build().unwrap();
//! let mut core = space.attach().unwrap();
//! let a = core.mmap(0, 8192, Prot::READ_WRITE, MapFlags::PRIVATE_ANONYMOUS).unwrap();
//! core.write(a + 4090, b"hello").unwrap();           // spans two pages
//! let mut buf = [0u8; 5];
//! core.read(a + 4090, &mut buf).unwrap();
//! assert_eq!(&buf, b"hello");
//! core.madvise(a, 8192, Advice::DONTNEED).unwrap(); // private pages read back as zero
//! core.read(a + 4090, &mut buf).unwrap();
//! assert_eq!(buf, [0; 5]);
//! core.mprotect(a, 4096, Prot::READ).unwrap();
//! assert_eq!(core.touch(a, Access::Write).unwrap_err().si_code(), Some(2)); // SEGV_ACCERR
//! core.munmap(a, 8192).unwrap();
//! assert_eq!(core.touch(a, Access::Read).unwrap_err().si_code(), Some(1)); // SEGV_MAPERR
//! assert_eq!(space.stats().frames_in_use, 0);
//! ```
//!
//! # The lock and RCU contract (all designs; `coarse` fills in the design lock)
//!
//! Lock order, outermost first; nothing is ever taken in the other direction:
//!
//! 1. **the design's space lock** (`coarse`: one `parking_lot::RwLock` around the region set).
//!    Faults take it for reading; `mmap`/`munmap`/`mprotect`/`madvise` for writing, for their
//!    whole duration, including the shootdown wait. `maps()`/`stats()` read it.
//! 2. **a leaf page table's fill lock** (a bit in the level-2 entry), taken by `fill`,
//!    `clear_range` and `protect_range` for one leaf at a time.
//! 3. **the frame pool's global free list** (`Mutex`), taken by a core's cache to refill or
//!    spill a batch; and the page tables' retired list / table pools (`Mutex`), leaves.
//!
//! Lock-free, and what protects them:
//! - **Page-table walks** (`PageTables::lookup`) take no lock; a core walks only inside an
//!   access window while holding its `aspace_rcu` read guard, so a table unlinked by
//!   `free_tables` is not reused before the walk ends (tables are recycled after a grace
//!   period). Entries are published with `Release` and read with `Acquire`.
//! - **The soft TLB** is private to its core; it is used only inside an access window.
//! - **Frames** are read and written through raw pointers inside an access window.
//!
//! **The access window** (`Shootdown::begin_access` .. `end_access`) is what protects a
//! translation (TLB entry or walked PTE) and the frame behind it: a shooter that removed a
//! translation (PTE cleared or downgraded, under the space write lock) waits in `shootdown`
//! until every core that was inside a window when it bumped the requests has left it, and every
//! core entering a window afterwards flushes its TLB first. Frames are freed (zeroed, reused)
//! only after that `shootdown` returned. Cores never block inside a window (no lock is taken
//! there; a fault leaves the window, takes the space lock, fills, and retries), so a shooter
//! holding the write lock cannot deadlock with them, and an idle core never delays anyone.
//!
//! **Page-table freeing**: after `munmap`, the design frees the tables covering the unmapped
//! range widened to its neighbouring gaps (SOSP'25 §3.1, Fig. 4) under the write lock (no fill
//! can run in a range without regions), through the RCU domain.
//!
//! Not for: interval-map algorithms (in `aspace-map`) or benchmarking (in `aspace-bench`).

#![deny(unsafe_op_in_unsafe_fn)]

mod access;
pub mod config;
mod core_state;
mod counters;
mod designs;
pub mod error;
mod frame_io;
mod frames;
mod handle;
mod page_table;
mod region;
mod reservation;
mod semantics;
mod shared;
mod shootdown;
mod space;
pub mod stats;
mod sync;
mod tlb;
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
