//! Alloc by CAS (SOSP'25 §4.2 "Alloc"): find the first gap of `len` bytes in `[from, we)` and
//! claim it by inserting a node with one CAS on the gap's level-0 predecessor link.
//!
//! The walk starts at the level-0 predecessor of `from` (found in O(log n) by `find`) and moves
//! right one gap at a time. When a gap fits, the predecessor's link decides:
//! - untagged: CAS it from the successor to the new node (born LOCKED, see `swap.rs`); on success
//!   the node is linked at its upper levels and unlocked. The CAS is the linearization point;
//! - LOCKED: the gap is held by an interval lock; wait until the link changes, then look again;
//! - INVALIDATED (or DELETED): the predecessor was swapped out; restart from the top;
//! - the CAS failed because the link changed (the gap was claimed by someone else, or locked, or
//!   invalidated): look at the same predecessor again, which continues past a claimed gap.
//!
//! Separators split gaps; a fit that exists only across a separator (the gap pieces on both sides
//! together are long enough) is reported as `Straddle` and done by the facade with lock + swap,
//! which removes the separators the new interval covers.
//!
//! Concurrency note: first fit is exact for the state the walk saw; a gap freed behind the walk
//! after it passed is not seen (as in the paper). Linearizably, `alloc` claims a free range of
//! `len` bytes inside `within`.
//!
//! Not for: arena selection and hints (the facade).

use super::link::{pack, unpack, Tag};
use super::lock::unlock_node;
use super::node::{Kind, Node, MAX_HEIGHT};
use super::raw::{spin_wait, RawSkipList};
use super::traverse::Position;
use crate::contract::KEY_SPACE_END;
use crate::sync::Ordering;
use std::ptr::null_mut;

/// What `alloc_insert` did.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum AllocOutcome {
    /// The node was inserted at `start`; every page in `[from, covered_to)` was covered by an
    /// interval when the walk passed it (`covered_to` is the first free page the walk saw).
    Inserted {
        /// Start of the new interval.
        start: u64,
        /// End of the fully covered prefix of the search range.
        covered_to: u64,
    },
    /// No gap of `len` in the searched range.
    NoSpace,
    /// The first fit starts here but covers a separator (the facade inserts it by lock + swap).
    Straddle(u64),
}

impl<V> RawSkipList<V> {
    /// Claims the first gap of `len` bytes in `[from, we)` for `node` (fresh, unpublished; its
    /// `start`/`end` are set here). On anything but `Inserted` the node is still the caller's.
    ///
    /// # Safety
    /// The caller keeps reachable nodes alive (see `raw.rs`); `node` came from `Node::alloc`.
    pub(crate) unsafe fn alloc_insert(
        &self,
        from: u64,
        we: u64,
        len: u64,
        node: *mut Node<V>,
    ) -> AllocOutcome {
        let mut pos = Position::new();
        'restart: loop {
            // SAFETY: precondition forwarded.
            unsafe { self.find(from, from, self.levels(), &mut pos) };
            let mut prev = pos.preds[0];
            let mut first_free: Option<u64> = None;
            loop {
                // SAFETY (loop): `prev` and `next` were reached through Acquire loads and are
                // alive per the precondition.
                // SAFETY: reached from the head through Acquire loads; alive per the precondition.
                let p = unsafe { &*prev };
                let w = p.load(0);
                let (next, t) = unpack::<V>(w);
                let gs = p.end.max(from);
                if gs >= we || we - gs < len {
                    return AllocOutcome::NoSpace;
                }
                let next_start = if next.is_null() {
                    KEY_SPACE_END
                } else {
                    // SAFETY: reached from the head through Acquire loads; alive per the precondition.
                    unsafe { (*next).start }
                };
                let ge = next_start.min(we);
                if ge > gs && ge - gs >= len {
                    match t {
                        Tag::Locked => {
                            spin_wait();
                            continue;
                        }
                        Tag::Invalidated | Tag::Deleted => continue 'restart,
                        Tag::None => {
                            // SAFETY: `node` is unpublished: plain writes.
                            unsafe {
                                (*node).start = gs;
                                (*node).end = gs + len;
                            }
                            // Relaxed: unpublished until the CAS below.
                            // SAFETY: `node` is ours and unpublished.
                            unsafe { (*node).next(0) }
                                .store(pack(next, Tag::Locked), Ordering::Relaxed);
                            // Release: publishes the node; pairs with traversals' Acquire.
                            // Relaxed on failure: we reload the link with Acquire.
                            if p.next(0)
                                .compare_exchange(
                                    w,
                                    pack(node, Tag::None),
                                    Ordering::Release,
                                    Ordering::Relaxed,
                                )
                                .is_ok()
                            {
                                // SAFETY: the node is linked at level 0 and held by us.
                                unsafe {
                                    self.link_node_upper(node);
                                    unlock_node(node);
                                }
                                return AllocOutcome::Inserted {
                                    start: gs,
                                    covered_to: first_free.unwrap_or(gs + len),
                                };
                            }
                            continue;
                        }
                    }
                }
                if ge > gs && first_free.is_none() {
                    first_free = Some(gs);
                }
                if next.is_null() {
                    return AllocOutcome::NoSpace;
                }
                // SAFETY: reached from the head through Acquire loads; alive per the precondition.
                if unsafe { (*next).kind } == Kind::Separator {
                    // The gap continues across separators: does it fit there?
                    let mut m = next;
                    let merged_end = loop {
                        // SAFETY: reached from the head through Acquire loads; alive per the precondition.
                        let nn = super::link::ptr::<V>(unsafe { (*m).load(0) });
                        if nn.is_null() {
                            break KEY_SPACE_END;
                        }
                        // SAFETY: reached from the head through Acquire loads; alive per the precondition.
                        let n = unsafe { &*nn };
                        if n.kind != Kind::Separator {
                            break n.start;
                        }
                        m = nn;
                    };
                    let me = merged_end.min(we);
                    if me > gs && me - gs >= len {
                        return AllocOutcome::Straddle(gs);
                    }
                }
                prev = next;
            }
        }
    }

    /// Links one node (in level 0, held by the caller) at its upper levels.
    ///
    /// # Safety
    /// The caller holds `node`'s lock and keeps reachable nodes alive.
    pub(crate) unsafe fn link_node_upper(&self, node: *mut Node<V>) {
        // SAFETY: held by us, alive.
        let n = unsafe { &*node };
        let h = n.height as usize;
        if h <= 1 {
            return;
        }
        self.raise_top(h);
        let levels = self.levels().max(h);
        let mut pos = Position::new();
        let mut chain = [null_mut(); MAX_HEIGHT];
        chain[..h].fill(node);
        // SAFETY: precondition forwarded.
        unsafe {
            self.find(n.start, n.end, levels, &mut pos);
            self.link_upper(&chain, &chain, h, levels, &mut pos);
        }
    }
}
