//! The VM workloads as recorded operations: one iteration of each workload's measured loop is
//! one operation of the audit (built with `--features conflicts` only).
//!
//! Every function runs `cores` threads through [`run_rounds`]: `setup` (attach a core, map the
//! workload's anchors and own regions: not recorded), then one operation per round, then
//! teardown (unmap what is left: not recorded). The operations reuse the workloads' constants
//! and helpers so the audited accesses are the measured ones:
//!
//! - `local`: `mmap` the core's page at its hint, store a byte (one fault), `munmap` it;
//! - `alloc`: one `mmap(NULL, 256 KiB)`, recorded in the core's runs; the budgeted reset
//!   (`LIVE_TOTAL / cores` live mappings) happens inside the operation that reaches it, as in
//!   the workload (whose timing excludes it; here it is counted);
//! - `alloc-fault-modify`: `mmap(NULL, 2 MiB)`, 512 stores, `munmap`;
//! - `pipeline`: map and store the core's slot page and pass it on; take the page the previous
//!   core passed *in the previous round*, store to it and unmap it (the rounds pipeline the
//!   hand-off the workload does with waits; the rings are the bench's own std atomics, not
//!   recorded);
//! - `global`: even rounds store to every page of the shared region in a per-core random order;
//!   odd rounds replace the core's own part with `MAP_FIXED` (the workload's two phases);
//! - `fault-load`: core 0 (with more than one core) does one `mmap`/`munmap` pair per operation
//!   (the mapper at 100 %), the others `FAULT_BATCH` faults each in their own regions (its four
//!   load levels differ only in how often the mapper calls; the audit's is the 100 % one);
//! - `soft-fault`: one store (one soft fault on a fresh page) to the core's slice of the shared
//!   region per operation; a core whose slice is used up drops it with `DONTNEED` inside the
//!   operation that reaches its end (the workload excludes it from its time; here it is
//!   counted, and with the default rounds it never happens).
//!
//! Not for: timing (see the parent module).

use super::super::workloads::alloc::{record as record_run, unmap_runs, LEN, LIVE_TOTAL};
use super::super::workloads::alloc_fault_modify::{AREA, PAGES};
use super::super::workloads::fault_load::{Faulter, FAULT_BATCH, MAPPER_BASE};
use super::super::workloads::global::{PART_PAGES, REGION};
use super::super::workloads::pipeline::{slot_of, Ring};
use super::super::workloads::soft_fault::{mapped_len, slices_base, SLICE_PAGES, STRIDE};
use super::super::workloads::vm::{
    map_anchor, unmap_anchor, AspaceDriver, VmCore, VmDriver, HINT_BASE, PAGE, TABLE_SPAN,
};
use super::super::workloads::{local, pipeline};
use crate::error::BenchError;
use crate::harness::Stop;
use aspace_conflicts::{run_rounds, Recorded};
use rand::rngs::SmallRng;
use rand::seq::SliceRandom;
use rand::SeedableRng;
use std::ops::Range;

/// Records `rounds` operations of `workload` on each of `cores` threads of `driver`'s space.
///
/// # Errors
/// [`BenchError::UnknownWorkload`] for a workload the audit does not know.
pub fn record(
    workload: &str,
    driver: &AspaceDriver,
    cores: usize,
    rounds: u64,
) -> Result<Recorded, BenchError> {
    Ok(match workload {
        "local" => local_ops(driver, cores, rounds),
        "alloc" => alloc_ops(driver, cores, rounds),
        "alloc-fault-modify" => alloc_fault_modify_ops(driver, cores, rounds),
        "pipeline" => pipeline_ops(driver, cores, rounds),
        "global" => global_ops(driver, cores, rounds),
        "fault-load" => fault_load_ops(driver, cores, rounds),
        "soft-fault" => soft_fault_ops(driver, cores, rounds),
        other => {
            return Err(BenchError::UnknownWorkload {
                name: other.to_string(),
                known: super::WORKLOADS.join(", "),
            })
        }
    })
}

fn local_ops(driver: &AspaceDriver, cores: usize, rounds: u64) -> Recorded {
    run_rounds(
        cores,
        rounds,
        |t| {
            let mut core = driver.attach();
            let anchor = map_anchor(&mut core, local::anchor_of(t));
            (core, anchor)
        },
        |(core, _), t, _| {
            let p = core.mmap(local::page_of(t), PAGE);
            // SAFETY: the page this thread just mapped; nobody else knows it.
            unsafe {
                core.store(p, 1);
                core.munmap(p, PAGE);
            }
        },
        |(mut core, anchor), _| unmap_anchor(&mut core, anchor),
    )
}

fn alloc_ops(driver: &AspaceDriver, cores: usize, rounds: u64) -> Recorded {
    let budget = (LIVE_TOTAL / cores as u64).max(1);
    run_rounds(
        cores,
        rounds,
        |_| (driver.attach(), Vec::<Range<u64>>::new(), 0u64),
        |(core, runs, live), _, _| {
            let a = core.mmap(0, LEN);
            record_run(runs, a, LEN);
            *live += 1;
            if *live == budget {
                unmap_runs(core, runs);
                *live = 0;
            }
        },
        |(mut core, mut runs, _), _| unmap_runs(&mut core, &mut runs),
    )
}

fn alloc_fault_modify_ops(driver: &AspaceDriver, cores: usize, rounds: u64) -> Recorded {
    run_rounds(
        cores,
        rounds,
        |_| driver.attach(),
        |core, _, _| {
            let a = core.mmap(0, AREA);
            for i in 0..PAGES {
                // SAFETY: inside the area this thread just mapped, known to no one else.
                unsafe { core.store(a + i * PAGE, i as u8) };
            }
            // SAFETY: this thread's own area, not used afterwards.
            unsafe { core.munmap(a, AREA) };
        },
        |_, _| {},
    )
}

fn pipeline_ops(driver: &AspaceDriver, cores: usize, rounds: u64) -> Recorded {
    let rings: Vec<Ring> = (0..cores).map(|_| Ring::default()).collect();
    let rings = &rings;
    run_rounds(
        cores,
        rounds,
        |t| {
            let mut core = driver.attach();
            let anchor = map_anchor(&mut core, pipeline::anchor_of(t));
            (core, anchor)
        },
        |(core, _), t, round| {
            let p = core.mmap(slot_of(t, round), PAGE);
            // SAFETY: the page this thread just mapped; not passed on yet.
            unsafe { core.store(p, 1) };
            // One push and (after round 0) one pop per round: the ring never holds two pages.
            assert!(rings[t].push(p), "a pipeline ring is never full here");
            if round > 0 {
                let got = rings[(t + cores - 1) % cores]
                    .pop()
                    .expect("the previous core passed a page in the previous round");
                // SAFETY: the previous core mapped `got` and passed it to us alone, in a round
                // that ended (barrier) before this one began.
                unsafe {
                    core.store(got, 2);
                    core.munmap(got, PAGE);
                }
            }
        },
        |(mut core, anchor), t| {
            // The last round's pages: every core finished it (barrier) before any teardown.
            if let Some(got) = rings[(t + cores - 1) % cores].pop() {
                // SAFETY: passed to this core alone; nobody uses it any more.
                unsafe { core.munmap(got, PAGE) };
            }
            unmap_anchor(&mut core, anchor);
        },
    )
}

fn global_ops(driver: &AspaceDriver, cores: usize, rounds: u64) -> Recorded {
    let total_pages = cores as u64 * PART_PAGES;
    let mut coordinator = driver.attach();
    let anchor = map_anchor(&mut coordinator, HINT_BASE);
    let rec = run_rounds(
        cores,
        rounds,
        |t| {
            let mut core = driver.attach();
            let part = REGION + t as u64 * PART_PAGES * PAGE;
            core.mmap_fixed_noreplace(part, PART_PAGES * PAGE);
            let order: Vec<u64> = (0..total_pages).collect();
            let rng = SmallRng::seed_from_u64(t as u64 + 1);
            (core, part, order, rng)
        },
        |(core, part, order, rng), _, round| {
            if round % 2 == 0 {
                order.shuffle(rng);
                for &pg in order.iter() {
                    // SAFETY: the region's parts are mapped by their cores before the first
                    // round and only replaced (MAP_FIXED) in odd rounds, never unmapped.
                    unsafe { core.store(REGION + pg * PAGE, 1) };
                }
            } else {
                // SAFETY: this core's own part; no core touches the region in odd rounds.
                unsafe { core.mmap_fixed(*part, PART_PAGES * PAGE) };
            }
        },
        |_, _| {},
    );
    // SAFETY: the region (every core's part) and the anchor are this run's own; threads joined.
    unsafe { coordinator.munmap(REGION, total_pages * PAGE) };
    unmap_anchor(&mut coordinator, anchor);
    rec
}

fn fault_load_ops(driver: &AspaceDriver, cores: usize, rounds: u64) -> Recorded {
    enum Role {
        Mapper(u64),
        Faulter(Faulter),
    }
    run_rounds(
        cores,
        rounds,
        |t| {
            let mut core = driver.attach();
            let role = if t == 0 && cores > 1 {
                Role::Mapper(map_anchor(&mut core, MAPPER_BASE + TABLE_SPAN - PAGE))
            } else {
                Role::Faulter(Faulter::new(&mut core, t))
            };
            (core, role)
        },
        |(core, role), _, _| match role {
            Role::Mapper(_) => {
                let p = core.mmap(MAPPER_BASE, PAGE);
                // SAFETY: the page the mapper just mapped, known to no one else.
                unsafe { core.munmap(p, PAGE) };
            }
            Role::Faulter(f) => {
                // No measured window here (rounds, not time): a stop never set.
                let never = Stop::default();
                for _ in 0..FAULT_BATCH {
                    f.fault(core, &never);
                }
            }
        },
        |(mut core, role), _| match role {
            Role::Mapper(anchor) => unmap_anchor(&mut core, anchor),
            Role::Faulter(f) => f.finish(&mut core),
        },
    )
}

fn soft_fault_ops(driver: &AspaceDriver, cores: usize, rounds: u64) -> Recorded {
    let len = mapped_len(cores);
    let mut coordinator = driver.attach();
    let base = coordinator.mmap(HINT_BASE, len);
    let first = slices_base(base);
    let rec = run_rounds(
        cores,
        rounds,
        |t| {
            let core = driver.attach();
            (core, first + t as u64 * STRIDE, 0u64)
        },
        |(core, slice, next), _, _| {
            // SAFETY: this core's own slice of the region, mapped until the threads joined.
            unsafe { core.store(*slice + *next * PAGE, 1) };
            *next += 1;
            if *next == SLICE_PAGES {
                // SAFETY: this core's own slice, whose contents nobody reads.
                unsafe { core.dontneed(*slice, SLICE_PAGES * PAGE) };
                *next = 0;
            }
        },
        |_, _| {},
    );
    // SAFETY: the region this run mapped; every thread joined.
    unsafe { coordinator.munmap(base, len) };
    rec
}
