//! The `interval` design: IntervalVM (SOSP'25 §5), the region set in the concurrent interval
//! skiplist under the hybrid-granular lock, so that operations on non-overlapping ranges run
//! in parallel.
//!
//! # Locks
//!
//! Two levels (§5.1): the `HybridLock` (per-core reader-writer locks; GR/GW take every one,
//! LR/LW the caller's, Fig. 9) and the skiplist's interval locks, taken through a
//! `Window` (`window.rs`: the range an operation changes, widened to the whole
//! regions it overlaps plus their neighbours, and the gaps up to the next regions). Order:
//! hybrid lock first, then the interval lock, then leaf page-table locks. Every Linux rule is
//! `syscalls.rs`'s, run on the window as its region store; this file only chooses the locks.
//!
//! # Fault (§5.2): two stages here
//!
//! 1. **No space lock**: `syscalls::fault_rcu` over the skiplist's lock-free `query` (an RCU
//!    read section of the space's domain, which the skiplist shares). Its doc says what it
//!    answers and which race each check closes (the stale fill after `munmap`/`mprotect`, the
//!    fault during a split: the region found is marked replaced, the fill is refused under the
//!    leaf lock); only an *overlapping* edit makes a fault retry, as the paper requires. The
//!    skiplist's `swap` replaces a span in one step, so a lookup that finds nothing is
//!    `Unmapped`. On `Retry`,
//! 2. **LR + the region's interval lock.** The window is taken around the range of the region
//!    stage 1 found (plus a page each side): whatever region contains the address now overlaps
//!    it, so it is held whole, and its adjacent neighbours are held or are the lock's borders
//!    (its predecessor, held, and the successor of its last node, which nobody can change while
//!    that node is held). The Linux fault body (`fault_locked`: anon identity adopted from an
//!    adjacent neighbour, table allocation, fill) runs on the window.
//!
//! The paper's third stage (GR) serves faults that stage 2 cannot handle: file-backed memory of
//! file systems not audited for the design. This engine has no such memory, and stage 2 holds
//! the region and sees its neighbours, everything a fault reads, so it resolves every fault:
//! there is no third stage. `Stats::fault_stages` counts faults per stage.
//!
//! The leave rule that stage 1 relies on holds here because the skiplist is built by
//! `region_skiplist` (its commit marks every node it takes out, copies included) and a window's
//! edit marks what it drops before the body touches an entry (`window.rs` lists every
//! way a node leaves). The loom models (`interval/loom_tests.rs`) run the fault against
//! `munmap` and `mprotect` on the real page-table code, including a third core installing the
//! leaf behind the editor's walk and the `munmap` freeing the tables of a leaf whose lock the
//! fault holds; regressions: `stage1_never_refuses_a_page_beside_one_an_mprotect_already_upgraded`,
//! `stage1_never_reports_unmapped_beside_a_populated_page`, and the tests every lock-free design
//! shares (`designs/lock_free_tests.rs`: `stage1_fault_never_fills_after_*`;
//! `designs/lock_free_loom.rs`).
//!
//! # Alloc (§5.3)
//!
//! `mmap` without an address and without `MAP_FIXED`, of a private mapping, takes LW and claims
//! a gap in the calling core's arena with one CAS (`SkipListMap::alloc_in_arena_padded`),
//! starting at the arena's hint. The region's value is complete before the CAS publishes it.
//! The claim keeps one free page on both sides: an arena region is never adjacent to another
//! node when it appears, so Linux's merge of adjacent anonymous mappings never applies at that
//! point and `maps()` stays what Linux would show for the same addresses. When the arena is full
//! (or arenas are off, or the mapping is shared: its shmem offset needs its address), placement
//! is Linux's: the hint, tried under its window; else `placement::choose` over lock-free scans
//! of the skiplist, taken as a `MAP_FIXED_NOREPLACE` edit under LW and the window; a choice
//! taken by a concurrent call is chosen again, and after `PLACEMENT_TRIES` (`windowed.rs`)
//! the call takes GW,
//! under which the scan is exact (no LW holder runs) and cannot lose. An arena claim refused
//! by the region limit also goes this way: a placement next to a compatible mapping merges and
//! adds no region.
//!
//! A mapping placed at an address outside the arenas (a hint, `MAP_FIXED`, or Linux's
//! placement when the arena is full) first asks the skiplist for its zone's separator
//! (`SkipListMap::separate_zone`, `aspace_map`'s `skiplist/zone.rs`: a separator one page
//! below each 1 GiB zone, made lock-free on demand), so that different cores' hinted mappings
//! share no skiplist segment, as arena claims do not (departure below).

//! # Modify (§5.4)
//!
//! `munmap`, `mprotect`, `madvise` and `mmap` with `MAP_FIXED`/`MAP_FIXED_NOREPLACE` take LW
//! and a window around their range, run the Linux body on it, and commit the window's regions
//! with one skiplist swap at the end: page-table clearing, the freeing of the tables of the
//! widened gap (which the window holds) and the shootdown all happen while the range is still
//! held; when that gap ends at an arena separator, the tables past it are probed and freed
//! under a second window (`windowed.rs`, "Page tables past separators"). `MAP_POPULATE`
//! faults the pages in after the commit (`Designs::populate`): a translation never exists
//! before its region is in the skiplist, so a stage-1 fault that finds no region may answer
//! `Unmapped`.
//!
//! # Limits
//!
//! The region count goes through a per-core limit counter (`region/count.rs`; `LimitCounter` by
//! default, one shared atomic as the benchmark baseline): a window takes the regions an edit
//! adds before anything changes (`ENOMEM` at the limit, nothing changed), and gives back what an
//! edit removed at its commit. Frames are limited by the frame pool, whose per-core caches
//! already batch (`frames.rs`).
//!
//! # What falls back to the global modes
//!
//! GR: `maps()` and `regions` (a consistent view of the whole set). GW: placement retried
//! `PLACEMENT_TRIES` times (above). Nothing else: every call above is parallel.
//!
//! # Departures from the paper
//!
//! - Arena claims are padded by a page on both sides (above); the paper's Linux-based
//!   implementation does not merge at Alloc either, but does not say how its `/proc/maps`
//!   compares.
//! - The skiplist `swap` that commits a window allocates its nodes at the commit, after the page
//!   tables were edited; out of memory there panics (Rust's allocator aborts on out of memory
//!   anyway), where a failed `reserve` changes nothing. After such a panic the region list and
//!   its count are as before the call (the window's drop gives back what it reserved), while
//!   the entries the body cleared stay cleared: the data of that range is lost. Two further
//!   consequences, found by issue 19's review and NOT yet fixed (the fix is to allocate the
//!   commit's nodes before the body edits any entry): an `mprotect` that *adds* rights has
//!   already upgraded the entries, so a write succeeds on a region `maps()` still shows
//!   read-only; and the held regions the edit dropped stay in the list marked replaced, so
//!   their faults always take stage 2 (slower, still right). Regression of what holds:
//!   `a_commit_out_of_memory_changes_no_region_and_gives_back_the_regions_it_reserved`.
//! - Zone separators: the paper isolates only Alloc's arenas; mappings placed at addresses by
//!   different cores above them shared one segment (the conflict audit's `local`: 6.9
//!   conflicting lines per operation at 64 cores, growing with cores; 0 with the zones).
//! - TLB shootdowns target the cores that used the page tables involved (`shootdown.rs`),
//!   where the paper keeps Linux's.
//!
//! Not for: the Linux rules (`syscalls.rs`), placement rules (`placement.rs`), the skiplist.

#[cfg(all(test, loom))]
pub(super) mod loom_tests;
#[cfg(all(test, not(loom)))]
pub(super) mod tests;

use super::ops::REGION_ENTRY_BYTES;
use super::window::WindowMap;
use super::windowed::{ClaimError, RangeMap, Windowed};
use crate::region::store::{region_skiplist, StoredRegion};
use aspace_map::{
    ArenaAllocError, ArenaLayout, Interval, IntervalMap, SkipListMap, SkipLocked, KEY_SPACE_END,
    PAGE_SIZE,
};
use aspace_rcu::Domain;
use std::ops::Range;

/// The `interval` design: the range-locking policy (`windowed.rs`) over the region skiplist.
pub(crate) type IntervalDesign = Windowed<SkipListMap<StoredRegion>>;

/// The skiplist's interval lock, widened to whole nodes (`lock_covering`).
impl WindowMap for SkipListMap<StoredRegion> {
    fn hold(&self, range: Range<u64>) -> SkipLocked<'_, StoredRegion> {
        self.lock_covering(range)
            .expect("page-aligned ranges inside the key space")
    }

    fn stable_span(locked: &SkipLocked<'_, StoredRegion>) -> Range<u64> {
        locked.stable_span()
    }

    fn held<'a>(
        locked: &'a SkipLocked<'_, StoredRegion>,
        f: impl FnMut((Interval, &'a StoredRegion)),
    ) {
        locked.intervals().for_each(f);
    }

    fn borders<'a>(
        locked: &'a SkipLocked<'_, StoredRegion>,
    ) -> [Option<(Interval, &'a StoredRegion)>; 2] {
        let (prev, next) = locked.neighbours();
        [prev, next]
    }

    /// `narrow` releases the held nodes outside the changed span (widened to whole nodes).
    fn commit_span(locked: &mut SkipLocked<'_, StoredRegion>, changed: Range<u64>) -> Range<u64> {
        locked
            .narrow(changed)
            .expect("the changed span lies inside the held range");
        let r = locked.range();
        r.start..r.end
    }

    const HAS_SEPARATORS: bool = true;

    /// A held predecessor that is no interval and not the head (whose end is 0), or a
    /// successor of the last held node that is no interval and exists (else the span reaches
    /// the key space's end): an arena separator.
    fn separator_ends(locked: &SkipLocked<'_, StoredRegion>) -> [bool; 2] {
        let span = locked.stable_span();
        let (prev, next) = locked.neighbours();
        [
            prev.is_none() && span.start > 0,
            next.is_none() && span.end < KEY_SPACE_END,
        ]
    }
}

impl RangeMap for SkipListMap<StoredRegion> {
    const DESIGN: &'static str = "IntervalDesign";

    fn build(domain: Domain, layout: Option<ArenaLayout>) -> Self {
        region_skiplist(domain, layout)
    }

    /// One CAS in the arena's skiplist segment (`alloc_in_arena_padded`).
    fn alloc_in_arena(
        &self,
        _layout: &ArenaLayout,
        idx: usize,
        len: u64,
        value: StoredRegion,
    ) -> Result<Interval, ClaimError> {
        self.alloc_in_arena_padded(idx, len, PAGE_SIZE, value)
            .map_err(|e| match e {
                ArenaAllocError::OutOfMemory => ClaimError::OutOfMemory,
                _ => ClaimError::Elsewhere,
            })
    }

    /// A zone separator at `addr`'s GiB when it lies outside the arenas (`aspace_map`'s
    /// `skiplist/zone.rs`): mappings placed at addresses by different cores then share no
    /// skiplist segment. Out of memory there only costs that isolation.
    fn separate_zone(&self, addr: u64) {
        let _ = SkipListMap::separate_zone(self, addr);
    }

    /// A node per region: its key, value and header, and a tower of two links on average
    /// (the skiplist's height distribution, p = 1/2); separators not counted.
    fn metadata_bytes(&self) -> u64 {
        self.len() as u64 * (REGION_ENTRY_BYTES + 8 + 24 + 2 * 8)
    }

    #[cfg(all(test, not(loom)))]
    fn check_map(&self) {
        self.check_invariants();
    }
}
