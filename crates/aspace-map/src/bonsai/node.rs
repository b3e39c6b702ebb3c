//! A Bonsai tree node: one interval, its value, its subtree size and two RCU child pointers.
//!
//! Layout (`repr(C)`) puts what a lookup touches first: `start` and the two child pointers share
//! the first 24 bytes, `end` follows, then the writer-only `size`, then the value. That is the
//! paper's Fig. 4 node (left, right, size, value) with the interval bounds as the key.
//!
//! Invariants:
//! - `start`, `end` and `value` never change after the node is published (a node reachable by
//!   readers is immutable except for its child pointers): a reader never sees a torn interval.
//!   Changing an interval means publishing a replacement node (ASPLOS'12 §3.1).
//! - `left`/`right` of a published node change only by one `Release` store that commits a whole
//!   update step (see `update.rs`); readers load them with `Acquire` under an RCU guard.
//! - `size` (the number of nodes in the subtree, Adams' weight) is read and written only by the
//!   writer holding the tree's writer lock; readers never touch it. It is a plain `std` atomic
//!   used with `Relaxed` only because the writer updates it in place in nodes that readers can
//!   see; it carries no inter-thread ordering and is deliberately not a loom atomic.
//!
//! Not for: anything but the Bonsai tree (`tree.rs`, `update.rs`).

use crate::sync::{AtomicPtr, Ordering};
use std::ptr;
use std::sync::atomic::AtomicUsize as WriterOnlyUsize;

/// One tree node (see the module doc).
#[repr(C)]
pub(crate) struct Node<V> {
    /// First address of the interval: the search key.
    pub(crate) start: u64,
    /// Subtree of smaller starts. Readers: `Acquire` under a guard.
    pub(crate) left: AtomicPtr<Node<V>>,
    /// Subtree of larger starts. Readers: `Acquire` under a guard.
    pub(crate) right: AtomicPtr<Node<V>>,
    /// One past the last address of the interval.
    pub(crate) end: u64,
    /// Nodes in this subtree (writer only).
    size: WriterOnlyUsize,
    /// The interval's value.
    pub(crate) value: V,
    /// Loom only: a tracked cell written when the node is built and read by every lookup that
    /// visits it, so the model checker reports a lookup that reaches a node whose construction
    /// does not happen-before it (a missing Release/Acquire pair on a publishing store).
    #[cfg(loom)]
    witness: loom::cell::UnsafeCell<u64>,
}

impl<V> Node<V> {
    /// A heap node with the given fields; the caller owns the returned pointer.
    pub(crate) fn alloc(
        start: u64,
        end: u64,
        value: V,
        left: *mut Node<V>,
        right: *mut Node<V>,
    ) -> *mut Node<V> {
        let size = 1 + size_of_tree(left) + size_of_tree(right);
        let node = Box::new(Node {
            start,
            left: AtomicPtr::new(left),
            right: AtomicPtr::new(right),
            end,
            size: WriterOnlyUsize::new(size),
            value,
            #[cfg(loom)]
            witness: loom::cell::UnsafeCell::new(0),
        });
        #[cfg(loom)]
        // SAFETY: the node is not shared yet; this is the tracked initialising write.
        node.witness.with_mut(|p| unsafe { *p = start });
        Box::into_raw(node)
    }

    /// The subtree size (writer only).
    #[inline]
    pub(crate) fn size(&self) -> usize {
        self.size.load(Ordering::Relaxed)
    }

    /// Sets the subtree size (writer only; readers never read it).
    #[inline]
    pub(crate) fn set_size(&self, size: usize) {
        self.size.store(size, Ordering::Relaxed);
    }

    /// Loom only: the tracked read that checks this node's construction happens-before the
    /// caller (see the `witness` field).
    #[cfg(loom)]
    pub(crate) fn witness(&self) {
        // SAFETY: the cell is only written before the node is published.
        let seen = self.witness.with(|p| unsafe { *p });
        assert_eq!(seen, self.start, "a lookup saw an uninitialised node");
    }
}

/// The size of the subtree at `n` (0 for null).
///
/// Writer only: `n` is null or a node that the caller (holding the writer lock) keeps alive.
#[inline]
pub(crate) fn size_of_tree<V>(n: *mut Node<V>) -> usize {
    if n.is_null() {
        0
    } else {
        // SAFETY: non-null tree pointers handled by the writer point to live nodes: the writer
        // lock excludes other writers and nodes are freed only after being unlinked and a grace
        // period (or, for never-published nodes, by the writer itself after their last use).
        unsafe { (*n).size() }
    }
}

/// A null child pointer.
#[inline]
pub(crate) fn null<V>() -> *mut Node<V> {
    ptr::null_mut()
}
