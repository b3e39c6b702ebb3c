//! The address space: a software MMU with Linux `mmap` semantics over real memory.
//!
//! An [`AddressSpace`] (built with [`AddressSpace::builder`]) manages a virtual address range
//! `[min_addr, max_addr)` over a pool of real 4 KiB frames. Threads attach as *cores*
//! ([`AddressSpace::attach`]) and call `mmap`, `munmap`, `mprotect`, `madvise`, `read`, `write`
//! and `touch` through their [`CoreHandle`]; the space answers `maps()` (like
//! `/proc/self/maps`) and `stats()`. Cloning an `AddressSpace` gives another handle on the same
//! space. Inside, a space is:
//!
//! - a **design**: the region store (the papers' VMA tree) and the locks around it; the design
//!   is a lock policy over Linux's rules for each call, which every design shares (`coarse`, one
//!   reader-writer lock like `mmap_sem`; `interval`, SOSP'25's IntervalVM; see [`Design`]);
//! - **page tables**: software 4-level tables of atomic entries, walked without locks, their
//!   tables reclaimed through RCU (`aspace-rcu`);
//! - per core, a **soft TLB**, kept coherent by a **shootdown** protocol that waits only for
//!   cores inside an access (model-checked with loom);
//! - **frames**: 4 KiB pages of one `MAP_NORESERVE` reservation, handed out through per-core
//!   caches, zeroed before reuse.
//!
//! The repository's `docs/ARCHITECTURE.md` maps these to source files and lists each crate's
//! locks.
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
//! Several threads, one core each (the handle may move between threads; it is `Send`, not
//! `Sync`):
//!
//! ```
//! use aspace_vm::{AddressSpace, MapFlags, Prot};
//!
//! let space = AddressSpace::builder().memory(16 << 20).build().unwrap();
//! let workers: Vec<_> = (0..4u8)
//!     .map(|i| {
//!         let mut core = space.attach().unwrap(); // attach here, use in the thread
//!         std::thread::spawn(move || {
//!             let a = core.mmap(0, 4096, Prot::READ_WRITE, MapFlags::PRIVATE_ANONYMOUS).unwrap();
//!             core.write(a, &[i; 64]).unwrap();
//!             let mut back = [0u8; 64];
//!             core.read(a, &mut back).unwrap();
//!             assert_eq!(back, [i; 64]);
//!             core.munmap(a, 4096).unwrap();
//!         })
//!     })
//!     .collect();
//! for w in workers {
//!     w.join().unwrap();
//! }
//! assert_eq!(space.stats().frames_in_use, 0);
//! ```
//!
//! # The lock and RCU contract (all designs)
//!
//! Lock order, outermost first; nothing is ever taken in the other direction:
//!
//! 1. **the design's space lock**: `coarse`: one `parking_lot::RwLock` around the region set,
//!    faults read it, `mmap`/`munmap`/`mprotect`/`madvise` write it for their whole duration
//!    (shootdown wait included). `interval`: the hybrid-granular lock (`aspace_sync::HybridLock`),
//!    LR for faults that need locks, LW for system calls, GR for `maps()`/`stats()`, GW for the
//!    placement fallback; then
//! 2. (`interval`) **the region skiplist's interval lock** of the range a call reads or changes,
//!    widened to whole regions and their neighbours, held until the call's edit is published
//!    (`designs/interval/window.rs`);
//! 3. **a leaf page table's fill lock** (a bit in the level-2 entry), taken by `fill`,
//!    `fill_checked`, `clear_range` and `protect_range` for one leaf at a time;
//! 4. **the frame pool's global free list** (`Mutex`), taken by a core's cache to refill or
//!    spill a batch; and the page-table pool's shared lists and per-slot returned lists (`Mutex`), leaves.
//!
//! Lock-free, and what protects them:
//! - **Page-table walks** take no lock; a core walks only inside an access window while
//!   holding its `aspace_rcu` read guard, so a table unlinked by an `munmap` is not reused
//!   before the walk ends (tables are recycled after a grace period). Entries are published
//!   with `Release` and read with `Acquire`.
//! - **`interval`'s first fault stage** takes no space lock: an RCU read section (the region
//!   skiplist shares the space's domain), a lock-free region lookup, and a fill that installs no
//!   table and goes ahead under the leaf lock only if no edit marked the region replaced
//!   (`designs/interval.rs` has the argument and the loom models).
//! - **The soft TLB** is private to its core; it is used only inside an access window.
//! - **Frames** are read and written inside an access window, in aligned 64-bit atomic words
//!   (like rust-vmm's `vm-memory`): a concurrent reader of a word sees it whole, before or after
//!   a write.
//!
//! **The access window** (begun and ended around every `read`/`write`/`touch`) is what protects a
//! translation (TLB entry or walked PTE) and the frame behind it: a shooter that removed a
//! translation (PTE cleared or downgraded, under the design's lock) waits in `shootdown`
//! until every targeted core that was inside a window when it bumped the requests has left it,
//! and every such core entering a window afterwards flushes its TLB first. Frames are freed
//! (zeroed, reused) only after that `shootdown` returned. (Under the targeted policy, the
//! `interval` design's, the shooter reaches only the cores that the changed leaf tables record
//! as possible holders: a core records itself in a leaf before a walk reads the entry it
//! caches; `page_table/users.rs`.) Cores never block inside a window (no lock is taken there; a
//! fault leaves the window, takes the design's locks, fills, and retries), so a shooter holding
//! locks cannot deadlock with them, and an idle core never delays anyone. The window is a guard
//! type that borrows the core mutably, so a design operation (which needs the core mutably)
//! cannot be called inside one: a compile error, not a precondition.
//!
//! **Page-table freeing**: after `munmap`, the design frees the tables covering the unmapped
//! range widened to its neighbouring gaps (SOSP'25 §3.1, Fig. 4) while it still excludes every
//! fill that could install a table there (`coarse`: the write lock; `interval`: the interval
//! lock, which holds those gaps), through the RCU domain.
//!
//! **Region store**: the Linux bodies (functions named `*_locked`) take the store borrowed from
//! the design's guard: `&mut` for system calls (`coarse`: the write lock; `interval`: a window),
//! `&` for faults; a first write fault may set a region's anon identity under `&` (once, by
//! compare-exchange).
//!
//! Not for: interval-map algorithms (in `aspace-map`) or benchmarking (in `aspace-bench`).

#![deny(unsafe_op_in_unsafe_fn)]

mod access;
pub mod config;
mod core_state;
mod counters;
mod designs;
pub mod error;
#[cfg(all(test, not(loom)))]
mod fault_inject;
mod fork;
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

pub use config::{Arenas, Builder, Config, CountLimit, Design};
pub use error::{ConfigField, Fault, Limit, VmError};
pub use handle::CoreHandle;
pub use space::AddressSpace;
pub use stats::Stats;
pub use types::{Access, Advice, MapFlags, Prot, RegionInfo, Sharing, PAGE_SIZE};

/// The README's "use it as a library" example, compiled and run as a doctest.
#[cfg(doctest)]
#[doc = include_str!("../../../README.md")]
pub struct ReadmeDoctests;
