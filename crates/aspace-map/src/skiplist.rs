//! The concurrent interval skiplist of SOSP'25 (Kim, Kwon, Kang, §4, §5.3, Appendix A-B).
//!
//! An interval map whose nodes (`[start, end)`, value, height, a tower of tagged links; see
//! `skiplist/node.rs`, `skiplist/link.rs`) form a skiplist sorted by address. Queries are
//! lock-free RCU traversals; updates lock the range they change at node granularity and publish
//! the change with one store, so operations on disjoint ranges run in parallel.
//!
//! # Operations
//! - `query(addr)`: top-down traversal that reads LOCKED, DELETED and INVALIDATED nodes like any
//!   other (§4.2) and stops early at the first level where a node contains `addr`.
//! - `lock(range)` (`skiplist/lock.rs`): traversal fused with locking: CAS LOCKED onto the
//!   level-0 predecessor of the range, advance if a concurrent insert slipped in, then lock every
//!   following node that overlaps the range (so the gaps next to it are held too). A held
//!   range's [`SkipLocked::stable_span`] is the span from the predecessor's end to the next
//!   node's start, which nobody else can change while it is held.
//! - `swap(locked, new)` (`skiplist/swap.rs`): collective height decrement of the old nodes (mark
//!   DELETED, unlink by a helping traversal), one level-0 store that commits the swap and unlocks
//!   the predecessor (the linearization point), INVALIDATED marks on the old nodes, collective
//!   height increment of the new nodes (one CAS per level). Old nodes go to the caller's
//!   reader slot's retire list (`skiplist/retire.rs`): batches of 64 nodes per grace-period
//!   callback, freed by the retiring thread once the grace period has ended.
//! - `map(range, v | None)` = lock + swap with the trimmed remainders of the overlapped nodes.
//! - `alloc(within, len, v)` (`skiplist/alloc.rs`): first-fit walk, claim by one CAS; wait on a
//!   LOCKED gap, restart on INVALIDATED, continue past a gap claimed by someone else.
//! - Arenas (`skiplist/arena.rs`): optional [`ArenaLayout`]; separator nodes of height
//!   `>= SEPARATOR_THRESHOLD` at arena boundaries, ordinary nodes below; a per-arena hint;
//!   [`SkipListMap::alloc_in_arena`] searches the caller's arena, then the shared region;
//!   [`SkipListMap::alloc_in_arena_padded`] searches the caller's arena only and leaves `pad`
//!   free bytes on both sides of its claim (first fit of `len + 2 * pad`, `alloc.rs`).
//! - Zones (`skiplist/zone.rs`): in a map with arenas, [`SkipListMap::separate_zone`] inserts a
//!   separator lock-free one page below a 1 GiB zone outside the arenas, so that mappings
//!   placed there by address share no segment with other zones'; swaps re-create the ones they
//!   hold and do not cover; at most [`MAX_ZONES`] at once.
//!
//! # Values and `Clone`
//! The map clones a value in one place only: when `map` or `swap` trims an interval that reaches
//! past the range it rewrites, the part kept on each side becomes a new node carrying
//! `value.clone()` (two clones when the range lies strictly inside one interval). Intervals
//! inside the range are never cloned (their nodes, values included, are retired), and `alloc`,
//! `alloc_in_arena`, `alloc_in_arena_padded` (an alloc across a separator swaps a free range),
//! `lock`, `query` and `visit` clone nothing. The clones run before the commit, under the
//! range's locks.
//!
//! # Values that leave
//! A node leaves the list only through a commit (`swap_with`: `map`, `swap`, and an alloc whose
//! claim covers a separator; `alloc` itself only inserts, `narrow` and dropping a
//! [`SkipLocked`] only unlock). A map built [`with_leave_mark`](SkipListMap::with_leave_mark)
//! calls the mark on every interval node such a commit removes, including the nodes whose parts
//! outside the range survive as trimmed copies, before the commit store; an address space uses
//! it so that a lock-free fault holding an old region node learns, under its leaf lock, that the
//! node left (`aspace-vm`'s `StoredRegion::mark_replaced`). Separators carry no value and are not
//! marked.
//!
//! # Cases the paper leaves open, closed here
//! - *Nodes are inserted LOCKED* and unlocked when their tower is complete, so a swap can never
//!   remove a node whose upper levels are still being linked (which would leave a retired node
//!   reachable at an upper level). See `swap.rs`.
//! - *Restart conditions*: `find` restarts from the head when a helping CAS fails, when it stands
//!   on a DELETED/INVALIDATED predecessor, or meets an INVALIDATED node; `lock` restarts when the
//!   predecessor it tries to lock is DELETED/INVALIDATED; `alloc` restarts when its gap's
//!   predecessor is INVALIDATED and re-reads the same predecessor after a failed CAS.
//! - *Upper-level helping*: only at upper levels (level-0 removal is always a swap, so level-0
//!   links are never DELETED); a LOCKED predecessor is stepped over, never CASed.
//! - *Height-increment CAS failure*: the level is retried after a fresh `find`, never abandoned.
//! - *Hints*: a hint is a lower bound of the arena's first free page, versioned so that a free
//!   racing an alloc cannot be jumped over (see `skiplist/hint.rs`); first fit stays exact sequentially.
//!   Padded allocs keep a second hint per arena, below which no gap is long enough for any
//!   padded claim, so that the pad pages they leave free are not walked again.
//! - *Separators under intervals*: a mapping across an arena boundary drops the separator it
//!   covers; swaps re-create separators at uncovered boundaries (see `arena.rs`).
//!
//! # One traversal per edit
//! `lock`/`lock_covering` and the `swap` of the held range share one search (the fusion of
//! traversal and locking of Fig. 18, across the two calls): the lock records the predecessor
//! its traversal found at every level (`lock_range_at`'s `Position`, kept in the
//! [`SkipLocked`]), and the swap starts from them instead of searching from the head: first one
//! CAS per level unlinking the old nodes' upper-level runs from the recorded predecessor
//! (`swap.rs`, `unlink_old_runs`), and where that fails or the record lacks a level, a search
//! in which each level starts from its recorded predecessor after validating it (not DELETED
//! at that level, hence still linked there; before the range; otherwise that level starts from
//! the level above's result as a fresh `find` would: `traverse.rs`, "Hinted searches"). Every
//! link CAS of the swap still expects `pred -> succ` untagged, so a stale guess fails and
//! re-searches, never links wrongly.
//!
//! Why the recorded predecessors may be dereferenced at the swap: the node locks pin only the
//! held nodes (the level-0 predecessor and the range), not the upper-level predecessors, which
//! concurrent swaps may retire. So the lock **keeps its read section open until the swap** (or
//! its drop): [`SkipLocked`] owns the pooled reader slot it locked in (`readers.rs`,
//! `Section`), so no node reached by its traversal can be freed, or reused for another node
//! (no ABA on the CASes), before the swap is done. Pinning each recorded predecessor instead
//! (hazard pointers per level) would cost a shared write per level and a validation loop per
//! pin, i.e. what the recorded search saves. The cost of the open section: a held range delays
//! the domain's grace periods for as long as it is held (reclamation only, nobody waits for
//! them on the update paths: `retire.rs`), and the slot's stripe and retire list serve the
//! swap, so it takes no second slot.
//!
//! # Locking and RCU contract
//! `query`/`visit` run under the caller's guard of [`SkipListMap::domain`]. `map`, `alloc`,
//! `lock`, `swap` run inside a read section of a pooled reader (`skiplist/readers.rs`); a held
//! [`SkipLocked`] keeps the one its lock began in (above), and pins its nodes besides (only
//! its holder can retire them). Node locks are taken left to right; nobody waits for a lock
//! while holding one to its right.
//! Hazard: a thread holding a [`SkipLocked`] is inside a read section of this map's domain, and
//! updaters wait for node locks inside theirs, so it must not call `synchronize()`/`barrier()`
//! on this map's domain, nor [`SkipListMap::barrier`], nor wait for a thread that does (the
//! grace period would wait for the holder; a holder calling [`SkipListMap::barrier`] blocks on
//! its own pooled slot first, in every build). A [`SkipLocked`] leaked with `mem::forget` (safe)
//! keeps its read section open for ever: nothing is freed early, but no grace period of the
//! domain (which an address space shares) ends again, so retired nodes and deferred frees
//! accumulate and `barrier()` of any thread waits for ever (review of issue 21; before the held
//! section, a leak kept only its range locked). Pinning each recorded predecessor instead would
//! close it at a shared write per level.
//!
//! # Reclamation
//! Removed nodes are not handed to the domain one swap at a time: each reader slot batches them
//! (`skiplist/retire.rs`), so after `Domain::barrier()` up to a partial batch per slot may still
//! be pending; [`SkipListMap::barrier`] frees every node removed before it. Dropping the map
//! frees the rest. A batch whose grace period has ended gives its nodes' memory to the slot's
//! node pool (`skiplist/pool.rs`, bounded), from which the operations holding that slot make
//! their new nodes: no allocator call on the common paths, and no memory reused before its
//! grace period (the pool takes only what was safe to free). The map's barrier and drop empty
//! the pools.
//!
//! # Linearizability
//! `map`/`swap`: the commit store. `alloc`: its CAS; it claims a free range of `len` bytes inside
//! `within` that was the first fit in the state its walk saw (a gap freed behind the walk is not
//! seen). `query`: the load that reached the node or gap it reports; the old and new chains of a
//! swap are each consistent, so a query never sees half a swap (Appendix B).
//!
//! Not for: page tables or region semantics (`aspace-vm`); not a general ordered map.

mod alloc;
pub mod arena;
mod hint;
mod link;
mod lock;
mod node;
mod pool;
mod raw;
pub(crate) mod readers;
mod retire;
mod slot_state;
mod swap;
mod traverse;
mod zone;

#[cfg(all(test, loom))]
mod loom_tests;

pub use arena::{ArenaAllocError, ArenaLayout, SEPARATOR_THRESHOLD};
pub use zone::{MAX_ZONES, ZONE_SIZE};

use crate::contract::{Interval, IntervalLocking, IntervalMap, MapError, KEY_SPACE_END, PAGE_SIZE};
use crate::fault::AllocBudget;
use crate::sync::stat::AtomicIsize;
use crate::validate::{check_alloc, check_guard};
use aspace_rcu::{Domain, Guard};
use crossbeam_utils::CachePadded;
use hint::{retreat_overlapping, ArenaHints, Hinted, HintedSearch};
use lock::HeldNodes;
use node::{Kind, Node, MAX_HEIGHT};
use pool::NodePool;
use raw::RawSkipList;
use readers::{ReaderPool, Section, SLOTS};
use retire::{RetireList, Retired};
use slot_state::SlotState;
use std::cell::Cell;
use std::ops::{ControlFlow, Range};
use std::sync::atomic::Ordering;
use traverse::Position;
use zone::{zone_height, zone_of_point, zone_point, Known, SeparatorInsert, Zones};

/// The SOSP'25 concurrent interval skiplist (see the module doc).
pub struct SkipListMap<V> {
    raw: RawSkipList<V>,
    /// Declared after `raw`, so dropped after it: the retire lists free unlinked nodes only.
    readers: ReaderPool<SlotState<V>>,
    /// `len` striped by reader slot (Relaxed counters: only their sum is ever read).
    counts: Box<[CachePadded<AtomicIsize>]>,
    /// Hints padded: each is written by its arena's allocating thread, so two on one line would
    /// be false sharing between arenas.
    arenas: Option<(ArenaLayout, Box<[CachePadded<ArenaHints>]>)>,
    /// Ordinary nodes' maximum height.
    cap: usize,
    /// The allocation-failure test hook (`fault.rs`); off unless a test arms it.
    faults: AllocBudget,
    /// Called on the value of every interval node a commit takes out of the list
    /// ([`SkipListMap::with_leave_mark`]).
    leave_mark: Option<fn(&V)>,
    /// Zone separators (`skiplist/zone.rs`; maps with arenas only).
    zones: Zones,
}

#[cfg(not(loom))]
thread_local! {
    static RNG: Cell<u64> = const { Cell::new(0) };
}
// Under loom every execution of a model must make the same choices: a loom thread-local starts
// afresh in each execution, and its seed below does not depend on the thread's number.
#[cfg(loom)]
loom::thread_local! {
    static RNG: Cell<u64> = Cell::new(0);
}

/// A random height with P(h > k) = 4^-k, capped at `cap`.
fn random_height(cap: usize) -> usize {
    let r = RNG.with(|c| {
        let mut x = c.get();
        if x == 0 {
            #[cfg(not(loom))]
            let n = readers::home_slot() as u64;
            #[cfg(loom)]
            let n = 0u64;
            x = (n + 1).wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
        }
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        c.set(x);
        x
    });
    (1 + (r.trailing_zeros() as usize) / 2).min(cap)
}

/// A held range of a [`SkipListMap`]: released on drop, consumed by `swap`.
pub struct SkipLocked<'a, V: Clone + Send + Sync + 'static> {
    map: &'a SkipListMap<V>,
    range: Interval,
    /// Released on drop (see `lock.rs`), unless `swap` consumes them. Declared before
    /// `section`, so released before the read section ends.
    nodes: HeldNodes<V>,
    /// See [`SkipLocked::stable_span`]; read when the lock was taken (it cannot change).
    span: Range<u64>,
    /// Levels the locking traversal (`lock_range_at`) recorded: each level's predecessor, the
    /// swap's first guess ("One traversal per edit" in the module doc), kept in the section's
    /// slot (`SlotState::held`, `skiplist/slot_state.rs`: not here, so that moving a held range
    /// copies a few words).
    levels: usize,
    /// The read section the lock was taken in, kept open until the swap (or the drop): it keeps
    /// the recorded nodes alive and unreused. Its slot's stripe, retire list and record serve
    /// the swap.
    section: Section<'a, SlotState<V>>,
}

impl<V: Clone + Send + Sync + 'static> SkipLocked<'_, V> {
    /// The range held.
    pub fn range(&self) -> Interval {
        self.range
    }

    /// `[end of the held predecessor node (0 for the head), start of the first node after the
    /// last held node (KEY_SPACE_END if none))`, a superset of [`range`](Self::range): while
    /// this lock is held no other operation can insert, remove or change any node inside this
    /// span (separators count as nodes), so its intervals are [`intervals`](Self::intervals)
    /// and the rest of it is free, and both stay so until the lock is dropped or swapped.
    ///
    /// Why (`lock.rs`, `alloc.rs`, `swap.rs`): the lock holds, LOCKED on their level-0 links,
    /// the predecessor `p` (the last node with `end <= range.start`) and every node after it
    /// that starts below `range.end`; call the last of them `l` and its level-0 successor `n`.
    /// The span is `[p.end, n.start)`: the held nodes after `p` and the gaps between `p`, them
    /// and `n`, each gap being the one after a held node.
    /// - *Insert by alloc*: a claim is one CAS of the gap's predecessor link from the untagged
    ///   value to the new node; an alloc that finds the link LOCKED waits, and its CAS cannot
    ///   succeed on a LOCKED word. So no alloc claims a gap in the span.
    /// - *Insert, remove or replace by swap* (`map`, `swap`, an alloc across a separator):
    ///   the swap's commit store writes the link of the predecessor of its range, which it
    ///   must hold, and removes only nodes it holds. A range that overlaps the span has as
    ///   predecessor (the last node ending at or before its start) `p`, a held node, or a node
    ///   before `p` if the range starts below `p.end`; then it must also lock every node from
    ///   there that starts below its end, `p` included (`p.start <= p.end <` its end, since it
    ///   reaches into the span). Either way it waits for a node we hold (`lock_node`). A
    ///   held node is never removed by anyone else (only the holder of a node and of its
    ///   predecessor can swap it out), and `n` is not either: its predecessor `l` is held.
    /// - *Change*: a node's interval and value never change while it is in the list (a swap
    ///   replaces nodes); other threads may still CAS the upper-level links of held nodes
    ///   (towers of inserts outside the span, helping), which changes no node of the span.
    pub fn stable_span(&self) -> Range<u64> {
        self.span.clone()
    }

    /// Releases the held nodes that a `swap` of `range` (inside [`range`](Self::range)) does
    /// not need, so that the swap replaces only them: keeps, as the new level-0 predecessor,
    /// the last held node ending at or before `range.start`, and every held node after it that
    /// starts below `range.end`; unlocks the rest. [`range`](Self::range) becomes `range`
    /// widened to the whole intervals it overlaps, and [`stable_span`](Self::stable_span)
    /// shrinks to the nodes still held. Call it just before a `swap` that changes only part of
    /// what was locked (an address space locks an edit's neighbours to read them, but replaces
    /// them only when the edit merges with them): untouched nodes are then neither copied nor
    /// retired.
    ///
    /// # Errors
    /// [`MapError`] for an empty, unaligned or out-of-range `range`, or one not inside the held
    /// range (nothing released then).
    pub fn narrow(&mut self, range: Range<u64>) -> Result<(), MapError> {
        let iv = Interval::try_from(range)?;
        if iv.start < self.range.start || iv.end > self.range.end {
            return Err(MapError::OutOfRange {
                start: iv.start,
                end: iv.end,
            });
        }
        let nodes = &self.nodes;
        let ends = |i: usize| {
            // SAFETY: held nodes are alive and their intervals immutable.
            unsafe { ((*nodes[i]).start, (*nodes[i]).end) }
        };
        let mut pred = 0;
        for i in 1..nodes.len() {
            if ends(i).1 <= iv.start {
                pred = i;
            } else {
                break;
            }
        }
        let mut last = pred;
        let (mut lo, mut hi) = (iv.start, iv.end);
        for i in pred + 1..nodes.len() {
            let (s, e) = ends(i);
            if s >= iv.end {
                break;
            }
            last = i;
            if s < e {
                lo = lo.min(s);
                hi = hi.max(e);
            }
        }
        self.nodes.retain(pred..=last);
        self.range = Interval { start: lo, end: hi };
        // SAFETY: the remaining nodes are held by us.
        self.span = unsafe { held_span(&self.nodes) };
        Ok(())
    }

    /// The intervals just outside the held ones, with their values: the held predecessor and
    /// the level-0 successor of the last held node, each when it is an interval (not the head
    /// or a separator). Both stay in the list, unchanged, while this lock is held: the
    /// predecessor is held; the successor can only be removed or replaced by a swap holding its
    /// predecessor, our last held node. So an address space reads its edit's neighbours here
    /// (Linux's anon identity adoption looks at the adjacent regions).
    #[allow(clippy::type_complexity)]
    pub fn neighbours(&self) -> (Option<(Interval, &V)>, Option<(Interval, &V)>) {
        let as_interval = |p: *mut Node<V>| {
            // SAFETY: `p` is the held predecessor or the successor of the last held node: alive
            // and unchanged while we hold the lock (the doc above); intervals and values of
            // nodes in the list are immutable.
            interval_of(unsafe { &*p })
        };
        let prev = as_interval(self.nodes[0]);
        let last = *self.nodes.last().expect("at least the predecessor");
        // SAFETY: we hold `last`, so its level-0 link is stable (see `held_span`).
        let succ = link::ptr::<V>(unsafe { (*last).load(0) });
        let next = if succ.is_null() {
            None
        } else {
            as_interval(succ)
        };
        (prev, next)
    }

    /// The held interval nodes (not the predecessor, not separators), in order, with their
    /// values: every interval overlapping [`range`](Self::range), whole (a `swap` keeps the
    /// parts outside the range). Borrowed from the lock: held nodes are pinned (only their
    /// holder can retire them), so no read section is needed.
    pub fn intervals(&self) -> impl Iterator<Item = (Interval, &V)> + '_ {
        self.nodes[1..].iter().filter_map(|&p| {
            // SAFETY: a held node stays allocated while we hold it (Lemma B.1, `lock.rs`), and
            // `&self` keeps the lock held (a `swap` consumes it, a drop releases it) for the
            // borrow; its interval and value are immutable.
            interval_of(unsafe { &*p })
        })
    }
}

/// The interval and value of `n` if it is an interval node (not the head or a separator).
fn interval_of<V>(n: &Node<V>) -> Option<(Interval, &V)> {
    n.is_interval().then(|| {
        let iv = Interval {
            start: n.start,
            end: n.end,
        };
        (iv, n.value())
    })
}

/// The stable span of held nodes (see [`SkipLocked::stable_span`]).
///
/// # Safety
/// `nodes` came from `lock_range` and are held by the caller.
unsafe fn held_span<V>(nodes: &HeldNodes<V>) -> Range<u64> {
    let first = nodes[0];
    let last = *nodes.last().expect("at least the predecessor");
    // SAFETY: held nodes are alive; their intervals are immutable. The head's `end` is 0.
    let lo = unsafe { (*first).end };
    // We hold `last`, so its level-0 successor is stable (its removal or an insert in front of
    // it would write `last`'s link) and alive. Acquire (`load`): the link's target was published
    // by a Release store or CAS, which this load (or our lock's Acquire CAS) reads.
    // SAFETY: as above.
    let succ = link::ptr::<V>(unsafe { (*last).load(0) });
    let hi = if succ.is_null() {
        KEY_SPACE_END
    } else {
        // SAFETY: `succ` is in the list after a held node, hence alive (see above).
        unsafe { (*succ).start }
    };
    lo..hi
}

impl<V: Clone + Send + Sync + 'static> SkipListMap<V> {
    /// An empty map without arenas.
    pub fn new(domain: Domain) -> Self {
        Self {
            raw: RawSkipList::new(),
            readers: ReaderPool::new(domain),
            counts: (0..SLOTS)
                .map(|_| CachePadded::new(AtomicIsize::new(0)))
                .collect(),
            arenas: None,
            cap: MAX_HEIGHT,
            faults: AllocBudget::default(),
            leave_mark: None,
            zones: Zones::new(),
        }
    }

    /// Makes every commit of this map call `mark` on the value of each interval node it takes
    /// out of the list (removed, replaced, trimmed, or copied unchanged into a new node), after
    /// the commit can no longer fail and before its one publishing store: so a lock-free reader
    /// that got such a node from `query`, and checks the mark later under a lock of its own
    /// that the editor also takes (with the fences `mark` and the check agree on), learns that
    /// the node left. Every path that unlinks an interval node runs through that commit
    /// (`map`, `swap`, an alloc across a separator), so no caller can forget it (see the module
    /// doc, "Values that leave"). `mark` must not panic; it runs under the range's locks.
    pub fn with_leave_mark(mut self, mark: fn(&V)) -> Self {
        self.leave_mark = Some(mark);
        self
    }

    /// An empty map with per-core arenas (separators inserted at every arena boundary).
    ///
    /// # Panics
    /// If the layout is invalid (`ArenaLayout::validate`).
    pub fn with_arenas(domain: Domain, layout: ArenaLayout) -> Self {
        if let Err(e) = layout.validate() {
            panic!("invalid arena layout {layout:?}: {e}");
        }
        let mut m = Self::new(domain);
        m.cap = SEPARATOR_THRESHOLD - 1;
        let hints = (0..layout.count)
            .map(|k| CachePadded::new(ArenaHints::new(layout.arena(k).start)))
            .collect();
        m.arenas = Some((layout, hints));
        let seps: Vec<_> = (0..=layout.count as u64)
            .map(|k| {
                let b = layout.base + k * layout.size;
                Node::alloc(
                    b,
                    b,
                    ArenaLayout::separator_height(k),
                    Kind::Separator,
                    None,
                )
            })
            .collect();
        let end = layout.end();
        m.readers.with(|_, _, _| {
            // SAFETY: inside a read section; the list is empty and not shared yet. A point
            // range below the first separator locks only the head.
            unsafe {
                let locked = m.raw.lock_range(layout.base, end.max(layout.base + 1));
                let retired = m.raw.swap_locked(locked, layout.base, end, &seps);
                debug_assert!(retired.is_empty());
            }
        });
        m
    }

    /// The starts of every separator linked now, in order (tests; quiescent map).
    #[cfg(all(test, not(loom)))]
    fn separators(&self) -> Vec<u64> {
        self.readers.with(|_, _, _| {
            // SAFETY: inside a read section, quiescent (tests).
            let nodes = unsafe { self.raw.check() };
            nodes
                .iter()
                // SAFETY: as above.
                .filter(|&&p| unsafe { (*p).kind } == Kind::Separator)
                // SAFETY: as above.
                .map(|&p| unsafe { (*p).start })
                .collect()
        })
    }

    /// Whether `a` is an arena boundary (where the arenas' own separators go).
    fn is_arena_boundary(&self, a: u64) -> bool {
        self.arenas.as_ref().is_some_and(|(layout, _)| {
            a >= layout.base && a <= layout.end() && (a - layout.base) % layout.size == 0
        })
    }

    /// Makes sure, if it can, that the zone around `addr` (the [`ZONE_SIZE`]-aligned block
    /// containing it) has its separator (one page below its start), so that mappings placed
    /// in different zones outside the arenas share no skiplist segment (`skiplist/zone.rs`).
    /// Lock-free; returns
    /// whether a separator is there now as far as the map knows. Does nothing in a map without
    /// arenas, inside the arenas' span, in zone 0, or once [`MAX_ZONES`] zone separators exist.
    /// Never required for correctness: a caller may skip it.
    ///
    /// # Errors
    /// `OutOfMemory` if the node could not be allocated (nothing changed).
    pub fn separate_zone(&self, addr: u64) -> Result<bool, MapError> {
        let Some((layout, _)) = &self.arenas else {
            return Ok(false);
        };
        let b = addr & !(ZONE_SIZE - 1);
        if b == 0 || b >= KEY_SPACE_END || (layout.base <= b && zone_point(b) <= layout.end()) {
            return Ok(false);
        }
        match self.zones.lookup(b) {
            Known::Present => return Ok(true),
            Known::Covered => return Ok(false),
            Known::Unknown => {}
        }
        let mut took = false;
        let got = self.readers.with(|_, _, state| {
            // SAFETY: inside a read section; the height is a separator's, above every
            // ordinary node of a map with arenas (`cap`).
            unsafe {
                self.raw.insert_separator(
                    zone_point(b),
                    zone_height(b),
                    || self.zones.take(),
                    &mut took,
                    &mut state.pool,
                )
            }
        });
        let linked = matches!(got, Ok(SeparatorInsert::Inserted));
        if took && !linked {
            self.zones.give_back();
        }
        match got? {
            SeparatorInsert::Inserted | SeparatorInsert::Present => {
                self.zones.note(b, Known::Present);
                Ok(true)
            }
            SeparatorInsert::Covered => {
                self.zones.note(b, Known::Covered);
                Ok(false)
            }
            SeparatorInsert::Skipped => Ok(false),
        }
    }

    /// Testing hook (issue 10's fault injection): after `n` more node allocations succeed,
    /// every further one fails with [`MapError::OutOfMemory`] (the operation changes nothing),
    /// until called with `None`. Off by default; not for production use.
    #[doc(hidden)]
    pub fn fail_allocations_after(&self, n: Option<usize>) {
        self.faults.set(n);
    }

    /// The arena layout, if any.
    pub fn arena_layout(&self) -> Option<ArenaLayout> {
        self.arenas.as_ref().map(|(l, _)| *l)
    }

    fn add_len(&self, stripe: usize, delta: isize) {
        if delta != 0 {
            self.counts[stripe].fetch_add(delta, Ordering::Relaxed);
        }
    }

    /// Frees every node removed before the call (and drops its value): hands the pending
    /// batches of every reader slot over, waits for one grace period, frees them, then waits
    /// for the domain's queued callbacks (`Domain::barrier`). The skiplist's counterpart of
    /// `Domain::barrier()`, which alone may leave up to a partial batch per slot pending. Also
    /// gives the memory kept in the slots' node pools (`skiplist/pool.rs`) back to the
    /// allocator.
    ///
    /// Must not be called inside a read section of the map's domain, from an RCU callback, or
    /// while holding a [`SkipLocked`] (see the module doc's hazard).
    pub fn barrier(&self) {
        let mut nodes = Vec::new();
        self.readers.for_each_local(|state| {
            nodes.extend(state.retired.take_all());
            state.pool.clear();
        });
        let domain = self.readers.domain();
        // The nodes were unlinked before `take_all` took them; this grace period begins after.
        domain.synchronize();
        drop(Retired(nodes));
        domain.barrier();
    }

    /// Replaces the contents of `[s, e)` (held as `locked`) by `new_ivs` (sorted, disjoint,
    /// inside `[s, e)`), keeping the parts of the old nodes outside `[s, e)`, re-creating
    /// uncovered separators, retiring the old nodes, adjusting `len` and the hints.
    ///
    /// # Safety
    /// `locked` came from `raw.lock_range(s, e)` (possibly narrowed since,
    /// [`SkipLocked::narrow`]); the caller is in a read section; `hint`, if any, came from the
    /// `lock_range_at` that took `locked` in that same section (its predecessors then precede
    /// every node `locked` still holds but its first, and `[s, e)`).
    ///
    /// The old nodes (`locked[1..]`) go to `slot.0`, the caller's slot's retire list; the new
    /// ones are made from `slot.1`, its node pool, where it keeps blocks.
    ///
    /// Fails with `OutOfMemory` if a new node cannot be allocated: nothing changed then (the
    /// nodes are made before the swap), the range is released and the new values are dropped.
    #[allow(clippy::too_many_arguments)]
    unsafe fn swap_with(
        &self,
        locked: HeldNodes<V>,
        s: u64,
        e: u64,
        new_ivs: impl IntoIterator<Item = (Interval, V), IntoIter: ExactSizeIterator>,
        stripe: usize,
        hint: Option<(&Position<V>, usize)>,
        (retired, pool): (&mut RetireList<V>, &mut NodePool<V>),
    ) -> Result<(), MapError> {
        let new_ivs = new_ivs.into_iter();
        let old = &locked[1..];
        // SAFETY (whole function): held nodes are alive and immutable except their links.
        let (span_lo, span_hi) = match (old.first(), old.last()) {
            // SAFETY: held nodes are alive and their intervals and values immutable.
            (Some(&f), Some(&l)) => unsafe { ((*f).start.min(s), (*l).end.max(e)) },
            _ => (s, e),
        };
        let mut covered = 0u64;
        let mut items: Vec<(u64, u64, Kind, Option<V>)> = Vec::with_capacity(new_ivs.len() + 2);
        if let Some(&f) = old.first() {
            // SAFETY: held nodes are alive and their intervals and values immutable.
            let f = unsafe { &*f };
            if f.is_interval() && f.start < s {
                items.push((f.start, s, Kind::Interval, Some(f.value().clone())));
            }
        }
        items.extend(
            new_ivs
                .inspect(|(iv, _)| covered += iv.len())
                .map(|(iv, v)| (iv.start, iv.end, Kind::Interval, Some(v))),
        );
        if let Some(&l) = old.last() {
            // SAFETY: held nodes are alive and their intervals and values immutable.
            let l = unsafe { &*l };
            if l.is_interval() && l.end > e {
                items.push((e, l.end, Kind::Interval, Some(l.value().clone())));
            }
        }
        let covered_at = |items: &[(u64, u64, Kind, Option<V>)], b: u64| {
            items
                .iter()
                .any(|&(a, z, k, _)| k == Kind::Interval && a < b && b < z)
        };
        if let Some((layout, _)) = &self.arenas {
            for b in layout.boundaries_inside(span_lo, span_hi) {
                if !covered_at(&items, b) {
                    items.push((b, b, Kind::Separator, None));
                }
            }
        }
        // Zone separators the range held come back where no new interval covers them
        // (`skiplist/zone.rs`); the others are dropped for good when the commit is made.
        let mut zones_dropped: Vec<u64> = Vec::new(); // No allocation unless one is dropped.
        for &o in old {
            // SAFETY: held nodes are alive and their intervals immutable.
            let (a, k) = unsafe { ((*o).start, (*o).kind) };
            if k == Kind::Separator && !self.is_arena_boundary(a) {
                if covered_at(&items, a) {
                    zones_dropped.push(a);
                } else {
                    items.push((a, a, Kind::Separator, None));
                }
            }
        }
        items.sort_by_key(|&(a, z, _, _)| (a, z));
        let mut delta = 0isize;
        let mut nodes = Unpublished(Vec::with_capacity(items.len()));
        for (a, z, k, v) in items {
            let h = if k == Kind::Separator {
                let (layout, _) = self.arenas.as_ref().expect("separators need arenas");
                if self.is_arena_boundary(a) {
                    ArenaLayout::separator_height(layout.boundary_index(a))
                } else {
                    zone_height(zone_of_point(a))
                }
            } else {
                delta += 1;
                random_height(self.cap)
            };
            // On failure `nodes` frees what was made and `locked` releases the range (their
            // drops); the values not yet moved into nodes are dropped with `items`.
            let budget = Some(&self.faults);
            nodes
                .0
                .push(Node::try_alloc(a, z, h, k, v, budget, Some(&mut *pool))?);
        }
        let nodes = std::mem::take(&mut nodes.0);
        for &o in old {
            // SAFETY: held nodes are alive and their intervals and values immutable.
            let o = unsafe { &*o };
            if o.is_interval() {
                delta -= 1;
                // Every old interval node leaves at the commit below (whole, or trimmed into
                // new nodes carrying clones): marked before the store that publishes its
                // successors.
                if let Some(mark) = self.leave_mark {
                    mark(o.value());
                }
            }
        }
        // The caller's code (values' `Clone`, `Drop` of `new_ivs`) has run: from here on
        // nothing can unwind, and the swap takes over releasing the locks.
        // SAFETY: forwarded; `nodes` are fresh, sorted, disjoint and inside the old span.
        let locked = unsafe { self.raw.swap_locked_at(locked, s, e, &nodes, hint) };
        self.add_len(stripe, delta);
        for a in zones_dropped {
            self.zones.give_back();
            self.zones.forget(zone_of_point(a), Known::Present);
        }
        if self.arenas.is_some() {
            for &o in &locked[1..] {
                // SAFETY: unlinked but not retired yet (below): allocated, immutable.
                let o = unsafe { &*o };
                if o.is_interval() && o.end - o.start > PAGE_SIZE {
                    self.zones.uncover(o.start, o.end);
                }
            }
        }
        if covered < e - s {
            if let Some((layout, hints)) = &self.arenas {
                retreat_overlapping(layout, hints.iter().map(|h| &**h), s, e);
            }
        }
        // The predecessor stays; the old nodes are now unreachable for later operations.
        // SAFETY: unlinked by the swap above, retired once (we held them).
        unsafe { retired.retire(&locked[1..], self.readers.domain(), pool) };
        Ok(())
    }

    /// `alloc` that hands the value back when there is no space (so callers can try
    /// elsewhere); `None` with `OutOfMemory`. With `pad > 0` it claims `len` bytes at `pad`
    /// bytes into the first gap of `len + 2 * pad` bytes (`alloc.rs`); the caller checked that
    /// this sum does not overflow.
    fn alloc_inner(
        &self,
        within: Interval,
        len: u64,
        pad: u64,
        value: V,
    ) -> Result<Interval, (MapError, Option<V>)> {
        let arena = self.arenas.as_ref().and_then(|(l, hints)| {
            l.arena_of(within.start, within.end)
                .map(|k| hints[k].for_pad(pad))
        });
        self.readers.with(|_, stripe, state| {
            let height = random_height(self.cap);
            let node = Node::try_alloc(
                0,
                0,
                height,
                Kind::Interval,
                Some(value),
                Some(&self.faults),
                Some(&mut state.pool),
            )
            .map_err(|e| (e, None))?;
            let mut search = HintedSearch::new(arena);
            loop {
                // SAFETY: inside a read section; `node` is fresh (or handed back by `run`).
                match unsafe { search.run(&self.raw, within, len, pad, node) } {
                    Hinted::Inserted(start) => {
                        self.add_len(stripe, 1);
                        return Ok(Interval {
                            start,
                            end: start + len,
                        });
                    }
                    Hinted::NoSpace => {
                        // SAFETY: never published.
                        let v = unsafe { Node::into_value(node) };
                        return Err((MapError::NoSpace { len, within }, Some(v)));
                    }
                    Hinted::Straddle(g) => {
                        debug_assert_eq!(pad, 0, "padded searches end gaps at separators");
                        let mut pos = Position::new();
                        // SAFETY: inside a read section.
                        let (locked, levels) =
                            unsafe { self.raw.lock_range_at(g, g + len, &mut pos) };
                        // SAFETY: held nodes are alive.
                        let free = unsafe {
                            (*locked[0]).end <= g
                                && locked[1..].iter().all(|&n| (*n).kind == Kind::Separator)
                        };
                        if !free {
                            drop(locked);
                            continue;
                        }
                        // SAFETY: never published.
                        let v = unsafe { Node::into_value(node) };
                        let iv = Interval {
                            start: g,
                            end: g + len,
                        };
                        // SAFETY: held range, inside a read section.
                        unsafe {
                            let hint = Some((&pos, levels));
                            let slot = (&mut state.retired, &mut state.pool);
                            self.swap_with(locked, g, g + len, Some((iv, v)), stripe, hint, slot)
                        }
                        .map_err(|e| (e, None))?;
                        return Ok(iv);
                    }
                }
            }
        })
    }

    /// Allocates `len` bytes for `value` in arena `core % count` (from its hint), falling back
    /// to the shared region (outside all arenas) when the arena is full. Without arenas this is
    /// `alloc(0..KEY_SPACE_END, len, value)`.
    pub fn alloc_in_arena(&self, core: usize, len: u64, value: V) -> Result<Interval, MapError> {
        let Some((layout, _)) = &self.arenas else {
            return self.alloc(0..KEY_SPACE_END, len, value);
        };
        let arena = layout.arena(core % layout.count);
        check_alloc(arena.start..arena.end, len)?;
        let mut value = match self.alloc_inner(arena, len, 0, value) {
            Ok(iv) => return Ok(iv),
            Err((_, Some(v))) => v,
            Err((e, None)) => return Err(e),
        };
        for r in [layout.end()..KEY_SPACE_END, 0..layout.base] {
            if let Ok(w) = Interval::try_from(r) {
                match self.alloc_inner(w, len, 0, value) {
                    Ok(iv) => return Ok(iv),
                    Err((_, Some(v))) => value = v,
                    Err((e, None)) => return Err(e),
                }
            }
        }
        drop(value);
        Err(MapError::NoSpace {
            len,
            within: Interval {
                start: 0,
                end: KEY_SPACE_END,
            },
        })
    }

    /// [`lock`](IntervalLocking::lock) with the held range widened to the whole nodes it
    /// overlaps: the returned lock's [`range`](SkipLocked::range) runs from the start of the
    /// first held interval (or `range.start`) to the end of the last (or `range.end`). It holds
    /// the same nodes as `lock(range)` (no node overlaps the widened parts but the held ones:
    /// nodes are disjoint), so a `swap` of it replaces whole nodes and clones no value (the
    /// caller gives the full replacement of what it read through
    /// [`intervals`](SkipLocked::intervals)). This is how an address space locks the
    /// *dynamic* interval of an edit (SOSP'25 §3.1): the regions it overlaps, whole.
    ///
    /// # Errors
    /// As `lock`: an empty, unaligned or out-of-range `range`.
    pub fn lock_covering(&self, range: Range<u64>) -> Result<SkipLocked<'_, V>, MapError> {
        let mut locked = self.lock(range)?;
        let (mut lo, mut hi) = (locked.range.start, locked.range.end);
        for (iv, _) in locked.intervals() {
            lo = lo.min(iv.start);
            hi = hi.max(iv.end);
        }
        locked.range = Interval { start: lo, end: hi };
        Ok(locked)
    }

    /// Allocates `len` bytes for `value` in arena `core % count` only (never the shared region),
    /// padded: claims `[g + pad, g + pad + len)` inside the first free gap `[g, ge)` of the arena
    /// with `ge - g >= len + 2 * pad`, so that the new interval has at least `pad` free bytes on
    /// both sides when it is allocated (and is adjacent to no node, for `pad > 0`). Gap ends are
    /// the neighbouring nodes (intervals or separators) or the arena bounds. First fit from the
    /// arena's hint: exact when nothing runs concurrently; under concurrency the claimed range
    /// was a gap of `len + 2 * pad` bytes at the claim (one CAS, as `alloc`). `pad == 0` is
    /// `alloc_in_arena` without the fallback to the shared region.
    ///
    /// The pads are not reserved: later operations (an unpadded alloc, a `map`) may fill them.
    ///
    /// Padded searches start from their own hint (`skiplist/hint.rs`): an arena of regions
    /// padded by one page is searched in O(log n); pads or lengths that leave gaps of three
    /// pages or more that the next claim does not fit in make the search walk those gaps.
    ///
    /// Errors (the value is handed back where the caller may want to try elsewhere):
    /// - [`ArenaAllocError::Invalid`]: `pad` unaligned, `len` zero or unaligned (the value is
    ///   dropped);
    /// - [`ArenaAllocError::NoArenas`]: the map has no arenas;
    /// - [`ArenaAllocError::ArenaFull`]: no gap of `len + 2 * pad` bytes in the arena (also when
    ///   that sum overflows or exceeds the arena);
    /// - [`ArenaAllocError::OutOfMemory`]: the node could not be allocated (the value is dropped).
    pub fn alloc_in_arena_padded(
        &self,
        core: usize,
        len: u64,
        pad: u64,
        value: V,
    ) -> Result<Interval, ArenaAllocError<V>> {
        if pad % PAGE_SIZE != 0 {
            return Err(ArenaAllocError::Invalid(MapError::Unaligned(pad)));
        }
        let Some((layout, _)) = &self.arenas else {
            return Err(ArenaAllocError::NoArenas(value));
        };
        let arena = layout.arena(core % layout.count);
        check_alloc(arena.start..arena.end, len).map_err(ArenaAllocError::Invalid)?;
        let fits = pad
            .checked_mul(2)
            .and_then(|p| p.checked_add(len))
            .is_some_and(|need| need <= arena.len());
        if !fits {
            return Err(ArenaAllocError::ArenaFull(value));
        }
        match self.alloc_inner(arena, len, pad, value) {
            Ok(iv) => Ok(iv),
            Err((_, Some(v))) => Err(ArenaAllocError::ArenaFull(v)),
            Err((e, None)) => {
                debug_assert_eq!(e, MapError::OutOfMemory);
                Err(ArenaAllocError::OutOfMemory)
            }
        }
    }

    /// Checks every structural invariant (sortedness, disjointness, levels as subsequences,
    /// heights, no tag left, separators exactly at uncovered arena boundaries, `len`).
    /// Meaningful only while no other thread updates the map (memory-safe at any time).
    ///
    /// # Panics
    /// On a violated invariant.
    pub fn check_invariants(&self) {
        self.readers.with(|_, _, _| {
            // SAFETY: inside a read section (and quiescent by this method's contract).
            let nodes = unsafe { self.raw.check() };
            let mut intervals = 0usize;
            let mut seps = Vec::new();
            let mut zone_seps = 0usize;
            for &p in &nodes {
                // SAFETY: as above.
                let n = unsafe { &*p };
                match n.kind {
                    Kind::Interval => {
                        intervals += 1;
                        assert!(n.start < n.end);
                        assert!(n.height as usize <= self.cap, "ordinary node too high");
                    }
                    Kind::Separator if self.is_arena_boundary(n.start) => {
                        assert!((n.height as usize) >= SEPARATOR_THRESHOLD);
                        seps.push(n.start);
                    }
                    Kind::Separator => {
                        let b = zone_of_point(n.start);
                        assert_eq!(b % ZONE_SIZE, 0, "zone separator off a zone's point");
                        assert_eq!(n.height as usize, zone_height(b), "zone height");
                        zone_seps += 1;
                    }
                    Kind::Head => unreachable!("head in level 0"),
                }
            }
            assert_eq!(intervals, self.len(), "len");
            match &self.arenas {
                None => assert!(seps.is_empty() && zone_seps == 0),
                Some((layout, _)) => {
                    let ivs: Vec<(u64, u64)> = nodes
                        .iter()
                        // SAFETY: as above.
                        .map(|&p| unsafe { ((*p).start, (*p).end, (*p).kind) })
                        .filter(|&(_, _, k)| k == Kind::Interval)
                        .map(|(a, z, _)| (a, z))
                        .collect();
                    let expected: Vec<u64> = (0..=layout.count as u64)
                        .map(|k| layout.base + k * layout.size)
                        .filter(|&b| !ivs.iter().any(|&(a, z)| a < b && b < z))
                        .collect();
                    assert_eq!(seps, expected, "separators at uncovered arena boundaries");
                    assert!(zone_seps <= MAX_ZONES, "zone separators past the bound");
                }
            }
        });
    }
}

impl<V: Clone + Send + Sync + 'static> IntervalMap<V> for SkipListMap<V> {
    type Ref<'g>
        = &'g V
    where
        Self: 'g;

    fn name(&self) -> &'static str {
        "skiplist"
    }

    fn domain(&self) -> &Domain {
        self.readers.domain()
    }

    #[inline]
    fn query<'g>(&'g self, addr: u64, guard: &'g Guard<'_>) -> Option<(Interval, &'g V)> {
        check_guard(self.readers.domain(), guard);
        // SAFETY: the caller's guard keeps every node reachable during the call alive for 'g.
        let n = unsafe { self.raw.query(addr) }?;
        Some((
            Interval {
                start: n.start,
                end: n.end,
            },
            n.value(),
        ))
    }

    /// Clones the value of an interval that reaches past `range`, once per side kept (the
    /// trimmed remainders, see the module doc); nothing else is cloned.
    fn map(&self, range: Range<u64>, value: Option<V>) -> Result<(), MapError> {
        let iv = Interval::try_from(range)?;
        self.readers.with(|_, stripe, state| {
            let slot = (&mut state.retired, &mut state.pool);
            // SAFETY: inside a read section; the locked nodes are passed straight to the swap.
            unsafe {
                let mut pos = Position::new();
                let (locked, levels) = self.raw.lock_range_at(iv.start, iv.end, &mut pos);
                let new = value.map(|v| (iv, v));
                let hint = Some((&pos, levels));
                self.swap_with(locked, iv.start, iv.end, new, stripe, hint, slot)
            }
        })
    }

    fn alloc(&self, within: Range<u64>, len: u64, value: V) -> Result<Interval, MapError> {
        let within = check_alloc(within, len)?;
        self.alloc_inner(within, len, 0, value).map_err(|(e, _)| e)
    }

    fn visit<'g>(
        &'g self,
        range: Range<u64>,
        guard: &'g Guard<'_>,
        f: &mut dyn FnMut(Interval, &V) -> ControlFlow<()>,
    ) -> Result<(), MapError> {
        check_guard(self.readers.domain(), guard);
        let iv = Interval::try_from(range)?;
        // SAFETY: the caller's guard keeps reachable nodes alive.
        unsafe {
            self.raw.visit(iv.start, iv.end, &mut |n| {
                f(
                    Interval {
                        start: n.start,
                        end: n.end,
                    },
                    n.value(),
                )
            })
        };
        Ok(())
    }

    fn len(&self) -> usize {
        let sum: isize = self.counts.iter().map(|c| c.load(Ordering::Relaxed)).sum();
        sum.max(0) as usize
    }
}

impl<V: Clone + Send + Sync + 'static> IntervalLocking<V> for SkipListMap<V> {
    type Locked<'a>
        = SkipLocked<'a, V>
    where
        Self: 'a;

    fn lock(&self, range: Range<u64>) -> Result<SkipLocked<'_, V>, MapError> {
        let iv = Interval::try_from(range)?;
        let mut section = self.readers.enter();
        let (_, state) = section.parts();
        let pos = &mut state.held;
        *pos = Position::new();
        // SAFETY: inside `section`'s read section, which the lock keeps until its swap or drop
        // (so the record in its slot stays valid for the swap: the slot is the section's until
        // then); the held nodes pin themselves besides.
        let (nodes, levels) = unsafe { self.raw.lock_range_at(iv.start, iv.end, pos) };
        // SAFETY: `nodes` came from `lock_range_at` and are held.
        let span = unsafe { held_span(&nodes) };
        Ok(SkipLocked {
            map: self,
            range: iv,
            nodes,
            span,
            levels,
            section,
        })
    }

    /// Replaces the contents of the held range by `new_intervals`; parts of overlapped intervals
    /// outside the held range are kept, as new nodes with a `Clone` of the value (the only
    /// values cloned; see the module doc). An interval outside the range or overlapping another is
    /// refused with `OutOfRange`, a failed node allocation with `OutOfMemory` (nothing changes;
    /// the range is released).
    fn swap(
        &self,
        locked: SkipLocked<'_, V>,
        mut new_intervals: Vec<(Interval, V)>,
    ) -> Result<(), MapError> {
        assert!(
            std::ptr::eq(locked.map, self),
            "swap with a lock of another map"
        );
        let r = locked.range;
        new_intervals.sort_by_key(|(iv, _)| *iv);
        let mut last_end = r.start;
        for (iv, _) in &new_intervals {
            if iv.start < last_end || iv.end > r.end {
                return Err(MapError::OutOfRange {
                    start: iv.start,
                    end: iv.end,
                });
            }
            last_end = iv.end;
        }
        let SkipLocked {
            nodes,
            levels,
            mut section,
            ..
        } = locked;
        let (stripe, state) = section.parts();
        let SlotState {
            retired,
            held,
            pool,
        } = state;
        // SAFETY: `nodes` are held (moved out of the lock into `swap_with`, which releases them
        // on unwind, before `section` ends). The hint (`held`, in the section's slot) came from
        // the `lock_range_at` that took them, in `section`, still open; `narrow` may have
        // released nodes since, which leaves every hinted predecessor before the range
        // (`swap_with`'s hint contract; see "One traversal per edit").
        unsafe {
            let hint = Some((&*held, levels));
            let slot = (retired, pool);
            self.swap_with(nodes, r.start, r.end, new_intervals, stripe, hint, slot)
        }
    }
}

/// Nodes made for a swap that has not happened: freed (with their values) if it never does.
struct Unpublished<V>(Vec<*mut Node<V>>);

impl<V> Drop for Unpublished<V> {
    fn drop(&mut self) {
        // SAFETY: the nodes came from `Node::try_alloc` and were never published (a swap takes
        // them out of this list before it links them), so this is their only owner.
        unsafe { Node::dealloc_all(&mut self.0) };
    }
}

#[cfg(all(test, not(loom)))]
mod tests;
#[cfg(all(test, not(loom)))]
mod tests_held;
#[cfg(all(test, not(loom)))]
mod tests_narrow;
#[cfg(all(test, not(loom)))]
mod tests_padded;
#[cfg(all(test, not(loom)))]
mod tests_pool;
#[cfg(all(test, not(loom)))]
mod tests_span;
#[cfg(all(test, not(loom)))]
mod tests_zone;
