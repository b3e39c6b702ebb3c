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
//! The order (fixed address, else a free hint, else top-down) is [`choose`]'s, which every
//! design calls with its own gap scan: a held store's ([`find_locked`]), or a lock-free scan
//! whose answer the design then takes as a `MAP_FIXED_NOREPLACE` edit under its locks (retrying
//! when a concurrent call took it first). The top-down search itself is `region/gap.rs`'s, which
//! every store and scan uses. A design with per-core
//! arenas (`interval`) claims a gap in the caller's arena first; their layout is
//! [`arena_layout`].
//!
//! Not for: argument validation (`semantics.rs`) or the arena claim itself (the skiplist's CAS,
//! `aspace_map`).

use crate::config::{Arenas, Config};
use crate::core_state::Core;
use crate::error::{Limit, VmError};
use crate::region::plan::{EditOutcome, OnOverlap};
use crate::region::store::RegionStore;
use crate::region::Attrs;
use crate::semantics::{Bounds, Placement};
use crate::types::{Sharing, PAGE_SIZE};
use aspace_map::ArenaLayout;

/// Whether a hint leaves room for `len` bytes below the top of the space.
pub(crate) fn hint_fits(hint: u64, len: u64, bounds: Bounds) -> bool {
    hint <= bounds.max_addr - len
}

/// Chooses where a mapping of `len` bytes goes (module doc): the fixed address; else the hint
/// if it fits and `is_free` says its range is free; else the highest gap `top_down` finds. The
/// scans are the caller's: exact under its lock, or lock-free (the answer then has to be taken
/// by an edit that refuses an overlap).
///
/// # Errors
/// `ENOMEM` ([`Limit::AddressSpace`]) when no gap fits.
#[inline]
pub(crate) fn choose(
    placement: Placement,
    len: u64,
    bounds: Bounds,
    is_free: impl FnOnce(u64, u64) -> bool,
    top_down: impl FnOnce(u64, Bounds) -> Option<u64>,
) -> Result<u64, VmError> {
    match placement {
        Placement::Fixed(a) | Placement::NoReplace(a) => Ok(a),
        Placement::Hint(h) if hint_fits(h, len, bounds) && is_free(h, h + len) => Ok(h),
        Placement::Hint(_) | Placement::Anywhere => {
            top_down(len, bounds).ok_or(VmError::OutOfMemory(Limit::AddressSpace))
        }
    }
}

/// The highest `len`-byte gap of `regions` inside `bounds`, or `ENOMEM`.
#[inline]
fn top_down(regions: &impl RegionStore, len: u64, bounds: Bounds) -> Result<u64, VmError> {
    regions
        .find_gap_topdown(len, bounds)
        .ok_or(VmError::OutOfMemory(Limit::AddressSpace))
}

/// The arena layout `config` asks for (see [`Arenas`]): one arena per core slot.
pub(crate) fn arena_layout(config: &Config) -> Option<ArenaLayout> {
    match config.arenas {
        Arenas::Off => None,
        Arenas::Layout { count, size, base } => Some(ArenaLayout { count, size, base }),
        Arenas::Auto => {
            let count = config.core_slots();
            let span = config.max_addr - config.min_addr;
            let raw = span / 32 / count as u64;
            // Arenas aligned to the page tables, so that no table (and no line of level-3
            // entries) serves two arenas: otherwise a core's munmap, freeing the tables of its
            // empty arena, reads the bitmap of the table its neighbour fills at the boundary
            // (the conflict audit's `alloc-fault-modify`). 8 GiB is one line of level-3
            // entries, 1 GiB a level-2 table, 2 MiB a leaf; the largest that costs at most a
            // third of the arena.
            let align = [8 << 30, 1 << 30, 2 << 20]
                .into_iter()
                .find(|&a| raw >= 3 * a)
                .unwrap_or(PAGE_SIZE);
            let size = raw & !(align - 1);
            let base = config.min_addr.next_multiple_of(align);
            (size >= 64 * PAGE_SIZE && base + count as u64 * size <= config.max_addr)
                .then_some(ArenaLayout { count, size, base })
        }
    }
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
    choose(
        placement,
        len,
        bounds,
        |s, e| regions.is_free(s, e),
        |len, bounds| regions.find_gap_topdown(len, bounds),
    )
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

    /// Review (issue 19): Linux x86's hint rules (`arch_get_unmapped_area_topdown`:
    /// `mmap_address_hint_valid`, then `!vma || addr + len <= vm_start_gap(vma)`) at the edges
    /// the differential test draws rarely: a hint ending exactly at the top or at a region's
    /// start, a hint starting at a region's end, a hint overlapping a region by one page either
    /// way, and lengths at the bound.
    #[test]
    fn hints_and_lengths_at_the_edges_are_placed_like_linux() {
        let mut s = BTreeStore::default();
        let top = B.max_addr;
        assert_eq!(
            find_locked(&s, Placement::Hint(top - 2 * P), 2 * P, B),
            Ok(top - 2 * P)
        );
        assert_eq!(
            find_locked(&s, Placement::Hint(top - P), 2 * P, B),
            Ok(top - 2 * P)
        );
        map(&mut s, 0x30_0000, 0x30_2000);
        // Ends exactly at the region: free.
        assert_eq!(
            find_locked(&s, Placement::Hint(0x2f_e000), 2 * P, B),
            Ok(0x2f_e000)
        );
        // Starts exactly at its end: free.
        assert_eq!(
            find_locked(&s, Placement::Hint(0x30_2000), 2 * P, B),
            Ok(0x30_2000)
        );
        // One page into it from below, or from inside: top-down.
        assert_eq!(
            find_locked(&s, Placement::Hint(0x2f_f000), 2 * P, B),
            Ok(top - 2 * P)
        );
        assert_eq!(
            find_locked(&s, Placement::Hint(0x30_1000), 2 * P, B),
            Ok(top - 2 * P)
        );
        // A region at the very top: the search goes below it.
        map(&mut s, top - P, top);
        assert_eq!(find_locked(&s, Placement::Anywhere, P, B), Ok(top - 2 * P));
        assert_eq!(
            find_locked(&s, Placement::Hint(top - P), P, B),
            Ok(top - 2 * P)
        );
        // The whole space: only from min_addr; one page more is ENOMEM.
        let e = BTreeStore::default();
        let all = B.max_addr - B.min_addr;
        assert_eq!(find_locked(&e, Placement::Anywhere, all, B), Ok(B.min_addr));
        assert_eq!(
            find_locked(&e, Placement::Hint(B.min_addr + P), all, B),
            Ok(B.min_addr)
        );
        assert_eq!(
            find_locked(&e, Placement::Anywhere, all + P, B)
                .unwrap_err()
                .errno(),
            libc::ENOMEM
        );
        assert_eq!(
            find_locked(&e, Placement::Hint(B.min_addr), B.max_addr, B)
                .unwrap_err()
                .errno(),
            libc::ENOMEM
        );
    }
}
