//! Per-domain counters: grace periods, early exits, reclaimer batches.
//!
//! Plain statistics, not part of any protocol: they are std atomics even under loom. The
//! counters a test polls to know where another thread is (`synchronize_calls`,
//! `grace_periods`) are incremented with `Release` and read with `Acquire`, so a test that sees a
//! count also sees what the counting thread did before it (e.g. its increment of `cur-gp`).
//!
//! Not for: performance measurement of the read path (readers never touch these).

use crate::sync::stat::AtomicU64;
use std::sync::atomic::Ordering;

/// A snapshot of a domain's counters (see [`crate::Domain::stats`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Stats {
    /// `synchronize()` calls that got past their entry barrier (counted before the mutex wait).
    pub synchronize_calls: u64,
    /// Grace periods actually run (the rest of the calls exited early, sharing one).
    pub grace_periods: u64,
    /// `synchronize()` calls that returned without running a grace period because a full one
    /// elapsed while they waited for the writer mutex.
    pub early_exits: u64,
    /// Reclaimer batches (one `synchronize()` each).
    pub batches: u64,
    /// Callbacks run.
    pub callbacks_run: u64,
    /// Callbacks that panicked (the panic is caught on the reclaimer thread and counted).
    pub callback_panics: u64,
}

/// The live counters behind [`Stats`] (crate-internal; `pub` only to appear in the sealed
/// flavor trait).
#[derive(Debug, Default)]
pub struct Counters {
    pub(crate) synchronize_calls: AtomicU64,
    pub(crate) grace_periods: AtomicU64,
    pub(crate) early_exits: AtomicU64,
    pub(crate) batches: AtomicU64,
    pub(crate) callbacks_run: AtomicU64,
    pub(crate) callback_panics: AtomicU64,
}

impl Counters {
    /// `Release`: pairs with the `Acquire` loads in [`Counters::snapshot`] (test observability).
    pub(crate) fn bump(counter: &AtomicU64, n: u64) {
        counter.fetch_add(n, Ordering::Release);
    }

    pub(crate) fn snapshot(&self) -> Stats {
        // Acquire: pairs with the Release increments in `bump`.
        let get = |c: &AtomicU64| c.load(Ordering::Acquire);
        Stats {
            synchronize_calls: get(&self.synchronize_calls),
            grace_periods: get(&self.grace_periods),
            early_exits: get(&self.early_exits),
            batches: get(&self.batches),
            callbacks_run: get(&self.callbacks_run),
            callback_panics: get(&self.callback_panics),
        }
    }
}
