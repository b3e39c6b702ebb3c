//! `interp` (issue 24): the cost of an MMU to an interpreter. Each thread runs the same guest
//! program (`aspace_emu::guest::array_loop`: per 8-byte element of a 16-page array, a load, an
//! add and a store among eight instructions) in the same interpreter (`aspace_emu::machine`),
//! over one of two guest memories. One operation is one guest instruction. Designs, baseline
//! first:
//! - `vec`: each thread's own plain `Vec<u8>` (bounds checks only: what an emulator without an
//!   MMU pays);
//! - `aspace`: one `interval` address space shared by the threads, each thread a core; every
//!   guest load and store is one `CoreHandle::read`/`write` (an access window, a soft-TLB
//!   lookup; the array's 16 pages stay in the 64-entry TLB).
//!
//! Setup (untimed) runs each thread's first 100,000 instructions: the `mmap` and the faults
//! that bring the array in. Target (issue 24): `aspace` within 2x of `vec`, i.e. at least 50%.
//! Extra (`aspace`): `faults_per_thread` (page faults over the whole repeat, setup included,
//! per thread: 16, the array's pages; more would mean the measured window faulted).
//!
//! Not for: the interpreter's correctness (`aspace-emu`'s tests) or faults (the VM workloads).

use crate::error::BenchError;
use crate::harness::{run_timed, Stop};
use crate::workload::{Baseline, Config, RatioStyle, Sample, ThreadCount, Workload};
use aspace_emu::guest::array_loop;
use aspace_emu::isa::Insn;
use aspace_emu::machine::Machine;
use aspace_emu::memory::{AspaceMemory, Memory, VecMemory};
use aspace_vm::{AddressSpace, Design};

/// The designs, baseline first.
pub const DESIGNS: &[&str] = &["vec", "aspace"];

/// Instructions run between two polls of the stop flag.
const BUDGET: u64 = 4096;
/// Instructions run in setup (the `mmap` and the faults).
const WARMUP: u64 = 100_000;

/// The `interp` workload.
pub struct Interp;

impl Workload for Interp {
    fn name(&self) -> &'static str {
        "interp"
    }
    fn about(&self) -> &'static str {
        "an interpreter's guest loads and stores over aspace memory vs a plain Vec (issue 24)"
    }
    fn designs(&self) -> &'static [&'static str] {
        DESIGNS
    }
    fn baseline(&self) -> Option<Baseline> {
        Some(Baseline {
            design: "vec",
            style: RatioStyle::PercentOf,
        })
    }
    fn run(&self, design: &str, threads: usize, config: &Config) -> Result<Sample, BenchError> {
        if threads == 0 {
            return Err(BenchError::InvalidArgument(
                "interp needs at least one thread".to_string(),
            ));
        }
        let program = array_loop();
        match design {
            "vec" => Ok(measure(threads, config, &program, |_| {
                VecMemory::new(0x1000_0000, 1 << 20)
            })),
            "aspace" => {
                let space = AddressSpace::builder()
                    .design(Design::Interval)
                    .memory((threads as u64 + 1) * (1 << 20))
                    .build()
                    .map_err(|e| BenchError::InvalidArgument(format!("interp: {e}")))?;
                let sample = measure(threads, config, &program, |_| AspaceMemory {
                    core: space
                        .attach()
                        .expect("a core per thread (max_cores >= threads)"),
                });
                let faults = space.stats().faults as f64 / threads as f64;
                Ok(sample.with("faults_per_thread", faults))
            }
            other => Err(self.unknown_design(other)),
        }
    }
}

/// Runs the program on `threads` threads over the memories `memory(t)` makes.
fn measure<M: Memory>(
    threads: usize,
    config: &Config,
    program: &[Insn],
    memory: impl Fn(usize) -> M + Sync,
) -> Sample {
    let timed = run_timed(threads, config.duration, None, |t| {
        let mut m = Machine::new(program, memory(t));
        assert_eq!(m.run(WARMUP), None, "the array loop never stops");
        move |stop: &Stop| {
            let start = m.steps;
            while !stop.is_set() {
                assert_eq!(m.run(BUDGET), None, "the array loop never stops");
            }
            m.steps - start
        }
    });
    let counts: Vec<ThreadCount> = timed
        .results
        .iter()
        .map(|&ops| ThreadCount {
            ops,
            ..Default::default()
        })
        .collect();
    Sample::from_threads(timed.elapsed, &counts)
}
