//! The measurement harness: fixed-duration runs after a barrier, repeats, median and range, and
//! a progress bar over the list of points to measure.
//!
//! # One timed run ([`run_timed`])
//! 1. `threads` scoped threads are spawned. Each runs the workload's *setup* closure (register an
//!    RCU reader, populate its arena, shuffle its addresses: untimed), which returns the *body*.
//! 2. Every thread and the coordinator wait on one `std::sync::Barrier`; the coordinator takes
//!    the start instant when it leaves the barrier.
//! 3. The coordinator sleeps for the duration (in ~1 ms steps calling a sampler, when the workload
//!    wants one, e.g. to record the peak of `Domain::pending()`), then raises the stop flag and
//!    takes the elapsed time.
//! 4. Each body counts its operations in a local variable and polls the flag between batches
//!    ([`BATCH`] operations, or every operation when one operation is long), then returns what it
//!    counted; there is no shared counter on the hot path. The join hands the counts back.
//!
//! The stop flag is an `AtomicBool` accessed with `Relaxed`: it carries no data (the counts come
//! back through `join`, which synchronises), it only needs to become visible eventually, and a
//! body that overshoots by one batch adds at most a batch's time (nanoseconds to microseconds
//! against hundreds of milliseconds).
//!
//! # Repeats, interleaved ([`run_points`])
//! Each point is run `repeat` times; the report keeps the median throughput, the min and the max
//! ([`Stats`]), the spread and the stability flag (below), and the median of every extra metric.
//!
//! The repeats of the designs compared at one (workload, threads) point are *interleaved*:
//! design A repeat 1, B repeat 1, A repeat 2, B repeat 2, ... rather than every repeat of A and
//! then every repeat of B. A machine that drifts (a noisy neighbour, a frequency change, a
//! hypervisor that deschedules a vCPU for a few seconds) then hits every design alike instead
//! of making one design look several times faster than the other. Points are grouped by
//! (workload, threads) in order of first appearance; each finished point is handed to
//! `on_done` when its group ends, and the returned list keeps the order of the points given.
//!
//! # Spread and stability ([`Stats::spread`], [`Stats::unstable`])
//! `spread` = (max - min) / median over the repeats (0 for one repeat). A point is **unstable**
//! when its repeats do not agree on one value: max / min above [`UNSTABLE_MAX_OVER_MIN`] (1.5),
//! or, sorting the repeats, the largest gap between two neighbours above
//! [`UNSTABLE_GAP_OF_MEDIAN`] (25%) of the median: the repeats fall into two clusters (a
//! bimodal benchmark, such as `global` at 9.3 M ops/s in one repeat and 1.9 M in the next). A
//! point with a zero repeat beside a positive one is unstable too. One repeat is never
//! unstable by this rule (there is nothing to compare it with); the verdicts of the report
//! (`report/verdict.rs`) need at least two to mean anything.
//!
//! A point is unstable too when, during any of its repeats, other processes and the hypervisor
//! (steal) took more than [`BUSY_MAX_PCT`] of the machine's CPUs (`interference.rs`, recorded
//! as the measurement's `busy_pct`): its figure measures the neighbour as much as the design.
//! That was the cause of `global`'s bimodality (see `interference.rs`).
//!
//! Not for: pinning threads to cores, warm-up discarding (the first repeat is kept; with a
//! median over several repeats a cold first run does not move the result), or statistics beyond
//! median, range and the stability rule.

use crate::error::BenchError;
use crate::interference::{self, Interference, BUSY_MAX_PCT};
use crate::measurement::Measurement;
use crate::workload::{Config, Workload};
use indicatif::{ProgressBar, ProgressStyle};
use std::collections::BTreeMap;
use std::io::IsTerminal;
use std::panic::{self, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Barrier;
use std::time::{Duration, Instant};

/// Operations a body performs between two polls of the stop flag.
pub const BATCH: u64 = 64;

/// The flag the coordinator raises when the duration is over, and when it did.
#[derive(Debug, Default)]
pub struct Stop(AtomicBool, std::sync::OnceLock<Instant>);

impl Stop {
    /// Whether the measurement is over.
    #[inline]
    pub fn is_set(&self) -> bool {
        // Relaxed: the flag orders nothing (see the module doc).
        self.0.load(Ordering::Relaxed)
    }

    fn set(&self) {
        let _ = self.1.set(Instant::now());
        self.0.store(true, Ordering::Relaxed);
    }

    /// The part of `[from, now)` inside the measured window (up to the stop): what a body
    /// excludes for housekeeping that began at `from`. Housekeeping that runs past the stop
    /// must not exclude more than the window (its ops per active second would read zero: a
    /// reset that outlasted a short window in a debug build did).
    pub fn time_inside(&self, from: Instant) -> Duration {
        let spent = from.elapsed();
        match self.1.get() {
            Some(&at) => spent.min(at.saturating_duration_since(from)),
            None => spent,
        }
    }

    /// Runs `op` in batches of [`BATCH`] until the flag is raised; returns how many ran.
    #[inline]
    pub fn count_batched(&self, mut op: impl FnMut()) -> u64 {
        let mut n = 0;
        while !self.is_set() {
            for _ in 0..BATCH {
                op();
            }
            n += BATCH;
        }
        n
    }
}

/// What [`run_timed`] returns: every thread's result, in thread order, and the measured time.
#[derive(Debug)]
pub struct Timed<T> {
    /// Result of thread `t` at index `t`.
    pub results: Vec<T>,
    /// From the barrier release to the stop flag.
    pub elapsed: Duration,
}

/// Runs `threads` threads for `duration` after a common barrier (see the module doc).
///
/// `setup(t)` runs on thread `t` before the barrier and returns the measured body; the body gets
/// the stop flag and returns the thread's result. `sampler`, if given, is called by the
/// coordinator about every millisecond while the threads run.
pub fn run_timed<T, B, S>(
    threads: usize,
    duration: Duration,
    mut sampler: Option<&mut dyn FnMut()>,
    setup: S,
) -> Timed<T>
where
    S: Fn(usize) -> B + Sync,
    B: FnOnce(&Stop) -> T,
    T: Send,
{
    let barrier = Barrier::new(threads + 1);
    let stop = Stop::default();
    std::thread::scope(|scope| {
        let handles: Vec<_> = (0..threads)
            .map(|t| {
                let (barrier, stop, setup) = (&barrier, &stop, &setup);
                scope.spawn(move || {
                    // A panicking setup still reaches the barrier (then re-panics), so the
                    // other threads and the coordinator are not left waiting forever.
                    let body = panic::catch_unwind(AssertUnwindSafe(|| setup(t)));
                    barrier.wait();
                    match body {
                        Ok(body) => body(stop),
                        Err(payload) => panic::resume_unwind(payload),
                    }
                })
            })
            .collect();
        barrier.wait();
        let start = Instant::now();
        match sampler.as_mut() {
            Some(sample) => loop {
                let spent = start.elapsed();
                if spent >= duration {
                    break;
                }
                std::thread::sleep((duration - spent).min(Duration::from_millis(1)));
                sample();
            },
            None => std::thread::sleep(duration),
        }
        stop.set();
        let elapsed = start.elapsed();
        let results = handles
            .into_iter()
            .map(|h| h.join().unwrap_or_else(|p| panic::resume_unwind(p)))
            .collect();
        Timed { results, elapsed }
    })
}

/// A point is unstable when its fastest repeat is more than this many times its slowest.
pub const UNSTABLE_MAX_OVER_MIN: f64 = 1.5;

/// A point is unstable when two neighbouring repeats (sorted) are further apart than this share
/// of the median: the repeats form two clusters.
pub const UNSTABLE_GAP_OF_MEDIAN: f64 = 0.25;

/// Median, minimum and maximum of a non-empty list of numbers, and the largest gap between two
/// neighbours in sorted order.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Stats {
    /// The middle value (mean of the two middle values for an even count).
    pub median: f64,
    /// The smallest value.
    pub min: f64,
    /// The largest value.
    pub max: f64,
    /// The largest difference between two neighbouring values in sorted order (0 for one).
    pub gap: f64,
}

impl Stats {
    /// Summarises `values`; `None` when empty. NaNs sort last.
    pub fn of(values: &[f64]) -> Option<Stats> {
        if values.is_empty() {
            return None;
        }
        let mut v = values.to_vec();
        v.sort_by(|a, b| a.total_cmp(b));
        let n = v.len();
        let median = if n % 2 == 1 {
            v[n / 2]
        } else {
            (v[n / 2 - 1] + v[n / 2]) / 2.0
        };
        let gap = v.windows(2).map(|w| w[1] - w[0]).fold(0.0, f64::max);
        Some(Stats {
            median,
            min: v[0],
            max: v[n - 1],
            gap,
        })
    }

    /// (max - min) / median; 0 when the median is not positive.
    pub fn spread(&self) -> f64 {
        if self.median > 0.0 {
            (self.max - self.min) / self.median
        } else {
            0.0
        }
    }

    /// Whether the values disagree too much to summarise by their median (see the module doc
    /// for the rule).
    pub fn unstable(&self) -> bool {
        if self.max <= 0.0 || self.gap == 0.0 {
            return false;
        }
        self.min <= 0.0
            || self.max / self.min > UNSTABLE_MAX_OVER_MIN
            || self.gap > UNSTABLE_GAP_OF_MEDIAN * self.median
    }
}

/// One point to measure.
#[derive(Clone, Copy)]
pub struct Point<'w> {
    /// The workload.
    pub workload: &'w dyn Workload,
    /// One of its designs.
    pub design: &'static str,
    /// Thread count.
    pub threads: usize,
}

impl std::fmt::Debug for Point<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} {} {}T",
            self.workload.name(),
            self.design,
            self.threads
        )
    }
}

/// What the repeats of one point collected so far.
#[derive(Debug, Default)]
struct Collected {
    rates: Vec<f64>,
    busy_pct: f64,
    extras: BTreeMap<String, Vec<f64>>,
    op_threads: usize,
}

impl Collected {
    /// Adds one repeat's sample and what the rest of the machine did during it.
    fn add(&mut self, (s, busy): (crate::workload::Sample, Interference)) {
        self.rates.push(s.ops_per_sec);
        self.busy_pct = self.busy_pct.max(busy.busy_pct());
        self.op_threads = s.op_threads.max(1);
        for (k, v) in s.extra {
            if v.is_finite() {
                self.extras.entry(k).or_default().push(v);
            }
        }
    }

    fn summary(self, point: Point<'_>, config: &Config) -> Measurement {
        let repeat = self.rates.len();
        let stats = Stats::of(&self.rates).expect("repeat >= 1");
        let ns_per_op = if stats.median > 0.0 {
            self.op_threads.max(1) as f64 * 1e9 / stats.median
        } else {
            f64::INFINITY
        };
        Measurement {
            workload: point.workload.name().to_string(),
            design: point.design.to_string(),
            threads: point.threads,
            ops_per_sec: stats.median,
            // Infinity does not survive JSON; a design that did nothing reports 0 ops and 0 ns.
            ns_per_op: if ns_per_op.is_finite() {
                ns_per_op
            } else {
                0.0
            },
            repeat,
            min_ops_per_sec: stats.min,
            max_ops_per_sec: stats.max,
            spread: stats.spread(),
            unstable: stats.unstable() || self.busy_pct > BUSY_MAX_PCT,
            busy_pct: self.busy_pct,
            duration_ms: config.duration.as_millis() as u64,
            extra: self
                .extras
                .into_iter()
                .filter_map(|(k, v)| Stats::of(&v).map(|s| (k, s.median)))
                .collect(),
        }
    }
}

/// Runs one point `repeat` times and summarises it. `on_repeat` is called after each repeat.
pub fn measure(
    point: Point<'_>,
    config: &Config,
    repeat: usize,
    mut on_repeat: impl FnMut(),
) -> Result<Measurement, BenchError> {
    check_repeat(repeat)?;
    let mut c = Collected::default();
    for _ in 0..repeat {
        c.add(run_once(point, config)?);
        on_repeat();
    }
    Ok(c.summary(point, config))
}

/// One repeat of `point`, with what other processes and steal took from the machine meanwhile.
fn run_once(
    point: Point<'_>,
    config: &Config,
) -> Result<(crate::workload::Sample, Interference), BenchError> {
    let (sample, busy) =
        interference::during(|| point.workload.run(point.design, point.threads, config));
    Ok((sample?, busy))
}

fn check_repeat(repeat: usize) -> Result<(), BenchError> {
    if repeat == 0 {
        return Err(BenchError::InvalidArgument(
            "--repeat must be at least 1".into(),
        ));
    }
    Ok(())
}

/// The indices of `points` grouped by (workload, threads), groups in order of first
/// appearance, points in their given order within a group.
pub fn groups(points: &[Point<'_>]) -> Vec<Vec<usize>> {
    let mut out: Vec<(&str, usize, Vec<usize>)> = Vec::new();
    for (i, p) in points.iter().enumerate() {
        let key = (p.workload.name(), p.threads);
        match out.iter_mut().find(|(w, t, _)| (*w, *t) == key) {
            Some((_, _, g)) => g.push(i),
            None => out.push((key.0, key.1, vec![i])),
        }
    }
    out.into_iter().map(|(_, _, g)| g).collect()
}

/// Measures every point, showing a progress bar on a terminal unless `quiet`, with the repeats
/// of each (workload, threads) group interleaved across its designs (see the module doc), and
/// calls `on_done` with each finished measurement when its group ends (e.g. to print its JSON
/// line at once, or to write the results so far); an error from `on_done` stops the run and is
/// returned. The measurements come back in the order of `points`.
pub fn run_points(
    points: &[Point<'_>],
    config: &Config,
    repeat: usize,
    quiet: bool,
    mut on_done: impl FnMut(&Measurement) -> Result<(), BenchError>,
) -> Result<Vec<Measurement>, BenchError> {
    check_repeat(repeat)?;
    let total = (points.len() * repeat) as u64;
    let bar = if quiet || !std::io::stderr().is_terminal() {
        ProgressBar::hidden()
    } else {
        let bar = ProgressBar::new(total);
        bar.set_style(
            ProgressStyle::with_template(
                "{elapsed_precise} [{bar:30}] {pos}/{len} repeats, eta {eta} {msg}",
            )
            .expect("static template")
            .progress_chars("=> "),
        );
        bar
    };
    let mut done: Vec<Option<Measurement>> = vec![None; points.len()];
    let result = (|| {
        for group in groups(points) {
            let mut collected: Vec<Collected> =
                group.iter().map(|_| Collected::default()).collect();
            for rep in 1..=repeat {
                for (&i, c) in group.iter().zip(&mut collected) {
                    let p = &points[i];
                    bar.set_message(format!(
                        "{} {} {}T (repeat {rep}/{repeat})",
                        p.workload.name(),
                        p.design,
                        p.threads
                    ));
                    c.add(run_once(*p, config)?);
                    bar.inc(1);
                }
            }
            for (&i, c) in group.iter().zip(collected) {
                let m = c.summary(points[i], config);
                on_done(&m)?;
                done[i] = Some(m);
            }
        }
        Ok(())
    })();
    bar.finish_and_clear();
    result.map(|()| done.into_iter().flatten().collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Regression: a reset that outlasted a short window (a debug build's `alloc` on
    /// `interval`) excluded more than the window, and the thread read 0 ops/s.
    #[test]
    fn housekeeping_past_the_stop_excludes_only_the_part_inside_the_window() {
        let stop = Stop::default();
        let before = Instant::now();
        stop.set();
        let after = Instant::now();
        let inside = stop.time_inside(before);
        assert!(inside <= after.duration_since(before), "{inside:?}");
        assert_eq!(stop.time_inside(after), Duration::ZERO);
        let unset = Stop::default();
        assert!(unset.time_inside(before) >= after.duration_since(before));
    }

    #[test]
    fn stats_of_odd_count_takes_the_middle() {
        let s = Stats::of(&[5.0, 1.0, 3.0]).unwrap();
        assert_eq!(
            s,
            Stats {
                median: 3.0,
                min: 1.0,
                max: 5.0,
                gap: 2.0,
            }
        );
    }

    #[test]
    fn stats_of_even_count_averages_the_two_middles() {
        let s = Stats::of(&[4.0, 1.0, 2.0, 10.0]).unwrap();
        assert_eq!(s.median, 3.0);
        assert_eq!(s.min, 1.0);
        assert_eq!(s.max, 10.0);
    }

    #[test]
    fn stats_of_one_value_is_that_value() {
        let s = Stats::of(&[7.5]).unwrap();
        assert_eq!((s.median, s.min, s.max), (7.5, 7.5, 7.5));
    }

    #[test]
    fn stats_of_nothing_is_none() {
        assert!(Stats::of(&[]).is_none());
    }

    #[test]
    fn run_timed_returns_every_threads_result_in_order() {
        let timed = run_timed(3, Duration::from_millis(5), None, |t| {
            move |stop: &Stop| {
                let n = stop.count_batched(|| {
                    std::hint::black_box(t);
                });
                (t, n)
            }
        });
        assert_eq!(timed.results.len(), 3);
        for (i, (t, n)) in timed.results.iter().enumerate() {
            assert_eq!(*t, i);
            // Whole batches only. Not `n > 0`: on a loaded 2-CPU machine a thread may not be
            // scheduled at all inside a 5 ms window (seen once in CI-like runs).
            assert_eq!(n % BATCH, 0);
        }
        assert!(timed.elapsed >= Duration::from_millis(5));
    }

    #[test]
    #[should_panic(expected = "setup failed")]
    fn run_timed_propagates_a_setup_panic_instead_of_hanging() {
        run_timed(2, Duration::from_millis(1), None, |t| {
            assert!(t != 1, "setup failed");
            |stop: &Stop| stop.count_batched(|| {})
        });
    }

    #[test]
    fn run_timed_calls_the_sampler_while_threads_run() {
        let mut calls = 0;
        let mut sampler = || calls += 1;
        run_timed(1, Duration::from_millis(5), Some(&mut sampler), |_| {
            |stop: &Stop| stop.count_batched(|| {})
        });
        assert!(calls >= 1);
    }

    #[test]
    fn spread_is_the_range_over_the_median() {
        let s = Stats::of(&[9.0, 10.0, 11.0]).unwrap();
        assert!((s.spread() - 0.2).abs() < 1e-12);
        assert!(!s.unstable());
        assert_eq!(Stats::of(&[7.0]).unwrap().spread(), 0.0);
        assert!(!Stats::of(&[7.0]).unwrap().unstable());
    }

    #[test]
    fn bimodal_repeats_are_unstable() {
        // `global` coarse 2T as filed: one repeat at 9.15 M among repeats near 1.9 M.
        assert!(Stats::of(&[1.93e6, 9.15e6, 1.88e6]).unwrap().unstable());
        // Two clusters whose max/min stays under 1.5: the gap between them is what counts.
        let two = Stats::of(&[1.0, 1.02, 1.35, 1.37]).unwrap();
        assert!(two.max / two.min < UNSTABLE_MAX_OVER_MIN);
        assert!(two.unstable());
        // A zero repeat beside a positive one.
        assert!(Stats::of(&[0.0, 5.0, 5.0]).unwrap().unstable());
        // Repeats that agree within 10% are not.
        assert!(!Stats::of(&[1.0, 1.05, 1.1, 1.02]).unwrap().unstable());
        assert!(!Stats::of(&[0.0, 0.0]).unwrap().unstable());
    }

    /// A workload that records the order in which its points run and returns a fixed rate.
    struct Recorder {
        calls: std::sync::Mutex<Vec<(&'static str, usize)>>,
    }

    impl Workload for Recorder {
        fn name(&self) -> &'static str {
            "recorder"
        }
        fn about(&self) -> &'static str {
            "records calls"
        }
        fn designs(&self) -> &'static [&'static str] {
            &["a", "b"]
        }
        fn baseline(&self) -> Option<crate::workload::Baseline> {
            None
        }
        fn run(
            &self,
            design: &str,
            threads: usize,
            _config: &Config,
        ) -> Result<crate::workload::Sample, BenchError> {
            let d = self.designs().iter().find(|d| **d == design).unwrap();
            let mut calls = self.calls.lock().unwrap();
            calls.push((d, threads));
            let rate = calls.len() as f64;
            Ok(crate::workload::Sample {
                ops_per_sec: rate,
                op_threads: threads,
                extra: BTreeMap::new(),
            })
        }
    }

    #[test]
    fn repeats_are_interleaved_across_designs_at_each_thread_count() {
        let w = Recorder {
            calls: Default::default(),
        };
        // Report order: design-major, as the suite and `bench` build it.
        let points: Vec<Point<'_>> = [("a", 1), ("a", 2), ("b", 1), ("b", 2)]
            .into_iter()
            .map(|(design, threads)| Point {
                workload: &w,
                design,
                threads,
            })
            .collect();
        let mut finished = Vec::new();
        let ms = run_points(&points, &Config::default(), 3, true, |m| {
            finished.push((m.design.clone(), m.threads));
            Ok(())
        })
        .unwrap();
        assert_eq!(
            *w.calls.lock().unwrap(),
            [
                ("a", 1),
                ("b", 1),
                ("a", 1),
                ("b", 1),
                ("a", 1),
                ("b", 1),
                ("a", 2),
                ("b", 2),
                ("a", 2),
                ("b", 2),
                ("a", 2),
                ("b", 2),
            ]
        );
        // Handed over when their group ends; returned in the order given.
        let f = |d: &str, t| (d.to_string(), t);
        assert_eq!(finished, [f("a", 1), f("b", 1), f("a", 2), f("b", 2)]);
        let order: Vec<_> = ms.iter().map(|m| (m.design.clone(), m.threads)).collect();
        assert_eq!(order, [f("a", 1), f("a", 2), f("b", 1), f("b", 2)]);
        // `a` 1T ran as calls 1, 3, 5: median 3, range 1-5 (unstable: 5x).
        assert_eq!(
            (
                ms[0].ops_per_sec,
                ms[0].min_ops_per_sec,
                ms[0].max_ops_per_sec
            ),
            (3.0, 1.0, 5.0)
        );
        assert_eq!(ms[0].repeat, 3);
        assert!(ms[0].unstable);
        assert!((ms[0].spread - 4.0 / 3.0).abs() < 1e-12);
    }

    #[test]
    fn run_points_refuses_zero_repeats() {
        let w = Recorder {
            calls: Default::default(),
        };
        let p = [Point {
            workload: &w,
            design: "a",
            threads: 1,
        }];
        assert!(run_points(&p, &Config::default(), 0, true, |_| Ok(())).is_err());
        assert!(w.calls.lock().unwrap().is_empty());
    }
}
