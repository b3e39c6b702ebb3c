//! The adaptive limit counter: per-core batches far from the limit, direct global updates near it,
//! and the limit never passed (interval skiplist, SOSP'25 §3.5 and §5.3).
//!
//! # The paper's design, and the gap it leaves
//! Like Linux's `percpu_counter`, each core buffers updates in a per-core counter and flushes it
//! to the global counter when it reaches a batch size. After a flush the core checks the margin
//! between the global counter and the limit; below `batch × cores` it stops buffering and updates
//! the global counter directly. The batch is `limit / cores / 16`, so direct updates begin at
//! 93.75 % of the limit. Taken literally, buffered *increments* are granted before the global
//! counter has seen them: a core holding `batch - 1` unflushed units while the others fill the
//! global counter to the limit by direct (checked) updates leaves the true total above the limit.
//!
//! # This design: reserve first, consume locally
//! Here the global counter counts *reserved* units, and a core's slot holds *credit*: units
//! reserved globally but not yet handed out. Nothing is ever granted that the global counter
//! has not counted, so with `held` the true total (successful `try_add`s minus `sub`s):
//!
//! > `held + Σ credit + in flight = global ≤ limit` at all times,
//!
//! where "in flight" are units a thread has moved out of one place and not yet into the next.
//! The limit is exact, not approximate, whatever the batch, margin or interleaving.
//!
//! - `try_add(core, n)`: (1) take `n` from the slot's credit if it has that much (the fast path:
//!   one CAS on the core's own cache line). (2) Otherwise, in batched mode, reserve `n + batch`
//!   from the global counter by CAS (the paper's flush), keep `batch` as credit. The reservation
//!   is refused when the margin left after it would be below `batch × cores` (the paper's rule,
//!   checked at the flush, before committing it); the slot then switches to direct mode and gives
//!   its credit back. (3) Direct mode: CAS `global += n` if it stays within the limit. (4) If that
//!   fails, take back every slot's credit into the global counter and retry once.
//! - `sub(core, n)`: in batched mode the units become the slot's credit (still reserved, so the
//!   global counter does not move); credit above `2 × batch` is given back down to `batch`. In
//!   direct mode, `global -= n`.
//!
//! Gaps the paper leaves, closed here:
//! - **Exactness** (above): reservation instead of buffered increments.
//! - **Idle cores' credit**: a core that stops updating keeps its credit. Step (4) reclaims all
//!   credit before a refusal, so when no other update runs, `try_add` fails exactly when
//!   `sum() + n > limit` (the property test checks this against a model).
//! - **Leaving direct mode**: a direct-mode slot goes back to batching when an update of its own
//!   leaves a margin of at least `2 × batch × cores` (twice the switch threshold, so that a core
//!   near the boundary does not flap between the modes).
//!
//! Under concurrency a `try_add` can still be refused while the true total is below the limit,
//! when another thread moves units at the same time: units in flight (reserved but not yet
//! credited, or taken from a credit but not yet given back), or credit reserved or parked by a
//! `sub` after step (4) passed that slot. The margin rule keeps this rare: credit is only
//! reserved while at least `batch × cores` units stay free, so near the limit no core reserves at
//! all (the loom model `loom_limit_counter_switch_to_direct_near_the_limit_refuses_nothing_it_can_grant`
//! fails without it).
//!
//! # Orderings
//! Units move between owners (free, a slot's credit, a caller, a thread moving them), and each
//! move is an RMW: every RMW that makes units available is `Release` and every RMW that takes
//! them is `Acquire`, so whoever takes a unit happens-after whoever released it, and a caller's
//! own record of what it holds (the stress test's "true total" counter) can never see more than
//! the limit held at once. The pairs:
//! - slot credit: `fetch_add(Release)` in refill and `sub` pairs with `take`'s `Acquire` CAS and
//!   the `Acquire` `swap`/CAS that gives credit back;
//! - global: `give_back`'s `Release` `fetch_sub` pairs with the `Acquire` CAS of `reserve` and
//!   `add_direct` that takes the freed units.
//!
//! The `direct` flag is a `Relaxed` hint: either mode is correct at any time; it only chooses the
//! path. `sum()` reads with `Relaxed`: it is exact only when no update runs concurrently (the
//! caller's join or lock orders it after the updates).
//!
//! Not for: counts that must be read exactly while updates run (`sum` is a snapshot), or a
//! limit that changes.

use crate::counter::{sub_saturating, Counter, LimitExceeded};
use crate::sync::{AtomicBool, AtomicU64, Ordering::*};
use crossbeam_utils::CachePadded;

/// The paper's batch divisor: batch = limit / cores / 16.
pub const BATCH_DIVISOR: u64 = 16;

/// One core's (or core group's) state.
#[derive(Debug)]
struct Slot {
    /// Units reserved in the global counter and not handed out.
    credit: AtomicU64,
    /// Direct mode: the slot does not reserve credit (a hint; see the module doc).
    direct: AtomicBool,
}

/// The adaptive, exact limit counter; see the module doc.
#[derive(Debug)]
pub struct LimitCounter {
    /// Units reserved or handed out: `held + Σ credit + in flight`; never above `limit`.
    global: CachePadded<AtomicU64>,
    slots: Box<[CachePadded<Slot>]>,
    limit: u64,
    batch: u64,
    /// `batch × cores`: reservations must leave at least this margin.
    threshold: u64,
}

impl LimitCounter {
    /// A counter for `cores` cores with the paper's batch, `limit / cores / 16` (0 means every
    /// update goes to the global counter).
    ///
    /// # Panics
    /// When `cores` is 0.
    pub fn new(limit: u64, cores: usize) -> Self {
        assert!(cores > 0, "a LimitCounter needs at least one core");
        Self::with_batch(limit, cores, limit / cores as u64 / BATCH_DIVISOR)
    }

    /// A counter for `cores` cores with the given batch (tests shrink it to reach the limit
    /// often).
    ///
    /// # Panics
    /// When `cores` is 0.
    pub fn with_batch(limit: u64, cores: usize, batch: u64) -> Self {
        assert!(cores > 0, "a LimitCounter needs at least one core");
        Self {
            global: CachePadded::new(AtomicU64::new(0)),
            slots: (0..cores)
                .map(|_| {
                    CachePadded::new(Slot {
                        credit: AtomicU64::new(0),
                        direct: AtomicBool::new(false),
                    })
                })
                .collect(),
            limit,
            batch,
            threshold: batch.saturating_mul(cores as u64),
        }
    }

    /// The batch size.
    pub fn batch(&self) -> u64 {
        self.batch
    }

    /// How many per-core slots there are (core `c` uses slot `c % cores()`).
    pub fn cores(&self) -> usize {
        self.slots.len()
    }

    /// Whether `core`'s slot is in direct mode (for tests and statistics).
    pub fn is_direct(&self, core: usize) -> bool {
        self.slot(core).direct.load(Relaxed)
    }

    fn slot(&self, core: usize) -> &Slot {
        &self.slots[core % self.slots.len()]
    }

    /// Whether `global` has `margin` units free at least twice the threshold (leave direct mode).
    fn far_from_limit(&self, global: u64) -> bool {
        self.limit.saturating_sub(global) >= self.threshold.saturating_mul(2)
    }

    /// Takes `n` units from `slot`'s credit if it holds that many.
    fn take(slot: &Slot, n: u64) -> bool {
        let mut c = slot.credit.load(Relaxed);
        while c >= n {
            // Acquire: takes units; pairs with the Release fetch_add in try_add (refill) / sub.
            match slot.credit.compare_exchange(c, c - n, Acquire, Relaxed) {
                Ok(_) => return true,
                Err(now) => c = now,
            }
        }
        false
    }

    /// Reserves `k` units globally if at least `threshold` stay free after it.
    fn reserve(&self, k: u64) -> bool {
        let mut g = self.global.load(Relaxed);
        loop {
            let fits = g
                .checked_add(k)
                .is_some_and(|new| new <= self.limit && self.limit - new >= self.threshold);
            if !fits {
                return false;
            }
            // Acquire: takes free units; pairs with the Release fetch_sub in give_back().
            match self.global.compare_exchange(g, g + k, Acquire, Relaxed) {
                Ok(_) => return true,
                Err(now) => g = now,
            }
        }
    }

    /// `global += n` if it stays within the limit; returns the new value.
    fn add_direct(&self, n: u64) -> Option<u64> {
        let mut g = self.global.load(Relaxed);
        loop {
            let new = g.checked_add(n).filter(|&new| new <= self.limit)?;
            // Acquire: takes free units; pairs with the Release fetch_sub in give_back().
            match self.global.compare_exchange(g, new, Acquire, Relaxed) {
                Ok(_) => return Some(new),
                Err(now) => g = now,
            }
        }
    }

    /// `global -= k` (units this thread owns become free); returns the new value.
    fn give_back(&self, k: u64) -> u64 {
        if k == 0 {
            return self.global.load(Relaxed);
        }
        // Release: frees units; pairs with the Acquire CAS in reserve() / add_direct().
        sub_saturating(&self.global, k, Release)
    }

    /// Switches `slot` to direct mode and gives its credit back.
    fn switch_to_direct(&self, slot: &Slot) {
        slot.direct.store(true, Relaxed);
        // Acquire: takes the credit; pairs with the Release fetch_add of refill / sub.
        let credit = slot.credit.swap(0, Acquire);
        self.give_back(credit);
    }

    /// Moves every slot's credit back to the global counter.
    fn reclaim_all(&self) {
        for slot in self.slots.iter() {
            // Acquire: takes the credit; pairs with the Release fetch_add of refill / sub.
            let credit = slot.credit.swap(0, Acquire);
            self.give_back(credit);
        }
    }
}

impl Counter for LimitCounter {
    fn try_add(&self, core: usize, n: u64) -> Result<(), LimitExceeded> {
        if n == 0 {
            return Ok(());
        }
        let refused = LimitExceeded {
            limit: self.limit,
            requested: n,
        };
        if n > self.limit {
            return Err(refused);
        }
        let slot = self.slot(core);
        // (1) Local: the slot's credit.
        if Self::take(slot, n) {
            return Ok(());
        }
        // (2) Batched: reserve n plus a batch of credit, keeping the margin.
        if !slot.direct.load(Relaxed) {
            if self.reserve(n.saturating_add(self.batch)) {
                if self.batch > 0 {
                    // Release: publishes the reserved credit; pairs with take()'s Acquire CAS
                    // and the Acquire swap in switch_to_direct() / reclaim_all().
                    slot.credit.fetch_add(self.batch, Release);
                }
                return Ok(());
            }
            // The margin is below batch × cores (or the reservation does not fit at all).
            self.switch_to_direct(slot);
        }
        // (3) Direct.
        if let Some(g) = self.add_direct(n) {
            if self.far_from_limit(g) {
                slot.direct.store(false, Relaxed);
            }
            return Ok(());
        }
        // (4) Refuse only with no credit parked anywhere.
        self.reclaim_all();
        match self.add_direct(n) {
            Some(_) => Ok(()),
            None => Err(refused),
        }
    }

    fn sub(&self, core: usize, n: u64) {
        if n == 0 {
            return;
        }
        let slot = self.slot(core);
        if slot.direct.load(Relaxed) {
            let g = self.give_back(n);
            if self.far_from_limit(g) {
                slot.direct.store(false, Relaxed);
            }
            return;
        }
        // Release: publishes the freed units as credit; pairs with take()'s Acquire CAS and the
        // Acquire swap in switch_to_direct() / reclaim_all(), and the Acquire CAS below.
        let c = slot.credit.fetch_add(n, Release).wrapping_add(n);
        let cap = self.batch.saturating_mul(2);
        if c > cap {
            // Too much parked here: give back all but one batch.
            let mut c = c;
            while c > self.batch {
                // Acquire: takes the excess credit; pairs with the Release fetch_adds above.
                match slot
                    .credit
                    .compare_exchange(c, self.batch, Acquire, Relaxed)
                {
                    Ok(_) => {
                        self.give_back(c - self.batch);
                        break;
                    }
                    Err(now) => c = now,
                }
            }
        }
    }

    fn sum(&self) -> u64 {
        let credit: u64 = self
            .slots
            .iter()
            .map(|s| s.credit.load(Relaxed))
            .fold(0, u64::saturating_add);
        self.global.load(Relaxed).saturating_sub(credit)
    }

    fn limit(&self) -> u64 {
        self.limit
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn default_batch_is_limit_over_cores_over_16() {
        let c = LimitCounter::new(64_000, 4);
        assert_eq!(c.batch(), 1_000);
        assert_eq!(c.cores(), 4);
        assert_eq!(LimitCounter::new(10, 4).batch(), 0);
    }

    #[test]
    fn far_from_the_limit_a_core_works_on_its_credit() {
        let c = LimitCounter::with_batch(1_000, 2, 10);
        c.try_add(0, 1).unwrap();
        // Reserved 1 + 10: the global counter moved once, the rest is credit.
        assert_eq!(c.global.load(Relaxed), 11);
        for _ in 0..10 {
            c.try_add(0, 1).unwrap();
        }
        assert_eq!(c.global.load(Relaxed), 11, "ten adds taken from credit");
        assert_eq!(c.sum(), 11);
        assert!(!c.is_direct(0));
    }

    #[test]
    fn near_the_limit_a_core_switches_to_direct_updates_and_gives_back_credit() {
        // threshold = 10 × 2 = 20.
        let c = LimitCounter::with_batch(100, 2, 10);
        c.try_add(0, 1).unwrap(); // global 11, credit 10
        c.try_add(1, 60).unwrap(); // global 81: margin 19 after it would be < 20 → refused → direct
        assert!(c.is_direct(1));
        assert!(!c.is_direct(0));
        assert_eq!(c.global.load(Relaxed), 71);
        // Core 0 drains its credit, then its reservation is refused: it switches too.
        c.try_add(0, 10).unwrap();
        c.try_add(0, 1).unwrap();
        assert!(c.is_direct(0));
        assert_eq!(c.slots[0].credit.load(Relaxed), 0);
        assert_eq!(c.global.load(Relaxed), 72);
        assert_eq!(c.sum(), 72);
    }

    #[test]
    fn a_direct_core_goes_back_to_batching_far_from_the_limit() {
        let c = LimitCounter::with_batch(100, 2, 10);
        c.try_add(1, 90).unwrap();
        assert!(c.is_direct(1));
        c.sub(1, 50); // global 40: margin 60 >= 2 × 20
        assert!(!c.is_direct(1));
        c.try_add(1, 1).unwrap(); // batched again: reserves 11
        assert_eq!(c.global.load(Relaxed), 51);
        assert_eq!(c.sum(), 41);
    }

    #[test]
    fn idle_cores_credit_is_reclaimed_before_a_refusal() {
        let c = LimitCounter::with_batch(100, 4, 1);
        // Cores 1..3 park one unit of credit each.
        for core in 1..4 {
            c.try_add(core, 1).unwrap();
        }
        assert_eq!(c.sum(), 3);
        c.try_add(0, 97).unwrap();
        assert_eq!(c.sum(), 100);
        assert_eq!(
            c.try_add(0, 1),
            Err(LimitExceeded {
                limit: 100,
                requested: 1
            })
        );
    }

    #[test]
    fn excess_credit_from_subs_is_given_back() {
        let c = LimitCounter::with_batch(1_000, 2, 10);
        c.try_add(0, 100).unwrap(); // reserved 110, credit 10
        c.sub(0, 100); // credit 110 > 20: back to 10
        assert_eq!(c.slots[0].credit.load(Relaxed), 10);
        assert_eq!(c.global.load(Relaxed), 10);
        assert_eq!(c.sum(), 0);
    }

    #[test]
    fn over_subtraction_saturates_at_zero() {
        let c = LimitCounter::with_batch(100, 1, 0);
        c.try_add(0, 5).unwrap();
        c.sub(0, 7);
        assert_eq!(c.sum(), 0);
        c.try_add(0, 100).unwrap();
        assert!(c.try_add(0, 1).is_err());
    }

    #[test]
    fn requests_above_the_limit_and_zero_requests() {
        let c = LimitCounter::new(10, 2);
        assert!(c.try_add(0, 11).is_err());
        assert!(c.try_add(0, u64::MAX).is_err());
        c.try_add(0, 0).unwrap();
        c.try_add(0, 10).unwrap();
        c.try_add(1, 0).unwrap();
        assert_eq!(c.sum(), 10);
        assert_eq!(c.limit(), 10);
    }
}
