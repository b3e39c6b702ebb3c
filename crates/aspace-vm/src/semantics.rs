//! Argument validation and Linux's rules for `mmap`, `munmap`, `mprotect` and `madvise`, as pure
//! functions shared by every design.
//!
//! Each `check_*` function turns raw system-call arguments into a validated request, or the
//! errno Linux returns for them, **in Linux's order of checks** (so that an argument list with two
//! faults gets the same errno as from the kernel). The designs then apply the request to their
//! region set; the parts of Linux's rules that need the region set (placement, `EEXIST`, holes,
//! `max_map_count`) are documented here and implemented by `region.rs` and the designs.
//!
//! Sources: Linux 6.x `mm/mmap.c` (`do_mmap`, `__get_unmapped_area`,
//! `arch_get_unmapped_area_topdown`, `round_hint_to_min`), `mm/vma.c` (`do_vmi_munmap`),
//! `mm/mprotect.c` (`do_mprotect_pkey`), `mm/madvise.c` (`do_madvise`, `madvise_walk_vmas`).
//! Every rule marked *verified* was checked with a small libc program against the kernel of the
//! build machine (Linux 6.18, x86-64, run as root; `/tmp/e_exp/exp*.c` during development):
//!
//! `mmap`
//! - *verified*: not `MAP_ANONYMOUS` (no file here) is `EBADF`, checked before everything else
//!   (`mmap(len = 0, MAP_PRIVATE)` is `EBADF`, not `EINVAL`).
//! - *verified*: `len == 0` is `EINVAL`; a length that overflows when rounded up to pages
//!   (`-1`, `-4096`) or is larger than the address space is `ENOMEM`.
//! - *verified*: unknown `prot` bits are **ignored** by `mmap` (`0x100`, `PROT_SEM`,
//!   `PROT_GROWSDOWN` all succeed); only the known bits are stored.
//! - *verified*: unknown flag bits are ignored for `MAP_PRIVATE`/`MAP_SHARED`
//!   (`0x200000`, `0x80000000` succeed and the region merges like one without them).
//! - *verified*: the mapping type (`flags & 0xf`) is checked **after** placement: no type, or
//!   `MAP_SHARED_VALIDATE` for an anonymous mapping (the kernel's anonymous `switch` has no case
//!   for it), is `EINVAL`, but `MAP_FIXED_NOREPLACE` over a mapping with no type is `EEXIST`.
//! - *verified*: `MAP_FIXED`/`MAP_FIXED_NOREPLACE` with `addr + len` past the top is `ENOMEM`
//!   (even when `addr` is also unaligned); an unaligned fixed `addr` is `EINVAL`.
//! - `MAP_FIXED` below `mmap_min_addr` is `EPERM` for an unprivileged process
//!   (`cap_mmap_addr`); *verified* that root (CAP_SYS_RAWIO) may map there. The address space
//!   models an unprivileged process: [`VmError::PermissionDenied`].
//! - *verified*: a hint is rounded down to a page, raised to `mmap_min_addr` when below it, and
//!   honoured when `[hint, hint + len)` is free and inside the space; otherwise the search runs
//!   top-down from the top of the space (like `arch_get_unmapped_area_topdown`).
//! - *verified*: `MAP_NORESERVE`, `MAP_STACK` and `MAP_SYNC` regions do not merge with regions
//!   without them (they set `VM_NORESERVE` / `VM_NOHUGEPAGE` / `VM_SYNC`; `MAP_SYNC` is recorded
//!   on private and shared anonymous mappings alike, smaps shows `sf`); `MAP_POPULATE` regions do.
//! - *verified*: `MAP_NONBLOCK` cancels `MAP_POPULATE` (`mincore` after `MAP_POPULATE`: `1111`;
//!   with `MAP_NONBLOCK` too: `0000`), so such a region gets no `anon_vma` at `mmap`.
//! - *verified*: `MAP_FIXED`/`MAP_FIXED_NOREPLACE` at an address in the top page of the 64-bit
//!   space (`addr > 2^64 - 4096`) fails with errno `2^64 - addr`: `get_unmapped_area` returns
//!   the fixed address and its caller reads it as an error code (`0xffff_ffff_ffff_ffff` is
//!   `EPERM`, `..._fff4` `ENOMEM`, `..._f001` errno 4095); `0xffff_ffff_ffff_f000` is `ENOMEM`.
//!   The whole class (issue 19; every combination of address `-1`..`-4095`, lengths around 0,
//!   `TASK_SIZE` and 2^64, all sixteen mapping types, every flag, protections, offsets, fd -1,
//!   checked against Linux 6.18 with a libc program): after `EBADF` (not anonymous) and
//!   `EINVAL` (unaligned offset), only three checks come before it: `len == 0` is `EINVAL`, a
//!   length that overflows when rounded up to pages or exceeds `TASK_SIZE` (`2^47 - 4096`, not
//!   the space's own `max_addr`) is `ENOMEM`; everything else (the type, `EEXIST`, the space's
//!   top, alignment, `mmap_min_addr`, `MAP_GROWSDOWN`, `MAP_LOCKED`, `MAP_32BIT`, unknown
//!   bits) comes after, so the errno is `-addr`. The one exception is `MAP_HUGETLB`, whose
//!   length is rounded to huge pages first (`EINVAL`/`ENOMEM`; unsupported here: `EINVAL`).
//! - *verified*: user space ends at `2^47 - 4096` (`TASK_SIZE`): `MAP_FIXED` of the page below
//!   it succeeds, of `[2^47 - 4096, 2^47)` is `ENOMEM` (the default `max_addr`).
//! - *verified*: `MAP_32BIT` and `MAP_ABOVE4G` are ignored with `MAP_FIXED`; `MAP_DENYWRITE`,
//!   `MAP_EXECUTABLE`, `MAP_UNINITIALIZED` (not configured) and the `MAP_HUGE_*` size bits
//!   without `MAP_HUGETLB` are ignored (the region merges with a plain neighbour).
//! - Flags Linux knows that change behaviour this crate does not model (`MAP_GROWSDOWN`,
//!   `MAP_LOCKED`, `MAP_HUGETLB`, a `MAP_32BIT` search, the `MAP_DROPPABLE` type) are `EINVAL`
//!   here: a documented deviation, never a silent one (the differential generator does not draw
//!   them). `MAP_ABOVE4G` without `MAP_FIXED` is accepted and does not restrict the search.
//!
//! `munmap` (*verified*): unaligned `addr`, `len == 0`, `addr` past the top or `len` past the top
//! (including overflow) are `EINVAL`; unmapping nothing succeeds.
//!
//! `mprotect` (*verified*): unaligned `addr` is `EINVAL` first; then `len == 0` succeeds **even
//! with unknown prot bits**; a rounded length that overflows is `ENOMEM`; then unknown prot bits
//! are `EINVAL` (`PROT_SEM` is accepted and ignored on x86-64); then `ENOMEM` if `addr` is not
//! mapped; `PROT_GROWSDOWN` is `ENOMEM` when no region overlaps the range and `EINVAL` when one
//! does (none grows down here; found by the differential test); `PROT_GROWSUP` is `EINVAL` when
//! a region contains `addr` (x86-64 has no `VM_GROWSUP`) and `ENOMEM` otherwise, even when a
//! region starts later in the range (*verified*; aspace used to ignore the bit). `mmap` ignores
//! both bits (*verified*). Over a hole, Linux
//! **applies the protection to the regions before the hole and then fails with `ENOMEM`**
//! (*verified*: the first page became `r--` and the page after the hole stayed `rw-`).
//!
//! `madvise` (*verified*): unknown advice is `EINVAL` first (even with `len == 0`), then unaligned
//! `addr` is `EINVAL`, a length whose rounding or end overflows is `EINVAL`, `len == 0`
//! succeeds; then the advice is applied to every mapped part of the range and `ENOMEM` is returned
//! if any part was unmapped (*verified*: `MADV_DONTNEED` over `[page, hole, page]` zeroed both
//! pages and returned `ENOMEM`; any advice, `MADV_NORMAL` included, on an unmapped range is
//! `ENOMEM`). `MADV_DONTNEED` on a shared anonymous region keeps its contents (*verified*: shmem
//! backs them), so it is a no-op there. Advice Linux knows but this crate does not model
//! (`MADV_FREE`, `MADV_REMOVE`, ...) is `EINVAL` here (documented deviation).
//!
//! `max_map_count`: this crate refuses (`ENOMEM`, nothing changed) any call whose **resulting**
//! region count, after splits and merges, would exceed the limit: the invariant Linux's checks
//! approximate, kept on purpose (a documented deviation at the limit). Linux checks per step
//! (*verified* on 6.18 by filling a process to `max_map_count` = 65,530 VMAs):
//! - `mmap` is refused when `map_count > max_map_count` **before** it does anything, so it can
//!   create one region over the limit (at 65,530 an isolated `mmap` succeeded: 65,531; at 65,531
//!   even an `mmap` that would merge was refused); `MAP_FIXED` over the middle of a region needs
//!   `map_count < max` for its split, then adds the new region unchecked (65,529 -> 65,531).
//! - `munmap` of the middle of a region is refused at `map_count >= max`; of an end, never.
//! - `mprotect` splits region by region, each split refused at `map_count >= max`, and a refusal
//!   keeps what came before it: at 65,529, `mprotect` of the middle of `[0, 8)` pages made the
//!   first split (`[0, 2)` and `[2, 8)`, both `rw-p`, left unmerged) and failed at the second.
//! - `madvise` that changes region flags (`MADV_RANDOM`, `MADV_SEQUENTIAL`, `MADV_NORMAL`) is
//!   refused like `mprotect` but with `EAGAIN`.
//!
//! Reproducing these needs adjacent regions with equal attributes left unmerged and per-split
//! checks inside the designs' region edit; the differential test cannot lower the kernel's limit
//! without changing the machine-wide `vm.max_map_count` (which other processes on a shared
//! machine would see), so the kernel side of these rules is pinned by the program above, quoted
//! here, rather than by the random test.
//!
//! Not for: anything that needs the region set or memory (see `region.rs`, `designs/`).

use crate::config::DEFAULT_MAX_ADDR;
use crate::error::{Limit, VmError};
use crate::types::{Advice, MapFlags, Prot, Sharing, PAGE_SIZE};
use std::ops::Range;

/// `MAP_TYPE`: the low bits that select shared/private.
const MAP_TYPE: u32 = 0x0f;
/// `MAP_32BIT` (x86-64): place below 2 GiB. Not modelled.
const MAP_32BIT: u32 = 0x40;
/// `MAP_GROWSDOWN`: a stack that grows on faults below it. Not modelled.
const MAP_GROWSDOWN: u32 = 0x100;
/// `MAP_LOCKED`: `mlock` the mapping. Not modelled.
const MAP_LOCKED: u32 = 0x2000;
/// `MAP_STACK`: sets `VM_NOHUGEPAGE`, which only matters here for merging.
const MAP_STACK: u32 = 0x2_0000;
/// `MAP_HUGETLB`: huge pages. Not modelled.
const MAP_HUGETLB: u32 = 0x4_0000;
/// `MAP_NONBLOCK`: with `MAP_POPULATE`, do not populate (`do_mmap` populates only when
/// `flags & (MAP_POPULATE | MAP_NONBLOCK) == MAP_POPULATE`).
const MAP_NONBLOCK: u32 = 0x1_0000;
/// `MAP_SYNC`: sets `VM_SYNC` on an anonymous mapping (only `MAP_SHARED_VALIDATE` file
/// mappings validate it), which only matters here for merging.
const MAP_SYNC: u32 = 0x8_0000;
/// `PROT_SEM`: accepted and ignored by x86-64's `arch_validate_prot`.
const PROT_SEM: u32 = 0x8;
/// `PROT_GROWSDOWN`: only valid on a `VM_GROWSDOWN` region (none exist here).
const PROT_GROWSDOWN: u32 = 0x0100_0000;
/// `PROT_GROWSUP`: only valid on a `VM_GROWSUP` region, which x86-64 cannot have.
const PROT_GROWSUP: u32 = 0x0200_0000;

/// Region flag bits that only decide whether two neighbours merge (Linux's `vm_flags` other
/// than the access bits). Stored in each region.
pub(crate) mod vm_flags {
    /// `VM_NORESERVE` (from `MAP_NORESERVE`).
    pub(crate) const NORESERVE: u8 = 1 << 0;
    /// `VM_NOHUGEPAGE` (from `MAP_STACK`).
    pub(crate) const STACK: u8 = 1 << 1;
    /// `VM_RAND_READ` (from `MADV_RANDOM`).
    pub(crate) const RAND_READ: u8 = 1 << 2;
    /// `VM_SEQ_READ` (from `MADV_SEQUENTIAL`).
    pub(crate) const SEQ_READ: u8 = 1 << 3;
    /// `VM_ACCOUNT`: a private writable mapping without `MAP_NORESERVE` is charged against
    /// overcommit (`accountable_mapping`). `mprotect` adding write sets it; `mprotect` dropping
    /// write clears it only while the region has no anon identity (Linux 6.x `mprotect_fixup`),
    /// so a region that was written and then made read-only stays apart from a fresh read-only
    /// neighbour in `/proc/self/maps` (found by the exact differential comparison, seed 440).
    pub(crate) const ACCOUNT: u8 = 1 << 4;
    /// `VM_SYNC` (from `MAP_SYNC`, which Linux records on anonymous mappings too).
    pub(crate) const SYNC: u8 = 1 << 5;

    /// The `VM_ACCOUNT` bit after `mprotect(prot)` of a region with these attributes.
    pub(crate) fn after_mprotect(
        flags: u8,
        prot: crate::types::Prot,
        sharing: crate::types::Sharing,
        has_anon: bool,
    ) -> u8 {
        if prot.contains(crate::types::Prot::WRITE) {
            if sharing == crate::types::Sharing::Private && flags & NORESERVE == 0 {
                return flags | ACCOUNT;
            }
            flags
        } else if !has_anon {
            flags & !ACCOUNT
        } else {
            flags
        }
    }
}

/// The bounds of the address space: `[min_addr, max_addr)` (Linux's `mmap_min_addr` and
/// `TASK_SIZE`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Bounds {
    /// Lowest mappable address.
    pub(crate) min_addr: u64,
    /// One past the highest mappable address.
    pub(crate) max_addr: u64,
}

/// Where an `mmap` goes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Placement {
    /// Anywhere (a zero hint): top-down search.
    Anywhere,
    /// At the (page-aligned, at least `min_addr`) hint if free, else anywhere.
    Hint(u64),
    /// Exactly here, replacing what is there (`MAP_FIXED`).
    Fixed(u64),
    /// Exactly here, `EEXIST` if anything is there (`MAP_FIXED_NOREPLACE`).
    NoReplace(u64),
}

/// A validated `mmap` request.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct MmapRequest {
    /// Where.
    pub(crate) placement: Placement,
    /// Length, a positive multiple of the page size, at most the space size.
    pub(crate) len: u64,
    /// The protection with unknown bits dropped (Linux ignores them).
    pub(crate) prot: Prot,
    /// The mapping type, or the error Linux gives for it **after** placement.
    pub(crate) sharing: Result<Sharing, VmError>,
    /// `vm_flags` bits of the new region.
    pub(crate) flags: u8,
    /// `MAP_POPULATE`: fault every page in (failures ignored, like Linux).
    pub(crate) populate: bool,
}

/// `len` rounded up to whole pages, `None` if that overflows.
pub(crate) fn page_align(len: u64) -> Option<u64> {
    len.checked_add(PAGE_SIZE - 1).map(|l| l & !(PAGE_SIZE - 1))
}

/// Whether `addr` is page aligned.
pub(crate) fn is_aligned(addr: u64) -> bool {
    addr % PAGE_SIZE == 0
}

/// The error of `mmap(addr, len, ..)` with `MAP_FIXED` or `MAP_FIXED_NOREPLACE` (without
/// `MAP_HUGETLB`) at an address in the top page (`addr > 2^64 - 4096`), whatever the protection,
/// the mapping type and the other flags (module doc): `EINVAL` for a zero length, `ENOMEM` for a
/// length that overflows when rounded up to pages or exceeds Linux's `TASK_SIZE`
/// (`__get_unmapped_area`'s first check), else errno `-addr` ([`VmError::TopPageAddress`]).
fn top_page_error(addr: u64, len: u64) -> VmError {
    if len == 0 {
        return VmError::InvalidArgument("mmap length is zero");
    }
    match page_align(len) {
        Some(l) if l != 0 && l <= DEFAULT_MAX_ADDR => VmError::TopPageAddress(addr),
        _ => VmError::OutOfMemory(Limit::AddressSpace),
    }
}

/// Validates `mmap(addr, len, prot, flags, -1, 0)` up to placement (Linux's `ksys_mmap_pgoff`,
/// `do_mmap` and the fixed-address part of `__get_unmapped_area`, in that order).
///
/// # Errors
/// `EBADF` (not anonymous), `EINVAL` (zero length, unaligned fixed address, unsupported flag),
/// `ENOMEM` (length overflow or larger than the space, fixed range past the top), `EPERM` (fixed
/// below `min_addr`).
pub(crate) fn check_mmap(
    addr: u64,
    len: u64,
    prot: Prot,
    flags: MapFlags,
    bounds: Bounds,
) -> Result<MmapRequest, VmError> {
    let bits = flags.bits();
    if !flags.contains(MapFlags::ANONYMOUS) {
        return Err(VmError::BadFile);
    }
    let fixed = bits & (MapFlags::FIXED.bits() | MapFlags::FIXED_NOREPLACE.bits()) != 0;
    if fixed && bits & MAP_HUGETLB == 0 && addr > u64::MAX - (PAGE_SIZE - 1) {
        // Before every check that needs the space, the flags or the type (module doc).
        return Err(top_page_error(addr, len));
    }
    if bits & (MAP_GROWSDOWN | MAP_LOCKED | MAP_HUGETLB) != 0 || (!fixed && bits & MAP_32BIT != 0) {
        return Err(VmError::InvalidArgument(
            "MAP_GROWSDOWN, MAP_LOCKED, MAP_HUGETLB and a MAP_32BIT search are not supported",
        ));
    }
    if len == 0 {
        return Err(VmError::InvalidArgument("mmap length is zero"));
    }
    let len = match page_align(len) {
        Some(l) if l != 0 => l,
        _ => return Err(VmError::OutOfMemory(Limit::AddressSpace)),
    };
    let space = bounds.max_addr;
    if len > space {
        return Err(VmError::OutOfMemory(Limit::AddressSpace));
    }
    let placement = if fixed {
        if addr > space - len {
            return Err(VmError::OutOfMemory(Limit::AddressSpace));
        }
        if !is_aligned(addr) {
            return Err(VmError::InvalidArgument(
                "MAP_FIXED address is not page aligned",
            ));
        }
        if addr < bounds.min_addr {
            return Err(VmError::PermissionDenied);
        }
        if flags.contains(MapFlags::FIXED_NOREPLACE) {
            Placement::NoReplace(addr)
        } else {
            Placement::Fixed(addr)
        }
    } else {
        // round_hint_to_min: page-align down, raise a nonzero hint below mmap_min_addr.
        let hint = addr & !(PAGE_SIZE - 1);
        if hint == 0 {
            Placement::Anywhere
        } else {
            Placement::Hint(hint.max(bounds.min_addr))
        }
    };
    let sharing = match bits & MAP_TYPE {
        0x01 => Ok(Sharing::Shared),
        0x02 => Ok(Sharing::Private),
        _ => Err(VmError::InvalidArgument(
            "mapping type must be MAP_SHARED or MAP_PRIVATE for anonymous memory",
        )),
    };
    let mut vm = 0;
    if flags.contains(MapFlags::NORESERVE) {
        vm |= vm_flags::NORESERVE;
    }
    if bits & MAP_STACK != 0 {
        vm |= vm_flags::STACK;
    }
    if bits & MAP_SYNC != 0 {
        vm |= vm_flags::SYNC;
    }
    if sharing == Ok(Sharing::Private)
        && prot.contains(Prot::WRITE)
        && !flags.contains(MapFlags::NORESERVE)
    {
        vm |= vm_flags::ACCOUNT;
    }
    Ok(MmapRequest {
        placement,
        len,
        prot: Prot::from_bits_retain(prot.bits() & Prot::KNOWN.bits()),
        sharing,
        flags: vm,
        populate: bits & (MapFlags::POPULATE.bits() | MAP_NONBLOCK) == MapFlags::POPULATE.bits(),
    })
}

/// Validates `munmap(addr, len)` (`do_vmi_munmap`): the page range to unmap.
///
/// # Errors
/// `EINVAL` for an unaligned address, a zero length, or a range past the top.
pub(crate) fn check_munmap(addr: u64, len: u64, bounds: Bounds) -> Result<Range<u64>, VmError> {
    let top = bounds.max_addr;
    if !is_aligned(addr) || addr > top || len > top - addr {
        return Err(VmError::InvalidArgument(
            "munmap: unaligned address or range past the top",
        ));
    }
    // len <= top - addr <= 2^57, so rounding cannot overflow.
    let end = addr + page_align(len).unwrap_or(0);
    if end == addr {
        return Err(VmError::InvalidArgument("munmap length is zero"));
    }
    Ok(addr..end)
}

/// Validates `mprotect(addr, len, prot)` (`do_mprotect_pkey`): `Ok(None)` for a zero length (a
/// successful no-op), else the page range and the protection to apply.
///
/// # Errors
/// `EINVAL` for an unaligned address or unknown prot bits; `ENOMEM` when the range overflows.
pub(crate) fn check_mprotect(
    addr: u64,
    len: u64,
    prot: Prot,
) -> Result<Option<(Range<u64>, Prot)>, VmError> {
    let bits = prot.bits();
    if bits & PROT_GROWSDOWN != 0 && bits & PROT_GROWSUP != 0 {
        return Err(VmError::InvalidArgument(
            "PROT_GROWSDOWN and PROT_GROWSUP together",
        ));
    }
    if !is_aligned(addr) {
        return Err(VmError::InvalidArgument(
            "mprotect address is not page aligned",
        ));
    }
    if len == 0 {
        return Ok(None);
    }
    let end = match page_align(len).and_then(|l| addr.checked_add(l)) {
        Some(e) if e > addr => e,
        _ => return Err(VmError::OutOfMemory(Limit::AddressSpace)),
    };
    // arch_validate_prot (x86-64): READ | WRITE | EXEC | SEM.
    if bits & !(Prot::KNOWN.bits() | PROT_SEM | PROT_GROWSDOWN | PROT_GROWSUP) != 0 {
        return Err(VmError::InvalidArgument("unknown protection bits"));
    }
    // PROT_GROWSDOWN and PROT_GROWSUP are kept: whether they are EINVAL (no region here grows)
    // or ENOMEM (nothing there) needs the region set; see `grows_error`.
    Ok(Some((
        addr..end,
        Prot::from_bits_retain(bits & (Prot::KNOWN.bits() | PROT_GROWSDOWN | PROT_GROWSUP)),
    )))
}

/// For an `mprotect` whose prot carries `PROT_GROWSDOWN` or `PROT_GROWSUP`: the error Linux
/// gives, given whether any region overlaps the range and whether one contains its start
/// (`do_mprotect_pkey` finds the first region overlapping the range, none is `ENOMEM`; with
/// `PROT_GROWSDOWN` that region must grow down, else `EINVAL`; without it, a region starting
/// after `addr` is `ENOMEM`, and then with `PROT_GROWSUP` it must grow up, else `EINVAL`). No
/// region grows either way here (x86-64 has no `VM_GROWSUP` at all). `None` without the bits.
/// `PROT_GROWSDOWN`'s `ENOMEM` was found by the differential test; `PROT_GROWSUP`'s `EINVAL` by an
/// independent differential run (aspace ignored the bit).
pub(crate) fn grows_error(prot: Prot, overlaps: bool, covers_start: bool) -> Option<VmError> {
    let bits = prot.bits();
    if bits & (PROT_GROWSDOWN | PROT_GROWSUP) == 0 {
        None
    } else if !overlaps || (bits & PROT_GROWSDOWN == 0 && !covers_start) {
        Some(VmError::OutOfMemory(Limit::Hole))
    } else if bits & PROT_GROWSDOWN != 0 {
        Some(VmError::InvalidArgument(
            "PROT_GROWSDOWN on a region that does not grow down",
        ))
    } else {
        Some(VmError::InvalidArgument(
            "PROT_GROWSUP on a region that does not grow up",
        ))
    }
}

/// What an accepted `madvise` does to the region set and memory.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum AdviceEffect {
    /// Nothing beyond the hole check (`NORMAL` on regions without read hints, `WILLNEED`).
    None,
    /// Drop private pages (`DONTNEED`).
    DontNeed,
    /// Set the region's read-hint flags to this value (`NORMAL` = 0, `RANDOM`, `SEQUENTIAL`).
    ReadHint(u8),
}

/// Validates `madvise(addr, len, advice)` (`do_madvise`): `Ok(None)` for a zero length, else the
/// range and the effect.
///
/// # Errors
/// `EINVAL` for unknown advice, an unaligned address, or a range that overflows.
pub(crate) fn check_madvise(
    addr: u64,
    len: u64,
    advice: Advice,
) -> Result<Option<(Range<u64>, AdviceEffect)>, VmError> {
    let effect = match advice {
        Advice::NORMAL => AdviceEffect::ReadHint(0),
        Advice::RANDOM => AdviceEffect::ReadHint(vm_flags::RAND_READ),
        Advice::SEQUENTIAL => AdviceEffect::ReadHint(vm_flags::SEQ_READ),
        Advice::WILLNEED => AdviceEffect::None,
        Advice::DONTNEED => AdviceEffect::DontNeed,
        _ => return Err(VmError::InvalidArgument("unknown or unsupported advice")),
    };
    if !is_aligned(addr) {
        return Err(VmError::InvalidArgument(
            "madvise address is not page aligned",
        ));
    }
    let rounded = match page_align(len) {
        Some(l) if len == 0 || l != 0 => l,
        _ => return Err(VmError::InvalidArgument("madvise length overflows")),
    };
    let end = addr
        .checked_add(rounded)
        .ok_or(VmError::InvalidArgument("madvise range overflows"))?;
    if end == addr {
        return Ok(None);
    }
    Ok(Some((addr..end, effect)))
}

#[cfg(test)]
mod tests {
    use super::*;

    const B: Bounds = Bounds {
        min_addr: 0x1_0000,
        max_addr: 1 << 47,
    };
    const PA: MapFlags = MapFlags::PRIVATE_ANONYMOUS;

    fn errno<T: std::fmt::Debug>(r: Result<T, VmError>) -> i32 {
        r.expect_err("expected an error").errno()
    }

    #[test]
    fn mmap_without_anonymous_is_ebadf_before_zero_length() {
        assert_eq!(
            errno(check_mmap(0, 0, Prot::READ, MapFlags::PRIVATE, B)),
            libc::EBADF
        );
    }

    #[test]
    fn mmap_zero_length_is_einval_and_overflow_is_enomem() {
        assert_eq!(errno(check_mmap(0, 0, Prot::READ, PA, B)), libc::EINVAL);
        assert_eq!(
            errno(check_mmap(0, u64::MAX, Prot::READ, PA, B)),
            libc::ENOMEM
        );
        assert_eq!(
            errno(check_mmap(0, u64::MAX - 4095, Prot::READ, PA, B)),
            libc::ENOMEM
        );
        assert_eq!(
            errno(check_mmap(0, (1 << 47) + 4096, Prot::READ, PA, B)),
            libc::ENOMEM
        );
    }

    #[test]
    fn mmap_ignores_unknown_prot_and_flag_bits() {
        let r = check_mmap(
            0,
            1,
            Prot::from_bits_retain(0x103),
            MapFlags::from_bits_retain(0x22 | 0x20_0000 | 0x8000_0000),
            B,
        )
        .unwrap();
        assert_eq!(r.prot, Prot::READ_WRITE);
        assert_eq!(r.len, PAGE_SIZE);
        assert_eq!(r.sharing, Ok(Sharing::Private));
        assert_eq!(r.placement, Placement::Anywhere);
    }

    #[test]
    fn mmap_bad_type_is_reported_after_placement() {
        let r = check_mmap(0, 4096, Prot::READ, MapFlags::ANONYMOUS, B).unwrap();
        assert_eq!(r.sharing.unwrap_err().errno(), libc::EINVAL);
        let r = check_mmap(0, 4096, Prot::READ, MapFlags::from_bits_retain(0x23), B).unwrap();
        assert_eq!(r.sharing.unwrap_err().errno(), libc::EINVAL);
    }

    #[test]
    fn mmap_fixed_checks_top_then_alignment_then_min_addr() {
        let top = 1u64 << 47;
        let fixed = PA | MapFlags::FIXED;
        assert_eq!(
            errno(check_mmap(top - 4096 + 1, 8192, Prot::READ, fixed, B)),
            libc::ENOMEM
        );
        assert_eq!(
            errno(check_mmap(0x20_0001, 4096, Prot::READ, fixed, B)),
            libc::EINVAL
        );
        assert_eq!(
            errno(check_mmap(0x1000, 4096, Prot::READ, fixed, B)),
            libc::EPERM
        );
        assert_eq!(
            check_mmap(
                top - 4096,
                4096,
                Prot::READ,
                PA | MapFlags::FIXED_NOREPLACE,
                B
            )
            .unwrap()
            .placement,
            Placement::NoReplace(top - 4096)
        );
    }

    #[test]
    fn mmap_fixed_in_the_top_page_is_minus_addr_after_only_the_length_checks() {
        let task_size = (1u64 << 47) - 4096;
        // Issue 19's case: a length past this space's top but below TASK_SIZE, shared, MAP_SYNC.
        let sync = MapFlags::from_bits_retain(
            MapFlags::SHARED.bits()
                | MapFlags::ANONYMOUS.bits()
                | MAP_SYNC
                | MapFlags::FIXED_NOREPLACE.bits(),
        );
        let small = Bounds {
            min_addr: 0x1_0000,
            max_addr: 0x100_0000,
        };
        let rw = Prot::READ | Prot::WRITE;
        assert_eq!(
            errno(check_mmap(u64::MAX, 0x5d40_0003_0001, rw, sync, small)),
            libc::EPERM
        );
        for addr in [u64::MAX, u64::MAX - 12, 0u64.wrapping_sub(4095)] {
            let want = addr.wrapping_neg() as i32;
            for ty in [0, 1, 2, 3, 4, 0xf] {
                for extra in [0, MAP_GROWSDOWN, MAP_LOCKED, MAP_32BIT, MAP_SYNC, 1 << 30] {
                    for fixed in [MapFlags::FIXED, MapFlags::FIXED_NOREPLACE] {
                        let flags = MapFlags::from_bits_retain(
                            ty | extra | fixed.bits() | MapFlags::ANONYMOUS.bits(),
                        );
                        let e = |len| errno(check_mmap(addr, len, Prot::NONE, flags, small));
                        assert_eq!(e(0), libc::EINVAL);
                        for len in [1, 4096, 0x5d40_0003_0001, task_size - 1, task_size] {
                            assert_eq!(e(len), want, "{addr:#x} {len:#x} {flags:?}");
                        }
                        for len in [task_size + 1, 1 << 48, u64::MAX - 4095, u64::MAX] {
                            assert_eq!(e(len), libc::ENOMEM, "{addr:#x} {len:#x} {flags:?}");
                        }
                    }
                }
            }
        }
        // Not fixed: a hint, ignored; below the top page: the space's checks.
        assert!(check_mmap(u64::MAX, 4096, Prot::NONE, PA, small).is_ok());
        let fixed = PA | MapFlags::FIXED;
        assert_eq!(
            errno(check_mmap(
                0u64.wrapping_sub(4096),
                4096,
                Prot::NONE,
                fixed,
                small
            )),
            libc::ENOMEM
        );
        // Not anonymous comes first.
        assert_eq!(
            errno(check_mmap(
                u64::MAX,
                4096,
                Prot::NONE,
                MapFlags::FIXED,
                small
            )),
            libc::EBADF
        );
    }

    #[test]
    fn mmap_hint_is_rounded_down_and_raised_to_min_addr() {
        let r = check_mmap(0x1001, 4096, Prot::READ, PA, B).unwrap();
        assert_eq!(r.placement, Placement::Hint(0x1_0000));
        let r = check_mmap(0x20_1234, 4096, Prot::READ, PA, B).unwrap();
        assert_eq!(r.placement, Placement::Hint(0x20_1000));
    }

    #[test]
    fn mmap_unmodelled_flags_are_einval() {
        for f in [MAP_GROWSDOWN, MAP_LOCKED, MAP_HUGETLB] {
            let flags = MapFlags::from_bits_retain(PA.bits() | f);
            assert_eq!(
                errno(check_mmap(0, 4096, Prot::READ, flags, B)),
                libc::EINVAL
            );
        }
    }

    #[test]
    fn mmap_noreserve_and_stack_become_region_flags() {
        let r = check_mmap(0, 1, Prot::READ, PA | MapFlags::NORESERVE, B).unwrap();
        assert_eq!(r.flags, vm_flags::NORESERVE);
        let r = check_mmap(
            0,
            1,
            Prot::READ,
            MapFlags::from_bits_retain(0x22 | MAP_STACK),
            B,
        )
        .unwrap();
        assert_eq!(r.flags, vm_flags::STACK);
    }

    #[test]
    fn munmap_rejects_zero_unaligned_and_past_the_top() {
        assert_eq!(errno(check_munmap(0x10000, 0, B)), libc::EINVAL);
        assert_eq!(errno(check_munmap(0x10001, 4096, B)), libc::EINVAL);
        assert_eq!(errno(check_munmap(0x10000, u64::MAX, B)), libc::EINVAL);
        assert_eq!(errno(check_munmap(1 << 47, 4096, B)), libc::EINVAL);
        assert_eq!(check_munmap(0x10000, 1, B), Ok(0x10000..0x11000));
    }

    #[test]
    fn mprotect_zero_length_succeeds_even_with_unknown_bits() {
        assert_eq!(
            check_mprotect(0x10000, 0, Prot::from_bits_retain(0x100)),
            Ok(None)
        );
        assert_eq!(errno(check_mprotect(0x10001, 0, Prot::READ)), libc::EINVAL);
    }

    #[test]
    fn mprotect_overflow_is_enomem_before_unknown_bits() {
        assert_eq!(
            errno(check_mprotect(
                0x10000,
                u64::MAX,
                Prot::from_bits_retain(0x100)
            )),
            libc::ENOMEM
        );
        assert_eq!(
            errno(check_mprotect(0x10000, 4096, Prot::from_bits_retain(0x100))),
            libc::EINVAL
        );
    }

    #[test]
    fn mprotect_accepts_prot_sem_and_rejects_growsdown() {
        assert_eq!(
            check_mprotect(0x10000, 1, Prot::from_bits_retain(0xb)),
            Ok(Some((0x10000..0x11000, Prot::READ_WRITE)))
        );
        let (_, p) = check_mprotect(0x10000, 1, Prot::from_bits_retain(PROT_GROWSDOWN | 1))
            .unwrap()
            .unwrap();
        assert_eq!(grows_error(p, true, false).unwrap().errno(), libc::EINVAL);
        assert_eq!(grows_error(p, false, false).unwrap().errno(), libc::ENOMEM);
        assert_eq!(grows_error(Prot::READ, true, true), None);
    }

    #[test]
    fn mprotect_growsup_is_einval_on_a_region_at_addr_and_enomem_otherwise() {
        let (_, p) = check_mprotect(0x10000, 1, Prot::from_bits_retain(PROT_GROWSUP | 1))
            .unwrap()
            .unwrap();
        assert_eq!(grows_error(p, true, true).unwrap().errno(), libc::EINVAL);
        assert_eq!(grows_error(p, true, false).unwrap().errno(), libc::ENOMEM);
        assert_eq!(grows_error(p, false, false).unwrap().errno(), libc::ENOMEM);
        // Both bits: EINVAL before anything else, even unaligned.
        let both = Prot::from_bits_retain(PROT_GROWSUP | PROT_GROWSDOWN);
        assert_eq!(errno(check_mprotect(0x10001, 0, both)), libc::EINVAL);
    }

    #[test]
    fn mmap_fixed_in_the_top_page_fails_with_minus_addr() {
        for (addr, e) in [
            (u64::MAX, libc::EPERM),
            (u64::MAX - 11, libc::ENOMEM),
            (u64::MAX - 21, libc::EINVAL),
            (u64::MAX - 4094, 4095),
        ] {
            for f in [MapFlags::FIXED, MapFlags::FIXED_NOREPLACE] {
                assert_eq!(errno(check_mmap(addr, 4096, Prot::READ, PA | f, B)), e);
            }
        }
        // The page-aligned address below it is an ordinary address past the top.
        assert_eq!(
            errno(check_mmap(
                u64::MAX - 4095,
                4096,
                Prot::READ,
                PA | MapFlags::FIXED,
                B
            )),
            libc::ENOMEM
        );
        // The length is checked first.
        assert_eq!(
            errno(check_mmap(
                u64::MAX,
                1 << 48,
                Prot::READ,
                PA | MapFlags::FIXED,
                B
            )),
            libc::ENOMEM
        );
    }

    #[test]
    fn mmap_nonblock_cancels_populate() {
        let r = check_mmap(0, 1, Prot::READ, PA | MapFlags::POPULATE, B).unwrap();
        assert!(r.populate);
        let f = MapFlags::from_bits_retain(PA.bits() | MapFlags::POPULATE.bits() | MAP_NONBLOCK);
        assert!(!check_mmap(0, 1, Prot::READ, f, B).unwrap().populate);
    }

    #[test]
    fn mmap_sync_is_a_region_flag_on_anonymous_memory() {
        for t in [0x01, 0x02] {
            let f = MapFlags::from_bits_retain(t | 0x20 | MAP_SYNC);
            assert_eq!(
                check_mmap(0, 1, Prot::READ, f, B).unwrap().flags,
                vm_flags::SYNC
            );
        }
    }

    #[test]
    fn mmap_32bit_is_ignored_with_map_fixed_only() {
        let f = MapFlags::from_bits_retain(PA.bits() | MAP_32BIT);
        assert_eq!(errno(check_mmap(0, 1, Prot::READ, f, B)), libc::EINVAL);
        let r = check_mmap(0x20_0000, 1, Prot::READ, f | MapFlags::FIXED, B).unwrap();
        assert_eq!(r.placement, Placement::Fixed(0x20_0000));
        assert_eq!(r.flags, 0);
    }

    #[test]
    fn madvise_checks_advice_first_then_alignment_then_length() {
        assert_eq!(
            errno(check_madvise(0x10001, 0, Advice::from_raw(999))),
            libc::EINVAL
        );
        assert_eq!(
            errno(check_madvise(0x10001, 0, Advice::DONTNEED)),
            libc::EINVAL
        );
        assert_eq!(check_madvise(0x10000, 0, Advice::DONTNEED), Ok(None));
        assert_eq!(
            errno(check_madvise(0x10000, u64::MAX, Advice::DONTNEED)),
            libc::EINVAL
        );
        assert_eq!(
            errno(check_madvise(0x10000, u64::MAX - 4095, Advice::DONTNEED)),
            libc::EINVAL
        );
        assert_eq!(
            check_madvise(0x10000, 1, Advice::DONTNEED),
            Ok(Some((0x10000..0x11000, AdviceEffect::DontNeed)))
        );
    }
}
