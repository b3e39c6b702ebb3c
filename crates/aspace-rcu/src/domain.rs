//! Domain, reader and guard types (SKELETON: fixed surface, bodies in progress).

use crate::flavor::{Flavor, Memb, MembMode, Qsbr};
use std::marker::PhantomData;

/// An RCU domain: its readers, its grace periods and its reclaimer thread. Cheap to clone (shared
/// handle). The reclaimer shuts down cleanly, running every pending callback, when the last
/// handle (a `Domain` clone or a `Reader`) is dropped.
pub struct Domain<F: Flavor = Memb> {
    _f: PhantomData<F>,
}

/// A thread's registration with a domain (RAII: unregisters on drop). `Send` but not `Sync`:
/// one thread uses it at a time. Dropping it inside a read section panics in debug builds.
pub struct Reader<F: Flavor = Memb> {
    _f: PhantomData<(F, *const ())>,
}
// SAFETY: skeleton only; the real type documents why moving a reader between threads is sound.
unsafe impl<F: Flavor> Send for Reader<F> {}

/// A read-side critical section. Nestable; `!Send`. References loaded from RCU-protected
/// pointers are valid for the guard's lifetime.
pub struct Guard<'r, F: Flavor = Memb> {
    _r: PhantomData<(&'r Reader<F>, *const ())>,
}

impl<F: Flavor> Domain<F> {
    /// A new domain with its own reclaimer thread.
    pub fn new() -> Self {
        todo!()
    }
    /// Registers the calling thread as a reader.
    pub fn register(&self) -> Reader<F> {
        todo!()
    }
    /// Waits until every read section that began before this call has ended. Must not be called
    /// from inside a read section of this domain (deadlock; caught in debug builds where possible).
    pub fn synchronize(&self) {
        todo!()
    }
    /// Runs `f` on the reclaimer thread after a grace period.
    pub fn call(&self, f: impl FnOnce() + Send + 'static) {
        let _ = f;
        todo!()
    }
    /// Drops `value` on the reclaimer thread after a grace period.
    pub fn defer_drop<T: Send + 'static>(&self, value: T) {
        let _ = value;
        todo!()
    }
    /// Frees `ptr` (as `Box::from_raw`) after a grace period.
    ///
    /// # Safety
    /// `ptr` came from `Box::into_raw`, is unreachable for readers that start after this call, and
    /// is passed here once.
    pub unsafe fn defer_free<T: Send + 'static>(&self, ptr: *mut T) {
        let _ = ptr;
        todo!()
    }
    /// Waits until every callback queued (by any thread) before this call has run.
    pub fn barrier(&self) {
        todo!()
    }
    /// Callbacks queued but not yet run (the garbage not yet reclaimed).
    pub fn pending(&self) -> usize {
        todo!()
    }
}

impl<F: Flavor> Default for Domain<F> {
    fn default() -> Self {
        Self::new()
    }
}

impl<F: Flavor> Clone for Domain<F> {
    fn clone(&self) -> Self {
        todo!()
    }
}

impl Domain<Memb> {
    /// Whether readers run with compiler fences (membarrier) or full fences (fallback).
    pub fn mode(&self) -> MembMode {
        todo!()
    }
}

impl<F: Flavor> Reader<F> {
    /// Enters a read section (nestable).
    #[inline]
    pub fn read(&self) -> Guard<'_, F> {
        todo!()
    }
    /// The domain this reader is registered with.
    pub fn domain(&self) -> &Domain<F> {
        todo!()
    }
}

impl Reader<Qsbr> {
    /// Announces a quiescent state: no reference from earlier read sections is held.
    #[inline]
    pub fn quiescent_state(&self) {
        todo!()
    }
    /// Goes offline (e.g. before blocking): grace periods no longer wait for this thread.
    pub fn offline(&self) {
        todo!()
    }
    /// Comes back online after `offline()`.
    pub fn online(&self) {
        todo!()
    }
}
