//! The `coarse` design: the region set under ONE space reader-writer lock, the stock kernel's
//! `mmap_sem` (DESIGN §6, the baseline of ASPLOS'12 §2 and SOSP'25 §2.2).
//!
//! - Page faults take the lock for **reading**: region lookup, then `PageTables::fill` of the
//!   page under the leaf table's fill lock (concurrent faults on different pages proceed in
//!   parallel; two faults on one page allocate one frame).
//! - `mmap`, `munmap`, `mprotect` and `madvise` take it for **writing** for their whole duration:
//!   region edit, page-table clear/protect, the broadcast shootdown (waiting only for cores
//!   inside an access, which never wait for this lock), frame frees, page-table frees.
//!
//! Because every modification holds the write lock, a fault never races with a modification of
//! its region or page tables: the region it looked up stays valid until it filled the entry.
//!
//! The region set is a plain `BTreeMap` ([`RegionSet`]) rather than `aspace_map`'s
//! `BTreeIntervalMap`, which carries its own internal `RwLock`: under the space lock that second
//! lock would only add two atomic read-modify-writes to every fault and call.
//!
//! Not for: scalability (every modification serializes everything; faults and modifications
//! exclude each other). That is what the later designs are for.

use super::{free_tables_locked, protect_locked, shootdown_all, zap_locked, DesignOps};
use crate::error::{Fault, Limit, VmError};
use crate::handle::Core;
use crate::page_table::{FillError, VA_BITS};
use crate::region::{Attrs, RegionSet, Slot};
use crate::semantics::{self, vm_flags, AdviceEffect, MmapRequest, Placement};
use crate::space::Shared;
use crate::types::{Access, Prot, RegionInfo, Sharing, PAGE_SIZE};
use parking_lot::RwLock;
use std::ops::Range;

/// The `coarse` design's state: the region set under the space lock.
#[derive(Debug)]
pub(crate) struct Coarse {
    regions: RwLock<RegionSet>,
}

impl Coarse {
    /// An empty space.
    pub(crate) fn new() -> Coarse {
        Coarse {
            regions: RwLock::new(RegionSet::new()),
        }
    }
}

/// The protection a page-table entry of a region gets when filled for `access`: a read fault in
/// a private writable region that has no anon identity yet maps the page without `WRITE`, like
/// Linux's zero page, so that the first write faults and gives the region its identity (which
/// decides merging, `region.rs`).
fn pte_prot(attrs: &Attrs) -> Prot {
    if attrs.sharing == Sharing::Private && attrs.anon == 0 && attrs.prot.contains(Prot::WRITE) {
        let stripped = attrs.prot.bits() & !Prot::WRITE.bits();
        // x86: a write-only page is readable. Stripping WRITE from `-w-` must leave READ, or the
        // read fault would install an entry that allows nothing and the access would fault forever
        // (found by the differential test: `mmap(PROT_WRITE)` then a read hung).
        if stripped & Prot::KNOWN.bits() == 0 {
            Prot::from_bits_retain(stripped | Prot::READ.bits())
        } else {
            Prot::from_bits_retain(stripped)
        }
    } else {
        attrs.prot
    }
}

/// Fills `page` of the region `(end, slot)` for `access`.
///
/// # Preconditions
/// The caller holds the space lock (either mode) and checked that the region allows `access`.
fn fill_locked(
    sh: &Shared,
    core: &mut Core,
    regions: &RegionSet,
    ((end, slot), next): ((u64, &Slot), Option<(u64, &Slot)>),
    page: u64,
    access: Access,
) -> Result<(), FillError> {
    debug_assert!(slot.start() <= page && page < end);
    if access == Access::Write && slot.anon() == 0 {
        regions.assign_anon(end, slot, next, || core.fresh_anon(regions));
    }
    let prot = pte_prot(&slot.attrs());
    let mut filled = false;
    let pte = sh.tables.fill(page, prot, || {
        let f = core.cache.alloc(&sh.pool);
        filled = f.is_some();
        f
    })?;
    if filled {
        sh.counters(core.id).bump_fills();
    } else if !pte.prot().allows(access) {
        // Present without the right the region now grants: a zero-page-like entry of a read
        // fault being written. Upgrade it (rights only grow: no shootdown).
        sh.tables.protect_range(page..page + PAGE_SIZE, prot);
    }
    Ok(())
}

/// Bytes one leaf page table maps.
const LEAF_SPAN: u64 = 512 * PAGE_SIZE;

/// Whether unmapping `range` can have left a page table with no region: some leaf-sized
/// aligned block that overlaps `range` lies inside `gap` (a table of any level that became free
/// covers such a block; tables that lie wholly in the old gaps were freed when those gaps
/// formed, so only tables overlapping `range` are candidates).
fn may_free_tables(range: &Range<u64>, gap: &Range<u64>) -> bool {
    let first = range.start & !(LEAF_SPAN - 1);
    let last = (range.end - 1) & !(LEAF_SPAN - 1);
    if last > first + LEAF_SPAN {
        return true;
    }
    [first, last]
        .iter()
        .any(|&b| gap.start <= b && b.saturating_add(LEAF_SPAN) <= gap.end)
}

impl DesignOps for Coarse {
    fn mmap(&self, sh: &Shared, core: &mut Core, req: MmapRequest) -> Result<u64, VmError> {
        let bounds = sh.bounds;
        let max = sh.config.max_map_count;
        let mut regions = self.regions.write();
        let sharing = match req.sharing {
            Ok(s) => s,
            Err(e) => {
                // Linux reports a bad mapping type only after placement (and EEXIST).
                let start = semantics::place(
                    req.placement,
                    req.len,
                    bounds,
                    |s, e| regions.is_free(s, e),
                    |len| regions.find_gap_topdown(len, bounds),
                )?;
                if matches!(req.placement, Placement::NoReplace(_))
                    && !regions.is_free(start, start + req.len)
                {
                    return Err(VmError::Exists);
                }
                return Err(e);
            }
        };
        let attrs = Attrs {
            prot: req.prot,
            sharing,
            flags: req.flags,
            // A shared mapping is a shmem object of its own, numbered like Linux's inodes.
            anon: if sharing == Sharing::Shared {
                regions.next_shmem()
            } else {
                0
            },
            shm_base: 0,
        };
        let len = req.len;
        // The attributes of the new region if it lands at `at` (a shared one's offsets count
        // from there).
        let at = |a: u64| {
            move |_| {
                Some(Attrs {
                    shm_base: if sharing == Sharing::Shared { a } else { 0 },
                    ..attrs
                })
            }
        };
        let start = match req.placement {
            Placement::Fixed(a) => {
                let outcome = regions.edit(a..a + len, at(a), max, false)?;
                if outcome.overlapped {
                    // MAP_FIXED replaced mappings: their translations go, like munmap's.
                    zap_locked(sh, core, a..a + len);
                }
                a
            }
            Placement::NoReplace(a) => {
                regions.edit(a..a + len, at(a), max, true)?;
                a
            }
            Placement::Hint(h) if h <= bounds.max_addr - len => {
                // Try the hint: the exclusive edit checks it is free and maps it in one search.
                match regions.edit(h..h + len, at(h), max, true) {
                    Ok(_) => h,
                    Err(VmError::Exists) => {
                        let a = regions
                            .find_gap_topdown(len, bounds)
                            .ok_or(VmError::OutOfMemory(Limit::AddressSpace))?;
                        regions.edit(a..a + len, at(a), max, false)?;
                        a
                    }
                    Err(e) => return Err(e),
                }
            }
            Placement::Hint(_) | Placement::Anywhere => {
                let a = regions
                    .find_gap_topdown(len, bounds)
                    .ok_or(VmError::OutOfMemory(Limit::AddressSpace))?;
                regions.edit(a..a + len, at(a), max, false)?;
                a
            }
        };
        if sharing == Sharing::Shared {
            regions.shmem_created();
        }
        let range = start..start + len;
        if req.populate && req.prot.allows(Access::Read) {
            // Linux populates writable private mappings with write faults.
            let access = if req.prot.contains(Prot::WRITE) {
                Access::Write
            } else {
                Access::Read
            };
            let regions = &*regions;
            let region = regions.lookup_with_next(start).expect("just mapped");
            let mut page = range.start;
            while page < range.end {
                // Like Linux, a populate that runs out of memory still returns success.
                if fill_locked(sh, core, regions, region, page, access).is_err() {
                    break;
                }
                page += PAGE_SIZE;
            }
        }
        Ok(start)
    }

    fn munmap(&self, sh: &Shared, core: &mut Core, range: Range<u64>) -> Result<(), VmError> {
        let mut regions = self.regions.write();
        let outcome = regions.edit(range.clone(), |_| None, sh.config.max_map_count, false)?;
        if !outcome.overlapped {
            return Ok(());
        }
        zap_locked(sh, core, range.clone());
        // Skip the table walk when no table can have become free (the common case of a page
        // unmapped next to a mapping in the same leaf table): a table is freeable only if it
        // covers part of `range` and lies inside the widened gap, and no leaf-sized block
        // touching `range` can lie inside it when `range` is surrounded closely enough.
        let optimistic = 0..outcome.next_start;
        if may_free_tables(&range, &optimistic) {
            let gap = regions.gap_around(range.clone(), outcome, 1 << VA_BITS);
            if may_free_tables(&range, &gap) {
                free_tables_locked(sh, gap);
            }
        }
        Ok(())
    }

    fn mprotect(
        &self,
        sh: &Shared,
        _core: &mut Core,
        range: Range<u64>,
        prot: Prot,
    ) -> Result<(), VmError> {
        let mut regions = self.regions.write();
        let overlaps = !regions.is_free(range.start, range.end);
        if let Some(e) =
            semantics::grows_error(prot, overlaps, regions.lookup(range.start).is_some())
        {
            return Err(e);
        }
        if regions.lookup(range.start).is_none() {
            return Err(VmError::OutOfMemory(Limit::Hole));
        }
        // Linux applies the change region by region and stops with ENOMEM at the first hole:
        // the prefix before the hole keeps the new protection.
        let hole = regions.first_hole(range.clone());
        let done = range.start..hole.unwrap_or(range.end);
        regions.edit(
            done.clone(),
            |a| {
                a.map(|a| Attrs {
                    prot,
                    flags: vm_flags::after_mprotect(a.flags, prot, a.sharing, a.anon != 0),
                    ..a
                })
            },
            sh.config.max_map_count,
            false,
        )?;
        let mut removed = false;
        for r in regions.overlapping(done) {
            removed |= protect_locked(sh, r.start..r.end, pte_prot(&r.attrs));
        }
        if removed {
            shootdown_all(sh);
        }
        match hole {
            Some(_) => Err(VmError::OutOfMemory(Limit::Hole)),
            None => Ok(()),
        }
    }

    fn madvise(
        &self,
        sh: &Shared,
        core: &mut Core,
        range: Range<u64>,
        effect: AdviceEffect,
    ) -> Result<(), VmError> {
        let mut regions = self.regions.write();
        let hole = regions.first_hole(range.clone()).is_some();
        match effect {
            AdviceEffect::None => {}
            AdviceEffect::DontNeed => {
                // Private pages are dropped (they read back as zeroes); shared anonymous pages
                // keep their contents (shmem backs them), so nothing changes there.
                let mut freed = std::mem::take(&mut core.freed);
                for r in regions.overlapping(range.clone()) {
                    if r.attrs.sharing == Sharing::Private {
                        sh.tables.clear_range(r.start..r.end, &mut freed);
                    }
                }
                if !freed.is_empty() {
                    shootdown_all(sh);
                    core.cache.free_all(&sh.pool, &mut freed);
                }
                core.freed = freed;
            }
            AdviceEffect::ReadHint(hint) => {
                if !regions.is_free(range.start, range.end) {
                    let mask = vm_flags::RAND_READ | vm_flags::SEQ_READ;
                    regions.edit(
                        range,
                        |a| {
                            a.map(|a| Attrs {
                                flags: (a.flags & !mask) | hint,
                                ..a
                            })
                        },
                        sh.config.max_map_count,
                        false,
                    )?;
                }
            }
        }
        if hole {
            Err(VmError::OutOfMemory(Limit::Hole))
        } else {
            Ok(())
        }
    }

    fn fault(&self, sh: &Shared, core: &mut Core, va: u64, access: Access) -> Result<(), Fault> {
        sh.counters(core.id).bump_faults();
        let regions = self.regions.read();
        let Some(region) = regions.lookup_with_next(va) else {
            return Err(Fault::Unmapped { addr: va });
        };
        if !region.0 .1.prot().allows(access) {
            return Err(Fault::Protection { addr: va });
        }
        let page = va & !(PAGE_SIZE - 1);
        fill_locked(sh, core, &regions, region, page, access)
            .map_err(|FillError::NoFrame| Fault::OutOfMemory { addr: va })
    }

    fn maps(&self) -> Vec<RegionInfo> {
        self.regions.read().iter().map(|r| r.info()).collect()
    }

    fn region_count(&self) -> u64 {
        self.regions.read().len() as u64
    }
}
