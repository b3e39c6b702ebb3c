//! The `IntervalMap` contract shared by every interval map, and its value types.
//!
//! An interval map maps disjoint, page-aligned, half-open intervals `[start, end)` of the `u64`
//! key space to values. The key space is `[0, KEY_SPACE_END)`: the top page of `u64` is left out
//! so that every interval's end is representable.
//!
//! Operations:
//! - `query(addr, guard)`: the interval containing `addr` and a reference to its value, valid for
//!   the caller's RCU read guard (no clone on the read path);
//! - `map(range, Some(v) | None)`: overwrite. Intervals overlapping `range` are trimmed or split
//!   so that afterwards exactly `range` maps to `v` (or nothing, for `None`);
//! - `alloc(within, len, v)`: atomically claim the lowest gap of `len` bytes inside `within`;
//! - `visit(range, guard, f)`: every interval overlapping `range`, in address order;
//!
//! The guard of `query`/`visit` must be a read section of the map's own domain (`domain()`):
//! every implementation checks it and panics on a guard of another domain, in every build.
//! - `len()`: the number of intervals.
//!
//! Invalid input (unaligned, empty, inverted, or beyond the key space) is rejected with a
//! `MapError` carrying the errno Linux gives for the same mistake, and changes nothing.
//!
//! Implementations that support interval locking (skiplist, radix) also implement
//! [`IntervalLocking`], so that the address space can hold a range while it updates page tables.

use aspace_rcu::{Domain, Guard};
use std::ops::{ControlFlow, Deref, Range};

/// The size of a page; every interval bound is a multiple of it.
pub const PAGE_SIZE: u64 = 4096;

/// Exclusive upper bound of the key space (the last page of `u64` is not mappable).
#[allow(clippy::identity_op)] // `u64::MAX & mask` states the intent: the top page is cut off.
pub const KEY_SPACE_END: u64 = u64::MAX & !(PAGE_SIZE - 1);

/// A non-empty, page-aligned, half-open interval `[start, end)` inside the key space.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Debug)]
pub struct Interval {
    /// First address of the interval (page-aligned).
    pub start: u64,
    /// One past the last address (page-aligned, `> start`, `<= KEY_SPACE_END`).
    pub end: u64,
}

impl Interval {
    /// Validates `start..end`: aligned, non-empty, not inverted, inside the key space.
    pub fn new(start: u64, end: u64) -> Result<Self, MapError> {
        if start % PAGE_SIZE != 0 {
            return Err(MapError::Unaligned(start));
        }
        if end % PAGE_SIZE != 0 {
            return Err(MapError::Unaligned(end));
        }
        if end <= start {
            return Err(MapError::EmptyRange { start, end });
        }
        if end > KEY_SPACE_END {
            return Err(MapError::OutOfRange { start, end });
        }
        Ok(Self { start, end })
    }

    /// Length in bytes.
    pub fn len(&self) -> u64 {
        self.end - self.start
    }

    /// Always false: intervals are non-empty by construction (kept for clippy's `len` rule).
    pub fn is_empty(&self) -> bool {
        false
    }

    /// Whether `addr` lies inside.
    pub fn contains(&self, addr: u64) -> bool {
        self.start <= addr && addr < self.end
    }

    /// Whether the two intervals share at least one byte.
    pub fn overlaps(&self, other: &Interval) -> bool {
        self.start < other.end && other.start < self.end
    }
}

impl TryFrom<Range<u64>> for Interval {
    type Error = MapError;
    fn try_from(r: Range<u64>) -> Result<Self, MapError> {
        Interval::new(r.start, r.end)
    }
}

impl std::fmt::Display for Interval {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{:#x}..{:#x}", self.start, self.end)
    }
}

/// Why an interval-map operation was refused. Nothing changed when one is returned.
#[derive(thiserror::Error, Debug, Clone, Copy, PartialEq, Eq)]
pub enum MapError {
    /// An address or length is not a multiple of `PAGE_SIZE` (Linux: `EINVAL`).
    #[error("{0:#x} is not page-aligned")]
    Unaligned(u64),
    /// `end <= start`, or a zero length (Linux: `EINVAL`).
    #[error("empty or inverted range {start:#x}..{end:#x}")]
    EmptyRange {
        /// Requested start.
        start: u64,
        /// Requested end.
        end: u64,
    },
    /// The range reaches past `KEY_SPACE_END` (Linux: `ENOMEM`, as for addresses past TASK_SIZE).
    #[error("range {start:#x}..{end:#x} leaves the key space")]
    OutOfRange {
        /// Requested start.
        start: u64,
        /// Requested end.
        end: u64,
    },
    /// `alloc` found no gap of `len` bytes inside `within` (Linux: `ENOMEM`).
    #[error("no free gap of {len:#x} bytes in {within}")]
    NoSpace {
        /// Requested length.
        len: u64,
        /// The range searched.
        within: Interval,
    },
    /// A node allocation failed (or was made to fail by a map's `fail_allocations_after`
    /// testing hook) before anything was published (Linux: `ENOMEM`).
    #[error("out of memory")]
    OutOfMemory,
}

impl MapError {
    /// The errno Linux returns for the same mistake.
    pub fn errno(&self) -> i32 {
        match self {
            MapError::Unaligned(_) | MapError::EmptyRange { .. } => libc::EINVAL,
            MapError::OutOfRange { .. } | MapError::NoSpace { .. } | MapError::OutOfMemory => {
                libc::ENOMEM
            }
        }
    }
}

/// A concurrent map from disjoint intervals to values (see the module doc for the semantics).
///
/// Every map lives in an RCU [`Domain`] (memb flavor); readers register with `domain()` once per
/// thread and pass a read guard to `query`/`visit`.
pub trait IntervalMap<V>: Send + Sync
where
    V: Clone + Send + Sync + 'static,
{
    /// What `query` hands out: `&'g V` for RCU maps, a mapped read-lock guard for locked ones.
    type Ref<'g>: Deref<Target = V>
    where
        Self: 'g;

    /// Short design name used in reports ("btree", "bonsai", ...).
    fn name(&self) -> &'static str;

    /// The RCU domain whose guards `query` and `visit` take.
    fn domain(&self) -> &Domain;

    /// The interval containing `addr`, with its value, or `None` if `addr` is in a gap.
    fn query<'g>(&'g self, addr: u64, guard: &'g Guard<'_>) -> Option<(Interval, Self::Ref<'g>)>;

    /// Overwrites `range` with `value`, or removes it for `None`, trimming and splitting the
    /// intervals it overlaps.
    fn map(&self, range: Range<u64>, value: Option<V>) -> Result<(), MapError>;

    /// Claims the lowest gap of `len` bytes inside `within` for `value`, atomically.
    fn alloc(&self, within: Range<u64>, len: u64, value: V) -> Result<Interval, MapError>;

    /// Calls `f` on every interval overlapping `range`, in address order, until it breaks.
    ///
    /// Under concurrent updates a visit is not a snapshot. Every implementation yields each
    /// interval present for the whole visit exactly once, and only intervals present at some
    /// moment of it. `btree`, `skiplist` and `radix` also yield in address order with no two
    /// yielded intervals overlapping; `bonsai` does not promise that when two or more updates commit
    /// during one walk (a walker on a node an update removed can follow its frozen child
    /// pointers into a subtree a later in-place update changed): a caller that computes gaps
    /// from a `bonsai` visit must hold the writer out or check the order itself.
    fn visit<'g>(
        &'g self,
        range: Range<u64>,
        guard: &'g Guard<'_>,
        f: &mut dyn FnMut(Interval, &V) -> ControlFlow<()>,
    ) -> Result<(), MapError>;

    /// The number of intervals.
    fn len(&self) -> usize;

    /// Whether the map holds no interval.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// Interval locking (skiplist and radix maps): hold `range` against concurrent updates, then
/// replace everything inside it with `new_intervals` in one step visible to queries.
pub trait IntervalLocking<V>: IntervalMap<V>
where
    V: Clone + Send + Sync + 'static,
{
    /// Proof that a range is held; releases it on drop.
    type Locked<'a>
    where
        Self: 'a;

    /// Waits until `range` can be held exclusively, then holds it.
    fn lock(&self, range: Range<u64>) -> Result<Self::Locked<'_>, MapError>;

    /// Replaces the contents of the held range by `new_intervals` (each inside it, disjoint),
    /// atomically for queries, and releases it.
    fn swap(
        &self,
        locked: Self::Locked<'_>,
        new_intervals: Vec<(Interval, V)>,
    ) -> Result<(), MapError>;
}
