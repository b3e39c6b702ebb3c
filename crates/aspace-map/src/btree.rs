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
//! equal values (they are distinct regions, like VMAs). The RCU domain is held only so that the
//! map satisfies the contract (readers pass guards of it); this map never defers anything.
//!
//! Not for scalability: every reader writes the lock word, so queries do not scale across cores.
//! It is the baseline the RCU maps are measured against (DESIGN §5, §6 `coarse`/`faultlock`).

use crate::contract::{Interval, IntervalMap, MapError};
use crate::gap::FirstFit;
use crate::validate::check_alloc;
use aspace_rcu::{Domain, Guard};
use parking_lot::{MappedRwLockReadGuard, RwLock, RwLockReadGuard};
use std::collections::BTreeMap;
use std::ops::{ControlFlow, Range};

/// The locked B-tree interval map (see the module doc).
pub struct BTreeIntervalMap<V> {
    domain: Domain,
    /// start -> (end, value). Protected by the lock: read mode for `query`/`visit`/`len`, write
    /// mode for `map`/`alloc`.
    tree: RwLock<BTreeMap<u64, (u64, V)>>,
}

impl<V> BTreeIntervalMap<V> {
    /// An empty map whose readers use guards of `domain`.
    pub fn new(domain: Domain) -> Self {
        Self {
            domain,
            tree: RwLock::new(BTreeMap::new()),
        }
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
    fn query<'g>(&'g self, addr: u64, _guard: &'g Guard<'_>) -> Option<(Interval, Self::Ref<'g>)> {
        let mut found = None;
        let value = RwLockReadGuard::try_map(self.tree.read(), |tree| {
            let (&start, (end, value)) = tree.range(..=addr).next_back()?;
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
        let mut tree = self.tree.write();
        // The interval reaching into `range` from below keeps its head; if it also reaches past
        // `end` (a split), its tail becomes a separate interval.
        let mut tail = None;
        if let Some((_, (pe, pv))) = tree.range_mut(..start).next_back() {
            if *pe > start {
                if *pe > end {
                    tail = Some((end, (*pe, pv.clone())));
                }
                *pe = start;
            }
        }
        // Intervals starting inside `range` are removed; the last one keeps its part past `end`.
        let inside: Vec<u64> = tree.range(start..end).map(|(&s, _)| s).collect();
        for s in inside {
            if let Some((e, v)) = tree.remove(&s) {
                if e > end {
                    tail = Some((end, (e, v)));
                }
            }
        }
        if let Some((s, ev)) = tail {
            tree.insert(s, ev);
        }
        if let Some(v) = value {
            tree.insert(start, (end, v));
        }
        Ok(())
    }

    fn alloc(&self, within: Range<u64>, len: u64, value: V) -> Result<Interval, MapError> {
        let within = check_alloc(within, len)?;
        let mut tree = self.tree.write();
        let mut search = FirstFit::new(within, len);
        let mut fed = ControlFlow::Continue(());
        let _ = for_each_overlapping(&tree, within, &mut |iv, _| {
            fed = search.feed(iv.start, iv.end);
            if fed.is_break() {
                ControlFlow::Break(())
            } else {
                ControlFlow::Continue(())
            }
        });
        let start = search
            .finish(fed)
            .ok_or(MapError::NoSpace { len, within })?;
        tree.insert(start, (start + len, value));
        Ok(Interval {
            start,
            end: start + len,
        })
    }

    fn visit<'g>(
        &'g self,
        range: Range<u64>,
        _guard: &'g Guard<'_>,
        f: &mut dyn FnMut(Interval, &V) -> ControlFlow<()>,
    ) -> Result<(), MapError> {
        let range = Interval::try_from(range)?;
        let tree = self.tree.read();
        let _ = for_each_overlapping(&tree, range, f);
        Ok(())
    }

    fn len(&self) -> usize {
        self.tree.read().len()
    }
}
