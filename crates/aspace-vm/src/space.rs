//! The address space: [`AddressSpace`], a cheap handle (an `Arc`) on a [`Space`], which holds
//! the design (its region store and locks) beside the state every core shares ([`Shared`]).
//!
//! Cloning an `AddressSpace` gives another handle on the **same** space (like sharing an `mm`
//! between threads), not a copy. Each thread that accesses memory or changes mappings calls
//! [`AddressSpace::attach`] (in `handle.rs`) and works through the [`crate::CoreHandle`] it
//! gets; the space itself answers `maps()` and `stats()`. The last of the `AddressSpace` clones
//! and handles to go frees everything: regions, page tables, the frame reservation, and (after
//! running its pending callbacks) the RCU domain. A space built in a shared [`Memory`]
//! (`Builder::build_in`) first unmaps everything, so that its frames go back to the memory.
//!
//! Not for: the lock contract (`designs/mod.rs`), the access path (`handle.rs`) or region
//! rules (`semantics.rs`, `region/`, `designs/`).

use crate::config::{Builder, Config};
use crate::core_state::Core;
use crate::designs::{DesignOps, Designs};
use crate::error::VmError;
use crate::memory::Memory;
use crate::page_table::TABLE_BYTES;
use crate::shared::Shared;
use crate::stats::Stats;
use crate::types::RegionInfo;
use std::mem::ManuallyDrop;
use std::sync::Arc;

/// One space: the design beside the shared state. Dropped by hand (see `Drop`): the design's
/// regions first, then the shared state (see [`Shared`] for its own order).
pub(crate) struct Space {
    /// The design's region store and locks.
    pub(crate) design: ManuallyDrop<Designs>,
    /// What every core shares.
    pub(crate) shared: ManuallyDrop<Shared>,
}

impl Drop for Space {
    fn drop(&mut self) {
        if self.shared.in_forked_child() {
            // Its locks may be held by threads that do not exist here and its RCU domain's
            // reclaimer thread is the parent's: leak it (`fork.rs`).
            return;
        }
        if self.shared.memory.is_shared() {
            self.return_frames();
        }
        // SAFETY: dropped once, here, and never used again.
        unsafe {
            ManuallyDrop::drop(&mut self.design);
            ManuallyDrop::drop(&mut self.shared);
        }
    }
}

impl Space {
    /// Gives every frame the space still maps back to its memory, which outlives it (another
    /// space, a file or the user holds it): a core attached for the purpose unmaps the whole
    /// range through the design's own `munmap` (Linux's `exit_mmap`), which frees the frames
    /// after their shootdown, and detaches, which drains its frame cache into the pool. No
    /// other core exists (every handle held the space alive), so the attach cannot find the
    /// slots full; were it refused (no memory for its page-table cache), the frames stay
    /// allocated: a leak of memory that the memory's owner still accounts for, never an
    /// unsound free.
    fn return_frames(&mut self) {
        let sh = &*self.shared;
        let Ok(mut core) = Core::attach(sh) else {
            return;
        };
        let all = sh.bounds.min_addr..sh.bounds.max_addr;
        // A whole-range unmap splits nothing, so it cannot fail for `max_map_count`; any
        // error leaves the remaining frames allocated (as above).
        let _ = self.design.munmap(sh, &mut core, all);
        core.release_freed(sh);
        self.design.reclaim_tables(sh, &mut core);
        core.detach(sh);
    }
}

/// A software address space with Linux `mmap` semantics over real memory. Clones share the
/// same space.
#[derive(Clone)]
pub struct AddressSpace {
    pub(crate) space: Arc<Space>,
}

impl std::fmt::Debug for AddressSpace {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AddressSpace")
            .field("design", &self.space.shared.config.design)
            .field("stats", &self.stats())
            .finish()
    }
}

impl Builder {
    /// Creates the address space: reserves the frame memory and sets up the design.
    ///
    /// # Errors
    /// [`VmError::BadConfig`] for a value out of its range (before allocating anything);
    /// [`VmError::OutOfMemory`] when the frame reservation itself fails.
    pub fn build(self) -> Result<AddressSpace, VmError> {
        self.build_with(None)
    }

    /// Creates the address space in `memory`: its frames come from there, shared with the other
    /// spaces and the files built in it (so one budget bounds them all), instead of a
    /// reservation of its own; `Config::memory` is not used and the frame batch is the
    /// memory's. When the space goes, its frames go back to `memory` (it unmaps everything
    /// first, as a process's exit does).
    ///
    /// # Errors
    /// [`VmError::BadConfig`] for a value out of its range (before anything is made).
    pub fn build_in(self, memory: &Memory) -> Result<AddressSpace, VmError> {
        self.build_with(Some(memory))
    }

    fn build_with(self, memory: Option<&Memory>) -> Result<AddressSpace, VmError> {
        let policy = self.policy();
        let config = self.validated()?;
        let tables = config.design.page_tables();
        let shared = Shared::new(config, policy, tables, memory)?;
        let design = Designs::new(&shared);
        Ok(AddressSpace {
            space: Arc::new(Space {
                design: ManuallyDrop::new(design),
                shared: ManuallyDrop::new(shared),
            }),
        })
    }
}

impl AddressSpace {
    /// A builder with the default configuration.
    pub fn builder() -> Builder {
        Builder::default()
    }

    /// The configuration it was built with.
    pub fn config(&self) -> &Config {
        &self.space.shared.config
    }

    /// Panics with a clear message in a forked child (these views have no error to return, and
    /// waiting for a lock frozen by the fork would hang).
    fn refuse_in_forked_child(&self, what: &str) {
        assert!(
            !self.space.shared.in_forked_child(),
            "aspace_vm: AddressSpace::{what}() in a forked child: a space does not survive fork() \
             (README, hazards)"
        );
    }

    /// The regions, sorted by address, like `/proc/self/maps`.
    ///
    /// # Panics
    /// In a forked child of the process that built the space.
    pub fn maps(&self) -> Vec<RegionInfo> {
        self.refuse_in_forked_child("maps");
        self.space.design.maps()
    }

    /// A snapshot of the counters (not atomic across fields while cores run).
    ///
    /// # Panics
    /// In a forked child of the process that built the space.
    pub fn stats(&self) -> Stats {
        self.refuse_in_forked_child("stats");
        let sh = &self.space.shared;
        let events = sh.counters.sum();
        Stats {
            faults: events.faults,
            fills: events.fills,
            shootdowns_sent: events.shootdowns,
            shootdowns: events.shootdowns,
            shootdown_targets: events.shootdown_targets,
            shootdown_waits: events.shootdown_waits,
            shootdowns_received: sh.shootdown.received(),
            tlb_hits: events.tlb_hits,
            tlb_misses: events.tlb_misses,
            frames_in_use: sh.pool().in_use(),
            frames_total: sh.pool().capacity(),
            page_tables: sh.tables.table_count(),
            page_table_bytes: sh.tables.table_count() * TABLE_BYTES,
            page_table_bytes_per_core: sh
                .tables
                .per_core()
                .into_iter()
                .map(|n| n * TABLE_BYTES)
                .collect(),
            metadata_bytes: self.space.design.region_metadata_bytes()
                + sh.tables.owner_table_count() * TABLE_BYTES,
            regions: self.space.design.region_count(),
            cores: sh.shootdown.cores(),
            fault_stages: events.stages,
        }
    }

    /// **Testing hook, not an API**: runs `while_held` while the calling thread holds every lock
    /// of the space's frame pool and page-table pool (the locks a core's detach takes), so that
    /// a test can `fork()` from another thread at a moment they are held and check that the
    /// child's drops touch none of them (README, hazards: `fork`).
    #[doc(hidden)]
    #[cfg(not(loom))]
    pub fn hold_pool_locks_for_testing<R>(&self, while_held: impl FnOnce() -> R) -> R {
        let sh = &self.space.shared;
        sh.pool()
            .with_locks_held(|| sh.tables.with_pool_locks_held(while_held))
    }
}
