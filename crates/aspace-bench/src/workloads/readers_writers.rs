//! `readers-writers` [RadixVM §5.5, Fig. 6-7]: lookups of present keys while `--writers k`
//! threads insert and delete unrelated keys, per interval map.
//!
//! RadixVM's experiment: "an address space with 1,000 regions; readers continuously lookup a
//! random key that is present (like a pagefault) while zero or more cores modify the data
//! structure by continuously inserting a random key that is not present (mmap) and then deleting
//! that key (munmap)". It shows whether writes to unrelated keys cost the readers cache-line
//! transfers (RadixVM's skip list: yes; its radix tree: no).
//!
//! Setup (untimed): the coordinator maps a population of [`POPULATION`] intervals into arena 0
//! (the `arena.rs` layout). Threads `0..threads - k` are readers: each precomputes one random
//! address inside every population interval, shuffled (`SmallRng` seeded by thread id). The
//! last `k` threads are writers: writer `t` works in its own arena `t`, far from the population,
//! on [`WRITER_KEYS`] key slots in a shuffled order. Runs need `threads > k` (at least one
//! reader); `--writers 0` measures readers alone.
//!
//! Measured loops: a reader queries the next address (one read guard per query for the RCU
//! maps; a miss is a bug and is reported as the extra `misses`); a writer inserts the next key
//! (`map(key, Some(v))`) and deletes it again (`map(key, None)`), so the map holds the population
//! plus at most one key per writer.
//!
//! Reported: `ops_per_sec` is the readers' total lookups per second (and `ns_per_op` the
//! per-reader latency); extras `reader_ops_per_sec` (the same), `writer_ops_per_sec` (inserts
//! plus deletes per second, all writers; RadixVM counts insert/delete *pairs*, half of it),
//! `readers` and `writers`.
//!
//! Designs: `btree`, `bonsai`, `skiplist`, `radix` (the contract maps of `arena.rs`, the skiplist
//! with one arena per thread; `radix` is the RadixVM radix tree of this very experiment, whose
//! lookups write nothing and whose writer, in its own arena, writes no line a lookup reads once
//! the writer's path is expanded) and `crossbeam-skipmap`, an external anchor for point operations: a
//! `crossbeam_skiplist::SkipMap<start, (end, value)>` keyed by interval start, where a lookup is
//! `range(..=addr).next_back()` plus the end check and writers `insert`/`remove` by start. It is
//! a lock-free skiplist like RadixVM's, but not an interval map (no overlap handling, no alloc);
//! note that its `Entry` handles are reference-counted, so its lookups write the node they return.
//!
//! What it shows (2 threads, 1 reader + 1 writer, this 2-core machine): `btree`'s reader all but
//! starves (about 0.27 M lookups/s against 7 M writer ops/s: the writer re-takes the one
//! `RwLock` for writing back to back), while the RCU maps keep lookups near their unloaded speed
//! (`bonsai` and `skiplist` about 27-30 M/s, `crossbeam-skipmap` about 18 M/s).
//!
//! Not for: writers that touch the readers' intervals (the conformance stress tests cover
//! correctness under such races) or address-space semantics.

use super::arena::{self, ArenaMap, MapBench};
use crate::error::BenchError;
use crate::harness::{run_timed, Stop};
use crate::workload::{Baseline, Config, Sample, ThreadCount, Workload};
use aspace_map::{Interval, IntervalMap};
use crossbeam_skiplist::SkipMap;
use rand::rngs::SmallRng;
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};
use std::hint::black_box;

/// Intervals the readers look up (RadixVM: "1,000 regions").
pub const POPULATION: usize = 1_000;

/// Key slots each writer cycles through in its own arena.
pub const WRITER_KEYS: usize = 1_000;

/// The designs, baseline first.
pub const DESIGNS: &[&str] = &["btree", "bonsai", "skiplist", "radix", "crossbeam-skipmap"];

/// The `readers-writers` workload.
pub struct ReadersWriters;

impl Workload for ReadersWriters {
    fn name(&self) -> &'static str {
        "readers-writers"
    }
    fn about(&self) -> &'static str {
        "query 1,000 present intervals while --writers threads insert/delete unrelated keys \
         [RadixVM Fig. 6]"
    }
    fn mirrors(&self) -> Option<&'static str> {
        Some("RadixVM §5.5, Fig. 6-7")
    }
    fn designs(&self) -> &'static [&'static str] {
        DESIGNS
    }
    fn baseline(&self) -> Option<Baseline> {
        Some(arena::BASELINE)
    }
    fn min_threads(&self, config: &Config) -> usize {
        config.writers + 1
    }
    fn run(&self, design: &str, threads: usize, config: &Config) -> Result<Sample, BenchError> {
        if threads <= config.writers {
            return Err(BenchError::InvalidArgument(format!(
                "readers-writers needs more threads than --writers ({} <= {})",
                threads, config.writers
            )));
        }
        match design {
            "crossbeam-skipmap" => Ok(measure(&CrossbeamSkipMap::default(), threads, config)),
            _ => arena::dispatch(self, self, design, threads, config),
        }
    }
}

impl MapBench for ReadersWriters {
    fn run_map<M: ArenaMap>(&self, map: M, threads: usize, config: &Config) -> Sample {
        measure(&Contract(map), threads, config)
    }
}

/// The operations this workload needs, over the contract maps and the crossbeam anchor.
trait PointMap: Sync {
    /// A thread's read-side registration.
    type Reader;
    /// Registers the calling thread as a reader.
    fn reader(&self) -> Self::Reader;
    /// Whether `addr` lies in a present interval (the interval and value are `black_box`ed).
    fn query(&self, reader: &Self::Reader, addr: u64) -> bool;
    /// Inserts `iv` (absent) with `value`.
    fn insert(&self, iv: Interval, value: u64);
    /// Deletes `iv` (present).
    fn remove(&self, iv: Interval);
}

/// An `IntervalMap` of this crate's designs.
struct Contract<M>(M);

impl<M: IntervalMap<u64>> PointMap for Contract<M> {
    type Reader = aspace_rcu::Reader;

    fn reader(&self) -> Self::Reader {
        self.0.domain().register()
    }

    #[inline]
    fn query(&self, reader: &Self::Reader, addr: u64) -> bool {
        let g = reader.read();
        let hit = match self.0.query(addr, &g) {
            Some((iv, v)) => {
                black_box((iv, *v));
                true
            }
            None => false,
        };
        hit
    }

    fn insert(&self, iv: Interval, value: u64) {
        self.0
            .map(iv.start..iv.end, Some(value))
            .expect("writer keys are valid");
    }

    fn remove(&self, iv: Interval) {
        self.0
            .map(iv.start..iv.end, None)
            .expect("writer keys are valid");
    }
}

/// `crossbeam_skiplist::SkipMap` keyed by interval start, valued by (end, value).
#[derive(Default)]
struct CrossbeamSkipMap(SkipMap<u64, (u64, u64)>);

impl PointMap for CrossbeamSkipMap {
    type Reader = ();

    fn reader(&self) {}

    #[inline]
    fn query(&self, _: &(), addr: u64) -> bool {
        match self.0.range(..=addr).next_back() {
            Some(e) => {
                let (end, v) = *e.value();
                black_box((*e.key(), end, v));
                addr < end
            }
            None => false,
        }
    }

    fn insert(&self, iv: Interval, value: u64) {
        self.0.insert(iv.start, (iv.end, value));
    }

    fn remove(&self, iv: Interval) {
        self.0.remove(&iv.start);
    }
}

/// What a thread does in the measured window.
enum Role<R> {
    /// Its registration and its shuffled lookup addresses.
    Reader(R, Vec<u64>),
    /// Its shuffled key slots.
    Writer(Vec<Interval>),
}

/// One repeat on `map` (empty): populate, run readers and writers, report both rates.
fn measure<P: PointMap>(map: &P, threads: usize, config: &Config) -> Sample {
    let readers = threads - config.writers;
    let population = arena::population(0, POPULATION);
    for (i, &iv) in population.iter().enumerate() {
        map.insert(iv, i as u64);
    }
    let timed = run_timed(threads, config.duration, None, |t| {
        let mut rng = SmallRng::seed_from_u64(t as u64 + 1);
        let role = if t < readers {
            let mut addrs: Vec<u64> = population
                .iter()
                .map(|iv| iv.start + rng.gen_range(0..iv.len()))
                .collect();
            addrs.shuffle(&mut rng);
            Role::Reader(map.reader(), addrs)
        } else {
            let mut keys = arena::population(t, WRITER_KEYS);
            keys.shuffle(&mut rng);
            Role::Writer(keys)
        };
        move |stop: &Stop| {
            let (mut i, mut misses) = (0, 0u64);
            let ops = match role {
                Role::Reader(reader, addrs) => stop.count_batched(|| {
                    if !map.query(&reader, addrs[i]) {
                        misses += 1;
                    }
                    i += 1;
                    if i == addrs.len() {
                        i = 0;
                    }
                }),
                Role::Writer(keys) => {
                    let pairs = stop.count_batched(|| {
                        let key = keys[i];
                        map.insert(key, i as u64);
                        map.remove(key);
                        i += 1;
                        if i == keys.len() {
                            i = 0;
                        }
                    });
                    2 * pairs
                }
            };
            (ops, misses)
        }
    });
    let count = |r: &(u64, u64)| ThreadCount {
        ops: r.0,
        ..Default::default()
    };
    let reader_counts: Vec<ThreadCount> = timed.results[..readers].iter().map(count).collect();
    let writer_counts: Vec<ThreadCount> = timed.results[readers..].iter().map(count).collect();
    let misses: u64 = timed.results[..readers].iter().map(|r| r.1).sum();
    let reads = Sample::from_threads(timed.elapsed, &reader_counts);
    let writer_rate = Sample::from_threads(timed.elapsed, &writer_counts).ops_per_sec;
    let s = reads
        .clone()
        .with("reader_ops_per_sec", reads.ops_per_sec)
        .with("writer_ops_per_sec", writer_rate)
        .with("readers", readers as f64)
        .with("writers", config.writers as f64);
    if misses > 0 {
        s.with("misses", misses as f64)
    } else {
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn crossbeam_anchor_finds_addresses_inside_intervals_only() {
        let m = CrossbeamSkipMap::default();
        let iv = Interval::new(0x10_000, 0x12_000).unwrap();
        m.insert(iv, 7);
        assert!(m.query(&(), 0x10_000));
        assert!(m.query(&(), 0x11_fff));
        assert!(!m.query(&(), 0x12_000));
        assert!(!m.query(&(), 0xf_fff));
        m.remove(iv);
        assert!(!m.query(&(), 0x10_000));
    }

    #[test]
    fn writer_keys_stay_away_from_the_readers_population() {
        let pop = arena::population(0, POPULATION);
        let last = pop.last().unwrap();
        for t in 1..4 {
            let keys = arena::population(t, WRITER_KEYS);
            assert!(keys
                .iter()
                .all(|k| k.start >= last.end + arena::ARENA_SIZE / 2));
        }
    }
}
