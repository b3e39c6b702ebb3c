//! `ds-alloc` [SOSP'25 §7.1, Fig. 12 "Alloc"]: first-fit allocation in the thread's own arena,
//! the map-level cost of `mmap` without a hint.
//!
//! Each thread repeatedly allocates 16 KiB in its own arena (`ArenaMap::alloc_own` in `arena.rs`):
//! `btree`, `bonsai` and `radix` through the contract's `map.alloc(arena, 16 KiB, v)`, `skiplist` through
//! the paper's per-core `alloc_in_arena(thread, 16 KiB, v)` (first fit from the arena's hint);
//! allocations are contiguous from the arena's start. A fixed-duration run would otherwise grow the
//! map without bound (and with it the tree height, so the rate would drift), so when a thread holds
//! `--intervals` intervals it *resets*: one `map(arena, None)` removes them all. The reset runs
//! inside the measured window but its time is **excluded** from that thread's rate (each thread's
//! rate is its allocations divided by its measured time minus its own reset time), so `ops_per_sec`
//! counts allocations only. The other thread keeps running during a reset, so with a global writer
//! lock it may wait for it: that contention stays in the numbers. Extras: `resets` (per repeat, all
//! threads) and `excluded_pct` (mean share of a thread's time spent resetting).
//!
//! One operation is one successful `alloc`.
//!
//! What it shows for the current maps: all three find the lowest gap without walking the arena's
//! intervals. `skiplist` starts its walk at the arena's hint (the end of its last allocation; moved
//! back to the arena start by the reset's free) and claims the gap with one CAS under no lock
//! shared with the other arenas (`aspace_map`'s `skiplist/alloc.rs`, `skiplist/arena.rs`). `bonsai`
//! descends its gap augmentation (subtree min start, max end, largest inner gap; `aspace_map`'s
//! `bonsai/augment.rs`) in O(log n); `radix` walks its slots from its per-core hint (the end of
//! its last allocation in this arena; moved back by the reset's free), one slot read per
//! interval, and claims the gap by locking its slots (`aspace_map`'s `radix/alloc.rs`); `btree` keeps a second `BTreeMap` of free gaps under its lock
//! and scans it from `within.start` (O(log n + too-small gaps before the fit); this workload's
//! allocations are contiguous, so the first gap it looks at fits). So the cost per `alloc` grows
//! only logarithmically with `--intervals` (before the augmentation both walked every live
//! interval of the arena; CHANGELOG.md has the figures).
//!
//! Not for: allocation with hints or from a shared arena.

use super::arena::{self, ArenaMap, DsWorkload, MapBench};
use crate::harness::{run_timed, Stop, BATCH};
use crate::workload::{Config, Sample, ThreadCount};
use std::time::{Duration, Instant};

/// Bytes per allocation.
pub const ALLOC_LEN: u64 = 16 << 10;

/// The `ds-alloc` workload.
pub struct DsAlloc;

impl DsWorkload for DsAlloc {
    const NAME: &'static str = "ds-alloc";
    const ABOUT: &'static str =
        "allocate 16 KiB intervals first-fit in the thread's own arena [SOSP'25 Fig. 12]";
    const MIRRORS: Option<&'static str> = Some("SOSP'25 §7.1, Fig. 12 (Alloc)");
}

impl MapBench for DsAlloc {
    fn run_map<M: ArenaMap>(&self, map: M, threads: usize, config: &Config) -> Sample {
        let map = &map;
        let limit = config.intervals as u64;
        let timed = run_timed(threads, config.duration, None, |t| {
            let arena = arena::arena(t);
            move |stop: &Stop| {
                let (mut ops, mut live, mut resets) = (0u64, 0u64, 0u64);
                let mut excluded = Duration::ZERO;
                while !stop.is_set() {
                    for _ in 0..BATCH {
                        map.alloc_own(t, ALLOC_LEN, ops)
                            .expect("the arena has room for --intervals allocations");
                        ops += 1;
                        live += 1;
                        if live == limit {
                            let start = Instant::now();
                            map.map(arena.clone(), None)
                                .expect("the arena is a valid range");
                            excluded += stop.time_inside(start);
                            live = 0;
                            resets += 1;
                        }
                    }
                }
                (ThreadCount { ops, excluded }, resets)
            }
        });
        arena::sample_with_housekeeping(&timed, "resets")
    }
}
