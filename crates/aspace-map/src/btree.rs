//! `BTreeIntervalMap`: the locked baseline ("stock kernel") interval map.
//!
//! A `std::collections::BTreeMap<start, (end, value)>` behind ONE `parking_lot::RwLock`, like a
//! Linux address space's VMA tree behind `mmap_sem`. `query` and `visit` take the lock in read
//! mode; `map` and `alloc` take it in write mode and do all their work in one critical section,
//! so every update is atomic for readers (they see the map before or after it, never between).
//!
//! `query` returns a `MappedRwLockReadGuard`: the read lock stays held while the caller uses the
//! value, like a page fault that holds `mmap_sem` while it works. Consequences (documented
//! hazards, as with `mmap_sem`): calling `map`/`alloc` on the same map while holding a `query`
//! result deadlocks, and because the lock is task-fair, taking a second read lock (another
//! `query` or a `visit`) while holding one can deadlock if a writer queued in between.
//!
//! Invariants (under the lock): keys are interval starts; intervals are disjoint, non-empty,
//! page-aligned and inside `[0, KEY_SPACE_END)`; adjacent intervals are never merged, even with
//! equal values (they are distinct regions, like VMAs); the free-gap index (`free_gaps.rs`) holds
//! exactly the complement of the intervals. The RCU domain is held only so that the map
//! satisfies the contract (readers pass guards of it); this map never defers anything.
//!
//! `alloc` is first-fit over the free-gap index, a second `BTreeMap` of free ranges under the
//! same lock, updated by every `map`/`alloc` (O(log n) per interval an update touches):
//! O(log n + g) where `g` counts the too-small gaps inside `within` below the answer (0 when
//! allocations pack from the bottom, linear in the worst case). The Bonsai map's augmented tree
//! does it in O(log n) always.
//!
//! Not for scalability: every reader writes the lock word, so queries do not scale across cores.
//! It is the baseline the RCU maps are measured against (the `coarse` address-space design).

use crate::contract::{Interval, IntervalMap, MapError, KEY_SPACE_END};
use crate::fault::AllocBudget;
use crate::free_gaps::FreeGaps;
use crate::sync::RwLock;
use crate::validate::{check_alloc, check_guard};
use aspace_rcu::{Domain, Guard};
use parking_lot::{MappedRwLockReadGuard, RwLockReadGuard};
use std::collections::BTreeMap;
use std::ops::{ControlFlow, Range};

/// The locked B-tree interval map (see the module doc).
pub struct BTreeIntervalMap<V> {
    domain: Domain,
    /// The intervals and their free-gap index. Protected by the lock: read mode for
    /// `query`/`visit`/`len`, write mode for `map`/`alloc`.
    tree: RwLock<Tree<V>>,
    /// The allocation-failure test hook (`fault.rs`); off unless a test arms it.
    faults: AllocBudget,
}

/// What the lock protects.
struct Tree<V> {
    /// start -> (end, value).
    ivs: BTreeMap<u64, (u64, V)>,
    /// The complement of `ivs` in the key space (see `free_gaps.rs`).
    gaps: FreeGaps,
}

impl<V> BTreeIntervalMap<V> {
    /// An empty map whose readers use guards of `domain`.
    pub fn new(domain: Domain) -> Self {
        Self {
            domain,
            tree: RwLock::new(Tree {
                ivs: BTreeMap::new(),
                gaps: FreeGaps::new(),
            }),
            faults: AllocBudget::default(),
        }
    }

    /// Testing hook (issue 10's fault injection): after `n` more interval allocations succeed,
    /// every further one fails with [`MapError::OutOfMemory`] (the operation changes nothing),
    /// until called with `None`. Off by default; not for production use.
    ///
    /// The btree's nodes are `std::collections::BTreeMap`'s, which abort on a real allocation
    /// failure; so the hook is consulted in each update's prepare step, under the lock and
    /// before the first change, once per interval the update will insert (the new one, a split
    /// or re-keyed tail).
    #[doc(hidden)]
    pub fn fail_allocations_after(&self, n: Option<usize>) {
        self.faults.set(n);
    }

    /// Checks that the free-gap index is exactly the complement of the intervals (recomputed
    /// from scratch). Panics on a violation.
    #[doc(hidden)]
    pub fn check_invariants(&self) {
        let tree = self.tree.read();
        tree.gaps.check(
            tree.ivs
                .iter()
                .map(|(&start, &(end, _))| Interval { start, end }),
        );
    }
}

/// Calls `f` on every interval of `tree` overlapping `range` (assumed valid), in order.
fn for_each_overlapping<V>(
    tree: &BTreeMap<u64, (u64, V)>,
    range: Interval,
    f: &mut dyn FnMut(Interval, &V) -> ControlFlow<()>,
) -> ControlFlow<()> {
    if let Some((&s, (e, v))) = tree.range(..range.start).next_back() {
        if *e > range.start {
            f(Interval { start: s, end: *e }, v)?;
        }
    }
    for (&s, (e, v)) in tree.range(range.start..range.end) {
        f(Interval { start: s, end: *e }, v)?;
    }
    ControlFlow::Continue(())
}

impl<V> IntervalMap<V> for BTreeIntervalMap<V>
where
    V: Clone + Send + Sync + 'static,
{
    type Ref<'g>
        = MappedRwLockReadGuard<'g, V>
    where
        Self: 'g;

    fn name(&self) -> &'static str {
        "btree"
    }

    fn domain(&self) -> &Domain {
        &self.domain
    }

    #[inline]
    fn query<'g>(&'g self, addr: u64, guard: &'g Guard<'_>) -> Option<(Interval, Self::Ref<'g>)> {
        check_guard(&self.domain, guard);
        let mut found = None;
        let value = RwLockReadGuard::try_map(self.tree.read(), |tree| {
            let (&start, (end, value)) = tree.ivs.range(..=addr).next_back()?;
            if addr < *end {
                found = Some(Interval { start, end: *end });
                Some(value)
            } else {
                None
            }
        })
        .ok()?;
        Some((found?, value))
    }

    fn map(&self, range: Range<u64>, value: Option<V>) -> Result<(), MapError> {
        let Interval { start, end } = Interval::try_from(range)?;
        let mut guard = self.tree.write();
        let Tree { ivs, gaps } = &mut *guard;
        // Prepare: one allocation per interval inserted below (the new one; the tail of the
        // last interval reaching past `end`), taken before anything changes.
        let tail_insert = ivs
            .range(..end)
            .next_back()
            .is_some_and(|(_, &(e, _))| e > end);
        for _ in 0..usize::from(value.is_some()) + usize::from(tail_insert) {
            self.faults.take()?;
        }
        // Every interval this update removes or trims loses its end (unless a tail keeps it,
        // past `end`), so the gap starting there is forgotten (see `free_gaps.rs`).
        // The interval reaching into `range` from below keeps its head; if it also reaches past
        // `end` (a split), its tail becomes a separate interval.
        let mut lo = 0;
        let mut tail = None;
        if let Some((_, (pe, pv))) = ivs.range_mut(..start).next_back() {
            if *pe > start {
                if *pe > end {
                    tail = Some((end, (*pe, pv.clone())));
                } else {
                    gaps.forget(*pe);
                }
                *pe = start;
            }
            lo = *pe;
        }
        // Intervals starting inside `range` are removed; the last one keeps its part past `end`.
        // The first start at or past `end` bounds the window of changed gaps.
        let mut hi = KEY_SPACE_END;
        let mut inside = Vec::new();
        for (&s, _) in ivs.range(start..) {
            if s >= end {
                hi = s;
                break;
            }
            inside.push(s);
        }
        // The removed values are dropped after the map is consistent again (their `Drop` is the
        // caller's code: a panic there must not leave the gap index half updated).
        let mut removed = Vec::new();
        for s in inside {
            if let Some((e, v)) = ivs.remove(&s) {
                if e > end {
                    tail = Some((end, (e, v)));
                } else {
                    gaps.forget(e);
                    removed.push(v);
                }
            }
        }
        if let Some((s, ev)) = tail {
            ivs.insert(s, ev);
            hi = end;
        }
        let new = value.is_some().then_some(Interval { start, end });
        if let Some(v) = value {
            ivs.insert(start, (end, v));
        }
        gaps.set_window(lo, hi, new);
        drop(guard);
        drop(removed);
        Ok(())
    }

    fn alloc(&self, within: Range<u64>, len: u64, value: V) -> Result<Interval, MapError> {
        let within = check_alloc(within, len)?;
        let mut tree = self.tree.write();
        let (start, (lo, hi)) = tree
            .gaps
            .first_fit(within, len)
            .ok_or(MapError::NoSpace { len, within })?;
        // Prepare: the one interval inserted below.
        self.faults.take()?;
        let iv = Interval {
            start,
            end: start + len,
        };
        tree.ivs.insert(start, (iv.end, value));
        // The gap `[lo, hi)` is the window: bounded by intervals (or the key-space ends), and
        // it now holds exactly `iv`.
        tree.gaps.set_window(lo, hi, Some(iv));
        Ok(iv)
    }

    fn visit<'g>(
        &'g self,
        range: Range<u64>,
        guard: &'g Guard<'_>,
        f: &mut dyn FnMut(Interval, &V) -> ControlFlow<()>,
    ) -> Result<(), MapError> {
        check_guard(&self.domain, guard);
        let range = Interval::try_from(range)?;
        let tree = self.tree.read();
        let _ = for_each_overlapping(&tree.ivs, range, f);
        Ok(())
    }

    fn len(&self) -> usize {
        self.tree.read().ivs.len()
    }
}
