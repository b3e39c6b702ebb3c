//! Rebalancing: the paper's `mkBalanced` (Fig. 6) and its single and double rotations (Fig. 7-8),
//! built functionally, plus the in-place commit of §3.3.
//!
//! `join(n, l, r)` returns a balanced subtree holding `l`, `n`'s interval and `r`, where `l` and
//! `r` are balanced and differ in size from a balanced pair by at most one node (one insertion or
//! deletion below). Adams' bounded-balance condition with weights `size + 1`: a side may weigh
//! at most `DELTA` times the other; otherwise rotate toward the light side, by a single rotation
//! if the heavy child's inner grandchild weighs less than `RATIO` times its outer one, else by a
//! double rotation. (3, 2) is the parameter pair Hirai and Yamamoto proved to keep the invariant
//! for single insertions and deletions; the paper's `WEIGHT` check without the `+ 1` and its
//! "both sides non-empty" guard do not bound chains of three, so it is not used.
//!
//! Rotations never modify a published node: each node they need with new children is either
//! fresh (reused in place: "only nodes created by the current update are mutable") or copied and
//! retired (`remake`). The rotated subtree is fresh and is published by the caller's commit.
//!
//! Not for: choosing where to commit (the caller says whether an in-place store is allowed).

use super::node::Node;
use super::tree::{is_balanced, RATIO};
use super::update::Update;
use crate::contract::MapError;
use crate::sync::Ordering;

impl<V: Clone> Update<'_, V> {
    /// The balanced subtree of `l`, `n`'s interval and `r` (see the module doc). Fails only
    /// with `OutOfMemory` from a node allocation, which comes before any in-place commit.
    ///
    /// If no rotation is needed and `n` is published with exactly one child changed, `in_place`
    /// allows committing by storing that child into `n` (the §3.3 optimisation); otherwise `n`
    /// is reused when fresh, kept when nothing changed, or copied.
    pub(super) fn join(
        &mut self,
        n: *mut Node<V>,
        l: *mut Node<V>,
        r: *mut Node<V>,
        in_place: bool,
    ) -> Result<*mut Node<V>, MapError> {
        let (sl, sr) = (self.size_of(l), self.size_of(r));
        if !is_balanced(sl, sr) {
            return self.rotate_left(n, l, r);
        }
        if !is_balanced(sr, sl) {
            return self.rotate_right(n, l, r);
        }
        if self.is_fresh(n) {
            return self.remake(n, l, r);
        }
        let cur = self.node(n);
        let (ol, or) = (
            cur.left.load(Ordering::Relaxed),
            cur.right.load(Ordering::Relaxed),
        );
        if ol == l && or == r {
            // Nothing to publish here (any change below was committed in place already).
            self.resummarize(cur, l, r);
            return Ok(n);
        }
        if in_place && (ol == l || or == r) {
            // Release: the commit of this step; publishes the fresh nodes of the new child
            // subtree; pairs with the Acquire child loads in `RawTree::find`/`walk`.
            if ol != l {
                cur.left.store(l, Ordering::Release);
            } else {
                cur.right.store(r, Ordering::Release);
            }
            // Counted at once: from the store on, an unwinding update must not free what it made.
            self.committed();
            self.resummarize(cur, l, r);
            return Ok(n);
        }
        self.remake(n, l, r)
    }

    /// A node with `n`'s interval and value and children `l`, `r`: `n` itself if it is fresh,
    /// else a fresh copy (and `n` is retired). No balancing.
    pub(super) fn remake(
        &mut self,
        n: *mut Node<V>,
        l: *mut Node<V>,
        r: *mut Node<V>,
    ) -> Result<*mut Node<V>, MapError> {
        let cur = self.node(n);
        if self.is_fresh(n) {
            // Relaxed: `n` is not reachable by readers; the commit that publishes it is a Release
            // store ordered after these.
            cur.left.store(l, Ordering::Relaxed);
            cur.right.store(r, Ordering::Relaxed);
            self.resummarize(cur, l, r);
            Ok(n)
        } else {
            // A clone of the caller's value: before the step's commit (see `Update::before_commit`).
            self.before_commit();
            let c = self.fresh_node(cur.start, cur.end, cur.value.clone(), l, r)?;
            self.retire(n);
            Ok(c)
        }
    }

    /// `r` is too heavy: single or double left rotation (Fig. 3, 7, 8(a)), out of place.
    fn rotate_left(
        &mut self,
        n: *mut Node<V>,
        l: *mut Node<V>,
        r: *mut Node<V>,
    ) -> Result<*mut Node<V>, MapError> {
        let rn = self.node(r);
        let (rl, rr) = (
            rn.left.load(Ordering::Relaxed),
            rn.right.load(Ordering::Relaxed),
        );
        if self.size_of(rl) + 1 < RATIO * (self.size_of(rr) + 1) {
            let a = self.remake(n, l, rl)?;
            self.remake(r, a, rr)
        } else {
            let rln = self.node(rl);
            let (rll, rlr) = (
                rln.left.load(Ordering::Relaxed),
                rln.right.load(Ordering::Relaxed),
            );
            let a = self.remake(n, l, rll)?;
            let c = self.remake(r, rlr, rr)?;
            self.remake(rl, a, c)
        }
    }

    /// `l` is too heavy: the mirror image of [`Update::rotate_left`].
    fn rotate_right(
        &mut self,
        n: *mut Node<V>,
        l: *mut Node<V>,
        r: *mut Node<V>,
    ) -> Result<*mut Node<V>, MapError> {
        let ln = self.node(l);
        let (ll, lr) = (
            ln.left.load(Ordering::Relaxed),
            ln.right.load(Ordering::Relaxed),
        );
        if self.size_of(lr) + 1 < RATIO * (self.size_of(ll) + 1) {
            let a = self.remake(n, lr, r)?;
            self.remake(l, ll, a)
        } else {
            let lrn = self.node(lr);
            let (lrl, lrr) = (
                lrn.left.load(Ordering::Relaxed),
                lrn.right.load(Ordering::Relaxed),
            );
            let a = self.remake(n, lrr, r)?;
            let c = self.remake(l, ll, lrl)?;
            self.remake(lr, c, a)
        }
    }
}
