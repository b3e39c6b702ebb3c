//! Per-core event counters (faults, fills, TLB hits and misses, the targets and waits of the
//! shootdowns the core sent), summed when read.
//!
//! Each core's counters live in a cache-padded slot indexed by its core id and written only by
//! that core (`Relaxed` load + store, no read-modify-write), so counting costs no shared cache
//! line. A detaching core folds its counts into `retired` and zeroes its slot. Statistics only:
//! every access is `Relaxed`, and a sum taken while cores run is not atomic across fields.
//!
//! Not for: gauges (frames, tables, regions: their owners count them) or the shootdown round
//! and flush counts (`shootdown.rs`).

use crate::shootdown::{CoreId, Round};
use crate::sync::stat::AtomicU64;
use crossbeam_utils::CachePadded;
use std::sync::atomic::Ordering;

/// One core's event counters.
#[derive(Debug, Default)]
pub(crate) struct CoreCounters {
    faults: AtomicU64,
    fills: AtomicU64,
    tlb_hits: AtomicU64,
    tlb_misses: AtomicU64,
    /// Faults resolved by stage (the `interval` design's two; see `designs/interval.rs`).
    stages: [AtomicU64; 2],
    shootdowns: AtomicU64,
    shootdown_targets: AtomicU64,
    shootdown_waits: AtomicU64,
}

/// The event totals, as [`Counters::sum`] reads them.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct EventTotals {
    pub(crate) faults: u64,
    pub(crate) fills: u64,
    pub(crate) tlb_hits: u64,
    pub(crate) tlb_misses: u64,
    pub(crate) stages: [u64; 2],
    pub(crate) shootdowns: u64,
    pub(crate) shootdown_targets: u64,
    pub(crate) shootdown_waits: u64,
}

impl CoreCounters {
    /// +n by the owning core (load + store: it is the only writer).
    #[inline]
    fn add(c: &AtomicU64, n: u64) {
        c.store(c.load(Ordering::Relaxed) + n, Ordering::Relaxed);
    }

    /// +1 by the owning core.
    #[inline]
    fn bump(c: &AtomicU64) {
        Self::add(c, 1);
    }

    /// One more shootdown round sent by this core.
    #[inline]
    pub(crate) fn add_round(&self, round: Round) {
        Self::bump(&self.shootdowns);
        Self::add(&self.shootdown_targets, round.targets);
        Self::add(&self.shootdown_waits, round.waits);
    }

    /// One more fault handled.
    #[inline]
    pub(crate) fn bump_faults(&self) {
        Self::bump(&self.faults);
    }

    /// One more fill with a fresh frame.
    #[inline]
    pub(crate) fn bump_fills(&self) {
        Self::bump(&self.fills);
    }

    /// One more fault resolved in `stage` (0 or 1: without a space lock, under the local read
    /// mode and the region's interval lock).
    #[inline]
    pub(crate) fn bump_stage(&self, stage: usize) {
        Self::bump(&self.stages[stage]);
    }

    /// Publishes the core's TLB totals.
    #[inline]
    pub(crate) fn publish_tlb(&self, hits: u64, misses: u64) {
        self.tlb_hits.store(hits, Ordering::Relaxed);
        self.tlb_misses.store(misses, Ordering::Relaxed);
    }

    fn fields(&self) -> [&AtomicU64; 9] {
        [
            &self.faults,
            &self.fills,
            &self.tlb_hits,
            &self.tlb_misses,
            &self.stages[0],
            &self.stages[1],
            &self.shootdowns,
            &self.shootdown_targets,
            &self.shootdown_waits,
        ]
    }

    fn read(&self) -> EventTotals {
        let [faults, fills, tlb_hits, tlb_misses, s0, s1, shootdowns, shootdown_targets, shootdown_waits] =
            self.fields().map(|c| c.load(Ordering::Relaxed));
        EventTotals {
            faults,
            fills,
            tlb_hits,
            tlb_misses,
            stages: [s0, s1],
            shootdowns,
            shootdown_targets,
            shootdown_waits,
        }
    }
}

impl std::ops::AddAssign for EventTotals {
    fn add_assign(&mut self, o: EventTotals) {
        self.faults += o.faults;
        self.fills += o.fills;
        self.tlb_hits += o.tlb_hits;
        self.tlb_misses += o.tlb_misses;
        for (t, s) in self.stages.iter_mut().zip(o.stages) {
            *t += s;
        }
        self.shootdowns += o.shootdowns;
        self.shootdown_targets += o.shootdown_targets;
        self.shootdown_waits += o.shootdown_waits;
    }
}

/// The counters of every core slot of a space, plus the totals of detached cores.
#[derive(Debug)]
pub(crate) struct Counters {
    slots: Box<[CachePadded<CoreCounters>]>,
    retired: CoreCounters,
}

impl Counters {
    /// Zeroed counters for `max_cores` slots.
    pub(crate) fn new(max_cores: usize) -> Counters {
        Counters {
            slots: (0..max_cores).map(|_| CachePadded::default()).collect(),
            retired: CoreCounters::default(),
        }
    }

    /// The counters of core `id`.
    #[inline]
    pub(crate) fn of(&self, id: CoreId) -> &CoreCounters {
        &self.slots[id.index()]
    }

    /// Folds a detaching core's counters into the totals and clears its slot.
    pub(crate) fn retire(&self, id: CoreId) {
        let c = self.of(id);
        for (total, slot) in self.retired.fields().into_iter().zip(c.fields()) {
            total.fetch_add(slot.load(Ordering::Relaxed), Ordering::Relaxed);
            slot.store(0, Ordering::Relaxed);
        }
    }

    /// The totals over every core, attached or detached.
    pub(crate) fn sum(&self) -> EventTotals {
        let mut t = self.retired.read();
        for c in self.slots.iter() {
            t += c.read();
        }
        t
    }
}
