//! Per-slot retirement of replaced records and used descriptors: batched grace periods, freed
//! by the thread that retired them (the skiplist's scheme, `skiplist/retire.rs`, whose module
//! doc has the measurements that motivated it).
//!
//! Handing each operation's garbage to the domain (`defer_drop`: a box and a push on the
//! domain's one queue mutex per operation) made that queue a line every updater writes, and made
//! the domain's reclaimer thread free every record: a third runnable thread competing with the
//! updaters (on a 2-CPU machine, with `readers-writers`' reader). Instead each pooled reader slot
//! owns a [`RetireList`]:
//! 1. `retire` appends an operation's garbage to the slot's current batch (no shared write);
//! 2. a batch of [`BATCH`] pieces is handed off: it gets the slot's next ticket `t`, moves to the
//!    slot's limbo, and one callback is queued on the domain whose only work is
//!    `done.fetch_max(t)` after a grace period;
//! 3. `collect` (after every operation of the slot, once it holds no slot lock) frees every limbo
//!    batch whose ticket is `<= done`, on the calling thread.
//!
//! Invariants: a piece is in one batch, once; tickets increase along the limbo; `done` reaches
//! `t` only after a grace period that began after batch `t`'s pieces were unlinked. Freeing
//! inside the caller's own read section is sound: a grace period that ended while that section
//! runs did not wait for it, so the section began after the grace period began and cannot have
//! reached a piece unlinked before it.
//!
//! Nodes are not retired here: Refcache frees them (`reclaim.rs`).

use super::reclaim::Garbage;
use crate::skiplist::readers::SlotLocal;
use crate::sync::stat::AtomicU64;
use aspace_rcu::Domain;
use std::collections::VecDeque;
use std::sync::atomic::Ordering;
use std::sync::Arc;

/// Pieces (records and descriptors) per grace-period callback.
pub(crate) const BATCH: usize = 64;

/// One slot's retired pieces (see the module doc).
pub(crate) struct RetireList<V> {
    /// Retired since the last hand-off.
    batch: Garbage<V>,
    /// Handed-off batches, oldest first, with their tickets.
    limbo: VecDeque<(u64, Garbage<V>)>,
    /// The ticket of the next hand-off (the first is 1: `done == 0` covers none).
    next_ticket: u64,
    /// Highest ticket whose grace period has ended (written by the domain's callbacks).
    done: Arc<AtomicU64>,
}

// SAFETY: the list owns its pieces; whoever frees them drops their values (`V: Send`).
unsafe impl<V: Send> Send for RetireList<V> {}

impl<V> Default for RetireList<V> {
    fn default() -> Self {
        Self {
            batch: Garbage::default(),
            limbo: VecDeque::new(),
            next_ticket: 1,
            done: Arc::new(AtomicU64::new(0)),
        }
    }
}

impl<V: Send + 'static> RetireList<V> {
    /// Takes the pieces of `garbage` (unlinked by the caller's publication, now visible) and
    /// frees them after a grace period (at a later `collect`). Frees nothing itself.
    pub(crate) fn retire(&mut self, garbage: &mut Garbage<V>, domain: &Domain) {
        self.batch.records.append(&mut garbage.records);
        self.batch.descs.append(&mut garbage.descs);
        if self.batch.records.len() + self.batch.descs.len() >= BATCH {
            self.hand_off(domain);
        }
    }

    /// Requests a grace period for the current batch (one domain callback).
    fn hand_off(&mut self, domain: &Domain) {
        let ticket = self.next_ticket;
        self.next_ticket += 1;
        let done = Arc::clone(&self.done);
        // Release: pairs with the Acquire load in `collect`; the callback runs after a grace
        // period that began after this call, hence after the pieces were unlinked.
        domain.call(move || {
            done.fetch_max(ticket, Ordering::Release);
        });
        let batch = std::mem::take(&mut self.batch);
        self.limbo.push_back((ticket, batch));
    }

    /// Frees every limbo batch whose grace period has ended (values are dropped here: call it
    /// holding no slot lock).
    #[inline]
    pub(crate) fn collect(&mut self) {
        let Some(&(first, _)) = self.limbo.front() else {
            return;
        };
        // Acquire: pairs with the callback's Release, which follows the grace period.
        let done = self.done.load(Ordering::Acquire);
        if first > done {
            return;
        }
        while self.limbo.front().is_some_and(|&(t, _)| t <= done) {
            // Popped before it is freed: a value whose drop panics frees the rest of its
            // batch (`Garbage`'s drop) and leaves the list consistent.
            let (_, batch) = self.limbo.pop_front().expect("checked non-empty");
            drop(batch);
        }
    }

    /// Removes and returns every piece not yet freed; the caller frees them after a grace
    /// period that begins after this call.
    pub(crate) fn take_all(&mut self) -> Garbage<V> {
        let mut all = std::mem::take(&mut self.batch);
        for (_, mut b) in self.limbo.drain(..) {
            all.records.append(&mut b.records);
            all.descs.append(&mut b.descs);
        }
        all
    }
}

impl<V: Send + 'static> SlotLocal for RetireList<V> {
    fn release(&mut self, domain: &Domain) {
        let all = self.take_all();
        if !all.is_empty() {
            domain.defer_drop(all);
        }
    }
}

impl<V> Drop for RetireList<V> {
    fn drop(&mut self) {
        // Freed now, grace period or not: a list is dropped either empty (a temporary one,
        // after `release`) or with its map's reader pool, when no thread can reach the map's
        // records any more (the map is being dropped: no guard-bound reference or operation on
        // it is alive).
        self.limbo.clear();
    }
}
