//! The two RCU flavors and the sealed trait through which `Domain` drives them.
//!
//! `Flavor` is the public, sealed marker; its supertrait `sealed::Sealed` carries the per-flavor
//! machinery (the domain-wide grace-period state, the per-reader slot and the read-side and
//! writer-side operations), so that `Domain<F>`, `Reader<F>` and `Guard<F>` are written once and
//! monomorphised into the flavor's code with no dynamic dispatch on the read path.
//!
//! - `Memb` (`memb.rs`): thesis §4.4; read sections cost two plain stores and compiler fences.
//! - `Qsbr` (`qsbr.rs`): read sections cost nothing; readers announce quiescent states.
//!
//! Not for: user-defined flavors (the trait is sealed).

use crate::config::DomainConfig;
use crate::memb::{self, MembGlobal, MembSlot};
use crate::qsbr::{self, QsbrGlobal, QsbrSlot};
use crate::registry::Registry;
use crate::stats::Counters;

/// A grace-period algorithm. Sealed: `Memb` and `Qsbr` are the only flavors.
pub trait Flavor: Send + Sync + 'static + sealed::Sealed {
    /// Short name used in reports ("memb", "qsbr").
    const NAME: &'static str;
}

/// Thesis §4.4: reader nesting counter + group in one word, compiler fences only; the writer
/// forces barriers with `membarrier(MEMBARRIER_CMD_PRIVATE_EXPEDITED)`.
#[derive(Debug, Clone, Copy, Default)]
pub struct Memb;

/// Quiescent-state-based reclamation: zero-cost read sections; threads announce quiescent states.
#[derive(Debug, Clone, Copy, Default)]
pub struct Qsbr;

impl Flavor for Memb {
    const NAME: &'static str = "memb";
}
impl Flavor for Qsbr {
    const NAME: &'static str = "qsbr";
}

pub(crate) mod sealed {
    use super::*;

    /// The per-flavor machinery (crate-internal; unnameable outside the crate).
    pub trait Sealed: Sized + Send + Sync + 'static {
        /// Domain-wide grace-period state.
        type Global: Send + Sync + 'static;
        /// Per-reader slot, read by writers.
        type Slot: Send + Sync + 'static;

        fn new_global(config: &DomainConfig) -> Self::Global;
        fn new_slot(global: &Self::Global) -> Self::Slot;
        /// Makes a new slot active (qsbr: online) before it is inserted in the registry.
        fn on_register(global: &Self::Global, slot: &Self::Slot);
        /// Leaves the slot idle unconditionally (before removal from the registry); returns the
        /// nesting depth it had (0 unless the reader was dropped inside a read section).
        fn on_unregister(slot: &Self::Slot) -> usize;
        fn read_lock(global: &Self::Global, slot: &Self::Slot);
        fn read_unlock(slot: &Self::Slot);
        fn synchronize(global: &Self::Global, registry: &Registry<Self::Slot>, stats: &Counters);
        /// Debug builds: panics if the calling thread's own reader state blocks grace periods
        /// (memb: inside a read section; qsbr: online, once the wait has lasted `waited` >=
        /// `SELF_WAIT_PANIC_AFTER`), so that `what` (a wait for a grace period) would never end.
        #[cfg(all(debug_assertions, not(loom)))]
        fn debug_check_self_wait(
            registry: &Registry<Self::Slot>,
            waited: std::time::Duration,
            what: &str,
        );
        /// `synchronize()` on behalf of a registered reader (qsbr: offline around the wait).
        fn reader_synchronize(
            global: &Self::Global,
            slot: &Self::Slot,
            registry: &Registry<Self::Slot>,
            stats: &Counters,
        );
    }

    impl Sealed for Memb {
        type Global = MembGlobal;
        type Slot = MembSlot;

        fn new_global(config: &DomainConfig) -> MembGlobal {
            MembGlobal::new(crate::membarrier::mode(config.force_fence_fallback))
        }
        fn new_slot(global: &MembGlobal) -> MembSlot {
            MembSlot::new(global)
        }
        fn on_register(_: &MembGlobal, _: &MembSlot) {}
        fn on_unregister(slot: &MembSlot) -> usize {
            let nesting = slot.nesting();
            if nesting != 0 {
                slot.force_idle();
            }
            nesting
        }
        #[inline(always)]
        fn read_lock(global: &MembGlobal, slot: &MembSlot) {
            memb::read_lock(global, slot);
        }
        #[inline(always)]
        fn read_unlock(slot: &MembSlot) {
            memb::read_unlock(slot);
        }
        fn synchronize(global: &MembGlobal, registry: &Registry<MembSlot>, stats: &Counters) {
            memb::synchronize(global, registry, stats);
        }
        #[cfg(all(debug_assertions, not(loom)))]
        fn debug_check_self_wait(
            registry: &Registry<MembSlot>,
            _waited: std::time::Duration,
            what: &str,
        ) {
            memb::debug_check_not_reading(registry, what);
        }
        fn reader_synchronize(
            global: &MembGlobal,
            _: &MembSlot,
            registry: &Registry<MembSlot>,
            stats: &Counters,
        ) {
            memb::synchronize(global, registry, stats);
        }
    }

    impl Sealed for Qsbr {
        type Global = QsbrGlobal;
        type Slot = QsbrSlot;

        fn new_global(_: &DomainConfig) -> QsbrGlobal {
            QsbrGlobal::new()
        }
        fn new_slot(_: &QsbrGlobal) -> QsbrSlot {
            QsbrSlot::new()
        }
        fn on_register(global: &QsbrGlobal, slot: &QsbrSlot) {
            qsbr::online(global, slot);
        }
        fn on_unregister(slot: &QsbrSlot) -> usize {
            let nesting = slot.nesting();
            qsbr::force_offline(slot);
            nesting
        }
        #[inline(always)]
        fn read_lock(_: &QsbrGlobal, slot: &QsbrSlot) {
            qsbr::read_lock(slot);
        }
        #[inline(always)]
        fn read_unlock(slot: &QsbrSlot) {
            qsbr::read_unlock(slot);
        }
        fn synchronize(global: &QsbrGlobal, registry: &Registry<QsbrSlot>, stats: &Counters) {
            qsbr::synchronize(global, registry, stats);
        }
        #[cfg(all(debug_assertions, not(loom)))]
        fn debug_check_self_wait(
            registry: &Registry<QsbrSlot>,
            waited: std::time::Duration,
            what: &str,
        ) {
            qsbr::debug_check_not_online(registry, waited, what);
        }
        fn reader_synchronize(
            global: &QsbrGlobal,
            slot: &QsbrSlot,
            registry: &Registry<QsbrSlot>,
            stats: &Counters,
        ) {
            if slot.is_online() {
                qsbr::offline(slot);
                qsbr::synchronize(global, registry, stats);
                qsbr::online(global, slot);
            } else {
                qsbr::synchronize(global, registry, stats);
            }
        }
    }
}
