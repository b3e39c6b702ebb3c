//! `RadixMap`: RadixVM's radix tree (Clements, Kaashoek, Zeldovich, EuroSys'13, §3.2, §3.4) as
//! an interval map.
//!
//! # Structure (`radix/geom.rs`, `radix/node.rs`)
//! A fixed-depth radix tree over the page number, shaped like a hardware page table: nodes of
//! 512 slots, each level indexed by nine bits. RadixVM's four levels index x86-64's 36-bit page
//! number (levels 0-3 here); the contract's key space is the whole `u64`, so two more levels sit
//! on top (a 9-bit level and a root of which 128 slots are used): see `geom.rs`. A slot is one
//! atomic word: a child pointer, or a *value* (a pointer to the immutable record of the interval
//! covering the slot's pages, or free) with a lock bit. A value in an interior slot is *folded*:
//! it covers the whole subtree's range, so an empty address space is a root of free slots and a
//! mapping of a 1 GiB-aligned gigabyte is one slot at level 2. Nodes are allocated lazily, when
//! a range boundary falls inside a folded slot.
//!
//! # Operations
//! - `query(addr)`: one Acquire load per level, no lock, no write, no allocation (a lookup
//!   that meets an operation publishing its range resolves the page in its descriptor).
//! - `map(range, v | None)` (`radix/update.rs`): lock the range's *dynamic interval* (the range
//!   widened to the intervals it overlaps) slot by slot, left to right, at the highest level the
//!   tree is expanded to, expanding folded slots cut by the range's bounds (the new node's slots
//!   inherit the lock bit); make the new records (the range's, and clones of the values of
//!   intervals trimmed on either side); publish them atomically (a descriptor and one commit
//!   store, `radix/node.rs`) and release every slot with its new word. Operations on disjoint
//!   ranges touch disjoint slots (except while one expands a folded slot the other's range
//!   shares, as the paper notes), so they run in parallel without sharing a written line.
//! - `alloc(within, len, v)` (`radix/alloc.rs`): first fit by a lock-free walk of the slots,
//!   from a per-core hint that frees move back; the gap is then locked, checked and published
//!   like a `map`.
//! - `visit(range)`: a lock-free walk of the slots, one record read per interval.
//! - [`IntervalLocking`]: `lock(range)` holds the dynamic interval ([`RadixLocked`]); `swap`
//!   publishes new contents for it as `map` does.
//!
//! # Lock bits, expansion and folding
//! See `radix/tree.rs` (the protocol, with the paper's words) and its loom models
//! (`radix/loom_tests.rs`): range lock vs range lock on overlapping ranges (mutual exclusion,
//! and no deadlock from locking left to right), expansion vs a concurrent lookup (a lookup never
//! sees a half-built node; the lock bits are propagated into it), a fold vs a lookup and vs a
//! locker waiting inside the folded node. Each model fails under the mutation of the step it
//! guards. Folding back (§3.2): an operation that gives every slot of a node one record folds
//! the node into its parent's slot at publication (its slots keep the record, locked for
//! ever, for the lookups and lockers still inside it; Refcache frees it). One level per
//! operation, and only a node the operation holds whole.
//!
//! # Node reclamation (§3.2)
//! Through Refcache (`aspace_sync::Refcache`), in `radix/reclaim.rs`, the one place that
//! decides it: every node but the root is a Refcache object counting its used slots and the
//! operations that hold slots in it; a parent links to a child by the child pointer and the
//! child's Refcache weak reference. A node whose count stays zero for a whole Refcache epoch is
//! freed by Refcache's review, whose free callback clears the parent's slot and hands the
//! node's memory to the RCU domain (lookups take no reference: they are RCU readers). An
//! operation that meets a dying node revives it (`tryget`); one that meets a freed node goes
//! back to the root. Counts go through per-core delta caches, so operations on disjoint ranges
//! under one node share no counter line. Departures, both stated where they are: lookups do
//! not take references (the contract's `query` returns a reference valid for the caller's RCU
//! guard), and an operation references only the nodes whose slots it locks, not every node on
//! its path.
//!
//! # Values and `Clone`
//! A value is cloned only when an operation trims an interval that reaches past its range: the
//! part kept on each side becomes a new record with `value.clone()` (two clones when the range
//! lies strictly inside one interval). The clones run before anything is published, with the
//! dynamic interval's slots held; a panicking clone releases them and changes nothing.
//!
//! # Values that leave
//! A record leaves the tree only through a publication (`radix/tree.rs`, `RawRadix::publish`:
//! `map`, `swap`, `alloc`; dropping a [`RadixLocked`] only releases). Every record of the
//! held range leaves at it, since the new slot words point to fresh records only: replaced,
//! removed, trimmed (the kept parts are new records with cloned values), or passed back
//! unchanged to a `swap` after [`RadixLocked::widen_to_held`] (a new record too). A map built
//! [`with_leave_mark`](RadixMap::with_leave_mark) calls the mark on each such record's value,
//! once, after the operation's last fallible step (the descriptor's allocation: records and
//! expansions come before it) and before its first publishing store; an operation that fails
//! marks nothing (the skiplist marks before its commit store too, but may still fail after).
//! An address space uses it so that a lock-free fault holding an old region learns, under its
//! leaf lock, that the region left (`aspace-vm`'s `StoredRegion::mark_replaced`).
//!
//! # Locking and RCU contract
//! `query`/`visit` run under the caller's guard of [`RadixMap::domain`] (checked). `map`,
//! `alloc`, `lock`, `swap` run inside a read section of a pooled reader
//! (`skiplist/readers.rs`); they wait for slot locks inside it, so (as for the skiplist) a
//! thread holding a [`RadixLocked`] must not call `synchronize()`/`barrier()` on the map's
//! domain. Replaced records and used descriptors are batched per reader slot and freed by
//! that slot's next operations after a grace period (`radix/retire.rs`; [`RadixMap::barrier`]
//! frees everything removed before it); removed nodes' memory goes to the domain after Refcache
//! frees them ([`RadixMap::collect`] drives Refcache until they are). Every heap allocation an
//! operation makes before its commit is fallible and takes a unit of the allocation budget:
//! nodes, their Refcache objects and weak cells (`Core::try_alloc_with_weak`), records,
//! descriptors, and the growth of the operation's buffers (held slots, traversal references,
//! expansion work list, old records, cuts: `fault::try_reserve`; they are reused from the
//! reader slot, so a warm slot seldom grows them). A failure (real, or injected by
//! [`RadixMap::fail_allocations_after`]) returns `OutOfMemory`, releases the slots and
//! changes nothing (expansions made stay: they change no page's value); a regression test
//! fails every allocation of an expanding `map` in turn with a failing global allocator
//! (`tests/radix_alloc_budget.rs`). Not covered: Refcache's own bookkeeping, which a counted
//! reference operation may run (a maintenance pass every few hundred operations or 10 ms:
//! review-queue pushes, frees), and everything after the commit (retire lists, domain
//! callbacks); those abort on exhaustion, as the rest of the crate's bookkeeping does
//! (`fault.rs`).
//!
//! # Linearizability
//! `map`/`swap`/`alloc`: the descriptor's commit store (or the single slot store when one slot
//! changes). `query`: the load that reached the value or the descriptor's `committed` flag.
//!
//! Not for: page tables, frames or region semantics (`aspace-vm`).

mod alloc;
mod geom;
#[cfg(all(test, loom))]
mod loom_hints;
#[cfg(all(test, loom))]
mod loom_tests;
mod node;
mod node_rc;
mod reclaim;
mod retire;
mod tree;
mod update;

use crate::contract::{Interval, IntervalLocking, IntervalMap, MapError, PAGE_SIZE};
use crate::fault::AllocBudget;
use crate::skiplist::readers::{ReaderPool, SlotLocal, SLOTS};
use crate::sync::stat::AtomicIsize;
use crate::validate::{check_alloc, check_guard};
use aspace_rcu::{Domain, Guard};
use crossbeam_utils::CachePadded;
use reclaim::{CoreHandle, Pins, Reclaimer};
use retire::RetireList;
use std::ops::{ControlFlow, Range};
use std::sync::atomic::Ordering;
use tree::{Held, RawRadix};
use update::{Op, Published, Scratch};

/// Per-slot state of the reader pool: the slot's Refcache core handle (made on first use) and
/// its retire list.
struct Local<V> {
    core: Option<CoreHandle>,
    retire: RetireList<V>,
    scratch: Scratch<V>,
}

impl<V> Default for Local<V> {
    fn default() -> Self {
        Self {
            core: None,
            retire: RetireList::default(),
            scratch: Scratch::default(),
        }
    }
}

impl<V: Send + 'static> SlotLocal for Local<V> {
    fn release(&mut self, domain: &Domain) {
        // A temporary reader's core leaves Refcache's epochs (flushing its cache); its garbage
        // goes to the domain.
        self.core = None;
        self.retire.release(domain);
    }
}

/// RadixVM's radix tree as an interval map (see the module doc).
pub struct RadixMap<V> {
    raw: RawRadix<V>,
    readers: ReaderPool<Local<V>>,
    /// `len` striped by reader slot (Relaxed: only their sum is read).
    counts: Box<[CachePadded<AtomicIsize>]>,
    hints: alloc::Hints,
    /// The padded searches' hints (`alloc_padded`, `radix/alloc.rs`).
    padded_hints: alloc::Hints,
    /// The allocation-failure test hook (`fault.rs`); off unless a test arms it.
    faults: AllocBudget,
    /// Called on every record's value as it leaves the tree ([`RadixMap::with_leave_mark`]).
    leave_mark: Option<fn(&V)>,
    /// Refcache for the nodes (`radix/reclaim.rs`). Declared last: dropped after the tree gave
    /// back its counts and the pool's cores are gone, so its teardown frees the objects.
    reclaimer: Reclaimer,
}

/// A held range of a [`RadixMap`]: its dynamic interval's slots, released on drop, consumed by
/// `swap`.
pub struct RadixLocked<'a, V: Clone + Send + Sync + 'static> {
    map: &'a RadixMap<V>,
    range: Interval,
    /// The dynamic interval held (pages).
    w: (u64, u64),
    held: Vec<Held>,
    /// Refcache references on the held slots' nodes (they stay linked while held).
    pins: Pins,
}

// SAFETY: the held slots are plain words of the map's nodes, released through atomics; the
// lock may be released on another thread.
unsafe impl<V: Clone + Send + Sync + 'static> Send for RadixLocked<'_, V> {}

impl<V: Clone + Send + Sync + 'static> RadixLocked<'_, V> {
    /// The range asked for.
    pub fn range(&self) -> Interval {
        self.range
    }

    /// The range held: [`range`](Self::range) widened to the intervals it overlaps. No other
    /// operation can change anything inside it until the lock is dropped or swapped.
    pub fn held(&self) -> Interval {
        Interval {
            start: self.w.0 * PAGE_SIZE,
            end: self.w.1 * PAGE_SIZE,
        }
    }

    /// The intervals inside [`held`](Self::held) (every interval overlapping
    /// [`range`](Self::range), whole), in address order, each once, with their values.
    /// Borrowed from the lock: no other operation can replace or free a record whose slots
    /// are held (a `swap` consumes the lock, a drop releases it), so no read section is needed.
    pub fn intervals(&self) -> impl Iterator<Item = (Interval, &V)> + '_ {
        let mut last = 0usize;
        self.held.iter().filter_map(move |h| {
            let w = node::untag(h.word);
            if w == 0 || w == last {
                return None;
            }
            // A record's held slots are contiguous: a new word is a new record.
            last = w;
            // SAFETY: a record of a held slot is alive and immutable while the slot is held,
            // and `&self` keeps it held for the borrow.
            let r = unsafe { &*(w as *const node::Record<V>) };
            Some((
                Interval {
                    start: r.start,
                    end: r.end,
                },
                &r.value,
            ))
        })
    }

    /// Widens [`range`](Self::range) to [`held`](Self::held): the next `swap` then replaces the
    /// whole held span, not only the range asked for. No remainder clones are made: every
    /// interval the caller wants in the held span must be passed to `swap` (an interval of
    /// [`intervals`](Self::intervals) passed back with the same bounds and a clone of its value
    /// keeps its place, as a new record: it leaves the tree for the leave mark); every one not
    /// passed is removed; the new intervals may be fewer, more, or others, anywhere inside
    /// `held()`.
    pub fn widen_to_held(&mut self) {
        self.range = self.held();
    }
}

impl<V: Clone + Send + Sync + 'static> Drop for RadixLocked<'_, V> {
    fn drop(&mut self) {
        for h in self.held.drain(..) {
            // SAFETY: held by this lock (its nodes are alive: pinned).
            unsafe { h.release() };
        }
        // The pins are given back through the objects' global counts (no core here).
        reclaim::unpin_without_core(std::mem::take(&mut self.pins));
    }
}

impl<V: Send + 'static> RadixMap<V> {
    /// An empty map whose removed memory is reclaimed through `domain` and whose readers use
    /// guards of it.
    pub fn new(domain: Domain) -> Self {
        Self::with_reclaim(domain, false)
    }

    /// Makes every commit of this map call `mark` on the value of each record it takes out of
    /// the tree: replaced or removed, or trimmed (its parts outside the range kept as new
    /// records with a clone of the value), or passed back unchanged to a `swap` (a new record
    /// then). `mark` runs once per record, under the range's locks, after every allocation of
    /// the operation succeeded and before the store that publishes the record's successors or
    /// its removal: a failed operation marks nothing. So a lock-free reader that got a value
    /// from `query` and checks the mark later under a lock of its own that the editor also
    /// takes (with the fences `mark` and the check agree on) learns that the record left (see
    /// the module doc, "Values that leave"). `mark` must not panic.
    pub fn with_leave_mark(mut self, mark: fn(&V)) -> Self {
        self.leave_mark = Some(mark);
        self
    }

    /// Testing: a map whose Refcache runs epochs as fast as operations go (every operation
    /// flushes its core and helps the others), so that emptied nodes are freed, and revived,
    /// under the noses of concurrent operations.
    #[doc(hidden)]
    pub fn with_eager_reclaim(domain: Domain) -> Self {
        Self::with_reclaim(domain, true)
    }

    fn with_reclaim(domain: Domain, eager: bool) -> Self {
        Self {
            raw: RawRadix::new(),
            reclaimer: Reclaimer::new(domain.clone(), SLOTS, eager),
            readers: ReaderPool::new(domain),
            counts: (0..SLOTS)
                .map(|_| CachePadded::new(AtomicIsize::new(0)))
                .collect(),
            hints: alloc::Hints::new(SLOTS),
            padded_hints: alloc::Hints::new(SLOTS),
            faults: AllocBudget::default(),
            leave_mark: None,
        }
    }
}

impl<V> Drop for RadixMap<V> {
    fn drop(&mut self) {
        // Before the tree frees its nodes (and gives back their counts): Refcache's teardown
        // must not touch them.
        self.reclaimer.set_dropping();
    }
}

impl<V: Clone + Send + Sync + 'static> RadixMap<V> {
    /// Testing hook (issue 10's fault injection): after `n` more allocations (nodes, records,
    /// descriptors) succeed, every further one fails with [`MapError::OutOfMemory`] until
    /// called with `None`. Off by default; not for production use.
    #[doc(hidden)]
    pub fn fail_allocations_after(&self, n: Option<usize>) {
        self.faults.set(n);
    }

    /// Allocates `len` bytes for `value` inside `within`, padded: first fit of a gap `g` in
    /// which `[g - pad, g + len + pad)` is free and lies inside `within`; only `[g, g + len)`
    /// is published, so the new interval is adjacent to no other one when it is allocated
    /// (for `pad > 0`). The pads are not reserved: later operations may fill them. The whole
    /// `[g - pad, g + len + pad)` is locked for the claim, so the pads are free at the
    /// linearization point. Sequentially this is exact first fit; under concurrency, as
    /// `alloc`. `pad == 0` is `alloc`.
    ///
    /// Hints: padded searches start from a per-core hint of their own below which no run of
    /// free pages is long enough for any padded claim (three pages: `radix/alloc.rs`), so the
    /// hint moves past a one- or two-page pad and an arena of regions padded by one page is
    /// not walked again; pads of three pages or more, or gaps left that the next claim does not
    /// fit in, make the search walk them. Frees move the padded hints back like `alloc`'s.
    ///
    /// # Errors
    /// As `alloc`: [`MapError::Unaligned`] (`len` or `pad` not page aligned),
    /// [`MapError::EmptyRange`] (`len == 0` or an empty `within`), [`MapError::OutOfRange`],
    /// [`MapError::NoSpace`] (no such gap; also when `len + 2 * pad` overflows or exceeds
    /// `within`), [`MapError::OutOfMemory`] (nothing changed).
    pub fn alloc_padded(
        &self,
        within: Range<u64>,
        len: u64,
        pad: u64,
        value: V,
    ) -> Result<Interval, MapError> {
        let within = check_alloc(within, len)?;
        if pad % PAGE_SIZE != 0 {
            return Err(MapError::Unaligned(pad));
        }
        let fits = pad
            .checked_mul(2)
            .and_then(|p| p.checked_add(len))
            .is_some_and(|need| need <= within.end - within.start);
        if !fits {
            return Err(MapError::NoSpace { len, within });
        }
        self.alloc_inner(within, len, pad, value)
    }

    /// Frees every record and descriptor removed before the call (and drops the values):
    /// hands the pending batches of every reader slot over, waits for one grace period, frees
    /// them, then waits for the domain's queued callbacks (`Domain::barrier`). Must not be
    /// called inside a read section of the map's domain or while holding a [`RadixLocked`].
    /// Nodes left empty are freed by Refcache two to three epochs after they empty (see
    /// [`RadixMap::collect`]).
    pub fn barrier(&self) {
        let mut all = reclaim::Garbage::default();
        self.readers.for_each_local(|l| {
            let mut g = l.retire.take_all();
            all.records.append(&mut g.records);
            all.descs.append(&mut g.descs);
        });
        let domain = self.readers.domain();
        // The pieces were unlinked before `take_all` took them; this grace period begins after.
        domain.synchronize();
        drop(all);
        domain.barrier();
    }

    /// Drives Refcache epochs until every node that is empty and unused now is removed (and the
    /// ancestors those removals empty), then waits for their memory to be freed: a test and
    /// diagnostics hook (operations drive epochs themselves, every 10 ms). Same hazards as
    /// [`barrier`](Self::barrier).
    #[doc(hidden)]
    pub fn collect(&self) {
        {
            let core = self.reclaimer.core(0);
            // Refcache frees an object at most 8 epochs after its last reference went
            // (`Core::synchronize`); each level above may need as many more.
            self.reclaimer.collect(&core, 8 * geom::LEVELS);
        }
        self.barrier();
    }

    /// Refcache's counters for the nodes: the epoch, node objects alive and freed so far.
    #[cfg(not(loom))]
    #[doc(hidden)]
    pub fn node_stats(&self) -> aspace_sync::RefcacheStats {
        self.reclaimer.stats()
    }

    /// The number of nodes linked in the tree, the root included (quiescent only).
    #[doc(hidden)]
    pub fn node_count(&self) -> usize {
        // SAFETY: quiescent by this method's contract; inside a read section.
        self.readers.with(|_, _, _| unsafe { self.raw.nodes() })
    }

    /// Runs `f` with a new operation inside a pooled read section; `f` gets the stripe. Once
    /// the operation is over (it holds no slot), frees the slot's garbage whose grace period
    /// has ended.
    fn with_op<R>(&self, f: impl FnOnce(Op<'_, V>, usize) -> R) -> R {
        self.readers.with(|_, stripe, local| {
            let Local {
                core,
                retire,
                scratch,
            } = local;
            let core = core.get_or_insert_with(|| self.reclaimer.core(stripe));
            let op = Op::new(
                &self.raw,
                self.readers.domain(),
                self.budget(),
                self.leave_mark,
                self.reclaimer.counter(core),
                retire,
                scratch,
            );
            let r = f(op, stripe);
            retire.collect();
            r
        })
    }

    /// Checks every structural invariant (no lock or descriptor left, back references, every
    /// linked node a Refcache object, each record covered exactly by its slots, `len`).
    /// Meaningful only while no other thread updates the map. (Emptied nodes may still be
    /// linked: Refcache frees them a few epochs later, see [`RadixMap::collect`].)
    ///
    /// # Panics
    /// On a violated invariant.
    #[doc(hidden)]
    pub fn check_invariants(&self) {
        self.readers.with(|_, _, _| {
            // SAFETY: quiescent by this method's contract; inside a read section.
            let records = unsafe { self.raw.check() };
            assert_eq!(records.len(), self.len(), "len");
            let mut last = 0;
            for r in records {
                // SAFETY: reachable records are alive.
                let r = unsafe { &*r };
                assert!(r.start >= last && r.start < r.end, "sorted and disjoint");
                last = r.end;
            }
        });
    }

    fn count(&self, stripe: usize, p: Published) {
        let delta = p.added as isize - p.removed as isize;
        if delta != 0 {
            self.counts[stripe].fetch_add(delta, Ordering::Relaxed);
        }
    }

    /// The operation's allocation budget (the test hook).
    fn budget(&self) -> Option<&AllocBudget> {
        Some(&self.faults)
    }

    /// `alloc` and `alloc_padded` (`pad` bytes, page aligned; `len + 2 * pad` checked to fit
    /// `within`'s length by the caller): claims the first run of free pages in which
    /// `[g - pad, g + len + pad)` fits, locking all of it (so the pads are free at the claim),
    /// and publishes `[g, g + len)` only.
    fn alloc_inner(
        &self,
        within: Interval,
        len: u64,
        pad: u64,
        value: V,
    ) -> Result<Interval, MapError> {
        let (lo, hi, n, pd) = (
            within.start / PAGE_SIZE,
            within.end / PAGE_SIZE,
            len / PAGE_SIZE,
            pad / PAGE_SIZE,
        );
        // The run of free pages claimed: the interval and its pads.
        let need = n + 2 * pd;
        if need > hi - lo {
            return Err(MapError::NoSpace { len, within });
        }
        let hints = if pd == 0 {
            &self.hints
        } else {
            &self.padded_hints
        };
        let mut value = Some(value);
        self.readers.with(|_, stripe, local| {
            let Local {
                core,
                retire,
                scratch,
            } = local;
            let core = core.get_or_insert_with(|| self.reclaimer.core(stripe));
            let (seen, hint) = hints.read(stripe, within);
            let mut from = (hint / PAGE_SIZE).clamp(lo, hi);
            // The first free page, and the first run of free pages long enough for any padded
            // claim, seen by the walks (lower bounds from the hint on).
            let mut first_free: Option<u64> = None;
            let mut first_long: Option<u64> = None;
            let r = loop {
                // SAFETY: inside a read section.
                let found = unsafe { alloc::first_fit(&self.raw, from, hi, need) };
                if first_free.is_none() {
                    first_free = found.first_free;
                }
                if first_long.is_none() {
                    first_long = found.first_long;
                }
                let Some(s) = found.fit else {
                    if from > lo {
                        // The hint may be too high (a wrapped version): search all of it.
                        from = lo;
                        continue;
                    }
                    break Err(MapError::NoSpace { len, within });
                };
                let g = s + pd;
                let mut op = Op::new(
                    &self.raw,
                    self.readers.domain(),
                    self.budget(),
                    self.leave_mark,
                    self.reclaimer.counter(core),
                    retire,
                    scratch,
                );
                // SAFETY: inside a read section; nothing held.
                if let Err(e) = unsafe { op.lock_exact(s, s + need) } {
                    break Err(e);
                }
                if !op.all_free() {
                    // A concurrent map took part of the run: go on from its start.
                    drop(op);
                    from = s;
                    continue;
                }
                let v = value.take().expect("claimed once");
                // SAFETY: inside a read section; `[s, s + need)` is held and free.
                let p = match unsafe { op.replace((s, s + need), g, g + n, [(g, g + n, v)]) } {
                    Ok(p) => p,
                    Err(e) => break Err(e),
                };
                drop(op);
                self.count(stripe, p);
                let to = if pd == 0 {
                    match first_free {
                        Some(f) if f < g => f,
                        _ => g + n,
                    }
                } else {
                    // The padded hint (`radix/alloc.rs`): below it no run of free pages is
                    // long enough for a padded claim. The left pad stays such a run if it is.
                    match first_long {
                        Some(f) if f < s => f,
                        _ if pd >= alloc::MIN_PADDED_RUN => s,
                        _ => g + n,
                    }
                };
                hints.advance(stripe, seen, to * PAGE_SIZE);
                break Ok(Interval {
                    start: g * PAGE_SIZE,
                    end: (g + n) * PAGE_SIZE,
                });
            };
            // Holding no slot now: free the slot's garbage whose grace period has ended.
            retire.collect();
            r
        })
    }

    /// `replace` of the dynamic interval of `[lo, hi)` pages by `new`, in one read section.
    fn update(
        &self,
        iv: Interval,
        locked: Option<(Vec<Held>, Pins, (u64, u64))>,
        new: impl IntoIterator<Item = (u64, u64, V)>,
    ) -> Result<(), MapError> {
        let (lo, hi) = (iv.start / PAGE_SIZE, iv.end / PAGE_SIZE);
        let p = self.with_op(|mut op, stripe| {
            let w = match locked {
                Some((held, pins, w)) => {
                    op.held = held;
                    op.pins = pins;
                    w
                }
                // SAFETY: inside a read section; nothing held.
                None => unsafe { op.lock_dynamic(lo, hi) }?,
            };
            // SAFETY: inside a read section; `w` is held by `op`.
            let p = unsafe { op.replace(w, lo, hi, new) }?;
            drop(op);
            self.count(stripe, p);
            Ok::<_, MapError>(p)
        })?;
        if p.freed {
            self.hints.retreat(iv.start, iv.end);
            // Back to the start of the run of free pages the free joins: below a padded hint
            // such runs are shorter than `MIN_PADDED_RUN` (`radix/alloc.rs`).
            let slack = (alloc::MIN_PADDED_RUN - 1) * PAGE_SIZE;
            self.padded_hints
                .retreat(iv.start.saturating_sub(slack), iv.end);
        }
        Ok(())
    }
}

impl<V: Clone + Send + Sync + 'static> IntervalMap<V> for RadixMap<V> {
    type Ref<'g>
        = &'g V
    where
        Self: 'g;

    fn name(&self) -> &'static str {
        "radix"
    }

    fn domain(&self) -> &Domain {
        self.readers.domain()
    }

    #[inline]
    fn query<'g>(&'g self, addr: u64, guard: &'g Guard<'_>) -> Option<(Interval, &'g V)> {
        check_guard(self.readers.domain(), guard);
        // SAFETY: the caller's guard of this map's domain keeps every record and node reachable
        // now alive for 'g (removed ones are freed after a grace period).
        let r = unsafe { self.raw.find(addr / PAGE_SIZE) }?;
        Some((
            Interval {
                start: r.start,
                end: r.end,
            },
            &r.value,
        ))
    }

    /// Clones the value of an interval that reaches past `range`, once per side kept.
    fn map(&self, range: Range<u64>, value: Option<V>) -> Result<(), MapError> {
        let iv = Interval::try_from(range)?;
        let new = value.map(|v| (iv.start / PAGE_SIZE, iv.end / PAGE_SIZE, v));
        self.update(iv, None, new)
    }

    fn alloc(&self, within: Range<u64>, len: u64, value: V) -> Result<Interval, MapError> {
        let within = check_alloc(within, len)?;
        self.alloc_inner(within, len, 0, value)
    }

    fn visit<'g>(
        &'g self,
        range: Range<u64>,
        guard: &'g Guard<'_>,
        f: &mut dyn FnMut(Interval, &V) -> ControlFlow<()>,
    ) -> Result<(), MapError> {
        check_guard(self.readers.domain(), guard);
        let iv = Interval::try_from(range)?;
        let mut last_end: Option<u64> = None;
        // SAFETY: the caller's guard keeps reachable records alive.
        unsafe {
            self.raw.walk(
                iv.start / PAGE_SIZE,
                iv.end / PAGE_SIZE,
                &mut |_, e, rec| match rec {
                    None => e,
                    Some(r) => {
                        // Only intervals after the last one yielded: in order, never
                        // overlapping, each once (a record seen again after a concurrent
                        // update is skipped).
                        if last_end.is_none_or(|le| r.start >= le) {
                            last_end = Some(r.end);
                            let i = Interval {
                                start: r.start,
                                end: r.end,
                            };
                            if f(i, &r.value).is_break() {
                                return u64::MAX;
                            }
                        }
                        r.pages().1
                    }
                },
            )
        };
        Ok(())
    }

    fn len(&self) -> usize {
        let sum: isize = self.counts.iter().map(|c| c.load(Ordering::Relaxed)).sum();
        sum.max(0) as usize
    }
}

impl<V: Clone + Send + Sync + 'static> IntervalLocking<V> for RadixMap<V> {
    type Locked<'a>
        = RadixLocked<'a, V>
    where
        Self: 'a;

    /// Holds the dynamic interval of `range` (see [`RadixLocked::held`]).
    fn lock(&self, range: Range<u64>) -> Result<RadixLocked<'_, V>, MapError> {
        let iv = Interval::try_from(range)?;
        let (lo, hi) = (iv.start / PAGE_SIZE, iv.end / PAGE_SIZE);
        self.with_op(|mut op, _| {
            // SAFETY: inside a read section; nothing held.
            let w = unsafe { op.lock_dynamic(lo, hi) }?;
            let (held, pins) = op.take_held();
            Ok(RadixLocked {
                map: self,
                range: iv,
                w,
                held,
                pins,
            })
        })
    }

    /// Replaces the contents of the held range ([`RadixLocked::range`]; the whole
    /// [`RadixLocked::held`] after [`RadixLocked::widen_to_held`]) by `new_intervals`; parts of
    /// overlapped intervals outside it are kept, as new records with a `Clone` of the value. An interval
    /// outside the range or overlapping another is refused with `OutOfRange`, a failed
    /// allocation with `OutOfMemory` (nothing changes; the range is released either way).
    fn swap(
        &self,
        mut locked: RadixLocked<'_, V>,
        mut new_intervals: Vec<(Interval, V)>,
    ) -> Result<(), MapError> {
        assert!(
            std::ptr::eq(locked.map, self),
            "swap with a lock of another map"
        );
        let r = locked.range;
        // Unstable: sorts in place (a stable sort allocates before the commit, unbudgeted);
        // equal keys overlap and are refused below.
        new_intervals.sort_unstable_by_key(|(iv, _)| *iv);
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
        let held = std::mem::take(&mut locked.held);
        let pins = std::mem::take(&mut locked.pins);
        let w = locked.w;
        drop(locked);
        let new = new_intervals
            .into_iter()
            .map(|(iv, v)| (iv.start / PAGE_SIZE, iv.end / PAGE_SIZE, v));
        self.update(r, Some((held, pins, w)), new)
    }
}

#[cfg(all(test, not(loom)))]
mod tests;
#[cfg(all(test, not(loom)))]
mod tests_api;

#[cfg(all(test, not(loom)))]
mod tests_review;
