//! The `coarse` design: the region store under ONE space reader-writer lock, the stock kernel's
//! `mmap_sem` (the baseline of ASPLOS'12 §2 and SOSP'25 §2.2).
//!
//! - Page faults take the lock for **reading**: region lookup, then the page-table fill of the
//!   page under the leaf table's fill lock (concurrent faults on different pages proceed in
//!   parallel; two faults on one page allocate one frame).
//! - `mmap`, `munmap`, `mprotect` and `madvise` take it for **writing** for their whole duration:
//!   region edit, page-table clear/protect, the broadcast shootdown (waiting only for cores
//!   inside an access window, which never wait for this lock), frame frees, page-table frees.
//!
//! Because every modification holds the write lock, a fault never races with a modification of
//! its region or page tables: the region it looked up stays valid until it filled the entry.
//! The Linux rules are `syscalls.rs`'s; this file is only the lock policy around them.
//!
//! The store is a plain `BTreeMap` ([`BTreeStore`]) rather than `aspace_map`'s
//! `BTreeIntervalMap`, which carries its own internal `RwLock`: under the space lock that second
//! lock would only add two atomic read-modify-writes to every fault and call.
//!
//! # One core: the light mode (thesis §5.2, issue 22)
//!
//! The space lock is an [`aspace_sync::UpgradableRwLock`] of the space's lock group
//! (`Shared::space_lock_group`), which every core joins at attach (`Core::member`). While one
//! core is attached the lock runs in the light mode: a read section of the group's own RCU
//! domain and plain loads and stores of the lock word, no atomic read-modify-write. The attach
//! of a second core upgrades it (sets the group's flag, waits one grace period) before it
//! returns; from then on it is a real reader-writer lock (faults in parallel, modifications
//! exclusive), for good: no downgrade when cores detach, as in the thesis.
//!
//! A write section taken in the light mode also needs **no shootdown round** (issue 22: "the
//! shootdown handshake with no other core"). Every core is a member of the group, every memory
//! access runs on a core, and a second core's attach returns (so its first access can run)
//! only after the upgrade's grace period, which waits for this section: no other core can
//! hold a translation this section removes. Its `munmap`, `mprotect` and `madvise` flush only
//! the caller's own TLB (`Core::sole_core`, `syscalls::shoot_down_locked`): no fence, no
//! read-modify-write of a request word. Loom model
//! `loom_upgradable_rwlock_a_light_writer_needs_no_shootdown` (aspace-sync's `tests/loom.rs`)
//! fails when a thread-safe section skips its round too.
//!
//! Every path that reads the store is either a member or takes nothing:
//! - the four system calls and faults run on a core, with its member (lent out of the core
//!   for the call: `with_member`, which puts it back also when the call panics, so that an
//!   attached core never stops being a member: the light sections' skipped shootdown relies
//!   on it);
//! - `AddressSpace::maps()` runs on any thread without a core: it joins the group for the
//!   call, which **upgrades the lock if a core is attached** (the join is the second member)
//!   and costs nothing otherwise; a one-core embedder that wants to stay light calls it
//!   rarely (it is `/proc/self/maps`, not a fast path);
//! - `region_count()` (and so `stats()`) reads a copy of the count that every write section
//!   stores before it unlocks (a plain `Relaxed` store, no read-modify-write): it takes no lock
//!   and never upgrades; it may lag a concurrent `mmap`, as every counter of `stats()` may;
//! - the space's drop owns the lock (`&mut`); a forked child touches nothing (`fork.rs`);
//!   a core's detach does not read the store (its member leaves the group, no downgrade).
//!
//! Not for: scalability (every modification serializes everything; faults and modifications
//! exclude each other). That is what the later designs are for.

use super::ops::DesignOps;
use super::syscalls::{fault_locked, madvise_locked, mmap_locked, mprotect_locked, munmap_locked};
use crate::core_state::Core;
use crate::error::{Fault, VmError};
use crate::region::store::{BTreeStore, RegionStore};
use crate::semantics::{AdviceEffect, MmapRequest};
use crate::shared::Shared;
use crate::sync::stat::AtomicU64;
use crate::types::{Access, Prot, RegionInfo};
use aspace_sync::{LockGroup, Member, UpgradableRwLock};
use std::ops::Range;
use std::sync::atomic::Ordering::Relaxed;

/// The `coarse` design's state: the region store under the space lock.
#[derive(Debug)]
pub(crate) struct Coarse {
    /// The space lock's group (`Shared::space_lock_group`'s).
    group: LockGroup,
    regions: UpgradableRwLock<BTreeStore>,
    /// The store's region count, stored by every write section before it unlocks (module doc).
    count: AtomicU64,
}

impl Coarse {
    /// The design of the space `sh` (built for `coarse`: its lock group exists).
    pub(crate) fn new(sh: &Shared) -> Coarse {
        let group = sh
            .space_lock_group
            .clone()
            .expect("a coarse space has a space lock group");
        Coarse {
            regions: UpgradableRwLock::new(&group, BTreeStore::default()),
            group,
            count: AtomicU64::new(0),
        }
    }

    /// Runs `f` with the core's member lent out of it (the guard borrows the member while
    /// `f` borrows the core mutably). Moving a member is a copy of two pointers.
    ///
    /// The member goes back into the core also when `f` unwinds (a panic in a fault handler
    /// may be caught by the core's user, `session.rs`): a core stays a member for as long as
    /// it is attached. A core that left the group on unwind would let the next core's attach
    /// find no other member, join without the upgrade, and run light sections that send no
    /// shootdown while this core still holds translations in its TLB (review of issue 22,
    /// `light_shootdown_tests.rs`). The same unwind clears `sole_core`.
    #[inline]
    fn with_member<R>(&self, core: &mut Core, f: impl FnOnce(&Member, &mut Core) -> R) -> R {
        /// Puts the member back into the core when dropped (after `f`, or during unwinding).
        struct Lent<'c> {
            core: &'c mut Core,
            member: Option<Member>,
        }
        impl Drop for Lent<'_> {
            #[inline]
            fn drop(&mut self) {
                self.core.sole_core = false;
                self.core.member = self.member.take();
            }
        }
        // Always `Some` (joined at attach, put back on unwind); a join here is a fallback.
        let member = core.member.take().unwrap_or_else(|| self.group.join());
        let mut lent = Lent {
            core,
            member: Some(member),
        };
        let Lent { core, member } = &mut lent;
        let member = member.as_ref().expect("lent above");
        f(member, core)
    }

    /// Runs `f` on the store under the write lock and stores the new region count.
    #[inline]
    fn write<R>(&self, core: &mut Core, f: impl FnOnce(&mut Core, &mut BTreeStore) -> R) -> R {
        self.with_member(core, |member, core| {
            let mut store = self.regions.write(member);
            // A light section: this core is the space's only one until the section ends (module
            // doc), so its shootdowns need no round.
            core.sole_core = !store.is_thread_safe();
            // Cleared by `with_member` when the section ends, also on unwind.
            let r = f(core, &mut store);
            // Relaxed: a statistic (module doc), a plain store.
            self.count.store(store.len() as u64, Relaxed);
            r
        })
    }
}

impl DesignOps for Coarse {
    fn mmap(&self, sh: &Shared, core: &mut Core, req: MmapRequest) -> Result<u64, VmError> {
        self.write(core, |core, store| mmap_locked(sh, core, store, req))
    }

    fn munmap(&self, sh: &Shared, core: &mut Core, range: Range<u64>) -> Result<(), VmError> {
        self.write(core, |core, store| munmap_locked(sh, core, store, range))
    }

    fn mprotect(
        &self,
        sh: &Shared,
        core: &mut Core,
        range: Range<u64>,
        prot: Prot,
    ) -> Result<(), VmError> {
        self.write(core, |core, store| {
            mprotect_locked(sh, core, store, range, prot)
        })
    }

    fn madvise(
        &self,
        sh: &Shared,
        core: &mut Core,
        range: Range<u64>,
        effect: AdviceEffect,
    ) -> Result<(), VmError> {
        self.write(core, |core, store| {
            madvise_locked(sh, core, store, range, effect)
        })
    }

    fn fault(&self, sh: &Shared, core: &mut Core, va: u64, access: Access) -> Result<(), Fault> {
        sh.counters.of(core.id).bump_faults();
        self.populate_page(sh, core, va, access)
    }

    fn populate_page(
        &self,
        sh: &Shared,
        core: &mut Core,
        va: u64,
        access: Access,
    ) -> Result<(), Fault> {
        self.with_member(core, |member, core| {
            let regions = self.regions.read(member);
            #[cfg(all(test, not(loom)))]
            crate::fault_inject::COARSE_FAULT_IN_SECTION.reached();
            fault_locked(sh, core, &*regions, va, access)
        })
    }

    fn maps(&self) -> Vec<RegionInfo> {
        // A member for the call: upgrades the lock if a core is attached (module doc).
        let member = self.group.join();
        let regions = self.regions.read(&member);
        regions.iter().map(|r| r.info()).collect()
    }

    fn region_count(&self) -> u64 {
        // Relaxed: a statistic (module doc).
        self.count.load(Relaxed)
    }
}

#[cfg(all(test, not(loom)))]
mod review_tests;

#[cfg(all(test, not(loom)))]
mod light_shootdown_tests;
