//! `Retired`: the batch of nodes one update unlinked, freed together after a grace period.
//!
//! An update (one `map` or `alloc` call, possibly several commits) collects every published node
//! it unlinks. The facade hands the whole batch to the RCU domain with one `defer_drop`, so an
//! update costs one callback however many nodes it replaced (rotations, trims, deletions). When
//! the batch is dropped (on the reclaimer thread, after a grace period) it frees the nodes; it
//! never follows their child pointers, which point to nodes owned by the tree or other batches.
//!
//! Under `--cfg loom` the loom models keep the batch until the reader threads are joined, a
//! trivial stand-in for a grace period (the RCU crate's own models check grace periods).

use super::node::Node;

/// Nodes unlinked by one update, freed when the batch is dropped (see the module doc).
pub(crate) struct Retired<V> {
    nodes: Vec<*mut Node<V>>,
}

// SAFETY: the batch owns its nodes exclusively (they are unreachable from the tree and listed in
// one batch only); dropping it drops their values, so it may move to another thread if V: Send.
unsafe impl<V: Send> Send for Retired<V> {}

impl<V> Retired<V> {
    /// An empty batch.
    pub(crate) fn new() -> Self {
        Self { nodes: Vec::new() }
    }

    /// Adds a node unlinked by the current update.
    pub(crate) fn push(&mut self, node: *mut Node<V>) {
        self.nodes.push(node);
    }

    /// Whether no node was retired.
    pub(crate) fn is_empty(&self) -> bool {
        self.nodes.is_empty()
    }

    /// The retired nodes (for tests that check none is still reachable).
    #[cfg(all(test, loom))]
    pub(crate) fn nodes(&self) -> &[*mut Node<V>] {
        &self.nodes
    }
}

impl<V> Drop for Retired<V> {
    fn drop(&mut self) {
        for &n in &self.nodes {
            // SAFETY: each node came from `Node::alloc` (a Box), was unlinked by the update that
            // retired it, is listed once, and the batch is dropped only after a grace period (or
            // after every reader of a loom model has been joined), so no reader can hold it.
            drop(unsafe { Box::from_raw(n) });
        }
    }
}
