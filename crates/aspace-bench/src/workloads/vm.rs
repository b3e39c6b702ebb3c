//! The address-space designs of the VM workloads behind one driver trait, and the
//! plumbing every VM workload shares: `linux` (the real kernel, in this process) and every
//! `aspace_vm` design (`coarse`, ...).
//!
//! # The driver
//! A [`VmDriver`] is one address space for one repeat; each measuring thread attaches a
//! [`VmCore`] (before the start barrier) and does all its work through it: anonymous private
//! read-write `mmap` (with a hint, or with `MAP_FIXED` replacing), `munmap`, one-byte loads
//! and stores that fault pages in, and bulk reads and writes (a page of records at a time). Workloads are generic over the driver ([`VmBench::run_vm`]),
//! so the measured loop is monomorphised per design: no dynamic dispatch on the hot path of
//! either the kernel or the engine.
//!
//! - `linux` ([`LinuxDriver`]): `libc::mmap`/`munmap` of this process and volatile stores and
//!   loads to the returned addresses; a store to a fresh page is a real (soft) page fault. This
//!   file is the crate's one audited raw-`mmap` module. Every address the workloads touch or
//!   unmap was returned by this driver's `mmap` and is owned by the calling workload (see the
//!   `# Safety` sections of [`VmCore`]), so the kernel design never touches or unmaps memory of
//!   the rest of the process. Hints lie in [`HINT_BASE`]`..` (16 TiB and up), far below the
//!   kernel's top-down area for unhinted mappings (`0x7f..`) and above the executable and heap
//!   (`0x55..`), so they are free in practice; a hint that is taken anyway is simply not honoured
//!   (the workloads use the returned address), and `MAP_FIXED` is only used over a range the
//!   workload mapped itself ([`VmCore::mmap_fixed_noreplace`] first).
//! - `aspace_vm` designs ([`AspaceDriver`]): one `AddressSpace` per repeat with
//!   [`ASPACE_MEMORY`] bytes of frames (one `MAP_NORESERVE` reservation, only touched pages are
//!   real), the default address range `[64 KiB, 2^47)` and `max_map_count` (65,530, Linux's) and
//!   a core slot per thread; the same hints as `linux`, so both designs see the same layout.
//!
//! THP: this machine runs `transparent_hugepage=madvise`, so no `linux` mapping here gets huge
//! pages (nothing calls `madvise(MADV_HUGEPAGE)`); `alloc-fault-modify` reports the faults it
//! measured per iteration (`faults_per_iter`, 512 expected) so a kernel with THP `always` would
//! show up in the numbers instead of silently making the kernel look 512x faster.
//!
//! Not for: correctness checks of the engine (its conformance, differential and security tests
//! do that), or file-backed mappings.

use crate::error::BenchError;
use crate::workload::{Baseline, Config, RatioStyle, Sample, Workload};
use aspace_vm::{
    AddressSpace, Advice, Arenas, Builder, CoreHandle, CountLimit, Design, MapFlags, Prot,
};
use std::sync::OnceLock;

/// Size of a page.
pub const PAGE: u64 = aspace_vm::PAGE_SIZE;

/// Start of the workloads' hinted area (16 TiB).
pub const HINT_BASE: u64 = 1 << 44;

/// Bytes one last-level page table covers (512 pages), in Linux and in the engine.
pub const TABLE_SPAN: u64 = 512 * PAGE;

/// Thread `t`'s home: a 1 GiB-aligned hinted area of its own, so threads never share a
/// last-level or a second-level page table (`local`, `pipeline`, `fault-load`).
pub fn home(t: usize) -> u64 {
    HINT_BASE + (t as u64) * (1 << 30)
}

/// Maps and touches one *anchor* page at `addr`, to keep the page tables covering it (and the
/// pages around it, up to [`TABLE_SPAN`]) alive while a workload maps and unmaps pages next to it.
///
/// Why: both Linux (`free_pgtables` over the gap between the neighbouring mappings) and the
/// engine (SOSP'25 §3.1, Fig. 4) free page tables that no region intersects any more. A lone
/// page mapped and unmapped in an empty area would then allocate and free three levels of
/// tables every iteration: 11 us per `local` iteration on this machine instead of 6.5 us, which
/// is a different experiment from the papers' (their processes had neighbouring mappings) and
/// from the reference figures. Returns `addr`; undo with [`unmap_anchor`].
pub fn map_anchor<C: VmCore>(core: &mut C, addr: u64) -> u64 {
    core.mmap_fixed_noreplace(addr, PAGE);
    // SAFETY: the page this thread just mapped.
    unsafe { core.store(addr, 1) };
    addr
}

/// Unmaps an anchor page of [`map_anchor`].
pub fn unmap_anchor<C: VmCore>(core: &mut C, addr: u64) {
    // SAFETY: the anchor is the workload's own page, used by nobody.
    unsafe { core.munmap(addr, PAGE) };
}

/// Bytes of frames of each `aspace_vm` space (reserved with `MAP_NORESERVE`; only touched pages
/// cost memory).
pub const ASPACE_MEMORY: u64 = 1 << 30;

/// The most threads of a VM workload: every core caches up to two [`FRAME_BATCH`]es of the
/// [`ASPACE_MEMORY`] space's 262,144 frames, and `fault-load` ran out of frames ("aspace store:
/// out of frames", a panic in the workload) at 128 threads; 64 ran.
pub const VM_MAX_THREADS: usize = 64;

/// Frames per batch between a core's cache and the pool in the benchmarks' spaces.
pub const FRAME_BATCH: usize = 512;

/// The baseline of every VM workload: the real kernel, as a multiple (`3.10x vs linux`).
pub const BASELINE: Baseline = Baseline {
    design: "linux",
    style: RatioStyle::TimesVs,
};

/// `linux` followed by every `aspace_vm` design, in report order.
pub fn designs() -> &'static [&'static str] {
    static DESIGNS: OnceLock<Vec<&'static str>> = OnceLock::new();
    DESIGNS.get_or_init(|| {
        std::iter::once("linux")
            .chain(Design::ALL.iter().map(|d| d.name()))
            .collect()
    })
}

/// The `interval` design with one of its parts swapped for the naive choice, for the breakdown
/// of SOSP'25 Fig. 14 (a workload lists them when [`VmBench::BREAKDOWN`] is set):
/// `interval-no-arenas` (every `mmap` placed top-down, Linux's strategy) and
/// `interval-atomic-counter` (the region count in one shared atomic).
pub const BREAKDOWN: &[&str] = &["interval-no-arenas", "interval-atomic-counter"];

/// [`designs`] followed by the [`BREAKDOWN`] variants.
pub fn designs_with_breakdown() -> &'static [&'static str] {
    static DESIGNS: OnceLock<Vec<&'static str>> = OnceLock::new();
    DESIGNS.get_or_init(|| designs().iter().chain(BREAKDOWN).copied().collect())
}

/// The engine configuration a design name stands for (a [`Design`] or a [`BREAKDOWN`]
/// variant), or `None` for a name that is neither.
pub fn engine_builder(name: &str) -> Option<Builder> {
    let b = AddressSpace::builder();
    match name {
        "interval-no-arenas" => Some(b.design(Design::Interval).arenas(Arenas::Off)),
        "interval-atomic-counter" => Some(
            b.design(Design::Interval)
                .count_limit(CountLimit::SharedAtomic),
        ),
        _ => Design::from_name(name).map(|d| b.design(d)),
    }
}

/// One thread's view of the address space of a [`VmDriver`].
///
/// Every mapping is anonymous, private and read-write. Failures of the real kernel or of the
/// engine are bugs of the workload (it stays within its limits), so they panic with the error.
pub trait VmCore {
    /// Maps `len` bytes at the hint `hint` (0: none, the space picks) and returns the start.
    fn mmap(&mut self, hint: u64, len: u64) -> u64;

    /// Maps `len` bytes exactly at `addr`, failing (panic) if anything is mapped there
    /// (`MAP_FIXED_NOREPLACE`).
    fn mmap_fixed_noreplace(&mut self, addr: u64, len: u64);

    /// Maps `len` bytes exactly at `addr`, replacing what is there (`MAP_FIXED`).
    ///
    /// # Safety
    /// For `linux`: `[addr, addr + len)` must lie inside mappings this workload made through this
    /// driver and no other thread may access it concurrently (the old pages are discarded).
    unsafe fn mmap_fixed(&mut self, addr: u64, len: u64);

    /// Unmaps `[addr, addr + len)`.
    ///
    /// # Safety
    /// For `linux`: the range must have been mapped by this workload through this driver (any
    /// core) and nobody may access it afterwards.
    unsafe fn munmap(&mut self, addr: u64, len: u64);

    /// `madvise(MADV_DONTNEED)` of `[addr, addr + len)`: its private pages read back as zero
    /// and their next touch faults again.
    ///
    /// # Safety
    /// For `linux`: the range must lie in a private mapping made through this driver whose
    /// contents nobody needs any more (they are dropped).
    unsafe fn dontneed(&mut self, addr: u64, len: u64);

    /// Stores `value` at `addr` (faulting the page in if needed).
    ///
    /// # Safety
    /// For `linux`: `addr` must lie in a read-write mapping made through this driver that stays
    /// mapped during the call.
    unsafe fn store(&mut self, addr: u64, value: u8);

    /// Loads the byte at `addr` (faulting the page in if needed).
    ///
    /// # Safety
    /// As for [`VmCore::store`].
    unsafe fn load(&mut self, addr: u64) -> u8;

    /// Copies `bytes` to `[addr, addr + bytes.len())` (faulting pages in as needed): a bulk
    /// store, e.g. one page of records at a time.
    ///
    /// # Safety
    /// For `linux`: the whole range must lie in read-write mappings made through this driver that
    /// stay mapped during the call, and no other thread may access it concurrently.
    unsafe fn write(&mut self, addr: u64, bytes: &[u8]);

    /// Copies `[addr, addr + buf.len())` into `buf` (faulting pages in as needed): a bulk load.
    ///
    /// # Safety
    /// For `linux`: the whole range must lie in mappings made through this driver that stay
    /// mapped during the call, and no other thread may write it concurrently.
    unsafe fn read(&mut self, addr: u64, buf: &mut [u8]);
}

/// One address space for one repeat of a VM workload.
pub trait VmDriver: Sync {
    /// A thread's handle.
    type Core: VmCore;

    /// Attaches the calling thread (before the start barrier).
    fn attach(&self) -> Self::Core;

    /// Page faults taken so far by the whole space (`linux`: the process's minor faults; an
    /// engine: its `stats().faults`). Only differences are meaningful.
    fn faults(&self) -> u64;
}

/// The real kernel (see the module doc).
#[derive(Debug, Default)]
pub struct LinuxDriver;

/// A thread of [`LinuxDriver`]: stateless, the kernel keeps everything.
#[derive(Debug)]
pub struct LinuxCore;

fn linux_mmap(addr: u64, len: u64, extra_flags: libc::c_int) -> Result<u64, std::io::Error> {
    // SAFETY: an anonymous mapping; without MAP_FIXED it never replaces existing memory, and with
    // it the callers ([`LinuxCore::mmap_fixed`]) guarantee the range is their own.
    let p = unsafe {
        libc::mmap(
            addr as *mut libc::c_void,
            len as usize,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | extra_flags,
            -1,
            0,
        )
    };
    if p == libc::MAP_FAILED {
        Err(std::io::Error::last_os_error())
    } else {
        Ok(p as u64)
    }
}

impl VmCore for LinuxCore {
    #[inline]
    fn mmap(&mut self, hint: u64, len: u64) -> u64 {
        linux_mmap(hint, len, 0).unwrap_or_else(|e| panic!("linux mmap({hint:#x}, {len}): {e}"))
    }

    fn mmap_fixed_noreplace(&mut self, addr: u64, len: u64) {
        let got = linux_mmap(addr, len, libc::MAP_FIXED_NOREPLACE)
            .unwrap_or_else(|e| panic!("linux mmap(FIXED_NOREPLACE {addr:#x}, {len}): {e}"));
        // Kernels before 4.17 ignore the flag and treat the address as a hint.
        assert_eq!(
            got, addr,
            "MAP_FIXED_NOREPLACE not honoured (kernel < 4.17?)"
        );
    }

    #[inline]
    unsafe fn mmap_fixed(&mut self, addr: u64, len: u64) {
        linux_mmap(addr, len, libc::MAP_FIXED)
            .unwrap_or_else(|e| panic!("linux mmap(FIXED {addr:#x}, {len}): {e}"));
    }

    #[inline]
    unsafe fn munmap(&mut self, addr: u64, len: u64) {
        // SAFETY: the caller guarantees the range is this workload's own mapping, unused after.
        let r = unsafe { libc::munmap(addr as *mut libc::c_void, len as usize) };
        assert_eq!(
            r,
            0,
            "linux munmap({addr:#x}, {len}): {}",
            std::io::Error::last_os_error()
        );
    }

    #[inline]
    unsafe fn dontneed(&mut self, addr: u64, len: u64) {
        // SAFETY: the caller guarantees the range is a private mapping of this workload's whose
        // contents nobody needs; DONTNEED only drops its pages.
        let r =
            unsafe { libc::madvise(addr as *mut libc::c_void, len as usize, libc::MADV_DONTNEED) };
        assert_eq!(
            r,
            0,
            "linux madvise(DONTNEED {addr:#x}, {len}): {}",
            std::io::Error::last_os_error()
        );
    }

    #[inline]
    unsafe fn store(&mut self, addr: u64, value: u8) {
        // SAFETY: the caller guarantees `addr` is in a live read-write mapping of this workload;
        // volatile so the store (and its page fault) happens exactly once, as in the papers.
        unsafe { std::ptr::write_volatile(addr as *mut u8, value) }
    }

    #[inline]
    unsafe fn load(&mut self, addr: u64) -> u8 {
        // SAFETY: as for `store`.
        unsafe { std::ptr::read_volatile(addr as *const u8) }
    }

    #[inline]
    unsafe fn write(&mut self, addr: u64, bytes: &[u8]) {
        // SAFETY: the caller guarantees the range is inside live read-write mappings of this
        // workload that nobody else accesses meanwhile, so it cannot overlap `bytes` (a Rust
        // allocation outside every mapping of this driver).
        unsafe { std::ptr::copy_nonoverlapping(bytes.as_ptr(), addr as *mut u8, bytes.len()) }
    }

    #[inline]
    unsafe fn read(&mut self, addr: u64, buf: &mut [u8]) {
        // SAFETY: the caller guarantees the range is inside live mappings of this workload that
        // nobody writes meanwhile; `buf` is a Rust allocation outside them.
        unsafe { std::ptr::copy_nonoverlapping(addr as *const u8, buf.as_mut_ptr(), buf.len()) }
    }
}

impl VmDriver for LinuxDriver {
    type Core = LinuxCore;

    fn attach(&self) -> LinuxCore {
        LinuxCore
    }

    fn faults(&self) -> u64 {
        let mut usage = std::mem::MaybeUninit::<libc::rusage>::zeroed();
        // SAFETY: getrusage writes one `rusage` into the pointer we pass, which is valid for it.
        let r = unsafe { libc::getrusage(libc::RUSAGE_SELF, usage.as_mut_ptr()) };
        assert_eq!(r, 0, "getrusage: {}", std::io::Error::last_os_error());
        // SAFETY: zero-initialised plain data, filled in by the successful call.
        let usage = unsafe { usage.assume_init() };
        usage.ru_minflt as u64
    }
}

/// An `aspace_vm` address space (see the module doc).
pub struct AspaceDriver {
    space: AddressSpace,
}

impl AspaceDriver {
    /// `sample` with the space's counters after the repeat as extra metrics: shootdown rounds
    /// and their targets (what targeted shootdown saves), and the bytes of page tables (all,
    /// and the largest core's own tree under per-core tables) and of the design's metadata
    /// left at the end of the repeat (`Stats`).
    fn with_space_stats(&self, sample: Sample) -> Sample {
        let st = self.space.stats();
        let per_round = if st.shootdowns > 0 {
            st.shootdown_targets as f64 / st.shootdowns as f64
        } else {
            0.0
        };
        let max_core = st
            .page_table_bytes_per_core
            .iter()
            .copied()
            .max()
            .unwrap_or(0);
        sample
            .with("shootdowns", st.shootdowns as f64)
            .with("targets_per_shootdown", per_round)
            .with("page_table_bytes", st.page_table_bytes as f64)
            .with("page_table_bytes_max_core", max_core as f64)
            .with("metadata_bytes", st.metadata_bytes as f64)
    }

    /// A fresh space configured as `builder` (see [`engine_builder`]) with a core slot for
    /// each of `threads` threads; `name` names it in errors.
    ///
    /// # Errors
    /// [`BenchError::InvalidArgument`] when the engine refuses the configuration.
    pub fn new(builder: Builder, name: &str, threads: usize) -> Result<AspaceDriver, BenchError> {
        Self::with_memory(builder, name, threads, ASPACE_MEMORY)
    }

    /// [`AspaceDriver::new`] with `memory` bytes of frames instead of [`ASPACE_MEMORY`] (the
    /// conflict audit runs up to 256 cores, whose frame caches alone exceed 1 GiB).
    ///
    /// # Errors
    /// [`BenchError::InvalidArgument`] when the engine refuses the configuration.
    pub fn with_memory(
        builder: Builder,
        name: &str,
        threads: usize,
        memory: u64,
    ) -> Result<AspaceDriver, BenchError> {
        // Frames move between a core's cache and the pool in batches of 512 (a cache spills at
        // twice that), a per-core working set like Linux's per-cpu page lists: with the engine's
        // default of 64, `alloc-fault-modify`'s cycle of 512 frames took the pool's global lock
        // 14 times per iteration, and that lock decided the 2-thread figure of every design.
        let space = builder
            .memory(memory)
            .frame_batch(FRAME_BATCH)
            .max_cores(threads.max(1) + 1)
            .build()
            .map_err(|e| {
                BenchError::InvalidArgument(format!("cannot build a {name} space: {e}"))
            })?;
        Ok(AspaceDriver { space })
    }

    /// The space.
    pub fn space(&self) -> &AddressSpace {
        &self.space
    }
}

/// A thread of [`AspaceDriver`]: its attached core.
pub struct AspaceCore {
    handle: CoreHandle,
}

impl VmCore for AspaceCore {
    #[inline]
    fn mmap(&mut self, hint: u64, len: u64) -> u64 {
        self.handle
            .mmap(hint, len, Prot::READ_WRITE, MapFlags::PRIVATE_ANONYMOUS)
            .unwrap_or_else(|e| panic!("aspace mmap({hint:#x}, {len}): {e}"))
    }

    fn mmap_fixed_noreplace(&mut self, addr: u64, len: u64) {
        let flags = MapFlags::PRIVATE_ANONYMOUS | MapFlags::FIXED_NOREPLACE;
        let got = self
            .handle
            .mmap(addr, len, Prot::READ_WRITE, flags)
            .unwrap_or_else(|e| panic!("aspace mmap(FIXED_NOREPLACE {addr:#x}, {len}): {e}"));
        assert_eq!(got, addr);
    }

    #[inline]
    unsafe fn mmap_fixed(&mut self, addr: u64, len: u64) {
        let flags = MapFlags::PRIVATE_ANONYMOUS | MapFlags::FIXED;
        self.handle
            .mmap(addr, len, Prot::READ_WRITE, flags)
            .unwrap_or_else(|e| panic!("aspace mmap(FIXED {addr:#x}, {len}): {e}"));
    }

    #[inline]
    unsafe fn munmap(&mut self, addr: u64, len: u64) {
        self.handle
            .munmap(addr, len)
            .unwrap_or_else(|e| panic!("aspace munmap({addr:#x}, {len}): {e}"));
    }

    #[inline]
    unsafe fn dontneed(&mut self, addr: u64, len: u64) {
        self.handle
            .madvise(addr, len, Advice::DONTNEED)
            .unwrap_or_else(|e| panic!("aspace madvise(DONTNEED {addr:#x}, {len}): {e}"));
    }

    #[inline]
    unsafe fn store(&mut self, addr: u64, value: u8) {
        self.handle
            .write(addr, &[value])
            .unwrap_or_else(|f| panic!("aspace store: {f}"));
    }

    #[inline]
    unsafe fn load(&mut self, addr: u64) -> u8 {
        let mut b = [0u8];
        self.handle
            .read(addr, &mut b)
            .unwrap_or_else(|f| panic!("aspace load: {f}"));
        b[0]
    }

    #[inline]
    unsafe fn write(&mut self, addr: u64, bytes: &[u8]) {
        self.handle
            .write(addr, bytes)
            .unwrap_or_else(|f| panic!("aspace write({addr:#x}, {}): {f}", bytes.len()));
    }

    #[inline]
    unsafe fn read(&mut self, addr: u64, buf: &mut [u8]) {
        let len = buf.len();
        self.handle
            .read(addr, buf)
            .unwrap_or_else(|f| panic!("aspace read({addr:#x}, {len}): {f}"));
    }
}

impl VmDriver for AspaceDriver {
    type Core = AspaceCore;

    fn attach(&self) -> AspaceCore {
        let handle = self
            .space
            .attach()
            .unwrap_or_else(|e| panic!("aspace attach: {e}"));
        AspaceCore { handle }
    }

    fn faults(&self) -> u64 {
        self.space.stats().faults
    }
}

/// One measured repeat of a VM workload, generic over the address space.
pub trait VmBench: Send + Sync {
    /// The command-line name.
    const NAME: &'static str;
    /// What each thread does, for `aspace list`.
    const ABOUT: &'static str;
    /// The paper figure it mirrors ([`Workload::mirrors`]).
    const MIRRORS: Option<&'static str> = None;
    /// Whether more threads do more of the same work (the report's `x vs 1T`).
    const THREAD_SCALING: bool = true;
    /// Whether the workload also runs the [`BREAKDOWN`] variants of `interval`.
    const BREAKDOWN: bool = false;
    /// The fewest threads it runs on ([`Workload::min_threads`]).
    const MIN_THREADS: usize = 1;

    /// Refuses a configuration this workload cannot run on `threads` threads (before any
    /// space is built); the default accepts everything.
    ///
    /// # Errors
    /// [`BenchError::InvalidArgument`] naming the option.
    fn check_config(&self, threads: usize, config: &Config) -> Result<(), BenchError> {
        let _ = (threads, config);
        Ok(())
    }

    /// Runs one repeat on `driver` (fresh for this repeat) with `threads` threads.
    ///
    /// # Errors
    /// [`BenchError::WrongResult`] when the workload checks its result and finds it wrong.
    fn run_vm<D: VmDriver>(
        &self,
        driver: &D,
        threads: usize,
        config: &Config,
    ) -> Result<Sample, BenchError>;
}

/// A [`VmBench`] as a [`Workload`] over [`designs`] with the `linux` baseline.
pub struct Vm<B>(pub B);

impl<B: VmBench> Workload for Vm<B> {
    fn name(&self) -> &'static str {
        B::NAME
    }
    fn about(&self) -> &'static str {
        B::ABOUT
    }
    fn mirrors(&self) -> Option<&'static str> {
        B::MIRRORS
    }
    fn designs(&self) -> &'static [&'static str] {
        if B::BREAKDOWN {
            designs_with_breakdown()
        } else {
            designs()
        }
    }
    fn baseline(&self) -> Option<Baseline> {
        Some(BASELINE)
    }
    fn thread_scaling(&self, _m: &crate::measurement::Measurement) -> bool {
        B::THREAD_SCALING
    }
    fn min_threads(&self, _config: &Config) -> usize {
        B::MIN_THREADS
    }
    fn max_threads(&self) -> usize {
        VM_MAX_THREADS
    }
    fn run(&self, design: &str, threads: usize, config: &Config) -> Result<Sample, BenchError> {
        if threads == 0 {
            return Err(BenchError::InvalidArgument(
                "a VM workload needs at least one thread".into(),
            ));
        }
        if threads < B::MIN_THREADS {
            return Err(BenchError::InvalidArgument(format!(
                "{} needs at least {} threads, got {threads}",
                B::NAME,
                B::MIN_THREADS
            )));
        }
        if config.mmap_pct > 100 {
            return Err(BenchError::InvalidArgument(format!(
                "--mmap-pct {} is above 100",
                config.mmap_pct
            )));
        }
        self.0.check_config(threads, config)?;
        let result = if design == "linux" {
            self.0.run_vm(&LinuxDriver, threads, config)
        } else if !self.designs().contains(&design) {
            return Err(self.unknown_design(design));
        } else {
            match engine_builder(design) {
                Some(b) => {
                    // Cores for the threads and for `local`'s `--idle-cores`.
                    let driver = AspaceDriver::new(b, design, threads + config.idle_cores)?;
                    let sample = self.0.run_vm(&driver, threads, config);
                    sample.map(|s| driver.with_space_stats(s))
                }
                None => return Err(self.unknown_design(design)),
            }
        };
        // The workload does not know the design's name: fill it in.
        result.map_err(|e| match e {
            BenchError::WrongResult {
                workload, message, ..
            } => BenchError::WrongResult {
                workload,
                design: design.to_string(),
                message,
            },
            e => e,
        })
    }
}

/// Spins (then yields) until `ready()` or `stop()`; returns whether `ready()` held. Waits in
/// the VM workloads are short hand-offs between running threads, but a run with more threads
/// than CPUs must not burn whole time slices, hence the yielding backoff.
#[inline]
pub fn wait_until(mut ready: impl FnMut() -> bool, stop: impl Fn() -> bool) -> bool {
    let backoff = crossbeam_utils::Backoff::new();
    loop {
        if ready() {
            return true;
        }
        if stop() {
            return false;
        }
        backoff.snooze();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn designs_start_with_linux_and_list_every_engine_design() {
        let d = designs();
        assert_eq!(d[0], "linux");
        assert_eq!(d.len(), 1 + Design::ALL.len());
        for e in Design::ALL {
            assert!(d.contains(&e.name()));
        }
    }

    #[test]
    fn linux_driver_maps_stores_loads_and_counts_the_fault() {
        let driver = LinuxDriver;
        let mut core = driver.attach();
        let a = core.mmap(0, 2 * PAGE);
        let before = driver.faults();
        // SAFETY: `a` is our own fresh two-page read-write mapping.
        unsafe {
            core.store(a + PAGE, 7);
            assert_eq!(core.load(a + PAGE), 7);
            assert_eq!(core.load(a), 0);
        }
        assert!(driver.faults() > before, "a store to a fresh page faults");
        // SAFETY: our own mapping, not used afterwards.
        unsafe { core.munmap(a, 2 * PAGE) };
    }

    #[test]
    fn linux_fixed_replaces_only_our_own_range() {
        let mut core = LinuxDriver.attach();
        let a = core.mmap(0, 4 * PAGE);
        // SAFETY: our own mapping.
        unsafe {
            core.munmap(a, 4 * PAGE);
        }
        core.mmap_fixed_noreplace(a, PAGE);
        // SAFETY: [a, a + PAGE) is our own mapping, used by this thread only.
        unsafe {
            core.store(a, 1);
            core.mmap_fixed(a, PAGE);
            assert_eq!(
                core.load(a),
                0,
                "MAP_FIXED replaced the page with a fresh one"
            );
            core.munmap(a, PAGE);
        }
    }
}
