//! [`DesignOps`], the interface every design implements and the core handle dispatches to
//! (through `designs/mod.rs`'s `Designs`): the four system calls (already validated by
//! `semantics.rs` down to the parts that need the region set), the page-fault handler the access
//! path calls outside its access window, and the read-only views (`maps`, region count).
//!
//! Not for: the Linux rules (`syscalls.rs`) or the dispatch (`mod.rs`).

use crate::core_state::Core;
use crate::error::{Fault, VmError};
use crate::semantics::{AdviceEffect, MmapRequest};
use crate::shared::Shared;
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
    /// the page-table entry allows the access (the caller retries its translation). Counted in
    /// the statistics (`faults`, `fault_stages`).
    fn fault(&self, sh: &Shared, core: &mut Core, va: u64, access: Access) -> Result<(), Fault>;
    /// [`fault`](DesignOps::fault) for `MAP_POPULATE` (`Designs::populate`): the same path,
    /// not counted as a fault (a populate is not an access, as in Linux's per-process fault
    /// counts).
    fn populate_page(
        &self,
        sh: &Shared,
        core: &mut Core,
        va: u64,
        access: Access,
    ) -> Result<(), Fault>;
    /// The regions like `/proc/self/maps`.
    fn maps(&self) -> Vec<RegionInfo>;
    /// Number of regions.
    fn region_count(&self) -> u64;
    /// Frees the page tables of the design's metadata that map nothing and lie where no
    /// region is (memory pressure: `CoreHandle::discard_page_tables`); nothing by default (the
    /// shared tree's designs free them at every `munmap`).
    fn reclaim_tables(&self, sh: &crate::shared::Shared, core: &mut crate::core_state::Core) {
        let _ = (sh, core);
    }
    /// Bytes of the region metadata: by default the regions' stored values and keys (a lower
    /// bound for a tree that adds its own nodes); a design whose map has nodes of its own says
    /// what they cost.
    fn region_metadata_bytes(&self) -> u64 {
        self.region_count() * REGION_ENTRY_BYTES
    }
}

/// Bytes of one region's entry in a store: its value and its key.
pub(crate) const REGION_ENTRY_BYTES: u64 =
    (std::mem::size_of::<crate::region::store::StoredRegion>() + std::mem::size_of::<u64>()) as u64;
