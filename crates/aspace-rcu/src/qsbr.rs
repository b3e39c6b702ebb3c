//! The `qsbr` flavor: quiescent-state-based reclamation (liburcu-qsbr).
//!
//! # Reader
//!
//! Read sections cost almost nothing: in release builds `read()` is one load of the reader's own
//! slot and a not-taken branch (an offline reader's `read()` panics: grace periods skip it, so its
//! guard would protect nothing), and the guard's drop compiles to no instructions (debug builds
//! keep a nesting count to catch misuse). The state changes below take `&mut Reader`, so the
//! borrow checker forbids them while a guard borrows the reader. Instead, each reader
//! periodically announces a *quiescent state*, a point where it holds no reference obtained in
//! an earlier read section, by copying the domain's grace-period counter into its slot:
//!
//! ```text
//! quiescent_state:  g = gp_ctr (Acquire); if slot != g { slot = g (Release) }
//!                   (offline, slot == 0: online() instead, fence included)
//! offline:          slot = 0 (Release)
//! online:           slot = gp_ctr; fence(SeqCst)
//! ```
//!
//! `gp_ctr` starts at 1 and grows by 2, so it is never 0, and 0 means "offline". A thread that
//! blocks (I/O, locks, condvars, `synchronize()` itself) goes offline first.
//!
//! # Writer
//!
//! ```text
//! t = requests.fetch_add(1) + 1        (AcqRel)   take a ticket
//! lock writer mutex
//! if completed >= t: return                       a grace period that started after our ticket finished
//! served = requests (Acquire)                     every ticket <= served is covered by this grace period
//! new = gp_ctr + 2; gp_ctr = new (Release)
//! fence(SeqCst)
//! for each slot: wait until slot == 0 or slot == new  (Acquire)
//! completed = served; unlock
//! ```
//!
//! # Correctness argument
//!
//! - *Readers that announce `new`* loaded `gp_ctr == new` with Acquire, which synchronizes with
//!   the writer's Release store: everything before the store (the caller's unlinking writes, and
//!   through the ticket those of every caller served) is visible to every read section that
//!   follows the announcement. The announcement is a Release store and the writer's check an
//!   Acquire load: every access of the reader's earlier read sections happens-before the
//!   writer's return, hence before the caller frees anything.
//! - *Offline readers* are skipped. `offline()` is a Release store of 0, so earlier sections are
//!   ordered before the writer's Acquire load that sees it. A reader coming `online()` stores its
//!   counter and then executes `fence(SeqCst)`; the writer stores `gp_ctr` and executes
//!   `fence(SeqCst)` before reading the slots. Of the two fences one comes first in the SeqCst
//!   order: either the writer sees the reader online (and waits for its next announcement), or
//!   the reader's subsequent sections see the writer's prior writes (store-buffering pattern).
//! - *Sharing grace periods (tickets).* The memb flavor's early exit (barrier E, a read of the
//!   grace-period number outside the mutex) is not sound here: it relies on F-L forcing a
//!   barrier in every reader to pair with E, and qsbr readers execute no barrier at all. Instead a
//!   caller takes a ticket with an AcqRel `fetch_add`; a leader reads `requests` with Acquire
//!   after locking the mutex, so every ticket it serves happens-before its grace period starts,
//!   and the callers of those tickets exit as soon as they get the mutex.
//!
//! # Hazard
//!
//! A thread that is an online reader of a domain and calls `Domain::synchronize()` (or
//! `Domain::barrier()`, whose callbacks wait for a grace period) waits for itself forever.
//! `Reader::synchronize()` goes offline around the wait; use it. Debug builds detect the
//! self-wait (the slot's last user is the waiting thread and the wait has slept, or for
//! `barrier()` waited, for more than [`SELF_WAIT_PANIC_AFTER`]) and panic instead of hanging.
//!
//! Not for: readers that cannot find regular quiescent points (use memb).

use crate::registry::{Registry, SlotRef};
use crate::stats::Counters;
use crate::sync::{fence, AtomicUsize, Mutex};
use crate::wait::WaitBackoff;
use crossbeam_utils::CachePadded;
use std::sync::atomic::Ordering::{AcqRel, Acquire, Relaxed, Release, SeqCst};

/// Debug builds: a wait on a slot last used by the waiting thread panics after this long.
#[cfg(all(debug_assertions, not(loom)))]
pub(crate) const SELF_WAIT_PANIC_AFTER: std::time::Duration = std::time::Duration::from_millis(200);

/// A `qsbr` reader's slot.
pub struct QsbrSlot {
    /// 0 when offline, otherwise the last grace-period counter announced.
    ctr: AtomicUsize,
    /// Debug: read-section nesting (misuse checks only).
    #[cfg(debug_assertions)]
    nesting: std::sync::atomic::AtomicUsize,
    /// Debug: token of the thread that last announced a quiescent state or came online.
    #[cfg(all(debug_assertions, not(loom)))]
    owner: std::sync::atomic::AtomicUsize,
}

impl QsbrSlot {
    pub(crate) fn new() -> Self {
        Self {
            ctr: AtomicUsize::new(0),
            #[cfg(debug_assertions)]
            nesting: std::sync::atomic::AtomicUsize::new(0),
            #[cfg(all(debug_assertions, not(loom)))]
            owner: std::sync::atomic::AtomicUsize::new(0),
        }
    }

    /// Whether the reader is online. `#[inline]`: `read()` tests it, and it must inline into
    /// the read sections of other crates (a non-generic function otherwise stays a call).
    #[inline]
    pub(crate) fn is_online(&self) -> bool {
        self.ctr.load(Relaxed) != 0
    }

    /// Current nesting depth (debug builds; always 0 in release builds).
    pub(crate) fn nesting(&self) -> usize {
        #[cfg(debug_assertions)]
        {
            self.nesting.load(Relaxed)
        }
        #[cfg(not(debug_assertions))]
        {
            0
        }
    }

    #[cfg(all(debug_assertions, not(loom)))]
    fn claim(&self) {
        self.owner.store(crate::owner::current(), Relaxed);
    }
}

/// A `qsbr` domain's grace-period state.
pub struct QsbrGlobal {
    /// Grace-period counter (odd, +2 per grace period). Read by every announcement.
    gp_ctr: CachePadded<AtomicUsize>,
    /// Tickets handed to `synchronize()` callers.
    requests: AtomicUsize,
    /// The writer mutex.
    writer: Mutex<WriterState>,
}

struct WriterState {
    /// Highest ticket whose grace period has completed.
    completed: usize,
    /// Reusable snapshot buffer.
    snapshot: Vec<SlotRef<QsbrSlot>>,
}

impl QsbrGlobal {
    pub(crate) fn new() -> Self {
        Self {
            gp_ctr: CachePadded::new(AtomicUsize::new(1)),
            requests: AtomicUsize::new(0),
            writer: Mutex::new(WriterState {
                completed: 0,
                snapshot: Vec::new(),
            }),
        }
    }
}

/// Read lock: in release builds only the check that the reader is online (a load of its own
/// slot and a not-taken branch): a guard of an offline reader would protect nothing.
#[inline(always)]
pub(crate) fn read_lock(slot: &QsbrSlot) {
    if !slot.is_online() {
        read_while_offline();
    }
    #[cfg(debug_assertions)]
    slot.nesting.fetch_add(1, Relaxed);
}

#[cold]
#[inline(never)]
fn read_while_offline() -> ! {
    panic!(
        "aspace-rcu: read() on an offline qsbr reader (call online() first): grace periods do \
         not wait for an offline reader, so its guard would protect nothing"
    );
}

/// Read unlock: nothing in release builds.
#[inline(always)]
pub(crate) fn read_unlock(slot: &QsbrSlot) {
    #[cfg(debug_assertions)]
    slot.nesting.fetch_sub(1, Relaxed);
    let _ = slot;
}

fn debug_assert_not_reading(slot: &QsbrSlot, what: &str) {
    assert!(
        slot.nesting() == 0,
        "aspace-rcu: qsbr {what} inside a read section (a live guard would be unprotected)"
    );
}

/// Announces a quiescent state. On an offline reader it is `online()` (in every build): a
/// plain announcement there would bring the reader online without the fence that orders its
/// next sections against a writer that already saw it offline (see the module doc).
#[inline]
pub(crate) fn quiescent_state(global: &QsbrGlobal, slot: &QsbrSlot) {
    if cfg!(debug_assertions) {
        debug_assert_not_reading(slot, "quiescent_state()");
    }
    #[cfg(all(debug_assertions, not(loom)))]
    slot.claim();
    // Acquire: pairs with the Release store of gp_ctr in synchronize(); later sections see the
    // writes that preceded that grace period.
    let g = global.gp_ctr.load(Acquire);
    let c = slot.ctr.load(Relaxed);
    if c != g {
        if c == 0 {
            // Offline (gp_ctr is never 0): come online with online()'s store-buffering fence.
            online_cold(global, slot);
            return;
        }
        // Release: pairs with the Acquire load in wait_for_readers(); earlier sections' accesses
        // happen-before the writer's return.
        slot.ctr.store(g, Release);
    }
}

/// `online()` out of line, for the rare `quiescent_state()` of an offline reader.
#[cold]
#[inline(never)]
fn online_cold(global: &QsbrGlobal, slot: &QsbrSlot) {
    online(global, slot);
}

/// Goes offline.
pub(crate) fn offline(slot: &QsbrSlot) {
    if cfg!(debug_assertions) {
        debug_assert_not_reading(slot, "offline()");
    }
    // Release: pairs with the Acquire load in wait_for_readers(); earlier sections' accesses
    // happen-before any writer that sees us offline returns.
    slot.ctr.store(0, Release);
}

/// Goes offline without the misuse checks (reader drop; the caller reports misuse itself).
pub(crate) fn force_offline(slot: &QsbrSlot) {
    #[cfg(debug_assertions)]
    slot.nesting.store(0, Relaxed);
    // Release: as in offline().
    slot.ctr.store(0, Release);
}

/// Comes online (also used at registration).
pub(crate) fn online(global: &QsbrGlobal, slot: &QsbrSlot) {
    #[cfg(all(debug_assertions, not(loom)))]
    slot.claim();
    slot.ctr.store(global.gp_ctr.load(Relaxed), Relaxed);
    // SeqCst: pairs with the writer's fence after its gp_ctr store (store-buffering): either the
    // writer sees us online, or our next sections see its prior writes.
    fence(SeqCst);
}

fn wait_for_readers(slots: &[SlotRef<QsbrSlot>], new: usize) {
    for slot in slots {
        let mut backoff = WaitBackoff::new();
        loop {
            // Acquire: pairs with the Release stores in quiescent_state()/offline().
            let c = slot.ctr.load(Acquire);
            if c == 0 || c == new {
                break;
            }
            #[cfg(all(debug_assertions, not(loom)))]
            if slot.owner.load(Relaxed) == crate::owner::current()
                && backoff
                    .sleeping_for()
                    .is_some_and(|d| d >= SELF_WAIT_PANIC_AFTER)
            {
                panic!(
                    "aspace-rcu: Domain::synchronize() called by a thread that is an online qsbr \
                     reader of the same domain (it waits for itself); use Reader::synchronize() \
                     or go offline() first"
                );
            }
            backoff.pause();
        }
    }
}

/// Debug builds: panics if a wait for a grace period (`what`, e.g. `barrier()`) has lasted
/// `waited` >= [`SELF_WAIT_PANIC_AFTER`] and the calling thread is an online reader of this
/// domain (the grace period waits for the caller's next quiescent state, which never comes).
#[cfg(all(debug_assertions, not(loom)))]
pub(crate) fn debug_check_not_online(
    registry: &Registry<QsbrSlot>,
    waited: std::time::Duration,
    what: &str,
) {
    if waited < SELF_WAIT_PANIC_AFTER {
        return;
    }
    let me = crate::owner::current();
    let mut slots = Vec::new();
    registry.snapshot_into(&mut slots);
    for slot in &slots {
        if slot.is_online() && slot.owner.load(Relaxed) == me {
            panic!(
                "aspace-rcu: {what} called by a thread that is an online qsbr reader of the same \
                 domain (it waits for itself); go offline() first"
            );
        }
    }
}

/// Waits for a grace period (see the module doc).
pub(crate) fn synchronize(global: &QsbrGlobal, registry: &Registry<QsbrSlot>, stats: &Counters) {
    // AcqRel: Release publishes the caller's writes to the leader that serves this ticket (its
    // Acquire load of `requests`); Acquire keeps the rest of this call after the ticket.
    let ticket = global.requests.fetch_add(1, AcqRel).wrapping_add(1);
    Counters::bump(&stats.synchronize_calls, 1);

    let mut state = global.writer.lock();
    if state.completed.wrapping_sub(ticket) as isize >= 0 {
        Counters::bump(&stats.early_exits, 1);
        return;
    }
    // Acquire: pairs with the fetch_add of every ticket we serve.
    let served = global.requests.load(Acquire);
    Counters::bump(&stats.grace_periods, 1);
    let new = global.gp_ctr.load(Relaxed).wrapping_add(2);
    // Release: pairs with the Acquire load in quiescent_state().
    global.gp_ctr.store(new, Release);
    // SeqCst: pairs with the fence in online() (store-buffering, see the module doc).
    fence(SeqCst);
    let WriterState {
        completed,
        snapshot,
    } = &mut *state;
    registry.snapshot_into(snapshot);
    wait_for_readers(snapshot, new);
    snapshot.clear();
    *completed = served;
}
