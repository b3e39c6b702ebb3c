//! The `coarse` design: the region store under ONE space reader-writer lock, the stock kernel's
//! `mmap_sem` (the baseline of ASPLOS'12 §2 and SOSP'25 §2.2).
//!
//! - Page faults take the lock for **reading**: region lookup, then the page-table fill of the
//!   page under the leaf table's fill lock (concurrent faults on different pages proceed in
//!   parallel; two faults on one page allocate one frame).
//! - `mmap`, `munmap`, `mprotect` and `madvise` take it for **writing** for their whole duration:
//!   region edit, page-table clear/protect, the broadcast shootdown (waiting only for cores
//!   inside an access window, which never wait for this lock), frame frees, page-table frees.
//!
//! Because every modification holds the write lock, a fault never races with a modification of
//! its region or page tables: the region it looked up stays valid until it filled the entry.
//! The Linux rules are `syscalls.rs`'s; this file is only the lock policy around them.
//!
//! The store is a plain `BTreeMap` ([`BTreeStore`]) rather than `aspace_map`'s
//! `BTreeIntervalMap`, which carries its own internal `RwLock`: under the space lock that second
//! lock would only add two atomic read-modify-writes to every fault and call.
//!
//! Not for: scalability (every modification serializes everything; faults and modifications
//! exclude each other). That is what the later designs are for.

use super::ops::DesignOps;
use super::syscalls::{fault_locked, madvise_locked, mmap_locked, mprotect_locked, munmap_locked};
use crate::core_state::Core;
use crate::error::{Fault, VmError};
use crate::region::store::{BTreeStore, RegionStore};
use crate::semantics::{AdviceEffect, MmapRequest};
use crate::shared::Shared;
use crate::sync::stat::RwLock;
use crate::types::{Access, Prot, RegionInfo};
use std::ops::Range;

/// The `coarse` design's state: the region store under the space lock.
#[derive(Debug, Default)]
pub(crate) struct Coarse {
    regions: RwLock<BTreeStore>,
}

impl DesignOps for Coarse {
    fn mmap(&self, sh: &Shared, core: &mut Core, req: MmapRequest) -> Result<u64, VmError> {
        mmap_locked(sh, core, &mut *self.regions.write(), req)
    }

    fn munmap(&self, sh: &Shared, core: &mut Core, range: Range<u64>) -> Result<(), VmError> {
        munmap_locked(sh, core, &mut *self.regions.write(), range)
    }

    fn mprotect(
        &self,
        sh: &Shared,
        core: &mut Core,
        range: Range<u64>,
        prot: Prot,
    ) -> Result<(), VmError> {
        mprotect_locked(sh, core, &mut *self.regions.write(), range, prot)
    }

    fn madvise(
        &self,
        sh: &Shared,
        core: &mut Core,
        range: Range<u64>,
        effect: AdviceEffect,
    ) -> Result<(), VmError> {
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
