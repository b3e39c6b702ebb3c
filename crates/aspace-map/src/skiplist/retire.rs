//! Per-slot retirement of unlinked skiplist nodes: batched grace periods, freed by the thread
//! that retired them.
//!
//! Every swap unlinks its old nodes and must free them only after an RCU grace period. Handing
//! each swap's nodes to the domain (`defer_drop`, one box and one push on the domain's single
//! queue mutex per swap) made that queue the only line every updater wrote, and made the domain's
//! reclaimer thread free every node of every updater: on a 2-CPU machine a third runnable thread
//! competing with two updaters, and every free a *remote* free into another thread's allocator
//! pages. Instead each pooled reader slot (`readers.rs`) owns a [`RetireList`]:
//!
//! 1. `retire` appends the nodes to the slot's current batch (no shared write);
//! 2. when the batch reaches [`BATCH`] nodes it is *handed off*: it gets the slot's next ticket
//!    `t`, moves to the slot's `limbo` queue, and one callback is queued on the domain
//!    (`Domain::call`) whose only work is `done.fetch_max(t)` after a grace period;
//! 3. at every `retire` (every swap, inserts included) the slot frees, on the calling thread,
//!    every limbo batch whose ticket is `<= done`: their grace period has ended (one load of
//!    `done`, a line the reclaimer writes once per grace period, when the limbo is not empty).
//!    "Frees" drops the values and links and gives the memory to the slot's node pool
//!    (`pool.rs`), which keeps a bounded number of blocks for the slot's next allocations and
//!    frees the rest: this is the one point where node memory becomes reusable.
//!
//! So per [`BATCH`] nodes the shared work is one domain push and one tiny callback, and the frees
//! run on the updater that retired the nodes, which in the benchmarks (and usually) also
//! allocated them: mimalloc's local free path, no cross-thread free. This is how Linux runs
//! `call_rcu` callbacks too: per CPU, invoked on the CPU that queued them. The cost of freeing is
//! not removed, it is moved: with one updater the old design freed on the (otherwise idle)
//! second CPU for free, now the updater pays its own frees; with two updaters on two CPUs the
//! frees no longer need a third thread's CPU time.
//!
//! Invariants: a node is in at most one batch, once; tickets of a slot increase along `limbo`;
//! `done` only grows and reaches `t` only after a grace period that began after batch `t`'s nodes
//! were unlinked (the callback is queued after the unlink and the reclaimer synchronizes after
//! taking it). Freeing inside the caller's own read section is sound: a grace period that ended
//! while that section runs did not wait for it, so the section began after the grace period
//! began and cannot have reached a node unlinked before it.
//!
//! Pending nodes: at most one partial batch plus the limbo per slot (the limbo is freed by the
//! slot's next operation after its grace period). [`RetireList::take_all`] (the map's `barrier`) and the map's drop
//! release them; a temporary reader (all slots busy) gives its list to the domain (`release`).
//!
//! Not for: deciding *when* a node may be unlinked (swap), or values' lifetimes beyond their
//! node.

use super::node::Node;
use super::pool::NodePool;
use super::readers::SlotLocal;
use crate::sync::stat::AtomicU64;
use aspace_rcu::Domain;
use std::collections::VecDeque;
use std::sync::atomic::Ordering;
use std::sync::Arc;

/// Nodes per grace-period callback.
pub(crate) const BATCH: usize = 64;

/// Retired nodes handed to the domain as one value (the fallback path), freed when dropped.
pub(crate) struct Retired<V>(pub(crate) Vec<*mut Node<V>>);

// SAFETY: the nodes are owned by this batch alone (unreachable after their swap); dropping them
// drops their values on another thread, so `V: Send`.
unsafe impl<V: Send> Send for Retired<V> {}

impl<V> Drop for Retired<V> {
    fn drop(&mut self) {
        // SAFETY: retired nodes are unreachable for readers that began after their swap, this
        // runs after a grace period (or with no reader left, see `RetireList`'s drop), and
        // each node is in exactly one batch.
        unsafe { Node::dealloc_all(&mut self.0) };
    }
}

/// One slot's retired nodes (see the module doc).
pub(crate) struct RetireList<V> {
    /// Retired since the last hand-off; no grace period requested yet.
    batch: Vec<*mut Node<V>>,
    /// Handed-off batches, oldest first, with their tickets.
    limbo: VecDeque<(u64, Vec<*mut Node<V>>)>,
    /// The ticket of the next hand-off (the first is 1, so `done == 0` covers none).
    next_ticket: u64,
    /// Highest ticket whose grace period has ended (written by the domain's callbacks).
    done: Arc<AtomicU64>,
    /// An emptied batch buffer kept for the next batch (no allocation in steady state).
    spare: Vec<*mut Node<V>>,
}

// SAFETY: the list owns its nodes exclusively; whoever drops or frees them drops their values,
// so `V: Send` suffices to move the list (and that duty) to another thread.
unsafe impl<V: Send> Send for RetireList<V> {}

impl<V> Default for RetireList<V> {
    fn default() -> Self {
        Self {
            batch: Vec::new(),
            limbo: VecDeque::new(),
            next_ticket: 1,
            done: Arc::new(AtomicU64::new(0)),
            spare: Vec::new(),
        }
    }
}

impl<V: Send + 'static> RetireList<V> {
    /// Takes ownership of `nodes` (unlinked by the caller's swap, which is now visible) and frees
    /// them after a grace period; may free earlier batches whose grace period has ended, their
    /// memory going to `pool` (the same slot's, `pool.rs`) up to its bound.
    ///
    /// # Safety
    /// Every node is unreachable for operations that start after this call, and retired once.
    pub(crate) unsafe fn retire(
        &mut self,
        nodes: &[*mut Node<V>],
        domain: &Domain,
        pool: &mut NodePool<V>,
    ) {
        self.batch.extend_from_slice(nodes);
        if self.batch.len() >= BATCH {
            self.hand_off(domain);
        }
        self.collect(pool);
    }

    /// Requests a grace period for the current batch (one domain callback).
    fn hand_off(&mut self, domain: &Domain) {
        let ticket = self.next_ticket;
        self.next_ticket += 1;
        let done = Arc::clone(&self.done);
        // Release: pairs with the Acquire load in `collect`; the callback runs after a grace
        // period that began after this call, hence after the nodes were unlinked.
        domain.call(move || {
            done.fetch_max(ticket, Ordering::Release);
        });
        let next = std::mem::take(&mut self.spare);
        let batch = std::mem::replace(&mut self.batch, next);
        self.limbo.push_back((ticket, batch));
    }

    /// Frees every limbo batch whose grace period has ended into `pool` (values and links
    /// dropped, memory kept up to the pool's bound, the rest freed). Called by every `retire` (also an
    /// empty one: an insert), so limbo nodes are freed about one grace period after their hand-off
    /// rather than at the slot's next hand-off, which made `ds-map` measurably faster (nodes
    /// left waiting through a re-population keep their allocator pages partly used, so the
    /// inserts reuse scattered blocks and later traversals lose locality; see CHANGELOG.md).
    #[inline]
    fn collect(&mut self, pool: &mut NodePool<V>) {
        let Some(&(first, _)) = self.limbo.front() else {
            return;
        };
        // Acquire: pairs with the callback's Release, which follows the grace period.
        let done = self.done.load(Ordering::Acquire);
        if first > done {
            return;
        }
        while self.limbo.front().is_some_and(|&(t, _)| t <= done) {
            let (_, mut batch) = self.limbo.pop_front().expect("checked non-empty");
            // SAFETY: the batch's grace period has ended (module doc), each node is in one
            // batch, and nothing else frees limbo nodes: they may be freed, hence their memory
            // reused (`pool.rs`, "Why reuse is safe"). A value whose drop panics does not leak
            // the rest of the batch.
            unsafe { pool.recycle_all(&mut batch) };
            if self.spare.capacity() < batch.capacity() {
                self.spare = batch;
            }
        }
    }

    /// Removes and returns every node not yet freed (the current batch and the limbo); the
    /// caller frees them after a grace period that begins after this call.
    pub(crate) fn take_all(&mut self) -> Vec<*mut Node<V>> {
        let mut all = std::mem::take(&mut self.batch);
        for (_, b) in self.limbo.drain(..) {
            all.extend(b);
        }
        all
    }
}

impl<V: Send + 'static> SlotLocal for RetireList<V> {
    fn release(&mut self, domain: &Domain) {
        let all = self.take_all();
        if !all.is_empty() {
            domain.defer_drop(Retired(all));
        }
    }
}

impl<V> Drop for RetireList<V> {
    fn drop(&mut self) {
        let batch = std::mem::take(&mut self.batch);
        // Freed now, grace period or not: a list is dropped either empty (a temporary one,
        // after `release`) or with its map's reader pool, when no thread can reach the map's
        // nodes any more (the map is being dropped, so no guard-bound reference or operation
        // on it is alive).
        drop(Retired(batch));
        for (_, b) in self.limbo.drain(..) {
            drop(Retired(b));
        }
    }
}
