//! Zone separators: separator nodes at 1 GiB boundaries outside the arenas, inserted on demand,
//! so that mappings placed at an address (hints, `MAP_FIXED`) by different cores in different
//! zones do not share a skiplist segment (issue 21: "hinted mappings isolated like arena ones").
//!
//! Why: the arenas isolate Alloc claims (`arena.rs`), but a mapping placed at an address lies
//! wherever its caller asks. Cores hinting into different GiBs above the arenas (the `local`
//! and `pipeline` workloads) made one segment after the last arena separator: every search
//! walked the level-0 and low links of the other cores' nodes, and every lock took a line
//! another core's node lives on (the conflict audit: 5.9 of `local`'s 6.9 conflicting lines
//! per operation at 64 cores were such link loads, growing with cores). A zone separator just
//! below the zone ends the walk of the levels above at the zone and becomes the level-0
//! predecessor of the zone's first node, as an arena's separator does.
//!
//! Rules:
//! - A zone is a [`ZONE_SIZE`]-aligned block outside the arenas' span (arena boundaries keep
//!   their own separators), in a map with arenas (whose ordinary nodes stay below
//!   `SEPARATOR_THRESHOLD`). Its separator sits one page below the zone's start
//!   (`zone_point`): every window of the address space is widened by a page on both sides (so
//!   that adjacent neighbours are held for Linux's merges), and a separator exactly at the
//!   start of a zone whose first mapping starts there would put the page below it, and the
//!   last node of the zone below, inside every window of that mapping (its lock would take
//!   that node's link: the conflict audit's `local`, 2.6 lines per operation with the
//!   separator at the zone start). One page below, the widened window starts at the separator
//!   and holds nothing of the zone below. A mapping that covers that page drops the separator
//!   (the rule on swaps below), as a mapping across an arena boundary drops the arena's.
//!   Heights follow the binary structure of the zone number, as the arena separators' do
//!   (`zone_height`), so the zone separators form a perfect skiplist among themselves above
//!   the threshold.
//! - Inserted lock-free by [`RawSkipList::insert_separator`]: the point `b` is claimed with one
//!   CAS on its level-0 predecessor's link, expecting it untagged and pointing at a successor
//!   that starts at or after `b` (so no interval strictly contains `b` at the CAS: the
//!   predecessor, found by `find`, ends at or before `b`). The node is born LOCKED and unlocked
//!   once its tower is linked, by the same publish step as an alloc's (`alloc.rs`,
//!   `publish_after`). Anything else (a LOCKED or INVALIDATED predecessor, an interval over
//!   `b`, a separator already there) inserts nothing: a zone separator is an optimization,
//!   never required.
//! - A swap whose span covers a zone separator drops it like any node it holds, and re-creates
//!   it (as `swap_with` does for arena boundaries) when no new interval covers it. A separator
//!   never lies strictly inside an interval (`raw.rs`'s invariant) either way.
//! - Bounded: at most [`MAX_ZONES`] zone separators are linked at once (a program placing
//!   mappings in every GiB of a 128 TiB space would otherwise add 128 Ki nodes); past that,
//!   zones share segments again. A per-map direct-mapped cache of zone numbers remembers zones
//!   known to have their separator or to have their point covered by an interval (forgotten
//!   when a swap drops the separator or the covering interval), so a placement in a known
//!   zone costs one load and writes nothing shared; the count is taken only just before a
//!   node is allocated.
//!
//! Not for: arenas (`arena.rs`), the design's choice of when to ask (`aspace-vm`'s
//! `designs/windowed.rs`).

use super::arena::SEPARATOR_THRESHOLD;
use super::link::{unpack, Tag};
use super::node::{Kind, Node, MAX_HEIGHT};
use super::pool::NodePool;
use super::raw::RawSkipList;
use super::traverse::Position;
use crate::contract::{MapError, PAGE_SIZE};
use crossbeam_utils::CachePadded;
use std::sync::atomic::{
    AtomicU64 as StdAtomicU64, AtomicUsize as StdAtomicUsize, Ordering as StdOrdering,
};

/// Bytes per zone (a level-2 page table's span).
pub const ZONE_SIZE: u64 = 1 << 30;

/// The most zone separators a map keeps linked at once.
pub const MAX_ZONES: usize = 4096;

/// Where the separator of the zone starting at `b` goes: one page below the zone (module doc).
pub(crate) fn zone_point(b: u64) -> u64 {
    b - PAGE_SIZE
}

/// The zone whose separator is at point `p` (its start).
pub(crate) fn zone_of_point(p: u64) -> u64 {
    p + PAGE_SIZE
}

/// Height of the separator of the zone starting at `b` (a multiple of [`ZONE_SIZE`]).
pub(crate) fn zone_height(b: u64) -> usize {
    let k = b / ZONE_SIZE;
    let extra = if k == 0 {
        64
    } else {
        k.trailing_zeros() as usize / 2
    };
    (SEPARATOR_THRESHOLD + 1 + extra).min(MAX_HEIGHT)
}

/// What [`RawSkipList::insert_separator`] did.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum SeparatorInsert {
    /// A new separator is linked at `b`.
    Inserted,
    /// A separator was already at `b`.
    Present,
    /// Nothing inserted: an interval covers `b`.
    Covered,
    /// Nothing inserted: the point's predecessor is held or was swapped out, or a node was
    /// inserted next to the point since the search, or `take` refused (the bound).
    Skipped,
}

impl<V> RawSkipList<V> {
    /// Inserts a separator of height `height` at the point `b` if none is there and no interval
    /// strictly contains `b` (module doc). Calls `take` once, only when it is about to
    /// allocate (the bound: `false` inserts nothing), and sets `*took` when it did and `take`
    /// agreed, so the caller gives back a count that ended in no link. The node is made from
    /// `pool` (the caller's reader slot's) where it keeps a block of the height.
    ///
    /// # Safety
    /// The caller keeps reachable nodes alive (see `raw.rs`); `height >= SEPARATOR_THRESHOLD`
    /// and the map's ordinary nodes stay below it.
    pub(crate) unsafe fn insert_separator(
        &self,
        b: u64,
        height: usize,
        take: impl FnOnce() -> bool,
        took: &mut bool,
        pool: &mut NodePool<V>,
    ) -> Result<SeparatorInsert, MapError> {
        let mut take = Some(take);
        let mut pos = Position::new();
        // SAFETY: precondition forwarded.
        unsafe { self.find(b, b, self.levels(), &mut pos) };
        // SAFETY: reached by `find`; alive per the precondition.
        let p = unsafe { &*pos.preds[0] };
        if p.kind == Kind::Separator && p.start == b {
            return Ok(SeparatorInsert::Present);
        }
        let mut node: *mut Node<V> = std::ptr::null_mut();
        let outcome = loop {
            let w = p.load(0);
            let (next, t) = unpack::<V>(w);
            if t != Tag::None {
                break SeparatorInsert::Skipped;
            }
            if !next.is_null() {
                // SAFETY: reached through an Acquire load; alive per the precondition.
                let n = unsafe { &*next };
                if n.kind == Kind::Separator && n.start == b {
                    break SeparatorInsert::Present;
                }
                // `p` ends at or before `b` (it was `find`'s predecessor and intervals are
                // immutable); a successor starting below `b` covers it, or was inserted
                // between `p` and `b` since: either way not our point to claim.
                if n.start < b {
                    break if n.end > b {
                        SeparatorInsert::Covered
                    } else {
                        SeparatorInsert::Skipped
                    };
                }
            }
            if node.is_null() {
                if !take.take().is_some_and(|take| take()) {
                    break SeparatorInsert::Skipped;
                }
                *took = true;
                node = Node::try_alloc(b, b, height, Kind::Separator, None, None, Some(pool))?;
            }
            // SAFETY: our node, unpublished; `p` was reached by `find`, alive per the
            // precondition.
            if unsafe { self.publish_after(p, w, next, node) } {
                return Ok(SeparatorInsert::Inserted);
            }
        };
        if !node.is_null() {
            // SAFETY: made above, never published.
            unsafe { Node::dealloc(node) };
        }
        Ok(outcome)
    }
}

/// What the map knows of zones (a cache, not the truth: a stale entry costs isolation or one
/// search, never correctness) and the number of zone separators linked now.
pub(crate) struct Zones {
    /// Direct-mapped by zone number `k`: `k + 1` where the zone's separator was inserted or
    /// found, `(k + 1) | COVERED` where an interval covered its point, 0 for nothing known.
    /// Relaxed: a cache; a collision evicts.
    known: Box<[StdAtomicU64]>,
    /// Zone separators linked now (inserted minus dropped; re-created ones are not counted
    /// twice): what [`MAX_ZONES`] bounds. Padded: written only when a separator is made or
    /// dropped, but the map's hot fields must not share its line. Relaxed: a bound, not a
    /// publication.
    live: CachePadded<StdAtomicUsize>,
}

/// Entries of the known-zone cache.
const KNOWN_SLOTS: u64 = 1024;

/// Flag of a cache entry: the zone's point was covered by an interval.
const COVERED: u64 = 1 << 63;

/// What the cache says of a zone.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Known {
    /// Its separator is (believed) linked.
    Present,
    /// An interval (believed) covers its point.
    Covered,
    /// Nothing known.
    Unknown,
}

impl Zones {
    pub(crate) fn new() -> Zones {
        Zones {
            known: (0..KNOWN_SLOTS).map(|_| StdAtomicU64::new(0)).collect(),
            live: CachePadded::new(StdAtomicUsize::new(0)),
        }
    }

    fn slot(&self, b: u64) -> (&StdAtomicU64, u64) {
        let k = b / ZONE_SIZE;
        (&self.known[(k % KNOWN_SLOTS) as usize], k + 1)
    }

    /// What is known of the zone starting at `b`.
    #[inline]
    pub(crate) fn lookup(&self, b: u64) -> Known {
        let (slot, tag) = self.slot(b);
        match slot.load(StdOrdering::Relaxed) {
            t if t == tag => Known::Present,
            t if t == tag | COVERED => Known::Covered,
            _ => Known::Unknown,
        }
    }

    /// Records what was found of the zone starting at `b`.
    pub(crate) fn note(&self, b: u64, known: Known) {
        let (slot, tag) = self.slot(b);
        let entry = match known {
            Known::Present => tag,
            Known::Covered => tag | COVERED,
            Known::Unknown => 0,
        };
        if slot.load(StdOrdering::Relaxed) != entry {
            slot.store(entry, StdOrdering::Relaxed);
        }
    }

    /// Forgets the zone starting at `b` if the cache says `was` of it.
    pub(crate) fn forget(&self, b: u64, was: Known) {
        let (slot, tag) = self.slot(b);
        let entry = if was == Known::Covered {
            tag | COVERED
        } else {
            tag
        };
        if slot.load(StdOrdering::Relaxed) == entry {
            let _ = slot.compare_exchange(entry, 0, StdOrdering::Relaxed, StdOrdering::Relaxed);
        }
    }

    /// Forgets every zone whose point the interval `[start, end)` covered (it just left the
    /// list): their separators may be made again. Past [`KNOWN_SLOTS`] zones, every covered
    /// entry is forgotten.
    pub(crate) fn uncover(&self, start: u64, end: u64) {
        // The first zone whose point lies strictly after `start` (`b - PAGE_SIZE > start`);
        // none past the key space (`start < KEY_SPACE_END`, so the sum does not overflow).
        let Some(first) = (start + PAGE_SIZE + 1).checked_next_multiple_of(ZONE_SIZE) else {
            return;
        };
        let mut b = first;
        for _ in 0..KNOWN_SLOTS {
            if zone_point(b) >= end {
                return;
            }
            self.forget(b, Known::Covered);
            let Some(next) = b.checked_add(ZONE_SIZE) else {
                return; // The last zone of the key space.
            };
            b = next;
        }
        for slot in self.known.iter() {
            let e = slot.load(StdOrdering::Relaxed);
            if e & COVERED != 0 {
                let _ = slot.compare_exchange(e, 0, StdOrdering::Relaxed, StdOrdering::Relaxed);
            }
        }
    }

    /// Zone separators linked now (tests).
    #[cfg(all(test, not(loom)))]
    pub(crate) fn live_now(&self) -> usize {
        self.live.load(StdOrdering::Relaxed)
    }

    /// Whether another zone separator may be made, counting it if so.
    pub(crate) fn take(&self) -> bool {
        self.live
            .fetch_update(StdOrdering::Relaxed, StdOrdering::Relaxed, |n| {
                (n < MAX_ZONES).then_some(n + 1)
            })
            .is_ok()
    }

    /// Gives back a count taken by [`Zones::take`] (nothing was linked, or a swap dropped a
    /// separator for good).
    pub(crate) fn give_back(&self) {
        self.live.fetch_sub(1, StdOrdering::Relaxed);
    }
}
