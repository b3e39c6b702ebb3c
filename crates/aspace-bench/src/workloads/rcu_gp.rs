//! `rcu-gp`: grace-period latency. Thread 0 calls `Domain::synchronize()` in a loop and records
//! each call's latency; threads 1.. are readers running short read sections over the five-element
//! list in a loop (`memb`: one guard per traversal; `qsbr`: a traversal then `quiescent_state()`
//! every iteration, the most favourable reader for a QSBR writer). So `--threads 1` measures
//! `synchronize()` with no active reader and `--threads 2` with one.
//!
//! One operation is one `synchronize()` call, so `ops_per_sec` is grace periods per second and
//! `ns_per_op` is the mean latency (only thread 0 counts operations). Extras: `median_us` and
//! `p99_us` of the recorded latencies, `readers` (active reader threads), `reader_ops_per_sec`.
//! The synchronising thread is not a registered reader (a QSBR thread that stays online would
//! hold up its own grace period). Reader threads register during setup and stay offline (qsbr)
//! while they wait in the start barrier, coming online only when the measured loop starts.
//!
//! Not for: reclamation throughput (`rcu-update` measures `defer_free` under load).

use super::list::{Quiesce, RcuList};
use crate::error::BenchError;
use crate::harness::{run_timed, Stop};
use crate::measurement::Measurement;
use crate::workload::{Baseline, Config, Sample, ThreadCount, Workload};
use aspace_rcu::{Domain, Memb, Qsbr};
use std::hint::black_box;
use std::time::Instant;

/// The `rcu-gp` workload.
pub struct RcuGp;

impl Workload for RcuGp {
    fn name(&self) -> &'static str {
        "rcu-gp"
    }
    fn about(&self) -> &'static str {
        "thread 0 times synchronize() while threads 1.. run short read sections"
    }
    fn report_as_latency(&self) -> bool {
        true
    }
    fn designs(&self) -> &'static [&'static str] {
        &["memb", "qsbr"]
    }
    fn baseline(&self) -> Option<Baseline> {
        None
    }
    fn thread_scaling(&self, _m: &Measurement) -> bool {
        false
    }
    fn run(&self, design: &str, threads: usize, config: &Config) -> Result<Sample, BenchError> {
        match design {
            "memb" => Ok(run_flavor::<Memb>(threads, config)),
            "qsbr" => Ok(run_flavor::<Qsbr>(threads, config)),
            other => Err(self.unknown_design(other)),
        }
    }
}

/// What one thread of the run returns.
enum Counted {
    /// Thread 0: nanoseconds of each `synchronize()` call.
    Latencies(Vec<u64>),
    /// Threads 1..: read sections completed.
    Reads(u64),
}

fn run_flavor<F: Quiesce>(threads: usize, config: &Config) -> Sample {
    let domain = Domain::<F>::new();
    let list = RcuList::new(&domain);
    let timed = run_timed(threads, config.duration, None, |t| {
        // Registered in setup, then parked (qsbr: offline) while the thread blocks in the start
        // barrier: an online qsbr reader asleep there would stall the first grace periods.
        let reader = (t > 0).then(|| {
            let mut r = domain.register();
            F::park(&mut r);
            r
        });
        let (domain, list) = (&domain, &list);
        move |stop: &Stop| match reader {
            None => {
                let mut lat = Vec::with_capacity(1 << 16);
                while !stop.is_set() {
                    let start = Instant::now();
                    domain.synchronize();
                    lat.push(start.elapsed().as_nanos() as u64);
                }
                Counted::Latencies(lat)
            }
            Some(mut reader) => {
                F::unpark(&mut reader);
                let mut n = 0;
                while !stop.is_set() {
                    {
                        let g = reader.read();
                        black_box(list.sum(&g));
                    }
                    F::quiesce(&mut reader);
                    n += 1;
                }
                Counted::Reads(n)
            }
        }
    });
    let mut lat = Vec::new();
    let mut reads = 0;
    for r in timed.results {
        match r {
            Counted::Latencies(l) => lat = l,
            Counted::Reads(n) => reads += n,
        }
    }
    let counts = [ThreadCount {
        ops: lat.len() as u64,
        ..Default::default()
    }];
    lat.sort_unstable();
    let pct = |p: f64| -> f64 {
        if lat.is_empty() {
            return f64::NAN;
        }
        let i = ((lat.len() - 1) as f64 * p).round() as usize;
        lat[i] as f64 / 1e3
    };
    Sample::from_threads(timed.elapsed, &counts)
        .with("median_us", pct(0.5))
        .with("p99_us", pct(0.99))
        .with("readers", threads.saturating_sub(1) as f64)
        .with(
            "reader_ops_per_sec",
            reads as f64 / timed.elapsed.as_secs_f64(),
        )
}
