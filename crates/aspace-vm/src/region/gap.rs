//! The top-down gap search (Linux's `arch_get_unmapped_area_topdown` without its gap
//! augmentation): the highest `len`-byte gap inside the space's bounds, as a function of the
//! regions in address order, so that every store (`BTreeStore`, `interval`'s window, the
//! skiplist store) and every lock-free scan computes it the same way.
//!
//! [`highest_gap`] takes the regions from the top down and stops at the first gap that fits
//! (one step per region above it); [`HighestGap`] takes them from the bottom up, for a scan that
//! cannot walk down (the region skiplist's lock-free `visit`), and keeps the last fitting gap.
//!
//! Not for: the order of hint, fixed address and search (`designs/placement.rs`).

use crate::semantics::Bounds;
use std::ops::Range;

/// The highest `len`-byte gap inside `bounds` among `regions`, given from the top down
/// (disjoint; parts outside `bounds` are allowed), its start. Stops at the first gap that fits.
#[inline]
pub(crate) fn highest_gap(
    regions: impl IntoIterator<Item = Range<u64>>,
    len: u64,
    bounds: Bounds,
) -> Option<u64> {
    let mut hi = bounds.max_addr;
    for r in regions {
        if hi < bounds.min_addr.saturating_add(len) {
            return None;
        }
        if hi >= r.end && hi - r.end >= len {
            return Some(hi - len);
        }
        hi = hi.min(r.start);
    }
    (hi >= bounds.min_addr && hi - bounds.min_addr >= len).then(|| hi - len)
}

/// [`highest_gap`] for regions given from the bottom up (a scan that cannot walk down): feed
/// every region overlapping `bounds` to [`HighestGap::region`], then ask [`HighestGap::finish`].
#[derive(Clone, Copy, Debug)]
pub(crate) struct HighestGap {
    len: u64,
    bounds: Bounds,
    /// The start of the gap above the regions seen so far.
    gap_start: u64,
    /// The highest fitting gap so far.
    best: Option<u64>,
}

impl HighestGap {
    /// A search for `len` bytes inside `bounds`.
    pub(crate) fn new(len: u64, bounds: Bounds) -> HighestGap {
        HighestGap {
            len,
            bounds,
            gap_start: bounds.min_addr,
            best: None,
        }
    }

    /// The next region up.
    #[inline]
    pub(crate) fn region(&mut self, r: Range<u64>) {
        let gap_end = r.start.min(self.bounds.max_addr);
        if gap_end > self.gap_start && gap_end - self.gap_start >= self.len {
            self.best = Some(gap_end - self.len);
        }
        self.gap_start = self.gap_start.max(r.end);
    }

    /// The start of the highest gap that fits.
    pub(crate) fn finish(mut self) -> Option<u64> {
        self.region(self.bounds.max_addr..self.bounds.max_addr);
        self.best
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    const P: u64 = 4096;

    /// The highest fitting start by brute force over every page.
    fn model(regions: &[Range<u64>], len: u64, b: Bounds) -> Option<u64> {
        let free = |a: u64| regions.iter().all(|r| a + len <= r.start || r.end <= a);
        let top = b.max_addr.checked_sub(len)?;
        (b.min_addr..=top)
            .rev()
            .step_by(P as usize)
            .find(|&a| free(a))
    }

    #[test]
    fn both_scans_find_the_highest_gap_like_the_model() {
        let b = Bounds {
            min_addr: 4 * P,
            max_addr: 60 * P,
        };
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = |n: u64| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x % n
        };
        for _ in 0..2000 {
            let mut regions = Vec::new();
            let mut at = next(6) * P;
            while at < 64 * P {
                let len = (1 + next(6)) * P;
                regions.push(at..at + len);
                at += len + next(8) * P;
            }
            let len = (1 + next(10)) * P;
            let want = model(&regions, len, b);
            let down = highest_gap(regions.iter().rev().cloned(), len, b);
            let mut up = HighestGap::new(len, b);
            for r in &regions {
                up.region(r.clone());
            }
            assert_eq!(down, want, "{regions:?} {len:#x}");
            assert_eq!(up.finish(), want, "{regions:?} {len:#x}");
        }
    }
}
