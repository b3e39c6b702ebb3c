//! The types and constants of `aspace.h`: handles, the configuration, the region and stats
//! records, the fault record, and Linux's `PROT_*`, `MAP_*`, `MADV_*` values under `ASPACE_`
//! names (so that `aspace.h` and `<sys/mman.h>` can be included together; the values are the
//! same, and a test checks them against `libc`).
//!
//! Every struct is `#[repr(C)]` and plain data: C may copy, zero and compare them.
//!
//! Not for: behaviour (`spaces.rs`, `cores.rs`).

/// A space's handle (`aspace_create`); `{0}` is never a valid one.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct AspaceSpace {
    pub raw: u64,
}

/// A core's handle (`aspace_attach`): one thread's view of a space. Use it from one thread at a
/// time (two threads that share it are serialized); `{0}` is never a valid one.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct AspaceCore {
    pub raw: u64,
}

/// How to build a space (`aspace_create`). A zero field means the default; a zeroed struct (or a
/// NULL pointer) is the default space.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct AspaceConfig {
    /// The design's name, NUL-terminated: "coarse", "faultlock", "hybrid", "interval" (the
    /// default, for NULL), "bonsai", "pervma", "radix".
    pub design: *const libc::c_char,
    /// Bytes of real memory for frames (default 256 MiB).
    pub memory: u64,
    /// The mappable range `[min_addr, max_addr)`; both 0: `[64 KiB, 2^47 - 4096)`.
    pub min_addr: u64,
    pub max_addr: u64,
    /// Most cores attached at once (default 256, at most 8192).
    pub max_cores: u32,
    /// Most regions at once (default 65,530).
    pub max_map_count: u32,
}

/// One region, as a line of `/proc/self/maps` (`aspace_maps`).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct AspaceRegion {
    pub start: u64,
    pub end: u64,
    /// `ASPACE_PROT_*` bits.
    pub prot: i32,
    /// `ASPACE_MAP_PRIVATE` or `ASPACE_MAP_SHARED`.
    pub sharing: i32,
    /// The offset into the shared object (`MAP_SHARED`; 0 for private regions).
    pub offset: u64,
    /// The shared object's inode number (0 for private regions).
    pub inode: u64,
}

/// A space's counters (`aspace_stats`); a snapshot taken while cores run is not atomic across
/// fields.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct AspaceStats {
    pub faults: u64,
    pub fills: u64,
    pub shootdowns: u64,
    pub shootdown_targets: u64,
    pub shootdown_waits: u64,
    pub shootdowns_received: u64,
    pub tlb_hits: u64,
    pub tlb_misses: u64,
    pub frames_in_use: u64,
    pub frames_total: u64,
    pub page_tables: u64,
    pub page_table_bytes: u64,
    pub metadata_bytes: u64,
    pub regions: u64,
    pub cores: u64,
}

/// The last failed access of a core (`aspace_last_fault`): what a signal handler would get in
/// its `siginfo_t`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct AspaceFault {
    /// The faulting address (`si_addr`).
    pub addr: u64,
    /// `ASPACE_SEGV_MAPERR` (nothing mapped), `ASPACE_SEGV_ACCERR` (mapped without the
    /// right), or 0 when the access failed without a SIGSEGV (out of frames, forked child).
    pub si_code: i32,
    /// The access's return value (`-EFAULT`, `-ENOMEM`, `-ENOTRECOVERABLE`); 0 if the core
    /// never faulted.
    pub error: i32,
}

/// The kind of access `aspace_touch` makes.
pub const ASPACE_ACCESS_READ: i32 = 0;
pub const ASPACE_ACCESS_WRITE: i32 = 1;
pub const ASPACE_ACCESS_EXEC: i32 = 2;

pub const ASPACE_PROT_NONE: i32 = 0x0;
pub const ASPACE_PROT_READ: i32 = 0x1;
pub const ASPACE_PROT_WRITE: i32 = 0x2;
pub const ASPACE_PROT_EXEC: i32 = 0x4;

pub const ASPACE_MAP_SHARED: i32 = 0x01;
pub const ASPACE_MAP_PRIVATE: i32 = 0x02;
pub const ASPACE_MAP_SHARED_VALIDATE: i32 = 0x03;
pub const ASPACE_MAP_FIXED: i32 = 0x10;
pub const ASPACE_MAP_ANONYMOUS: i32 = 0x20;
pub const ASPACE_MAP_NORESERVE: i32 = 0x4000;
pub const ASPACE_MAP_POPULATE: i32 = 0x8000;
pub const ASPACE_MAP_FIXED_NOREPLACE: i32 = 0x10_0000;

pub const ASPACE_MADV_NORMAL: i32 = 0;
pub const ASPACE_MADV_RANDOM: i32 = 1;
pub const ASPACE_MADV_SEQUENTIAL: i32 = 2;
pub const ASPACE_MADV_WILLNEED: i32 = 3;
pub const ASPACE_MADV_DONTNEED: i32 = 4;

/// `si_code` of a fault at an address with nothing mapped.
pub const ASPACE_SEGV_MAPERR: i32 = 1;
/// `si_code` of a fault at an address mapped without the access's right.
pub const ASPACE_SEGV_ACCERR: i32 = 2;

/// The page size of every space.
pub const ASPACE_PAGE_SIZE: u64 = 4096;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_constants_are_linuxs() {
        assert_eq!(ASPACE_PROT_READ, libc::PROT_READ);
        assert_eq!(ASPACE_PROT_WRITE, libc::PROT_WRITE);
        assert_eq!(ASPACE_PROT_EXEC, libc::PROT_EXEC);
        assert_eq!(ASPACE_PROT_NONE, libc::PROT_NONE);
        assert_eq!(ASPACE_MAP_SHARED, libc::MAP_SHARED);
        assert_eq!(ASPACE_MAP_PRIVATE, libc::MAP_PRIVATE);
        assert_eq!(ASPACE_MAP_SHARED_VALIDATE, libc::MAP_SHARED_VALIDATE);
        assert_eq!(ASPACE_MAP_FIXED, libc::MAP_FIXED);
        assert_eq!(ASPACE_MAP_ANONYMOUS, libc::MAP_ANONYMOUS);
        assert_eq!(ASPACE_MAP_NORESERVE, libc::MAP_NORESERVE);
        assert_eq!(ASPACE_MAP_POPULATE, libc::MAP_POPULATE);
        assert_eq!(ASPACE_MAP_FIXED_NOREPLACE, libc::MAP_FIXED_NOREPLACE);
        assert_eq!(ASPACE_MADV_NORMAL, libc::MADV_NORMAL);
        assert_eq!(ASPACE_MADV_RANDOM, libc::MADV_RANDOM);
        assert_eq!(ASPACE_MADV_SEQUENTIAL, libc::MADV_SEQUENTIAL);
        assert_eq!(ASPACE_MADV_WILLNEED, libc::MADV_WILLNEED);
        assert_eq!(ASPACE_MADV_DONTNEED, libc::MADV_DONTNEED);
        assert_eq!(
            Some(ASPACE_SEGV_MAPERR),
            aspace_vm::Fault::Unmapped { addr: 0 }.si_code()
        );
        assert_eq!(
            Some(ASPACE_SEGV_ACCERR),
            aspace_vm::Fault::Protection { addr: 0 }.si_code()
        );
        assert_eq!(ASPACE_PAGE_SIZE, aspace_vm::PAGE_SIZE);
    }
}
