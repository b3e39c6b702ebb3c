//! The designs: one concurrency strategy each for the region set, page faults and the system
//! calls, behind one internal interface the core handle dispatches to.
//!
//! [`DesignOps`] is that interface: the four system calls (already validated by `semantics.rs`
//! down to the parts that need the region set), the page-fault handler the access path calls
//! outside its access window, and the read-only views (`maps`, region count). [`Designs`] is the
//! closed set of implementations, an enum so that dispatch is a `match` the compiler inlines
//! (no virtual call on the fault path). A new design (`faultlock`, `hybrid`, `bonsai`, `radix`,
//! `interval`) adds a file here, a variant to [`Designs`] and to `config::Design`, and its
//! shootdown policy (broadcast or targeted) to `Design::shootdown_policy` (`config.rs`).
//!
//! A design is a **lock policy** over shared parts: it owns a region store
//! (`region/store.rs`) and the locks around it, and calls the Linux bodies of `syscalls.rs`
//! with the store borrowed from its lock guard; placement lives in `placement.rs`.
//!
//! Not for: the access path (`handle.rs`, shared by all designs) or argument validation.

pub(crate) mod coarse;
pub(crate) mod interval;
mod placement;
mod syscalls;

use crate::core_state::Core;
use crate::error::{Fault, VmError};
use crate::semantics::{AdviceEffect, MmapRequest};
use crate::shared::Shared;
use crate::types::{Access, Prot, RegionInfo};
use std::ops::Range;

/// What a design implements (see the module doc). `sh` is the space's shared state, `core` the
/// calling core's private state; the design never blocks inside an access window because it is
/// never called inside one.
pub(crate) trait DesignOps: Send + Sync {
    /// `mmap` after argument checks.
    fn mmap(&self, sh: &Shared, core: &mut Core, req: MmapRequest) -> Result<u64, VmError>;
    /// `munmap` of a validated, non-empty page range.
    fn munmap(&self, sh: &Shared, core: &mut Core, range: Range<u64>) -> Result<(), VmError>;
    /// `mprotect` of a validated, non-empty page range with known prot bits.
    fn mprotect(
        &self,
        sh: &Shared,
        core: &mut Core,
        range: Range<u64>,
        prot: Prot,
    ) -> Result<(), VmError>;
    /// `madvise` of a validated, non-empty page range.
    fn madvise(
        &self,
        sh: &Shared,
        core: &mut Core,
        range: Range<u64>,
        effect: AdviceEffect,
    ) -> Result<(), VmError>;
    /// Handles a fault at `va` (the page has no present entry allowing `access`): on success
    /// the page-table entry allows the access (the caller retries its translation). Counted in
    /// the statistics (`faults`, `fault_stages`).
    fn fault(&self, sh: &Shared, core: &mut Core, va: u64, access: Access) -> Result<(), Fault>;
    /// [`fault`](DesignOps::fault) for `MAP_POPULATE` ([`Designs::populate`]): the same path,
    /// not counted as a fault (a populate is not an access, as in Linux's per-process fault
    /// counts).
    fn populate_page(
        &self,
        sh: &Shared,
        core: &mut Core,
        va: u64,
        access: Access,
    ) -> Result<(), Fault>;
    /// The regions like `/proc/self/maps`.
    fn maps(&self) -> Vec<RegionInfo>;
    /// Number of regions.
    fn region_count(&self) -> u64;
}

/// Every implemented design.
#[derive(Debug)]
// One value per space, inside its `Arc`: the size difference costs nothing, a `Box` would cost
// an indirection on every fault.
#[allow(clippy::large_enum_variant)]
pub(crate) enum Designs {
    /// `coarse`: one space `RwLock`.
    Coarse(coarse::Coarse),
    /// `interval`: IntervalVM (SOSP'25 §5).
    Interval(interval::IntervalDesign),
}

macro_rules! dispatch {
    ($self:expr, $d:ident => $e:expr) => {
        match $self {
            Designs::Coarse($d) => $e,
            Designs::Interval($d) => $e,
        }
    };
}

impl Designs {
    /// The implementation of the design `sh` is configured with.
    pub(crate) fn new(sh: &Shared) -> Designs {
        match sh.config.design {
            crate::config::Design::Coarse => Designs::Coarse(coarse::Coarse::default()),
            crate::config::Design::Interval => Designs::Interval(interval::IntervalDesign::new(sh)),
        }
    }
}

impl Designs {
    /// `MAP_POPULATE`: faults every page of a mapping just made, through the design's own fault
    /// path, after the `mmap` returned from the design (its locks released, its region
    /// published), as Linux's `mm_populate` runs after `mmap_lock` is dropped. So no design
    /// installs a translation for a region that other cores cannot see yet (a lock-free fault
    /// would answer `Unmapped` for a page beside one it could already read). Writable private
    /// mappings are populated with write faults, like Linux's; a fault that fails (out of
    /// memory, or a concurrent `munmap`/`mprotect` of the range) ends the populate, and the
    /// `mmap` still succeeds, as in Linux.
    fn populate(&self, sh: &Shared, core: &mut Core, range: Range<u64>, prot: Prot) {
        if !prot.allows(Access::Read) {
            return;
        }
        let access = if prot.contains(Prot::WRITE) {
            Access::Write
        } else {
            Access::Read
        };
        for page in range.step_by(crate::types::PAGE_SIZE as usize) {
            if self.populate_page(sh, core, page, access).is_err() {
                break;
            }
        }
    }
}

impl DesignOps for Designs {
    /// The design's `mmap`, then `MAP_POPULATE` (see [`populate`]).
    #[inline]
    fn mmap(&self, sh: &Shared, core: &mut Core, req: MmapRequest) -> Result<u64, VmError> {
        let (populate, len, prot) = (req.populate, req.len, req.prot);
        let start = dispatch!(self, d => d.mmap(sh, core, req))?;
        if populate {
            self.populate(sh, core, start..start + len, prot);
        }
        Ok(start)
    }
    #[inline]
    fn munmap(&self, sh: &Shared, core: &mut Core, range: Range<u64>) -> Result<(), VmError> {
        dispatch!(self, d => d.munmap(sh, core, range))
    }
    #[inline]
    fn mprotect(
        &self,
        sh: &Shared,
        core: &mut Core,
        range: Range<u64>,
        prot: Prot,
    ) -> Result<(), VmError> {
        dispatch!(self, d => d.mprotect(sh, core, range, prot))
    }
    #[inline]
    fn madvise(
        &self,
        sh: &Shared,
        core: &mut Core,
        range: Range<u64>,
        effect: AdviceEffect,
    ) -> Result<(), VmError> {
        dispatch!(self, d => d.madvise(sh, core, range, effect))
    }
    #[inline]
    fn fault(&self, sh: &Shared, core: &mut Core, va: u64, access: Access) -> Result<(), Fault> {
        dispatch!(self, d => d.fault(sh, core, va, access))
    }
    #[inline]
    fn populate_page(
        &self,
        sh: &Shared,
        core: &mut Core,
        va: u64,
        access: Access,
    ) -> Result<(), Fault> {
        dispatch!(self, d => d.populate_page(sh, core, va, access))
    }
    fn maps(&self) -> Vec<RegionInfo> {
        dispatch!(self, d => d.maps())
    }
    fn region_count(&self) -> u64 {
        dispatch!(self, d => d.region_count())
    }
}
