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
//! Hot path: nothing shared is written. The address array, its index and the miss count are the
//! thread's own (stack and its own heap allocation); the stop flag is read every `BATCH`
//! queries; the memb read guard writes only the reader's own cache-padded slot; `bonsai`,
//! `skiplist` and `radix` lookups only load (no RMW; `radix`: one load per level, six levels),
//! `btree` lookups write its `RwLock` word (why it does not scale).
//!
//! Scaling caveat: every thread's arena lives in the ONE map, so the 1-thread and 2-thread
//! points query different trees, and the 2T/1T ratio measures the trees as much as the map's
//! concurrency. Measured for `bonsai` (CHANGELOG.md has the figures): 2 threads on one shared
//! tree cost per query exactly the mean of 1 thread querying each of the two arenas of that same
//! tree, so the sharing itself costs nothing, and 2 threads on two private trees scale ~2x. What
//! differs is the shape: at 2T each query descends one more level on average (which alone caps
//! scaling near 2 x depth(1T) / depth(2T) with a cache-resident tree), and the shape that
//! ascending inserts from interleaved threads happen to build moves the cost of an arena by up
//! to 2x (inserting arenas midpoint-first instead of in address order changes the ratio). Compare designs at equal thread counts; read the
//! scaling column with this in mind.
//!
//! Not for: lookups that race with updates (the conformance stress tests cover correctness).

use super::arena::{self, ArenaMap, DsWorkload, MapBench};
use crate::harness::{run_timed, Stop};
use crate::workload::{Config, Sample, ThreadCount};
use rand::rngs::SmallRng;
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};
use std::hint::black_box;

/// The `ds-query` workload.
pub struct DsQuery;

impl DsWorkload for DsQuery {
    const NAME: &'static str = "ds-query";
    const ABOUT: &'static str =
        "query random addresses of the thread's own pre-populated arena [SOSP'25 Fig. 12]";
    const MIRRORS: Option<&'static str> = Some("SOSP'25 §7.1, Fig. 12 (Query)");
}

impl MapBench for DsQuery {
    fn run_map<M: ArenaMap>(&self, map: M, threads: usize, config: &Config) -> Sample {
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
