//! The address space: a software MMU with Linux `mmap` semantics over real memory, for
//! programs that manage their own virtual memory (emulators, sandboxes, VMMs, language
//! runtimes, allocators) from many threads.
//!
//! An [`AddressSpace`] (built with [`AddressSpace::builder`]) manages a virtual address range
//! `[min_addr, max_addr)` over a pool of real 4 KiB frames. Threads attach as *cores*
//! ([`AddressSpace::attach`]) and call `mmap`, `munmap`, `mprotect`, `madvise`, `read`, `write`
//! and `touch` through their [`CoreHandle`]; the space answers `maps()` (like
//! `/proc/self/maps`) and `stats()`. Cloning an `AddressSpace` gives another handle on the same
//! space. No API needs `unsafe`.
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
//! # Which design
//!
//! A [`Design`] is the space's concurrency strategy: how threads share the region set and the
//! page faults. All designs give the same answers (one conformance suite, one differential
//! test against the kernel); they differ in speed, and in where `mmap` without an address
//! places a mapping. Choose with [`Builder::design`]; a space that names none gets
//! [`Design::Interval`].
//!
//! | your program | design | why (measured; 2-core KVM guest, so 1 and 2 threads) |
//! |---|---|---|
//! | **one thread**: an emulator of one guest thread, a single-threaded tool | [`Design::Coarse`] | region edits 3.6-4.8x faster at one thread: `mmap` + write + `munmap` 343 ns against 1,639 ns (`local`), `mmap` 71 ns against 256 ns (`alloc`); faults cost the same (`fault-load` 91 ns both) |
//! | **many threads mapping disjoint ranges**: an allocator, per-thread heaps, vCPUs faulting their own memory | [`Design::Interval`] (default) | `alloc-fault-modify` (`mmap`, fault 512 pages, `munmap`) at 2 threads: 1.88x `coarse`, and 2.75x in a dedicated run; `interval` gains 1.13-1.83x with the second thread where `coarse` loses (0.64x). Conflict audit at 16 and 64 cores: `interval` shares no cache line between cores' operations, `coarse` 50.7 and 112 lines per operation (its lock word and broadcast shootdowns) |
//! | **fault-heavy** while other threads map and unmap | [`Design::Interval`] (default) | faults take no space lock: with one thread mapping and unmapping all the time, `interval`'s faulting thread keeps 44-99% of its undisturbed rate, `coarse`'s 5-8% (`fault-load --mmap-pct 100`) |
//! | **embedding**: a runtime or library that does not know how many threads will use the space | [`Design::Interval`] (default) | its worst case is a constant (region edits ~4x slower than `coarse` with one thread); `coarse`'s grows with the threads (every system call of every thread serializes on one lock) |
//! | **studying fault locking** (ASPLOS'12 §5.1) | [`Design::FaultLock`] | faults take only a fault lock's read side; `mmap`'s gap search runs beside them, every region edit, zap and shootdown still excludes them; not a recommendation for programs |
//! | **studying hybrid locking/RCU** (ASPLOS'12 §5.2) | [`Design::Hybrid`] | faults take no space lock (RCU-freed region objects, the tree lock around the lookup only, a fill checked against the region being replaced, one retry under the space lock); system calls take the tree lock only around their tree operations; not a recommendation for programs |
//! | **studying pure RCU faults or per-VMA locks** (ASPLOS'12 §5.3; Linux 6.4+) | [`Design::Bonsai`], [`Design::PerVma`] | faults look regions up in the Bonsai RCU tree with no lock (`pervma`: then the region's own read lock); system calls serialize on one space lock; not measured properly yet |
//! | **Linux's exact addresses** for `mmap(NULL)` (replaying a trace, comparing with the kernel) | [`Design::Coarse`], or `interval` with [`Arenas::Off`] | `interval` places `mmap(NULL)` in the calling core's arena by default |
//!
//! Sources (in the repository): `docs/results/results.csv` and `docs/results/conflicts.md` (the
//! default suite of 2026-11-24 and the conflict audit) and `CHANGELOG.md` ("IntervalVM: the
//! `interval` design (issue 11)": the dedicated run and `fault-load`). Two cores cannot show
//! scaling past two threads: the core counts beyond two come from the conflict audit, which
//! counts shared cache lines rather than time. On 2 cores `coarse` is still faster in absolute
//! terms on workloads of short region edits (`alloc` 10.2 against 5.9 M `mmap`/s at 2 threads,
//! `local` 2.4 against 1.0 M/s): its one lock costs little with two threads.
//!
//! **Why `interval` is the default.** A space is built to be shared by threads, and the
//! programs that embed one (VMMs, sandboxes, runtimes, allocators) run several. A user who
//! reads nothing and runs many threads on `coarse` gets a space that gets slower as they add
//! threads; a user who runs one thread on `interval` pays a bounded cost, and only on region
//! edits (faults cost the same; reads and writes take the same lock-free path in both). A
//! program that is single-threaded says so with one line.
//!
//! A multi-threaded, allocator-like program (each thread maps, touches and unmaps its own
//! chunks) keeps the default and gives each thread its own core:
//!
//! ```
//! use aspace_vm::{AddressSpace, Design, MapFlags, Prot};
//!
//! const THREADS: usize = 16;
//! const CHUNK: u64 = 16 * 4096;
//! const PA: MapFlags = MapFlags::PRIVATE_ANONYMOUS;
//! let space = AddressSpace::builder()
//!     .design(Design::Interval) // the default, named here for the reader
//!     .memory(64 << 20)
//!     .build()
//!     .unwrap();
//! assert_eq!(space.config().design, Design::Interval);
//! let threads: Vec<_> = (0..THREADS)
//!     .map(|t| {
//!         let mut core = space.attach().unwrap(); // one core per thread
//!         std::thread::spawn(move || {
//!             for round in 0..8u8 {
//!                 let chunk = core.mmap(0, CHUNK, Prot::READ_WRITE, PA).unwrap();
//!                 core.write(chunk + 4096, &[round; 64]).unwrap(); // faults its page in
//!                 let mut back = [0u8; 64];
//!                 core.read(chunk + 4096, &mut back).unwrap();
//!                 assert_eq!(back, [round; 64], "thread {t}");
//!                 core.munmap(chunk, CHUNK).unwrap();
//!             }
//!         })
//!     })
//!     .collect();
//! for t in threads {
//!     t.join().unwrap();
//! }
//! assert_eq!(space.stats().frames_in_use, 0);
//! ```
//!
//! A single-threaded emulator (one guest thread, one core) asks for `coarse`:
//!
//! ```
//! use aspace_vm::{Access, AddressSpace, Design, Fault, MapFlags, Prot};
//!
//! let space = AddressSpace::builder()
//!     .design(Design::Coarse) // one thread: the fastest region edits, Linux's placement
//!     .memory(16 << 20)
//!     .build()
//!     .unwrap();
//! let mut cpu = space.attach().unwrap();
//! // The guest's heap and stack, placed top-down like Linux's.
//! let (rw, pa) = (Prot::READ_WRITE, MapFlags::PRIVATE_ANONYMOUS);
//! let heap = cpu.mmap(0, 64 * 4096, rw, pa).unwrap();
//! let stack = cpu.mmap(0, 16 * 4096, rw, pa).unwrap();
//! assert_eq!(stack + 16 * 4096, heap, "directly below, like Linux");
//! cpu.write(heap, &0xdead_beef_u32.to_le_bytes()).unwrap();
//! // A guest access outside its mappings is the guest's SIGSEGV.
//! assert_eq!(cpu.touch(0x10_0000, Access::Read), Err(Fault::Unmapped { addr: 0x10_0000 }));
//! ```
//!
//! # Threads
//!
//! One core per thread: a [`CoreHandle`] is `Send` but not `Sync`; attach it where you create
//! the thread, move it in, and drop it when the thread is done (it returns its cached frames).
//! A space has at most [`Builder::max_cores`] cores attached at once. A core that holds a
//! handle but makes no call delays nobody.
//!
//! # Hazards
//!
//! - **`fork`**: a space built before `fork()` refuses every use in the child: its calls return
//!   [`VmError::ForkedChild`] / [`Fault::ForkedChild`] (`ENOTRECOVERABLE`), `maps()` and
//!   `stats()` panic, and dropping it leaks it without taking a lock. The child may build
//!   spaces of its own.
//! - **Concurrent reads and writes of the same memory** from two cores behave like threads on
//!   x86 hardware, never like a data race: each aligned 8-byte word is seen whole, before or
//!   after a concurrent write; a write of several words is not atomic as a whole.
//! - **Out of frames**: touching more pages than [`Builder::memory`] holds is
//!   [`Fault::OutOfMemory`] at the page that could not be had; nothing else changes.
//!
//! # Inside
//!
//! A space is a design (the region store and its locks) over shared parts: software 4-level
//! page tables of atomic entries walked without locks and reclaimed through RCU
//! (`aspace-rcu`), a soft TLB per core kept coherent by a shootdown protocol that waits only for
//! cores inside an access (model-checked with loom), and frames from one `MAP_NORESERVE`
//! reservation handed out through per-core caches. Which locks each operation takes, what runs
//! lock-free under RCU, and the files that implement it are in the repository's
//! `docs/ARCHITECTURE.md` (section "aspace-vm"); the README has the benchmark results.
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
mod file;
mod fork;
mod frame_io;
mod frames;
#[cfg(feature = "vm-memory")]
mod guest_bytes;
mod handle;
mod memory;
mod page_cache;
mod page_slice;
mod page_table;
mod region;
mod reservation;
mod semantics;
mod session;
mod shared;
mod shootdown;
mod space;
pub mod stats;
mod sync;
mod tlb;
pub mod types;

pub use config::{Arenas, Builder, Config, CountLimit, Design};
pub use error::{ConfigField, Fault, Limit, VmError};
pub use file::{File, MAX_FILE_SIZE};
#[cfg(feature = "vm-memory")]
pub use guest_bytes::GuestBytes;
pub use handle::CoreHandle;
pub use memory::Memory;
pub use page_slice::{PageSlice, SliceError};
pub use session::Session;
pub use space::AddressSpace;
pub use stats::Stats;
pub use types::{Access, Advice, MapFlags, Prot, RegionInfo, Sharing, PAGE_SIZE};

/// The README's "use it as a library" example, compiled and run as a doctest.
#[cfg(doctest)]
#[doc = include_str!("../../../README.md")]
pub struct ReadmeDoctests;
