//! The loom shim: the atomics, mutexes, fences and thread primitives the RCU protocols use.
//!
//! Under `--cfg loom` everything here comes from `loom`, so the very code of the grace-period
//! protocols (`memb.rs`, `qsbr.rs`, `registry.rs`) is what the loom models in `tests/loom.rs`
//! check; otherwise it is `std`. Two helpers carry the one deliberate difference between the
//! real build and the model:
//!
//! - [`reader_light_barrier`]: a `memb` reader's barriers L and U. In the real build it is a
//!   compiler fence only (the writer's `membarrier()` promotes it to a full barrier when it
//!   matters, thesis §4.4); under loom it is `fence(SeqCst)`, the membarrier stand-in, because
//!   loom has no membarrier (see `membarrier.rs` for why this is the exact stand-in).
//! - [`spin_wait_yield`]: under loom, every wait loop must yield to the model scheduler.
//!
//! `Mutex` and `Condvar` wrap the std/loom types with a poison-free `lock()`: a panic inside a
//! critical section (e.g. a debug-build misuse detection) must not wedge the domain.
//!
//! With the `conflicts` feature (the conflict audit, `aspace-conflicts`) and not under loom,
//! `AtomicUsize` is the audit's recording atomic, [`Mutex::lock`] records a write of the mutex's
//! line, [`stat`] atomics are recorded too, and [`rcu_scope`] marks the RCU machinery (grace
//! periods, the callback queue, the registry) so that the audit reports it apart from the
//! operations that call it. Without the feature all of that is the plain std code.
//!
//! Not for: statistics counters ([`stat`]: std atomics, they are not part of any protocol; only
//! the audit swaps them) or the debug-build owner checks (std, debug builds only, never audited).

#[cfg(loom)]
pub(crate) use loom::sync::atomic::{fence, AtomicUsize};
#[cfg(all(not(loom), not(feature = "conflicts")))]
pub(crate) use std::sync::atomic::{fence, AtomicUsize};
#[cfg(all(not(loom), feature = "conflicts"))]
pub(crate) use {aspace_conflicts::atomic::AtomicUsize, std::sync::atomic::fence};

/// Statistics atomics: `std` (even under loom) except under the conflict audit.
pub(crate) mod stat {
    #[cfg(all(not(loom), feature = "conflicts"))]
    pub(crate) use aspace_conflicts::atomic::AtomicU64;
    #[cfg(not(all(not(loom), feature = "conflicts")))]
    pub(crate) use std::sync::atomic::AtomicU64;
}

/// Marks the calling thread's accesses as RCU machinery until the returned guard drops (the
/// conflict audit's [`aspace_conflicts::rcu_scope`]); nothing without the audit.
#[inline(always)]
#[must_use = "the scope ends when the guard drops"]
pub(crate) fn rcu_scope() -> impl Sized {
    #[cfg(all(not(loom), feature = "conflicts"))]
    {
        aspace_conflicts::rcu_scope()
    }
}

#[cfg(loom)]
use loom::sync as inner;
#[cfg(not(loom))]
use std::sync as inner;

pub(crate) use inner::MutexGuard;

/// A mutex whose `lock()` ignores poisoning (the protected state is valid after any panic that
/// can occur while it is held: those panics are misuse reports raised before any mutation).
#[derive(Debug, Default)]
pub(crate) struct Mutex<T>(inner::Mutex<T>);

impl<T> Mutex<T> {
    pub(crate) fn new(value: T) -> Self {
        Self(inner::Mutex::new(value))
    }

    #[cfg_attr(all(not(loom), feature = "conflicts"), track_caller)]
    pub(crate) fn lock(&self) -> MutexGuard<'_, T> {
        #[cfg(all(not(loom), feature = "conflicts"))]
        aspace_conflicts::record::access(
            self as *const Self as usize,
            true,
            std::panic::Location::caller(),
        );
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// A condition variable over [`Mutex`], poison-free like it.
#[derive(Debug, Default)]
pub(crate) struct Condvar(inner::Condvar);

#[cfg_attr(loom, allow(dead_code))]
impl Condvar {
    pub(crate) fn new() -> Self {
        Self(inner::Condvar::new())
    }

    pub(crate) fn wait<'a, T>(&self, guard: MutexGuard<'a, T>) -> MutexGuard<'a, T> {
        self.0.wait(guard).unwrap_or_else(|e| e.into_inner())
    }

    pub(crate) fn wait_timeout<'a, T>(
        &self,
        guard: MutexGuard<'a, T>,
        dur: std::time::Duration,
    ) -> MutexGuard<'a, T> {
        match self.0.wait_timeout(guard, dur) {
            Ok((g, _)) => g,
            Err(e) => e.into_inner().0,
        }
    }

    pub(crate) fn notify_one(&self) {
        self.0.notify_one();
    }

    pub(crate) fn notify_all(&self) {
        self.0.notify_all();
    }
}

/// Barrier L / U of a `memb` reader (thesis §4.4, RCU-READ-LOCK line 5, RCU-READ-UNLOCK line 1).
///
/// `full == false` (membarrier mode): a compiler fence only. The writer's
/// `membarrier(PRIVATE_EXPEDITED)` (F-L, F-U) turns it into a full barrier whenever the writer
/// needs one. `full == true` (fallback mode): a real `fence(SeqCst)`, pairing directly with the
/// writer's fences S, A-F-L and the one after WAIT-FOR-READERS. The full fence is an
/// out-of-line cold call, so that in membarrier mode the test compiles to a not-taken branch
/// and the read path stays straight-line code.
///
/// Under loom this is always `fence(SeqCst)`: the membarrier stand-in.
#[inline(always)]
pub(crate) fn reader_light_barrier(full: bool) {
    #[cfg(loom)]
    {
        let _ = full;
        // SeqCst: loom's membarrier stand-in; pairs with the writer's F-L / F-U fences.
        fence(std::sync::atomic::Ordering::SeqCst);
    }
    #[cfg(not(loom))]
    {
        if full {
            reader_full_fence();
        }
        // Compiler-only: the writer's membarrier() is the hardware half (F-L, F-U). (In
        // fallback mode the full fence above already is one; this adds nothing there.)
        std::sync::atomic::compiler_fence(std::sync::atomic::Ordering::SeqCst);
    }
}

/// The fallback-mode reader barrier, kept out of line (see [`reader_light_barrier`]).
#[cfg(not(loom))]
#[cold]
#[inline(never)]
fn reader_full_fence() {
    // SeqCst: fallback reader barrier; pairs with the writer's fences S/A-F-L (at L) and with
    // the fence after WAIT-FOR-READERS / F-U (at U).
    fence(std::sync::atomic::Ordering::SeqCst);
}

/// Under loom, a wait loop's iteration: hands control to the model scheduler.
#[cfg(loom)]
pub(crate) fn spin_wait_yield() {
    loom::thread::yield_now();
}
