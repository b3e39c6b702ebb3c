//! Node-granular interval locking fused with traversal (SOSP'25 §4.2-§4.3, Fig. 18 `Lock`).
//!
//! A node is locked by setting the LOCKED tag on its level-0 link with a CAS from an untagged
//! link; that holds the node *and the gap after it*. `lock_range([s, e))` finds the level-0
//! predecessor of the range (the last node with `end <= s`), locks it (restarting if it turns out
//! DELETED or INVALIDATED, i.e. no longer in the list), then walks right locking every node whose
//! start is below `e`, so that afterwards the predecessor, every node overlapping the range and
//! therefore every gap touching it are held. If a node locked on the way still precedes the range
//! (a concurrent insert landed between the predecessor and the range), it becomes the new
//! predecessor and the old one is unlocked.
//!
//! Waiting: a LOCKED node is waited for (yield loop). Locks are taken left to right only and a
//! holder never waits for a lock to its left, and inserts (alloc, swap) hold only their own new
//! nodes while they finish their towers without waiting, so there is no deadlock.
//!
//! Why locked nodes stay allocated without an RCU section (Lemma B.1): only the holder of a
//! node's lock and of its predecessor's lock can swap it out, so a held node is never retired by
//! anyone else. By Theorem B.2 the node after a locked node is never INVALIDATED; level-0 links
//! are never DELETED in this implementation (removal from level 0 is always a swap), so the
//! `lock_node` failure inside the walk cannot happen; it is handled anyway by releasing and
//! restarting.
//!
//! Panic safety: the nodes a thread holds live in a [`HeldNodes`], which unlocks them on drop,
//! so a panic between `lock_range` and the swap (the facade clones the remainders' values
//! there: the caller's `Clone`) releases the range instead of leaving it LOCKED for ever. The
//! swap consumes it: from its commit on, the locks are released by the protocol itself.
//!
//! Not for: the swap itself (`swap.rs`).

use super::link::{pack, ptr, tag, Tag};
use super::node::Node;
use super::raw::{spin_wait, RawSkipList};
use super::traverse::Position;
use crate::sync::Ordering;

/// Locks `node` (waits while another thread holds it). False if it is DELETED or INVALIDATED.
///
/// # Safety
/// `node` is alive for the call.
pub(crate) unsafe fn lock_node<V>(node: *mut Node<V>) -> bool {
    // SAFETY: alive per the precondition.
    let link = unsafe { (*node).next(0) };
    loop {
        // Acquire: pairs with the Release unlock store of the previous holder, so what it wrote
        // while holding the node happens-before our critical section.
        let w = link.load(Ordering::Acquire);
        match tag(w) {
            Tag::None => {
                // Acquire on success: as above.
                if link
                    .compare_exchange(
                        w,
                        pack(ptr::<V>(w), Tag::Locked),
                        Ordering::Acquire,
                        Ordering::Relaxed,
                    )
                    .is_ok()
                {
                    return true;
                }
            }
            Tag::Locked => spin_wait(),
            Tag::Deleted | Tag::Invalidated => return false,
        }
    }
}

/// Unlocks a node held by the caller.
///
/// # Safety
/// The caller holds `node`'s lock (so only it writes the link).
pub(crate) unsafe fn unlock_node<V>(node: *mut Node<V>) {
    // SAFETY: alive (held).
    let link = unsafe { (*node).next(0) };
    let w = link.load(Ordering::Relaxed);
    debug_assert_eq!(tag(w), Tag::Locked);
    // Release: publishes the critical section; pairs with the Acquire in `lock_node` and with
    // traversals' Acquire loads of this link.
    link.store(pack(ptr::<V>(w), Tag::None), Ordering::Release);
}

/// Nodes held by the calling thread (the level-0 predecessor first, then every node
/// overlapping the range, in order), unlocked on drop unless a swap consumed them.
pub(crate) struct HeldNodes<V> {
    nodes: Vec<*mut Node<V>>,
}

impl<V> HeldNodes<V> {
    /// Takes over the locks of `nodes`.
    ///
    /// # Safety
    /// The caller holds every node of `nodes` (locked by it, not yet released), and gives the
    /// duty of releasing them to the returned value.
    pub(crate) unsafe fn new(nodes: Vec<*mut Node<V>>) -> Self {
        Self { nodes }
    }

    /// Keeps the locks of `nodes[keep]` and releases the others (they are no longer held).
    pub(crate) fn retain(&mut self, keep: std::ops::RangeInclusive<usize>) {
        let (first, last) = (*keep.start(), *keep.end());
        for (i, &n) in self.nodes.iter().enumerate() {
            if i < first || i > last {
                // SAFETY: held by us (`new`'s contract), not released since; alive (held).
                unsafe { unlock_node(n) };
            }
        }
        self.nodes.truncate(last + 1);
        self.nodes.drain(..first);
    }

    /// The nodes, without their locks: the caller now releases them (a swap does it by its
    /// commit store and the INVALIDATED marks).
    pub(crate) fn into_swapped(mut self) -> Vec<*mut Node<V>> {
        std::mem::take(&mut self.nodes)
    }
}

impl<V> std::ops::Deref for HeldNodes<V> {
    type Target = [*mut Node<V>];
    fn deref(&self) -> &[*mut Node<V>] {
        &self.nodes
    }
}

impl<V> Drop for HeldNodes<V> {
    fn drop(&mut self) {
        for &n in &self.nodes {
            // SAFETY: held by us (`new`'s contract) and not released since (`into_swapped`
            // empties the list); a held node is never retired by another thread, so it is alive.
            unsafe { unlock_node(n) };
        }
    }
}

impl<V> RawSkipList<V> {
    /// Locks `[s, e)`: returns the locked nodes, the level-0 predecessor first, then every node
    /// overlapping the range in order.
    ///
    /// # Safety
    /// The caller keeps reachable nodes alive during the call (see `raw.rs`).
    pub(crate) unsafe fn lock_range(&self, s: u64, e: u64) -> HeldNodes<V> {
        let mut pos = Position::new();
        // SAFETY: precondition forwarded.
        unsafe { self.lock_range_at(s, e, &mut pos) }.0
    }

    /// `lock_range` that also hands back the traversal it locked from: `pos` filled by a `find`
    /// of `[s, e)` at the returned number of levels. Its upper levels are a first guess for a
    /// swap in the same read section (`swap_locked_at`), which saves that swap's `find`
    /// (the fusion of traversal and locking of Fig. 18).
    ///
    /// # Safety
    /// As `lock_range`.
    pub(crate) unsafe fn lock_range_at(
        &self,
        s: u64,
        e: u64,
        pos: &mut Position<V>,
    ) -> (HeldNodes<V>, usize) {
        'restart: loop {
            let levels = self.levels();
            // SAFETY: precondition forwarded.
            unsafe { self.find(s, e, levels, pos) };
            let mut node = pos.preds[0];
            // SAFETY: reached from the head, alive.
            if !unsafe { lock_node(node) } {
                continue 'restart;
            }
            let mut locked = Vec::with_capacity(4);
            locked.push(node);
            // SAFETY: `node` is held by us, alive.
            let mut next = ptr::<V>(unsafe { (*node).load(0) });
            // SAFETY: `next` is reached from a held node; alive per the precondition.
            while !next.is_null() && unsafe { (*next).start } < e {
                // SAFETY: as above.
                if !unsafe { lock_node(next) } {
                    for &n in &locked {
                        // SAFETY: held by us.
                        unsafe { unlock_node(n) };
                    }
                    continue 'restart;
                }
                locked.push(next);
                // SAFETY: a node we hold or reached from one; alive (held or per the precondition).
                if unsafe { (*next).end } <= s {
                    // A concurrent insert between the predecessor and the range: advance.
                    // SAFETY: held by us.
                    unsafe { unlock_node(node) };
                    locked.remove(0);
                }
                node = next;
                // SAFETY: a node we hold or reached from one; alive (held or per the precondition).
                next = ptr(unsafe { (*node).load(0) });
            }
            // SAFETY: every node of `locked` was locked above by us and not released.
            return (unsafe { HeldNodes::new(locked) }, levels);
        }
    }
}
