//! Synchronization shim: `loom` atomics under `--cfg loom`, the conflict audit's recording
//! atomics with the `conflicts` feature (`aspace-conflicts`), `std` ones otherwise.
//!
//! Every atomic and cell the per-core lock, the counters and Refcache touch is imported from
//! here, so the very code of `rwlock.rs`, `hybrid_lock.rs`, `limit_counter.rs`, `spin_mutex.rs`,
//! `refcache.rs` and `snzi.rs` is what the loom models in `tests/loom*.rs` check (crossbeam's `primitive` module does the same). Loom types may only be
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

#[cfg(loom)]
pub(crate) use loom::cell::UnsafeCell;

/// `std`'s `UnsafeCell` behind loom's closure API (`with` / `with_mut`), so the same code
/// compiles against both; loom's checks each access for data races.
#[cfg(not(loom))]
#[derive(Debug, Default)]
pub(crate) struct UnsafeCell<T>(std::cell::UnsafeCell<T>);

#[cfg(not(loom))]
impl<T> UnsafeCell<T> {
    pub(crate) const fn new(value: T) -> Self {
        Self(std::cell::UnsafeCell::new(value))
    }

    /// Runs `f` with a pointer for writing; the caller's protocol excludes every other access.
    #[inline(always)]
    pub(crate) fn with_mut<R>(&self, f: impl FnOnce(*mut T) -> R) -> R {
        f(self.0.get())
    }
}

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
