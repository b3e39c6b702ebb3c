//! The `bonsai` design: ASPLOS'12 §5.3 "pure RCU" address spaces. The region set is the Bonsai
//! tree (`aspace_map::BonsaiMap`, through `region/bonsai_store.rs`): page faults look regions
//! up and fill without any lock, so a soft fault writes no shared cache line but its own PTE
//! and frame (no lock word, no reference count); system calls serialize on the space lock (the
//! paper's `mmap_sem` held for writing by `mmap`/`munmap`/`mprotect`) and edit the tree, one
//! writer at a time.
//!
//! # Locks
//!
//! - **System calls** (`mmap`, `munmap`, `mprotect`, `madvise`): the space lock (a mutex, the
//!   paper's `mmap_sem` in write mode) for the whole call, around the Linux body of
//!   `syscalls.rs` on a [`BonsaiStore`]. Each edit is one Bonsai update, published by one
//!   pointer store (`BonsaiMap::replace`), after the store marked every region that leaves
//!   the set (`region/bonsai_store.rs` has the leave rule for path copies: only regions that
//!   actually change are marked, copies of untouched ancestors share the unmarked object).
//!   The zap, the shootdown, frame and page-table frees come after, still under the lock.
//! - **Page fault**: stage 0 takes no lock: `syscalls::fault_rcu` over the tree's lock-free
//!   lookup, under the core's RCU read section (the tree shares the space's domain). Its doc
//!   lists what it answers and which race each check closes; the store supplies the two facts
//!   it needs: a miss is `Unmapped` (an edit is one commit, readers never see half a split) and
//!   a region leaves the set marked before its successor is published and before any of its
//!   entries change.
//! - **Retry** (`fault_rcu` could not decide): §5.3 simply retries the lock-free path. Here a
//!   retry is taken only when the tree changed under the fault (the region found now at the
//!   address has other bounds, or is marked: a concurrent edit replaced it), at most
//!   [`RCU_TRIES`] lock-free attempts in all; otherwise (a first write fault needing an anon
//!   identity, a missing page table, or the tries used up) stage 1 takes the space lock and
//!   runs `fault_locked`, as `coarse` does under its lock.
//!
//! **Termination.** Each fault makes at most [`RCU_TRIES`] lock-free attempts, each of which
//! ends (a lookup, a fill under one leaf lock); then `fault_locked` under the space lock, which
//! excludes every edit, so it never retries and always answers. A fault can therefore not be
//! starved by a stream of edits of its region (the paper's pure retry can, in principle).
//!
//! Lock order: space lock, then a leaf's fill lock, then the frame pool's locks; the lock-free
//! path takes only a leaf's fill lock. `maps()` and the region count take the space lock (a
//! snapshot between edits).
//!
//! # Shootdown: broadcast
//!
//! Like `coarse`'s (`Design::shootdown_policy`). Targeted shootdown would also be sound here:
//! the users record is kept by the access path's walks (shared by every design; a fill,
//! lock-free or not, records and resets nothing), the shared bodies read the masks after
//! changing the entries, and the one condition `page_table/users.rs` puts on a design, that no
//! reset of a leaf's record (`free_tables` scrubbing unlinked tables) falls between a walker's
//! bit and the shooter's read, holds trivially: every `free_tables` and every shooter hold the
//! space lock. It is not switched on because a first measurement showed no gain on the
//! security test's writers (2 CPUs; see the session report) and the policy is the lead's call
//! with proper runs (`Builder::targeted_shootdown_for_testing` runs it).
//!
//! Not for: parallel system calls (one writer at a time; that is `interval`'s).

#[cfg(all(test, not(loom)))]
mod tests;

use super::staged::Staged;
use super::syscalls::{fault_locked, fault_rcu, Retry};
use crate::core_state::Core;
use crate::error::Fault;
use crate::region::bonsai_store::{BonsaiRegions, BonsaiStore};
use crate::region::store::{RcuRegions, RegionStore};
use crate::shared::Shared;
use crate::sync::stat::Mutex;
use crate::types::{Access, RegionInfo};

/// Lock-free attempts of one fault before it takes the space lock (module doc).
pub(crate) const RCU_TRIES: usize = 3;

/// The `bonsai` design's state.
#[derive(Debug)]
pub(crate) struct Bonsai {
    /// The paper's `mmap_sem` in write mode: every edit of `regions` holds it.
    space: Mutex<()>,
    /// The regions: searched lock-free by faults, edited under `space`.
    regions: BonsaiRegions,
}

impl Bonsai {
    /// An empty design for the space `sh` (the tree is reclaimed through the space's domain).
    pub(crate) fn new(sh: &Shared) -> Bonsai {
        Bonsai {
            space: Mutex::new(()),
            regions: BonsaiRegions::new(sh.domain.clone()),
        }
    }

    /// Runs `body` on the store under the space lock.
    #[inline]
    fn locked<R>(&self, body: impl FnOnce(&mut BonsaiStore<'_>) -> R) -> R {
        let _space = self.space.lock();
        // SAFETY: every edit of `regions` goes through a store made here, under `space`.
        let mut store = unsafe { BonsaiStore::new(&self.regions) };
        body(&mut store)
    }

    /// Whether the tree changed under a fault that got `retry` at `va`: the region there now
    /// has other bounds, or was marked by an edit that has not published its successor yet.
    fn changed(&self, core: &Core, va: u64, retry: &Retry) -> bool {
        let guard = core.reader.read();
        match self.regions.lookup_rcu(va, &guard) {
            Some((range, stored)) => range != retry.region || stored.is_replaced(),
            None => true,
        }
    }

    /// The store, for tests that check it between calls.
    #[cfg(all(test, not(loom)))]
    pub(crate) fn check(&self) {
        self.locked(|s| s.check());
    }
}

impl Staged for Bonsai {
    type Store<'s> = BonsaiStore<'s>;

    #[inline]
    fn edit<R>(&self, body: impl FnOnce(&mut BonsaiStore<'_>) -> R) -> R {
        self.locked(body)
    }

    /// A fault through its stages (module doc); with the stage that resolved it.
    #[inline]
    fn resolve(
        &self,
        sh: &Shared,
        core: &mut Core,
        va: u64,
        access: Access,
    ) -> (Result<(), Fault>, usize) {
        for attempt in 1..=RCU_TRIES {
            match fault_rcu(sh, core, &self.regions, va, access) {
                Ok(r) => return (r, 0),
                Err(retry) => {
                    if attempt == RCU_TRIES || !self.changed(core, va, &retry) {
                        break;
                    }
                }
            }
        }
        #[cfg(all(test, not(loom)))]
        crate::fault_inject::STAGE2_BEFORE_WINDOW.reached();
        let r = self.locked(|store| fault_locked(sh, core, &*store, va, access));
        (r, 1)
    }

    fn region_infos(&self) -> Vec<RegionInfo> {
        self.locked(|s| s.iter().map(|r| r.info()).collect())
    }

    fn regions_len(&self) -> u64 {
        self.locked(|s| s.len() as u64)
    }
}
