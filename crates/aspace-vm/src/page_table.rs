//! Software 4-level page tables: 512 atomic 64-bit entries per table, mirroring x86-64, walked
//! lock-free by the access path and filled under a per-leaf-table lock.
//!
//! # Layout
//!
//! A 48-bit virtual address is split 9/9/9/9/12 like x86-64's: the root (level 4) table indexes
//! bits 39..47, level 3 bits 30..38, level 2 bits 21..29, and a leaf (level 1) table bits
//! 12..20. An entry of a level-4/3/2 table is 0 or `child pointer | PRESENT` (plus `LOCKED` on
//! level-2 entries: the fill lock of the leaf table they point to). A leaf entry is a [`Pte`]:
//! bit 0 present, bit 1 writable, bit 2 readable, bit 3 executable, the frame index from bit 12.
//! Every table also keeps a 512-bit `present` bitmap of its non-zero entries, so that freeing a
//! subtree, clearing a leaf or recycling a table touches only the entries in use (8 words to
//! scan instead of 512).
//!
//! # Algorithm
//!
//! - **lookup** walks four `Acquire` loads and returns the leaf entry if present. It takes no
//!   lock and writes nothing.
//! - **fill** walks down, installing missing intermediate tables with a CAS on the empty parent
//!   entry (the loser puts its never-published table back in the pool and follows the
//!   winner's). It then takes the leaf's lock (a CAS setting `LOCKED` in the level-2 entry),
//!   and only if the entry is still empty calls the caller's frame allocator and stores the
//!   new PTE with `Release`. Two cores faulting on one page thus allocate one frame: the
//!   second finds the entry present and its allocator is never called.
//! - **clear_range / protect_range** visit only the entries intersecting the range (an absent
//!   intermediate entry skips its whole subtree), and change leaf entries under each leaf's
//!   lock, using the leaf bitmap to find present entries.
//! - **free_tables(empty)** unlinks every table whose whole coverage lies inside `empty` (a
//!   range the caller knows holds no region: the unmapped range widened to the neighbouring
//!   gaps, SOSP'25 §3.1 Fig. 4), keeping the tables at the edges that still intersect a region.
//!   It walks only the present entries of the (at most two per level) partially covered
//!   tables. Unlinked tables are scrubbed at once (their few non-zero entries zeroed while the
//!   lines are still in the freeing core's cache) and retired; once `RETIRE_BATCH` of them
//!   accumulated they go to the RCU domain in ONE callback, which after a grace period moves
//!   the pointers into the per-level pools without touching the tables' memory.
//!
//! # Why frees go through RCU (ASPLOS'12 §4-5)
//!
//! A lock-free walker can load a parent entry, be delayed, and then read a child table that
//! has been unlinked meanwhile (the race the Bonsai paper's page-fault designs must tolerate:
//! §4.2's "page directory freed under a concurrent fault"). The walker holds an `aspace_rcu`
//! read guard (or the caller excludes frees by a lock), so a table unlinked by `free_tables`
//! is not reused until every such walker finished: reuse waits a grace period.
//!
//! # Invariants
//!
//! - The root is never freed. `table_count()` counts the tables linked into the tree, root
//!   included; it is 1 when no table below the root is linked.
//! - **Type-stable table memory**: a table is allocated for one level and, while the
//!   `PageTables` lives, is only ever linked, retired, pending in an RCU callback, or in the
//!   pool of its level; it is returned to the allocator only by `Drop` (or when the last RCU
//!   callback holding the pool runs after the drop). Hence every pointer any walker can load
//!   from an entry points to live memory of a table of the expected level, whatever races
//!   happen, and `lookup`/`fill` are memory-safe without a guard; the RCU guard (or the
//!   caller's lock) is what makes their ANSWER right, not what keeps them sound. Cost: the pool
//!   keeps the peak number of tables recycled within one grace period (tens of MiB at most for
//!   a loop that maps, touches and unmaps millions of pages a second) until the space drops.
//! - A leaf table's entries and bitmap change only under its lock. An intermediate entry goes
//!   from 0 to a table by CAS (fill) and back to 0 only in `free_tables`.
//! - A retired or pooled table is all zeroes (entries and bitmap): `free_tables` zeroes the
//!   entries its bitmap names (exact, since no fill may run inside an `empty` range) right
//!   after unlinking. Zeroing an unlinked table in place is harmless to a walker still inside
//!   it: it reads "not present", which is the state the caller established (no region in
//!   `empty`). What such a walker must never see is the table REUSED for other translations,
//!   and reuse waits for the grace period.
//!
//! # Contract with the caller (the design)
//!
//! `fill` and `free_tables` must not run concurrently on the same range: the caller excludes
//! fills inside `empty` (the `coarse` design holds the space write lock). `free_tables` must
//! follow `clear_range` of the same range (every PTE inside `empty` is already zero; debug
//! builds assert it) and always be given the same RCU domain, the one whose read guard the
//! walkers hold.
//!
//! Addresses are below 2^48 (four levels): `fill` panics above, the range operations ignore
//! what lies above, `lookup` answers `None`.
//!
//! Not for: soft TLBs (`tlb.rs`), deciding what a range may contain (the region map), frames
//! (`frames.rs`). Tables use std atomics even under `--cfg loom` (they are allocated zeroed and
//! type-stable, which loom's tracked atomics cannot be); no loom model covers them.

use crate::frames::Frame;
use crate::types::Prot;
use crossbeam_utils::Backoff;
use parking_lot::Mutex;
use std::ops::Range;
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// Entries per table.
const ENTRIES: usize = 512;
/// Levels of tables (the root is level 4, leaves level 1).
const LEVELS: u32 = 4;
/// Bits of virtual address the tables translate.
pub(crate) const VA_BITS: u32 = 12 + 9 * LEVELS;
/// Intermediate entry: points to a child table.
const PRESENT: u64 = 1;
/// Level-2 entry: the leaf table it points to is locked for fills/clears/protects.
const LOCKED: u64 = 1 << 1;
/// The child pointer of an intermediate entry (tables are 64-byte aligned).
const ADDR_MASK: u64 = !0x3f;
/// Retired tables handed to RCU in one callback (shrunk under test so batching runs).
const RETIRE_BATCH: usize = if cfg!(test) { 4 } else { 64 };

/// Shift of the address bits a level-`level` table indexes.
#[inline]
const fn shift(level: u32) -> u32 {
    12 + 9 * (level - 1)
}

/// Index into a level-`level` table for `va`.
#[inline]
const fn index(va: u64, level: u32) -> usize {
    ((va >> shift(level)) & (ENTRIES as u64 - 1)) as usize
}

/// Bytes one entry of a level-`level` table covers.
#[inline]
const fn span(level: u32) -> u64 {
    1 << shift(level)
}

/// A leaf page-table entry: bit 0 present, bit 1 writable, bit 2 readable, bit 3 executable,
/// the frame index in bits 12 and up.
#[derive(Clone, Copy, PartialEq, Eq, Debug, Hash)]
pub(crate) struct Pte(u64);

impl Pte {
    const PRESENT: u64 = 1;
    const WRITABLE: u64 = 1 << 1;
    const READABLE: u64 = 1 << 2;
    const EXEC: u64 = 1 << 3;
    const RIGHTS: u64 = Self::WRITABLE | Self::READABLE | Self::EXEC;
    const FRAME_SHIFT: u32 = 12;

    /// A present entry mapping `frame` with `prot` (unknown protection bits are dropped).
    #[inline]
    pub(crate) fn new(frame: Frame, prot: Prot) -> Pte {
        Pte(Self::PRESENT | Self::rights(prot) | (u64::from(frame.index()) << Self::FRAME_SHIFT))
    }

    #[inline]
    fn rights(prot: Prot) -> u64 {
        let mut bits = 0;
        if prot.contains(Prot::READ) {
            bits |= Self::READABLE;
        }
        if prot.contains(Prot::WRITE) {
            bits |= Self::WRITABLE;
        }
        if prot.contains(Prot::EXEC) {
            bits |= Self::EXEC;
        }
        bits
    }

    /// Whether it maps a frame.
    #[inline]
    pub(crate) fn present(self) -> bool {
        self.0 & Self::PRESENT != 0
    }

    /// The frame it maps (meaningful only when present).
    #[inline]
    pub(crate) fn frame(self) -> Frame {
        Frame::from_index((self.0 >> Self::FRAME_SHIFT) as u32)
    }

    /// Its protection (`PROT_*` bits).
    #[inline]
    pub(crate) fn prot(self) -> Prot {
        let mut bits = 0;
        if self.0 & Self::READABLE != 0 {
            bits |= Prot::READ.bits();
        }
        if self.0 & Self::WRITABLE != 0 {
            bits |= Prot::WRITE.bits();
        }
        if self.0 & Self::EXEC != 0 {
            bits |= Prot::EXEC.bits();
        }
        Prot::from_bits_retain(bits)
    }

    /// The same entry with protection `prot`.
    #[inline]
    pub(crate) fn with_prot(self, prot: Prot) -> Pte {
        Pte(self.0 & !Self::RIGHTS | Self::rights(prot))
    }

    /// The raw bits.
    #[allow(dead_code)] // diagnostics
    pub(crate) fn bits(self) -> u64 {
        self.0
    }
}

/// Whether going from `old` to `new` takes away an access right (x86 rules: write or exec
/// imply read), i.e. whether cached translations must be shot down.
#[inline]
pub(crate) fn rights_removed(old: Prot, new: Prot) -> bool {
    use crate::types::Access;
    [Access::Read, Access::Write, Access::Exec]
        .into_iter()
        .any(|a| old.allows(a) && !new.allows(a))
}

/// Why `fill` failed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, thiserror::Error)]
pub(crate) enum FillError {
    /// The frame allocator returned `None` (the pool is exhausted); nothing was changed
    /// except possibly newly installed empty intermediate tables, which `free_tables` of an
    /// empty range reclaims like any other.
    #[error("no frame available")]
    NoFrame,
}

/// One table: 512 entries and the bitmap of the non-zero ones.
#[repr(C, align(64))]
struct Table {
    entries: [AtomicU64; ENTRIES],
    /// Bit `i` set iff `entries[i]` is non-zero (exact for leaves under their lock; for
    /// intermediate tables set right after the installing CAS, so exact whenever no fill is in
    /// flight in the table's range).
    present: [AtomicU64; ENTRIES / 64],
}

impl Table {
    /// A fresh, all-zero table on the heap.
    fn alloc() -> NonNull<Table> {
        NonNull::from(Box::leak(Box::new(Table {
            entries: [const { AtomicU64::new(0) }; ENTRIES],
            present: [const { AtomicU64::new(0) }; ENTRIES / 64],
        })))
    }

    /// Calls `f(i)` for every `i` in `first..=last` whose bitmap bit is set (a snapshot).
    #[inline]
    fn for_each_present(&self, first: usize, last: usize, mut f: impl FnMut(usize)) {
        for w in first / 64..=last / 64 {
            // Relaxed: the bitmap is exact under the conditions documented on the field
            // (the leaf lock, or the caller's exclusion of fills), which order it for us.
            let mut bits = self.present[w].load(Ordering::Relaxed);
            if w == first / 64 {
                bits &= !0u64 << (first % 64);
            }
            if w == last / 64 {
                bits &= !0u64 >> (63 - last % 64);
            }
            while bits != 0 {
                let b = bits.trailing_zeros() as usize;
                bits &= bits - 1;
                f(w * 64 + b);
            }
        }
    }

    /// Zeroes the entries named by the bitmap, then the bitmap. Only for an unlinked table in
    /// which no fill can run (see the module doc for why walkers do not mind).
    fn scrub(&self) {
        self.for_each_present(0, ENTRIES - 1, |i| {
            self.entries[i].store(0, Ordering::Relaxed);
        });
        for w in &self.present {
            // Only dirty the line when needed.
            if w.load(Ordering::Relaxed) != 0 {
                w.store(0, Ordering::Relaxed);
            }
        }
        debug_assert!(self.entries.iter().all(|e| e.load(Ordering::Relaxed) == 0));
    }
}

/// An owned table pointer that may cross threads (a table is atomics only).
struct TablePtr(NonNull<Table>);

// SAFETY: a `TablePtr` is an owning pointer to a `Table`, which contains only atomics; moving
// or sharing it between threads is as safe as moving a `Box<Table>`.
unsafe impl Send for TablePtr {}
// SAFETY: as for `Send`: `&TablePtr` gives access to atomics only.
unsafe impl Sync for TablePtr {}

impl TablePtr {
    /// Returns the table's memory to the allocator.
    ///
    /// # Safety
    /// The table is unreachable by every walker (no entry points to it and any grace period
    /// needed has passed), and this is its only owner.
    unsafe fn dealloc(self) {
        // SAFETY: the table came from `Table::alloc` (a leaked `Box<Table>`); the caller
        // guarantees exclusive ownership and no remaining readers.
        drop(unsafe { Box::from_raw(self.0.as_ptr()) });
    }
}

/// Zeroed tables ready for reuse, one list per level below the root (index `level - 1`).
/// Shared (`Arc`) between the `PageTables` and its pending RCU callbacks.
struct TablePool {
    free: [Mutex<Vec<TablePtr>>; LEVELS as usize - 1],
    /// Tables ever taken from the allocator (diagnostics and tests).
    allocated: AtomicU64,
}

impl TablePool {
    fn new() -> TablePool {
        TablePool {
            free: std::array::from_fn(|_| Mutex::new(Vec::new())),
            allocated: AtomicU64::new(0),
        }
    }

    /// A zeroed table for `level` (recycled when possible).
    #[inline]
    fn get(&self, level: u32) -> NonNull<Table> {
        if let Some(t) = self.free[level as usize - 1].lock().pop() {
            return t.0;
        }
        self.allocated.fetch_add(1, Ordering::Relaxed);
        Table::alloc()
    }

    /// Puts back a zeroed table of `level` that was never published.
    fn put(&self, level: u32, table: NonNull<Table>) {
        self.free[level as usize - 1].lock().push(TablePtr(table));
    }

    /// The RCU callback: moves retired (already zeroed) tables, whose grace period passed,
    /// into the pools, one lock per level. It does not touch the tables' memory, so their
    /// cache lines stay where the freeing core left them.
    fn recycle(&self, mut batch: Vec<(TablePtr, u32)>) {
        for level in 1..LEVELS {
            let mut free = self.free[level as usize - 1].lock();
            batch.retain(|(t, l)| {
                if *l == level {
                    free.push(TablePtr(t.0));
                }
                *l != level
            });
        }
        debug_assert!(batch.is_empty());
    }
}

impl Drop for TablePool {
    fn drop(&mut self) {
        for list in &mut self.free {
            for t in list.get_mut().drain(..) {
                // SAFETY: pooled tables are unlinked and past their grace period; the pool is
                // being dropped, so it is their only owner.
                unsafe { t.dealloc() };
            }
        }
    }
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

/// The page tables of one address space. `Sync`: every core walks and fills them.
pub(crate) struct PageTables {
    root: NonNull<Table>,
    /// Tables linked in the tree, the root included.
    tables: AtomicU64,
    pool: Arc<TablePool>,
    /// Unlinked tables not yet handed to RCU, with their level.
    retired: Mutex<Vec<(TablePtr, u32)>>,
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

impl Default for PageTables {
    fn default() -> Self {
        Self::new()
    }
}

impl PageTables {
    /// Empty tables: just the root.
    pub(crate) fn new() -> PageTables {
        PageTables {
            root: Table::alloc(),
            tables: AtomicU64::new(1),
            pool: Arc::new(TablePool::new()),
            retired: Mutex::new(Vec::new()),
        }
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
        self.tables.load(Ordering::Relaxed)
    }

    /// The present leaf entry for `va`, or `None`. Lock-free; the answer is current only while
    /// the caller holds a read guard of the RCU domain given to `free_tables` or otherwise
    /// excludes `free_tables` (it is memory-safe regardless).
    #[inline]
    pub(crate) fn lookup(&self, va: u64) -> Option<Pte> {
        if va >> VA_BITS != 0 {
            return None;
        }
        let mut table = self.root();
        let mut level = LEVELS;
        loop {
            // Acquire: pairs with the Release CAS in `install` (the child table's zeroed
            // contents) and with the Release store of a PTE in `fill` (the frame's zeroes and
            // everything written before the fill).
            let e = table.entries[index(va, level)].load(Ordering::Acquire);
            if e & PRESENT == 0 {
                return None;
            }
            if level == 1 {
                return Some(Pte(e));
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
    /// # Panics
    /// If `va >= 2^48`.
    pub(crate) fn fill(
        &self,
        va: u64,
        prot: Prot,
        frame: impl FnOnce() -> Option<Frame>,
    ) -> Result<Pte, FillError> {
        assert!(
            va >> VA_BITS == 0,
            "address {va:#x} beyond the 48-bit page tables"
        );
        let guard = loop {
            let slot = self.leaf_slot(va);
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
            return Ok(Pte(cur));
        }
        let f = frame().ok_or(FillError::NoFrame)?;
        let pte = Pte::new(f, prot);
        // Release: publishes the frame's zeroed contents with the translation; pairs with the
        // Acquire load in `lookup`.
        entry.store(pte.0, Ordering::Release);
        let w = &guard.leaf.present[i / 64];
        // Relaxed: leaf bitmaps are written only under the leaf lock.
        w.store(w.load(Ordering::Relaxed) | 1 << (i % 64), Ordering::Relaxed);
        Ok(pte)
    }

    /// The level-2 entry above `va`'s leaf, installing missing tables on the way.
    #[inline]
    fn leaf_slot(&self, va: u64) -> &AtomicU64 {
        let mut table = self.root();
        let mut level = LEVELS;
        loop {
            let i = index(va, level);
            let slot = &table.entries[i];
            // Acquire: pairs with the Release CAS in `install` (the child's contents).
            let mut e = slot.load(Ordering::Acquire);
            if e & PRESENT == 0 {
                e = self.install(table, i, level - 1);
            }
            if level == 2 {
                return slot;
            }
            table = self.child(e);
            level -= 1;
        }
    }

    /// Installs a fresh level-`level` table in `parent.entries[i]` (empty) and returns the
    /// entry now there (ours, or the one a concurrent filler installed first).
    #[cold]
    fn install(&self, parent: &Table, i: usize, level: u32) -> u64 {
        let table = self.pool.get(level);
        let new = table.as_ptr() as u64 | PRESENT;
        // Success Release: publishes the zeroed table; pairs with the Acquire loads of walkers
        // (`lookup`, `leaf_slot`, `visit`). Failure Acquire: pairs with the winner's Release
        // CAS, so the winner's table is visible before we walk into it.
        match parent.entries[i].compare_exchange(0, new, Ordering::Release, Ordering::Acquire) {
            Ok(_) => {
                // Relaxed: bitmap readers rely on the caller's exclusion (see `Table::present`).
                parent.present[i / 64].fetch_or(1 << (i % 64), Ordering::Relaxed);
                self.tables.fetch_add(1, Ordering::Relaxed);
                new
            }
            Err(current) => {
                // Never published: no walker saw it, so it goes back without a grace period.
                self.pool.put(level, table);
                current
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
        self.for_each_leaf(&range, &mut |leaf, first, last| {
            leaf.for_each_present(first, last, |i| {
                // Relaxed (entries and bitmap): written only under the leaf lock we hold; a
                // walker that reads the zero simply faults.
                let e = leaf.entries[i].load(Ordering::Relaxed);
                debug_assert!(Pte(e).present(), "bitmap and entries disagree");
                leaf.entries[i].store(0, Ordering::Relaxed);
                let w = &leaf.present[i / 64];
                w.store(
                    w.load(Ordering::Relaxed) & !(1 << (i % 64)),
                    Ordering::Relaxed,
                );
                out.push(Pte(e).frame());
            });
        });
    }

    /// Sets the protection of every present leaf entry in `range` to `prot` (under each leaf's
    /// lock). Returns whether any right was taken away (so a shootdown is needed).
    pub(crate) fn protect_range(&self, range: Range<u64>, prot: Prot) -> bool {
        let mut removed = false;
        self.for_each_leaf(&range, &mut |leaf, first, last| {
            leaf.for_each_present(first, last, |i| {
                // Relaxed load: written only under the leaf lock we hold.
                let old = Pte(leaf.entries[i].load(Ordering::Relaxed));
                let new = old.with_prot(prot);
                if new != old {
                    removed |= rights_removed(old.prot(), prot);
                    // Release: like `fill`'s store; pairs with the Acquire load in `lookup`.
                    leaf.entries[i].store(new.0, Ordering::Release);
                }
            });
        });
        removed
    }

    /// Unlinks every table below the root whose whole coverage lies inside `empty` and
    /// reclaims it through `domain` after a grace period (batched: see the module doc).
    ///
    /// Preconditions: no region intersects `empty`, every PTE in it was cleared, no fill runs
    /// inside it, and `domain` is the domain whose read guards walkers hold (always the same).
    pub(crate) fn free_tables<F: aspace_rcu::Flavor>(
        &self,
        empty: Range<u64>,
        domain: &aspace_rcu::Domain<F>,
    ) {
        let empty = empty.start..empty.end.min(1 << VA_BITS);
        if empty.start >= empty.end {
            return;
        }
        let mut retired = self.retired.lock();
        let before = retired.len();
        self.free_in(self.root(), LEVELS, 0, &empty, &mut retired);
        let freed = retired.len() - before;
        if freed == 0 {
            return;
        }
        self.tables.fetch_sub(freed as u64, Ordering::Relaxed);
        if retired.len() >= RETIRE_BATCH {
            let batch = std::mem::take(&mut *retired);
            drop(retired);
            let pool = Arc::clone(&self.pool);
            domain.call(move || pool.recycle(batch));
        }
    }

    /// `free_tables` below `table` (level `level`, covering from `base`).
    fn free_in(
        &self,
        table: &Table,
        level: u32,
        base: u64,
        empty: &Range<u64>,
        out: &mut Vec<(TablePtr, u32)>,
    ) {
        let span = span(level);
        let lo = empty.start.max(base);
        let hi = empty.end.min(base + span * ENTRIES as u64);
        if lo >= hi {
            return;
        }
        let first = ((lo - base) / span) as usize;
        let last = ((hi - 1 - base) / span) as usize;
        table.for_each_present(first, last, |i| {
            let child_base = base + i as u64 * span;
            let slot = &table.entries[i];
            if empty.start <= child_base && child_base + span <= empty.end {
                let e = Self::unlink(slot);
                if e & PRESENT != 0 {
                    // Relaxed: bitmap, see `Table::present`.
                    table.present[i / 64].fetch_and(!(1 << (i % 64)), Ordering::Relaxed);
                    self.collect(e, level - 1, out);
                }
            } else if level > 2 {
                // Acquire: pairs with the Release CAS in `install`.
                let e = slot.load(Ordering::Acquire);
                if e & PRESENT != 0 {
                    self.free_in(self.child(e), level - 1, child_base, empty, out);
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
    fn collect(&self, e: u64, level: u32, out: &mut Vec<(TablePtr, u32)>) {
        let table = self.child(e);
        if level >= 2 {
            table.for_each_present(0, ENTRIES - 1, |i| {
                // Relaxed: the subtree is unlinked and no fill runs in it (caller's contract);
                // the entries were published to us by the caller's exclusion.
                let c = table.entries[i].load(Ordering::Relaxed);
                if c & PRESENT != 0 {
                    self.collect(c, level - 1, out);
                }
            });
        } else {
            debug_assert!(
                table.present.iter().all(|w| w.load(Ordering::Relaxed) == 0),
                "free_tables over a leaf table that still maps pages (clear_range first)"
            );
        }
        // Zero it now, while its lines are in our cache (for a leaf a no-op unless the
        // caller broke the contract: its frames leak but no stale PTE survives into reuse).
        table.scrub();
        out.push((TablePtr(NonNull::from(table)), level));
    }

    /// Tables taken from the allocator so far (recycled ones are not counted again).
    #[cfg(all(test, not(loom)))]
    fn allocated_tables(&self) -> u64 {
        self.pool.allocated.load(Ordering::Relaxed)
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
        for (t, _) in self.retired.get_mut().drain(..) {
            // SAFETY: retired tables are unlinked, and with `&mut self` no walker can still be
            // reading them; nothing else owns them.
            unsafe { t.dealloc() };
        }
        // Pooled tables go with the pool (now, or when the last pending RCU callback ran).
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use crate::frames::{FrameCache, FramePool};
    use crate::types::PAGE_SIZE;
    use std::sync::atomic::AtomicUsize;

    const MIB: u64 = 1 << 20;
    const GIB: u64 = 1 << 30;

    fn pool() -> FramePool {
        FramePool::new(64 * MIB, 8).unwrap()
    }

    #[test]
    fn fill_then_lookup_returns_the_same_entry() {
        let pt = PageTables::new();
        let pool = pool();
        let mut cache = FrameCache::new();
        let va = 0x7f12_3456_7000;
        assert_eq!(pt.lookup(va), None);
        let pte = pt
            .fill(va, Prot::READ_WRITE, || cache.alloc(&pool))
            .unwrap();
        assert!(pte.present());
        assert_eq!(pte.prot(), Prot::READ_WRITE);
        assert_eq!(pt.lookup(va), Some(pte));
        assert_eq!(pt.lookup(va + 0xfff), Some(pte), "same page");
        assert_eq!(pt.lookup(va + PAGE_SIZE), None, "next page not filled");
        assert_eq!(pt.lookup(1 << 48), None, "beyond the tables");
        assert_eq!(pt.table_count(), 4);
        // A second fill finds it and does not allocate.
        let again = pt
            .fill(va, Prot::READ, || {
                panic!("allocator called for a present page")
            })
            .unwrap();
        assert_eq!(again, pte);
        let mut out = Vec::new();
        pt.clear_range(va..va + PAGE_SIZE, &mut out);
        assert_eq!(out, vec![pte.frame()]);
        assert_eq!(pt.lookup(va), None);
        cache.free(&pool, out[0]);
        cache.drain(&pool);
    }

    #[test]
    fn pte_encodes_frame_and_protection() {
        let f = Frame::from_index(0xdead_beef);
        for bits in 0..8 {
            let prot = Prot::from_bits_retain(bits);
            let pte = Pte::new(f, prot);
            assert!(pte.present());
            assert_eq!(pte.frame(), f);
            assert_eq!(pte.prot(), prot);
            assert_eq!(pte.bits() & 0xfff & !0xf, 0);
        }
        assert_eq!(
            Pte::new(f, Prot::READ).with_prot(Prot::NONE).prot(),
            Prot::NONE
        );
        assert!(
            Pte::new(f, Prot::NONE).present(),
            "PROT_NONE pages keep their frame"
        );
    }

    #[test]
    fn fill_without_a_frame_fails_and_maps_nothing() {
        let pt = PageTables::new();
        assert_eq!(
            pt.fill(0x40_0000, Prot::READ, || None),
            Err(FillError::NoFrame)
        );
        assert_eq!(pt.lookup(0x40_0000), None);
        let domain = aspace_rcu::Domain::<aspace_rcu::Memb>::new();
        pt.free_tables(0..1 << 47, &domain);
        assert_eq!(pt.table_count(), 1);
    }

    #[test]
    fn clear_range_returns_only_frames_inside_the_range() {
        let pt = PageTables::new();
        let pool = pool();
        let mut cache = FrameCache::new();
        // Pages around a 2 MiB and a 1 GiB boundary.
        let base = 3 * GIB - 8 * PAGE_SIZE;
        let mut frames = Vec::new();
        for p in 0..16 {
            frames.push(
                pt.fill(base + p * PAGE_SIZE, Prot::READ, || cache.alloc(&pool))
                    .unwrap()
                    .frame(),
            );
        }
        let mut out = Vec::new();
        pt.clear_range(base + 4 * PAGE_SIZE..base + 12 * PAGE_SIZE, &mut out);
        out.sort();
        let mut expect = frames[4..12].to_vec();
        expect.sort();
        assert_eq!(out, expect);
        for p in 0..16 {
            assert_eq!(
                pt.lookup(base + p * PAGE_SIZE).is_some(),
                !(4..12).contains(&p),
                "page {p}"
            );
        }
        // Clearing an unmapped or huge empty range is a no-op.
        let mut none = Vec::new();
        pt.clear_range(100 * GIB..1 << 47, &mut none);
        pt.clear_range(base + 4 * PAGE_SIZE..base + 12 * PAGE_SIZE, &mut none);
        assert!(none.is_empty());
        pt.clear_range(0..u64::MAX, &mut out);
        assert_eq!(out.len(), 16);
        for f in out {
            cache.free(&pool, f);
        }
        assert_eq!(pool.in_use(), 0);
        cache.drain(&pool);
    }

    #[test]
    fn protect_range_reports_removed_rights_and_keeps_frames() {
        let pt = PageTables::new();
        let pool = pool();
        let mut cache = FrameCache::new();
        let va = 0x1000_0000;
        let a = pt
            .fill(va, Prot::READ_WRITE, || cache.alloc(&pool))
            .unwrap();
        let b = pt
            .fill(va + PAGE_SIZE, Prot::READ_WRITE, || cache.alloc(&pool))
            .unwrap();
        assert!(!pt.protect_range(va..va + 2 * PAGE_SIZE, Prot::READ_WRITE | Prot::EXEC));
        assert!(pt.protect_range(va..va + PAGE_SIZE, Prot::READ));
        assert_eq!(pt.lookup(va).unwrap().prot(), Prot::READ);
        assert_eq!(pt.lookup(va).unwrap().frame(), a.frame());
        assert_eq!(
            pt.lookup(va + PAGE_SIZE).unwrap().prot(),
            Prot::READ_WRITE | Prot::EXEC,
            "outside the range"
        );
        assert!(
            !pt.protect_range(va..va + PAGE_SIZE, Prot::READ),
            "unchanged"
        );
        assert!(pt.protect_range(va..va + 2 * PAGE_SIZE, Prot::NONE));
        let none = pt.lookup(va + PAGE_SIZE).unwrap();
        assert_eq!(none.prot(), Prot::NONE);
        assert_eq!(none.frame(), b.frame(), "PROT_NONE keeps the frame");
        // WRITE alone implies READ (x86): READ|WRITE -> WRITE removes nothing.
        assert!(!rights_removed(Prot::READ_WRITE, Prot::WRITE));
        assert!(rights_removed(Prot::READ_WRITE, Prot::READ));
        assert!(!pt.protect_range(5 * GIB..6 * GIB, Prot::NONE), "no tables");
        let mut out = Vec::new();
        pt.clear_range(va..va + 2 * PAGE_SIZE, &mut out);
        for f in out {
            cache.free(&pool, f);
        }
        cache.drain(&pool);
    }

    #[test]
    fn free_tables_keeps_a_table_still_intersecting_a_region() {
        let pt = PageTables::new();
        let pool = pool();
        let mut cache = FrameCache::new();
        let domain = aspace_rcu::Domain::<aspace_rcu::Memb>::new();
        // Regions A = [2M - 8K, 2M - 4K) and B = [2M + 4K, 2M + 8K) on two leaves of one
        // level-2 table; C far away (another level-3 subtree).
        let a = 2 * MIB - 2 * PAGE_SIZE;
        let b = 2 * MIB + PAGE_SIZE;
        let c = 600 * GIB;
        for va in [a, b, c] {
            pt.fill(va, Prot::READ_WRITE, || cache.alloc(&pool))
                .unwrap();
        }
        // root + L3 + L2 + 2 leaves, and L3 + L2 + leaf for C.
        assert_eq!(pt.table_count(), 8);
        // Unmap B: the gap is [A's end, C's start). B's leaf (coverage [2M, 4M)) lies inside:
        // freed. A's leaf ([0, 2M)) still intersects A: kept, and with it the L2 and L3.
        let mut out = Vec::new();
        pt.clear_range(b..b + PAGE_SIZE, &mut out);
        pt.free_tables(a + PAGE_SIZE..c, &domain);
        assert_eq!(pt.table_count(), 7);
        assert!(pt.lookup(a).is_some(), "A's translation survives");
        assert!(pt.lookup(c).is_some(), "C's translation survives");
        // Unmap C: gap [A's end, 2^47): C's L3, L2 and leaf go.
        pt.clear_range(c..c + PAGE_SIZE, &mut out);
        pt.free_tables(a + PAGE_SIZE..1 << 47, &domain);
        assert_eq!(pt.table_count(), 4);
        assert!(pt.lookup(a).is_some());
        // Unmap A: everything goes; the tables return to 1 (the root).
        pt.clear_range(a..a + PAGE_SIZE, &mut out);
        pt.free_tables(0..1 << 47, &domain);
        assert_eq!(pt.table_count(), 1);
        assert_eq!(pt.lookup(a), None);
        for f in out {
            cache.free(&pool, f);
        }
        cache.drain(&pool);
    }

    #[test]
    fn freed_tables_are_reused_after_a_grace_period() {
        let pt = PageTables::new();
        let pool = pool();
        let mut cache = FrameCache::new();
        let domain = aspace_rcu::Domain::<aspace_rcu::Memb>::new();
        let mut out = Vec::new();
        let va = 0x5555_0000_0000;
        // Each cycle installs 3 tables below the root and frees them; with a batch of 4 the
        // retired tables go to RCU every other cycle.
        for _ in 0..8 {
            pt.fill(va, Prot::READ_WRITE, || cache.alloc(&pool))
                .unwrap();
            pt.clear_range(va..va + PAGE_SIZE, &mut out);
            pt.free_tables(0..1 << 47, &domain);
            assert_eq!(pt.table_count(), 1);
            cache.free(&pool, out.pop().unwrap());
        }
        domain.barrier();
        let allocated = pt.allocated_tables();
        for _ in 0..2 {
            pt.fill(va, Prot::READ_WRITE, || cache.alloc(&pool))
                .unwrap();
            pt.clear_range(va..va + PAGE_SIZE, &mut out);
            pt.free_tables(0..1 << 47, &domain);
            cache.free(&pool, out.pop().unwrap());
        }
        assert_eq!(
            pt.allocated_tables(),
            allocated,
            "tables recycled through RCU, none newly allocated"
        );
        cache.drain(&pool);
        assert_eq!(pool.in_use(), 0);
    }

    #[test]
    fn table_count_returns_to_one_after_unmapping_scattered_pages() {
        let pt = PageTables::new();
        let pool = pool();
        let mut cache = FrameCache::new();
        let domain = aspace_rcu::Domain::<aspace_rcu::Memb>::new();
        let mut vas: Vec<u64> = (0..64u64)
            .map(|i| (i.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 17) & !(PAGE_SIZE - 1))
            .collect();
        vas.sort_unstable();
        vas.dedup();
        for &va in &vas {
            pt.fill(va, Prot::READ, || cache.alloc(&pool)).unwrap();
        }
        assert!(pt.table_count() > 64);
        let mut out = Vec::new();
        // Unmap in pieces, freeing only the tables fully inside each piece.
        for piece in 0..8u64 {
            let r = piece << 44..(piece + 1) << 44;
            pt.clear_range(r.clone(), &mut out);
            pt.free_tables(r, &domain);
        }
        assert_eq!(out.len(), vas.len());
        assert_eq!(pt.table_count(), 1);
        for f in out {
            cache.free(&pool, f);
        }
        assert_eq!(pool.in_use(), 0);
        cache.drain(&pool);
    }

    #[test]
    fn concurrent_fills_of_one_page_allocate_one_frame() {
        let pool = pool();
        for round in 0..200u64 {
            let pt = PageTables::new();
            let calls = AtomicUsize::new(0);
            let va = 0x7000_0000_0000 + round * 3 * GIB;
            let results: Vec<Pte> = std::thread::scope(|s| {
                let handles: Vec<_> = (0..2)
                    .map(|_| {
                        let (pt, pool, calls) = (&pt, &pool, &calls);
                        s.spawn(move || {
                            let mut cache = FrameCache::new();
                            let pte = pt
                                .fill(va, Prot::READ_WRITE, || {
                                    calls.fetch_add(1, Ordering::Relaxed);
                                    cache.alloc(pool)
                                })
                                .unwrap();
                            cache.drain(pool);
                            pte
                        })
                    })
                    .collect();
                handles.into_iter().map(|h| h.join().unwrap()).collect()
            });
            assert_eq!(results[0], results[1], "both see the same translation");
            assert_eq!(
                calls.load(Ordering::Relaxed),
                1,
                "the loser allocated nothing"
            );
            assert_eq!(pool.in_use(), 1);
            assert_eq!(pt.table_count(), 4, "one table per level despite the race");
            let mut out = Vec::new();
            pt.clear_range(va..va + PAGE_SIZE, &mut out);
            let mut cache = FrameCache::new();
            cache.free(&pool, out[0]);
            cache.drain(&pool);
        }
        assert_eq!(pool.in_use(), 0);
    }

    #[test]
    fn stress_fill_lookup_clear_free_keeps_accounting_exact() {
        // Each thread owns a 64 MiB slice, disjoint 1 GiB-aligned for half of them and sharing
        // one level-3 table; it fills, checks, clears and frees tables in its own slice while
        // lock-free lookups of the others run, then everything is freed.
        const THREADS: u64 = 4;
        const ROUNDS: u64 = 300;
        let pool = FramePool::new(64 * MIB, 4).unwrap();
        let pt = PageTables::new();
        let domain = aspace_rcu::Domain::<aspace_rcu::Memb>::new();
        std::thread::scope(|s| {
            for t in 0..THREADS {
                let (pt, pool, domain) = (&pt, &pool, &domain);
                s.spawn(move || {
                    let reader = domain.register();
                    let mut cache = FrameCache::new();
                    let base = 0x10_0000_0000 + t * 64 * MIB;
                    let mut out = Vec::new();
                    let mut x = t + 1;
                    for _ in 0..ROUNDS {
                        x ^= x << 13;
                        x ^= x >> 7;
                        x ^= x << 17;
                        let first = (x % 16_000) * PAGE_SIZE;
                        let n = 1 + (x >> 20) % 40;
                        let r = base + first..base + first + n * PAGE_SIZE;
                        for va in r.clone().step_by(PAGE_SIZE as usize) {
                            let pte = pt.fill(va, Prot::READ_WRITE, || cache.alloc(pool)).unwrap();
                            // SAFETY: the frame is mapped only in this thread's slice.
                            unsafe { *pool.ptr(pte.frame()) = t as u8 + 1 };
                        }
                        {
                            let _g = reader.read();
                            for va in r.clone().step_by(PAGE_SIZE as usize) {
                                let pte = pt.lookup(va).expect("filled page present");
                                // SAFETY: as above.
                                assert_eq!(unsafe { *pool.ptr(pte.frame()) }, t as u8 + 1);
                            }
                            // Look at a neighbour's slice: whatever we see is a valid entry.
                            let other = 0x10_0000_0000 + ((t + 1) % THREADS) * 64 * MIB;
                            let _ = pt.lookup(other + first);
                        }
                        pt.clear_range(r.clone(), &mut out);
                        assert_eq!(out.len() as u64, n);
                        // The slice is ours and now empty: free its tables.
                        pt.free_tables(base..base + 64 * MIB, domain);
                        for f in out.drain(..) {
                            cache.free(pool, f);
                        }
                    }
                    cache.drain(pool);
                });
            }
        });
        assert_eq!(pool.in_use(), 0);
        // The slices share one level-3 and one level-2 table (all within 256 MiB of a 1 GiB
        // boundary); their own leaves were freed. Freeing the whole space leaves the root.
        pt.free_tables(0..1 << 47, &domain);
        assert_eq!(pt.table_count(), 1);
        domain.barrier();
    }
}
