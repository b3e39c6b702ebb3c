//! The Bonsai writer: one update's context and its three primitives (insert, delete, replace).
//!
//! An `Update` exists only while the writer lock is held (its constructors are `unsafe` and say
//! so): it is the writer's token, and the helpers that read nodes by raw pointer are its
//! methods. It tracks:
//! - `fresh`: nodes not yet reachable by readers (made by the current step; in atomic mode by
//!   the whole update). Only these are mutated freely (children, summary), with `Relaxed`
//!   stores: they become visible through the one `Release` store that commits them.
//! - `retired`: published nodes unlinked by this update, freed together after a grace period;
//!   `discard`: nodes made and replaced before they were ever published (freed with them).
//!
//! Each primitive rebuilds the search path bottom-up, functionally, like the paper's `dolInsert`
//! (Fig. 5) with `mkBalanced` (Fig. 6, in `balance.rs`), plus the in-place optimisation of
//! ASPLOS'12 §3.3 ("push the pointer update down"): where the path needs no rotation, instead of
//! copying the parent only to change one child pointer, the writer stores the new child into the
//! existing parent with one `Release` store. That store is the step's **commit**: before it,
//! readers see the old subtree; after it, the new one; never a mix.
//!
//! One commit per step, after everything else (panic safety). A step changes the size of every
//! subtree on its path by exactly +1 (insert), -1 (delete) or 0 (replace), and rotations keep
//! subtree sizes, so whether `join` rotates at a node is known on the way down
//! (`will_rotate`). Below a node that will rotate, in-place stores are disabled: that part of
//! the path is built out of place and the rotated subtree is committed by one store above it
//! (or the root store). Above the commit only writer-only summaries change in place. So a step
//! makes all its nodes and clones all its values before its single commit, and nothing of the
//! caller's code runs after it (`before_commit` asserts this). In atomic mode (multi-step
//! `map`s) no step stores at all: the root built by the last step is stored by `finish`.
//! Outside atomic mode an update is one step: `begin_step` refuses a second one in every build
//! (it would be a second commit; `decompose.rs` decides atomic mode from a count of the steps).
//! An update that unwinds is `abandon`ed: nothing was published, its fresh and discarded
//! nodes are returned for deferred freeing, and its retired list (still linked) is dropped
//! without freeing. Published summaries were not written before a commit, so the tree is as it
//! was.
//!
//! Invariants that make every commit safe for readers:
//! 1. A published node's `start`/`end`/`value` never change; its child pointers change only by a
//!    commit store (the writer never stores into a published node otherwise).
//! 2. A commit replaces one subtree by another holding the same intervals except the ones this
//!    step (or, atomic, update) inserts, removes or replaces. A deletion of a node with two
//!    children therefore builds the successor's removal (`delmin`) entirely out of place: pushing
//!    that update down would make the successor vanish before its copy replaces the deleted node.
//! 3. Unlinked nodes are never written again and are freed only after a grace period.
//!
//! Not for: the interval semantics (`map`'s decomposition into steps is `decompose.rs`).

use super::node::{null, summary_of, Node};
use super::retire::Retired;
use super::summary::Summary;
use super::tree::{is_balanced, RawTree};
use crate::contract::MapError;
use crate::fault::AllocBudget;
use crate::sync::Ordering;

/// One update of a `RawTree` (see the module doc). It is the writer's token: it can only be
/// made by the `unsafe` constructors, whose contract is that the writer lock is held, so its
/// safe helpers ([`Update::node`], [`Update::summary_of`], [`Update::size_of`]) may read the
/// nodes the update handles.
pub(crate) struct Update<'t, V> {
    pub(super) tree: &'t RawTree<V>,
    /// The root as this update has built it (published already, except in atomic mode).
    root: *mut Node<V>,
    /// Atomic mode (see the module doc): nothing is published before [`Update::finish`].
    atomic: bool,
    /// Nodes of the current step (in atomic mode: of the whole update) not yet reachable by
    /// readers. Its buffer is the writer's scratch, reused from update to update.
    pub(super) fresh: Vec<*mut Node<V>>,
    /// Nodes this update made and then replaced before they were ever published.
    discard: Vec<*mut Node<V>>,
    /// Published nodes this update unlinked.
    pub(super) retired: Retired<V>,
    /// Number of commit stores so far.
    pub(super) commits: usize,
    /// `commits` when the current step began: a step makes no node after its commit.
    step_start: usize,
    /// Steps begun so far. Outside atomic mode at most one (`begin_step` checks it): a second
    /// step would be a second commit, and readers would see the update half applied.
    pub(super) steps: usize,
    /// The map's allocation-failure test hook (`fault.rs`), if any.
    faults: Option<&'t AllocBudget>,
}

impl<'t, V> Update<'t, V> {
    /// Dereferences a tree pointer this update handles. The reference must not outlive the
    /// update.
    #[inline]
    pub(crate) fn node(&self, n: *mut Node<V>) -> &'t Node<V> {
        debug_assert!(!n.is_null());
        // SAFETY: an `Update` exists only while the writer lock is held (its constructors'
        // contract), and the writer only handles pointers to nodes that are reachable from the
        // root, fresh, or retired by this update; all stay allocated until the update's retired
        // batch is dropped after a grace period, i.e. after the update ends.
        unsafe { &*n }
    }

    /// The stored summary of the subtree at `n` (`None` for null).
    #[inline]
    pub(super) fn summary_of(&self, n: *mut Node<V>) -> Option<Summary> {
        // SAFETY: the writer lock is held (this token exists) and `n` is null or a node this
        // update handles (see `node`).
        unsafe { summary_of(n) }
    }

    /// The size of the subtree at `n` (0 for null).
    #[inline]
    pub(super) fn size_of(&self, n: *mut Node<V>) -> usize {
        self.summary_of(n).map_or(0, |s| s.size)
    }

    /// Recomputes `n`'s summary from its interval and the subtrees `l` and `r`, which are its
    /// children by the time the update ends.
    #[inline]
    pub(super) fn resummarize(&self, n: &Node<V>, l: *mut Node<V>, r: *mut Node<V>) {
        n.set_summary(Summary::join(
            n.start,
            n.end,
            self.summary_of(l),
            self.summary_of(r),
        ));
    }

    /// Whether a node with children `l` and `r` must rotate once the subtree on the `left`
    /// side (else the right) has changed by `delta` nodes. Exact before the step: rotations
    /// below keep subtree sizes, so a step changes every size on its path by exactly `delta`.
    fn will_rotate(&self, l: *mut Node<V>, r: *mut Node<V>, left: bool, delta: isize) -> bool {
        let (mut sl, mut sr) = (self.size_of(l), self.size_of(r));
        if left {
            sl = sl.wrapping_add_signed(delta);
        } else {
            sr = sr.wrapping_add_signed(delta);
        }
        !is_balanced(sl, sr) || !is_balanced(sr, sl)
    }

    /// Panics if the current step already committed. Called before anything that runs the
    /// caller's code (a value's `Clone`) or makes a node: a step's commit is its last act, so a
    /// panic in the caller's code never leaves a half-published step (module doc).
    #[inline]
    pub(super) fn before_commit(&self) {
        assert_eq!(
            self.commits, self.step_start,
            "a Bonsai update step made a node after its commit"
        );
    }
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
        unsafe { Self::with_scratch(tree, Vec::new(), None) }
    }

    /// [`Update::new`] with an empty buffer to reuse for the fresh-node list (see
    /// [`Update::finish_with_scratch`]) and the map's allocation-failure hook.
    ///
    /// # Safety
    /// As for [`Update::new`].
    pub(crate) unsafe fn with_scratch(
        tree: &'t RawTree<V>,
        fresh: Vec<*mut Node<V>>,
        faults: Option<&'t AllocBudget>,
    ) -> Self {
        debug_assert!(fresh.is_empty());
        Self {
            tree,
            // Relaxed: the writer reads its own root.
            root: tree.root.load(Ordering::Relaxed),
            atomic: false,
            fresh,
            discard: Vec::new(),
            retired: Retired::new(),
            commits: 0,
            step_start: 0,
            steps: 0,
            faults,
        }
    }

    /// Switches to atomic mode before the first step: every step is built out of place and
    /// nothing is published until [`Update::finish_with_scratch`] stores the new root, so the
    /// update is one commit for readers, and a panic in any step leaves the tree untouched.
    /// Required for an update of more than one step (`begin_step` refuses a second step
    /// otherwise).
    pub(crate) fn set_atomic(&mut self) {
        assert!(
            self.steps == 0,
            "a Bonsai update switched to atomic mode after its first step"
        );
        debug_assert!(self.commits == 0 && self.fresh.is_empty());
        self.atomic = true;
    }

    /// Ends the update: the batch of unlinked nodes, to be freed after a grace period.
    #[cfg(test)]
    pub(crate) fn finish(self) -> Retired<V> {
        self.finish_with_scratch().0
    }

    /// Ends the update (in atomic mode: publishes it, one root store): the batch of nodes to
    /// free after a grace period, and the (empty) fresh-node buffer for the next update. Runs
    /// none of the caller's code.
    pub(crate) fn finish_with_scratch(mut self) -> (Retired<V>, Vec<*mut Node<V>>) {
        if self.atomic {
            if self.root != self.tree.root.load(Ordering::Relaxed) {
                // Release: publishes every node of the update; pairs with the Acquire root
                // loads in `RawTree::find`/`walk`.
                self.tree.root.store(self.root, Ordering::Release);
                self.committed();
            }
            self.fresh.clear();
        }
        debug_assert!(
            self.fresh.is_empty(),
            "an update ended with unpublished nodes"
        );
        // Never published; freed with the batch (their values' `Drop` is the caller's code,
        // which runs on the reclaimer, not here).
        for n in self.discard.drain(..) {
            self.retired.push(n);
        }
        (self.retired, self.fresh)
    }

    /// Ends an update that is unwinding (a value's `Clone` or `Drop` panicked in a step) or
    /// that failed (a node allocation failed, which also happens before its step's commit): no
    /// step committed (a step commits last, atomic mode at `finish`), so the tree is exactly as
    /// before the update. Returns the nodes the update made (never published) for the caller
    /// to free; the published nodes it meant to retire are still linked and are kept.
    ///
    /// Aborts if a step did commit (a broken invariant: its retired nodes may be linked or
    /// not, so neither freeing nor keeping them is safe).
    pub(crate) fn abandon(mut self) -> Retired<V> {
        if self.commits != 0 {
            // Unwinding already: a panic here would abort anyway; say why first.
            eprintln!("aspace-map: a Bonsai update unwound after a commit; aborting");
            std::process::abort();
        }
        // Debug builds: nothing this update made is reachable from the published root.
        #[cfg(debug_assertions)]
        {
            let mut made: Vec<_> = self.fresh.iter().chain(&self.discard).copied().collect();
            made.sort();
            let mut stack = vec![self.tree.root.load(Ordering::Relaxed)];
            while let Some(x) = stack.pop() {
                if !x.is_null() {
                    assert!(
                        made.binary_search(&x).is_err(),
                        "an abandoned node is published"
                    );
                    let (l, r) = self.children(x);
                    stack.extend([l, r]);
                }
            }
        }
        self.retired.disown();
        let mut garbage = Retired::new();
        for n in self.fresh.drain(..).chain(self.discard.drain(..)) {
            garbage.push(n);
        }
        garbage
    }

    /// Commit stores done so far.
    #[cfg(test)]
    pub(crate) fn commits(&self) -> usize {
        self.commits
    }

    /// Allocates a fresh (unpublished) node; on failure (`OutOfMemory`, `value` dropped) the
    /// step has not committed (`before_commit`), so the caller abandons the update.
    pub(super) fn fresh_node(
        &mut self,
        start: u64,
        end: u64,
        value: V,
        left: *mut Node<V>,
        right: *mut Node<V>,
    ) -> Result<*mut Node<V>, MapError> {
        self.before_commit();
        let sum = Summary::join(start, end, self.summary_of(left), self.summary_of(right));
        let n = Node::try_alloc(start, end, value, left, right, sum, self.faults)?;
        self.fresh.push(n);
        Ok(n)
    }

    /// Whether `n` is not yet published (made by the current step; in atomic mode, by this
    /// update).
    #[inline]
    pub(super) fn is_fresh(&self, n: *mut Node<V>) -> bool {
        self.fresh.contains(&n)
    }

    /// Unlinks `n` from the tree being built: a never-published node is discarded, a published
    /// one joins the update's batch. Both are freed after a grace period: the writer never
    /// drops a value itself.
    pub(super) fn retire(&mut self, n: *mut Node<V>) {
        if let Some(i) = self.fresh.iter().position(|&f| f == n) {
            self.fresh.swap_remove(i);
            self.discard.push(n);
        } else {
            self.retired.push(n);
        }
    }

    /// Records a commit: every fresh node is now reachable by readers and becomes immutable.
    pub(super) fn committed(&mut self) {
        self.fresh.clear();
        self.commits += 1;
    }

    /// Begins a step (see [`Update::before_commit`]); returns whether it may commit in place.
    ///
    /// Panics, in every build and before the step makes anything, if this is the second step
    /// of an update not in atomic mode: its commit would be the update's second, and readers
    /// between the two would see the update half applied (issue 17: `map` over a free head and
    /// one whole interval was published as an insert and then a delete). The check makes "at
    /// most one commit outside atomic mode" a property of `Update`, not of each caller's
    /// bookkeeping; `map_range` decides atomic mode from the same plan that it then runs.
    #[inline]
    fn begin_step(&mut self) -> bool {
        assert!(
            self.atomic || self.steps == 0,
            "a second step of a Bonsai update not in atomic mode (a second commit)"
        );
        self.steps += 1;
        self.step_start = self.commits;
        !self.atomic
    }

    /// Ends a step whose new root is `new`: publishes it if it changed (a commit), except in
    /// atomic mode, where it only becomes the root the next step starts from.
    fn commit_root(&mut self, new: *mut Node<V>) {
        if new != self.root {
            self.root = new;
            if !self.atomic {
                // Release: publishes the new subtree (fresh nodes' fields and child pointers
                // written before); pairs with the Acquire root loads in `RawTree::find`/`walk`.
                self.tree.root.store(new, Ordering::Release);
                self.committed();
            }
        }
        debug_assert!(
            self.atomic || self.fresh.is_empty(),
            "a step ended with unpublished nodes"
        );
        debug_assert!(
            self.commits <= self.step_start + 1,
            "a step committed twice"
        );
    }

    /// The children of `n` as the writer sees them.
    #[inline]
    fn children(&self, n: *mut Node<V>) -> (*mut Node<V>, *mut Node<V>) {
        let cur = self.node(n);
        // Relaxed: the writer reading its own tree.
        (
            cur.left.load(Ordering::Relaxed),
            cur.right.load(Ordering::Relaxed),
        )
    }

    /// Inserts `[start, end)` with `value`. Precondition: no node has key `start`.
    /// `OutOfMemory`: nothing was committed; the caller abandons the update.
    pub(crate) fn insert(&mut self, start: u64, end: u64, value: V) -> Result<(), MapError> {
        let may_store = self.begin_step();
        let leaf = self.fresh_node(start, end, value, null(), null())?;
        let new = self.ins(self.root, leaf, start, may_store)?;
        self.commit_root(new);
        Ok(())
    }

    /// `may_store`: no node above `n` rotates in this step, so `n`'s join may commit in place;
    /// below a node that will rotate, everything is rebuilt out of place and committed by one
    /// store above the rotation (the step's single commit comes after all its clones).
    fn ins(
        &mut self,
        n: *mut Node<V>,
        leaf: *mut Node<V>,
        key: u64,
        may_store: bool,
    ) -> Result<*mut Node<V>, MapError> {
        if n.is_null() {
            return Ok(leaf);
        }
        let cur = self.node(n);
        let (l, r) = self.children(n);
        debug_assert_ne!(key, cur.start, "insert of an existing key");
        let left = key < cur.start;
        let below = may_store && !self.will_rotate(l, r, left, 1);
        if left {
            let l = self.ins(l, leaf, key, below)?;
            self.join(n, l, r, may_store)
        } else {
            let r = self.ins(r, leaf, key, below)?;
            self.join(n, l, r, may_store)
        }
    }

    /// Removes the node with key `start`. Precondition: it exists.
    /// `OutOfMemory`: nothing was committed; the caller abandons the update.
    pub(crate) fn delete(&mut self, start: u64) -> Result<(), MapError> {
        let may_store = self.begin_step();
        let new = self.del(self.root, start, may_store)?;
        self.commit_root(new);
        Ok(())
    }

    fn del(
        &mut self,
        n: *mut Node<V>,
        key: u64,
        may_store: bool,
    ) -> Result<*mut Node<V>, MapError> {
        assert!(!n.is_null(), "delete of a missing key {key:#x}");
        let cur = self.node(n);
        let (l, r) = self.children(n);
        if key != cur.start {
            let left = key < cur.start;
            let below = may_store && !self.will_rotate(l, r, left, -1);
            if left {
                let l = self.del(l, key, below)?;
                self.join(n, l, r, may_store)
            } else {
                let r = self.del(r, key, below)?;
                self.join(n, l, r, may_store)
            }
        } else if l.is_null() {
            self.retire(n);
            Ok(r)
        } else if r.is_null() {
            self.retire(n);
            Ok(l)
        } else {
            // Replace `n` by a copy of its successor, removed from the right subtree out of
            // place (invariant 2): readers see either both old nodes or neither.
            let (m, r) = self.delmin(r)?;
            let min = self.node(m);
            self.before_commit();
            let d = self.fresh_node(min.start, min.end, min.value.clone(), null(), null())?;
            self.retire(m);
            self.retire(n);
            self.join(d, l, r, may_store)
        }
    }

    /// Removes the minimum of the subtree at `n` (non-null) without touching published nodes:
    /// returns the (still linked, unchanged) minimum node and the new subtree.
    #[allow(clippy::type_complexity)]
    fn delmin(&mut self, n: *mut Node<V>) -> Result<(*mut Node<V>, *mut Node<V>), MapError> {
        let (l, r) = self.children(n);
        if l.is_null() {
            return Ok((n, r));
        }
        let (m, l) = self.delmin(l)?;
        Ok((m, self.join(n, l, r, false)?))
    }

    /// Replaces the node with key `key` by a node `[start, end)` with `value`, keeping its
    /// children. Precondition: `key` exists and no other key lies between `key` and `start`
    /// (the tree order is unchanged). One commit. `OutOfMemory`: nothing was committed; the
    /// caller abandons the update.
    pub(crate) fn replace(
        &mut self,
        key: u64,
        start: u64,
        end: u64,
        value: V,
    ) -> Result<(), MapError> {
        let may_store = self.begin_step();
        let mut value = Some(value);
        let new = self.repl(self.root, key, start, end, &mut value, may_store)?;
        self.commit_root(new);
        Ok(())
    }

    fn repl(
        &mut self,
        n: *mut Node<V>,
        key: u64,
        start: u64,
        end: u64,
        value: &mut Option<V>,
        may_store: bool,
    ) -> Result<*mut Node<V>, MapError> {
        assert!(!n.is_null(), "replace of a missing key {key:#x}");
        let cur = self.node(n);
        let (l, r) = self.children(n);
        // Sizes do not change: no rotation anywhere, so `may_store` passes down unchanged.
        if key < cur.start {
            let l = self.repl(l, key, start, end, value, may_store)?;
            self.join(n, l, r, may_store)
        } else if key > cur.start {
            let r = self.repl(r, key, start, end, value, may_store)?;
            self.join(n, l, r, may_store)
        } else {
            let value = value.take().expect("replace reached its key twice");
            let c = self.fresh_node(start, end, value, l, r)?;
            self.retire(n);
            Ok(c)
        }
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use crate::PAGE_SIZE as P;

    /// Runs one update on `tree`, then frees its batch at once (no readers in these tests).
    fn with_update<V: Clone>(
        tree: &RawTree<V>,
        f: impl FnOnce(&mut Update<'_, V>) -> Result<(), MapError>,
    ) -> usize {
        // SAFETY: single-threaded test: no other writer, no reader.
        let mut up = unsafe { Update::new(tree) };
        f(&mut up).unwrap();
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
    fn a_second_step_outside_atomic_mode_panics_before_it_builds_anything() {
        let tree = RawTree::new();
        for k in [8u64, 4, 12] {
            with_update(&tree, |up| up.insert(k * P, (k + 1) * P, k));
        }
        // SAFETY: single-threaded test: no other writer, no reader.
        let mut up = unsafe { Update::new(&tree) };
        up.insert(2 * P, 3 * P, 2).unwrap();
        let second =
            std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| up.insert(6 * P, 7 * P, 6)));
        assert!(second.is_err(), "a second commit outside atomic mode");
        assert_eq!(up.commits(), 1);
        drop(up.finish());
        assert_eq!(keys(&tree), [2 * P, 4 * P, 8 * P, 12 * P]);
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
