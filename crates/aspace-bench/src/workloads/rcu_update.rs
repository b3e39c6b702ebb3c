//! `rcu-update` [thesis §6.3, Fig. 6.2-6.3]: write-side overhead. The same five-element list as
//! `rcu-read`; a share of the operations replace the first element by a new node (thesis §6.3:
//! "updates of the list consisted of replacing the first element with a new one"), the rest
//! traverse it.
//!
//! Two modes, chosen by `--update-pct P`:
//! - **mixed** (`P < 100`): every thread draws each operation: an update with probability `P`%,
//!   otherwise a read; all threads are registered readers (`qsbr` threads announce a quiescent
//!   state every 1024 operations).
//! - **one updater + readers** (`P = 100`, the default): thread 0 only updates and is not a
//!   registered reader; threads 1.. only read. At one thread only the updater runs. Before the
//!   measured phase the readers run alone for the same duration (the *solo* phase), so that
//!   `reader_retained_pct` = reader throughput with the updater / solo reader throughput x 100
//!   compares two measurements taken in the same run.
//!
//! Updates: `memb`/`qsbr` publish the new head and retire the old one with
//! `Domain::defer_free` (freed by the domain's reclaimer after a grace period);
//! `crossbeam-epoch` uses `Guard::defer_destroy`; `mutex`/`rwlock` swap the head under the
//! (write) lock and drop the old node after releasing it. Updaters serialise on the list's update
//! lock (`parking_lot::Mutex`; the thesis used a spinlock). New nodes come from the global
//! allocator, whereas the thesis preallocated per-thread free lists.
//!
//! `--update-rate R` (one-updater mode only) paces the updater to `R` updates per second: after
//! each update it spins on the clock (`Instant`, no shared memory touched) until the next slot,
//! so the reader's loss can be compared with another implementation's at the *same* update rate
//! (liburcu's reference figure is 2.4 M updates/s). Unpaced is the default; a paced run reports
//! `update_rate_target`.
//!
//! What one operation is does not change with the thread count, so the 2T/1T column compares
//! like with like: in **mixed** mode an operation is a read or an update (every thread counts
//! both, at every thread count); in **one-updater** mode an operation is an *update* of the
//! dedicated updater (its `ops_per_sec` is `updates_per_sec`, counted by one thread at every
//! thread count), so 2T/1T is the update rate with a reader beside the updater over the rate
//! alone, and the readers' throughput is reported in `reader_ops_per_sec`. (Before issue 18
//! the one-updater figure counted the readers' operations at 2 threads and only updates at 1,
//! so "qsbr 7.15x mutex" compared mostly reads.) Extras: `update_pct` (the setting), `updates_per_sec`,
//! `reader_ops_per_sec`, `reader_retained_pct` (one-updater mode with readers), `peak_pending`
//! (`memb`/`qsbr`: the largest `Domain::pending()` the coordinator saw, sampling about every
//! millisecond). Each repeat ends with `Domain::barrier()` (untimed), so repeats start with no
//! garbage.
//!
//! # What limits `reader_retained_pct` (one updater + one reader, 2-CPU machine)
//!
//! The updater runs unthrottled, so the reader's loss grows with the update rate. Every update
//! costs the reader a refetch of the head's cache line and of the new node's line from the
//! updater's cache, plus, with small nodes allocated one after another, a refetch of the head
//! node's line when the updater writes the next node into it. The reclaimer thread (a third
//! runnable thread on two CPUs) takes a few percent of the CPU, mostly the allocator's
//! cross-thread frees, and each `memb` grace period interrupts the reader twice (membarrier
//! IPIs). So the retained share is set by the updater's rate: compare with liburcu at the same
//! rate (`--update-rate`). The measured costs per update and the rates behind this reasoning
//! are in CHANGELOG.md (the `rcu-update` entry).
//!
//! Not for: read-only scaling (`rcu-read`) or `synchronize()` latency (`rcu-gp`).

use super::list::{EpochList, PlainList, Quiesce, RcuList};
use crate::error::BenchError;
use crate::harness::{run_timed, Stop, BATCH};
use crate::workload::{Baseline, Config, RatioStyle, Sample, ThreadCount, Workload};
use aspace_rcu::{Domain, Memb, Qsbr, Reader};
use crossbeam_epoch as epoch;
use parking_lot::{Mutex, RwLock};
use rand::rngs::SmallRng;
use rand::{RngCore, SeedableRng};
use std::hint::black_box;
use std::time::{Duration, Instant};

/// Operations between two quiescent-state announcements of a `qsbr` reader.
const QSBR_PERIOD: u64 = 1024;

/// The `rcu-update` workload.
pub struct RcuUpdate;

impl Workload for RcuUpdate {
    fn name(&self) -> &'static str {
        "rcu-update"
    }
    fn about(&self) -> &'static str {
        "same list; --update-pct of operations replace its head (100: 1 updater + readers) [thesis 6.3]"
    }
    fn mirrors(&self) -> Option<&'static str> {
        Some("thesis §6.3, Fig. 6.2-6.3")
    }
    fn designs(&self) -> &'static [&'static str] {
        &["memb", "qsbr", "crossbeam-epoch", "mutex", "rwlock"]
    }
    fn baseline(&self) -> Option<Baseline> {
        Some(Baseline {
            design: "mutex",
            style: RatioStyle::TimesVs,
        })
    }
    fn run(&self, design: &str, threads: usize, config: &Config) -> Result<Sample, BenchError> {
        if config.update_pct > 100 {
            return Err(BenchError::InvalidArgument(format!(
                "--update-pct {} is above 100",
                config.update_pct
            )));
        }
        match design {
            "memb" => Ok(run_design(threads, config, RcuTarget::<Memb>::new)),
            "qsbr" => Ok(run_design(threads, config, RcuTarget::<Qsbr>::new)),
            "crossbeam-epoch" => Ok(run_design(threads, config, EpochList::new)),
            "mutex" => Ok(run_design(threads, config, || Mutex::new(PlainList::new()))),
            "rwlock" => Ok(run_design(
                threads,
                config,
                || RwLock::new(PlainList::new()),
            )),
            other => Err(self.unknown_design(other)),
        }
    }
}

/// What a thread does in a phase.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Role {
    /// Only updates (the dedicated updater).
    Updater,
    /// Only reads.
    Reader,
    /// Updates with this percentage, reads otherwise.
    Mixed(u32),
}

/// One design's shared list and how a thread reads and updates it.
trait Target: Sync {
    /// Per-thread state (an RCU reader registration, or nothing).
    type Local;
    /// Per-thread state for a thread that reads (`reads = true`) or only updates.
    fn local(&self, reads: bool) -> Self::Local;
    /// Called by the thread when the measured loop starts (after the start barrier).
    fn start(&self, _local: &mut Self::Local) {}
    /// One traversal; returns the sum.
    fn read(&self, local: &Self::Local) -> u64;
    /// One head replacement.
    fn update(&self, local: &Self::Local, value: u64);
    /// Called every [`QSBR_PERIOD`] operations.
    fn quiesce(&self, _local: &mut Self::Local) {}
    /// Deferred callbacks not yet run, for designs that can tell.
    fn pending(&self) -> Option<usize> {
        None
    }
    /// Untimed clean-up after the measured phase (wait for deferred frees).
    fn finish(&self) {}
}

/// An `aspace_rcu` domain of flavor `F` and its list.
struct RcuTarget<F: Quiesce> {
    domain: Domain<F>,
    list: RcuList<F>,
}

impl<F: Quiesce> RcuTarget<F> {
    fn new() -> Self {
        let domain = Domain::new();
        RcuTarget {
            list: RcuList::new(&domain),
            domain,
        }
    }
}

impl<F: Quiesce> Target for RcuTarget<F> {
    type Local = Option<Reader<F>>;
    fn local(&self, reads: bool) -> Self::Local {
        // Parked (qsbr: offline) until `start`: an online qsbr reader asleep in the start
        // barrier would stall the reclaimer's first grace periods.
        reads.then(|| {
            let mut r = self.domain.register();
            F::park(&mut r);
            r
        })
    }
    fn start(&self, local: &mut Self::Local) {
        if let Some(r) = local {
            F::unpark(r);
        }
    }
    #[inline]
    fn read(&self, local: &Self::Local) -> u64 {
        let reader = local.as_ref().expect("reading threads are registered");
        let g = reader.read();
        self.list.sum(&g)
    }
    #[inline]
    fn update(&self, _local: &Self::Local, value: u64) {
        let old = self.list.replace_head(value);
        // SAFETY: `old` came from `Box::into_raw` in `RcuList`, was just unlinked from the
        // list (readers starting now cannot reach it), and only this call retires it.
        unsafe { self.domain.defer_free(old) };
    }
    fn quiesce(&self, local: &mut Self::Local) {
        if let Some(r) = local {
            F::quiesce(r);
        }
    }
    fn pending(&self) -> Option<usize> {
        Some(self.domain.pending())
    }
    fn finish(&self) {
        self.domain.barrier();
    }
}

impl Target for EpochList {
    type Local = ();
    fn local(&self, _reads: bool) {}
    #[inline]
    fn read(&self, _: &()) -> u64 {
        self.sum(&epoch::pin())
    }
    #[inline]
    fn update(&self, _: &(), value: u64) {
        self.replace_head(value, &epoch::pin());
    }
}

impl Target for Mutex<PlainList> {
    type Local = ();
    fn local(&self, _reads: bool) {}
    #[inline]
    fn read(&self, _: &()) -> u64 {
        self.lock().sum()
    }
    #[inline]
    fn update(&self, _: &(), value: u64) {
        let old = self.lock().replace_head(value);
        drop(old);
    }
}

impl Target for RwLock<PlainList> {
    type Local = ();
    fn local(&self, _reads: bool) {}
    #[inline]
    fn read(&self, _: &()) -> u64 {
        self.read().sum()
    }
    #[inline]
    fn update(&self, _: &(), value: u64) {
        let old = self.write().replace_head(value);
        drop(old);
    }
}

/// Reads and updates one thread counted.
#[derive(Clone, Copy, Debug, Default)]
struct Counts {
    reads: u64,
    updates: u64,
}

/// Result of one phase.
struct Phase {
    elapsed: Duration,
    counts: Vec<Counts>,
    peak_pending: Option<usize>,
}

/// Runs the solo-reader phase (one-updater mode with readers) and the measured phase on fresh
/// state each, and builds the sample.
fn run_design<T: Target>(threads: usize, config: &Config, make: impl Fn() -> T) -> Sample {
    let pct = config.update_pct;
    let dedicated = pct == 100;
    let solo_reader_rate = (dedicated && threads > 1).then(|| {
        let p = phase(&make(), threads - 1, config.duration, None, |_| {
            Role::Reader
        });
        p.counts.iter().map(|c| c.reads).sum::<u64>() as f64 / p.elapsed.as_secs_f64()
    });
    let pace = config
        .update_rate
        .filter(|_| dedicated)
        .map(|rate| Duration::from_secs_f64(1.0 / rate as f64));
    let p = phase(&make(), threads, config.duration, pace, |t| {
        match (dedicated, t) {
            (true, 0) => Role::Updater,
            (true, _) => Role::Reader,
            (false, _) => Role::Mixed(pct),
        }
    });
    let secs = p.elapsed.as_secs_f64();
    let reads: u64 = p.counts.iter().map(|c| c.reads).sum();
    let updates: u64 = p.counts.iter().map(|c| c.updates).sum();
    // One-updater mode counts the updater's updates only (see the module doc); mixed mode
    // counts every thread's reads and updates.
    let counted = if dedicated {
        &p.counts[..1]
    } else {
        &p.counts[..]
    };
    let per_thread: Vec<ThreadCount> = counted
        .iter()
        .map(|c| ThreadCount {
            ops: if dedicated {
                c.updates
            } else {
                c.reads + c.updates
            },
            excluded: Duration::ZERO,
        })
        .collect();
    let reader_rate = reads as f64 / secs;
    let mut s = Sample::from_threads(p.elapsed, &per_thread)
        .with("update_pct", f64::from(pct))
        .with("updates_per_sec", updates as f64 / secs)
        .with("reader_ops_per_sec", reader_rate);
    if let Some(solo) = solo_reader_rate.filter(|r| *r > 0.0) {
        s = s.with("reader_retained_pct", 100.0 * reader_rate / solo);
    }
    if let Some(peak) = p.peak_pending {
        s = s.with("peak_pending", peak as f64);
    }
    if let Some(rate) = config.update_rate.filter(|_| dedicated) {
        s = s.with("update_rate_target", rate as f64);
    }
    s
}

/// One timed phase on `target` with `role(t)` for thread `t`; the updater waits `pace` between
/// updates when given.
fn phase<T: Target>(
    target: &T,
    threads: usize,
    duration: Duration,
    pace: Option<Duration>,
    role: impl Fn(usize) -> Role + Sync,
) -> Phase {
    let mut peak = target.pending();
    let mut sample_pending = || {
        if let (Some(p), Some(now)) = (peak.as_mut(), target.pending()) {
            *p = (*p).max(now);
        }
    };
    let sampler: Option<&mut dyn FnMut()> = if target.pending().is_some() {
        Some(&mut sample_pending)
    } else {
        None
    };
    let timed = run_timed(threads, duration, sampler, |t| {
        let role = role(t);
        let mut local = target.local(role != Role::Updater);
        move |stop: &Stop| thread_body(target, &mut local, role, pace, t as u64, stop)
    });
    target.finish();
    Phase {
        elapsed: timed.elapsed,
        counts: timed.results,
        peak_pending: peak,
    }
}

/// The measured loop of one thread.
fn thread_body<T: Target>(
    target: &T,
    local: &mut T::Local,
    role: Role,
    pace: Option<Duration>,
    seed: u64,
    stop: &Stop,
) -> Counts {
    target.start(local);
    let mut pacer = pace.map(Pacer::new);
    let mut rng = SmallRng::seed_from_u64(seed + 1);
    let mut c = Counts::default();
    let mut ops = 0u64;
    while !stop.is_set() {
        for _ in 0..BATCH {
            let update = match role {
                Role::Updater => true,
                Role::Reader => false,
                Role::Mixed(pct) => rng.next_u32() % 100 < pct,
            };
            if update {
                if let Some(p) = pacer.as_mut() {
                    p.wait();
                }
                target.update(local, c.updates);
                c.updates += 1;
            } else {
                black_box(target.read(local));
                c.reads += 1;
            }
        }
        ops += BATCH;
        if ops % QSBR_PERIOD == 0 {
            target.quiesce(local);
        }
    }
    c
}

/// Spaces a thread's operations `interval` apart by spinning on the clock.
struct Pacer {
    interval: Duration,
    next: Instant,
}

impl Pacer {
    /// Longest backlog caught up in a burst; beyond it (the thread was descheduled) the schedule
    /// restarts from now instead of bursting.
    const MAX_BACKLOG: Duration = Duration::from_millis(1);

    fn new(interval: Duration) -> Pacer {
        Pacer {
            interval,
            next: Instant::now(),
        }
    }

    /// Waits for the next slot.
    #[inline]
    fn wait(&mut self) {
        let mut now = Instant::now();
        while now < self.next {
            std::hint::spin_loop();
            now = Instant::now();
        }
        self.next = if now - self.next > Self::MAX_BACKLOG {
            now + self.interval
        } else {
            self.next + self.interval
        };
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::measurement::Measurement;

    #[test]
    fn pacer_spaces_operations_at_least_one_interval_apart_on_average() {
        let interval = Duration::from_micros(200);
        // Before `new`: the schedule starts at `new`, so timing from after it could come short.
        let start = Instant::now();
        let mut p = Pacer::new(interval);
        for _ in 0..11 {
            p.wait();
        }
        // The first wait returns at once; the next ten each wait for their slot.
        assert!(start.elapsed() >= interval * 10);
    }

    fn one_updater(threads: usize) -> Sample {
        let config = Config {
            duration: Duration::from_millis(20),
            update_pct: 100,
            ..Config::default()
        };
        RcuUpdate.run("mutex", threads, &config).unwrap()
    }

    #[test]
    fn one_updater_mode_counts_updates_at_every_thread_count() {
        for threads in [1, 2] {
            let s = one_updater(threads);
            // The operations counted are the updater's updates, by one thread.
            assert_eq!(s.op_threads, 1, "{threads}T");
            let updates = s.extra["updates_per_sec"];
            assert!(
                (s.ops_per_sec - updates).abs() <= 1e-6 * updates.max(1.0),
                "{threads}T: {} ops/s vs {updates} updates/s",
                s.ops_per_sec
            );
        }
        // The readers are reported beside, not counted in.
        assert!(one_updater(2).extra.contains_key("reader_ops_per_sec"));
    }

    #[test]
    fn rcu_update_has_a_scaling_column_in_both_modes() {
        let mut m = Measurement::example("rcu-update", "memb", 2, 1e6, (1e6, 1e6));
        m.extra.insert("update_pct".into(), 100.0);
        assert!(RcuUpdate.thread_scaling(&m));
        m.extra.insert("update_pct".into(), 10.0);
        assert!(RcuUpdate.thread_scaling(&m));
    }
}
