//! `FreeGaps`: the free-gap index of the btree baseline, for a sub-linear first-fit `alloc`.
//!
//! A second `BTreeMap<gap start, gap end>` kept beside the interval map, under the same lock,
//! holding exactly the complement of the intervals inside the key space `[0, KEY_SPACE_END)`:
//! the maximal non-empty free ranges, disjoint, non-adjacent, in address order. This is what a
//! stock kernel without an augmented tree could plausibly do (a free-area list next to the VMA
//! tree); Linux since 3.8 augments its rbtree instead (`rb_subtree_gap`), which the Bonsai map
//! does (`bonsai/augment.rs`).
//!
//! Maintenance, with keys the update already knows (no search): every gap starts at 0 or at the
//! end of an interval. An update of `[start, end)` first [`FreeGaps::forget`]s the gap at the old
//! end of every interval it removes or trims (those gaps are about to change); afterwards the
//! *window* `[lo, hi)`, from the end of the interval before `start` (or 0) to the start of the
//! interval at or after `end` (or `KEY_SPACE_END`), holds at most one interval (the one just
//! mapped or allocated), and [`FreeGaps::set_window`] writes the one or two gaps around it.
//! Cost: O((k + 2) log n) for an update that touched `k` intervals (ds-map's removal of one
//! interval: one remove and one insert), within the cost of the update itself.
//!
//! First fit ([`FreeGaps::first_fit`]): from the gap containing (or preceding) `within.start`,
//! the gaps in address order, clipped to `within`, until one holds `len` bytes. Complexity:
//! O(log n + g), where `g` is the number of free gaps inside `within` that lie below the answer
//! and are too small for `len` (in the worst case all gaps of `within`: linear, unlike the
//! Bonsai map's O(log n)); with allocations packed from the bottom of `within`, as in `ds-alloc`,
//! `g` is 0. It is not a concurrent structure: callers hold the map's write lock.

use crate::contract::{Interval, KEY_SPACE_END};
use std::collections::BTreeMap;
use std::ops::Bound::{Excluded, Unbounded};

/// The free gaps of an interval map (see the module doc).
#[derive(Debug)]
pub(crate) struct FreeGaps {
    /// gap start -> gap end; non-empty, disjoint, not adjacent, inside the key space.
    gaps: BTreeMap<u64, u64>,
}

impl FreeGaps {
    /// The gaps of an empty map: the whole key space.
    pub(crate) fn new() -> Self {
        Self {
            gaps: BTreeMap::from([(0, KEY_SPACE_END)]),
        }
    }

    /// Drops the gap starting at `key`, if any: `key` is the old end of an interval that the
    /// current update removes or trims (see the module doc).
    pub(crate) fn forget(&mut self, key: u64) {
        self.gaps.remove(&key);
    }

    /// Writes the gaps of the window `[lo, hi)` (see the module doc), which now holds no
    /// interval (`inside == None`) or exactly `inside`.
    ///
    /// # Preconditions
    /// `lo` is 0 or the end of an interval, `hi` is `KEY_SPACE_END` or the start of an
    /// interval, no interval but `inside` overlaps `[lo, hi)`, and every gap starting in
    /// `(lo, hi)` other than at `inside.end` has been forgotten.
    pub(crate) fn set_window(&mut self, lo: u64, hi: u64, inside: Option<Interval>) {
        match inside {
            None => self.set(lo, hi),
            Some(iv) => {
                self.set(lo, iv.start);
                if iv.end < hi {
                    self.gaps.insert(iv.end, hi);
                }
            }
        }
        debug_assert!(
            self.gaps
                .range(lo + 1..hi)
                .all(|(&s, _)| inside.is_some_and(|iv| iv.end == s)),
            "a stale gap is left in the window {lo:#x}..{hi:#x}"
        );
    }

    /// Makes `[start, end)` the gap starting at `start`, or no gap there if it is empty.
    fn set(&mut self, start: u64, end: u64) {
        if start < end {
            self.gaps.insert(start, end);
        } else {
            self.gaps.remove(&start);
        }
    }

    /// The lowest `a` with `[a, a + len)` inside `within` and free (see the module doc), and
    /// the free gap `(start, end)` it lies in.
    pub(crate) fn first_fit(&self, within: Interval, len: u64) -> Option<(u64, (u64, u64))> {
        let below = self
            .gaps
            .range(..=within.start)
            .next_back()
            .filter(|(_, &e)| e > within.start);
        let above = self
            .gaps
            .range((Excluded(within.start), Unbounded))
            .take_while(|(&s, _)| s < within.end);
        below.into_iter().chain(above).find_map(|(&s, &e)| {
            let a = s.max(within.start);
            (e.min(within.end) - a >= len).then_some((a, (s, e)))
        })
    }

    /// Checks that the gaps are exactly the complement of `intervals` (in address order) in the
    /// key space. Panics otherwise.
    pub(crate) fn check(&self, intervals: impl Iterator<Item = Interval>) {
        let mut expected = BTreeMap::new();
        let mut cursor = 0;
        for iv in intervals {
            if iv.start > cursor {
                expected.insert(cursor, iv.start);
            }
            cursor = iv.end;
        }
        if cursor < KEY_SPACE_END {
            expected.insert(cursor, KEY_SPACE_END);
        }
        assert_eq!(
            self.gaps, expected,
            "free gaps vs the complement of the intervals"
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::contract::PAGE_SIZE as P;

    fn iv(s: u64, e: u64) -> Interval {
        Interval::new(s * P, e * P).unwrap()
    }

    /// Gaps of a map holding `ivs` (page numbers, ascending), built by mapping each in turn.
    fn gaps_of(ivs: &[(u64, u64)]) -> FreeGaps {
        let mut g = FreeGaps::new();
        let mut lo = 0;
        for &(s, e) in ivs {
            g.set_window(lo, KEY_SPACE_END, Some(iv(s, e)));
            lo = e * P;
        }
        g.check(ivs.iter().map(|&(s, e)| iv(s, e)));
        g
    }

    fn fit(g: &FreeGaps, within: (u64, u64), len: u64) -> Option<u64> {
        g.first_fit(iv(within.0, within.1), len * P)
            .map(|(a, _)| a / P)
    }

    #[test]
    fn empty_map_fits_at_start() {
        let g = FreeGaps::new();
        assert_eq!(fit(&g, (2, 10), 3), Some(2));
        assert_eq!(fit(&g, (2, 10), 8), Some(2));
        assert_eq!(fit(&g, (2, 10), 9), None);
    }

    #[test]
    fn exact_fit_gap_is_found() {
        let g = gaps_of(&[(0, 3), (5, 10)]);
        assert_eq!(fit(&g, (0, 10), 2), Some(3));
        assert_eq!(fit(&g, (0, 10), 3), None);
    }

    #[test]
    fn interval_reaching_into_within_pushes_the_fit_up() {
        let g = gaps_of(&[(0, 6)]);
        assert_eq!(fit(&g, (4, 10), 2), Some(6));
        assert_eq!(fit(&g, (4, 10), 5), None);
    }

    #[test]
    fn gaps_past_within_are_not_used() {
        let g = gaps_of(&[(1, 3), (4, 9)]);
        assert_eq!(fit(&g, (0, 4), 2), None);
        assert_eq!(fit(&g, (0, 4), 1), Some(0));
    }

    #[test]
    fn an_emptied_window_merges_its_gaps() {
        let mut g = gaps_of(&[(1, 2), (3, 4), (5, 6)]);
        // Unmapping 3..4 forgets the gap at its end and empties the window 2..5.
        g.forget(4 * P);
        g.set_window(2 * P, 5 * P, None);
        g.check([iv(1, 2), iv(5, 6)].into_iter());
    }

    #[test]
    fn first_fit_reports_the_gap_it_used() {
        let g = gaps_of(&[(1, 2), (5, 6)]);
        assert_eq!(g.first_fit(iv(3, 10), 2 * P), Some((3 * P, (2 * P, 5 * P))));
    }
}
