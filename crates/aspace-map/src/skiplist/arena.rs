//! Per-core arenas (SOSP'25 §5.3, Fig. 11): layout, separators and allocation hints.
//!
//! An `ArenaLayout { count, size, base }` reserves `[base, base + count * size)` as `count`
//! arenas. Zero-length *separator* nodes sit at every arena boundary `base + k * size`
//! (`k = 0..=count`). Separators have height `>= SEPARATOR_THRESHOLD` and ordinary nodes stay
//! below it, so the upper levels link only separators (traversal between arenas) and an insert
//! in one arena never writes a link that belongs to another arena below the threshold (Fig. 10's
//! cross-arena updates are gone). Separator heights above the threshold follow the binary
//! structure of `k`, a perfect skiplist over the separators.
//!
//! Separators and intervals: a separator must never lie strictly inside an interval (traversals
//! rely on `start` and `end` both being sorted). An interval may still be mapped across an arena
//! boundary: the swap that creates it drops the separators it covers, and every later swap
//! re-creates the separators at boundaries strictly inside the span it rewrote that no new
//! interval covers. So at rest there is a separator at every boundary not covered by an interval.
//!
//! Hints: each arena keeps a *lower bound of its first free address* (every page in
//! `[arena start, hint)` is covered), packed with a 12-bit version in the low bits of the
//! page-aligned address. A successful first-fit alloc that searched from the hint moves it to the
//! end of the new interval (a CAS that fails if a free intervened: versions differ); a swap that
//! may free space moves it back to the start of the swapped range (`min`, version + 1). Alloc
//! starts its search at the hint, which keeps the contract's "lowest gap" exact sequentially and
//! makes contiguous allocation O(log n) instead of a walk over the arena.
//!
//! Version wrap: the version has 12 bits (the page offset; the key space is the whole 64-bit
//! range, so no wider field fits one atomic word). An alloc that stalls between reading the hint
//! and advancing it while exactly a multiple of 4096 frees hit its arena (and the address returns
//! to the one it read) passes the version CAS and may move the hint over a gap freed meanwhile.
//! That is made harmless rather than impossible: a hint is only a search start, and a search
//! from the hint that finds the arena full is repeated from the arena start before the arena is
//! declared full (`SkipListMap::alloc_inner`), so such a gap is still found. Until then first fit
//! may return a higher gap than the lowest (the arena's later frees move the hint back below
//! it). Regression: `a_wrapped_hint_version_cannot_hide_a_free_gap` (tests use 2 version bits).
//!
//! Not for: assigning arenas to threads (the caller passes its core number).

use crate::contract::{Interval, MapError, KEY_SPACE_END, PAGE_SIZE};
use crate::skiplist::node::MAX_HEIGHT;
use std::sync::atomic::{AtomicU64, Ordering};

/// Ordinary nodes are below this height when arenas are configured; separators at or above.
pub const SEPARATOR_THRESHOLD: usize = 14;

/// Where the per-core arenas are.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ArenaLayout {
    /// Number of arenas (>= 1).
    pub count: usize,
    /// Size of each arena in bytes (page-aligned, > 0).
    pub size: u64,
    /// Start of the first arena (page-aligned).
    pub base: u64,
}

impl ArenaLayout {
    /// Checks alignment and that the arenas fit the key space.
    pub fn validate(&self) -> Result<(), MapError> {
        if self.count == 0 {
            return Err(MapError::EmptyRange {
                start: self.base,
                end: self.base,
            });
        }
        let end = (self.count as u64)
            .checked_mul(self.size)
            .and_then(|l| l.checked_add(self.base))
            .ok_or(MapError::OutOfRange {
                start: self.base,
                end: KEY_SPACE_END,
            })?;
        Interval::new(self.base, end)?;
        if self.size % PAGE_SIZE != 0 {
            return Err(MapError::Unaligned(self.size));
        }
        Ok(())
    }

    /// One past the last arena.
    pub fn end(&self) -> u64 {
        self.base + self.count as u64 * self.size
    }

    /// Arena `k`'s range.
    pub fn arena(&self, k: usize) -> Interval {
        let s = self.base + k as u64 * self.size;
        Interval {
            start: s,
            end: s + self.size,
        }
    }

    /// The arena containing all of `[start, end)`, if one does.
    pub fn arena_of(&self, start: u64, end: u64) -> Option<usize> {
        if start < self.base || end > self.end() || end <= start {
            return None;
        }
        let k = ((start - self.base) / self.size) as usize;
        (end <= self.arena(k).end).then_some(k)
    }

    /// Boundaries `b` (arena edges) with `lo < b < hi`.
    pub(crate) fn boundaries_inside(&self, lo: u64, hi: u64) -> impl Iterator<Item = u64> + '_ {
        let first = if lo < self.base {
            0
        } else {
            (lo - self.base) / self.size + 1
        };
        (first..=self.count as u64)
            .map(move |k| self.base + k * self.size)
            .take_while(move |&b| b < hi)
            .filter(move |&b| b > lo)
    }

    /// Height of the separator at boundary number `k`.
    pub(crate) fn separator_height(k: u64) -> usize {
        let extra = if k == 0 {
            64
        } else {
            k.trailing_zeros() as usize / 2
        };
        (SEPARATOR_THRESHOLD + 1 + extra).min(MAX_HEIGHT)
    }

    /// Boundary number of address `b` (an arena edge).
    pub(crate) fn boundary_index(&self, b: u64) -> u64 {
        (b - self.base) / self.size
    }
}

/// The version bits of a hint word (the page offset bits of its address). Tests shrink it to 2
/// bits so that a wrap can be forced in a few operations.
#[cfg(not(test))]
pub(crate) const VERSION_MASK: u64 = PAGE_SIZE - 1;
#[cfg(test)]
pub(crate) const VERSION_MASK: u64 = 3;

/// One arena's hint: `address | version`.
pub(crate) struct Hint(AtomicU64);

impl Hint {
    pub(crate) fn new(start: u64) -> Self {
        Self(AtomicU64::new(start))
    }

    /// The packed word and the address in it. Relaxed: a hint is a search start, never used to
    /// reach memory; its correctness argument is the version CAS, not ordering.
    pub(crate) fn read(&self) -> (u64, u64) {
        let w = self.0.load(Ordering::Relaxed);
        (w, w & !VERSION_MASK)
    }

    /// Moves the hint forward to `to` if it is still `seen` (no free in between).
    pub(crate) fn advance(&self, seen: u64, to: u64) {
        let new = to | (seen & VERSION_MASK);
        // Relaxed: see `read`.
        let _ = self
            .0
            .compare_exchange(seen, new, Ordering::Relaxed, Ordering::Relaxed);
    }

    /// Moves the hint back to at most `to` and bumps the version.
    pub(crate) fn retreat(&self, to: u64) {
        // Relaxed: see `read`.
        let _ = self
            .0
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |w| {
                let addr = (w & !VERSION_MASK).min(to);
                Some(addr | ((w + 1) & VERSION_MASK))
            });
    }
}
