//! A Bonsai tree node: one interval, its value, two RCU child pointers and the writer-only
//! subtree summary (size and gap augmentation).
//!
//! Layout (`repr(C)`) puts what a lookup touches first: `start` and the two child pointers share
//! the first 24 bytes, `end` and the value follow, then the writer-only summary. That is the
//! paper's Fig. 4 node (left, right, size, value) with the interval bounds as the key, plus the
//! gap augmentation of `augment.rs` (Linux's `rb_subtree_gap`, generalised).
//!
//! Invariants:
//! - `start`, `end` and `value` never change after the node is published (a node reachable by
//!   readers is immutable except for its child pointers): a reader never sees a torn interval.
//!   Changing an interval means publishing a replacement node (ASPLOS'12 §3.1).
//! - `left`/`right` of a published node change only by one `Release` store that commits a whole
//!   update step (see `update.rs`); readers load them with `Acquire` under an RCU guard.
//! - The summary (`size`, the number of nodes in the subtree, Adams' weight; `min_start`,
//!   `max_end` and `max_gap`, the gap augmentation, see `augment.rs`) is a function of the
//!   subtree. It is read and written only by the writer holding the tree's writer lock; readers
//!   never read it. Hence the writer may update it **in place** in published nodes (on the
//!   update path, bottom-up, like `size`) without a commit: no reader can observe the writes,
//!   so there is nothing to tear. New nodes (leaves, rotations, copies) get it computed from
//!   their children at construction. Its fields are plain `std` atomics used with `Relaxed` only
//!   because they sit in nodes shared with readers (a `&Node` is shared, so mutation needs
//!   interior mutability); they carry no inter-thread ordering (the writer lock orders writers)
//!   and are deliberately not loom atomics.
//!
//! Not for: anything but the Bonsai tree (`tree.rs`, `update.rs`).

use super::augment::Summary;
use crate::sync::{AtomicPtr, Ordering};
use std::ptr;
use std::sync::atomic::{AtomicU64 as WriterOnlyU64, AtomicUsize as WriterOnlyUsize};

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
    /// The interval's value.
    pub(crate) value: V,
    /// Writer only: nodes in this subtree.
    size: WriterOnlyUsize,
    /// Writer only: the lowest start in this subtree.
    min_start: WriterOnlyU64,
    /// Writer only: the highest end in this subtree.
    max_end: WriterOnlyU64,
    /// Writer only: the largest gap between two consecutive intervals of this subtree.
    max_gap: WriterOnlyU64,
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
        let sum = Summary::join(start, end, summary_of(left), summary_of(right));
        let node = Box::new(Node {
            start,
            left: AtomicPtr::new(left),
            right: AtomicPtr::new(right),
            end,
            value,
            size: WriterOnlyUsize::new(sum.size),
            min_start: WriterOnlyU64::new(sum.min_start),
            max_end: WriterOnlyU64::new(sum.max_end),
            max_gap: WriterOnlyU64::new(sum.max_gap),
            #[cfg(loom)]
            witness: loom::cell::UnsafeCell::new(0),
        });
        #[cfg(loom)]
        // SAFETY: the node is not shared yet; this is the tracked initialising write.
        node.witness.with_mut(|p| unsafe { *p = start });
        Box::into_raw(node)
    }

    /// The stored subtree summary (writer only).
    #[inline]
    pub(crate) fn summary(&self) -> Summary {
        // Relaxed (all four): writer-only data, ordered by the writer lock (see the module doc).
        Summary {
            size: self.size.load(Ordering::Relaxed),
            min_start: self.min_start.load(Ordering::Relaxed),
            max_end: self.max_end.load(Ordering::Relaxed),
            max_gap: self.max_gap.load(Ordering::Relaxed),
        }
    }

    /// Recomputes the summary from this node's interval and the summaries of `left` and
    /// `right`, which must be its children by the time the update ends (writer only; in place
    /// even in a published node, since readers never read it).
    #[inline]
    pub(crate) fn resummarize(&self, left: *mut Node<V>, right: *mut Node<V>) {
        let sum = Summary::join(self.start, self.end, summary_of(left), summary_of(right));
        // Relaxed (all four): writer-only data (see the module doc).
        self.size.store(sum.size, Ordering::Relaxed);
        self.min_start.store(sum.min_start, Ordering::Relaxed);
        self.max_end.store(sum.max_end, Ordering::Relaxed);
        self.max_gap.store(sum.max_gap, Ordering::Relaxed);
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

/// The stored summary of the subtree at `n` (`None` for null).
///
/// Writer only: `n` is null or a node that the caller (holding the writer lock) keeps alive.
#[inline]
pub(crate) fn summary_of<V>(n: *mut Node<V>) -> Option<Summary> {
    // SAFETY: non-null tree pointers handled by the writer point to live nodes: the writer lock
    // excludes other writers and nodes are freed only after being unlinked and a grace period
    // (or, for never-published nodes, by the writer itself after their last use).
    unsafe { n.as_ref() }.map(Node::summary)
}

/// The size of the subtree at `n` (0 for null). Writer only, as [`summary_of`].
#[inline]
pub(crate) fn size_of_tree<V>(n: *mut Node<V>) -> usize {
    // SAFETY: as in `summary_of`.
    unsafe { n.as_ref() }.map_or(0, |n| n.size.load(Ordering::Relaxed))
}

/// A null child pointer.
#[inline]
pub(crate) fn null<V>() -> *mut Node<V> {
    ptr::null_mut()
}
