//! Placement: where a new mapping goes (the one home of Linux's rules for hints, top-down
//! search, `MAP_FIXED` and `MAP_FIXED_NOREPLACE`; gVisor's `findAvailableLocked`, Linux's
//! `__get_unmapped_area` + `arch_get_unmapped_area_topdown`).
//!
//! - `MAP_FIXED` maps exactly at the address, replacing what is there (the caller removes the
//!   old translations when the edit reports an overlap);
//! - `MAP_FIXED_NOREPLACE` maps exactly there or fails with `EEXIST`, changing nothing;
//! - a hint (already rounded down and raised to `min_addr` by `semantics::check_mmap`) is
//!   honoured when `[hint, hint + len)` is free and inside the space; the check and the mapping
//!   are one edit (an [`OnOverlap::Refuse`] edit that fails with `EEXIST` when taken);
//! - otherwise the highest free gap below `max_addr` that fits (top-down), or `ENOMEM`.
//!
//! Not for: argument validation (`semantics.rs`) or per-core arenas (a later design's policy).

use crate::core_state::Core;
use crate::error::{Limit, VmError};
use crate::region::plan::{EditOutcome, OnOverlap};
use crate::region::store::RegionStore;
use crate::region::Attrs;
use crate::semantics::{Bounds, Placement};
use crate::types::Sharing;

/// The highest `len`-byte gap of `regions` inside `bounds`, or `ENOMEM`.
#[inline]
fn top_down(regions: &impl RegionStore, len: u64, bounds: Bounds) -> Result<u64, VmError> {
    regions
        .find_gap_topdown(len, bounds)
        .ok_or(VmError::OutOfMemory(Limit::AddressSpace))
}

/// Whether a hint leaves room for `len` bytes below the top of the space.
pub(crate) fn hint_fits(hint: u64, len: u64, bounds: Bounds) -> bool {
    hint <= bounds.max_addr - len
}

/// Where a mapping of `len` bytes would go, without mapping it (Linux reports some errors only
/// after placement, so `mmap` needs the address of a mapping it then refuses).
///
/// # Preconditions
/// The caller holds `regions` (shared or exclusive) for the duration of its use of the answer.
///
/// # Errors
/// `ENOMEM` ([`Limit::AddressSpace`]) when no gap fits.
pub(crate) fn find_locked(
    regions: &impl RegionStore,
    placement: Placement,
    len: u64,
    bounds: Bounds,
) -> Result<u64, VmError> {
    match placement {
        Placement::Fixed(a) | Placement::NoReplace(a) => Ok(a),
        Placement::Hint(h) if hint_fits(h, len, bounds) && regions.is_free(h, h + len) => Ok(h),
        Placement::Hint(_) | Placement::Anywhere => top_down(regions, len, bounds),
    }
}

/// Places a mapping of `len` bytes with `attrs` (module doc) and maps it: returns its start and
/// what the edit saw (`overlapped` tells a `MAP_FIXED` caller that old translations must go).
///
/// # Errors
/// `EEXIST` for `MAP_FIXED_NOREPLACE` over a mapping; `ENOMEM` when no gap fits or the region
/// count would exceed `max_count`. Nothing changed then.
#[inline]
pub(crate) fn map_placed_locked(
    core: &mut Core,
    regions: &mut impl RegionStore,
    placement: Placement,
    len: u64,
    attrs: Attrs,
    bounds: Bounds,
    max_count: usize,
) -> Result<(u64, EditOutcome), VmError> {
    let bufs = &mut core.edits;
    let mut at = |regions: &mut _, a: u64, mode| {
        // A shared mapping's offsets count from where it lands.
        let attrs = Attrs {
            shm_base: if attrs.sharing == Sharing::Shared {
                a
            } else {
                0
            },
            ..attrs
        };
        RegionStore::edit(regions, bufs, a..a + len, |_| Some(attrs), mode, max_count)
            .map(|o| (a, o))
    };
    match placement {
        Placement::Fixed(a) => at(regions, a, OnOverlap::Rewrite),
        Placement::NoReplace(a) => at(regions, a, OnOverlap::Refuse),
        Placement::Hint(h) if hint_fits(h, len, bounds) => {
            match at(regions, h, OnOverlap::Refuse) {
                Err(VmError::Exists) => {
                    let a = top_down(regions, len, bounds)?;
                    at(regions, a, OnOverlap::Rewrite)
                }
                placed => placed,
            }
        }
        Placement::Hint(_) | Placement::Anywhere => {
            let a = top_down(regions, len, bounds)?;
            at(regions, a, OnOverlap::Rewrite)
        }
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use crate::region::plan::EditBuffers;
    use crate::region::store::BTreeStore;
    use crate::types::Prot;

    const P: u64 = 4096;
    const B: Bounds = Bounds {
        min_addr: 0x1_0000,
        max_addr: 1 << 47,
    };

    fn map(store: &mut BTreeStore, start: u64, end: u64) {
        let attrs = Attrs {
            prot: Prot::READ,
            sharing: Sharing::Private,
            flags: 0,
            anon: None,
            shm_base: 0,
        };
        let mut bufs = EditBuffers::default();
        store
            .edit(
                &mut bufs,
                start..end,
                |_| Some(attrs),
                OnOverlap::Rewrite,
                100,
            )
            .unwrap();
    }

    #[test]
    fn find_honours_a_free_hint_and_searches_top_down_otherwise() {
        let mut s = BTreeStore::default();
        assert_eq!(
            find_locked(&s, Placement::Hint(0x20_0000), P, B),
            Ok(0x20_0000)
        );
        map(&mut s, 0x20_0000, 0x20_1000);
        let top = B.max_addr - P;
        assert_eq!(find_locked(&s, Placement::Hint(0x20_0000), P, B), Ok(top));
        // A hint whose range would end past the top is ignored.
        assert_eq!(
            find_locked(&s, Placement::Hint(B.max_addr - P), 2 * P, B),
            Ok(B.max_addr - 2 * P)
        );
        assert_eq!(
            find_locked(&s, Placement::Fixed(0x20_0000), P, B),
            Ok(0x20_0000)
        );
        let mut full = BTreeStore::default();
        map(&mut full, B.min_addr, B.max_addr);
        assert_eq!(
            find_locked(&full, Placement::Anywhere, P, B)
                .unwrap_err()
                .errno(),
            libc::ENOMEM
        );
    }
}
