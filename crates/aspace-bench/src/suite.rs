//! The default suite: what `aspace` with no arguments runs.
//!
//! Every registered workload, every one of its designs, at 1 and 2 threads (the development
//! machine has two cores; thread counts below a workload's `min_threads` are skipped, so
//! `readers-writers` runs only at 2 threads, one reader and one writer), [`SUITE_DURATION`] per
//! repeat and [`SUITE_REPEAT`] repeats, with `rcu-update` in its one-updater mode
//! (`--update-pct 100`), 10,000 intervals per thread for the `ds-*` workloads, one writer for
//! `readers-writers` and `--mmap-pct 10` for `fault-load`. The six VM workloads (`alloc`,
//! `alloc-fault-modify`, `local`, `pipeline`, `global`, `fault-load`) run `linux` and every
//! `aspace_vm` design (`coarse`, `interval`); `alloc` also runs the two `interval` breakdown
//! variants (`interval-no-arenas`, `interval-atomic-counter`). Each further `aspace_vm` design
//! adds 18 s of measurement to the roughly 130 s of the rest.
//!
//! Output: a progress bar while it runs, then `results/<UTC timestamp>/` (relative to the
//! current directory) holding `results.csv`, `results.json` (an array of measurements), one SVG
//! plot per workload and `index.html`; the summary table goes to stdout.
//!
//! Not for: careful measurements (use `aspace bench` with longer durations and more repeats).

use crate::error::BenchError;
use crate::harness::{run_points, Point};
use crate::measurement::Measurement;
use crate::plot::{index_html, write_plots};
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

/// The suite's configuration.
pub fn config() -> Config {
    Config {
        duration: SUITE_DURATION,
        update_pct: 100,
        intervals: 10_000,
        writers: 1,
        update_rate: None,
        mmap_pct: 10,
    }
}

/// Every (workload, design, threads) point of the suite, in report order; thread counts below a
/// workload's [`Workload::min_threads`](crate::workload::Workload::min_threads) are skipped.
pub fn points() -> Vec<Point<'static>> {
    let config = config();
    let mut out = Vec::new();
    for w in workloads::all() {
        for &design in w.designs() {
            for &threads in SUITE_THREADS {
                if threads < w.min_threads(&config) {
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
    out
}

/// Runs the suite and writes its results directory under `root`; returns the directory and the
/// measurements.
pub fn run(root: &Path) -> Result<(PathBuf, Vec<Measurement>), BenchError> {
    let ms = run_points(&points(), &config(), SUITE_REPEAT, false, |_| {})?;
    let dir = root.join(timestamp(SystemTime::now()));
    write_results(&dir, &ms)?;
    Ok((dir, ms))
}

/// Writes `results.csv`, `results.json`, the plots and `index.html` into `dir` (created).
pub fn write_results(dir: &Path, ms: &[Measurement]) -> Result<(), BenchError> {
    std::fs::create_dir_all(dir).map_err(|e| BenchError::io(dir, e))?;
    let write = |name: &str, text: String| {
        let path = dir.join(name);
        std::fs::write(&path, text).map_err(|e| BenchError::io(path, e))
    };
    write("results.csv", csv(ms))?;
    write("results.json", json_array(ms)?)?;
    write_plots(dir, ms)?;
    let title = format!(
        "aspace results {}",
        dir.file_name().and_then(|n| n.to_str()).unwrap_or("")
    );
    write("index.html", index_html(&title, ms))?;
    Ok(())
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
            duration_ms: 1,
            extra: Default::default(),
        };
        let dir = std::env::temp_dir().join(format!("aspace-suite-test-{}", std::process::id()));
        write_results(&dir, std::slice::from_ref(&m)).unwrap();
        for f in ["results.csv", "results.json", "ds-map.svg", "index.html"] {
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
        let expected: usize = workloads::all()
            .iter()
            .map(|w| w.designs().len() * if w.name() == "readers-writers" { 1 } else { 2 })
            .sum();
        assert_eq!(pts.len(), expected);
        assert!(pts
            .iter()
            .any(|p| p.workload.name() == "ds-map" && p.threads == 2));
        // readers-writers needs a reader besides its one writer: only the 2-thread point.
        assert!(pts
            .iter()
            .filter(|p| p.workload.name() == "readers-writers")
            .all(|p| p.threads == 2));
    }
}
