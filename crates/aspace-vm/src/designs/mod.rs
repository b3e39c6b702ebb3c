//! The designs: one concurrency strategy each for the region set, page faults and the system
//! calls (DESIGN §6 "Designs"), behind one internal interface the core handle dispatches to.
//!
//! [`DesignOps`] is that interface: the four system calls (already validated by `semantics.rs`
//! down to the parts that need the region set), the page-fault handler the access path calls
//! outside its access window, and the read-only views (`maps`, region count). [`Designs`] is the
//! closed set of implementations, an enum so that dispatch is a `match` the compiler inlines
//! (no virtual call on the fault path). A new design (`faultlock`, `hybrid`, `bonsai`, `radix`,
//! `interval`) adds a file here, a variant to [`Designs`] and to `config::Design`.
//!
//! The helpers at the bottom are the steps every design performs in the same order after it
//! changed its region set under its own locks: clear page-table entries, shoot down, free the
//! frames, free page tables with the neighbouring gaps. They encode the crate's rule that **a
//! frame is reused only after the shootdown that removed its last translation returned**.
//!
//! Not for: the access path (`handle.rs`, shared by all designs) or argument validation.

pub(crate) mod coarse;

use crate::error::{Fault, VmError};
use crate::handle::Core;
use crate::semantics::{AdviceEffect, MmapRequest};
use crate::shootdown::Targets;
use crate::space::Shared;
use crate::types::{Access, Prot, RegionInfo};
use std::ops::Range;

/// What a design implements (see the module doc). `sh` is the space's shared state, `core` the
/// calling core's private state; the design never blocks inside an access window because it is
/// never called inside one.
pub(crate) trait DesignOps: Send + Sync {
    /// `mmap` after argument checks.
    fn mmap(&self, sh: &Shared, core: &mut Core, req: MmapRequest) -> Result<u64, VmError>;
    /// `munmap` of a validated, non-empty page range.
    fn munmap(&self, sh: &Shared, core: &mut Core, range: Range<u64>) -> Result<(), VmError>;
    /// `mprotect` of a validated, non-empty page range with known prot bits.
    fn mprotect(
        &self,
        sh: &Shared,
        core: &mut Core,
        range: Range<u64>,
        prot: Prot,
    ) -> Result<(), VmError>;
    /// `madvise` of a validated, non-empty page range.
    fn madvise(
        &self,
        sh: &Shared,
        core: &mut Core,
        range: Range<u64>,
        effect: AdviceEffect,
    ) -> Result<(), VmError>;
    /// Handles a fault at `va` (the page has no present entry allowing `access`): on success
    /// the page-table entry allows the access (the caller retries its translation).
    fn fault(&self, sh: &Shared, core: &mut Core, va: u64, access: Access) -> Result<(), Fault>;
    /// The regions like `/proc/self/maps`.
    fn maps(&self) -> Vec<RegionInfo>;
    /// Number of regions.
    fn region_count(&self) -> u64;
}

/// Every implemented design.
#[derive(Debug)]
pub(crate) enum Designs {
    /// `coarse`: one space `RwLock`.
    Coarse(coarse::Coarse),
}

macro_rules! dispatch {
    ($self:expr, $d:ident => $e:expr) => {
        match $self {
            Designs::Coarse($d) => $e,
        }
    };
}

impl Designs {
    /// The implementation of `design`.
    pub(crate) fn new(design: crate::config::Design) -> Designs {
        match design {
            crate::config::Design::Coarse => Designs::Coarse(coarse::Coarse::new()),
        }
    }
}

impl DesignOps for Designs {
    #[inline]
    fn mmap(&self, sh: &Shared, core: &mut Core, req: MmapRequest) -> Result<u64, VmError> {
        dispatch!(self, d => d.mmap(sh, core, req))
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
    fn maps(&self) -> Vec<RegionInfo> {
        dispatch!(self, d => d.maps())
    }
    fn region_count(&self) -> u64 {
        dispatch!(self, d => d.region_count())
    }
}

/// Removes every translation of `range` and frees its frames: clears the page-table entries,
/// shoots down (broadcast) if any was present, then gives the frames to the caller's cache.
/// Returns whether anything was mapped.
///
/// # Preconditions
/// The caller excludes fills in `range` (the design's write lock) and is not inside an access.
pub(crate) fn zap_locked(sh: &Shared, core: &mut Core, range: Range<u64>) -> bool {
    let mut freed = std::mem::take(&mut core.freed);
    sh.tables.clear_range(range, &mut freed);
    let any = !freed.is_empty();
    if any {
        sh.shootdown.shootdown(Targets::All);
        // Every core that could still translate to these frames has flushed or finished its
        // access: they may be zeroed and reused.
        core.cache.free_all(&sh.pool, &mut freed);
    }
    core.freed = freed;
    any
}

/// Frees the page tables inside `gap` (an unmapped range widened to its neighbouring gaps).
///
/// # Preconditions
/// No region intersects `gap`, its entries were cleared, and the caller excludes fills in it.
pub(crate) fn free_tables_locked(sh: &Shared, gap: Range<u64>) {
    sh.tables.free_tables(gap, &sh.domain);
}

/// Rewrites the entries of `range` to `prot`, shooting down if a right was removed.
///
/// # Preconditions
/// The caller excludes fills in `range` and is not inside an access.
pub(crate) fn protect_locked(sh: &Shared, range: Range<u64>, prot: Prot) -> bool {
    sh.tables.protect_range(range, prot)
}

/// Broadcast shootdown (after entries were downgraded).
pub(crate) fn shootdown_all(sh: &Shared) {
    sh.shootdown.shootdown(Targets::All);
}
