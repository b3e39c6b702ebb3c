//! Shared mappings' shmem object numbers: each `MAP_SHARED` anonymous mapping is a shmem object
//! of its own, numbered 1, 2, ... in creation order like the inode numbers Linux hands out
//! (`RegionStore::next_shmem`), from one counter per space that stores of parallel designs
//! share.
//!
//! Not for: private mappings' anon identities (`core_state.rs` hands those out in blocks).

use super::AnonId;
use crate::sync::stat::AtomicU64;
use std::sync::atomic::Ordering;

/// Shared mappings' shmem object numbers, 1, 2, ... in creation order.
#[derive(Debug, Default)]
pub(crate) struct ShmemNumbers {
    /// The last number handed out.
    last: AtomicU64,
}

impl ShmemNumbers {
    /// A fresh number.
    pub(crate) fn take(&self) -> AnonId {
        // Relaxed: a unique number is all that is needed; the window's lock publishes the
        // region that carries it.
        let n = self.last.fetch_add(1, Ordering::Relaxed) + 1;
        AnonId::decode(n).expect("numbers start at 1")
    }

    /// Returns `n` unused if it is still the last one handed out (so a sequential history has
    /// no holes); otherwise it stays unused.
    pub(crate) fn give_back(&self, n: AnonId) {
        let n = AnonId::encode(Some(n));
        // Relaxed: as in `take`.
        let _ = self
            .last
            .compare_exchange(n, n - 1, Ordering::Relaxed, Ordering::Relaxed);
    }
}
