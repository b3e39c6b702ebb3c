//! Regions (the papers' VMAs): what a region is, and when Linux treats two neighbours as one.
//!
//! A region is `[start, end)` with [`Attrs`]: protection, private/shared, the `vm_flags` bits
//! that only matter for merging (`semantics::vm_flags`), and an [`AnonId`] standing for Linux's
//! `anon_vma` (absent until the region's first write fault). The region code is split in three:
//!
//! - this file: the values ([`Region`], [`Attrs`], [`AnonId`]) and Linux's compatibility rules;
//! - [`plan`]: the pure edit plan (the old pieces of a window in, the new pieces out: splitting,
//!   merging, anon identity adoption, `max_map_count`), shared by every design;
//! - [`store`]: where regions live ([`store::RegionStore`], the window a plan reads and the
//!   replacement it writes), the first store, a `BTreeMap` keyed by region end (`coarse`'s),
//!   the skiplist of regions and its lock-free lookup ([`store::RcuRegions`]).
//!
//! [`rcu_store`]: the `hybrid` design's store, RCU-freed region objects in a `BTreeMap` under a
//! tree lock taken around tree operations only (ASPLOS'12 §5.2).
//!
//! Beside them: [`gap`], the top-down gap search every store uses; [`count`] and [`shmem`],
//! the region count and the shmem numbers that stores of a parallel design share; and
//! `skiplist_store`, a test-only store over the interval skiplist (one `lock` + `swap` per
//! edit) that runs the region tests on the skiplist. The `interval` design does not use it:
//! it holds a window of the skiplist as its store (`designs/window.rs`).
//!
//! # Merging like `/proc/self/maps`
//!
//! Linux merges two adjacent anonymous regions when their `vm_flags` are equal and their
//! `anon_vma`s are compatible (one of them has none, or both the same). A private region gets its
//! `anon_vma` at its first **write** fault (a read fault maps the zero page), reusing the
//! `anon_vma` of an adjacent region whose flags differ at most in the access bits (next
//! neighbour first, then previous: `find_mergeable_anon_vma`). Split pieces keep their
//! `anon_vma`, so they merge back. A shared anonymous mapping is a shmem file of its own, so it
//! only merges with pieces of itself: it gets a fresh identity at `mmap`. When a new piece could
//! merge with both neighbours but the neighbours are incompatible with each other, Linux merges
//! with the previous one (`vma_merge_new_range`); the plan's left-to-right merge does the same.
//! Verified against the kernel (the differential test): two separately written regions
//! separated by a hole stay two lines when the hole is mapped; a region written next to a
//! written neighbour shares its `anon_vma` and merges after `mprotect` makes them equal.
//!
//! Not for: locking (the design wraps the store in its lock) or page tables.

pub(crate) mod bonsai_store;
pub(crate) mod count;
#[cfg(all(test, not(loom)))]
mod fault_injection_tests;
pub(crate) mod gap;
pub(crate) mod plan;
pub(crate) mod rcu_store;
pub(crate) mod shmem;
#[cfg(all(test, not(loom)))]
mod skiplist_store;
pub(crate) mod store;
// Not under loom: the stores' values hold loom atomics, which exist only inside a model.
#[cfg(all(test, not(loom)))]
mod tests;

use crate::types::{Prot, RegionInfo, Sharing};
use std::num::NonZeroU64;

/// An anon identity: Linux's `anon_vma`, which decides whether two private neighbours merge.
/// Identities are unique per space (`shared::AnonIds` hands them out in per-core blocks).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) struct AnonId(NonZeroU64);

impl AnonId {
    /// The identity numbered `n`, `None` for 0 (the encoding [`AnonId::encode`] uses for none).
    #[inline]
    pub(crate) fn decode(n: u64) -> Option<AnonId> {
        NonZeroU64::new(n).map(AnonId)
    }

    /// The number of `id`, 0 for none (how a store keeps it in one atomic word).
    #[inline]
    pub(crate) fn encode(id: Option<AnonId>) -> u64 {
        id.map_or(0, |a| a.0.get())
    }
}

/// The attributes of a region.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Attrs {
    /// Protection (known bits only).
    pub(crate) prot: Prot,
    /// Private or shared.
    pub(crate) sharing: Sharing,
    /// `vm_flags` bits besides the access bits (`semantics::vm_flags`).
    pub(crate) flags: u8,
    /// The anon identity (`anon_vma`), `None` until the first write fault of a private region.
    /// A shared region always has one: the number of its shmem object
    /// ([`store::RegionStore::next_shmem`]; `maps()` shows it as the inode).
    pub(crate) anon: Option<AnonId>,
    /// For a shared region, the address of offset 0 of its shmem object (where it was mapped;
    /// `maps()` shows `start - shm_base` as the offset); 0 for a private one. Equal in every
    /// piece of one object, so it never decides a merge.
    pub(crate) shm_base: u64,
}

impl Attrs {
    /// Whether a region with `self` directly followed by one with `next` is one region for Linux.
    #[inline]
    pub(crate) fn mergeable(&self, next: &Attrs) -> bool {
        self.prot == next.prot
            && self.sharing == next.sharing
            && self.flags == next.flags
            && (self.anon.is_none() || next.anon.is_none() || self.anon == next.anon)
    }

    /// Whether a private region may adopt the `anon_vma` of a neighbour with `other`
    /// (`anon_vma_compatible`: equal flags except the access bits).
    #[inline]
    pub(crate) fn anon_compatible(&self, other: &Attrs) -> bool {
        self.sharing == Sharing::Private
            && other.sharing == Sharing::Private
            && self.flags == other.flags
    }
}

/// One region, by value.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Region {
    /// First byte.
    pub(crate) start: u64,
    /// One past the last byte.
    pub(crate) end: u64,
    /// Its attributes.
    pub(crate) attrs: Attrs,
}

impl Region {
    /// The `maps()` line of the region.
    #[inline]
    pub(crate) fn info(&self) -> RegionInfo {
        let shared = self.attrs.sharing == Sharing::Shared;
        RegionInfo {
            start: self.start,
            end: self.end,
            prot: self.attrs.prot,
            sharing: self.attrs.sharing,
            offset: if shared {
                self.start - self.attrs.shm_base
            } else {
                0
            },
            inode: if shared {
                AnonId::encode(self.attrs.anon)
            } else {
                0
            },
        }
    }
}
