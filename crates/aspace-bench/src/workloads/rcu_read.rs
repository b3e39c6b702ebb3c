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
//! Every design runs the very same measured loop (`read_loop`, generic over the design's
//! `ReadSide`), so the loops differ only in the guard (lock, pin) around the traversal; the
//! traversal itself is the list's `sum`, whose list reference goes through `black_box` in every
//! design alike.
//!
//! Not for: update costs (`rcu-update`) or grace-period latency (`rcu-gp`).

use super::list::{EpochList, PlainList, Quiesce, RcuList};
use crate::error::BenchError;
use crate::harness::{run_timed, Stop, BATCH};
use crate::workload::{Baseline, Config, RatioStyle, Sample, ThreadCount, Workload};
use aspace_rcu::{Domain, Memb, Qsbr, Reader};
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
    fn mirrors(&self) -> Option<&'static str> {
        Some("thesis §6.2, Fig. 6.1")
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
        let (elapsed, counts) = match design {
            "none" => measure(&PlainList::new(), threads, config),
            "memb" => measure(&RcuSide::<Memb>::new(), threads, config),
            "qsbr" => measure(&RcuSide::<Qsbr>::new(), threads, config),
            "mutex" => measure(&Mutex::new(PlainList::new()), threads, config),
            "rwlock" => measure(&RwLock::new(PlainList::new()), threads, config),
            "crossbeam-epoch" => measure(&EpochList::new(), threads, config),
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

/// One design's read side. Every design runs the same measured loop ([`read_loop`]), so the
/// loops differ only in what [`ReadSide::traverse`] wraps around the traversal.
trait ReadSide: Sync {
    /// Per-thread state (an RCU reader registration, or nothing); made before the barrier.
    type Local;
    fn local(&self) -> Self::Local;
    /// One traversal inside one read-side section (or lock, or pin); returns the sum.
    fn traverse(&self, local: &Self::Local) -> u64;
    /// Called every [`QSBR_PERIOD`] traversals (`qsbr`: announce a quiescent state).
    fn quiesce(&self, _local: &mut Self::Local) {}
}

/// `none`: the plain list, no synchronisation at all.
impl ReadSide for PlainList {
    type Local = ();
    fn local(&self) {}
    #[inline]
    fn traverse(&self, _: &()) -> u64 {
        self.sum()
    }
}

/// `memb` / `qsbr`: one `Reader` per thread, `reader.read()` per traversal.
struct RcuSide<F: Quiesce> {
    domain: Domain<F>,
    list: RcuList<F>,
}

impl<F: Quiesce> RcuSide<F> {
    fn new() -> Self {
        let domain = Domain::new();
        RcuSide {
            list: RcuList::new(&domain),
            domain,
        }
    }
}

impl<F: Quiesce> ReadSide for RcuSide<F> {
    type Local = Reader<F>;
    fn local(&self) -> Reader<F> {
        self.domain.register()
    }
    #[inline]
    fn traverse(&self, reader: &Reader<F>) -> u64 {
        let g = reader.read();
        self.list.sum(&g)
    }
    #[inline]
    fn quiesce(&self, reader: &mut Reader<F>) {
        F::quiesce(reader);
    }
}

/// `mutex`: `parking_lot::Mutex` around each traversal (the thesis used a spinlock).
impl ReadSide for Mutex<PlainList> {
    type Local = ();
    fn local(&self) {}
    #[inline]
    fn traverse(&self, _: &()) -> u64 {
        self.lock().sum()
    }
}

/// `rwlock`: `parking_lot::RwLock` read lock around each traversal.
impl ReadSide for RwLock<PlainList> {
    type Local = ();
    fn local(&self) {}
    #[inline]
    fn traverse(&self, _: &()) -> u64 {
        self.read().sum()
    }
}

/// `crossbeam-epoch`: `crossbeam_epoch::pin()` per traversal.
impl ReadSide for EpochList {
    type Local = ();
    fn local(&self) {}
    #[inline]
    fn traverse(&self, _: &()) -> u64 {
        let g = epoch::pin();
        self.sum(&g)
    }
}

/// Runs `threads` readers of `side` for the configured duration.
fn measure<S: ReadSide>(
    side: &S,
    threads: usize,
    config: &Config,
) -> (std::time::Duration, Vec<u64>) {
    let t = run_timed(threads, config.duration, None, |_| {
        let mut local = side.local();
        move |stop: &Stop| read_loop(side, &mut local, stop) // `local` (a reader) drops after
    });
    (t.elapsed, t.results)
}

/// The measured loop, shared by every design: [`BATCH`] traversals between polls of the stop
/// flag, `quiesce` every [`QSBR_PERIOD`] traversals.
#[inline]
fn read_loop<S: ReadSide>(side: &S, local: &mut S::Local, stop: &Stop) -> u64 {
    let mut n = 0;
    while !stop.is_set() {
        for _ in 0..BATCH {
            black_box(side.traverse(local));
        }
        n += BATCH;
        if n % QSBR_PERIOD == 0 {
            side.quiesce(local);
        }
    }
    n
}
