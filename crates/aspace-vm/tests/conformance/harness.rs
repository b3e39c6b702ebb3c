//! The conformance suite's harness: the constants and flag helpers every test uses, the
//! construction of a space for a design, the [`Layout`]s a random sequence runs in, and
//! [`run_ops`], which runs one random sequence against the sequential model.
//!
//! Not for: what a sequence holds (`ops.rs`) or what is checked after each step (`checks.rs`).

use super::checks::{check_cheap, check_full, unmap_everything_and_check_empty};
use super::model::{Model, P};
use super::ops::{apply, Len, Op};
use aspace_vm::{AddressSpace, Design, MapFlags};

/// `MAP_PRIVATE | MAP_ANONYMOUS`.
pub const PA: MapFlags = MapFlags::PRIVATE_ANONYMOUS;
/// A flag bit Linux does not define (ignored by `mmap` unless `MAP_SHARED_VALIDATE`).
pub const UNKNOWN_MAP_BIT: u32 = 0x20_0000;
/// A protection bit Linux does not define.
pub const UNKNOWN_PROT_BIT: u32 = 0x10;

/// `flags` with `FIXED` added.
pub fn fixed(flags: MapFlags) -> MapFlags {
    flags | MapFlags::FIXED
}

/// Builds a space of `design` with the given address range, frames and map-count limit.
pub fn space(
    design: Design,
    min: u64,
    max: u64,
    frames: u64,
    max_map_count: usize,
) -> AddressSpace {
    AddressSpace::builder()
        .design(design)
        .address_range(min, max)
        .memory(frames * P)
        .max_map_count(max_map_count)
        .max_cores(16)
        .tlb_entries(8)
        .frame_batch(4)
        .build()
        .expect("build the address space")
}

/// Where a random sequence runs.
#[derive(Clone, Copy, Debug)]
pub struct Layout {
    /// `min_addr` of the space.
    pub min: u64,
    /// `max_addr` of the space.
    pub max: u64,
    /// Address of page 0 of the operations' window.
    pub base: u64,
    /// Pages in the window.
    pub pages: i64,
}

impl Layout {
    /// A 32-page address space: the window is the whole space (plus 3 pages either side).
    pub const TINY: Layout = Layout {
        min: 16 * P,
        max: 48 * P,
        base: 16 * P,
        pages: 32,
    };
    /// The top 32 pages of a 2^47 space (plus 3 pages above the top).
    pub const TOP: Layout = Layout {
        min: 0x1_0000,
        max: 1 << 47,
        base: (1 << 47) - 32 * P,
        pages: 32,
    };

    /// The address `page * P + skew` from the window's base.
    pub fn addr(&self, page: i64, skew: u64) -> u64 {
        (self.base as i64 + page * P as i64) as u64 + skew
    }

    /// The length `len` stands for in this layout.
    pub fn len(&self, len: Len) -> u64 {
        match len {
            Len::Pages(n, e) => n * P + e,
            Len::Huge(k) => u64::MAX - k,
            Len::PastSpace(n) => self.max + n * P,
        }
    }
}

/// Runs a random sequence on a fresh space of `design` in `layout`, checking after every step.
pub fn run_ops(design: Design, layout: Layout, max_map_count: usize, ops: &[Op]) {
    let space = space(
        design,
        layout.min,
        layout.max,
        frames_for(&layout, ops),
        max_map_count,
    );
    let mut h = space.attach().expect("attach");
    let mut model = Model::new(layout.min, layout.max, max_map_count);
    for (i, op) in ops.iter().enumerate() {
        apply(&mut h, &mut model, &layout, op);
        if i % 8 == 7 {
            check_full(&space, &mut h, &mut model);
        } else {
            check_cheap(&space, &model);
        }
    }
    check_full(&space, &mut h, &mut model);
    unmap_everything_and_check_empty(&space, &mut h);
}

/// Frames for a sequence: enough that no access runs out, since the model does not predict
/// running out of frames. The window's pages (4 times over) and a margin, plus every page a
/// hinted or anywhere `mmap` may place outside the window: in the top layout such mappings land
/// below the window, where `check_full` reads every page (7 merged 28-page anywhere mappings
/// once exhausted a pool of the window's frames alone; found by the fuzz harness).
fn frames_for(layout: &Layout, ops: &[Op]) -> u64 {
    let outside: u64 = ops
        .iter()
        .map(|op| match op {
            Op::Mmap {
                len: Len::Pages(n, e),
                ..
            } => n + u64::from(*e > 0),
            _ => 0,
        })
        .sum();
    4 * layout.pages as u64 + 64 + outside
}
