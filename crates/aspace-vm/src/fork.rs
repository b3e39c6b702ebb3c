//! Detecting use of a space in a forked child.
//!
//! `fork()` copies the parent's memory but only the calling thread. A space whose lock another
//! thread held, or whose access window another core was inside, at the moment of the fork is
//! frozen in that state in the child: the lock is never released, a shootdown would wait for
//! the window forever, and the RCU domain's reclaimer thread does not exist. So a space created
//! before a fork refuses every use in the child with a clear error instead of hanging: each
//! space records the process's *fork generation* when built, a `pthread_atfork` child handler
//! (registered by the first space of the process) bumps the generation, and every public entry point compares
//! the two (one `Relaxed` load of a shared, almost never written word). Dropping such a space
//! (or a core handle: its whole core, caches and RCU reader included) in the child leaks it
//! rather than touching its locks or joining a thread that does not exist. The child may build new spaces of its own.
//!
//! Not for: making a space usable across a fork (a child gets no copy of the parent's space).

use crate::sync::stat::AtomicU64;
use std::sync::atomic::AtomicBool;
use std::sync::atomic::Ordering;

/// Forks this process has gone through, as seen by the current process.
static GENERATION: AtomicU64 = AtomicU64::new(0);

/// Whether the child handler is registered. Not a `Once`: a `Once` held "running" by a thread
/// that registers while another thread forks would stay running in the child, whose first space
/// would wait for it forever (review of issue 17). Racing first callers may each register the
/// handler; a fork then bumps the generation more than once, which changes nothing.
static REGISTERED: AtomicBool = AtomicBool::new(false);

/// Runs in the child right after `fork()` (async-signal-safe: one atomic add).
extern "C" fn in_child() {
    GENERATION.fetch_add(1, Ordering::Relaxed);
}

/// The process's current fork generation; the first call registers the `pthread_atfork`
/// handler, so a space built afterwards notices every later fork.
pub(crate) fn generation() -> u64 {
    // Acquire: pairs with the Release store below (the handler was registered before).
    if !REGISTERED.load(Ordering::Acquire) {
        // SAFETY: registers a plain `extern "C"` function with no captured state; it only
        // performs an atomic add, which is safe in a forked child.
        let rc = unsafe { libc::pthread_atfork(None, None, Some(in_child)) };
        assert_eq!(rc, 0, "pthread_atfork failed: {rc}");
        // Release: a caller that sees the flag sees the registration.
        REGISTERED.store(true, Ordering::Release);
    }
    // Relaxed: the child handler runs in the child's only thread before anything else there.
    GENERATION.load(Ordering::Relaxed)
}

/// Whether the process forked since `born` (a value of [`generation`]) was read: the caller
/// is a forked child using its parent's space.
#[inline]
pub(crate) fn forked_since(born: u64) -> bool {
    // Relaxed: see `generation`.
    GENERATION.load(Ordering::Relaxed) != born
}
