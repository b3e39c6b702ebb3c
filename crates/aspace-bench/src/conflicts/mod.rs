//! `aspace conflicts`: the conflict audit of the VM workloads (issue 12).
//!
//! For a workload, a set of engine designs and core counts, it runs the workload's operations
//! on N threads (logical cores, any number on any machine) in rounds, records the cache lines
//! each operation read and wrote through the `aspace-conflicts` shim that the aspace crates use
//! under their `conflicts` feature, and reports per design and core count: operations counted,
//! the mean and max number of *conflicting* lines per operation (lines another core's operation
//! of the same or the next round also accessed, one of the two writing: RadixVM §3, Commuter),
//! the RCU machinery's conflicting lines amortized per operation, and the sites (file:line of
//! the atomic operation or lock call, standing in for symbol or allocation site) of the lines.
//!
//! Instrumentation is compiled in only with the binary's cargo feature `conflicts` (forwarded
//! to aspace-rcu, aspace-sync, aspace-map and aspace-vm); without it the subcommand exists but
//! refuses with one line saying how to run it, and the crates are exactly the uninstrumented
//! ones. The plan (workload, designs, cores, rounds) and the output (table, `--json` lines,
//! `--out DIR` merging `DIR/conflicts.json`) are here in both builds; the recorded runs are in
//! [`ops`] (feature only): one function per workload, expressing one iteration of its measured
//! loop as one operation.
//!
//! `linux` cannot be audited (the kernel's lines are invisible here) and is refused.
//!
//! Not for: timing (the recording and the per-round barriers dominate); the figures count lines,
//! not nanoseconds.

#[cfg(feature = "conflicts")]
pub mod ops;

use crate::error::BenchError;
use crate::workloads::vm;
use serde::{Deserialize, Serialize};
use std::fmt::Write as _;
use std::path::Path;

/// The workloads the audit runs (the VM workloads).
pub const WORKLOADS: &[&str] = &[
    "local",
    "alloc",
    "alloc-fault-modify",
    "pipeline",
    "global",
    "fault-load",
    "soft-fault",
];

/// The most cores (threads) of one audit point.
pub const MAX_CORES: usize = 256;

/// The most rounds of one audit point.
pub const MAX_ROUNDS: u64 = 100_000;

/// Default rounds per point.
pub const DEFAULT_ROUNDS: u64 = 40;

/// Default warm-up rounds (not counted).
pub const DEFAULT_WARMUP: u64 = 8;

/// Bytes of frames of an audited space (reserved, only touched pages cost memory): the frame
/// caches of 256 cores alone exceed the benchmarks' 1 GiB.
pub const AUDIT_MEMORY: u64 = 8 << 30;

/// The sites printed per point in the table.
pub const TABLE_SITES: usize = 6;

/// One site and its conflicting lines per operation.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SiteRow {
    /// `file:line:col` of the access naming the line.
    pub site: String,
    /// Conflicting lines labelled with it, per counted operation.
    pub per_op: f64,
}

/// The audit of one (workload, design, cores) point: one `--json` line, one element of
/// `conflicts.json`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ConflictRow {
    /// Workload name.
    pub workload: String,
    /// Design name.
    pub design: String,
    /// Cores (threads).
    pub cores: usize,
    /// Rounds run (warm-up included).
    pub rounds: u64,
    /// Warm-up rounds not counted.
    pub warmup: u64,
    /// Operations counted.
    pub ops: u64,
    /// Mean conflicting lines per operation.
    pub conflicts_per_op: f64,
    /// Most conflicting lines of one operation.
    pub max_conflicts_per_op: u64,
    /// RCU machinery's conflicting lines per operation (grace periods, reclaimer, registry).
    pub rcu_conflicts_per_op: f64,
    /// Sites of the operations' conflicting lines, most frequent first.
    pub lines: Vec<SiteRow>,
    /// Sites of the RCU machinery's conflicting lines, most frequent first.
    pub rcu_lines: Vec<SiteRow>,
    /// With `--pairs`: which other core's site each conflicting site met, most frequent first
    /// (empty, and absent from the JSON, otherwise).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub pairs: Vec<PairRow>,
}

/// Two sites that met on conflicting lines (`aspace_conflicts::PairReport`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PairRow {
    /// The counted operation's site.
    pub mine: String,
    /// Whether the operation wrote the line.
    pub mine_write: bool,
    /// The other core's site for the same line.
    pub other: String,
    /// Whether the other core wrote it.
    pub other_write: bool,
    /// Such meetings per counted operation.
    pub per_op: f64,
}

/// What `aspace conflicts` will run, after validation.
#[derive(Clone, Debug, PartialEq)]
pub struct Plan {
    /// The workload.
    pub workload: &'static str,
    /// Designs, in the order asked.
    pub designs: Vec<&'static str>,
    /// Core counts.
    pub cores: Vec<usize>,
    /// Rounds per point.
    pub rounds: u64,
    /// Warm-up rounds per point.
    pub warmup: u64,
    /// Whether to report the site pairs behind the conflicts (`--pairs`).
    pub pairs: bool,
}

/// The engine designs the audit can run for `workload` (every VM design but `linux`, and the
/// `interval` breakdown variants).
pub fn designs_of(workload: &str) -> Vec<&'static str> {
    let _ = workload;
    vm::designs_with_breakdown()
        .iter()
        .copied()
        .filter(|d| *d != "linux")
        .collect()
}

impl Plan {
    /// Validates the command line: a known VM workload, known engine designs (default: all),
    /// core counts in `1..=MAX_CORES`, `1..=MAX_ROUNDS` rounds and fewer warm-up rounds.
    ///
    /// # Errors
    /// [`BenchError::UnknownWorkload`], [`BenchError::UnknownDesign`] (with a note for
    /// `linux`), [`BenchError::InvalidArgument`].
    pub fn new(
        workload: &str,
        designs: &[String],
        cores: &[usize],
        rounds: u64,
        warmup: u64,
    ) -> Result<Plan, BenchError> {
        let Some(&workload) = WORKLOADS.iter().find(|w| **w == workload) else {
            return Err(BenchError::UnknownWorkload {
                name: workload.to_string(),
                known: WORKLOADS.join(", "),
            });
        };
        let known = designs_of(workload);
        let designs = if designs.is_empty() {
            known.clone()
        } else {
            designs
                .iter()
                .map(|d| {
                    if d == "linux" {
                        return Err(BenchError::InvalidArgument(
                            "design `linux` cannot be audited (the kernel's cache lines are \
                             not visible to the instrumentation); audit the engine designs"
                                .into(),
                        ));
                    }
                    known.iter().copied().find(|k| k == d).ok_or_else(|| {
                        BenchError::UnknownDesign {
                            workload: workload.to_string(),
                            design: d.clone(),
                            known: known.join(", "),
                        }
                    })
                })
                .collect::<Result<Vec<_>, _>>()?
        };
        if cores.is_empty() {
            return Err(BenchError::InvalidArgument("--cores is empty".into()));
        }
        if let Some(&c) = cores.iter().find(|&&c| c == 0 || c > MAX_CORES) {
            return Err(BenchError::InvalidArgument(format!(
                "--cores must be in 1..={MAX_CORES}, got {c}"
            )));
        }
        if rounds == 0 || rounds > MAX_ROUNDS {
            return Err(BenchError::InvalidArgument(format!(
                "--rounds must be in 1..={MAX_ROUNDS}, got {rounds}"
            )));
        }
        if warmup >= rounds {
            return Err(BenchError::InvalidArgument(format!(
                "--warmup {warmup} leaves no counted round of --rounds {rounds}"
            )));
        }
        Ok(Plan {
            workload,
            designs,
            cores: cores.to_vec(),
            rounds,
            warmup,
            pairs: false,
        })
    }

    /// The same plan, reporting the site pairs behind the conflicts when `pairs`.
    pub fn with_pairs(self, pairs: bool) -> Plan {
        Plan { pairs, ..self }
    }
}

/// Runs every point of `plan`, calling `each` with every row as it is done.
///
/// # Errors
/// [`BenchError::NotInstrumented`] in a build without the `conflicts` feature; whatever `each`
/// or building a space returns.
pub fn run(
    plan: &Plan,
    mut each: impl FnMut(&ConflictRow) -> Result<(), BenchError>,
) -> Result<Vec<ConflictRow>, BenchError> {
    let mut rows = Vec::new();
    for &design in &plan.designs {
        for &cores in &plan.cores {
            let row = run_point(plan, design, cores)?;
            each(&row)?;
            rows.push(row);
        }
    }
    Ok(rows)
}

/// One recording at a time per process: the recorder's round counter and background log are
/// process-wide (`aspace-conflicts`), so two audits running at once (two tests of one test
/// binary, on parallel test threads) would each count the other's background accesses, in the
/// wrong rounds. That made `interval`'s RCU figure read 0.0125 instead of 0 in 1 run of 25.
#[cfg(feature = "conflicts")]
static ONE_RECORDING: std::sync::Mutex<()> = std::sync::Mutex::new(());

#[cfg(feature = "conflicts")]
fn run_point(plan: &Plan, design: &'static str, cores: usize) -> Result<ConflictRow, BenchError> {
    // A panic in an earlier recording poisons nothing this one relies on: the recorder is reset
    // when a recording starts.
    let _one = ONE_RECORDING
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    let builder = vm::engine_builder(design).ok_or_else(|| BenchError::UnknownDesign {
        workload: plan.workload.to_string(),
        design: design.to_string(),
        known: designs_of(plan.workload).join(", "),
    })?;
    let driver = vm::AspaceDriver::with_memory(builder, design, cores, AUDIT_MEMORY)?;
    let rec = ops::record(plan.workload, &driver, cores, plan.rounds)?;
    let a = aspace_conflicts::analyze(&rec.ops, &rec.background, plan.warmup);
    let pairs = if plan.pairs {
        aspace_conflicts::analyze_pairs(&rec.ops, plan.warmup)
            .into_iter()
            .map(|p| PairRow {
                mine: p.mine,
                mine_write: p.mine_write,
                other: p.other,
                other_write: p.other_write,
                per_op: p.per_op,
            })
            .collect()
    } else {
        Vec::new()
    };
    let sites = |v: Vec<aspace_conflicts::LineReport>| {
        v.into_iter()
            .map(|l| SiteRow {
                site: l.site,
                per_op: l.per_op,
            })
            .collect()
    };
    Ok(ConflictRow {
        workload: plan.workload.to_string(),
        design: design.to_string(),
        cores,
        rounds: plan.rounds,
        warmup: plan.warmup,
        ops: a.ops,
        conflicts_per_op: a.conflicts_per_op,
        max_conflicts_per_op: a.max_conflicts_per_op,
        rcu_conflicts_per_op: a.rcu_conflicts_per_op,
        lines: sites(a.lines),
        rcu_lines: sites(a.rcu_lines),
        pairs,
    })
}

#[cfg(not(feature = "conflicts"))]
fn run_point(plan: &Plan, _design: &'static str, _cores: usize) -> Result<ConflictRow, BenchError> {
    Err(BenchError::NotInstrumented(plan.workload.to_string()))
}

/// Whether this binary was built with the instrumentation (`--features conflicts`).
pub const INSTRUMENTED: bool = cfg!(feature = "conflicts");

/// The readable table: one line per point, then its top sites indented.
pub fn table(rows: &[ConflictRow]) -> String {
    let mut s = table_header();
    for r in rows {
        s.push_str(&table_row(r));
    }
    s
}

/// The table's header line.
pub fn table_header() -> String {
    format!(
        "{:<20} {:<24} {:>5} {:>8} {:>12} {:>5} {:>9}\n",
        "workload", "design", "cores", "ops", "conflicts/op", "max", "rcu/op"
    )
}

/// One point of the table: its line, then its top sites (and the RCU machinery's) indented.
pub fn table_row(r: &ConflictRow) -> String {
    let mut s = String::new();
    let _ = writeln!(
        s,
        "{:<20} {:<24} {:>5} {:>8} {:>12.4} {:>5} {:>9.4}",
        r.workload,
        r.design,
        r.cores,
        r.ops,
        r.conflicts_per_op,
        r.max_conflicts_per_op,
        r.rcu_conflicts_per_op
    );
    for l in r.lines.iter().take(TABLE_SITES) {
        let _ = writeln!(s, "    {:>9.4}/op  {}", l.per_op, l.site);
    }
    for l in r.rcu_lines.iter().take(TABLE_SITES / 2) {
        let _ = writeln!(s, "    {:>9.4}/op  {} (rcu)", l.per_op, l.site);
    }
    let rw = |w: bool| if w { "write" } else { "read" };
    for p in r.pairs.iter().take(TABLE_SITES) {
        let _ = writeln!(
            s,
            "    {:>9.4}/op  {} ({}) met {} ({}) of another core",
            p.per_op,
            p.mine,
            rw(p.mine_write),
            p.other,
            rw(p.other_write)
        );
    }
    s
}

/// Merges `rows` into `dir/conflicts.json` (a JSON array of [`ConflictRow`]s; an existing
/// entry of the same workload, design and cores is replaced), creating `dir` if needed.
///
/// # Errors
/// [`BenchError::Io`] / [`BenchError::Json`] when the file cannot be read, parsed or written.
pub fn merge_into(dir: &Path, rows: &[ConflictRow]) -> Result<(), BenchError> {
    std::fs::create_dir_all(dir).map_err(|e| BenchError::io(dir, e))?;
    let path = dir.join("conflicts.json");
    let mut all: Vec<ConflictRow> = match std::fs::read_to_string(&path) {
        Ok(text) => serde_json::from_str(&text)?,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Vec::new(),
        Err(e) => return Err(BenchError::io(path, e)),
    };
    for r in rows {
        let same = |o: &ConflictRow| {
            o.workload == r.workload && o.design == r.design && o.cores == r.cores
        };
        match all.iter_mut().find(|o| same(o)) {
            Some(o) => *o = r.clone(),
            None => all.push(r.clone()),
        }
    }
    crate::suite::write_file(dir, "conflicts.json", &serde_json::to_string_pretty(&all)?)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(design: &str, cores: usize, c: f64) -> ConflictRow {
        ConflictRow {
            workload: "local".into(),
            design: design.into(),
            cores,
            rounds: 10,
            warmup: 2,
            ops: 8 * cores as u64,
            conflicts_per_op: c,
            max_conflicts_per_op: c.ceil() as u64,
            rcu_conflicts_per_op: 0.0,
            lines: vec![SiteRow {
                site: "crates/x.rs:1:2".into(),
                per_op: c,
            }],
            rcu_lines: vec![],
            pairs: vec![],
        }
    }

    #[test]
    fn plan_defaults_to_every_engine_design_and_refuses_linux() {
        let p = Plan::new("alloc", &[], &[2, 4], 10, 2).unwrap();
        assert!(p.designs.contains(&"coarse") && p.designs.contains(&"interval"));
        assert!(p.designs.contains(&"interval-no-arenas"));
        assert!(!p.designs.contains(&"linux"));
        let e = Plan::new("local", &["linux".into()], &[2], 10, 2).unwrap_err();
        assert!(e.to_string().contains("cannot be audited"), "{e}");
    }

    #[test]
    fn plan_refuses_bad_input() {
        let bad = [
            Plan::new("rcu-read", &[], &[2], 10, 2),
            Plan::new("local", &["maple".into()], &[2], 10, 2),
            Plan::new("local", &[], &[0], 10, 2),
            Plan::new("local", &[], &[MAX_CORES + 1], 10, 2),
            Plan::new("local", &[], &[], 10, 2),
            Plan::new("local", &[], &[2], 0, 0),
            Plan::new("local", &[], &[2], 10, 10),
        ];
        for b in bad {
            assert!(b.is_err(), "{b:?}");
        }
        assert!(matches!(
            Plan::new("rcu-read", &[], &[2], 10, 2),
            Err(BenchError::UnknownWorkload { .. })
        ));
    }

    #[test]
    fn merge_replaces_same_points_and_keeps_others() {
        let dir =
            std::env::temp_dir().join(format!("aspace-conflicts-merge-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        merge_into(&dir, &[row("coarse", 2, 1.0), row("interval", 2, 0.5)]).unwrap();
        merge_into(&dir, &[row("interval", 2, 0.0), row("interval", 4, 0.0)]).unwrap();
        let text = std::fs::read_to_string(dir.join("conflicts.json")).unwrap();
        let all: Vec<ConflictRow> = serde_json::from_str(&text).unwrap();
        assert_eq!(all.len(), 3);
        assert_eq!(all[0], row("coarse", 2, 1.0));
        assert_eq!(all[1], row("interval", 2, 0.0));
        assert_eq!(all[2], row("interval", 4, 0.0));
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn table_lists_points_and_their_sites() {
        let t = table(&[row("coarse", 4, 1.0)]);
        assert!(t.contains("coarse"), "{t}");
        assert!(t.contains("crates/x.rs:1:2"), "{t}");
    }
}
