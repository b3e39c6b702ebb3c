//! [`RcuTree`]: a region store whose **region objects are freed through RCU**, so that a fault
//! can keep using a region it looked up after it released every lock: an ordinary balanced tree
//! (`BTreeMap`, keyed by region end like [`BTreeStore`](super::store::BTreeStore)) of pointers
//! to heap [`StoredRegion`]s, under its own reader-writer **tree lock** that is taken around tree
//! operations only (ASPLOS'12 §5.2, hybrid locking/RCU: "a read/write lock, which both the page
//! fault handler and memory mapping operations acquire around tree operations").
//!
//! Written for the `hybrid` design (`designs/hybrid.rs`); any design whose faults look regions
//! up without its space lock and whose system calls are serialized by a space lock can use it
//! (`bonsai`/`pervma` need the same RCU-freed region objects; only the tree would differ).
//!
//! # Who may do what
//!
//! - **Lock-free lookups** ([`RcuRegions::lookup_rcu`], the one `syscalls::fault_rcu` uses):
//!   inside an RCU read section of the space's domain, take the tree lock *shared* for the
//!   search only, release it, and go on with the `&StoredRegion` found, which stays valid until
//!   the read section ends: an object leaves the tree under the tree lock's *exclusive* side
//!   and is handed to [`Domain::defer_drop`] only after that, so it is freed after a grace
//!   period that began after it was unreachable.
//! - **Edits** (the `RegionStore` two-step edit, through [`TreeEdit`]): only the holder of the
//!   tree's **token** ([`TreeToken`], one per tree, which the design keeps under its space
//!   lock) *mutably*. `&mut TreeToken` proves that no other edit and no [`Stable`] view runs, so
//!   the editor reads the tree without the tree lock (no one else writes it), and takes the
//!   tree lock exclusively only inside [`RegionStore::replace_window`], around the tree
//!   operations.
//! - **Stable views** ([`Stable`], `&TreeToken`): a fault holding the space lock's shared side
//!   (the design's `Retry` path, Linux's `mmap_sem` read) reads the tree without the tree lock:
//!   no edit can run (it would need `&mut TreeToken`). Read-only: `Stable` derefs to `&TreeEdit`
//!   only, so `fault_locked` (which takes `&impl RegionStore`) runs on it, and nothing can edit
//!   through it. The first-write anon identity is set through the region's atomic, as under
//!   `coarse`'s read lock.
//! - **Snapshots** (`maps()`, the region count) take the tree lock shared: every edit's tree
//!   operations are one exclusive section, so a snapshot sees whole edits.
//!
//! # The leave rule (`region/store.rs`), and what is marked
//!
//! [`TreeEdit::replace_window`] keeps the object of every region the plan leaves **exactly**
//! as it was (same bounds, same attributes: an unchanged neighbour of the window), so it is
//! neither marked nor replaced and faults on it never retry because of an edit beside it. Every
//! other region of the window (removed, trimmed, split, merged, re-protected) is **marked**
//! (`StoredRegion::mark_replaced`, with its `SeqCst` fence) *before* the tree lock is taken to
//! publish the new regions, and the body of the system call touches page-table entries of the
//! range only after `replace_window` returned (`designs/syscalls.rs`: every body edits first,
//! then zaps or re-protects). So a lock-free fault that found a region which then left is
//! refused at its checked fill (`PageTables::fill_checked`), whichever comes first.
//!
//! A lookup that misses answers nothing here ([`RcuRegions::MISS_IS_UNMAPPED`] is false): this
//! store publishes a window in one exclusive section, so a miss is in fact never a split in
//! flight, but the paper's rule (a fault that finds no region retries under `mmap_sem`, which
//! also covers a store that splits in two tree operations, as Linux's does) costs nothing on the
//! fast path (a miss is a segmentation fault) and keeps the design correct if the commit is ever
//! broken into several tree operations.
//!
//! # Memory
//!
//! A region object is a `Box<StoredRegion>` leaked into the tree; it is freed by the domain's
//! reclaimer after a grace period when it leaves, or by [`RcuTree`]'s drop (no reader can exist
//! then: the space is being dropped). `reserve` allocates nothing (the `BTreeMap` aborts on out
//! of memory, like [`BTreeStore`](super::store::BTreeStore)'s).
//!
//! Not for: the locks around it (the design), the edit rules (`plan.rs`).

use super::gap::highest_gap;
use super::store::{RcuRegions, RegionRef, RegionStore, StoredRegion};
use super::{AnonId, Region};
use crate::error::VmError;
use crate::semantics::Bounds;
use crate::sync::{RwLock, UnsafeCell};
use aspace_rcu::{Domain, Guard};
use std::collections::BTreeMap;
use std::ops::{Deref, Range};
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU64, Ordering};

/// A region object owned by the tree (a leaked `Box`, freed by RCU once it left the tree).
struct RegionBox(NonNull<StoredRegion>);

// SAFETY: a `StoredRegion` is `Send + Sync` (plain data and atomics); the box is a unique owner.
unsafe impl Send for RegionBox {}
// SAFETY: as above; shared access only reads or uses the region's atomics.
unsafe impl Sync for RegionBox {}

impl RegionBox {
    fn new(r: &Region) -> RegionBox {
        RegionBox(NonNull::from(Box::leak(Box::new(StoredRegion::new(r)))))
    }

    /// The region object.
    ///
    /// # Safety
    /// The caller keeps the object alive for `'a`: it is in the tree and no edit can remove it
    /// during `'a`, or the caller is inside an RCU read section of the tree's domain (that
    /// outlives `'a`) that began before the object was unlinked.
    unsafe fn get<'a>(&self) -> &'a StoredRegion {
        // SAFETY: the caller's contract.
        unsafe { &*self.0.as_ptr() }
    }

    /// The owning box, to free.
    ///
    /// # Safety
    /// The object is no longer reachable from the tree, and no other `RegionBox` owns it.
    unsafe fn into_box(self) -> Box<StoredRegion> {
        // SAFETY: made by `Box::leak` in `new`; the caller's contract.
        unsafe { Box::from_raw(self.0.as_ptr()) }
    }
}

/// Tree ids, so a token is checked against its tree.
static NEXT_ID: AtomicU64 = AtomicU64::new(1);

/// The right to edit an [`RcuTree`] (module doc): exactly one per tree, kept by the design
/// under its space lock.
#[derive(Debug)]
pub(crate) struct TreeToken {
    id: u64,
}

/// The region tree (module doc).
pub(crate) struct RcuTree {
    /// The tree lock: shared for lock-free lookups and snapshots, exclusive for the tree
    /// operations of a commit. Guards no data of its own: the tree is `map`.
    lock: RwLock<()>,
    /// Region end -> region object. Written only under `lock`'s exclusive side by the token
    /// holder; read under `lock`'s shared side, or by a holder of the token (module doc).
    map: UnsafeCell<BTreeMap<u64, RegionBox>>,
    /// Shared mappings created so far; written only by the token holder (`&mut`), Relaxed.
    shmem_count: AtomicU64,
    /// The space's RCU domain: the one whose read sections cover lock-free faults.
    domain: Domain,
    id: u64,
}

// SAFETY: `map` is accessed by the rules of the module doc (mutation only by the unique token
// holder under the exclusive tree lock; concurrent readers hold the shared tree lock).
unsafe impl Sync for RcuTree {}
// SAFETY: every field is owned data that may move between threads (`RegionBox` is `Send`).
unsafe impl Send for RcuTree {}

impl std::fmt::Debug for RcuTree {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RcuTree")
            .field("regions", &self.len())
            .finish()
    }
}

impl Drop for RcuTree {
    fn drop(&mut self) {
        let map = self.map.with_mut(|m| {
            // SAFETY: `&mut self`: no reader or editor exists.
            std::mem::take(unsafe { &mut *m })
        });
        for (_, b) in map {
            // SAFETY: out of the tree, and no reader exists (`&mut self`).
            drop(unsafe { b.into_box() });
        }
    }
}

impl RcuTree {
    /// An empty tree whose objects are freed through `domain` (the space's), and its token.
    pub(crate) fn new(domain: Domain) -> (RcuTree, TreeToken) {
        // Relaxed: only the uniqueness of the value matters (the RMW's atomicity).
        let id = NEXT_ID.fetch_add(1, Ordering::Relaxed);
        let tree = RcuTree {
            lock: RwLock::new(()),
            map: UnsafeCell::new(BTreeMap::new()),
            shmem_count: AtomicU64::new(0),
            domain,
            id,
        };
        (tree, TreeToken { id })
    }

    /// The tree, for a caller that excludes its mutation for `'a`: it holds the tree lock
    /// shared, or the token (module doc).
    ///
    /// # Safety
    /// As above.
    #[inline]
    unsafe fn map(&self) -> &BTreeMap<u64, RegionBox> {
        // SAFETY: the caller's contract.
        self.map.with(|m| unsafe { &*m })
    }

    /// The edit view of the token's holder (module doc).
    ///
    /// # Panics
    /// When `token` is another tree's.
    #[inline]
    pub(crate) fn edit<'a>(&'a self, token: &'a mut TreeToken) -> TreeEdit<'a> {
        assert_eq!(token.id, self.id, "the token of another tree");
        TreeEdit { tree: self }
    }

    /// The read-only view of a holder of the token's shared borrow (module doc).
    ///
    /// # Panics
    /// When `token` is another tree's.
    #[inline]
    pub(crate) fn stable<'a>(&'a self, token: &'a TreeToken) -> Stable<'a> {
        assert_eq!(token.id, self.id, "the token of another tree");
        Stable(TreeEdit { tree: self })
    }

    /// Every region in address order, under the tree lock (a snapshot between commits).
    pub(crate) fn snapshot(&self) -> Vec<Region> {
        let _shared = self.lock.read();
        // SAFETY: the shared tree lock excludes every mutation; objects in the tree live.
        let map = unsafe { self.map() };
        map.iter()
            .map(|(&end, b)| {
                // SAFETY: in the tree, which the shared tree lock keeps as it is.
                RegionRef::keyed(end, unsafe { b.get() }).region()
            })
            .collect()
    }

    /// Number of regions, under the tree lock.
    pub(crate) fn len(&self) -> usize {
        let _shared = self.lock.read();
        // SAFETY: the shared tree lock excludes every mutation.
        unsafe { self.map() }.len()
    }

    /// Checks the store's invariants (tests): those of every store (`check_regions`).
    #[cfg(all(test, not(loom)))]
    pub(crate) fn check(&self) {
        super::store::check_regions(self.snapshot().into_iter());
    }
}

/// Lock-free lookup (module doc): the tree lock shared around the search only.
impl RcuRegions for RcuTree {
    const MISS_IS_UNMAPPED: bool = false;

    #[inline]
    fn lookup_rcu<'g>(
        &'g self,
        va: u64,
        guard: &'g Guard<'_>,
    ) -> Option<(Range<u64>, &'g StoredRegion)> {
        // Only a read section of the tree's own domain keeps its objects alive (they are freed
        // through `self.domain`): a guard of another domain would let the reference dangle, so
        // it panics in every build, as the aspace-map maps do (issue 19's review).
        assert!(
            guard.belongs_to(&self.domain),
            "RcuTree::lookup_rcu: the guard belongs to another RCU domain than the tree's"
        );
        let found = {
            let _shared = self.lock.read();
            // SAFETY: the shared tree lock excludes every mutation.
            let map = unsafe { self.map() };
            let (&end, b) = map.range(va.checked_add(1)?..).next()?;
            // SAFETY: `guard` is a read section of the tree's domain (checked above), begun
            // before this search: the object, in the tree now, is freed
            // only after it is unlinked (under the exclusive tree lock, after this section of
            // the lock) and a grace period after that.
            let stored: &'g StoredRegion = unsafe { b.get() };
            (end, stored)
        };
        let r = RegionRef::keyed(found.0, found.1);
        (r.start() <= va).then_some((r.start()..r.end(), found.1))
    }
}

/// The token holder's view of an [`RcuTree`]: the whole [`RegionStore`] (module doc).
#[derive(Debug)]
pub(crate) struct TreeEdit<'a> {
    tree: &'a RcuTree,
}

/// A read-only [`TreeEdit`], for a holder of the token's shared borrow (module doc).
#[derive(Debug)]
pub(crate) struct Stable<'a>(TreeEdit<'a>);

impl<'a> Deref for Stable<'a> {
    type Target = TreeEdit<'a>;
    fn deref(&self) -> &TreeEdit<'a> {
        &self.0
    }
}

impl<'a> TreeEdit<'a> {
    /// The tree, read without the tree lock: the view's holder excludes every other mutation
    /// (module doc), and its own mutations need `&mut self`.
    #[inline]
    fn map(&self) -> &BTreeMap<u64, RegionBox> {
        // SAFETY: as above.
        unsafe { self.tree.map() }
    }

    /// The region keyed `end` with object `b` (alive while `&self` is borrowed: only
    /// `replace_window`, which takes `&mut self`, removes objects).
    #[inline]
    fn region_ref(&self, end: u64, b: &RegionBox) -> RegionRef<'_> {
        // SAFETY: as above.
        RegionRef::keyed(end, unsafe { b.get() })
    }
}

impl RegionStore for TreeEdit<'_> {
    #[inline]
    fn len(&self) -> usize {
        self.map().len()
    }

    #[inline]
    fn lookup(&self, addr: u64) -> Option<RegionRef<'_>> {
        let (&end, b) = self.map().range(addr.checked_add(1)?..).next()?;
        let r = self.region_ref(end, b);
        (r.start() <= addr).then_some(r)
    }

    #[inline]
    fn lookup_with_next(&self, addr: u64) -> Option<(RegionRef<'_>, Option<RegionRef<'_>>)> {
        let mut it = self.map().range(addr.checked_add(1)?..);
        let (&end, b) = it.next()?;
        let r = self.region_ref(end, b);
        if r.start() > addr {
            return None;
        }
        let next = it.next().map(|(&e, b)| self.region_ref(e, b));
        Some((r, next))
    }

    #[inline]
    fn adjacent_prev(&self, r: &RegionRef<'_>) -> Option<Region> {
        let b = self.map().get(&r.start())?;
        Some(self.region_ref(r.start(), b).region())
    }

    fn overlapping(&self, range: Range<u64>) -> impl Iterator<Item = Region> + '_ {
        self.map()
            .range(range.start.saturating_add(1)..)
            .map(move |(&end, b)| self.region_ref(end, b).region())
            .take_while(move |r| r.start < range.end)
            .map(move |mut r| {
                r.start = r.start.max(range.start);
                r.end = r.end.min(range.end);
                r
            })
    }

    fn iter(&self) -> impl Iterator<Item = Region> + '_ {
        self.map()
            .iter()
            .map(move |(&end, b)| self.region_ref(end, b).region())
    }

    #[inline]
    fn end_at_or_below(&self, addr: u64) -> u64 {
        self.map()
            .range(..=addr)
            .next_back()
            .map_or(0, |(&end, _)| end)
    }

    /// A linear scan from the top, like `BTreeStore`'s.
    #[inline]
    fn find_gap_topdown(&self, len: u64, bounds: Bounds) -> Option<u64> {
        let regions = self
            .map()
            .iter()
            .rev()
            .map(move |(&end, b)| self.region_ref(end, b).start()..end);
        highest_gap(regions, len, bounds)
    }

    #[inline]
    fn read_window(&self, range: Range<u64>, old: &mut Vec<Region>) -> u64 {
        old.clear();
        for (&end, b) in self.map().range(range.start..) {
            let r = self.region_ref(end, b).region();
            if r.start >= range.end {
                if r.start == range.end {
                    old.push(r);
                }
                return r.start;
            }
            old.push(r);
            if r.end > range.end {
                break;
            }
        }
        u64::MAX
    }

    fn next_shmem(&self) -> AnonId {
        AnonId::decode(self.tree.shmem_count.load(Ordering::Relaxed) + 1).expect("not zero")
    }

    fn shmem_created(&mut self) {
        // Relaxed: only the token holder writes it, and reads it under the same token.
        let n = self.tree.shmem_count.load(Ordering::Relaxed);
        self.tree.shmem_count.store(n + 1, Ordering::Relaxed);
    }

    /// Nothing to reserve (module doc, "Memory"); tests inject the failure a fallible store
    /// would report here (`fault_inject::REGION_RESERVE`).
    #[inline]
    fn reserve(&mut self, _new: &[Region]) -> Result<(), VmError> {
        #[cfg(all(test, not(loom)))]
        if crate::fault_inject::REGION_RESERVE.fails() {
            return Err(VmError::OutOfMemory(crate::error::Limit::Memory));
        }
        Ok(())
    }

    /// Marks every region of the window that does not stay exactly as it was, then publishes
    /// the new regions in one exclusive section of the tree lock, then hands what left to RCU
    /// (module doc, "The leave rule"). Never fails.
    fn replace_window(&mut self, old: &[Region], new: &[Region]) -> Result<(), VmError> {
        // A region the plan keeps whole is the same object: neither marked nor replaced.
        let kept = |r: &Region| {
            new.binary_search_by_key(&r.end, |p| p.end)
                .is_ok_and(|i| new[i] == *r)
        };
        let stays = |p: &Region| {
            old.binary_search_by_key(&p.end, |o| o.end)
                .is_ok_and(|i| old[i] == *p)
        };
        // 1. Mark what leaves, before anything is published and before the body touches an
        //    entry of its range (the body runs after this returns).
        for o in old.iter().filter(|o| !kept(o)) {
            let b = self.map().get(&o.end).expect("the window is in the tree");
            // SAFETY: in the tree; only this `&mut self` removes it.
            unsafe { b.get() }.mark_replaced();
        }
        // The new objects are complete before the tree lock publishes them.
        let fresh: Vec<(u64, RegionBox)> = new
            .iter()
            .filter(|p| !stays(p))
            .map(|p| (p.end, RegionBox::new(p)))
            .collect();
        // 2. The tree operations, in one exclusive section.
        let mut left = Vec::new();
        {
            let _exclusive = self.tree.lock.write();
            self.tree.map.with_mut(|m| {
                // SAFETY: the exclusive tree lock excludes every reader that takes it, and the
                // token (our `&mut self`) every reader that does not.
                let m = unsafe { &mut *m };
                for o in old.iter().filter(|o| !kept(o)) {
                    left.push(m.remove(&o.end).expect("the window is in the tree"));
                }
                for (end, b) in fresh {
                    let prev = m.insert(end, b);
                    debug_assert!(prev.is_none(), "a new region's key was taken");
                }
            });
        }
        // 3. Unreachable now: freed after a grace period (a lock-free fault that found one may
        //    still be using it inside its read section).
        for b in left {
            // SAFETY: removed from the tree above; the tree owned it alone.
            let boxed = unsafe { b.into_box() };
            self.tree.domain.defer_drop(boxed);
        }
        Ok(())
    }
}

/// Review tests (issue 19 review 2).
#[cfg(all(test, not(loom)))]
mod review_tests {
    use super::*;
    use crate::region::Attrs;
    use crate::types::{Prot, Sharing, PAGE_SIZE as P};

    /// `RcuRegions::lookup_rcu` is a safe method returning a `&'g StoredRegion` tied to the
    /// caller's guard; the region objects are freed through the tree's own domain
    /// (`replace_window`'s `defer_drop`). A guard of another domain does not hold that grace
    /// period off, so the reference may dangle once the region is replaced: the lookup must
    /// reject such a guard (as `aspace_map`'s `check_guard` does for every map).
    #[test]
    #[should_panic]
    fn rcu_tree_lookup_rejects_a_guard_of_another_domain() {
        let (tree, mut token) = RcuTree::new(Domain::new());
        let r = Region {
            start: 16 * P,
            end: 18 * P,
            attrs: Attrs {
                prot: Prot::READ_WRITE,
                sharing: Sharing::Private,
                flags: 0,
                anon: None,
                shm_base: 0,
            },
        };
        tree.edit(&mut token).replace_window(&[], &[r]).unwrap();
        let other = Domain::new();
        let reader = other.register();
        let guard = reader.read();
        // Must panic: the guard does not protect this tree's region objects.
        let found = tree.lookup_rcu(16 * P, &guard).map(|(range, _)| range);
        // Without the check the reference outlives a replace + grace period of the tree's
        // domain: shown here without dereferencing it.
        tree.edit(&mut token).replace_window(&[r], &[]).unwrap();
        tree.domain.barrier();
        assert_eq!(found, Some(16 * P..18 * P));
    }
}
