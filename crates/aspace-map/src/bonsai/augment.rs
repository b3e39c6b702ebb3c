//! Gap augmentation of the Bonsai tree: the O(log n) first-fit search of `alloc` over the
//! per-subtree summaries (the `Summary` type and its `join` live in `summary.rs`, below the
//! node; this file reads nodes).
//!
//! Every node stores a `Summary` of its subtree: its size (Adams' weight, for balancing) and,
//! for `alloc`, the lowest start (`min_start`), the highest end (`max_end`) and the largest gap
//! *strictly inside* the subtree (`max_gap`: the largest distance between the end of one
//! interval of the subtree and the start of the next one of the subtree). It is the same idea as
//! Linux's augmented rbtree `rb_subtree_gap` (since 3.8) and the maple tree's gap tracking,
//! expressed with only node-local inputs, so a summary is a function of the node's interval and
//! its children's summaries (`Summary::join`):
//!
//! ```text
//! min_start = left ? left.min_start : start        max_end = right ? right.max_end : end
//! max_gap   = max(left.max_gap, right.max_gap, start - left.max_end, right.min_start - end)
//! ```
//!
//! Maintenance (see `node.rs`, `balance.rs`): like `size`, the summary is writer-only. Every
//! update rebuilds its path bottom-up through `join`/`remake`, which recompute the summary of
//! each node on the path from its (already final) children: in place in published nodes (readers
//! never read summaries, so in-place writes cannot be observed), or at construction for new
//! nodes (leaves, copies, rotations). So the cost is O(1) per node on the path, O(log n) per
//! update, and `RawTree::check` recomputes every summary from scratch after each step of the
//! property tests.
//!
//! Search ([`first_fit`]): the lowest `a` such that `[a, a + len)` lies inside `within` and
//! overlaps no interval. The free gaps in address order are: below the first interval
//! (`[0, root.min_start)`), the gaps inside the tree (in-order), and above the last interval
//! (`[root.max_end, KEY_SPACE_END)`). The lowest fitting address is the clipped start of the first
//! gap (in address order) whose part inside `within` holds `len` bytes. Inside the tree, the
//! search visits a subtree only if its `max_gap >= len` and its span `[min_start, max_end]`
//! clipped to `within` holds `len` bytes, then tries, in address order: the left subtree, the gap
//! between the left subtree and the node, the gap between the node and the right subtree, the
//! right subtree.
//!
//! [`last_fit_locked`] is the mirror image, Linux's top-down `unmapped_area_topdown`: the
//! highest `a` such that `[a, a + len)` lies inside `within` and is free, trying the gaps in
//! descending address order (above the last interval, then inside the tree right subtree first,
//! then below the first interval) and, inside a fitting gap, its highest `len` bytes below
//! `within.end`. Its bound is first-fit's by symmetry.
//!
//! Complexity: O(log n). A subtree whose span lies entirely inside `within` and whose
//! `max_gap >= len` always contains an answer, so a visited subtree that yields none straddles
//! `within.start` or `within.end`; those lie on at most two root-to-leaf paths (O(height)), and
//! the successful descent is one more path, on which each left child is either pruned in O(1) or
//! contains the answer. The tree is weight-balanced, so the height is O(log n).
//!
//! Not for: readers (they never read summaries), nor any policy but lowest-fit and highest-fit.

use super::node::{summary_of, Node};
use crate::contract::{Interval, KEY_SPACE_END};
use crate::sync::Ordering;

/// The lowest address of `within` where the free gap `[gap_start, gap_end)` holds `len` bytes.
#[inline]
fn clip_fit(gap_start: u64, gap_end: u64, within: Interval, len: u64) -> Option<u64> {
    let a = gap_start.max(within.start);
    let e = gap_end.min(within.end);
    (e >= a && e - a >= len).then_some(a)
}

/// The lowest `a` with `[a, a + len)` inside `within` and free, in the tree rooted at `root`
/// (see the module doc for the search and its O(log n) bound).
///
/// # Safety
/// The caller holds the tree's writer lock (summaries are writer-only) and `root` is the
/// tree's root (null or a live node); `len > 0`.
pub(crate) unsafe fn first_fit_locked<V>(
    root: *mut Node<V>,
    within: Interval,
    len: u64,
) -> Option<u64> {
    // SAFETY: per the contract.
    let Some(all) = (unsafe { summary_of(root) }) else {
        return clip_fit(0, KEY_SPACE_END, within, len);
    };
    clip_fit(0, all.min_start, within, len)
        // SAFETY: per the contract; `root` is not null here.
        .or_else(|| unsafe { inner_fit(root, within, len) })
        .or_else(|| clip_fit(all.max_end, KEY_SPACE_END, within, len))
}

/// The lowest fitting address in the gaps strictly inside the (non-null) subtree at `n`.
///
/// # Safety
/// As for [`first_fit_locked`]; `n` is a live node of the tree.
unsafe fn inner_fit<V>(n: *mut Node<V>, within: Interval, len: u64) -> Option<u64> {
    // SAFETY: per the contract, `n` is live and the writer lock keeps it so.
    let cur = unsafe { &*n };
    let s = cur.summary();
    if s.max_gap < len || clip_fit(s.min_start, s.max_end, within, len).is_none() {
        return None;
    }
    // Relaxed: the writer reading its own tree under the writer lock.
    let l = cur.left.load(Ordering::Relaxed);
    let r = cur.right.load(Ordering::Relaxed);
    // SAFETY: children of a live node of the tree are null or live; the writer lock is held.
    if let Some(ls) = unsafe { summary_of(l) } {
        // SAFETY: as above; `l` is not null.
        if let Some(a) = unsafe { inner_fit(l, within, len) } {
            return Some(a);
        }
        if let Some(a) = clip_fit(ls.max_end, cur.start, within, len) {
            return Some(a);
        }
    }
    // SAFETY: as above.
    if let Some(rs) = unsafe { summary_of(r) } {
        if let Some(a) = clip_fit(cur.end, rs.min_start, within, len) {
            return Some(a);
        }
        // SAFETY: as above; `r` is not null.
        return unsafe { inner_fit(r, within, len) };
    }
    None
}

/// The highest address `a` with `[a, a + len)` inside both `within` and the free gap
/// `[gap_start, gap_end)`.
#[inline]
fn clip_fit_high(gap_start: u64, gap_end: u64, within: Interval, len: u64) -> Option<u64> {
    let a = gap_start.max(within.start);
    let e = gap_end.min(within.end);
    (e >= a && e - a >= len).then(|| e - len)
}

/// The highest `a` with `[a, a + len)` inside `within` and free, in the tree rooted at `root`
/// (the module doc: first-fit's search in descending address order).
///
/// # Safety
/// As for [`first_fit_locked`].
pub(crate) unsafe fn last_fit_locked<V>(
    root: *mut Node<V>,
    within: Interval,
    len: u64,
) -> Option<u64> {
    // SAFETY: per the contract.
    let Some(all) = (unsafe { summary_of(root) }) else {
        return clip_fit_high(0, KEY_SPACE_END, within, len);
    };
    clip_fit_high(all.max_end, KEY_SPACE_END, within, len)
        // SAFETY: per the contract; `root` is not null here.
        .or_else(|| unsafe { inner_fit_high(root, within, len) })
        .or_else(|| clip_fit_high(0, all.min_start, within, len))
}

/// The highest fitting address in the gaps strictly inside the (non-null) subtree at `n`.
///
/// # Safety
/// As for [`first_fit_locked`]; `n` is a live node of the tree.
unsafe fn inner_fit_high<V>(n: *mut Node<V>, within: Interval, len: u64) -> Option<u64> {
    // SAFETY: per the contract, `n` is live and the writer lock keeps it so.
    let cur = unsafe { &*n };
    let s = cur.summary();
    if s.max_gap < len || clip_fit(s.min_start, s.max_end, within, len).is_none() {
        return None;
    }
    // Relaxed: the writer reading its own tree under the writer lock.
    let l = cur.left.load(Ordering::Relaxed);
    let r = cur.right.load(Ordering::Relaxed);
    // SAFETY: children of a live node of the tree are null or live; the writer lock is held.
    if let Some(rs) = unsafe { summary_of(r) } {
        // SAFETY: as above; `r` is not null.
        if let Some(a) = unsafe { inner_fit_high(r, within, len) } {
            return Some(a);
        }
        if let Some(a) = clip_fit_high(cur.end, rs.min_start, within, len) {
            return Some(a);
        }
    }
    // SAFETY: as above.
    if let Some(ls) = unsafe { summary_of(l) } {
        if let Some(a) = clip_fit_high(ls.max_end, cur.start, within, len) {
            return Some(a);
        }
        // SAFETY: as above; `l` is not null.
        return unsafe { inner_fit_high(l, within, len) };
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn clip_fit_respects_both_bounds_of_within() {
        let w = Interval { start: 8, end: 16 };
        assert_eq!(clip_fit(0, 100, w, 8), Some(8));
        assert_eq!(clip_fit(0, 100, w, 9), None);
        assert_eq!(clip_fit(10, 14, w, 4), Some(10));
        assert_eq!(clip_fit(0, 8, w, 1), None, "gap ends where within starts");
        assert_eq!(clip_fit(20, 30, w, 1), None, "gap past within");
    }

    #[test]
    fn clip_fit_high_takes_the_top_of_the_clipped_gap() {
        let w = Interval { start: 8, end: 16 };
        assert_eq!(clip_fit_high(0, 100, w, 8), Some(8));
        assert_eq!(clip_fit_high(0, 100, w, 3), Some(13));
        assert_eq!(clip_fit_high(0, 100, w, 9), None);
        assert_eq!(clip_fit_high(10, 14, w, 4), Some(10));
        assert_eq!(
            clip_fit_high(0, 8, w, 1),
            None,
            "gap ends where within starts"
        );
    }
}
