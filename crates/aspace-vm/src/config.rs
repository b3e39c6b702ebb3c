//! How an address space is configured: its [`Design`] and its limits, set through
//! [`crate::AddressSpace::builder`].
//!
//! Defaults follow Linux where Linux has one (`max_map_count` 65,530; x86-64's four-level user
//! address space, which ends one page below 2^47 (`TASK_SIZE`, *verified*: `mmap(MAP_FIXED)` of
//! the page at `2^47 - 8192` succeeds, of the page at `2^47 - 4096` is `ENOMEM`), starting at
//! `mmap_min_addr` 64 KiB) and are otherwise sized for tests and benchmarks (256 MiB of
//! frames, a 64-entry soft TLB per core).
//!
//! Every value has a stated range, documented on its [`Builder`] method and checked by
//! [`Config::validate`] before `build` allocates anything; a value outside it is
//! [`VmError::BadConfig`] (`EINVAL`). The upper bounds keep every size the space allocates from
//! its configuration (per-core slots, soft TLBs, frame batches, arena separators) small enough
//! to allocate; the frame pool's arithmetic does not rely on them (it is overflow-safe for any
//! batch, `frames.rs`).

use crate::error::{ConfigField, VmError};
use crate::page_table::organisation::Organisation;
use crate::page_table::VA_BITS;
use crate::shootdown::ShootdownPolicy;
use crate::types::PAGE_SIZE;

/// Linux's `TASK_SIZE` on x86-64 with four-level paging: user space ends one page below 2^47
/// (the page below the non-canonical hole stays unmapped, a guard against `syscall` returning to
/// a non-canonical address).
pub(crate) const DEFAULT_MAX_ADDR: u64 = (1 << 47) - PAGE_SIZE;

/// One concurrency strategy for the whole address space: a lock policy over the same Linux
/// rules. Every test and workload runs on every design; both give the same answers (the same
/// conformance suite and the differential test against the kernel), and differ only in speed
/// and in where `mmap` without an address places a mapping.
///
/// The default is [`Design::Interval`]: a space is built to be shared by threads, and
/// `interval` is the design whose `mmap`, `munmap`, `mprotect` and page faults on disjoint
/// ranges do not serialize. Pick [`Design::Coarse`] for one thread (an emulator of one guest
/// thread, a single-threaded tool): it edits regions 3.6-4.8x faster there. The crate docs
/// have [the guide](crate#which-design), with the measured figures.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Design {
    /// A plain `BTreeMap` region store under one space `RwLock`: faults take it for reading,
    /// everything else for writing (the stock kernel's `mmap_sem`); broadcast TLB shootdown.
    ///
    /// Fastest with one thread (a region edit is a `BTreeMap` operation under an uncontended
    /// lock), and it places `mmap(NULL)` top-down exactly like Linux. It does not scale: every
    /// system call of every thread takes the one lock for writing, and every `munmap` or
    /// `mprotect` sends its TLB shootdown to every attached core.
    Coarse,
    /// ASPLOS'12 §5.1 fault locking: `coarse`'s store under a separate *fault lock* that
    /// faults take for reading, while system calls hold a space lock of their own and take the
    /// fault lock for writing only from their first step that conflicts with faults (for
    /// `mmap(NULL)` and hints, after the gap search, which runs beside the faults); broadcast
    /// TLB shootdown.
    ///
    /// A step between `coarse` and the RCU designs: faults no longer wait for `mmap`'s
    /// placement search, but still wait for every region edit, zap and shootdown.
    FaultLock,
    /// ASPLOS'12 §5.2 hybrid locking/RCU: page faults take no space lock. Region objects and
    /// page tables are freed through RCU; the region tree (a `BTreeMap` of region pointers)
    /// has its own reader-writer lock, which a fault takes only around its lookup and a system
    /// call only around its tree operations. A fault that races with an edit of its region
    /// (detected under the leaf's lock by the region's replaced mark), finds no region, needs a
    /// page table or gives a region its first anon identity retries once under the space lock
    /// (`mmap_sem` read); system calls hold the space lock for writing. Broadcast TLB
    /// shootdown.
    ///
    /// Faults no longer wait for system calls except during their tree operations, but every
    /// fault still writes the tree lock's shared line (the paper's remaining contention).
    Hybrid,
    /// IntervalVM (SOSP'25 §5): the `skiplist` interval map under the hybrid-granular lock.
    /// Faults first without any space lock, then under the local read mode and the region's
    /// interval lock; `mmap` without an address allocates by CAS in the calling core's arena;
    /// modifications hold the local write mode and the interval lock of what they change;
    /// the region count is kept by an adaptive per-core limit counter; TLB shootdowns go to
    /// the cores that used the page tables involved. See [`Arenas`] and [`CountLimit`].
    ///
    /// The default. Scales with threads that work on disjoint ranges (an allocator, a runtime's
    /// per-thread heaps, vCPUs faulting their own memory); faults cost the same as `coarse`'s
    /// at one thread, region edits 3.6-4.8x more (an `mmap`, first write and `munmap` take
    /// three skiplist interval locks and two swaps, against three `BTreeMap` operations under
    /// one lock). With arenas on (the
    /// default), `mmap(NULL)` places mappings in the calling core's arena, not top-down like
    /// Linux: [`Arenas::Off`] gives Linux's placement.
    #[default]
    Interval,
    /// ASPLOS'12 §5.3 pure RCU: the region set in the Bonsai RCU balanced tree; page faults
    /// take no lock at all (an RCU read section, a lock-free lookup, a fill under the leaf's
    /// lock), system calls serialize on one space lock and edit the tree; broadcast TLB
    /// shootdown.
    ///
    /// A soft fault writes no shared cache line besides its page-table entry and frame, however
    /// many threads fault; system calls do not scale (one writer at a time).
    Bonsai,
    /// Linux 6.4+ per-VMA locks: the Bonsai tree (standing in for the maple tree) searched
    /// lock-free, then the region's own read lock for the fault; system calls take the space
    /// lock for writing and the write lock of every region they change; faults the per-region
    /// path cannot serve take the space lock for reading; broadcast TLB shootdown.
    PerVma,
    /// RadixVM (EuroSys'13 §3): the regions in RadixVM's radix tree over the page number
    /// (range locks of slot lock bits, folded ranges), **per-core page tables** filled from
    /// per-page metadata that owns the frames and records which cores copied each translation,
    /// so that `munmap` shoots down exactly those cores; under IntervalVM's lock policy
    /// (lock-free faults first, a range lock for edits, per-core arenas for `mmap(NULL)`).
    ///
    /// Operations on disjoint ranges write no shared line; a core faults once more for each
    /// page another core filled (its own tree starts empty), and page tables cost memory per
    /// core that touches a page. See `designs/radix.rs`.
    Radix,
}

impl Design {
    /// Every design, in report order.
    pub const ALL: &'static [Design] = &[
        Design::Coarse,
        Design::FaultLock,
        Design::Hybrid,
        Design::Interval,
        Design::Bonsai,
        Design::PerVma,
        Design::Radix,
    ];

    /// The design's command-line name.
    pub fn name(self) -> &'static str {
        match self {
            Design::Coarse => "coarse",
            Design::FaultLock => "faultlock",
            Design::Hybrid => "hybrid",
            Design::Interval => "interval",
            Design::Bonsai => "bonsai",
            Design::PerVma => "pervma",
            Design::Radix => "radix",
        }
    }

    /// The shootdown policy the design uses: `Targeted` for a design that records page-table
    /// users; tests may override it per space (`Builder::shootdown_policy`).
    pub(crate) fn shootdown_policy(self) -> ShootdownPolicy {
        match self {
            // `faultlock` records no page-table users either (its fills are `coarse`'s);
            // `hybrid` keeps the paper's broadcast (`designs/hybrid.rs`, "Shootdown"); `bonsai`
            // and `pervma` too (`designs/bonsai.rs`, "Shootdown", says why targeted would also
            // be sound for them).
            Design::Coarse
            | Design::FaultLock
            | Design::Hybrid
            | Design::Bonsai
            | Design::PerVma => ShootdownPolicy::Broadcast,
            // `radix`: the per-core trees are the record (`page_table/per_core.rs`).
            Design::Interval | Design::Radix => ShootdownPolicy::Targeted,
        }
    }

    /// How the design organises its page tables (`page_table/organisation.rs`): every design
    /// built so far walks one shared tree; a design that keeps per-page metadata of its own
    /// (`radix`, RadixVM §3.3) chooses `Organisation::PerCore`.
    pub(crate) fn page_tables(self) -> Organisation {
        match self {
            Design::Coarse
            | Design::FaultLock
            | Design::Hybrid
            | Design::Interval
            | Design::Bonsai
            | Design::PerVma => Organisation::Shared,
            Design::Radix => Organisation::PerCore,
        }
    }

    /// The design called `name`.
    pub fn from_name(name: &str) -> Option<Design> {
        Design::ALL.iter().copied().find(|d| d.name() == name)
    }
}

/// Per-core allocation arenas of the `interval` design (SOSP'25 §5.3): a small part of the
/// address range split into one arena per core, where `mmap` without an address allocates by
/// one CAS, starting at the arena's hint. Other designs ignore it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Arenas {
    /// No arenas: every `mmap` without an address is placed top-down like Linux's (the
    /// differential test against the kernel runs so).
    Off,
    /// `min(max_cores, 128)` arenas (the paper's cap) at the bottom of the range, sized so that
    /// all of them take about 1/32 of it, aligned (base and size) to the largest of 8 GiB,
    /// 1 GiB, 2 MiB that is at most a third of that size (else to pages), so that no page
    /// table serves two arenas; off when that leaves an arena smaller than 64 pages. The paper's
    /// 64 GiB arenas are 1/4096 of x86-64's 256 TiB each.
    Auto,
    /// Exactly `count` arenas of `size` bytes (page aligned) from `base`.
    Layout {
        /// Number of arenas (>= 1).
        count: usize,
        /// Bytes per arena.
        size: u64,
        /// Start of the first arena.
        base: u64,
    },
}

/// How the `interval` design counts regions against `max_map_count`. Other designs ignore it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CountLimit {
    /// The adaptive per-core counter of SOSP'25 §5.3 (`aspace_sync::LimitCounter`): exact,
    /// and writes no shared line until the count nears the limit.
    PerCore,
    /// One shared atomic (`aspace_sync::AtomicCounter`): exact, every update of every core
    /// writes one line (the benchmark baseline that shows why the per-core counter is needed).
    SharedAtomic,
}

/// The full configuration of an address space.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Config {
    /// The concurrency strategy.
    pub design: Design,
    /// Bytes of real memory for frames (rounded down to whole frames), reserved once with
    /// `MAP_NORESERVE`; touching more pages than this gives `ENOMEM`.
    pub memory: u64,
    /// Lowest mappable address (Linux's `vm.mmap_min_addr`, 64 KiB).
    pub min_addr: u64,
    /// One past the highest mappable address (default `2^47 - 4096`, x86-64's `TASK_SIZE`).
    pub max_addr: u64,
    /// Most regions at once (Linux's `vm.max_map_count`).
    pub max_map_count: usize,
    /// Most cores attached at once.
    pub max_cores: usize,
    /// Entries in each core's direct-mapped soft TLB (a power of two).
    pub tlb_entries: usize,
    /// Frames a core's free-frame cache takes from (and returns to) the global pool at once.
    pub frame_batch: usize,
    /// The `interval` design's per-core arenas (default [`Arenas::Auto`]).
    pub arenas: Arenas,
    /// The `interval` design's region counter (default [`CountLimit::PerCore`]).
    pub count_limit: CountLimit,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            design: Design::default(),
            memory: 256 << 20,
            min_addr: 0x1_0000,
            max_addr: DEFAULT_MAX_ADDR,
            max_map_count: 65_530,
            max_cores: 256,
            tlb_entries: 64,
            frame_batch: 64,
            arenas: Arenas::Auto,
            count_limit: CountLimit::PerCore,
        }
    }
}

/// Per-core slots (the hybrid lock's locks, arenas, limit-counter slots) at most: more cores
/// share them by group (SOSP'25 §5.1).
pub(crate) const MAX_CORE_SLOTS: usize = 128;

impl Config {
    /// The number of per-core slots: `max_cores`, at most [`MAX_CORE_SLOTS`].
    pub(crate) fn core_slots(&self) -> usize {
        self.max_cores.clamp(1, MAX_CORE_SLOTS)
    }

    /// The most `memory`: 2^32 - 1 frames (16 TiB - 4 KiB), as many as a 32-bit frame index
    /// (the page-table entry format) names.
    pub const MAX_MEMORY: u64 = u32::MAX as u64 * PAGE_SIZE;
    /// The highest `max_addr`: 2^48, the end of what the four-level page tables translate.
    pub const MAX_ADDR_LIMIT: u64 = 1 << VA_BITS;
    /// The most `max_map_count`: 2^31 - 1 (Linux's `vm.max_map_count` is an `int`).
    pub const MAX_MAP_COUNT: usize = i32::MAX as usize;
    /// The most `max_cores`: 8192 (the largest `NR_CPUS` of x86-64 Linux, `CONFIG_MAXSMP`).
    pub const MAX_CORES: usize = 8192;
    /// The most `tlb_entries`: 2^16 per core (a soft TLB of 1.5 MiB; hardware TLBs hold a few
    /// thousand entries).
    pub const MAX_TLB_ENTRIES: usize = 1 << 16;
    /// The most `frame_batch`: 2^16 frames (256 MiB) moved at once.
    pub const MAX_FRAME_BATCH: usize = 1 << 16;
    /// The most arenas of an [`Arenas::Layout`]: [`Config::MAX_CORES`] (a core uses arena
    /// `core % count`).
    pub const MAX_ARENAS: usize = Config::MAX_CORES;

    /// Checks the configuration: every value within the range its [`Builder`] method states.
    ///
    /// # Errors
    /// [`VmError::BadConfig`] (`EINVAL`) naming the first value out of range.
    pub fn validate(&self) -> Result<(), VmError> {
        fn bad(field: ConfigField, value: u64, expected: &'static str) -> Result<(), VmError> {
            Err(VmError::BadConfig {
                field,
                value,
                expected,
            })
        }
        // `usize` is at most 64 bits on every supported target.
        let wide = |n: usize| n as u64;
        if !(PAGE_SIZE..=Self::MAX_MEMORY).contains(&self.memory) {
            return bad(
                ConfigField::Memory,
                self.memory,
                "in 4096..=17_592_186_040_320 (1 to 2^32 - 1 frames)",
            );
        }
        if self.max_addr % PAGE_SIZE != 0
            || !(PAGE_SIZE..=Self::MAX_ADDR_LIMIT).contains(&self.max_addr)
        {
            return bad(
                ConfigField::MaxAddr,
                self.max_addr,
                "a multiple of 4096 in 4096..=2^48",
            );
        }
        if self.min_addr % PAGE_SIZE != 0 || self.min_addr >= self.max_addr {
            return bad(
                ConfigField::MinAddr,
                self.min_addr,
                "a multiple of 4096 below max_addr",
            );
        }
        if !(1..=Self::MAX_MAP_COUNT).contains(&self.max_map_count) {
            return bad(
                ConfigField::MaxMapCount,
                wide(self.max_map_count),
                "in 1..=2_147_483_647",
            );
        }
        if !(1..=Self::MAX_CORES).contains(&self.max_cores) {
            return bad(ConfigField::MaxCores, wide(self.max_cores), "in 1..=8192");
        }
        if !self.tlb_entries.is_power_of_two() || self.tlb_entries > Self::MAX_TLB_ENTRIES {
            return bad(
                ConfigField::TlbEntries,
                wide(self.tlb_entries),
                "a power of two in 1..=65536",
            );
        }
        if !(1..=Self::MAX_FRAME_BATCH).contains(&self.frame_batch) {
            return bad(
                ConfigField::FrameBatch,
                wide(self.frame_batch),
                "in 1..=65536",
            );
        }
        if let Arenas::Layout { count, size, base } = self.arenas {
            if !(1..=Self::MAX_ARENAS).contains(&count) {
                return bad(ConfigField::ArenaCount, wide(count), "in 1..=8192");
            }
            if size == 0 || size % PAGE_SIZE != 0 {
                return bad(
                    ConfigField::ArenaSize,
                    size,
                    "a multiple of 4096, at least 4096",
                );
            }
            const INSIDE: &str =
                "a multiple of 4096 with [base, base + count * size) inside [min_addr, max_addr)";
            if base % PAGE_SIZE != 0 || base < self.min_addr {
                return bad(ConfigField::ArenaBase, base, INSIDE);
            }
            let end = wide(count)
                .checked_mul(size)
                .and_then(|l| l.checked_add(base));
            match end {
                Some(end) if end <= self.max_addr => {}
                // The end, or `u64::MAX` when it overflows.
                end => return bad(ConfigField::ArenaBase, end.unwrap_or(u64::MAX), INSIDE),
            }
        }
        Ok(())
    }
}

/// Builds an [`crate::AddressSpace`]; start from [`crate::AddressSpace::builder`].
#[derive(Clone, Debug, Default)]
pub struct Builder {
    config: Config,
    /// The shootdown policy when not the design's own (tests; `Design::shootdown_policy`).
    shootdown: Option<ShootdownPolicy>,
}

impl Builder {
    /// The concurrency strategy (default [`Design::Interval`], which scales with threads;
    /// [`Design::Coarse`] is faster for a space only one thread uses: see [`Design`]).
    pub fn design(mut self, design: Design) -> Self {
        self.config.design = design;
        self
    }

    /// Bytes of real memory for frames (default 256 MiB), rounded down to whole frames.
    ///
    /// Range: `4096..=`[`Config::MAX_MEMORY`] (1 to 2^32 - 1 frames); `build` refuses a value
    /// outside it with [`VmError::BadConfig`] (`EINVAL`), and fails with
    /// [`VmError::OutOfMemory`] when the kernel refuses the `MAP_NORESERVE` reservation.
    pub fn memory(mut self, bytes: u64) -> Self {
        self.config.memory = bytes;
        self
    }

    /// The mappable address range `[min_addr, max_addr)` (default `[64 KiB, 2^47 - 4096)`).
    ///
    /// Range: both multiples of 4096 with `min_addr < max_addr <=`
    /// [`Config::MAX_ADDR_LIMIT`] (2^48, the four-level page tables' reach); `build` refuses
    /// others with [`VmError::BadConfig`] (`EINVAL`).
    pub fn address_range(mut self, min_addr: u64, max_addr: u64) -> Self {
        self.config.min_addr = min_addr;
        self.config.max_addr = max_addr;
        self
    }

    /// Most regions at once (default 65,530).
    ///
    /// Range: `1..=`[`Config::MAX_MAP_COUNT`] (2^31 - 1, Linux's `int` sysctl); `build`
    /// refuses others with [`VmError::BadConfig`] (`EINVAL`).
    pub fn max_map_count(mut self, n: usize) -> Self {
        self.config.max_map_count = n;
        self
    }

    /// Most cores attached at once (default 256).
    ///
    /// Range: `1..=`[`Config::MAX_CORES`] (8192); `build` refuses others with
    /// [`VmError::BadConfig`] (`EINVAL`). The space allocates a few cache lines per core
    /// slot at `build`.
    pub fn max_cores(mut self, n: usize) -> Self {
        self.config.max_cores = n;
        self
    }

    /// Entries per soft TLB (default 64).
    ///
    /// Range: a power of two in `1..=`[`Config::MAX_TLB_ENTRIES`] (65,536); `build` refuses
    /// others with [`VmError::BadConfig`] (`EINVAL`). Each `attach` allocates the TLB.
    pub fn tlb_entries(mut self, n: usize) -> Self {
        self.config.tlb_entries = n;
        self
    }

    /// Frames moved between a core's cache and the global pool at once (default 64).
    ///
    /// Range: `1..=`[`Config::MAX_FRAME_BATCH`] (65,536); `build` refuses others with
    /// [`VmError::BadConfig`] (`EINVAL`).
    pub fn frame_batch(mut self, n: usize) -> Self {
        self.config.frame_batch = n;
        self
    }

    /// The `interval` design's per-core arenas (default [`Arenas::Auto`]).
    ///
    /// Range of an [`Arenas::Layout`]: `count` in `1..=`[`Config::MAX_ARENAS`] (8192), `size`
    /// a multiple of 4096 (at least one page), `base` a multiple of 4096 and the whole
    /// `[base, base + count * size)` inside the address range; `build` refuses others with
    /// [`VmError::BadConfig`] (`EINVAL`), whatever the design.
    pub fn arenas(mut self, arenas: Arenas) -> Self {
        self.config.arenas = arenas;
        self
    }

    /// The `interval` design's region counter (default [`CountLimit::PerCore`]).
    pub fn count_limit(mut self, count_limit: CountLimit) -> Self {
        self.config.count_limit = count_limit;
        self
    }

    /// The configuration so far.
    pub fn config(&self) -> &Config {
        &self.config
    }

    /// Overrides the design's shootdown policy (`Design::shootdown_policy`): for a design under
    /// construction and for tests that run a design under the other policy.
    pub(crate) fn shootdown_policy(mut self, policy: ShootdownPolicy) -> Self {
        self.shootdown = Some(policy);
        self
    }

    /// **Testing hook, not an API**: makes the space use targeted TLB shootdown (only the cores
    /// recorded in the changed page tables are flushed, `page_table/users.rs`) whatever its
    /// design, so that integration tests can run the protocol tests under both policies.
    #[doc(hidden)]
    pub fn targeted_shootdown_for_testing(self) -> Self {
        self.shootdown_policy(ShootdownPolicy::Targeted)
    }

    /// The shootdown policy the space will use.
    pub(crate) fn policy(&self) -> ShootdownPolicy {
        self.shootdown
            .unwrap_or_else(|| self.config.design.shootdown_policy())
    }

    /// The configuration, validated (`Builder::build`, in `space.rs`, makes the space of it).
    ///
    /// # Errors
    /// [`VmError::BadConfig`] for a value out of its range.
    pub(crate) fn validated(self) -> Result<Config, VmError> {
        self.config.validate()?;
        Ok(self.config)
    }
}
