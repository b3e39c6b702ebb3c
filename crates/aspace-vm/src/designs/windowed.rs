//! The lock policy of the designs that lock ranges of their region map: IntervalVM's (SOSP'25
//! §5), shared by `interval` (the interval skiplist, one shared page-table tree) and `radix`
//! (RadixVM's radix tree, per-core page tables). [`Windowed`] is generic over the map
//! ([`RangeMap`]); each design's file says what its map brings and documents the policy's
//! consequences for it (`interval.rs` has the protocol in full).
//!
//! # The policy
//!
//! - **Locks**: the hybrid-granular lock ([`HybridLock`], §5.1: LR for faults that need locks,
//!   LW for system calls, GR for `maps()`/`region_count`, GW for the placement fallback), then
//!   the map's range lock through a [`Window`] (`window.rs`: the range a call reads or changes,
//!   widened to whole regions and the neighbours it may merge with), then leaf page-table locks.
//!   Every Linux rule is `syscalls.rs`'s, run on the window as its region store.
//! - **Faults** in two stages: `syscalls::fault_rcu` over the map's lock-free lookup
//!   ([`RcuRegions`]) with no space lock; on `Retry`, LR and a window around the region stage 1
//!   found, and `syscalls::fault_locked` on it.
//! - **Alloc**: `mmap` without an address of a private mapping claims a gap in the calling
//!   core's arena ([`RangeMap::alloc_in_arena`]) padded by a page on both sides (so no merge
//!   applies and `maps()` stays Linux's), under LW; otherwise (arenas off or full, shared
//!   mappings, hints) Linux's placement: the hint under its window, else lock-free scans taken as
//!   `MAP_FIXED_NOREPLACE` edits, and GW after [`PLACEMENT_TRIES`] lost choices.
//! - **Modify**: `munmap`, `mprotect`, `madvise`, `MAP_FIXED` take LW and a window, run the
//!   Linux body and commit with one swap; page-table edits, table frees and the shootdown run
//!   while the range is held.
//! - **Limits**: the region count through a per-core limit counter (`region/count.rs`).
//!
//! # Page tables past separators
//!
//! `munmap` frees the page tables wholly inside the free span around its range
//! (`syscalls::munmap_locked`), as far as its window sees it. The skiplist's windows stop at
//! the arena separators next to what they hold (`WindowMap::separator_ends`), so a table
//! covering a separator (a 512 GiB level-3 table over eight 64 GiB arenas, or any table when
//! arenas are small) would stay linked after the last region under it went (issue 21: 8 such
//! tables after a 64-core churn). So when the free span ends at a separator
//! (`Window::free_span_cut`), after the commit and still under LW, for each end of the range
//! and each table level upwards: a block already inside the freed span was freed; else the
//! table there is probed lock-free (`PageTables::table_at`): busy, stop (the tables above hold
//! it); absent, go up; empty, take a window over the block, and if no region overlaps it free
//! the tables of the free span around it (exact: the window holds the block, and no region can
//! appear in its stable span), then go up. The probe begins with a `SeqCst` fence after the
//! caller's own frees, so two cores that emptied two parts of one table do not both see the
//! other's part and leave it (the loom model `loom_two_cores_freeing_a_tables_last_children_
//! one_sees_it_empty`, `page_table/loom_tests.rs`). Cost: one probe walk when a window stops
//! at a separator (an arena emptied), and a second window only when a table there is empty.
//!
//! A `munmap` stops going up at the first block that overlaps an arena other than its core's
//! (a 512 GiB table over eight arenas): a window over it locks the other arenas' separators
//! and nodes, the lines their owners write on every call. The conflict audit measured it
//! (`alloc-fault-modify`, 64 cores: 8.2 conflicting lines per operation at the lock CAS, 19.0
//! at 128, growing with cores, while the other arenas' owners kept mapping). Such tables are
//! freed by `reclaim_tables` instead, which runs at every detach (`handle.rs`) and on
//! `discard_page_tables`: it probes, under LW, the blocks around every arena boundary the same
//! way, with windows over any arenas. So an empty table that spans arenas stays linked until
//! the next detach or reclaim (at most one 4 KiB table per 512 GiB of arenas, and the lower
//! tables under it were freed by the `munmap`s).
//! The radix tree has no separators: its windows hold only their slots, and its owner tree's
//! tables past them are freed by `reclaim_tables` too. The test:
//! `stress_churn_then_unmap_everything_frees_every_page_table` (every design's conformance
//! suite).
//!
//! Zone separators (`interval`'s hinted and `MAP_FIXED` mappings outside the arenas) end free
//! spans too: a `munmap` that empties a zone probes the tables past its zone's separators the
//! same way, and a window over an empty 1 GiB table there may hold the first node of the zone
//! above (a window is widened by a page): a conflict with that zone's owner only when a zone
//! empties, as Linux frees a table when its last mapping goes.
//!
//! # Departures common to both maps
//!
//! The commit's `swap` allocates after the page tables were edited: out of memory there
//! panics (`interval.rs`, "Departures", has the consequences and the regression test).
//!
//! Not for: the Linux rules (`syscalls.rs`), placement rules (`placement.rs`), the maps.

use super::ops::DesignOps;
use super::placement::{self, arena_layout, hint_fits};
use super::syscalls::{
    fault_locked, fault_rcu, madvise_locked, mmap_locked, mprotect_locked, munmap_locked,
    new_region_attrs, Retry,
};
use super::window::{Window, WindowMap};
use crate::config::CountLimit;
use crate::core_state::Core;
use crate::error::{Fault, Limit, VmError};
use crate::page_table::TableAt;
use crate::region::count::RegionCount;
use crate::region::gap::HighestGap;
use crate::region::shmem::ShmemNumbers;
use crate::region::store::{RcuRegions, RegionRef, RegionStore, StoredRegion};
use crate::region::Region;
use crate::semantics::{AdviceEffect, Bounds, MmapRequest, Placement};
use crate::shared::Shared;
use crate::shootdown::Targets;
use crate::types::{Access, Prot, RegionInfo, Sharing};
use aspace_map::{ArenaLayout, Interval, KEY_SPACE_END, PAGE_SIZE};
use aspace_rcu::Domain;
use aspace_sync::{AtomicCounter, HybridLock, LimitCounter};
use std::ops::{ControlFlow, Range};

/// What a design's region map brings to [`Windowed`]: a range lock a window can hold, a
/// lock-free lookup under RCU that obeys the leave rule (`region/store.rs`), and a claim in a
/// core's arena.
pub(crate) trait RangeMap: WindowMap + RcuRegions + Sized + 'static {
    /// The design's name (its `Debug`).
    const DESIGN: &'static str;
    /// An empty map over `domain` (the space's), whose commits mark every region they take
    /// out; `layout` is the configuration's arenas.
    fn build(domain: Domain, layout: Option<ArenaLayout>) -> Self;
    /// Claims `len` bytes in arena `idx` of `layout` for `value`, with one free page on both
    /// sides, in one step visible to lookups.
    ///
    /// # Errors
    /// `OutOfMemory` for the map's own allocations; any other error sends the call to Linux's
    /// placement.
    fn alloc_in_arena(
        &self,
        layout: &ArenaLayout,
        idx: usize,
        len: u64,
        value: StoredRegion,
    ) -> Result<Interval, ClaimError>;
    /// Bytes the map's nodes and records take now (`Stats::metadata_bytes`).
    fn metadata_bytes(&self) -> u64;
    /// Before a mapping is placed at `addr` outside the arenas: lets the map isolate that part
    /// of the space from other cores' (the skiplist's zone separators); nothing by default.
    fn separate_zone(&self, addr: u64) {
        let _ = addr;
    }
    /// Checks the map's own invariants at rest (tests).
    #[cfg(all(test, not(loom)))]
    fn check_map(&self);
}

/// Why an arena claim ([`RangeMap::alloc_in_arena`]) took nothing.
#[derive(Debug)]
pub(crate) enum ClaimError {
    /// The map's own allocation failed (`ENOMEM`).
    OutOfMemory,
    /// The arena is full, or the request does not fit it: placed like Linux's instead.
    Elsewhere,
}

/// Levels of page tables below the root (passes of `reclaim_tables`).
const PAGE_TABLE_LEVELS: usize = 3;

/// What the tables below the root cover, leaves first (2 MiB, 1 GiB, 512 GiB).
const TABLE_COVERAGES: [u64; PAGE_TABLE_LEVELS] = [2 << 20, 1 << 30, 1 << 39];

/// Which blocks [`Windowed::free_tables_past_separators`] may take a window over.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Reach {
    /// Blocks that overlap no arena but the caller's own (`munmap`).
    OwnArena,
    /// Any block (`reclaim_tables`: detach and memory pressure).
    AnyArena,
}

/// Lock-free placement choices taken by a concurrent call before an `mmap` takes GW.
pub(crate) const PLACEMENT_TRIES: usize = 4;

/// The state of a design that locks ranges of its region map `M` (module doc).
pub(crate) struct Windowed<M> {
    /// The regions.
    pub(super) map: M,
    /// The hybrid-granular lock.
    lock: HybridLock,
    count: RegionCount,
    shmem: ShmemNumbers,
    /// The per-core arenas of Alloc, if the configuration has them.
    arenas: Option<ArenaLayout>,
}

impl<M: RangeMap> std::fmt::Debug for Windowed<M> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct(M::DESIGN)
            .field("regions", &self.map.len())
            .field("arenas", &self.arenas)
            .finish()
    }
}

impl<M: RangeMap> Windowed<M> {
    /// An empty design for the space `sh` (its RCU domain is the map's too, so one read
    /// section covers a lock-free fault's region lookup and page-table walk).
    pub(crate) fn new(sh: &Shared) -> Windowed<M> {
        let config = &sh.config;
        let domain = sh.domain.clone();
        let layout = arena_layout(config);
        let map = M::build(domain, layout);
        let locks = config.core_slots();
        let limit = config.max_map_count as u64;
        let count = match config.count_limit {
            CountLimit::PerCore => RegionCount::PerCore(LimitCounter::new(limit, locks)),
            CountLimit::SharedAtomic => RegionCount::Shared(AtomicCounter::new(limit)),
        };
        Windowed {
            map,
            lock: HybridLock::new(locks),
            count,
            shmem: ShmemNumbers::default(),
            arenas: layout,
        }
    }

    /// Holds the window of `range` for the duration of `body`, then commits it.
    #[inline]
    fn in_window<R>(
        &self,
        sh: &Shared,
        core: &mut Core,
        range: Range<u64>,
        body: impl FnOnce(&Shared, &mut Core, &mut Window<'_, M>) -> R,
    ) -> R {
        let mut w = Window::lock(&self.map, range, &self.count, &self.shmem, core.id.index());
        let r = body(sh, core, &mut w);
        w.commit();
        r
    }

    /// A fault through its stages (module doc); with the stage that resolved it.
    #[inline]
    fn resolve(
        &self,
        sh: &Shared,
        core: &mut Core,
        va: u64,
        access: Access,
    ) -> (Result<(), Fault>, usize) {
        let Retry { region } = match fault_rcu(sh, core, &self.map, va, access) {
            Ok(r) => return (r, 0),
            Err(retry) => retry,
        };
        #[cfg(all(test, not(loom)))]
        crate::fault_inject::STAGE2_BEFORE_WINDOW.reached();
        // Stage 2, under LR: the window around the region stage 1 found (module doc).
        let _lr = self.lock.lr(core.id.index());
        let r = self.in_window(sh, core, region, |sh, core, w| {
            fault_locked(sh, core, w, va, access)
        });
        (r, 1)
    }

    /// Alloc in the caller's arena (module doc); `None` when the call must be placed like
    /// Linux's instead.
    fn alloc_in_arena(
        &self,
        layout: &ArenaLayout,
        core: &mut Core,
        req: &MmapRequest,
    ) -> Option<Result<u64, VmError>> {
        let idx = core.id.index();
        let start = {
            let _lw = self.lock.lw(idx);
            if self.count.try_add(idx, 1).is_err() {
                // At the limit a placement that merges adds no region (Linux's top-down
                // choice next to a compatible mapping): the window's exact count decides.
                return None;
            }
            // Everything about the region is set before the CAS publishes it. A store keyed
            // by interval does not use the value's own start.
            let region = Region {
                start: 0,
                end: req.len,
                attrs: new_region_attrs(req, Sharing::Private, None),
            };
            let value = StoredRegion::new(&region);
            match self.map.alloc_in_arena(layout, idx, req.len, value) {
                Ok(iv) => iv.start,
                Err(ClaimError::OutOfMemory) => {
                    self.count.sub(idx, 1);
                    return Some(Err(VmError::OutOfMemory(Limit::Memory)));
                }
                Err(_) => {
                    self.count.sub(idx, 1);
                    return None;
                }
            }
        };
        Some(Ok(start))
    }

    /// Frees the page tables around `range` (just unmapped under LW, which the caller still
    /// holds) that lie past the separators its window stopped at (module doc, "Page tables
    /// past separators"); `freed` is the free span whose tables the `munmap` freed.
    /// `reach` says whether a block may cover another core's arena (module doc: only at
    /// `reclaim_tables`, never from a `munmap`).
    fn free_tables_past_separators(
        &self,
        sh: &Shared,
        core: &mut Core,
        ends: [u64; 2],
        freed: Range<u64>,
        reach: Reach,
    ) {
        for end in ends {
            let mut freed = freed.clone();
            for coverage in TABLE_COVERAGES {
                let start = end & !(coverage - 1);
                let block = start..start + coverage;
                if freed.start <= block.start && block.end <= freed.end {
                    continue; // Freed by the `munmap` itself.
                }
                if reach == Reach::OwnArena && self.covers_another_arena(core, &block) {
                    break; // So do the blocks above it: left for `reclaim_tables`.
                }
                match sh.tables.table_at(&block) {
                    TableAt::Busy => break, // So are the tables above it.
                    TableAt::Absent => continue,
                    TableAt::Empty => {}
                }
                let span = self.in_window(sh, core, block.clone(), |sh, core, w| {
                    if w.overlapping(block.clone()).next().is_some() {
                        return None; // A region keeps the table.
                    }
                    let span = w.free_span_around(block.clone());
                    // No region intersects `span` and the window keeps it so (no insert into
                    // its stable span); every entry in it was cleared by the edits that
                    // removed its regions, which committed before this window was taken.
                    sh.tables.free_tables(
                        Targets::All,
                        &core.reader,
                        &mut core.tables,
                        span.clone(),
                        &sh.domain,
                    );
                    Some(span)
                });
                match span {
                    Some(span) => freed = span,
                    None => break,
                }
            }
        }
    }

    /// Whether `block` overlaps an arena other than `core`'s (whose windows another core
    /// takes all the time: a window over it would lock that core's separators and nodes).
    fn covers_another_arena(&self, core: &Core, block: &Range<u64>) -> bool {
        let Some(layout) = &self.arenas else {
            return false;
        };
        let lo = block.start.max(layout.base);
        let hi = block.end.min(layout.end());
        lo < hi && layout.arena_of(lo, hi) != Some(core.id.index())
    }

    /// Frees the empty page tables that cover an arena boundary (a separator), whichever
    /// arenas they span (module doc, "Page tables past separators"); from `reclaim_tables`.
    fn free_tables_at_separators(&self, sh: &Shared, core: &mut Core) {
        let Some(layout) = self.arenas else {
            return;
        };
        if !M::HAS_SEPARATORS {
            return;
        }
        let _lw = self.lock.lw(core.id.index());
        for k in 0..=layout.count as u64 {
            let b = layout.base + k * layout.size;
            let ends = [b.saturating_sub(PAGE_SIZE), b];
            self.free_tables_past_separators(sh, core, ends, b..b, Reach::AnyArena);
        }
    }

    /// Where `placement` would go now, by lock-free scans (exact when no LW holder runs).
    fn choose(&self, core: &Core, placement: Placement, len: u64, bounds: Bounds) -> Option<u64> {
        let guard = core.reader.read();
        let is_free = |start, end| {
            let mut free = true;
            let _ = self.map.visit(start..end, &guard, &mut |_, _| {
                free = false;
                ControlFlow::Break(())
            });
            free
        };
        let top_down = |len, bounds: Bounds| {
            let mut gap = HighestGap::new(len, bounds);
            let _ = self
                .map
                .visit(bounds.min_addr..bounds.max_addr, &guard, &mut |iv, _| {
                    gap.region(iv.start..iv.end);
                    ControlFlow::Continue(())
                });
            gap.finish()
        };
        placement::choose(placement, len, bounds, is_free, top_down).ok()
    }

    /// `mmap` placed like Linux's (module doc, `Alloc`).
    fn mmap_placed(&self, sh: &Shared, core: &mut Core, req: MmapRequest) -> Result<u64, VmError> {
        let idx = core.id.index();
        let len = req.len;
        let bounds = sh.bounds;
        let fixed = matches!(req.placement, Placement::Fixed(_) | Placement::NoReplace(_));
        let map_at = |sh: &Shared, core: &mut Core, at: u64, placement| {
            let req = MmapRequest {
                placement,
                ..req.clone()
            };
            self.map.separate_zone(at);
            self.in_window(sh, core, at..at + len, |sh, core, w| {
                mmap_locked(sh, core, w, req)
            })
        };
        if let Placement::Hint(h) = req.placement {
            if hint_fits(h, len, bounds) {
                // The hint's range is checked under the window itself (no lock-free scan
                // first): a free hint costs one window.
                let _lw = self.lock.lw(idx);
                match map_at(sh, core, h, Placement::NoReplace(h)) {
                    Err(VmError::Exists) => {} // Taken: placed top-down below, as Linux does.
                    r => return r,
                }
            }
        }
        for _ in 0..PLACEMENT_TRIES {
            let _lw = self.lock.lw(idx);
            let Some(at) = self.choose(core, req.placement, len, bounds) else {
                break;
            };
            let placement = if fixed {
                req.placement
            } else {
                Placement::NoReplace(at)
            };
            match map_at(sh, core, at, placement) {
                Err(VmError::Exists) if !fixed => continue,
                r => return r,
            }
        }
        // GW: no LW holder runs, so the scan is exact and its choice cannot be taken.
        let _gw = self.lock.gw();
        let at = self
            .choose(core, req.placement, len, bounds)
            .ok_or(VmError::OutOfMemory(Limit::AddressSpace))?;
        map_at(sh, core, at, Placement::NoReplace(at))
    }
}

impl<M: RangeMap> DesignOps for Windowed<M> {
    fn mmap(&self, sh: &Shared, core: &mut Core, req: MmapRequest) -> Result<u64, VmError> {
        if let Some(layout) = &self.arenas {
            if req.placement == Placement::Anywhere && req.sharing == Ok(Sharing::Private) {
                if let Some(r) = self.alloc_in_arena(layout, core, &req) {
                    return r;
                }
            }
        }
        self.mmap_placed(sh, core, req)
    }

    /// `munmap` under LW and the range's window; then the page tables past the separators the
    /// window stopped at (module doc, "Page tables past separators").
    fn munmap(&self, sh: &Shared, core: &mut Core, range: Range<u64>) -> Result<(), VmError> {
        let _lw = self.lock.lw(core.id.index());
        let cut = self.in_window(sh, core, range.clone(), |sh, core, w| {
            munmap_locked(sh, core, w, range.clone())?;
            Ok::<_, VmError>(w.free_span_cut(range.clone()))
        })?;
        if let Some(freed) = cut {
            let ends = [range.start, range.end - PAGE_SIZE];
            self.free_tables_past_separators(sh, core, ends, freed, Reach::OwnArena);
        }
        Ok(())
    }

    fn mprotect(
        &self,
        sh: &Shared,
        core: &mut Core,
        range: Range<u64>,
        prot: Prot,
    ) -> Result<(), VmError> {
        let _lw = self.lock.lw(core.id.index());
        self.in_window(sh, core, range.clone(), |sh, core, w| {
            mprotect_locked(sh, core, w, range, prot)
        })
    }

    fn madvise(
        &self,
        sh: &Shared,
        core: &mut Core,
        range: Range<u64>,
        effect: AdviceEffect,
    ) -> Result<(), VmError> {
        let _lw = self.lock.lw(core.id.index());
        self.in_window(sh, core, range.clone(), |sh, core, w| {
            madvise_locked(sh, core, w, range, effect)
        })
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
        let _gr = self.lock.gr();
        let reader = self.map.domain().register();
        let guard = reader.read();
        let mut out = Vec::new();
        let _ = self.map.visit(0..KEY_SPACE_END, &guard, &mut |iv, v| {
            out.push(RegionRef::new(iv.start, iv.end, v).region().info());
            ControlFlow::Continue(())
        });
        out
    }

    fn region_count(&self) -> u64 {
        let _gr = self.lock.gr();
        self.map.len() as u64
    }

    fn region_metadata_bytes(&self) -> u64 {
        self.map.metadata_bytes()
    }

    /// The empty tables at the arena separators (module doc, "Page tables past separators"),
    /// then the owner tree's empty tables (per-core page tables: `radix`), each freed under LW and
    /// a window over its span when no region lies there (so no fill can run in it: the
    /// precondition of `free_tables`), bottom up until a pass frees nothing (a table whose
    /// children were freed is empty at the next pass).
    fn reclaim_tables(&self, sh: &Shared, core: &mut Core) {
        self.free_tables_at_separators(sh, core);
        for _ in 0..PAGE_TABLE_LEVELS {
            let spans = sh.tables.owner_empty_tables(&core.reader);
            if spans.is_empty() {
                return;
            }
            for span in spans {
                let _lw = self.lock.lw(core.id.index());
                self.in_window(sh, core, span.clone(), |sh, core, w| {
                    if w.overlapping(span.clone()).next().is_none() {
                        sh.tables.free_tables(
                            Targets::All,
                            &core.reader,
                            &mut core.tables,
                            span,
                            &sh.domain,
                        );
                    }
                });
            }
        }
    }
}

#[cfg(all(test, not(loom)))]
impl<M: RangeMap> Windowed<M> {
    /// Checks every invariant of the design at rest: the map's own, Linux's region invariants
    /// (no overlap, no unmerged mergeable neighbours), and the region counter equal to the
    /// number of regions (so the limit it enforces is exact).
    pub(crate) fn check(&self) {
        self.map.check_map();
        let reader = self.map.domain().register();
        let guard = reader.read();
        let mut regions = Vec::new();
        self.map
            .visit(0..KEY_SPACE_END, &guard, &mut |iv, v| {
                regions.push(RegionRef::new(iv.start, iv.end, v).region());
                ControlFlow::Continue(())
            })
            .unwrap();
        crate::region::store::check_regions(regions.iter().copied());
        assert_eq!(
            self.count.sum(),
            self.map.len() as u64,
            "the region counter is exact"
        );
    }
}
