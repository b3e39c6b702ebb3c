//! `BonsaiMap`: the Bonsai RCU balanced tree (ASPLOS'12 §3) as an interval map.
//!
//! Algorithm. A weight-balanced (Adams bounded-balance) binary search tree keyed by interval
//! start, updated functionally: an update rebuilds the path from the change to the root with new
//! nodes and rotations that construct new nodes (Fig. 5-8), except that, per §3.3, where no
//! rotation is needed the new child is stored into the existing parent: one `Release` pointer
//! store commits each step (`bonsai/update.rs`, `bonsai/balance.rs`). Replaced nodes are unlinked,
//! never modified, and freed after an RCU grace period; all nodes one `map`/`alloc` unlinks go to
//! the domain in one `defer_drop` batch. Queries are the Fig. 9 lookup turned into a predecessor
//! search (greatest start `<= addr`, then check the end): no lock, no allocation, no atomic
//! read-modify-write, only `Acquire` loads of the root and child pointers (`bonsai/tree.rs`).
//!
//! Locking and RCU contract:
//! - `query`/`visit`: lock-free, under the caller's read guard of `domain()`; returned references
//!   live as long as the guard.
//! - `map`/`alloc`: serialized by ONE writer `Mutex` (which also owns the writer's reusable
//!   scratch buffers); they read the tree with the lock held and retire nodes into a batch
//!   handed to the domain after the lock is released (one callback per update; a batch of one
//!   node is handed over as the node itself, without allocating).
//! - `len`: a counter written under the writer lock, read with `Relaxed` (a snapshot).
//!
//! What readers may observe during an update: every update is one commit, so readers see the
//! map before or after it, never between. `alloc`, and a `map` that is one primitive step (an
//! insert into a gap; a replace: an exact overwrite, an overwrite of one interval starting at
//! the range's start, a head trim or tail re-key by an unmap; a delete: an unmap of one whole
//! interval), are published by one `Release` store: its path is rebuilt bottom-up, and stored
//! in place into the lowest unchanged ancestor when no rotation is needed above it, else above
//! the topmost rotation (`bonsai/update.rs`). A `map` of several steps (a new interval over
//! free pages and one whole interval, trims and re-keys with a new value, splits, several
//! intervals) is built in *atomic mode*: every step out of place, on the unpublished nodes of
//! the steps before it, and all published by one root store at the end. That costs a copy of
//! the union of the steps' paths instead of in-place stores, and buys atomicity and panic
//! safety. `bonsai/decompose.rs` counts the steps before running them (its module doc audits
//! every shape), and `Update` refuses, in every build, a second step outside atomic mode.
//! (Issue 17: a decision that looked at trims and the number of intervals, not at the steps,
//! published `map` over a free head and one whole interval as an insert and then a delete.)
//!
//! Panic safety. A value's `Clone` (copies, remainders) and `Drop` are the caller's code. A
//! step makes every node (and clones every value) before its commit, and an atomic update
//! commits after all its steps, so a panic always happens before anything was published: the
//! update is abandoned, its never-published nodes go to the domain (their values are dropped
//! on the reclaimer, where a panic is caught), and the tree, its summaries and the count are as
//! before. Replaced nodes are never dropped by the writer itself: they go to the domain. A
//! failed node allocation (`OutOfMemory`, real or injected by `fail_allocations_after`) also
//! comes before any commit (a step allocates before it commits) and abandons the update the
//! same way.
//!
//! `alloc` finds the lowest fitting gap in O(log n) through a writer-only gap augmentation of
//! every node (subtree min start, max end, largest inner gap; `bonsai/augment.rs`, the idea of
//! Linux's `rb_subtree_gap`), maintained like the subtree size on every update path, then
//! inserts the new interval (one more O(log n) update).
//!
//! Not for: interval locking (no `IntervalLocking`); scalable updates (one writer at a time).

mod augment;
mod balance;
mod decompose;
#[cfg(all(test, loom))]
mod loom_tests;
mod node;
mod retire;
mod summary;
mod tree;
mod update;

use crate::contract::{Interval, IntervalMap, MapError};
use crate::fault::AllocBudget;
use crate::sync::Mutex;
use crate::sync::{AtomicUsize, Ordering};
use crate::validate::{check_alloc, check_guard};
use aspace_rcu::{Domain, Guard};
use node::Node;
use retire::Retired;
use std::ops::{ControlFlow, Range};
use tree::RawTree;
use update::Update;

/// The writer's buffers, reused from update to update so that an update allocates only its
/// new nodes (and a retired batch of more than one node). Empty between updates.
struct Scratch<V> {
    /// The nodes a `map` overlaps.
    over: Vec<*mut Node<V>>,
    /// The fresh-node list of `Update`.
    fresh: Vec<*mut Node<V>>,
}

// SAFETY: the buffers are empty whenever the lock that owns them is free; while it is held they
// hold pointers to nodes of the tree, which the tree (Send for V: Send) owns.
unsafe impl<V: Send> Send for Scratch<V> {}

/// The Bonsai RCU interval map (see the module doc).
pub struct BonsaiMap<V> {
    tree: RawTree<V>,
    /// The single writer lock: held by `map`/`alloc` for the whole update.
    writer: Mutex<Scratch<V>>,
    /// Number of intervals. Written under `writer`; `Relaxed` (a counter, no ordering).
    count: AtomicUsize,
    domain: Domain,
    /// The allocation-failure test hook (`fault.rs`); off unless a test arms it.
    faults: AllocBudget,
}

impl<V> BonsaiMap<V> {
    /// An empty map whose replaced nodes are reclaimed through `domain` and whose readers use
    /// guards of it.
    pub fn new(domain: Domain) -> Self {
        Self {
            tree: RawTree::new(),
            writer: Mutex::new(Scratch {
                over: Vec::new(),
                fresh: Vec::new(),
            }),
            count: AtomicUsize::new(0),
            domain,
            faults: AllocBudget::default(),
        }
    }
}

impl<V: Clone + Send + Sync + 'static> BonsaiMap<V> {
    /// Testing hook (issue 10's fault injection): after `n` more node allocations succeed,
    /// every further one fails with [`MapError::OutOfMemory`] (the update is abandoned before
    /// its commit and changes nothing), until called with `None`. Off by default; not for
    /// production use.
    #[doc(hidden)]
    pub fn fail_allocations_after(&self, n: Option<usize>) {
        self.faults.set(n);
    }

    /// Checks the tree: BST order, disjoint intervals, subtree summaries (sizes and the gap
    /// augmentation of `alloc`) recomputed from scratch, Adams' weight balance at every node,
    /// and the interval count. Panics on a violation.
    #[doc(hidden)]
    pub fn check_invariants(&self) {
        let _w = self.writer.lock();
        // SAFETY: the writer lock is held.
        let n = unsafe { self.tree.check() };
        assert_eq!(n, self.count.load(Ordering::Relaxed), "interval count");
    }

    /// Hands an update's unlinked nodes to the domain (one callback per update).
    fn reclaim(&self, retired: Retired<V>) {
        if retired.is_empty() {
            return;
        }
        match retired.into_single() {
            // SAFETY: the node came from `Node::alloc` (a Box), was unlinked by the update that
            // retired it (unreachable for readers that start after the update's commits), and
            // was taken out of its batch, so it is passed here once.
            Ok(node) => unsafe { self.domain.defer_free(node) },
            Err(batch) => self.domain.defer_drop(batch),
        }
    }

    /// Runs `f` as one update under the writer lock, then reclaims what it unlinked.
    ///
    /// Panic safety: `f` runs the caller's code (values' `Clone` and `Drop`). If it panics, no
    /// step has committed (a step commits after its last clone; atomic updates at the end), so
    /// the unwind guard hands the update's never-published nodes to the domain (their values'
    /// drops run on the reclaimer, where a panic is caught) and keeps the tree as it was; the
    /// writer lock is released by its guard (parking_lot does not poison). If `f` fails (a node
    /// allocation failed, `OutOfMemory`, which also happens before any commit; or `alloc` found
    /// no space), the update is abandoned the same way and the error returned.
    fn update<R>(
        &self,
        f: impl FnOnce(&mut Update<'_, V>, &mut Vec<*mut Node<V>>) -> Result<R, MapError>,
    ) -> Result<R, MapError> {
        /// Abandons the update if `f` unwinds.
        struct Unwind<'a, 't, V: Clone + Send + Sync + 'static> {
            up: Option<Update<'t, V>>,
            domain: &'a Domain,
        }
        impl<V: Clone + Send + Sync + 'static> Drop for Unwind<'_, '_, V> {
            fn drop(&mut self) {
                if let Some(up) = self.up.take() {
                    let garbage = up.abandon();
                    if !garbage.is_empty() {
                        self.domain.defer_drop(garbage);
                    }
                }
            }
        }

        let (r, retired) = {
            let mut scratch = self.writer.lock();
            let Scratch { over, fresh } = &mut *scratch;
            over.clear();
            let fresh = std::mem::take(fresh);
            // SAFETY: the writer lock is held for the update's lifetime, so this is the only
            // writer; the batch is freed by the domain after a grace period (`reclaim`).
            let up = unsafe { Update::with_scratch(&self.tree, fresh, Some(&self.faults)) };
            let mut guard = Unwind {
                up: Some(up),
                domain: &self.domain,
            };
            let r = f(guard.up.as_mut().expect("set above"), over)?;
            let up = guard.up.take().expect("taken once");
            over.clear();
            let (retired, fresh) = up.finish_with_scratch();
            scratch.fresh = fresh;
            (r, retired)
        };
        self.reclaim(retired);
        Ok(r)
    }

    /// `map` as one update (`bonsai/decompose.rs` splits it into steps and decides atomic
    /// mode), then the interval count.
    ///
    /// # Preconditions
    /// Runs inside `update`, i.e. with the writer lock held.
    fn map_locked(
        &self,
        up: &mut Update<'_, V>,
        over: &mut Vec<*mut Node<V>>,
        range: Interval,
        value: Option<V>,
    ) -> Result<(), MapError> {
        let (added, removed) = up.map_range(over, range.start, range.end, value)?;
        self.count.fetch_add(added, Ordering::Relaxed);
        self.count.fetch_sub(removed, Ordering::Relaxed);
        Ok(())
    }
}

impl<V: Clone + Send + Sync + 'static> BonsaiMap<V> {
    /// Removes the intervals starting at each of `remove` and inserts `insert`, as ONE update
    /// that readers see whole (atomic mode when it is more than one step; issue 19's region
    /// store, `aspace-vm`'s `region/bonsai_store.rs`, commits a window's edit with it so that a
    /// lock-free lookup never sees half of a split). Values are moved in, never cloned, and
    /// untouched intervals keep their nodes' values: only the nodes on the changed paths are
    /// copied (their values cloned), as in every update.
    ///
    /// Preconditions (checked in debug builds by the tree's own asserts, and by
    /// [`BonsaiMap::check_invariants`]): every start in `remove` is the start of an interval;
    /// the intervals of `insert` are disjoint from each other and from the intervals that stay.
    ///
    /// # Errors
    /// [`MapError::OutOfMemory`] (a node allocation failed, or the test hook): nothing changed.
    pub fn replace(&self, remove: &[u64], insert: Vec<(Interval, V)>) -> Result<(), MapError> {
        let (added, removed) = (insert.len(), remove.len());
        self.update(|up, _| {
            if added + removed > 1 {
                up.set_atomic();
            }
            for &start in remove {
                up.delete(start)?;
            }
            for (iv, v) in insert {
                up.insert(iv.start, iv.end, v)?;
            }
            self.count.fetch_add(added, Ordering::Relaxed);
            self.count.fetch_sub(removed, Ordering::Relaxed);
            Ok(())
        })
    }

    /// [`IntervalMap::query`] without a read guard.
    ///
    /// # Safety
    /// No update of this map may run while the returned reference lives (the caller holds a
    /// lock that every writer of the map holds): nodes are freed only after an update unlinked
    /// them, and the ones reachable now stay linked until the next update.
    pub unsafe fn query_excluding_writers(&self, addr: u64) -> Option<(Interval, &V)> {
        // SAFETY: no update runs for the reference's lifetime (the caller's contract), so no
        // node reachable now is unlinked, let alone freed, before it ends.
        let n = unsafe { self.tree.find(addr) }?;
        Some((
            Interval {
                start: n.start,
                end: n.end,
            },
            &n.value,
        ))
    }

    /// The highest `a` such that `[a, a + len)` lies inside `within` and overlaps no interval:
    /// the top-down gap search (Linux's `unmapped_area_topdown`) in O(log n) over the gap
    /// augmentation, without a read guard; `Ok(None)` when no gap fits.
    ///
    /// # Errors
    /// As [`IntervalMap::alloc`] for a bad `within` or `len`.
    ///
    /// # Safety
    /// As [`BonsaiMap::query_excluding_writers`]: no update runs during the call (the
    /// summaries it reads are the writer's).
    pub unsafe fn last_fit_excluding_writers(
        &self,
        within: Range<u64>,
        len: u64,
    ) -> Result<Option<u64>, MapError> {
        let within = check_alloc(within, len)?;
        // SAFETY: no update runs (the caller's contract), which is what reading summaries
        // needs; `len > 0` (checked above).
        Ok(unsafe { self.tree.last_fit(within, len) })
    }

    /// The interval with the greatest start below `addr`, without a read guard.
    ///
    /// # Safety
    /// As [`BonsaiMap::query_excluding_writers`].
    pub unsafe fn below_excluding_writers(&self, addr: u64) -> Option<(Interval, &V)> {
        // SAFETY: no update runs for the reference's lifetime (the caller's contract).
        let n = unsafe { self.tree.below(addr) }?;
        Some((
            Interval {
                start: n.start,
                end: n.end,
            },
            &n.value,
        ))
    }

    /// [`IntervalMap::visit`] without a read guard (`range` page-aligned, non-empty, inside the
    /// key space).
    ///
    /// # Safety
    /// As [`BonsaiMap::query_excluding_writers`]: no update runs while `f` may hold a reference.
    pub unsafe fn visit_excluding_writers<'a>(
        &'a self,
        range: Range<u64>,
        f: &mut dyn FnMut(Interval, &'a V) -> ControlFlow<()>,
    ) -> Result<(), MapError> {
        let range = Interval::try_from(range)?;
        // SAFETY: the caller's contract, as in `query_excluding_writers`.
        let _ = unsafe {
            self.tree
                .walk(range.start, range.end, &mut |n: &'a Node<V>| {
                    f(
                        Interval {
                            start: n.start,
                            end: n.end,
                        },
                        &n.value,
                    )
                })
        };
        Ok(())
    }
}

impl<V> IntervalMap<V> for BonsaiMap<V>
where
    V: Clone + Send + Sync + 'static,
{
    type Ref<'g>
        = &'g V
    where
        Self: 'g;

    fn name(&self) -> &'static str {
        "bonsai"
    }

    fn domain(&self) -> &Domain {
        &self.domain
    }

    #[inline]
    fn query<'g>(&'g self, addr: u64, guard: &'g Guard<'_>) -> Option<(Interval, &'g V)> {
        check_guard(&self.domain, guard);
        // SAFETY: the caller's guard of this map's domain is held for 'g, and every node this
        // map unlinks is freed through that domain after a grace period.
        let n = unsafe { self.tree.find(addr) }?;
        Some((
            Interval {
                start: n.start,
                end: n.end,
            },
            &n.value,
        ))
    }

    fn map(&self, range: Range<u64>, value: Option<V>) -> Result<(), MapError> {
        let range = Interval::try_from(range)?;
        self.update(|up, over| self.map_locked(up, over, range, value))
    }

    fn alloc(&self, within: Range<u64>, len: u64, value: V) -> Result<Interval, MapError> {
        let within = check_alloc(within, len)?;
        self.update(|up, _| {
            // SAFETY: the writer lock is held (inside `update`); `len > 0` (checked above).
            let start = unsafe { self.tree.first_fit(within, len) }
                .ok_or(MapError::NoSpace { len, within })?;
            up.insert(start, start + len, value)?;
            self.count.fetch_add(1, Ordering::Relaxed);
            Ok(Interval {
                start,
                end: start + len,
            })
        })
    }

    fn visit<'g>(
        &'g self,
        range: Range<u64>,
        guard: &'g Guard<'_>,
        f: &mut dyn FnMut(Interval, &V) -> ControlFlow<()>,
    ) -> Result<(), MapError> {
        check_guard(&self.domain, guard);
        let range = Interval::try_from(range)?;
        // SAFETY: the caller's guard of this map's domain is held for 'g.
        let _ = unsafe {
            self.tree
                .walk(range.start, range.end, &mut |n: &'g Node<V>| {
                    f(
                        Interval {
                            start: n.start,
                            end: n.end,
                        },
                        &n.value,
                    )
                })
        };
        Ok(())
    }

    fn len(&self) -> usize {
        self.count.load(Ordering::Relaxed)
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use crate::PAGE_SIZE as P;
    use std::sync::Arc;

    #[test]
    fn replace_is_one_update_and_keeps_untouched_values() {
        let map = BonsaiMap::new(Domain::new());
        for i in 0..20u64 {
            map.map(i * 4 * P..(i * 4 + 2) * P, Some(i)).unwrap();
        }
        // Split interval 5 ([20, 22) pages) into two new ones and drop interval 6.
        let iv = |a: u64, b: u64| Interval {
            start: a * P,
            end: b * P,
        };
        map.replace(
            &[20 * P, 24 * P],
            vec![(iv(20, 21), 100), (iv(21, 22), 101)],
        )
        .unwrap();
        map.check_invariants();
        assert_eq!(map.len(), 20);
        let reader = map.domain().register();
        let g = reader.read();
        assert_eq!(map.query(20 * P, &g).map(|(_, v)| *v), Some(100));
        assert_eq!(map.query(21 * P, &g).map(|(_, v)| *v), Some(101));
        assert!(map.query(24 * P, &g).is_none());
        assert_eq!(map.query(28 * P, &g).map(|(_, v)| *v), Some(7));
        // An injected allocation failure changes nothing.
        map.fail_allocations_after(Some(0));
        assert!(map.replace(&[28 * P], vec![(iv(28, 29), 1)]).is_err());
        map.fail_allocations_after(None);
        map.check_invariants();
        assert_eq!(
            map.query(28 * P, &g).map(|(i, v)| (i.end, *v)),
            Some((30 * P, 7))
        );
    }

    #[test]
    fn every_unlinked_node_is_freed_after_a_grace_period() {
        let token = Arc::new(());
        let map = BonsaiMap::new(Domain::new());
        // Ascending inserts rotate (batches of several nodes); removals of leaves retire one node.
        for i in 0..200u64 {
            map.map(i * 2 * P..(i * 2 + 1) * P, Some(token.clone()))
                .unwrap();
        }
        for i in (0..200u64).step_by(3) {
            map.map(i * 2 * P..(i * 2 + 1) * P, None).unwrap();
        }
        let a = map.alloc(0..1000 * P, P, token.clone()).unwrap();
        map.map(a.start..a.end, None).unwrap();
        map.check_invariants();
        map.domain().barrier();
        assert_eq!(Arc::strong_count(&token), 1 + map.len());
        drop(map);
        assert_eq!(Arc::strong_count(&token), 1);
    }
}
