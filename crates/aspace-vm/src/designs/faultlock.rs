//! The `faultlock` design: ASPLOS'12 §5.1 "fault locking", the first refinement of `mmap_sem`.
//! A space lock that only the system calls take, and a separate **fault lock** that page
//! faults take for reading; a system call takes the fault lock for writing only from its first
//! step that conflicts with faults, so faults run during the read-only part of a mapping
//! operation.
//!
//! # The locks, step by step
//!
//! - **Page fault** (and `MAP_POPULATE`'s page faults): the fault lock for **reading** around
//!   `fault_locked` (region lookup, rights check, first-write anon identity, page-table fill
//!   under the leaf's fill lock). It never takes the space lock.
//! - **`mmap`**: the space lock (the paper's `mmap_sem` in write mode: it excludes every other
//!   system call, so the region set cannot change under the caller while it holds it). Then:
//!   1. *placement* of a hint or of `mmap(NULL)` (the top-down gap search) under the fault
//!      lock's **read** side, beside the faults: it reads region bounds only, which faults never
//!      change. It is resolved into the exact address it chose (`Placement::NoReplace` of a
//!      free range, which maps the same as the hint or the search would);
//!   2. the fault lock for **writing**, then `mmap_locked` with the resolved placement: the edit
//!      (its plan reads the neighbours' anon identities, which a first-write fault may set, to
//!      decide merges: "if they read anything that might be modified by a concurrent page fault,
//!      they must acquire the fault lock then"), the region-set change, and for `MAP_FIXED` the
//!      zap of replaced translations. `MAP_FIXED` and a request with a bad mapping type skip
//!      step 1 (nothing to search, or an error path).
//! - **`munmap`, `mprotect`, `madvise`**: the space lock, then the fault lock for **writing**
//!   at once: the first step of each body is an edit whose plan copies the attributes of the
//!   regions it splits (the anon identity included, which a concurrent first-write fault could
//!   set on the old region after the copy and lose), or, for `DONTNEED`, the zap that clears
//!   entries a fault fills. Their read-only prefixes (`mprotect`'s hole checks) are a few
//!   lookups, not worth a split of the shared bodies.
//! - Both locks are held to the end of the call and released together, fault lock first
//!   ("released only when the `mmap_sem` is released ... much like two-phase locking"): the
//!   zap's shootdown wait, frame frees and page-table frees stay under the fault lock. Releasing
//!   it earlier would need an order of those steps that is sound against fills installing
//!   tables beside the freed gap, which the shared bodies do not have (that is §5.2's problem).
//! - `maps()` and the region count: the fault lock for reading (a snapshot between edits).
//!
//! Lock order: space lock, then fault lock, then a leaf's fill lock, then the frame pool's
//! locks. Faults take only the fault lock, so there is no cycle.
//!
//! # Soundness (why a fault under only the fault lock's read side is safe)
//!
//! - *No half-edited region set.* The store is the fault lock's data, so `&mut` of it (every
//!   edit) exists only under its write guard, which excludes every fault's read guard; faults
//!   only ever see the set before or after a whole edit. The placement step reads it through a
//!   read guard (`&`), which faults share: both only read bounds (the anon identity a fault
//!   writes is an atomic set once by compare-exchange).
//! - *The placement stays valid after its read guard is dropped* until the write guard is
//!   taken: every edit holds the space lock, which this `mmap` holds across both, and a fault
//!   changes no bounds. (A mutation that drops the space lock lets two `mmap`s choose the same
//!   gap; `NoReplace` then fails the second with `EEXIST` instead of overlapping:
//!   `tests/faultlock.rs` fails then, in every run.)
//! - *No translation or frame of a region remains after `munmap` returns.* A fault holds the
//!   read side from its lookup to its fill. Either it took it before `munmap`'s write side: then
//!   its fill happened before the edit, and the zap (under the write side) clears the entry,
//!   shoots it down and frees the frame; or it takes it after `munmap` released both locks: the
//!   region is gone from the set and it fails with `Unmapped`. The same argument covers
//!   `mprotect` (entries rewritten under the write side) and `DONTNEED`. Page tables are freed
//!   under the write side too, so no fill walks a table being freed.
//!
//! What the design gains over `coarse` is exactly step 1: faults proceed during `mmap`'s gap
//! search; a fault still waits for every region edit, zap and shootdown, which is why the paper
//! found it "only marginally more concurrent" (§5.1, Figure 18: 21x the base fault cost against
//! read/write locking's 29x).
//!
//! The store is a plain `BTreeStore`, as in `coarse`. Broadcast shootdown, as in `coarse`: the
//! design records no page-table users. The Linux rules are `syscalls.rs`'s and `placement.rs`'s;
//! this file is only the lock policy around them.
//!
//! Not for: faults concurrent with region edits (that is `hybrid`'s and `bonsai`'s, §5.2-5.3).

use super::placement;
use super::syscalls::{fault_locked, madvise_locked, mmap_locked, mprotect_locked, munmap_locked};
use super::DesignOps;
use crate::core_state::Core;
use crate::error::{Fault, VmError};
use crate::region::store::{BTreeStore, RegionStore};
use crate::semantics::{AdviceEffect, MmapRequest, Placement};
use crate::shared::Shared;
use crate::sync::stat::{Mutex, RwLock};
use crate::types::{Access, Prot, RegionInfo};
use std::ops::Range;

/// The `faultlock` design's state: the space lock, and the region store under the fault lock.
#[derive(Debug, Default)]
pub(crate) struct FaultLock {
    /// The paper's `mmap_sem`, which only system calls take (always in write mode, hence a
    /// mutex): it serializes them, so the region set changes only under it.
    space: Mutex<()>,
    /// The fault lock and the region set it protects: faults, placement and views read it,
    /// edits write it (while also holding `space`).
    regions: RwLock<BTreeStore>,
}

impl DesignOps for FaultLock {
    fn mmap(&self, sh: &Shared, core: &mut Core, req: MmapRequest) -> Result<u64, VmError> {
        let _space = self.space.lock();
        let req = match req.placement {
            Placement::Hint(_) | Placement::Anywhere if req.sharing.is_ok() => {
                // Step 1: the search, beside the faults (module doc).
                let at = placement::find_locked(
                    &*self.regions.read(),
                    req.placement,
                    req.len,
                    sh.bounds,
                )?;
                MmapRequest {
                    placement: Placement::NoReplace(at),
                    ..req
                }
            }
            _ => req,
        };
        #[cfg(all(test, not(loom)))]
        crate::fault_inject::FAULTLOCK_BETWEEN_GUARDS.reached();
        // Step 2: the edit, excluding faults until the call returns.
        mmap_locked(sh, core, &mut *self.regions.write(), req)
    }

    fn munmap(&self, sh: &Shared, core: &mut Core, range: Range<u64>) -> Result<(), VmError> {
        let _space = self.space.lock();
        munmap_locked(sh, core, &mut *self.regions.write(), range)
    }

    fn mprotect(
        &self,
        sh: &Shared,
        core: &mut Core,
        range: Range<u64>,
        prot: Prot,
    ) -> Result<(), VmError> {
        let _space = self.space.lock();
        mprotect_locked(sh, core, &mut *self.regions.write(), range, prot)
    }

    fn madvise(
        &self,
        sh: &Shared,
        core: &mut Core,
        range: Range<u64>,
        effect: AdviceEffect,
    ) -> Result<(), VmError> {
        let _space = self.space.lock();
        madvise_locked(sh, core, &mut *self.regions.write(), range, effect)
    }

    fn fault(&self, sh: &Shared, core: &mut Core, va: u64, access: Access) -> Result<(), Fault> {
        sh.counters.of(core.id).bump_faults();
        self.populate_page(sh, core, va, access)
    }

    fn populate_page(
        &self,
        sh: &Shared,
        core: &mut Core,
        va: u64,
        access: Access,
    ) -> Result<(), Fault> {
        fault_locked(sh, core, &*self.regions.read(), va, access)
    }

    fn maps(&self) -> Vec<RegionInfo> {
        self.regions.read().iter().map(|r| r.info()).collect()
    }

    fn region_count(&self) -> u64 {
        self.regions.read().len() as u64
    }
}

#[cfg(all(test, not(loom)))]
mod tests;
