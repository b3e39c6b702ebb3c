//! The default suite: what `aspace` with no arguments runs.
//!
//! Every registered workload, every one of its designs, at 1 and 2 threads (the development
//! machine has two cores; thread counts below a workload's `min_threads` are skipped, so
//! `readers-writers` runs only at 2 threads, one reader and one writer), [`SUITE_DURATION`] per
//! repeat and [`SUITE_REPEAT`] repeats, with `rcu-update` in its one-updater mode
//! (`--update-pct 100`), 10,000 intervals per thread for the `ds-*` workloads, one writer for
//! `readers-writers`, `fault-load`'s four load levels (`fault-load-0pct`, `-25pct`, `-50pct`,
//! `-100pct`, the last at 2 threads only; `fault-load` with a free `--mmap-pct` is left to
//! `aspace bench`) and the default text (2^20 words) for `metis*`. The twelve VM workloads
//! (`alloc`, `alloc-fault-modify`, `local`, `pipeline`, `global`, the four `fault-load` levels,
//! `soft-fault`, `metis`, `metis-64k`) run `linux` and every `aspace_vm` design (`coarse`,
//! `faultlock`, `interval`); `alloc` also runs the two `interval` breakdown variants
//! (`interval-no-arenas`, `interval-atomic-counter`). Each `aspace_vm` design adds 1.5 s of
//! measurement (3 x 500 ms) per VM workload and thread count.
//!
//! [`SuiteOptions`] changes the thread counts (`--threads`), the duration and repeats
//! (`--quick`: [`QUICK_DURATION`] x [`QUICK_REPEAT`], a smoke run) and the workloads (`--only`).
//!
//! Output: `results/<UTC timestamp>/` (relative to the current directory) holding
//! `run.json` (machine, commit, settings; written first), `results.csv` and `results.json` (an
//! array of measurements), both rewritten (through a temporary file and a rename) after every
//! measured point so an interrupted run keeps what it measured, then at the end one SVG plot per
//! workload, `headline.svg`, `headline.md` and `index.html` (see `render.rs`). The binary shows a
//! progress bar on a terminal, or one line per point when its output is redirected, and at the
//! end prints the summary table, the headline table with its takeaway, and the path of
//! `index.html` to stdout.
//!
//! The repeats of the designs at one (workload, threads) point are interleaved (A, B, A, B: see
//! `harness.rs`), so `results.csv` and `results.json` grow by one (workload, threads) group at a
//! time.
//!
//! Not for: careful measurements (use `aspace bench` with longer durations and more repeats).

use crate::error::BenchError;
use crate::harness::{run_points, Point};
use crate::limits::{check_duration_ms, check_repeat, check_threads};
use crate::measurement::Measurement;
use crate::render::render;
use crate::report::machine::{RunInfo, Settings};
use crate::report::{csv, json_array};
use crate::workload::Config;
use crate::workloads;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// Measured time per repeat in the suite.
pub const SUITE_DURATION: Duration = Duration::from_millis(500);

/// Repeats per point in the suite.
pub const SUITE_REPEAT: usize = 3;

/// Thread counts of the suite.
pub const SUITE_THREADS: &[usize] = &[1, 2];

/// Measured time per repeat with `--quick`.
pub const QUICK_DURATION: Duration = Duration::from_millis(100);

/// Repeats per point with `--quick`.
pub const QUICK_REPEAT: usize = 1;

/// What a suite run measures: the defaults above, or what `--threads`, `--quick` and `--only`
/// changed.
#[derive(Clone, Debug, PartialEq)]
pub struct SuiteOptions {
    /// Thread counts (each checked against [`MAX_THREADS`](crate::limits::MAX_THREADS)).
    pub threads: Vec<usize>,
    /// Measured time per repeat.
    pub duration: Duration,
    /// Repeats per point.
    pub repeat: usize,
    /// Workload names to run; empty means every workload.
    pub only: Vec<String>,
}

impl Default for SuiteOptions {
    fn default() -> Self {
        SuiteOptions {
            threads: SUITE_THREADS.to_vec(),
            duration: SUITE_DURATION,
            repeat: SUITE_REPEAT,
            only: Vec::new(),
        }
    }
}

impl SuiteOptions {
    /// These options with [`QUICK_DURATION`] and [`QUICK_REPEAT`] (a smoke run, not a
    /// measurement).
    pub fn quick(self) -> Self {
        SuiteOptions {
            duration: QUICK_DURATION,
            repeat: QUICK_REPEAT,
            ..self
        }
    }

    /// The suite's workload configuration with these options' duration.
    pub fn config(&self) -> Config {
        Config {
            duration: self.duration,
            ..config()
        }
    }
}

/// The suite's configuration.
pub fn config() -> Config {
    Config {
        duration: SUITE_DURATION,
        update_pct: 100,
        intervals: 10_000,
        writers: 1,
        update_rate: None,
        mmap_pct: 10,
        metis_words: crate::limits::METIS_DEFAULT_WORDS,
        idle_cores: 0,
    }
}

/// Every (workload, design, threads) point of the default suite, in report order.
pub fn points() -> Vec<Point<'static>> {
    points_for(&SuiteOptions::default()).expect("the default options are valid")
}

/// Every (workload, design, threads) point of the suite with `opts`, in report order; thread
/// counts below a workload's [`Workload::min_threads`](crate::workload::Workload::min_threads)
/// or above its [`Workload::max_threads`](crate::workload::Workload::max_threads) are skipped. Refuses thread counts outside the limits, an unknown `--only` workload, and
/// options that leave no point to measure.
pub fn points_for(opts: &SuiteOptions) -> Result<Vec<Point<'static>>, BenchError> {
    check_threads(&opts.threads)?;
    check_duration_ms(opts.duration.as_millis().try_into().unwrap_or(u64::MAX))?;
    check_repeat(opts.repeat)?;
    for name in &opts.only {
        workloads::find(name)?;
    }
    let config = opts.config();
    let mut out = Vec::new();
    for w in workloads::all() {
        // `fault-load` with a free `--mmap-pct` is for `aspace bench`; the suite runs its four
        // load levels (`fault-load-0pct` ... `fault-load-100pct`).
        if w.name() == workloads::FAULT_LOAD
            || (!opts.only.is_empty() && !opts.only.iter().any(|n| workloads::selects(n, w.name())))
        {
            continue;
        }
        for &design in w.designs() {
            for &threads in &opts.threads {
                if threads < w.min_threads(&config) || threads > w.max_threads() {
                    continue;
                }
                out.push(Point {
                    workload: w,
                    design,
                    threads,
                });
            }
        }
    }
    if out.is_empty() {
        return Err(BenchError::InvalidArgument(format!(
            "--threads {:?} leaves nothing to run: no selected workload runs at those counts",
            opts.threads
        )));
    }
    Ok(out)
}

/// The directory a suite run started now writes into: `root/<UTC timestamp>`.
pub fn results_dir(root: &Path) -> PathBuf {
    root.join(timestamp(SystemTime::now()))
}

/// The settings `run.json` records for `opts`.
pub fn settings(opts: &SuiteOptions) -> Settings {
    let c = opts.config();
    Settings {
        duration_ms: opts.duration.as_millis().try_into().unwrap_or(u64::MAX),
        repeat: opts.repeat,
        threads: opts.threads.clone(),
        only: opts.only.clone(),
        update_pct: c.update_pct,
        intervals: c.intervals,
        writers: c.writers,
        mmap_pct: c.mmap_pct,
    }
}

/// Runs the suite with `opts`, writing into `dir` as it goes: first `run.json` (machine,
/// commit, settings), then after every measured point `results.csv` and `results.json` with
/// every point measured so far (so an interrupted run keeps its data, and `aspace report DIR`
/// can render it); the plots, `headline.md` and `index.html` are written at the end.
/// `on_point` is called with each measurement after it is on disk; an error from it stops the
/// run. Returns the measurements.
pub fn run(
    dir: &Path,
    opts: &SuiteOptions,
    mut on_point: impl FnMut(&Measurement) -> Result<(), BenchError>,
) -> Result<Vec<Measurement>, BenchError> {
    let points = points_for(opts)?;
    std::fs::create_dir_all(dir).map_err(|e| BenchError::io(dir, e))?;
    let run = RunInfo::detect(settings(opts), utc_date(SystemTime::now()));
    run.write(dir)?;
    let mut so_far = Vec::with_capacity(points.len());
    let ms = run_points(&points, &opts.config(), opts.repeat, false, |m| {
        so_far.push(m.clone());
        write_tables(dir, &so_far)?;
        on_point(m)
    })?;
    write_results(dir, &ms, Some(&run))?;
    Ok(ms)
}

/// Writes `text` to `dir/name` through a temporary file and a rename (now in `render.rs`, which
/// also writes the pages; kept reachable here for the suite's other writers).
pub(crate) use crate::render::write_file;

/// Writes `results.csv` and `results.json` into `dir` (which must exist).
pub fn write_tables(dir: &Path, ms: &[Measurement]) -> Result<(), BenchError> {
    write_file(dir, "results.csv", &csv(ms))?;
    write_file(dir, "results.json", &json_array(ms)?)
}

/// Writes `results.csv`, `results.json`, the plots, `headline.md` and `index.html` into `dir`
/// (created), with `run` on the page.
pub fn write_results(
    dir: &Path,
    ms: &[Measurement],
    run: Option<&RunInfo>,
) -> Result<(), BenchError> {
    std::fs::create_dir_all(dir).map_err(|e| BenchError::io(dir, e))?;
    write_tables(dir, ms)?;
    render(dir, ms, run, None)
}

/// `YYYYmmdd-HHMMSS` in UTC.
pub fn timestamp(t: SystemTime) -> String {
    let secs = t.duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs());
    let (days, rem) = (secs / 86_400, secs % 86_400);
    let (y, m, d) = civil_from_days(days as i64);
    format!(
        "{y:04}{m:02}{d:02}-{:02}{:02}{:02}",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

/// `YYYY-mm-dd HH:MM:SS UTC`.
pub fn utc_date(t: SystemTime) -> String {
    let ts = timestamp(t);
    format!(
        "{}-{}-{} {}:{}:{} UTC",
        &ts[0..4],
        &ts[4..6],
        &ts[6..8],
        &ts[9..11],
        &ts[11..13],
        &ts[13..15]
    )
}

/// Proleptic Gregorian date of a day count since 1970-01-01 (Howard Hinnant's algorithm).
fn civil_from_days(z: i64) -> (i64, u32, u32) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let y = yoe + era * 400 + i64::from(m <= 2);
    (y, m, d)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timestamp_formats_utc_dates() {
        assert_eq!(timestamp(UNIX_EPOCH), "19700101-000000");
        let t = UNIX_EPOCH + Duration::from_secs(951_782_400 + 3_723); // 2000-02-29 01:02:03
        assert_eq!(timestamp(t), "20000229-010203");
        assert_eq!(utc_date(t), "2000-02-29 01:02:03 UTC");
    }

    #[test]
    fn write_results_creates_csv_json_plots_and_index() {
        let m = Measurement {
            workload: "ds-map".into(),
            design: "btree".into(),
            threads: 1,
            ops_per_sec: 1e6,
            ns_per_op: 1000.0,
            repeat: 1,
            min_ops_per_sec: 1e6,
            max_ops_per_sec: 1e6,
            spread: 0.0,
            unstable: false,
            busy_pct: 0.0,
            duration_ms: 1,
            extra: Default::default(),
        };
        let dir = std::env::temp_dir().join(format!("aspace-suite-test-{}", std::process::id()));
        write_results(&dir, std::slice::from_ref(&m), None).unwrap();
        for f in [
            "results.csv",
            "results.json",
            "ds-map.svg",
            "index.html",
            "headline.md",
        ] {
            assert!(dir.join(f).is_file(), "{f} missing");
        }
        let json = std::fs::read_to_string(dir.join("results.json")).unwrap();
        let back: Vec<Measurement> = serde_json::from_str(&json).unwrap();
        assert_eq!(back, vec![m]);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn suite_covers_every_design_of_every_workload_at_one_and_two_threads() {
        let pts = points();
        // `fault-load` with a free `--mmap-pct` is left out (its levels run instead), and
        // readers-writers, fault-load-100pct and access-munmap run at 2 threads only.
        let expected: usize = workloads::all()
            .iter()
            .filter(|w| w.name() != workloads::FAULT_LOAD)
            .map(|w| {
                let counts = match w.name() {
                    "readers-writers" | "fault-load-100pct" | "access-munmap" => 1,
                    _ => 2,
                };
                w.designs().len() * counts
            })
            .sum();
        assert_eq!(pts.len(), expected);
        assert!(!pts.iter().any(|p| p.workload.name() == "fault-load"));
        for level in workloads::fault_load::LEVEL_NAMES {
            assert!(pts.iter().any(|p| p.workload.name() == level), "{level}");
        }
        assert!(pts
            .iter()
            .any(|p| p.workload.name() == "soft-fault" && p.threads == 1));
        assert!(pts
            .iter()
            .any(|p| p.workload.name() == "ds-map" && p.threads == 2));
        // readers-writers needs a reader besides its one writer: only the 2-thread point.
        assert!(pts
            .iter()
            .filter(|p| p.workload.name() == "readers-writers")
            .all(|p| p.threads == 2));
    }

    fn tiny(only: &str) -> SuiteOptions {
        SuiteOptions {
            threads: vec![1],
            duration: Duration::from_millis(1),
            repeat: 1,
            only: vec![only.into()],
        }
    }

    #[test]
    fn only_and_threads_select_the_points() {
        let pts = points_for(&tiny("rcu-read")).unwrap();
        let rcu_read = workloads::find("rcu-read").unwrap();
        assert_eq!(pts.len(), rcu_read.designs().len());
        assert!(pts
            .iter()
            .all(|p| p.workload.name() == "rcu-read" && p.threads == 1));
        assert!(matches!(
            points_for(&tiny("rcu-raed")),
            Err(BenchError::UnknownWorkload { .. })
        ));
        // readers-writers needs two threads: --threads 1 leaves nothing to run.
        assert!(matches!(
            points_for(&tiny("readers-writers")),
            Err(BenchError::InvalidArgument(_))
        ));
        let too_many = SuiteOptions {
            threads: vec![1, 100_000],
            ..tiny("rcu-read")
        };
        assert!(matches!(
            points_for(&too_many),
            Err(BenchError::InvalidArgument(_))
        ));
        let quick = SuiteOptions::default().quick();
        assert_eq!(
            (quick.duration, quick.repeat),
            (QUICK_DURATION, QUICK_REPEAT)
        );
        assert_eq!(quick.threads, SUITE_THREADS);
    }

    #[test]
    fn an_interrupted_run_keeps_what_it_measured_on_disk() {
        let dir = std::env::temp_dir().join(format!("aspace-suite-stop-{}", std::process::id()));
        let mut seen = 0;
        let r = run(&dir, &tiny("rcu-read"), |_| {
            seen += 1;
            if seen == 2 {
                Err(BenchError::InvalidArgument("stop here".into()))
            } else {
                Ok(())
            }
        });
        assert!(matches!(r, Err(BenchError::InvalidArgument(_))));
        assert_eq!(seen, 2);
        // Both points measured before the stop are on disk; no plots or index were written.
        let csv = std::fs::read_to_string(dir.join("results.csv")).unwrap();
        assert_eq!(csv.lines().count(), 1 + 2, "{csv}");
        let json = std::fs::read_to_string(dir.join("results.json")).unwrap();
        let back: Vec<Measurement> = serde_json::from_str(&json).unwrap();
        assert_eq!(back.len(), 2);
        assert!(!dir.join("index.html").exists());
        // run.json was written before the first point, so the run can be rendered later.
        let run = RunInfo::read(&dir).unwrap().unwrap();
        assert_eq!(run.settings.threads, [1]);
        assert_eq!(run.settings.only, ["rcu-read"]);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
