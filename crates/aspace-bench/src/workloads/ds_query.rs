//! `ds-query` [SOSP'25 §7.1, Fig. 12 "Query"]: lookups in the thread's own arena, the map-level
//! cost of a page fault.
//!
//! Setup (untimed, on each thread before the barrier): register an RCU reader with the map's
//! domain, map `--intervals` intervals into the thread's arena (see `arena.rs`), and precompute one
//! random address inside each interval, shuffled (`SmallRng` seeded by thread id), so that no
//! random-number generation sits on the measured path. Measured loop: cycle through the address
//! array; per query one read guard, `map.query(addr, &guard)`, and the interval and value are
//! `black_box`ed.
//!
//! One operation is one query. Every address lies inside a populated interval, so a miss is a map
//! bug: misses are counted and reported as the extra `misses` when there are any.
//!
//! Not for: lookups that race with updates (the conformance stress tests cover correctness).

use super::arena::{self, MapBench};
use crate::error::BenchError;
use crate::harness::{run_timed, Stop};
use crate::workload::{Baseline, Config, Sample, ThreadCount, Workload};
use aspace_map::IntervalMap;
use rand::rngs::SmallRng;
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};
use std::hint::black_box;

/// The `ds-query` workload.
pub struct DsQuery;

impl Workload for DsQuery {
    fn name(&self) -> &'static str {
        "ds-query"
    }
    fn about(&self) -> &'static str {
        "query random addresses of the thread's own pre-populated arena [SOSP'25 Fig. 12]"
    }
    fn designs(&self) -> &'static [&'static str] {
        arena::DESIGNS
    }
    fn baseline(&self) -> Option<Baseline> {
        Some(arena::BASELINE)
    }
    fn run(&self, design: &str, threads: usize, config: &Config) -> Result<Sample, BenchError> {
        arena::dispatch(self, self, design, threads, config)
    }
}

impl MapBench for DsQuery {
    fn run_map<M: IntervalMap<u64>>(&self, map: M, threads: usize, config: &Config) -> Sample {
        let map = &map;
        let timed = run_timed(threads, config.duration, None, |t| {
            let reader = map.domain().register();
            let ivs = arena::population(t, config.intervals);
            arena::populate(map, &ivs);
            let mut rng = SmallRng::seed_from_u64(t as u64 + 1);
            let mut addrs: Vec<u64> = ivs
                .iter()
                .map(|iv| iv.start + rng.gen_range(0..iv.len()))
                .collect();
            addrs.shuffle(&mut rng);
            move |stop: &Stop| {
                let (mut i, mut misses) = (0, 0u64);
                let ops = stop.count_batched(|| {
                    let addr = addrs[i];
                    i += 1;
                    if i == addrs.len() {
                        i = 0;
                    }
                    let g = reader.read();
                    match map.query(addr, &g) {
                        Some((iv, v)) => {
                            black_box((iv, *v));
                        }
                        None => misses += 1,
                    };
                });
                (ops, misses)
            }
        });
        let misses: u64 = timed.results.iter().map(|r| r.1).sum();
        let counts: Vec<ThreadCount> = timed
            .results
            .iter()
            .map(|r| ThreadCount {
                ops: r.0,
                ..Default::default()
            })
            .collect();
        let s = Sample::from_threads(timed.elapsed, &counts);
        if misses > 0 {
            s.with("misses", misses as f64)
        } else {
            s
        }
    }
}
