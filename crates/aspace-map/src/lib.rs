//! Concurrent interval maps behind one contract (DESIGN §5).
//!
//! An interval map maps disjoint page-aligned address intervals to values: the region ("VMA")
//! tree of an address space. Every implementation here satisfies the [`IntervalMap`] contract
//! (`contract.rs`) and is checked by the one conformance suite in `tests/`:
//!
//! - [`BTreeIntervalMap`] (`btree.rs`): `std::collections::BTreeMap` under one `RwLock`, the
//!   "stock kernel" baseline; every operation is atomic, queries hold the read lock.
//! - [`BonsaiMap`] (`bonsai.rs`): the Bonsai RCU tree of ASPLOS'12 §3, a functional
//!   weight-balanced tree with the in-place update optimisation; lock-free queries under an RCU
//!   guard (no atomic read-modify-write, no allocation), one writer lock for updates, replaced
//!   nodes freed after a grace period through `aspace-rcu`.
//!
//! Locking and RCU contract of this crate, in one place:
//! - `query`/`visit` of RCU maps run under the caller's `aspace_rcu::Guard` and take no lock;
//!   references they return are valid for the guard's lifetime.
//! - `map`/`alloc` of a map serialize on that map's single writer lock (bonsai: a `Mutex`;
//!   btree: the write side of its `RwLock`). No lock of this crate is held while calling user code
//!   except btree's read lock during `visit`'s callback and while a btree `query` result lives.
//! - Nodes unlinked by an update are handed to the map's RCU domain once per update (one batch)
//!   and freed after a grace period.
//!
//! What this crate is not for: page tables, frames or region semantics (that is `aspace-vm`), and
//! interval locking (`IntervalLocking`, for skiplist/radix maps).

#![deny(unsafe_op_in_unsafe_fn)]

pub mod bonsai;
pub mod btree;
pub mod contract;
mod free_gaps;
pub mod skiplist;
mod sync;
mod validate;

pub use bonsai::BonsaiMap;
pub use btree::BTreeIntervalMap;
pub use contract::{Interval, IntervalLocking, IntervalMap, MapError, KEY_SPACE_END, PAGE_SIZE};
pub use skiplist::{ArenaLayout, SkipListMap};
