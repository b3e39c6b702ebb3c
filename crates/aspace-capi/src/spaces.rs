//! The space entry points: `aspace_create`, `aspace_destroy`, `aspace_maps`, `aspace_stats`.
//!
//! `aspace_destroy` takes the space out of its table first (its handle is stale from then on,
//! and no new core can attach), then detaches every core attached through it (a core in use
//! by another thread is detached when that call returns: the slot lock waits for it), then
//! drops the space, which frees its memory once the last core is gone.
//!
//! Not for: the core entry points (`cores.rs`).

use crate::abi::{
    AspaceConfig, AspaceRegion, AspaceSpace, AspaceStats, ASPACE_MAP_PRIVATE, ASPACE_MAP_SHARED,
};
use crate::errno::{guard, guard_int, neg};
use crate::registry::{SpaceEntry, CORES, SPACES};
use aspace_vm::{AddressSpace, Design, RegionInfo, Sharing, Stats};
use std::ffi::CStr;

/// The builder `config` describes.
///
/// # Safety
/// `config.design` is NULL or a NUL-terminated string.
unsafe fn builder(config: &AspaceConfig) -> Result<aspace_vm::Builder, i32> {
    let mut b = AddressSpace::builder();
    if !config.design.is_null() {
        // SAFETY: non-null, and NUL-terminated by the caller's contract.
        let name = unsafe { CStr::from_ptr(config.design) };
        let design = name
            .to_str()
            .ok()
            .and_then(Design::from_name)
            .ok_or(libc::EINVAL)?;
        b = b.design(design);
    }
    if config.memory != 0 {
        b = b.memory(config.memory);
    }
    if config.min_addr != 0 || config.max_addr != 0 {
        b = b.address_range(config.min_addr, config.max_addr);
    }
    if config.max_cores != 0 {
        b = b.max_cores(config.max_cores as usize);
    }
    if config.max_map_count != 0 {
        b = b.max_map_count(config.max_map_count as usize);
    }
    Ok(b)
}

/// Builds a space and stores its handle in `*out`. `config` may be NULL (the default space: the
/// `interval` design, 256 MiB of frames).
///
/// Returns 0, `-EINVAL` (`out` NULL, an unknown design name, a configuration value out of
/// range), `-ENOMEM` (the kernel refused the frame reservation) or `-EMFILE` (too many spaces).
///
/// # Safety
/// `config` is NULL or points to a readable `AspaceConfig` whose `design` is NULL or a
/// NUL-terminated string; `out` is NULL or points to a writable `AspaceSpace`.
#[no_mangle]
pub unsafe extern "C" fn aspace_create(config: *const AspaceConfig, out: *mut AspaceSpace) -> i32 {
    guard_int(|| {
        if out.is_null() {
            return Err(libc::EINVAL);
        }
        let b = if config.is_null() {
            AddressSpace::builder()
        } else {
            // SAFETY: non-null and readable by the caller's contract; read unaligned, so a
            // packed copy works too.
            let config = unsafe { config.read_unaligned() };
            // SAFETY: `design` is NULL or NUL-terminated by the caller's contract.
            unsafe { builder(&config) }?
        };
        let space = b.build().map_err(|e| e.errno())?;
        let entry = Box::new(SpaceEntry {
            space,
            cores: Vec::new(),
        });
        let raw = SPACES.insert(entry).map_err(|(e, _)| e.errno())?;
        // SAFETY: non-null and writable by the caller's contract.
        unsafe { out.write_unaligned(AspaceSpace { raw }) };
        Ok(())
    })
}

/// Destroys a space: its handle and the handles of every core attached to it become stale
/// (`-EBADF` from then on), and its memory is freed.
///
/// Returns 0 or `-EBADF` (not a live space: destroying twice is this error, not a crash).
#[no_mangle]
pub extern "C" fn aspace_destroy(space: AspaceSpace) -> i32 {
    guard_int(|| {
        crate::open_session::outside_session()?;
        let entry = SPACES.remove(space.raw).map_err(|e| e.errno())?;
        for core in &entry.cores {
            // A core detached concurrently (its `aspace_detach` took it first) is already gone.
            let _ = CORES.remove(*core);
        }
        drop(entry);
        Ok(())
    })
}

fn region(r: &RegionInfo) -> AspaceRegion {
    AspaceRegion {
        start: r.start,
        end: r.end,
        prot: r.prot.bits() as i32,
        sharing: match r.sharing {
            Sharing::Private => ASPACE_MAP_PRIVATE,
            Sharing::Shared => ASPACE_MAP_SHARED,
        },
        offset: r.offset,
        inode: r.inode,
    }
}

/// The space's regions in address order, like `/proc/self/maps`: writes the first
/// `min(count, cap)` into `buf` and returns `count`, the number of regions (like `snprintf`: a
/// return above `cap` means the buffer was too small; call again with a larger one). `buf` may
/// be NULL when `cap` is 0.
///
/// Returns the count, `-EBADF` or `-EINVAL` (`buf` NULL with `cap` > 0, or `cap` too large).
///
/// # Safety
/// `buf` is NULL or points to `cap` writable `AspaceRegion`s.
#[no_mangle]
pub unsafe extern "C" fn aspace_maps(
    space: AspaceSpace,
    buf: *mut AspaceRegion,
    cap: usize,
) -> i64 {
    guard(i64::from, || {
        if (buf.is_null() && cap > 0) || cap > isize::MAX as usize / size_of::<AspaceRegion>() {
            return i64::from(neg(libc::EINVAL));
        }
        if let Err(e) = crate::open_session::outside_session() {
            return i64::from(neg(e));
        }
        let space = match SPACES.with(space.raw, |e| e.space.clone()) {
            Ok(s) => s,
            Err(e) => return i64::from(neg(e.errno())),
        };
        let maps = space.maps();
        for (i, r) in maps.iter().take(cap).enumerate() {
            // SAFETY: `i < cap` and `buf` points to `cap` writable records (caller's contract).
            unsafe { buf.add(i).write_unaligned(region(r)) };
        }
        maps.len() as i64
    })
}

fn stats(s: &Stats) -> AspaceStats {
    AspaceStats {
        faults: s.faults,
        fills: s.fills,
        shootdowns: s.shootdowns,
        shootdown_targets: s.shootdown_targets,
        shootdown_waits: s.shootdown_waits,
        shootdowns_received: s.shootdowns_received,
        tlb_hits: s.tlb_hits,
        tlb_misses: s.tlb_misses,
        frames_in_use: s.frames_in_use,
        frames_total: s.frames_total,
        page_tables: s.page_tables,
        page_table_bytes: s.page_table_bytes,
        metadata_bytes: s.metadata_bytes,
        regions: s.regions,
        cores: s.cores,
    }
}

/// Writes the space's counters into `*out`.
///
/// Returns 0, `-EBADF` or `-EINVAL` (`out` NULL).
///
/// # Safety
/// `out` is NULL or points to a writable `AspaceStats`.
#[no_mangle]
pub unsafe extern "C" fn aspace_stats(space: AspaceSpace, out: *mut AspaceStats) -> i32 {
    guard_int(|| {
        if out.is_null() {
            return Err(libc::EINVAL);
        }
        crate::open_session::outside_session()?;
        let space = SPACES
            .with(space.raw, |e| e.space.clone())
            .map_err(|e| e.errno())?;
        let s = stats(&space.stats());
        // SAFETY: non-null and writable by the caller's contract.
        unsafe { out.write_unaligned(s) };
        Ok(())
    })
}
