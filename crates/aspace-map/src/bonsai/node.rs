//! A Bonsai tree node: one interval, its value, two RCU child pointers and the writer-only
//! subtree summary (size and gap augmentation).
//!
//! Layout (`repr(C)`) puts what a lookup touches first: `start` and the two child pointers share
//! the first 24 bytes, `end` and the value follow, then the writer-only summary. That is the
//! paper's Fig. 4 node (left, right, size, value) with the interval bounds as the key, plus the
//! gap augmentation of `augment.rs` (Linux's `rb_subtree_gap`, generalised).
//!
//! The summary is packed into three words ([`PackedSummary`]): `min_start`, `max_end` and
//! `max_gap` are multiples of `PAGE_SIZE` (interval bounds are page-aligned), so their low 12
//! bits are free and hold the subtree size, 12 bits per word (so a tree holds fewer than 2^36
//! nodes, checked). With a `u64` value a node is then exactly 64 bytes, one cache line (the
//! allocator's 64-byte size class is line-aligned), instead of 72 bytes rounded up to 80, where
//! half of the nodes had their lookup fields split over two lines.
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

use super::summary::Summary;
use crate::contract::{MapError, PAGE_SIZE};
use crate::fault::AllocBudget;
use crate::sync::stat::AtomicU64 as WriterOnlyU64;
use crate::sync::{AtomicPtr, Ordering};
use std::alloc::{alloc, Layout};
use std::ptr;

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
    /// Writer only: the subtree summary (size, min start, max end, largest inner gap).
    summary: PackedSummary,
    /// Loom only: a tracked cell written when the node is built and read by every lookup that
    /// visits it, so the model checker reports a lookup that reaches a node whose construction
    /// does not happen-before it (a missing Release/Acquire pair on a publishing store).
    #[cfg(loom)]
    witness: loom::cell::UnsafeCell<u64>,
}

impl<V> Node<V> {
    /// A heap node with the given fields and `sum`, the summary of its subtree (computed by the
    /// writer from its children's). The one fallible node allocation of Bonsai updates: takes one unit of `budget` (the
    /// test hook, `fault.rs`) first, then allocates; on failure (injected or real) drops `value`
    /// and returns `OutOfMemory`. The caller owns the returned pointer (freed as a `Box`).
    pub(crate) fn try_alloc(
        start: u64,
        end: u64,
        value: V,
        left: *mut Node<V>,
        right: *mut Node<V>,
        sum: Summary,
        budget: Option<&AllocBudget>,
    ) -> Result<*mut Node<V>, MapError> {
        if let Some(b) = budget {
            b.take()?;
        }
        let layout = Layout::new::<Node<V>>();
        // SAFETY: `Node<V>` has a non-zero size (two pointers and the summary at least).
        let p = unsafe { alloc(layout) }.cast::<Node<V>>();
        if p.is_null() {
            return Err(MapError::OutOfMemory);
        }
        let node = Node {
            start,
            left: AtomicPtr::new(left),
            right: AtomicPtr::new(right),
            end,
            value,
            summary: PackedSummary::new(sum),
            #[cfg(loom)]
            witness: loom::cell::UnsafeCell::new(0),
        };
        #[cfg(loom)]
        // SAFETY: the node is not shared yet; this is the tracked initialising write.
        node.witness.with_mut(|p| unsafe { *p = start });
        // SAFETY: `p` is a fresh allocation of `Node<V>`'s layout from the global allocator,
        // so it may later be freed as a `Box<Node<V>>` (std's `Box` memory layout rules).
        unsafe { p.write(node) };
        Ok(p)
    }

    /// The stored subtree summary (writer only).
    #[inline]
    pub(crate) fn summary(&self) -> Summary {
        self.summary.load()
    }

    /// Stores the summary of this node's subtree (writer only; in place even in a published
    /// node, since readers never read it).
    #[inline]
    pub(crate) fn set_summary(&self, sum: Summary) {
        self.summary.store(sum);
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
/// # Safety
/// The caller holds the tree's writer lock (summaries are writer-only) and `n` is null or a
/// live node: reachable from the root, or created or retired by the caller's current update.
#[inline]
pub(crate) unsafe fn summary_of<V>(n: *mut Node<V>) -> Option<Summary> {
    // SAFETY: per the contract, `n` is null or a live node.
    unsafe { n.as_ref() }.map(Node::summary)
}

/// The low bits of a page-aligned value, where the packed summary keeps 12 bits of the size.
const LOW: u64 = PAGE_SIZE - 1;
/// Bits of the size kept in each word.
const LOW_BITS: u32 = PAGE_SIZE.trailing_zeros();
/// Exclusive bound of a packed size (three words of `LOW_BITS` bits).
pub(crate) const MAX_TREE_SIZE: usize = 1 << (3 * LOW_BITS);

/// A [`Summary`] in three writer-only words (see the module doc): word `i` holds a page-aligned
/// field (`min_start`, `max_end`, `max_gap`) plus bits `12 i .. 12 (i + 1)` of the size.
///
/// Accessed with `Relaxed` only: writer-only data, ordered by the writer lock; readers never
/// touch it (see the module doc).
struct PackedSummary {
    words: [WriterOnlyU64; 3],
}

impl PackedSummary {
    #[inline]
    fn pack(s: Summary) -> [u64; 3] {
        debug_assert!(
            (s.min_start | s.max_end | s.max_gap) & LOW == 0,
            "summary fields must be page-aligned: {s:?}"
        );
        assert!(
            s.size < MAX_TREE_SIZE,
            "a Bonsai tree holds fewer than 2^36 nodes"
        );
        let size = s.size as u64;
        [
            s.min_start | (size & LOW),
            s.max_end | ((size >> LOW_BITS) & LOW),
            s.max_gap | ((size >> (2 * LOW_BITS)) & LOW),
        ]
    }

    #[inline]
    fn new(s: Summary) -> Self {
        Self {
            words: Self::pack(s).map(WriterOnlyU64::new),
        }
    }

    #[inline]
    fn load(&self) -> Summary {
        // Relaxed: writer-only data (see the type doc).
        let [a, b, c] = [0, 1, 2].map(|i| self.words[i].load(Ordering::Relaxed));
        Summary {
            size: ((a & LOW) | ((b & LOW) << LOW_BITS) | ((c & LOW) << (2 * LOW_BITS))) as usize,
            min_start: a & !LOW,
            max_end: b & !LOW,
            max_gap: c & !LOW,
        }
    }

    #[inline]
    fn store(&self, s: Summary) {
        for (w, v) in self.words.iter().zip(Self::pack(s)) {
            // Relaxed: writer-only data (see the type doc).
            w.store(v, Ordering::Relaxed);
        }
    }
}

/// A null child pointer.
#[inline]
pub(crate) fn null<V>() -> *mut Node<V> {
    ptr::null_mut()
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn packed_summary_round_trips_every_size_bit_and_full_width_bounds() {
        let top = !LOW;
        for size in [1, LOW as usize, 1 << 12, (1 << 24) + 5, MAX_TREE_SIZE - 1] {
            let s = Summary {
                size,
                min_start: PAGE_SIZE,
                max_end: top,
                max_gap: top - PAGE_SIZE,
            };
            let p = PackedSummary::new(s);
            assert_eq!(p.load(), s);
            let t = Summary { size: 3, ..s };
            p.store(t);
            assert_eq!(p.load(), t);
        }
    }

    #[test]
    fn a_node_with_a_word_value_fills_one_cache_line() {
        assert_eq!(std::mem::size_of::<Node<u64>>(), 64);
    }

    #[test]
    #[should_panic(expected = "fewer than 2^36 nodes")]
    fn packing_rejects_a_size_past_its_bits() {
        PackedSummary::pack(Summary {
            size: MAX_TREE_SIZE,
            min_start: 0,
            max_end: PAGE_SIZE,
            max_gap: 0,
        });
    }
}
