//! The region count of a design whose calls run in parallel: `max_map_count` enforced without
//! one shared counter on every edit (SOSP'25 §5.3's adaptive per-core limit counter), or with
//! one shared atomic as the benchmark baseline (`config::CountLimit`).
//!
//! A store that holds part of the region set (`interval`'s window) takes the regions an edit
//! adds before anything changes (`ENOMEM` at the limit, nothing changed) and gives back what an
//! edit removed at its commit.
//!
//! Not for: stores under one lock (`BTreeStore` counts its own map exactly).

use aspace_sync::{AtomicCounter, Counter, LimitCounter};

/// The region counter (module doc).
#[derive(Debug)]
pub(crate) enum RegionCount {
    /// SOSP'25 §5.3's adaptive per-core counter.
    PerCore(LimitCounter),
    /// One shared atomic (benchmark baseline).
    Shared(AtomicCounter),
}

impl RegionCount {
    /// Takes `n` regions for `core`.
    ///
    /// # Errors
    /// At the limit (nothing taken).
    #[inline]
    pub(crate) fn try_add(&self, core: usize, n: u64) -> Result<(), aspace_sync::LimitExceeded> {
        match self {
            RegionCount::PerCore(c) => c.try_add(core, n),
            RegionCount::Shared(c) => c.try_add(core, n),
        }
    }

    /// Gives back `n` regions.
    #[inline]
    pub(crate) fn sub(&self, core: usize, n: u64) {
        match self {
            RegionCount::PerCore(c) => c.sub(core, n),
            RegionCount::Shared(c) => c.sub(core, n),
        }
    }

    /// The count (exact when no call runs).
    #[cfg(all(test, not(loom)))]
    pub(crate) fn sum(&self) -> u64 {
        match self {
            RegionCount::PerCore(c) => c.sum(),
            RegionCount::Shared(c) => c.sum(),
        }
    }
}
