//! `local` [RadixVM §5.1, Fig. 5]: "Each thread mmaps a private region in the shared address
//! space, writes to all of the pages in the region, and then munmaps its region ... it uses 4 KB
//! regions to maximally stress the VM system."
//!
//! As in RadixVM's `mapbench` (mode `local`, one page): thread `t` maps one 4 KiB page at its
//! own address (here a hint, [`page_of`]: the start of the thread's 1 GiB home, where `mapbench`
//! used `MAP_FIXED` at `base + t MiB`), stores one byte to it (one page fault), and unmaps it.
//! One operation is one iteration (= one page written). The threads never share a page table;
//! an anchor page mapped before the run in the same last-level table ([`anchor_of`], see
//! `vm::map_anchor`) keeps the tables alive, as neighbouring mappings do in a real process.
//!
//! The floor (`floor_ns`, measured in the same run on the coordinator thread before the threads
//! start): the cost of the part of an iteration no address space can avoid, taking one 4 KiB
//! frame from a LIFO free list, zeroing it, and putting it back — what an engine's per-core frame
//! cache does for one page (pop, zero on reuse, push at `munmap`). The frames are 4 KiB-aligned
//! boxes, zeroed with `fill(0)` (a `memset`), the list a `Vec` (the engine's per-core cache is
//! one too). The median of [`FLOOR_ROUNDS`] rounds of [`FLOOR_ITERS`] iterations is reported,
//! together with `local_over_floor`: the per-thread time of one `local` iteration divided by it
//! (the target: within 4x at one thread).
//!
//! `--idle-cores N` attaches `N` more cores before the run and keeps them attached, unused (issue
//! 22: the one-thread cycle with a second core attached but idle; under `coarse` the second
//! attach upgrades the space lock out of its one-core mode, for good). Extra `idle_cores` then.
//!
//! Not for: multi-page regions (use `alloc-fault-modify`) or pages shared between threads
//! (`pipeline`, `global`).

use super::vm::{home, map_anchor, unmap_anchor, VmBench, VmCore, VmDriver, PAGE, TABLE_SPAN};
use crate::error::BenchError;
use crate::harness::{run_timed, Stop};
use crate::workload::{Config, Sample, ThreadCount};
use std::hint::black_box;
use std::time::Instant;

/// The `local` workload.
pub struct Local;

/// Iterations per floor round.
pub const FLOOR_ITERS: u32 = 20_000;

/// Floor rounds (the median is kept).
pub const FLOOR_ROUNDS: usize = 5;

/// The most `--idle-cores` (the spaces are built for 64 cores, of which the threads use up to 32).
pub const MAX_IDLE_CORES: usize = 32;

/// Thread `t`'s page: the start of its home.
pub fn page_of(t: usize) -> u64 {
    home(t)
}

/// Thread `t`'s anchor page (same last-level page table as its page).
pub fn anchor_of(t: usize) -> u64 {
    home(t) + TABLE_SPAN - PAGE
}

/// A frame as the floor measures it: 4 KiB, 4 KiB-aligned.
#[repr(C, align(4096))]
struct Frame([u8; PAGE as usize]);

/// Median nanoseconds to take a frame from a free list, zero it and free it again.
pub fn floor_ns() -> f64 {
    let mut free: Vec<Box<Frame>> = (0..64).map(|_| Box::new(Frame([1; 4096]))).collect();
    let mut rounds: Vec<f64> = (0..FLOOR_ROUNDS)
        .map(|_| {
            let start = Instant::now();
            for _ in 0..FLOOR_ITERS {
                let mut f = free.pop().expect("the list is never empty here");
                f.0.fill(0);
                black_box(&mut f);
                free.push(f);
            }
            start.elapsed().as_nanos() as f64 / f64::from(FLOOR_ITERS)
        })
        .collect();
    rounds.sort_by(f64::total_cmp);
    rounds[rounds.len() / 2]
}

impl VmBench for Local {
    const NAME: &'static str = "local";
    const ABOUT: &'static str =
        "mmap a private 4 KiB page, write it, munmap it; floor_ns = zero one frame [RadixVM Fig. 5]";
    const MIRRORS: Option<&'static str> = Some("RadixVM §5.1, Fig. 5 (local)");

    fn run_vm<D: VmDriver>(
        &self,
        driver: &D,
        threads: usize,
        config: &Config,
    ) -> Result<Sample, BenchError> {
        let floor = floor_ns();
        // Attached before the threads (so before the timed window) and dropped after it.
        let idle: Vec<D::Core> = (0..config.idle_cores).map(|_| driver.attach()).collect();
        let timed = run_timed(threads, config.duration, None, |t| {
            let mut core = driver.attach();
            let hint = page_of(t);
            let anchor = map_anchor(&mut core, anchor_of(t));
            move |stop: &Stop| {
                let mut ops = 0u64;
                let mut misplaced = 0u64;
                while !stop.is_set() {
                    let p = core.mmap(hint, PAGE);
                    misplaced += u64::from(p != hint);
                    // SAFETY: `p` is the page this thread just mapped; nobody else knows it.
                    unsafe {
                        core.store(p, 1);
                        core.munmap(p, PAGE);
                    }
                    ops += 1;
                }
                unmap_anchor(&mut core, anchor);
                (
                    ThreadCount {
                        ops,
                        ..Default::default()
                    },
                    misplaced,
                )
            }
        });
        drop(idle);
        let counts: Vec<ThreadCount> = timed.results.iter().map(|r| r.0).collect();
        let misplaced: u64 = timed.results.iter().map(|r| r.1).sum();
        let s = Sample::from_threads(timed.elapsed, &counts);
        let ns_per_iter = if s.ops_per_sec > 0.0 {
            threads as f64 * 1e9 / s.ops_per_sec
        } else {
            f64::NAN
        };
        let s = s
            .with("floor_ns", floor)
            .with("local_over_floor", ns_per_iter / floor);
        let s = if config.idle_cores > 0 {
            s.with("idle_cores", config.idle_cores as f64)
        } else {
            s
        };
        // Only shown when it happened: a taken hint moves the page, not the cost.
        Ok(if misplaced > 0 {
            s.with("hint_missed", misplaced as f64)
        } else {
            s
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn floor_is_positive_and_below_a_millisecond() {
        let f = floor_ns();
        assert!(f > 0.0 && f < 1e6, "{f}");
    }

    /// With one core, `coarse`'s write sections are light and send no shootdown round; an idle
    /// second core upgrades the space lock, and every `munmap` sends one.
    #[test]
    fn an_idle_core_upgrades_coarse_and_its_munmaps_shoot_down() {
        use super::super::vm::Vm;
        use crate::workload::Workload;
        let config = |idle_cores| Config {
            duration: std::time::Duration::from_millis(20),
            idle_cores,
            ..Config::default()
        };
        let alone = Vm(Local).run("coarse", 1, &config(0)).unwrap();
        assert_eq!(alone.extra.get("shootdowns"), Some(&0.0), "{alone:?}");
        assert_eq!(alone.extra.get("idle_cores"), None);
        let beside = Vm(Local).run("coarse", 1, &config(1)).unwrap();
        assert_eq!(beside.extra.get("idle_cores"), Some(&1.0));
        let rounds = beside.extra["shootdowns"];
        assert!(rounds > 0.0, "{beside:?}");
    }

    #[test]
    fn threads_pages_have_their_own_tables_and_share_them_with_their_anchor() {
        assert_eq!(page_of(1) - page_of(0), 1 << 30);
        assert_eq!(page_of(1) / TABLE_SPAN, anchor_of(1) / TABLE_SPAN);
        assert!(page_of(1) + PAGE < anchor_of(1), "not adjacent: no merge");
    }
}
