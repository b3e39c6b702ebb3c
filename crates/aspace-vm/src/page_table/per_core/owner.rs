//! The owner of frames under the per-core organisation: one **owner tree** beside the per-core
//! trees (a `PageTables` over the same table pool, counted in a slot of its own), RadixVM's
//! per-page metadata of physical pages (EuroSys'13 §3.3: the radix tree's per-page entries own
//! the physical page and record the cores whose page tables hold a copy; a fault "fills in the
//! page table entry in the local core's page table" from them). Its entries own the frames; a
//! leaf's users mask (`users.rs`) records the cores that copied a translation of the leaf into
//! their own trees. No walker of the access path reads it: only fills and editors.
//!
//! # The operations (the per-core arms of `SpaceTables`)
//!
//! - **fill** (locked, the caller holds the design's range lock: no editor of the range runs):
//!   fills the owner entry (the frame closure runs only if it is empty, so every core maps the
//!   same frame), then, still under the owner leaf lock, records the core in the leaf's users
//!   and writes the owner's entry (its frame, its prot) into the core's own tree.
//! - **upgrade** (locked): the owner entry and the core's copy get `prot` (rights only grow).
//! - **fill_checked** (lock-free, `fault_rcu`): `PageTables::fill_checked`'s rules on the owner
//!   tree (no owner table installed, `live()` asked under the owner leaf lock after the SeqCst
//!   fence, upgrade or fill), then, **still under the owner leaf lock**, the record and the copy
//!   as in `fill`.
//! - **clear_range_noting / protect_range_noting**: the owner tree first (its frames go to the
//!   caller, freed after the shootdown), collecting the users of the owner leaves changed; then
//!   the copies in the trees of exactly those cores (attached ones), noting the cores whose copy
//!   was cleared or lost a right: the shootdown's targets.
//! - **free_tables**: the owner tree, noting the users of every table it unlinks (read before
//!   the reset that scrubbing does), then the same range in the trees of those cores only.
//!
//! The `Targets` an edit is given are ignored here: the owner's records name the trees that
//! may hold copies (a superset: a bit stays until the leaf is freed), and visiting fewer would
//! leave stale copies, visiting more would read lines of cores that never filled there.
//!
//! # Lock order
//!
//! An owner leaf lock, then a per-core leaf lock (a fill's copy, taken inside the owner leaf
//! lock). Editors take them one at a time: the owner tree's leaves (each released before the
//! next), then the copies' leaves; `free_tables`' unlinks wait out holders the same way, owner
//! tree first. So nobody holds a per-core leaf lock while taking an owner leaf lock, and a
//! fill holding an owner leaf lock waits only for an editor's clear of its own tree's leaf,
//! which holds nothing else.
//!
//! # Why no copy survives an edit (the lock-free fault against an editor)
//!
//! **Claim**: after an editor that clears (or downgrades) a range returned, no core's tree holds
//! a copy in the range whose owner entry was cleared (or a right the owner entry lost), and every
//! core whose copy it changed was noted (a shootdown target).
//!
//! The editor (munmap, mprotect) marks the regions it replaces and executes a `SeqCst` fence
//! (`StoredRegion::mark_replaced`), then clears the owner entries under each owner leaf's lock
//! and reads the leaf's users there (after `collect_after_changes`' fence), then clears the
//! copies of those cores under their leaf locks. A lock-free fault takes the owner leaf lock,
//! executes its `SeqCst` fence, asks `live()` (the mark), and only then fills, records its core
//! and writes its copy, all before releasing the owner leaf lock. Two cases:
//!
//! - **Both took the owner leaf's lock.** If the fault held it first, its record and its copy
//!   happen before the editor's acquire of the lock (the unlock's Release, the lock's Acquire
//!   CAS), so the editor reads the fault's bit, visits its tree and takes the copy's leaf lock
//!   after the copy was written: it clears it and notes the core. If the editor held it first,
//!   its mark (before its fence, before its clear) happens before the fault's `live()`, which
//!   sees it: no fill, no copy.
//! - **The editor found no owner leaf** (an entry on its way empty) but the fault reached one
//!   installed later by a third core: `PageTables::fill_checked`'s fence argument, unchanged,
//!   makes `live()` see the mark: no copy.
//!
//! A copy written *after* the owner leaf lock is released breaks the first case: the editor
//! may clear the owner entry, read the record (with the bit), visit the tree before the copy
//! exists, and return; the copy then outlives its owner entry (the loom model of
//! `loom_tests.rs` fails so). A locked fill needs none of this: the design's range lock
//! excludes every editor of the range.
//!
//! **A zap that marks nothing** (`MADV_DONTNEED` keeps its region, so `live()` stays true): a
//! lock-free fault may refill the owner entry right after the editor cleared it (a fill after
//! the zap, which Linux allows too). Every copy of the old frame was written under the owner
//! leaf lock before the editor took it, so the editor read its core's bit and clears it
//! afterwards; a copy of the new frame may first overwrite an old one (`copy_entry` stores
//! whatever was there) or be cleared by the editor's pass (its core faults again). Either way
//! no copy of the old frame survives the edit, and every core that held one is noted.
//!
//! **The tables a lock-free fault installs in its own tree.** Only its own core fills its tree,
//! so no other filler races it; an editor could free them only by `free_tables` of a range that
//! contains them wholly. A table installed for `va` covers `va`, and the owner leaf of `va`
//! covers the same 2 MiB (or less than the table), so such a range also contains the owner
//! leaf, which `free_tables` unlinks first (owner tree first, `unlink` waiting out the fault's
//! hold of its lock). Either the fault held the owner leaf lock first: its installs and its
//! record happen before the unlink, so the editor's snapshot of the leaf's users names the core
//! and it frees the core's tables after they were installed; or the editor's clear of the range
//! (which precedes its free) took the lock first, and the fault saw the mark and installed
//! nothing (`fill_checked` refuses before the copy). A free of a range not containing `va`'s
//! owner leaf cannot contain a table the fault installed for `va`.
//!
//! # Why the cores to free are complete
//!
//! A copy's tables lie under an owner leaf that recorded the core at the copy. When
//! `free_tables` unlinks an owner table it ORs the records of the tables below it (read before
//! their reset), and when it unlinks a table below one that stays, it ORs their records into
//! the one that stays (`PageTables::free_tables_noting`), so a later free of that table still
//! names a core whose intermediate tables were left above an earlier freed leaf. Cores that
//! never filled under the freed tables are not visited (the conflict audit counts every line an
//! operation reads).
//!
//! Not for: the trees (`mod.rs`), the choice of trees a walk uses (`organisation.rs`), or the
//! frames' reuse (the caller frees what `clear_range_noting` returns after its shootdown).

use super::super::cache::PtCache;
use super::super::{CheckedFill, FillError, Pte, UserBit, UserMask};
use super::PerCoreTables;
use crate::frames::Frame;
use crate::shootdown::CoreId;
use crate::types::{Access, Prot, PAGE_SIZE};
use std::ops::Range;

impl PerCoreTables {
    /// The users bit of core `core` in the owner leaves.
    #[inline]
    fn user(&self, core: CoreId) -> UserBit {
        UserBit::of(core.index(), self.slots())
    }

    /// The locked fill (module doc): the owner entry (filled with `frame()` if empty), the
    /// core recorded in its leaf, and the copy in the core's own tree; returns the copy.
    ///
    /// # Preconditions
    /// The caller excludes every editor of `va`'s page (the design's range lock).
    ///
    /// # Errors
    /// As `PageTables::fill` (the owner entry may stay filled when the copy's table could not
    /// be allocated: the owner tree frees its frame at the range's `munmap`).
    pub(crate) fn fill(
        &self,
        core: CoreId,
        cache: &mut PtCache,
        va: u64,
        prot: Prot,
        frame: impl FnOnce() -> Option<Frame>,
    ) -> Result<Pte, FillError> {
        let (own, user) = (self.tree(core), self.user(core));
        self.owner()
            .fill_then(cache, va, prot, frame, |cache, users, pte| {
                users.record_locked(user);
                own.copy_entry(cache, va, pte)?;
                Ok(pte)
            })
    }

    /// Raises the owner entry of `va`'s page and core `core`'s copy to `prot` (rights only
    /// grow: no shootdown; other cores' copies keep theirs and fault to upgrade).
    ///
    /// # Preconditions
    /// As [`PerCoreTables::fill`], after which it runs.
    pub(crate) fn upgrade(&self, core: CoreId, va: u64, prot: Prot) {
        let page = va..va + PAGE_SIZE;
        self.owner().protect_range(page.clone(), prot);
        self.tree(core).protect_range(page, prot);
    }

    /// The lock-free fault's fill (module doc: the argument): `PageTables::fill_checked` of
    /// the owner tree, and under its leaf lock the record and the copy into core `core`'s tree
    /// (whose missing tables come from `cache`).
    ///
    /// # Errors
    /// As `PageTables::fill_checked`; [`FillError::NoTable`] when the copy's table could not
    /// be allocated.
    #[allow(clippy::too_many_arguments)] // `PageTables::fill_checked`'s, the core and its cache
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
        let (own, user) = (self.tree(core), self.user(core));
        self.owner()
            .fill_checked_then(va, prot, access, live, frame, |users, pte| {
                // Both under the owner leaf lock: an editor that clears this entry after us
                // reads our bit and finds our copy (module doc).
                users.record_locked(user);
                own.copy_entry(cache, va, pte)
            })
    }

    /// Clears `range` in the owner tree (its frames onto `out`) and the copies of the cores
    /// its changed leaves record, noting into `users` (when given) the cores whose copy was
    /// cleared. Returns whether an owner entry was cleared.
    ///
    /// # Preconditions
    /// The caller is inside an RCU read section of the space's domain (it visits other cores'
    /// trees: module doc of `per_core.rs`), and marked every region it removes from `range`
    /// (with the fence) before calling, or excludes every fill of `range` by its lock.
    pub(crate) fn clear_range_noting(
        &self,
        range: Range<u64>,
        out: &mut Vec<Frame>,
        mut users: Option<&mut UserMask>,
    ) -> bool {
        let before = out.len();
        let mut copied = UserMask::default();
        self.owner()
            .clear_range_noting(range.clone(), out, Some(&mut copied));
        let owned = out.len();
        if owned == before {
            // No owner entry, hence no copy (a copy is written only under its owner entry's
            // leaf lock, and cleared with it).
            return false;
        }
        let slots = self.slots();
        self.for_each_user(&copied, |c, tree| {
            tree.clear_range(range.clone(), out);
            if out.len() != owned {
                // Copies of the owner's frames, which are already on `out` once.
                out.truncate(owned);
                if let Some(users) = users.as_deref_mut() {
                    users.insert(UserBit::of(c, slots));
                }
            }
        });
        true
    }

    /// Sets `range`'s owner entries to `prot`, then the copies of the cores its changed leaves
    /// record, noting into `users` (when given) the cores whose copy lost a right. Returns
    /// whether a copy lost a right (an owner entry is read by no walker: its own downgrade
    /// needs no shootdown).
    ///
    /// # Preconditions
    /// As [`PerCoreTables::clear_range_noting`].
    pub(crate) fn protect_range_noting(
        &self,
        range: Range<u64>,
        prot: Prot,
        mut users: Option<&mut UserMask>,
    ) -> bool {
        let mut copied = UserMask::default();
        self.owner()
            .protect_range_noting(range.clone(), prot, Some(&mut copied));
        let (slots, mut removed) = (self.slots(), false);
        self.for_each_user(&copied, |c, tree| {
            if tree.protect_range(range.clone(), prot) {
                removed = true;
                if let Some(users) = users.as_deref_mut() {
                    users.insert(UserBit::of(c, slots));
                }
            }
        });
        removed
    }

    /// Frees the tables wholly inside `empty` in the owner tree, then in the trees of the cores
    /// recorded by the owner tables it freed (module doc), retiring them into `cache`.
    ///
    /// # Preconditions
    /// As `PageTables::free_tables` for the owner tree (`clear_range_noting` of the range ran
    /// first); the caller is inside an RCU read section of `domain`.
    pub(crate) fn free_tables<F: aspace_rcu::Flavor>(
        &self,
        cache: &mut PtCache,
        empty: Range<u64>,
        domain: &aspace_rcu::Domain<F>,
    ) {
        let mut copied = UserMask::default();
        self.owner()
            .free_tables_noting(cache, empty.clone(), domain, Some(&mut copied));
        self.for_each_user(&copied, |_, tree| {
            tree.free_tables(cache, empty.clone(), domain);
        });
    }
}
