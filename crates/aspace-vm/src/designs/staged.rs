//! [`Staged`]: the shape shared by the designs that edit one region store under one space lock
//! and resolve faults in stages (`bonsai`, `pervma`, `hybrid`): each says how it takes its lock
//! around an edit and how a fault goes through its stages, and the system calls, the fault
//! counters and the views follow from that here, once ([`DesignOps`] for every `Staged`).
//!
//! Not for: designs whose calls lock a part of the space (`interval`, `radix`: `windowed.rs`) or
//! that count no stages (`coarse`, `faultlock`).

use super::ops::DesignOps;
use super::syscalls::{madvise_locked, mmap_locked, mprotect_locked, munmap_locked};
use crate::core_state::Core;
use crate::error::{Fault, VmError};
use crate::region::store::RegionStore;
use crate::semantics::{AdviceEffect, MmapRequest};
use crate::shared::Shared;
use crate::types::{Access, Prot, RegionInfo};
use std::ops::Range;

/// A design that runs every modifying call's Linux body on its store under its space lock, and
/// its faults through stages (see the module doc).
pub(crate) trait Staged: Send + Sync {
    /// The store view an edit runs on.
    type Store<'s>: RegionStore
    where
        Self: 's;

    /// Runs a modifying call's `body` on the store, under the lock that serializes edits.
    fn edit<R>(&self, body: impl FnOnce(&mut Self::Store<'_>) -> R) -> R;

    /// A fault through the design's stages; with the stage that resolved it (0: the first).
    fn resolve(
        &self,
        sh: &Shared,
        core: &mut Core,
        va: u64,
        access: Access,
    ) -> (Result<(), Fault>, usize);

    /// Every region, in address order (`maps`).
    fn region_infos(&self) -> Vec<RegionInfo>;

    /// How many regions there are.
    fn regions_len(&self) -> u64;
}

impl<D: Staged> DesignOps for D {
    fn mmap(&self, sh: &Shared, core: &mut Core, req: MmapRequest) -> Result<u64, VmError> {
        self.edit(|s| mmap_locked(sh, core, s, req))
    }

    fn munmap(&self, sh: &Shared, core: &mut Core, range: Range<u64>) -> Result<(), VmError> {
        self.edit(|s| munmap_locked(sh, core, s, range))
    }

    fn mprotect(
        &self,
        sh: &Shared,
        core: &mut Core,
        range: Range<u64>,
        prot: Prot,
    ) -> Result<(), VmError> {
        self.edit(|s| mprotect_locked(sh, core, s, range, prot))
    }

    fn madvise(
        &self,
        sh: &Shared,
        core: &mut Core,
        range: Range<u64>,
        effect: AdviceEffect,
    ) -> Result<(), VmError> {
        self.edit(|s| madvise_locked(sh, core, s, range, effect))
    }

    #[inline]
    fn fault(&self, sh: &Shared, core: &mut Core, va: u64, access: Access) -> Result<(), Fault> {
        let (r, stage) = self.resolve(sh, core, va, access);
        let c = sh.counters.of(core.id);
        c.bump_faults();
        c.bump_stage(stage);
        r
    }

    fn populate_page(
        &self,
        sh: &Shared,
        core: &mut Core,
        va: u64,
        access: Access,
    ) -> Result<(), Fault> {
        self.resolve(sh, core, va, access).0
    }

    fn maps(&self) -> Vec<RegionInfo> {
        self.region_infos()
    }

    fn region_count(&self) -> u64 {
        self.regions_len()
    }
}
