//! The designs: one concurrency strategy each for the region set, page faults and the system
//! calls, behind one internal interface the core handle dispatches to.
//!
//! [`DesignOps`] (`ops.rs`) is that interface: the four system calls (already validated by
//! `semantics.rs` down to the parts that need the region set), the page-fault handler the
//! access path calls outside its access window, and the read-only views (`maps`, region count).
//! [`Designs`] is the closed set of implementations (`coarse`, `faultlock`, `hybrid`,
//! `interval`, `bonsai`, `pervma`, `radix`), an enum so that dispatch is a `match` the compiler inlines
//! (no virtual call on the fault path). A new design adds a file here, a variant to
//! [`Designs`] and to `config::Design`, its shootdown policy (broadcast or targeted) to
//! `Design::shootdown_policy` and its page-table organisation (one shared tree, or one tree per
//! core filled from its own metadata: `page_table/organisation.rs`) to `Design::page_tables`
//! (`config.rs`).
//!
//! A design is a **lock policy** over shared parts: it owns a region store
//! (`region/store.rs`) and the locks around it, and calls the Linux bodies of `syscalls.rs`
//! with the store borrowed from its lock guard; placement lives in `placement.rs`
//! (`placement::choose`, with the design's own gap scans). A design with lock-free faults
//! calls `syscalls::fault_rcu` with its RCU lookup (`region::store::RcuRegions`) and, on
//! `Retry`, takes its locks and calls `syscalls::fault_locked`. No file here imports from a
//! sibling design or from this file's dispatch; `interval` and `radix` share a lock policy
//! through `windowed.rs` (generic over their maps) and `window.rs`.
//!
//! # The lock and RCU contract (all designs)
//!
//! The crate's one statement of which locks each operation takes and what runs lock-free under
//! RCU (the repository's `docs/ARCHITECTURE.md` has it per operation, in tables).
//!
//! Lock order, outermost first; nothing is ever taken in the other direction:
//!
//! 1. **the design's space lock**: `coarse`: one `aspace_sync::UpgradableRwLock` around the
//!    region set (no atomic read-modify-write while one core is attached; the second attach
//!    upgrades it to a reader-writer lock for good: `designs/coarse.rs`), faults read it, `mmap`/`munmap`/`mprotect`/`madvise` write it for their whole duration
//!    (shootdown wait included). `faultlock`: a space mutex that only system calls take (the
//!    paper's `mmap_sem` in write mode), then the **fault lock** (`parking_lot::RwLock` around
//!    the region set): faults read it, `mmap`'s placement search reads it beside them, and every
//!    system call writes it from its first step that conflicts with faults to its end
//!    (`designs/faultlock.rs`). `hybrid`: a space `RwLock` (`mmap_sem`) that system calls write
//!    for their whole duration and faults read only on their `Retry` path, then the **tree
//!    lock** (`region/rcu_store.rs`): shared by a lock-free fault around its lookup only and by
//!    `maps()`, exclusive around a commit's tree operations only (`designs/hybrid.rs`).
//!    `interval`: the hybrid-granular lock (`aspace_sync::HybridLock`),
//!    LR for faults that need locks, LW for system calls, GR for `maps()`/`stats()`, GW for the
//!    placement fallback. `bonsai`: a space mutex that system calls take for their whole
//!    duration; faults take it only after their lock-free tries (`designs/bonsai.rs`).
//!    `pervma`: a space `RwLock`, system calls write it, faults that fall back read it; then
//! 2. (`pervma`) **a region's lock word** (`region/bonsai_store.rs`'s `VmaLock`): faults
//!    read-lock the region they found, an editor (holding the space write lock) detaches each
//!    region it changes, waiting for its readers; never taken while waiting for the space lock;
//!    then
//! 2. (`interval`) **the region skiplist's interval lock** of the range a call reads or changes,
//!    widened to whole regions and their neighbours, held until the call's edit is published
//!    (`designs/window.rs`);
//! 3. **a leaf page table's fill lock** (a bit in the level-2 entry), taken by `fill`,
//!    `fill_checked`, `clear_range` and `protect_range` for one leaf at a time; under per-core
//!    page tables (`page_table/per_core/owner.rs`) first **an owner-tree leaf's lock**, then
//!    (a fill writing its copy, locked or lock-free, inside the owner leaf's lock) **a per-core
//!    tree's leaf lock**: editors change the owner tree leaf by leaf, releasing each, before
//!    they clear or downgrade the copies leaf by leaf, and `free_tables` unlinks (waiting out
//!    lock holders) in the owner tree before the per-core trees, so no one holds a per-core
//!    leaf lock while taking an owner leaf lock;
//! 4. **the frame pool's global free list** (`Mutex`), taken by a core's cache to refill or
//!    spill a batch; and the page-table pool's shared lists and per-slot returned lists
//!    (`Mutex`), leaves.
//!
//! Lock-free, and what protects them:
//! - **Page-table walks** take no lock; a core walks only inside an access window while
//!   holding its `aspace_rcu` read guard, so a table unlinked by an `munmap` is not reused
//!   before the walk ends (tables are recycled after a grace period). Entries are published
//!   with `Release` and read with `Acquire`. Under per-core page tables a core walks its own
//!   tree, and an editor visits other cores' trees inside its own read section (their owners
//!   may discard them at any time: `page_table/per_core.rs`).
//! - **Lock-free faults** (`syscalls::fault_rcu`; `interval`'s first stage, `hybrid`'s first
//!   attempt, `bonsai`'s and `pervma`'s first stage, the latter under its region's read lock)
//!   take no space lock:
//!   an RCU read section (the region set shares the space's domain), a lock-free region
//!   lookup, and a fill that installs no table and goes ahead under the leaf lock only if no
//!   edit marked the region replaced (`fault_rcu` has the argument, `designs/interval/` the
//!   loom models).
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
//! fill that could install a table there (`coarse`: the write lock; `faultlock`: the fault
//! lock's write side; `interval`: the interval
//! lock, which holds those gaps; `hybrid`: the space lock's write side, while lock-free fills
//! install no table), through the RCU domain.
//!
//! **Region store**: the Linux bodies (functions named `*_locked`) take the store borrowed from
//! the design's guard: `&mut` for system calls (`coarse`: the write lock; `interval`: a window),
//! `&` for faults; a first write fault may set a region's anon identity under `&` (once, by
//! compare-exchange).
//!
//! Not for: the access path (`handle.rs`, shared by all designs) or argument validation.

pub(crate) mod bonsai;
pub(crate) mod coarse;
pub(crate) mod faultlock;
pub(crate) mod hybrid;
pub(crate) mod interval;
#[cfg(all(test, loom))]
mod lock_free_loom;
#[cfg(all(test, not(loom)))]
mod lock_free_tests;
mod ops;
pub(crate) mod pervma;
mod placement;
pub(crate) mod radix;
mod staged;
mod syscalls;
mod window;
mod windowed;

pub(crate) use ops::DesignOps;

use crate::core_state::Core;
use crate::error::{Fault, VmError};
use crate::semantics::{AdviceEffect, MmapRequest};
use crate::shared::Shared;
use crate::types::{Access, Prot, RegionInfo};
use std::ops::Range;

/// Every implemented design.
#[derive(Debug)]
// One value per space, inside its `Arc`: the size difference costs nothing, a `Box` would cost
// an indirection on every fault.
#[allow(clippy::large_enum_variant)]
pub(crate) enum Designs {
    /// `coarse`: one space `RwLock`.
    Coarse(coarse::Coarse),
    /// `faultlock`: a space lock for system calls, a fault lock for faults (ASPLOS'12 §5.1).
    FaultLock(faultlock::FaultLock),
    /// `hybrid`: lock-free faults over RCU-freed regions in a tree under a tree lock (ASPLOS'12
    /// §5.2).
    Hybrid(hybrid::Hybrid),
    /// `interval`: IntervalVM (SOSP'25 §5).
    Interval(interval::IntervalDesign),
    /// `bonsai`: lock-free faults over the Bonsai tree, system calls under one lock (ASPLOS'12
    /// §5.3).
    Bonsai(bonsai::Bonsai),
    /// `pervma`: Linux 6.4+ per-VMA locks over the Bonsai tree.
    PerVma(pervma::PerVma),
    /// `radix`: RadixVM (EuroSys'13 §3) with per-core page tables.
    Radix(radix::RadixDesign),
}

macro_rules! dispatch {
    ($self:expr, $d:ident => $e:expr) => {
        match $self {
            Designs::Coarse($d) => $e,
            Designs::FaultLock($d) => $e,
            Designs::Hybrid($d) => $e,
            Designs::Interval($d) => $e,
            Designs::Bonsai($d) => $e,
            Designs::PerVma($d) => $e,
            Designs::Radix($d) => $e,
        }
    };
}

impl Designs {
    /// The implementation of the design `sh` is configured with.
    pub(crate) fn new(sh: &Shared) -> Designs {
        match sh.config.design {
            crate::config::Design::Coarse => Designs::Coarse(coarse::Coarse::new(sh)),
            crate::config::Design::FaultLock => Designs::FaultLock(faultlock::FaultLock::default()),
            crate::config::Design::Hybrid => Designs::Hybrid(hybrid::Hybrid::new(sh)),
            crate::config::Design::Interval => Designs::Interval(interval::IntervalDesign::new(sh)),
            crate::config::Design::Bonsai => Designs::Bonsai(bonsai::Bonsai::new(sh)),
            crate::config::Design::PerVma => Designs::PerVma(pervma::PerVma::new(sh)),
            crate::config::Design::Radix => Designs::Radix(radix::RadixDesign::new(sh)),
        }
    }
}

#[cfg(all(test, not(loom)))]
impl Designs {
    /// Checks the design's store invariants at rest (tests; `coarse` and `faultlock` check
    /// theirs in the region tests).
    pub(crate) fn check(&self) {
        match self {
            Designs::Coarse(_) | Designs::FaultLock(_) => {}
            Designs::Hybrid(d) => d.check(),
            Designs::Interval(d) => interval::tests::check(d),
            Designs::Bonsai(d) => d.check(),
            Designs::PerVma(d) => d.check(),
            Designs::Radix(d) => d.check(),
        }
    }
}

impl Designs {
    /// `MAP_POPULATE` through the design's own fault path (`syscalls::populate`).
    fn populate(&self, sh: &Shared, core: &mut Core, range: Range<u64>, prot: Prot) {
        syscalls::populate(range, prot, |page, access| {
            self.populate_page(sh, core, page, access)
        });
    }
}

impl DesignOps for Designs {
    /// The design's `mmap`, then `MAP_POPULATE` (see [`Designs::populate`]).
    #[inline]
    fn mmap(&self, sh: &Shared, core: &mut Core, req: MmapRequest) -> Result<u64, VmError> {
        let (populate, len, prot) = (req.populate, req.len, req.prot);
        let start = dispatch!(self, d => d.mmap(sh, core, req))?;
        if populate {
            // A `MAP_FIXED` over mapped pages left their frames in `core.freed`: give them to
            // the cache before the populate allocates (the design's locks are released here),
            // as Linux frees the old pages before it populates the new mapping.
            core.release_freed(sh);
            self.populate(sh, core, start..start + len, prot);
        }
        Ok(start)
    }
    #[inline]
    fn munmap(&self, sh: &Shared, core: &mut Core, range: Range<u64>) -> Result<(), VmError> {
        dispatch!(self, d => d.munmap(sh, core, range))
    }
    #[inline]
    fn mprotect(
        &self,
        sh: &Shared,
        core: &mut Core,
        range: Range<u64>,
        prot: Prot,
    ) -> Result<(), VmError> {
        dispatch!(self, d => d.mprotect(sh, core, range, prot))
    }
    #[inline]
    fn madvise(
        &self,
        sh: &Shared,
        core: &mut Core,
        range: Range<u64>,
        effect: AdviceEffect,
    ) -> Result<(), VmError> {
        dispatch!(self, d => d.madvise(sh, core, range, effect))
    }
    #[inline]
    fn fault(&self, sh: &Shared, core: &mut Core, va: u64, access: Access) -> Result<(), Fault> {
        dispatch!(self, d => d.fault(sh, core, va, access))
    }
    #[inline]
    fn populate_page(
        &self,
        sh: &Shared,
        core: &mut Core,
        va: u64,
        access: Access,
    ) -> Result<(), Fault> {
        dispatch!(self, d => d.populate_page(sh, core, va, access))
    }
    fn maps(&self) -> Vec<RegionInfo> {
        dispatch!(self, d => d.maps())
    }
    fn region_count(&self) -> u64 {
        dispatch!(self, d => d.region_count())
    }
    fn region_metadata_bytes(&self) -> u64 {
        dispatch!(self, d => d.region_metadata_bytes())
    }
    fn reclaim_tables(&self, sh: &Shared, core: &mut Core) {
        dispatch!(self, d => d.reclaim_tables(sh, core))
    }
}
