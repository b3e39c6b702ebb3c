//! The operations of a random sequence: the [`Op`] type (with its length [`Len`] and placement
//! [`MapKind`]), the proptest strategy that draws them (mostly valid, a fraction with each kind of
//! bad input), and [`apply`], which runs one operation on the engine and on the sequential model
//! and asserts that both agree ([`mmap_check`] judges a non-fixed `mmap`'s placement).
//!
//! Not for: the whole-state checks between operations (`checks.rs`).

use super::harness::{Layout, UNKNOWN_MAP_BIT, UNKNOWN_PROT_BIT};
use super::model::{self, Model, Placement, P};
use aspace_vm::{Access, Advice, CoreHandle, Fault, MapFlags, Prot};
use proptest::prelude::*;

/// The length argument of a random operation.
#[derive(Clone, Copy, Debug)]
pub enum Len {
    /// `pages * P + extra` bytes.
    Pages(u64, u64),
    /// `u64::MAX - k`: overflows every computation.
    Huge(u64),
    /// `max_addr + pages * P`: larger than the address space.
    PastSpace(u64),
}

/// How a random `mmap` is placed.
#[derive(Clone, Copy, Debug)]
pub enum MapKind {
    /// `MAP_FIXED`.
    Fixed,
    /// `MAP_FIXED_NOREPLACE`.
    NoReplace,
    /// A hint (the address, no fixed flag).
    Hint,
    /// Address 0.
    Anywhere,
}

/// One operation of a random sequence. Addresses are `layout base + page * P + skew`.
#[derive(Clone, Debug)]
pub enum Op {
    /// `mmap`.
    Mmap {
        page: i64,
        skew: u64,
        len: Len,
        prot: u32,
        kind: MapKind,
        /// `MAP_TYPE` bits (`PRIVATE`, `SHARED`, or a bad value).
        ty: u32,
        /// Other flag bits (`POPULATE`, an unknown bit, or a missing `ANONYMOUS`).
        extra: u32,
    },
    /// `munmap`.
    Munmap { page: i64, skew: u64, len: Len },
    /// `mprotect`.
    Mprotect {
        page: i64,
        skew: u64,
        len: Len,
        prot: u32,
    },
    /// `madvise`.
    Madvise {
        page: i64,
        skew: u64,
        len: Len,
        advice: i32,
    },
    /// `write` of `len` bytes derived from `seed` at `page * P + off`.
    Write {
        page: i64,
        off: u64,
        len: u64,
        seed: u8,
    },
    /// `read`.
    Read { page: i64, off: u64, len: u64 },
    /// `touch`.
    Touch { page: i64, off: u64, access: Access },
}

/// Random operations: mostly valid, a fraction with each kind of bad input.
pub fn op_strategy(pages: i64) -> impl Strategy<Value = Op> {
    let page = -3..pages + 3;
    let skew = prop_oneof![12 => Just(0u64), 1 => Just(1u64), 1 => Just(P / 2)];
    let len = prop_oneof![
        14 => (1..=6u64, prop_oneof![4 => Just(0u64), 1 => 1..P]).prop_map(|(n, e)| Len::Pages(n, e)),
        2 => (7..=pages as u64 + 4).prop_map(|n| Len::Pages(n, 0)),
        1 => Just(Len::Pages(0, 0)),
        1 => (0..2 * P).prop_map(Len::Huge),
        1 => (0..3u64).prop_map(Len::PastSpace),
    ];
    let prot = prop_oneof![
        6 => Just(Prot::READ_WRITE.bits()),
        2 => Just(Prot::READ.bits()),
        2 => Just(Prot::NONE.bits()),
        1 => Just(Prot::WRITE.bits()),
        1 => Just(Prot::EXEC.bits()),
        1 => Just(Prot::READ.bits() | Prot::EXEC.bits()),
        1 => Just(Prot::READ_WRITE.bits() | UNKNOWN_PROT_BIT),
    ];
    let kind = prop_oneof![
        5 => Just(MapKind::Fixed),
        2 => Just(MapKind::NoReplace),
        2 => Just(MapKind::Hint),
        2 => Just(MapKind::Anywhere),
    ];
    let ty = prop_oneof![
        12 => Just(MapFlags::PRIVATE.bits()),
        2 => Just(MapFlags::SHARED.bits()),
        1 => Just(MapFlags::SHARED_VALIDATE.bits()),
        1 => Just(0u32),
    ];
    let extra = prop_oneof![
        12 => Just(MapFlags::ANONYMOUS.bits()),
        1 => Just(MapFlags::ANONYMOUS.bits() | MapFlags::POPULATE.bits()),
        1 => Just(MapFlags::ANONYMOUS.bits() | UNKNOWN_MAP_BIT),
        1 => Just(MapFlags::ANONYMOUS.bits() | MapFlags::NORESERVE.bits()),
        1 => Just(0u32),
    ];
    let advice = prop_oneof![
        6 => Just(Advice::DONTNEED.raw()),
        1 => Just(Advice::WILLNEED.raw()),
        1 => Just(Advice::NORMAL.raw()),
        1 => Just(12345),
    ];
    let access = prop_oneof![Just(Access::Read), Just(Access::Write), Just(Access::Exec)];
    let off = prop_oneof![2 => Just(0u64), 1 => 0..P];
    prop_oneof![
        6 => (page.clone(), skew.clone(), len.clone(), prot.clone(), kind, ty, extra)
            .prop_map(|(page, skew, len, prot, kind, ty, extra)| Op::Mmap { page, skew, len, prot, kind, ty, extra }),
        3 => (page.clone(), skew.clone(), len.clone())
            .prop_map(|(page, skew, len)| Op::Munmap { page, skew, len }),
        3 => (page.clone(), skew.clone(), len.clone(), prop_oneof![
                8 => prot,
                // Both PROT_GROWS* bits together (EINVAL). A lone PROT_GROWSDOWN or PROT_GROWSUP
                // is not drawn here; the fuzz harness (fuzz.rs) draws them, and the model's rule
                // for them is checked against the kernel in tests/conformance_model.rs.
                1 => Just(Prot::READ.bits() | model::PROT_GROWSDOWN | model::PROT_GROWSUP),
            ])
            .prop_map(|(page, skew, len, prot)| Op::Mprotect { page, skew, len, prot }),
        2 => (page.clone(), skew, len, advice)
            .prop_map(|(page, skew, len, advice)| Op::Madvise { page, skew, len, advice }),
        4 => (page.clone(), off.clone(), 1..2 * P + 2, any::<u8>())
            .prop_map(|(page, off, len, seed)| Op::Write { page, off, len, seed }),
        3 => (page.clone(), off.clone(), 0..2 * P + 2)
            .prop_map(|(page, off, len)| Op::Read { page, off, len }),
        2 => (page, off, access).prop_map(|(page, off, access)| Op::Touch { page, off, access }),
    ]
}

/// Bytes a random write stores: distinct per seed and position, never all zero.
pub fn pattern(seed: u8, len: u64) -> Vec<u8> {
    (0..len)
        .map(|i| (seed as u64).wrapping_mul(31).wrapping_add(i * 7 + 1) as u8 | 1)
        .collect()
}

/// Applies `op` to the engine (through `h`) and to the model, asserting that both agree.
pub fn apply(h: &mut CoreHandle, model: &mut Model, layout: &Layout, op: &Op) {
    match *op {
        Op::Mmap {
            page,
            skew,
            len,
            prot,
            kind,
            ty,
            extra,
        } => {
            let mut flags = ty | extra;
            let addr = match kind {
                MapKind::Fixed => {
                    flags |= MapFlags::FIXED.bits();
                    layout.addr(page, skew)
                }
                MapKind::NoReplace => {
                    flags |= MapFlags::FIXED_NOREPLACE.bits();
                    layout.addr(page, skew)
                }
                MapKind::Hint => layout.addr(page, skew),
                MapKind::Anywhere => 0,
            };
            let len = layout.len(len);
            let (prot, flags) = (
                Prot::from_bits_retain(prot),
                MapFlags::from_bits_retain(flags),
            );
            let what = format!("mmap({addr:#x}, {len:#x}, {prot:?}, {flags:?})");
            let got = h.mmap(addr, len, prot, flags).map_err(|e| e.errno());
            mmap_check(model, addr, len, prot, flags, got, &what);
        }
        Op::Munmap { page, skew, len } => {
            let (addr, len) = (layout.addr(page, skew), layout.len(len));
            let expected = model.munmap(addr, len);
            let got = h.munmap(addr, len).map_err(|e| e.errno());
            assert_eq!(got, expected, "munmap({addr:#x}, {len:#x})");
        }
        Op::Mprotect {
            page,
            skew,
            len,
            prot,
        } => {
            let (addr, len, prot) = (
                layout.addr(page, skew),
                layout.len(len),
                Prot::from_bits_retain(prot),
            );
            let expected = model.mprotect(addr, len, prot);
            let got = h.mprotect(addr, len, prot).map_err(|e| e.errno());
            assert_eq!(got, expected, "mprotect({addr:#x}, {len:#x}, {prot:?})");
        }
        Op::Madvise {
            page,
            skew,
            len,
            advice,
        } => {
            let (addr, len, advice) = (
                layout.addr(page, skew),
                layout.len(len),
                Advice::from_raw(advice),
            );
            let expected = model.madvise(addr, len, advice);
            let got = h.madvise(addr, len, advice).map_err(|e| e.errno());
            assert_eq!(got, expected, "madvise({addr:#x}, {len:#x}, {advice:?})");
        }
        Op::Write {
            page,
            off,
            len,
            seed,
        } => {
            let addr = layout.addr(page, off);
            let data = pattern(seed, len);
            let expected = model.write(addr, &data);
            assert_eq!(
                h.write(addr, &data),
                expected,
                "write({addr:#x}, {len} bytes)"
            );
        }
        Op::Read { page, off, len } => {
            let addr = layout.addr(page, off);
            let expected = model.read(addr, len);
            let mut buf = vec![0u8; len as usize];
            let got = h.read(addr, &mut buf).map(|()| buf);
            if got != expected {
                panic!(
                    "read({addr:#x}, {len}): engine {} model {}",
                    describe(&got),
                    describe(&expected)
                );
            }
        }
        Op::Touch { page, off, access } => {
            let addr = layout.addr(page, off);
            let expected = model.touch(addr, access);
            assert_eq!(
                h.touch(addr, access),
                expected,
                "touch({addr:#x}, {access:?})"
            );
        }
    }
}

fn describe(r: &Result<Vec<u8>, Fault>) -> String {
    match r {
        Ok(b) => format!(
            "Ok({} bytes, first nonzero at {:?})",
            b.len(),
            b.iter().position(|&x| x != 0)
        ),
        Err(f) => format!("Err({f:?})"),
    }
}

/// Judges an engine `mmap` result against the model and applies it to the model: fixed calls
/// must agree exactly; a non-fixed call must return a free aligned range in bounds, the hint
/// when the hint's range is free, or `ENOMEM` only when no gap exists or the region-count limit
/// could be hit.
pub fn mmap_check(
    model: &mut Model,
    addr: u64,
    len: u64,
    prot: Prot,
    flags: MapFlags,
    got: Result<u64, i32>,
    what: &str,
) {
    let plan = match model.mmap_plan(addr, len, prot, flags) {
        Err(e) => {
            assert_eq!(got, Err(e), "{what}: the model says errno {e}");
            return;
        }
        Ok(plan) => plan,
    };
    match plan.placement {
        Placement::Exact(a) => {
            let expected = model.mmap_commit(&plan, a);
            assert_eq!(got, expected, "{what}");
        }
        Placement::Anywhere { hint } => match got {
            Ok(start) => {
                assert!(
                    model.is_valid_placement(start, plan.len),
                    "{what} returned {start:#x}: not a free aligned range in bounds"
                );
                if let Some(h) = hint {
                    if model.is_valid_placement(h, plan.len) {
                        assert_eq!(start, h, "{what}: the hint's range was free");
                    }
                }
                assert_eq!(
                    model.mmap_commit(&plan, start),
                    Ok(start),
                    "{what} returned {start:#x} but exceeds max_map_count"
                );
            }
            Err(e) => {
                assert!(
                    e == libc::ENOMEM && model.anywhere_may_hit_map_count(),
                    "{what} failed with errno {e} though a gap exists and the region limit is not near"
                );
            }
        },
    }
}
