//! The shared address space: [`AddressSpace`] (a cheap `Arc` handle) and the state every core
//! shares ([`Shared`]): configuration, frame pool, page tables, shootdown slots, the RCU domain
//! that reclaims page tables, per-core counters, and the design's region state.
//!
//! Each thread that accesses memory or changes mappings calls [`AddressSpace::attach`] once and
//! works through the [`crate::CoreHandle`] it gets; the space itself only answers `maps()` and
//! `stats()`. The last of the `AddressSpace` clones and handles to go frees everything: page
//! tables, the frame reservation, and (after running its pending callbacks) the RCU domain.
//!
//! Counters: event counts (faults, fills, TLB hits and misses) are per core, in a cache-padded
//! slot indexed by the core id and written only by that core (`Relaxed` load + store, no
//! read-modify-write); a detaching core folds its counts into `retired` and zeroes its slot.
//! `stats()` sums them, so a snapshot taken while cores run is not atomic across fields.
//!
//! Not for: the lock contract (crate docs in `lib.rs`), the access path (`handle.rs`) or region
//! rules (`semantics.rs`, `region.rs`, `designs/`).

use crate::config::{Builder, Config};
use crate::designs::{DesignOps, Designs};
use crate::error::VmError;
use crate::frames::{FrameCache, FramePool};
use crate::handle::{Core, CoreHandle};
use crate::page_table::{PageTables, VA_BITS};
use crate::semantics::Bounds;
use crate::shootdown::{CoreId, Shootdown};
use crate::stats::Stats;
use crate::tlb::Tlb;
use crate::types::RegionInfo;
use crossbeam_utils::CachePadded;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// One core's event counters (statistics only: every access is `Relaxed`).
#[derive(Debug, Default)]
pub(crate) struct CoreCounters {
    faults: AtomicU64,
    fills: AtomicU64,
    tlb_hits: AtomicU64,
    tlb_misses: AtomicU64,
}

impl CoreCounters {
    /// +1 by the owning core (load + store: it is the only writer).
    #[inline]
    fn bump(c: &AtomicU64) {
        c.store(c.load(Ordering::Relaxed) + 1, Ordering::Relaxed);
    }

    /// One more fault handled.
    #[inline]
    pub(crate) fn bump_faults(&self) {
        Self::bump(&self.faults);
    }

    /// One more fill with a fresh frame.
    #[inline]
    pub(crate) fn bump_fills(&self) {
        Self::bump(&self.fills);
    }

    /// Publishes the core's TLB totals.
    #[inline]
    pub(crate) fn publish_tlb(&self, hits: u64, misses: u64) {
        self.tlb_hits.store(hits, Ordering::Relaxed);
        self.tlb_misses.store(misses, Ordering::Relaxed);
    }

    fn read(&self) -> [u64; 4] {
        [
            self.faults.load(Ordering::Relaxed),
            self.fills.load(Ordering::Relaxed),
            self.tlb_hits.load(Ordering::Relaxed),
            self.tlb_misses.load(Ordering::Relaxed),
        ]
    }

    fn reset(&self) {
        for c in [&self.faults, &self.fills, &self.tlb_hits, &self.tlb_misses] {
            c.store(0, Ordering::Relaxed);
        }
    }

    fn add(&self, v: [u64; 4]) {
        for (c, v) in [&self.faults, &self.fills, &self.tlb_hits, &self.tlb_misses]
            .into_iter()
            .zip(v)
        {
            c.fetch_add(v, Ordering::Relaxed);
        }
    }
}

/// What every core of one space shares. Field order is drop order: page tables go before the
/// RCU domain that may still hold their retired tables' callbacks (those own their memory).
pub(crate) struct Shared {
    /// The configuration.
    pub(crate) config: Config,
    /// `[min_addr, max_addr)`.
    pub(crate) bounds: Bounds,
    /// The design's region state and locks.
    pub(crate) design: Designs,
    /// The page tables (lock-free walks under `domain` read guards).
    pub(crate) tables: PageTables,
    /// The frames.
    pub(crate) pool: FramePool,
    /// The shootdown slots, one per attached core.
    pub(crate) shootdown: Shootdown,
    /// Reclaims page tables after a grace period; each core holds a reader.
    pub(crate) domain: aspace_rcu::Domain,
    counters: Box<[CachePadded<CoreCounters>]>,
    retired: CoreCounters,
}

impl Shared {
    /// The counters of core `id`.
    #[inline]
    pub(crate) fn counters(&self, id: CoreId) -> &CoreCounters {
        &self.counters[id.index()]
    }

    /// Folds a detaching core's counters into the totals and clears its slot.
    pub(crate) fn retire_counters(&self, id: CoreId) {
        let c = self.counters(id);
        self.retired.add(c.read());
        c.reset();
    }
}

/// A software address space with Linux `mmap` semantics over real memory.
#[derive(Clone)]
pub struct AddressSpace {
    shared: Arc<Shared>,
}

impl std::fmt::Debug for AddressSpace {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AddressSpace")
            .field("design", &self.shared.config.design)
            .field("stats", &self.stats())
            .finish()
    }
}

impl AddressSpace {
    /// A builder with the default configuration.
    pub fn builder() -> Builder {
        Builder::default()
    }

    /// Creates the space from a validated configuration (use [`AddressSpace::builder`]).
    pub(crate) fn with_config(config: Config) -> Result<AddressSpace, VmError> {
        if config.max_addr > 1 << VA_BITS {
            return Err(VmError::InvalidArgument(
                "max_addr beyond the 48-bit four-level page tables",
            ));
        }
        let pool = FramePool::new(config.memory, config.frame_batch)?;
        let counters = (0..config.max_cores)
            .map(|_| CachePadded::new(CoreCounters::default()))
            .collect();
        let shared = Shared {
            bounds: Bounds {
                min_addr: config.min_addr,
                max_addr: config.max_addr,
            },
            design: Designs::new(config.design),
            tables: PageTables::new(),
            pool,
            shootdown: Shootdown::new(config.max_cores),
            domain: aspace_rcu::Domain::new(),
            counters,
            retired: CoreCounters::default(),
            config,
        };
        Ok(AddressSpace {
            shared: Arc::new(shared),
        })
    }

    /// The configuration it was built with.
    pub fn config(&self) -> &Config {
        &self.shared.config
    }

    /// Attaches the calling thread as a new core.
    ///
    /// # Errors
    /// [`VmError::TooManyCores`] when `max_cores` handles are alive.
    pub fn attach(&self) -> Result<CoreHandle, VmError> {
        let sh = &self.shared;
        let id = sh.shootdown.register()?;
        let core = Core {
            id,
            seen: sh.shootdown.current_request(id),
            tlb: Tlb::new(sh.config.tlb_entries),
            cache: FrameCache::new(),
            reader: sh.domain.register(),
            freed: Vec::new(),
            pages: Vec::new(),
            anon_next: 0,
            anon_end: 0,
        };
        Ok(CoreHandle::new(Arc::clone(sh), core))
    }

    /// The regions, sorted by address, like `/proc/self/maps`.
    pub fn maps(&self) -> Vec<RegionInfo> {
        self.shared.design.maps()
    }

    /// A snapshot of the counters.
    pub fn stats(&self) -> Stats {
        let sh = &self.shared;
        let mut ev = sh.retired.read();
        for c in sh.counters.iter() {
            for (t, v) in ev.iter_mut().zip(c.read()) {
                *t += v;
            }
        }
        Stats {
            faults: ev[0],
            fills: ev[1],
            shootdowns_sent: sh.shootdown.sent(),
            shootdowns_received: sh.shootdown.received(),
            tlb_hits: ev[2],
            tlb_misses: ev[3],
            frames_in_use: sh.pool.in_use(),
            frames_total: sh.pool.capacity(),
            page_tables: sh.tables.table_count(),
            regions: sh.design.region_count(),
            cores: sh.shootdown.cores(),
        }
    }
}
