//! `soft-fault` [ASPLOS'12 (Bonsai) §7.3, Fig. 16-17]: soft page faults alone, with no
//! concurrent mapping operation, so that what limits their scaling is the cache lines every
//! fault writes (the paper: "all non-scalability in this case is the result of cache contention
//! for the cache line holding the `mmap_sem`").
//!
//! The coordinator maps one shared private region before the run; thread `t` owns slice `t`,
//! [`SLICE_PAGES`] pages at [`STRIDE`] (16 MiB) intervals, so that the threads share no line of
//! page-table entries (the workload measures the design's shared lines, not its own layout's).
//! Each round:
//! 1. every thread stores one byte to each page of its slice in turn: every store is a soft
//!    fault on a fresh page of the one shared region (measured);
//! 2. all threads meet at a barrier; each drops its own slice's pages with
//!    `madvise(MADV_DONTNEED)` (the region stays: nothing unmaps it while measured); all meet
//!    again. Step 2 is housekeeping: each thread excludes the time from finishing its slice to
//!    leaving the second barrier ([`Stop::time_inside`]), so no fault is measured while a
//!    `DONTNEED` holds a lock, and a thread that finished first does not count its wait.
//!
//! Each thread drops its *own* slice so that the frames its next round faults in were zeroed
//! by its own core (the engine zeroes on free, `aspace-vm`'s `frames.rs`) and come from its own
//! core's frame cache, as a Linux fault's page is zeroed on the faulting CPU. When thread 0
//! dropped every slice (until issue 19's last session), each fault of another thread began
//! with its first store missing on a line thread 0's core had just zeroed, and its frames
//! came through the global free list: a cross-core transfer per fault that no design causes,
//! which capped every design's 2-thread scaling alike.
//!
//! One operation is one page fault; `ops_per_sec` is the sum of the threads' fault rates over
//! their faulting time. Extra: `rounds` (completed rounds of thread 0).
//!
//! Not for: faults against concurrent mapping operations (`fault-load-*`) or shared pages
//! (`global`).

use super::global::SpinBarrier;
use super::vm::{VmBench, VmCore, VmDriver, HINT_BASE, PAGE};
use crate::error::BenchError;
use crate::harness::{run_timed, Stop};
use crate::workload::{Config, Sample, ThreadCount};
use std::time::{Duration, Instant};

/// Pages each thread faults per round (4 MiB: 64 threads' pages fit the engines' memory with
/// room for the frames the cores' caches hold).
pub const SLICE_PAGES: u64 = 1024;

/// Bytes between two threads' slices, and their alignment: 16 MiB, the span of one cache line
/// of level-2 page-table entries (8 entries of 2 MiB), so no two threads' faults share the line
/// holding their leaves' entries and fill locks (with 4 MiB slices side by side they did: one
/// conflicting line per fault in the audit, for every design).
pub const STRIDE: u64 = 16 << 20;

/// Bytes to map for `threads` slices, with room to align the first ([`slices_base`]).
pub fn mapped_len(threads: usize) -> u64 {
    (threads as u64 + 1) * STRIDE
}

/// The first slice's address in a mapping at `base`: `base` rounded up to [`STRIDE`]; slice `t`
/// starts `t * STRIDE` above it.
pub fn slices_base(base: u64) -> u64 {
    base.next_multiple_of(STRIDE)
}

/// The `soft-fault` workload.
pub struct SoftFault;

impl VmBench for SoftFault {
    const NAME: &'static str = "soft-fault";
    const ABOUT: &'static str =
        "fault fresh pages of own slice of one shared region; DONTNEED between rounds, untimed [ASPLOS'12 Fig. 16-17]";
    const MIRRORS: Option<&'static str> = Some("ASPLOS'12 (Bonsai) §7.3, Fig. 16-17");

    fn run_vm<D: VmDriver>(
        &self,
        driver: &D,
        threads: usize,
        config: &Config,
    ) -> Result<Sample, BenchError> {
        let len = mapped_len(threads);
        let mut core = driver.attach();
        let base = core.mmap(HINT_BASE, len);
        let first = slices_base(base);
        let barrier = SpinBarrier::new(threads);
        let barrier = &barrier;
        let timed = run_timed(threads, config.duration, None, |t| {
            let mut core = driver.attach();
            let slice = first + t as u64 * STRIDE;
            move |stop: &Stop| {
                let (mut count, mut rounds) = (ThreadCount::default(), 0u64);
                let stopped = || stop.is_set();
                let mut excluded = Duration::ZERO;
                while !stop.is_set() {
                    for p in 0..SLICE_PAGES {
                        // SAFETY: our own slice of the region, mapped until every thread joined.
                        unsafe { core.store(slice + p * PAGE, 1) };
                    }
                    count.ops += SLICE_PAGES;
                    let start = Instant::now();
                    let done = barrier.wait(stopped) && {
                        // SAFETY: our own slice, whose pages hold nothing anyone reads; every
                        // thread finished its stores (barrier above) and none stores before
                        // the next barrier.
                        unsafe { core.dontneed(slice, SLICE_PAGES * PAGE) };
                        barrier.wait(stopped)
                    };
                    excluded += stop.time_inside(start);
                    if !done {
                        break;
                    }
                    rounds += 1;
                }
                count.excluded = excluded;
                (count, rounds)
            }
        });
        // SAFETY: the region this repeat mapped; every thread has joined.
        unsafe { core.munmap(base, len) };
        let counts: Vec<ThreadCount> = timed.results.iter().map(|r| r.0).collect();
        Ok(Sample::from_threads(timed.elapsed, &counts).with("rounds", timed.results[0].1 as f64))
    }
}
