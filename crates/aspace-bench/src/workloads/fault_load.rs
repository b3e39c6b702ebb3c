//! `fault-load` [ASPLOS'12 (Bonsai) §7.3, Fig. 16-18]: "Our microbenchmark uses one core to
//! perform `mmap`/`munmap` operations for a given fraction of time (to control how often the
//! `mmap_sem` is held in write mode), while the remaining cores continuously take soft page
//! faults."
//!
//! - The *mapper* (thread 0) spends `--mmap-pct` percent of its time in `mmap`+`munmap` pairs of
//!   one 4 KiB page in an area of its own ([`MAPPER_BASE`], unrelated to the faulting regions),
//!   (an anchor page keeps that area's page tables alive, see `vm::map_anchor`), paced by a
//!   simple controller: while its time inside the calls is below `mmap_pct`% of the
//!   time since the start, it does another pair; otherwise it does the other thing, which is
//!   spinning idle when other threads fault (Bonsai's dedicated core), and faulting itself when it
//!   is the only thread (then its faults are counted and its mapping time is excluded from its
//!   rate).
//! - The *faulting* threads (1.. when `threads >= 2`) each own a 16 MiB region ([`REGION`]) and
//!   store one byte to each page in turn: every store is a soft fault on a fresh page. When the
//!   region is used up they re-arm it (`munmap` + `mmap` again) in time **excluded** from their
//!   rate, like `ds-alloc`'s resets.
//!
//! One operation is one page fault of a faulting thread; `ops_per_sec` is the faulting threads'
//! total fault rate and `ns/op` the mean cost of one fault (Fig. 17-18's y axis, here absolute;
//! compare `--mmap-pct 0` for Fig. 18's normalisation). Extras: `mmap_pct` (configured),
//! `mapper_busy_pct` (measured share of the mapper's time in `mmap`/`munmap`),
//! `mapper_pairs_per_sec` and `rearms`.
//!
//! **The load levels** ([`LEVELS`]): the default suite and `aspace bench fault-load` (without
//! `--mmap-pct`) run four workloads, `fault-load-0pct`, `fault-load-25pct`, `fault-load-50pct`
//! and `fault-load-100pct` ([`FaultLoadAt`]), one per point of Fig. 18's x axis, so each gets its
//! own plot and headline row with the designs as series; `fault-load --mmap-pct P` runs one
//! level of one's choice. With 2 threads, one faulter and one mapper (the paper's shape); with
//! 1 thread, the one thread is both: it spends the level's share of its time mapping and faults
//! the rest, and its rate counts only its faulting time (so the 1-thread points show what
//! interleaving the calls costs the faults' caches and locks without any concurrency);
//! `fault-load-100pct` needs 2 threads (a lone thread at 100% never faults).
//!
//! Scaling across thread counts is not the point here (the second thread is the mapper, not a
//! second faulter), so the report shows no `x vs 1T`.
//!
//! Not for: faults on shared pages (`global`) or fault cost without concurrent mapping
//! operations, which is `--mmap-pct 0`.

use super::vm::{
    home, map_anchor, unmap_anchor, VmBench, VmCore, VmDriver, HINT_BASE, PAGE, TABLE_SPAN,
};
use crate::error::BenchError;
use crate::harness::{run_timed, Stop};
use crate::workload::{Config, Sample, ThreadCount};
use std::time::{Duration, Instant};

/// Bytes of each faulting thread's region.
pub const REGION: u64 = 16 << 20;

/// Where the mapper's unrelated pages go (1 TiB above the faulting regions).
pub const MAPPER_BASE: u64 = HINT_BASE + (1 << 40);

/// Faults a lone thread takes between two looks at the clock.
pub const FAULT_BATCH: u64 = 16;

/// The `fault-load` workload.
pub struct FaultLoad;

/// Thread `t`'s faulting region (hint).
pub fn region_of(t: usize) -> u64 {
    home(t)
}

/// A faulting thread's state: its region and the next page to fault.
pub(crate) struct Faulter {
    hint: u64,
    base: u64,
    next: u64,
    rearms: u64,
    excluded: Duration,
}

impl Faulter {
    pub(crate) fn new<C: VmCore>(core: &mut C, t: usize) -> Faulter {
        let hint = region_of(t);
        Faulter {
            hint,
            base: core.mmap(hint, REGION),
            next: 0,
            rearms: 0,
            excluded: Duration::ZERO,
        }
    }

    /// Takes one fault (re-arming the region, untimed, when it is used up).
    #[inline]
    pub(crate) fn fault<C: VmCore>(&mut self, core: &mut C, stop: &Stop) {
        // SAFETY: inside this thread's own region, shared with no one.
        unsafe { core.store(self.base + self.next * PAGE, 1) };
        self.next += 1;
        if self.next == REGION / PAGE {
            let start = Instant::now();
            // SAFETY: this thread's own region, not used again.
            unsafe { core.munmap(self.base, REGION) };
            self.base = core.mmap(self.hint, REGION);
            self.excluded += stop.time_inside(start);
            self.next = 0;
            self.rearms += 1;
        }
    }

    pub(crate) fn finish<C: VmCore>(self, core: &mut C) {
        // SAFETY: this thread's own region, not used again.
        unsafe { core.munmap(self.base, REGION) };
    }
}

/// The mapper's load levels of the suite, percent of its time in `mmap`/`munmap` (Fig. 18).
pub const LEVELS: [u32; 4] = [0, 25, 50, 100];

/// `fault-load` at a fixed load level of `PCT` percent (one of [`LEVELS`]), named
/// `fault-load-<PCT>pct`; it ignores `--mmap-pct`.
pub struct FaultLoadAt<const PCT: u32>;

/// The level workloads' names, in [`LEVELS`] order.
pub const LEVEL_NAMES: [&str; 4] = [
    "fault-load-0pct",
    "fault-load-25pct",
    "fault-load-50pct",
    "fault-load-100pct",
];

/// What one thread reports: its count (faults), and as the mapper its busy time and pairs.
#[derive(Default)]
struct Report {
    count: ThreadCount,
    faulter: bool,
    busy: Duration,
    pairs: u64,
    rearms: u64,
}

impl VmBench for FaultLoad {
    const NAME: &'static str = "fault-load";
    const ABOUT: &'static str =
        "soft faults while thread 0 spends --mmap-pct of its time in mmap/munmap [ASPLOS'12 Fig. 18]";
    const MIRRORS: Option<&'static str> = Some("ASPLOS'12 (Bonsai) §7.3, Fig. 18");
    const THREAD_SCALING: bool = false;

    fn run_vm<D: VmDriver>(
        &self,
        driver: &D,
        threads: usize,
        config: &Config,
    ) -> Result<Sample, BenchError> {
        run_at(driver, threads, config.duration, config.mmap_pct)
    }
}

impl<const PCT: u32> VmBench for FaultLoadAt<PCT> {
    const NAME: &'static str = match PCT {
        0 => LEVEL_NAMES[0],
        25 => LEVEL_NAMES[1],
        50 => LEVEL_NAMES[2],
        100 => LEVEL_NAMES[3],
        _ => panic!("a fault-load level is one of LEVELS"),
    };
    const ABOUT: &'static str = match PCT {
        0 => "fault-load with the mapper idle (0% of its time in mmap/munmap) [ASPLOS'12 Fig. 18]",
        25 => "fault-load with the mapper 25% of its time in mmap/munmap [ASPLOS'12 Fig. 18]",
        50 => "fault-load with the mapper 50% of its time in mmap/munmap [ASPLOS'12 Fig. 18]",
        100 => "fault-load with the mapper always in mmap/munmap (100%) [ASPLOS'12 Fig. 18]",
        _ => panic!("a fault-load level is one of LEVELS"),
    };
    const MIRRORS: Option<&'static str> = Some("ASPLOS'12 (Bonsai) §7.3, Fig. 18");
    const THREAD_SCALING: bool = false;
    const MIN_THREADS: usize = if PCT == 100 { 2 } else { 1 };

    fn run_vm<D: VmDriver>(
        &self,
        driver: &D,
        threads: usize,
        config: &Config,
    ) -> Result<Sample, BenchError> {
        run_at(driver, threads, config.duration, PCT)
    }
}

/// One repeat of `fault-load` with the mapper `pct` percent of its time in `mmap`/`munmap`.
fn run_at<D: VmDriver>(
    driver: &D,
    threads: usize,
    duration: Duration,
    pct: u32,
) -> Result<Sample, BenchError> {
    let share = f64::from(pct) / 100.0;
    let timed = run_timed(threads, duration, None, |t| {
        let mut core = driver.attach();
        // The mapper faults too only when it is alone.
        let mut faulter = (t > 0 || threads == 1).then(|| Faulter::new(&mut core, t));
        let anchor = (t == 0).then(|| map_anchor(&mut core, MAPPER_BASE + TABLE_SPAN - PAGE));
        move |stop: &Stop| {
            let mut r = Report {
                faulter: faulter.is_some(),
                ..Default::default()
            };
            if t == 0 {
                let start = Instant::now();
                while !stop.is_set() {
                    if r.busy.as_secs_f64() < share * start.elapsed().as_secs_f64() {
                        let t0 = Instant::now();
                        let p = core.mmap(MAPPER_BASE, PAGE);
                        // SAFETY: the page just mapped, never shared.
                        unsafe { core.munmap(p, PAGE) };
                        r.busy += t0.elapsed();
                        r.pairs += 1;
                    } else if let Some(f) = faulter.as_mut() {
                        for _ in 0..FAULT_BATCH {
                            f.fault(&mut core, stop);
                        }
                        r.count.ops += FAULT_BATCH;
                    } else {
                        std::hint::spin_loop();
                    }
                }
            } else {
                let f = faulter.as_mut().expect("threads > 0 fault");
                while !stop.is_set() {
                    for _ in 0..FAULT_BATCH {
                        f.fault(&mut core, stop);
                    }
                    r.count.ops += FAULT_BATCH;
                }
            }
            if let Some(a) = anchor {
                unmap_anchor(&mut core, a);
            }
            if let Some(f) = faulter {
                r.count.excluded = f.excluded + r.busy;
                r.rearms = f.rearms;
                f.finish(&mut core);
            }
            r
        }
    });
    let counts: Vec<ThreadCount> = timed
        .results
        .iter()
        .filter(|r| r.faulter)
        .map(|r| r.count)
        .collect();
    let mapper = &timed.results[0];
    let secs = timed.elapsed.as_secs_f64();
    Ok(Sample::from_threads(timed.elapsed, &counts)
        .with("mmap_pct", f64::from(pct))
        .with("mapper_busy_pct", 100.0 * mapper.busy.as_secs_f64() / secs)
        .with("mapper_pairs_per_sec", mapper.pairs as f64 / secs)
        .with(
            "rearms",
            timed.results.iter().map(|r| r.rearms).sum::<u64>() as f64,
        ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn regions_and_the_mapper_area_are_disjoint() {
        assert!(region_of(0) + REGION <= region_of(1));
        assert!(region_of(255) + REGION <= MAPPER_BASE);
    }
}
