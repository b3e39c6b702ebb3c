//! The fuzz harness: two per-input checks that turn arbitrary bytes into calls on an
//! [`AddressSpace`] and panic on any wrong behaviour. The cargo-fuzz targets in `fuzz/` (outside
//! the workspace; need a nightly toolchain and `cargo-fuzz`) and `tests/fuzz_smoke.rs` (seeded
//! pseudo-random inputs, part of `cargo test`) both call them, so CI exercises this code without
//! cargo-fuzz.
//!
//! - [`ops_input`]: the bytes decode into a layout, a `max_map_count` and a sequence of [`Op`]s
//!   (the conformance suite's operations, with a wider vocabulary than its proptest strategy: a lone
//!   `PROT_GROWSDOWN`, `PROT_SEM`, all of R|W|X, `POPULATE` with `NORESERVE`, more bad lengths),
//!   run by [`run_ops`]: every result and `maps()` compared with the sequential model after every
//!   step, the whole state periodically and at the end, and nothing left after unmapping all.
//! - [`raw_args_input`]: the bytes decode into a space configuration and calls with raw `u64`
//!   addresses and lengths (boundary values of the space and of `u64`, the current regions'
//!   edges, or any 64 bits), raw protection, flag and advice bits. No call may panic; every error
//!   is one of the errnos Linux gives for that call and a refused `mmap`/`munmap` (or an `EINVAL`)
//!   changes no region; a success leaves exactly what it promises in `maps()` (the range mapped
//!   with the asked protection, or unmapped); a fault names the first page the access could not
//!   use, with the kind `maps()` implies; and after every call the region set is sorted,
//!   disjoint, aligned, inside the space, and counted by `stats()`.
//!
//! Decoding never fails: a missing byte reads as zero, so every input is a valid test and the
//! fuzzer's mutations stay meaningful.
//!
//! Not for: concurrency (`stress.rs`, tests/security.rs) or comparison with the kernel
//! (tests/differential.rs).

use super::checks::{check_region_set, unmap_everything_and_check_empty};
use super::harness::{run_ops, space, Layout, UNKNOWN_MAP_BIT, UNKNOWN_PROT_BIT};
use super::model::{self, P};
use super::ops::{Len, MapKind, Op};
use aspace_vm::{
    Access, AddressSpace, Advice, CoreHandle, Design, Fault, MapFlags, Prot, RegionInfo, Sharing,
    VmError,
};

/// Most operations one input runs (longer inputs are cut).
pub const MAX_OPS: usize = 200;

/// Reads the fuzzer's bytes front to back; past the end every read is zero.
pub struct Bytes<'a> {
    data: &'a [u8],
}

impl<'a> Bytes<'a> {
    /// A reader over `data`.
    pub fn new(data: &'a [u8]) -> Bytes<'a> {
        Bytes { data }
    }

    /// Whether every byte has been read.
    pub fn is_empty(&self) -> bool {
        self.data.is_empty()
    }

    /// The next byte, or 0.
    pub fn u8(&mut self) -> u8 {
        match self.data.split_first() {
            Some((&b, rest)) => {
                self.data = rest;
                b
            }
            None => 0,
        }
    }

    /// The next two bytes, little endian.
    pub fn u16(&mut self) -> u16 {
        u16::from_le_bytes([self.u8(), self.u8()])
    }

    /// The next four bytes, little endian.
    pub fn u32(&mut self) -> u32 {
        u32::from_le_bytes([self.u8(), self.u8(), self.u8(), self.u8()])
    }

    /// The next eight bytes, little endian.
    pub fn u64(&mut self) -> u64 {
        u64::from(self.u32()) | u64::from(self.u32()) << 32
    }

    /// One of `choices`, picked by the next byte.
    pub fn pick<T: Copy>(&mut self, choices: &[T]) -> T {
        choices[self.u8() as usize % choices.len()]
    }
}

/// The design an input runs on (a new design is fuzzed without touching this file).
fn design(b: &mut Bytes) -> Design {
    b.pick(Design::ALL)
}

// ---------------------------------------------------------------------------------------------
// Operation sequences against the sequential model.

/// Protection arguments of [`ops_input`]: the strategy's, plus `PROT_SEM`, all of R|W|X, a lone
/// `PROT_GROWSDOWN` and a lone `PROT_GROWSUP` (which this harness found the engine accepting on
/// a mapped range where Linux gives `EINVAL`; regression test
/// `regression_lone_prot_growsup_on_a_mapped_range_is_einval` in tests/fuzz_smoke.rs).
const OP_PROTS: [u32; 12] = [
    Prot::READ_WRITE.bits(),
    Prot::READ.bits(),
    Prot::NONE.bits(),
    Prot::WRITE.bits(),
    Prot::EXEC.bits(),
    Prot::READ.bits() | Prot::EXEC.bits(),
    Prot::READ_WRITE.bits() | UNKNOWN_PROT_BIT,
    Prot::READ_WRITE.bits() | model::PROT_SEM,
    Prot::READ.bits() | model::PROT_GROWSDOWN,
    Prot::READ.bits() | model::PROT_GROWSUP,
    Prot::READ.bits() | model::PROT_GROWSDOWN | model::PROT_GROWSUP,
    Prot::KNOWN.bits(),
];

/// `MAP_TYPE` values of [`ops_input`].
const OP_TYPES: [u32; 6] = [
    MapFlags::PRIVATE.bits(),
    MapFlags::PRIVATE.bits(),
    MapFlags::PRIVATE.bits(),
    MapFlags::SHARED.bits(),
    MapFlags::SHARED_VALIDATE.bits(),
    0,
];

/// Other `mmap` flag bits of [`ops_input`].
const OP_EXTRAS: [u32; 8] = [
    MapFlags::ANONYMOUS.bits(),
    MapFlags::ANONYMOUS.bits(),
    MapFlags::ANONYMOUS.bits(),
    MapFlags::ANONYMOUS.bits() | MapFlags::POPULATE.bits(),
    MapFlags::ANONYMOUS.bits() | UNKNOWN_MAP_BIT,
    MapFlags::ANONYMOUS.bits() | MapFlags::NORESERVE.bits(),
    MapFlags::ANONYMOUS.bits() | MapFlags::NORESERVE.bits() | MapFlags::POPULATE.bits(),
    0,
];

/// Advice values of [`ops_input`]: the ones the model knows, and unknown ones. `MADV_RANDOM` and
/// `MADV_SEQUENTIAL` are left out: the engine records them as region flags (a region splits, and
/// the split can hit `max_map_count`, as in Linux) and the model does not track them yet; the
/// raw-argument target draws them.
const OP_ADVICE: [i32; 7] = [
    Advice::DONTNEED.raw(),
    Advice::DONTNEED.raw(),
    Advice::DONTNEED.raw(),
    Advice::WILLNEED.raw(),
    Advice::NORMAL.raw(),
    12345,
    -1,
];

/// A page of the window, 3 pages either side included.
fn op_page(b: &mut Bytes, pages: i64) -> i64 {
    b.u8() as i64 % (pages + 6) - 3
}

/// The skew of an `mmap`/`munmap`/`mprotect`/`madvise` address: mostly aligned.
fn op_skew(b: &mut Bytes) -> u64 {
    match b.u8() % 16 {
        0 => 1,
        1 => P / 2,
        2 => P - 1,
        _ => 0,
    }
}

/// The offset of an access in its page.
fn op_off(b: &mut Bytes) -> u64 {
    match b.u8() % 4 {
        0 => u64::from(b.u16()) % P,
        1 => P - 1 - u64::from(b.u8() % 16),
        _ => 0,
    }
}

fn op_len(b: &mut Bytes, pages: i64) -> Len {
    match b.u8() % 16 {
        0..=9 => Len::Pages(
            1 + u64::from(b.u8() % 6),
            if b.u8() % 4 == 0 {
                u64::from(b.u16()) % P
            } else {
                0
            },
        ),
        10 | 11 => Len::Pages(u64::from(b.u8()) % (pages as u64 + 5) + 1, 0),
        12 => Len::Pages(0, 0),
        13 => Len::Huge(u64::from(b.u16()) % (2 * P)),
        14 => Len::PastSpace(u64::from(b.u8() % 3)),
        _ => Len::Pages(0, 1 + u64::from(b.u16()) % P),
    }
}

/// One operation of [`ops_input`].
pub fn decode_op(b: &mut Bytes, pages: i64) -> Op {
    match b.u8() % 23 {
        0..=5 => Op::Mmap {
            page: op_page(b, pages),
            skew: op_skew(b),
            len: op_len(b, pages),
            prot: b.pick(&OP_PROTS),
            kind: b.pick(&[
                MapKind::Fixed,
                MapKind::Fixed,
                MapKind::NoReplace,
                MapKind::Hint,
                MapKind::Anywhere,
            ]),
            ty: b.pick(&OP_TYPES),
            extra: b.pick(&OP_EXTRAS),
        },
        6..=8 => Op::Munmap {
            page: op_page(b, pages),
            skew: op_skew(b),
            len: op_len(b, pages),
        },
        9..=11 => Op::Mprotect {
            page: op_page(b, pages),
            skew: op_skew(b),
            len: op_len(b, pages),
            prot: b.pick(&OP_PROTS),
        },
        12 | 13 => Op::Madvise {
            page: op_page(b, pages),
            skew: op_skew(b),
            len: op_len(b, pages),
            advice: b.pick(&OP_ADVICE),
        },
        14..=17 => Op::Write {
            page: op_page(b, pages),
            off: op_off(b),
            len: 1 + u64::from(b.u16()) % (2 * P + 2),
            seed: b.u8(),
        },
        18..=20 => Op::Read {
            page: op_page(b, pages),
            off: op_off(b),
            len: u64::from(b.u16()) % (2 * P + 2),
        },
        _ => Op::Touch {
            page: op_page(b, pages),
            off: op_off(b),
            access: b.pick(&[Access::Read, Access::Write, Access::Exec]),
        },
    }
}

/// What [`ops_input`] runs: a design, a layout, a `max_map_count` and the operations.
pub type OpsCase = (Design, Layout, usize, Vec<Op>);

/// Decodes `data` into a design, a layout, a `max_map_count` and up to [`MAX_OPS`] operations.
pub fn decode_ops(data: &[u8]) -> OpsCase {
    let mut b = Bytes::new(data);
    let design = design(&mut b);
    let layout = b.pick(&[Layout::TINY, Layout::TOP]);
    let max_map_count = b.pick(&[4usize, 1000, 1, 2, 8, 65_530]);
    let mut ops = Vec::new();
    while !b.is_empty() && ops.len() < MAX_OPS {
        ops.push(decode_op(&mut b, layout.pages));
    }
    (design, layout, max_map_count, ops)
}

/// Decodes `data` ([`decode_ops`]) and runs the operations on the engine and the sequential
/// model ([`run_ops`]), which panics on the first difference or broken invariant.
pub fn ops_input(data: &[u8]) {
    let (design, layout, max_map_count, ops) = decode_ops(data);
    run_ops(design, layout, max_map_count, &ops);
}

// ---------------------------------------------------------------------------------------------
// Raw arguments: any bits, no panic, typed errors, invariants.

/// `(min_addr, max_addr)` of the spaces [`raw_args_input`] builds.
const RAW_RANGES: [(u64, u64); 4] = [
    (0x1_0000, 0x1_0000 + 64 * P),
    (0x1_0000, 1 << 47),
    (P, (1 << 47) - P),
    (1 << 40, (1 << 40) + 512 * P),
];

/// Page-rounded `len`, `None` when it wraps.
fn page_align(len: u64) -> Option<u64> {
    len.checked_add(P - 1).map(|l| l & !(P - 1))
}

/// The space under test and what the checks need to know of it.
struct Raw {
    space: AddressSpace,
    h: CoreHandle,
    min: u64,
    max: u64,
}

impl Raw {
    /// An address: a boundary value, a current region's edge, or any 64 bits, moved by a few
    /// pages and bytes.
    fn addr(&self, b: &mut Bytes) -> u64 {
        let tag = b.u8();
        if tag % 8 == 0 {
            return b.u64();
        }
        let maps = self.space.maps();
        let base = match tag % 8 {
            1..=3 => match maps.get(b.u8() as usize % maps.len().max(1)) {
                Some(r) => [r.start, r.end - P, r.end][usize::from(tag % 8 - 1)],
                None => self.min,
            },
            4 => self.min,
            5 => self.min + (self.max - self.min) / 2 / P * P,
            6 => b.pick(&[0, u64::MAX, 1 << 47, 1 << 57, u64::MAX - P + 1, 1 << 63]),
            _ => [self.max - P, self.max][usize::from(b.u8() % 2)],
        };
        let pages = match b.u8() {
            d if d % 4 == 0 => i64::from(d as i8 / 4 % 8),
            _ => 0,
        };
        let bytes = if b.u8() % 8 == 0 {
            u64::from(b.u16())
        } else {
            0
        };
        base.wrapping_add_signed(pages * P as i64)
            .wrapping_add(bytes)
    }

    /// A length: a few pages, the space's size, a value that overflows, or any 64 bits, moved by
    /// a few pages and bytes.
    fn len(&self, b: &mut Bytes) -> u64 {
        let tag = b.u8();
        let base = match tag % 16 {
            0 => return b.u64(),
            1..=12 => u64::from(b.u8() % 16) * P,
            13 => self.max - self.min,
            14 => [self.max, 1 << 47][usize::from(b.u8() % 2)],
            _ => [u64::MAX, u64::MAX - P + 1][usize::from(b.u8() % 2)],
        };
        let pages = match b.u8() {
            d if d % 4 == 0 => i64::from(d as i8 / 4 % 4),
            _ => 0,
        };
        let bytes = if b.u8() % 16 == 0 {
            u64::from(b.u16())
        } else {
            0
        };
        base.wrapping_add_signed(pages * P as i64)
            .wrapping_add(bytes)
    }
}

/// Protection bits: R, W, X, `PROT_SEM`, an unknown bit, the `PROT_GROWS*` bits, or any 32.
fn raw_prot(b: &mut Bytes) -> u32 {
    let bits = b.u8();
    if bits % 16 == 0 {
        return b.u32();
    }
    let mut prot = u32::from(bits >> 4);
    match b.u8() % 16 {
        0 => prot |= UNKNOWN_PROT_BIT,
        1 => prot |= model::PROT_GROWSDOWN,
        2 => prot |= model::PROT_GROWSUP,
        3 => prot |= model::PROT_GROWSDOWN | model::PROT_GROWSUP,
        _ => {}
    }
    prot
}

/// `mmap` flags: a mapping type, any combination of the flags Linux defines (and an unknown
/// one), or any 32 bits.
fn raw_flags(b: &mut Bytes) -> u32 {
    let tag = b.u8();
    if tag % 16 == 0 {
        return b.u32();
    }
    let ty = [0x2, 0x2, 0x2, 0x2, 0x2, 0x1, 0x1, 0x3, 0x0, 0xf][tag as usize / 16 % 10];
    // MAP_FIXED, MAP_ANONYMOUS (twice: mostly on), MAP_32BIT, MAP_GROWSDOWN, MAP_DENYWRITE,
    // MAP_EXECUTABLE, MAP_LOCKED, MAP_NORESERVE, MAP_POPULATE, MAP_NONBLOCK, MAP_STACK,
    // MAP_HUGETLB, MAP_SYNC, MAP_FIXED_NOREPLACE, MAP_UNINITIALIZED, an unknown bit.
    const BITS: [u32; 16] = [
        0x10, 0x20, 0x20, 0x40, 0x100, 0x800, 0x1000, 0x2000, 0x4000, 0x8000, 0x1_0000, 0x2_0000,
        0x4_0000, 0x8_0000, 0x10_0000, 0x400_0000,
    ];
    // Mostly anonymous; the other bits each on for about one call in 32.
    let on = b.u16() | 0x6;
    let on = if tag % 16 == 1 { on & !0x6 } else { on };
    let mut flags = ty;
    for (i, bit) in BITS.iter().enumerate() {
        if on & (1 << i) != 0 && (i < 3 || b.u8() % 16 == 0) {
            flags |= bit;
        }
    }
    if tag & 0x40 != 0 {
        flags |= UNKNOWN_MAP_BIT;
    }
    flags
}

/// Whether `[start, end)` lies inside regions with no hole, each satisfying `ok`.
fn covered(maps: &[RegionInfo], start: u64, end: u64, ok: impl Fn(&RegionInfo) -> bool) -> bool {
    if start >= end {
        return true;
    }
    let mut at = start;
    for r in maps.iter().filter(|r| r.end > start && r.start < end) {
        if r.start > at || !ok(r) {
            return false;
        }
        at = r.end;
    }
    at >= end
}

/// The region containing `addr`, if any.
fn region_at(maps: &[RegionInfo], addr: u64) -> Option<&RegionInfo> {
    maps.iter().find(|r| r.start <= addr && addr < r.end)
}

/// Checks what must hold after any call: the region set is sorted, disjoint, aligned, inside the
/// space and counted by `stats()`; frames and page tables are in range.
fn check_invariants(raw: &Raw) -> Vec<RegionInfo> {
    let maps = raw.space.maps();
    check_region_set(&maps);
    for r in &maps {
        assert!(
            raw.min <= r.start && r.end <= raw.max,
            "region {r} outside [{:#x}, {:#x})",
            raw.min,
            raw.max
        );
    }
    let st = raw.space.stats();
    assert_eq!(st.regions, maps.len() as u64, "{st:?}");
    assert!(st.frames_in_use <= st.frames_total, "{st:?}");
    assert!(st.page_tables >= 1, "{st:?}");
    if maps.is_empty() {
        assert_eq!(st.frames_in_use, 0, "no region, frames in use: {st:?}");
    }
    maps
}

/// Checks an access result against `maps()` from before the access: success only when every
/// page the access covers is in a region that allows it; a fault at the first byte of the first
/// page that does not, of the kind the region list implies.
fn check_access(maps: &[RegionInfo], addr: u64, len: u64, access: Access, got: Result<(), Fault>) {
    let what = format!("{access:?} of {len} bytes at {addr:#x}");
    let allows = |r: &RegionInfo| r.prot.allows(access);
    match got {
        Ok(()) => {
            if len > 0 {
                let end = addr.checked_add(len);
                assert!(
                    end.is_some_and(|end| covered(maps, addr, end, allows)),
                    "{what} succeeded outside readable regions"
                );
            }
        }
        Err(f) => {
            let at = match f {
                Fault::Unmapped { addr } | Fault::Protection { addr } => addr,
                Fault::OutOfMemory { addr } => addr,
                Fault::ForkedChild { .. } => {
                    panic!("{what}: ForkedChild in a process that never forked")
                }
            };
            assert!(
                at >= addr && at - addr < len.max(1),
                "{what}: fault {f:?} outside the access"
            );
            assert!(
                at == addr || at % P == 0,
                "{what}: fault {f:?} not at the first byte of a page"
            );
            assert!(
                at == addr || covered(maps, addr, at, allows),
                "{what}: fault {f:?} after a page that faults"
            );
            match (f, region_at(maps, at)) {
                (Fault::Unmapped { .. }, None) => {}
                (Fault::Protection { .. }, Some(r)) if !r.prot.allows(access) => {}
                // Out of frames: only where a frame was needed (writes, or reads that back a
                // page with a frame).
                (Fault::OutOfMemory { .. }, Some(r)) if r.prot.allows(access) => {}
                (f, r) => panic!("{what}: fault {f:?} where maps() has {r:?}"),
            }
        }
    }
}

/// Errnos Linux gives each call for some input.
const MMAP_ERRNOS: [i32; 6] = [
    libc::EINVAL,
    libc::ENOMEM,
    libc::EEXIST,
    libc::EBADF,
    libc::EOPNOTSUPP,
    libc::EPERM,
];

fn errno_in(what: &str, e: &VmError, allowed: &[i32]) {
    assert!(
        allowed.contains(&e.errno()),
        "{what}: errno {} ({e}) is not one Linux gives",
        e.errno()
    );
}

/// Runs one raw call decoded from `b` and checks its result.
fn raw_call(raw: &mut Raw, b: &mut Bytes) {
    let before = raw.space.maps();
    match b.u8() % 8 {
        0 | 1 => {
            let (addr, len, prot, flags) = (raw.addr(b), raw.len(b), raw_prot(b), raw_flags(b));
            let (prot, flags) = (
                Prot::from_bits_retain(prot),
                MapFlags::from_bits_retain(flags),
            );
            let what = format!("mmap({addr:#x}, {len:#x}, {prot:?}, {flags:?})");
            match raw.h.mmap(addr, len, prot, flags) {
                Ok(start) => {
                    let end = start + page_align(len).expect("a mapped length");
                    assert!(
                        start % P == 0 && raw.min <= start && end <= raw.max && start < end,
                        "{what} returned {start:#x}"
                    );
                    let fixed = flags.bits() & (MapFlags::FIXED | MapFlags::FIXED_NOREPLACE).bits();
                    if fixed != 0 {
                        assert_eq!(start, addr, "{what}: a fixed mapping moved");
                    }
                    let sharing = if flags.bits() & model::MAP_TYPE == MapFlags::SHARED.bits() {
                        Sharing::Shared
                    } else {
                        Sharing::Private
                    };
                    let maps = raw.space.maps();
                    assert!(
                        covered(&maps, start, end, |r| r.prot.bits()
                            == prot.bits() & Prot::KNOWN.bits()
                            && r.sharing == sharing),
                        "{what} returned {start:#x} but maps() does not show it:\n{}",
                        super::checks::lines(&maps)
                    );
                }
                Err(e) => {
                    let fixed = flags.bits() & (MapFlags::FIXED | MapFlags::FIXED_NOREPLACE).bits();
                    // Linux returns a fixed address in the top page unchanged (when the earlier
                    // checks pass), and its caller reads it as the error code `-addr`.
                    let top_page = fixed != 0
                        && addr > u64::MAX - (P - 1)
                        && e.errno() as u64 == addr.wrapping_neg();
                    if !top_page {
                        errno_in(&what, &e, &MMAP_ERRNOS);
                    }
                    assert_eq!(raw.space.maps(), before, "{what} failed ({e}) but changed");
                }
            }
        }
        2 => {
            let (addr, len) = (raw.addr(b), raw.len(b));
            let what = format!("munmap({addr:#x}, {len:#x})");
            match raw.h.munmap(addr, len) {
                Ok(()) => {
                    let end = addr + page_align(len).expect("an unmapped length");
                    let left = raw.space.maps();
                    assert!(
                        !left.iter().any(|r| r.end > addr && r.start < end),
                        "{what} left a region in the range"
                    );
                }
                Err(e) => {
                    errno_in(&what, &e, &[libc::EINVAL, libc::ENOMEM]);
                    assert_eq!(raw.space.maps(), before, "{what} failed ({e}) but changed");
                }
            }
        }
        3 => {
            let (addr, len, prot) = (raw.addr(b), raw.len(b), raw_prot(b));
            let prot = Prot::from_bits_retain(prot);
            let what = format!("mprotect({addr:#x}, {len:#x}, {prot:?})");
            match raw.h.mprotect(addr, len, prot) {
                Ok(()) => {
                    let end = addr + page_align(len).expect("a protected length");
                    assert!(
                        covered(&raw.space.maps(), addr, end, |r| r.prot.bits()
                            == prot.bits() & Prot::KNOWN.bits()),
                        "{what} succeeded but maps() does not show it"
                    );
                }
                Err(e) => {
                    errno_in(&what, &e, &[libc::EINVAL, libc::ENOMEM]);
                    if e.errno() == libc::EINVAL {
                        assert_eq!(raw.space.maps(), before, "{what} failed ({e}) but changed");
                    }
                }
            }
        }
        4 => {
            let (addr, len) = (raw.addr(b), raw.len(b));
            let advice = match b.u8() % 8 {
                0 => b.u32() as i32,
                1 => i32::from(b.u8()),
                _ => i32::from(b.u8() % 5),
            };
            let advice = Advice::from_raw(advice);
            let what = format!("madvise({addr:#x}, {len:#x}, {advice:?})");
            if let Err(e) = raw.h.madvise(addr, len, advice) {
                errno_in(&what, &e, &[libc::EINVAL, libc::ENOMEM]);
                if e.errno() == libc::EINVAL {
                    assert_eq!(raw.space.maps(), before, "{what} failed ({e}) but changed");
                }
            }
        }
        5 => {
            let (addr, len) = (raw.addr(b), u64::from(b.u16()) % (3 * P));
            let mut buf = vec![0u8; len as usize];
            let got = raw.h.read(addr, &mut buf);
            check_access(&before, addr, len, Access::Read, got);
        }
        6 => {
            let (addr, len) = (raw.addr(b), 1 + u64::from(b.u16()) % (3 * P));
            let data = vec![b.u8() | 1; len as usize];
            let got = raw.h.write(addr, &data);
            check_access(&before, addr, len, Access::Write, got);
            if got.is_ok() {
                let mut back = vec![0u8; len as usize];
                assert_eq!(raw.h.read(addr, &mut back), Ok(()), "read back of a write");
                assert!(back == data, "write at {addr:#x} did not read back");
            }
        }
        _ => {
            let addr = raw.addr(b);
            let access = b.pick(&[Access::Read, Access::Write, Access::Exec]);
            let got = raw.h.touch(addr, access);
            check_access(&before, addr, 1, access, got);
        }
    }
    check_invariants(raw);
}

/// Touches the first and last page of every region (at most 64 regions) with every access and
/// the pages just outside: each result must be what `maps()` implies.
fn probe_regions(raw: &mut Raw) {
    let maps = raw.space.maps();
    for r in maps.iter().take(64) {
        for page in [r.start, r.end - P] {
            for access in [Access::Read, Access::Write, Access::Exec] {
                let got = raw.h.touch(page, access);
                check_access(&maps, page, 1, access, got);
            }
        }
        for page in [r.start.wrapping_sub(P), r.end] {
            if page < (1 << 57) && region_at(&maps, page).is_none() {
                assert_eq!(
                    raw.h.touch(page, Access::Read),
                    Err(Fault::Unmapped { addr: page }),
                    "beside {r}"
                );
            }
        }
    }
}

/// Decodes `data` into a space configuration and up to [`MAX_OPS`] calls with raw arguments,
/// runs them, and panics on any call that panics, returns an errno Linux does not give for it,
/// does other than it reports, or breaks an invariant; then probes every region and unmaps
/// everything.
pub fn raw_args_input(data: &[u8]) {
    let mut b = Bytes::new(data);
    let design = design(&mut b);
    let (min, max) = b.pick(&RAW_RANGES);
    let frames = b.pick(&[16u64, 64]);
    let max_map_count = b.pick(&[3usize, 16, 65_530]);
    let space = space(design, min, max, frames, max_map_count);
    let h = space.attach().expect("attach");
    let mut raw = Raw { space, h, min, max };
    let mut n = 0;
    while !b.is_empty() && n < MAX_OPS {
        raw_call(&mut raw, &mut b);
        n += 1;
    }
    probe_regions(&mut raw);
    let Raw { space, mut h, .. } = raw;
    unmap_everything_and_check_empty(&space, &mut h);
}
