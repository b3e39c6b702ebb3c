//! `access-munmap` (issue 24): the latency of `munmap` on one core while another core runs an
//! access session in a loop, against the same `munmap` while the other core is idle, the
//! latency point of the session's contract (`aspace_vm`'s `session.rs`: a shooter waits for a
//! session at most until its next access).
//!
//! The space uses the `coarse` design, whose shootdowns are broadcast (every registered core is
//! a target of every round, like Linux's IPI to every CPU of the `mm`), so each `munmap` of
//! thread 0 targets the other threads' cores whatever they touched. Thread 0 loops: map one
//! page, write it, unmap it, timing the `munmap` only (one operation). The other threads,
//! by design:
//! - `idle`: attached, no session open, no access: they wait for the end of the run (the
//!   baseline: a shooter never waits for an idle core);
//! - `session`: one session each, 8-byte loads and stores at random offsets of their own
//!   TLB-resident range in a loop (as `access`): each `munmap` finds them inside a window and
//!   waits until their next access takes the request;
//! - `call`: the same loop through the per-call path (`CoreHandle::read`/`write`): a `munmap`
//!   waits at most for the one access in flight.
//!
//! The figure is `ns_per_op` of thread 0 (the report shows this workload as a latency), with
//! `median_ns` and `p99_ns` of the recorded `munmap`s and `waits_per_munmap` (the shootdown
//! waits the space counted per `munmap`). Target (issue 24): `session` within 2x of `idle`.
//!
//! Not for: access throughput (`access`).

use crate::error::BenchError;
use crate::harness::{run_timed, Stop};
use crate::workload::{Baseline, Config, RatioStyle, Sample, ThreadCount, Workload};
use aspace_vm::{AddressSpace, Design, MapFlags, Prot, PAGE_SIZE};
use std::hint::black_box;
use std::time::Instant;

/// The designs, baseline first.
pub const DESIGNS: &[&str] = &["idle", "session", "call"];

/// Pages of each accessing thread's range (TLB-resident, as `access`).
const PAGES: u64 = 32;

/// Most threads.
const MAX_THREADS: usize = 64;

/// The `access-munmap` workload.
pub struct AccessMunmap;

impl Workload for AccessMunmap {
    fn name(&self) -> &'static str {
        "access-munmap"
    }
    fn about(&self) -> &'static str {
        "munmap latency on thread 0 while the others run sessions / per-call accesses / nothing"
    }
    fn designs(&self) -> &'static [&'static str] {
        DESIGNS
    }
    fn baseline(&self) -> Option<Baseline> {
        Some(Baseline {
            design: "idle",
            style: RatioStyle::PercentOf,
        })
    }
    fn report_as_latency(&self) -> bool {
        true
    }
    fn thread_scaling(&self, m: &crate::measurement::Measurement) -> bool {
        let _ = m;
        false
    }
    fn min_threads(&self, config: &Config) -> usize {
        let _ = config;
        2
    }
    fn max_threads(&self) -> usize {
        MAX_THREADS
    }
    fn run(&self, design: &str, threads: usize, config: &Config) -> Result<Sample, BenchError> {
        if !(2..=MAX_THREADS).contains(&threads) {
            return Err(BenchError::InvalidArgument(format!(
                "access-munmap runs on 2 to {MAX_THREADS} threads"
            )));
        }
        if !DESIGNS.contains(&design) {
            return Err(self.unknown_design(design));
        }
        Ok(run(design, threads, config))
    }
}

/// What a thread counted.
enum Counted {
    /// Thread 0: the `munmap` latencies (ns).
    Latencies(Vec<u64>),
    /// The others: accesses.
    Accesses,
}

fn run(design: &str, threads: usize, config: &Config) -> Sample {
    let space = AddressSpace::builder()
        .design(Design::Coarse)
        .memory((threads as u64 * PAGES + 256) * PAGE_SIZE)
        .build()
        .expect("the access-munmap space");
    let timed = run_timed(threads, config.duration, None, |t| {
        let mut h = space.attach().expect("a core");
        let bytes = PAGES * PAGE_SIZE;
        let base = h
            .mmap(0, bytes, Prot::READ_WRITE, MapFlags::PRIVATE_ANONYMOUS)
            .expect("the range");
        for p in 0..PAGES {
            h.write(base + p * PAGE_SIZE, &[1]).expect("touch");
        }
        move |stop: &Stop| {
            if t == 0 {
                let mut lat = Vec::with_capacity(1 << 16);
                while !stop.is_set() {
                    let a = h
                        .mmap(0, PAGE_SIZE, Prot::READ_WRITE, MapFlags::PRIVATE_ANONYMOUS)
                        .expect("a page");
                    h.write(a, &[1]).expect("the page");
                    let start = Instant::now();
                    h.munmap(a, PAGE_SIZE).expect("munmap");
                    lat.push(start.elapsed().as_nanos() as u64);
                }
                return Counted::Latencies(lat);
            }
            let mask = (bytes - 1) & !7;
            let mut x = 0x9e37_79b9_7f4a_7c15u64 ^ (t as u64);
            let mut next = move || {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                base + (x & mask)
            };
            let mut sum = 0u64;
            match design {
                "session" => {
                    let mut s = h.session().expect("a session");
                    while !stop.is_set() {
                        for _ in 0..64 {
                            sum = sum.wrapping_add(s.read_u64(next()).expect("mapped"));
                            s.write_u64(next(), sum).expect("mapped");
                        }
                    }
                }
                "call" => {
                    while !stop.is_set() {
                        for _ in 0..64 {
                            let mut b = [0u8; 8];
                            h.read(next(), &mut b).expect("mapped");
                            sum = sum.wrapping_add(u64::from_le_bytes(b));
                            h.write(next(), &sum.to_le_bytes()).expect("mapped");
                        }
                    }
                }
                _ => {
                    while !stop.is_set() {
                        std::thread::yield_now();
                    }
                }
            }
            black_box(sum);
            Counted::Accesses
        }
    });
    let mut lat = Vec::new();
    for r in timed.results {
        if let Counted::Latencies(l) = r {
            lat = l;
        }
    }
    let counts = [ThreadCount {
        ops: lat.len() as u64,
        ..Default::default()
    }];
    let munmaps = lat.len().max(1) as f64;
    lat.sort_unstable();
    let pct = |p: f64| -> f64 {
        if lat.is_empty() {
            return f64::NAN;
        }
        lat[((lat.len() - 1) as f64 * p).round() as usize] as f64
    };
    let st = space.stats();
    Sample::from_threads(timed.elapsed, &counts)
        .with("median_ns", pct(0.5))
        .with("p99_ns", pct(0.99))
        .with("waits_per_munmap", st.shootdown_waits as f64 / munmaps)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn every_design_runs_and_munmaps() {
        let config = Config {
            duration: Duration::from_millis(5),
            ..Config::default()
        };
        for design in DESIGNS {
            let s = AccessMunmap.run(design, 2, &config).unwrap();
            assert!(s.ops_per_sec >= 0.0, "{design}");
        }
        assert!(AccessMunmap.run("idle", 1, &config).is_err());
        assert!(AccessMunmap.run("nope", 2, &config).is_err());
    }
}
