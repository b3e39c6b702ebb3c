//! Per-slot pools of skiplist node memory, refilled by reclamation and drained by the slot's
//! next allocations (issue 21: no allocation on the common paths).
//!
//! Every edit allocates its new nodes (the new interval, trimmed remainders, re-created
//! separators) and, a grace period later, frees the old ones: each a round trip through the
//! global allocator. Each pooled reader slot (`readers.rs`) therefore keeps a [`NodePool`]:
//! one intrusive LIFO free list of node blocks per height (a
//! node's `Layout` is fixed by its height), each bounded ([`cap`]: [`POOL_CAP`] blocks of
//! height 1, a quarter as many per level above, as random heights are drawn, and at least
//! [`POOL_MIN`] for the separators' heights; under 500 blocks per slot in all). A bound per
//! height, not in all: with one total bound the pool filled up with height-1 blocks and every
//! taller node missed it (callgrind of `local`, 67% of node allocations still reached the
//! allocator).
//!
//! Measured (CHANGELOG.md, issue 21): on `local` (one node per iteration) the pool serves all
//! but the warm-up's allocations, but saves no instructions: the node was one of ~9 allocator
//! calls per iteration (the others are `Vec` buffers), and mimalloc's fast path costs about
//! what a take and a recycle cost here.
//!
//! - *Filled* by the slot's retire list (`retire.rs`, `collect`): where it freed a node whose
//!   grace period has ended, it now drops the node's value and links ([`Node::clear`]) and keeps
//!   the block; past its height's bound it frees them as before.
//! - *Drained* by the node allocations of operations that hold the slot (`Node::try_alloc` with
//!   the slot's pool: `swap_with` for `map`, `swap` and an alloc across a separator, `alloc`'s
//!   claim, zone separators). A block taken is initialised by the same code as a fresh one
//!   (`Node::init`: header, value, every tower link zero, so no tag survives). Allocations
//!   without a slot (the head, a new map's separators, temporary readers, whose pool starts
//!   empty and is emptied after their one use) use the allocator.
//! - *Emptied* (blocks freed) by the map's `barrier` and when the slot's state is dropped with
//!   the map.
//!
//! Why reuse is safe (no ABA on link CASes): a block enters a pool only at the one point where
//! the node used to be freed, after its grace period (`retire.rs`), and nothing else is put in:
//! not the unpublished nodes of a failed operation, nor anything freed on another path (those
//! use the allocator). Taking a block from the pool is then exactly what the allocator could
//! already do right after that free: hand the same address out again. Every read section that
//! could have reached the old node ended before the grace period did, so no traversal, recorded
//! predecessor (`SkipLocked`'s `Position`) or expected value of a pending CAS can still hold the
//! address; sections that began later cannot reach an unlinked node. The holder's own section
//! included: a grace period that ended while it is open did not wait for it, so it began after
//! the unlink (`retire.rs`'s argument for freeing inside the caller's section).
//!
//! All slot-local: a pool is only touched through the slot's state, which its mutex hands to one
//! operation at a time (or `&mut` at drop), so the pool adds no cross-thread step and needs no
//! loom model of its own; the models of the link protocols (`loom_tests.rs`) are unchanged, and
//! under `--cfg loom` a recycled block's links are re-created as loom atomics like a fresh one's.
//!
//! Not for: deciding when a node may be reused (that is the retire list's grace period), nodes
//! never published (freed to the allocator), or memory of other structures.

use super::node::{Node, MAX_HEIGHT};
use std::marker::PhantomData;
use std::ptr::{self, NonNull};

/// Most blocks of height 1 one pool keeps (see [`cap`]); past it `recycle_all` frees. A few
/// batches of the retire list (`retire::BATCH`), so that a slot's allocations between two
/// collections are served from the pool. Smaller under test, so that the maps' own tests cross
/// the bound at every collection.
#[cfg(not(test))]
pub(crate) const POOL_CAP: usize = 256;
/// See the non-test definition.
#[cfg(test)]
pub(crate) const POOL_CAP: usize = 16;
/// Fewest blocks kept of any height (zone and arena separators are tall; a swap re-creates
/// those it holds).
#[cfg(not(test))]
pub(crate) const POOL_MIN: usize = 8;
/// See the non-test definition.
#[cfg(test)]
pub(crate) const POOL_MIN: usize = 2;

/// Most blocks of `height` one pool keeps: `POOL_CAP / 4^(height - 1)`, at least [`POOL_MIN`]
/// (P(height > k) = 4^-k for ordinary nodes). In all at most 256 + 64 + 16 + 17 * 8 = 472
/// blocks per slot outside tests.
#[inline]
pub(crate) fn cap(height: usize) -> usize {
    (POOL_CAP >> (2 * (height - 1)).min(usize::BITS as usize - 1)).max(POOL_MIN)
}

/// Free node blocks of one reader slot, by height (module doc).
pub(crate) struct NodePool<V> {
    /// `free[h - 1]`: the last block recycled of height `h` (null for none); each block's first
    /// word holds the next one's address (an intrusive LIFO list).
    free: [*mut u8; MAX_HEIGHT],
    /// `lens[h - 1]`: blocks in `free[h - 1]` (at most [`cap`]`(h)`).
    lens: [u32; MAX_HEIGHT],
    /// Blocks of `Node<V>` (their layout depends on `V`); no value is ever kept.
    _nodes: PhantomData<*mut Node<V>>,
}

// SAFETY: the pool owns plain memory blocks (no value, no link anyone reads), so moving it, and
// the duty to free them, to another thread is sound for every `V`.
unsafe impl<V> Send for NodePool<V> {}

impl<V> Default for NodePool<V> {
    fn default() -> Self {
        Self {
            free: [ptr::null_mut(); MAX_HEIGHT],
            lens: [0; MAX_HEIGHT],
            _nodes: PhantomData,
        }
    }
}

impl<V> NodePool<V> {
    /// Blocks kept now.
    #[cfg(all(test, not(loom)))]
    pub(crate) fn len(&self) -> usize {
        self.lens.iter().map(|&n| n as usize).sum()
    }

    /// A block for a node of `height`, if one is kept (the caller initialises it with
    /// `Node::init`).
    #[inline]
    pub(crate) fn take(&mut self, height: usize) -> Option<NonNull<u8>> {
        let head = NonNull::new(self.free[height - 1])?;
        // SAFETY: a kept block is owned by the pool, holds at least a word and is aligned for
        // a pointer (a node starts with a `u64`), and its first word was written by `put`.
        self.free[height - 1] = unsafe { head.as_ptr().cast::<*mut u8>().read() };
        self.lens[height - 1] -= 1;
        Some(head)
    }

    /// Keeps `block` (of a node of `height`), or frees it if the pool keeps [`cap`]`(height)`
    /// blocks of that height.
    ///
    /// # Safety
    /// `block` is the memory of a `Node<V>` of `height`, from `Node::clear` (its value and
    /// links dropped), owned by the caller, and unreachable by any thread (its node's grace
    /// period has ended, or it was never published).
    unsafe fn put(&mut self, block: NonNull<u8>, height: usize) {
        if self.lens[height - 1] as usize >= cap(height) {
            // SAFETY: forwarded; the block is given up here.
            unsafe { Node::<V>::free_block(block, height) };
            return;
        }
        // SAFETY: the block is ours (contract), at least a word long and pointer-aligned.
        unsafe {
            block
                .as_ptr()
                .cast::<*mut u8>()
                .write(self.free[height - 1])
        };
        self.free[height - 1] = block.as_ptr();
        self.lens[height - 1] += 1;
    }

    /// Drops the value and links of every node of `batch` and keeps (or, past the bound, frees)
    /// their memory; empties `batch`. If a value's drop panics, that node's memory and the rest
    /// of the batch are freed while unwinding (as `Node::dealloc_all`).
    ///
    /// # Safety
    /// Each node of `batch` is owned by the caller, freed once, and unreachable by any thread:
    /// its grace period has ended (the only way blocks enter a pool, module doc).
    pub(crate) unsafe fn recycle_all(&mut self, batch: &mut Vec<*mut Node<V>>) {
        /// Frees the nodes from `next` on when dropped (only while unwinding, or empty).
        struct Rest<'a, V> {
            batch: &'a mut Vec<*mut Node<V>>,
            next: usize,
        }
        impl<V> Drop for Rest<'_, V> {
            fn drop(&mut self) {
                while self.next < self.batch.len() {
                    let p = self.batch[self.next];
                    self.next += 1;
                    // SAFETY: the enclosing function's contract; each node once.
                    unsafe { Node::dealloc(p) };
                }
                self.batch.clear();
            }
        }
        let mut rest = Rest { batch, next: 0 };
        while rest.next < rest.batch.len() {
            let p = rest.batch[rest.next];
            rest.next += 1;
            // SAFETY: the contract; each node once (`next` moved past it first). `clear`
            // frees the block itself if the value's drop panics.
            let (block, height) = unsafe { Node::clear(p) };
            // SAFETY: cleared above, ours, unreachable (contract).
            unsafe { self.put(block, height) };
        }
    }

    /// Frees every kept block.
    pub(crate) fn clear(&mut self) {
        for h in 1..=MAX_HEIGHT {
            while let Some(block) = self.take(h) {
                // SAFETY: a kept block of height `h`, owned by the pool and given up here.
                unsafe { Node::<V>::free_block(block, h) };
            }
        }
        debug_assert!(self.lens.iter().all(|&n| n == 0));
    }
}

impl<V> Drop for NodePool<V> {
    fn drop(&mut self) {
        self.clear();
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::super::node::{blocks, Kind, Node, MAX_HEIGHT};
    use super::{cap, NodePool, POOL_CAP, POOL_MIN};

    fn node(h: usize) -> *mut Node<u64> {
        Node::alloc(0, 4096, h, Kind::Interval, Some(7))
    }

    #[test]
    fn recycled_blocks_are_reused_by_height_last_in_first_out() {
        let mut pool = NodePool::<u64>::default();
        let (a, b, c) = (node(1), node(2), node(1));
        let mut batch = vec![a, b, c];
        // SAFETY: the nodes are ours, never published.
        unsafe { pool.recycle_all(&mut batch) };
        assert!(batch.is_empty());
        assert_eq!(pool.len(), 3);
        assert_eq!(pool.take(3), None, "no block of another height");
        assert_eq!(
            pool.take(1).unwrap().as_ptr(),
            c as *mut u8,
            "last in first"
        );
        assert_eq!(pool.take(1).unwrap().as_ptr(), a as *mut u8);
        assert_eq!(pool.take(1), None);
        let before = blocks();
        let n = Node::try_alloc(8, 16, 2, Kind::Interval, Some(9), None, Some(&mut pool)).unwrap();
        assert_eq!(n, b, "a pooled block of the height is used first");
        assert_eq!(blocks(), before, "taken from the pool, not the allocator");
        // SAFETY: a fresh node of ours.
        let n = unsafe { &*n };
        assert_eq!((n.start, n.end, n.height, *n.value()), (8, 16, 2, 9));
        assert_eq!((n.load(0), n.load(1)), (0, 0), "links and tags reset");
        // SAFETY: ours, never published; the blocks taken above are freed like nodes' blocks.
        unsafe {
            Node::dealloc(b);
            Node::<u64>::free_block(std::ptr::NonNull::new(a as *mut u8).unwrap(), 1);
            Node::<u64>::free_block(std::ptr::NonNull::new(c as *mut u8).unwrap(), 1);
        }
    }

    #[test]
    fn a_pool_keeps_at_most_its_bound_per_height_and_frees_everything_when_dropped() {
        assert_eq!((cap(1), cap(2), cap(3)), (POOL_CAP, POOL_CAP / 4, POOL_MIN));
        let start = blocks();
        let mut pool = NodePool::<u64>::default();
        let mut batch: Vec<_> = (0..cap(1) + 5).map(|_| node(1)).collect();
        batch.extend((0..cap(2) + 1).map(|_| node(2)));
        batch.push(node(MAX_HEIGHT));
        assert_eq!(blocks(), start + (cap(1) + cap(2) + 7) as isize);
        // SAFETY: the nodes are ours, never published.
        unsafe { pool.recycle_all(&mut batch) };
        assert_eq!(pool.len(), cap(1) + cap(2) + 1, "bounded per height");
        assert_eq!(blocks(), start + pool.len() as isize, "the rest freed");
        drop(pool);
        assert_eq!(blocks(), start, "dropping the pool frees every block");
    }

    #[test]
    fn a_value_dropped_by_recycling_panics_without_leaking_memory() {
        struct Boom(bool);
        impl Drop for Boom {
            fn drop(&mut self) {
                if self.0 {
                    panic!("boom");
                }
            }
        }
        let start = blocks();
        let mut pool = NodePool::<Boom>::default();
        let mut batch: Vec<_> = [false, true, false]
            .into_iter()
            .map(|b| Node::alloc(0, 4096, 1, Kind::Interval, Some(Boom(b))))
            .collect();
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            // SAFETY: the nodes are ours, never published.
            unsafe { pool.recycle_all(&mut batch) }
        }));
        assert!(r.is_err());
        assert!(batch.is_empty());
        assert_eq!(pool.len(), 1, "the node before the panic was kept");
        drop(pool);
        assert_eq!(blocks(), start, "no block leaked");
    }
}
