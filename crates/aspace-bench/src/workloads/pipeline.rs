//! `pipeline` [RadixVM §5.1, Fig. 5]: "Each thread mmaps a region of memory, writes to all of
//! the pages in the region, and passes the region to the next thread in sequence, which also
//! writes to all of the pages in the region, and then munmaps it."
//!
//! As in RadixVM's `mapbench` (mode `pipeline`, one page per region): in each round, thread `t`
//! maps one 4 KiB page (hint: slot `round % 255` of its own home, slots two pages apart so they
//! never merge; `mapbench` had 256 slots 1 MiB apart; an anchor page keeps the slots' page table
//! alive, see `vm::map_anchor`), stores a byte to it (a page fault), and passes its address to thread
//! `(t + 1) % threads` through a single-producer single-consumer ring ([`Ring`]); then it takes
//! the page thread `t - 1` passed it, stores a byte to it (no fault on `linux`'s shared page
//! table; a TLB miss and page-table walk on the engine's core), and unmaps it. At one thread the
//! thread passes the page to itself. One operation is one page passed on and unmapped (one
//! iteration of one thread); `mapbench` printed "page touches", two per iteration, which the
//! extra `touches_per_sec` reports.
//!
//! `mapbench` handed over by per-thread round counters with the address implied by the round;
//! here the ring carries the address, because a hint need not be honoured (the consumer unmaps
//! what was really mapped). A producer never gets more than [`RING`] pages ahead of its
//! consumer, and [`RING`] + 1 < [`SLOTS`], so a hinted slot is always free again when reused.
//!
//! Waits spin with a yielding backoff and give up when the run stops; pages still in a ring at
//! the end are unmapped by the coordinator after the threads joined.
//!
//! Not for: pages shared by all threads (`global`).

use super::vm::{
    home, map_anchor, unmap_anchor, wait_until, VmBench, VmCore, VmDriver, PAGE, TABLE_SPAN,
};
use crate::error::BenchError;
use crate::harness::{run_timed, Stop};
use crate::workload::{Config, Sample, ThreadCount};
use crossbeam_utils::CachePadded;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

/// Capacity of each hand-off ring.
pub const RING: usize = 64;

/// Hinted slots per thread (`mapbench` had 256, 1 MiB apart), two pages apart in the first
/// last-level table of the thread's home, whose last page is the anchor.
pub const SLOTS: u64 = 255;

/// The `pipeline` workload.
pub struct Pipeline;

/// A bounded single-producer single-consumer ring of page addresses (Lamport's queue).
///
/// `tail` is written only by the producer, `head` only by the consumer; each side reads the
/// other's index with Acquire and publishes its own with Release, so a slot's value written
/// before `tail` moves is visible to the consumer that sees the new `tail`, and a slot is
/// overwritten only after the consumer's `head` store says it was read.
#[derive(Debug)]
pub struct Ring {
    slots: [AtomicU64; RING],
    head: CachePadded<AtomicUsize>,
    tail: CachePadded<AtomicUsize>,
}

impl Default for Ring {
    fn default() -> Self {
        Ring {
            slots: std::array::from_fn(|_| AtomicU64::new(0)),
            head: CachePadded::new(AtomicUsize::new(0)),
            tail: CachePadded::new(AtomicUsize::new(0)),
        }
    }
}

impl Ring {
    /// Appends `v` unless full (producer only).
    pub fn push(&self, v: u64) -> bool {
        let t = self.tail.load(Ordering::Relaxed);
        // Acquire: pairs with the consumer's Release store of `head` in `pop`, so its read of
        // the slot we are about to overwrite happened before.
        if t - self.head.load(Ordering::Acquire) == RING {
            return false;
        }
        self.slots[t % RING].store(v, Ordering::Relaxed);
        // Release: publishes the slot (and the page's contents and mapping) to the consumer's
        // Acquire load of `tail` in `pop`.
        self.tail.store(t + 1, Ordering::Release);
        true
    }

    /// Takes the oldest value, if any (consumer only).
    pub fn pop(&self) -> Option<u64> {
        let h = self.head.load(Ordering::Relaxed);
        // Acquire: pairs with the producer's Release store of `tail` in `push`.
        if h == self.tail.load(Ordering::Acquire) {
            return None;
        }
        let v = self.slots[h % RING].load(Ordering::Relaxed);
        // Release: pairs with the producer's Acquire load of `head` in `push` (slot reusable).
        self.head.store(h + 1, Ordering::Release);
        Some(v)
    }
}

/// Thread `t`'s hinted page in round `round`.
pub fn slot_of(t: usize, round: u64) -> u64 {
    home(t) + (round % SLOTS) * 2 * PAGE
}

/// Thread `t`'s anchor page.
pub fn anchor_of(t: usize) -> u64 {
    home(t) + TABLE_SPAN - PAGE
}

impl VmBench for Pipeline {
    const NAME: &'static str = "pipeline";
    const ABOUT: &'static str =
        "map+write a page, pass it to the next thread, which writes and munmaps it [RadixVM Fig. 5]";
    const MIRRORS: Option<&'static str> = Some("RadixVM §5.1, Fig. 5 (pipeline)");

    fn run_vm<D: VmDriver>(
        &self,
        driver: &D,
        threads: usize,
        config: &Config,
    ) -> Result<Sample, BenchError> {
        let rings: Vec<Ring> = (0..threads).map(|_| Ring::default()).collect();
        let rings = &rings;
        let timed = run_timed(threads, config.duration, None, |t| {
            let mut core = driver.attach();
            let anchor = map_anchor(&mut core, anchor_of(t));
            let out = &rings[t];
            let inbox = &rings[(t + threads - 1) % threads];
            move |stop: &Stop| {
                let mut ops = 0u64;
                let stopped = || stop.is_set();
                while !stop.is_set() {
                    let p = core.mmap(slot_of(t, ops), PAGE);
                    // SAFETY: the page this thread just mapped; not passed on yet.
                    unsafe { core.store(p, 1) };
                    if !wait_until(|| out.push(p), stopped) {
                        // SAFETY: never passed on, so still this thread's alone.
                        unsafe { core.munmap(p, PAGE) };
                        break;
                    }
                    let mut got = 0;
                    if !wait_until(|| inbox.pop().map(|v| got = v).is_some(), stopped) {
                        break;
                    }
                    // SAFETY: the previous thread mapped `got` and passed it to us alone (the
                    // ring's Release/Acquire orders its store and mapping before our access).
                    unsafe {
                        core.store(got, 2);
                        core.munmap(got, PAGE);
                    }
                    ops += 1;
                }
                unmap_anchor(&mut core, anchor);
                ThreadCount {
                    ops,
                    ..Default::default()
                }
            }
        });
        // Pages passed on but never taken: unmap them (the threads have joined).
        let mut core = driver.attach();
        for ring in rings {
            while let Some(p) = ring.pop() {
                // SAFETY: mapped by a workload thread, passed on, and never unmapped.
                unsafe { core.munmap(p, PAGE) };
            }
        }
        let s = Sample::from_threads(timed.elapsed, &timed.results);
        let touches = 2.0 * s.ops_per_sec;
        Ok(s.with("touches_per_sec", touches))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ring_is_fifo_and_bounded() {
        let r = Ring::default();
        assert_eq!(r.pop(), None);
        for i in 0..RING as u64 {
            assert!(r.push(i));
        }
        assert!(!r.push(99), "full");
        for i in 0..RING as u64 {
            assert_eq!(r.pop(), Some(i));
        }
        assert_eq!(r.pop(), None);
        assert!(r.push(7));
        assert_eq!(r.pop(), Some(7));
    }

    #[test]
    fn ring_hands_values_between_threads_in_order() {
        let r = Ring::default();
        let n = 10_000u64;
        std::thread::scope(|s| {
            s.spawn(|| {
                for i in 0..n {
                    while !r.push(i) {
                        std::hint::spin_loop();
                    }
                }
            });
            for i in 0..n {
                let v = loop {
                    if let Some(v) = r.pop() {
                        break v;
                    }
                    std::thread::yield_now();
                };
                assert_eq!(v, i);
            }
        });
    }

    #[test]
    fn slots_cycle_in_the_anchors_table_without_touching_each_other() {
        assert_eq!(slot_of(0, SLOTS), slot_of(0, 0));
        assert!(slot_of(1, SLOTS - 1) + PAGE < anchor_of(1));
        assert_eq!(slot_of(1, 0) / TABLE_SPAN, anchor_of(1) / TABLE_SPAN);
        assert!(SLOTS as usize > RING + 1);
    }
}
