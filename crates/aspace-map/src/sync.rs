//! Synchronization shim: `loom` primitives under `--cfg loom`, the conflict audit's recording
//! ones with the `conflicts` feature (`aspace-conflicts`), `std` / `parking_lot` ones otherwise.
//!
//! Every atomic and cell that lock-free readers of this crate touch is imported from here, so the
//! same code is model-checked by loom (crossbeam's `primitive` module does the same). Loom types
//! may only be used inside `loom::model`; under `--cfg loom` only the loom models in this crate
//! construct the structures that use them.
//!
//! Two more groups exist for the conflict audit, and are the std / `parking_lot` types in every
//! other build (loom included, so the models are unchanged):
//! - [`Mutex`], [`RwLock`]: the writer locks (`parking_lot`, never part of a loom model);
//! - [`stat`]: atomics that are not part of a loom-checked protocol (length counters, the
//!   skiplist's height, writer-only words, the retire counter, fault injection), kept `std` under
//!   loom, recorded under the audit because other cores may touch them.

#[cfg(loom)]
pub(crate) use loom::sync::atomic::{fence, AtomicPtr, AtomicU64, AtomicUsize, Ordering};
#[cfg(not(loom))]
pub(crate) use std::sync::atomic::fence;
#[cfg(all(not(loom), not(feature = "conflicts")))]
pub(crate) use std::sync::atomic::{AtomicPtr, AtomicU64, AtomicUsize, Ordering};
#[cfg(all(not(loom), feature = "conflicts"))]
pub(crate) use {
    aspace_conflicts::atomic::{AtomicPtr, AtomicU64, AtomicUsize},
    std::sync::atomic::Ordering,
};

#[cfg(all(not(loom), feature = "conflicts"))]
pub(crate) use aspace_conflicts::lock::{Mutex, RwLock};
#[cfg(not(all(not(loom), feature = "conflicts")))]
pub(crate) use parking_lot::{Mutex, RwLock};

/// Atomics outside the loom-checked protocols (see the module doc): `std` except under the audit.
pub(crate) mod stat {
    #[cfg(all(not(loom), feature = "conflicts"))]
    pub(crate) use aspace_conflicts::atomic::{AtomicIsize, AtomicU64, AtomicUsize};
    #[cfg(not(all(not(loom), feature = "conflicts")))]
    pub(crate) use std::sync::atomic::{AtomicIsize, AtomicU64, AtomicUsize};
}
