//! What every core of one space shares, whatever the design: configuration, bounds, page
//! tables (in the design's organisation: `page_table/organisation.rs`), frames, shootdown slots and policy, the RCU domain that reclaims page tables, event
//! counters and the anon identity counter ([`Shared`]).
//!
//! A design keeps its region store and locks beside this (`space.rs` holds both); the Linux
//! bodies (`designs/syscalls.rs`) receive `&Shared` and the store borrowed from the design's
//! lock guard.
//!
//! Not for: per-core state (`core_state.rs`), locks of the region set (`designs/`).

use crate::config::Config;
use crate::counters::Counters;
use crate::error::{Limit, VmError};
use crate::fork;
use crate::frames::FramePool;
use crate::memory::Memory;
use crate::page_table::organisation::{Organisation, SpaceTables};
use crate::page_table::VA_BITS;
use crate::region::AnonId;
use crate::semantics::Bounds;
use crate::shootdown::{Shootdown, ShootdownPolicy};
use crate::sync::stat::AtomicU64;
use std::ops::Range;
use std::sync::atomic::Ordering;

/// Anon identities a core takes from the shared counter at once.
const ANON_BLOCK: u64 = 1 << 16;

/// The space-wide anon identity counter; cores take blocks of [`ANON_BLOCK`] identities and
/// hand them out without touching it (`core_state.rs`).
#[derive(Debug)]
pub(crate) struct AnonIds {
    next: AtomicU64,
}

impl AnonIds {
    fn new() -> AnonIds {
        AnonIds {
            // 0 encodes "no identity" (`AnonId::encode`).
            next: AtomicU64::new(1),
        }
    }

    /// A block of fresh identities (Relaxed: uniqueness needs only the RMW's atomicity).
    pub(crate) fn block(&self) -> Range<u64> {
        let start = self.next.fetch_add(ANON_BLOCK, Ordering::Relaxed);
        debug_assert!(AnonId::decode(start).is_some());
        start..start + ANON_BLOCK
    }
}

/// What every core of one space shares. Field order is drop order: page tables go before the
/// RCU domain that may still hold their retired tables' callbacks (those own their memory).
pub(crate) struct Shared {
    /// The configuration.
    pub(crate) config: Config,
    /// `[min_addr, max_addr)`.
    pub(crate) bounds: Bounds,
    /// The page tables, one shared tree or one tree per core (lock-free walks under `domain`
    /// read guards).
    pub(crate) tables: SpaceTables,
    /// The memory its frames come from: its own, or one shared with other spaces and files
    /// (`Builder::build_in`).
    pub(crate) memory: Memory,
    /// The shootdown slots, one per attached core.
    pub(crate) shootdown: Shootdown,
    /// Whom `munmap`/`mprotect`/`madvise` shoot down: every core, or only those recorded in
    /// the changed leaf tables (fixed at build: the design's, `Design::shootdown_policy`).
    pub(crate) shootdown_policy: ShootdownPolicy,
    /// Reclaims page tables after a grace period; each core holds a reader.
    pub(crate) domain: aspace_rcu::Domain,
    /// Per-core event counters.
    pub(crate) counters: Counters,
    /// Anon identities.
    pub(crate) anon_ids: AnonIds,
    /// `coarse` only (else `None`): the group of its upgradable space lock, which every core
    /// joins at attach (`Core::member`); light while one core is attached
    /// (`designs/coarse.rs`).
    pub(crate) space_lock_group: Option<aspace_sync::LockGroup>,
    /// The process's fork generation when the space was built (`fork.rs`).
    born: u64,
}

impl Shared {
    /// The shared state of a new, empty space.
    ///
    /// # Errors
    /// [`VmError::InvalidArgument`] for a range beyond the page tables; the frame pool's errors;
    /// [`VmError::OutOfMemory`] (`Limit::Memory`) when the RCU reclaimer thread cannot be
    /// spawned.
    pub(crate) fn new(
        config: Config,
        shootdown_policy: ShootdownPolicy,
        tables: Organisation,
        memory: Option<&Memory>,
    ) -> Result<Shared, VmError> {
        if config.max_addr > 1 << VA_BITS {
            return Err(VmError::InvalidArgument(
                "max_addr beyond the 48-bit four-level page tables",
            ));
        }
        // First: a space that cannot have its reclaimer thread (a thread or memory limit) is
        // refused before the frame reservation is made.
        let domain = aspace_rcu::Domain::try_with_config(aspace_rcu::DomainConfig::default())
            .map_err(|_| VmError::OutOfMemory(Limit::Memory))?;
        // `coarse`'s lock group has a domain (and a reclaimer thread) of its own: refused the
        // same way.
        let space_lock_group = match config.design {
            crate::config::Design::Coarse => Some(
                aspace_sync::LockGroup::try_new()
                    .map_err(|_| VmError::OutOfMemory(Limit::Memory))?,
            ),
            _ => None,
        };
        Ok(Shared {
            bounds: Bounds {
                min_addr: config.min_addr,
                max_addr: config.max_addr,
            },
            tables: SpaceTables::new(tables, config.max_cores),
            memory: match memory {
                Some(m) => m.clone(),
                None => Memory::with_batch(config.memory, config.frame_batch)?,
            },
            shootdown: Shootdown::new(config.max_cores),
            shootdown_policy,
            domain,
            counters: Counters::new(config.max_cores),
            anon_ids: AnonIds::new(),
            space_lock_group,
            born: fork::generation(),
            config,
        })
    }

    /// The frame pool.
    #[inline]
    pub(crate) fn pool(&self) -> &FramePool {
        &self.memory.inner.pool
    }

    /// Whether this is a forked child using its parent's space (`fork.rs`): every entry point
    /// refuses then.
    #[inline]
    pub(crate) fn in_forked_child(&self) -> bool {
        fork::forked_since(self.born)
    }
}
