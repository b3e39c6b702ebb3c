//! Software 4-level page tables: 512 atomic 64-bit entries per table, mirroring x86-64, walked
//! lock-free by the access path and filled under a per-leaf-table lock.
//!
//! A design chooses how they are organised ([`organisation::Organisation`]): **one shared
//! tree** for the space, whose entries own their frames (every design but `radix`), or **one
//! tree per core** (`per_core.rs`, RadixVM EuroSys'13 §3.3-3.4), each walked and filled by its
//! core only, whose entries are copies of the design's per-page metadata; an edit clears the
//! trees of the cores the design names, and a core may discard its tree and refill it by
//! faults. The access path and the shared Linux bodies use either through one interface,
//! [`organisation::SpaceTables`], an enum whose shared arm is a direct call on the one tree. Both
//! organisations are built from the same tree, [`PageTables`], this file.
//!
//! The files: `organisation.rs` (the choice and the interface: `SpaceTables`), `per_core.rs`
//! (one tree per core: which trees an edit visits, discard, reclamation under editors),
//! `per_core/owner.rs` (the per-core organisation's owner tree: the frames, the records of the
//! cores that copied, and the protocol between lock-free copies and editors),
//! `entry.rs` (the address split and what an entry holds: [`Pte`]), `pool.rs` (table memory:
//! type-stable tables, the shared lists, per-core slots), `cache.rs` (each core's table cache:
//! install from it, retire into it, reuse after a grace period), `users.rs` (each leaf's record
//! of the cores that may cache its translations, for targeted shootdown of the shared tree),
//! this file (the tree: walk, fill, clear, protect, free, discard), `tests.rs` and
//! `loom_tests.rs` (the loom model of a walker racing table reclamation and reuse; the
//! per-core models are in `per_core/`).
//!
//! # Layout
//!
//! A 48-bit virtual address is split 9/9/9/9/12 like x86-64's (`entry.rs`). An intermediate
//! entry is 0 or a child table pointer with `PRESENT` (and, on level-2 entries, `LOCKED`: the
//! fill lock of the leaf below); a leaf entry is a [`Pte`]. Leaves and level-2 tables also keep
//! a 512-bit `present` bitmap of their non-zero entries, so that freeing a subtree, clearing a
//! leaf or recycling a table touches only the entries in use (8 words to scan instead of 512).
//! Level-3 and root tables keep none (`pool::bitmap_kept`: their bitmap line would be written
//! by every core whose regions lie under the table, one bit per GiB); a free loads their few
//! entries in its range instead. A leaf
//! also keeps a **users mask** (`users.rs`, one cache line): bit `c % USER_BITS` is set by core
//! `c`'s walks that may put one of its translations into a TLB, so that a targeted shootdown
//! can skip the cores that never read it.
//!
//! # Algorithm
//!
//! - **lookup** walks four `Acquire` loads and returns the leaf entry if present. It takes no
//!   lock and writes nothing. **lookup_recorded** (the access path under the targeted policy)
//!   first records the calling core in the leaf's users mask, then loads the entry (`users.rs`).
//! - **fill** walks down, installing missing intermediate tables with a CAS on the empty parent
//!   entry (the loser puts its never-published table back in the pool and follows the
//!   winner's). It then takes the leaf's lock (a CAS setting `LOCKED` in the level-2 entry),
//!   and only if the entry is still empty calls the caller's frame allocator and stores the
//!   new PTE with `Release`. Two cores faulting on one page thus allocate one frame: the
//!   second finds the entry present and its allocator is never called.
//! - **clear_range / protect_range** visit only the entries intersecting the range (an absent
//!   intermediate entry skips its whole subtree), and change leaf entries under each leaf's
//!   lock, using the leaf bitmap to find present entries. Their `_noting` forms also OR the
//!   users masks of the leaves they changed into the caller's [`UserMask`], read after a SeqCst
//!   fence that follows the changes (`users.rs`): the cores a targeted shootdown must reach.
//! - **discard** (per-core trees only) unlinks every table below the root whatever it maps,
//!   taking each entry by compare-exchange so that a concurrent `free_tables` of an editor and
//!   the discard never both retire a table, zeroes the tables and retires them like
//!   `free_tables` (`per_core.rs`).
//! - **free_tables(empty)** unlinks every table whose whole coverage lies inside `empty` (a
//!   range the caller knows holds no region: the unmapped range widened to the neighbouring
//!   gaps, as in the SOSP'25 paper's §3.1 and Fig. 4), keeping the tables at the edges that
//!   still intersect a region. It walks only the present entries of the (at most two per
//!   level) partially covered tables. Unlinked tables are scrubbed at once (their few non-zero
//!   entries zeroed while the lines are still in the freeing core's cache) and retired into
//!   the freeing core's cache, which hands them to the RCU domain in batches and reuses them
//!   after a grace period (`cache.rs`), so that a table's lines stay with one core.
//!
//! # Why frees go through RCU (Bonsai, ASPLOS'12 §4-5)
//!
//! A lock-free walker can load a parent entry, be delayed, and then read a child table that
//! has been unlinked meanwhile (the race the Bonsai paper's page-fault designs must tolerate:
//! §4.2's "page directory freed under a concurrent fault"). The walker holds an `aspace_rcu`
//! read guard (or the caller excludes frees by a lock), so a table unlinked by `free_tables`
//! is not reused until every such walker finished: reuse waits a grace period. The loom model
//! (`loom_tests.rs`) runs exactly this race on the real code and fails when an unlinked table
//! is pooled without the grace period.
//!
//! # Invariants
//!
//! - The root is never freed. `table_count()` counts the tables linked into the tree, root
//!   included; it is 1 when no table below the root is linked. (The shared tree's count is
//!   kept per acting core's pool slot, a per-core tree's in its owner's slot: `pool.rs`.)
//! - **Type-stable table memory** (`pool.rs`): every pointer any walker can load from an entry
//!   points to live memory of a table of the expected level, whatever races happen, so
//!   `lookup`/`fill` are memory-safe without a guard; the RCU guard (or the caller's lock) is
//!   what makes their ANSWER right, not what keeps them sound. Cost: the pool keeps the peak
//!   number of tables recycled within one grace period until the space drops.
//! - A leaf table's entries and bitmap change only under its lock. An intermediate entry goes
//!   from 0 to a table by CAS (fill) and back to 0 only in `free_tables`.
//! - A retired or pooled table is all zeroes (entries, bitmap, and the users mask unless a
//!   walker still inside recorded itself after the scrub: `users.rs`): `free_tables` zeroes the
//!   entries its bitmap names (exact, since no fill may run inside an `empty` range) right
//!   after unlinking. Zeroing an unlinked table in place is harmless to a walker still inside
//!   it: it reads "not present", which is the state the caller established (no region in
//!   `empty`). What such a walker must never see is the table REUSED for other translations,
//!   and reuse waits for the grace period.
//!
//! # Contract with the caller (the design)
//!
//! `fill` and `free_tables` must not run concurrently on the same range: the caller excludes
//! fills inside `empty` (`coarse` holds the space write lock; `interval` the interval lock of
//! the gaps). The one exception is `fill_checked` (every lock-free fault's, through
//! `designs/syscalls.rs`'s `fault_rcu`; `interval`'s first stage): it installs no table and
//! fills a leaf only while its caller's check (the region not replaced) holds under the leaf
//! lock (under the per-core organisation it installs tables in its core's own tree, for the
//! copy, still under the owner leaf's lock: `per_core/owner.rs` argues why no free races
//! them); `free_tables` unlinks each leaf by waiting out a holder of its lock, so such a fill
//! finds its leaf gone or its region replaced. `free_tables` must follow `clear_range` of the
//! same range (every PTE inside `empty` is already zero; debug builds assert it) and always be
//! given the same RCU domain, the one whose read guard the walkers hold. `discard` is only for a
//! per-core tree, called by its owner (no fill runs in it meanwhile); editors that may meet it
//! (`clear_range`, `protect_range`, `free_tables` of another core's tree) run inside a read
//! section of that domain, so that the tables it retires are not reused under them
//! (`per_core.rs`, "Reclamation").
//!
//! Addresses are below 2^48 (four levels): `fill` panics above, the range operations ignore
//! what lies above, `lookup` answers `None`.
//!
//! Entries, bitmaps and pool locks come from `crate::sync`, so under `--cfg loom` the very code
//! here runs on loom atomics. Not for: soft TLBs (`crate::tlb`), deciding what a range may
//! contain (the region map), frames (`crate::frames`).

mod cache;
mod entry;
pub(crate) mod organisation;
mod per_core;
mod pool;
mod users;

pub(crate) use cache::PtCache;
pub(crate) use entry::{rights_removed, Pte, VA_BITS};
#[cfg(all(test, not(loom)))]
pub(crate) use users::USER_BITS;
pub(crate) use users::{UserBit, UserMask};

use crate::frames::Frame;
use crate::sync::{fence, AtomicU64, Ordering};
use crate::types::Prot;
use crossbeam_utils::Backoff;
use entry::{index, span, ADDR_MASK, ENTRIES, LEVELS, LOCKED, PRESENT};
use pool::{bitmap_kept, Retired, Table, TablePool, TablePtr};
use std::ops::Range;
use std::ptr::NonNull;
use std::sync::Arc;
use users::LeafUsers;

/// Bytes of one page table of any level: 512 entries, the present bitmap's line and the users
/// record's line (`pool.rs`); what `stats()` multiplies its table counts by.
pub(crate) const TABLE_BYTES: u64 = std::mem::size_of::<Table>() as u64;

/// Why `fill` failed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, thiserror::Error)]
pub(crate) enum FillError {
    /// The frame allocator returned `None` (the pool is exhausted); nothing was changed
    /// except possibly newly installed empty intermediate tables, which `free_tables` of an
    /// empty range reclaims like any other.
    #[error("no frame available")]
    NoFrame,
    /// A missing page table could not be allocated; the tables installed before it stay (as
    /// for `NoFrame`).
    #[error("no memory for a page table")]
    NoTable,
}

/// What [`PageTables::fill_checked`] did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum CheckedFill {
    /// The entry now allows the access; `new_frame` when `frame()` was called and used.
    Filled {
        /// Whether a frame was taken.
        new_frame: bool,
    },
    /// A table on the way to the leaf is missing (nothing was changed).
    NoLeaf,
    /// `live()` answered false under the leaf lock (nothing was changed).
    Refused,
}

/// The leaf lock (the `LOCKED` bit of a level-2 entry), released on drop.
struct LeafGuard<'a> {
    slot: &'a AtomicU64,
    /// The entry without `LOCKED`.
    unlocked: u64,
    leaf: &'a Table,
}

impl Drop for LeafGuard<'_> {
    #[inline]
    fn drop(&mut self) {
        // Release: publishes this holder's leaf entry and bitmap writes; pairs with the
        // Acquire CAS in `lock_leaf` of the next holder. A plain store is enough: while
        // `LOCKED` is set nobody else writes the entry (lockers' CAS fail, `free_tables`
        // waits for the bit to clear).
        self.slot.store(self.unlocked, Ordering::Release);
    }
}

/// What [`PageTables::table_at`] found for a block.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum TableAt {
    /// No table of that coverage is linked there.
    Absent,
    /// A table is linked and maps nothing.
    Empty,
    /// A table is linked and holds an entry.
    Busy,
}

/// One tree of page tables: the one shared tree of a space (every core walks and fills it), or
/// one core's own tree of the per-core organisation (`per_core.rs`: its core walks and fills it,
/// editors clear it). `Sync`.
pub(crate) struct PageTables {
    root: NonNull<Table>,
    /// Table memory, with the per-slot counts of linked tables (`pool.rs`); the per-core
    /// caches (`cache.rs`) hold the rest. The trees of the per-core organisation share one.
    pool: Arc<TablePool>,
    /// The pool slot that counts this tree's linked tables: `None` for the shared tree (the
    /// slot of the core that installs or frees, so that counting writes no shared line), the
    /// owner's slot for a per-core tree (so that the count is the tree's own, `per_core.rs`).
    owner: Option<usize>,
}

// SAFETY: the raw `root` pointer is an owned `Table` (atomics only); all shared mutation goes
// through atomics and mutexes, so the structure can be sent and shared like its fields.
unsafe impl Send for PageTables {}
// SAFETY: as for `Send`.
unsafe impl Sync for PageTables {}

impl std::fmt::Debug for PageTables {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PageTables")
            .field("tables", &self.table_count())
            .finish()
    }
}

impl PageTables {
    /// Empty tables (just the root) for up to `cores` cores with a slot of their own in the
    /// pool (more share slots: correct, but their caches' returned lists and counters share
    /// lines).
    pub(crate) fn new(cores: usize) -> PageTables {
        PageTables {
            root: Table::alloc().expect("no memory for the root page table"),
            pool: Arc::new(TablePool::new(cores)),
            owner: None,
        }
    }

    /// An empty tree (just the root) of core `owner` of the per-core organisation, with its
    /// tables from `pool` (shared by every core's tree) and counted in `owner`'s slot; `None`
    /// when the root cannot be allocated.
    fn per_core(pool: &Arc<TablePool>, owner: usize) -> Option<PageTables> {
        Some(PageTables {
            root: Table::alloc()?,
            pool: Arc::clone(pool),
            owner: Some(pool.slot_of(owner)),
        })
    }

    /// The pool slot that counts a table linked or unlinked through `cache` (field `owner`).
    #[inline]
    fn count_slot(&self, cache: &PtCache) -> usize {
        self.owner.unwrap_or(cache.slot())
    }

    /// Runs `f` while this thread holds every lock of the table pool (the fork test).
    #[cfg(not(loom))]
    pub(crate) fn with_pool_locks_held<R>(&self, f: impl FnOnce() -> R) -> R {
        self.pool.with_locks_held(f)
    }

    /// A cache for core `core` (its index among the attached cores): the tables it installs
    /// come from it and the tables it frees return to it (`cache.rs`).
    pub(crate) fn cache(&self, core: usize) -> PtCache {
        PtCache::new(&self.pool, core)
    }

    #[inline]
    fn root(&self) -> &Table {
        // SAFETY: the root is allocated in `new` and freed only in `drop`.
        unsafe { self.root.as_ref() }
    }

    /// The child table an intermediate entry `e` (present) points to.
    #[inline]
    fn child(&self, e: u64) -> &Table {
        debug_assert!(e & PRESENT != 0);
        // SAFETY: every non-zero intermediate entry ever stored points to a table allocated by
        // this `PageTables`' pool for the level below, and such memory stays allocated, and a
        // `Table` of that level, for as long as `self` lives (type-stable memory, module doc).
        // A table is atomics only, so a shared reference is sound even while others write it.
        unsafe { &*((e & ADDR_MASK) as *const Table) }
    }

    /// Tables linked in the tree, the root included.
    pub(crate) fn table_count(&self) -> u64 {
        // The shared tree: summed over the per-core counts, exact when no install or free is
        // in flight. A per-core tree: its owner's slot.
        let linked = match self.owner {
            None => self.pool.linked(),
            Some(slot) => self.pool.linked_of(slot),
        };
        u64::try_from(1 + linked).unwrap_or(0)
    }

    /// The present leaf entry for `va`, or `None`. Lock-free; the answer is current only while
    /// the caller holds a read guard of the RCU domain given to `free_tables` or otherwise
    /// excludes `free_tables` (it is memory-safe regardless).
    #[inline]
    pub(crate) fn lookup(&self, va: u64) -> Option<Pte> {
        self.lookup_as(va, None)
    }

    /// [`PageTables::lookup`] for a walk whose result the caller may cache (a TLB fill under
    /// the targeted shootdown policy): records `user` in the leaf's users mask before loading
    /// the entry (`users.rs`). Nothing is recorded when no leaf covers `va`.
    #[inline]
    pub(crate) fn lookup_recorded(&self, va: u64, user: UserBit) -> Option<Pte> {
        self.lookup_as(va, Some(user))
    }

    #[inline(always)]
    fn lookup_as(&self, va: u64, user: Option<UserBit>) -> Option<Pte> {
        if va >> VA_BITS != 0 {
            return None;
        }
        let mut table = self.root();
        let mut level = LEVELS;
        loop {
            if let (1, Some(user)) = (level, user) {
                // Before the entry load below (the walker's half of `users.rs`'s protocol).
                table.users.record(user);
            }
            // Acquire: pairs with the Release CAS in `install` (the child table's zeroed
            // contents) and with the Release store of a PTE in `fill` (the frame's zeroes and
            // everything written before the fill).
            let e = table.entries[index(va, level)].load(Ordering::Acquire);
            if e & PRESENT == 0 {
                return None;
            }
            if level == 1 {
                return Some(Pte::from_bits(e));
            }
            table = self.child(e);
            level -= 1;
        }
    }

    /// Maps `va`'s page if it is not mapped yet: installs missing intermediate tables, then,
    /// under the leaf's lock, returns the present entry as it is (without calling `frame`), or
    /// calls `frame()` and stores `Pte::new(frame, prot)`.
    ///
    /// # Errors
    /// [`FillError::NoFrame`] when `frame()` returned `None`.
    ///
    /// The tables it installs come from `cache`.
    ///
    /// # Panics
    /// If `va >= 2^48`, or if `cache` was not made by these tables ([`PageTables::cache`]).
    pub(crate) fn fill(
        &self,
        cache: &mut PtCache,
        va: u64,
        prot: Prot,
        frame: impl FnOnce() -> Option<Frame>,
    ) -> Result<Pte, FillError> {
        self.fill_then(cache, va, prot, frame, |_, _, pte| Ok(pte))
    }

    /// [`PageTables::fill`], then `then(cache, users, pte)` with `pte` the entry now present,
    /// **still under the leaf lock** (`users`: the leaf's record): the per-core organisation's
    /// owner tree records the filling core and writes its copy there (`per_core/owner.rs`).
    ///
    /// # Errors
    /// As [`PageTables::fill`], and `then`'s error (the entry stays filled).
    #[inline]
    pub(in crate::page_table) fn fill_then<R>(
        &self,
        cache: &mut PtCache,
        va: u64,
        prot: Prot,
        frame: impl FnOnce() -> Option<Frame>,
        then: impl FnOnce(&mut PtCache, &LeafUsers, Pte) -> Result<R, FillError>,
    ) -> Result<R, FillError> {
        assert!(
            va >> VA_BITS == 0,
            "address {va:#x} beyond the 48-bit page tables"
        );
        cache.check(&self.pool);
        let guard = loop {
            let slot = self.leaf_slot(cache, va).ok_or(FillError::NoTable)?;
            if let Some(guard) = self.lock_leaf(slot) {
                break guard;
            }
            // The leaf was unlinked between the walk and the lock: only a caller breaking the
            // "no fill inside a free_tables range" contract gets here; walk again.
        };
        let i = index(va, 1);
        let entry = &guard.leaf.entries[i];
        // Relaxed: leaf entries are written only under the leaf lock, which we hold.
        let cur = entry.load(Ordering::Relaxed);
        if cur & Pte::PRESENT != 0 {
            return then(cache, &guard.leaf.users, Pte::from_bits(cur));
        }
        let f = frame().ok_or(FillError::NoFrame)?;
        let pte = Pte::new(f, prot);
        // Release: publishes the frame's zeroed contents with the translation; pairs with the
        // Acquire load in `lookup`.
        entry.store(pte.bits(), Ordering::Release);
        let w = &guard.leaf.present[i / 64];
        // Relaxed: leaf bitmaps are written only under the leaf lock.
        w.store(w.load(Ordering::Relaxed) | 1 << (i % 64), Ordering::Relaxed);
        then(cache, &guard.leaf.users, pte)
    }

    /// Stores `pte` (a copy of the owner tree's entry: `per_core/owner.rs`) as `va`'s entry,
    /// whatever was there, installing missing tables from `cache`. Only for a per-core tree, by
    /// its own core (the only one that fills it).
    ///
    /// # Errors
    /// [`FillError::NoTable`] when a missing table could not be allocated (nothing stored).
    ///
    /// # Panics
    /// As [`PageTables::fill`].
    pub(in crate::page_table) fn copy_entry(
        &self,
        cache: &mut PtCache,
        va: u64,
        pte: Pte,
    ) -> Result<(), FillError> {
        assert!(
            va >> VA_BITS == 0,
            "address {va:#x} beyond the 48-bit page tables"
        );
        debug_assert!(self.owner.is_some(), "copies go into per-core trees only");
        cache.check(&self.pool);
        let guard = loop {
            let slot = self.leaf_slot(cache, va).ok_or(FillError::NoTable)?;
            if let Some(guard) = self.lock_leaf(slot) {
                break guard;
            }
            // Unlinked between the walk and the lock: an editor freed the tables of a range
            // this core's copy no longer lies in (`per_core/owner.rs`): walk again.
        };
        let i = index(va, 1);
        let entry = &guard.leaf.entries[i];
        // Relaxed: leaf entries are written only under the leaf lock, which we hold.
        let cur = Pte::from_bits(entry.load(Ordering::Relaxed));
        // A copy of another frame can be here only while an editor that cleared its owner
        // entry without marking the region (a zap of `MADV_DONTNEED`: the region stays, so a
        // fault after the zap refills the owner entry) has yet to reach this tree: the editor
        // read this core's bit, so it clears whichever copy it finds and notes the core.
        if cur == pte {
            return Ok(());
        }
        // Release: like `fill`'s store; pairs with the Acquire load in `lookup`.
        entry.store(pte.bits(), Ordering::Release);
        let w = &guard.leaf.present[i / 64];
        // Relaxed: leaf bitmaps are written only under the leaf lock.
        w.store(w.load(Ordering::Relaxed) | 1 << (i % 64), Ordering::Relaxed);
        Ok(())
    }

    /// The lock-free fault's fill (`designs/syscalls.rs`'s `fault_rcu`, which every design with
    /// lock-free faults calls; `interval`'s stage 1): like [`PageTables::fill`], but it
    /// installs no table and fills only while `live()` holds, asked under the leaf lock.
    ///
    /// Walks down; if a table on the way is missing, answers
    /// [`CheckedFill::NoLeaf`] (the caller must not allocate tables without its locks). Under
    /// the leaf's lock: if `live()` is false answers [`CheckedFill::Refused`] and changes
    /// nothing; if the entry is present and allows `access`, leaves it; if it is present without
    /// the right (a zero-page-like entry being written) and `prot` allows `access`, raises it to
    /// `prot` (rights only grow: no shootdown); if it is empty, stores `Pte::new(frame(), prot)`.
    ///
    /// Why the fence: an editor marks its region replaced, then executes a `SeqCst` fence
    /// (`StoredRegion::mark_replaced`), then clears or downgrades the entries under each
    /// existing leaf's lock. If both reach the same leaf, its lock orders them: the fill either
    /// came first (the editor then clears or downgrades what it stored) or sees the mark. If
    /// the editor's walk read an entry on the way as empty and our walk read the table a third
    /// core installed there later, the editor's load is coherence-ordered before ours; its fence
    /// happens before its load and ours after our load, so (C++20 [atomics.order]/4.4) its fence
    /// precedes ours in the single `SeqCst` order. Had `live()` (after our fence) not seen the
    /// mark (before the editor's fence), our load would be coherence-ordered before the mark
    /// and the same rule would order our fence first: a contradiction. So `live()` sees it.
    ///
    /// # Errors
    /// [`FillError::NoFrame`] when `frame()` returned `None`.
    pub(crate) fn fill_checked(
        &self,
        va: u64,
        prot: Prot,
        access: crate::types::Access,
        live: impl FnOnce() -> bool,
        frame: impl FnOnce() -> Option<Frame>,
    ) -> Result<CheckedFill, FillError> {
        self.fill_checked_then(va, prot, access, live, frame, |_, _| Ok(()))
    }

    /// [`PageTables::fill_checked`], then, when it filled (or found the entry allowing the
    /// access), `then(users, pte)` with the entry now present, **still under the leaf lock**
    /// (the per-core organisation's lock-free fault records its core and writes its copy
    /// there: `per_core/owner.rs`).
    ///
    /// # Errors
    /// As [`PageTables::fill_checked`], and `then`'s error (the entry stays filled).
    #[inline]
    pub(in crate::page_table) fn fill_checked_then(
        &self,
        va: u64,
        prot: Prot,
        access: crate::types::Access,
        live: impl FnOnce() -> bool,
        frame: impl FnOnce() -> Option<Frame>,
        then: impl FnOnce(&LeafUsers, Pte) -> Result<(), FillError>,
    ) -> Result<CheckedFill, FillError> {
        if va >> VA_BITS != 0 {
            return Ok(CheckedFill::NoLeaf);
        }
        let mut table = self.root();
        let mut level = LEVELS;
        let slot = loop {
            let slot = &table.entries[index(va, level)];
            if level == 2 {
                break slot;
            }
            // Acquire: pairs with the Release CAS in `install`.
            let e = slot.load(Ordering::Acquire);
            if e & PRESENT == 0 {
                return Ok(CheckedFill::NoLeaf);
            }
            table = self.child(e);
            level -= 1;
        };
        let Some(guard) = self.lock_leaf(slot) else {
            return Ok(CheckedFill::NoLeaf);
        };
        // SeqCst fence: orders our walk's loads before `live()`'s against the editor's mark and
        // walk (the doc's argument; the loom model whose leaf appears behind the editor's walk
        // fails without it).
        fence(Ordering::SeqCst);
        if !live() {
            return Ok(CheckedFill::Refused);
        }
        let i = index(va, 1);
        let entry = &guard.leaf.entries[i];
        // Relaxed: leaf entries are written only under the leaf lock, which we hold.
        let cur = entry.load(Ordering::Relaxed);
        if cur & Pte::PRESENT != 0 {
            let pte = Pte::from_bits(cur);
            let pte = if !pte.prot().allows(access) && prot.allows(access) {
                let up = pte.with_prot(prot);
                // Release: like `fill`'s store; pairs with the Acquire load in `lookup`.
                entry.store(up.bits(), Ordering::Release);
                up
            } else {
                pte
            };
            then(&guard.leaf.users, pte)?;
            return Ok(CheckedFill::Filled { new_frame: false });
        }
        let f = frame().ok_or(FillError::NoFrame)?;
        let pte = Pte::new(f, prot);
        // Release: publishes the frame's zeroed contents with the translation; pairs with the
        // Acquire load in `lookup`.
        entry.store(pte.bits(), Ordering::Release);
        let w = &guard.leaf.present[i / 64];
        // Relaxed: leaf bitmaps are written only under the leaf lock.
        w.store(w.load(Ordering::Relaxed) | 1 << (i % 64), Ordering::Relaxed);
        then(&guard.leaf.users, pte)?;
        Ok(CheckedFill::Filled { new_frame: true })
    }

    /// The level-2 entry above `va`'s leaf, installing missing tables on the way; `None` when a
    /// table could not be allocated.
    #[inline]
    fn leaf_slot(&self, cache: &mut PtCache, va: u64) -> Option<&AtomicU64> {
        let mut table = self.root();
        let mut level = LEVELS;
        loop {
            let i = index(va, level);
            let slot = &table.entries[i];
            // Acquire: pairs with the Release CAS in `install` (the child's contents).
            let mut e = slot.load(Ordering::Acquire);
            if e & PRESENT == 0 {
                e = self.install(cache, table, i, level - 1)?;
            }
            if level == 2 {
                return Some(slot);
            }
            table = self.child(e);
            level -= 1;
        }
    }

    /// Installs a fresh level-`level` table in `parent.entries[i]` (empty) and returns the
    /// entry now there (ours, or the one a concurrent filler installed first); `None` when no
    /// table could be allocated.
    #[cold]
    fn install(&self, cache: &mut PtCache, parent: &Table, i: usize, level: u32) -> Option<u64> {
        let table = cache.get(level)?;
        let new = table.as_ptr() as u64 | PRESENT;
        // Success Release: publishes the zeroed table; pairs with the Acquire loads of walkers
        // (`lookup`, `leaf_slot`, `visit`). Failure Acquire: pairs with the winner's Release
        // CAS, so the winner's table is visible before we walk into it.
        match parent.entries[i].compare_exchange(0, new, Ordering::Release, Ordering::Acquire) {
            Ok(_) => {
                if bitmap_kept(level + 1) {
                    // Relaxed: bitmap readers rely on the caller's exclusion (see
                    // `Table::present`).
                    parent.present[i / 64].fetch_or(1 << (i % 64), Ordering::Relaxed);
                }
                self.pool.count_linked(self.count_slot(cache), 1);
                Some(new)
            }
            Err(current) => {
                // Never published: no walker saw it, so it goes back without a grace period.
                cache.put(level, table);
                Some(current)
            }
        }
    }

    /// Takes the lock of the leaf that level-2 entry `slot` points to; `None` if the entry is
    /// empty.
    #[inline]
    fn lock_leaf<'a>(&'a self, slot: &'a AtomicU64) -> Option<LeafGuard<'a>> {
        let backoff = Backoff::new();
        loop {
            let e = slot.load(Ordering::Relaxed);
            if e & PRESENT == 0 {
                return None;
            }
            if e & LOCKED != 0 {
                crate::sync::spin_wait(&backoff);
                continue;
            }
            // Acquire: pairs with the Release store in `LeafGuard::drop` of the previous
            // holder (and with the Release CAS in `install` for a fresh leaf).
            if slot
                .compare_exchange_weak(e, e | LOCKED, Ordering::Acquire, Ordering::Relaxed)
                .is_ok()
            {
                return Some(LeafGuard {
                    slot,
                    unlocked: e,
                    leaf: self.child(e),
                });
            }
        }
    }

    /// What the tree links for the table whose coverage is exactly `block` (aligned: 2 MiB, 1
    /// GiB or 512 GiB, a table below the root), read lock-free: [`TableAt::Absent`] when no such
    /// table is linked, [`TableAt::Empty`] when it is linked and has no entry (a leaf: no PTE;
    /// an intermediate table: no child), else [`TableAt::Busy`]. A snapshot: the caller decides
    /// under its own locks whether the block may be freed (a design whose `munmap` frees only
    /// what its locks hold asks here whether a table beyond them may have become free:
    /// `designs/windowed.rs`, "Page tables past separators").
    ///
    /// Starts with a `SeqCst` fence: the caller's own earlier unlinks and clears (`free_tables`,
    /// `clear_range`) are ordered before the loads here, so of two callers that each emptied
    /// their part of one table and then probe it, at least one sees the other's part gone
    /// (store buffering; pairs with the same fence of the other caller).
    pub(crate) fn table_at(&self, block: &Range<u64>) -> TableAt {
        let len = block.end.saturating_sub(block.start);
        if block.end > 1 << VA_BITS || !(1..LEVELS).any(|l| span(l + 1) == len) {
            return TableAt::Absent;
        }
        debug_assert_eq!(block.start % len, 0, "an aligned block");
        fence(Ordering::SeqCst);
        let mut table = self.root();
        let mut level = LEVELS;
        loop {
            // Acquire: pairs with the Release CAS in `install` (the child's zeroed contents).
            let e = table.entries[index(block.start, level)].load(Ordering::Acquire);
            if e & PRESENT == 0 {
                return TableAt::Absent;
            }
            table = self.child(e);
            level -= 1;
            if span(level + 1) == len {
                break;
            }
        }
        let busy = if bitmap_kept(level) {
            let mut any = false;
            table.for_each_present(0, ENTRIES - 1, |_| any = true);
            any
        } else {
            // Relaxed: a snapshot after the fence above; the caller re-checks under its locks.
            table.entries.iter().any(|c| c.load(Ordering::Relaxed) != 0)
        };
        if busy {
            TableAt::Busy
        } else {
            TableAt::Empty
        }
    }

    /// The spans (aligned, each one table's coverage) of the tables below the root that map
    /// nothing now: leaves without a present entry (checked under their lock) and intermediate
    /// tables without a linked child. A fill may follow: the caller decides under its own locks
    /// whether a span may be freed. Lock-free otherwise, like a walk: the caller is inside a
    /// read section of the domain tables are retired through.
    pub(crate) fn empty_tables(&self) -> Vec<Range<u64>> {
        let mut out = Vec::new();
        self.collect_empty(self.root(), LEVELS, 0, &mut out);
        out
    }

    /// The recursion of [`PageTables::empty_tables`] over the children of `table` (of
    /// `level`, covering from `base`).
    fn collect_empty(&self, table: &Table, level: u32, base: u64, out: &mut Vec<Range<u64>>) {
        let span = span(level);
        for (i, slot) in table.entries.iter().enumerate() {
            let child_base = base + i as u64 * span;
            if level == 2 {
                if let Some(guard) = self.lock_leaf(slot) {
                    let mut any = false;
                    guard.leaf.for_each_present(0, ENTRIES - 1, |_| any = true);
                    if !any {
                        out.push(child_base..child_base + span);
                    }
                }
            } else {
                // Acquire: pairs with the Release CAS in `install`.
                let e = slot.load(Ordering::Acquire);
                if e & PRESENT != 0 {
                    let child = self.child(e);
                    // Acquire: as above.
                    if child
                        .entries
                        .iter()
                        .all(|c| c.load(Ordering::Acquire) & PRESENT == 0)
                    {
                        out.push(child_base..child_base + span);
                    } else {
                        self.collect_empty(child, level - 1, child_base, out);
                    }
                }
            }
        }
    }

    /// Calls `f(leaf, first, last)` under each leaf's lock for every existing leaf table that
    /// intersects `range`, with the leaf indices `first..=last` inside the range.
    fn for_each_leaf(&self, range: &Range<u64>, f: &mut impl FnMut(&Table, usize, usize)) {
        let range = range.start..range.end.min(1 << VA_BITS);
        if range.start < range.end {
            self.visit(self.root(), LEVELS, 0, &range, f);
        }
    }

    fn visit(
        &self,
        table: &Table,
        level: u32,
        base: u64,
        range: &Range<u64>,
        f: &mut impl FnMut(&Table, usize, usize),
    ) {
        let span = span(level);
        let lo = range.start.max(base);
        let hi = range.end.min(base + span * ENTRIES as u64);
        if lo >= hi {
            return;
        }
        let first = ((lo - base) / span) as usize;
        let last = ((hi - 1 - base) / span) as usize;
        for i in first..=last {
            let slot = &table.entries[i];
            let child_base = base + i as u64 * span;
            if level == 2 {
                if let Some(guard) = self.lock_leaf(slot) {
                    let a = lo.max(child_base);
                    let b = hi.min(child_base + span);
                    f(guard.leaf, index(a, 1), index(b - 1, 1));
                }
            } else {
                // Acquire: pairs with the Release CAS in `install`.
                let e = slot.load(Ordering::Acquire);
                if e & PRESENT != 0 {
                    self.visit(self.child(e), level - 1, child_base, range, f);
                }
            }
        }
    }

    /// Zeroes every present leaf entry in `range` (under each leaf's lock) and pushes the
    /// frames they mapped onto `out`. The caller shoots down cached translations before it
    /// frees those frames.
    pub(crate) fn clear_range(&self, range: Range<u64>, out: &mut Vec<Frame>) {
        self.clear_range_noting(range, out, None);
    }

    /// [`PageTables::clear_range`], also ORing into `users` (when given) the users masks of
    /// the leaves in which it cleared an entry, read after a SeqCst fence that follows the
    /// clears (`users.rs`): every core that may still hold one of the removed translations has
    /// its bit there. The caller excludes `free_tables` of `range` until it used `users`.
    pub(crate) fn clear_range_noting(
        &self,
        range: Range<u64>,
        out: &mut Vec<Frame>,
        mut users: Option<&mut UserMask>,
    ) {
        self.for_each_leaf(&range, &mut |leaf, first, last| {
            let before = out.len();
            leaf.for_each_present(first, last, |i| {
                // Relaxed (entries and bitmap): written only under the leaf lock we hold; a
                // walker that reads the zero simply faults.
                let e = leaf.entries[i].load(Ordering::Relaxed);
                debug_assert!(Pte::from_bits(e).present(), "bitmap and entries disagree");
                leaf.entries[i].store(0, Ordering::Relaxed);
                let w = &leaf.present[i / 64];
                w.store(
                    w.load(Ordering::Relaxed) & !(1 << (i % 64)),
                    Ordering::Relaxed,
                );
                out.push(Pte::from_bits(e).frame());
            });
            if let Some(users) = users.as_deref_mut().filter(|_| out.len() > before) {
                leaf.users.collect_after_changes(users);
            }
        });
    }

    /// Sets the protection of every present leaf entry in `range` to `prot` (under each leaf's
    /// lock). Returns whether any right was taken away (so a shootdown is needed).
    pub(crate) fn protect_range(&self, range: Range<u64>, prot: Prot) -> bool {
        self.protect_range_noting(range, prot, None)
    }

    /// [`PageTables::protect_range`], also ORing into `users` (when given) the users masks of
    /// the leaves in which it changed an entry, read after a SeqCst fence that follows the
    /// changes (as in [`PageTables::clear_range_noting`]).
    pub(crate) fn protect_range_noting(
        &self,
        range: Range<u64>,
        prot: Prot,
        mut users: Option<&mut UserMask>,
    ) -> bool {
        let mut removed = false;
        self.for_each_leaf(&range, &mut |leaf, first, last| {
            let mut changed = false;
            leaf.for_each_present(first, last, |i| {
                // Relaxed load: written only under the leaf lock we hold.
                let old = Pte::from_bits(leaf.entries[i].load(Ordering::Relaxed));
                let new = old.with_prot(prot);
                if new != old {
                    removed |= rights_removed(old.prot(), prot);
                    changed = true;
                    // Release: like `fill`'s store; pairs with the Acquire load in `lookup`.
                    leaf.entries[i].store(new.bits(), Ordering::Release);
                }
            });
            if let Some(users) = users.as_deref_mut().filter(|_| changed) {
                leaf.users.collect_after_changes(users);
            }
        });
        removed
    }

    /// Unlinks every table below the root whose whole coverage lies inside `empty` and
    /// retires it into `cache`, which reuses it after a grace period of `domain` (batched:
    /// `cache.rs`).
    ///
    /// Preconditions: no region intersects `empty`, every PTE in it was cleared, no fill runs
    /// inside it, and `domain` is the domain whose read guards walkers hold (always the same).
    ///
    /// # Panics
    /// If `cache` was not made by these tables ([`PageTables::cache`]).
    pub(crate) fn free_tables<F: aspace_rcu::Flavor>(
        &self,
        cache: &mut PtCache,
        empty: Range<u64>,
        domain: &aspace_rcu::Domain<F>,
    ) {
        self.free_tables_noting(cache, empty, domain, None);
    }

    /// [`PageTables::free_tables`], also ORing into `users` (when given) the users records of
    /// every table it unlinks, read before their reset: the per-core organisation's owner tree
    /// names the cores whose copies' tables lie in the freed range (`per_core/owner.rs`). With
    /// `users`, the records of tables unlinked below a table that stays are also ORed into that
    /// table's record (intermediate tables' records are otherwise unused), so that a later free
    /// of the table still names the cores that copied under a leaf freed before it (their
    /// trees may still hold the intermediate tables above that leaf).
    pub(in crate::page_table) fn free_tables_noting<F: aspace_rcu::Flavor>(
        &self,
        cache: &mut PtCache,
        empty: Range<u64>,
        domain: &aspace_rcu::Domain<F>,
        mut users: Option<&mut UserMask>,
    ) {
        cache.check(&self.pool);
        let empty = empty.start..empty.end.min(1 << VA_BITS);
        if empty.start >= empty.end {
            return;
        }
        let mut unlinked = Retired::new();
        self.free_in(self.root(), LEVELS, 0, &empty, &mut unlinked, &mut users);
        if unlinked.is_empty() {
            return;
        }
        self.pool
            .count_linked(self.count_slot(cache), -(unlinked.len() as i64));
        for (t, level) in unlinked {
            cache.retire(t, level, domain);
        }
    }

    /// Discards the whole tree below the root, whatever it maps: unlinks every table, zeroes it
    /// and retires it into `cache`, which reuses it after a grace period of `domain` (as
    /// `free_tables`). Only for a tree whose entries own no frames (a per-core tree, whose
    /// entries are copies of the design's metadata: `per_core.rs`); its core refills it by
    /// faults. Returns how many tables were unlinked.
    ///
    /// Runs beside editors of other cores (`clear_range`, `protect_range`, `free_tables` inside
    /// their RCU read sections): every entry is taken out by a compare-exchange (`unlink`,
    /// which also waits out a leaf lock holder), so a table that a concurrent `free_tables`
    /// unlinks first is not retired twice, and a leaf is zeroed only once no editor holds its
    /// lock. No fill may run in the tree meanwhile (its owner is the caller).
    ///
    /// # Panics
    /// If `cache` was not made by these tables ([`PageTables::cache`]).
    pub(crate) fn discard<F: aspace_rcu::Flavor>(
        &self,
        cache: &mut PtCache,
        domain: &aspace_rcu::Domain<F>,
    ) -> usize {
        cache.check(&self.pool);
        let mut unlinked = Retired::new();
        let root = self.root();
        // The root keeps no bitmap: load its entries (a discard is rare).
        for slot in &root.entries {
            let e = Self::unlink(slot);
            if e & PRESENT != 0 {
                self.discard_subtree(e, LEVELS - 1, &mut unlinked);
            }
        }
        let n = unlinked.len();
        if n > 0 {
            self.pool.count_linked(self.count_slot(cache), -(n as i64));
            for (t, level) in unlinked {
                cache.retire(t, level, domain);
            }
        }
        n
    }

    /// `discard` of the (unlinked, now ours) table of entry `e`, of level `level`, and its
    /// subtree: every child entry is unlinked by compare-exchange before its subtree is visited
    /// (a `free_tables` walking in from a parent it loaded before our unlink may race for it:
    /// one of us wins it), then the table is zeroed, leaves with whatever they mapped.
    fn discard_subtree(&self, e: u64, level: u32, out: &mut Retired) {
        let table = self.child(e);
        if level >= 2 {
            // Level 2 from its bitmap (a superset of its linked leaves: bits are set only by
            // the owner's installs, which do not run now, and cleared only after an unlink);
            // level 3 by loading every entry.
            table.for_each_child(level, 0, ENTRIES - 1, |i| {
                let c = Self::unlink(&table.entries[i]);
                if c & PRESENT != 0 {
                    self.discard_subtree(c, level - 1, out);
                }
            });
        }
        // A leaf's entries and bitmap are ours: its level-2 entry was unlinked after its last
        // lock holder left, and nobody can lock it through an unlinked entry.
        table.scrub(level);
        out.push((TablePtr(NonNull::from(table)), level));
    }

    /// `free_tables` below `table` (level `level`, covering from `base`).
    fn free_in(
        &self,
        table: &Table,
        level: u32,
        base: u64,
        empty: &Range<u64>,
        out: &mut Retired,
        users: &mut Option<&mut UserMask>,
    ) {
        let span = span(level);
        let lo = empty.start.max(base);
        let hi = empty.end.min(base + span * ENTRIES as u64);
        if lo >= hi {
            return;
        }
        let (first, last) = if level == 2 {
            // Only leaves wholly inside `empty` go; when there is none, do not even read the
            // bitmap: a range that just touches a table (an arena's edge in the next GiB) would
            // otherwise read a line the table's owner writes on every fill of a new leaf.
            let first = (lo - base).div_ceil(span);
            let end = (hi - base) / span;
            if first >= end {
                return;
            }
            (first as usize, end as usize - 1)
        } else {
            (
                ((lo - base) / span) as usize,
                ((hi - 1 - base) / span) as usize,
            )
        };
        table.for_each_child(level, first, last, |i| {
            let child_base = base + i as u64 * span;
            let slot = &table.entries[i];
            if empty.start <= child_base && child_base + span <= empty.end {
                let e = Self::unlink(slot);
                if e & PRESENT != 0 {
                    if bitmap_kept(level) {
                        // Relaxed: bitmap, see `Table::present`.
                        table.present[i / 64].fetch_and(!(1 << (i % 64)), Ordering::Relaxed);
                    }
                    match users.as_deref_mut() {
                        None => self.collect(e, level - 1, out, None),
                        Some(users) => {
                            let mut m = UserMask::default();
                            self.collect(e, level - 1, out, Some(&mut m));
                            // `table` stays: it keeps the record (doc of
                            // `free_tables_noting`).
                            table.users.absorb(&m);
                            users.or(&m);
                        }
                    }
                }
            } else if level > 2 {
                // Acquire: pairs with the Release CAS in `install`.
                let e = slot.load(Ordering::Acquire);
                if e & PRESENT != 0 {
                    self.free_in(self.child(e), level - 1, child_base, empty, out, users);
                }
            }
            // A leaf only partly inside `empty` still intersects a region: kept.
        });
    }

    /// Sets an intermediate entry to 0 (waiting out a leaf lock holder) and returns what it
    /// held.
    fn unlink(slot: &AtomicU64) -> u64 {
        let backoff = Backoff::new();
        loop {
            let e = slot.load(Ordering::Relaxed);
            if e & PRESENT == 0 {
                return 0;
            }
            if e & LOCKED != 0 {
                crate::sync::spin_wait(&backoff);
                continue;
            }
            // Acquire: pairs with the Release store of the leaf lock's last holder (its bitmap
            // writes, read by the debug check in `collect`). No Release needed: walkers that
            // read the 0 need nothing from us, and the reuse of the unlinked table is ordered
            // after this store by the retired list's mutex and the RCU grace period.
            if slot
                .compare_exchange_weak(e, 0, Ordering::Acquire, Ordering::Relaxed)
                .is_ok()
            {
                return e;
            }
        }
    }

    /// Retires the (unlinked) table of entry `e`, of level `level`, and its whole subtree.
    fn collect(&self, e: u64, level: u32, out: &mut Retired, mut users: Option<&mut UserMask>) {
        let table = self.child(e);
        if level == 2 {
            table.for_each_present(0, ENTRIES - 1, |i| {
                // A lock-free fill (`fill_checked`) that walked here before the unlink may
                // still take or hold this leaf's lock (it then finds its region replaced and
                // backs off): unlink each leaf like the top entry, waiting out a holder, so
                // that its unlock cannot store the leaf back into a retired table.
                let c = Self::unlink(&table.entries[i]);
                if c & PRESENT != 0 {
                    self.collect(c, level - 1, out, users.as_deref_mut());
                }
            });
        } else if level > 2 {
            table.for_each_child(level, 0, ENTRIES - 1, |i| {
                // Relaxed: the subtree is unlinked and no fill installs in it (caller's
                // contract); the entries were published to us by the caller's exclusion.
                let c = table.entries[i].load(Ordering::Relaxed);
                // Zeroed while visited (no bitmap here: `scrub` would scan all 512 again).
                table.entries[i].store(0, Ordering::Relaxed);
                if c & PRESENT != 0 {
                    self.collect(c, level - 1, out, users.as_deref_mut());
                }
            });
        } else {
            debug_assert!(
                table.present.iter().all(|w| w.load(Ordering::Relaxed) == 0),
                "free_tables over a leaf table that still maps pages (clear_range first)"
            );
        }
        if let Some(users) = users {
            // Before `scrub` resets it. Its writers are done: a leaf's under the leaf lock that
            // `unlink` waited out (its Acquire CAS pairs with their unlock's Release), an
            // intermediate table's by the `absorb` of an earlier free, ordered before this one
            // by the caller's exclusion of the range.
            table.users.or_into(users);
        }
        // Zero it now, while its lines are in our cache (for a leaf a no-op unless the
        // caller broke the contract: its frames leak but no stale PTE survives into reuse).
        table.scrub(level);
        out.push((TablePtr(NonNull::from(table)), level));
    }

    /// Tables taken from the allocator so far (recycled ones are not counted again; the root
    /// not counted).
    #[cfg(test)]
    fn allocated_tables(&self) -> u64 {
        self.pool.allocated()
    }

    /// Frees the subtree of `table` (level `level`) to the allocator. Drop only.
    fn drop_subtree(table: NonNull<Table>, level: u32) {
        if level >= 2 {
            // SAFETY: in `drop`: `&mut self`, no walker exists; the table is alive.
            let t = unsafe { table.as_ref() };
            for e in &t.entries {
                let e = e.load(Ordering::Relaxed);
                if e & PRESENT != 0 {
                    let child = NonNull::new((e & ADDR_MASK) as *mut Table)
                        .expect("present entry with a null pointer");
                    Self::drop_subtree(child, level - 1);
                }
            }
        }
        // SAFETY: linked tables are owned by the tree; `drop` visits each once and no walker
        // exists any more.
        unsafe { TablePtr(table).dealloc() };
    }
}

impl Drop for PageTables {
    fn drop(&mut self) {
        Self::drop_subtree(self.root, LEVELS);
        // Pooled, cached and retired tables go with the pool (now, or when the last cache
        // or pending RCU callback holding it is gone).
    }
}

#[cfg(all(test, not(loom)))]
mod fault_injection_tests;
#[cfg(all(test, not(loom)))]
mod tests;

#[cfg(all(test, loom))]
mod loom_tests;
