//! `find` (the paper's GetPredSucc, Fig. 18 lines 4-31): the updaters' traversal, with
//! Harris-style helping.
//!
//! For the half-open range `[s, e)` it returns, for every level `i < levels`, `preds[i]`, the
//! last node at level `i` that precedes the range (`end <= s`; the head if none), and `succs[i]`,
//! the first node at level `i` after it (`start >= e`; null if none). With `e == s` it finds the
//! predecessor of the point `s` (used by `alloc`). The "precedes" test runs before the "after"
//! test so that a zero-length separator at `s` counts as a predecessor.
//!
//! Helping: a node whose link at level `i` is DELETED is unlinked from level `i` by a CAS on its
//! predecessor's link, unless that predecessor is LOCKED (only the lock holder writes a locked
//! link; the traversal then just steps over the node). A CAS failure, a predecessor that is itself
//! DELETED or INVALIDATED, or an INVALIDATED node restarts from the head: the node we stand on
//! may have been swapped out, so what follows it is no longer the list.
//!
//! Successors: a node past the range (`end > s` and `start >= e`) ends the level without its
//! link being read: its tag is not needed, and that link word (level 0 carries the node's lock)
//! is what the next range's updaters write, so reading it would share their cache line for
//! nothing. `succs[i]` may therefore be a node that is already DELETED at level `i` or
//! INVALIDATED at level 0; that is indistinguishable from a mark made just after the
//! traversal read `preds[i]`'s link, which every user handles already: `lock_range` locks
//! `preds[0]` and re-reads its link, and every level CAS (`alloc`, `swap`) expects
//! `preds[i] -> succs[i]` untagged, and a marked node is unlinked by the traversal of the swap
//! that marked it (its range overlaps the node, so that traversal does not stop at it).
//!
//! Hinted searches (`find_hinted`): a swap that follows its lock in the same read section
//! already knows, from the lock's traversal, a predecessor at every level. Each upper level
//! `i >= 1` then starts from that node instead of from where level `i + 1` ended, if it is
//! *usable*: at or after the level above's result (both are at level `i`, so the walk from the
//! further one finds the same last predecessor), preceding the range (`end <= s`), of height
//! `> i`, and not DELETED at level `i`. That last check is the validation: a node leaves an
//! upper level only after its link there is marked DELETED (swap step 1 marks before any
//! unlink, helping unlinks only marked nodes) and a mark is never removed, and the hint was
//! reached at level `i`, so an unmarked hint is still linked at level `i`, in order, and the
//! walk from it is a walk of the current level. A marked (or otherwise unusable) hint is
//! ignored: that level starts from the level above's result as in `find`. A stale but linked
//! hint costs only a longer walk. The nodes must be alive and not reused (the caller's read
//! section has lasted since they were found). Level 0 takes no hint: a node leaves level 0 by
//! its predecessor's commit store while its own link stays LOCKED, so no check on the node
//! itself tells that it left. Any restart starts afresh from the head, without hints.
//!
//! Not for: queries (`raw.rs`), which never write and never restart.

use super::link::{pack, unpack, Tag};
use super::node::{Node, MAX_HEIGHT};
use super::raw::RawSkipList;
use crate::sync::Ordering;
use std::ptr::null_mut;

/// Predecessors and successors of a range at every level.
pub(crate) struct Position<V> {
    pub(crate) preds: [*mut Node<V>; MAX_HEIGHT],
    pub(crate) succs: [*mut Node<V>; MAX_HEIGHT],
}

impl<V> Position<V> {
    pub(crate) fn new() -> Self {
        Self {
            preds: [null_mut(); MAX_HEIGHT],
            succs: [null_mut(); MAX_HEIGHT],
        }
    }
}

impl<V> RawSkipList<V> {
    /// Fills `pos` for `[s, e)` at levels `0..levels` (see the module doc).
    ///
    /// # Safety
    /// The caller keeps reachable nodes alive (see `raw.rs`).
    pub(crate) unsafe fn find(&self, s: u64, e: u64, levels: usize, pos: &mut Position<V>) {
        // SAFETY: forwarded; no hints.
        unsafe { self.search(s, e, levels, pos, false) }
    }

    /// [`find`](Self::find) that starts each upper level from the predecessor `pos` already
    /// holds for it when that one is still usable (see "Hinted searches" in the module doc),
    /// instead of from the predecessor the level above ended on.
    ///
    /// # Safety
    /// As `find`; besides, every non-null `pos.preds[i]` with `i >= 1` was reached at level `i`
    /// by a traversal in the caller's current read section (so it is alive, and its memory was
    /// not reused for another node: no ABA).
    pub(crate) unsafe fn find_hinted(&self, s: u64, e: u64, levels: usize, pos: &mut Position<V>) {
        // SAFETY: forwarded.
        unsafe { self.search(s, e, levels, pos, true) }
    }

    /// The hint for level `i` (`i >= 1`) if usable: non-null, not the head (the level above
    /// ended at the head or further), at or after `pred` (the level above's result, which is at
    /// level `i` too), preceding `s`, and not DELETED at level `i`. Returns it with its link.
    ///
    /// # Safety
    /// As `find_hinted`; `pred` is alive.
    #[inline]
    unsafe fn usable_hint(
        &self,
        hint: *mut Node<V>,
        pred: *mut Node<V>,
        s: u64,
        i: usize,
    ) -> Option<usize> {
        if hint.is_null() || hint == pred || hint == self.head {
            return None;
        }
        // SAFETY: alive per the precondition (reached in the caller's read section).
        let h = unsafe { &*hint };
        if h.end > s || (h.height as usize) <= i {
            return None;
        }
        if pred != self.head {
            // SAFETY: as above.
            let p = unsafe { &*pred };
            // Keys are `(start, end)`, non-decreasing along a level; distinct live nodes at one
            // level have distinct keys, so an equal key means the hint is not further.
            if (h.start, h.end) <= (p.start, p.end) {
                return None;
            }
        }
        let w = h.load(i);
        (!matches!(unpack::<V>(w).1, Tag::Deleted | Tag::Invalidated)).then_some(w)
    }

    /// `find`, with `hints` as in `find_hinted` until the first restart (which starts afresh
    /// from the head without them).
    ///
    /// # Safety
    /// As `find_hinted` (as `find` when `hints` is false).
    unsafe fn search(&self, s: u64, e: u64, levels: usize, pos: &mut Position<V>, mut hints: bool) {
        'restart: loop {
            let mut pred = self.head;
            for i in (0..levels).rev() {
                let hinted = if hints && i >= 1 {
                    // SAFETY: precondition forwarded (`pred` is the head or a node reached from
                    // it; `pos.preds[i]` is null or was reached in the caller's read section).
                    unsafe { self.usable_hint(pos.preds[i], pred, s, i) }
                } else {
                    None
                };
                let w = match hinted {
                    Some(w) => {
                        pred = pos.preds[i];
                        w
                    }
                    // SAFETY: reached from the head through Acquire loads; alive per the
                    // precondition.
                    None => unsafe { (*pred).load(i) },
                };
                let mut prev = pred;
                // SAFETY (whole loop): every node dereferenced was reached from the head (or
                // from a usable hint) through Acquire loads and is alive per the precondition.
                let (mut node, mut ptag) = unpack::<V>(w);
                if matches!(ptag, Tag::Deleted | Tag::Invalidated) {
                    hints = false;
                    continue 'restart;
                }
                loop {
                    let mut next = null_mut();
                    let mut ntag = Tag::None;
                    while !node.is_null() {
                        // SAFETY: see above.
                        let n = unsafe { &*node };
                        if n.end > s && n.start >= e {
                            // Past the range: its link is not read (see "Successors" in the
                            // module doc).
                            break;
                        }
                        // SAFETY: see above.
                        (next, ntag) = unpack(unsafe { (*node).load(i) });
                        match ntag {
                            Tag::None | Tag::Locked => break,
                            Tag::Invalidated => {
                                hints = false;
                                continue 'restart;
                            }
                            Tag::Deleted => {
                                if ptag != Tag::Locked {
                                    // AcqRel: Release publishes `next` (read with Acquire) to
                                    // traversals that load `prev`'s link with Acquire; Acquire on
                                    // failure is not needed (we restart), hence Relaxed.
                                    // SAFETY: see above.
                                    let unlinked = unsafe { (*prev).next(i) }.compare_exchange(
                                        pack(node, Tag::None),
                                        pack(next, Tag::None),
                                        Ordering::AcqRel,
                                        Ordering::Relaxed,
                                    );
                                    if unlinked.is_err() {
                                        hints = false;
                                        continue 'restart;
                                    }
                                }
                                node = next;
                            }
                        }
                    }
                    if node.is_null() {
                        break;
                    }
                    // SAFETY: see above.
                    let n = unsafe { &*node };
                    if n.end > s && n.start >= e {
                        break;
                    }
                    if n.end <= s {
                        pred = node;
                    }
                    prev = node;
                    ptag = ntag;
                    node = next;
                }
                pos.preds[i] = pred;
                pos.succs[i] = node;
            }
            return;
        }
    }
}
