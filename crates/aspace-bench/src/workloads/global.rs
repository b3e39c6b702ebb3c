//! `global` [RadixVM §5.1, Fig. 5]: "Each thread mmaps a part of a large region of memory, then
//! all threads access all of the pages in the large region in a random order. This simulates a
//! widely shared region such as a memory-mapped library or a shared data structure like a hash
//! table. In our microbenchmark, each thread maps a 64 KB region."
//!
//! The region is `threads * 64 KiB` at [`REGION`]; thread `t` owns part `t` (16 pages). An
//! anchor page just below it (see `vm::map_anchor`) keeps its page tables alive when a lone
//! thread replaces the whole region. Each
//! round, as in RadixVM's `mapbench` (mode `global`):
//! 1. thread `t` maps its part with `MAP_FIXED` ("After the first iteration, this will also clear
//!    the old mapping": the pages of the last round are discarded and fault again; the very first
//!    mapping, before the start barrier, uses `MAP_FIXED_NOREPLACE` so nothing of the process is
//!    ever replaced);
//! 2. all threads meet at a barrier;
//! 3. each thread stores one byte to every page of the whole region, in an order shuffled anew
//!    each round (the paper's "all of the pages ... in a random order"; `mapbench` drew
//!    `threads * 16` pages at random and skipped repeats, touching about 63% of them);
//! 4. all threads meet at a barrier again.
//!
//! One operation is one page written (Fig. 5's "pages written per second"): `threads * 16` per
//! thread per round. On `linux` the first writer of a page in a round takes the fault and the
//! others hit the shared page table; on an engine each core misses its own soft TLB. Extra:
//! `rounds` (completed rounds of thread 0).
//!
//! The barrier is [`SpinBarrier`] (`mapbench`'s `gbarrier`); a thread that sees the stop flag
//! leaves a barrier at once, and never remaps its part afterwards (another thread may still be
//! writing the region); the coordinator unmaps the region after the threads joined.
//!
//! Noise: every round waits for every thread twice, so a thread descheduled for a scheduler
//! tick (another process on its CPU, a vCPU the hypervisor gave away) stalls the whole round
//! while its partners spin. On a machine with as many CPUs as threads that made this workload
//! bimodal (9.3 M against 1.7-1.9 M ops/s at 2 threads on the 2-vCPU guest, issue 18); the
//! harness now records how busy the machine was during each repeat and flags such points
//! unstable (`interference.rs`).
//!
//! Not for: private pages (`local`) or pairwise sharing (`pipeline`).

use super::vm::{map_anchor, unmap_anchor, wait_until, VmBench, VmCore, VmDriver, HINT_BASE, PAGE};
use crate::error::BenchError;
use crate::harness::{run_timed, Stop};
use crate::workload::{Config, Sample, ThreadCount};
use crossbeam_utils::CachePadded;
use rand::rngs::SmallRng;
use rand::seq::SliceRandom;
use rand::SeedableRng;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

/// Pages of each thread's part (64 KiB).
pub const PART_PAGES: u64 = 16;

/// Start of the shared region (two pages above the anchor at `HINT_BASE`).
pub const REGION: u64 = HINT_BASE + 2 * PAGE;

/// The `global` workload.
pub struct Global;

/// A reusable spinning barrier that gives up when the run stops (`mapbench`'s `gbarrier`).
#[derive(Debug)]
pub struct SpinBarrier {
    n: usize,
    left: CachePadded<AtomicUsize>,
    round: CachePadded<AtomicU64>,
}

impl SpinBarrier {
    /// A barrier for `n` threads.
    pub fn new(n: usize) -> SpinBarrier {
        SpinBarrier {
            n,
            left: CachePadded::new(AtomicUsize::new(n)),
            round: CachePadded::new(AtomicU64::new(0)),
        }
    }

    /// Waits until all `n` threads arrived (true) or `stopped()` (false; the barrier is then
    /// unusable, which is fine: the run is over).
    pub fn wait(&self, stopped: impl Fn() -> bool) -> bool {
        // Acquire: pairs with the last arriver's Release increment below (of an earlier round).
        let cur = self.round.load(Ordering::Acquire);
        // AcqRel: the arrivals' decrements form one release sequence; the last arriver's
        // Acquire sees every thread's work before its arrival.
        if self.left.fetch_sub(1, Ordering::AcqRel) == 1 {
            // Relaxed: published by the Release increment of `round` that follows.
            self.left.store(self.n, Ordering::Relaxed);
            // Release: pairs with the waiters' Acquire loads of `round`; publishes the reset
            // of `left` and every arrival's work.
            self.round.fetch_add(1, Ordering::Release);
            return true;
        }
        // Acquire: pairs with the last arriver's Release increment.
        wait_until(|| self.round.load(Ordering::Acquire) != cur, stopped)
    }
}

impl VmBench for Global {
    const NAME: &'static str = "global";
    const ABOUT: &'static str =
        "map own 64 KiB part of a shared region, all threads write all its pages [RadixVM Fig. 5]";
    const MIRRORS: Option<&'static str> = Some("RadixVM §5.1, Fig. 5 (global)");

    fn run_vm<D: VmDriver>(
        &self,
        driver: &D,
        threads: usize,
        config: &Config,
    ) -> Result<Sample, BenchError> {
        let total_pages = threads as u64 * PART_PAGES;
        let barrier = SpinBarrier::new(threads);
        let barrier = &barrier;
        let mut core = driver.attach();
        let anchor = map_anchor(&mut core, HINT_BASE);
        let timed = run_timed(threads, config.duration, None, |t| {
            let mut core = driver.attach();
            let part = REGION + t as u64 * PART_PAGES * PAGE;
            core.mmap_fixed_noreplace(part, PART_PAGES * PAGE);
            let mut order: Vec<u64> = (0..total_pages).collect();
            let mut rng = SmallRng::seed_from_u64(t as u64 + 1);
            move |stop: &Stop| {
                let (mut ops, mut rounds) = (0u64, 0u64);
                let stopped = || stop.is_set();
                // (A lone thread passes every barrier at once, so the loop checks the flag too.)
                while !stop.is_set() {
                    if !barrier.wait(stopped) {
                        break;
                    }
                    order.shuffle(&mut rng);
                    for &pg in &order {
                        // SAFETY: every part is mapped (barrier above) and stays mapped until
                        // every thread passed the barrier below.
                        unsafe { core.store(REGION + pg * PAGE, 1) };
                    }
                    ops += total_pages;
                    if !barrier.wait(stopped) {
                        break;
                    }
                    rounds += 1;
                    // SAFETY: our own part; every thread finished writing (barrier above) and
                    // none writes again before the next barrier.
                    unsafe { core.mmap_fixed(part, PART_PAGES * PAGE) };
                }
                (
                    ThreadCount {
                        ops,
                        ..Default::default()
                    },
                    rounds,
                )
            }
        });
        // SAFETY: the region is the parts the threads mapped; they have all joined.
        unsafe { core.munmap(REGION, total_pages * PAGE) };
        unmap_anchor(&mut core, anchor);
        let counts: Vec<ThreadCount> = timed.results.iter().map(|r| r.0).collect();
        Ok(Sample::from_threads(timed.elapsed, &counts).with("rounds", timed.results[0].1 as f64))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spin_barrier_releases_all_threads_each_round_and_orders_their_work() {
        let n = 3;
        let b = SpinBarrier::new(n);
        let counter = AtomicU64::new(0);
        std::thread::scope(|s| {
            for _ in 0..n {
                s.spawn(|| {
                    for round in 1..=50u64 {
                        counter.fetch_add(1, Ordering::Relaxed);
                        assert!(b.wait(|| false));
                        assert_eq!(counter.load(Ordering::Relaxed), round * n as u64);
                        assert!(b.wait(|| false));
                    }
                });
            }
        });
    }

    #[test]
    fn spin_barrier_gives_up_when_stopped() {
        let b = SpinBarrier::new(2);
        assert!(!b.wait(|| true));
    }
}
