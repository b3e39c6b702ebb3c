//! A small test-and-test-and-set spin mutex with a closure API, the lock of Refcache's per-core
//! slots, per-object states and epoch barrier (`refcache.rs`).
//!
//! One `AtomicBool`: `lock_with` spins (crossbeam's `Backoff`, or loom's `yield_now` through
//! [`crate::sync::spin`]) until its `Acquire` CAS from `false` to `true` succeeds, runs the
//! closure on the protected value and releases with a `Release` store, also when the closure
//! unwinds. `try_lock_with` makes one attempt. The value lives in the `sync` shim's
//! `UnsafeCell`, so loom checks that every access is inside the lock.
//!
//! # Orderings
//! The `Release` store of an unlock pairs with the `Acquire` CAS of the next lock: each holder
//! happens-after every earlier holder, so the protected value needs no atomics.
//!
//! Not for: long critical sections or blocking in the kernel (waiters spin and yield), fairness,
//! or recursion (a thread that locks twice waits for itself forever).

use crate::sync::{spin, AtomicBool, Ordering::*, UnsafeCell};
use crossbeam_utils::Backoff;

/// A spin mutex around a `T`; see the module doc.
#[derive(Debug)]
pub(crate) struct SpinMutex<T> {
    locked: AtomicBool,
    value: UnsafeCell<T>,
}

// SAFETY: the value is only reached inside the lock, which hands it from one thread to the next
// with happens-before (module doc), exactly like `std::sync::Mutex<T>: Sync` for `T: Send`.
unsafe impl<T: Send> Sync for SpinMutex<T> {}
// SAFETY: moving the mutex moves its `T`.
unsafe impl<T: Send> Send for SpinMutex<T> {}

/// Releases the lock when dropped (also on unwind).
struct Unlock<'a>(&'a AtomicBool);

impl Drop for Unlock<'_> {
    #[inline]
    fn drop(&mut self) {
        // Release: publishes the holder's writes; pairs with the Acquire CAS of the next lock.
        self.0.store(false, Release);
    }
}

impl<T> SpinMutex<T> {
    pub(crate) fn new(value: T) -> Self {
        Self {
            locked: AtomicBool::new(false),
            value: UnsafeCell::new(value),
        }
    }

    #[inline]
    fn try_acquire(&self) -> bool {
        // Acquire: pairs with the Release store in `Unlock::drop` of the previous holder.
        !self.locked.load(Relaxed)
            && self
                .locked
                .compare_exchange(false, true, Acquire, Relaxed)
                .is_ok()
    }

    /// Runs `f` on the value with the lock held, waiting for it as long as needed.
    #[inline]
    pub(crate) fn lock_with<R>(&self, f: impl FnOnce(&mut T) -> R) -> R {
        if !self.try_acquire() {
            self.wait();
        }
        self.locked_with(f)
    }

    /// The slow path of `lock_with`: spins until the lock is acquired.
    #[cold]
    fn wait(&self) {
        let backoff = Backoff::new();
        loop {
            spin(&backoff);
            if self.try_acquire() {
                return;
            }
        }
    }

    /// Runs `f` on the value if the lock is free now; `None` (and `f` not run) if it is held.
    #[inline]
    pub(crate) fn try_lock_with<R>(&self, f: impl FnOnce(&mut T) -> R) -> Option<R> {
        self.try_acquire().then(|| self.locked_with(f))
    }

    /// # Preconditions
    /// The calling thread has just acquired the lock; this releases it.
    #[inline]
    fn locked_with<R>(&self, f: impl FnOnce(&mut T) -> R) -> R {
        let _unlock = Unlock(&self.locked);
        // SAFETY: the lock is held (precondition): no other reference to the value exists until
        // `_unlock` releases it, after `f` returned or unwound.
        self.value.with_mut(|p| f(unsafe { &mut *p }))
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn try_lock_fails_while_held_and_the_lock_is_released_on_unwind() {
        let m = SpinMutex::new(1);
        m.lock_with(|v| {
            *v += 1;
            assert_eq!(m.try_lock_with(|_| ()), None);
        });
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            m.lock_with(|_| panic!("inside"));
        }));
        assert!(r.is_err());
        assert_eq!(m.try_lock_with(|v| *v), Some(2));
    }

    #[test]
    fn threads_increment_exactly() {
        let m = SpinMutex::new(0u64);
        std::thread::scope(|s| {
            for _ in 0..4 {
                s.spawn(|| {
                    for _ in 0..10_000 {
                        m.lock_with(|v| *v += 1);
                    }
                });
            }
        });
        assert_eq!(m.lock_with(|v| *v), 40_000);
    }
}
