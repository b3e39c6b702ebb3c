//! The Bonsai writer: one update's context and its three primitives (insert, delete, replace).
//!
//! An `Update` exists only while the writer lock is held. It tracks two sets of nodes:
//! - `fresh`: nodes allocated by the current step and not yet reachable by readers. Only these
//!   are mutated freely (children, summary), with `Relaxed` stores: they become visible through the
//!   one `Release` store that commits the step.
//! - `retired`: published nodes unlinked by this update, freed together after a grace period.
//!
//! Each primitive rebuilds the search path bottom-up, functionally, like the paper's `dolInsert`
//! (Fig. 5) with `mkBalanced` (Fig. 6, in `balance.rs`), plus the in-place optimisation of
//! ASPLOS'12 §3.3 ("push the pointer update down"): where the path needs no rotation, instead of
//! copying the parent only to change one child pointer, the writer stores the new child into the
//! existing parent with one `Release` store. That store is the step's **commit**: before it,
//! readers see the old subtree; after it, the new one; never a mix. Above the commit point only
//! writer-only summaries (size, gap augmentation) change in place, unless a rotation is needed higher up: rotations are
//! always built out of place (new nodes) and commit separately with one more store into their
//! parent (or the root), each commit preserving the set of intervals ("multiple rotations commit
//! separately; lock-free lookup is still safe", the paper's slides).
//!
//! Invariants that make every commit safe for readers:
//! 1. A published node's `start`/`end`/`value` never change; its child pointers change only by a
//!    commit store (the writer never stores into a published node otherwise).
//! 2. A commit replaces one subtree by another holding the same intervals except the ones this
//!    step inserts, removes or replaces. A deletion of a node with two children therefore builds
//!    the successor's removal (`delmin`) entirely out of place (`in_place = false`): pushing that
//!    update down would make the successor vanish before its copy replaces the deleted node.
//! 3. Unlinked nodes are never written again and are freed only after a grace period.
//!
//! Not for: the interval semantics (`map`/`alloc` decomposition lives in `bonsai.rs`).

use super::node::{null, Node};
use super::retire::Retired;
use super::tree::RawTree;
use crate::sync::Ordering;

/// One update of a `RawTree` (see the module doc).
pub(crate) struct Update<'t, V> {
    pub(super) tree: &'t RawTree<V>,
    /// Nodes of the current step not yet reachable by readers (at most a few per tree level).
    /// Its buffer is the writer's scratch, reused from update to update.
    pub(super) fresh: Vec<*mut Node<V>>,
    /// Published nodes this update unlinked.
    pub(super) retired: Retired<V>,
    /// Number of commit stores so far (for tests and documentation of multi-step updates).
    pub(super) commits: usize,
}

/// Dereferences a tree pointer the writer holds.
///
/// The returned reference must not outlive the update in which the pointer was obtained.
#[inline]
pub(super) fn node<'a, V>(n: *mut Node<V>) -> &'a Node<V> {
    debug_assert!(!n.is_null());
    // SAFETY: the writer only handles pointers to nodes that are reachable from the root, fresh,
    // or retired by this update; all stay allocated until the update's retired batch is dropped
    // after a grace period, i.e. after the update ends.
    unsafe { &*n }
}

impl<'t, V: Clone> Update<'t, V> {
    /// Starts an update of `tree`.
    ///
    /// # Safety
    /// The caller is the only writer of `tree` until the update is finished (it holds the
    /// writer lock for the update's lifetime), and frees the returned `Retired` batch only after
    /// a grace period covering every reader that could have loaded a pointer before `finish`.
    #[cfg(test)]
    pub(crate) unsafe fn new(tree: &'t RawTree<V>) -> Self {
        // SAFETY: forwarded from the caller.
        unsafe { Self::with_scratch(tree, Vec::new()) }
    }

    /// [`Update::new`] with an empty buffer to reuse for the fresh-node list (see
    /// [`Update::finish_with_scratch`]).
    ///
    /// # Safety
    /// As for [`Update::new`].
    pub(crate) unsafe fn with_scratch(tree: &'t RawTree<V>, fresh: Vec<*mut Node<V>>) -> Self {
        debug_assert!(fresh.is_empty());
        Self {
            tree,
            fresh,
            retired: Retired::new(),
            commits: 0,
        }
    }

    /// Ends the update: the batch of unlinked nodes, to be freed after a grace period.
    #[cfg(test)]
    pub(crate) fn finish(self) -> Retired<V> {
        self.finish_with_scratch().0
    }

    /// Ends the update: the batch of unlinked nodes, to be freed after a grace period, and the
    /// (empty) fresh-node buffer for the next update.
    pub(crate) fn finish_with_scratch(self) -> (Retired<V>, Vec<*mut Node<V>>) {
        debug_assert!(
            self.fresh.is_empty(),
            "an update ended with unpublished nodes"
        );
        (self.retired, self.fresh)
    }

    /// Commit stores done so far.
    #[cfg(test)]
    pub(crate) fn commits(&self) -> usize {
        self.commits
    }

    /// Allocates a fresh (unpublished) node.
    pub(super) fn fresh_node(
        &mut self,
        start: u64,
        end: u64,
        value: V,
        left: *mut Node<V>,
        right: *mut Node<V>,
    ) -> *mut Node<V> {
        let n = Node::alloc(start, end, value, left, right);
        self.fresh.push(n);
        n
    }

    /// Whether `n` was allocated by the current step and is not yet published.
    #[inline]
    pub(super) fn is_fresh(&self, n: *mut Node<V>) -> bool {
        self.fresh.contains(&n)
    }

    /// Unlinks `n` from the tree being built: freed now if it was never published, else after a
    /// grace period with the update's batch.
    pub(super) fn retire(&mut self, n: *mut Node<V>) {
        if let Some(i) = self.fresh.iter().position(|&f| f == n) {
            self.fresh.swap_remove(i);
            // SAFETY: `n` came from `Node::alloc` in this step and was never published, so no
            // reader can hold it, and it is no longer linked in the tree being built.
            drop(unsafe { Box::from_raw(n) });
        } else {
            self.retired.push(n);
        }
    }

    /// Records a commit: every fresh node is now reachable by readers and becomes immutable.
    pub(super) fn committed(&mut self) {
        self.fresh.clear();
        self.commits += 1;
    }

    /// Publishes `new` as the root if it differs from the current root (a commit).
    fn commit_root(&mut self, new: *mut Node<V>) {
        let old = self.tree.root.load(Ordering::Relaxed);
        if new != old {
            // Release: publishes the new subtree (fresh nodes' fields and child pointers written
            // before); pairs with the Acquire root loads in `RawTree::find`/`walk`.
            self.tree.root.store(new, Ordering::Release);
            self.committed();
        }
        debug_assert!(self.fresh.is_empty(), "a step ended with unpublished nodes");
    }

    /// Inserts `[start, end)` with `value`. Precondition: no node has key `start`.
    pub(crate) fn insert(&mut self, start: u64, end: u64, value: V) {
        let leaf = self.fresh_node(start, end, value, null(), null());
        let root = self.tree.root.load(Ordering::Relaxed);
        let new = self.ins(root, leaf, start);
        self.commit_root(new);
    }

    fn ins(&mut self, n: *mut Node<V>, leaf: *mut Node<V>, key: u64) -> *mut Node<V> {
        if n.is_null() {
            return leaf;
        }
        let cur = node(n);
        let (l, r) = (
            cur.left.load(Ordering::Relaxed),
            cur.right.load(Ordering::Relaxed),
        );
        debug_assert_ne!(key, cur.start, "insert of an existing key");
        if key < cur.start {
            let l = self.ins(l, leaf, key);
            self.join(n, l, r, true)
        } else {
            let r = self.ins(r, leaf, key);
            self.join(n, l, r, true)
        }
    }

    /// Removes the node with key `start`. Precondition: it exists.
    pub(crate) fn delete(&mut self, start: u64) {
        let root = self.tree.root.load(Ordering::Relaxed);
        let new = self.del(root, start);
        self.commit_root(new);
    }

    fn del(&mut self, n: *mut Node<V>, key: u64) -> *mut Node<V> {
        assert!(!n.is_null(), "delete of a missing key {key:#x}");
        let cur = node(n);
        let (l, r) = (
            cur.left.load(Ordering::Relaxed),
            cur.right.load(Ordering::Relaxed),
        );
        if key < cur.start {
            let l = self.del(l, key);
            self.join(n, l, r, true)
        } else if key > cur.start {
            let r = self.del(r, key);
            self.join(n, l, r, true)
        } else if l.is_null() {
            self.retire(n);
            r
        } else if r.is_null() {
            self.retire(n);
            l
        } else {
            // Replace `n` by a copy of its successor, removed from the right subtree out of
            // place (invariant 2): readers see either both old nodes or neither.
            let (m, r) = self.delmin(r);
            let min = node(m);
            let d = self.fresh_node(min.start, min.end, min.value.clone(), null(), null());
            self.retire(m);
            self.retire(n);
            self.join(d, l, r, true)
        }
    }

    /// Removes the minimum of the subtree at `n` (non-null) without touching published nodes:
    /// returns the (still linked, unchanged) minimum node and the new subtree.
    fn delmin(&mut self, n: *mut Node<V>) -> (*mut Node<V>, *mut Node<V>) {
        let cur = node(n);
        let (l, r) = (
            cur.left.load(Ordering::Relaxed),
            cur.right.load(Ordering::Relaxed),
        );
        if l.is_null() {
            return (n, r);
        }
        let (m, l) = self.delmin(l);
        (m, self.join(n, l, r, false))
    }

    /// Replaces the node with key `key` by a node `[start, end)` with `value`, keeping its
    /// children. Precondition: `key` exists and no other key lies between `key` and `start`
    /// (the tree order is unchanged). One commit.
    pub(crate) fn replace(&mut self, key: u64, start: u64, end: u64, value: V) {
        let root = self.tree.root.load(Ordering::Relaxed);
        let mut value = Some(value);
        let new = self.repl(root, key, start, end, &mut value);
        self.commit_root(new);
    }

    fn repl(
        &mut self,
        n: *mut Node<V>,
        key: u64,
        start: u64,
        end: u64,
        value: &mut Option<V>,
    ) -> *mut Node<V> {
        assert!(!n.is_null(), "replace of a missing key {key:#x}");
        let cur = node(n);
        let (l, r) = (
            cur.left.load(Ordering::Relaxed),
            cur.right.load(Ordering::Relaxed),
        );
        if key < cur.start {
            let l = self.repl(l, key, start, end, value);
            self.join(n, l, r, true)
        } else if key > cur.start {
            let r = self.repl(r, key, start, end, value);
            self.join(n, l, r, true)
        } else {
            let value = value.take().expect("replace reached its key twice");
            let c = self.fresh_node(start, end, value, l, r);
            self.retire(n);
            c
        }
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use crate::PAGE_SIZE as P;

    /// Runs one update on `tree`, then frees its batch at once (no readers in these tests).
    fn with_update<V: Clone>(tree: &RawTree<V>, f: impl FnOnce(&mut Update<'_, V>)) -> usize {
        // SAFETY: single-threaded test: no other writer, no reader.
        let mut up = unsafe { Update::new(tree) };
        f(&mut up);
        let commits = up.commits();
        drop(up.finish());
        commits
    }

    fn keys<V>(tree: &RawTree<V>) -> Vec<u64> {
        let mut out = Vec::new();
        // SAFETY: single-threaded test.
        let _ = unsafe {
            tree.walk(0, u64::MAX, &mut |n| {
                out.push(n.start);
                std::ops::ControlFlow::Continue(())
            })
        };
        out
    }

    #[test]
    fn ascending_inserts_stay_balanced_and_sorted() {
        let tree = RawTree::new();
        for k in 0..200u64 {
            with_update(&tree, |up| up.insert(k * 2 * P, (k * 2 + 1) * P, k));
            // SAFETY: single-threaded test.
            assert_eq!(unsafe { tree.check() }, k as usize + 1);
        }
        assert_eq!(keys(&tree), (0..200).map(|k| k * 2 * P).collect::<Vec<_>>());
    }

    #[test]
    fn deletes_of_inner_nodes_keep_balance_and_order() {
        let tree = RawTree::new();
        for k in 0..100u64 {
            with_update(&tree, |up| up.insert(k * 2 * P, (k * 2 + 1) * P, k));
        }
        let mut left: Vec<u64> = (0..100).map(|k| k * 2 * P).collect();
        // Delete in an order that hits nodes with two children.
        for i in (0..100u64).map(|i| (i * 37) % 100) {
            with_update(&tree, |up| up.delete(i * 2 * P));
            left.retain(|&k| k != i * 2 * P);
            // SAFETY: single-threaded test.
            assert_eq!(unsafe { tree.check() }, left.len());
            assert_eq!(keys(&tree), left);
        }
    }

    #[test]
    fn insert_without_rotation_commits_once() {
        let tree = RawTree::new();
        for k in [8u64, 4, 12] {
            with_update(&tree, |up| up.insert(k * P, (k + 1) * P, k));
        }
        // Below a balanced root, adding a leaf is one in-place store.
        assert_eq!(with_update(&tree, |up| up.insert(2 * P, 3 * P, 2)), 1);
        assert_eq!(
            with_update(&tree, |up| up.replace(12 * P, 12 * P, 13 * P, 99)),
            1
        );
        assert_eq!(with_update(&tree, |up| up.delete(2 * P)), 1);
    }

    #[test]
    fn replace_changes_bounds_and_value_in_one_commit() {
        let tree = RawTree::new();
        for k in 0..10u64 {
            with_update(&tree, |up| up.insert(k * 10 * P, (k * 10 + 5) * P, k));
        }
        assert_eq!(
            with_update(&tree, |up| up.replace(50 * P, 52 * P, 58 * P, 77)),
            1
        );
        // SAFETY: single-threaded test.
        let n = unsafe { tree.find(53 * P) }.expect("replaced interval");
        assert_eq!((n.start, n.end, n.value), (52 * P, 58 * P, 77));
        // SAFETY: single-threaded test.
        assert!(unsafe { tree.find(50 * P) }.is_none());
        // SAFETY: single-threaded test.
        assert_eq!(unsafe { tree.check() }, 10);
    }
}
