//! The page-table seam: how a space organises its page tables ([`Organisation`], the design's
//! choice) and the one interface through which the access path and the shared Linux bodies use
//! them ([`SpaceTables`]).
//!
//! Two organisations:
//!
//! - **Shared**: one tree for the space ([`PageTables`]), walked and filled by every core, its
//!   entries owning their frames (`clear_range` hands them to the caller to free after the
//!   shootdown). `coarse`, `faultlock`, `hybrid`, `bonsai`, `pervma` and `interval`.
//! - **Per-core**: one tree per core ([`PerCoreTables`], `per_core.rs`), each walked and filled
//!   by its core only, its entries copies of the **owner tree** (`per_core/owner.rs`: the
//!   per-page metadata, whose entries own the frames and whose leaves record the cores that
//!   copied from them); an edit changes the owner tree, then the copies of exactly the cores
//!   it records, and notes the cores whose copies it changed as the shootdown's targets; a
//!   core may discard its tree and refill it by faults (RadixVM, EuroSys'13 §3.3-3.4; the
//!   coming `radix` design).
//!
//! # Cost for the shared organisation
//!
//! [`SpaceTables`] is an enum (no `dyn`), fixed when the space is built: every method is
//! `#[inline]` and its shared arm is the old call on the one tree, so the access path's walk and
//! the fills and zaps of the existing designs cost one predictable branch on a read-only word of
//! `Shared` more than before (the lock-free fill passes the core and its cache, which the
//! shared arm does not read). The per-core arm takes an RCU read section around visits of
//! other cores' trees (`per_core.rs`, "Reclamation"); the shared arm does not need one (the
//! design's locks exclude `free_tables` from the ranges it edits) and takes none.
//!
//! # Which tree a core uses
//!
//! [`SpaceTables::tree`] is the tree a core walks (`walk`): the one shared tree, or the core's
//! own. Fills go through the seam ([`SpaceTables::fill`], [`SpaceTables::fill_checked`] in
//! `designs/syscalls.rs`'s lock-free fault, [`SpaceTables::upgrade`] after a zero-page fill):
//! the shared tree, or the owner tree and then the core's copy. The edits
//! ([`SpaceTables::clear_range_noting`], [`SpaceTables::protect_range_noting`],
//! [`SpaceTables::free_tables`]) take the trees to visit as [`Targets`], which both
//! organisations ignore: the shared tree is one, and the per-core organisation visits the
//! trees its owner tree records (fewer would leave stale copies, more would read lines of
//! cores that never filled there).
//!
//! Not for: the tree algorithms (`mod.rs`), table memory (`pool.rs`, `cache.rs`), who is shot
//! down (`shootdown.rs` and the caller's policy).

use super::cache::PtCache;
use super::per_core::PerCoreTables;
use super::{CheckedFill, FillError, PageTables, Pte, TableAt, UserBit, UserMask};
use crate::frames::Frame;
use crate::shootdown::{CoreId, Targets};
use crate::types::{Access, Prot, PAGE_SIZE};
use std::ops::Range;

/// How a design organises its page tables (module doc).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub(crate) enum Organisation {
    /// One tree for the space, its entries owning their frames.
    #[default]
    Shared,
    /// One tree per core, filled from the design's metadata, which owns the frames.
    #[cfg_attr(not(test), allow(dead_code))] // the `radix` design's, not built yet
    PerCore,
}

/// The page tables of one space, in its design's organisation (module doc).
pub(crate) enum SpaceTables {
    /// One tree for the space.
    Shared(PageTables),
    /// One tree per core.
    PerCore(PerCoreTables),
}

impl std::fmt::Debug for SpaceTables {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            SpaceTables::Shared(t) => t.fmt(f),
            SpaceTables::PerCore(t) => t.fmt(f),
        }
    }
}

impl SpaceTables {
    /// Empty tables in organisation `org` for up to `cores` core slots.
    pub(crate) fn new(org: Organisation, cores: usize) -> SpaceTables {
        match org {
            Organisation::Shared => SpaceTables::Shared(PageTables::new(cores)),
            Organisation::PerCore => SpaceTables::PerCore(PerCoreTables::new(cores)),
        }
    }

    /// The organisation.
    #[cfg_attr(any(not(test), loom), allow(dead_code))]
    pub(crate) fn organisation(&self) -> Organisation {
        match self {
            SpaceTables::Shared(_) => Organisation::Shared,
            SpaceTables::PerCore(_) => Organisation::PerCore,
        }
    }

    /// Whether a targeted shootdown needs walkers to record themselves in the leaves they read
    /// (`users.rs`): under the shared tree; a per-core tree is its core's record already.
    pub(crate) fn records_users(&self) -> bool {
        matches!(self, SpaceTables::Shared(_))
    }

    /// Attaches core `core`: its table cache (and, per core, its tree); `None` when its tree's
    /// root cannot be allocated.
    pub(crate) fn attach(&self, core: CoreId) -> Option<PtCache> {
        match self {
            SpaceTables::Shared(t) => Some(t.cache(core.index())),
            SpaceTables::PerCore(t) => t.attach(core),
        }
    }

    /// Detaches core `core` before its `cache` is drained: per core, discards its tree into
    /// `cache` through `domain`; nothing for the shared tree.
    pub(crate) fn detach<F: aspace_rcu::Flavor>(
        &self,
        core: CoreId,
        cache: &mut PtCache,
        domain: &aspace_rcu::Domain<F>,
    ) {
        if let SpaceTables::PerCore(t) = self {
            t.detach(core, cache, domain);
        }
    }

    /// Discards core `core`'s own tree (per core; its tables retired into `cache` through
    /// `domain`) and returns how many tables it unlinked; the shared tree cannot be discarded
    /// (its entries own their frames): 0. The core refills its tree by faults; its next access
    /// window must flush its TLB (the caller's part: `Core::discard_tables`).
    #[cfg_attr(any(not(test), loom), allow(dead_code))] // the `radix` design's (memory pressure)
    pub(crate) fn discard<F: aspace_rcu::Flavor>(
        &self,
        core: CoreId,
        cache: &mut PtCache,
        domain: &aspace_rcu::Domain<F>,
    ) -> usize {
        match self {
            SpaceTables::Shared(_) => 0,
            SpaceTables::PerCore(t) => t.tree(core).discard(cache, domain),
        }
    }

    /// The tree core `core` walks and fills (module doc).
    #[inline(always)]
    pub(crate) fn tree(&self, core: CoreId) -> &PageTables {
        match self {
            SpaceTables::Shared(t) => t,
            SpaceTables::PerCore(t) => t.tree(core),
        }
    }

    /// The access path's walk of `va` by core `core`: [`PageTables::lookup`] of its tree, or
    /// [`PageTables::lookup_recorded`] with `user` (the shared tree under targeted shootdown).
    #[inline(always)]
    pub(crate) fn walk(&self, core: CoreId, va: u64, user: Option<UserBit>) -> Option<Pte> {
        let tree = self.tree(core);
        match user {
            None => tree.lookup(va),
            Some(user) => tree.lookup_recorded(va, user),
        }
    }

    /// [`PageTables::fill`] of core `core`'s tree: the shared tree's; per core, the owner
    /// tree's entry (`frame()` called only if it is empty: every core maps the same frame), the
    /// core recorded in its leaf and the entry copied into the core's own tree, which is
    /// returned (`per_core/owner.rs`).
    ///
    /// # Preconditions
    /// Per core: the caller excludes every editor of `va`'s page (the design's range lock).
    ///
    /// # Errors
    /// As [`PageTables::fill`].
    #[inline]
    pub(crate) fn fill(
        &self,
        core: CoreId,
        cache: &mut PtCache,
        va: u64,
        prot: Prot,
        frame: impl FnOnce() -> Option<Frame>,
    ) -> Result<Pte, FillError> {
        match self {
            SpaceTables::Shared(t) => t.fill(cache, va, prot, frame),
            SpaceTables::PerCore(t) => t.fill(core, cache, va, prot, frame),
        }
    }

    /// Raises the entry of `va`'s page that core `core` walks to `prot` (rights only grow: no
    /// shootdown), after a fill found it present without the right the region grants (a
    /// zero-page-like entry being written): the shared tree's entry, or the owner tree's entry
    /// and the core's copy (other cores' copies keep theirs and fault to upgrade).
    ///
    /// # Preconditions
    /// As [`SpaceTables::fill`].
    #[inline]
    pub(crate) fn upgrade(&self, core: CoreId, va: u64, prot: Prot) {
        match self {
            SpaceTables::Shared(t) => {
                t.protect_range(va..va + PAGE_SIZE, prot);
            }
            SpaceTables::PerCore(t) => t.upgrade(core, va, prot),
        }
    }

    /// The lock-free fault's fill ([`PageTables::fill_checked`]): of the shared tree; per core,
    /// of the owner tree, with the core's record and its copy written under the owner leaf's
    /// lock (`per_core/owner.rs` has the argument against a concurrent editor; the copy may
    /// install tables in the core's own tree from `cache`).
    ///
    /// # Errors
    /// As [`PageTables::fill_checked`]; per core also [`FillError::NoTable`].
    #[inline]
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn fill_checked(
        &self,
        core: CoreId,
        cache: &mut PtCache,
        va: u64,
        prot: Prot,
        access: Access,
        live: impl FnOnce() -> bool,
        frame: impl FnOnce() -> Option<Frame>,
    ) -> Result<CheckedFill, FillError> {
        match self {
            SpaceTables::Shared(t) => t.fill_checked(va, prot, access, live, frame),
            SpaceTables::PerCore(t) => t.fill_checked(core, cache, va, prot, access, live, frame),
        }
    }

    /// Zeroes the present entries in `range`, noting into `users` (when given) the cores that
    /// may hold a removed translation, and pushes onto `out` the frames the cleared entries
    /// **owned**; returns whether an entry was cleared.
    ///
    /// - Shared: the one tree; `users` gets its leaves' records; `trees` is ignored.
    /// - Per core (`per_core/owner.rs`, inside a read section of `reader`): the owner tree,
    ///   whose frames go onto `out` (the caller frees them after its shootdown), then the
    ///   copies in the trees of exactly the cores its changed leaves record (attached ones);
    ///   `users` gets the cores whose copy was cleared. `trees` is ignored here too: the
    ///   owner's records name the trees that may hold copies (fewer would leave stale copies,
    ///   more would read lines of cores that never filled there).
    ///
    /// # Preconditions
    /// As [`PageTables::clear_range_noting`]; per core, every region removed from `range` was
    /// marked (with its fence) before, or the caller excludes every fill of `range`.
    #[inline]
    pub(crate) fn clear_range_noting<F: aspace_rcu::Flavor>(
        &self,
        _trees: Targets<'_>,
        reader: &aspace_rcu::Reader<F>,
        range: Range<u64>,
        out: &mut Vec<Frame>,
        users: Option<&mut UserMask>,
    ) -> bool {
        match self {
            SpaceTables::Shared(t) => {
                let before = out.len();
                t.clear_range_noting(range, out, users);
                out.len() != before
            }
            SpaceTables::PerCore(t) => {
                let _guard = reader.read();
                t.clear_range_noting(range, out, users)
            }
        }
    }

    /// Sets the protection of the present entries in `range` to `prot`, noting into `users`
    /// (when given) the cores that may hold a downgraded translation; returns whether a right
    /// was removed from an entry some core may cache.
    ///
    /// - Shared: the one tree; `users` gets the records of the leaves changed.
    /// - Per core (inside a read section of `reader`): the owner tree, then the copies of the
    ///   cores its changed leaves record; `users` gets the cores whose copy lost a right, and
    ///   only a copy's loss counts (no walker reads the owner tree). `trees` is ignored as in
    ///   [`SpaceTables::clear_range_noting`].
    #[inline]
    pub(crate) fn protect_range_noting<F: aspace_rcu::Flavor>(
        &self,
        _trees: Targets<'_>,
        reader: &aspace_rcu::Reader<F>,
        range: Range<u64>,
        prot: Prot,
        users: Option<&mut UserMask>,
    ) -> bool {
        match self {
            SpaceTables::Shared(t) => t.protect_range_noting(range, prot, users),
            SpaceTables::PerCore(t) => {
                let _guard = reader.read();
                t.protect_range_noting(range, prot, users)
            }
        }
    }

    /// [`PageTables::free_tables`] of `empty`, retiring the tables into `cache`: of the shared
    /// tree; per core (inside a read section of `reader`), of the owner tree and of the trees of
    /// the cores recorded in the owner tables it freed (`per_core/owner.rs`; `trees` is ignored
    /// as in [`SpaceTables::clear_range_noting`]).
    ///
    /// # Preconditions
    /// As [`PageTables::free_tables`], for every tree visited.
    pub(crate) fn free_tables<F: aspace_rcu::Flavor>(
        &self,
        _trees: Targets<'_>,
        reader: &aspace_rcu::Reader<F>,
        cache: &mut PtCache,
        empty: Range<u64>,
        domain: &aspace_rcu::Domain<F>,
    ) {
        match self {
            SpaceTables::Shared(t) => t.free_tables(cache, empty, domain),
            SpaceTables::PerCore(t) => {
                let _guard = reader.read();
                t.free_tables(cache, empty, domain);
            }
        }
    }

    /// [`PageTables::table_at`] of the tree whose tables `free_tables` frees first: the shared
    /// tree, or the owner tree of the per-core organisation (a per-core tree's tables above an
    /// owner table that went are freed with it).
    pub(crate) fn table_at(&self, block: &Range<u64>) -> TableAt {
        match self {
            SpaceTables::Shared(t) => t.table_at(block),
            SpaceTables::PerCore(t) => t.owner().table_at(block),
        }
    }

    /// The spans of the owner tree's tables that map nothing now (`PageTables::empty_tables`,
    /// inside a read section of `reader`): the metadata a design may reclaim under its locks
    /// (`radix`'s `reclaim_tables`); none for the shared tree, whose design frees its tables at
    /// every `munmap`.
    pub(crate) fn owner_empty_tables<F: aspace_rcu::Flavor>(
        &self,
        reader: &aspace_rcu::Reader<F>,
    ) -> Vec<Range<u64>> {
        match self {
            SpaceTables::Shared(_) => Vec::new(),
            SpaceTables::PerCore(t) => {
                let _guard = reader.read();
                t.owner().empty_tables()
            }
        }
    }

    /// Tables linked in the owner tree of the per-core organisation (the metadata's page
    /// tables, root included), 0 for the shared tree (its entries are their own metadata).
    #[cfg_attr(any(not(test), loom), allow(dead_code))] // the `radix` design's `stats()`
    pub(crate) fn owner_table_count(&self) -> u64 {
        match self {
            SpaceTables::Shared(_) => 0,
            SpaceTables::PerCore(t) => t.owner_table_count(),
        }
    }

    /// Tables linked in all trees the access path walks, roots included (per core: every
    /// core's tree, the owner tree not included: [`SpaceTables::owner_table_count`]).
    pub(crate) fn table_count(&self) -> u64 {
        match self {
            SpaceTables::Shared(t) => t.table_count(),
            SpaceTables::PerCore(t) => t.table_count(),
        }
    }

    /// Tables linked in each core slot's own tree, roots included (empty for the shared tree).
    pub(crate) fn per_core(&self) -> Vec<u64> {
        match self {
            SpaceTables::Shared(_) => Vec::new(),
            SpaceTables::PerCore(t) => t.per_core(),
        }
    }

    /// Runs `f` while this thread holds every lock of the table pool (the fork test).
    #[cfg(not(loom))]
    pub(crate) fn with_pool_locks_held<R>(&self, f: impl FnOnce() -> R) -> R {
        match self {
            SpaceTables::Shared(t) => t.with_pool_locks_held(f),
            SpaceTables::PerCore(t) => t.with_pool_locks_held(f),
        }
    }
}

#[cfg(all(test, not(loom)))]
mod tests;
