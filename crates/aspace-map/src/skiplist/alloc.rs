//! Alloc by CAS (SOSP'25 §4.2 "Alloc"): find the first gap of `len` bytes in `[from, we)` and
//! claim it by inserting a node with one CAS on the gap's level-0 predecessor link.
//!
//! Padded alloc (`pad > 0`, not in the paper): the first gap `[g, ge)` with `ge - g >= len + 2 *
//! pad` is claimed at `[g + pad, g + pad + len)`, so the new node has at least `pad` free bytes on
//! both sides. Gap ends are the neighbouring nodes (intervals *and* separators) clipped to the
//! search range `[ws, we)`, and `g` is the real gap start (`max(pred.end, ws)`), never the
//! search start `from` (a hint may point into a gap). The claim is the same CAS on the same
//! link: it succeeds only if the link still points to the successor the walk saw, untagged, so
//! the whole gap `[g, ge)` was still free at the CAS and the pads are free then. Padded searches
//! never report `Straddle`: a separator ends a gap.
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
use crate::contract::{KEY_SPACE_END, PAGE_SIZE};
use crate::sync::Ordering;
use std::ptr::null_mut;

/// The shortest gap that a padded claim (`len >= PAGE_SIZE`, `pad >= PAGE_SIZE`) can use: the
/// padded hint skips only gaps shorter than this (see `hint.rs`'s module doc).
pub(crate) const PADDED_GAP_MIN: u64 = 3 * PAGE_SIZE;

/// The threshold of the hint a search with this `pad` uses: its walk advances the hint to the
/// first gap of at least this many bytes (1 for unpadded searches: any free page).
pub(crate) fn hint_gap_min(pad: u64) -> u64 {
    if pad == 0 {
        1
    } else {
        PADDED_GAP_MIN
    }
}

/// What `alloc_insert` did.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum AllocOutcome {
    /// The node was inserted at `start`. The walk saw no gap of `hint_gap_min(pad)` bytes or
    /// more (see `hint.rs`) below `hint_to`, counting its own claim: for `pad == 0`, every page
    /// in `[from, hint_to)` was covered by an interval when the walk passed it (`hint_to` is
    /// the first free page the walk saw); for `pad > 0`, `hint_to` is the start of the first gap
    /// of at least `PADDED_GAP_MIN` bytes it saw, or where the claim left the next one.
    Inserted {
        /// Start of the new interval.
        start: u64,
        /// Where a search that started from its hint may advance that hint to.
        hint_to: u64,
    },
    /// No gap of `len` in the searched range.
    NoSpace,
    /// The first fit starts here but covers a separator (the facade inserts it by lock + swap).
    Straddle(u64),
}

impl<V> RawSkipList<V> {
    /// Claims the first gap of `len` bytes in `[from, we)` (`pad == 0`), or the first gap of
    /// `len + 2 * pad` bytes in `[ws, we)` reached from `from` at `pad` bytes into it (see the
    /// module doc), for `node` (fresh, unpublished; its `start`/`end` are set here). On anything
    /// but `Inserted` the node is still the caller's.
    ///
    /// # Safety
    /// The caller keeps reachable nodes alive (see `raw.rs`); `node` came from `Node::alloc`;
    /// `ws <= from <= we` and `len + 2 * pad` does not overflow.
    pub(crate) unsafe fn alloc_insert(
        &self,
        from: u64,
        ws: u64,
        we: u64,
        len: u64,
        pad: u64,
        node: *mut Node<V>,
    ) -> AllocOutcome {
        debug_assert!(ws <= from && from <= we);
        // The gap a claim needs, and the gap the hint must not skip.
        let need = len + 2 * pad;
        let hint_min = hint_gap_min(pad);
        // Unpadded gaps are clipped at the search start (everything below it is covered when it
        // is a hint); padded gaps keep their real start, which the pad is measured from.
        let lo = if pad == 0 { from } else { ws };
        let mut pos = Position::new();
        'restart: loop {
            // SAFETY: precondition forwarded.
            unsafe { self.find(from, from, self.levels(), &mut pos) };
            let mut prev = pos.preds[0];
            // Start of the first gap of `>= hint_min` bytes the walk saw (`hint_to`).
            let mut first_free: Option<u64> = None;
            loop {
                // SAFETY (loop): `prev` and `next` were reached through Acquire loads and are
                // alive per the precondition.
                // SAFETY: reached from the head through Acquire loads; alive per the precondition.
                let p = unsafe { &*prev };
                let w = p.load(0);
                let (next, t) = unpack::<V>(w);
                let gs = p.end.max(lo);
                if gs >= we || we - gs < need {
                    return AllocOutcome::NoSpace;
                }
                let next_start = if next.is_null() {
                    KEY_SPACE_END
                } else {
                    // SAFETY: reached from the head through Acquire loads; alive per the precondition.
                    unsafe { (*next).start }
                };
                let ge = next_start.min(we);
                let size = ge.saturating_sub(gs);
                if size >= need {
                    match t {
                        Tag::Locked => {
                            spin_wait();
                            continue;
                        }
                        Tag::Invalidated | Tag::Deleted => continue 'restart,
                        Tag::None => {
                            let start = gs + pad;
                            // SAFETY: `node` is unpublished: plain writes.
                            unsafe {
                                (*node).start = start;
                                (*node).end = start + len;
                            }
                            // SAFETY: `node` is ours and unpublished; `p` was reached from
                            // the head and is alive per the precondition.
                            if unsafe { self.publish_after(p, w, next, node) } {
                                // No earlier gap of `>= hint_min`: the next one is the pad gap
                                // in front of the claim if it is that long, else after it.
                                let after = if pad >= hint_min { gs } else { start + len };
                                return AllocOutcome::Inserted {
                                    start,
                                    hint_to: first_free.unwrap_or(after),
                                };
                            }
                            continue;
                        }
                    }
                }
                if size >= hint_min && first_free.is_none() {
                    first_free = Some(gs);
                }
                if next.is_null() {
                    return AllocOutcome::NoSpace;
                }
                // SAFETY: reached from the head through Acquire loads; alive per the precondition.
                if pad == 0 && unsafe { (*next).kind } == Kind::Separator {
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

    /// Publishes the unpublished `node` between `p` and `next` with one CAS on `p`'s level-0
    /// link, which must still read `w` (untagged, pointing at `next`): the node is born LOCKED,
    /// linked at its upper levels while held, then unlocked (module doc; `zone.rs` inserts its
    /// separators the same way). Returns whether the CAS succeeded; on failure the node is
    /// still the caller's and unpublished.
    ///
    /// # Safety
    /// `node` came from `Node::alloc`/`try_alloc` and was never published; `p` is alive and the
    /// caller keeps reachable nodes alive (see `raw.rs`).
    pub(crate) unsafe fn publish_after(
        &self,
        p: &Node<V>,
        w: usize,
        next: *mut Node<V>,
        node: *mut Node<V>,
    ) -> bool {
        // Relaxed: unpublished until the CAS below.
        // SAFETY: `node` is ours and unpublished.
        unsafe { (*node).next(0) }.store(pack(next, Tag::Locked), Ordering::Relaxed);
        // Release: publishes the node; pairs with traversals' Acquire loads. Relaxed on
        // failure: the caller reloads the link with Acquire.
        if p.next(0)
            .compare_exchange(
                w,
                pack(node, Tag::None),
                Ordering::Release,
                Ordering::Relaxed,
            )
            .is_err()
        {
            return false;
        }
        // SAFETY: the node is linked at level 0 and held by us (born LOCKED).
        unsafe {
            self.link_node_upper(node);
            unlock_node(node);
        }
        true
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
