//! A node's Refcache identity ([`NodeRc`]: its object and its one weak reference) and the
//! object type ([`NodeObj`]), below both the node (`node.rs`, which embeds a `NodeRc`) and the
//! reclamation policy (`reclaim.rs`, which counts through it and decides what a freed object
//! does): imports run `reclaim.rs -> node.rs -> node_rc.rs`.
//!
//! The types are generic over the node type `N` and reach the policy through the [`Remove`]
//! trait, so this file names neither `Node` nor the map's shared state. Under `--cfg loom` the
//! identity is a stand-in that counts nothing (`reclaim.rs`, "Under loom").

#[cfg(not(loom))]
pub(crate) use refcache::*;
#[cfg(loom)]
pub(crate) use stand_in::*;

#[cfg(not(loom))]
mod refcache {
    use aspace_sync::Weak;
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;

    /// What a node's object does when Refcache frees it (`reclaim.rs` implements it).
    pub(crate) trait Remove<N>: Send + Sync {
        /// Removes `node`, whose count stayed zero for a whole Refcache epoch; `folded`: the
        /// node was unlinked already (folded into its parent's slot).
        ///
        /// # Safety
        /// Called once per node, by its object's `Drop`.
        unsafe fn remove(&self, node: *mut N, folded: bool);
    }

    /// A node's Refcache object: its `Drop` (Refcache's free callback) removes the node.
    pub(crate) struct NodeObj<N> {
        pub(crate) node: *mut N,
        pub(crate) owner: Arc<dyn Remove<N>>,
        /// Set by the node's folder (which pins the object then). Kept here, not only in the
        /// node, so that the free can tell without reading the node: at the map's drop the
        /// tree has freed every linked node before Refcache's teardown frees the objects.
        pub(crate) folded: AtomicBool,
    }

    // SAFETY: the pointer is only used by `Drop`, which owns the node then (it is empty and
    // unreferenced; `Remove` says what it may touch).
    unsafe impl<N> Send for NodeObj<N> {}
    // SAFETY: as above; `&NodeObj` exposes nothing.
    unsafe impl<N> Sync for NodeObj<N> {}

    impl<N> Drop for NodeObj<N> {
        fn drop(&mut self) {
            if self.node.is_null() {
                // Disarmed: the object was never made (its allocation failed, `disarm`).
                return;
            }
            // Acquire: pairs with the folder's Release store (`reclaim::mark_folded`); Refcache's
            // free also follows the folder's pin release, which follows that store.
            let folded = self.folded.load(Ordering::Acquire);
            // SAFETY: Refcache drops an object once.
            unsafe { self.owner.remove(self.node, folded) };
        }
    }

    impl<N> NodeObj<N> {
        /// Drops an object value that never became a Refcache object (its allocation failed
        /// and handed it back) without removing its node.
        pub(crate) fn disarm(mut self) {
            self.node = std::ptr::null_mut();
        }
    }

    /// A node's Refcache identity: its object (as a bare pointer: the counts are held by its
    /// used slots and traversals, not by the node) and its one weak reference, through which
    /// traversals reach it.
    pub(crate) struct NodeRc<N> {
        pub(crate) obj: *const NodeObj<N>,
        pub(crate) weak: Option<Weak<NodeObj<N>>>,
    }

    impl<N> NodeRc<N> {
        /// The root's (no object: the root is never removed), and every node's until
        /// `Counter::born` sets it.
        pub(crate) fn none() -> Self {
            Self {
                obj: std::ptr::null(),
                weak: None,
            }
        }
    }
}

#[cfg(loom)]
mod stand_in {
    //! No Refcache object (see `reclaim.rs`, "Under loom").
    use std::marker::PhantomData;

    pub(crate) struct NodeRc<N> {
        pub(crate) obj: *const (),
        _node: PhantomData<*const N>,
    }

    impl<N> NodeRc<N> {
        pub(crate) fn none() -> Self {
            Self {
                obj: std::ptr::null(),
                _node: PhantomData,
            }
        }
    }
}
