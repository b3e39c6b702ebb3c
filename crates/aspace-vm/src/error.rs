//! Errors of the address-space API, each with the errno Linux gives for the same failure.
//!
//! [`VmError`] is what the system calls (`mmap`, `munmap`, `mprotect`, `madvise`, `attach`)
//! return; a call that returns it changed nothing (except where Linux itself applies a prefix
//! before failing, which the semantics layer documents per call). [`Fault`] is what an access
//! (`read`, `write`, `touch`) returns instead of delivering SIGSEGV: the faulting address and
//! whether it was `SEGV_MAPERR` (nothing mapped) or `SEGV_ACCERR` (mapped without the right), or
//! the frame pool ran dry (the kernel's OOM; here `ENOMEM`, nothing changed).

use thiserror::Error;

/// Why a limit refused an operation (all `ENOMEM` in Linux).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Limit {
    /// The region count would exceed `max_map_count`.
    MapCount,
    /// The address space has no room (no gap large enough, or the range ends past its top).
    AddressSpace,
    /// The frame pool is exhausted.
    Frames,
    /// The range is not fully mapped (`mprotect`/`madvise` over a hole).
    Hole,
    /// Memory for the space's own metadata (region nodes) could not be allocated.
    Memory,
}

/// A configuration value of [`crate::Builder`] (and the [`crate::Config`] field of the same name)
/// that [`VmError::BadConfig`] refers to.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ConfigField {
    /// `memory` (`Builder::memory`).
    Memory,
    /// `min_addr` (`Builder::address_range`).
    MinAddr,
    /// `max_addr` (`Builder::address_range`).
    MaxAddr,
    /// `max_map_count` (`Builder::max_map_count`).
    MaxMapCount,
    /// `max_cores` (`Builder::max_cores`).
    MaxCores,
    /// `tlb_entries` (`Builder::tlb_entries`).
    TlbEntries,
    /// `frame_batch` (`Builder::frame_batch`).
    FrameBatch,
    /// `Arenas::Layout`'s `count` (`Builder::arenas`).
    ArenaCount,
    /// `Arenas::Layout`'s `size` (`Builder::arenas`).
    ArenaSize,
    /// `Arenas::Layout`'s `base` (`Builder::arenas`).
    ArenaBase,
}

/// A failed system call of the address space.
#[derive(Clone, Debug, PartialEq, Eq, Error)]
pub enum VmError {
    /// `EINVAL`: unaligned address, zero or overflowing length, bad flag combination, unknown
    /// protection bits or advice.
    #[error("invalid argument: {0}")]
    InvalidArgument(&'static str),
    /// `ENOMEM`: a limit was reached or the range is not mapped.
    #[error("out of memory: {0:?}")]
    OutOfMemory(Limit),
    /// `EEXIST`: `MAP_FIXED_NOREPLACE` over an existing mapping.
    #[error("a mapping already exists in the requested range")]
    Exists,
    /// `EBADF`: a file mapping was requested without a file (only anonymous mappings exist yet).
    #[error("not anonymous and no file given")]
    BadFile,
    /// `EOPNOTSUPP`: `MAP_SHARED_VALIDATE` with flags Linux does not know.
    #[error("unsupported flags with MAP_SHARED_VALIDATE")]
    NotSupported,
    /// `EPERM`: `MAP_FIXED` below `min_addr` (Linux's `mmap_min_addr` for an unprivileged
    /// process).
    #[error("mapping below the minimum address is not permitted")]
    PermissionDenied,
    /// `EAGAIN`: no core slot is free (`attach` beyond the configured core count).
    #[error("too many cores attached (limit {0})")]
    TooManyCores(usize),
    /// `EFBIG`: a file offset or length past the largest file size.
    #[error("file offset or length past the largest file size")]
    FileTooLarge,
    /// `ENOSPC`: the memory a file lives in has no frame left for a new page.
    #[error("no frame left for a file page")]
    NoSpace,
    /// `ENOTRECOVERABLE`: the space was created before a `fork()` and this is the child, where
    /// its locks and threads are not recoverable (README, hazards).
    #[error("address space used in a forked child")]
    ForkedChild,
    /// `MAP_FIXED` (or `MAP_FIXED_NOREPLACE`) at an address in the top page of the 64-bit space
    /// (`addr > 2^64 - 4096`): Linux's `get_unmapped_area` returns a fixed address unchanged and
    /// its caller takes any value in that page for an error code, so the errno is `-addr`
    /// (`2^64 - addr`, 1 to 4095: `EPERM` for `u64::MAX`, 4095, not a named errno, for
    /// `2^64 - 4095`). This is how [`VmError`] carries an errno that is not one failure but
    /// any of 1..=4095: the variant keeps the address and [`VmError::errno`] derives the errno
    /// from it. The class (which lengths and flags still fail first) is in `semantics.rs`.
    #[error("MAP_FIXED address {0:#x} lies in the top page, which Linux returns as an error code")]
    TopPageAddress(u64),
    /// `EINVAL`: a configuration value outside the range its [`crate::Builder`] method states;
    /// `build` refused it before allocating anything.
    #[error("configuration value {field:?} = {value} is not {expected}")]
    BadConfig {
        /// The value.
        field: ConfigField,
        /// What was given (for `ArenaBase`, the end `base + count * size` when that is what
        /// lies out of range).
        value: u64,
        /// The stated range.
        expected: &'static str,
    },
}

impl VmError {
    /// The errno Linux returns for this failure.
    pub fn errno(&self) -> i32 {
        match self {
            VmError::InvalidArgument(_) => libc::EINVAL,
            VmError::OutOfMemory(_) => libc::ENOMEM,
            VmError::Exists => libc::EEXIST,
            VmError::BadFile => libc::EBADF,
            VmError::NotSupported => libc::EOPNOTSUPP,
            VmError::PermissionDenied => libc::EPERM,
            VmError::TooManyCores(_) => libc::EAGAIN,
            VmError::ForkedChild => libc::ENOTRECOVERABLE,
            VmError::FileTooLarge => libc::EFBIG,
            VmError::NoSpace => libc::ENOSPC,
            VmError::TopPageAddress(addr) => addr.wrapping_neg() as i32,
            VmError::BadConfig { .. } => libc::EINVAL,
        }
    }
}

/// A failed access: what SIGSEGV (or the OOM killer) would have reported.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Error)]
pub enum Fault {
    /// `SEGV_MAPERR`: no region contains `addr`.
    #[error("unmapped address {addr:#x}")]
    Unmapped {
        /// The first byte that could not be accessed.
        addr: u64,
    },
    /// `SEGV_ACCERR`: a region contains `addr` but does not allow the access.
    #[error("protection fault at {addr:#x}")]
    Protection {
        /// The first byte that could not be accessed.
        addr: u64,
    },
    /// No frame was available to back the page (`ENOMEM`); nothing was changed.
    #[error("out of frames at {addr:#x}")]
    OutOfMemory {
        /// The page that could not be backed.
        addr: u64,
    },
    /// The space was created before a `fork()` and this is the child (`ENOTRECOVERABLE`);
    /// nothing was accessed.
    #[error("access at {addr:#x} to an address space in a forked child")]
    ForkedChild {
        /// The first byte of the refused access.
        addr: u64,
    },
}

impl Fault {
    /// The faulting address.
    pub fn addr(&self) -> u64 {
        match *self {
            Fault::Unmapped { addr }
            | Fault::Protection { addr }
            | Fault::OutOfMemory { addr }
            | Fault::ForkedChild { addr } => addr,
        }
    }

    /// `si_code` SIGSEGV would carry (`SEGV_MAPERR` = 1, `SEGV_ACCERR` = 2), or `None` for OOM
    /// and a forked child.
    pub fn si_code(&self) -> Option<i32> {
        match self {
            Fault::Unmapped { .. } => Some(1),
            Fault::Protection { .. } => Some(2),
            Fault::OutOfMemory { .. } | Fault::ForkedChild { .. } => None,
        }
    }

    /// The errno a system call touching this memory would return (`EFAULT`, or `ENOMEM`;
    /// `ENOTRECOVERABLE` in a forked child).
    pub fn errno(&self) -> i32 {
        match self {
            Fault::Unmapped { .. } | Fault::Protection { .. } => libc::EFAULT,
            Fault::OutOfMemory { .. } => libc::ENOMEM,
            Fault::ForkedChild { .. } => libc::ENOTRECOVERABLE,
        }
    }
}
