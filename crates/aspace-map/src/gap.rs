//! First-fit gap search for `alloc`, shared by every `IntervalMap` implementation.
//!
//! `FirstFit` is fed the intervals that overlap `within`, in address order (the predecessor of
//! `within.start` first if it reaches into `within`), and finds the lowest address `a` such that
//! `[a, a + len)` lies inside `within` and overlaps none of them. It keeps one cursor: the lowest
//! address not yet known to be covered. Each implementation walks its own structure and feeds the
//! search (the btree under its write lock, bonsai under its writer lock), so the policy ("lowest
//! gap", like Linux's bottom-up `get_unmapped_area`) is identical everywhere. It is not a
//! concurrent algorithm: callers hold whatever excludes concurrent updates.

use crate::contract::Interval;
use std::ops::ControlFlow;

/// State of one first-fit search (see the module doc).
pub(crate) struct FirstFit {
    within: Interval,
    len: u64,
    cursor: u64,
}

impl FirstFit {
    /// A search for `len` bytes inside `within`.
    pub(crate) fn new(within: Interval, len: u64) -> Self {
        Self {
            within,
            len,
            cursor: within.start,
        }
    }

    /// Feeds the next interval `[start, end)` in address order. Breaks with the start of the gap
    /// once one fits before `start`, or with no gap (`None`) once the search is decided.
    pub(crate) fn feed(&mut self, start: u64, end: u64) -> ControlFlow<Option<u64>> {
        let limit = start.min(self.within.end);
        if limit >= self.cursor && limit - self.cursor >= self.len {
            return ControlFlow::Break(Some(self.cursor));
        }
        if start >= self.within.end {
            return ControlFlow::Break(None);
        }
        self.cursor = self.cursor.max(end);
        if self.cursor >= self.within.end {
            return ControlFlow::Break(None);
        }
        ControlFlow::Continue(())
    }

    /// The answer once every interval has been fed (or `feed` broke with `r`).
    pub(crate) fn finish(self, fed: ControlFlow<Option<u64>>) -> Option<u64> {
        match fed {
            ControlFlow::Break(r) => r,
            ControlFlow::Continue(()) => {
                let end = self.within.end;
                (self.cursor <= end && end - self.cursor >= self.len).then_some(self.cursor)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::contract::PAGE_SIZE as P;

    fn fit(within: (u64, u64), len: u64, ivs: &[(u64, u64)]) -> Option<u64> {
        let mut ff = FirstFit::new(Interval::new(within.0 * P, within.1 * P).unwrap(), len * P);
        let mut fed = ControlFlow::Continue(());
        for &(s, e) in ivs {
            fed = ff.feed(s * P, e * P);
            if fed.is_break() {
                break;
            }
        }
        ff.finish(fed).map(|a| a / P)
    }

    #[test]
    fn empty_map_fits_at_start() {
        assert_eq!(fit((2, 10), 3, &[]), Some(2));
        assert_eq!(fit((2, 10), 8, &[]), Some(2));
        assert_eq!(fit((2, 10), 9, &[]), None);
    }

    #[test]
    fn exact_fit_gap_is_found() {
        assert_eq!(fit((0, 10), 2, &[(0, 3), (5, 10)]), Some(3));
        assert_eq!(fit((0, 10), 3, &[(0, 3), (5, 10)]), None);
    }

    #[test]
    fn predecessor_reaching_into_within_pushes_cursor() {
        assert_eq!(fit((4, 10), 2, &[(0, 6)]), Some(6));
        assert_eq!(fit((4, 10), 5, &[(0, 6)]), None);
    }

    #[test]
    fn interval_past_within_ends_search() {
        assert_eq!(fit((0, 4), 2, &[(1, 3), (8, 9)]), None);
        assert_eq!(fit((0, 4), 1, &[(1, 3), (8, 9)]), Some(0));
    }
}
