//! `ds-map` [SOSP'25 §7.1, Fig. 12 "Map" with value NULL]: removal of intervals from the
//! thread's own arena, the map-level cost of `munmap`.
//!
//! Setup (untimed): each thread maps `--intervals` intervals into its arena (see `arena.rs`) and
//! shuffles the removal order (`SmallRng` seeded by thread id). Measured loop: `map(range, None)`
//! on the next interval of the order. When a thread has removed its whole population it
//! *re-populates* it (the same intervals, mapped again in address order) and starts over with the
//! same order. Re-population runs inside the measured window but its time is **excluded** from
//! that thread's rate (rate = removals / (measured time - own re-population time)), so
//! `ops_per_sec` counts removals only; contention that re-population causes on the other thread
//! stays in the numbers. Extras: `repopulations` (per repeat, all threads) and `excluded_pct`
//! (mean share of a thread's time spent re-populating).
//!
//! One operation is one `map(range, None)` that removes one whole interval.
//!
//! Not for: partial unmaps that split intervals (the conformance tests cover those).

use super::arena::{self, ArenaMap, DsWorkload, MapBench};
use crate::harness::{run_timed, Stop, BATCH};
use crate::workload::{Config, Sample, ThreadCount};
use rand::rngs::SmallRng;
use rand::seq::SliceRandom;
use rand::SeedableRng;
use std::time::{Duration, Instant};

/// The `ds-map` workload.
pub struct DsMap;

impl DsWorkload for DsMap {
    const NAME: &'static str = "ds-map";
    const ABOUT: &'static str =
        "remove (map to None) random intervals of the thread's own arena [SOSP'25 Fig. 12]";
    const MIRRORS: Option<&'static str> = Some("SOSP'25 §7.1, Fig. 12 (Map)");
}

impl MapBench for DsMap {
    fn run_map<M: ArenaMap>(&self, map: M, threads: usize, config: &Config) -> Sample {
        let map = &map;
        let timed = run_timed(threads, config.duration, None, |t| {
            let ivs = arena::population(t, config.intervals);
            arena::populate(map, &ivs);
            let mut order = ivs.clone();
            order.shuffle(&mut SmallRng::seed_from_u64(t as u64 + 1));
            move |stop: &Stop| {
                let (mut ops, mut i, mut repops) = (0u64, 0usize, 0u64);
                let mut excluded = Duration::ZERO;
                while !stop.is_set() {
                    for _ in 0..BATCH {
                        let iv = order[i];
                        map.map(iv.start..iv.end, None)
                            .expect("population intervals are valid");
                        ops += 1;
                        i += 1;
                        if i == order.len() {
                            let start = Instant::now();
                            arena::populate(map, &ivs);
                            excluded += stop.time_inside(start);
                            i = 0;
                            repops += 1;
                        }
                    }
                }
                (ThreadCount { ops, excluded }, repops)
            }
        });
        arena::sample_with_housekeeping(&timed, "repopulations")
    }
}
