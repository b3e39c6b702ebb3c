//! The value types of the address-space API: protections, mapping flags, advice, access kinds and
//! the region descriptions `maps()` returns.
//!
//! Bit values are Linux's (x86-64 `<sys/mman.h>`) so that a caller, and the differential test
//! against the real kernel, can pass the same numbers to both. The types are thin newtypes over the
//! raw bits: unknown bits are representable on purpose, because rejecting them with Linux's errno
//! is part of the contract (`mprotect` with an unknown bit is `EINVAL`; see `semantics` for each
//! call's rules), and a typed API that could not express them could not be tested against Linux.
//!
//! Not for: validation (that is the semantics layer) or anything design-specific.

use std::fmt;

/// Size of a page (virtual) and of a frame (real), in bytes.
pub const PAGE_SIZE: u64 = 4096;

/// Memory protection of a region (`PROT_*`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub struct Prot(u32);

impl Prot {
    /// `PROT_NONE`: no access.
    pub const NONE: Prot = Prot(0);
    /// `PROT_READ`.
    pub const READ: Prot = Prot(0x1);
    /// `PROT_WRITE`.
    pub const WRITE: Prot = Prot(0x2);
    /// `PROT_EXEC`.
    pub const EXEC: Prot = Prot(0x4);
    /// `PROT_READ | PROT_WRITE`.
    pub const READ_WRITE: Prot = Prot(0x3);
    /// Every bit this crate knows.
    pub const KNOWN: Prot = Prot(0x7);

    /// The protection with exactly these bits (unknown bits kept, so they can be rejected).
    pub const fn from_bits_retain(bits: u32) -> Prot {
        Prot(bits)
    }

    /// The raw bits.
    pub const fn bits(self) -> u32 {
        self.0
    }

    /// Whether every bit of `other` is set in `self`.
    pub const fn contains(self, other: Prot) -> bool {
        self.0 & other.0 == other.0
    }

    /// Whether `self` has bits outside [`Prot::KNOWN`].
    pub const fn has_unknown_bits(self) -> bool {
        self.0 & !Prot::KNOWN.0 != 0
    }

    /// Whether an access of kind `access` is allowed, with x86-64's rules: any of read, write or
    /// exec makes a page readable (there are no write-only or exec-only pages in hardware), writes
    /// need `WRITE`, instruction fetches need `EXEC`.
    pub const fn allows(self, access: Access) -> bool {
        match access {
            Access::Read => self.0 & Prot::KNOWN.0 != 0,
            Access::Write => self.0 & Prot::WRITE.0 != 0,
            Access::Exec => self.0 & Prot::EXEC.0 != 0,
        }
    }
}

impl std::ops::BitOr for Prot {
    type Output = Prot;
    fn bitor(self, rhs: Prot) -> Prot {
        Prot(self.0 | rhs.0)
    }
}

/// Mapping flags (`MAP_*`). File-backed mappings (a later issue) add a backing argument; the
/// flags stay the same.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub struct MapFlags(u32);

impl MapFlags {
    /// `MAP_SHARED`.
    pub const SHARED: MapFlags = MapFlags(0x01);
    /// `MAP_PRIVATE`.
    pub const PRIVATE: MapFlags = MapFlags(0x02);
    /// `MAP_SHARED_VALIDATE`: like `SHARED`, but unknown flags are rejected (`EOPNOTSUPP`).
    pub const SHARED_VALIDATE: MapFlags = MapFlags(0x03);
    /// `MAP_FIXED`: place exactly at the address, replacing what is there.
    pub const FIXED: MapFlags = MapFlags(0x10);
    /// `MAP_ANONYMOUS`: zero-filled memory, no file.
    pub const ANONYMOUS: MapFlags = MapFlags(0x20);
    /// `MAP_NORESERVE`: accepted, no effect (there is no overcommit accounting here).
    pub const NORESERVE: MapFlags = MapFlags(0x4000);
    /// `MAP_POPULATE`: fault every page in at `mmap` time.
    pub const POPULATE: MapFlags = MapFlags(0x8000);
    /// `MAP_FIXED_NOREPLACE`: place exactly at the address, `EEXIST` if anything is there.
    pub const FIXED_NOREPLACE: MapFlags = MapFlags(0x10_0000);
    /// `MAP_PRIVATE | MAP_ANONYMOUS`, the common case.
    pub const PRIVATE_ANONYMOUS: MapFlags = MapFlags(0x22);

    /// The flags with exactly these bits (unknown bits kept, so they can be judged like Linux).
    pub const fn from_bits_retain(bits: u32) -> MapFlags {
        MapFlags(bits)
    }

    /// The raw bits.
    pub const fn bits(self) -> u32 {
        self.0
    }

    /// Whether every bit of `other` is set in `self`.
    pub const fn contains(self, other: MapFlags) -> bool {
        self.0 & other.0 == other.0
    }
}

impl std::ops::BitOr for MapFlags {
    type Output = MapFlags;
    fn bitor(self, rhs: MapFlags) -> MapFlags {
        MapFlags(self.0 | rhs.0)
    }
}

/// `madvise` advice (`MADV_*`, Linux values).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Advice(i32);

impl Advice {
    /// `MADV_NORMAL`: accepted, no effect.
    pub const NORMAL: Advice = Advice(0);
    /// `MADV_RANDOM`: accepted, no effect.
    pub const RANDOM: Advice = Advice(1);
    /// `MADV_SEQUENTIAL`: accepted, no effect.
    pub const SEQUENTIAL: Advice = Advice(2);
    /// `MADV_WILLNEED`: accepted, no effect.
    pub const WILLNEED: Advice = Advice(3);
    /// `MADV_DONTNEED`: drop the pages; private anonymous pages read back as zero.
    pub const DONTNEED: Advice = Advice(4);

    /// The advice with this raw value (unknown values are rejected with `EINVAL` by `madvise`).
    pub const fn from_raw(raw: i32) -> Advice {
        Advice(raw)
    }

    /// The raw value.
    pub const fn raw(self) -> i32 {
        self.0
    }
}

/// The kind of a memory access (`touch`), as a page fault would report it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Access {
    /// A load.
    Read,
    /// A store.
    Write,
    /// An instruction fetch.
    Exec,
}

/// Whether a region is private or shared, and what backs it. File backings come later.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Sharing {
    /// `MAP_PRIVATE`.
    Private,
    /// `MAP_SHARED`.
    Shared,
}

/// One region as [`crate::AddressSpace::maps`] lists it: like a line of `/proc/self/maps`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct RegionInfo {
    /// First byte (page aligned).
    pub start: u64,
    /// One past the last byte (page aligned).
    pub end: u64,
    /// Its protection.
    pub prot: Prot,
    /// Private or shared.
    pub sharing: Sharing,
    /// For a shared region, the byte offset of `start` in its shmem object (a shared anonymous
    /// mapping is a file of its own, and a piece left by `munmap` or `mprotect` keeps its offset
    /// in it); 0 for a private region.
    pub offset: u64,
    /// For a shared region, the number of its shmem object (Linux's inode number: the space
    /// numbers its shared mappings 1, 2, ... in the order they are created; pieces of one mapping
    /// share it); 0 for a private region.
    pub inode: u64,
}

/// The device `/proc/self/maps` shows for shmem objects (Linux's internal shm mount; *verified*
/// `00:01` on Linux 6.18).
const SHMEM_DEV: &str = "00:01";

/// The column at which `/proc/self/maps` starts a region's name (`seq_setwidth` of
/// `25 + 6 * sizeof(void *) - 1`, then one space).
const NAME_COLUMN: usize = 73;

impl fmt::Display for RegionInfo {
    /// Exactly a `/proc/self/maps` line, without the newline: `start-end rwxp 00000000 00:00 0 `
    /// (with Linux's trailing space) for a private anonymous region; for a shared one its offset,
    /// the shmem device, its inode and, from column 73, `/dev/zero (deleted)` (*verified*:
    /// `5b0000002000-5b0000003000 r--s 00002000 00:01 28` and 25 spaces before the name).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let bit = |p: Prot, c: char| if self.prot.contains(p) { c } else { '-' };
        let (kind, dev) = match self.sharing {
            Sharing::Private => ('p', "00:00"),
            Sharing::Shared => ('s', SHMEM_DEV),
        };
        let head = format!(
            "{:08x}-{:08x} {}{}{}{} {:08x} {dev} {} ",
            self.start,
            self.end,
            bit(Prot::READ, 'r'),
            bit(Prot::WRITE, 'w'),
            bit(Prot::EXEC, 'x'),
            kind,
            self.offset,
            self.inode,
        );
        match self.sharing {
            Sharing::Private => f.write_str(&head),
            Sharing::Shared => write!(f, "{head:<NAME_COLUMN$}/dev/zero (deleted)"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn write_or_exec_implies_read_like_x86() {
        assert!(Prot::WRITE.allows(Access::Read));
        assert!(Prot::EXEC.allows(Access::Read));
        assert!(!Prot::NONE.allows(Access::Read));
        assert!(!Prot::READ.allows(Access::Write));
        assert!(!Prot::READ.allows(Access::Exec));
    }

    #[test]
    fn region_info_prints_like_proc_self_maps() {
        let r = RegionInfo {
            start: 0x7f00_0000_0000,
            end: 0x7f00_0000_2000,
            prot: Prot::READ_WRITE,
            sharing: Sharing::Private,
            offset: 0,
            inode: 0,
        };
        assert_eq!(
            r.to_string(),
            "7f0000000000-7f0000002000 rw-p 00000000 00:00 0 "
        );
    }

    #[test]
    fn shared_region_info_prints_offset_inode_and_dev_zero() {
        let r = RegionInfo {
            start: 0x5b00_0000_2000,
            end: 0x5b00_0000_3000,
            prot: Prot::READ,
            sharing: Sharing::Shared,
            offset: 0x2000,
            inode: 28,
        };
        // Copied from /proc/self/maps (Linux 6.18) after mprotect of the third page of a shared
        // anonymous mapping.
        assert_eq!(
            r.to_string(),
            "5b0000002000-5b0000003000 r--s 00002000 00:01 28                         \
             /dev/zero (deleted)"
        );
    }
}
