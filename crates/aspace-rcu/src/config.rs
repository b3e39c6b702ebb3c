//! Domain configuration (reclaimer batching, forced fallback for tests and benchmarks).
//!
//! Not for: per-reader settings (a reader has none).

use std::time::Duration;

/// How a [`crate::Domain`] batches reclamation. `DomainConfig::default()` suits production use;
/// tests shrink `batch_size` so that batching races show up.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DomainConfig {
    /// Once this many callbacks are queued the reclaimer starts a batch at once (and the
    /// enqueuer that crosses the mark wakes it). Default 4096. Bounds the garbage a fast
    /// updater can accumulate between two batches to about this many objects plus whatever
    /// arrives during one grace period.
    pub batch_size: usize,
    /// Below `batch_size`, the reclaimer waits at most this long after the first queued
    /// callback to gather a batch. Default 1 ms. A delay too long to add to `Instant::now()`
    /// (`Duration::MAX`) means no timer: batches start by size only, and `barrier()` and the
    /// domain's drop still run whatever is queued.
    pub batch_delay: Duration,
    /// `memb` only: run readers with full fences even if membarrier is available (for tests and
    /// for benchmarking the fallback). Default `false`.
    pub force_fence_fallback: bool,
}

impl Default for DomainConfig {
    fn default() -> Self {
        Self {
            batch_size: 4096,
            batch_delay: Duration::from_millis(1),
            force_fence_fallback: false,
        }
    }
}
