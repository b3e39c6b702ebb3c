//! `rcu-read` [thesis §6.2, Fig. 6.1]: read-side scalability. Every thread traverses the same
//! five-element list in a tight loop, one read-side section per traversal; the list never changes.
//!
//! Designs (all six by default):
//! - `none`: plain traversal, no synchronisation at all (the thesis' "ideal");
//! - `memb`: `aspace_rcu::Domain<Memb>`, one `Reader` per thread, `reader.read()` per traversal;
//! - `qsbr`: `Domain<Qsbr>`, `reader.read()` per traversal (free) and `quiescent_state()` once per
//!   [`QSBR_PERIOD`] traversals, as liburcu's `rcutorture`-style read tests announce quiescent
//!   states periodically rather than per read;
//! - `mutex`: `parking_lot::Mutex` around each traversal (the thesis used a spinlock);
//! - `rwlock`: `parking_lot::RwLock` read lock around each traversal;
//! - `crossbeam-epoch`: `crossbeam_epoch::pin()` per traversal.
//!
//! One operation is one traversal. The report shows each design as a percentage of `none`.
//!
//! Not for: update costs (`rcu-update`) or grace-period latency (`rcu-gp`).

use super::list::{EpochList, PlainList, Quiesce, RcuList};
use crate::error::BenchError;
use crate::harness::{run_timed, Stop, BATCH};
use crate::workload::{Baseline, Config, RatioStyle, Sample, ThreadCount, Workload};
use aspace_rcu::{Domain, Memb, Qsbr};
use crossbeam_epoch as epoch;
use parking_lot::{Mutex, RwLock};
use std::hint::black_box;

/// `qsbr` readers announce a quiescent state once per this many traversals.
pub const QSBR_PERIOD: u64 = 1024;

/// The `rcu-read` workload.
pub struct RcuRead;

impl Workload for RcuRead {
    fn name(&self) -> &'static str {
        "rcu-read"
    }
    fn about(&self) -> &'static str {
        "traverse a shared 5-element list, one read-side section per traversal [thesis 6.2]"
    }
    fn designs(&self) -> &'static [&'static str] {
        &["none", "memb", "qsbr", "mutex", "rwlock", "crossbeam-epoch"]
    }
    fn baseline(&self) -> Option<Baseline> {
        Some(Baseline {
            design: "none",
            style: RatioStyle::PercentOf,
        })
    }
    fn run(&self, design: &str, threads: usize, config: &Config) -> Result<Sample, BenchError> {
        let d = config.duration;
        let (elapsed, counts) = match design {
            "none" => {
                let list = PlainList::new();
                let t = run_timed(threads, d, None, |_| {
                    let list = &list;
                    move |stop: &Stop| {
                        stop.count_batched(|| {
                            black_box(list.sum());
                        })
                    }
                });
                (t.elapsed, t.results)
            }
            "memb" => rcu_reads::<Memb>(threads, config),
            "qsbr" => rcu_reads::<Qsbr>(threads, config),
            "mutex" => {
                let list = Mutex::new(PlainList::new());
                let t = run_timed(threads, d, None, |_| {
                    let list = &list;
                    move |stop: &Stop| {
                        stop.count_batched(|| {
                            black_box(list.lock().sum());
                        })
                    }
                });
                (t.elapsed, t.results)
            }
            "rwlock" => {
                let list = RwLock::new(PlainList::new());
                let t = run_timed(threads, d, None, |_| {
                    let list = &list;
                    move |stop: &Stop| {
                        stop.count_batched(|| {
                            black_box(list.read().sum());
                        })
                    }
                });
                (t.elapsed, t.results)
            }
            "crossbeam-epoch" => {
                let list = EpochList::new();
                let t = run_timed(threads, d, None, |_| {
                    let list = &list;
                    move |stop: &Stop| {
                        stop.count_batched(|| {
                            let g = epoch::pin();
                            black_box(list.sum(&g));
                        })
                    }
                });
                (t.elapsed, t.results)
            }
            other => return Err(self.unknown_design(other)),
        };
        let counts: Vec<ThreadCount> = counts
            .into_iter()
            .map(|ops| ThreadCount {
                ops,
                ..Default::default()
            })
            .collect();
        Ok(Sample::from_threads(elapsed, &counts))
    }
}

/// Readers of an `aspace_rcu` domain of flavor `F`: a read section per traversal; `qsbr` readers
/// announce a quiescent state every [`QSBR_PERIOD`] traversals.
fn rcu_reads<F: Quiesce>(threads: usize, config: &Config) -> (std::time::Duration, Vec<u64>) {
    let domain = Domain::<F>::new();
    let list = RcuList::new();
    let t = run_timed(threads, config.duration, None, |_| {
        let reader = domain.register();
        let list = &list;
        move |stop: &Stop| {
            let mut n = 0;
            while !stop.is_set() {
                for _ in 0..BATCH {
                    let g = reader.read();
                    black_box(list.sum(&g));
                }
                n += BATCH;
                if n % QSBR_PERIOD == 0 {
                    F::quiesce(&reader);
                }
            }
            n // `reader` unregisters when the body returns
        }
    });
    (t.elapsed, t.results)
}
