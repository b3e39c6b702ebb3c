//! The raw Bonsai tree: the root pointer, the lock-free read side, and the writer's checks.
//!
//! This is the unsafe core under `BonsaiMap`'s safe facade. Readers call [`RawTree::find`] and
//! [`RawTree::walk`] under an RCU read guard: they take no lock and do no atomic read-modify-write;
//! they only `Acquire`-load the root and child pointers (each pairs with the `Release` store that
//! published the pointer, in `update.rs`) and read the immutable fields of the nodes they reach.
//! That is the paper's Fig. 9 lookup, made an interval predecessor search: the greatest start
//! `<= addr`, then `addr < end`.
//!
//! Why a lookup racing updates is correct (ASPLOS'12 §3.1, argued for predecessor search): every
//! commit replaces one subtree by another holding the same starts except those the update
//! touches; unlinked nodes are never written again and stay allocated until readers that could
//! hold them are gone. So a start `k` the update does not touch is reachable, along the search
//! path for `k`, from every node a reader can be at on that path, old or new. A query for an
//! address inside an untouched interval `[k, e)` follows exactly the search path of `k` (no start
//! lies in `(k, addr]` in any state, since intervals of every state are disjoint from untouched
//! ones) and finds `k`'s node (possibly a copy, with the same fields).
//!
//! Not for: writing (see `update.rs`); the safe API (see `bonsai.rs`).

use super::augment::{first_fit_locked, last_fit_locked};
use super::node::Node;
use super::summary::Summary;
use crate::contract::Interval;
use crate::sync::{AtomicPtr, Ordering};
use std::marker::PhantomData;
use std::ops::ControlFlow;

/// Weight-balance parameters (Adams' bounded balance with the (delta, ratio) = (3, 2) pair that
/// Hirai and Yamamoto proved correct for single insertions and deletions; weights are size + 1).
pub(crate) const DELTA: usize = 3;
/// Single rotation when the inner grandchild is lighter than `RATIO` times the outer one.
pub(crate) const RATIO: usize = 2;

/// Whether a subtree of size `a` may sit beside one of size `b`: `DELTA * (a + 1) >= b + 1`.
#[inline]
pub(crate) fn is_balanced(a: usize, b: usize) -> bool {
    DELTA * (a + 1) > b
}

/// The root of a Bonsai tree of intervals (see the module doc).
pub(crate) struct RawTree<V> {
    /// Readers: `Acquire`; the writer publishes a new root with `Release`.
    pub(crate) root: AtomicPtr<Node<V>>,
    _owns: PhantomData<Box<Node<V>>>,
}

// SAFETY: the tree owns its nodes (values of type V); moving it to another thread moves the
// values, which V: Send allows.
unsafe impl<V: Send> Send for RawTree<V> {}
// SAFETY: shared access lets readers borrow values on any thread (V: Sync) and lets the writer
// insert values that are later dropped on the reclaimer thread (V: Send).
unsafe impl<V: Send + Sync> Sync for RawTree<V> {}

impl<V> RawTree<V> {
    /// An empty tree.
    pub(crate) fn new() -> Self {
        Self {
            root: AtomicPtr::new(std::ptr::null_mut()),
            _owns: PhantomData,
        }
    }

    /// The node whose interval contains `addr`, if any.
    ///
    /// # Safety
    /// The caller holds an RCU read guard of the domain that reclaims this tree's nodes (or the
    /// writer lock) for all of `'g`.
    #[inline]
    pub(crate) unsafe fn find<'g>(&self, addr: u64) -> Option<&'g Node<V>> {
        // Acquire: pairs with the Release store of the root in `Update::commit_root`.
        let mut cur = self.root.load(Ordering::Acquire);
        let mut best: *const Node<V> = std::ptr::null();
        // SAFETY: every pointer loaded under the guard is null or a node that stays allocated
        // until the guard ends (it was reachable when loaded; unlinked nodes are freed only
        // after a grace period).
        while let Some(node) = unsafe { cur.as_ref() } {
            #[cfg(loom)]
            node.witness();
            if addr < node.start {
                // Acquire: pairs with the Release store that published this child (commit in
                // `Update::join`), so the child's fields are visible.
                cur = node.left.load(Ordering::Acquire);
            } else {
                best = node;
                // Acquire: as for `left` above.
                cur = node.right.load(Ordering::Acquire);
            }
        }
        // SAFETY: as above; `best` is null or a node reached under the guard.
        let best = unsafe { best.as_ref() }?;
        (addr < best.end).then_some(best)
    }

    /// Calls `f` on every node whose interval overlaps `[lo, hi)`, in address order, until `f`
    /// breaks.
    ///
    /// # Safety
    /// As for [`RawTree::find`]: an RCU read guard (or the writer lock) is held for `'g`.
    pub(crate) unsafe fn walk<'g>(
        &self,
        lo: u64,
        hi: u64,
        f: &mut dyn FnMut(&'g Node<V>) -> ControlFlow<()>,
    ) -> ControlFlow<()> {
        // Acquire: pairs with the Release store of the root in `Update::commit_root`.
        let root = self.root.load(Ordering::Acquire);
        // SAFETY: forwarded from the caller.
        unsafe { walk_sub(root, lo, hi, f) }
    }

    /// The lowest `a` such that `[a, a + len)` lies inside `within` and overlaps no interval,
    /// found in O(log n) through the gap augmentation (`augment.rs`).
    ///
    /// # Safety
    /// The caller holds the writer lock (summaries are writer-only); `len > 0`.
    pub(crate) unsafe fn first_fit(&self, within: Interval, len: u64) -> Option<u64> {
        // Relaxed: the writer reads its own root.
        let root = self.root.load(Ordering::Relaxed);
        // SAFETY: forwarded from the caller; `root` is the tree's root.
        unsafe { first_fit_locked(root, within, len) }
    }

    /// The highest `a` such that `[a, a + len)` lies inside `within` and overlaps no interval
    /// (the top-down search), in O(log n) through the gap augmentation (`augment.rs`).
    ///
    /// # Safety
    /// As for [`RawTree::first_fit`].
    pub(crate) unsafe fn last_fit(&self, within: Interval, len: u64) -> Option<u64> {
        // Relaxed: the writer reads its own root.
        let root = self.root.load(Ordering::Relaxed);
        // SAFETY: forwarded from the caller; `root` is the tree's root.
        unsafe { last_fit_locked(root, within, len) }
    }

    /// The node with the greatest start below `addr`, if any (one root-to-leaf descent).
    ///
    /// # Safety
    /// As for [`RawTree::find`].
    pub(crate) unsafe fn below<'g>(&self, addr: u64) -> Option<&'g Node<V>> {
        // Acquire: as in `find`.
        let mut cur = self.root.load(Ordering::Acquire);
        let mut best: *const Node<V> = std::ptr::null();
        // SAFETY: as in `find`.
        while let Some(node) = unsafe { cur.as_ref() } {
            if node.start < addr {
                best = node;
                // Acquire: as in `find`.
                cur = node.right.load(Ordering::Acquire);
            } else {
                // Acquire: as in `find`.
                cur = node.left.load(Ordering::Acquire);
            }
        }
        // SAFETY: as in `find`.
        unsafe { best.as_ref() }
    }

    /// Checks the structural invariants and returns the number of nodes: BST order by start,
    /// disjoint non-empty intervals, weight balance at every node, and every node's stored
    /// summary (size and gap augmentation) equal to one recomputed from scratch.
    ///
    /// # Safety
    /// The caller holds the writer lock (summaries are writer-only).
    pub(crate) unsafe fn check(&self) -> usize {
        let root = self.root.load(Ordering::Relaxed);
        let mut prev_end = 0u64;
        // SAFETY: forwarded from the caller.
        unsafe { check_sub(root, &mut prev_end) }.map_or(0, |s| s.size)
    }
}

/// Recursive part of [`RawTree::walk`].
///
/// # Safety
/// As for [`RawTree::walk`]; `n` was loaded under the guard.
unsafe fn walk_sub<'g, V>(
    n: *mut Node<V>,
    lo: u64,
    hi: u64,
    f: &mut dyn FnMut(&'g Node<V>) -> ControlFlow<()>,
) -> ControlFlow<()> {
    // SAFETY: `n` is null or a node reached under the guard, alive for `'g`.
    let Some(node) = (unsafe { n.as_ref() }) else {
        return ControlFlow::Continue(());
    };
    #[cfg(loom)]
    node.witness();
    // Intervals are disjoint and sorted, so only the left subtree of a node starting after `lo`
    // can hold intervals reaching into `[lo, hi)`.
    if node.start > lo {
        // Acquire: pairs with the Release store that published this child.
        let left = node.left.load(Ordering::Acquire);
        // SAFETY: forwarded.
        unsafe { walk_sub(left, lo, hi, f) }?;
    }
    if node.start < hi && node.end > lo {
        f(node)?;
    }
    if node.start < hi {
        // Acquire: pairs with the Release store that published this child.
        let right = node.right.load(Ordering::Acquire);
        // SAFETY: forwarded.
        unsafe { walk_sub(right, lo, hi, f) }?;
    }
    ControlFlow::Continue(())
}

/// Recursive part of [`RawTree::check`]; `prev_end` is the end of the previous interval.
/// Returns the subtree's summary recomputed from scratch (never from stored summaries).
///
/// # Safety
/// The writer lock is held.
unsafe fn check_sub<V>(n: *mut Node<V>, prev_end: &mut u64) -> Option<Summary> {
    // SAFETY: under the writer lock every reachable node is alive.
    let node = unsafe { n.as_ref() }?;
    let left = node.left.load(Ordering::Relaxed);
    let right = node.right.load(Ordering::Relaxed);
    // SAFETY: forwarded.
    let ls = unsafe { check_sub(left, prev_end) };
    assert!(
        node.start >= *prev_end,
        "interval {:#x}..{:#x} overlaps or is out of order after end {:#x}",
        node.start,
        node.end,
        *prev_end
    );
    assert!(node.start < node.end, "empty interval at {:#x}", node.start);
    *prev_end = node.end;
    // SAFETY: forwarded.
    let rs = unsafe { check_sub(right, prev_end) };
    let sum = Summary::join(node.start, node.end, ls, rs);
    assert_eq!(node.summary(), sum, "stored summary of {:#x}", node.start);
    let (ls, rs) = (ls.map_or(0, |s| s.size), rs.map_or(0, |s| s.size));
    assert!(
        is_balanced(ls, rs) && is_balanced(rs, ls),
        "unbalanced at {:#x}: left {ls}, right {rs}",
        node.start
    );
    Some(sum)
}

impl<V> Drop for RawTree<V> {
    fn drop(&mut self) {
        // `&mut self`: no reader or writer can reach the tree any more. Nodes unlinked earlier
        // are owned by their retired batches, not reachable from here.
        let mut stack = vec![self.root.load(Ordering::Relaxed)];
        while let Some(n) = stack.pop() {
            if n.is_null() {
                continue;
            }
            // SAFETY: each reachable node is reachable exactly once (the tree is a tree), was
            // allocated by `Node::alloc` (Box), and nobody else can access it any more.
            let node = unsafe { Box::from_raw(n) };
            stack.push(node.left.load(Ordering::Relaxed));
            stack.push(node.right.load(Ordering::Relaxed));
        }
    }
}
