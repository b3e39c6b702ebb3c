//! The operations of the differential test, their seeded generator, and their printing as
//! Rust-like calls.
//!
//! An [`Op`] carries raw Linux values (protection bits, `MAP_*` flags, advice numbers) so the
//! same op can be handed to the kernel and to aspace unchanged, bad values included. Addresses are
//! offsets from the window base `W` (so a printed sequence reads the same on every run), lengths
//! are raw (an "overflowing" length is a value near 2^64 that wraps past the top).
//!
//! The generator is a pure function of the seed (a hand-written SplitMix64, so sequences stay the
//! same across `rand` versions). Every generated range lies inside the window, or fails before
//! touching anything (overflowing lengths wrap past 2^64, which every call rejects): the kernel
//! side applies ops to the real test process, so nothing may ever reach outside the window.
//! Every `mmap` flag bit Linux defines is drawn, and unknown ones, except those aspace refuses on
//! purpose (`MAP_GROWSDOWN`, `MAP_LOCKED`, `MAP_HUGETLB`, `MAP_32BIT` without `MAP_FIXED`, the
//! `MAP_DROPPABLE` type; `semantics.rs`); protections carry `PROT_SEM`, `PROT_GROWSDOWN`,
//! `PROT_GROWSUP` or any other bit in a quarter of the draws. Boundary ops (`boundary_op`) name
//! addresses at and above Linux's `TASK_SIZE` up to the top page of 2^64, aligned or not, which
//! both sides must refuse alike; among them `top_page_mmap`, fixed mappings in the top page
//! with any type and flags (Linux's errno is `-addr` there). Advice values that change
//! kernel-internal VMA flags (`MADV_RANDOM`, `MADV_SEQUENTIAL`) are not generated.
//!
//! Not for: applying ops (that is `kernel.rs` and `engine.rs`).

use std::fmt;

/// Bytes per page.
pub const PAGE: u64 = 4096;

pub const PROT_SEM: u32 = 0x8;
pub const PROT_GROWSDOWN: u32 = 0x0100_0000;
pub const PROT_GROWSUP: u32 = 0x0200_0000;

pub const MAP_SHARED: u32 = 0x01;
pub const MAP_PRIVATE: u32 = 0x02;
pub const MAP_SHARED_VALIDATE: u32 = 0x03;
pub const MAP_FIXED: u32 = 0x10;
pub const MAP_ANONYMOUS: u32 = 0x20;
pub const MAP_DENYWRITE: u32 = 0x800;
pub const MAP_EXECUTABLE: u32 = 0x1000;
pub const MAP_NORESERVE: u32 = 0x4000;
pub const MAP_POPULATE: u32 = 0x8000;
pub const MAP_FIXED_NOREPLACE: u32 = 0x10_0000;
pub const MAP_32BIT: u32 = 0x40;
pub const MAP_ABOVE4G: u32 = 0x80;
pub const MAP_NONBLOCK: u32 = 0x1_0000;
pub const MAP_STACK: u32 = 0x2_0000;
pub const MAP_SYNC: u32 = 0x8_0000;
pub const MAP_UNINITIALIZED: u32 = 0x400_0000;
/// Linux's `TASK_SIZE` (x86-64, four-level): the first address above user space.
pub const TASK_SIZE: u64 = (1 << 47) - PAGE;
/// A bit no Linux version defines for `mmap`.
pub const MAP_UNKNOWN: u32 = 0x2000_0000;

pub const MADV_NORMAL: i32 = 0;
pub const MADV_WILLNEED: i32 = 3;
pub const MADV_DONTNEED: i32 = 4;

/// The kind of a single access (`touch`), mirrored from `aspace_vm::Access` so this module does
/// not depend on the engine.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Acc {
    Read,
    Write,
    Exec,
}

/// One operation, applied to the kernel window and to aspace alike.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Op {
    /// `mmap(W + off, len, prot, flags, -1, 0)`.
    Mmap {
        off: u64,
        len: u64,
        prot: u32,
        flags: u32,
    },
    /// `munmap(W + off, len)`.
    Munmap { off: u64, len: u64 },
    /// `mprotect(W + off, len, prot)`.
    Mprotect { off: u64, len: u64, prot: u32 },
    /// `madvise(W + off, len, advice)`.
    Madvise { off: u64, len: u64, advice: i32 },
    /// Store `len` bytes of the pattern of `fill` at `W + off`.
    Write { off: u64, len: u64, fill: u64 },
    /// Load `len` bytes at `W + off`.
    Read { off: u64, len: u64 },
    /// One access at `W + off`.
    Touch { off: u64, access: Acc },
}

/// The bytes a `Write` op stores: byte `i` of the pattern of `fill`. Never all zero over a page,
/// so a write is always visible.
pub fn pattern_byte(fill: u64, i: u64) -> u8 {
    let x = splitmix(fill ^ (i / 8).wrapping_mul(0x9e37_79b9_7f4a_7c15));
    let b = (x >> ((i % 8) * 8)) as u8;
    if b == 0 {
        0x5a
    } else {
        b
    }
}

/// The pattern of `fill`, `len` bytes.
pub fn pattern(fill: u64, len: u64) -> Vec<u8> {
    (0..len).map(|i| pattern_byte(fill, i)).collect()
}

fn splitmix(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// SplitMix64: tiny, stable, good enough for choosing ops.
#[derive(Clone, Debug)]
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(splitmix(seed ^ 0xd1ff_0000_0000_0000))
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        splitmix(self.0)
    }

    /// Uniform in `0..n` (n > 0).
    pub fn below(&mut self, n: u64) -> u64 {
        self.next_u64() % n
    }

    /// True with probability `pct`%.
    pub fn pct(&mut self, pct: u64) -> bool {
        self.below(100) < pct
    }

    fn pick<T: Copy>(&mut self, xs: &[T]) -> T {
        xs[self.below(xs.len() as u64) as usize]
    }
}

/// What the generator may produce.
#[derive(Clone, Copy, Debug)]
pub struct GenConfig {
    /// Pages in the window.
    pub pages: u64,
    /// Longest range, in pages.
    pub max_len_pages: u64,
    /// Percentage of mmaps that are `MAP_SHARED` (0 disables shared mappings).
    pub shared_pct: u64,
    /// Percentage of ops with bad input.
    pub bad_pct: u64,
    /// The window's address (boundary ops name absolute addresses, as offsets from it).
    pub base: u64,
}

/// The sequence for `seed`: `n` ops.
pub fn generate(seed: u64, n: usize, cfg: &GenConfig) -> Vec<Op> {
    let mut rng = Rng::new(seed);
    (0..n).map(|_| gen_op(&mut rng, cfg)).collect()
}

/// A page range inside the window, biased to short ones: (offset, length) in bytes.
fn range(rng: &mut Rng, cfg: &GenConfig) -> (u64, u64) {
    let start = rng.below(cfg.pages);
    let room = (cfg.pages - start).min(cfg.max_len_pages);
    let len = if rng.pct(60) {
        1 + rng.below(room.min(3))
    } else {
        1 + rng.below(room)
    };
    (start * PAGE, len * PAGE)
}

/// A length of `len` bytes, sometimes not page-aligned (the calls round it up).
fn ragged(rng: &mut Rng, len: u64) -> u64 {
    if rng.pct(15) {
        len - rng.below(PAGE - 1) - 1
    } else {
        len
    }
}

/// A protection: mostly the eight `rwx` combinations, and in one of four draws one more bit:
/// `PROT_SEM`, `PROT_GROWSDOWN`, `PROT_GROWSUP`, both, or any bit of the 32.
fn prot(rng: &mut Rng) -> u32 {
    let extra = if rng.pct(25) {
        let any = 1u32 << rng.below(32);
        rng.pick(&[
            PROT_SEM,
            PROT_GROWSDOWN,
            PROT_GROWSUP,
            PROT_GROWSDOWN | PROT_GROWSUP,
            any,
            any,
        ])
    } else {
        0
    };
    extra | rwx(rng)
}

fn rwx(rng: &mut Rng) -> u32 {
    match rng.below(20) {
        0..=7 => 3,
        8..=11 => 1,
        12..=14 => 0,
        15 => 2,
        16 => 4,
        17 => 5,
        18 => 6,
        _ => 7,
    }
}

fn map_flags(rng: &mut Rng, cfg: &GenConfig) -> u32 {
    let sharing = if rng.pct(cfg.shared_pct) {
        MAP_SHARED
    } else {
        MAP_PRIVATE
    };
    let placement = match rng.below(10) {
        0..=6 => MAP_FIXED,
        7 | 8 => MAP_FIXED_NOREPLACE,
        _ => 0, // a hint
    };
    let mut f = sharing | MAP_ANONYMOUS | placement;
    if rng.pct(8) {
        f |= MAP_NORESERVE;
    }
    if rng.pct(8) {
        f |= MAP_POPULATE;
    }
    // Every other bit Linux defines for mmap, and unknown ones, except those aspace refuses on
    // purpose (MAP_GROWSDOWN, MAP_LOCKED, MAP_HUGETLB; MAP_32BIT without MAP_FIXED; see
    // `semantics.rs`).
    while rng.pct(30) {
        let any = 1u32 << (8 + rng.below(24));
        let bit = rng.pick(&[
            MAP_DENYWRITE,
            MAP_EXECUTABLE,
            MAP_NONBLOCK,
            MAP_NONBLOCK | MAP_POPULATE,
            MAP_STACK,
            MAP_SYNC,
            MAP_ABOVE4G,
            MAP_UNINITIALIZED,
            MAP_32BIT,
            any,
            any,
        ]);
        if bit & (0x100 | 0x2000 | 0x4_0000) != 0 || (bit == MAP_32BIT && placement == 0) {
            continue;
        }
        f |= bit;
    }
    f
}

fn gen_op(rng: &mut Rng, cfg: &GenConfig) -> Op {
    if rng.pct(cfg.bad_pct) {
        return bad_op(rng, cfg);
    }
    let (off, len) = range(rng, cfg);
    match rng.below(100) {
        0..=29 => Op::Mmap {
            off,
            len: ragged(rng, len),
            prot: prot(rng),
            flags: map_flags(rng, cfg),
        },
        30..=44 => Op::Munmap {
            off,
            len: ragged(rng, len),
        },
        45..=59 => Op::Mprotect {
            off,
            len: ragged(rng, len),
            prot: prot(rng),
        },
        60..=67 => Op::Madvise {
            off,
            len: ragged(rng, len),
            advice: if rng.pct(80) {
                MADV_DONTNEED
            } else {
                rng.pick(&[MADV_NORMAL, MADV_WILLNEED])
            },
        },
        68..=87 => {
            // Up to a little over two pages, anywhere (crossing page boundaries), inside the
            // window.
            let total = cfg.pages * PAGE;
            let start = rng.below(total);
            let len = (1 + rng.below(2 * PAGE + 64)).min(total - start);
            Op::Write {
                off: start,
                len,
                fill: rng.next_u64(),
            }
        }
        88..=93 => {
            let total = cfg.pages * PAGE;
            let start = rng.below(total);
            let len = (1 + rng.below(2 * PAGE)).min(total - start);
            Op::Read { off: start, len }
        }
        _ => Op::Touch {
            off: off + rng.below(PAGE),
            access: rng.pick(&[Acc::Read, Acc::Write, Acc::Exec]),
        },
    }
}

/// A length near 2^64: `addr + len` wraps for every window address (the window is far above
/// 2^32), so every call rejects it before touching anything.
fn overflowing_len(rng: &mut Rng) -> u64 {
    u64::MAX - rng.below(1 << 32)
}

fn bad_op(rng: &mut Rng, cfg: &GenConfig) -> Op {
    let (off, len) = range(rng, cfg);
    // An unaligned start with a length that still ends inside the window: past the window's end
    // aspace's top (`max_addr`) would be checked before the alignment (as Linux checks TASK_SIZE
    // first), while the kernel's top is far away, so the two errnos would legitimately differ.
    let delta = 1 + rng.below(PAGE - 1);
    // (The length is rounded up to pages before that check, hence the whole pages.)
    let unaligned = off + delta;
    let len_u = (len - delta).min((cfg.pages * PAGE - unaligned) / PAGE * PAGE);
    if rng.pct(25) {
        return boundary_op(rng, cfg);
    }
    match rng.below(16) {
        0 => Op::Mmap {
            off: unaligned,
            len: len_u,
            prot: 3,
            flags: MAP_PRIVATE | MAP_ANONYMOUS | rng.pick(&[MAP_FIXED, MAP_FIXED_NOREPLACE]),
        },
        1 => Op::Mmap {
            off,
            len: {
                let big = overflowing_len(rng);
                rng.pick(&[0, big])
            },
            prot: 3,
            flags: MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED,
        },
        2 => Op::Mmap {
            off,
            len,
            prot: prot(rng) | rng.pick(&[PROT_SEM, 0x10, 0x100, 0x1000_0000, PROT_GROWSDOWN]),
            flags: MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED,
        },
        3 => Op::Mmap {
            // Missing PRIVATE/SHARED, or a map type Linux does not know.
            off,
            len,
            prot: 3,
            flags: rng.pick(&[0, 0x04, 0x05, 0x06, 0x07]) | MAP_ANONYMOUS | MAP_FIXED,
        },
        4 => Op::Mmap {
            // Not anonymous, and fd -1.
            off,
            len: rng.pick(&[len, 0]),
            prot: 3,
            flags: MAP_PRIVATE | MAP_FIXED,
        },
        5 => Op::Mmap {
            // Flag bits Linux ignores for MAP_PRIVATE (legacy), or rejects with SHARED_VALIDATE.
            off,
            len,
            prot: 3,
            flags: rng.pick(&[MAP_PRIVATE, MAP_SHARED_VALIDATE])
                | MAP_ANONYMOUS
                | MAP_FIXED
                | rng.pick(&[MAP_DENYWRITE, MAP_EXECUTABLE, MAP_UNKNOWN]),
        },
        6 => Op::Munmap {
            off: unaligned,
            len: len_u,
        },
        7 => Op::Munmap {
            off,
            len: {
                let big = overflowing_len(rng);
                rng.pick(&[0, big])
            },
        },
        8 => Op::Mprotect {
            off: unaligned,
            len: len_u,
            prot: 3,
        },
        9 => Op::Mprotect {
            off,
            len: {
                let big = overflowing_len(rng);
                rng.pick(&[0, big])
            },
            prot: prot(rng),
        },
        10 | 11 => Op::Mprotect {
            off,
            len,
            prot: prot(rng) | rng.pick(&[PROT_SEM, 0x10, 0x100, 0x1000_0000, PROT_GROWSDOWN]),
        },
        12 => Op::Madvise {
            off: unaligned,
            len: len_u,
            advice: MADV_DONTNEED,
        },
        13 => Op::Madvise {
            off,
            len: {
                let big = overflowing_len(rng);
                rng.pick(&[0, big])
            },
            advice: MADV_DONTNEED,
        },
        14 => Op::Madvise {
            off,
            len,
            advice: rng.pick(&[5, 6, 7, 1000, -1]),
        },
        _ => Op::Touch {
            off: off + rng.below(PAGE),
            access: rng.pick(&[Acc::Read, Acc::Write, Acc::Exec]),
        },
    }
}

/// An op at the top of the address space: at or above Linux's `TASK_SIZE` (where user space
/// ends), up to the last page of the 64-bit space and its unaligned addresses, with lengths from
/// zero to overflowing. Linux refuses every such call before changing anything, and so must
/// aspace: its own top (the window's end) lies below, so for these addresses both tops give the
/// same answer (`MAP_FIXED` past the top `ENOMEM`, `munmap` `EINVAL`, `mprotect`/`madvise`
/// `ENOMEM` or `EINVAL`, `MAP_FIXED` in the top page `errno = -addr`).
fn boundary_op(rng: &mut Rng, cfg: &GenConfig) -> Op {
    if rng.pct(30) {
        return top_page_mmap(rng, cfg);
    }
    let below_top = 0u64.wrapping_sub(PAGE * (1 + rng.below(16)));
    let page = rng.pick(&[
        TASK_SIZE,
        TASK_SIZE + PAGE,
        1 << 47,
        1 << 48,
        1 << 56,
        1 << 63,
        below_top,
        0u64.wrapping_sub(PAGE),
    ]);
    let addr = if rng.pct(40) {
        page.wrapping_add(1 + rng.below(PAGE - 1))
    } else {
        page
    };
    let (some, big) = (rng.below(16 * PAGE), overflowing_len(rng));
    let len = rng.pick(&[0, 1, PAGE, 2 * PAGE, some, big]);
    let off = addr.wrapping_sub(cfg.base);
    match rng.below(6) {
        0 | 1 => Op::Mmap {
            off,
            len,
            prot: prot(rng),
            flags: map_flags(rng, cfg) | rng.pick(&[MAP_FIXED, MAP_FIXED_NOREPLACE]),
        },
        2 => Op::Munmap { off, len },
        3 => Op::Mprotect {
            off,
            len,
            prot: prot(rng),
        },
        _ => Op::Madvise {
            off,
            len,
            advice: rng.pick(&[MADV_NORMAL, MADV_WILLNEED, MADV_DONTNEED, 77]),
        },
    }
}

/// `MAP_FIXED`/`MAP_FIXED_NOREPLACE` at an address in the top page (`addr > 2^64 - 4096`), the
/// class where Linux's errno is `-addr` (issue 19, `semantics.rs`): lengths on both sides of
/// each check that comes before it (zero; past aspace's top but below `TASK_SIZE`, where
/// aspace once said `ENOMEM`; `TASK_SIZE` and one byte more; overflowing), any mapping type,
/// protection and flag, `MAP_GROWSDOWN`, `MAP_LOCKED` and `MAP_32BIT` included (only
/// `MAP_HUGETLB`, unsupported, is left out). Every such call fails without mapping anything.
fn top_page_mmap(rng: &mut Rng, cfg: &GenConfig) -> Op {
    let addr = 0u64.wrapping_sub(1 + rng.below(PAGE - 1));
    let window = cfg.pages * PAGE;
    let lens = [
        0,
        1 + rng.below(4 * PAGE),
        window + 1 + rng.below(PAGE),
        window + rng.below(TASK_SIZE - window),
        0x5d40_0003_0001,
        TASK_SIZE - rng.below(PAGE),
        TASK_SIZE + 1 + rng.below(PAGE),
        overflowing_len(rng),
    ];
    let len = rng.pick(&lens);
    let ty = rng.below(16) as u32;
    let fixed = rng.pick(&[
        MAP_FIXED,
        MAP_FIXED_NOREPLACE,
        MAP_FIXED | MAP_FIXED_NOREPLACE,
    ]);
    let mut flags = ty | MAP_ANONYMOUS | fixed;
    while rng.pct(40) {
        flags |= rng.pick(&[
            MAP_SYNC,
            MAP_POPULATE,
            MAP_NORESERVE,
            MAP_STACK,
            MAP_32BIT,
            0x100,  // MAP_GROWSDOWN
            0x2000, // MAP_LOCKED
            MAP_UNKNOWN,
        ]);
    }
    let prot = prot(rng);
    Op::Mmap {
        off: addr.wrapping_sub(cfg.base),
        len,
        prot,
        flags,
    }
}

fn prot_name(p: u32) -> String {
    let known = [(1, "READ"), (2, "WRITE"), (4, "EXEC")];
    let mut parts: Vec<String> = known
        .iter()
        .filter(|(b, _)| p & b != 0)
        .map(|(_, n)| n.to_string())
        .collect();
    if p & !7 != 0 {
        parts.push(format!("{:#x}", p & !7));
    }
    if parts.is_empty() {
        "NONE".into()
    } else {
        parts.join("|")
    }
}

fn flags_name(f: u32) -> String {
    let mut parts = vec![match f & 0xf {
        0 => "no-type".to_string(),
        1 => "SHARED".into(),
        2 => "PRIVATE".into(),
        3 => "SHARED_VALIDATE".into(),
        t => format!("type {t:#x}"),
    }];
    let known = [
        (MAP_FIXED, "FIXED"),
        (MAP_ANONYMOUS, "ANONYMOUS"),
        (MAP_DENYWRITE, "DENYWRITE"),
        (MAP_EXECUTABLE, "EXECUTABLE"),
        (MAP_NORESERVE, "NORESERVE"),
        (MAP_POPULATE, "POPULATE"),
        (MAP_FIXED_NOREPLACE, "FIXED_NOREPLACE"),
        (MAP_32BIT, "32BIT"),
        (MAP_ABOVE4G, "ABOVE4G"),
        (MAP_NONBLOCK, "NONBLOCK"),
        (MAP_STACK, "STACK"),
        (MAP_SYNC, "SYNC"),
        (MAP_UNINITIALIZED, "UNINITIALIZED"),
    ];
    let mut rest = f & !0xf;
    for (b, n) in known {
        if f & b != 0 {
            parts.push(n.into());
            rest &= !b;
        }
    }
    if rest != 0 {
        parts.push(format!("{rest:#x}"));
    }
    parts.join("|")
}

impl fmt::Display for Op {
    /// The op as a call on a `CoreHandle` `h`, with `W` the window base.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            Op::Mmap {
                off,
                len,
                prot,
                flags,
            } => write!(
                f,
                "h.mmap(W + {off:#x}, {len:#x}, Prot::from_bits_retain({prot:#x}), \
                 MapFlags::from_bits_retain({flags:#x})); // {}, {}",
                prot_name(prot),
                flags_name(flags)
            ),
            Op::Munmap { off, len } => write!(f, "h.munmap(W + {off:#x}, {len:#x});"),
            Op::Mprotect { off, len, prot } => write!(
                f,
                "h.mprotect(W + {off:#x}, {len:#x}, Prot::from_bits_retain({prot:#x})); // {}",
                prot_name(prot)
            ),
            Op::Madvise { off, len, advice } => write!(
                f,
                "h.madvise(W + {off:#x}, {len:#x}, Advice::from_raw({advice}));"
            ),
            Op::Write { off, len, fill } => {
                write!(f, "h.write(W + {off:#x}, &pattern({fill:#x}, {len:#x}));")
            }
            Op::Read { off, len } => write!(f, "h.read(W + {off:#x}, &mut [0; {len:#x}]);"),
            Op::Touch { off, access } => {
                write!(f, "h.touch(W + {off:#x}, Access::{access:?});")
            }
        }
    }
}

/// The whole sequence, one call per line, ready to paste into a test.
pub fn listing(ops: &[Op]) -> String {
    let mut s = String::new();
    for op in ops {
        s.push_str("    ");
        s.push_str(&op.to_string());
        s.push('\n');
    }
    s
}
