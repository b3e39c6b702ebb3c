//! Per-core building blocks shared by the interval maps and the address space.
//!
//! - [`HybridLock`] (`hybrid_lock.rs`): the hybrid-granular lock of the SOSP'25 interval
//!   skiplist paper (§5.1): per-core reader-writer locks with global read/write (GR/GW) and local
//!   read/write (LR/LW) modes and exactly the compatibility of its Fig. 9. It is built from
//!   `rwlock.rs`, a small reader-writer spin lock.
//! - [`LimitCounter`] (`limit_counter.rs`): the adaptive resource-limit counter of the same
//!   paper (§3.5, §5.3): per-core batches far from the limit, direct global updates near it,
//!   and the limit enforced exactly. Its benchmark baselines [`AtomicCounter`] (one shared
//!   atomic) and [`PercpuCounter`] (Linux `percpu_counter` style, not exact) implement the same
//!   [`Counter`] trait (`counter.rs`).
//! - [`UpgradableLock`] (`upgradable_lock.rs`): the thesis' upgradable lock (§5.2): no atomic
//!   read-modify-write while its [`LockGroup`] has one member, a real lock from the moment a
//!   second member joins (the join waits one RCU grace period for the light critical sections).
//! - [`Refcache`] (`refcache.rs`): RadixVM's scalable lazy reference counts (EuroSys'13 §3.1):
//!   per-core delta caches, epochs, review queues, dirty zeroes, and [`Weak`] references with
//!   `tryget`; the counts of the radix tree's nodes and of shared frames. Its locks are the
//!   small spin mutex of `spin_mutex.rs`. Its benchmark baseline [`Snzi`] (`snzi.rs`) is an
//!   SNZI counter (a tree of non-zero indicators, one leaf per core).
//!
//! Cores are indexes the caller passes (its handle index); with more cores than per-core slots,
//! cores share a slot by group (`core % slots`).
//!
//! Everything here is model-checked: `sync.rs` swaps in `loom`'s atomics under `--cfg loom`
//! and `tests/loom.rs` runs the very code of the lock and the counter under loom.
//!
//! Not for: cache-line padding and backoff, which come from `crossbeam-utils` and are
//! re-exported here so that every crate pads the same way.

#![deny(unsafe_op_in_unsafe_fn)]

mod atomic_counter;
mod counter;
mod hybrid_lock;
mod limit_counter;
mod percpu_counter;
mod refcache;
mod rwlock;
mod snzi;
mod spin_mutex;
mod sync;
mod upgradable_lock;
mod upgradable_rwlock;

pub use atomic_counter::AtomicCounter;
pub use counter::{Counter, LimitExceeded};
pub use crossbeam_utils::{Backoff, CachePadded};
pub use hybrid_lock::{
    GlobalReadGuard, GlobalWriteGuard, HybridLock, LocalReadGuard, LocalWriteGuard,
};
pub use limit_counter::{LimitCounter, BATCH_DIVISOR};
pub use percpu_counter::PercpuCounter;
pub use refcache::{Core, ForeignHandle, Ref, Refcache, RefcacheConfig, RefcacheStats, Weak};
pub use snzi::{Snzi, SNZI_FANOUT};
pub use upgradable_lock::{LockGroup, Member, UpgradableGuard, UpgradableLock};
pub use upgradable_rwlock::{UpgradableReadGuard, UpgradableRwLock, UpgradableWriteGuard};
