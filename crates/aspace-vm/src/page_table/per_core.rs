//! The per-core organisation of page tables ([`PerCoreTables`]): one tree per core, each a
//! [`PageTables`] of its own over one shared table pool, filled from the **owner tree**, the
//! per-page metadata that owns the frames (`per_core/owner.rs`) (RadixVM, EuroSys'13 §3.3-3.4:
//! "pagefault fills in the page table entry in the local core's page table"; `munmap` clears
//! "the appropriate range in their per-core page table" on every core it collected from the
//! metadata).
//!
//! # What a tree holds
//!
//! Core `c`'s tree is walked by `c`'s access path and filled by `c`'s faults only, so a
//! translation one core filled is invisible to every other core's walk: each core faults once
//! per page it touches (the paper's "fill" faults, §5.2). Its entries are **copies** of the
//! owner tree's entries, which own the frames: clearing or discarding a copy frees nothing (the
//! owner entry's frame is freed after the shootdown of an edit that cleared it), and a tree
//! may be **discarded** whole at any time by its own core (detach, memory pressure: §3.3
//! "simply discarding page table pages when memory is low") and refilled by faults.
//!
//! Because a core's walks read only its own tree, the tree itself is the record of who may
//! cache a translation (§3.3, "precise TLB tracking"): an editor that clears or downgrades an
//! entry in core `c`'s tree targets `c`, and a core whose tree had no such entry cannot hold it
//! in its TLB (every TLB entry comes from a walk of the core's own tree, and an entry leaves the
//! tree only by an editor's change, which targets the core, or by the core's own discard, which
//! makes its next access window flush: `core_state.rs`). No walker records anything: the users
//! masks (`users.rs`) of the per-core trees are not used. Coherence of the one entry is the
//! whole argument: a walk that read the entry before the editor's change read a value
//! coherence-ordered before it, and the editor, which found the entry present under the leaf
//! lock, names the core.
//!
//! # Which trees an edit visits
//!
//! Those of the cores that the owner tree's changed leaves record as having copied from them
//! (their users masks, written under the owner leaf lock by the fill that copies:
//! `per_core/owner.rs`), and only trees of attached cores among them (the `attached` bitmap; a
//! core's bit is set at attach before it can fill anything, and cleared at detach after its
//! tree was discarded). A core whose bit the editor reads copied under the owner leaf lock
//! before the editor took it, so its attach precedes the editor's bitmap load too (program
//! order, then the lock's release/acquire).
//!
//! # Reclamation: the same RCU rules as the shared tree
//!
//! Tables of a per-core tree are freed by `free_tables` (an editor, any core, after clearing
//! the range in that tree) or by the owner's `discard`, and reused after a grace period of the
//! space's domain like the shared tree's (`cache.rs`): a table freed from core `c`'s tree goes
//! to the freeing core's cache and may be reused in that core's own tree. The lock-free walkers
//! of a tree are its owner (inside an access window or a lock-free fault, under its read
//! guard) and, here, the **editors**: a discard is not excluded by the design's locks, so an
//! editor visits other cores' trees inside an RCU read section of its own core, and a table it
//! is still inside is not reused before it leaves. Every unlink is a compare-exchange (`discard`
//! and `free_tables` may race for a table: one wins), and a leaf is zeroed only after its lock
//! holder left. The loom models (`per_core/loom_tests.rs`) run a walker against a foreign free
//! with reuse in the freer's own tree, and an editor's clear against a discard and refill.
//!
//! # Invariants
//!
//! - Core slot `c` has a tree from its first attach until the space drops (`trees[c]`); it is
//!   empty (root only) whenever no core is attached to the slot.
//! - Only core `c` fills `trees[c]` or discards it; editors only clear, downgrade and free.
//! - A copy in `trees[c]` has its owner entry present with the same frame and at least its
//!   rights, and core `c` recorded in the owner leaf (`per_core/owner.rs`), except while an
//!   editor that cleared or downgraded the owner entry has yet to reach the copy.
//! - The count of a tree's linked tables is kept in its owner's pool slot (`pool.rs`).
//!
//! Not for: the walk and edit algorithms (`mod.rs`), the choice between the organisations
//! (`organisation.rs`), the design's metadata (the design), or the shootdown itself.

use super::cache::PtCache;
use super::pool::TablePool;
use super::{PageTables, UserMask};
use crate::shootdown::CoreId;
use crate::sync::{AtomicU64, Ordering};
use crossbeam_utils::CachePadded;
use std::sync::{Arc, OnceLock};

/// One tree per core (module doc), beside the owner tree (`per_core/owner.rs`).
pub(crate) struct PerCoreTables {
    /// The table memory of every tree, the owner tree's included (counted in the slot after
    /// the cores': slot `slots()`).
    pool: Arc<TablePool>,
    /// The owner tree: the per-page metadata that owns the frames and records, per leaf, the
    /// cores that copied a translation from it (`per_core/owner.rs`).
    owner: PageTables,
    /// Core slot `c`'s tree, made at its first attach; each on lines of its own (its owner
    /// reads the root pointer on every walk).
    trees: Box<[CachePadded<OnceLock<PageTables>>]>,
    /// Bit `c` set while core slot `c` is attached (its tree may hold entries), one line per
    /// 64 slots (read by every edit, written at attach and detach).
    attached: Box<[CachePadded<AtomicU64>]>,
}

impl std::fmt::Debug for PerCoreTables {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PerCoreTables")
            .field("tables", &self.table_count())
            .finish()
    }
}

impl PerCoreTables {
    /// No tree yet, for up to `cores` core slots.
    pub(crate) fn new(cores: usize) -> PerCoreTables {
        let cores = cores.max(1);
        // One slot per core, and the owner tree's after them.
        let pool = Arc::new(TablePool::new(cores + 1));
        PerCoreTables {
            owner: PageTables::per_core(&pool, cores)
                .expect("no memory for the root of the owner page table"),
            pool,
            trees: (0..cores)
                .map(|_| CachePadded::new(OnceLock::new()))
                .collect(),
            attached: (0..cores.div_ceil(64))
                .map(|_| CachePadded::new(AtomicU64::new(0)))
                .collect(),
        }
    }

    /// The owner tree (`per_core/owner.rs`).
    #[inline]
    pub(crate) fn owner(&self) -> &PageTables {
        &self.owner
    }

    /// The core slots there are.
    pub(crate) fn slots(&self) -> usize {
        self.trees.len()
    }

    /// Attaches core `core`: makes its tree (at the slot's first attach; an earlier core of the
    /// slot left it empty) and marks it attached; returns the core's table cache, or `None`
    /// when the tree's root cannot be allocated (nothing changed).
    ///
    /// # Panics
    /// If `core` is beyond the slots the tables were made for.
    pub(crate) fn attach(&self, core: CoreId) -> Option<PtCache> {
        let c = core.index();
        if self.trees[c].get().is_none() {
            // Only the core holding slot `c` attaches it, so nobody races this `set`; were it
            // to lose anyway, its tree would simply be dropped unused.
            let _ = self.trees[c].set(PageTables::per_core(&self.pool, c)?);
        }
        // Relaxed: the bit store only has to precede this core's first fill in program order;
        // the fences that order it against an editor's bitmap load are `fill_checked`'s and
        // the editor's mark (module doc, "Which trees an edit visits").
        self.attached[c / 64].fetch_or(1 << (c % 64), Ordering::Relaxed);
        Some(PtCache::new(&self.pool, c))
    }

    /// Detaches core `core`: discards its tree into `cache` (through `domain`) and clears its
    /// attached bit. The caller drains `cache` afterwards.
    pub(crate) fn detach<F: aspace_rcu::Flavor>(
        &self,
        core: CoreId,
        cache: &mut PtCache,
        domain: &aspace_rcu::Domain<F>,
    ) {
        let c = core.index();
        self.tree(core).discard(cache, domain);
        // Relaxed: an editor that still sees the bit visits an empty tree (in its read
        // section, so the retired tables wait for it); one that does not skips a tree with
        // nothing to clear, and the detached core makes no more accesses.
        self.attached[c / 64].fetch_and(!(1 << (c % 64)), Ordering::Relaxed);
    }

    /// Core `core`'s tree (the one it walks and fills).
    ///
    /// # Panics
    /// If the core was never attached (`attach` makes the tree).
    #[inline]
    pub(crate) fn tree(&self, core: CoreId) -> &PageTables {
        self.trees[core.index()]
            .get()
            .expect("a core's page tables exist from its attach")
    }

    /// Calls `f(slot, tree)` for the tree of every attached core that `users` (an owner
    /// tree's record, `per_core/owner.rs`) names: a set bit stands for its residue class
    /// modulo `USER_BITS` (`users.rs`), so every attached core of the class is visited.
    ///
    /// # Preconditions
    /// The caller is inside an RCU read section of the space's domain, or otherwise excludes
    /// the owners' discards (module doc, "Reclamation").
    #[inline]
    pub(crate) fn for_each_user(&self, users: &UserMask, mut f: impl FnMut(usize, &PageTables)) {
        for (w, word) in self.attached.iter().enumerate() {
            // Relaxed: see `attach` and `detach`; a core that copies under an owner leaf was
            // attached before (program order), and the owner leaf lock orders its copy before
            // the editor's read of the record that names it.
            let mut bits = word.load(Ordering::Relaxed) & users.core_word(w);
            while bits != 0 {
                let c = w * 64 + bits.trailing_zeros() as usize;
                bits &= bits - 1;
                if let Some(tree) = self.trees.get(c).and_then(|t| t.get()) {
                    f(c, tree);
                }
            }
        }
    }

    /// Tables linked in the owner tree, its root included: the metadata's page tables (the
    /// design's `stats()` reports them beside the per-core trees').
    pub(crate) fn owner_table_count(&self) -> u64 {
        self.owner.table_count()
    }

    /// Tables linked in every core's tree, roots included (the owner tree not included:
    /// [`PerCoreTables::owner_table_count`]).
    pub(crate) fn table_count(&self) -> u64 {
        self.trees
            .iter()
            .filter_map(|t| t.get())
            .map(PageTables::table_count)
            .sum()
    }

    /// Tables linked in each core slot's tree (roots included), by slot, up to the last slot
    /// that ever had a tree (0 for a slot without one).
    pub(crate) fn per_core(&self) -> Vec<u64> {
        let n = self
            .trees
            .iter()
            .rposition(|t| t.get().is_some())
            .map_or(0, |last| last + 1);
        self.trees[..n]
            .iter()
            .map(|t| t.get().map_or(0, PageTables::table_count))
            .collect()
    }

    /// Tables taken from the allocator so far (tests).
    #[cfg(test)]
    pub(super) fn pool_allocated(&self) -> u64 {
        self.pool.allocated()
    }

    /// Runs `f` while this thread holds every lock of the table pool (the fork test).
    #[cfg(not(loom))]
    pub(crate) fn with_pool_locks_held<R>(&self, f: impl FnOnce() -> R) -> R {
        self.pool.with_locks_held(f)
    }
}

mod owner;

#[cfg(all(test, not(loom)))]
mod tests;

#[cfg(all(test, loom))]
mod loom_tests;
