//! `alloc-fault-modify` [SOSP'25 §7.2, Fig. 14 "Alloc + Fault + Modify"]: "Each thread repeats a
//! sequence of operations: `mmap()` a 2MiB area, fault each page, and then `munmap()` it. This
//! simulates the typical usage cycle of `mmap()`".
//!
//! Each iteration: `mmap(NULL, 2 MiB)` (no hint: the space places it), store one byte to each of
//! its 512 pages in address order (512 write faults), `munmap` the whole area. One operation is
//! one iteration. Extras: `ns_per_fault` (per-thread time of an iteration / 512, the issue's
//! "1.3 us per fault" for Linux; it includes the iteration's share of `mmap`/`munmap`) and
//! `faults_per_iter` (faults the space counted during the repeat / iterations; 512 when every page
//! faulted once; `linux` counts the process's minor faults, so a few unrelated ones may add).
//!
//! THP: with `transparent_hugepage=always` a 2 MiB-aligned area would take one huge-page fault
//! instead of 512; `faults_per_iter` shows it (this machine runs `madvise`, so it does not happen).
//!
//! Not for: mappings that live on (use `alloc`) or single pages (use `local`).

use super::vm::{VmBench, VmCore, VmDriver, PAGE};
use crate::error::BenchError;
use crate::harness::{run_timed, Stop};
use crate::workload::{Config, Sample, ThreadCount};

/// Bytes per area.
pub const AREA: u64 = 2 << 20;

/// Pages per area.
pub const PAGES: u64 = AREA / PAGE;

/// The `alloc-fault-modify` workload.
pub struct AllocFaultModify;

impl VmBench for AllocFaultModify {
    const NAME: &'static str = "alloc-fault-modify";
    const ABOUT: &'static str =
        "mmap 2 MiB, write every page (512 faults), munmap [SOSP'25 Fig. 14]";
    const MIRRORS: Option<&'static str> = Some("SOSP'25 §7.2, Fig. 14 (Alloc + Fault + Modify)");

    fn run_vm<D: VmDriver>(
        &self,
        driver: &D,
        threads: usize,
        config: &Config,
    ) -> Result<Sample, BenchError> {
        let faults_before = driver.faults();
        let timed = run_timed(threads, config.duration, None, |_| {
            let mut core = driver.attach();
            move |stop: &Stop| {
                let mut ops = 0u64;
                while !stop.is_set() {
                    let a = core.mmap(0, AREA);
                    for i in 0..PAGES {
                        // SAFETY: inside the area this thread just mapped, known to no one else.
                        unsafe { core.store(a + i * PAGE, i as u8) };
                    }
                    // SAFETY: this thread's own area, not used afterwards.
                    unsafe { core.munmap(a, AREA) };
                    ops += 1;
                }
                ThreadCount {
                    ops,
                    ..Default::default()
                }
            }
        });
        let faults = driver.faults().saturating_sub(faults_before);
        let iters: u64 = timed.results.iter().map(|c| c.ops).sum();
        let s = Sample::from_threads(timed.elapsed, &timed.results);
        let ns_per_fault = if s.ops_per_sec > 0.0 {
            threads as f64 * 1e9 / s.ops_per_sec / PAGES as f64
        } else {
            f64::NAN
        };
        let faults_per_iter = if iters > 0 {
            faults as f64 / iters as f64
        } else {
            f64::NAN
        };
        Ok(s.with("ns_per_fault", ns_per_fault)
            .with("faults_per_iter", faults_per_iter))
    }
}
