//! Deferred reclamation: the callback queue and the reclaimer thread that drains it in batches.
//!
//! # Queue
//!
//! `call()`, `defer_drop()` and `defer_free()` push an [`Entry`] onto one mutex-protected `Vec`
//! and bump `queued`. The enqueue path is a lock, a push and an unlock: no system call and no
//! condvar notification, except when the reclaimer is asleep on an empty queue (the first entry
//! wakes it) or is gathering a batch and the queue just reached `batch_size`. Every entry is
//! two words, a pointer plus a monomorphised function that consumes it: a typed free
//! (`defer_free`, `defer_drop`) costs no allocation of its own, and `call()` boxes its closure
//! by its concrete type (once; not at all when it captures nothing).
//!
//! # Reclaimer
//!
//! One thread per domain. It sleeps on a condvar while the queue is empty; once something is
//! queued it waits at most `batch_delay` for a batch to gather (or not at all when `batch_size`
//! entries are queued, a `barrier()` is waiting, or the domain is shutting down), then swaps the
//! whole queue out (double buffering, no allocation in steady state), runs ONE `synchronize()`
//! for the batch, runs the callbacks in FIFO order, and sets `completed` to the number of the
//! last entry it took. `barrier()` reads `queued` and waits on a second condvar until
//! `completed` reaches it; `pending()` is `queued - completed`.
//!
//! A panicking callback is caught and counted (`Stats::callback_panics`); the reclaimer goes on.
//! Its panic payload is dropped inside a `catch_unwind` of its own (a payload whose `Drop`
//! panics again is forgotten, not dropped), so no callback can unwind the reclaimer thread.
//!
//! `batch_delay` too long to add to `Instant::now()` (e.g. `Duration::MAX`) means *no timer*:
//! batches start by size only (`batch_size`), and `barrier()` and the domain's drop still run
//! whatever is queued at once.
//!
//! # If the reclaimer dies anyway
//!
//! It should not (callbacks cannot unwind it, and the queue's mutexes ignore poisoning), but a
//! bug or a debug-build misuse check inside its grace period could still end it. Then a guard
//! on its stack puts the batch it had taken but not run back at the head of the queue, marks the
//! queue `died` and wakes every `barrier()` waiter: from then on `barrier()` and every new
//! `call()`/`defer_*()` panic ("the domain's reclaimer thread died") instead of waiting forever
//! or queueing work nobody will run, and the last handle's drop, finding the failed `join()`,
//! runs what is queued itself (after a grace period: no reader is left by then) and then panics
//! with the reclaimer's panic message, so nothing leaks silently.
//!
//! # Lifetime
//!
//! The thread holds only an `Arc` of the domain's core (registry, grace-period state, queue),
//! never a handle: the domain shuts down when its last `Domain` or `Reader` handle drops. The
//! dropping thread sets `shutdown`, wakes the reclaimer and joins it; the reclaimer drains every
//! pending callback first (after a grace period), so nothing leaks. If the last handle is dropped
//! by a callback on the reclaimer thread itself, the thread is detached instead of joined and
//! drains the queue the same way before it exits.
//!
//! There is no blocking back-pressure: the enqueuer may be a registered reader (a qsbr thread
//! online, or a memb thread inside a read section), and blocking it until the reclaimer's grace
//! period completes would deadlock. Garbage is bounded instead by waking the reclaimer at
//! `batch_size`, which holds while the reclaimer gets a CPU: the backlog is then about
//! `batch_size` plus what arrives during one grace period and one batch's frees. On an
//! oversubscribed machine it is bounded by how long the scheduler keeps the reclaimer off a CPU
//! instead (the backlog is then whatever the updaters queue while it waits for a CPU; it does
//! not grow with the run's length, and it is taken in one batch).
//!
//! Cost per callback: the enqueue is an uncontended mutex round trip and a 16-byte store; on the
//! reclaimer, the grace period is shared by the whole batch (at most one per `batch_delay`
//! below `batch_size`) and the callback runs in a tight loop. For `defer_free` the run is the
//! allocator's free of a block another thread allocated, the dominant reclaimer cost.
//!
//! Under loom there is no reclaimer thread: `barrier()` and the domain's drop run the queue
//! inline on the calling thread (loom models check `synchronize()` directly).
//!
//! Not for: work that must run on a particular thread, or that calls `barrier()` (from the
//! reclaimer thread it would wait for itself: it panics instead).

use crate::stats::Counters;
use crate::sync::{Condvar, Mutex};
use std::time::Duration;

/// One deferred action: a type-erased owned pointer and the monomorphised function that
/// consumes it. Two words for every kind of callback (no enum tag, no fat pointer), so a queue
/// entry is 16 bytes on 64-bit targets and four fit in a cache line.
pub(crate) struct Entry {
    ptr: *mut (),
    /// Consumes `ptr`: drops the `Box<T>` (`free_box`) or runs the boxed closure (`call`).
    run: unsafe fn(*mut ()),
}

// SAFETY: entries are made only by `free_box::<T>` with `T: Send` from a pointer whose
// ownership was transferred to the queue (the `defer_free`/`defer_drop` contracts), or by
// `call::<F>` with `F: Send` from a box it owns; running `run` on another thread is dropping a
// `Box<T: Send>` or calling a `F: Send` there.
unsafe impl Send for Entry {}

impl Entry {
    /// An entry that drops `Box::from_raw(ptr)`.
    ///
    /// # Safety
    /// `ptr` came from `Box::<T>::into_raw`, and ownership of it passes to the entry.
    pub(crate) unsafe fn free_box<T: Send + 'static>(ptr: *mut T) -> Self {
        /// # Safety
        /// `ptr` is a `Box<T>` pointer owned by the caller, dropped exactly once here.
        unsafe fn drop_box<T>(ptr: *mut ()) {
            // SAFETY: per this function's contract, `ptr` is an owned `Box<T>` pointer.
            drop(unsafe { Box::from_raw(ptr.cast::<T>()) });
        }
        Entry {
            ptr: ptr.cast(),
            run: drop_box::<T>,
        }
    }

    /// An entry that runs `f` (boxed once, by its concrete type: no allocation at all for a
    /// closure that captures nothing).
    pub(crate) fn call<F: FnOnce() + Send + 'static>(f: F) -> Self {
        /// # Safety
        /// `ptr` is an owned `Box<F>` pointer, consumed exactly once here.
        unsafe fn call_box<F: FnOnce()>(ptr: *mut ()) {
            // SAFETY: per this function's contract, `ptr` is an owned `Box<F>` pointer.
            let f = unsafe { Box::from_raw(ptr.cast::<F>()) };
            f();
        }
        Entry {
            ptr: Box::into_raw(Box::new(f)).cast(),
            run: call_box::<F>,
        }
    }

    fn run(self) {
        // SAFETY: the entry owns `ptr` and `run` is the function made for its type (`free_box`
        // and `call`); running consumes the entry, so it runs once.
        unsafe { (self.run)(self.ptr) }
    }
}

/// What the reclaimer is doing (decides whether an enqueuer must notify it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(loom, allow(dead_code))]
enum Phase {
    /// Running or about to re-check the queue: nobody needs to wake it.
    Busy,
    /// Asleep with an empty queue: the next entry wakes it.
    Idle,
    /// Asleep (with a timeout) gathering a batch: woken at `batch_size`.
    Gathering,
}

struct State {
    entries: Vec<Entry>,
    /// Entries ever queued.
    queued: u64,
    /// Entries ever run (a prefix of the queued ones).
    completed: u64,
    phase: Phase,
    /// A `barrier()` (or drop) wants the queue run now.
    urgent: bool,
    /// Threads blocked in `barrier()`.
    barrier_waiters: usize,
    shutdown: bool,
    /// The reclaimer thread unwound (see "If the reclaimer dies anyway"): nothing queued will
    /// run until the last handle's drop runs it.
    died: bool,
}

/// The callback queue of one domain.
pub(crate) struct Queue {
    state: Mutex<State>,
    /// The reclaimer sleeps here.
    work: Condvar,
    /// `barrier()` callers sleep here.
    done: Condvar,
    batch_size: usize,
    #[cfg_attr(loom, allow(dead_code))]
    batch_delay: Duration,
}

impl Queue {
    pub(crate) fn new(batch_size: usize, batch_delay: Duration) -> Self {
        Self {
            state: Mutex::new(State {
                entries: Vec::new(),
                queued: 0,
                completed: 0,
                phase: Phase::Busy,
                urgent: false,
                barrier_waiters: 0,
                shutdown: false,
                died: false,
            }),
            work: Condvar::new(),
            done: Condvar::new(),
            batch_size: batch_size.max(1),
            batch_delay,
        }
    }

    /// Queues `entry`; wakes the reclaimer only if it sleeps on an empty queue or the batch is full.
    #[inline]
    pub(crate) fn push(&self, entry: Entry) {
        let mut st = self.state.lock();
        if st.died {
            drop(st);
            // `entry` is leaked (an `Entry` has no `Drop`): running it without a grace period
            // would free early, and nobody is left to run it after one.
            reclaimer_died("call()/defer_*()");
        }
        st.entries.push(entry);
        st.queued += 1;
        let wake = match st.phase {
            Phase::Busy => false,
            Phase::Idle => true,
            Phase::Gathering => st.entries.len() >= self.batch_size,
        };
        if wake {
            st.phase = Phase::Busy;
        }
        drop(st);
        if wake {
            self.work.notify_one();
        }
    }

    /// Callbacks queued and not yet run.
    pub(crate) fn pending(&self) -> usize {
        let st = self.state.lock();
        (st.queued - st.completed) as usize
    }

    /// Waits until every entry queued before the call has run (threaded reclaimer). Panics if
    /// the reclaimer thread died. `waiting` runs (without the queue lock) before the wait and
    /// then every [`SELF_WAIT_CHECK_EVERY`] while it lasts (debug builds), with the time waited
    /// so far: the caller's self-deadlock check, which panics to end the wait.
    #[cfg(not(loom))]
    pub(crate) fn barrier(&self, mut waiting: impl FnMut(Duration)) {
        let started = std::time::Instant::now();
        let mut st = self.state.lock();
        let target = st.queued;
        if st.completed >= target {
            return;
        }
        st.urgent = true;
        if st.phase != Phase::Busy {
            st.phase = Phase::Busy;
            self.work.notify_one();
        }
        loop {
            if st.died {
                drop(st);
                reclaimer_died("barrier()");
            }
            drop(st);
            waiting(started.elapsed());
            st = self.state.lock();
            if st.completed >= target {
                return;
            }
            if st.died {
                continue;
            }
            st.barrier_waiters += 1;
            st = match SELF_WAIT_CHECK_EVERY {
                Some(every) => self.done.wait_timeout(st, every),
                None => self.done.wait(st),
            };
            st.barrier_waiters -= 1;
            if st.completed >= target {
                return;
            }
        }
    }

    /// Asks the reclaimer to drain everything and exit.
    pub(crate) fn request_shutdown(&self) {
        let mut st = self.state.lock();
        st.shutdown = true;
        st.phase = Phase::Busy;
        drop(st);
        self.work.notify_one();
    }

    /// Takes every queued entry into `batch` (which must be empty); returns the sequence number
    /// of the last one.
    fn take(st: &mut State, batch: &mut Vec<Entry>) -> u64 {
        debug_assert!(batch.is_empty());
        st.urgent = false;
        std::mem::swap(&mut st.entries, batch);
        st.queued
    }

    /// Runs `batch` (after the caller's grace period) and publishes `upto` as completed.
    fn finish(&self, batch: &mut Vec<Entry>, upto: u64, stats: &Counters) {
        let n = batch.len() as u64;
        let mut panics = 0;
        // One unwind guard around the whole loop, not one per entry: after a panic the loop
        // resumes with the entry after the one that panicked.
        let mut rest = batch.drain(..);
        while let Err(payload) = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            rest.by_ref().for_each(Entry::run);
        })) {
            panics += 1;
            drop_panic_payload(payload);
        }
        drop(rest);
        // A burst must not pin a huge buffer forever.
        if batch.capacity() > 64 * 1024 {
            batch.shrink_to(1024);
        }
        Counters::bump(&stats.batches, 1);
        Counters::bump(&stats.callbacks_run, n);
        if panics > 0 {
            Counters::bump(&stats.callback_panics, panics);
        }
        let mut st = self.state.lock();
        st.completed = upto;
        let notify = st.barrier_waiters > 0;
        drop(st);
        if notify {
            self.done.notify_all();
        }
    }

    /// The reclaimer thread's body: returns after shutdown, once the queue is empty.
    #[cfg(not(loom))]
    pub(crate) fn run(&self, synchronize: impl Fn(), stats: &Counters) {
        use std::time::Instant;
        // Owns the taken batch, so that an unwind hands it back (see `Dying`).
        let mut dying = Dying {
            queue: self,
            batch: Vec::new(),
        };
        let batch = &mut dying.batch;
        loop {
            let mut st = self.state.lock();
            // `Some(None)`: the delay does not fit an `Instant` (no timer, batch by size only).
            let mut deadline: Option<Option<Instant>> = None;
            loop {
                if st.entries.is_empty() {
                    if st.shutdown {
                        return;
                    }
                    deadline = None;
                    st.phase = Phase::Idle;
                    st = self.work.wait(st);
                    st.phase = Phase::Busy;
                    continue;
                }
                if st.urgent || st.shutdown || st.entries.len() >= self.batch_size {
                    break;
                }
                let now = Instant::now();
                let due = *deadline.get_or_insert_with(|| now.checked_add(self.batch_delay));
                if due.is_some_and(|due| now >= due) {
                    break;
                }
                st.phase = Phase::Gathering;
                st = match due {
                    Some(due) => self.work.wait_timeout(st, due - now),
                    None => self.work.wait(st),
                };
                st.phase = Phase::Busy;
            }
            let upto = Self::take(&mut st, batch);
            drop(st);
            synchronize();
            self.finish(batch, upto, stats);
        }
    }

    /// Runs everything queued so far on the calling thread (loom builds: `barrier()` and drop;
    /// otherwise the last handle's drop after the reclaimer thread died).
    pub(crate) fn run_inline(&self, synchronize: impl Fn(), stats: &Counters) {
        let mut batch = Vec::new();
        loop {
            let mut st = self.state.lock();
            if st.entries.is_empty() {
                return;
            }
            let upto = Self::take(&mut st, &mut batch);
            drop(st);
            synchronize();
            self.finish(&mut batch, upto, stats);
        }
    }
}

/// Debug builds: how often a waiting `barrier()` runs its caller's self-deadlock check.
#[cfg(not(loom))]
const SELF_WAIT_CHECK_EVERY: Option<Duration> = if cfg!(debug_assertions) {
    Some(Duration::from_millis(50))
} else {
    None
};

/// The reclaimer thread's unwind guard: if the thread unwinds (it should not; see "If the
/// reclaimer dies anyway"), puts the batch it took but did not run back at the head of the
/// queue, marks the queue `died` and wakes every `barrier()` waiter.
#[cfg(not(loom))]
struct Dying<'q> {
    queue: &'q Queue,
    batch: Vec<Entry>,
}

#[cfg(not(loom))]
impl Drop for Dying<'_> {
    fn drop(&mut self) {
        if !std::thread::panicking() {
            return; // a clean shutdown: the batch is empty
        }
        let mut st = self.queue.state.lock();
        // Not run: they go back in FIFO order before anything queued since. `completed` stays
        // below them, so `pending()` and `barrier()` still count them.
        let newer = std::mem::replace(&mut st.entries, std::mem::take(&mut self.batch));
        st.entries.extend(newer);
        st.died = true;
        st.phase = Phase::Busy;
        drop(st);
        self.queue.done.notify_all();
    }
}

/// Drops a callback's panic payload without letting it unwind the reclaimer: a payload whose
/// `Drop` panics is caught here, and the second payload is forgotten (leaked) rather than
/// dropped, since its `Drop` could panic too.
fn drop_panic_payload(payload: Box<dyn std::any::Any + Send>) {
    if let Err(again) = std::panic::catch_unwind(std::panic::AssertUnwindSafe(move || {
        drop(payload);
    })) {
        std::mem::forget(again);
    }
}

/// The loud failure of every queue operation after the reclaimer thread died.
#[cold]
#[inline(never)]
#[track_caller]
fn reclaimer_died(what: &str) -> ! {
    panic!(
        "aspace-rcu: {what} refused: the domain's reclaimer thread died, so queued callbacks \
         would never run (the last handle's drop runs them; the reclaimer's panic is above)"
    );
}
