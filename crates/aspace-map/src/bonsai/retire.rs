//! `Retired`: the batch of nodes one update unlinked, freed together after a grace period.
//!
//! An update (one `map` or `alloc` call, possibly several commits) collects every published node
//! it unlinks. The facade hands the whole batch to the RCU domain as one callback, so an update
//! costs one callback however many nodes it replaced (rotations, trims, deletions). When the
//! batch is dropped (on the reclaimer thread, after a grace period) it frees the nodes; it never
//! follows their child pointers, which point to nodes owned by the tree or other batches.
//!
//! The first node is kept inline and the others in a `Vec` allocated on the second push, so the
//! common batch of one node (a removal or an `alloc` without rotation) allocates nothing: the
//! facade takes it out with [`Retired::into_single`] and hands the node itself to the domain
//! (`defer_free`, no allocation), instead of boxing the batch (`defer_drop`).
//!
//! Under `--cfg loom` the loom models keep the batch until the reader threads are joined, a
//! trivial stand-in for a grace period (the RCU crate's own models check grace periods).

use super::node::Node;

/// Nodes unlinked by one update, freed when the batch is dropped (see the module doc).
pub(crate) struct Retired<V> {
    /// The first retired node, or null.
    first: *mut Node<V>,
    /// The others, in retirement order.
    rest: Vec<*mut Node<V>>,
}

// SAFETY: the batch owns its nodes exclusively (they are unreachable from the tree and listed in
// one batch only); dropping it drops their values, so it may move to another thread if V: Send.
unsafe impl<V: Send> Send for Retired<V> {}

impl<V> Retired<V> {
    /// An empty batch.
    pub(crate) fn new() -> Self {
        Self {
            first: std::ptr::null_mut(),
            rest: Vec::new(),
        }
    }

    /// Adds a node unlinked by the current update.
    pub(crate) fn push(&mut self, node: *mut Node<V>) {
        if self.first.is_null() {
            self.first = node;
        } else {
            if self.rest.capacity() == 0 {
                // Rotations retire a few nodes per level: start big enough for most updates.
                self.rest.reserve(15);
            }
            self.rest.push(node);
        }
    }

    /// Empties the batch without freeing its nodes (an abandoned update: they are still
    /// linked in the tree, which owns them again).
    pub(crate) fn disown(&mut self) {
        self.first = std::ptr::null_mut();
        self.rest.clear();
    }

    /// Whether no node was retired.
    pub(crate) fn is_empty(&self) -> bool {
        self.first.is_null()
    }

    /// The only node of a batch of one (the batch is consumed), or the batch itself.
    pub(crate) fn into_single(self) -> Result<*mut Node<V>, Self> {
        if !self.first.is_null() && self.rest.is_empty() {
            let n = self.first;
            std::mem::forget(self);
            Ok(n)
        } else {
            Err(self)
        }
    }

    /// The retired nodes (for tests that check none is still reachable).
    #[cfg(all(test, loom))]
    pub(crate) fn nodes(&self) -> Vec<*mut Node<V>> {
        let first = (!self.first.is_null()).then_some(self.first);
        first.into_iter().chain(self.rest.iter().copied()).collect()
    }
}

impl<V> Drop for Retired<V> {
    fn drop(&mut self) {
        // Each node came from `Node::alloc` (a Box), was unlinked by the update that retired it
        // (or never published), is listed once, and the batch is dropped only after a grace
        // period (or after every reader of a loom model has been joined), so no reader can hold
        // it.
        let first = self.first;
        // SAFETY: as above.
        let _first = (!first.is_null()).then(|| unsafe { Box::from_raw(first) });
        let rest: Vec<Box<Node<V>>> = std::mem::take(&mut self.rest)
            .into_iter()
            // SAFETY: as above.
            .map(|n| unsafe { Box::from_raw(n) })
            .collect();
        // A `Vec` drops every element even if one's drop (a value's: the caller's code)
        // panics, and `_first` is dropped while unwinding: a panicking value leaks no node.
        drop(rest);
    }
}
