//! The one trait the limit counters implement, and their error.
//!
//! A [`Counter`] counts a resource (regions, pages) used by many cores against a fixed limit:
//! `try_add` takes units if the limit allows, `sub` gives them back. Cores are indexes the caller
//! passes (its handle index); implementations with per-core state map core `c` to slot
//! `c % cores`. Three implementations, so the benchmark (`aspace bench limit-counter`) runs them
//! alike:
//! - [`LimitCounter`](crate::LimitCounter): the adaptive per-core counter of SOSP'25 §5.3, exact;
//! - [`AtomicCounter`](crate::AtomicCounter): one shared atomic, exact, the contended baseline;
//! - [`PercpuCounter`](crate::PercpuCounter): Linux `percpu_counter` style batching, scalable
//!   but *not* exact (it can pass the limit by what the cores hold unflushed).
//!
//! Not for: counting without a limit (a plain atomic does), or values that go negative.

use thiserror::Error;

/// `try_add` would have taken the count past the limit; nothing was added.
#[derive(Clone, Copy, Debug, Error, PartialEq, Eq)]
#[error("adding {requested} would exceed the limit of {limit}")]
pub struct LimitExceeded {
    /// The counter's limit.
    pub limit: u64,
    /// The amount that was refused.
    pub requested: u64,
}

/// A counter with a limit, updated from many cores.
pub trait Counter: Send + Sync {
    /// Adds `n` units on behalf of `core`, unless that would take the count past the limit (for
    /// the exact counters; see each type for what it guarantees). Adding 0 always succeeds.
    ///
    /// # Errors
    /// [`LimitExceeded`] when the units are refused; the count is unchanged.
    fn try_add(&self, core: usize, n: u64) -> Result<(), LimitExceeded>;

    /// Gives back `n` units on behalf of `core` (any core may give back units another took).
    /// Giving back more than was added is a caller bug: it cannot cause undefined behaviour (nor
    /// let an exact counter pass its limit), but `sum` is then off (the count saturates at 0).
    fn sub(&self, core: usize, n: u64);

    /// The current count: exact when no update runs concurrently.
    fn sum(&self) -> u64;

    /// The limit.
    fn limit(&self) -> u64;
}

/// `atomic -= k`, saturating at 0: one `fetch_sub` with `order`; if that wrapped (the caller gave
/// back more than the count, a bug), adds the excess back. Meanwhile others see a value above
/// any limit, so they refuse additions (spuriously, in the bug case only).
pub(crate) fn sub_saturating(
    atomic: &crate::sync::AtomicU64,
    k: u64,
    order: crate::sync::Ordering,
) -> u64 {
    let prev = atomic.fetch_sub(k, order);
    if prev >= k {
        prev - k
    } else {
        // Relaxed: undoes the wrap only; the units it re-adds were never real.
        atomic.fetch_add(k - prev, crate::sync::Ordering::Relaxed);
        0
    }
}
