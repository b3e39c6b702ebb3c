//! `refcount` [RadixVM §5.5, Fig. 8]: the cost of reference counting one shared page that every
//! thread maps and unmaps, in isolation (the paper's "page sharing" microbenchmark).
//!
//! One object stands for the shared physical page; a base reference (the page's allocation)
//! keeps it alive throughout. Every thread `t` takes a reference and gives it back in a loop, as
//! mapping and then unmapping the page would; one operation is one such pair. Designs, one
//! counter each, baseline first:
//! - `atomic`: one shared `AtomicU64`, incremented and decremented with one atomic instruction
//!   each (the paper's "shared counter"): every operation writes the one shared line;
//! - `refcache`: `aspace_sync::Refcache` with the default configuration (1024-entry delta
//!   caches, 10 ms epochs): `Core::get` / `Core::put` on thread `t`'s core touch only its own
//!   cache; the counts meet the object's global count only at the periodic flushes;
//! - `snzi`: `aspace_sync::Snzi`, a tree of non-zero indicators with a leaf per thread: a thread
//!   whose leaf stays above zero does not reach the root, but each pair here takes its leaf from
//!   zero to one and back, so every operation climbs to the root (the bottleneck the paper
//!   reports at 10 cores).
//!
//! Like the paper's shared counter and SNZI, `atomic` and `snzi` detect a zero at once; Refcache
//! detects it two to three epochs late, which is what lets it scale.
//!
//! Extras: `epochs` (Refcache epochs that ended during the measurement; 0 for the others) and
//! `frees` (times the count reached zero during the measurement: 0 is expected, the base
//! reference is held; checked after every repeat).
//!
//! Not for: the counters' correctness (aspace-sync's tests and loom models) or a whole
//! address-space operation (the VM workloads).

use crate::error::BenchError;
use crate::harness::{run_timed, Stop};
use crate::workload::{Baseline, Config, RatioStyle, Sample, ThreadCount, Workload};
use aspace_sync::{CachePadded, Refcache, Snzi};
use std::sync::atomic::{AtomicU64, Ordering};

/// The designs, baseline first.
pub const DESIGNS: &[&str] = &["atomic", "refcache", "snzi"];

/// The `refcount` workload.
pub struct Refcount;

/// The shared page's contents (never read: only its count matters).
struct Page([u8; 64]);

impl Workload for Refcount {
    fn name(&self) -> &'static str {
        "refcount"
    }
    fn about(&self) -> &'static str {
        "take and drop a reference to one shared page (map/unmap) [RadixVM Fig. 8]"
    }
    fn mirrors(&self) -> Option<&'static str> {
        Some("RadixVM §5.5, Fig. 8 (page sharing: Refcache vs shared counter vs SNZI)")
    }
    fn designs(&self) -> &'static [&'static str] {
        DESIGNS
    }
    fn baseline(&self) -> Option<Baseline> {
        Some(Baseline {
            design: "atomic",
            style: RatioStyle::TimesVs,
        })
    }
    fn run(&self, design: &str, threads: usize, config: &Config) -> Result<Sample, BenchError> {
        if threads == 0 {
            return Err(BenchError::InvalidArgument(
                "refcount needs at least one thread".to_string(),
            ));
        }
        match design {
            "atomic" => Ok(atomic(threads, config)),
            "refcache" => Ok(refcache(threads, config)),
            "snzi" => Ok(snzi(threads, config)),
            other => Err(self.unknown_design(other)),
        }
    }
}

/// Builds the sample from per-thread (ops, frees).
fn sample(elapsed: std::time::Duration, results: &[(u64, u64)], epochs: u64) -> Sample {
    let counts: Vec<ThreadCount> = results
        .iter()
        .map(|&(ops, _)| ThreadCount {
            ops,
            ..Default::default()
        })
        .collect();
    let frees: u64 = results.iter().map(|&(_, f)| f).sum();
    Sample::from_threads(elapsed, &counts)
        .with("epochs", epochs as f64)
        .with("frees", frees as f64)
}

fn atomic(threads: usize, config: &Config) -> Sample {
    // The base reference: 1.
    let count = CachePadded::new(AtomicU64::new(1));
    let timed = run_timed(threads, config.duration, None, |_| {
        let count = &count;
        move |stop: &Stop| {
            let mut frees = 0u64;
            let ops = stop.count_batched(|| {
                // Relaxed: taking a reference from one held needs no ordering (as `Arc`).
                count.fetch_add(1, Ordering::Relaxed);
                // AcqRel: a decrement to zero must happen-after every use (as `Arc`'s drop).
                if count.fetch_sub(1, Ordering::AcqRel) == 1 {
                    frees += 1;
                }
            });
            (ops, frees)
        }
    });
    sample(timed.elapsed, &timed.results, 0)
}

fn snzi(threads: usize, config: &Config) -> Sample {
    let counter = Snzi::new(threads);
    counter.inc(0); // the base reference
    let timed = run_timed(threads, config.duration, None, |t| {
        let counter = &counter;
        move |stop: &Stop| {
            let mut frees = 0u64;
            let ops = stop.count_batched(|| {
                counter.inc(t);
                if counter.dec(t) {
                    frees += 1;
                }
            });
            (ops, frees)
        }
    });
    assert!(counter.dec(0), "the base reference is the last");
    sample(timed.elapsed, &timed.results, 0)
}

fn refcache(threads: usize, config: &Config) -> Sample {
    let rc = Refcache::new(threads);
    let main = rc.core(0);
    let page = main.alloc(Page([0; 64]));
    let epoch0 = rc.epoch();
    let timed = run_timed(threads, config.duration, None, |t| {
        let (rc, page) = (&rc, &page);
        let core = rc.core(t);
        move |stop: &Stop| {
            let ops = stop.count_batched(|| {
                let r = core.get(page).expect("a core of the page's Refcache");
                std::hint::black_box(&r.0);
                core.put(r).expect("a core of the page's Refcache");
            });
            (ops, 0)
        }
    });
    let epochs = rc.epoch() - epoch0;
    let freed_during = rc.stats().freed;
    main.put(page).expect("a core of the page's Refcache");
    let mut results = timed.results;
    if let Some(first) = results.first_mut() {
        first.1 = freed_during;
    }
    sample(timed.elapsed, &results, epochs)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    /// (That every design completes operations is `tests/smoke.rs`'s check.)
    #[test]
    fn every_design_runs_without_reaching_zero() {
        let config = Config {
            duration: Duration::from_millis(5),
            ..Config::default()
        };
        for design in DESIGNS {
            for threads in [1, 3] {
                let s = Refcount.run(design, threads, &config).unwrap();
                assert!(s.ops_per_sec > 0.0, "{design}");
                assert_eq!(s.extra["frees"], 0.0, "{design} {threads}");
            }
        }
        assert!(Refcount.run("nope", 1, &config).is_err());
        assert!(Refcount.run("atomic", 0, &config).is_err());
    }
}
