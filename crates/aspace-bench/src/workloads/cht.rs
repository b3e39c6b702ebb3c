//! `cht`, `cht-update10`, `cht-read-heavy`, `cht-resize` [thesis (RCU for HelenOS) §6.4-6.5,
//! Figs. 6.4-6.5]: hash table lookups, and lookups mixed with updates, against tables Rust
//! users would pick instead.
//!
//! As in the thesis, each thread works on its own group of keys (so any contention comes from
//! the tables, not the access pattern): a universe of `2 * ITEMS_PER_THREAD` keys of which half
//! are present at the start. A lookup picks a random key of the universe (so about half hit);
//! an update picks a random key and removes it if present, else inserts it (the thesis' Fig.
//! 6.5 update: a thread-local bitmap tracks presence, so the table stays near its size and
//! inserts and removes are equally likely). The workloads:
//! - `cht` (Fig. 6.4): lookups only; the thesis' table shape (load 4 per bucket: 128 buckets at
//!   one thread's 512 items).
//! - `cht-update10` (Fig. 6.5 at 10%): 10% updates.
//! - `cht-read-heavy` (the shape Rust map benchmarks use): 98% lookups, 1% inserts, 1% removes
//!   (2% toggles).
//! - `cht-resize`: as `cht-update10`, while a further thread (not measured) grows and shrinks
//!   the CHT back and forth all the time: the resize running under load (lookups and updates
//!   help it and walk around it). Other designs run the same operations without a forced
//!   resize (dashmap, papaya and scc resize by themselves as they need). Extra: `resizes`.
//!
//! Designs (all with the same fast multiplicative hasher, [`FxBuild`]):
//! - `bucket-locks` (the baseline, the thesis' `ht/bkt-locks`): a fixed table of an odd number
//!   of buckets (items / 4), each a `Vec` behind its own `parking_lot::Mutex`, indexed by the
//!   hash modulo the bucket count;
//! - `cht`: [`aspace_map::Cht`] (a reader registered per thread, a read section per lookup);
//! - `one-lock` (`ht/spinlock`): `parking_lot::RwLock<std::collections::HashMap>`;
//! - `dashmap`: `dashmap::DashMap` (sharded `RwLock`s);
//! - `papaya`: `papaya::HashMap` (lock-free, seize-based reclamation; pinned per operation);
//! - `scc`: `scc::HashIndex` (lock-free reads, `sdd` epoch reclamation).
//!
//! Not for: tables with contended keys, or the correctness of the tables (aspace-map's tests).

use crate::error::BenchError;
use crate::harness::{run_timed, Stop};
use crate::workload::{Baseline, Config, RatioStyle, Sample, ThreadCount, Workload};
use aspace_map::{Cht, ChtConfig};
use aspace_rcu::{Domain, Reader};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use std::collections::HashMap;
use std::hash::{BuildHasher, Hasher};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

/// The designs, baseline first.
pub const DESIGNS: &[&str] = &[
    "bucket-locks",
    "cht",
    "one-lock",
    "dashmap",
    "papaya",
    "scc",
];

/// Items each thread keeps present (of a universe twice as large): the thesis' 512 items.
pub const ITEMS_PER_THREAD: usize = 512;

/// One of the `cht*` workloads: per-mille of operations that are updates, and whether a
/// resizer thread runs beside them.
pub struct ChtBench {
    name: &'static str,
    about: &'static str,
    mirrors: Option<&'static str>,
    update_permille: u32,
    resize: bool,
}

/// `cht`: lookups only (Fig. 6.4).
pub const CHT: ChtBench = ChtBench {
    name: "cht",
    about: "hash table lookups, half hits, per-thread keys; CHT vs locks and dashmap/papaya/scc [thesis Fig. 6.4]",
    mirrors: Some("thesis (RCU for HelenOS) §6.4, Fig. 6.4"),
    update_permille: 0,
    resize: false,
};
/// `cht-update10`: 10% updates (Fig. 6.5).
pub const CHT_UPDATE10: ChtBench = ChtBench {
    name: "cht-update10",
    about: "hash table: 90% lookups, 10% inserts/removes [thesis Fig. 6.5 at 10%]",
    mirrors: Some("thesis (RCU for HelenOS) §6.5, Fig. 6.5"),
    update_permille: 100,
    resize: false,
};
/// `cht-read-heavy`: 98% lookups, 1% inserts, 1% removes.
pub const CHT_READ_HEAVY: ChtBench = ChtBench {
    name: "cht-read-heavy",
    about: "hash table: 98% lookups, 1% inserts, 1% removes (the usual Rust map benchmark mix)",
    mirrors: None,
    update_permille: 20,
    resize: false,
};
/// `cht-resize`: 10% updates while the CHT grows and shrinks all the time.
pub const CHT_RESIZE: ChtBench = ChtBench {
    name: "cht-resize",
    about: "hash table: 90% lookups, 10% updates while a thread keeps resizing the CHT",
    mirrors: Some("thesis (RCU for HelenOS) §5.1.2 (resize concurrent with updates)"),
    update_permille: 100,
    resize: true,
};

impl Workload for ChtBench {
    fn name(&self) -> &'static str {
        self.name
    }
    fn about(&self) -> &'static str {
        self.about
    }
    fn mirrors(&self) -> Option<&'static str> {
        self.mirrors
    }
    fn designs(&self) -> &'static [&'static str] {
        DESIGNS
    }
    fn baseline(&self) -> Option<Baseline> {
        Some(Baseline {
            design: "bucket-locks",
            style: RatioStyle::TimesVs,
        })
    }
    fn run(&self, design: &str, threads: usize, config: &Config) -> Result<Sample, BenchError> {
        if threads == 0 {
            return Err(BenchError::InvalidArgument(
                "cht needs at least one thread".into(),
            ));
        }
        let items = ITEMS_PER_THREAD * threads;
        let p = self.update_permille;
        match design {
            "bucket-locks" => Ok(measure(&BucketLocks::new(items), threads, p, config)),
            "cht" => {
                let order = (items / 4).max(1).next_power_of_two().trailing_zeros();
                let cfg = ChtConfig {
                    initial_order: order,
                    min_order: order.saturating_sub(2),
                    max_order: order + 2,
                    max_load: 4,
                    auto_resize: !self.resize,
                };
                let table: Cht<u64, u64, FxBuild> = Cht::with_config(Domain::new(), cfg, FxBuild);
                if !self.resize {
                    return Ok(measure(&table, threads, p, config));
                }
                let stop = AtomicBool::new(false);
                let resizes = AtomicU64::new(0);
                let sample = std::thread::scope(|s| {
                    s.spawn(|| {
                        let mut up = true;
                        while !stop.load(Ordering::Relaxed) {
                            let ok = if up { table.grow() } else { table.shrink() };
                            if ok {
                                resizes.fetch_add(1, Ordering::Relaxed);
                            } else {
                                up = !up;
                            }
                        }
                    });
                    let sample = measure(&table, threads, p, config);
                    stop.store(true, Ordering::Relaxed);
                    sample
                });
                Ok(sample.with("resizes", resizes.load(Ordering::Relaxed) as f64))
            }
            "one-lock" => {
                let m = parking_lot::RwLock::new(HashMap::with_capacity_and_hasher(items, FxBuild));
                Ok(measure(&m, threads, p, config))
            }
            "dashmap" => {
                let m = dashmap::DashMap::with_capacity_and_hasher(items, FxBuild);
                Ok(measure(&m, threads, p, config))
            }
            "papaya" => {
                let m = papaya::HashMap::with_capacity_and_hasher(items, FxBuild);
                Ok(measure(&m, threads, p, config))
            }
            "scc" => {
                let m = scc::HashIndex::with_capacity_and_hasher(items, FxBuild);
                Ok(measure(&m, threads, p, config))
            }
            other => Err(self.unknown_design(other)),
        }
    }
}

/// A table under test: lookups, inserts of absent keys and removes of present ones, through a
/// per-thread session (the CHT's RCU reader; nothing for the others).
trait Table: Sync {
    type Session<'a>
    where
        Self: 'a;
    fn session(&self) -> Self::Session<'_>;
    fn get(&self, s: &Self::Session<'_>, k: u64) -> bool;
    fn insert(&self, s: &Self::Session<'_>, k: u64);
    fn remove(&self, s: &Self::Session<'_>, k: u64);
}

/// Runs the mix: each thread prefills its even keys (before the start barrier), then loops.
fn measure<T: Table>(table: &T, threads: usize, update_permille: u32, config: &Config) -> Sample {
    let universe = 2 * ITEMS_PER_THREAD;
    let timed = run_timed(threads, config.duration, None, |t| {
        let session = table.session();
        let base = (t as u64) << 32;
        let mut present = vec![false; universe];
        for (i, p) in present.iter_mut().enumerate().step_by(2) {
            table.insert(&session, base | i as u64);
            *p = true;
        }
        let mut rng = SmallRng::seed_from_u64(t as u64 + 1);
        move |stop: &Stop| {
            stop.count_batched(|| {
                let i = rng.gen_range(0..universe);
                let k = base | i as u64;
                if update_permille > 0 && rng.gen_range(0..1000) < update_permille {
                    if present[i] {
                        table.remove(&session, k);
                    } else {
                        table.insert(&session, k);
                    }
                    present[i] = !present[i];
                } else {
                    std::hint::black_box(table.get(&session, k));
                }
            })
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

/// A fast multiplicative hasher (FxHash's step), shared by every design so that the hash
/// function is not what is compared. The CHT mixes its output (its design needs good top bits).
#[derive(Clone, Copy, Default)]
pub struct FxBuild;

/// [`FxBuild`]'s hasher.
#[derive(Default)]
pub struct FxHasher(u64);

impl Hasher for FxHasher {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.write_u64(u64::from(b));
        }
    }
    fn write_u64(&mut self, x: u64) {
        self.0 = (self.0.rotate_left(5) ^ x).wrapping_mul(0x51_7c_c1_b7_27_22_0a_95);
    }
}

impl BuildHasher for FxBuild {
    type Hasher = FxHasher;
    fn build_hasher(&self) -> FxHasher {
        FxHasher(0)
    }
}

/// `bucket-locks`: a fixed array of buckets, each behind its own lock (thesis `ht/bkt-locks`).
pub struct BucketLocks {
    buckets: Box<[Bucket]>,
}

/// One bucket of [`BucketLocks`]: its items behind its lock.
type Bucket = parking_lot::Mutex<Vec<(u64, u64)>>;

impl BucketLocks {
    /// A table for about `items` items at 4 per bucket (an odd bucket count, hash modulo it).
    pub fn new(items: usize) -> Self {
        let n = (items / 4) | 1;
        BucketLocks {
            buckets: (0..n)
                .map(|_| parking_lot::Mutex::new(Vec::new()))
                .collect(),
        }
    }

    fn bucket(&self, k: u64) -> &Bucket {
        let h = FxBuild.hash_one(k);
        &self.buckets[(h % self.buckets.len() as u64) as usize]
    }
}

impl Table for BucketLocks {
    type Session<'a> = ();
    fn session(&self) {}
    fn get(&self, _: &(), k: u64) -> bool {
        self.bucket(k).lock().iter().any(|e| e.0 == k)
    }
    fn insert(&self, _: &(), k: u64) {
        self.bucket(k).lock().push((k, k));
    }
    fn remove(&self, _: &(), k: u64) {
        let mut b = self.bucket(k).lock();
        if let Some(i) = b.iter().position(|e| e.0 == k) {
            b.swap_remove(i);
        }
    }
}

impl Table for Cht<u64, u64, FxBuild> {
    type Session<'a> = Reader;
    fn session(&self) -> Reader {
        self.domain().register()
    }
    fn get(&self, r: &Reader, k: u64) -> bool {
        self.get(&k, &r.read()).is_some()
    }
    fn insert(&self, _: &Reader, k: u64) {
        Cht::insert(self, k, k);
    }
    fn remove(&self, _: &Reader, k: u64) {
        Cht::remove(self, &k);
    }
}

impl Table for parking_lot::RwLock<HashMap<u64, u64, FxBuild>> {
    type Session<'a> = ();
    fn session(&self) {}
    fn get(&self, _: &(), k: u64) -> bool {
        self.read().contains_key(&k)
    }
    fn insert(&self, _: &(), k: u64) {
        self.write().insert(k, k);
    }
    fn remove(&self, _: &(), k: u64) {
        self.write().remove(&k);
    }
}

impl Table for dashmap::DashMap<u64, u64, FxBuild> {
    type Session<'a> = ();
    fn session(&self) {}
    fn get(&self, _: &(), k: u64) -> bool {
        self.contains_key(&k)
    }
    fn insert(&self, _: &(), k: u64) {
        dashmap::DashMap::insert(self, k, k);
    }
    fn remove(&self, _: &(), k: u64) {
        dashmap::DashMap::remove(self, &k);
    }
}

impl Table for papaya::HashMap<u64, u64, FxBuild> {
    type Session<'a> = ();
    fn session(&self) {}
    fn get(&self, _: &(), k: u64) -> bool {
        self.pin().contains_key(&k)
    }
    fn insert(&self, _: &(), k: u64) {
        self.pin().insert(k, k);
    }
    fn remove(&self, _: &(), k: u64) {
        self.pin().remove(&k);
    }
}

impl Table for scc::HashIndex<u64, u64, FxBuild> {
    type Session<'a> = ();
    fn session(&self) {}
    fn get(&self, _: &(), k: u64) -> bool {
        self.peek_with(&k, |_, _| ()).is_some()
    }
    fn insert(&self, _: &(), k: u64) {
        let _ = scc::HashIndex::insert(self, k, k);
    }
    fn remove(&self, _: &(), k: u64) {
        scc::HashIndex::remove(self, &k);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn every_design_runs_every_mix() {
        let config = Config {
            duration: Duration::from_millis(5),
            ..Config::default()
        };
        for w in [&CHT, &CHT_UPDATE10, &CHT_READ_HEAVY, &CHT_RESIZE] {
            for design in DESIGNS {
                assert!(
                    w.run(design, 2, &config).unwrap().ops_per_sec > 0.0,
                    "{design}"
                );
            }
            assert!(w.run("nope", 1, &config).is_err());
        }
    }
}
