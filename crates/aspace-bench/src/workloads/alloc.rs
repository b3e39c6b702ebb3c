//! `alloc` [SOSP'25 §7.2, Fig. 14 "Alloc"]: "Each thread repeatedly allocates memory using
//! `mmap()`. This measures `Alloc` throughput, which is critical for applications that heavily
//! use `malloc()`".
//!
//! Each operation is one `mmap(NULL, 256 KiB)` (the size of SOSP'25's Alloc benchmark; no hint, so the space's own
//! placement runs: Linux's top-down `get_unmapped_area`, the engine's gap search), never touched
//! and never unmapped by the measured loop. One operation is one successful `mmap`.
//!
//! A fixed-duration run would otherwise grow without bound (at the engine's rates, terabytes of
//! address space and, where neighbours do not merge, `max_map_count`), so each thread has a
//! budget of [`LIVE_TOTAL`]` / threads` live mappings (4 GiB of address space in all, well under
//! `max_map_count` even if nothing merges). When a thread reaches it, it *resets*: it unmaps
//! everything it mapped, one `munmap` per contiguous run of its own mappings (one run at one
//! thread, where Linux places each mapping just below the previous one; many when threads
//! interleave). As in `ds-alloc`, the reset runs inside the measured window but its time is
//! **excluded** from that thread's rate (`ThreadCount::excluded`), so `ops_per_sec` counts
//! `mmap`s only, while the contention a reset causes on the other threads stays in the numbers.
//! Extras: `resets` (per repeat, all threads) and `excluded_pct`.
//!
//! Not for: hinted or fixed mappings (`local`), or mappings that are touched
//! (`alloc-fault-modify`).

use super::arena::sample_with_housekeeping;
use super::vm::{VmBench, VmCore, VmDriver};
use crate::error::BenchError;
use crate::harness::{run_timed, Stop};
use crate::workload::{Config, Sample, ThreadCount};
use std::ops::Range;
use std::time::{Duration, Instant};

/// Bytes per mapping.
pub const LEN: u64 = 256 << 10;

/// Live mappings of all threads together before a thread resets (its share: this / threads).
pub const LIVE_TOTAL: u64 = 16_384;

/// The `alloc` workload.
pub struct Alloc;

/// Adds `[a, a + len)` to `runs`, extending the last run when adjacent to it.
pub(crate) fn record(runs: &mut Vec<Range<u64>>, a: u64, len: u64) {
    if let Some(last) = runs.last_mut() {
        if a + len == last.start {
            last.start = a;
            return;
        }
        if a == last.end {
            last.end = a + len;
            return;
        }
    }
    runs.push(a..a + len);
}

/// Unmaps every run (this thread's own untouched mappings) and empties the list.
pub(crate) fn unmap_runs<C: VmCore>(core: &mut C, runs: &mut Vec<Range<u64>>) {
    for r in runs.drain(..) {
        // SAFETY: every run is made of mappings this thread made and never touched or shared.
        unsafe { core.munmap(r.start, r.end - r.start) };
    }
}

impl VmBench for Alloc {
    const NAME: &'static str = "alloc";
    const ABOUT: &'static str =
        "mmap 256 KiB anonymous, never unmapped (budgeted resets excluded) [SOSP'25 Fig. 14]";
    const MIRRORS: Option<&'static str> = Some("SOSP'25 §7.2, Fig. 14 (Alloc)");
    const BREAKDOWN: bool = true;

    fn run_vm<D: VmDriver>(
        &self,
        driver: &D,
        threads: usize,
        config: &Config,
    ) -> Result<Sample, BenchError> {
        let budget = (LIVE_TOTAL / threads as u64).max(1);
        let timed = run_timed(threads, config.duration, None, |_| {
            let mut core = driver.attach();
            let mut runs: Vec<Range<u64>> = Vec::with_capacity(budget as usize);
            move |stop: &Stop| {
                let (mut ops, mut live, mut resets) = (0u64, 0u64, 0u64);
                let mut excluded = Duration::ZERO;
                while !stop.is_set() {
                    let a = core.mmap(0, LEN);
                    record(&mut runs, a, LEN);
                    ops += 1;
                    live += 1;
                    if live == budget {
                        let start = Instant::now();
                        unmap_runs(&mut core, &mut runs);
                        excluded += stop.time_inside(start);
                        live = 0;
                        resets += 1;
                    }
                }
                // After the window: leave nothing behind in the space.
                unmap_runs(&mut core, &mut runs);
                (ThreadCount { ops, excluded }, resets)
            }
        });
        Ok(sample_with_housekeeping(&timed, "resets"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn record_merges_downward_and_upward_neighbours_only() {
        let mut runs = Vec::new();
        record(&mut runs, 100, 10);
        record(&mut runs, 90, 10);
        record(&mut runs, 110, 10);
        assert_eq!(runs.len(), 1);
        assert_eq!(runs[0], 90..120);
        record(&mut runs, 200, 10);
        assert_eq!(runs, [90..120, 200..210]);
    }
}
