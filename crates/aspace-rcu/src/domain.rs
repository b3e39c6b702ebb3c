//! Domain, reader and guard: the safe facade over the flavors and the reclaimer.
//!
//! A `Domain<F>` is a cheap handle (`Arc`) to a `DomainInner`, which owns the reclaimer thread
//! and an `Arc` of the `Core` (grace-period state, reader registry, callback queue, counters)
//! that the reclaimer thread shares. A `Reader<F>` holds a `Domain` handle, the `Core` directly
//! (one pointer hop on the read path) and its own registered slot. When the last handle
//! (`Domain` clone or `Reader`) drops, `DomainInner::drop` shuts the reclaimer down after it has
//! run every pending callback.
//!
//! Invariants: a slot is in the registry exactly while its `Reader` lives; a `Reader` is used by
//! one thread at a time (`!Sync`), so only that thread writes its slot; a `Guard` borrows its
//! `Reader` and is `!Send`, so a read section begins and ends on one thread.
//!
//! Not for: the algorithms themselves (`memb.rs`, `qsbr.rs`, `reclaimer.rs`).

use crate::config::DomainConfig;
use crate::flavor::{Flavor, Memb, Qsbr};
use crate::membarrier::MembMode;
use crate::reclaimer::{Entry, Queue};
use crate::registry::{Registry, SlotRef};
use crate::stats::{Counters, Stats};
use crossbeam_utils::CachePadded;
use std::cell::Cell;
use std::marker::PhantomData;
use std::sync::Arc;

/// Everything the reclaimer thread shares with the handles.
struct Core<F: Flavor> {
    global: F::Global,
    registry: Registry<F::Slot>,
    queue: Queue,
    stats: Counters,
    /// Unit tests only: the reclaimer thread's next grace period panics (kills the thread), to
    /// test what the handles do when it is gone.
    #[cfg(all(test, not(loom)))]
    kill_reclaimer: std::sync::atomic::AtomicBool,
}

impl<F: Flavor> Core<F> {
    fn synchronize(&self) {
        F::synchronize(&self.global, &self.registry, &self.stats);
    }
}

/// The owner of the reclaimer thread; dropped with the last handle.
struct DomainInner<F: Flavor> {
    core: Arc<Core<F>>,
    #[cfg(not(loom))]
    reclaimer: Option<std::thread::JoinHandle<()>>,
    #[cfg(not(loom))]
    reclaimer_id: std::thread::ThreadId,
}

#[cfg(not(loom))]
thread_local! {
    /// Whether this thread is a reclaimer (of any domain): a last handle dropped here detaches
    /// its domain's reclaimer instead of joining it.
    static ON_A_RECLAIMER: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

impl<F: Flavor> Drop for DomainInner<F> {
    fn drop(&mut self) {
        self.core.queue.request_shutdown();
        #[cfg(not(loom))]
        if let Some(handle) = self.reclaimer.take() {
            if !ON_A_RECLAIMER.with(|on| on.get()) {
                // The reclaimer catches callback panics, so it normally ends by draining.
                if let Err(payload) = handle.join() {
                    self.reclaimer_died(payload);
                }
            }
            // Otherwise a callback (of this domain or of another) dropped the last handle: the
            // reclaimer, detached, drains the queue and exits on its own. Joining it here could
            // deadlock: two domains whose callbacks drop each other's last handle would each
            // wait for the other's reclaimer (review of issue 17:
            // `last_handles_dropped_by_each_others_callbacks_do_not_deadlock`).
        }
        #[cfg(loom)]
        {
            let core = &self.core;
            core.queue.run_inline(|| core.synchronize(), &core.stats);
        }
    }
}

#[cfg(not(loom))]
impl<F: Flavor> DomainInner<F> {
    /// The last handle found the reclaimer thread dead (it unwound; see `reclaimer.rs`, "If the
    /// reclaimer dies anyway"): runs what it left queued here, then reports the death loudly
    /// (unless this thread is already unwinding). No reader is left (each `Reader` holds a
    /// handle), so the grace periods before those callbacks are immediate.
    #[cold]
    fn reclaimer_died(&self, payload: Box<dyn std::any::Any + Send>) {
        let core = &self.core;
        core.queue.run_inline(|| core.synchronize(), &core.stats);
        let msg = payload
            .downcast_ref::<String>()
            .map(String::as_str)
            .or_else(|| payload.downcast_ref::<&str>().copied())
            .unwrap_or("a non-string panic payload");
        if std::thread::panicking() {
            eprintln!("aspace-rcu: the domain's reclaimer thread died ({msg})");
        } else {
            panic!(
                "aspace-rcu: the domain's reclaimer thread died ({msg}); the last handle's \
                 drop ran its pending callbacks"
            );
        }
    }
}

/// An RCU domain: its readers, its grace periods and its reclaimer thread. Cheap to clone (shared
/// handle). The reclaimer shuts down cleanly, running every pending callback, when the last
/// handle (a `Domain` clone or a `Reader`) is dropped.
pub struct Domain<F: Flavor = Memb> {
    inner: Arc<DomainInner<F>>,
}

/// A thread's registration with a domain (RAII: unregisters on drop). `Send` but not `Sync`:
/// one thread uses it at a time. Dropping it inside a read section (possible only by leaking a
/// guard with `mem::forget`) panics in debug builds; release builds unregister it quietly.
pub struct Reader<F: Flavor = Memb> {
    slot: SlotRef<F::Slot>,
    core: Arc<Core<F>>,
    domain: Domain<F>,
    /// `!Sync`: only one thread may write the slot.
    _not_sync: PhantomData<Cell<()>>,
}

/// A read-side critical section. Nestable; `!Send`. References loaded from RCU-protected
/// pointers are valid for the guard's lifetime.
pub struct Guard<'r, F: Flavor = Memb> {
    reader: &'r Reader<F>,
    /// The reader's slot, dereferenced once at lock time: the unlock then needs no load of the
    /// reader's fields (the compiler barrier L makes the compiler reload those).
    slot: &'r F::Slot,
    /// `!Send` and `!Sync`: a read section ends on the thread that began it.
    _not_send: PhantomData<*const ()>,
}

impl<F: Flavor> Domain<F> {
    /// A new domain with its own reclaimer thread and the default configuration.
    pub fn new() -> Self {
        Self::with_config(DomainConfig::default())
    }

    /// A new domain with the given reclaimer batching (and, for `memb`, barrier mode).
    ///
    /// # Panics
    /// If the reclaimer thread cannot be spawned (the process is out of threads or memory);
    /// [`Domain::try_with_config`] returns that error instead.
    pub fn with_config(config: DomainConfig) -> Self {
        Self::try_with_config(config).expect("aspace-rcu: cannot spawn the reclaimer thread")
    }

    /// [`Domain::with_config`] that returns the error of spawning the reclaimer thread
    /// (`EAGAIN` under a thread or memory limit) instead of panicking; nothing is left behind
    /// then.
    ///
    /// # Errors
    /// The spawn's error.
    pub fn try_with_config(config: DomainConfig) -> std::io::Result<Self> {
        let core = Arc::new(Core::<F> {
            global: F::new_global(&config),
            registry: Registry::new(),
            queue: Queue::new(config.batch_size, config.batch_delay),
            stats: Counters::default(),
            #[cfg(all(test, not(loom)))]
            kill_reclaimer: std::sync::atomic::AtomicBool::new(false),
        });
        #[cfg(not(loom))]
        {
            let thread_core = Arc::clone(&core);
            let handle = std::thread::Builder::new()
                .name(format!("aspace-rcu-{}-reclaimer", F::NAME))
                .spawn(move || {
                    ON_A_RECLAIMER.with(|on| on.set(true));
                    let core = thread_core;
                    let synchronize = || {
                        #[cfg(test)]
                        if core
                            .kill_reclaimer
                            .load(std::sync::atomic::Ordering::Relaxed)
                        {
                            panic!("test hook: the reclaimer thread dies (expected by the test)");
                        }
                        core.synchronize();
                    };
                    core.queue.run(synchronize, &core.stats);
                })?;
            let reclaimer_id = handle.thread().id();
            Ok(Self {
                inner: Arc::new(DomainInner {
                    core,
                    reclaimer: Some(handle),
                    reclaimer_id,
                }),
            })
        }
        #[cfg(loom)]
        Ok(Self {
            inner: Arc::new(DomainInner { core }),
        })
    }

    fn core(&self) -> &Core<F> {
        &self.inner.core
    }

    /// Registers the calling thread as a reader (a `qsbr` reader starts online).
    pub fn register(&self) -> Reader<F> {
        let _rcu = crate::sync::rcu_scope();
        let core = Arc::clone(&self.inner.core);
        let slot = Arc::new(CachePadded::new(F::new_slot(&core.global)));
        F::on_register(&core.global, &slot);
        core.registry.insert(Arc::clone(&slot));
        Reader {
            slot,
            core,
            domain: self.clone(),
            _not_sync: PhantomData,
        }
    }

    /// Waits until every read section that began before this call has ended. Must not be called
    /// from inside a read section of this domain, nor (qsbr) by a thread that is an online
    /// reader of it (use [`Reader::synchronize`]): both wait forever for themselves; debug
    /// builds panic instead. Concurrent callers share grace periods.
    pub fn synchronize(&self) {
        let _rcu = crate::sync::rcu_scope();
        self.core().synchronize();
    }

    /// Runs `f` on the reclaimer thread after a grace period.
    pub fn call(&self, f: impl FnOnce() + Send + 'static) {
        let _rcu = crate::sync::rcu_scope();
        self.core().queue.push(Entry::call(f));
    }

    /// Drops `value` on the reclaimer thread after a grace period.
    pub fn defer_drop<T: Send + 'static>(&self, value: T) {
        let ptr = Box::into_raw(Box::new(value));
        let _rcu = crate::sync::rcu_scope();
        // SAFETY: `ptr` was just made by `Box::into_raw` and is handed over exactly once.
        self.core().queue.push(unsafe { Entry::free_box(ptr) });
    }

    /// Frees `ptr` (as `Box::from_raw`) after a grace period. Costs no allocation.
    ///
    /// # Safety
    /// `ptr` came from `Box::into_raw`, is unreachable for readers that start after this call, and
    /// is passed here once.
    pub unsafe fn defer_free<T: Send + 'static>(&self, ptr: *mut T) {
        let _rcu = crate::sync::rcu_scope();
        // SAFETY: the caller guarantees `ptr` is an owned `Box<T>` pointer passed once.
        self.core().queue.push(unsafe { Entry::free_box(ptr) });
    }

    /// Waits until every callback queued (by any thread) before this call has run. Must not be
    /// called from a callback (it panics there: it would wait for itself), nor, like
    /// [`Domain::synchronize`], from inside a read section of this domain or (qsbr) by a thread
    /// that is an online reader of it: the callbacks wait for a grace period that waits for the
    /// caller. Debug builds panic instead of waiting forever (memb: at once; qsbr: once the wait
    /// has lasted 200 ms). Panics if the domain's reclaimer thread died (it would wait forever).
    pub fn barrier(&self) {
        let _rcu = crate::sync::rcu_scope();
        #[cfg(not(loom))]
        {
            assert!(
                std::thread::current().id() != self.inner.reclaimer_id,
                "aspace-rcu: barrier() called from an RCU callback (it would wait for itself)"
            );
            let core = self.core();
            core.queue.barrier(|_waited| {
                #[cfg(debug_assertions)]
                F::debug_check_self_wait(&core.registry, _waited, "barrier()");
            });
        }
        #[cfg(loom)]
        {
            let core = self.core();
            core.queue.run_inline(|| core.synchronize(), &core.stats);
        }
    }

    /// Callbacks queued but not yet run (the garbage not yet reclaimed).
    pub fn pending(&self) -> usize {
        self.core().queue.pending()
    }

    /// Number of registered readers.
    pub fn readers(&self) -> usize {
        self.core().registry.len()
    }

    /// A snapshot of this domain's counters.
    pub fn stats(&self) -> Stats {
        self.core().stats.snapshot()
    }

    /// Whether `this` and `other` are handles of the same domain (clones of one another). The
    /// domain identity that structures check a caller's [`Guard`] against ([`Guard::belongs_to`]).
    #[inline]
    pub fn ptr_eq(this: &Self, other: &Self) -> bool {
        Arc::ptr_eq(&this.inner, &other.inner)
    }
}

impl<F: Flavor> Default for Domain<F> {
    fn default() -> Self {
        Self::new()
    }
}

impl<F: Flavor> Clone for Domain<F> {
    fn clone(&self) -> Self {
        Self {
            inner: Arc::clone(&self.inner),
        }
    }
}

impl<F: Flavor> std::fmt::Debug for Domain<F> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Domain")
            .field("flavor", &F::NAME)
            .field("readers", &self.readers())
            .field("pending", &self.pending())
            .finish()
    }
}

impl Domain<Memb> {
    /// Whether readers run with compiler fences (membarrier) or full fences (fallback).
    pub fn mode(&self) -> MembMode {
        self.core().global.mode()
    }

    /// Whether this process can use membarrier (probed and registered once per process), and if
    /// not, why: the reason a domain runs in [`MembMode::FenceFallback`] without being forced to.
    pub fn membarrier_status() -> Result<(), crate::MembarrierError> {
        crate::membarrier::init()
    }
}

impl<F: Flavor> Reader<F> {
    /// Enters a read section (nestable).
    #[inline]
    pub fn read(&self) -> Guard<'_, F> {
        let slot: &F::Slot = &self.slot;
        F::read_lock(&self.core.global, slot);
        Guard {
            reader: self,
            slot,
            _not_send: PhantomData,
        }
    }

    /// The domain this reader is registered with.
    pub fn domain(&self) -> &Domain<F> {
        &self.domain
    }

    /// `synchronize()` for a thread that holds this reader: identical to
    /// [`Domain::synchronize`] for `memb`; for `qsbr` it goes offline around the wait (and back
    /// online after), which `Domain::synchronize` from an online reader's thread must do.
    /// Takes `&mut self`, so no guard of this reader can be alive (a read section of its own
    /// would be waited for forever by memb, and left unprotected by qsbr's offline step):
    ///
    /// ```compile_fail,E0502
    /// # use aspace_rcu::{Domain, Qsbr};
    /// let domain = Domain::<Qsbr>::new();
    /// let mut reader = domain.register();
    /// let guard = reader.read();
    /// reader.synchronize(); // error: `reader` is borrowed by `guard`
    /// drop(guard);
    /// ```
    pub fn synchronize(&mut self) {
        let _rcu = crate::sync::rcu_scope();
        F::reader_synchronize(
            &self.core.global,
            &self.slot,
            &self.core.registry,
            &self.core.stats,
        );
    }
}

impl<F: Flavor> Drop for Reader<F> {
    fn drop(&mut self) {
        let _rcu = crate::sync::rcu_scope();
        let nesting = F::on_unregister(&self.slot);
        self.core.registry.remove(&self.slot);
        if cfg!(debug_assertions) && nesting != 0 && !std::thread::panicking() {
            panic!("aspace-rcu: Reader dropped inside a read section (a guard was leaked)");
        }
    }
}

impl<F: Flavor> std::fmt::Debug for Reader<F> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Reader").field("flavor", &F::NAME).finish()
    }
}

/// The qsbr state changes take `&mut self`: a [`Guard`] borrows its reader, so the borrow
/// checker rejects announcing a quiescent state, going offline or coming online while a read
/// section of the reader is open (each would let grace periods stop waiting for the live
/// guard, in every build):
///
/// ```compile_fail,E0502
/// # use aspace_rcu::{Domain, Qsbr};
/// let domain = Domain::<Qsbr>::new();
/// let mut reader = domain.register();
/// let guard = reader.read();
/// reader.quiescent_state(); // error: `reader` is borrowed by `guard`
/// drop(guard);
/// ```
///
/// ```compile_fail,E0502
/// # use aspace_rcu::{Domain, Qsbr};
/// let domain = Domain::<Qsbr>::new();
/// let mut reader = domain.register();
/// let guard = reader.read();
/// reader.offline(); // error: `reader` is borrowed by `guard`
/// drop(guard);
/// ```
///
/// Once the guard is gone they compile:
///
/// ```
/// # use aspace_rcu::{Domain, Qsbr};
/// let domain = Domain::<Qsbr>::new();
/// let mut reader = domain.register();
/// let guard = reader.read();
/// drop(guard);
/// reader.quiescent_state();
/// reader.offline();
/// reader.synchronize();
/// reader.online();
/// ```
///
/// `read()` on an offline reader panics, in every build (one load of the reader's own slot):
/// its guard would protect nothing.
impl Reader<Qsbr> {
    /// Announces a quiescent state: no reference from earlier read sections is held. On an
    /// offline reader this comes back online, exactly as [`Reader::online`].
    #[inline]
    pub fn quiescent_state(&mut self) {
        crate::qsbr::quiescent_state(&self.core.global, &self.slot);
    }

    /// Goes offline (e.g. before blocking): grace periods no longer wait for this thread.
    pub fn offline(&mut self) {
        crate::qsbr::offline(&self.slot);
    }

    /// Comes back online after `offline()`.
    pub fn online(&mut self) {
        crate::qsbr::online(&self.core.global, &self.slot);
    }

    /// Whether this reader is online (grace periods wait for its quiescent states).
    pub fn is_online(&self) -> bool {
        self.slot.is_online()
    }
}

impl<F: Flavor> Guard<'_, F> {
    /// The reader this section belongs to.
    pub fn reader(&self) -> &Reader<F> {
        self.reader
    }

    /// Whether this is a read section of `domain`: the check a structure that frees through
    /// `domain` makes before it trusts a caller's guard (crossbeam-skiplist's `check_guard`).
    /// A guard of another domain protects nothing there: that domain's grace periods do not
    /// wait for it. One pointer compare.
    #[inline]
    pub fn belongs_to(&self, domain: &Domain<F>) -> bool {
        Domain::ptr_eq(&self.reader.domain, domain)
    }
}

impl<F: Flavor> Drop for Guard<'_, F> {
    #[inline]
    fn drop(&mut self) {
        F::read_unlock(self.slot);
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use std::panic::{catch_unwind, AssertUnwindSafe};
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::mpsc;
    use std::time::Duration;

    fn kill_reclaimer<F: Flavor>(domain: &Domain<F>) {
        domain.core().kill_reclaimer.store(true, Ordering::Relaxed);
    }

    fn panic_message(payload: &(dyn std::any::Any + Send)) -> String {
        payload
            .downcast_ref::<String>()
            .cloned()
            .or_else(|| payload.downcast_ref::<&str>().map(|s| s.to_string()))
            .unwrap_or_default()
    }

    /// Runs `domain.barrier()` on a helper thread: `Ok` if it returned, `Err(message)` if it
    /// panicked; fails the test if it has not done either within a liveness bound (a barrier
    /// needs milliseconds).
    fn barrier_outcome<F: Flavor>(domain: &Domain<F>) -> Result<(), String> {
        let (tx, rx) = mpsc::channel();
        let d = domain.clone();
        let h = std::thread::spawn(move || {
            d.barrier();
            let _ = tx.send(());
        });
        match rx.recv_timeout(Duration::from_secs(20)) {
            Ok(()) => {
                h.join().unwrap();
                Ok(())
            }
            Err(mpsc::RecvTimeoutError::Timeout) => {
                panic!("barrier() hung after the reclaimer thread died")
            }
            Err(mpsc::RecvTimeoutError::Disconnected) => Err(panic_message(
                &*h.join().expect_err("barrier() thread ended early"),
            )),
        }
    }

    struct Counted(Arc<AtomicUsize>);

    impl Drop for Counted {
        fn drop(&mut self) {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }

    /// Regression (issue 17): once the reclaimer thread had died, `barrier()` waited forever
    /// for callbacks nobody would run. Now it, and every later `call()`, panics saying why.
    #[test]
    fn barrier_and_call_after_the_reclaimer_died_panic_instead_of_hanging() {
        let domain = Domain::<Memb>::new();
        kill_reclaimer(&domain);
        domain.call(|| {});
        let msg = barrier_outcome(&domain).expect_err("barrier() returned: who ran the callback?");
        assert!(msg.contains("reclaimer thread died"), "{msg}");
        // Every later barrier and call says so too.
        let msg = barrier_outcome(&domain).expect_err("a later barrier() returned");
        assert!(msg.contains("reclaimer thread died"), "{msg}");
        let call = catch_unwind(AssertUnwindSafe(|| domain.call(|| {})));
        let msg = panic_message(&*call.expect_err("call() after the reclaimer died must panic"));
        assert!(msg.contains("reclaimer thread died"), "{msg}");
        // The last handle's drop runs what is queued and reports the death.
        let dropped = catch_unwind(AssertUnwindSafe(|| drop(domain)));
        let msg = panic_message(&*dropped.expect_err("drop must report the reclaimer's death"));
        assert!(msg.contains("reclaimer thread died"), "{msg}");
    }

    /// Regression (issue 17): dropping the last handle ignored the reclaimer's failed `join()`,
    /// so the callbacks it had not run (map nodes, page tables) leaked silently. Now the drop
    /// runs them after a grace period and then panics with the reclaimer's death.
    #[test]
    fn last_handle_drop_after_the_reclaimer_died_runs_the_queued_callbacks() {
        let domain = Domain::<Memb>::with_config(DomainConfig {
            batch_size: usize::MAX,
            batch_delay: Duration::from_secs(3600),
            ..DomainConfig::default()
        });
        kill_reclaimer(&domain);
        let drops = Arc::new(AtomicUsize::new(0));
        for _ in 0..3 {
            domain.defer_drop(Counted(drops.clone()));
        }
        let dropped = catch_unwind(AssertUnwindSafe(|| drop(domain)));
        assert_eq!(
            drops.load(Ordering::SeqCst),
            3,
            "the queued callbacks leaked when the reclaimer died"
        );
        let msg = panic_message(&*dropped.expect_err("drop must report the reclaimer's death"));
        assert!(msg.contains("reclaimer thread died"), "{msg}");
    }
}
