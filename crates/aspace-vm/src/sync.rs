//! Synchronization shim: `loom` primitives under `--cfg loom`, `std` ones otherwise.
//!
//! Every atomic, fence, mutex and cell that a concurrent protocol of this crate uses (the
//! shootdown slots, the page-table entries and table pools) is imported from here, so
//! the very code that runs is what the loom models check (crossbeam's `primitive` module does
//! the same). Unlike `aspace-rcu`'s shim there is no deliberate difference between the two
//! builds: the shootdown protocol uses a real `fence(SeqCst)` on the core side rather than a
//! membarrier-promoted compiler fence (see `shootdown.rs` for why), and loom models that fence
//! exactly. Only [`spin_wait`] differs: under loom a wait loop must yield to the model
//! scheduler on every iteration.
//!
//! Loom types may only be used inside `loom::model`; under `--cfg loom` only the loom models
//! construct the structures that use them.
//!
//! The conflict audit (`aspace conflicts`, cargo feature `conflicts`, never together with loom)
//! swaps in `aspace-conflicts`' recording atomics and locks here, so every shared-memory access
//! of the engine that can move a cache line is recorded; without the feature every name below is
//! the std / `parking_lot` type exactly. [`stat`] names the atomics outside the loom-checked
//! protocols (statistics, gauges, the frame pool's counters, frame contents): `std` in the
//! normal and loom builds, recorded under the audit, and so are the frame pool's locks and
//! the space locks of `faultlock`, `hybrid` and `pervma` (`parking_lot`, never part of a loom model).

#[cfg(loom)]
pub(crate) use loom::sync::atomic::{fence, AtomicBool, AtomicU64, Ordering};
#[cfg(all(not(loom), not(feature = "conflicts")))]
pub(crate) use std::sync::atomic::{fence, AtomicBool, AtomicU64, Ordering};
#[cfg(all(not(loom), feature = "conflicts"))]
pub(crate) use {
    aspace_conflicts::atomic::{AtomicBool, AtomicU64},
    std::sync::atomic::{fence, Ordering},
};

/// Atomics and locks outside the loom-checked protocols (see the module doc): `std` /
/// `parking_lot` in the normal and loom builds, recorded under the audit. The locks are the
/// frame pool's (`frames.rs`) and the space locks of `faultlock`, `hybrid` and `pervma`.
pub(crate) mod stat {
    #[cfg(all(not(loom), feature = "conflicts"))]
    pub(crate) use aspace_conflicts::{
        atomic::{AtomicI64, AtomicU64},
        lock::{Mutex, RwLock},
    };
    #[cfg(not(all(not(loom), feature = "conflicts")))]
    pub(crate) use {
        parking_lot::{Mutex, RwLock},
        std::sync::atomic::{AtomicI64, AtomicU64},
    };
}

#[cfg(all(not(loom), feature = "conflicts"))]
pub(crate) use aspace_conflicts::lock::Mutex;
/// A mutex with `parking_lot`'s API (`lock()` returns the guard, no poisoning): `parking_lot`'s
/// own in the real build, loom's (so that the model schedules around it) under `--cfg loom`.
#[cfg(all(not(loom), not(feature = "conflicts")))]
pub(crate) use parking_lot::Mutex;

/// The loom half of the [`Mutex`] shim.
#[cfg(loom)]
#[derive(Debug, Default)]
pub(crate) struct Mutex<T>(loom::sync::Mutex<T>);

#[cfg(loom)]
impl<T> Mutex<T> {
    pub(crate) fn new(value: T) -> Self {
        Self(loom::sync::Mutex::new(value))
    }

    /// Locks it (a panic while it was held does not poison it, as with `parking_lot`).
    pub(crate) fn lock(&self) -> loom::sync::MutexGuard<'_, T> {
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The value, through exclusive access.
    pub(crate) fn get_mut(&mut self) -> &mut T {
        self.0.get_mut().unwrap_or_else(|e| e.into_inner())
    }
}

/// A reader-writer lock with `parking_lot`'s API (`read()`/`write()` return the guard, no
/// poisoning): `parking_lot`'s own in the real build, recorded under the audit, loom's under
/// `--cfg loom` (so that a loom model schedules around it). The `hybrid` design's region-tree
/// lock (`region/rcu_store.rs`), which its loom models take.
#[cfg(all(not(loom), feature = "conflicts"))]
pub(crate) use aspace_conflicts::lock::RwLock;
/// See the audit half above.
#[cfg(all(not(loom), not(feature = "conflicts")))]
pub(crate) use parking_lot::RwLock;

/// The loom half of the [`RwLock`] shim.
#[cfg(loom)]
#[derive(Debug, Default)]
pub(crate) struct RwLock<T>(loom::sync::RwLock<T>);

#[cfg(loom)]
impl<T> RwLock<T> {
    pub(crate) fn new(value: T) -> Self {
        Self(loom::sync::RwLock::new(value))
    }

    /// Takes it shared (not poisoned by a panic, as with `parking_lot`).
    pub(crate) fn read(&self) -> loom::sync::RwLockReadGuard<'_, T> {
        self.0.read().unwrap_or_else(|e| e.into_inner())
    }

    /// Takes it exclusive (not poisoned by a panic, as with `parking_lot`).
    pub(crate) fn write(&self) -> loom::sync::RwLockWriteGuard<'_, T> {
        self.0.write().unwrap_or_else(|e| e.into_inner())
    }
}

/// Threads, for tests that run the same code under std and loom.
#[cfg(loom)]
#[allow(unused_imports)] // used by the loom models only
pub(crate) use loom::thread;
#[cfg(not(loom))]
#[allow(unused_imports)] // used by tests only (the engine spawns no threads)
pub(crate) use std::thread;

/// A cell with loom's closure API (`with`, `with_mut`) in both builds, so code that keeps plain
/// data next to a protocol can be model-checked for data races. Nothing in the engine needs one
/// yet (page-table entries are atomics; frames are raw memory reached through pointers).
#[cfg(loom)]
#[allow(unused_imports)]
pub(crate) use loom::cell::UnsafeCell;

/// The std half of the [`UnsafeCell`] shim: `std::cell::UnsafeCell` with loom's API.
#[cfg(not(loom))]
#[derive(Debug, Default)]
#[allow(dead_code)] // not used by the engine yet (see the loom re-export above)
pub(crate) struct UnsafeCell<T>(std::cell::UnsafeCell<T>);

#[cfg(not(loom))]
#[allow(dead_code)] // not used by the engine yet
impl<T> UnsafeCell<T> {
    pub(crate) const fn new(value: T) -> Self {
        Self(std::cell::UnsafeCell::new(value))
    }

    /// Runs `f` with a shared pointer to the value; the caller upholds the aliasing rules.
    pub(crate) fn with<R>(&self, f: impl FnOnce(*const T) -> R) -> R {
        f(self.0.get())
    }

    /// Runs `f` with a unique pointer to the value; the caller upholds the aliasing rules.
    pub(crate) fn with_mut<R>(&self, f: impl FnOnce(*mut T) -> R) -> R {
        f(self.0.get())
    }
}

/// One iteration of a wait loop (the shooter waiting for a core to leave its access).
///
/// Real build: crossbeam's exponential [`Backoff`](crossbeam_utils::Backoff) (`snooze`: spin
/// hints first, then `yield_now`, which matters on a machine with fewer CPUs than threads, where
/// the awaited core may be descheduled). Loom: yield to the model scheduler, so that the loop
/// does not look like an infinite execution.
#[inline]
pub(crate) fn spin_wait(backoff: &crossbeam_utils::Backoff) {
    #[cfg(loom)]
    {
        let _ = backoff;
        loom::thread::yield_now();
    }
    #[cfg(not(loom))]
    backoff.snooze();
}
