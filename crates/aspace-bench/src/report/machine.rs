//! Where and how a run was made: the machine (CPU model, logical CPUs, kernel, whether it is a
//! virtual machine), the commit, the date and the suite's settings, stored as `run.json` in the
//! results directory so that `aspace report DIR` can render the page again later.
//!
//! Detection reads `/proc/cpuinfo` (`model name`, the `hypervisor` CPU flag) and
//! `/proc/sys/kernel/osrelease`, counts CPUs with `available_parallelism`, and asks `git` for
//! the commit (`rev-parse --short HEAD`) and whether tracked files differ from it
//! (`status --porcelain --untracked-files=no`); whatever cannot be read is `"unknown"` (or
//! `None`), never an error: a run is worth keeping even where `git` is missing.
//!
//! Not for: anything on a measured path (it runs once, before the suite).

use crate::error::BenchError;
use serde::{Deserialize, Serialize};
use std::path::Path;
use std::process::Command;

/// The file name of the run description in a results directory.
pub const RUN_JSON: &str = "run.json";

/// The machine a run was made on.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Machine {
    /// `/proc/cpuinfo`'s first `model name` (`"unknown"` when absent).
    pub cpu_model: String,
    /// Logical CPUs available to the process.
    pub logical_cpus: usize,
    /// Kernel release (`uname -r`).
    pub kernel: String,
    /// Whether the CPU reports the `hypervisor` flag (a virtual machine); `None` if unknown.
    pub virtualized: Option<bool>,
}

/// The settings of a suite run.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Settings {
    /// Measured milliseconds per repeat.
    pub duration_ms: u64,
    /// Repeats per point.
    pub repeat: usize,
    /// Thread counts.
    pub threads: Vec<usize>,
    /// `--only` workloads (empty: all).
    pub only: Vec<String>,
    /// `rcu-update` update percentage.
    pub update_pct: u32,
    /// `ds-*` intervals per thread.
    pub intervals: usize,
    /// `readers-writers` writer threads.
    pub writers: usize,
    /// `fault-load` mapper share.
    pub mmap_pct: u32,
}

/// Everything `run.json` records.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RunInfo {
    /// The machine.
    pub machine: Machine,
    /// Short commit hash, or `"unknown"`.
    pub commit: String,
    /// Whether tracked files differed from the commit.
    pub dirty: bool,
    /// Start of the run, `YYYY-mm-dd HH:MM:SS UTC`.
    pub date_utc: String,
    /// The suite's settings.
    pub settings: Settings,
}

impl Machine {
    /// The machine this process runs on.
    pub fn detect() -> Machine {
        let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").ok();
        Machine {
            cpu_model: cpuinfo
                .as_deref()
                .and_then(|c| cpuinfo_field(c, "model name"))
                .unwrap_or_else(|| "unknown".into()),
            logical_cpus: std::thread::available_parallelism().map_or(0, |n| n.get()),
            kernel: std::fs::read_to_string("/proc/sys/kernel/osrelease")
                .map(|s| s.trim().to_string())
                .unwrap_or_else(|_| "unknown".into()),
            virtualized: cpuinfo.as_deref().and_then(|c| {
                cpuinfo_field(c, "flags").map(|f| f.split_whitespace().any(|x| x == "hypervisor"))
            }),
        }
    }
}

/// The value of the first `key : value` line of `/proc/cpuinfo` text.
pub fn cpuinfo_field(cpuinfo: &str, key: &str) -> Option<String> {
    cpuinfo.lines().find_map(|l| {
        let (k, v) = l.split_once(':')?;
        (k.trim() == key).then(|| v.trim().to_string())
    })
}

fn git(args: &[&str]) -> Option<String> {
    let out = Command::new("git").args(args).output().ok()?;
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).trim().to_string())
}

impl RunInfo {
    /// This machine and commit, with `settings`, started at `date_utc`.
    pub fn detect(settings: Settings, date_utc: String) -> RunInfo {
        let commit = git(&["rev-parse", "--short", "HEAD"]).filter(|c| !c.is_empty());
        let dirty = commit.is_some()
            && git(&["status", "--porcelain", "--untracked-files=no"])
                .is_some_and(|s| !s.is_empty());
        RunInfo {
            machine: Machine::detect(),
            commit: commit.unwrap_or_else(|| "unknown".into()),
            dirty,
            date_utc,
            settings,
        }
    }

    /// The commit as shown: `84f1f8d`, `84f1f8d (dirty)` or `unknown`.
    pub fn commit_text(&self) -> String {
        if self.dirty {
            format!("{} (dirty)", self.commit)
        } else {
            self.commit.clone()
        }
    }

    /// The machine in one phrase: `AMD EPYC 7B13, 2 logical CPUs, Linux 6.1.0, virtual machine`.
    pub fn machine_text(&self) -> String {
        let m = &self.machine;
        let vm = match m.virtualized {
            Some(true) => ", virtual machine",
            Some(false) => ", bare metal",
            None => "",
        };
        format!(
            "{}, {} logical CPUs, Linux {}{vm}",
            m.cpu_model, m.logical_cpus, m.kernel
        )
    }

    /// The settings in one phrase: `500 ms x 3 repeats, threads 1,2`.
    pub fn settings_text(&self) -> String {
        let s = &self.settings;
        let threads: Vec<String> = s.threads.iter().map(usize::to_string).collect();
        let mut t = format!(
            "{} ms x {} repeat{}, threads {}",
            s.duration_ms,
            s.repeat,
            if s.repeat == 1 { "" } else { "s" },
            threads.join(",")
        );
        if !s.only.is_empty() {
            t.push_str(&format!(", only {}", s.only.join(",")));
        }
        t
    }

    /// One line saying when and where: `Measured 2026-11-24 09:05:14 UTC on ..., commit ...;
    /// 500 ms x 3 repeats, threads 1,2.`
    pub fn summary_line(&self) -> String {
        format!(
            "Measured {} on {}, commit {}; {}.",
            self.date_utc,
            self.machine_text(),
            self.commit_text(),
            self.settings_text()
        )
    }

    /// Writes `dir/run.json`.
    pub fn write(&self, dir: &Path) -> Result<(), BenchError> {
        let path = dir.join(RUN_JSON);
        let text = serde_json::to_string_pretty(self)?;
        std::fs::write(&path, text).map_err(|e| BenchError::io(&path, e))
    }

    /// Reads `dir/run.json`: `None` when absent (runs from before it existed).
    ///
    /// # Errors
    /// [`BenchError::InvalidResults`] when it exists but cannot be read or parsed.
    pub fn read(dir: &Path) -> Result<Option<RunInfo>, BenchError> {
        let path = dir.join(RUN_JSON);
        let text = match std::fs::read_to_string(&path) {
            Ok(t) => t,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(BenchError::invalid_results(&path, e)),
        };
        serde_json::from_str(&text)
            .map(Some)
            .map_err(|e| BenchError::invalid_results(&path, e))
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    pub(crate) fn sample() -> RunInfo {
        RunInfo {
            machine: Machine {
                cpu_model: "AMD EPYC 7B13".into(),
                logical_cpus: 2,
                kernel: "6.1.0".into(),
                virtualized: Some(true),
            },
            commit: "84f1f8d".into(),
            dirty: true,
            date_utc: "2026-11-24 09:05:14 UTC".into(),
            settings: Settings {
                duration_ms: 500,
                repeat: 3,
                threads: vec![1, 2],
                only: vec![],
                update_pct: 100,
                intervals: 10_000,
                writers: 1,
                mmap_pct: 10,
            },
        }
    }

    #[test]
    fn cpuinfo_fields_are_found_by_key() {
        let text = "processor\t: 0\nmodel name\t: AMD EPYC 7B13 64-Core Processor\nflags\t\t: fpu hypervisor sse\n";
        assert_eq!(
            cpuinfo_field(text, "model name").unwrap(),
            "AMD EPYC 7B13 64-Core Processor"
        );
        assert!(cpuinfo_field(text, "flags").unwrap().contains("hypervisor"));
        assert!(cpuinfo_field(text, "model").is_none());
    }

    #[test]
    fn detection_reads_this_machine() {
        let m = Machine::detect();
        assert!(m.logical_cpus >= 1);
        assert!(!m.kernel.is_empty() && !m.cpu_model.is_empty());
    }

    #[test]
    fn run_json_round_trips_and_absent_is_none() {
        let dir = std::env::temp_dir().join(format!("aspace-run-json-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        assert_eq!(RunInfo::read(&dir).unwrap(), None);
        sample().write(&dir).unwrap();
        assert_eq!(RunInfo::read(&dir).unwrap(), Some(sample()));
        std::fs::write(dir.join(RUN_JSON), "{\"machine\":").unwrap();
        assert!(matches!(
            RunInfo::read(&dir),
            Err(BenchError::InvalidResults { .. })
        ));
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn summary_says_when_where_and_how() {
        assert_eq!(
            sample().summary_line(),
            "Measured 2026-11-24 09:05:14 UTC on AMD EPYC 7B13, 2 logical CPUs, Linux 6.1.0, \
             virtual machine, commit 84f1f8d (dirty); 500 ms x 3 repeats, threads 1,2."
        );
    }
}
