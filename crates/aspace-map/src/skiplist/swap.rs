//! Swap (SOSP'25 §4.2-§4.3, Fig. 8 and Fig. 18 `Swap`): replace the locked old nodes by new
//! nodes in one step visible to queries, with collective height decrement and increment.
//!
//! Given the locked nodes `[pred, old...]` of a range `[s, e)` and the new nodes (sorted,
//! disjoint, inside the span the old nodes covered):
//! 1. *collective height decrement*: mark every upper link of every old node DELETED (top-down);
//! 2. chain the new nodes at every level (each level's last new node is linked to that level's
//!    successor after step 3); their level-0 links carry LOCKED (see "closed cases");
//! 3. `find(s, e)`: the traversal unlinks every marked old node from the upper levels (helping;
//!    other traversals may do it for us) and returns each level's predecessor and successor;
//!    skipped when every old and new node has height 1 (no upper level to unlink or link: the
//!    level-0 successor comes from the last held node, so the swap reads no other node);
//! 4. **commit**: one Release store of `pred`'s level-0 link, to the first new node (or to the
//!    successor when there is none). This is the linearization point (Appendix B.2): the old
//!    nodes leave level 0, the new ones enter it, and `pred` is unlocked, atomically;
//! 5. mark the old nodes' level-0 links INVALIDATED, so that updaters that stood on them restart;
//! 6. *collective height increment*: at each level `1..maxh`, one CAS links all new nodes of that
//!    level at once (`preds[i]: succs[i] -> first new node at level i`); on failure the level is
//!    retried after a fresh `find` over that level's chain span (lower levels stay linked; see
//!    `link_upper` for why not over `[s, e)`);
//! 7. unlock the new nodes. The old nodes are returned for reclamation after a grace period.
//!
//! Closed cases (left open by the paper):
//! - *Inserted nodes are born LOCKED* (swap and alloc alike) and unlocked only after their tower
//!   is complete. Otherwise an inserter still linking upper levels could link a node at level `i`
//!   after a concurrent swap had already marked and unlinked it there, leaving a retired node
//!   reachable (use after free). Being locked, a node under construction cannot be an old node.
//! - *Increment CAS failure*: retried per level with a fresh `find`, never given up, so a node's
//!   height field always equals the levels it is linked at once it is unlocked.
//! - *Upper-level helping*: unlinking an old node at level `i` happens in `find` from its level-`i`
//!   predecessor; no node can be re-linked in front of an unlinked one because every link CAS
//!   expects its successor to still be linked there (ABA is excluded: the successor is not freed
//!   while the CASing thread is in its read section).
//!
//! Not for: computing the new nodes (map's trimmed remainders, separators: the facade).

use super::link::{pack, ptr, Tag};
use super::lock::{unlock_node, HeldNodes};
use super::node::{Node, MAX_HEIGHT};
use super::raw::RawSkipList;
use super::traverse::Position;
use crate::sync::Ordering;
use std::ptr::null_mut;

impl<V> RawSkipList<V> {
    /// Swaps the locked old nodes `locked[1..]` for `new` and releases every lock; returns the
    /// old nodes, now unreachable for operations that start after this returns.
    ///
    /// # Safety
    /// `locked` came from `lock_range(s, e)` and is still held; `new` are fresh nodes from
    /// `Node::alloc`, sorted, disjoint from each other and from everything outside the old
    /// nodes' span; the caller keeps reachable nodes alive (see `raw.rs`).
    pub(crate) unsafe fn swap_locked(
        &self,
        locked: HeldNodes<V>,
        s: u64,
        e: u64,
        new: &[*mut Node<V>],
    ) -> Vec<*mut Node<V>> {
        // SAFETY: precondition forwarded; no hint.
        let mut locked = unsafe { self.swap_locked_at(locked, s, e, new, None) };
        locked.remove(0);
        locked
    }

    /// `swap_locked` that returns every node it was given (the old nodes are `[1..]`, for the
    /// caller to retire) and may skip step 3's `find` (or, when it cannot, start each level of
    /// it from the hinted predecessor, `find_hinted`): `hint` is the `(pos, levels)` that
    /// `lock_range_at` returned for these locks. When the hint covers every level of the old and
    /// new nodes, the old nodes' upper-level runs are unlinked by one CAS per level from the
    /// hinted predecessors (`unlink_old_runs`; any failure falls back to `find`), and the hinted
    /// predecessors and successors serve as `link_upper`'s first guess: each level's CAS checks
    /// that `preds[i]` still links to `succs[i]` untagged, so nothing can lie between them at
    /// level `i` but the new chain, and a stale guess fails and re-finds exactly as before.
    ///
    /// # Safety
    /// As `swap_locked`; besides, `hint` was produced in the caller's current read section (its
    /// nodes are alive and cannot be recycled, which excludes ABA on the level CASes).
    pub(crate) unsafe fn swap_locked_at(
        &self,
        locked: HeldNodes<V>,
        s: u64,
        e: u64,
        new: &[*mut Node<V>],
        hint: Option<(&Position<V>, usize)>,
    ) -> Vec<*mut Node<V>> {
        // From here on the protocol releases the locks (no caller code runs in a swap).
        let locked = locked.into_swapped();
        let pred = locked[0];
        let old = &locked[1..];
        let mut old_maxh = 1;
        // 1. Mark the old nodes' upper links (top-down).
        for &o in old {
            // SAFETY: held by us, alive.
            let o = unsafe { &*o };
            old_maxh = old_maxh.max(o.height as usize);
            for i in (1..o.height as usize).rev() {
                // AcqRel: Release orders the mark before our unlinking CASes in `find`, which
                // helpers read with Acquire; only None/Deleted occur at upper levels.
                o.next(i).fetch_or(Tag::Deleted as usize, Ordering::AcqRel);
            }
        }
        // 2. Chain the new nodes per level.
        let mut left = [null_mut::<Node<V>>(); MAX_HEIGHT];
        let mut right = [null_mut::<Node<V>>(); MAX_HEIGHT];
        let mut maxh = 0;
        for &n in new {
            // SAFETY: fresh, unpublished.
            let h = unsafe { (*n).height } as usize;
            maxh = maxh.max(h);
            for i in 0..h {
                if left[i].is_null() {
                    left[i] = n;
                }
                if !right[i].is_null() {
                    let t = if i == 0 { Tag::Locked } else { Tag::None };
                    // Relaxed: unpublished; the commit store / level CAS publishes it.
                    // SAFETY: fresh, unpublished.
                    unsafe { (*right[i]).next(i) }.store(pack(n, t), Ordering::Relaxed);
                }
                right[i] = n;
            }
        }
        // 3. Unlink the old nodes from the upper levels; find each level's neighbours.
        self.raise_top(maxh);
        let levels = self.levels().max(maxh);
        let mut pos = Position::new();
        let n = maxh.max(old_maxh);
        let fused = match hint {
            // Only levels `1..` of `pos` are read below (unlinking and linking towers): with
            // every old and new node of height 1 there is nothing to find.
            _ if n <= 1 => true,
            Some((h, hl)) => {
                let k = hl.min(n);
                pos.preds[..k].copy_from_slice(&h.preds[..k]);
                pos.succs[..k].copy_from_slice(&h.succs[..k]);
                // SAFETY: precondition forwarded (the hint's nodes are alive in this section).
                hl >= n && unsafe { Self::unlink_old_runs(old, old_maxh, &mut pos) }
            }
            None => false,
        };
        if !fused {
            if hint.is_some() {
                // Each level's hinted predecessor, validated, is where that level's search
                // starts (`find_hinted`); the levels the hint lacks start from the level above.
                // SAFETY: precondition forwarded: `pos.preds` holds nodes the hint's traversal
                // reached in this read section (or null), and `unlink_old_runs` only changed
                // `pos.succs`.
                unsafe { self.find_hinted(s, e, levels, &mut pos) };
            } else {
                // SAFETY: precondition forwarded.
                unsafe { self.find(s, e, levels, &mut pos) };
            }
        }
        // The level-0 successor is stable: the last locked node holds the gap before it.
        let last = *locked.last().expect("at least the predecessor");
        // Relaxed: we hold `last`, so only we write its link.
        // SAFETY: held, alive.
        let succ0 = ptr::<V>(unsafe { (*last).next(0) }.load(Ordering::Relaxed));
        for (i, &r) in right.iter().enumerate().take(maxh) {
            let (succ, t) = if i == 0 {
                (succ0, Tag::Locked)
            } else {
                (pos.succs[i], Tag::None)
            };
            // Relaxed: unpublished at this level.
            // SAFETY: fresh node.
            unsafe { (*r).next(i) }.store(pack(succ, t), Ordering::Relaxed);
        }
        // 4. Commit. Release: publishes the new nodes' contents and links (and our critical
        // section); pairs with the Acquire loads of traversals and of `lock_node`.
        let first = if new.is_empty() { succ0 } else { new[0] };
        // SAFETY: held, alive.
        unsafe { (*pred).next(0) }.store(pack(first, Tag::None), Ordering::Release);
        // 5. Invalidate the old nodes.
        for &o in old {
            // SAFETY: still held by us (nobody else writes the link), alive.
            let link = unsafe { (*o).next(0) };
            let w = link.load(Ordering::Relaxed);
            // Release: pairs with the Acquire of waiters in `lock_node`/`alloc`, which restart.
            link.store(pack(ptr::<V>(w), Tag::Invalidated), Ordering::Release);
        }
        // 6. Collective height increment.
        // SAFETY: precondition forwarded; the new nodes are locked by us.
        unsafe { self.link_upper(&left, &right, maxh, levels, &mut pos) };
        // 7. Unlock the new nodes.
        for &n in new {
            // SAFETY: born locked by us.
            unsafe { unlock_node(n) };
        }
        locked
    }

    /// Step 3 without a traversal: at each level `1..old_maxh` (top-down) the old nodes linked
    /// there are consecutive (every node overlapping the range is held by us, so nothing can be
    /// inserted between them), and their marked links are frozen (every link CAS expects an
    /// untagged value). One CAS on the hinted predecessor, `preds[i]: first old -> the last old
    /// node's successor`, unlinks the whole run, exactly what `find`'s helping would do node by
    /// node; it fails if the predecessor is not adjacent to the run any more (a helper already
    /// unlinked part of it, an insert landed in front, or the predecessor was marked), and then
    /// the caller falls back to `find`. On success `pos.succs[i]` is that successor (a guess for
    /// `link_upper`, whose CAS validates it). Returns whether every level was unlinked.
    ///
    /// # Safety
    /// `old` are held by us and marked DELETED at their upper levels; `pos` comes from a `find`
    /// of the locked range at `>= old_maxh` levels in the caller's read section.
    unsafe fn unlink_old_runs(
        old: &[*mut Node<V>],
        old_maxh: usize,
        pos: &mut Position<V>,
    ) -> bool {
        for i in (1..old_maxh).rev() {
            // SAFETY: held nodes are alive; heights are immutable.
            let mut tall = old.iter().filter(|&&o| unsafe { (*o).height } as usize > i);
            let Some(&first) = tall.next() else {
                continue;
            };
            let last = tall.next_back().unwrap_or(&first);
            // SAFETY: held, alive; the link is DELETED, so its pointer is frozen.
            let succ = ptr::<V>(unsafe { (**last).load(i) });
            // AcqRel: as the helping CAS in `find` (Release publishes `succ` to traversals that
            // load the predecessor's link with Acquire); failure falls back to `find`: Relaxed.
            // SAFETY: reached by the hint's `find` in this read section, alive.
            let unlinked = unsafe { (*pos.preds[i]).next(i) }.compare_exchange(
                pack(first, Tag::None),
                pack(succ, Tag::None),
                Ordering::AcqRel,
                Ordering::Relaxed,
            );
            if unlinked.is_err() {
                return false;
            }
            pos.succs[i] = succ;
        }
        true
    }

    /// Links a chain of new nodes (already in level 0, held LOCKED by the caller) at levels
    /// `1..maxh`, one CAS per level; `pos` holds a recent `find` at `levels >= maxh` levels
    /// whose range covers the chain (a first guess: a failed CAS re-finds).
    ///
    /// A failed CAS re-finds with the span of the chain *at that level*, `[left[i].start,
    /// right[i].end)`, not with the range the caller had locked: once the commit store has
    /// unlocked the predecessor, the gap in front of the first new node is free again, and a
    /// concurrent insert may land there, inside the old locked range, and reach level `i` first.
    /// `find` over the old range would skip that node (it overlaps the range) and return a
    /// predecessor that is not adjacent to the successor, so the CAS would fail forever while
    /// the new nodes stay locked (regression: `link_upper_refinds_with_the_chain_span`, loom
    /// `swap_links_upper_levels_after_an_insert_into_the_gap_it_freed`). Nothing foreign lies
    /// inside the chain's span: the gaps between new nodes are held by their LOCKED links.
    ///
    /// # Safety
    /// The caller holds the new nodes' locks and keeps reachable nodes alive; every non-null
    /// `pos.preds` entry was reached by a traversal in the caller's current read section.
    pub(crate) unsafe fn link_upper(
        &self,
        left: &[*mut Node<V>; MAX_HEIGHT],
        right: &[*mut Node<V>; MAX_HEIGHT],
        maxh: usize,
        levels: usize,
        pos: &mut Position<V>,
    ) {
        for i in 1..maxh {
            loop {
                // Relaxed: the chain's last link at level `i` is unpublished until the CAS.
                // SAFETY: our new node.
                unsafe { (*right[i]).next(i) }
                    .store(pack(pos.succs[i], Tag::None), Ordering::Relaxed);
                // Release: publishes the chain at this level; pairs with traversals' Acquire.
                // SAFETY: reached by `find`, alive.
                let linked = unsafe { (*pos.preds[i]).next(i) }.compare_exchange(
                    pack(pos.succs[i], Tag::None),
                    pack(left[i], Tag::None),
                    Ordering::Release,
                    Ordering::Relaxed,
                );
                if linked.is_ok() {
                    break;
                }
                // SAFETY: our new nodes, alive; their intervals are immutable.
                let (cs, ce) = unsafe { ((*left[i]).start, (*right[i]).end) };
                // Every `pos.preds` entry was reached by a traversal of this read section, so
                // the re-find may start from them (validated per level, `find_hinted`).
                // SAFETY: precondition forwarded.
                unsafe { self.find_hinted(cs, ce, levels, pos) };
            }
        }
    }
}
