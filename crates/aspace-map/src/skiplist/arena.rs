//! Per-core arenas (SOSP'25 §5.3, Fig. 11): layout and separators.
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
//! Each arena also keeps allocation hints (`hint.rs`). [`ArenaAllocError`] is what an
//! allocation confined to one arena (`SkipListMap::alloc_in_arena_padded`) reports: it hands the
//! value back when the caller may place it elsewhere.
//!
//! Not for: assigning arenas to threads (the caller passes its core number).

use crate::contract::{Interval, MapError, KEY_SPACE_END, PAGE_SIZE};
use crate::skiplist::node::MAX_HEIGHT;

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

/// Why `SkipListMap::alloc_in_arena_padded` allocated nothing. Nothing changed in the map.
///
/// The value is handed back where the caller can still place it elsewhere (`ArenaFull`,
/// `NoArenas`); it is dropped with bad input and when the node allocation failed.
#[derive(thiserror::Error)]
pub enum ArenaAllocError<V> {
    /// The arena has no free gap of `len + 2 * pad` bytes (Linux: `ENOMEM`). Holds the value.
    #[error("no free gap for a padded allocation in the arena")]
    ArenaFull(V),
    /// The map was made without arenas (Linux has none either: `ENOMEM`, so a caller that
    /// does not fall back reports an exhausted address space). Holds the value.
    #[error("the map has no arenas")]
    NoArenas(V),
    /// A node allocation failed before anything was published (Linux: `ENOMEM`).
    #[error("out of memory")]
    OutOfMemory,
    /// `len` is zero or unaligned, or `pad` is unaligned (Linux: `EINVAL`).
    #[error(transparent)]
    Invalid(MapError),
}

impl<V> ArenaAllocError<V> {
    /// The errno Linux returns for the same failure.
    pub fn errno(&self) -> i32 {
        match self {
            Self::ArenaFull(_) | Self::NoArenas(_) | Self::OutOfMemory => libc::ENOMEM,
            Self::Invalid(e) => e.errno(),
        }
    }

    /// The value handed back, if this error holds it.
    pub fn into_value(self) -> Option<V> {
        match self {
            Self::ArenaFull(v) | Self::NoArenas(v) => Some(v),
            Self::OutOfMemory | Self::Invalid(_) => None,
        }
    }
}

/// Does not print the value (so `V` needs no `Debug`).
impl<V> std::fmt::Debug for ArenaAllocError<V> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::ArenaFull(_) => f.write_str("ArenaFull(..)"),
            Self::NoArenas(_) => f.write_str("NoArenas(..)"),
            Self::OutOfMemory => f.write_str("OutOfMemory"),
            Self::Invalid(e) => f.debug_tuple("Invalid").field(e).finish(),
        }
    }
}
