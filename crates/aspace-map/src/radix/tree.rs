//! The raw radix tree: lock-free lookups and walks, and the slot lock protocol (range locking
//! left to right, lazy expansion with lock-bit propagation, publication through a descriptor).
//!
//! Every `unsafe fn` here has the same precondition, written once: *every node, record and
//! descriptor the call can reach stays alive for its duration*: the caller is inside a read
//! section of the domain that removed memory is handed to (the facade), or nothing is freed
//! while it runs (the loom models free only after joining their threads).
//!
//! # Range locking (RadixVM §3.4)
//! [`RawRadix::lock_range`] visits the pages of a range in address order and locks, for each,
//! the value slot on its path: a leaf slot where the tree is expanded, else the folded interior
//! slot ("when locking a region that has not been expanded out to leaf nodes yet, RadixVM
//! acquires locks on the corresponding internal node slots instead"). A slot is locked by one
//! CAS setting its lock bit, after waiting for a holder to clear it; a slot that turned into a
//! child pointer meanwhile (another holder expanded it) is descended into instead. Since every
//! page has one value slot at any time and lockers take them in address order, two operations
//! on overlapping ranges serialize at the leftmost slot they share, and no cycle of waiters can
//! form: a locker only waits for a slot to the right of every slot it holds.
//!
//! # Lazy expansion (§3.2, §3.4)
//! A held folded slot that a range boundary cuts is expanded: a node is allocated whose slots
//! all hold the folded value, *with the lock bit* on every slot that the held range covers
//! ("it propagates the lock bit to every entry in the newly allocated node"), and published by
//! one `Release` store of the child pointer into the parent slot, which clears the parent's
//! lock (the parent is no longer a value slot). The holder now holds the covered child slots;
//! the others start unlocked, released at once (the paper holds them until the release; they
//! cover no page of the range). A lookup that races the expansion reads the parent's old word
//! (the folded value) or the complete node, whose every slot holds the same value: never a
//! half-built node (loom model `expansion_vs_lookup`). A locker waiting on the parent sees the
//! child pointer, descends, and waits on the inherited lock bits of the slots it needs.
//!
//! Folding: a range operation writes one value into every held slot, and held slots are as high
//! as the tree allows: an operation whose range covers a whole folded slot's pages, whose child
//! was never allocated, writes the value into that one interior slot (§3.4: "if the mapping
//! covers an entire radix tree node, and the child nodes have not been allocated yet, the radix
//! tree collapses the mapping metadata into a single slot in the interior of the tree").
//! Expanded nodes are also folded back (§3.2: "any node that would consist entirely of
//! identical values is folded into a single value stored in the parent node"), at publication:
//! an operation that holds every slot of a node and gives them all one record stores the
//! record into the parent's slot instead, once its commit is done ([`RawRadix::fold`]):
//! 1. the node's used-slot counts go back to Refcache (the parent's count for the slot stays:
//!    its child pointer becomes a record), and the node's `folded` flag is set (Release);
//! 2. every slot of the node gets the record *with the lock bit*, for ever: a lookup that
//!    entered the node before step 3 still resolves its page to the record (loom model
//!    `fold_vs_lookup`), and a locker that waits on one of those slots sees the flag (Acquire)
//!    and goes back to the root, where it finds the parent's slot (`fold_vs_locker`);
//! 3. the parent's slot (a child pointer, which only the node's folder or its Refcache free
//!    writes: the folder holds every slot of the node, the free cannot run while the folder
//!    pins it) gets the record, unlocked.
//!
//! The node is then unreachable; Refcache frees it once the folder's pin and any waiter's are
//! gone, and its memory goes to the RCU domain (`reclaim.rs`: a folded node's free leaves the
//! parent alone). One level per operation: a parent that becomes uniform by a fold is folded by
//! a later operation that holds all of its slots. Nodes that become empty are removed by
//! Refcache (`reclaim.rs`), not folded.
//!
//! # Publication
//! [`RawRadix::publish`]: see `node.rs` (descriptors). A single changed slot is published by its
//! own store, which is atomic; several by the descriptor's commit.

use super::geom::{index, slot_start, span, FANOUT, ROOT_LEVEL};
use super::node::{is_value, record_of, untag, Desc, Node, Record, DESC, LOCK, NODE};
use super::reclaim::{forget, mark_folded, reserve_pins, Counter, Pins};
use crate::contract::MapError;
use crate::fault::{try_reserve, AllocBudget};
use crate::sync::{AtomicUsize, Ordering};
use std::marker::PhantomData;

/// Mutations of the lock protocol that the loom models must catch (`loom_tests.rs`). Only
/// under `--cfg loom`; every other build has none.
#[cfg(loom)]
#[derive(Clone, Copy, PartialEq, Eq, Debug, Default)]
#[allow(dead_code)] // the mutants are made by the models only
pub(crate) enum Mutant {
    /// The real protocol.
    #[default]
    None,
    /// An expansion does not propagate the lock bit into the new node.
    NoPropagate,
    /// An expansion publishes the child pointer before it fills the node's slots.
    PublishEarly,
    /// The lock CAS does not wait for a held slot (a test-and-set that ignores the bit).
    IgnoreLock,
    /// Ranges that start at an odd page are locked right to left (one page's value slot at a
    /// time), so that two lockers can take overlapping ranges in opposite orders.
    MixedOrder,
    /// A publication of several slots stores each slot's new record on its own (no
    /// descriptor, no single commit).
    NoDescriptor,
    /// A fold leaves the folded node's slots empty (instead of the record, locked), as if the
    /// node were discarded at once.
    FoldClears,
    /// A fold releases the folded node's slots (the record, unlocked), so lockers that waited
    /// on them take them.
    FoldUnlocks,
}

/// Yields while waiting for a lock holder (loom needs to see the yield to explore progress).
#[inline]
pub(crate) fn spin_wait() {
    #[cfg(loom)]
    loom::thread::yield_now();
    #[cfg(not(loom))]
    std::thread::yield_now();
}

/// A held value slot: its word at lock time (without the lock bit), where it is, and what it
/// covers (`[start, start + span(level))` pages).
#[derive(Clone, Copy, Debug)]
pub(crate) struct Held {
    pub(crate) slot: *const AtomicUsize,
    pub(crate) node: *const Node,
    pub(crate) level: usize,
    pub(crate) start: u64,
    pub(crate) word: usize,
}

impl Held {
    /// One past the last page covered.
    #[inline]
    pub(crate) fn end(&self) -> u64 {
        self.start + span(self.level)
    }

    /// Releases the slot unchanged.
    ///
    /// # Safety
    /// The slot is held by the caller (and so alive).
    pub(crate) unsafe fn release(&self) {
        // Release: the holder's reads and writes happen before the next holder's (which locks
        // with an Acquire CAS).
        // SAFETY: the caller's contract.
        unsafe { (*self.slot).store(self.word, Ordering::Release) };
    }
}

/// What [`RawRadix::lock_slot`] found.
enum Took {
    /// The slot is now held (and its node pinned); its word before (no lock bit).
    Locked(usize),
    /// The slot points to this child node.
    Child(*const Node),
    /// The slot's node was freed by Refcache (its parent's slot is being cleared), or folded
    /// into its parent's slot: start again from the root.
    Dead,
}

/// The raw tree (see the module doc).
pub(crate) struct RawRadix<V> {
    pub(crate) root: *mut Node,
    #[cfg(loom)]
    pub(crate) mutant: Mutant,
    /// Folded nodes, freed with the tree (loom only: no Refcache to free them).
    #[cfg(loom)]
    orphans: std::sync::Mutex<Vec<usize>>,
    _values: PhantomData<V>,
}

// SAFETY: all shared mutation goes through atomics; records hold `V`s that readers share.
unsafe impl<V: Send + Sync> Sync for RawRadix<V> {}
// SAFETY: the tree owns its nodes and records.
unsafe impl<V: Send> Send for RawRadix<V> {}

impl<V> RawRadix<V> {
    /// An empty tree: a root whose slots are all free.
    pub(crate) fn new() -> Self {
        Self {
            root: Node::alloc(std::ptr::null(), 0, ROOT_LEVEL, 0, |_| 0),
            #[cfg(loom)]
            mutant: Mutant::None,
            #[cfg(loom)]
            orphans: std::sync::Mutex::new(Vec::new()),
            _values: PhantomData,
        }
    }

    #[inline]
    fn mutant(&self, _m: &'static str) -> bool {
        #[cfg(loom)]
        {
            let name = match self.mutant {
                Mutant::None => "",
                Mutant::NoPropagate => "no_propagate",
                Mutant::PublishEarly => "publish_early",
                Mutant::IgnoreLock => "ignore_lock",
                Mutant::MixedOrder => "mixed_order",
                Mutant::NoDescriptor => "no_descriptor",
                Mutant::FoldClears => "fold_clears",
                Mutant::FoldUnlocks => "fold_unlocks",
            };
            name == _m
        }
        #[cfg(not(loom))]
        false
    }

    /// The record covering `page`, lock-free: one Acquire load per level, no write.
    ///
    /// # Safety
    /// See the module doc.
    #[inline]
    pub(crate) unsafe fn find<'a>(&self, page: u64) -> Option<&'a Record<V>> {
        let mut node = self.root as *const Node;
        let mut level = ROOT_LEVEL;
        loop {
            // SAFETY: reachable nodes are alive (the module's precondition).
            let w = unsafe { (*node).load(index(page, level)) };
            if w & NODE != 0 {
                node = untag(w) as *const Node;
                level -= 1;
                continue;
            }
            // SAFETY: as above; a value or descriptor word.
            return unsafe { record_of(w, page) };
        }
    }

    /// Calls `f(slot_start, slot_end, record)` on every value slot overlapping `[from, to)`
    /// pages, in address order, lock-free (descriptors resolved at the slot's first page). `f` returns the next page of interest (at least the slot's end to
    /// go on, `to` or beyond to stop): slots ending at or before it are skipped.
    ///
    /// # Safety
    /// See the module doc.
    pub(crate) unsafe fn walk<'a>(
        &self,
        from: u64,
        to: u64,
        f: &mut dyn FnMut(u64, u64, Option<&'a Record<V>>) -> u64,
    ) {
        let mut cursor = from;
        // SAFETY: forwarded.
        unsafe { self.walk_node(self.root, ROOT_LEVEL, 0, &mut cursor, to, f) };
    }

    /// [`walk`](Self::walk) inside one node.
    unsafe fn walk_node<'a>(
        &self,
        node: *const Node,
        level: usize,
        nstart: u64,
        cursor: &mut u64,
        to: u64,
        f: &mut dyn FnMut(u64, u64, Option<&'a Record<V>>) -> u64,
    ) {
        let sp = span(level);
        let mut i = ((*cursor - nstart) / sp) as usize;
        while i < FANOUT && *cursor < to {
            let s = nstart + i as u64 * sp;
            if s >= to {
                return;
            }
            // SAFETY: reachable nodes are alive.
            let w = unsafe { (*node).load(i) };
            if w & NODE != 0 {
                // SAFETY: forwarded.
                unsafe { self.walk_node(untag(w) as *const Node, level - 1, s, cursor, to, f) };
            } else {
                let page = (*cursor).max(s);
                // SAFETY: a value or descriptor word of a live slot.
                let rec = unsafe { record_of::<V>(w, page) };
                let next = f(s, s + sp, rec);
                *cursor = (*cursor).max(next).max(s + sp);
            }
            let past = *cursor - nstart;
            i = (i + 1).max(if past / sp >= FANOUT as u64 {
                FANOUT
            } else {
                (past / sp) as usize
            });
        }
    }

    /// Locks the value slots covering `[lo, hi)` pages in address order (see the module doc),
    /// appending them to `held` (they may reach past the range; [`refine`](Self::refine)
    /// expands those).
    ///
    /// Every node it locks a slot of is pinned into `pins` (Refcache traversal references).
    /// Before each slot it makes room in `held` and `pins` (`fault::try_reserve`): on error the
    /// slots locked so far are in `held`, which the caller releases.
    ///
    /// # Safety
    /// See the module doc. The caller holds no slot at or after `lo`.
    pub(crate) unsafe fn lock_range(
        &self,
        lo: u64,
        hi: u64,
        held: &mut Vec<Held>,
        counts: &Counter<'_>,
        pins: &mut Pins,
        budget: Option<&AllocBudget>,
    ) -> Result<(), MapError> {
        if self.mutant("mixed_order") && lo % 2 == 1 {
            // Mutation: right to left, one page at a time (each page's value slot).
            let mut pos = hi;
            while pos > lo {
                let page = pos - 1;
                // SAFETY: forwarded.
                let h = unsafe { self.lock_one(page, counts, pins) };
                pos = h.start.min(page);
                held.push(h);
            }
            held.sort_by_key(|h| h.start);
            return Ok(());
        }
        let mut pos = lo;
        'descend: while pos < hi {
            let mut node = self.root as *const Node;
            let mut level = ROOT_LEVEL;
            let mut i = index(pos, level);
            loop {
                // Room for the slot and its node's pin before the slot is taken.
                try_reserve(held, 1, budget)?;
                reserve_pins(pins, 1, budget)?;
                // SAFETY: reachable nodes are alive.
                let slot = unsafe { &(*node).slots[i] };
                // SAFETY: inside a read section.
                match unsafe { self.lock_slot(slot, node, counts, pins) } {
                    Took::Child(c) => {
                        node = c;
                        level -= 1;
                        i = index(pos, level);
                    }
                    Took::Dead => {
                        spin_wait();
                        continue 'descend;
                    }
                    Took::Locked(word) => {
                        let start = slot_start(pos, level);
                        held.push(Held {
                            slot,
                            node,
                            level,
                            start,
                            word,
                        });
                        pos = start + span(level);
                        if pos >= hi {
                            return Ok(());
                        }
                        i += 1;
                        if i == FANOUT {
                            continue 'descend;
                        }
                    }
                }
            }
        }
        Ok(())
    }

    /// Locks the value slot covering `page` (the mutation `MixedOrder` only).
    unsafe fn lock_one(&self, page: u64, counts: &Counter<'_>, pins: &mut Pins) -> Held {
        let mut node = self.root as *const Node;
        let mut level = ROOT_LEVEL;
        loop {
            // SAFETY: reachable nodes are alive.
            let slot = unsafe { &(*node).slots[index(page, level)] };
            // SAFETY: inside a read section.
            match unsafe { self.lock_slot(slot, node, counts, pins) } {
                Took::Child(c) => {
                    node = c;
                    level -= 1;
                }
                Took::Dead => {
                    node = self.root;
                    level = ROOT_LEVEL;
                }
                Took::Locked(word) => {
                    return Held {
                        slot,
                        node,
                        level,
                        start: slot_start(page, level),
                        word,
                    }
                }
            }
        }
    }

    /// Takes the lock bit of `slot` (a slot of `node`), waiting for a holder; or reports a
    /// child. Before it locks, it pins `node` (a Refcache traversal reference: `reclaim.rs`),
    /// so that a node is never freed while a slot of it is held; a node that Refcache has
    /// freed already (empty, unreferenced; its parent's slot is being cleared) is reported
    /// `Dead`. Nodes passed through on the way down are not pinned: they cannot be freed while
    /// a pinned node below them is linked (each child pointer is one of its node's uses).
    ///
    /// # Safety
    /// Inside a read section (`node`, and a child read from the slot, stay alive).
    unsafe fn lock_slot(
        &self,
        slot: &AtomicUsize,
        node: *const Node,
        counts: &Counter<'_>,
        pins: &mut Pins,
    ) -> Took {
        loop {
            // Acquire: a child pointer's node must be initialised for us (pairs with the
            // expansion's Release store).
            let w = slot.load(Ordering::Acquire);
            if w & NODE != 0 {
                return Took::Child(untag(w) as *const Node);
            }
            if w & LOCK != 0 && !self.mutant("ignore_lock") {
                // A folded node's slots stay locked for ever: its pages are its parent slot's
                // now. Acquire: pairs with the folder's Release store of the flag (the lock
                // word we read was stored after it).
                // SAFETY: `node` was reached inside the caller's read section: alive.
                if unsafe { (*node).folded.load(Ordering::Acquire) } != 0 {
                    return Took::Dead;
                }
                spin_wait();
                continue;
            }
            // SAFETY: `node` was reached inside the caller's read section.
            if !unsafe { counts.pin(node, pins) } {
                return Took::Dead;
            }
            let w = w & !LOCK;
            // Acquire: the previous holder's writes (its Release store of the slot) happen
            // before ours.
            if slot
                .compare_exchange_weak(w, w | LOCK, Ordering::Acquire, Ordering::Relaxed)
                .is_ok()
                || (self.mutant("ignore_lock") && {
                    slot.store(w | LOCK, Ordering::Relaxed);
                    true
                })
            {
                return Took::Locked(w);
            }
        }
    }

    /// Expands held slots so that no held slot has a page of `cuts` strictly inside it, and
    /// releases the parts outside `[lo, hi)` (every held slot must overlap it). `cuts` must
    /// include `lo` and `hi`. New nodes are pinned into `pins`. `todo` is a scratch buffer
    /// (the work list; empty on return).
    ///
    /// On error (an allocation failed: a node, its Refcache object, or room in a buffer) the
    /// slots already refined are in `held`, which the caller releases; the rest are released
    /// here, unchanged (expansions published before the error stay: they change no page).
    ///
    /// # Safety
    /// See the module doc; `held` are held by the caller, sorted and contiguous.
    #[allow(clippy::too_many_arguments)]
    pub(crate) unsafe fn refine(
        &self,
        held: &mut Vec<Held>,
        todo: &mut Vec<Held>,
        lo: u64,
        hi: u64,
        cuts: &[u64],
        budget: Option<&AllocBudget>,
        counts: &Counter<'_>,
        pins: &mut Pins,
    ) -> Result<(), MapError> {
        let cut_inside = |h: &Held| cuts.iter().any(|&c| h.start < c && c < h.end());
        if !held.iter().any(cut_inside) {
            return Ok(());
        }
        // The held slots become the work list (a stack: reversed), `held` refills in order.
        todo.clear();
        std::mem::swap(held, todo);
        todo.reverse();
        while let Some(h) = todo.pop() {
            let r = if cut_inside(&h) {
                // SAFETY: `h` is held by us (the caller's contract).
                unsafe { self.expand(&h, lo, hi, budget, counts, pins, todo) }
            } else {
                try_reserve(held, 1, budget).map(|()| held.push(h))
            };
            if let Err(e) = r {
                // `h` is still held, unchanged (`expand` fails before it publishes).
                for t in std::iter::once(h).chain(todo.drain(..)) {
                    // SAFETY: held by us.
                    unsafe { t.release() };
                }
                return Err(e);
            }
        }
        Ok(())
    }

    /// Expands the held folded slot `h` (level >= 1): a node whose slots all hold `h`'s value,
    /// locked where they overlap `[lo, hi)`, published into `h`'s slot (pinned by its
    /// creator: Refcache counts its used slots). Pushes the held children onto `out` in
    /// reverse order (a work stack: the first child on top).
    ///
    /// Every fallible step (room in `out` and the pins, the node, its Refcache object) comes
    /// before the publishing store: on error nothing changed and `h` is still held.
    ///
    /// # Safety
    /// See the module doc; `h` is held by the caller.
    #[allow(clippy::too_many_arguments)]
    unsafe fn expand(
        &self,
        h: &Held,
        lo: u64,
        hi: u64,
        budget: Option<&AllocBudget>,
        counts: &Counter<'_>,
        pins: &mut Pins,
        out: &mut Vec<Held>,
    ) -> Result<(), MapError> {
        debug_assert!(h.level >= 1 && is_value(h.word) && h.word & LOCK == 0);
        let level = h.level - 1;
        let sp = span(level);
        let covered = |i: usize| {
            let s = h.start + i as u64 * sp;
            s < hi && lo < s + sp
        };
        let propagate = !self.mutant("no_propagate");
        let word = |i: usize| {
            if covered(i) && propagate {
                h.word | LOCK
            } else {
                h.word
            }
        };
        try_reserve(out, (0..FANOUT).filter(|&i| covered(i)).count(), budget)?;
        reserve_pins(pins, 1, budget)?;
        // SAFETY: `h.node` is alive (it holds a slot we hold).
        let index_in_parent = ((h.start - unsafe { (*h.node).start }) / span(h.level)) as usize;
        let newly_used = untag(h.word) == 0;
        let used = if newly_used { 0 } else { FANOUT };
        let early = self.mutant("publish_early");
        let n = Node::try_alloc(
            h.node,
            index_in_parent,
            level,
            h.start,
            |i| if early { 0 } else { word(i) },
            budget,
        )?;
        // The node's uses (its slots all hold the folded value) and its creator's pin.
        // SAFETY: fresh, unpublished; room in `pins` reserved.
        if let Err(e) = unsafe { counts.born(n, used, pins, budget) } {
            // SAFETY: fresh, never published, no Refcache identity: ours to free.
            unsafe { Node::dealloc(n) };
            return Err(e);
        }
        if newly_used {
            // A free slot becomes a child pointer: one more use of the parent (pinned, or
            // the root).
            // SAFETY: alive (we hold one of its slots).
            unsafe { counts.adjust(h.node, 1, pins) };
        }
        if early {
            // Mutation: the child pointer is published before the node's slots are filled.
            // SAFETY: as below.
            unsafe { (*h.slot).store(n as usize | NODE, Ordering::Release) };
            for i in 0..FANOUT {
                // SAFETY: the node is ours to fill.
                unsafe { (*n).slots[i].store(word(i), Ordering::Relaxed) };
            }
        } else {
            // Release: the node's slots (all written by `try_alloc`) are visible to whoever
            // loads the pointer with Acquire: a lookup never sees a half-built node.
            // SAFETY: `h.slot` is held by us; this store also clears its lock bit.
            unsafe { (*h.slot).store(n as usize | NODE, Ordering::Release) };
        }
        for i in (0..FANOUT).rev().filter(|&i| covered(i)) {
            out.push(Held {
                // SAFETY: the node was just allocated and is alive.
                slot: unsafe { &(*n).slots[i] },
                node: n,
                level,
                start: h.start + i as u64 * sp,
                word: h.word,
            });
        }
        Ok(())
    }

    /// Publishes the held range's new contents: `new(h)` is the new value word of each held
    /// slot (a record pointer or 0). Slots whose word changes are pointed at a descriptor of
    /// `old`/`new` records and committed at once when there are several (one store when there
    /// is one); then every held slot is released with its new word. Returns the descriptor to
    /// retire (if one was made). Maintains the nodes' Refcache counts of used slots.
    ///
    /// The only fallible step (the descriptor's allocation) comes before any store: on error
    /// nothing is published and every slot is still held. `mark` (the map's leave mark) is then
    /// called on the value of every `old` record, after that step and before the first store:
    /// every old record leaves at this publication (the new words point to `new` records only).
    ///
    /// # Safety
    /// See the module doc; `held` are held by the caller; the new records are initialised and
    /// unpublished; `old`/`new` are sorted and cover every changed slot's old and new words.
    #[allow(clippy::too_many_arguments)]
    pub(crate) unsafe fn publish(
        &self,
        held: &[Held],
        new_word: &dyn Fn(&Held) -> usize,
        old: &[*const Record<V>],
        new: &[*const Record<V>],
        budget: Option<&AllocBudget>,
        mark: Option<fn(&V)>,
        counts: &Counter<'_>,
        pins: &Pins,
    ) -> Result<Option<*mut Desc<V>>, MapError> {
        let changed = held.iter().filter(|h| new_word(h) != h.word).count();
        let d = if changed > 1 && !self.mutant("no_descriptor") {
            Some(Desc::try_alloc(old, new, budget)?)
        } else {
            None
        };
        // Nothing can fail from here on: the records leaving are marked before the first store
        // that publishes their successors (or their removal).
        if let Some(mark) = mark {
            for &r in old {
                // SAFETY: an old record of the held range: alive and stable (we hold its slots).
                mark(unsafe { &(*r).value });
            }
        }
        let mut desc = None;
        if let Some(d) = d {
            for h in held.iter().filter(|h| new_word(h) != h.word) {
                // Release: the descriptor and the new records are initialised before a lookup
                // can reach them through this slot.
                // SAFETY: held by us.
                unsafe { (*h.slot).store(d as usize | DESC | LOCK, Ordering::Release) };
            }
            // The linearization point. Release: the descriptor stores above (and the records)
            // happen before any lookup that reads `committed` as set.
            // SAFETY: `d` is ours and alive.
            unsafe { (*d).committed.store(1, Ordering::Release) };
            desc = Some(d);
        }
        // Each node's held slots are one contiguous run of `held` (address order).
        let mut i = 0;
        while i < held.len() {
            let node = held[i].node;
            let run = held[i..].iter().take_while(|h| h.node == node).count();
            let group = &held[i..i + run];
            i += run;
            // SAFETY: the node is alive (we hold its slots).
            if let Some(w) = unsafe { fold_word(group, new_word) } {
                // SAFETY: every slot of `node` is held by us and gets `w` (`fold_word`).
                unsafe { self.fold(node, group, w, counts, pins) };
                continue;
            }
            for h in group {
                let nw = new_word(h);
                let delta = (nw != 0) as isize - (untag(h.word) != 0) as isize;
                // The node's uses (Refcache; it is pinned by us, or the root).
                // SAFETY: the slot's node is alive (we hold one of its slots); an emptied slot
                // held one count.
                unsafe { counts.adjust(h.node, delta, pins) };
                // Release: the new record is initialised before it is reachable; and the
                // holder's critical section happens before the next holder's.
                // SAFETY: held by us; this store releases it.
                unsafe { (*h.slot).store(nw, Ordering::Release) };
            }
        }
        Ok(desc)
    }

    /// Folds `node` (not the root; every slot held by us, in `group`, getting the record word
    /// `w`) into its parent's slot, after the commit: see the module doc, "Folding".
    ///
    /// # Safety
    /// See the module doc; the caller holds every slot of `node` and has committed `w` (the
    /// descriptor's commit, or nothing else can observe the change before this call).
    unsafe fn fold(
        &self,
        node: *const Node,
        group: &[Held],
        w: usize,
        counts: &Counter<'_>,
        pins: &Pins,
    ) {
        // SAFETY: alive (we hold its slots); its place is immutable.
        let n = unsafe { &*node };
        // The node's used-slot counts go back: it leaves the tree (our pin keeps it until the
        // operation ends; Refcache then frees it, `reclaim.rs`). The parent's count for the
        // slot is kept: a child pointer there becomes a record.
        let used = group.iter().filter(|h| untag(h.word) != 0).count() as isize;
        // SAFETY: pinned by us; each used slot held one count.
        unsafe { counts.adjust(node, -used, pins) };
        // Release: a locker that reads one of the words stored below (Acquire) sees the flag.
        n.folded.store(1, Ordering::Release);
        // SAFETY: pinned by us; not the root (`fold_word`).
        unsafe { mark_folded(n) };
        let stay = if self.mutant("fold_clears") {
            LOCK
        } else if self.mutant("fold_unlocks") {
            w
        } else {
            // The record, locked for ever: a lookup still inside the node resolves it; a locker
            // waiting on it sees the flag and goes back to the root.
            w | LOCK
        };
        for h in group {
            // Release: as for any publication (the record is initialised).
            // SAFETY: held by us; the node stays allocated until a grace period after
            // Refcache frees it.
            unsafe { (*h.slot).store(stay, Ordering::Release) };
        }
        // The parent's slot (a child pointer: written only by the node's folder, which holds
        // all of its slots, or by its Refcache free, which cannot run while we pin it) gets
        // the record, unlocked. Release: the record is initialised before it is reachable.
        // SAFETY: the parent is alive while the node is linked (it is, until this store).
        unsafe { (*n.parent).slots[n.index].store(w, Ordering::Release) };
        #[cfg(loom)]
        self.orphans.lock().unwrap().push(node as usize);
    }

    /// Every structural invariant, quiescent only: no tag left but node pointers, back
    /// references right, every linked node a Refcache object, every record exactly covered by
    /// the slots pointing to it. Returns the records in address order. (Empty nodes may be
    /// linked: Refcache frees them two to three epochs after they empty.)
    ///
    /// # Safety
    /// No other thread runs an operation.
    pub(crate) unsafe fn check(&self) -> Vec<*const Record<V>> {
        let mut runs: Vec<(u64, u64, usize)> = Vec::new();
        // SAFETY: quiescent.
        unsafe { self.check_node(self.root, &mut runs) };
        let mut out = Vec::new();
        let mut i = 0;
        while i < runs.len() {
            let (s, mut e, w) = runs[i];
            i += 1;
            while i < runs.len() && runs[i].2 == w && runs[i].0 == e {
                e = runs[i].1;
                i += 1;
            }
            if w == 0 {
                continue;
            }
            let r = w as *const Record<V>;
            // SAFETY: quiescent: every record a slot points to is alive.
            let (rs, re) = unsafe { (*r).pages() };
            assert_eq!(
                (s, e),
                (rs, re),
                "a record's slots cover exactly its interval"
            );
            assert!(rs < re);
            assert!(out.last() != Some(&r), "a record's slots are contiguous");
            out.push(r);
        }
        out
    }

    unsafe fn check_node(&self, node: *const Node, runs: &mut Vec<(u64, u64, usize)>) {
        // SAFETY: quiescent; reachable nodes are alive.
        let n = unsafe { &*node };
        let sp = span(n.level);
        assert!(
            n.parent.is_null() || !n.rc.obj.is_null() || cfg!(loom),
            "a linked node without a Refcache object"
        );
        for i in 0..FANOUT {
            let w = n.slots[i].load(Ordering::Relaxed);
            let s = n.start + i as u64 * sp;
            assert_eq!(w & (LOCK | DESC), 0, "a lock or descriptor left at rest");
            if w & NODE != 0 {
                assert!(n.level > 0, "a child below a leaf");
                let c = untag(w) as *const Node;
                // SAFETY: as above.
                let child = unsafe { &*c };
                assert_eq!(child.parent, node, "parent back reference");
                assert_eq!(child.index, i, "index back reference");
                assert_eq!(child.level, n.level - 1, "level");
                assert_eq!(child.start, s, "start");
                // SAFETY: as above.
                unsafe { self.check_node(c, runs) };
            } else {
                match runs.last_mut() {
                    Some(last) if last.2 == w && last.1 == s => last.1 = s + sp,
                    _ => runs.push((s, s + sp, w)),
                }
            }
        }
    }

    /// The number of nodes linked in the tree, the root included (quiescent only).
    ///
    /// # Safety
    /// No other thread runs an operation.
    pub(crate) unsafe fn nodes(&self) -> usize {
        fn count(n: *const Node) -> usize {
            // SAFETY: the caller's contract.
            let node = unsafe { &*n };
            1 + (0..FANOUT)
                .map(|i| node.slots[i].load(Ordering::Relaxed))
                .filter(|w| w & NODE != 0)
                .map(|w| count(untag(w) as *const Node))
                .sum::<usize>()
        }
        count(self.root)
    }
}

/// The record word every slot of `group`'s node gets, if `group` is all of a node's slots
/// (not the root's) and they all get one record: the node can be folded (`RawRadix::fold`).
///
/// # Safety
/// `group` are held slots of one live node, in order.
unsafe fn fold_word(group: &[Held], new_word: &dyn Fn(&Held) -> usize) -> Option<usize> {
    let first = group.first()?;
    // SAFETY: the caller's contract.
    let parent = unsafe { (*first.node).parent };
    if group.len() != FANOUT || parent.is_null() {
        return None;
    }
    let w = new_word(first);
    (w != 0 && group.iter().all(|h| new_word(h) == w)).then_some(w)
}

impl<V> Drop for RawRadix<V> {
    /// Frees every record and node still linked. The map has marked its Refcache objects as
    /// dropping, so the counts given back here free nothing else (`reclaim::forget`).
    fn drop(&mut self) {
        // Depth first, in address order, so that a record's slots are met consecutively.
        fn visit(n: *mut Node, order: &mut Vec<usize>, nodes: &mut Vec<*mut Node>) {
            // SAFETY: the tree is exclusively ours (drop).
            let node = unsafe { &*n };
            let mut used = 0;
            for i in 0..FANOUT {
                let w = node.slots[i].load(Ordering::Relaxed);
                debug_assert_eq!(w & (LOCK | DESC), 0);
                if w != 0 {
                    used += 1;
                }
                if w & NODE != 0 {
                    let c = untag(w) as *mut Node;
                    nodes.push(c);
                    visit(c, order, nodes);
                } else {
                    order.push(w);
                }
            }
            if !node.parent.is_null() {
                // SAFETY: the map is dropping; the node's used slots held `used` counts.
                unsafe { forget(node, used) };
            }
        }
        let mut order = Vec::new();
        let mut nodes = vec![self.root];
        visit(self.root, &mut order, &mut nodes);
        // Every record is pointed to by a contiguous run of slots: free it at the first.
        let mut last = 0usize;
        for w in order {
            debug_assert!(is_value(w));
            let p = untag(w);
            if p != 0 && p != last {
                // SAFETY: each record is freed once (its run of slots is contiguous), nothing
                // else reaches it.
                unsafe { Record::dealloc(p as *mut Record<V>) };
            }
            last = p;
        }
        for n in nodes {
            // SAFETY: every node is freed once; unreachable now.
            unsafe { Node::dealloc(n) };
        }
        #[cfg(loom)]
        for n in self.orphans.get_mut().unwrap().drain(..) {
            // SAFETY: folded (unlinked) nodes, each listed once.
            unsafe { Node::dealloc(n as *mut Node) };
        }
    }
}
