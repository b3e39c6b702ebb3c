//! Input validation shared by every `IntervalMap` implementation.
//!
//! The contract (see `contract.rs`) says that invalid input is rejected with the `MapError` Linux
//! would give and changes nothing. Ranges are checked by `Interval::new`; this file adds the
//! checks of `alloc`'s extra `len` argument so every implementation reports the same error for the
//! same mistake, in the same order: first `within` (unaligned, empty/inverted, out of range), then
//! `len` (zero: `EmptyRange`; unaligned: `Unaligned`). A `len` larger than `within` is not an input
//! error but a `NoSpace` found by the gap search (Linux: `ENOMEM`).
//!
//! It also holds [`check_guard`], the check of the one input that is not a number: the read
//! guard `query`/`visit` take must be a section of the map's own RCU domain, or the map's
//! grace periods would not wait for it and it would protect nothing (crossbeam-skiplist's
//! `check_guard`). A foreign guard is a programming error: it panics, in every build.

use crate::contract::{Interval, MapError, PAGE_SIZE};
use aspace_rcu::{Domain, Guard};
use std::ops::Range;

/// Panics unless `guard` is a read section of `domain` (one pointer compare).
#[inline]
#[track_caller]
pub(crate) fn check_guard(domain: &Domain, guard: &Guard<'_>) {
    if !guard.belongs_to(domain) {
        foreign_guard();
    }
}

#[cold]
#[inline(never)]
#[track_caller]
fn foreign_guard() -> ! {
    panic!(
        "aspace-map: the guard passed to query/visit belongs to another RCU domain than the \
         map's (register readers with map.domain())"
    );
}

/// Validates the arguments of `alloc(within, len, _)`; returns `within` as an `Interval`.
pub(crate) fn check_alloc(within: Range<u64>, len: u64) -> Result<Interval, MapError> {
    let within = Interval::try_from(within)?;
    if len == 0 {
        return Err(MapError::EmptyRange {
            start: within.start,
            end: within.start,
        });
    }
    if len % PAGE_SIZE != 0 {
        return Err(MapError::Unaligned(len));
    }
    Ok(within)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::contract::KEY_SPACE_END;

    #[test]
    fn zero_len_is_empty_range() {
        assert_eq!(
            check_alloc(0..PAGE_SIZE, 0),
            Err(MapError::EmptyRange { start: 0, end: 0 })
        );
    }

    #[test]
    fn unaligned_len_is_rejected_after_within() {
        assert_eq!(check_alloc(0..PAGE_SIZE, 5), Err(MapError::Unaligned(5)));
        assert_eq!(check_alloc(1..PAGE_SIZE, 5), Err(MapError::Unaligned(1)));
    }

    #[test]
    fn within_reaching_the_top_page_is_rejected() {
        // The top page is outside the key space; its only bounds are unaligned or overflow.
        assert_eq!(
            check_alloc(0..u64::MAX, PAGE_SIZE),
            Err(MapError::Unaligned(u64::MAX))
        );
        assert!(check_alloc(KEY_SPACE_END - PAGE_SIZE..KEY_SPACE_END, PAGE_SIZE).is_ok());
    }
}
