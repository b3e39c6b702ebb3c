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
        'restart: loop {
            let mut pred = self.head;
            for i in (0..levels).rev() {
                let mut prev = pred;
                // SAFETY (whole loop): every node dereferenced was reached from the head through
                // Acquire loads and is alive per the precondition.
                // SAFETY: reached from the head through Acquire loads; alive per the precondition.
                let (mut node, mut ptag) = unpack::<V>(unsafe { (*prev).load(i) });
                if matches!(ptag, Tag::Deleted | Tag::Invalidated) {
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
                            Tag::Invalidated => continue 'restart,
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
