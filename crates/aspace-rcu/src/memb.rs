//! The `memb` flavor: the user-space RCU of the thesis §4.4 (a Signal-URCU variant).
//!
//! # Reader
//!
//! Each reader owns one word in its registered slot: the nesting count in the low bits, the
//! barrier-mode bit [`FULL_FENCES`] above it and the reader group in bit [`GROUP`].
//! RCU-READ-LOCK stores `gp_ctr` (the current group with a nesting count of 1) into the word
//! when it is the outermost lock, otherwise increments it; RCU-READ-UNLOCK decrements it (the
//! outermost unlock leaves the word at rest: 0, or `FULL_FENCES` in fallback mode). Both are
//! plain (`Relaxed`) accesses to the reader's own cache line, separated from the read section
//! by compiler barriers only (L and U). In fallback mode (no membarrier) L and U are
//! `fence(SeqCst)`, which is liburcu's "mb" flavor.
//!
//! The read path is shaped for the common case, an outermost section in membarrier mode, which
//! compiles to straight-line code with no taken branch (3 loads, 2 stores, 2 fused
//! compare-and-branch, checked in the `rcu-read` loop's disassembly):
//!
//! ```text
//! lock:    w = word; if w & (NEST_MASK | FULL_FENCES) != 0 -> lock_slow (cold: nested, or
//!                                                             fallback: store gp_ctr, fence)
//!          word = gp_ctr; compiler fence L
//! unlock:  w = word; if w & (NEST_MASK | FULL_FENCES) != 1 -> unlock_slow (cold: nested, or
//!                                                             fallback: fence, word = at rest)
//!          compiler fence U; word = 0
//! ```
//!
//! The barrier mode is not a separate field that every lock and unlock would load: a
//! fallback-mode domain sets [`FULL_FENCES`] in `gp_ctr`, where it never flips, and in every
//! reader word at rest (`MembSlot::new`), so one test of the word the lock and unlock load
//! anyway routes a fallback reader to the cold path, which issues the full fences. The writer
//! ignores the bit (IS-PREEXISTING-READER looks only at the nesting count and the group), so
//! the protocol is the thesis' unchanged.
//!
//! Why the nesting count stays packed in the word rather than in a reader-private cell: the
//! outermost lock must load *something* private to learn that it is outermost, and the word is
//! as private as a cell (only its owner writes it; the writer reads it only during grace
//! periods), so a separate counter would add a load and a store to lock and unlock without
//! removing any. Nested locks do write the shared word, but they sit on the cold path.
//!
//! # Nesting limit
//!
//! The count holds at most [`NEST_MASK`] (2^31 - 1 on 64-bit targets, 2^15 - 1 on 32-bit
//! ones). The nested lock checks the limit in every build (it is on the cold path, so the
//! outermost lock and unlock are unchanged): the lock that would carry the count into
//! [`FULL_FENCES`] panics instead and leaves the word as it was. The reader therefore stays
//! *inside* its section: guards leaked with `mem::forget` stall grace periods (until the
//! `Reader` drops) but can never make the reader look idle while they are alive.
//!
//! # Writer (RCU-SYNCHRONIZE, thesis §4.4, same line labels)
//!
//! ```text
//!  E      fence(SeqCst); gp_in_progress = cur_gp
//!         lock writer mutex
//!         if cur_gp > gp_in_progress: return          // a full GP elapsed while we waited
//!         cur_gp += 1
//!  S      fence(SeqCst)
//!  F-L    membarrier()                                // force a barrier in every running reader
//!  A-F-L  fence(SeqCst)
//!         WAIT-FOR-READERS(!group)                    // readers delayed into the next group
//!         fence(SeqCst)
//!         group = !group                              // the single flip
//!         fence(SeqCst)
//!         WAIT-FOR-READERS(old group)                 // pre-existing readers
//!  F-U    membarrier()
//!         unlock
//! ```
//!
//! # Correctness argument
//!
//! Let W be a write that precedes `synchronize()` (e.g. unlinking an object) and R a read section
//! of reader T. We must show: either R sees W (R started after the grace period began), or the
//! writer waits until R has ended, and R's last access precedes the writer's return (F-U).
//!
//! 1. *F-L pairs with L (inside a section) or with S (outside).* membarrier makes T execute a
//!    full barrier at some point P during F-L. If P falls between T's L and U, T's store of its
//!    positive nesting word precedes P, and A-F-L (after F-L) makes the writer's subsequent loads
//!    of T's word see it: the writer will wait for R if R is in the group it checks. If P falls
//!    outside a read section, every later read section of T begins after P, and P is ordered after
//!    S, so those sections see W (S orders W, and `cur_gp`, before F-L).
//! 2. *Delayed readers.* A reader can load `gp_ctr` (old group) and store it into its word much
//!    later, after a flip. Such a reader is "delayed" into the group that is about to become
//!    current. Waiting for the non-current group to drain *before* the flip (thesis' idea from
//!    SRCU) guarantees that when we flip, the group we then wait for contains every pre-existing
//!    reader and the now-current group contains only readers that started after F-L, which
//!    (by 1) see W. That is why one flip suffices where Signal URCU needs two.
//! 3. *F-U pairs with U.* After the writer observed T's word leave the old group (or its
//!    nesting count drop to 0), F-U forces a barrier in T, ordering all of R's accesses (before
//!    U in program order) before the writer's return, so the caller may free what R read.
//!    Whatever guard of a nested section drops last runs U (the count, not the guard, decides),
//!    so dropping guards out of order never ends a section early.
//! 4. *Early exit (E).* B reads `cur_gp` after its barrier E. If, once B holds the mutex,
//!    `cur_gp > gp_in_progress`, some A incremented `cur_gp` after B's read: B's load is
//!    coherence-ordered before A's increment, so B's E precedes A's S in the SeqCst order. Every
//!    write of B before E is therefore ordered before A's F-L, and A's whole grace period (which
//!    has completed: A released the mutex) covers B's writes exactly as it covers A's own (1-3).
//!    If B read A's increment instead, `cur_gp == gp_in_progress` and B runs its own grace period.
//!    Concurrent synchronizers therefore share grace periods: of any number of callers that queue
//!    on the mutex during A's grace period, the first runs one more and the others exit early.
//!
//! The same protocol with real fences at L and U is what the loom models check (`tests/loom.rs`,
//! see `membarrier.rs` for why that is the exact stand-in).
//!
//! Not for: readers that block for long (they delay every grace period; use qsbr `offline()` or
//! keep sections short).

use crate::membarrier::force_mb_in_threads;
use crate::membarrier::MembMode;
use crate::registry::{Registry, SlotRef};
use crate::stats::Counters;
use crate::sync::{fence, reader_light_barrier, AtomicUsize, Mutex};
use crate::wait::WaitBackoff;
use crossbeam_utils::CachePadded;
use std::sync::atomic::Ordering::{Relaxed, SeqCst};

/// The reader-group bit of a reader word (liburcu's `RCU_GP_CTR_PHASE`).
pub(crate) const GROUP: usize = 1 << (usize::BITS / 2);
/// Set in `gp_ctr`, hence in every reader word, of a fallback-mode domain: readers issue full
/// fences at L and U. Constant for the life of the domain (the flip toggles only [`GROUP`]).
/// It is the top bit of the low half so that the unlock's fast-path test, "count 1 and no
/// full fences", is one 32-bit compare of the low half with 1.
pub(crate) const FULL_FENCES: usize = GROUP >> 1;
/// The nesting-count bits of a reader word.
pub(crate) const NEST_MASK: usize = FULL_FENCES - 1;

/// A `memb` reader's slot.
pub struct MembSlot {
    /// Nesting count | reader group | [`FULL_FENCES`]. Written only by the owning reader; read
    /// by writers.
    word: AtomicUsize,
    /// Debug: token of the thread that last entered an outermost read section.
    #[cfg(all(debug_assertions, not(loom)))]
    owner: std::sync::atomic::AtomicUsize,
}

impl MembSlot {
    pub(crate) fn new(global: &MembGlobal) -> Self {
        Self {
            // At rest the word is 0, or FULL_FENCES in fallback mode (see `read_lock`).
            word: AtomicUsize::new(global.gp_ctr.load(Relaxed) & FULL_FENCES),
            #[cfg(all(debug_assertions, not(loom)))]
            owner: std::sync::atomic::AtomicUsize::new(0),
        }
    }

    /// Current nesting depth (0 outside read sections). Exact when called by the owner.
    pub(crate) fn nesting(&self) -> usize {
        self.word.load(Relaxed) & NEST_MASK
    }

    /// Resets the slot to "not reading" (used when a reader is dropped inside a section).
    pub(crate) fn force_idle(&self) {
        let word = self.word.load(Relaxed);
        reader_light_barrier(word & FULL_FENCES != 0);
        self.word.store(word & FULL_FENCES, Relaxed);
    }
}

/// A `memb` domain's grace-period state.
pub struct MembGlobal {
    /// The current reader group with a nesting count of 1, plus [`FULL_FENCES`] in fallback
    /// mode: what an outermost read lock stores. Read by every reader's outermost lock, so it
    /// sits alone on its cache line.
    gp_ctr: CachePadded<AtomicUsize>,
    /// Number of the most recent grace period started (thesis *cur-gp*). Written under
    /// `writer`; read before it (barrier E).
    cur_gp: AtomicUsize,
    mode: MembMode,
    /// The writer mutex; it guards the reusable snapshot buffer.
    writer: Mutex<Vec<SlotRef<MembSlot>>>,
}

impl MembGlobal {
    pub(crate) fn new(mode: MembMode) -> Self {
        let full = if mode == MembMode::FenceFallback {
            FULL_FENCES
        } else {
            0
        };
        Self {
            gp_ctr: CachePadded::new(AtomicUsize::new(full | 1)),
            cur_gp: AtomicUsize::new(0),
            mode,
            writer: Mutex::new(Vec::new()),
        }
    }

    pub(crate) fn mode(&self) -> MembMode {
        self.mode
    }
}

/// RCU-READ-LOCK.
#[inline(always)]
pub(crate) fn read_lock(global: &MembGlobal, slot: &MembSlot) {
    let word = slot.word.load(Relaxed);
    if word & (NEST_MASK | FULL_FENCES) != 0 {
        lock_slow(global, slot, word);
        return;
    }
    let g = global.gp_ctr.load(Relaxed);
    // Relaxed: the reader's own word; ordered against the section by barrier L below (and,
    // for the writer, by F-L/A-F-L, see the module doc).
    slot.word.store(g, Relaxed);
    #[cfg(all(debug_assertions, not(loom)))]
    slot.owner.store(crate::owner::current(), Relaxed);
    // Barrier L (membarrier mode): the word store above precedes the section's loads.
    reader_light_barrier(false);
}

/// RCU-READ-LOCK inside a section (only the count grows: the outermost lock's L already
/// orders the section), or an outermost one in fallback mode.
#[cold]
#[inline(never)]
fn lock_slow(global: &MembGlobal, slot: &MembSlot, word: usize) {
    if word & NEST_MASK != 0 {
        // Checked in every build (this path is cold): one more at the limit would carry into
        // FULL_FENCES, leave the count 0 and make the reader look idle under live guards.
        if word & NEST_MASK == NEST_MASK {
            nesting_overflow();
        }
        slot.word.store(word + 1, Relaxed);
    } else {
        let g = global.gp_ctr.load(Relaxed);
        // Relaxed: as in `read_lock`.
        slot.word.store(g, Relaxed);
        #[cfg(all(debug_assertions, not(loom)))]
        slot.owner.store(crate::owner::current(), Relaxed);
        // Barrier L (fallback mode: a full fence).
        reader_light_barrier(true);
    }
}

/// The read lock that would overflow the nesting count: refused, with the word left as it is
/// (the reader stays inside its section, so grace periods keep waiting for its guards).
#[cold]
#[inline(never)]
fn nesting_overflow() -> ! {
    panic!(
        "aspace-rcu: RCU read sections nested too deeply ({NEST_MASK} live guards on one reader: \
         leaked with mem::forget?); the reader stays inside its read section"
    );
}

/// RCU-READ-UNLOCK.
#[inline(always)]
pub(crate) fn read_unlock(slot: &MembSlot) {
    let word = slot.word.load(Relaxed);
    if word & (NEST_MASK | FULL_FENCES) == 1 {
        // Barrier U (membarrier mode): the section's accesses precede the store that ends it.
        reader_light_barrier(false);
        slot.word.store(0, Relaxed);
    } else {
        unlock_slow(slot, word);
    }
}

/// RCU-READ-UNLOCK of a nested section, or of an outermost one in fallback mode.
#[cold]
#[inline(never)]
fn unlock_slow(slot: &MembSlot, word: usize) {
    debug_assert!(word & NEST_MASK > 0, "RCU read unlock without lock");
    if word & NEST_MASK == 1 {
        // Barrier U: the section's accesses precede the store that ends it.
        reader_light_barrier(word & FULL_FENCES != 0);
        // At rest a fallback-mode word keeps FULL_FENCES (see `read_lock`).
        slot.word.store(word & FULL_FENCES, Relaxed);
    } else {
        slot.word.store(word - 1, Relaxed);
    }
}

/// IS-PREEXISTING-READER: inside a section and associated with `group`.
fn is_reader_of(slot: &MembSlot, group: usize) -> bool {
    let word = slot.word.load(Relaxed);
    word & NEST_MASK != 0 && word & GROUP == group
}

/// WAIT-FOR-READERS(group).
fn wait_for_readers(slots: &[SlotRef<MembSlot>], group: usize) {
    for slot in slots {
        let mut backoff = WaitBackoff::new();
        // Relaxed: ordering with the reader's section comes from the fences around this loop
        // (A-F-L before, the flip fences and F-U after).
        while is_reader_of(slot, group) {
            backoff.pause();
        }
    }
}

/// Debug builds: panics if the calling thread is inside a read section of this domain, where
/// `what` (`synchronize()`, `barrier()`) would wait for itself forever.
#[cfg(all(debug_assertions, not(loom)))]
pub(crate) fn debug_check_not_reading(registry: &Registry<MembSlot>, what: &str) {
    let me = crate::owner::current();
    let mut slots = Vec::new();
    registry.snapshot_into(&mut slots);
    for slot in &slots {
        if slot.nesting() != 0 && slot.owner.load(Relaxed) == me {
            panic!(
                "aspace-rcu: {what} called inside a read section of the same domain \
                 (it would wait for itself forever)"
            );
        }
    }
}

/// RCU-SYNCHRONIZE (see the module doc for the labels and the argument).
pub(crate) fn synchronize(global: &MembGlobal, registry: &Registry<MembSlot>, stats: &Counters) {
    #[cfg(all(debug_assertions, not(loom)))]
    debug_check_not_reading(registry, "synchronize()");

    // E: SeqCst; the caller's writes precede the read of cur_gp; pairs with S of the grace period
    // that may serve us (early-exit argument, point 4).
    fence(SeqCst);
    let gp_in_progress = global.cur_gp.load(Relaxed);
    Counters::bump(&stats.synchronize_calls, 1);

    let mut snapshot = global.writer.lock();
    let completed_gp = global.cur_gp.load(Relaxed);
    if completed_gp.wrapping_sub(gp_in_progress) as isize > 0 {
        Counters::bump(&stats.early_exits, 1);
        return;
    }
    global.cur_gp.store(completed_gp.wrapping_add(1), Relaxed);
    Counters::bump(&stats.grace_periods, 1);

    // S: SeqCst; orders the caller's writes and the cur_gp increment before F-L; pairs with E of
    // concurrent synchronizers and (through F-L) with readers that start after F-L.
    fence(SeqCst);
    // F-L: forces a barrier in every running reader; pairs with L of readers inside a section
    // (making their word visible to A-F-L) and with S for readers outside one.
    force_mb_in_threads(global.mode);
    // A-F-L: SeqCst; our loads of reader words below come after the forced barriers.
    fence(SeqCst);

    // Every pre-existing reader registered before this point (registry.rs).
    registry.snapshot_into(&mut snapshot);
    let current = global.gp_ctr.load(Relaxed);
    // Wait for readers delayed into the group we are about to make current.
    wait_for_readers(&snapshot, (current ^ GROUP) & GROUP);
    // SeqCst: the waits above are not mixed with the flip below.
    fence(SeqCst);
    global.gp_ctr.store(current ^ GROUP, Relaxed);
    // SeqCst: the flip precedes the loads of the wait below.
    fence(SeqCst);
    wait_for_readers(&snapshot, current & GROUP);
    // F-U: forces a barrier in every running reader; pairs with U: every access of the sections
    // we waited for precedes our return (and the caller's frees).
    force_mb_in_threads(global.mode);
    snapshot.clear();
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    /// A reader word at the nesting limit, in `mode`'s barrier mode and reader group 0.
    fn at_the_limit(mode: MembMode) -> (MembGlobal, MembSlot) {
        let global = MembGlobal::new(mode);
        let slot = MembSlot::new(&global);
        let g = global.gp_ctr.load(Relaxed);
        slot.word.store((g & !NEST_MASK) | NEST_MASK, Relaxed);
        (global, slot)
    }

    /// Regression (issue 17), fast form of the public-API test: the lock at the nesting limit
    /// used to carry into FULL_FENCES (release builds) and the reader read as idle.
    #[test]
    fn read_lock_at_the_nesting_limit_panics_and_the_reader_stays_inside_its_section() {
        for mode in [MembMode::Membarrier, MembMode::FenceFallback] {
            let (global, slot) = at_the_limit(mode);
            let before = slot.word.load(Relaxed);
            let locked = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                read_lock(&global, &slot)
            }));
            assert!(
                locked.is_err(),
                "{mode:?}: the lock past the limit must panic"
            );
            assert_eq!(
                slot.word.load(Relaxed),
                before,
                "{mode:?}: the word changed"
            );
            assert_eq!(slot.nesting(), NEST_MASK);
            assert!(
                is_reader_of(&slot, before & GROUP),
                "{mode:?}: reads as idle"
            );
            // The guards below the limit still unlock normally, down to rest.
            read_unlock(&slot);
            assert_eq!(slot.nesting(), NEST_MASK - 1);
            read_lock(&global, &slot);
            assert_eq!(slot.nesting(), NEST_MASK);
        }
    }
}
