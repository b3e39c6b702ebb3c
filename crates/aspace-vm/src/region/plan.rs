//! The region edit plan: the old regions of a window in, the new regions out. Pure: no store,
//! no lock, no allocation beyond the output buffer, so every design (whatever holds its regions
//! and however it locks them) applies Linux's region rules through this one function.
//!
//! [`plan_edit`] rewrites `[start, end)` piece by piece through a function of the old attributes
//! (`None` for a hole), which expresses `mmap` (everything becomes the new attributes), `munmap`
//! (everything becomes `None`), `mprotect` and `madvise` hints (mapped pieces change one
//! attribute, holes stay holes). Its input is the *window* a store read
//! ([`super::store::RegionStore::read_window`]): the left neighbour if it ends exactly at
//! `start`, every region overlapping the range (unclipped), and the right neighbour if it starts
//! exactly at `end`. Its output replaces the window: the left and right remainders of split
//! regions, the rewritten pieces, and the untouched neighbours, merged left to right wherever
//! Linux would merge (merging adopts the anon identity of a piece that has one). It refuses,
//! before anything is changed, when the result would hold more than `max_map_count` regions
//! (`ENOMEM`) or, in [`OnOverlap::Refuse`] mode, when any region overlaps (`EEXIST`).
//!
//! [`adopted_anon`] is the other rule a store cannot decide alone: which identity a region takes
//! at its first write fault.
//!
//! Not for: finding the window or writing the result (`store.rs`), placement (`designs`).

use super::{AnonId, Attrs, Region};
use crate::error::{Limit, VmError};
use std::ops::Range;

/// What an edit does to regions overlapping its range.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum OnOverlap {
    /// Rewrite them (`MAP_FIXED`, `munmap`, `mprotect`, `madvise`).
    Rewrite,
    /// Refuse the whole edit with `EEXIST` (`MAP_FIXED_NOREPLACE`, a hint tried before a search).
    Refuse,
}

/// What an edit saw of the old regions.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct EditOutcome {
    /// Whether any region overlapped the range.
    pub(crate) overlapped: bool,
    /// `Some(range.start)` when a region (or its remnant) ends exactly at the range's start;
    /// `None` when unknown without a search.
    pub(crate) prev_end: Option<u64>,
    /// The start of the first region at or after the range's end, `u64::MAX` if none.
    pub(crate) next_start: u64,
}

/// The scratch buffers of one edit (a core keeps them so edits do not allocate once warm).
#[derive(Debug, Default)]
pub(crate) struct EditBuffers {
    /// The window as the store read it.
    pub(crate) old: Vec<Region>,
    /// The regions that replace it.
    pub(crate) new: Vec<Region>,
}

/// Appends `p` to `pieces`, merging it into the last piece where Linux would.
#[inline]
fn push_piece(pieces: &mut Vec<Region>, p: Region) {
    if let Some(last) = pieces.last_mut() {
        if last.end == p.start && last.attrs.mergeable(&p.attrs) {
            last.end = p.end;
            if last.attrs.anon.is_none() {
                last.attrs.anon = p.attrs.anon;
            }
            return;
        }
    }
    pieces.push(p);
}

/// Plans the edit of `range` through `f` (module doc). `old` is the window the store read,
/// `next_start` what the store's read saw after the range (the start of the first region at or
/// after `range.end` that the read reached, `u64::MAX` otherwise), `count` the store's region
/// count. Writes the replacement into `new` (cleared first).
///
/// # Errors
/// `EEXIST` with [`OnOverlap::Refuse`] when a region overlaps; `ENOMEM` ([`Limit::MapCount`])
/// when the result would exceed `max_count` regions. Nothing is to be changed then.
#[allow(clippy::too_many_arguments)]
#[inline]
pub(crate) fn plan_edit(
    range: Range<u64>,
    old: &[Region],
    next_start: u64,
    mut f: impl FnMut(Option<Attrs>) -> Option<Attrs>,
    on_overlap: OnOverlap,
    count: usize,
    max_count: usize,
    new: &mut Vec<Region>,
) -> Result<EditOutcome, VmError> {
    debug_assert!(range.start < range.end);
    new.clear();
    let mut outcome = EditOutcome {
        overlapped: false,
        prev_end: None,
        next_start,
    };
    let mut cursor = range.start;
    let mut tail = None;
    let mut right = None;
    for r in old {
        if r.end == range.start {
            new.push(*r);
            outcome.prev_end = Some(r.end);
            continue;
        }
        if r.start >= range.end {
            debug_assert_eq!(r.start, range.end, "only an adjacent right neighbour");
            right = Some(*r);
            break;
        }
        outcome.overlapped = true;
        if r.start < range.start {
            outcome.prev_end = Some(range.start);
            let left = Region {
                end: range.start,
                ..*r
            };
            push_piece(new, left);
        } else if r.start > cursor {
            if let Some(attrs) = f(None) {
                let hole = Region {
                    start: cursor,
                    end: r.start,
                    attrs,
                };
                push_piece(new, hole);
            }
        }
        let s = r.start.max(range.start);
        let e = r.end.min(range.end);
        if let Some(attrs) = f(Some(r.attrs)) {
            push_piece(
                new,
                Region {
                    start: s,
                    end: e,
                    attrs,
                },
            );
        }
        cursor = e;
        if r.end > range.end {
            outcome.next_start = range.end;
            tail = Some(Region {
                start: range.end,
                ..*r
            });
            break;
        }
    }
    if cursor < range.end {
        if let Some(attrs) = f(None) {
            let hole = Region {
                start: cursor,
                end: range.end,
                attrs,
            };
            push_piece(new, hole);
        }
    }
    if let Some(t) = tail {
        push_piece(new, t);
    }
    if let Some(r) = right {
        push_piece(new, r);
    }
    if on_overlap == OnOverlap::Refuse && outcome.overlapped {
        Err(VmError::Exists)
    } else if count - old.len() + new.len() > max_count {
        Err(VmError::OutOfMemory(Limit::MapCount))
    } else {
        Ok(outcome)
    }
}

/// The identity a private region without one adopts at its first write fault
/// (`find_mergeable_anon_vma`): the adjacent next neighbour's if compatible, else the adjacent
/// previous neighbour's if compatible, else `None` (the caller hands out a fresh one). `prev`
/// is asked only when `next` gives nothing (one store search saved on the common path).
/// Neighbours that are not adjacent to `region` are ignored.
#[inline]
pub(crate) fn adopted_anon(
    region: &Region,
    next: Option<Region>,
    prev: impl FnOnce() -> Option<Region>,
) -> Option<AnonId> {
    let me = &region.attrs;
    let compatible = |n: &Region| me.anon_compatible(&n.attrs);
    next.filter(|n| n.start == region.end && compatible(n))
        .and_then(|n| n.attrs.anon)
        .or_else(|| {
            prev()
                .filter(|p| p.end == region.start && compatible(p))
                .and_then(|p| p.attrs.anon)
        })
}
