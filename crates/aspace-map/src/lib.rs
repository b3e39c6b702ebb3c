//! Concurrent interval maps behind one contract.
//!
//! An interval map maps disjoint page-aligned address intervals to values: the region ("VMA")
//! tree of an address space. Every implementation here satisfies the [`IntervalMap`] contract
//! (`contract.rs`) and is checked by the one conformance suite in `tests/`:
//!
//! - [`BTreeIntervalMap`] (`btree.rs`): `std::collections::BTreeMap` under one `RwLock`, the
//!   "stock kernel" baseline; every operation is atomic, queries hold the read lock.
//! - [`BonsaiMap`] (`bonsai.rs`): the Bonsai RCU tree (Clements, Kaashoek, Zeldovich, ASPLOS'12,
//!   §3), a functional weight-balanced tree with the in-place update optimisation; lock-free
//!   queries under an RCU guard (no atomic read-modify-write, no allocation), one writer lock
//!   for updates, replaced nodes freed after a grace period through `aspace-rcu`.
//! - [`SkipListMap`] (`skiplist.rs`): the concurrent interval skiplist (Kim, Kwon, Kang,
//!   SOSP'25): lock-free queries under an RCU guard, updates that lock only the nodes of the
//!   range they change (so updates of disjoint ranges run in parallel), optional per-core
//!   arenas; it also implements [`IntervalLocking`].
//! - [`RadixMap`] (`radix.rs`): RadixVM's radix tree (Clements, Kaashoek, Zeldovich, EuroSys'13,
//!   §3.2, §3.4): nodes of 512 slots indexed by nine bits of the page number, a lock bit per
//!   slot, uniform ranges folded into one interior slot, lazy expansion that propagates lock
//!   bits, range locking left to right; lock-free queries under an RCU guard; updates of
//!   disjoint ranges share no written line; nodes reclaimed through Refcache weak references
//!   (`aspace_sync::Refcache`); it also implements [`IntervalLocking`].
//!
//!
//! Beside them, not an interval map: [`Cht`] (`cht.rs`), the resizable concurrent hash table of
//! the RCU-for-HelenOS thesis (§5.1.2): lock-free lookups under an RCU guard, lock-free inserts
//! and removes, resizes by a background thread that updaters help.
//!
//! Locking and RCU contract of this crate, in one place:
//! - `query`/`visit` of RCU maps (bonsai, skiplist) run under the caller's `aspace_rcu::Guard`
//!   and take no lock; references they return are valid for the guard's lifetime. Every map
//!   checks that the guard belongs to its own domain and panics otherwise.
//! - `map`/`alloc` of bonsai serialize on its single writer `Mutex`, of btree on the write side
//!   of its `RwLock`; skiplist updates lock the nodes of their range (interval locking, left to
//!   right) inside a pooled read section, and `alloc` claims a gap with one CAS; radix updates
//!   lock the slots of their range's dynamic interval (left to right, lock bits in the slot
//!   words) inside a pooled read section and publish through one descriptor commit.
//! - User code (a value's `Clone`/`Drop`, `visit`'s closure) may run while a lock of the map is
//!   held: btree's lock during `visit`'s callback, while a `query` result lives, and in updates;
//!   bonsai's writer lock, skiplist node locks and radix slot locks while an update clones
//!   remainders. Every map
//!   is panic-safe there: a panic leaves the map consistent (before the commit: unchanged),
//!   releases its locks and frees nothing a reader may still hold (`tests/panic_safety.rs`).
//! - Every node allocation of an update is fallible and comes before its commit: a failure
//!   (`MapError::OutOfMemory`; tests inject it with each map's `fail_allocations_after`,
//!   `fault.rs`) changes nothing and releases every lock. The RCU domain's callback boxes are
//!   the global allocator's (abort on failure), at most one per update (bonsai) or per 64
//!   retired nodes (skiplist).
//! - Nodes unlinked by an update are freed after a grace period of the map's domain (bonsai:
//!   one batch per update; skiplist: batched per reader slot, `skiplist/retire.rs`; radix:
//!   records and descriptors batched per reader slot, `radix/retire.rs`, and nodes freed by
//!   Refcache once empty for two epochs, their memory after a grace period,
//!   `radix/reclaim.rs`).
//!
//! - `Cht`: `get`/`for_each_equal` run under the caller's guard (checked like the maps');
//!   `insert`/`insert_unique`/`remove` take no lock (CASes inside a pooled read section; they
//!   help a resize step their bucket waits on); the resizer waits for grace periods outside any
//!   read section; unlinked nodes are freed one `defer_free` each; `Hash`/`Eq` run with no lock
//!   held and before any change (`tests/panic_safety_cht.rs`).
//!
//! What this crate is not for: page tables, frames or region semantics (that is `aspace-vm`).

#![deny(unsafe_op_in_unsafe_fn)]

pub mod bonsai;
pub mod btree;
pub mod cht;
pub mod contract;
mod fault;
mod free_gaps;
pub mod radix;
pub mod skiplist;
mod sync;
mod validate;

pub use bonsai::BonsaiMap;
pub use btree::BTreeIntervalMap;
pub use cht::{Cht, ChtConfig};
pub use contract::{Interval, IntervalLocking, IntervalMap, MapError, KEY_SPACE_END, PAGE_SIZE};
pub use radix::{RadixLocked, RadixMap};
pub use skiplist::{ArenaAllocError, ArenaLayout, SkipListMap, SkipLocked};
