//! The `hybrid` design: ASPLOS'12 §5.2 "hybrid locking/RCU". Page faults take **no space
//! lock**: the page tables are RCU-protected (walked lock-free, tables freed after a grace
//! period), and so are the individual region objects (`region/rcu_store.rs`: freed through the
//! space's `aspace_rcu` domain after a grace period); only the region **tree** (an ordinary
//! balanced tree, a `BTreeMap` of pointers to region objects) stays under a reader-writer lock
//! of its own, the **tree lock**, taken around tree operations only.
//!
//! # The locks, step by step
//!
//! - **Page fault**, first attempt (stage 0), `syscalls::fault_rcu` over the tree
//!   ([`RcuTree`]'s `RcuRegions`): an RCU read section of the space's domain; the tree lock
//!   *shared* for the lookup only, released at once; then the rights check and a checked fill
//!   under the leaf's fill lock alone (`PageTables::fill_checked`), which installs no table and
//!   is refused if the region was marked replaced (the page-table fill race, below).
//! - **Page fault**, on `Retry` (stage 1): the **space lock** shared (Linux's `mmap_sem` read),
//!   then `fault_locked` on the tree's [`Stable`] view (no edit can run: every edit holds the
//!   space lock exclusively), which always answers: the rules are `coarse`'s under its read
//!   lock. It serves: a lookup that found no region (a segmentation fault, or, in the paper, a
//!   split in flight: the "VMA split race", answered definitively here), a refused fill (the
//!   region was replaced meanwhile), a missing table on the way (a lock-free fault never
//!   installs one), a region's first write without an anon identity (adopting a neighbour's
//!   needs the neighbours stable), and a refused access on a region being replaced.
//! - **`mmap`, `munmap`, `mprotect`, `madvise`**: the space lock *exclusively* for the whole
//!   call (the paper's `mmap_sem` write); the Linux body runs on the tree's [`TreeEdit`] view,
//!   which reads the tree without the tree lock (no one else writes it) and takes the tree lock
//!   exclusively only inside `replace_window`, around the tree operations: faults wait for a
//!   system call only there, not during its placement search, zap, shootdown or table frees.
//! - **`maps()`, the region count**: the tree lock shared (a snapshot between commits).
//!
//! Lock order: space lock, then the tree lock, then a leaf's fill lock, then the frame pool's
//! locks. A lock-free fault takes the tree lock alone and releases it before its fill; the
//! `Retry` path takes the space lock then leaf locks; so there is no cycle.
//!
//! # The races of §5.2, and how each is detected
//!
//! - **Page-table fill race** (a fault that looked its region up, then `munmap` or `mprotect`
//!   of that region completes, then the fault fills): the edit marks every region object it
//!   removes, trims, splits or re-protects (`StoredRegion::mark_replaced`, in the store's
//!   commit, before the new state is visible and before the body touches any entry of the
//!   range), and the fault checks the mark under the leaf's lock after a `SeqCst` fence; if the
//!   editor's clear took the leaf lock first the fault sees the mark, else the editor's clear
//!   finds and removes the fault's entry (its frame is freed after the shootdown): "either the
//!   page fault handler's race check will observe the modified VMA, or `munmap` will observe
//!   and free pages allocated by the racing page fault". A marked region's fault retries on the
//!   `Retry` path. The paper's second check, that the address is still inside the region's
//!   bounds, is implied: bounds never change in place here (a trimmed region is a new object,
//!   and the old one is marked).
//! - **VMA split race** (the fault's lookup between the two tree operations of a split finds
//!   nothing): a miss retries under the space lock (the store publishes a window in one
//!   exclusive section, so a miss is never a split in flight here; the rule is kept anyway:
//!   `region/rcu_store.rs`). A fault that found the *old* region of a split is refused at its
//!   fill by the mark: it never uses the half the address does not belong to.
//! - **Page-table deallocation race**: tables are freed through the RCU domain
//!   (`PageTables::free_tables`, under the space lock), and a lock-free fault walks inside its
//!   read section and installs no table.
//!
//! # Termination
//!
//! One lock-free attempt, then the `Retry` path, which has no retry of its own: under the space
//! lock's shared side no edit runs, so its lookup and fill answer (`Unmapped`, `Protection`,
//! out of memory, or filled). A fault therefore takes at most two attempts, whatever the edits
//! do; the space lock is fair (`parking_lot`), so the second attempt waits at most for the
//! edits queued before it.
//!
//! # Shootdown
//!
//! Broadcast, as `coarse`: the design records no page-table users (targeted shootdown would
//! need every walk that can cache an entry to record its core, which this design's lock-free
//! fills do through the same walk as `interval`'s; not argued here, so not used).
//!
//! Not for: the tree (`region/rcu_store.rs`), the Linux rules (`syscalls.rs`).

use super::staged::Staged;
use super::syscalls::{fault_locked, fault_rcu};
use crate::core_state::Core;
use crate::error::Fault;
use crate::region::rcu_store::{RcuTree, Stable, TreeEdit, TreeToken};
use crate::shared::Shared;
use crate::sync::stat::RwLock;
use crate::types::{Access, RegionInfo};

/// The `hybrid` design's state: the space lock (over the tree's edit token) and the tree.
#[derive(Debug)]
pub(crate) struct Hybrid {
    /// The paper's `mmap_sem`: system calls take it exclusively, faults shared only on their
    /// `Retry` path. It holds the tree's edit token, so only its holders can edit or read the
    /// tree without the tree lock.
    space: RwLock<TreeToken>,
    /// The regions (RCU-freed objects in a tree under the tree lock).
    tree: RcuTree,
}

impl Hybrid {
    /// An empty design for the space `sh` (its region objects are freed through the space's
    /// domain, whose read sections cover a lock-free fault).
    pub(crate) fn new(sh: &Shared) -> Hybrid {
        let (tree, token) = RcuTree::new(sh.domain.clone());
        Hybrid {
            space: RwLock::new(token),
            tree,
        }
    }

    /// Checks the tree's invariants (tests).
    #[cfg(all(test, not(loom)))]
    pub(crate) fn check(&self) {
        self.tree.check();
    }
}

impl Staged for Hybrid {
    type Store<'s> = TreeEdit<'s>;

    /// The tree's edit view under the space lock held exclusively.
    #[inline]
    fn edit<R>(&self, body: impl FnOnce(&mut TreeEdit<'_>) -> R) -> R {
        let mut token = self.space.write();
        body(&mut self.tree.edit(&mut token))
    }

    /// A fault through its two attempts (module doc); with the stage that answered it.
    #[inline]
    fn resolve(
        &self,
        sh: &Shared,
        core: &mut Core,
        va: u64,
        access: Access,
    ) -> (Result<(), Fault>, usize) {
        if let Ok(r) = fault_rcu(sh, core, &self.tree, va, access) {
            return (r, 0);
        }
        let token = self.space.read();
        let view: Stable<'_> = self.tree.stable(&token);
        (fault_locked(sh, core, &*view, va, access), 1)
    }

    fn region_infos(&self) -> Vec<RegionInfo> {
        self.tree.snapshot().iter().map(|r| r.info()).collect()
    }

    fn regions_len(&self) -> u64 {
        self.tree.len() as u64
    }
}
