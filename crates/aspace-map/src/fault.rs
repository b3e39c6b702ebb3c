//! Allocation-failure injection: a per-map budget of node allocations, for tests.
//!
//! Every node a map allocates goes through its one fallible allocation function (skiplist and
//! Bonsai `Node::try_alloc`; the btree's prepare step, see `btree.rs`), which first takes one
//! unit of the map's [`AllocBudget`]. The budget is off (unlimited) unless a test arms it with
//! the map's `fail_allocations_after(Some(n))`: then `n` more allocations succeed and every
//! further one fails with [`MapError::OutOfMemory`], as a real allocation failure does, until
//! it is disarmed with `None`. Each map takes every unit before anything of the operation is
//! published, so a failed call changes nothing (`tests/fault_injection.rs` checks that for every
//! allocation index of multi-node operations).
//!
//! Cost when off: one `Relaxed` load of a word that is only written by the test hook.
//!
//! Buffers that grow before a commit go through [`try_reserve`] (the radix map's held slots,
//! traversal references and expansion work list): a growth takes one unit and is fallible.
//!
//! Not for: the RCU domain's callback boxes and the maps' batch vectors, which use the global
//! allocator and abort on failure (bounded: one domain callback per update or per 64 retired
//! skiplist nodes; see the crate's lock and RCU contract).

use crate::contract::MapError;
use crate::sync::stat::AtomicUsize;
use std::sync::atomic::Ordering;

/// The budget value meaning "off".
const OFF: usize = usize::MAX;

/// Allocations left before injected failures (see the module doc).
#[derive(Debug)]
pub(crate) struct AllocBudget(AtomicUsize);

impl Default for AllocBudget {
    fn default() -> Self {
        Self(AtomicUsize::new(OFF))
    }
}

impl AllocBudget {
    /// Arms (`Some(n)`: `n` more allocations succeed) or disarms (`None`) the budget.
    pub(crate) fn set(&self, after: Option<usize>) {
        let n = after.map_or(OFF, |n| n.min(OFF - 1));
        // Relaxed: a test knob set between operations; the test's own synchronization (thread
        // start/join) orders it with the operations it is meant for.
        self.0.store(n, Ordering::Relaxed);
    }

    /// Takes one allocation from the budget: `Err(OutOfMemory)` when it is armed and spent.
    #[inline]
    pub(crate) fn take(&self) -> Result<(), MapError> {
        // Relaxed: see `set`.
        if self.0.load(Ordering::Relaxed) == OFF {
            return Ok(());
        }
        self.take_armed()
    }

    #[cold]
    fn take_armed(&self) -> Result<(), MapError> {
        // Relaxed: see `set`; the RMW keeps concurrent takers from overdrawing.
        match self
            .0
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| match n {
                OFF | 0 => None,
                n => Some(n - 1),
            }) {
            Ok(_) | Err(OFF) => Ok(()),
            Err(_) => Err(MapError::OutOfMemory),
        }
    }
}

/// Makes room for `extra` more elements in `v` without aborting: when `v` must grow, the growth
/// takes one unit of `budget` (if any) and is fallible (`Vec::try_reserve`, amortized).
pub(crate) fn try_reserve<T>(
    v: &mut Vec<T>,
    extra: usize,
    budget: Option<&AllocBudget>,
) -> Result<(), MapError> {
    if v.capacity() - v.len() >= extra {
        return Ok(());
    }
    if let Some(b) = budget {
        b.take()?;
    }
    v.try_reserve(extra).map_err(|_| MapError::OutOfMemory)
}
