//! The Linux bodies of `mmap`, `munmap`, `mprotect`, `madvise` and the page fault, shared by
//! every design (gVisor's `syscalls.go` over `vma.go`; Linux's `do_mmap` under
//! `vm_mmap_pgoff`'s `mmap_write_lock`).
//!
//! Each `*_locked` function takes the region store *borrowed from the caller's lock guard*:
//! `&mut` for the system calls (the caller excludes every other edit and every fault of the
//! range), `&` for the fault (the caller excludes edits of the faulting region). So "the caller
//! holds the lock" is a type, not a comment; a design is the lock policy around these calls.
//! Arguments arrive validated (`semantics.rs`); these bodies apply the rules that need the
//! regions and the page tables, in Linux's order:
//!
//! - `mmap`: placement (`placement.rs`; Linux reports a bad mapping type only after placement,
//!   and `EEXIST` before it), the region edit (splitting, merging, `max_map_count`), removal of
//!   replaced translations for `MAP_FIXED`; `MAP_POPULATE` runs after the design returns, through
//!   its fault path (`designs/mod.rs`, `Designs::populate`), as Linux's `mm_populate` runs after
//!   `mmap_lock` is dropped;
//! - `munmap`: the edit, then [`zap_locked`] and the freeing of page tables that no region
//!   covers any more (the range widened to its neighbouring gaps, SOSP'25 §3.1 Fig. 4);
//! - `mprotect`: applied region by region up to the first hole, then `ENOMEM` (the prefix keeps
//!   the new protection); entries are rewritten and a shootdown is sent if rights were removed;
//! - `madvise`: `DONTNEED` drops private pages (shared anonymous pages keep their contents);
//!   read hints set flags; any hole gives `ENOMEM` after the mapped parts were handled;
//! - the fault: region lookup, rights check, first-write anon identity, then the page-table
//!   fill; a read fault of a private writable region without identity maps without `WRITE`
//!   (Linux's zero page), so the first write faults again and gives the region its identity.
//!   Two forms: [`fault_locked`] under the caller's lock, and [`fault_rcu`], the same rules
//!   with no space lock (a design with lock-free faults supplies only its RCU lookup,
//!   [`RcuRegions`], and what it does on [`Retry`]: take its locks and call [`fault_locked`]);
//! - `MAP_POPULATE`: [`populate`], every page through the design's fault path after its `mmap`
//!   returned.
//!
//! The crate's rule that **a frame is reused only after the shootdown that removed its last
//! translation returned** is encoded once, in [`zap_locked`] (`munmap`, `MAP_FIXED`'s
//! replacement and `madvise`'s `DONTNEED` all use it).
//!
//! Not for: locks (the designs), argument validation (`semantics.rs`), region rules
//! (`region/plan.rs`), the access path (`handle.rs`).

use super::placement;
use crate::core_state::Core;
use crate::error::{Fault, Limit, VmError};
use crate::frames::Frame;
use crate::page_table::organisation::SpaceTables;
use crate::page_table::{CheckedFill, FillError, PtCache, UserMask, VA_BITS};
use crate::region::plan::{adopted_anon, OnOverlap};
use crate::region::store::{RcuRegions, RegionRef, RegionStore};
use crate::region::{AnonId, Attrs};
use crate::semantics::{vm_flags, AdviceEffect, MmapRequest, Placement};
use crate::shared::Shared;
use crate::shootdown::{CoreId, ShootdownPolicy, Targets};
use crate::types::{Access, Prot, Sharing, PAGE_SIZE};
use aspace_rcu::Guard;
use std::ops::Range;

/// The trees the edits here clear, downgrade and free: ignored by both organisations (the shared
/// tree is one; per-core trees are visited by the owner tree's records of who copied:
/// `page_table/organisation.rs`).
const EDITED_TREES: Targets<'static> = Targets::All;

/// The protection a page-table entry of a region gets when filled: a private writable region
/// that has no anon identity yet maps the page without `WRITE`, like Linux's zero page, so that
/// the first write faults and gives the region its identity (which decides merging).
#[inline]
pub(crate) fn pte_prot(attrs: &Attrs) -> Prot {
    if attrs.sharing == Sharing::Private && attrs.anon.is_none() && attrs.prot.contains(Prot::WRITE)
    {
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

/// Fills `page` of `region` for `access`, first giving the region an anon identity on a write
/// (a compatible adjacent neighbour's, else a fresh one). `next` is the region after `region`.
///
/// # Preconditions
/// `regions` is borrowed from the caller's lock (either mode), `region` is one of its regions,
/// contains `page`, and allows `access`.
#[inline]
fn fill_locked(
    sh: &Shared,
    core: &mut Core,
    regions: &impl RegionStore,
    (region, next): (RegionRef<'_>, Option<RegionRef<'_>>),
    page: u64,
    access: Access,
) -> Result<(), FillError> {
    debug_assert!(region.start() <= page && page < region.end());
    let attrs = region.attrs();
    if access == Access::Write && attrs.anon.is_none() && attrs.sharing == Sharing::Private {
        // Only an adjacent next region matters (`adopted_anon`); a distant one's value is not
        // read at all (its node's line may be written by the core that edits the gap after it).
        let next = next
            .filter(|n| n.start() == region.end())
            .map(|n| n.region());
        let id = adopted_anon(&region.region(), next, || regions.adjacent_prev(&region))
            .unwrap_or_else(|| core.fresh_anon(sh));
        region.adopt_anon(id);
    }
    let prot = pte_prot(&region.attrs());
    let mut filled = false;
    let pte = sh.tables.fill(core.id, &mut core.tables, page, prot, || {
        let f = core.cache.alloc(sh.pool());
        filled = f.is_some();
        f
    })?;
    if filled {
        sh.counters.of(core.id).bump_fills();
    } else if !pte.prot().allows(access) {
        // Present without the right the region now grants: a zero-page-like entry of a read
        // fault being written. Upgrade it (rights only grow: no shootdown): the shared entry,
        // or the owner entry and this core's copy (another core's copy faults and upgrades).
        sh.tables.upgrade(core.id, page, prot);
    }
    Ok(())
}

/// The users mask to collect while changing entries: `Some` under targeted shootdown.
#[inline]
fn noting<'u>(sh: &Shared, users: &'u mut UserMask) -> Option<&'u mut UserMask> {
    (sh.shootdown_policy == ShootdownPolicy::Targeted).then_some(users)
}

/// Shoots down the translations just removed or downgraded, by the space's policy: every core
/// (broadcast), or the cores of `users`, the masks of the changed leaves (targeted; the caller's
/// own TLB is flushed directly, and nothing is sent when no other core is named: no other core
/// walked those leaves, so none caches their entries).
///
/// # Preconditions
/// Not inside an access window; `users` was collected by the `_noting` page-table calls that
/// made the changes, and no `free_tables` of their ranges ran since.
#[inline]
fn shoot_down_locked(sh: &Shared, core: &mut Core, users: &UserMask) {
    if core.sole_core {
        // No other core is attached, and none can attach before this write section ends
        // (`designs/coarse.rs`, "One core"): only this core's TLB can hold the translations,
        // and it is outside any access (it holds `&mut Core`). No round, no fence.
        core.tlb.flush_all();
        return;
    }
    let round = match sh.shootdown_policy {
        ShootdownPolicy::Broadcast => sh.shootdown.shootdown_round(Targets::All),
        ShootdownPolicy::Targeted => {
            users.cores_into(sh.config.max_cores, &mut core.targets);
            if core.targets.remove(core.id) {
                // The caller's own TLB needs no round: it is outside any access (it holds
                // `&mut Core`), so flushing it here drops every translation it could use, as
                // its next access window would after a request (`shootdown.rs`). A page only
                // this core touched sends nothing to anyone (RadixVM §3.4).
                core.tlb.flush_all();
            }
            if core.targets.is_empty() {
                return;
            }
            sh.shootdown.shootdown_round(Targets::Cores(&core.targets))
        }
    };
    sh.counters.of(core.id).add_round(round);
}

/// Removes every translation in `ranges` and frees their frames: clears the page-table
/// entries, shoots down (by the space's policy) if any was present, and leaves the frames in
/// `core.freed`, which the handle zeroes into the caller's cache after the call released its
/// locks (`Core::release_freed`). Returns whether anything was mapped. This order is the crate's rule that
/// **a frame is reused only after the shootdown that removed its last translation returned**
/// (`tests/protocol_zap_reuse.rs` fails when it is broken). Under per-core page tables the
/// frames are the owner tree's (`page_table/per_core/owner.rs`): the clear hands them back and
/// notes the cores whose copies it cleared, so they are freed here after the shootdown reached
/// every core whose tree held a copy.
///
/// # Preconditions
/// Every fill that could still install an entry in `ranges` after the zap installs one the
/// caller accepts: no region covers the range any more (and the regions that did are marked,
/// so lock-free fills back off), the caller holds the store exclusively, or the region stays
/// and a fill after the zap is what Linux allows too (a fresh zero page after `DONTNEED`, or
/// after `MAP_FIXED` over an unwritten region with the same attributes: the `interval`
/// design's lock-free faults may fill those, consistent with a fault after the zap). The caller
/// is not inside an access window (it holds `&mut Core`).
#[inline]
fn zap_locked(sh: &Shared, core: &mut Core, ranges: impl IntoIterator<Item = Range<u64>>) -> bool {
    let mut freed = std::mem::take(&mut core.freed);
    let mut users = UserMask::default();
    let mut any = false;
    for range in ranges {
        any |= sh.tables.clear_range_noting(
            EDITED_TREES,
            &core.reader,
            range,
            &mut freed,
            noting(sh, &mut users),
        );
    }
    if any {
        // Every core that could still translate to these frames has flushed or finished its
        // access after this returns: they may be zeroed and reused. They stay in `core.freed`
        // until the call's locks are released (`Core::release_freed`, called by the handle),
        // so that the zeroing runs outside them.
        shoot_down_locked(sh, core, &users);
    }
    core.freed = freed;
    any
}

/// Bytes one leaf page table maps.
const LEAF_SPAN: u64 = 512 * PAGE_SIZE;

/// Whether unmapping `range` can have left a page table with no region: some leaf-sized
/// aligned block that overlaps `range` lies inside `gap` (a table of any level that became free
/// covers such a block; tables that lie wholly in the old gaps were freed when those gaps
/// formed, so only tables overlapping `range` are candidates).
#[inline]
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

/// The attributes of the region a validated `mmap` request makes, of type `sharing` with anon
/// identity `anon` (a shared mapping's shmem number; `None` for a private one, which gets its
/// identity at its first write fault). `shm_base` is set where the mapping lands.
#[inline]
pub(crate) fn new_region_attrs(req: &MmapRequest, sharing: Sharing, anon: Option<AnonId>) -> Attrs {
    Attrs {
        prot: req.prot,
        sharing,
        flags: req.flags,
        anon,
        shm_base: 0,
    }
}

/// `mmap` of a validated request (module doc). Returns the start of the mapping.
///
/// # Errors
/// `EEXIST`, `ENOMEM` (no gap, `max_map_count`), or the mapping-type error of `req`.
pub(crate) fn mmap_locked(
    sh: &Shared,
    core: &mut Core,
    regions: &mut impl RegionStore,
    req: MmapRequest,
) -> Result<u64, VmError> {
    let bounds = sh.bounds;
    let sharing = match req.sharing {
        Ok(s) => s,
        Err(e) => {
            // Linux reports a bad mapping type only after placement (and EEXIST).
            let start = placement::find_locked(regions, req.placement, req.len, bounds)?;
            if matches!(req.placement, Placement::NoReplace(_))
                && !regions.is_free(start, start + req.len)
            {
                return Err(VmError::Exists);
            }
            return Err(e);
        }
    };
    let shared = sharing == Sharing::Shared;
    // A shared mapping is a shmem object of its own, numbered like Linux's inodes.
    let attrs = new_region_attrs(&req, sharing, shared.then(|| regions.next_shmem()));
    let (start, outcome) = placement::map_placed_locked(
        core,
        regions,
        req.placement,
        req.len,
        attrs,
        bounds,
        sh.config.max_map_count,
    )?;
    if shared {
        regions.shmem_created();
    }
    let range = start..start + req.len;
    if outcome.overlapped {
        // MAP_FIXED replaced mappings: their translations go, like munmap's.
        zap_locked(sh, core, [range.clone()]);
    }
    Ok(start)
}

/// `munmap` of a validated, non-empty page range.
///
/// # Errors
/// `ENOMEM` when a split would exceed `max_map_count` (nothing changed).
pub(crate) fn munmap_locked(
    sh: &Shared,
    core: &mut Core,
    regions: &mut impl RegionStore,
    range: Range<u64>,
) -> Result<(), VmError> {
    let outcome = regions.edit(
        &mut core.edits,
        range.clone(),
        |_| None,
        OnOverlap::Rewrite,
        sh.config.max_map_count,
    )?;
    if outcome.overlapped {
        zap_locked(sh, core, [range.clone()]);
    }
    // Tables are freed also when nothing was mapped: a design whose frees stop short of the
    // true gap leaves tables in holes, and a later `munmap` of the hole reclaims them
    // (`interval`'s windows stop at the arena separators they do not hold; it frees past them
    // itself: `designs/windowed.rs`, "Page tables past separators"). Skip the table walk
    // when no table can have become free (the common case of a page unmapped next to a
    // mapping in the same leaf table): a table is freeable only if it
    // covers part of `range` and lies inside the widened gap, and no leaf-sized block
    // touching `range` can lie inside it when `range` is surrounded closely enough.
    // No region can lie outside the space's bounds, so a gap that reaches a bound reaches the
    // end of the page tables (a store that sees only what it holds, `radix`'s window, would
    // otherwise keep the tables that straddle `min_addr` or `max_addr`).
    let beyond_bounds = |mut gap: Range<u64>| {
        if gap.start <= sh.bounds.min_addr {
            gap.start = 0;
        }
        if gap.end >= sh.bounds.max_addr {
            gap.end = 1 << VA_BITS;
        }
        gap
    };
    let optimistic = beyond_bounds(0..outcome.next_start);
    if may_free_tables(&range, &optimistic) {
        let gap = beyond_bounds(regions.gap_around(range.clone(), outcome, 1 << VA_BITS));
        if may_free_tables(&range, &gap) {
            // No region intersects `gap`, its entries were cleared, and the store is held
            // exclusively: no fill can run in it.
            sh.tables.free_tables(
                EDITED_TREES,
                &core.reader,
                &mut core.tables,
                gap,
                &sh.domain,
            );
        }
    }
    Ok(())
}

/// `mprotect` of a validated, non-empty page range with known prot bits.
///
/// # Errors
/// `ENOMEM` on a hole (after changing the regions before it) or when splits would exceed
/// `max_map_count`; the `PROT_GROWSDOWN` errors.
pub(crate) fn mprotect_locked(
    sh: &Shared,
    core: &mut Core,
    regions: &mut impl RegionStore,
    range: Range<u64>,
    prot: Prot,
) -> Result<(), VmError> {
    let overlaps = !regions.is_free(range.start, range.end);
    let covers_start = regions.lookup(range.start).is_some();
    if let Some(e) = crate::semantics::grows_error(prot, overlaps, covers_start) {
        return Err(e);
    }
    if !covers_start {
        return Err(VmError::OutOfMemory(Limit::Hole));
    }
    // Linux applies the change region by region and stops with ENOMEM at the first hole:
    // the prefix before the hole keeps the new protection.
    let hole = regions.first_hole(range.clone());
    let done = range.start..hole.unwrap_or(range.end);
    regions.edit(
        &mut core.edits,
        done.clone(),
        |a| {
            a.map(|a| Attrs {
                prot,
                flags: vm_flags::after_mprotect(a.flags, prot, a.sharing, a.anon.is_some()),
                ..a
            })
        },
        OnOverlap::Rewrite,
        sh.config.max_map_count,
    )?;
    let mut removed = false;
    let mut users = UserMask::default();
    for r in regions.overlapping(done) {
        removed |= sh.tables.protect_range_noting(
            EDITED_TREES,
            &core.reader,
            r.start..r.end,
            pte_prot(&r.attrs),
            noting(sh, &mut users),
        );
    }
    if removed {
        shoot_down_locked(sh, core, &users);
    }
    match hole {
        Some(_) => Err(VmError::OutOfMemory(Limit::Hole)),
        None => Ok(()),
    }
}

/// `madvise` of a validated, non-empty page range.
///
/// # Errors
/// `ENOMEM` when part of the range is unmapped (after handling the mapped parts) or a split
/// would exceed `max_map_count`.
pub(crate) fn madvise_locked(
    sh: &Shared,
    core: &mut Core,
    regions: &mut impl RegionStore,
    range: Range<u64>,
    effect: AdviceEffect,
) -> Result<(), VmError> {
    let hole = regions.first_hole(range.clone()).is_some();
    match effect {
        AdviceEffect::None => {}
        AdviceEffect::DontNeed => {
            // Private pages are dropped (they read back as zeroes); shared anonymous pages
            // keep their contents (shmem backs them), so nothing changes there.
            let private = regions
                .overlapping(range.clone())
                .filter(|r| r.attrs.sharing == Sharing::Private)
                .map(|r| r.start..r.end);
            zap_locked(sh, core, private);
        }
        AdviceEffect::ReadHint(hint) => {
            if !regions.is_free(range.start, range.end) {
                let mask = vm_flags::RAND_READ | vm_flags::SEQ_READ;
                regions.edit(
                    &mut core.edits,
                    range,
                    |a| {
                        a.map(|a| Attrs {
                            flags: (a.flags & !mask) | hint,
                            ..a
                        })
                    },
                    OnOverlap::Rewrite,
                    sh.config.max_map_count,
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

/// Handles a fault at `va` (the page has no present entry allowing `access`): on success the
/// page-table entry allows the access (the caller retries its translation). Counts nothing:
/// the design counts accesses' faults, not `MAP_POPULATE`'s.
///
/// # Errors
/// [`Fault::Unmapped`], [`Fault::Protection`], or [`Fault::OutOfMemory`] when no frame is free.
#[inline]
pub(crate) fn fault_locked(
    sh: &Shared,
    core: &mut Core,
    regions: &impl RegionStore,
    va: u64,
    access: Access,
) -> Result<(), Fault> {
    let Some(region) = regions.lookup_with_next(va) else {
        return Err(Fault::Unmapped { addr: va });
    };
    if !region.0.prot().allows(access) {
        return Err(Fault::Protection { addr: va });
    }
    let page = va & !(PAGE_SIZE - 1);
    fill_locked(sh, core, regions, region, page, access).map_err(|e| match e {
        FillError::NoFrame | FillError::NoTable => Fault::OutOfMemory { addr: va },
    })
}

/// Why a lock-free fault ([`fault_rcu`]) could not decide: the caller takes its locks and runs
/// [`fault_locked`] (or looks again).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Retry {
    /// The range of the region the lookup found containing the address (a design that locks
    /// ranges holds this one: whatever region contains the address once it is held overlaps
    /// it); the page's range after a miss that does not answer `Unmapped`.
    pub(crate) region: Range<u64>,
}

/// [`fault_locked`] without any space lock: the region found by `regions`' lock-free lookup
/// under an RCU read section of the caller's core, then a fill that installs no table and goes
/// ahead under the leaf's lock only if that region is not marked replaced
/// (`PageTables::fill_checked`). `Ok(r)` is the fault's answer; [`Retry`] when only the caller's
/// locks can answer. Counts fills like [`fault_locked`], not faults.
///
/// # What answers here, and which race each check closes
///
/// - **No region: `Unmapped`**, linearized at the lookup, for a set whose edits publish a
///   range's new regions in the same step that removes the old ones
///   ([`RcuRegions::MISS_IS_UNMAPPED`]; otherwise `Retry`, for the page's range: the lookup
///   may have run between the unlink and the link of a split). A region's translations exist
///   only after the commit that publishes it (`MAP_POPULATE` runs after the design's `mmap`
///   returned, [`populate`]), so no page beside this one can already be readable.
/// - **Rights refused: `Protection`**, only for a region not marked replaced, linearized at
///   that check: an edit marks every region it replaces before it changes any entry (an
///   `mprotect` adding rights upgrades entries before its commit), so an unmarked region's
///   protection is still what every entry shows. A marked one's refusal may be stale (another
///   core may already use an upgraded entry): `Retry`.
/// - **First write of a private region without an anon identity: `Retry`.** Giving the region
///   its identity may adopt an adjacent neighbour's, which needs the neighbours held by the
///   caller's locks.
/// - **A table on the way is missing: `Retry`** (`CheckedFill::NoLeaf`): a lock-free fault
///   cannot tell a missing table from one being freed, so it never installs one.
/// - **The stale fill (after `munmap`/`mprotect` of the region returned): `Retry`**
///   (`CheckedFill::Refused`). The editor marks each region it replaces or removes and
///   executes a `SeqCst` fence (`StoredRegion::mark_replaced`) before it clears or downgrades
///   the region's entries under each existing leaf's lock, and the store's commit marks every
///   value it takes out of the set, unchanged copies included (the leave rule,
///   `region/store.rs`). The fill takes the leaf lock, executes a `SeqCst` fence and checks
///   the mark: if both took the same leaf's lock, the lock orders them (the fill ran first and
///   the editor clears or downgrades what it stored, or the fill sees the mark); if the
///   editor's walk found an entry on the way empty, the leaf the fill reached below it was
///   installed after the editor's load, so the fences are ordered editor-first and the check
///   sees the mark (the argument is in `PageTables::fill_checked`). A leaf the editor frees is
///   unlinked by waiting out its lock holder (`PageTables::collect`), and the read section
///   keeps it from reuse.
/// - **The fault during a split (or merge, or any rewrite of the region): `Retry`**, by the
///   same mark: a split replaces the region by its pieces, marking the old value, so a fill
///   for the value found before the split is refused instead of using the half the address
///   does not belong to (its rights, its identity); only an edit *overlapping* the region can
///   mark it, so edits of other regions never make a fault retry. (A lookup that found no
///   region during a split: above.)
///
/// # Preconditions
/// `regions` shares the space's RCU domain (one read section covers the lookup and the page
/// walk; `aspace_map`'s maps panic on a guard of another domain) and obeys the leave rule; the
/// caller is not inside an access window (`&mut Core`).
///
/// # Errors
/// `Ok(Err(Fault::OutOfMemory))` when no frame is free.
#[inline]
pub(crate) fn fault_rcu<R: RcuRegions>(
    sh: &Shared,
    core: &mut Core,
    regions: &R,
    va: u64,
    access: Access,
) -> Result<Result<(), Fault>, Retry> {
    let Core {
        reader,
        cache,
        id,
        tables,
        ..
    } = core;
    let guard = reader.read();
    let r = fault_rcu_in(
        (&sh.tables, *id, tables),
        regions,
        &guard,
        va,
        access,
        || cache.alloc(sh.pool()),
    )?;
    Ok(r.map(|new_frame| {
        if new_frame {
            sh.counters.of(core.id).bump_fills();
        }
    }))
}

/// The body of [`fault_rcu`] inside the caller's read section `guard` (of the space's domain),
/// on the page tables `tables` (the space's tables, the faulting core, and its table cache,
/// from which a per-core copy's tables come), with `frame` giving the frame a fill takes: what
/// the loom models (`designs/lock_free_loom.rs`) run, on each lock-free design's store. `Ok(Ok(new))`
/// when the entry now allows the access (`new`: `frame` was called and its frame installed).
///
/// # Errors
/// As [`fault_rcu`].
#[inline]
pub(crate) fn fault_rcu_in<R: RcuRegions>(
    (tables, core, cache): (&SpaceTables, CoreId, &mut PtCache),
    regions: &R,
    guard: &Guard<'_>,
    va: u64,
    access: Access,
    frame: impl FnOnce() -> Option<Frame>,
) -> Result<Result<bool, Fault>, Retry> {
    let page = va & !(PAGE_SIZE - 1);
    let Some((region, stored)) = regions.lookup_rcu(va, guard) else {
        if R::MISS_IS_UNMAPPED {
            return Ok(Err(Fault::Unmapped { addr: va }));
        }
        // Saturating: a fault in the top page of `u64` (a raw address from a caller) has no
        // page end to name; the retry takes the locked path, which answers `Unmapped`.
        return Err(Retry {
            region: page..page.saturating_add(PAGE_SIZE),
        });
    };
    let attrs = stored.attrs();
    if !attrs.prot.allows(access) {
        if stored.is_replaced() {
            return Err(Retry { region });
        }
        return Ok(Err(Fault::Protection { addr: va }));
    }
    if access == Access::Write && attrs.anon.is_none() && attrs.sharing == Sharing::Private {
        return Err(Retry { region });
    }
    #[cfg(all(test, not(loom)))]
    crate::fault_inject::STAGE1_BEFORE_FILL.reached();
    let filled = tables.fill_checked(
        core,
        cache,
        page,
        pte_prot(&attrs),
        access,
        || !stored.is_replaced(),
        frame,
    );
    match filled {
        Ok(CheckedFill::Filled { new_frame }) => Ok(Ok(new_frame)),
        Ok(CheckedFill::NoLeaf | CheckedFill::Refused) => Err(Retry { region }),
        Err(_) => Ok(Err(Fault::OutOfMemory { addr: va })),
    }
}

/// `MAP_POPULATE` of `range` (a mapping just made, with protection `prot`): faults every page
/// through `fault_page` (the design's fault path, not counted as faults), after the design's
/// `mmap` returned (its locks released, its region published), as Linux's `mm_populate` runs
/// after `mmap_lock` is dropped; so no design installs a translation for a region that other
/// cores cannot see yet (a lock-free fault would answer `Unmapped` for a page beside one it
/// could already read). Writable mappings are populated with write faults, like Linux's; a
/// fault that fails (out of memory, or a concurrent `munmap`/`mprotect` of the range) ends the
/// populate, and the `mmap` still succeeds, as in Linux.
pub(crate) fn populate(
    range: Range<u64>,
    prot: Prot,
    mut fault_page: impl FnMut(u64, Access) -> Result<(), Fault>,
) {
    if !prot.allows(Access::Read) {
        return;
    }
    let access = if prot.contains(Prot::WRITE) {
        Access::Write
    } else {
        Access::Read
    };
    for page in range.step_by(PAGE_SIZE as usize) {
        if fault_page(page, access).is_err() {
            break;
        }
    }
}

#[cfg(all(test, not(loom)))]
mod per_core_tests;
