//! Synchronization shim: `loom` atomics under `--cfg loom`, the conflict audit's recording
//! atomics with the `conflicts` feature (`aspace-conflicts`), `std` ones otherwise.
//!
//! Every atomic the per-core lock and the counters touch is imported from here, so the very code
//! of `rwlock.rs`, `hybrid_lock.rs` and `limit_counter.rs` is what the loom models in
//! `tests/loom.rs` check (crossbeam's `primitive` module does the same). Loom types may only be
//! used inside `loom::model`; under `--cfg loom` only the loom models construct these structures.
//!
//! [`spin`] is the one wait step of every spin loop: crossbeam's [`Backoff`] (spin, then yield
//! to the OS scheduler) in the real build, `loom::thread::yield_now` under loom, which must see
//! every iteration of a wait loop to explore the other threads.

#[cfg(all(not(loom), feature = "conflicts"))]
pub(crate) use aspace_conflicts::atomic::{AtomicBool, AtomicI64, AtomicU64, AtomicUsize};
#[cfg(loom)]
pub(crate) use loom::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, AtomicUsize};
#[cfg(all(not(loom), not(feature = "conflicts")))]
pub(crate) use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, AtomicUsize};

pub(crate) use std::sync::atomic::Ordering;

use crossbeam_utils::Backoff;

/// One iteration of a wait loop: back off (spin, then yield), or under loom hand control to the
/// model scheduler.
#[inline]
pub(crate) fn spin(backoff: &Backoff) {
    #[cfg(loom)]
    {
        let _ = backoff;
        loom::thread::yield_now();
    }
    #[cfg(not(loom))]
    backoff.snooze();
}
