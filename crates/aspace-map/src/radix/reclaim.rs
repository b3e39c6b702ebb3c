//! Node reclamation: the one place that decides when an empty radix node leaves the tree and
//! when its memory (and every other piece an operation unlinked) is freed.
//!
//! # What RadixVM does, and what this does instead
//! RadixVM (§3.2) counts the used slots of each node with Refcache, links children through
//! Refcache *weak references*, and frees a node once its count has stayed zero for two epochs:
//! Refcache's review clears the parent's weak reference (pointer and "dying" bit, by one CAS) and
//! frees the node; a traversal that meets a dying child revives it by `tryget`. That avoids a
//! shared counter per node written by every operation in it, and amortises re-creation (a node
//! must stay unused for two epochs before it goes).
//!
//! Refcache (`aspace_sync::refcache`, issue 20) was not available when this tree was written:
//! its API had not been committed by the deadline this work had to wait for (11:45 UTC). So
//! nodes are reclaimed here through `aspace-rcu` instead, as the skiplist and Bonsai maps do:
//! - each node keeps a plain atomic count of its non-free slots (`Node::used`), updated by the
//!   operation that changes a slot's emptiness while holding the slot's lock. Operations on
//!   disjoint ranges under one node (a leaf covers 2 MiB) share that counter's cache line: the
//!   contention Refcache exists to remove;
//! - an operation that leaves a node it touched with a zero count tries to remove it at once
//!   ([`try_remove`]): no epoch delay, so a node that empties and refills at a high rate is
//!   removed and re-created each time;
//! - the removed node, and every record and descriptor an operation replaced, is freed after an
//!   RCU grace period of the map's domain ([`Garbage`], one `defer_drop` per operation that
//!   unlinked something).
//!
//! Plugging Refcache in later replaces `Node::used` by a Refcache object, the parent's slot by
//! its weak reference, and [`try_remove`] by Refcache's review callback; lookups stay
//! RCU-protected (the freed node must still go through a grace period: lock-free readers do not
//! take references).
//!
//! # Removal protocol ([`try_remove`])
//! 1. Try to lock every slot of the node, left to right, expecting each to be free and unlocked
//!    (one CAS from 0 to `LOCK`). Any other word (a record, a child, a lock held by an
//!    operation, a descriptor) means the node is in use: unlock what was taken, give up. No
//!    wait while holding anything, so removal cannot deadlock with range locking; an operation
//!    that holds a slot of the node finishes, sees the count zero, and tries again itself.
//! 2. Store 0 into the parent's slot (it was the child pointer; no lock bit lives there): new
//!    lockers and lookups see a free folded slot.
//! 3. Store `DEAD` into every slot of the node: a locker that had descended into it before step
//!    2 and waits on one of its locks restarts from the root; a lookup that reads it answers
//!    "free", which is linearizable (every page of the node was free and held by the remover
//!    between steps 1 and 3, and the lookup read the child pointer before step 2).
//! 4. Count the parent's slot as free; if that leaves the parent empty, try it too.
//! 5. Hand the node to the grace period.

use super::geom::{FANOUT, LEVELS};
use super::node::{Desc, Node, Record, DEAD, LOCK};
use crate::sync::Ordering;
use aspace_rcu::Domain;

/// What one operation unlinked: freed after a grace period (or at once if never published).
pub(crate) struct Garbage<V> {
    pub(crate) records: Vec<*mut Record<V>>,
    pub(crate) descs: Vec<*mut Desc<V>>,
    pub(crate) nodes: Vec<*mut Node>,
}

// SAFETY: the pointers are owned by the batch alone (unreachable for new readers); dropping it
// drops values on another thread, so `V: Send`.
unsafe impl<V: Send> Send for Garbage<V> {}

impl<V> Default for Garbage<V> {
    fn default() -> Self {
        Self {
            records: Vec::new(),
            descs: Vec::new(),
            nodes: Vec::new(),
        }
    }
}

impl<V> Garbage<V> {
    pub(crate) fn is_empty(&self) -> bool {
        self.records.is_empty() && self.descs.is_empty() && self.nodes.is_empty()
    }
}

impl<V> Drop for Garbage<V> {
    fn drop(&mut self) {
        /// Frees the nodes and descriptors even if a value's drop panics.
        struct Rest<'a, V>(&'a mut Garbage<V>);
        impl<V> Drop for Rest<'_, V> {
            fn drop(&mut self) {
                for d in self.0.descs.drain(..) {
                    // SAFETY: unreachable, owned by this batch, freed once.
                    unsafe { Desc::dealloc(d) };
                }
                for n in self.0.nodes.drain(..) {
                    // SAFETY: as above.
                    unsafe { Node::dealloc(n) };
                }
                while let Some(r) = self.0.records.pop() {
                    // SAFETY: as above.
                    unsafe { Record::dealloc(r) };
                }
            }
        }
        let rest = Rest(self);
        while let Some(r) = rest.0.records.pop() {
            // SAFETY: as above.
            unsafe { Record::dealloc(r) };
        }
    }
}

/// Hands `garbage` to `domain` (one callback), unless it is empty.
pub(crate) fn retire<V: Send + 'static>(domain: &Domain, garbage: Garbage<V>) {
    if !garbage.is_empty() {
        domain.defer_drop(garbage);
    }
}

/// Tries to remove every node of `candidates` that is empty, and then their emptied ancestors
/// (see the module doc); removed nodes go to `nodes`.
///
/// # Safety
/// Inside a read section of the domain the nodes are retired to (or nothing is freed while it
/// runs); the caller holds no slot lock (the candidates' slots are free to be tried).
pub(crate) unsafe fn reclaim(candidates: &mut Vec<*const Node>, nodes: &mut Vec<*mut Node>) {
    while let Some(n) = candidates.pop() {
        // SAFETY: forwarded; the node was reachable for the caller's read section.
        if let Some(parent) = unsafe { try_remove(n) } {
            nodes.push(n as *mut Node);
            candidates.push(parent);
        }
    }
}

/// Removes `node` if it is empty and nobody holds one of its slots; returns its parent (whose
/// count just dropped) if it did.
///
/// # Safety
/// As [`reclaim`].
pub(crate) unsafe fn try_remove(node: *const Node) -> Option<*const Node> {
    // SAFETY: the caller's read section keeps the node alive.
    let n = unsafe { &*node };
    if n.parent.is_null() || n.used.load(Ordering::Relaxed) != 0 {
        return None;
    }
    debug_assert!(n.level < LEVELS - 1);
    for i in 0..FANOUT {
        // Acquire: as a lock; a node whose slot we take is not being used by anyone.
        if n.slots[i]
            .compare_exchange(0, LOCK, Ordering::Acquire, Ordering::Relaxed)
            .is_err()
        {
            for j in 0..i {
                // Release: unlock as any holder does.
                n.slots[j].store(0, Ordering::Release);
            }
            return None;
        }
    }
    // Every slot is free and ours. The node's `used` is exact (a hint is only stale while an
    // operation holds a slot, and none does).
    debug_assert_eq!(n.used.load(Ordering::Relaxed), 0);
    // SAFETY: a linked node's parent is alive (it has a child: not empty).
    let parent = unsafe { &*n.parent };
    // Release: pairs with lockers' Acquire loads; nothing is published through it but order.
    parent.slots[n.index].store(0, Ordering::Release);
    for i in 0..FANOUT {
        // Release: a locker waiting on this slot re-reads from the root and finds the parent's
        // slot free (stored above).
        n.slots[i].store(DEAD, Ordering::Release);
    }
    parent.add_used(-1);
    Some(n.parent)
}
