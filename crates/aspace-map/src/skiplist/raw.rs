//! The raw skiplist: the head, the level count, the lock-free read paths (`query`, `visit`) and
//! the structural check. The update protocols are `impl` blocks in `traverse.rs`, `lock.rs`,
//! `swap.rs` and `alloc.rs`.
//!
//! Every `unsafe fn` here takes the same precondition, written once: *the caller keeps every node
//! it can reach alive for the duration of the call*, i.e. it is inside an RCU read section of the
//! domain that retired nodes are handed to (the facade), or nothing is ever freed while it runs
//! (the loom models free retired nodes only after joining their threads).
//!
//! Invariants (checked by [`RawSkipList::check`] when quiescent): level 0 holds every node, sorted
//! by `(start, end)`, intervals disjoint, no separator strictly inside an interval; level `i`
//! holds a subsequence of level 0 made of nodes of height `> i`; at rest no link is tagged.
//!
//! Not for: reclamation, values' lifetimes, arenas (the facade in `skiplist.rs`).

use super::link::{ptr, tag, Tag};
use super::node::{Kind, Node, MAX_HEIGHT};
use crate::sync::stat::AtomicUsize as StdAtomicUsize;
use crossbeam_utils::CachePadded;
use std::sync::atomic::Ordering as StdOrdering;

/// The list: a head sentinel of height `MAX_HEIGHT` and the number of levels in use.
pub(crate) struct RawSkipList<V> {
    pub(crate) head: *mut Node<V>,
    /// Levels that may hold a node besides the head (monotone; a stale smaller value only makes
    /// a traversal start lower, which is always correct). Not part of any protocol, so a plain
    /// std atomic with Relaxed accesses. Padded: read by every operation, so it must not share
    /// a line with anything written often.
    top: CachePadded<StdAtomicUsize>,
}

// SAFETY: the list owns its nodes; values are shared with readers (`&V`) so `V: Sync`, and they
// are dropped by whichever thread frees the node, so `V: Send`.
unsafe impl<V: Send + Sync> Send for RawSkipList<V> {}
// SAFETY: as above; all shared mutation goes through atomics.
unsafe impl<V: Send + Sync> Sync for RawSkipList<V> {}

/// Yields while waiting for a lock holder (loom needs to see the yield to explore progress).
#[inline]
pub(crate) fn spin_wait() {
    #[cfg(loom)]
    loom::thread::yield_now();
    #[cfg(not(loom))]
    std::thread::yield_now();
}

impl<V> RawSkipList<V> {
    /// An empty list.
    pub(crate) fn new() -> Self {
        Self {
            head: Node::alloc(0, 0, MAX_HEIGHT, Kind::Head, None),
            top: CachePadded::new(StdAtomicUsize::new(1)),
        }
    }

    /// Levels a traversal must start from.
    #[inline]
    pub(crate) fn levels(&self) -> usize {
        self.top.load(StdOrdering::Relaxed)
    }

    /// Makes traversals start at level `h - 1` or above from now on.
    ///
    /// Checks before the RMW: `top` is monotone and almost always already `>= h`, and an
    /// unconditional `fetch_max` on every swap would make this map-wide line bounce between
    /// updaters' caches (see CHANGELOG.md for the measurement).
    #[inline]
    pub(crate) fn raise_top(&self, h: usize) {
        if self.top.load(StdOrdering::Relaxed) < h {
            self.top.fetch_max(h, StdOrdering::Relaxed);
        }
    }

    /// The interval node containing `addr`, if any. Lock-free; LOCKED, DELETED and INVALIDATED
    /// nodes are read like any other (§4.2): every node a query can reach was published complete
    /// and stays allocated for the caller's read section.
    ///
    /// # Safety
    /// See the module doc (the caller keeps reachable nodes alive).
    #[inline]
    pub(crate) unsafe fn query(&self, addr: u64) -> Option<&Node<V>> {
        let mut pred = self.head;
        for i in (0..self.levels()).rev() {
            // SAFETY: `pred` is the head or a node reached from it, alive per the precondition.
            let mut cur = ptr::<V>(unsafe { (*pred).load(i) });
            while !cur.is_null() {
                // SAFETY: reached through an Acquire load of a published link.
                let c = unsafe { &*cur };
                if c.end <= addr {
                    pred = cur;
                    cur = ptr(c.load(i));
                    continue;
                }
                if c.start <= addr && c.is_interval() {
                    return Some(c);
                }
                break;
            }
        }
        None
    }

    /// Calls `f` on every interval node overlapping `[start, end)`, in order, until it breaks.
    ///
    /// # Safety
    /// See the module doc.
    pub(crate) unsafe fn visit(
        &self,
        start: u64,
        end: u64,
        f: &mut dyn FnMut(&Node<V>) -> std::ops::ControlFlow<()>,
    ) {
        let mut pred = self.head;
        for i in (0..self.levels()).rev() {
            loop {
                // SAFETY: alive per the precondition.
                let next = ptr::<V>(unsafe { (*pred).load(i) });
                // SAFETY: as above.
                if next.is_null() || unsafe { (*next).end } > start {
                    break;
                }
                pred = next;
            }
        }
        // SAFETY: as above.
        let mut cur = ptr::<V>(unsafe { (*pred).load(0) });
        while !cur.is_null() {
            // SAFETY: as above.
            let c = unsafe { &*cur };
            if c.start >= end {
                break;
            }
            if c.is_interval() && c.end > start && f(c).is_break() {
                break;
            }
            cur = ptr(c.load(0));
        }
    }

    /// Checks the invariants of the module doc on a quiescent list and returns the level-0 nodes
    /// (head excluded). Panics on a violation.
    ///
    /// # Safety
    /// No other thread touches the list during the call.
    pub(crate) unsafe fn check(&self) -> Vec<*mut Node<V>> {
        let mut level0 = Vec::new();
        // SAFETY: quiescent; every reachable node is alive.
        let mut cur = unsafe { (*self.head).load(0) };
        let mut last: Option<(u64, u64, Kind)> = None;
        loop {
            assert_eq!(tag(cur), Tag::None, "a tagged level-0 link at rest");
            let p = ptr::<V>(cur);
            if p.is_null() {
                break;
            }
            // SAFETY: as above.
            let n = unsafe { &*p };
            assert!(n.start <= n.end);
            assert!(n.kind != Kind::Head);
            if let Some((ls, le, lk)) = last {
                assert!(
                    le <= n.start,
                    "overlap or disorder: [{ls:#x},{le:#x}) then [{:#x},{:#x})",
                    n.start,
                    n.end
                );
                assert!(
                    (ls, le) < (n.start, n.end) || lk != n.kind,
                    "duplicate node"
                );
            }
            last = Some((n.start, n.end, n.kind));
            level0.push(p);
            cur = n.load(0);
        }
        for i in 1..MAX_HEIGHT {
            let mut idx = 0;
            // SAFETY: as above.
            let mut cur = unsafe { (*self.head).load(i) };
            loop {
                assert_eq!(tag(cur), Tag::None, "a tagged link at level {i} at rest");
                let p = ptr::<V>(cur);
                if p.is_null() {
                    break;
                }
                assert!(i < self.levels(), "a node at level {i} above top");
                // SAFETY: as above.
                let n = unsafe { &*p };
                assert!(
                    n.height as usize > i,
                    "node of height {} at level {i}",
                    n.height
                );
                while idx < level0.len() && level0[idx] != p {
                    idx += 1;
                }
                assert!(
                    idx < level0.len(),
                    "level {i} is not a subsequence of level 0"
                );
                idx += 1;
                cur = n.load(i);
            }
        }
        level0
    }
}

impl<V> Drop for RawSkipList<V> {
    fn drop(&mut self) {
        // SAFETY: `&mut self`: no other thread can reach the list; every node reachable at level
        // 0 is owned by it (unlinked nodes were handed to their retire path), freed once.
        unsafe {
            let mut cur = ptr::<V>((*self.head).load(0));
            while !cur.is_null() {
                let next = ptr::<V>((*cur).load(0));
                Node::dealloc(cur);
                cur = next;
            }
            Node::dealloc(self.head);
        }
    }
}
