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
//! # Repeats ([`measure`])
//! Each point is run `repeat` times; the report keeps the median throughput, the min and the max
//! ([`Stats`]), and the median of every extra metric.
//!
//! Not for: pinning threads to cores, warm-up discarding (the first repeat is kept; with a
//! median over several repeats a cold first run does not move the result), or statistics beyond
//! median and range.

use crate::error::BenchError;
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

/// The flag the coordinator raises when the duration is over.
#[derive(Debug, Default)]
pub struct Stop(AtomicBool);

impl Stop {
    /// Whether the measurement is over.
    #[inline]
    pub fn is_set(&self) -> bool {
        // Relaxed: the flag orders nothing (see the module doc).
        self.0.load(Ordering::Relaxed)
    }

    fn set(&self) {
        self.0.store(true, Ordering::Relaxed);
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

/// Median, minimum and maximum of a non-empty list of numbers.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Stats {
    /// The middle value (mean of the two middle values for an even count).
    pub median: f64,
    /// The smallest value.
    pub min: f64,
    /// The largest value.
    pub max: f64,
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
        Some(Stats {
            median,
            min: v[0],
            max: v[n - 1],
        })
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

/// Runs one point `repeat` times and summarises it. `on_repeat` is called after each repeat.
pub fn measure(
    point: Point<'_>,
    config: &Config,
    repeat: usize,
    mut on_repeat: impl FnMut(),
) -> Result<Measurement, BenchError> {
    if repeat == 0 {
        return Err(BenchError::InvalidArgument(
            "--repeat must be at least 1".into(),
        ));
    }
    let mut rates = Vec::with_capacity(repeat);
    let mut extras: BTreeMap<String, Vec<f64>> = BTreeMap::new();
    let mut op_threads = point.threads;
    for _ in 0..repeat {
        let s = point.workload.run(point.design, point.threads, config)?;
        rates.push(s.ops_per_sec);
        op_threads = s.op_threads.max(1);
        for (k, v) in s.extra {
            if v.is_finite() {
                extras.entry(k).or_default().push(v);
            }
        }
        on_repeat();
    }
    let stats = Stats::of(&rates).expect("repeat >= 1");
    let ns_per_op = if stats.median > 0.0 {
        op_threads as f64 * 1e9 / stats.median
    } else {
        f64::INFINITY
    };
    Ok(Measurement {
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
        duration_ms: config.duration.as_millis() as u64,
        extra: extras
            .into_iter()
            .filter_map(|(k, v)| Stats::of(&v).map(|s| (k, s.median)))
            .collect(),
    })
}

/// Measures every point in order, showing a progress bar on a terminal unless `quiet`, and
/// calling `on_done` with each finished measurement (e.g. to print its JSON line at once, or to
/// write the results so far); an error from `on_done` stops the run and is returned.
pub fn run_points(
    points: &[Point<'_>],
    config: &Config,
    repeat: usize,
    quiet: bool,
    mut on_done: impl FnMut(&Measurement) -> Result<(), BenchError>,
) -> Result<Vec<Measurement>, BenchError> {
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
    let mut out = Vec::with_capacity(points.len());
    for p in points {
        bar.set_message(format!("{} {} {}T", p.workload.name(), p.design, p.threads));
        let done = measure(*p, config, repeat, || bar.inc(1)).and_then(|m| on_done(&m).map(|()| m));
        match done {
            Ok(m) => out.push(m),
            Err(e) => {
                bar.finish_and_clear();
                return Err(e);
            }
        }
    }
    bar.finish_and_clear();
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stats_of_odd_count_takes_the_middle() {
        let s = Stats::of(&[5.0, 1.0, 3.0]).unwrap();
        assert_eq!(
            s,
            Stats {
                median: 3.0,
                min: 1.0,
                max: 5.0
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
}
