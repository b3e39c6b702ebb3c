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
//!   by its core only, its entries copies of the design's metadata, which owns the frames; an
//!   edit clears or downgrades the trees of the cores the design names (or of every attached
//!   core), and notes the cores whose trees it changed as the shootdown's targets; a core may
//!   discard its tree and refill it by faults (RadixVM, EuroSys'13 §3.3-3.4; the coming
//!   `radix` design).
//!
//! # Cost for the shared organisation
//!
//! [`SpaceTables`] is an enum (no `dyn`), fixed when the space is built: every method is
//! `#[inline]` and its shared arm is the old call on the one tree, so the access path's walk and
//! the fills and zaps of the existing designs cost one predictable branch on a read-only word of
//! `Shared` more than before. The per-core arm takes an RCU read section around visits of other
//! cores' trees (`per_core.rs`, "Reclamation"); the shared arm does not need one (the design's
//! locks exclude `free_tables` from the ranges it edits) and takes none.
//!
//! # Which tree a core uses
//!
//! [`SpaceTables::tree`] is the tree a core walks (`walk`), fills (`fill`, `fill_checked` in
//! `designs/syscalls.rs`'s lock-free fault) and upgrades in place after a zero-page fill: the
//! one shared tree, or the core's own. The edits ([`SpaceTables::clear_range_noting`],
//! [`SpaceTables::protect_range_noting`], [`SpaceTables::free_tables`]) take the trees to visit
//! as [`Targets`]: ignored by the shared tree; under the per-core organisation the design's
//! named cores ([`Targets::Cores`]) or every attached core ([`Targets::All`], what the shared
//! Linux bodies pass until a design names cores from its metadata).
//!
//! Not for: the tree algorithms (`mod.rs`), table memory (`pool.rs`, `cache.rs`), who is shot
//! down (`shootdown.rs` and the caller's policy).

use super::cache::PtCache;
use super::per_core::PerCoreTables;
use super::{FillError, PageTables, Pte, UserBit, UserMask};
use crate::frames::Frame;
use crate::shootdown::{CoreId, Targets};
use crate::types::Prot;
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

    /// [`PageTables::fill`] of core `core`'s tree.
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
        self.tree(core).fill(cache, va, prot, frame)
    }

    /// Zeroes the present entries in `range` of the shared tree, or of the trees `trees` names
    /// (inside a read section of `reader`: `per_core.rs`, "Reclamation"), noting into `users`
    /// (when given) the cores that may hold a removed translation: the shared tree's leaf
    /// records, or the owner of every per-core tree in which an entry was cleared. Returns
    /// whether an entry was cleared.
    ///
    /// `out` receives the frames the cleared entries **owned**: the shared tree's. Per-core
    /// entries are copies of the design's metadata, which owns their frames: none are pushed.
    ///
    /// # Preconditions
    /// As [`PageTables::clear_range_noting`], for every tree visited.
    #[inline]
    pub(crate) fn clear_range_noting<F: aspace_rcu::Flavor>(
        &self,
        trees: Targets<'_>,
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
            SpaceTables::PerCore(t) => Self::clear_per_core(t, trees, reader, range, out, users),
        }
    }

    /// The per-core arm of [`SpaceTables::clear_range_noting`].
    fn clear_per_core<F: aspace_rcu::Flavor>(
        t: &PerCoreTables,
        trees: Targets<'_>,
        reader: &aspace_rcu::Reader<F>,
        range: Range<u64>,
        out: &mut Vec<Frame>,
        mut users: Option<&mut UserMask>,
    ) -> bool {
        let _guard = reader.read();
        let (slots, before) = (t.slots(), out.len());
        let mut any = false;
        t.for_each(trees, |c, tree| {
            tree.clear_range(range.clone(), out);
            if out.len() != before {
                any = true;
                // Copies, not owners (doc): nothing is freed for them.
                out.truncate(before);
                if let Some(users) = users.as_deref_mut() {
                    users.insert(UserBit::of(c, slots));
                }
            }
        });
        any
    }

    /// Sets the protection of the present entries in `range` to `prot` in the shared tree, or
    /// in the trees `trees` names (inside a read section of `reader`), noting into `users`
    /// (when given) the cores that may hold a downgraded translation: the shared tree's leaf
    /// records of the leaves changed, or the owner of every per-core tree in which a right was
    /// removed. Returns whether a right was removed anywhere.
    #[inline]
    pub(crate) fn protect_range_noting<F: aspace_rcu::Flavor>(
        &self,
        trees: Targets<'_>,
        reader: &aspace_rcu::Reader<F>,
        range: Range<u64>,
        prot: Prot,
        users: Option<&mut UserMask>,
    ) -> bool {
        match self {
            SpaceTables::Shared(t) => t.protect_range_noting(range, prot, users),
            SpaceTables::PerCore(t) => Self::protect_per_core(t, trees, reader, range, prot, users),
        }
    }

    /// The per-core arm of [`SpaceTables::protect_range_noting`].
    fn protect_per_core<F: aspace_rcu::Flavor>(
        t: &PerCoreTables,
        trees: Targets<'_>,
        reader: &aspace_rcu::Reader<F>,
        range: Range<u64>,
        prot: Prot,
        mut users: Option<&mut UserMask>,
    ) -> bool {
        let _guard = reader.read();
        let slots = t.slots();
        let mut removed = false;
        t.for_each(trees, |c, tree| {
            if tree.protect_range(range.clone(), prot) {
                removed = true;
                if let Some(users) = users.as_deref_mut() {
                    users.insert(UserBit::of(c, slots));
                }
            }
        });
        removed
    }

    /// [`PageTables::free_tables`] of `empty` in the shared tree, or in the trees `trees` names
    /// (inside a read section of `reader`), retiring the tables into `cache`.
    ///
    /// # Preconditions
    /// As [`PageTables::free_tables`], for every tree visited.
    pub(crate) fn free_tables<F: aspace_rcu::Flavor>(
        &self,
        trees: Targets<'_>,
        reader: &aspace_rcu::Reader<F>,
        cache: &mut PtCache,
        empty: Range<u64>,
        domain: &aspace_rcu::Domain<F>,
    ) {
        match self {
            SpaceTables::Shared(t) => t.free_tables(cache, empty, domain),
            SpaceTables::PerCore(t) => {
                let _guard = reader.read();
                t.for_each(trees, |_, tree| {
                    tree.free_tables(cache, empty.clone(), domain);
                });
            }
        }
    }

    /// Tables linked in all trees, roots included.
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
