//! Radix nodes, slot words, interval records and update descriptors: the tree's memory.
//!
//! # Slot words
//! Every slot, interior or leaf, is one atomic word (RadixVM §3.4: "each slot in the radix tree
//! (in both interior and leaf nodes) reserves one bit" for locking):
//!
//! | word                         | meaning |
//! |------------------------------|---------|
//! | `record | LOCK?`             | a *value slot*: every page the slot covers maps to `record` (null: free). A value slot above level 0 is a *folded* slot (§3.2: "any node that would consist entirely of identical values is folded into a single value stored in the parent node"). `LOCK`: held by a range operation. |
//! | `node | NODE`                | an expanded slot: the child node covers the slot's pages. Never locked: lock bits live on value slots only, so every page has exactly one lockable slot at any time (the value slot on its path). |
//! | `desc | DESC | LOCK`         | a held value slot whose operation is publishing: the page's record is the one `desc` gives (old before its commit, new after). |
//!
//! Records, nodes and descriptors are at least 8-byte aligned, so the three tag bits are free.
//!
//! # Records
//! A [`Record`] is one interval `[start, end)` (addresses) and its value, immutable once
//! published. Every slot covering a page of the interval points to it (folded slots cover many
//! pages with one word). This is the "mapping metadata" of the paper, with one departure forced
//! by the contract: RadixVM keeps a copy per page and never needs to know where a mapping ends,
//! but `query` must report the whole interval, so the copies share one immutable record that
//! carries its bounds. A split re-points the remainders' slots to new records (with cloned
//! values) under the locks of the whole old interval (see `tree.rs`, the dynamic interval).
//!
//! # Descriptors
//! A range operation changes many slots but must look atomic to lock-free lookups (the
//! contract's linearizability; the conformance suite's two-point query test). It first points
//! every slot it changes at one [`Desc`] holding the old and the new records of the range, then
//! commits with one `Release` store of `Desc::committed`, then stores the new records into the
//! slots (which also unlocks them). A lookup that meets a descriptor resolves its page in the
//! old or the new list depending on `committed`.
//!
//! This is the crate's one module that allocates and frees radix memory; every allocation an
//! operation makes before its commit is fallible and takes one unit of the map's `AllocBudget`
//! (so do the operation's other allocations before its commit: a node's Refcache object,
//! `reclaim.rs`, and the growth of its buffers, `fault::try_reserve`).

use crate::contract::{MapError, PAGE_SIZE};
use crate::fault::AllocBudget;
use crate::sync::{AtomicUsize, Ordering};
use std::alloc::{alloc, dealloc, Layout};
use std::ptr;

use super::geom::FANOUT;
use super::node_rc::NodeRc;

/// Lock bit of a value slot.
pub(crate) const LOCK: usize = 1;
/// The word points to a child node.
pub(crate) const NODE: usize = 2;
/// The word points to a descriptor (always with `LOCK`).
pub(crate) const DESC: usize = 4;
/// Every tag bit.
pub(crate) const TAGS: usize = LOCK | NODE | DESC;

/// The pointer part of a word.
#[inline]
pub(crate) fn untag(w: usize) -> usize {
    w & !TAGS
}

/// Whether `w` is a value slot (free or mapped, locked or not; not a descriptor).
#[inline]
pub(crate) fn is_value(w: usize) -> bool {
    w & (NODE | DESC) == 0
}

/// One radix node: `FANOUT` slots and its place in the tree.
///
/// The place (`parent`, `index`, `level`, `start`) is fixed at creation: a node is only ever
/// linked from that one slot, and its parent outlives it while it is linked (a node with a
/// child is not empty, so it is not removed). A folded node is unlinked at once and never
/// reaches its parent again.
#[repr(C)]
pub(crate) struct Node {
    pub(crate) slots: [AtomicUsize; FANOUT],
    /// The node's Refcache object and weak reference (`node_rc.rs`, counted by `reclaim.rs`); none for the root.
    pub(crate) rc: NodeRc<Node>,
    /// The parent node (null for the root).
    pub(crate) parent: *const Node,
    /// This node's slot in the parent.
    pub(crate) index: usize,
    /// This node's level (its slots' level).
    pub(crate) level: usize,
    /// First page this node covers.
    pub(crate) start: u64,
    /// Set (1) when the node was folded into its parent's slot (`tree.rs`, "Folding"): its
    /// slots then stay locked for ever, and lockers waiting on them go back to the root.
    pub(crate) folded: AtomicUsize,
}

impl Node {
    /// A node all of whose slots hold `word(i)` (its Refcache identity is set by
    /// `Counter::born` before publication). Aborts on memory exhaustion (the root, loom models).
    pub(crate) fn alloc(
        parent: *const Node,
        index: usize,
        level: usize,
        start: u64,
        word: impl Fn(usize) -> usize,
    ) -> *mut Node {
        Self::try_alloc(parent, index, level, start, word, None)
            .unwrap_or_else(|_| std::alloc::handle_alloc_error(Layout::new::<Node>()))
    }

    /// The fallible allocation of an expansion: one unit of `budget`, then the memory; the
    /// node is unpublished.
    pub(crate) fn try_alloc(
        parent: *const Node,
        index: usize,
        level: usize,
        start: u64,
        word: impl Fn(usize) -> usize,
        budget: Option<&AllocBudget>,
    ) -> Result<*mut Node, MapError> {
        if let Some(b) = budget {
            b.take()?;
        }
        let layout = Layout::new::<Node>();
        // SAFETY: `Node` has a non-zero size.
        let p = unsafe { alloc(layout) } as *mut Node;
        if p.is_null() {
            return Err(MapError::OutOfMemory);
        }
        // SAFETY: `p` is a fresh allocation of `Node`'s layout; every field is written once
        // before the node is published.
        unsafe {
            let slots = ptr::addr_of_mut!((*p).slots) as *mut AtomicUsize;
            for i in 0..FANOUT {
                slots.add(i).write(AtomicUsize::new(word(i)));
            }
            ptr::addr_of_mut!((*p).rc).write(NodeRc::none());
            ptr::addr_of_mut!((*p).parent).write(parent);
            ptr::addr_of_mut!((*p).index).write(index);
            ptr::addr_of_mut!((*p).level).write(level);
            ptr::addr_of_mut!((*p).start).write(start);
            ptr::addr_of_mut!((*p).folded).write(AtomicUsize::new(0));
        }
        Ok(p)
    }

    /// Frees a node (not its children or records; its weak reference is dropped).
    ///
    /// # Safety
    /// `p` came from [`Node::alloc`]/[`Node::try_alloc`], is freed once, and is unreachable.
    pub(crate) unsafe fn dealloc(p: *mut Node) {
        // SAFETY: the caller's contract; the atomics have no drop glue worth running but are
        // dropped in place for loom's bookkeeping.
        unsafe {
            ptr::drop_in_place(p);
            dealloc(p as *mut u8, Layout::new::<Node>());
        }
    }

    /// The slot's word.
    #[inline]
    pub(crate) fn load(&self, i: usize) -> usize {
        // Acquire: pairs with the Release stores that publish a child node, a record or a
        // descriptor into the slot, so that what the word points to is initialised for us.
        self.slots[i].load(Ordering::Acquire)
    }
}

/// An interval and its value, pointed to by every slot covering it (see the module doc).
pub(crate) struct Record<V> {
    /// First address.
    pub(crate) start: u64,
    /// One past the last address.
    pub(crate) end: u64,
    pub(crate) value: V,
}

impl<V> Record<V> {
    /// A fresh record (one unit of `budget`, then the memory); unpublished. On failure the
    /// value is dropped.
    pub(crate) fn try_alloc(
        start: u64,
        end: u64,
        value: V,
        budget: Option<&AllocBudget>,
    ) -> Result<*mut Self, MapError> {
        if let Some(b) = budget {
            b.take()?;
        }
        let layout = Layout::new::<Self>();
        // SAFETY: the layout is non-empty (two u64s).
        let p = unsafe { alloc(layout) } as *mut Self;
        if p.is_null() {
            return Err(MapError::OutOfMemory);
        }
        // SAFETY: fresh allocation of the right layout.
        unsafe { p.write(Self { start, end, value }) };
        Ok(p)
    }

    /// First and one-past-last page.
    #[inline]
    pub(crate) fn pages(&self) -> (u64, u64) {
        (self.start / PAGE_SIZE, self.end / PAGE_SIZE)
    }

    /// Drops the value and frees the record; the memory is freed even if the drop panics.
    ///
    /// # Safety
    /// `p` came from [`Record::try_alloc`], is freed once, and is unreachable.
    pub(crate) unsafe fn dealloc(p: *mut Self) {
        struct Free<V>(*mut Record<V>);
        impl<V> Drop for Free<V> {
            fn drop(&mut self) {
                // SAFETY: the enclosing function's contract.
                unsafe { dealloc(self.0 as *mut u8, Layout::new::<Record<V>>()) };
            }
        }
        let _free = Free(p);
        // SAFETY: the caller's contract: initialised, owned, dropped once.
        unsafe { ptr::drop_in_place(p) };
    }
}

/// Records a descriptor keeps inline (old and new together); more go to the heap.
const INLINE: usize = 6;

/// One publishing range operation: the records of its range before and after (see the module
/// doc). Both lists are sorted by address and disjoint.
pub(crate) struct Desc<V> {
    /// Set once, by the operation's commit.
    pub(crate) committed: AtomicUsize,
    /// Length of the old list (the new one follows it).
    n_old: usize,
    n_new: usize,
    /// Old then new records, when they fit (the common case: no allocation but the box).
    inline: [*const Record<V>; INLINE],
    /// Old then new records, when they do not.
    heap: Vec<*const Record<V>>,
}

impl<V> Desc<V> {
    /// A descriptor over copies of the lists, allocated fallibly (one budget unit, and one
    /// more for a list too long to keep inline).
    pub(crate) fn try_alloc(
        old: &[*const Record<V>],
        new: &[*const Record<V>],
        budget: Option<&AllocBudget>,
    ) -> Result<*mut Self, MapError> {
        if let Some(b) = budget {
            b.take()?;
        }
        let n = old.len() + new.len();
        let mut inline = [ptr::null(); INLINE];
        let mut heap = Vec::new();
        if n <= INLINE {
            inline[..old.len()].copy_from_slice(old);
            inline[old.len()..n].copy_from_slice(new);
        } else {
            // The list's own allocation: one more unit.
            if let Some(b) = budget {
                b.take()?;
            }
            heap.try_reserve_exact(n)
                .map_err(|_| MapError::OutOfMemory)?;
            heap.extend_from_slice(old);
            heap.extend_from_slice(new);
        }
        let layout = Layout::new::<Self>();
        // SAFETY: non-empty layout.
        let p = unsafe { alloc(layout) } as *mut Self;
        if p.is_null() {
            return Err(MapError::OutOfMemory);
        }
        // SAFETY: fresh allocation of the right layout.
        unsafe {
            p.write(Self {
                committed: AtomicUsize::new(0),
                n_old: old.len(),
                n_new: new.len(),
                inline,
                heap,
            })
        };
        Ok(p)
    }

    /// The old and the new list.
    fn lists(&self) -> (&[*const Record<V>], &[*const Record<V>]) {
        let all = if self.heap.is_empty() {
            &self.inline[..self.n_old + self.n_new]
        } else {
            &self.heap[..]
        };
        all.split_at(self.n_old)
    }

    /// The record covering `page` in the list that is current now.
    ///
    /// # Safety
    /// The descriptor and the records of both lists are alive (the caller's read section).
    #[inline]
    pub(crate) unsafe fn resolve(&self, page: u64) -> Option<&Record<V>> {
        let (old, new) = self.lists();
        // Acquire: pairs with the commit's Release; the new records' contents are published by
        // it (they were written before it).
        let list = if self.committed.load(Ordering::Acquire) != 0 {
            new
        } else {
            old
        };
        let addr = page * PAGE_SIZE;
        // SAFETY: the caller's contract: every record of the lists is alive.
        let i = list.partition_point(|&r| unsafe { (*r).end } <= addr);
        let r = *list.get(i)?;
        // SAFETY: as above.
        let r = unsafe { &*r };
        (r.start <= addr).then_some(r)
    }

    /// Frees the descriptor (not the records).
    ///
    /// # Safety
    /// `p` came from [`Desc::try_alloc`], is freed once, and is unreachable.
    pub(crate) unsafe fn dealloc(p: *mut Self) {
        // SAFETY: the caller's contract.
        unsafe {
            ptr::drop_in_place(p);
            dealloc(p as *mut u8, Layout::new::<Self>());
        }
    }
}

/// What a value slot, or a descriptor slot resolved at `page`, holds.
///
/// # Safety
/// `w` was loaded from a live slot inside a read section (its record or descriptor is alive);
/// `w` is not a node word.
#[inline]
pub(crate) unsafe fn record_of<'a, V>(w: usize, page: u64) -> Option<&'a Record<V>> {
    let p = untag(w);
    if w & DESC != 0 {
        // SAFETY: the caller's contract: the descriptor is alive for 'a.
        return unsafe { (*(p as *const Desc<V>)).resolve(page) };
    }
    // SAFETY: as above: a non-null value word points to a live record.
    (p != 0).then(|| unsafe { &*(p as *const Record<V>) })
}
