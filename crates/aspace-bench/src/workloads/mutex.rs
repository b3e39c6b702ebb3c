//! `mutex` [thesis (RCU for HelenOS) §6.7, Fig. 6.7]: "one and two user space threads locked
//! and unlocked distinct mutexes in a loop", light-weight upgradable mutexes against ordinary
//! ones.
//!
//! Every thread owns one lock (on its own cache line) and, in a loop, locks it, increments the
//! counter it protects and unlocks it; one operation is one such critical section. Designs:
//! - `parking_lot` (the baseline): `parking_lot::Mutex`, an ordinary mutex (one
//!   compare-and-swap to lock, one release store to unlock);
//! - `std`: `std::sync::Mutex` (futex-based, the same shape);
//! - `upgradable`: `aspace_sync::UpgradableLock`, every thread a member of one `LockGroup`: at
//!   one thread the group has one member and runs in the light mode (no atomic
//!   read-modify-write); at two or more it was upgraded when the second thread joined (before
//!   the run), so every section takes the real lock, as the thesis' multithreaded case does.
//!
//! Extra: `thread_safe` (1 when the upgradable group was upgraded; 0 otherwise).
//!
//! Not for: contended locks (each thread has its own) or the lock's correctness (aspace-sync's
//! tests and loom model).

use crate::error::BenchError;
use crate::harness::{run_timed, Stop};
use crate::workload::{Baseline, Config, RatioStyle, Sample, ThreadCount, Workload};
use aspace_sync::{CachePadded, LockGroup, UpgradableLock};

/// The designs, baseline first.
pub const DESIGNS: &[&str] = &["parking_lot", "std", "upgradable"];

/// The `mutex` workload.
pub struct Mutex;

impl Workload for Mutex {
    fn name(&self) -> &'static str {
        "mutex"
    }
    fn about(&self) -> &'static str {
        "lock/increment/unlock of a distinct mutex per thread; upgradable vs ordinary [thesis Fig. 6.7]"
    }
    fn mirrors(&self) -> Option<&'static str> {
        Some("thesis (RCU for HelenOS) §6.7, Fig. 6.7")
    }
    fn designs(&self) -> &'static [&'static str] {
        DESIGNS
    }
    fn baseline(&self) -> Option<Baseline> {
        Some(Baseline {
            design: "parking_lot",
            style: RatioStyle::TimesVs,
        })
    }
    fn run(&self, design: &str, threads: usize, config: &Config) -> Result<Sample, BenchError> {
        if threads == 0 {
            return Err(BenchError::InvalidArgument(
                "mutex needs at least one thread".into(),
            ));
        }
        match design {
            "parking_lot" => {
                let locks: Vec<_> = (0..threads)
                    .map(|_| CachePadded::new(parking_lot::Mutex::new(0u64)))
                    .collect();
                Ok(measure(threads, config, |t| {
                    let lock = &locks[t];
                    move || *lock.lock() += 1
                }))
            }
            "std" => {
                let locks: Vec<_> = (0..threads)
                    .map(|_| CachePadded::new(std::sync::Mutex::new(0u64)))
                    .collect();
                Ok(measure(threads, config, |t| {
                    let lock = &locks[t];
                    move || *lock.lock().unwrap_or_else(|p| p.into_inner()) += 1
                }))
            }
            "upgradable" => {
                let group = LockGroup::new();
                let locks: Vec<_> = (0..threads)
                    .map(|_| CachePadded::new(UpgradableLock::new(&group, 0u64)))
                    .collect();
                let sample = measure(threads, config, |t| {
                    let lock = &locks[t];
                    let member = group.join();
                    move || *lock.lock(&member) += 1
                });
                Ok(sample.with("thread_safe", f64::from(u8::from(group.is_thread_safe()))))
            }
            other => Err(self.unknown_design(other)),
        }
    }
}

/// Runs `threads` threads, each calling the section `setup(t)` returns (made on its thread,
/// before the start barrier) in a loop; one operation per call.
fn measure<F, S>(threads: usize, config: &Config, setup: S) -> Sample
where
    S: Fn(usize) -> F + Sync,
    F: FnMut(),
{
    let timed = run_timed(threads, config.duration, None, |t| {
        let mut section = setup(t);
        move |stop: &Stop| stop.count_batched(&mut section)
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

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn upgradable_runs_light_at_one_thread_and_upgraded_at_two() {
        let config = Config {
            duration: Duration::from_millis(5),
            ..Config::default()
        };
        assert_eq!(
            Mutex.run("upgradable", 1, &config).unwrap().extra["thread_safe"],
            0.0
        );
        assert_eq!(
            Mutex.run("upgradable", 2, &config).unwrap().extra["thread_safe"],
            1.0
        );
        for design in DESIGNS {
            assert!(Mutex.run(design, 2, &config).unwrap().ops_per_sec > 0.0);
        }
        assert!(Mutex.run("nope", 1, &config).is_err());
    }
}
