//! Node reclamation through Refcache (RadixVM §3.2): the one place that counts a node's uses,
//! decides when an empty node leaves the tree, and frees what operations unlink.
//!
//! # Counts (paper §3.2, §3.4)
//! Every node but the root is a Refcache object (`NodeObj`, `node_rc.rs`;
//! `aspace_sync::Refcache`) whose count is
//! - one per *used slot* (a record, or a child pointer): filling a slot takes a reference and
//!   keeps it as a bare count (`Ref::into_raw`), emptying one gives it back (`Core::put`);
//! - one per *traversal*: a range operation that locks a slot of a node first takes a
//!   reference through the node's weak reference (`Core::tryget`: "tree traversal does not
//!   require locks because it increments each node's reference count through a Refcache weak
//!   reference") and gives it back when it has released its slots ([`Pins`]). An expansion's
//!   new node starts with its creator's reference. The nodes a traversal only passes through
//!   are not referenced (RadixVM takes one at every level): each child pointer is one of its
//!   node's uses, so an ancestor of a referenced node cannot be freed, and the memory of a node
//!   freed under a traversal stays readable until the traversal's grace period ends; a
//!   `tryget` that fails sends the traversal back to the root.
//!
//! All of them go through the calling core's delta cache: operations on disjoint ranges under one
//! node do not share a counter's cache line. Lookups, visits and `alloc`'s gap walk take no
//! reference: they are RCU readers (the contract's `query` returns a reference valid for the
//! caller's guard), so a node's memory is freed only after a grace period (below).
//!
//! # Weak references and death
//! A parent links to a child by the child pointer in its slot and the child's one Refcache
//! `Weak`, kept in the child itself (`NodeRc`, `node_rc.rs`). When the count has been zero
//! for a whole Refcache epoch (no used slot, no traversal), Refcache's review clears the weak
//! reference and frees the object; `NodeObj`'s `Drop` (`Shared::remove` here) then
//! 1. clears the parent's slot (child pointer to free, one CAS; no one else writes a child
//!    pointer slot: lock bits live on value slots only);
//! 2. gives back the parent's count for that slot (the parent stays alive until then: that
//!    count is one of its uses);
//! 3. hands the node's memory to the map's RCU domain, so that lookups and lockers still inside
//!    it finish first.
//!
//! A node *folded* into its parent's slot (`tree.rs`, "Folding") is unlinked by its folder,
//! which gives back its used-slot counts and marks its object folded (`mark_folded`); its free
//! then only hands the memory to the domain (or frees it, when the map is dropping: the tree
//! no longer reaches it), without touching the parent, which may be gone by then.
//!
//! A range operation that meets a child whose `tryget` fails (freed, step 1 not done yet) waits
//! for the slot to change and then finds it free; one whose `tryget` revives a dying node (count
//! zero, not freed yet) keeps using it: Refcache's review then finds the dying bit cleared and
//! keeps the node. So nodes that empty and refill within an epoch are not freed and re-created
//! (§3.2: "a node must go unused for at least two Refcache epochs before it is deleted").
//!
//! # Under loom
//! The models check the slot lock protocol, not Refcache (which has its own models in
//! `aspace-sync`): `--cfg loom` builds a stand-in that counts nothing and frees no node before
//! the tree is dropped.
//!
//! # Records and descriptors
//! Replaced records and used descriptors are freed after a grace period of the map's domain:
//! one [`Garbage`] batch per operation (`Domain::defer_drop`).

#[cfg(not(loom))]
use super::node::Node;
use super::node::{Desc, Record};

/// What one operation unlinked: freed after a grace period.
pub(crate) struct Garbage<V> {
    pub(crate) records: Vec<*mut Record<V>>,
    pub(crate) descs: Vec<*mut Desc<V>>,
}

// SAFETY: the pointers are owned by the batch alone (unreachable for new readers); dropping it
// drops values on another thread, so `V: Send`.
unsafe impl<V: Send> Send for Garbage<V> {}

impl<V> Default for Garbage<V> {
    fn default() -> Self {
        Self {
            records: Vec::new(),
            descs: Vec::new(),
        }
    }
}

impl<V> Garbage<V> {
    pub(crate) fn is_empty(&self) -> bool {
        self.records.is_empty() && self.descs.is_empty()
    }
}

impl<V> Drop for Garbage<V> {
    fn drop(&mut self) {
        /// Frees the descriptors and the other records even if a value's drop panics.
        struct Rest<'a, V>(&'a mut Garbage<V>);
        impl<V> Drop for Rest<'_, V> {
            fn drop(&mut self) {
                for d in self.0.descs.drain(..) {
                    // SAFETY: unreachable, owned by this batch, freed once.
                    unsafe { Desc::dealloc(d) };
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

/// A node's memory, freed when dropped (after a grace period).
#[cfg(not(loom))]
struct NodeBox(*mut Node);

// SAFETY: an unlinked node, owned by this box alone.
#[cfg(not(loom))]
unsafe impl Send for NodeBox {}

#[cfg(not(loom))]
impl Drop for NodeBox {
    fn drop(&mut self) {
        // SAFETY: unlinked (its parent slot was cleared) and past a grace period; freed once.
        unsafe { Node::dealloc(self.0) };
    }
}

#[cfg(not(loom))]
pub(crate) use refcache::*;
#[cfg(loom)]
pub(crate) use stand_in::*;

#[cfg(not(loom))]
mod refcache {
    use super::super::node::{Node, NODE};
    use super::super::node_rc::Remove;
    use super::NodeBox;
    use crate::contract::MapError;
    use crate::fault::{try_reserve, AllocBudget};
    use aspace_rcu::Domain;
    use aspace_sync::{Core, Ref, Refcache, RefcacheConfig};
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;

    /// What every node's Refcache object shares with the map.
    pub(crate) struct Shared {
        /// Removed nodes' memory goes here.
        pub(crate) domain: Domain,
        /// Set when the map is dropped: the tree frees its nodes itself and objects freed by
        /// Refcache's teardown must not touch it.
        pub(crate) dropping: AtomicBool,
    }

    /// A node's Refcache object (`node_rc.rs`); its `Drop` calls [`Shared::remove`].
    pub(crate) type NodeObj = super::super::node_rc::NodeObj<Node>;

    impl Remove<Node> for Shared {
        /// Removes a node whose object Refcache freed (see the module doc, "Weak references
        /// and death").
        unsafe fn remove(&self, node: *mut Node, folded: bool) {
            if folded {
                // Folded: already unlinked; its parent's slot holds a record now and the
                // parent may be gone. Only the memory is left, for after a grace period (or
                // now, when the map is dropping: no reader is left, and the tree does not
                // reach an unlinked node).
                if self.dropping.load(Ordering::Acquire) {
                    // SAFETY: unreachable, freed once (this object's one drop).
                    unsafe { Node::dealloc(node) };
                } else {
                    self.domain.defer_drop(NodeBox(node));
                }
                return;
            }
            // Acquire: pairs with the map's drop; relaxed would do (no concurrent operation
            // can run while the map drops).
            if self.dropping.load(Ordering::Acquire) {
                return;
            }
            // SAFETY: the node is still linked (only this call unlinks it), so alive.
            let (parent, index) = unsafe { ((*node).parent, (*node).index) };
            // SAFETY: the parent is alive: its count includes this child's slot until below.
            let p = unsafe { &*parent };
            // Release: orders the node's (empty) state before whoever reuses the slot.
            let cleared = p.slots[index]
                .compare_exchange(
                    node as usize | NODE,
                    0,
                    Ordering::Release,
                    Ordering::Relaxed,
                )
                .is_ok();
            debug_assert!(
                cleared,
                "only a dead child's object clears its parent's slot"
            );
            if !p.rc.obj.is_null() {
                // The parent's use for this slot (no core here: the global count).
                // SAFETY: the slot held one count of the parent, taken by `into_raw`.
                drop(unsafe { Ref::from_raw(p.rc.obj) });
            }
            self.domain.defer_drop(NodeBox(node));
        }
    }

    /// Every object and weak reference a map's core is given is one of that map's (one
    /// Refcache per map): `ForeignHandle` cannot happen.
    const OWN: &str = "a node object of this map's Refcache";

    /// The traversal references an operation holds: node and reference.
    pub(crate) type Pins = Vec<(*const Node, Ref<NodeObj>)>;

    /// The counting side of an operation: the calling core's Refcache handle.
    pub(crate) struct Counter<'a> {
        pub(crate) core: &'a Core,
        pub(crate) shared: &'a Arc<Shared>,
    }

    impl Counter<'_> {
        /// Takes a traversal reference on `node` unless `pins` has one (the root needs none):
        /// `false` if the node was freed (its parent's slot is about to be cleared).
        ///
        /// # Safety
        /// `node` was read from a child pointer inside a read section (its memory is alive);
        /// `pins` has room for one more (`reserve_pins`).
        pub(crate) unsafe fn pin(&self, node: *const Node, pins: &mut Pins) -> bool {
            if pins.iter().any(|&(n, _)| n == node) {
                return true;
            }
            // SAFETY: the caller's contract.
            let Some(w) = (unsafe { (*node).rc.weak.as_ref() }) else {
                return true; // the root: never freed
            };
            match self.core.tryget(w).expect(OWN) {
                Some(r) => {
                    debug_assert!(pins.capacity() > pins.len(), "room reserved");
                    pins.push((node, r));
                    true
                }
                None => false,
            }
        }

        /// Makes `node` (fresh, unpublished, `used` slots used) a Refcache object pinned by the
        /// caller: two units of `budget`, then the object and its weak reference, allocated
        /// fallibly. On error nothing is counted and `node` is untouched.
        ///
        /// # Safety
        /// `node` is fresh and unpublished; `pins` has room for one more (`reserve_pins`).
        pub(crate) unsafe fn born(
            &self,
            node: *mut Node,
            used: usize,
            pins: &mut Pins,
            budget: Option<&AllocBudget>,
        ) -> Result<(), MapError> {
            if let Some(b) = budget {
                // Two allocations: the object and its weak cell.
                b.take()?;
                b.take()?;
            }
            let obj = NodeObj {
                node,
                owner: Arc::clone(self.shared) as Arc<dyn Remove<Node>>,
                folded: AtomicBool::new(false),
            };
            let (r, weak) = self.core.try_alloc_with_weak(obj).map_err(|obj| {
                // Handed back: not an object, its drop must not remove the node.
                obj.disarm();
                MapError::OutOfMemory
            })?;
            // SAFETY: the caller's contract: ours to write before publication.
            unsafe {
                (*node).rc.obj = Ref::as_ptr(&r);
                (*node).rc.weak = Some(weak);
            }
            for _ in 0..used {
                let _ = Ref::into_raw(self.core.get(&r).expect(OWN));
            }
            debug_assert!(pins.capacity() > pins.len(), "room reserved");
            pins.push((node, r));
            Ok(())
        }

        /// `delta` more (or fewer) used slots in `node`.
        ///
        /// # Safety
        /// `node` is pinned by `pins` or is the root; a negative `delta` gives back counts its
        /// slots held.
        pub(crate) unsafe fn adjust(&self, node: *const Node, delta: isize, pins: &Pins) {
            // SAFETY: pinned or the root: alive.
            let obj = unsafe { (*node).rc.obj };
            if obj.is_null() || delta == 0 {
                return;
            }
            if delta > 0 {
                let pin = &pins
                    .iter()
                    .find(|&&(n, _)| n == node)
                    .expect("a node whose slot is filled is pinned")
                    .1;
                for _ in 0..delta {
                    let _ = Ref::into_raw(self.core.get(pin).expect(OWN));
                }
            } else {
                for _ in 0..-delta {
                    // SAFETY: the slot held one count (the caller's contract).
                    self.core.put(unsafe { Ref::from_raw(obj) }).expect(OWN);
                }
            }
        }

        /// Gives back every traversal reference.
        pub(crate) fn unpin_all(&self, pins: &mut Pins) {
            for (_, r) in pins.drain(..) {
                self.core.put(r).expect(OWN);
            }
        }
    }

    /// Marks `node`'s object folded (`tree.rs`, "Folding"): its free will not touch the tree.
    ///
    /// # Safety
    /// `node` is pinned by the caller (its object is alive) and not the root.
    pub(crate) unsafe fn mark_folded(node: &Node) {
        // SAFETY: the caller's contract.
        if let Some(obj) = unsafe { node.rc.obj.as_ref() } {
            // Release: pairs with `NodeObj::drop`'s Acquire.
            obj.folded.store(true, Ordering::Release);
        }
    }

    /// Gives back traversal references without a core (through the objects' global counts).
    pub(crate) fn unpin_without_core(pins: Pins) {
        drop(pins);
    }

    /// Makes room for `extra` more traversal references (`fault::try_reserve`).
    pub(crate) fn reserve_pins(
        pins: &mut Pins,
        extra: usize,
        budget: Option<&AllocBudget>,
    ) -> Result<(), MapError> {
        try_reserve(pins, extra, budget)
    }

    /// Gives back the counts of `node`'s `used` slots (the map is being dropped; the objects
    /// are then freed by Refcache's teardown, and their `Drop` does nothing).
    ///
    /// # Safety
    /// The map is dropping (`Shared::dropping` set); `node` is not the root and its slots held
    /// `used` counts.
    pub(crate) unsafe fn forget(node: &Node, used: usize) {
        for _ in 0..used {
            // SAFETY: the caller's contract.
            drop(unsafe { Ref::from_raw(node.rc.obj) });
        }
    }

    /// A map's Refcache domain and what its node objects share.
    pub(crate) struct Reclaimer {
        rc: Refcache,
        shared: Arc<Shared>,
    }

    /// One core's Refcache handle (kept per pooled reader slot).
    pub(crate) type CoreHandle = Core;

    impl Reclaimer {
        /// `cores` per-core slots, the default configuration (10 ms epochs) or, `eager`,
        /// epochs as fast as operations run (tests: nodes freed as soon as possible); removed
        /// nodes' memory goes to `domain`.
        pub(crate) fn new(domain: Domain, cores: usize, eager: bool) -> Self {
            let config = if eager {
                // An epoch every few operations: maintenance at every 16th cache operation.
                RefcacheConfig {
                    maintain_every: 16,
                    ..RefcacheConfig::eager(64)
                }
            } else {
                RefcacheConfig::default()
            };
            Self {
                rc: Refcache::with_config(cores, config),
                shared: Arc::new(Shared {
                    domain,
                    dropping: AtomicBool::new(false),
                }),
            }
        }

        /// A handle on core slot `index`.
        pub(crate) fn core(&self, index: usize) -> CoreHandle {
            self.rc.core(index)
        }

        /// The counting side of an operation running on `core`.
        pub(crate) fn counter<'a>(&'a self, core: &'a CoreHandle) -> Counter<'a> {
            Counter {
                core,
                shared: &self.shared,
            }
        }

        /// Drives Refcache epochs on `core`: `rounds` synchronizations (Refcache frees an
        /// object at most 8 epochs after its last reference went; an ancestor emptied by a
        /// child's free takes as many more).
        pub(crate) fn collect(&self, core: &CoreHandle, rounds: usize) {
            for _ in 0..rounds {
                core.synchronize();
            }
        }

        /// Refcache's counters (epoch, live and freed node objects).
        pub(crate) fn stats(&self) -> aspace_sync::RefcacheStats {
            self.rc.stats()
        }

        /// The map is being dropped: objects freed from now on leave the tree alone.
        pub(crate) fn set_dropping(&self) {
            // Release: pairs with `NodeObj::drop`'s Acquire.
            self.shared.dropping.store(true, Ordering::Release);
        }
    }
}

#[cfg(loom)]
mod stand_in {
    //! Counts nothing, frees nothing (see the module doc).
    use super::super::node::Node;
    use crate::contract::MapError;
    use crate::fault::AllocBudget;

    /// No references are taken.
    #[derive(Default)]
    pub(crate) struct Pins(());

    pub(crate) struct Counter<'a>(std::marker::PhantomData<&'a ()>);

    /// No core.
    pub(crate) struct CoreHandle;

    /// No Refcache under loom.
    pub(crate) struct Reclaimer;

    impl Reclaimer {
        pub(crate) fn new(_domain: aspace_rcu::Domain, _cores: usize, _eager: bool) -> Self {
            Self
        }
        pub(crate) fn core(&self, _index: usize) -> CoreHandle {
            CoreHandle
        }
        pub(crate) fn counter<'a>(&'a self, _core: &'a CoreHandle) -> Counter<'a> {
            Counter::stand_in()
        }
        pub(crate) fn collect(&self, _core: &CoreHandle, _rounds: usize) {}
        pub(crate) fn set_dropping(&self) {}
    }

    impl Counter<'_> {
        pub(crate) fn stand_in() -> Self {
            Self(std::marker::PhantomData)
        }
        pub(crate) unsafe fn pin(&self, _node: *const Node, _pins: &mut Pins) -> bool {
            true
        }
        pub(crate) unsafe fn born(
            &self,
            _node: *mut Node,
            _used: usize,
            _pins: &mut Pins,
            _budget: Option<&AllocBudget>,
        ) -> Result<(), MapError> {
            Ok(())
        }
        pub(crate) unsafe fn adjust(&self, _node: *const Node, _delta: isize, _pins: &Pins) {}
        pub(crate) fn unpin_all(&self, _pins: &mut Pins) {}
    }

    pub(crate) unsafe fn forget(_node: &Node, _used: usize) {}

    pub(crate) fn unpin_without_core(_pins: Pins) {}

    pub(crate) unsafe fn mark_folded(_node: &Node) {}

    pub(crate) fn reserve_pins(
        _pins: &mut Pins,
        _extra: usize,
        _budget: Option<&AllocBudget>,
    ) -> Result<(), MapError> {
        Ok(())
    }
}
